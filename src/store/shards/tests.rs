use std::sync::Barrier;

use super::*;
use crate::{EntryHash, Item, RequestConfig, StoreOptions};

/// A store in a new directory with these budgets of open and active
/// sessions.
fn store_with_budgets(open: usize, active: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default()
        .max_open_sessions(open)
        .max_active_sessions(active);
    let store = Store::open_with(dir.path(), opts).unwrap();
    (dir, store)
}

/// Creates `n` sessions, each with one user message; returns their ids and
/// heads.
fn create_sessions(store: &Store, n: usize) -> Vec<(SessionId, EntryHash)> {
    (0..n)
        .map(|i| {
            let first = [Item::user_text(format!("session {i}"))];
            let created = store.create_session(None, RequestConfig::default(), &first);
            created.unwrap()
        })
        .collect()
}

/// Creates `n` sessions as [`create_sessions`] does; returns their ids.
fn create_ids(store: &Store, n: usize) -> Vec<SessionId> {
    create_sessions(store, n).into_iter().map(|s| s.0).collect()
}

/// Sheds running at once (as after `EMFILE` on several threads) each
/// get their sessions: one whose candidates another took looks again,
/// rather than returning with nothing shed while idle sessions remain
/// (an early version did, in 28 of 240 calls of this shape).
#[test]
fn concurrent_sheds_each_reach_their_target() {
    let shm = std::path::Path::new("/dev/shm");
    let dir = match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let opts = StoreOptions::default().max_open_sessions(100_000);
    let store = Store::open_with(dir.path(), opts).unwrap();
    let ids: Vec<SessionId> = create_ids(&store, 400);
    const THREADS: usize = 6;
    for round in 0..20 {
        let barrier = Barrier::new(THREADS);
        let calls: Vec<(usize, usize, usize)> = std::thread::scope(|scope| {
            let shedders: Vec<_> = (0..THREADS)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        let target = store.inner.open_count.load(Ordering::Acquire) / 2;
                        let taken = store.evict_down_to(target, None);
                        let open = store.inner.open_count.load(Ordering::Acquire);
                        let n = taken.len();
                        for (slot, s) in taken {
                            store.close_sessions(slot, vec![s], Closing::Evict).unwrap();
                        }
                        (target, n, open)
                    })
                })
                .collect();
            shedders.into_iter().map(|s| s.join().unwrap()).collect()
        });
        for (target, n, open) in calls {
            assert!(
                n > 0 || open <= target,
                "round {round}: a shed took nothing and left {open} open, over its target {target}"
            );
        }
        for id in &ids {
            store.session(*id).unwrap();
        }
    }
    store.close().unwrap();
}

/// Whether every file of an open session is parked (`true`) or none is
/// (`false`); `None` for a mix.
fn files_parked(s: &OpenSession) -> Option<bool> {
    assert_eq!(
        s.log.is_parked(),
        s.parked,
        "the log's flag and the shard's disagree"
    );
    // The active segment's descriptor holds the writer lock, `LOCK`
    // being a second name of it, and stays open parked or not.
    assert!(s.log.holds_lock_in_segment(), "the lock is in the segment");
    let mut states = s.log.files_parked();
    let catalog = s.catalog.parkable();
    states.push((catalog.is_parked(), catalog.is_parked_beneath()));
    // The store parks them beneath its `sessions/`, to reopen by `openat`.
    assert!(
        states.iter().all(|&(parked, beneath)| parked == beneath),
        "a file parked by the store reopens beneath sessions/"
    );
    let all = states.iter().all(|&(p, _)| p);
    (all || states.iter().all(|&(p, _)| !p)).then_some(all)
}

