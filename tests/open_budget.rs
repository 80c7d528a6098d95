//! Guards the open-session budget's choice of what to close: the least
//! recently used session that no handle holds, also when eviction takes its
//! candidates from an earlier look over the shards. And the active-session
//! budget: past `max_active_sessions`, an idle open session is parked (its
//! catalog and sealed segments' files closed; its active segment's
//! descriptor, which holds its lock, its maps and state kept), and its next
//! save writes through that descriptor without reopening the log; what it
//! writes then is the same log, chained and durable as before. The budget
//! holds exactly whatever the shards, keeps sessions within it open, follows
//! the process's open-file limit by default, and running out of file
//! descriptors closes idle sessions rather than failing a save or creation.

mod common;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::store::{answer, as_given, numbered_sessions, open, options, tempdir};
use session_store::{
    log::IoHook, log::IoOp, EntryHash, Error, Item, LogOptions, RequestConfig, SessionId, Store,
    StoreOptions,
};

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
/// ahead either (its own descriptor). A store's `Sync` commits go through
/// its journal, so its segments are sparse and made at the roll, never
/// ahead: none is there before the park, nor after it, and the session
/// rolls and goes on once unparked.
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
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        !prepared(&s),
        "a journaled session prepared a segment ahead"
    );
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

#[test]
fn the_open_log_budget_holds_exactly_when_it_is_not_a_multiple_of_the_shards() {
    for max_open in [1, 3, 5, 17] {
        let dir = tempdir();
        let store = Store::open_with(dir.path(), options().max_open_sessions(max_open)).unwrap();
        let ids: Vec<SessionId> = (0..40)
            .map(|i| {
                let text = format!("session {i}");
                store
                    .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
                    .unwrap()
                    .0
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let history = store.restore(*id).unwrap().history;
            assert_eq!(history, vec![Item::user_text(format!("session {i}"))]);
        }
        let locked = ids
            .iter()
            .filter(|id| {
                let lock = File::open(store.session_dir(**id).join("LOCK")).unwrap();
                matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
            })
            .count();
        assert!(
            (1..=max_open).contains(&locked),
            "{locked} logs open, budget {max_open}"
        );
    }
}

/// Counts the writer opens of session logs (each creates its directory if
/// missing, which the hook sees even when it exists).
#[derive(Default)]
struct CountOpens(std::sync::atomic::AtomicUsize);

impl IoHook for CountOpens {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if let IoOp::CreateDir { path } = op {
            if path.parent().is_some_and(|p| p.ends_with("sessions")) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

#[test]
fn sessions_within_the_open_budget_stay_open_however_they_spread_over_shards() {
    let dir = tempdir();
    let hook = Arc::new(CountOpens::default());
    let store = Store::open_with(
        dir.path(),
        options()
            .log(LogOptions::default().hook(hook.clone()))
            .max_open_sessions(20),
    )
    .unwrap();
    // Twenty sessions in one shard (the store shards by the id's last byte).
    let mut sessions: Vec<(SessionId, EntryHash)> = (0..20u8)
        .map(|i| {
            let mut id = SessionId::new_v7();
            id.0[15] = 7;
            id.0[14] = i;
            let head = store
                .create_session_with_id(id, None, RequestConfig::default(), &[])
                .unwrap();
            (id, head)
        })
        .collect();
    let opened = hook.0.load(Ordering::SeqCst);
    for round in 0..3 {
        for (id, head) in &mut sessions {
            store
                .save_delta(*id, head, &[Item::user_text(format!("round {round}"))])
                .unwrap();
        }
    }
    assert_eq!(
        hook.0.load(Ordering::SeqCst),
        opened,
        "sessions were closed and reopened within the budget"
    );
    // One more session than the budget: the least recently used one goes.
    let (extra, _) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let locked = |id: SessionId| {
        let lock = File::open(store.session_dir(id).join("LOCK")).unwrap();
        matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
    };
    assert!(locked(extra));
    assert!(
        !locked(sessions[0].0),
        "the least recently used session stayed open"
    );
    let open = sessions.iter().filter(|(id, _)| locked(*id)).count();
    assert_eq!(open, 19);
}

/// The default open-log budget follows the process's open-file limit, so
/// that a store with default options never runs the process out of file
/// descriptors: under a soft limit of 200, 300 sessions saved round-robin
/// all restore (a fixed budget of 256 sessions, three descriptors each,
/// fails with "too many open files"), and a higher limit gives a budget
/// that holds more sessions than the old 256.
#[test]
fn the_default_open_budget_keeps_the_process_under_its_file_limit() {
    if let Ok(root) = std::env::var("OPEN_BUDGET_CHILD") {
        assert_eq!(session_store::store::default_max_open_sessions(), 100);
        assert_eq!(session_store::store::default_max_active_sessions(), 25);
        many_sessions_round_robin(Path::new(&root), StoreOptions::default(), 300);
        return;
    }
    use session_store::{store::active_budget_for, store::open_budget_for};
    // Three quarters of the limit: half for the active sessions (three
    // descriptors each), half for the parked ones' locks.
    assert_eq!(open_budget_for(Some(1024)), 512);
    assert_eq!(active_budget_for(Some(1024)), 128);
    assert_eq!(open_budget_for(Some(20_000)), 10_000);
    assert_eq!(active_budget_for(Some(20_000)), 2_500);
    assert_eq!(open_budget_for(Some(200)), 100);
    assert_eq!(active_budget_for(Some(200)), 25);
    assert_eq!(open_budget_for(Some(20)), 16);
    assert_eq!(active_budget_for(Some(20)), 16);
    assert_eq!(open_budget_for(Some(u64::MAX)), 16_384);
    assert_eq!(active_budget_for(Some(u64::MAX)), 16_384);
    assert_eq!(open_budget_for(None), 256);
    assert_eq!(active_budget_for(None), 64);

    run_under_file_limit(
        "the_default_open_budget_keeps_the_process_under_its_file_limit",
        "OPEN_BUDGET_CHILD",
        200,
    );
}

/// Creates, saves to round-robin and restores `sessions` sessions of a
/// store at `root` opened with `options`.
fn many_sessions_round_robin(root: &Path, options: StoreOptions, sessions: usize) {
    let store = Store::open_with(root, options).unwrap();
    let mut all = Vec::new();
    for s in 0..sessions {
        let initial = vec![Item::user_text(format!("session {s}"))];
        let (id, head) = store
            .create_session(None, RequestConfig::default(), &initial)
            .unwrap();
        all.push((id, head, initial));
    }
    for round in 0..3 {
        for (id, head, expected) in all.iter_mut() {
            let delta = vec![answer(&format!("round {round}"))];
            store.save_delta(*id, head, &delta).unwrap();
            expected.extend(as_given(&delta));
        }
    }
    for (id, head, expected) in &all {
        let state = store.restore(*id).unwrap();
        assert_eq!(&state.history, expected, "session {id}");
        assert_eq!(state.head, Some(*head));
    }
    store.close().unwrap();
}

/// Runs this binary's test `test` in a child under `ulimit -n <limit>`,
/// with `env` naming a fresh directory; asserts that it passed.
fn run_under_file_limit(test: &str, env: &str, limit: u32) {
    let dir = tempdir();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" --exact \"$1\" --nocapture --test-threads=1"
        ))
        .arg(std::env::current_exe().unwrap())
        .arg(test)
        .env(env, dir.path())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{test} under `ulimit -n {limit}`: {status}"
    );
}

