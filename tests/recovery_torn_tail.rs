//! Guards against losing or misjudging a log's tail after a crash: damage after
//! the durable mark is cut to a clean prefix and reported, damage before it is
//! `Corrupt` (or cut with `Salvage`), and the log keeps working afterwards.

mod engine;

use std::fs::{self, OpenOptions};
use std::path::Path;

use engine::{edit, entries, entry, mark_of, opts, segment_files, spans, sweep_tempdir, Span};
use session_store::{CorruptKind, Durability, Error, Log, RecoveryMode};

const SEG: u64 = 64 << 10;
const RECORDS: u64 = 12;

fn size(i: u64) -> usize {
    40 + (i as usize * 53) % 250
}

/// A log of [`RECORDS`] buffered records, never synced: all of it lies after
/// the durable mark (there is none), as after a crash before any commit.
fn unsynced_log(dir: &Path) -> (Vec<u8>, Vec<Span>) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    for i in 0..RECORDS {
        log.append(&entry(i, size(i))).unwrap();
    }
    drop(log);
    let seg = &segment_files(dir)[0];
    assert_eq!(mark_of(seg), None, "nothing was synced, so no mark");
    let bytes = fs::read(seg).unwrap();
    let sp = spans(&bytes);
    assert_eq!(sp.len() as u64, RECORDS);
    (bytes, sp)
}

/// Checks that the reopened log holds exactly the first `kept` entries,
/// verifies, takes the next append as seq `kept`, and reopens cleanly in
/// strict mode (a salvage must leave no stale mark behind).
fn assert_prefix_and_continue(dir: &Path, log: Log, kept: u64) {
    let want: Vec<_> = (0..kept).map(|i| entry(i, size(i))).collect();
    assert_eq!(entries(&log), want);
    assert_eq!(log.recovery_report().records, kept);
    let v = log.verify();
    assert_eq!(v.damage, None);
    assert_eq!(v.records, kept);
    let (seq, _) = log.append(&entry(kept, 7)).unwrap();
    assert_eq!(seq, kept);
    drop(log);
    let log = Log::open(dir, opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None, "the cut was final");
    assert_eq!(log.next_seq(), kept + 1);
    assert_eq!(log.verify().damage, None);
}

/// What survives zeroing `[cut..)`: a record survives if none of its checked
/// bytes changed (bytes that were zero already, or its padding, may be cut).
fn survivors(orig: &[u8], sp: &[Span], cut: usize) -> usize {
    sp.iter()
        .position(|s| {
            orig[cut.max(s.start)..s.body_end.max(cut)]
                .iter()
                .any(|&b| b != 0)
        })
        .unwrap_or(sp.len())
}

#[test]
fn zeroing_from_every_offset_in_the_last_two_records_cuts_to_a_prefix() {
    let dir = sweep_tempdir();
    let (orig, sp) = unsynced_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    let first = sp[sp.len() - 2].start;
    let last = sp[sp.len() - 1].end;
    for cut in first..=last {
        let mut b = orig.clone();
        b[cut..].fill(0);
        fs::write(&seg, &b).unwrap();
        let log = Log::open(dir.path(), opts(SEG))
            .unwrap_or_else(|e| panic!("cut at {cut}: open failed: {e}"));
        let kept = survivors(&orig, &sp, cut);
        let report = log.recovery_report().clone();
        match (kept < sp.len() && cut > sp[kept].start, &report.torn_tail) {
            (true, Some(t)) => {
                assert_eq!(t.offset, sp[kept].start as u64, "cut at {cut}");
                assert_eq!(t.segment, seg);
                assert!(!t.salvaged);
            }
            (false, None) => {}
            (want, got) => panic!("cut at {cut}: torn tail expected {want}, got {got:?}"),
        }
        // The cut record's leftovers are gone from the file, not just skipped.
        let after = fs::read(&seg).unwrap();
        let end = sp.get(kept).map_or(last, |s| s.start);
        assert!(after[end..].iter().all(|&x| x == 0), "cut at {cut}");
        assert_prefix_and_continue(dir.path(), log, kept as u64);
    }
}

