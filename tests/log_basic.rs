//! Guards the basic promises of the log: what is appended is read back, in
//! order, with a valid chain, across rolls and reopens.

use session_store::log::{Durability, Log, LogOptions};
use session_store::{Item, LogEntry, LoggedItem};

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
    match log.append_batch(&[good, bad], Durability::Buffered, None) {
        Err(session_store::Error::InvalidInput { what }) => {
            assert!(what.contains("top_p"), "{what}")
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(log.next_seq(), 0, "nothing of the batch was written");
    log.append(&entry(0, 10)).unwrap();
}
