//! Guards the open-session budget's choice of what to close: the least
//! recently used session that no handle holds, also when eviction takes its
//! candidates from an earlier look over the shards.

use std::fs::{self, File};
use std::path::Path;

use session_store::{EntryHash, Item, RequestConfig, SessionId, Store, StoreOptions};

/// Whether a writer has the session open (its `LOCK` is held).
fn is_open(store: &Store, id: SessionId) -> bool {
    let lock = File::open(store.session_dir(id).join("LOCK")).unwrap();
    matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
}

struct Sessions {
    store: Store,
    ids: Vec<SessionId>,
    heads: Vec<EntryHash>,
}

impl Sessions {
    fn new(root: &Path, budget: usize, n: usize) -> Sessions {
        let store =
            Store::open_with(root, StoreOptions::default().max_open_sessions(budget)).unwrap();
        let (ids, heads) = (0..n)
            .map(|i| {
                let first = [Item::user_text(format!("session {i}"))];
                store
                    .create_session(None, RequestConfig::default(), &first)
                    .unwrap()
            })
            .unzip();
        Sessions { store, ids, heads }
    }

    /// `n` sessions under a budget of 64, a look's worth of candidates
    /// being 4, with sessions 0 to 63 open and saved to in that order (0
    /// the least recently used).
    fn at_budget_of_64(root: &Path, n: usize) -> Sessions {
        let mut s = Sessions::new(root, 64, n);
        for i in 0..64 {
            s.touch(i);
        }
        s
    }

    /// A save to session `i`: opens it if it is closed, and makes it the
    /// most recently used.
    fn touch(&mut self, i: usize) {
        let item = [Item::assistant_text(format!("turn of {i}"))];
        self.store
            .save_delta(self.ids[i], &mut self.heads[i], &item)
            .unwrap();
    }

    fn open(&self) -> Vec<usize> {
        (0..self.ids.len())
            .filter(|&i| is_open(&self.store, self.ids[i]))
            .collect()
    }
}

#[test]
fn eviction_closes_the_least_recently_used_sessions_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // A look keeps 4 candidates, so that the later evictions come from the
    // queue of an earlier look.
    let mut s = Sessions::at_budget_of_64(dir.path(), 80);
    assert_eq!(s.open(), (0..64).collect::<Vec<_>>());
    // Sessions 0..10 become the most recent: 10, 11, 12, … are the oldest.
    for i in 0..10 {
        s.touch(i);
    }
    s.touch(64);
    let expected: Vec<usize> = (0..10).chain(11..65).collect();
    assert_eq!(s.open(), expected, "session 10 was the least recently used");
    // Session 11 is the next candidate of the look that chose 10; used
    // again, it is passed over for 12.
    s.touch(11);
    s.touch(65);
    let expected: Vec<usize> = (0..10).chain([11]).chain(13..66).collect();
    assert_eq!(s.open(), expected, "session 12 was the least recently used");
    // The queue runs out (13 and the look's last) and a new look follows:
    // evictions go on in order, and every session still restores.
    for i in 66..80 {
        s.touch(i);
    }
    let expected: Vec<usize> = (0..10).chain([11]).chain(27..80).collect();
    assert_eq!(s.open(), expected);
    for (i, id) in s.ids.iter().enumerate() {
        let history = s.store.restore(*id).unwrap().history;
        assert_eq!(history[0], Item::user_text(format!("session {i}")));
    }
}

#[test]
fn a_candidate_held_by_a_handle_is_passed_over_and_never_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::at_budget_of_64(dir.path(), 70);
    // Session 0, the least recently used, is held: its log stays open.
    let held = s.store.read_log(s.ids[0]).unwrap();
    for i in 64..70 {
        s.touch(i);
    }
    let expected: Vec<usize> = [0].into_iter().chain(7..70).collect();
    assert_eq!(s.open(), expected, "the held session stays open");
    assert!(held.snapshot().next_seq() > 0);
    // Let go, it is a candidate again from the next look on, which comes
    // within a look's worth of evictions (at most four here).
    drop(held);
    for i in 1..5 {
        s.touch(i);
    }
    let open = s.open();
    assert_eq!(open.len(), 64);
    assert!(
        !open.contains(&0),
        "the oldest is closed once let go: {open:?}"
    );
    assert!((1..5).all(|i| open.contains(&i)));
}

#[test]
fn a_candidate_held_when_its_turn_comes_is_passed_over_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::at_budget_of_64(dir.path(), 80);
    // This open looks (candidates 0 to 3, the oldest) and closes 0.
    s.touch(64);
    assert!(!s.open().contains(&0));
    // Session 1, the next candidate, is held when its turn comes: a read
    // does not make it recent, and the eviction takes 2 instead.
    let held = s.store.read_log(s.ids[1]).unwrap();
    s.touch(65);
    let open = s.open();
    assert!(open.contains(&1), "the held candidate stays open");
    assert!(!open.contains(&2), "the next candidate is closed: {open:?}");
    assert_eq!(open.len(), 64);
    drop(held);
}

#[test]
fn a_store_over_budget_with_every_session_held_opens_the_next_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::new(dir.path(), 2, 5);
    // Each open passes the budget with every other session held: no look
    // finds a candidate, so none is closed and the open returns (a look
    // that kept a held session would retry it for ever).
    let held: Vec<_> = s.ids[..4]
        .iter()
        .map(|id| s.store.log(*id).unwrap())
        .collect();
    assert_eq!(s.open(), vec![0, 1, 2, 3]);
    drop(held);
    // Let go, they are closed down to the budget at the next open.
    s.touch(4);
    let open = s.open();
    assert_eq!(open.len(), 2, "{open:?}");
    assert!(open.contains(&4));
}