/// A budget set above what the process may open does not fail the store:
/// an open that runs out of file descriptors closes the idle sessions and
/// tries again (under `ulimit -n 64`, 100 sessions with a budget of 10,000
/// fail with "too many open files" without it). Where the process runs out
/// moves with the limit, so the test runs under limits from 30 to 72: a
/// read-only open or a session's reopen that takes the out-of-descriptors
/// error of a pending creation's log for its torn remains ("its creation
/// never finished") fails under a third of them.
#[test]
fn running_out_of_file_descriptors_closes_idle_sessions_and_goes_on() {
    if let Ok(root) = std::env::var("SHED_CHILD") {
        many_sessions_round_robin(Path::new(&root), options().max_open_sessions(10_000), 100);
        return;
    }
    for limit in (30..=72).step_by(3) {
        run_under_file_limit(
            "running_out_of_file_descriptors_closes_idle_sessions_and_goes_on",
            "SHED_CHILD",
            limit,
        );
    }
}

/// Running out of file descriptors with parked sessions open: the shed
/// parks idle active sessions first (two descriptors each, no open), so
/// that the parked sessions it then closes can open their files again for
/// their last writes. Closing parked sessions first, with no descriptor
/// left, failed their catalogs' writes, and `Store::close` reported it.
#[test]
fn running_out_of_file_descriptors_with_parked_sessions_fails_nothing() {
    if let Ok(root) = std::env::var("PARKED_SHED_CHILD") {
        let opts = options().max_open_sessions(1_000).max_active_sessions(2);
        let store = Store::open_with(Path::new(&root), opts).unwrap();
        let mut sessions = numbered_sessions(&store, 8);
        for (i, (id, head)) in sessions.iter_mut().enumerate() {
            let item = [Item::assistant_text(format!("turn of {i}"))];
            store.save_delta(*id, head, &item).unwrap();
        }
        // Every descriptor left taken: the creation meets `EMFILE`.
        let mut hog = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            hog.push(f);
        }
        let (new, _) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        drop(hog);
        store.close().unwrap();
        let again = Store::open(Path::new(&root)).unwrap();
        for (id, head) in sessions.iter().chain([(new, EntryHash::default())].iter()) {
            let report = again.verify(*id).unwrap();
            assert!(report.damage.is_none(), "{id}");
            if *id != new {
                assert_eq!(again.head(*id).unwrap(), Some(*head));
            }
        }
        return;
    }
    run_under_file_limit(
        "running_out_of_file_descriptors_with_parked_sessions_fails_nothing",
        "PARKED_SHED_CHILD",
        64,
    );
}

