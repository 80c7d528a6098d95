//! Guards against losing or misplacing records when the log moves to a new
//! segment: a record that fills a segment exactly, records larger than a
//! segment, and a crash at each step of a roll.

mod engine;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use engine::{
    entries, entry, files_with_ext, mark_of, opts, segment_files, spans, Countdown, OpKind,
};
use session_store::format::{Footer, FOOTER_LEN, INDEX_ENTRY_LEN};
use session_store::{log::IoHook, log::IoOp, Error, Log, LogEntry, LogOptions};

const SEG: u64 = 16 << 10;

fn footer_of(path: &Path) -> Option<Footer> {
    let b = fs::read(path).unwrap();
    Footer::decode(&b[b.len() - FOOTER_LEN..]).unwrap()
}

fn prep_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, "prep")
}

/// Record lengths (header and padding included) of `entry(i, text)`, found by
/// appending to a scratch log: text size for each record length.
fn sizes_by_record_len(i: u64, max_text: usize) -> HashMap<u64, usize> {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    let mut out = HashMap::new();
    for text in 0..max_text {
        let before = log.bytes();
        log.append(&entry(i, text)).unwrap();
        out.entry(log.bytes() - before).or_insert(text);
    }
    out
}

/// Fills a 16 KiB segment, then adds a record of `extra` bytes more than the
/// room left. Returns the log, the expected entries, and the exact-fit seq.
fn fill_to_the_limit(dir: &Path, extra: u64) -> (Log, Vec<LogEntry>, u64) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    let mut want = Vec::new();
    let mut i = 0;
    // The first record is indexed, so the room ends where one more index
    // entry and the footer still fit.
    let limit = SEG - FOOTER_LEN as u64 - 2 * INDEX_ENTRY_LEN as u64;
    while limit - log.bytes() - 256 > 1600 {
        let e = entry(i, 500);
        log.append(&e).unwrap();
        want.push(e);
        i += 1;
    }
    let room = limit - 256 - log.bytes();
    let sizes = sizes_by_record_len(i, 1400);
    let text = sizes[&(room + extra)];
    let e = entry(i, text);
    let before = log.segment_paths().len();
    log.append(&e).unwrap();
    want.push(e);
    assert_eq!(log.segment_paths().len(), before + usize::from(extra > 0));
    (log, want, i)
}

#[test]
fn a_record_that_fills_the_segment_exactly_stays_and_the_next_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut want, exact) = fill_to_the_limit(dir.path(), 0);
    let first = log.segment_paths()[0].clone();
    let sp = spans(&fs::read(&first).unwrap());
    assert_eq!(sp.last().unwrap().seq, exact);
    assert_eq!(
        sp.last().unwrap().end as u64,
        SEG - FOOTER_LEN as u64 - 2 * INDEX_ENTRY_LEN as u64
    );
    let e = entry(exact + 1, 1);
    log.append(&e).unwrap();
    want.push(e);
    let paths = log.segment_paths();
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[1], dir.path().join(format!("{:020}.seg", exact + 1)));
    let f = footer_of(&first).expect("sealed by the roll");
    assert_eq!(f.record_count, exact + 1);
    assert_eq!(f.data_end, sp.last().unwrap().end as u64);
    assert_eq!(f.index_offset, f.data_end);
    assert!(f.index_offset + f.index_count * INDEX_ENTRY_LEN as u64 <= SEG - FOOTER_LEN as u64);
    assert_eq!(entries(&log), want);
    assert_eq!(log.verify().damage, None);
    drop(log);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(entries(&log), want);
    assert_eq!(log.verify().damage, None);
}

#[test]
fn a_record_16_bytes_too_large_goes_to_the_next_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (log, want, seq) = fill_to_the_limit(dir.path(), 16);
    let paths = log.segment_paths();
    assert_eq!(paths[1], dir.path().join(format!("{seq:020}.seg")));
    let f = footer_of(&paths[0]).expect("sealed");
    assert_eq!(f.record_count, seq);
    assert_eq!(entries(&log), want);
    drop(log);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(entries(&log), want);
    assert_eq!(log.verify().damage, None);
}