#[test]
fn garbage_and_zero_tails_are_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (orig, sp) = unsynced_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    let end = sp.last().unwrap().end;
    let last_start = sp.last().unwrap().start;
    let n = sp.len() as u64;
    // Deterministic noise; never starts with a zero header by accident.
    let noise = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    };
    // (what, where the damage starts, bytes, records kept)
    let cases: Vec<(&str, usize, Vec<u8>, u64)> = vec![
        ("1 garbage byte after the end", end, noise(1, 3), n),
        ("17 garbage bytes after the end", end, noise(17, 5), n),
        ("a garbage header after the end", end, noise(64, 7), n),
        (
            "garbage beyond the first page",
            end + 5000,
            noise(300, 9),
            n,
        ),
        (
            "garbage over the last record",
            last_start,
            noise(80, 11),
            n - 1,
        ),
        (
            "a zero header over the last record",
            last_start,
            vec![0; 64],
            n - 1,
        ),
        (
            "a stale copy of an earlier record",
            end,
            orig[sp[3].start..sp[3].end].to_vec(),
            n,
        ),
        (
            "the last record again (seq not the successor)",
            end,
            orig[last_start..end].to_vec(),
            n,
        ),
    ];
    for (what, at, bytes, kept) in cases {
        let mut b = orig.clone();
        b[at..at + bytes.len()].copy_from_slice(&bytes);
        fs::write(&seg, &b).unwrap();
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        let t = log
            .recovery_report()
            .torn_tail
            .clone()
            .unwrap_or_else(|| panic!("{what}: no torn tail reported"));
        let cut_at = if kept == n { end } else { last_start };
        assert_eq!(t.offset, cut_at as u64, "{what}");
        assert!(!t.salvaged, "{what}");
        let after = fs::read(&seg).unwrap();
        assert!(
            after[cut_at..].iter().all(|&x| x == 0),
            "{what}: not zeroed"
        );
        assert_prefix_and_continue(dir.path(), log, kept);
    }
    // A clean zero tail: nothing to cut, nothing reported.
    fs::write(&seg, &orig).unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_prefix_and_continue(dir.path(), log, n);
}

#[test]
fn a_record_after_a_zeroed_record_is_cut_too() {
    let dir = tempfile::tempdir().unwrap();
    let (orig, sp) = unsynced_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    let n = sp.len();
    // Pages written back out of order: N+2 is on disk, N+1 is zeros (all of
    // it, or only its header).
    for zeroed in [
        sp[n - 2].start..sp[n - 2].end,
        sp[n - 2].start..sp[n - 2].start + 64,
    ] {
        let mut b = orig.clone();
        b[zeroed.clone()].fill(0);
        fs::write(&seg, &b).unwrap();
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        let t = log.recovery_report().torn_tail.clone().expect("reported");
        assert_eq!(t.offset, sp[n - 2].start as u64, "{zeroed:?}");
        let after = fs::read(&seg).unwrap();
        assert!(after[sp[n - 2].start..].iter().all(|&x| x == 0));
        assert_prefix_and_continue(dir.path(), log, n as u64 - 2);
    }
}

/// A log whose active segment holds records 0..=5 below the durable mark
/// (two group commits: the mark lags one), record 6 synced but above the
/// mark, and 7..=8 never synced. Returns the records' spans and the mark.
fn marked_log(dir: &Path) -> (Vec<u8>, Vec<Span>, u64) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    for i in 0..6 {
        log.append(&entry(i, size(i))).unwrap();
    }
    log.sync().unwrap();
    log.append(&entry(6, size(6))).unwrap();
    log.sync().unwrap();
    for i in 7..9 {
        log.append(&entry(i, size(i))).unwrap();
    }
    drop(log);
    let seg = &segment_files(dir)[0];
    let bytes = fs::read(seg).unwrap();
    let sp = spans(&bytes);
    assert_eq!(sp.len(), 9);
    let mark = mark_of(seg).expect("two commits write a mark");
    assert_eq!(mark.end, sp[6].start as u64, "the mark lags one commit");
    assert_eq!(mark.next_seq, 6);
    (bytes, sp, mark.end)
}

