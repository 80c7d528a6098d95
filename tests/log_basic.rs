//! Guards the basic promises of the log: what is appended is read back, in
//! order, with a valid chain, across rolls and reopens.

use session_store::{
    log::IoHook, log::IoOp, schema::LoggedItem, Durability, Item, Log, LogEntry, LogOptions,
};

fn entry(i: u64, size: usize) -> LogEntry {
    LogEntry::UserInput {
        ts: 1_700_000_000_000 + i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "x".repeat(size)))),
    }
}

#[test]
fn append_iterate_reopen_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions::default().segment_size(16 << 10);
    let mut hashes = Vec::new();
    {
        let log = Log::open(dir.path(), opts.clone()).unwrap();
        for i in 0..200 {
            let (seq, hash) = log.append(&entry(i, (i as usize * 37) % 900)).unwrap();
            assert_eq!(seq, i);
            hashes.push(hash);
        }
        assert!(log.segment_paths().len() > 3);
        let snap = log.snapshot();
        let seen: Vec<_> = snap
            .iter()
            .map(|r| r.unwrap())
            .map(|r| (r.seq, r.hash))
            .collect();
        assert_eq!(seen.len(), 200);
        for (i, (seq, hash)) in seen.iter().enumerate() {
            assert_eq!(*seq, i as u64);
            assert_eq!(*hash, hashes[i]);
        }
        let from: Vec<_> = snap.iter_from(150).map(|r| r.unwrap().seq).collect();
        assert_eq!(from, (150..200).collect::<Vec<_>>());
        let report = log.verify();
        assert_eq!(report.damage, None);
        assert_eq!(report.records, 200);
        log.close().unwrap();
    }
    let log = Log::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(log.head(), Some((199, hashes[199])));
    assert_eq!(log.recovery_report().torn_tail, None);
    let (seq, _) = log.append_with(&entry(200, 10), Durability::Sync).unwrap();
    assert_eq!(seq, 200);
    drop(log);
    let log = Log::open(dir.path(), opts).unwrap();
    assert_eq!(log.next_seq(), 201);
    let entries: Vec<_> = log
        .snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(entries[7], entry(7, 7 * 37));
    assert_eq!(log.verify().damage, None);
}

#[test]
fn oversized_record_gets_its_own_segment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions::default().segment_size(16 << 10);
    let log = Log::open(dir.path(), opts.clone()).unwrap();
    log.append(&entry(0, 10)).unwrap();
    log.append(&entry(1, 200 << 10)).unwrap();
    log.append(&entry(2, 10)).unwrap();
    drop(log);
    let log = Log::open(dir.path(), opts).unwrap();
    let entries: Vec<_> = log
        .snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(
        entries,
        vec![entry(0, 10), entry(1, 200 << 10), entry(2, 10)]
    );
    assert_eq!(log.verify().damage, None);
}

#[test]
fn second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let _log = Log::open(dir.path(), LogOptions::default().segment_size(16 << 10)).unwrap();
    match Log::open(dir.path(), LogOptions::default()) {
        Err(session_store::Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn non_finite_floats_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let bad = LogEntry::ConfigChanged {
        ts: 1,
        config: session_store::RequestConfig {
            top_p: Some(f64::NAN),
            ..Default::default()
        },
    };
    let good = entry(0, 10);
    match log.append_batch(
        &[good, bad],
        Durability::Buffered,
        session_store::log::ExpectHead::Any,
    ) {
        Err(session_store::Error::InvalidInput { what }) => {
            assert!(what.contains("top_p"), "{what}")
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(log.next_seq(), 0, "nothing of the batch was written");
    log.append(&entry(0, 10)).unwrap();
}

/// A process killed after a roll wrote the seal but before its fdatasync
/// leaves a sealed segment that is only in the page cache, and after it
/// the successor the roll named without a sync (the settle that would
/// have synced both failed); the next writer must make the sealed one
/// durable before anything is vouched for after it.
#[test]
fn a_seal_left_unsynced_is_synced_on_reopen() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Default)]
    struct Hook {
        fail_syncs: AtomicBool,
        seal_written: AtomicBool,
        syncs: AtomicUsize,
    }
    impl IoHook for Hook {
        fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
            match op {
                // The footer is the last write of a seal: after it, fail the sync.
                IoOp::Write { offset, data, .. } if data.len() == 128 && *offset > 0 => {
                    self.seal_written.store(true, Ordering::SeqCst);
                }
                IoOp::Sync { .. } => {
                    self.syncs.fetch_add(1, Ordering::SeqCst);
                    if self.fail_syncs.load(Ordering::SeqCst)
                        && self.seal_written.load(Ordering::SeqCst)
                    {
                        return Err(std::io::Error::other(
                            "injected: killed before the seal's sync",
                        ));
                    }
                }
                _ => {}
            }
            Ok(())
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(Hook::default());
    hook.fail_syncs.store(true, Ordering::SeqCst);
    let opts = || LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(8 << 10)
    };
    let log = Log::open(dir.path(), opts().hook(hook.clone())).unwrap();
    let mut acked = 0;
    while log.append(&entry(acked, 500)).is_ok() {
        acked += 1;
    }
    drop(log);
    assert!(hook.seal_written.load(Ordering::SeqCst));
    assert_eq!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg"))
            .count(),
        2
    );

    let reopen = Arc::new(Hook::default());
    let log = Log::open(dir.path(), opts().hook(reopen.clone())).unwrap();
    assert_eq!(log.next_seq(), acked);
    assert!(
        reopen.syncs.load(Ordering::SeqCst) >= 1,
        "the sealed segment was not synced on open"
    );
    log.append(&entry(acked, 500)).unwrap();
    assert_eq!(log.verify().damage, None);
}

/// A read-only handle sees the prefix committed when it opened, and more
/// only after `refresh`, across a roll.
#[test]
fn read_only_handles_see_new_records_after_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Log::open(dir.path(), LogOptions::default().segment_size(8 << 10)).unwrap();
    for i in 0..3 {
        writer.append(&entry(i, 100)).unwrap();
    }
    let mut reader = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.next_seq(), 3);
    for i in 3..40 {
        writer.append(&entry(i, 700)).unwrap();
    }
    assert_eq!(
        reader.next_seq(),
        3,
        "a read-only handle does not move by itself"
    );
    reader.refresh().unwrap();
    assert_eq!(reader.next_seq(), 40);
    assert_eq!(reader.head(), writer.head());
    let got: Vec<_> = reader
        .snapshot()
        .entries_from(38)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(got, vec![entry(38, 700), entry(39, 700)]);
}