/// Appends `sizes` (text bytes) and checks the log before and after a reopen.
fn oversized_round_trip(options: LogOptions, sizes: &[usize]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options.clone()).unwrap();
    let want: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| entry(i as u64, s))
        .collect();
    for e in &want {
        log.append(e).unwrap();
    }
    assert_eq!(entries(&log), want);
    drop(log);
    assert_eq!(prep_files(dir.path()), Vec::<PathBuf>::new());
    let log = Log::open(dir.path(), options).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(entries(&log), want);
    let v = log.verify();
    assert_eq!((v.damage, v.records), (None, sizes.len() as u64));
    // Each big record starts a segment sized for it (small ones may follow
    // in its slack), and every record is found directly.
    let snap = log.snapshot();
    for (i, &s) in sizes.iter().enumerate() {
        let got: Vec<_> = snap
            .iter_from(i as u64)
            .take(1)
            .map(|r| r.unwrap().seq)
            .collect();
        assert_eq!(got, vec![i as u64]);
        if s > SEG as usize {
            let path = dir.path().join(format!("{i:020}.seg"));
            let len = fs::metadata(&path).unwrap().len();
            assert!(len > s as u64 && len < s as u64 + (16 << 10), "{len}");
        }
    }
    dir
}

#[test]
fn an_oversized_record_gets_a_segment_of_its_own() {
    oversized_round_trip(opts(SEG), &[10, 3 << 20, 10, 20]);
}

#[test]
fn an_oversized_first_record_replaces_the_empty_segment() {
    let dir = oversized_round_trip(opts(SEG), &[3 << 20, 10, 3000, 3000]);
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(fs::metadata(&files[0]).unwrap().len() > 3 << 20);
    assert_eq!(fs::metadata(&files[1]).unwrap().len(), SEG);
}

/// The replacing file, not the replaced one, is what later syncs and the
/// closing mark reach.
#[test]
fn close_after_an_oversized_first_record_marks_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    log.append(&entry(0, 1 << 20)).unwrap();
    log.close().unwrap();
    let file = &segment_files(dir.path())[0];
    let end = spans(&fs::read(file).unwrap())[0].end as u64;
    assert_eq!(mark_of(file).map(|m| m.end), Some(end));
}

#[test]
fn an_oversized_record_discards_a_prepared_segment() {
    let mut o = opts(SEG);
    o.prepare_ahead = true;
    // The small records pass half the segment, which starts a preparation.
    let mut sizes = vec![600; 16];
    sizes.extend([2 << 20, 10, 600, 600]);
    oversized_round_trip(o, &sizes);
}

/// A record at least as large as the default segment size (64 MiB).
#[test]
fn a_record_larger_than_the_default_segment() {
    let started = Instant::now();
    oversized_round_trip(opts(SEG), &[10, (64 << 20) + 1, 10]);
    eprintln!("64 MiB record round trip: {:.1?}", started.elapsed());
}

