//! Guards a session the store lets go past its open budget (unsynced, on a
//! `Buffered` store) against coming back wrong: a save that evicts syncs
//! nothing, a close that fails is reported, and a reopen with the writer's
//! release hint reads whole what another writer appended, never trusts the
//! hint for another log, and cuts nothing its records no longer bear out.

mod common;
mod engine;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::store::{
    answer, as_given, numbered_sessions, open, options, tempdir, turn, CountOps, FailSyncs,
    SegSyncs, SEGMENT_BYTES,
};
use session_store::{log::IoOp, Error, Item, LogOptions, RequestConfig, Store, StoreOptions};

#[test]
fn a_session_that_fails_to_close_is_reported_by_store_close_even_after_eviction() {
    for evicted in [false, true] {
        let dir = tempdir();
        let hook = Arc::new(FailSyncs(AtomicBool::new(false)));
        let store = Store::open_with(
            dir.path(),
            StoreOptions::default()
                .log(LogOptions::default().hook(hook.clone()))
                .max_open_sessions(1),
        )
        .unwrap();
        let create = |text: &str| {
            store
                .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
                .unwrap()
        };
        let (a, mut head_a) = create("a");
        let (b, _) = create("b");
        // A's new items are in the page cache only; its close must sync them.
        store
            .save_delta(a, &mut head_a, &[answer("unsynced")])
            .unwrap();
        hook.0.store(true, Ordering::SeqCst);
        if evicted {
            // Opening B evicts A, which a Buffered store lets go unsynced:
            // the sync that fails is its clean close in `Store::close`.
            store.log(b).unwrap();
        }
        let err = store.close().unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{evicted}: {err}");
        // Reported once; the failed session recovers on its next open.
        hook.0.store(false, Ordering::SeqCst);
        store.close().unwrap();
        let history = store.restore(a).unwrap().history;
        assert_eq!(
            history,
            as_given(&[Item::user_text("a"), answer("unsynced")]),
            "{evicted}"
        );
    }
}

/// On a `Buffered` store, a save that evicts a session (and reopens its
/// own) syncs nothing: the evicted session is let go dirty, and its next
/// open recovers it without a sync. `list` stays exact throughout, and the
/// store's close leaves every session clean.
#[test]
fn evictions_on_a_buffered_store_put_no_sync_on_the_save_path() {
    let dir = tempdir();
    let hook = CountOps::new(|op| matches!(op, IoOp::Sync { .. } | IoOp::SyncDir { .. }));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default()
            .log(LogOptions::default().hook(hook.clone()))
            .max_open_sessions(2),
    )
    .unwrap();
    let mut sessions = numbered_sessions(&store, 3);
    // Forks of session 0 keep empty catalogs: their heads are in the
    // listing cache only, where their reopen finds them as left.
    for _ in 0..2 {
        let (parent, head) = sessions[0];
        sessions.push(store.fork_at(parent, head).unwrap());
    }
    let syncs = hook.seen();
    for round in 0..3 {
        for (id, head) in &mut sessions {
            store.save_delta(*id, head, &turn(round, 200)).unwrap();
        }
    }
    assert_eq!(
        hook.seen(),
        syncs,
        "saves that evicted and reopened sessions synced"
    );
    let entries: Vec<u64> = sessions
        .iter()
        .map(|(id, _)| store.restore(*id).unwrap().entries)
        .collect();
    let check = |listed: Vec<session_store::SessionInfo>, who: &str| {
        for ((id, head), entries) in sessions.iter().zip(&entries) {
            let info = listed.iter().find(|s| s.id == *id).unwrap();
            assert_eq!(info.head, Some(*head), "{who}");
            assert_eq!(info.entries, *entries, "{who}");
            assert_eq!(info.error, None, "{who}");
        }
    };
    check(store.list().unwrap(), "the evicting store");
    check(
        Store::open_read_only(dir.path()).unwrap().list().unwrap(),
        "another store",
    );
    for (i, (id, head)) in sessions.iter().enumerate() {
        let state = store.restore(*id).unwrap();
        assert_eq!(state.head, Some(*head));
        let first = format!("session {}", if i < 3 { i } else { 0 });
        assert_eq!(state.history[0], Item::user_text(first));
    }
    store.close().unwrap();
    drop(store);

    for (id, _) in &sessions[3..] {
        let catalog = dir.path().join("sessions").join(id.to_string());
        assert_eq!(fs::metadata(catalog.join("catalog")).unwrap().len(), 0);
    }
    // Closed cleanly, each of them: the list comes from the catalogs alone,
    // even with every segment hidden.
    let hidden = tempdir();
    let mut moved = Vec::new();
    for (id, _) in &sessions {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let to = hidden.path().join(format!("{id}-{}", moved.len()));
                fs::rename(&path, &to).unwrap();
                moved.push((to, path));
            }
        }
    }
    check(open(dir.path()).list().unwrap(), "after the close");
    for (from, to) in moved {
        fs::rename(from, to).unwrap();
    }
    let store = open(dir.path());
    for (id, head) in &sessions {
        assert_eq!(store.restore(*id).unwrap().head, Some(*head));
        assert_eq!(store.log(*id).unwrap().verify().damage, None);
    }
}