/// A session whose creation is not durable yet (a `Buffered` store has
/// not synced it) is no torn creation because the process could not open
/// its log: a creation of its id that runs out of file descriptors there
/// refuses, and the session keeps its history (the store once took it for
/// a creation's leftover, cleared it and created the id anew).
#[test]
fn a_creation_out_of_file_descriptors_leaves_a_pending_session_alone() {
    if let Ok(root) = std::env::var("PENDING_CHILD") {
        let store = Store::open_with(Path::new(&root), options().max_open_sessions(1)).unwrap();
        let history = vec![Item::user_text("keep me")];
        let (id, _) = store
            .create_session(None, RequestConfig::default(), &history)
            .unwrap();
        // The second session evicts the first, unsynced: still pending.
        let (other, _) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        assert!(store.session_dir(id).join("CREATING").exists());
        // Every descriptor but one taken: the claim's lock gets it, the
        // look at what the directory holds runs out.
        let mut held = Vec::new();
        while let Ok(f) = File::open("/dev/null") {
            held.push(f);
        }
        held.pop();
        let refused = store.create_session_with_id(id, None, RequestConfig::default(), &[]);
        drop(held);
        let err = refused.expect_err("the id is a session's");
        assert!(
            matches!(err, Error::InvalidInput { .. }) || err.is_out_of_descriptors(),
            "{err}"
        );
        assert_eq!(store.restore(id).unwrap().history, history);
        assert!(store.restore(other).unwrap().history.is_empty());
        store.close().unwrap();
        assert_eq!(open(Path::new(&root)).restore(id).unwrap().history, history);
        return;
    }
    run_under_file_limit(
        "a_creation_out_of_file_descriptors_leaves_a_pending_session_alone",
        "PENDING_CHILD",
        256,
    );
}