/// Appends until the roll is attempted, which the hook makes fail.
fn crash_in_roll(dir: &Path, hook: Arc<dyn IoHook>) -> Vec<LogEntry> {
    let log = Log::open(dir, opts(SEG).hook(hook)).unwrap();
    let mut acked = Vec::new();
    for i in 0.. {
        let e = entry(i, 700);
        match log.append(&e) {
            Ok(_) => acked.push(e),
            Err(Error::Io { .. }) => break,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(matches!(log.append(&entry(99, 1)), Err(Error::Poisoned)));
    acked
}

/// Reopens after a crashed roll and checks: leftovers removed and reported,
/// everything acknowledged present, appends roll on, a second reopen is clean.
fn recover_after_roll(dir: &Path, acked: &[LogEntry], leftovers: &[PathBuf], rolled: bool) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    let mut removed = log.recovery_report().removed.clone();
    removed.sort();
    assert_eq!(removed, leftovers);
    assert_eq!(prep_files(dir), Vec::<PathBuf>::new());
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(entries(&log), acked);
    let n = acked.len() as u64;
    let mut want = acked.to_vec();
    for i in n..n + 40 {
        let e = entry(i, 700);
        log.append(&e).unwrap();
        want.push(e);
    }
    assert_eq!(entries(&log), want);
    assert_eq!(log.verify().damage, None);
    if rolled {
        let next = dir.join(format!("{n:020}.seg"));
        assert!(
            log.segment_paths().contains(&next),
            "the roll resumed at seq {n}"
        );
    }
    drop(log);
    let log = Log::open(dir, opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().removed, Vec::<PathBuf>::new());
    assert_eq!(entries(&log), want);
    assert_eq!(log.verify().damage, None);
}

#[test]
fn crash_before_the_new_segment_is_renamed() {
    let dir = tempfile::tempdir().unwrap();
    // Rename #1 created the first segment.
    let hook = Countdown::new(OpKind::Rename, 2, false);
    let acked = crash_in_roll(dir.path(), hook.clone());
    assert_eq!(hook.failed(), 1);
    let preps = prep_files(dir.path());
    assert_eq!(preps.len(), 1, "the prepared file is left behind");
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 1);
    assert!(footer_of(&files[0]).is_some(), "the old segment was sealed");
    // The sealed last segment has no successor; the reopen rolls on from it.
    recover_after_roll(dir.path(), &acked, &preps, true);
}

/// Fails the write of a rolled-to segment's header: the file exists, all zeros.
struct FailHeaderWrite;

impl IoHook for FailHeaderWrite {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match op {
            IoOp::Write { path, .. } if path.to_string_lossy().contains("/next-") => {
                Err(io::Error::other("injected"))
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn crash_before_the_new_segment_has_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let acked = crash_in_roll(dir.path(), Arc::new(FailHeaderWrite));
    let preps = prep_files(dir.path());
    assert_eq!(preps.len(), 1);
    assert!(fs::read(&preps[0]).unwrap().iter().all(|&b| b == 0));
    recover_after_roll(dir.path(), &acked, &preps, true);
}

#[test]
fn crash_after_the_rename_before_the_directory_sync() {
    let dir = tempfile::tempdir().unwrap();
    // A roll's directory sync runs when the roll settles: here (no sync, no
    // background thread) at the start of the next roll, which then fails.
    let hook = Countdown::new(OpKind::SyncDir, 2, false);
    let acked = crash_in_roll(dir.path(), hook);
    assert_eq!(prep_files(dir.path()), Vec::<PathBuf>::new());
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2, "the second roll stopped before sealing");
    let second: u64 = files[1]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(
        0 < second && second < acked.len() as u64,
        "the first roll's successor holds acknowledged records"
    );
    recover_after_roll(dir.path(), &acked, &[], true);
}

#[test]
fn stray_preparations_are_removed_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    let acked: Vec<_> = (0..5).map(|i| entry(i, 100)).collect();
    for e in &acked {
        log.append(e).unwrap();
    }
    drop(log);
    // A background preparation and a half-made first segment, as a crash leaves them.
    let stray = vec![
        dir.path().join("first.prep"),
        dir.path().join("next-5-1.prep"),
    ];
    fs::write(&stray[0], vec![0u8; SEG as usize]).unwrap();
    fs::write(&stray[1], vec![0u8; 100]).unwrap();
    recover_after_roll(dir.path(), &acked, &stray, false);
}

#[test]
fn crash_while_creating_the_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Countdown::new(OpKind::Rename, 1, false);
    assert!(matches!(
        Log::open(dir.path(), opts(SEG).hook(hook)),
        Err(Error::Io { .. })
    ));
    let preps = prep_files(dir.path());
    assert_eq!(preps.len(), 1);
    assert_eq!(segment_files(dir.path()), Vec::<PathBuf>::new());
    recover_after_roll(dir.path(), &[], &preps, true);
}

