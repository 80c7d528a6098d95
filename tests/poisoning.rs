//! Guards against a writer that carries on (or retries an fsync) after an I/O
//! error: the Nth write, sync, allocation, rename or directory sync fails, the
//! error reaches the caller, the writer refuses everything after, and a
//! reopen recovers a prefix that verifies and takes appends. A store reopens
//! a poisoned session at its next call once the cause is gone.

mod common;
mod engine;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::store::{tempdir, turn, FailSyncs};
use engine::{entries, entry, opts, segment_files, spans, sweep_tempdir, Countdown, OpKind};
use session_store::{
    Durability, Error, Item, Log, LogEntry, LogOptions, RequestConfig, Store, StoreOptions,
};

const SEG: u64 = 8 << 10;
const APPENDS: u64 = 60;

fn size(i: u64) -> usize {
    200 + (i as usize * 211) % 1300
}

/// How a run ended.
struct Run {
    /// Appends that returned Ok.
    acked: Vec<LogEntry>,
    /// The append that failed, if an append did.
    failed: Option<LogEntry>,
    /// The error, if any reached the caller.
    error: Option<Error>,
}

/// Appends, a mix of Buffered and Sync with an explicit sync now and then,
/// until the first error.
fn workload(log: &Log) -> Run {
    let mut run = Run {
        acked: Vec::new(),
        failed: None,
        error: None,
    };
    for i in 0..APPENDS {
        let e = entry(i, size(i));
        let d = if i % 4 == 3 {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        match log.append_with(&e, d) {
            Ok(_) => run.acked.push(e),
            Err(err) => {
                run.failed = Some(e);
                run.error = Some(err);
                return run;
            }
        }
        if i % 10 == 9 {
            if let Err(err) = log.sync() {
                run.error = Some(err);
                return run;
            }
        }
    }
    run
}

fn assert_injected(e: &Error, what: &str) {
    match e {
        Error::Io { source, .. } if source.to_string().contains("injected") => {}
        other => panic!("{what}: expected the injected Io error, got {other:?}"),
    }
}

/// Reopens without faults: the log holds what was acknowledged (plus,
/// possibly, the append whose outcome the error left open), verifies, takes
/// appends, and reopens clean.
fn assert_recovers(dir: &Path, acked: &[LogEntry], failed: Option<&LogEntry>, what: &str) {
    let log = Log::open(dir, opts(SEG)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let got = entries(&log);
    let with_failed: Vec<_> = acked.iter().chain(failed).cloned().collect();
    assert!(
        got == acked || got == with_failed,
        "{what}: recovered {} entries, acked {}",
        got.len(),
        acked.len()
    );
    assert_eq!(log.verify().damage, None, "{what}");
    let n = got.len() as u64;
    assert_eq!(log.append(&entry(1000, 10)).unwrap().0, n, "{what}");
    drop(log);
    let log = Log::open(dir, opts(SEG)).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None, "{what}");
    assert_eq!(log.next_seq(), n + 1, "{what}");
    assert_eq!(log.verify().damage, None, "{what}");
}

/// Fails the nth operation of `kind` for every n the workload reaches.
fn sweep(kind: OpKind, sticky: bool, prepare_ahead: bool) {
    let started = Instant::now();
    let options = |hook| {
        let mut o: LogOptions = opts(SEG).hook(hook);
        o.prepare_ahead = prepare_ahead;
        o
    };
    // A dry run counts the operations.
    let total = {
        let dir = sweep_tempdir();
        let count = Countdown::new(kind, 0, false);
        let log = Log::open(dir.path(), options(count.clone())).unwrap();
        let run = workload(&log);
        assert!(run.error.is_none());
        assert!(log.segment_paths().len() >= 4, "the workload rolls");
        count.seen()
    };
    assert!(total > 0);
    for n in 1..=total {
        let what = format!("{kind:?} #{n}");
        let dir = sweep_tempdir();
        let hook = Countdown::new(kind, n, sticky);
        let log = match Log::open(dir.path(), options(hook.clone())) {
            Ok(log) => log,
            Err(e) => {
                // The fault hit the creation of the first segment.
                assert_injected(&e, &what);
                assert_recovers(dir.path(), &[], None, &what);
                continue;
            }
        };
        let run = workload(&log);
        let Some(error) = run.error else {
            // Only a background preparation that no roll came to use may fail
            // without the caller noticing: then nothing was lost.
            assert!(prepare_ahead, "{what}: no error reached the caller");
            drop(log);
            assert_recovers(dir.path(), &run.acked, None, &what);
            continue;
        };
        assert_injected(&error, &what);
        assert!(hook.failed() >= 1);
        assert!(
            matches!(log.append(&entry(999, 1)), Err(Error::Poisoned)),
            "{what}: append after a failure"
        );
        assert!(
            matches!(log.sync(), Err(Error::Poisoned)),
            "{what}: sync after a failure must not retry"
        );
        if !sticky {
            assert_eq!(
                hook.failed(),
                1,
                "{what}: nothing retried the failed operation"
            );
        }
        drop(log);
        assert_recovers(dir.path(), &run.acked, run.failed.as_ref(), &what);
    }
    eprintln!(
        "{kind:?} (sticky {sticky}, prepare ahead {prepare_ahead}): {total} faults in {:.1?}",
        started.elapsed()
    );
}

#[test]
fn a_failed_write_poisons() {
    sweep(OpKind::Write, false, false);
}

#[test]
fn a_failed_sync_poisons_and_is_never_retried() {
    sweep(OpKind::Sync, false, false);
}

#[test]
fn a_failed_allocation_poisons() {
    sweep(OpKind::Allocate, false, false);
}

/// With preparation ahead, a failed background allocation is retried in the
/// foreground; a full disk (every allocation fails) must still surface.
#[test]
fn a_full_disk_surfaces_through_prepared_segments() {
    sweep(OpKind::Allocate, true, true);
}

#[test]
fn a_failed_rename_poisons() {
    sweep(OpKind::Rename, false, false);
}

#[test]
fn a_failed_directory_sync_poisons() {
    sweep(OpKind::SyncDir, false, false);
}

/// A fault while open repairs a torn tail leaves the log as it was, and the
/// next open repairs it.
#[test]
fn a_failure_during_recovery_leaves_the_log_recoverable() {
    for kind in [OpKind::Write, OpKind::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        let acked: Vec<_> = (0..4).map(|i| entry(i, 100)).collect();
        for e in &acked {
            log.append(e).unwrap();
        }
        drop(log);
        let seg = &segment_files(dir.path())[0];
        let mut b = fs::read(seg).unwrap();
        let end = spans(&b).last().unwrap().end;
        b[end..end + 100].fill(0xa5);
        fs::write(seg, &b).unwrap();
        let hook = Countdown::new(kind, 1, false);
        match Log::open(dir.path(), opts(SEG).hook(hook)) {
            Err(e) => assert_injected(&e, &format!("{kind:?} in recovery")),
            Ok(_) => panic!("{kind:?}: the fault did not surface"),
        }
        let log = Log::open(dir.path(), opts(SEG)).unwrap();
        let t = log.recovery_report().torn_tail.clone();
        // A failed sync came after the zeroing; the bytes are gone either way,
        // but a failed write must leave the tail to be cut again.
        if kind == OpKind::Write {
            assert_eq!(t.map(|t| t.offset), Some(end as u64));
        }
        assert_eq!(entries(&log), acked);
        drop(log);
        assert_recovers(dir.path(), &acked, None, &format!("{kind:?} in recovery"));
    }
}

/// A failed sync poisons a session's writer; once the cause is gone, the
/// next call reopens the session through recovery instead of returning
/// `Poisoned` for as long as the store lives, and the head the store
/// reports tells the caller what was kept.
#[test]
fn a_poisoned_session_is_reopened_by_the_next_call() {
    let dir = tempdir();
    let hook = Arc::new(FailSyncs(AtomicBool::new(false)));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    let head = store.append(id, head, &turn(0, 100)).unwrap();
    store.sync(id).unwrap();
    hook.0.store(true, Ordering::SeqCst);
    let turn1 =
        session_store::Turn::new(turn(1, 100), 1).durability(session_store::Durability::Sync);
    let failed = store.commit_turn(id, head, &turn1);
    assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
    // While the cause lasts, calls fail (the reopen meets it again).
    let again = store.append(id, head, &turn(2, 10));
    assert!(
        matches!(again, Err(Error::Io { .. } | Error::Poisoned)),
        "{again:?}"
    );
    hook.0.store(false, Ordering::SeqCst);
    // The cause is gone: the session reopens, and goes on from its head.
    let kept = store.head(id).unwrap().unwrap();
    let head = store.append(id, kept, &turn(3, 10)).unwrap();
    store.sync(id).unwrap();
    assert_eq!(store.restore(id).unwrap().head, Some(head));
    store.close().unwrap();
}