/// A store with room for one open session: opening another lets the first
/// go (unsynced, on a Buffered store), with its writer's release hint.
fn one_open(root: &Path) -> Store {
    Store::open_with(root, options().max_open_sessions(1)).unwrap()
}

#[test]
fn a_released_session_reopens_whole_after_another_writer_appended_to_it() {
    let dir = tempdir();
    let store = one_open(dir.path());
    let (a, mut head_a) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    store
        .save_delta(a, &mut head_a, &[answer("first")])
        .unwrap();
    // Saving to B lets A go, with a hint at A's end.
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Another writer takes A meanwhile, appends past that end, and lets it
    // go unsynced too (so that no durable mark lies past the hint).
    let other = one_open(dir.path());
    let mut other_head = other.head(a).unwrap().unwrap();
    assert_eq!(other_head, head_a);
    other
        .save_delta(a, &mut other_head, &[answer("second"), answer("third")])
        .unwrap();
    other
        .create_session(None, RequestConfig::default(), &[Item::user_text("d")])
        .unwrap();
    // Reopened with the stale hint: the other writer's records are there,
    // chained, and the stale head is refused.
    let err = store
        .save_delta(a, &mut head_a, &[answer("stale")])
        .unwrap_err();
    assert!(matches!(err, Error::HeadMismatch { .. }), "{err}");
    assert_eq!(store.head(a).unwrap(), Some(other_head));
    let mut head = other_head;
    store.save_delta(a, &mut head, &[answer("fourth")]).unwrap();
    store.save_delta(b, &mut head_b, &[answer("b2")]).unwrap();
    let history = store.restore(a).unwrap().history;
    let words = ["first", "second", "third", "fourth"];
    let mut expected = vec![Item::user_text("a")];
    expected.extend(words.iter().map(|w| answer(w)));
    assert_eq!(history, as_given(&expected));
    assert!(store.verify(a).unwrap().damage.is_none());
    store.close().unwrap();
    other.close().unwrap();
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.restore(a).unwrap().history, as_given(&expected));
    assert!(reopened.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_release_hint_is_not_trusted_for_another_log_in_its_place() {
    let dir = tempdir();
    let store = one_open(dir.path());
    let (a, mut head_a) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    for n in 0..6 {
        store
            .save_delta(a, &mut head_a, &[answer(&format!("a{n}"))])
            .unwrap();
    }
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Another log takes the place of A's active segment while A is let go:
    // records of the same sizes as A's (so that one ends where A's hint
    // points) and then more.
    let elsewhere = tempdir();
    let other = Store::open_with(elsewhere.path(), options()).unwrap();
    let (c, mut head_c) = other
        .create_session(None, RequestConfig::default(), &[Item::user_text("c")])
        .unwrap();
    let mut expected = vec![Item::user_text("c")];
    for n in 0..9 {
        let item = answer(&format!("c{n}"));
        other
            .save_delta(c, &mut head_c, std::slice::from_ref(&item))
            .unwrap();
        expected.push(item);
    }
    // Copied while C's writer is open and has synced nothing: no durable
    // mark in it lies past A's hint, so only the hint could be trusted.
    let name = "00000000000000000000.seg";
    fs::copy(
        other.session_dir(c).join(name),
        store.session_dir(a).join(name),
    )
    .unwrap();
    drop(other);
    // A's reopen must read that log whole: a hint trusted for it would find
    // the record at its point with another hash, and cut there or fail.
    let state = store.restore(a).unwrap();
    assert_eq!(state.history, as_given(&expected));
    assert_eq!(store.head(a).unwrap(), Some(head_c));
    let mut head = head_c;
    store.save_delta(a, &mut head, &[answer("after")]).unwrap();
    assert!(store.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_released_session_reopens_past_its_durable_mark_without_a_sync() {
    let dir = tempdir();
    // A closed cleanly: its mark names its end.
    let first = Store::open(dir.path()).unwrap();
    let (a, mut head_a) = first
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    first
        .save_delta(a, &mut head_a, &[answer("synced")])
        .unwrap();
    first.close().unwrap();
    drop(first);
    let hook = Arc::new(SegSyncs::default());
    let log = LogOptions::default()
        .segment_size(SEGMENT_BYTES)
        .hook(hook.clone());
    let store = Store::open_with(dir.path(), options().log(log).max_open_sessions(1)).unwrap();
    // Records past that mark that only the page cache holds; then A is let
    // go, with a hint past its mark.
    store
        .save_delta(a, &mut head_a, &[answer("unsynced")])
        .unwrap();
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // A's reopen keeps the lagging mark, which the hint's scan still checks,
    // and syncs nothing: a Buffered save promises no durability.
    let before = hook.0.load(Ordering::SeqCst);
    store
        .save_delta(a, &mut head_a, &[answer("after")])
        .unwrap();
    assert_eq!(
        hook.0.load(Ordering::SeqCst) - before,
        0,
        "no fdatasync on the reopen"
    );
    let words = ["synced", "unsynced", "after"];
    let mut expected = vec![Item::user_text("a")];
    expected.extend(words.iter().map(|w| answer(w)));
    assert_eq!(store.restore(a).unwrap().history, as_given(&expected));
    store.close().unwrap();
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.restore(a).unwrap().history, as_given(&expected));
    assert!(reopened.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_released_sessions_hint_that_its_records_no_longer_bear_out_cuts_nothing() {
    let dir = tempdir();
    let root = dir.path();
    let (a, marked, session, kept) =
        engine::closed_session(root, &[Item::user_text("a"), answer("one")]);
    // This store lets A go with a hint at the end of "two A", past its mark.
    let store = Store::open_with(root, StoreOptions::default().max_open_sessions(1)).unwrap();
    let mut head_a = marked;
    store
        .save_delta(a, &mut head_a, &[answer("two A")])
        .unwrap();
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Meanwhile A's file goes back to its state at the mark, and another
    // writer appends a record of the same length where "two A" ended, then
    // stops as a crash stops it.
    engine::put_back(kept.path(), &session);
    let other = Store::open(root).unwrap();
    let mut head = marked;
    other.save_delta(a, &mut head, &[answer("two B")]).unwrap();
    other.abandon();
    assert_ne!(head, head_a);
    // The reopen with the stale hint reads the records as they are: nothing
    // is cut, and the save goes on from "two B".
    store.save_delta(a, &mut head, &[answer("three")]).unwrap();
    let expected = [
        Item::user_text("a"),
        answer("one"),
        answer("two B"),
        answer("three"),
    ];
    assert_eq!(store.restore(a).unwrap().history, as_given(&expected));
    assert!(store.verify(a).unwrap().damage.is_none());
    store.close().unwrap();
}