/// Appends `Buffered` records until the log has rolled once and holds `after`
/// records past the roll, then drops it without closing (a kill): the
/// roll is unsettled, and the new segment has no mark.
fn unsettled_roll(dir: &Path, after: u64) -> (Vec<LogEntry>, u64) {
    let log = Log::open(dir, opts(SEG)).unwrap();
    let mut acked = Vec::new();
    let mut rolled_at = None;
    for i in 0.. {
        let e = entry(i, 700);
        log.append(&e).unwrap();
        acked.push(e);
        if rolled_at.is_none() && segment_files(dir).len() == 2 {
            rolled_at = Some(i);
        }
        if rolled_at.is_some_and(|r| i >= r + after - 1) {
            break;
        }
    }
    drop(log);
    let files = segment_files(dir);
    assert_eq!(files.len(), 2);
    assert_eq!(mark_of(&files[1]), None, "no sync, no close: no mark");
    (acked, rolled_at.unwrap())
}

#[test]
fn a_torn_seal_before_an_unsettled_roll_is_a_torn_tail_and_its_successor_goes() {
    for (what, damage) in [("footer lost", 0usize), ("a record torn in the middle", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let (acked, first_of_second) = unsettled_roll(dir.path(), 3);
        let files = segment_files(dir.path());
        // The power failed before the sealed segment's fdatasync: its seal
        // (and here, one record's bytes too) never reached the disk.
        let mut kept = first_of_second as usize;
        engine::edit(&files[0], |b| {
            let n = b.len();
            b[n - FOOTER_LEN..].fill(0);
            if damage == 1 {
                let s = spans(b);
                let torn = s[s.len() / 2];
                b[torn.start + 70] ^= 0xFF;
                kept = torn.seq as usize;
            }
        });
        let reader = Log::open_read_only(dir.path()).unwrap();
        assert_eq!(entries(&reader), acked[..kept], "{what}: reader");
        drop(reader);
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        let report = log.recovery_report().clone();
        assert_eq!(report.removed, vec![files[1].clone()], "{what}");
        let torn = report.torn_tail.expect("a torn tail");
        assert_eq!(torn.segment, files[0], "{what}");
        assert!(!torn.salvaged, "{what}: nothing durable was lost");
        assert_eq!(entries(&log), acked[..kept], "{what}: writer");
        assert_eq!(log.verify().damage, None, "{what}");
        // The log goes on from the tear, through a new roll.
        let mut want = acked[..kept].to_vec();
        for i in kept as u64..kept as u64 + 30 {
            let e = entry(i, 700);
            log.append(&e).unwrap();
            want.push(e);
        }
        log.close().unwrap();
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        assert_eq!(log.recovery_report().torn_tail, None, "{what}");
        assert_eq!(entries(&log), want, "{what}");
        assert_eq!(log.verify().damage, None, "{what}");
    }
}

#[test]
fn an_intact_seal_before_an_unsettled_roll_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (acked, _) = unsettled_roll(dir.path(), 3);
    let files = segment_files(dir.path());
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().removed, Vec::<PathBuf>::new());
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(entries(&log), acked);
    assert_eq!(segment_files(dir.path()), files);
    log.close().unwrap();
    // The open found the seal intact, synced it and the directory, and
    // marked the last segment: the next open trusts the roll.
    assert!(mark_of(&files[1]).is_some());
}

