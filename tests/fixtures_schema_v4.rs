//! Guards the archived form of schema 4 (`ForkedFrom`, the first entry of a
//! fork by reference) and the store layout of forks: a log and a store
//! written by schema 4 code are committed under `tests/fixtures/schema_v4/`,
//! and today's code must read back exactly the log's entries and head, and
//! restore the store's fork through its parent, retired or not.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_schema_v4` rewrites
//! them; only do that with the code of the schema they are named after.

mod common;

use std::path::{Path, PathBuf};

use session_store::{
    group_delta, Deletion, EntryHash, Error, Item, LogEntry, LogOptions, RequestConfig, SessionId,
    Store, StoreOptions,
};

/// The head hash the fixture log was written with.
const HEAD: &str = "8cabed184d9de7bb46e1ceb420f27b02557d9d8a860cc51e342050b7efcb4617";

/// The parent session of the fixture store.
const PARENT: &str = "01a23000-0000-7000-8000-000000000001";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v4")
}

fn entries() -> Vec<LogEntry> {
    let ts = 1_796_000_000_000;
    let mut out = vec![LogEntry::ForkedFrom {
        ts,
        parent: PARENT.parse().unwrap(),
        parent_seq: 3,
        parent_hash: EntryHash([7; 32]),
    }];
    out.extend(group_delta(
        &[Item::user_text("fork"), Item::assistant_text("own")],
        ts + 1,
    ));
    out
}

#[test]
fn the_committed_schema_v4_log_reads_with_todays_types() {
    let dir = fixture_dir().join("log");
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD);
    // Alone, the log of a fork does not hold its history: refused, not cut.
    assert!(matches!(
        log.restore().unwrap_err(),
        Error::InvalidInput { .. }
    ));
    let link = log.snapshot().fork_link().unwrap().unwrap();
    assert_eq!((link.parent.to_string(), link.seq), (PARENT.into(), 3));
}

fn store_options() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(16 << 10))
}

/// Copies the committed store (read-only in the tree) to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn parent_history() -> Vec<Item> {
    vec![
        Item::user_text("task"),
        Item::assistant_text("first"),
        Item::user_text("more"),
        Item::assistant_text("second"),
    ]
}

#[test]
fn the_committed_schema_v4_store_restores_its_fork_through_the_parent() {
    let committed = fixture_dir().join("store");
    let parent: SessionId = PARENT.parse().unwrap();
    if std::env::var("REGENERATE_FIXTURES").is_ok() {
        let _ = std::fs::remove_dir_all(&committed);
        let store = Store::open_with(&committed, store_options()).unwrap();
        let history = parent_history();
        let mut head = store
            .create_session_with_id(
                parent,
                Some("sys"),
                RequestConfig::model("m"),
                &history[..2],
            )
            .unwrap();
        store.save_delta(parent, &mut head, &history[2..]).unwrap();
        let (fork, mut fh) = store.fork_at_seq(parent, 1).unwrap();
        store
            .save_delta(fork, &mut fh, &[Item::user_text("fork own")])
            .unwrap();
        store.close().unwrap();
        println!("fork {fork}, head {fh}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&committed, tmp.path());
    let store = Store::open_with(tmp.path(), store_options()).unwrap();
    let forks = store.forks_of(parent);
    assert_eq!(forks.len(), 1);
    let fork = forks[0];
    let state = store.restore(fork).unwrap();
    // Forked at seq 1: the SessionStart and the first save's user message.
    let mut expected = parent_history()[..3].to_vec();
    expected.push(Item::user_text("fork own"));
    assert_eq!(state.history, expected);
    assert_eq!(state.system_prompt.as_deref(), Some("sys"));
    assert_eq!(state.forked_from.unwrap().session_id, parent);
    assert!(store.verify_fork_link(fork).unwrap().is_some());
    // The parent's delete retires it; the fork still reads it.
    assert!(matches!(
        store.delete(parent).unwrap(),
        Deletion::Retired { .. }
    ));
    assert_eq!(store.restore(fork).unwrap().history, expected);
}
