//! Guards durability against syncs that are missing or wasted: a turn commit
//! under `Sync` is one `fdatasync`, a session keeps the durability it was
//! created with, `Store::sync` reaches a session an eviction let go
//! unsynced, and a small `Buffered` session takes disk only for what it holds.

mod common;
mod engine;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::store::{tempdir, turn, SegSyncs};
use session_store::{
    log::IoHook, log::IoOp, state::UsageRecord, Item, LogOptions, RequestConfig, SessionId, Store,
    StoreOptions,
};

#[test]
fn a_small_buffered_session_takes_disk_for_what_it_holds() {
    let dir = tempdir();
    // Default options: Buffered, 64 MiB segments (sparse until a sync).
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(Some("be brief"), RequestConfig::default(), &[])
        .unwrap();
    for t in 0..20 {
        let turn = [
            Item::user_text(format!("question {t}: {}", "q".repeat(300))),
            Item::assistant_text(format!("answer {t}: {}", "a".repeat(1200))),
        ];
        store.save_delta(id, &mut head, &turn).unwrap();
    }
    store.close().unwrap();
    let log_bytes = store.log(id).unwrap().bytes();
    let allocated = engine::allocated_bytes(&store.session_dir(id));
    // The records, plus a few blocks for the catalog, the lock and the
    // segment's header page: nowhere near the segment's 64 MiB.
    assert!(
        allocated < log_bytes + (64 << 10),
        "{allocated} bytes allocated for {log_bytes} bytes of records"
    );
    assert_eq!(store.restore(id).unwrap().history.len(), 40);
}

/// `Store::sync` makes durable what this store appended to a session, even
/// after an eviction let the session go unsynced (a Buffered store syncs
/// nothing on eviction): the sync reaches that session's segment.
#[test]
fn sync_reaches_a_session_that_an_eviction_let_go_unsynced() {
    #[derive(Default)]
    struct Syncs(std::sync::Mutex<Vec<PathBuf>>);
    impl IoHook for Syncs {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            if let IoOp::Sync { path } = op {
                self.0.lock().unwrap().push(path.to_path_buf());
            }
            Ok(())
        }
    }
    let dir = tempdir();
    let syncs = Arc::new(Syncs::default());
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default()
            .log(LogOptions::default().hook(syncs.clone()))
            .max_open_sessions(1),
    )
    .unwrap();
    let (a, head_a) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store.append(a, head_a, &turn(0, 100)).unwrap();
    let (b, head_b) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store.append(b, head_b, &turn(1, 100)).unwrap();
    let a_dir = store.session_dir(a);
    let a_synced = || {
        syncs
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.starts_with(&a_dir) && p.extension().is_some_and(|x| x == "seg"))
    };
    assert!(!a_synced(), "a Buffered store synced on its own");
    store.sync(a).unwrap();
    assert!(
        a_synced(),
        "Store::sync did not reach the evicted session's log"
    );
}

/// A whole turn (its items, usage and `TurnEnd`) commits as one batch:
/// under `Sync` it costs one `fdatasync` of the log, not one per entry.
#[test]
fn a_turn_commit_under_sync_is_one_fdatasync() {
    let dir = tempdir();
    let hook = Arc::new(SegSyncs::default());
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(
            LogOptions::default()
                .hook(hook.clone())
                .durability(session_store::Durability::Sync),
        ),
    )
    .unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let head = store
        .commit_turn(id, head, &session_store::Turn::new(turn(0, 10), 1))
        .unwrap();
    let before = hook.0.load(Ordering::SeqCst);
    let usage = UsageRecord {
        output_tokens: 7,
        ..UsageRecord::default()
    };
    let turn1 = session_store::Turn::new(turn(1, 10), 2).usage(usage);
    let head = store.commit_turn(id, head, &turn1).unwrap();
    assert_eq!(
        hook.0.load(Ordering::SeqCst) - before,
        1,
        "one fdatasync per turn"
    );
    let state = store.restore(id).unwrap();
    assert_eq!((state.turn_count, state.head), (2, Some(head)));
    assert_eq!(state.usage.len(), 1);
}

/// A session may choose its durability at creation: its saves default to
/// it (after a reopen too), other sessions keep the store's, and a call's
/// own durability still overrides it (issue 17, item 3).
#[test]
fn a_session_keeps_the_durability_it_was_created_with() {
    #[derive(Default)]
    struct SegSyncs(Mutex<Vec<PathBuf>>);
    impl IoHook for SegSyncs {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            if let IoOp::Sync { path } = op {
                // A journal's sync makes the Sync session's records durable
                // (the Buffered one never journals).
                if path.extension().is_some_and(|e| e == "seg" || e == "jnl") {
                    self.0.lock().unwrap().push(path.to_path_buf());
                }
            }
            Ok(())
        }
    }
    use session_store::Durability;
    use std::sync::Mutex;
    let dir = tempdir();
    let hook = Arc::new(SegSyncs::default());
    let open = || {
        Store::open_with(
            dir.path(),
            StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
        )
        .unwrap()
    };
    let store = open();
    let (durable, head_d) = store
        .create_session_with_durability(None, RequestConfig::default(), &[], Durability::Sync)
        .unwrap();
    let (plain, head_p) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let synced = |id: SessionId| {
        let d = store.session_dir(id);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| {
                p.starts_with(&d) || (id == durable && p.extension().is_some_and(|e| e == "jnl"))
            })
            .count()
    };
    let (d0, p0) = (synced(durable), synced(plain));
    let head_d = store.append(durable, head_d, &turn(0, 10)).unwrap();
    store.append(plain, head_p, &turn(0, 10)).unwrap();
    assert!(synced(durable) > d0, "the Sync session's save synced");
    assert_eq!(
        synced(plain),
        p0,
        "the store's Buffered default holds for the other"
    );
    // A call's own durability overrides the session's.
    let d1 = synced(durable);
    let quick = session_store::Turn::new(turn(1, 10), 1).durability(Durability::Buffered);
    let head_d = store.commit_turn(durable, head_d, &quick).unwrap();
    assert_eq!(synced(durable), d1);
    store.close().unwrap();
    drop(store);
    // After a reopen, the session still syncs its saves.
    let store = open();
    let d2 = {
        let d = store.session_dir(durable);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&d) || p.extension().is_some_and(|e| e == "jnl"))
            .count()
    };
    store.append(durable, head_d, &turn(2, 10)).unwrap();
    let d3 = {
        let d = store.session_dir(durable);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&d) || p.extension().is_some_and(|e| e == "jnl"))
            .count()
    };
    assert!(d3 > d2, "the choice held after a reopen");
}
