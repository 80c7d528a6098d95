//! Guards the open-session budget's choice of what to close: the least
//! recently used session that no handle holds, also when eviction takes its
//! candidates from an earlier look over the shards. And the active-session
//! budget: past `max_active_sessions`, an idle open session is parked (its
//! catalog and sealed segments' files closed; its active segment's
//! descriptor, which holds its lock, its maps and state kept), and its next
//! save writes through that descriptor without reopening the log; what it
//! writes then is the same log, chained and durable as before.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use session_store::{EntryHash, Item, RequestConfig, SessionId, Store, StoreOptions};

/// Whether a writer has the session open (its `LOCK` is held).
fn is_open(store: &Store, id: SessionId) -> bool {
    let lock = File::open(store.session_dir(id).join("LOCK")).unwrap();
    matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
}

/// The files under `root` this process has open now.
fn open_files_under(root: &Path) -> BTreeSet<PathBuf> {
    let root = root.canonicalize().unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&root))
        .collect()
}

struct Sessions {
    root: PathBuf,
    store: Store,
    ids: Vec<SessionId>,
    heads: Vec<EntryHash>,
    /// Each session's items so far (its first, then one a save).
    turns: Vec<usize>,
}

impl Sessions {
    /// `n` sessions under a budget of `budget` open sessions.
    fn new(root: &Path, budget: usize, n: usize) -> Sessions {
        Sessions::with(root, StoreOptions::default().max_open_sessions(budget), n)
    }

    /// `n` sessions in a store that keeps all of them open and `active`
    /// of them active.
    fn parking(root: &Path, active: usize, n: usize) -> Sessions {
        let opts = StoreOptions::default()
            .max_open_sessions(1_000)
            .max_active_sessions(active);
        Sessions::with(root, opts, n)
    }

    fn with(root: &Path, opts: StoreOptions, n: usize) -> Sessions {
        let store = Store::open_with(root, opts).unwrap();
        let (ids, heads) = (0..n)
            .map(|i| {
                let first = [Item::user_text(format!("session {i}"))];
                store
                    .create_session(None, RequestConfig::default(), &first)
                    .unwrap()
            })
            .unzip();
        Sessions {
            root: root.canonicalize().unwrap(),
            store,
            ids,
            heads,
            turns: vec![1; n],
        }
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
        self.try_touch(i).unwrap();
    }

    fn try_touch(&mut self, i: usize) -> session_store::Result<()> {
        let text = format!("turn {} of {i}", self.turns[i]);
        let item = [Item::assistant_text(text)];
        self.store
            .save_delta(self.ids[i], &mut self.heads[i], &item)?;
        self.turns[i] += 1;
        Ok(())
    }

    /// The sessions the store holds active (open and not parked). Every
    /// open session, parked or not, holds one descriptor for its active
    /// segment, which holds its writer lock (`LOCK` names that segment);
    /// a parked one holds no other.
    fn with_files_open(&self) -> Vec<usize> {
        let open = open_files_under(&self.root);
        (0..self.ids.len())
            .filter(|&i| {
                let id = self.ids[i];
                let parked = match self.store.parked_state(id) {
                    None => return false,
                    Some(parked) => parked,
                };
                let dir = self.store.session_dir(id).canonicalize().unwrap();
                let held: Vec<&PathBuf> = open.iter().filter(|p| p.starts_with(&dir)).collect();
                assert!(!held.is_empty(), "session {i} holds its lock");
                if parked {
                    assert_eq!(held.len(), 1, "parked session {i} holds {held:?}");
                    let lock = fs::metadata(dir.join("LOCK")).unwrap().ino();
                    let kept = fs::metadata(held[0]).map(|m| m.ino());
                    // Opened through `LOCK`, or through the segment's name
                    // before `LOCK` was renamed to it.
                    assert!(
                        held[0].ends_with("LOCK") || kept.ok() == Some(lock),
                        "parked session {i} holds {held:?}, not its lock"
                    );
                }
                !parked
            })
            .collect()
    }