#[test]
fn a_durable_commit_after_a_roll_vouches_for_the_seal_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(SyncThreads::default());
    let log = Log::open(dir.path(), opts(SEG).hook(hook.clone())).unwrap();
    let mut want = Vec::new();
    for i in 0.. {
        let e = entry(i, 700);
        log.append(&e).unwrap();
        want.push(e);
        if segment_files(dir.path()).len() == 2 {
            break;
        }
    }
    let files = segment_files(dir.path());
    assert_eq!(mark_of(&files[1]), None, "Buffered: the roll is unsettled");
    let e = entry(want.len() as u64, 100);
    log.append_with(&e, session_store::Durability::Sync)
        .unwrap();
    want.push(e);
    // The commit settled the roll first: the sealed segment, the directory,
    // then the new segment's first mark, all before the commit's own sync.
    let ops: Vec<_> = hook
        .ops
        .lock()
        .unwrap()
        .iter()
        .map(|(k, p, _)| (*k, p.clone()))
        .collect();
    let at = |op: (OpKind, &PathBuf)| ops.iter().position(|(k, p)| (*k, p) == op);
    let sealed = at((OpKind::Sync, &files[0])).expect("the sealed segment was synced");
    let dir_sync = ops
        .iter()
        .rposition(|(k, _)| *k == OpKind::SyncDir)
        .unwrap();
    let commit = ops
        .iter()
        .rposition(|(k, p)| *k == OpKind::Sync && *p == files[1])
        .unwrap();
    assert!(sealed < dir_sync && dir_sync < commit, "{ops:?}");
    assert!(
        mark_of(&files[1]).is_some(),
        "the new segment has its first mark"
    );
    drop(log);
    // So damage to the sealed segment is corruption now, never a torn tail.
    engine::edit(&files[0], |b| {
        let n = b.len();
        b[n - FOOTER_LEN..].fill(0);
    });
    let err = Log::open(dir.path(), opts(SEG)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(matches!(
        Log::open_read_only(dir.path()),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(segment_files(dir.path()), files, "nothing was removed");
}

#[test]
fn a_failed_background_settle_poisons_and_a_reopen_recovers() {
    let dir = tempfile::tempdir().unwrap();
    // Directory sync #1 created the first segment; #2 is the first roll's
    // settle, on the background thread.
    let hook = Countdown::new(OpKind::SyncDir, 2, false);
    let mut o = opts(SEG).hook(hook.clone());
    o.prepare_ahead = true;
    let log = Log::open(dir.path(), o).unwrap();
    let mut acked = Vec::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    for i in 0.. {
        match log.append(&entry(i, 700)) {
            Ok(_) => acked.push(entry(i, 700)),
            Err(Error::Poisoned) | Err(Error::Io { .. }) => break,
            Err(e) => panic!("unexpected {e}"),
        }
        if hook.failed() == 1 {
            // Give the failure time to be seen, not to be outrun.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(Instant::now() < deadline, "the failure never surfaced");
    }
    assert_eq!(hook.failed(), 1);
    assert!(matches!(log.sync(), Err(Error::Poisoned)));
    assert!(matches!(log.close(), Err(Error::Poisoned)));
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(entries(&log), acked);
    assert_eq!(log.verify().damage, None);
}

/// Records which thread runs each sync and directory sync.
#[derive(Default)]
struct SyncThreads {
    ops: std::sync::Mutex<Vec<(OpKind, PathBuf, std::thread::ThreadId)>>,
}

impl IoHook for SyncThreads {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let path = match op {
            IoOp::Sync { path } | IoOp::SyncDir { path } => path.to_path_buf(),
            _ => return Ok(()),
        };
        let kind = OpKind::of(op).unwrap();
        let me = std::thread::current().id();
        self.ops.lock().unwrap().push((kind, path, me));
        Ok(())
    }
}

#[test]
fn buffered_appends_sync_no_sealed_segment_on_the_appending_thread() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(SyncThreads::default());
    let mut o = opts(SEG).hook(hook.clone());
    o.prepare_ahead = true;
    let log = Log::open(dir.path(), o).unwrap();
    let start = hook.ops.lock().unwrap().len();
    let me = std::thread::current().id();
    let mut want = Vec::new();
    let mut segments = 1;
    for i in 0..200 {
        let e = entry(i, 700);
        log.append(&e).unwrap();
        want.push(e);
        // Tiny segments roll every few appends, and the next roll settles
        // the last one itself if the background has not (at most one roll
        // is ever unsettled). Real segments give the background the time it
        // gets here by waiting for it.
        let files = segment_files(dir.path());
        if files.len() != segments {
            segments = files.len();
            // Settling ends with the new segment's first sync under its name.
            let new = &files[files.len() - 1];
            let deadline = Instant::now() + std::time::Duration::from_secs(30);
            while Instant::now() < deadline
                && !hook
                    .ops
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(k, p, _)| *k == OpKind::Sync && p == new)
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    let files = segment_files(dir.path());
    assert!(files.len() >= 5, "{} segments", files.len());
    {
        let ops = hook.ops.lock().unwrap();
        let here: Vec<_> = ops[start..].iter().filter(|(_, _, t)| *t == me).collect();
        // The appending thread syncs only a new segment's header, before its
        // rename; seals and the directory are synced in the background.
        for (kind, path, _) in &here {
            assert_eq!(
                *kind,
                OpKind::Sync,
                "{kind:?} of {path:?} on the appending thread"
            );
            assert!(
                path.extension().is_some_and(|e| e == "prep"),
                "{path:?} synced on the appending thread: {here:?}"
            );
        }
    }
    log.close().unwrap();
    // Every sealed segment was synced, and the directory after the last rename.
    let ops = hook.ops.lock().unwrap();
    for sealed in &files[..files.len() - 1] {
        assert!(
            ops.iter()
                .any(|(k, p, _)| *k == OpKind::Sync && p == sealed),
            "{sealed:?} never synced"
        );
    }
    assert_eq!(ops.last().map(|o| o.0), Some(OpKind::Sync));
    assert!(ops.iter().any(|(k, _, _)| *k == OpKind::SyncDir));
    drop(ops);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(entries(&log), want);
}

/// A log closed with 8 MiB or more of records in its active segment seals
/// it, so that a read-only view finds any of its records through the
/// footer's index; a smaller one is left open and the next append goes on
/// in it. After the seal, the next append starts a new segment and nothing
/// is lost or reordered.
#[test]
fn close_seals_a_large_active_segment_and_the_next_append_starts_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked = Vec::new();
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    for i in 0..10 {
        acked.push(entry(i, 100));
        log.append(acked.last().unwrap()).unwrap();
    }
    log.close().unwrap();
    let segs = segment_files(dir.path());
    assert_eq!(segs.len(), 1);
    assert!(footer_of(&segs[0]).is_none(), "a small segment stays open");

    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    while log.bytes() < 9 << 20 {
        acked.push(entry(acked.len() as u64, 3000));
        log.append(acked.last().unwrap()).unwrap();
    }
    log.close().unwrap();
    let segs = segment_files(dir.path());
    assert_eq!(segs.len(), 1, "the segment was large enough not to roll");
    let footer = footer_of(&segs[0]).expect("a large segment is sealed at close");
    assert_eq!(footer.record_count, acked.len() as u64);

    let view = Log::open_read_only(dir.path()).unwrap();
    let snap = view.snapshot();
    let n = acked.len() as u64;
    for seq in [0, 9, 10, n / 2, n - 2, n - 1] {
        let rec = snap.iter_from(seq).next().unwrap().unwrap();
        assert_eq!(rec.seq, seq);
        assert_eq!(rec.to_entry().unwrap(), acked[seq as usize]);
    }
    drop(snap);
    drop(view);

    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    acked.push(entry(n, 100));
    log.append(acked.last().unwrap()).unwrap();
    assert_eq!(entries(&log), acked);
    log.close().unwrap();
    assert_eq!(
        segment_files(dir.path()).len(),
        2,
        "the append after a seal rolled"
    );
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    assert_eq!(entries(&log), acked);
    let report = log.verify();
    assert_eq!((report.damage, report.records), (None, n + 1));
}

/// A power loss can tear the seal `Log::close` wrote (the footer is
/// synced last): the segment then reads as an open one, every record is
/// kept, and the log takes appends again.
#[test]
fn a_torn_seal_at_close_leaves_every_record_and_an_open_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    let mut acked = Vec::new();
    while log.bytes() < 9 << 20 {
        acked.push(entry(acked.len() as u64, 3000));
        log.append(acked.last().unwrap()).unwrap();
    }
    log.close().unwrap();
    let seg = segment_files(dir.path()).pop().unwrap();
    assert!(footer_of(&seg).is_some());
    let len = fs::metadata(&seg).unwrap().len();
    engine::edit(&seg, |b| {
        b[len as usize - FOOTER_LEN..].fill(0);
    });
    let view = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(entries(&view), acked);
    drop(view);
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    assert_eq!(entries(&log), acked);
    acked.push(entry(acked.len() as u64, 100));
    log.append(acked.last().unwrap()).unwrap();
    log.close().unwrap();
    let log = Log::open(dir.path(), opts(16 << 20)).unwrap();
    assert_eq!(entries(&log), acked);
    assert_eq!(log.verify().damage, None);
}