/// Under concurrent saves, syncs, reads, handles taken and dropped, a
/// shed and deletions, with sessions rolling their segments, the counts
/// agree with the shards: `open_count` with the sessions in them,
/// `active_count` with those not flagged parked; a parked session has
/// every file parked and an active one none; and every session reopens
/// with its head and verifies.
fn counts_agree_with_the_shards(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let log = crate::LogOptions::default()
        .segment_size(16 << 10)
        .initial_segment_size(8 << 10)
        .durability(durability);
    let opts = StoreOptions::default()
        .log(log)
        .payload_threshold(usize::MAX)
        .max_open_sessions(24)
        .max_active_sessions(6);
    let store = Store::open_with(dir.path(), opts).unwrap();
    let n = 40;
    let sessions: Vec<(SessionId, Mutex<Option<EntryHash>>)> = create_sessions(&store, n)
        .into_iter()
        .map(|(id, head)| (id, Mutex::new(Some(head))))
        .collect();
    const THREADS: u64 = 4;
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (store, sessions, barrier) = (&store, &sessions, &barrier);
            scope.spawn(move || {
                barrier.wait();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                for step in 0..1500 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (id, head) = &sessions[(x % n as u64) as usize];
                    match (x >> 32) % 10 {
                        0 => drop(store.sync(*id)),
                        1 => drop(store.snapshot(*id)),
                        2 if t == 1 && step == 399 => drop(store.shed_open_sessions()),
                        3 if t == 0 && step % 100 == 99 => {
                            let mut h = head.lock();
                            if h.is_some() && store.delete(*id).is_ok() {
                                *h = None;
                            }
                        }
                        4 => {
                            let held = store.session(*id);
                            std::thread::yield_now();
                            drop(held);
                        }
                        _ => {
                            let mut h = head.lock();
                            if let Some(head) = h.as_mut() {
                                let text =
                                    format!("{t}/{step} {}", "z".repeat((x % 3000) as usize));
                                let item = [Item::assistant_text(text)];
                                store.save_delta(*id, head, &item).unwrap();
                            }
                        }
                    }
                }
            });
        }
    });
    let (mut open, mut active) = (0, 0);
    for shard in &store.inner.shards {
        for s in shard.lock().open.values() {
            open += 1;
            active += usize::from(!s.parked);
            assert_eq!(files_parked(s), Some(s.parked), "flag and files disagree");
        }
    }
    assert_eq!(open, store.inner.open_count.load(Ordering::Acquire));
    assert_eq!(active, store.inner.active_count.load(Ordering::Acquire));
    assert!(active <= 6, "{active} active, budget 6");
    store.close().unwrap();
    assert_eq!(store.inner.open_count.load(Ordering::Acquire), 0);
    assert_eq!(store.inner.active_count.load(Ordering::Acquire), 0);
    drop(store);
    let again = Store::open(dir.path()).unwrap();
    for (id, head) in &sessions {
        if let Some(h) = *head.lock() {
            assert_eq!(again.head(*id).unwrap(), Some(h));
            let report = again.verify(*id).unwrap();
            assert!(
                report.damage.is_none() && report.torn_tail.is_none(),
                "{id}"
            );
        }
    }
}

#[test]
fn counts_agree_with_the_shards_on_a_buffered_store() {
    counts_agree_with_the_shards(Durability::Buffered);
}

#[test]
fn counts_agree_with_the_shards_on_a_sync_store() {
    counts_agree_with_the_shards(Durability::Sync);
}

/// Whether a session is open here and parked.
fn is_parked(store: &Store, id: SessionId) -> bool {
    let shard = store.shard(id).lock();
    shard.open.get(&id).expect("open").parked
}

/// A look keeps the least recently used active sessions as candidates
/// without asking whether a handle holds them; when all it kept are held,
/// the shed looks again past the held ones, so the idle session is parked
/// rather than the store staying over its budget with one to spare.
#[test]
fn sessions_held_among_the_oldest_do_not_stop_a_park() {
    let (_dir, store) = store_with_budgets(100, 4);
    let ids: Vec<SessionId> = create_ids(&store, 8);
    // The four oldest in use, held by handles.
    let held: Vec<SessionHandle> = ids[..4]
        .iter()
        .map(|id| store.session(*id).unwrap())
        .collect();
    for id in &ids[4..8] {
        drop(store.session(*id).unwrap());
    }
    for (i, id) in ids.iter().enumerate() {
        let expected = (4..7).contains(&i);
        assert_eq!(is_parked(&store, *id), expected, "session {i}");
    }
    assert_eq!(store.inner.active_count.load(Ordering::Acquire), 5);
    drop(held);
    // Idle again, the held ones are parked down to the budget at the next
    // unpark.
    drop(store.session(ids[4]).unwrap());
    assert_eq!(store.inner.active_count.load(Ordering::Acquire), 4);
    store.close().unwrap();
}

/// With the next look walking a shard a pop, parks over many sessions
/// taken round-robin keep the active sessions within the budget, never
/// park the session just taken, and park the least recently used: what
/// stays active was taken lately. (A handle kept makes a parked session
/// active whenever it was last used; a save leaves one used long ago
/// parked, as the next test shows.)
#[test]
fn parks_spread_over_many_looks_keep_the_budget_and_the_newest() {
    // Twice the look-ahead: each look keeps the older half of the active
    // sessions, so every look after the first is spread over the pops.
    // About 640 descriptors in all, under the common limit of 1,024.
    const ACTIVE: usize = 2 * LOOK_AHEAD;
    let (_dir, store) = store_with_budgets(10_000, ACTIVE);
    let ids: Vec<SessionId> = create_ids(&store, 3 * ACTIVE);
    // Each session's place in the order of uses.
    let mut saved_at = vec![0usize; ids.len()];
    let mut saves = 0;
    for round in 0..3 {
        for (i, id) in ids.iter().enumerate() {
            drop(store.session(*id).unwrap());
            saves += 1;
            saved_at[i] = saves;
            let active = store.inner.active_count.load(Ordering::Acquire);
            assert!(active <= ACTIVE, "{active} active, budget {ACTIVE}");
            assert!(!is_parked(&store, *id), "the session just saved is active");
            // Least recently used first: what is still active was saved
            // within the last budget's worth of saves (and a little more:
            // a look's candidates are the least recently used when it
            // walked their shards).
            for (j, other) in ids.iter().enumerate() {
                let age = saves - saved_at[j];
                assert!(
                    is_parked(&store, *other) || age < ACTIVE + ACTIVE / 8,
                    "round {round}, after session {i}: session {j}, saved {age} saves ago, still active"
                );
            }
        }
    }
    store.close().unwrap();
}