    /// Each session restores with every turn it was given, in order.
    fn check_all(&self, store: &Store) {
        for (i, id) in self.ids.iter().enumerate() {
            let history = store.restore(*id).unwrap().history;
            assert_eq!(history.len(), self.turns[i], "session {i}");
            for (t, item) in history.iter().enumerate().skip(1) {
                let text = serde_json::to_string(item).unwrap();
                assert!(
                    text.contains(&format!("turn {t} of {i}")),
                    "session {i}: {text}"
                );
            }
        }
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

#[test]
fn past_the_active_budget_idle_sessions_hold_only_their_lock() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::parking(dir.path(), 4, 12);
    for i in 0..12 {
        s.touch(i);
    }
    // The four most recently used keep their files; every session keeps
    // its lock.
    assert_eq!(s.with_files_open(), vec![8, 9, 10, 11]);
    assert!(s.ids.iter().all(|id| is_open(&s.store, *id)));
    // A parked session whose last use is older than the budget's worth of
    // uses (11 sessions were saved since) is saved through its files
    // opened for that save only: the active ones stay.
    s.touch(0);
    assert_eq!(s.with_files_open(), vec![8, 9, 10, 11]);
    // A second save within that window makes it active, and parks one of
    // the least recently used half of the active ones: a look keeps that
    // half as candidates, and one used after the look walked its shard (a
    // look can span several sheds) waits for the next look, so 8 or 9.
    s.touch(0);
    let active = s.with_files_open();
    assert_eq!(active.len(), 4, "{active:?}");
    assert!([0, 10, 11].iter().all(|i| active.contains(i)), "{active:?}");
    assert!(active.contains(&8) != active.contains(&9), "{active:?}");
    // Rounds over all of them: a round-robin over more sessions than the
    // budget saves each parked one once per round, and leaves the active
    // ones be; every save, parked or not, continues its log.
    for _ in 0..5 {
        for i in 0..12 {
            s.touch(i);
            assert_eq!(s.with_files_open(), active);
        }
    }
    s.check_all(&s.store);
    s.store.close().unwrap();
    // Closed cleanly, parked or not: a new store finds every turn, and
    // every log's chain checks.
    let again = Store::open(dir.path()).unwrap();
    for (i, id) in s.ids.iter().enumerate() {
        let report = again.verify(*id).unwrap();
        assert!(
            report.damage.is_none() && report.torn_tail.is_none(),
            "{id}"
        );
        assert_eq!(report.records, s.turns[i] as u64, "{id}");
    }
    s.check_all(&again);
}

#[test]
fn reading_a_parked_session_leaves_its_files_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::parking(dir.path(), 2, 6);
    for i in 0..6 {
        s.touch(i);
    }
    assert_eq!(s.with_files_open(), vec![4, 5]);
    // Restores, verifies and `list` of the parked ones open their files
    // only for the read.
    s.check_all(&s.store);
    for id in &s.ids {
        assert!(s.store.verify(*id).unwrap().damage.is_none());
    }
    assert_eq!(s.store.list().unwrap().len(), 6);
    assert_eq!(s.with_files_open(), vec![4, 5]);
}

/// A parked session's save writes through the descriptor it kept, its
/// active segment's, which holds its writer lock: a file renamed over the
/// segment's name meanwhile is not written (DESIGN.md, "Threat model").
#[test]
fn a_segment_replaced_while_its_session_is_parked_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sessions::parking(dir.path(), 1, 2);
    s.touch(0);
    s.touch(1);
    assert_eq!(s.with_files_open(), vec![1]);
    // Session 0 is parked: put a copy in place of its segment.
    let seg_dir = s.store.session_dir(s.ids[0]);
    let seg = fs::read_dir(&seg_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let copy = seg_dir.join("copy.tmp");
    fs::copy(&seg, &copy).unwrap();
    let before = fs::read(&copy).unwrap();
    fs::rename(&copy, &seg).unwrap();
    let own = fs::read(seg_dir.join("LOCK")).unwrap();
    s.try_touch(0).unwrap();
    // Nothing was written into the file that took the name; the session's
    // own file, which `LOCK` names, took the save.
    assert_eq!(fs::read(&seg).unwrap(), before);
    assert_ne!(fs::read(seg_dir.join("LOCK")).unwrap(), own);
    s.check_all(&s.store);
}

/// A parked session of a store that syncs holds no next segment prepared
/// ahead either (its own descriptor): the park removes it, and the next
/// append past half the active segment prepares another.
#[test]
fn a_parked_session_keeps_no_segment_prepared_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let log = session_store::LogOptions::default()
        .segment_size(64 << 10)
        .initial_segment_size(64 << 10)
        .durability(session_store::Durability::Sync);
    let opts = StoreOptions::default()
        .log(log)
        .payload_threshold(usize::MAX)
        .max_open_sessions(10)
        .max_active_sessions(1);
    let mut s = Sessions::with(dir.path(), opts, 2);
    let prepared = |s: &Sessions| {
        open_files_under(&s.root)
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "prep"))
    };
    for _ in 0..8 {
        let item = [Item::assistant_text("x".repeat(5_000))];
        s.store
            .save_delta(s.ids[0], &mut s.heads[0], &item)
            .unwrap();
    }
    // The preparation runs on a thread of its own: a park leaves one that
    // has not finished to the next roll.
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(prepared(&s), "session 0 is past half its segment");
    // Twice: the first save of a session parked longer than the budget's
    // worth of uses leaves it parked.
    s.touch(1);
    assert_eq!(s.with_files_open(), vec![0]);
    s.touch(1);
    assert_eq!(s.with_files_open(), vec![1]);
    assert!(!prepared(&s));
    // A save that leaves it parked (its last use is three uses ago, past
    // the budget of one) prepares none, though it is past half its
    // segment: the preparation would outlive the save, a descriptor and
    // 64 KiB of disk for a session that keeps none.
    let item = [Item::assistant_text("z".repeat(5_000))];
    s.store
        .save_delta(s.ids[0], &mut s.heads[0], &item)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(s.with_files_open(), vec![1]);
    assert!(
        !prepared(&s),
        "a save of a parked session prepared a segment"
    );
    // Unparked at its next save (within the window), it rolls and goes on.
    for _ in 0..16 {
        let item = [Item::assistant_text("y".repeat(5_000))];
        s.store
            .save_delta(s.ids[0], &mut s.heads[0], &item)
            .unwrap();
    }
    let report = s.store.verify(s.ids[0]).unwrap();
    assert!(report.damage.is_none() && report.segments > 1);
}
