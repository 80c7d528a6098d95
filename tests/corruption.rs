//! Guards against a damaged byte anywhere in a log going unnoticed, being
//! blamed on the wrong place, being cut silently, or panicking the opener: a
//! sweep flips every byte of every segment file of a small log, and opens it
//! both as a reader (which trusts the durable mark and defers sealed indexes)
//! and as a writer.

mod engine;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use engine::{entry, opts, segment_files, session_start, spans, sweep_tempdir};
use session_store::format::{Footer, Mark, FOOTER_LEN, INDEX_ENTRY_LEN, MARK_SLOT_LEN};
use session_store::{Durability, Error, Log, LogEntry, LogOptions, RecoveryMode, RestoredState};

const SEG: u64 = 8 << 10;

fn size(i: u64) -> usize {
    30 + (i as usize * 149) % 700
}

/// Entry `i` of the swept log: now and then a compaction, so that footers
/// and the durable mark name `SessionStart`s.
fn item(i: u64) -> LogEntry {
    if i % 9 == 4 {
        session_start(i)
    } else {
        entry(i, size(i))
    }
}

/// What a flip at one place must lead to.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Open refuses with `Corrupt` naming this file, at this offset, with this seq.
    Refused(u64, Option<u64>),
    /// Open succeeds; `verify` reports damage here (file, offset, seq).
    VerifyDamage(u64, u64),
    /// Open cuts a torn tail at this offset, keeping this many records.
    Torn(u64, u64),
    /// Nothing checks these bytes; the log is unchanged (the reason).
    Unchecked(&'static str),
}