/// Saves round-robin over more sessions than the active budget leave the
/// active ones active (each parked one was last used a round ago, longer
/// than the budget's worth of uses) and park none: each save of a parked
/// session opens its files for that save and closes them after, so the
/// flags and the files agree and the budget holds after every save. With
/// plain least recently used, every save would unpark one and park
/// another. A parked session saved twice within the window is active.
#[test]
fn saves_round_robin_past_the_budget_leave_the_active_sessions_be() {
    const ACTIVE: usize = 8;
    let (_dir, store) = store_with_budgets(1_000, ACTIVE);
    let mut sessions = create_sessions(&store, 4 * ACTIVE);
    let active_set = |store: &Store| -> Vec<SessionId> {
        let mut active: Vec<SessionId> = Vec::new();
        for shard in &store.inner.shards {
            for (id, s) in shard.lock().open.iter() {
                assert_eq!(files_parked(s), Some(s.parked), "flag and files disagree");
                if !s.parked {
                    active.push(*id);
                }
            }
        }
        active.sort_unstable();
        active
    };
    // The newest sessions, active since their creation.
    let first = active_set(&store);
    assert_eq!(first.len(), ACTIVE);
    for round in 0..3 {
        for (i, (id, head)) in sessions.iter_mut().enumerate() {
            let item = [Item::assistant_text(format!("round {round} of {i}"))];
            store.save_delta(*id, head, &item).unwrap();
            assert_eq!(
                active_set(&store),
                first,
                "round {round}, after session {i}"
            );
        }
    }
    // Twice in a row: the second save makes it active.
    let (id, head) = &mut sessions[0];
    assert!(is_parked(&store, *id));
    for turn in 0..2 {
        let item = [Item::assistant_text(format!("again {turn}"))];
        store.save_delta(*id, head, &item).unwrap();
    }
    assert!(!is_parked(&store, *id));
    assert_eq!(active_set(&store).len(), ACTIVE);
    let heads: Vec<(SessionId, EntryHash)> = sessions.clone();
    store.close().unwrap();
    drop(store);
    let again = Store::open(_dir.path()).unwrap();
    for (id, head) in heads {
        assert_eq!(again.head(id).unwrap(), Some(head));
        assert!(again.verify(id).unwrap().damage.is_none(), "{id}");
    }
}

/// A handle taken while a save uses a parked session once makes it
/// active, and the save's guard then leaves its files open: the flag and
/// the files agree either way the two end.
#[test]
fn a_session_made_active_during_a_save_that_leaves_it_parked_stays_active() {
    let (_dir, store) = store_with_budgets(100, 2);
    let ids: Vec<SessionId> = create_ids(&store, 6);
    let agree = |store: &Store, id: SessionId| {
        let shard = store.shard(id).lock();
        let s = shard.open.get(&id).unwrap();
        assert_eq!(files_parked(s), Some(s.parked), "flag and files disagree");
        s.parked
    };
    for kept_first in [false, true] {
        // Session 0 parked, its last use long ago.
        for id in &ids[2..] {
            drop(store.session(*id).unwrap());
        }
        assert!(agree(&store, ids[0]));
        let once = store.session_for_one_use(ids[0]).unwrap();
        assert!(once.parked, "the first use of a session parked long ago");
        let kept = store.session(ids[0]).unwrap();
        match kept_first {
            true => drop((kept, once)),
            false => drop((once, kept)),
        }
        assert!(!agree(&store, ids[0]), "made active by the handle");
        drop(store.session(ids[1]).unwrap());
        drop(store.session(ids[2]).unwrap());
    }
    store.close().unwrap();
}

/// With most sessions held by handles, the parks that taking one more
/// handle asks for end (over the budget, nothing idle to park) rather than
/// spin: a version whose looks finished every 16 pops, each finding 17 or
/// more held candidates, never returned from the 35th `session` here.
#[test]
fn a_shed_among_many_held_sessions_ends() {
    let (_dir, store) = store_with_budgets(1_000, 4);
    let ids: Vec<SessionId> = create_ids(&store, 40);
    let (done, finished) = std::sync::mpsc::channel();
    // Not scoped: a shed that spins is left behind, and the test fails.
    let (store2, ids2) = (store.clone(), ids.clone());
    std::thread::spawn(move || {
        let held: Vec<SessionHandle> = ids2.iter().map(|id| store2.session(*id).unwrap()).collect();
        let active = store2.inner.active_count.load(Ordering::Acquire);
        let _ = done.send(active);
        drop(held);
    });
    let active = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("taking a handle of each of 40 sessions did not end");
    assert_eq!(active, 40, "every held session stays active");
    store.close().unwrap();
}