/// Zeroing from every offset across the mark: records 4 and 5 lie below it
/// (refused, or cut as salvaged), record 6 starts at it (a torn tail).
#[test]
fn zeroing_from_every_offset_around_the_mark() {
    let dir = sweep_tempdir();
    let (orig, sp, mark) = marked_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    for cut in sp[4].start..=sp[6].end {
        let mut b = orig.clone();
        b[cut..].fill(0);
        fs::write(&seg, &b).unwrap();
        let kept = survivors(&orig, &sp, cut);
        let below = (sp[kept].start as u64) < mark;
        match Log::open(dir.path(), opts(SEG)) {
            Err(Error::Corrupt { offset, seq, .. }) if below => {
                assert_eq!(
                    (offset, seq),
                    (sp[kept].start as u64, Some(kept as u64)),
                    "cut at {cut}"
                );
            }
            Ok(log) if !below => {
                let t = log.recovery_report().torn_tail.clone();
                assert!(
                    t.is_none_or(|t| !t.salvaged && t.offset == sp[kept].start as u64),
                    "cut at {cut}"
                );
                assert_prefix_and_continue(dir.path(), log, kept as u64);
                continue;
            }
            other => panic!("cut at {cut} (record {kept} below the mark: {below}): got {other:?}"),
        }
        fs::write(&seg, &b).unwrap();
        let log = Log::open(dir.path(), opts(SEG).recovery(RecoveryMode::Salvage)).unwrap();
        let t = log.recovery_report().torn_tail.clone().expect("reported");
        assert!(t.salvaged, "cut at {cut}");
        assert_eq!(t.offset, sp[kept].start as u64, "cut at {cut}");
        assert_prefix_and_continue(dir.path(), log, kept as u64);
    }
}

/// Damage to a record: a flipped byte, zeros from its start, zeros from inside it.
/// A named way to damage a segment's bytes.
type Damage = (&'static str, Box<dyn Fn(&mut Vec<u8>)>);

fn damages(s: Span) -> [Damage; 3] {
    [
        (
            "flip",
            Box::new(move |b: &mut Vec<u8>| b[s.start + 70] ^= 0x20),
        ),
        (
            "zero from start",
            Box::new(move |b: &mut Vec<u8>| b[s.start..].fill(0)),
        ),
        // Inside the text, which is never zero (much of an archive is).
        (
            "zero from inside",
            Box::new(move |b: &mut Vec<u8>| b[s.start + 70..].fill(0)),
        ),
    ]
}

/// Writes `orig` with `damage` applied to `seg`; returns what was written.
fn write_damaged(seg: &Path, orig: &[u8], damage: &dyn Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = orig.to_vec();
    damage(&mut b);
    fs::write(seg, &b).unwrap();
    b
}

#[test]
fn damage_before_the_mark_is_corrupt_unless_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let (orig, sp, _) = marked_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    for k in [0usize, 3, 5] {
        for (what, damage) in damages(sp[k]) {
            let b = write_damaged(&seg, &orig, &damage);
            match Log::open(dir.path(), opts(SEG)) {
                Err(Error::Corrupt {
                    segment,
                    offset,
                    seq,
                    ..
                }) => {
                    assert_eq!(segment, seg, "record {k}, {what}");
                    assert_eq!(offset, sp[k].start as u64, "record {k}, {what}");
                    assert_eq!(seq, Some(k as u64), "record {k}, {what}");
                }
                other => panic!("record {k}, {what}: expected Corrupt, got {other:?}"),
            }
            assert_eq!(fs::read(&seg).unwrap(), b, "a refused open changes nothing");
            let salvage = opts(SEG).recovery(RecoveryMode::Salvage);
            let log = Log::open(dir.path(), salvage.clone()).unwrap();
            let t = log.recovery_report().torn_tail.clone().expect("reported");
            assert!(t.salvaged, "record {k}, {what}");
            assert_eq!(t.offset, sp[k].start as u64);
            assert_prefix_and_continue(dir.path(), log, k as u64);
        }
    }
}

#[test]
fn damage_at_or_after_the_lagging_mark_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (orig, sp, _) = marked_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    for k in [6usize, 7, 8] {
        for (what, damage) in damages(sp[k]) {
            write_damaged(&seg, &orig, &damage);
            let log = Log::open(dir.path(), opts(SEG))
                .unwrap_or_else(|e| panic!("record {k}, {what}: {e}"));
            let t = log.recovery_report().torn_tail.clone();
            if what != "zero from start" {
                let t = t.unwrap_or_else(|| panic!("record {k}, {what}: not reported"));
                assert_eq!(t.offset, sp[k].start as u64);
                assert!(!t.salvaged);
            }
            assert_prefix_and_continue(dir.path(), log, k as u64);
        }
    }
}