/// A log of 4 sealed segments and an active one whose records lie both below
/// and above its durable mark. Returns the records in the log.
fn build(dir: &Path) -> u64 {
    let log = Log::open(dir, opts(SEG)).unwrap();
    let mut i = 0;
    let in_active = || -> bool {
        let files = log.segment_paths();
        files.len() == 5 && log.next_seq() - first_seq(&files[4]) >= 6
    };
    while !in_active() {
        let d = if i % 5 == 4 {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        log.append_with(&item(i), d).unwrap();
        i += 1;
    }
    // A compaction below the active segment's mark, which names it.
    log.append(&item(4)).unwrap();
    log.sync().unwrap();
    log.append(&item(i)).unwrap();
    log.sync().unwrap();
    log.append(&item(i + 1)).unwrap();
    log.append(&item(i + 2)).unwrap();
    assert_eq!(log.segment_paths().len(), 5, "the build must not roll");
    i + 4
}

fn first_seq(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// The expected outcome of a flip at every byte of one file, derived from an
/// independent reading of the file's layout.
fn classify(bytes: &[u8], sealed: bool, records_before: u64) -> Vec<Expect> {
    use Expect::*;
    let len = bytes.len();
    let mut out = vec![Unchecked("header reserved bytes"); len];
    out[..8].fill(Refused(0, None));
    out[8..84].fill(Refused(80, None));
    out[224..256].fill(Unchecked("header reserved bytes"));
    let sp = spans(bytes);
    let footer_at = len - FOOTER_LEN;
    if sealed {
        let f = Footer::decode(&bytes[footer_at..]).unwrap().unwrap();
        assert_eq!(f.data_end as usize, sp.last().unwrap().end);
        out[96..224].fill(Unchecked("mark slots of a sealed segment"));
        for s in &sp {
            out[s.start..s.body_end].fill(VerifyDamage(s.start as u64, s.seq));
            out[s.body_end..s.end].fill(Unchecked("record padding"));
        }
        let index_end = f.index_offset as usize + f.index_count as usize * INDEX_ENTRY_LEN;
        out[f.index_offset as usize..index_end].fill(Refused(f.index_offset, None));
        out[index_end..footer_at].fill(Unchecked("unused space before the footer"));
        out[footer_at..].fill(Refused(footer_at as u64, None));
    } else {
        let mark = Mark::newest(&bytes[..256]).expect("the active segment has a mark");
        let newest = Mark::slot_offset(mark.generation);
        let other = Mark::slot_offset(mark.generation + 1);
        out[newest..newest + MARK_SLOT_LEN].fill(Unchecked("newest mark slot"));
        out[other..other + MARK_SLOT_LEN].fill(Unchecked("older mark slot"));
        let below = sp.iter().filter(|s| (s.start as u64) < mark.end).count();
        assert!(below >= 1 && below + 2 <= sp.len(), "records on both sides");
        for (k, s) in sp.iter().enumerate() {
            let e = if k < below {
                Refused(s.start as u64, Some(s.seq))
            } else {
                Torn(s.start as u64, records_before + k as u64)
            };
            out[s.start..s.body_end].fill(e);
            out[s.body_end..s.end].fill(Unchecked("record padding"));
        }
        let end = sp.last().unwrap().end;
        // Everything after the last record, the footer area included, is
        // stale in an active segment: open cuts it and reports it.
        out[end..].fill(Torn(end as u64, records_before + sp.len() as u64));
    }
    out
}

fn open_no_panic(dir: &Path, o: LogOptions, at: &str) -> Result<Log, Error> {
    catch_unwind(AssertUnwindSafe(|| Log::open(dir, o)))
        .unwrap_or_else(|_| panic!("open panicked on a flip at {at}"))
}

/// What a read-only open (which starts at the durable mark, and reads sealed
/// indexes only when used) must make of the flip the writer's open is
/// expected to meet as `expect`: the same damage at the same place, found at
/// open or by `verify`; the same torn tail; or nothing. Whatever it does not
/// refuse, `restore` either restores exactly the undamaged state or fails at
/// the damaged place.
fn check_read_only(
    dir: &Path,
    file: &Path,
    expect: &Expect,
    total: u64,
    pristine: &RestoredState,
    at: &str,
) {
    let opened = catch_unwind(AssertUnwindSafe(|| Log::open_read_only(dir)))
        .unwrap_or_else(|_| panic!("read-only open panicked on a flip at {at}"));
    let damaged_at = match expect {
        Expect::Refused(offset, _) | Expect::VerifyDamage(offset, _) => Some(*offset),
        _ => None,
    };
    let log = match (expect, opened) {
        (
            Expect::Refused(offset, _),
            Err(Error::Corrupt {
                segment, offset: o, ..
            }),
        ) => {
            assert_eq!((segment.as_path(), o), (file, *offset), "{at}: read-only");
            return;
        }
        (_, Err(e)) => panic!("{at}: expected {expect:?}, read-only open failed: {e}"),
        (_, Ok(log)) => log,
    };
    let v = log.verify();
    match expect {
        Expect::Refused(offset, _) | Expect::VerifyDamage(offset, _) => {
            let d = v
                .damage
                .unwrap_or_else(|| panic!("{at}: read-only: undetected"));
            assert_eq!(
                (d.segment.as_path(), d.offset),
                (file, *offset),
                "{at}: {d}"
            );
        }
        Expect::Torn(offset, kept) => {
            // A reader cuts nothing: stale bytes past the records that begin
            // with zeros are not even looked at.
            if let Some(t) = &log.recovery_report().torn_tail {
                assert_eq!((t.segment.as_path(), t.offset), (file, *offset), "{at}");
            }
            assert_eq!(log.next_seq(), *kept, "{at}: read-only");
            assert_eq!(v.damage, None, "{at}: read-only");
        }
        Expect::Unchecked(_) => {
            assert_eq!(log.recovery_report().torn_tail, None, "{at}: read-only");
            assert_eq!((v.damage, v.records), (None, total), "{at}: read-only");
        }
    }
    match (log.restore(), expect) {
        (Ok(state), Expect::Torn(..)) => drop(state),
        (Ok(state), _) => assert_eq!(&state, pristine, "{at}: read-only restore differs"),
        (
            Err(Error::Corrupt {
                segment, offset, ..
            }),
            _,
        ) if damaged_at.is_some() => {
            assert_eq!(
                (segment.as_path(), Some(offset)),
                (file, damaged_at),
                "{at}"
            );
        }
        (Err(e), _) => panic!("{at}: read-only restore failed: {e}"),
    }
}

fn check(dir: &Path, file: &Path, expect: &Expect, total: u64, at: &str) {
    let result = open_no_panic(dir, opts(SEG), at);
    match (expect, result) {
        (
            Expect::Refused(offset, seq),
            Err(Error::Corrupt {
                segment,
                offset: o,
                seq: s,
                ..
            }),
        ) => {
            assert_eq!((segment.as_path(), o), (file, *offset), "{at}");
            if seq.is_some() {
                assert_eq!(s, *seq, "{at}");
                let salvage = opts(SEG).recovery(RecoveryMode::Salvage);
                let log = open_no_panic(dir, salvage, at);
                let log = log.unwrap_or_else(|e| panic!("{at}: salvage failed: {e}"));
                let t = log.recovery_report().torn_tail.clone().unwrap();
                assert!(t.salvaged && t.offset == *offset, "{at}: {t:?}");
                assert_eq!(log.verify().damage, None, "{at}");
            }
        }
        (Expect::Refused(..), other) => panic!("{at}: expected Corrupt, got {other:?}"),
        (_, Err(e)) => panic!("{at}: expected {expect:?}, open failed: {e}"),
        (Expect::VerifyDamage(offset, seq), Ok(log)) => {
            assert_eq!(log.recovery_report().torn_tail, None, "{at}");
            let d = log
                .verify()
                .damage
                .unwrap_or_else(|| panic!("{at}: undetected"));
            assert_eq!(
                (d.segment.as_path(), d.offset, d.seq),
                (file, *offset, Some(*seq)),
                "{at}: {d}"
            );
        }
        (Expect::Torn(offset, kept), Ok(log)) => {
            let t = log.recovery_report().torn_tail.clone();
            let t = t.unwrap_or_else(|| panic!("{at}: torn tail not reported"));
            assert_eq!((t.segment.as_path(), t.offset), (file, *offset), "{at}");
            assert!(!t.salvaged, "{at}");
            assert_eq!(log.next_seq(), *kept, "{at}");
            assert_eq!(log.verify().damage, None, "{at}");
            assert_eq!(log.append(&entry(*kept, 5)).unwrap().0, *kept, "{at}");
        }
        (Expect::Unchecked(_), Ok(log)) => {
            assert_eq!(log.recovery_report().torn_tail, None, "{at}");
            let v = log.verify();
            assert_eq!((v.damage, v.records), (None, total), "{at}");
        }
    }
}

#[test]
fn every_flipped_byte_is_caught_at_its_place_or_harmless() {
    let dir = sweep_tempdir();
    let total = build(dir.path());
    let pristine = Log::open_read_only(dir.path()).unwrap().restore().unwrap();
    let files = segment_files(dir.path());
    let originals: Vec<(PathBuf, Vec<u8>)> = files
        .iter()
        .map(|p| (p.clone(), fs::read(p).unwrap()))
        .collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    let mut records_before = 0;
    for (i, (file, orig)) in originals.iter().enumerate() {
        let sealed = i + 1 < originals.len();
        let expect = classify(orig, sealed, records_before);
        records_before += spans(orig).len() as u64;
        let active = originals.last().unwrap();
        let handle = OpenOptions::new().write(true).open(file).unwrap();
        for (off, e) in expect.iter().enumerate() {
            let mask = 1u8 << (off % 8);
            handle.write_at(&[orig[off] ^ mask], off as u64).unwrap();
            let name = file.file_name().unwrap().to_string_lossy();
            let at = format!("{name}:{off}");
            // The reader first: the writer's open rewrites the mark, cuts tails.
            check_read_only(dir.path(), file, e, total, &pristine, &at);
            check(dir.path(), file, e, total, &at);
            handle.write_at(&orig[off..off + 1], off as u64).unwrap();
            // Open rewrites the mark and may cut a tail; an append after a
            // cut may roll.
            fs::write(&active.0, &active.1).unwrap();
            // What a writer's recovery recorded belongs to this flip only.
            let _ = fs::remove_file(dir.path().join(session_store::log::LAST_RECOVERY_FILE));
            if matches!(e, Expect::Torn(..)) {
                for f in segment_files(dir.path()) {
                    if !originals.iter().any(|(p, _)| *p == f) {
                        fs::remove_file(f).unwrap();
                    }
                }
            }
            let key = match e {
                Expect::Refused(_, None) => "refused: header, index or footer".to_string(),
                Expect::Refused(_, Some(_)) => "refused: record below the mark".to_string(),
                Expect::VerifyDamage(..) => "verify: sealed record".to_string(),
                Expect::Torn(..) => "torn tail cut".to_string(),
                Expect::Unchecked(why) => format!("unchecked: {why}"),
            };
            *counts.entry(key).or_default() += 1;
        }
    }
    let flips: usize = counts.values().sum();
    eprintln!(
        "{flips} flips over {} files in {:.1?}:",
        files.len(),
        started.elapsed()
    );
    for (k, n) in &counts {
        eprintln!("  {n:6}  {k}");
    }
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(
        log.verify().damage,
        None,
        "the sweep left the log as it was"
    );
    assert_eq!(log.next_seq(), total);
}