/// `close()` and a clean reopen both leave an exact mark, so that every
/// record they saw is protected afterwards, whatever the mark slots held
/// before (a session with any number of group commits).
#[test]
fn close_and_clean_reopen_protect_every_record() {
    for commits in 0..6u64 {
        for via in ["close", "reopen"] {
            let dir = tempfile::tempdir().unwrap();
            let log = Log::open(dir.path(), opts(SEG)).unwrap();
            let mut n = 0;
            for _ in 0..commits {
                log.append(&entry(n, size(n))).unwrap();
                log.append_with(&entry(n + 1, size(n + 1)), Durability::Sync)
                    .unwrap();
                n += 2;
            }
            log.append(&entry(n, size(n))).unwrap();
            n += 1;
            if via == "close" {
                log.close().unwrap();
            } else {
                drop(log);
                let log = Log::open(dir.path(), opts(SEG)).unwrap();
                assert_eq!(log.recovery_report().torn_tail, None);
                drop(log);
            }
            let seg = segment_files(dir.path())[0].clone();
            let orig = fs::read(&seg).unwrap();
            let sp = spans(&orig);
            assert_eq!(sp.len() as u64, n);
            assert_eq!(
                mark_of(&seg).map(|m| m.end),
                Some(sp[n as usize - 1].end as u64),
                "{commits} commits, {via}: the mark is exact"
            );
            let last = sp[n as usize - 1];
            for (what, damage) in damages(last) {
                write_damaged(&seg, &orig, &damage);
                match Log::open(dir.path(), opts(SEG)) {
                    Err(Error::Corrupt { offset, seq, .. }) => {
                        assert_eq!((offset, seq), (last.start as u64, Some(n - 1)));
                    }
                    other => panic!("{commits} commits, {via}, {what}: got {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_shorter_file_is_an_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), opts(16 << 10)).unwrap();
        for i in 0..120 {
            log.append(&entry(i, size(i))).unwrap();
        }
    }
    let files = segment_files(dir.path());
    assert!(files.len() >= 2, "need a sealed and an active segment");
    for seg in [&files[0], files.last().unwrap()] {
        let orig = fs::read(seg).unwrap();
        let sp = spans(&orig);
        let len = orig.len() as u64;
        for short in [
            0,
            1,
            100,
            255,
            256,
            300,
            384,
            sp.last().unwrap().start as u64 + 10,
            sp.last().unwrap().end as u64,
            len - 128,
            len - 1,
        ] {
            fs::write(seg, &orig).unwrap();
            OpenOptions::new()
                .write(true)
                .open(seg)
                .unwrap()
                .set_len(short)
                .unwrap();
            for result in [
                Log::open(dir.path(), opts(16 << 10)),
                Log::open_read_only(dir.path()),
            ] {
                match result {
                    Err(Error::Corrupt { segment, kind, .. }) => {
                        assert_eq!(&segment, seg, "{short} bytes");
                        assert_eq!(kind, CorruptKind::Truncated, "{short} bytes");
                    }
                    other => panic!("{} cut to {short}: got {other:?}", seg.display()),
                }
            }
        }
        fs::write(seg, &orig).unwrap();
    }
    let log = Log::open(dir.path(), opts(16 << 10)).unwrap();
    assert_eq!(log.next_seq(), 120);
    assert_eq!(log.verify().damage, None);
}

#[test]
fn torn_tail_in_salvage_mode_is_not_marked_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let (orig, sp, _) = marked_log(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    edit(&seg, |b| b[sp[8].start + 70] ^= 1);
    let salvage = opts(SEG).recovery(RecoveryMode::Salvage);
    let log = Log::open(dir.path(), salvage.clone()).unwrap();
    let t = log.recovery_report().torn_tail.clone().unwrap();
    assert!(!t.salvaged, "damage after the mark is a plain torn tail");
    assert_eq!(t.offset, sp[8].start as u64);
    assert_ne!(fs::read(&seg).unwrap(), orig);
    assert_prefix_and_continue(dir.path(), log, 8);
}

/// A log of [`RECORDS`] single appends, then one batch of four entries (seqs
/// `RECORDS..RECORDS + 4`), none of it synced.
fn log_ending_in_a_batch(dir: &Path) -> (Vec<u8>, Vec<Span>) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    for i in 0..RECORDS {
        log.append(&entry(i, size(i))).unwrap();
    }
    let batch: Vec<_> = (RECORDS..RECORDS + 4).map(|i| entry(i, size(i))).collect();
    log.append_batch(
        &batch,
        Durability::Buffered,
        session_store::log::ExpectHead::Any,
    )
    .unwrap();
    drop(log);
    let seg = &segment_files(dir)[0];
    let bytes = fs::read(seg).unwrap();
    let sp = spans(&bytes);
    assert_eq!(sp.len() as u64, RECORDS + 4);
    (bytes, sp)
}

#[test]
fn a_batch_cut_short_by_a_crash_is_cut_whole() {
    let dir = sweep_tempdir();
    let (orig, sp) = log_ending_in_a_batch(dir.path());
    let seg = segment_files(dir.path())[0].clone();
    let batch = &sp[RECORDS as usize..];
    // The batch's records but its last carry the batch magic.
    for s in &batch[..3] {
        assert_eq!(
            &orig[s.start..s.start + 4],
            session_store::format::RECORD_MAGIC_BATCH
        );
    }
    assert_eq!(
        &orig[batch[3].start..batch[3].start + 4],
        session_store::format::RECORD_MAGIC
    );
    // Zeroed from any offset inside the batch (a crash during its write):
    // the log keeps the records before it, none of it, and says why.
    let from = batch[0].start + 1;
    let to = batch[3].body_end;
    for cut in (from..to)
        .step_by(7)
        .chain([batch[1].start, batch[3].start])
    {
        let mut b = orig.clone();
        b[cut..].fill(0);
        fs::write(&seg, &b).unwrap();
        if survivors(&orig, &sp, cut) == sp.len() {
            // Only bytes that were zero already: the batch is whole.
            let log = Log::open(dir.path(), opts(SEG)).unwrap();
            assert_eq!(log.next_seq(), RECORDS + 4, "cut at {cut}");
            continue;
        }
        // A reader's view ends before the batch as the writer's will.
        let read = Log::open_read_only(dir.path()).unwrap();
        assert_eq!(read.next_seq(), RECORDS, "cut at {cut}: read-only view");
        drop(read);
        let log = Log::open(dir.path(), opts(SEG))
            .unwrap_or_else(|e| panic!("cut at {cut}: open failed: {e}"));
        let t = log
            .recovery_report()
            .torn_tail
            .clone()
            .unwrap_or_else(|| panic!("cut at {cut}: no torn tail"));
        assert_eq!(t.offset, batch[0].start as u64, "cut at {cut}");
        assert_eq!(t.seq, Some(RECORDS));
        // Cut at a record's start (zeros follow a whole record), the reason
        // is the batch; otherwise it is the damage the scan met in it.
        if batch[1..].iter().any(|s| s.start == cut) {
            assert!(t.reason.contains("batch"), "cut at {cut}: {}", t.reason);
        }
        // Its first records are gone from the file, not just skipped.
        let after = fs::read(&seg).unwrap();
        assert!(
            after[batch[0].start..].iter().all(|&x| x == 0),
            "cut at {cut}"
        );
        assert_prefix_and_continue(dir.path(), log, RECORDS);
    }
    // Whole, it stays whole.
    fs::write(&seg, &orig).unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(log.next_seq(), RECORDS + 4);
}

#[test]
fn a_batch_that_does_not_fit_the_active_segment_starts_the_next_one() {
    let dir = sweep_tempdir();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    // Fill most of the first segment, then a batch bigger than what is left.
    let mut i = 0;
    while log.bytes() < SEG - 6_000 {
        log.append(&entry(i, 1_000)).unwrap();
        i += 1;
    }
    let batch: Vec<_> = (i..i + 8).map(|i| entry(i, 1_000)).collect();
    log.append_batch(
        &batch,
        Durability::Buffered,
        session_store::log::ExpectHead::Any,
    )
    .unwrap();
    drop(log);
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2, "the batch rolled the log first");
    let second = spans(&fs::read(&files[1]).unwrap());
    assert_eq!(second.len(), 8, "the whole batch is in the new segment");
    assert_eq!(second[0].seq, i);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(log.next_seq(), i + 8);
    assert_eq!(log.verify().damage, None);
}
