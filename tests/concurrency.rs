//! Guards against readers seeing a torn or inconsistent log while the writer
//! appends and rolls, against `Sync` appends that return before they are
//! durable or go missing under contention, and against waiters never woken;
//! and, through the store, against threads whose sessions mix up or lose
//! entries, and a slow open that holds up its shard or a second caller.

mod common;
mod engine;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::store::{answer, as_given, call, open, options, result, tempdir};
use engine::{entry, opts, read_all};
use session_store::{
    log::IoHook, log::IoOp, Durability, EntryHash, Item, Log, LogOptions, RequestConfig, SessionId,
    Store, StoreOptions,
};

/// Text size of entry `i`: mostly small, now and then larger than a segment.
fn size(i: u64) -> usize {
    if i % 97 == 50 {
        20_000
    } else {
        (i as usize * 131) % 1500
    }
}

/// Everything one reader pass checks; returns the (seq, hash, prev_hash) seen.
fn read_pass(log: &Log, round: u64) -> Vec<(u64, EntryHash, EntryHash)> {
    let snap = log.snapshot();
    let next = snap.next_seq();
    let from = (round * 7919) % (next + 1);
    let mut seen = Vec::new();
    let mut expect = from;
    let mut prev: Option<EntryHash> = None;
    for rec in snap.iter_from(from) {
        let rec = rec.unwrap_or_else(|e| panic!("read error at seq {expect}: {e}"));
        assert_eq!(rec.seq, expect, "seqs are contiguous");
        if let Some(p) = prev {
            assert_eq!(rec.prev_hash, p, "seq {} does not chain", rec.seq);
        } else if rec.seq == 0 {
            assert_eq!(rec.prev_hash, EntryHash::genesis());
        }
        assert_eq!(
            rec.entry().to_entry(),
            entry(rec.seq, size(rec.seq)),
            "seq {} is not the record written",
            rec.seq
        );
        seen.push((rec.seq, rec.hash, rec.prev_hash));
        prev = Some(rec.hash);
        expect += 1;
    }
    assert_eq!(expect, next, "the snapshot's records end at its next_seq");
    if let Some(p) = prev {
        assert_eq!(snap.head(), Some((next - 1, p)));
    }
    if round.is_multiple_of(16) {
        let v = snap.verify();
        assert_eq!((v.damage, v.records), (None, next));
    }
    seen
}

#[test]
fn readers_see_a_consistent_prefix_while_the_writer_appends_and_rolls() {
    const N: u64 = 1500;
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(8 << 10);
    o.prepare_ahead = true;
    let log = Log::open(dir.path(), o).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let log = log.clone();
            let done = done.clone();
            thread::spawn(move || {
                let mut seen: HashMap<u64, (EntryHash, EntryHash)> = HashMap::new();
                let mut round = r;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    for (seq, hash, prev) in read_pass(&log, round) {
                        let old = seen.insert(seq, (hash, prev));
                        assert!(old.is_none_or(|o| o == (hash, prev)), "seq {seq} changed");
                    }
                    round += 3;
                    if finished {
                        return (seen, round / 3);
                    }
                }
            })
        })
        .collect();
    let mut written = Vec::new();
    for i in 0..N {
        let (seq, hash) = log.append(&entry(i, size(i))).unwrap();
        assert_eq!(seq, i);
        written.push(hash);
    }
    done.store(true, Ordering::Release);
    assert!(log.segment_paths().len() > 20, "the writer rolled often");
    for r in readers {
        let (seen, rounds) = r.join().unwrap();
        assert!(rounds >= 1);
        eprintln!("reader: {rounds} passes, {} records seen", seen.len());
        for (seq, (hash, prev)) in seen {
            assert_eq!(hash, written[seq as usize], "seq {seq}");
            if seq > 0 {
                assert_eq!(prev, written[seq as usize - 1], "seq {seq}");
            }
        }
    }
    assert_eq!(read_pass(&log, 0).len() as u64, N);
}

/// Observes that every record reaches a `fdatasync` of its file after it is
/// written: records each record's write and each sync, in order.
#[derive(Default)]
struct SyncTracker {
    ops: Mutex<Tracked>,
}

#[derive(Default)]
struct Tracked {
    n: u64,
    /// seq → (file, op number of its write)
    writes: HashMap<u64, (PathBuf, u64)>,
    /// (file, op number)
    syncs: Vec<(PathBuf, u64)>,
}

impl SyncTracker {
    /// Whether a sync of the record's file began after the record was written.
    fn is_durable(&self, seq: u64) -> bool {
        let t = self.ops.lock().unwrap();
        let (path, at) = &t.writes[&seq];
        t.syncs.iter().any(|(p, n)| p == path && n > at)
    }

    fn syncs(&self) -> usize {
        self.ops.lock().unwrap().syncs.len()
    }
}

impl IoHook for SyncTracker {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let mut t = self.ops.lock().unwrap();
        t.n += 1;
        let n = t.n;
        match op {
            IoOp::Write { path, data, .. } if data.len() >= 64 && data[..4] == *b"SREC" => {
                let seq = u64::from_le_bytes(data[48..56].try_into().unwrap());
                t.writes.insert(seq, (path.to_path_buf(), n));
            }
            IoOp::Sync { path } => t.syncs.push((path.to_path_buf(), n)),
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn sync_appends_from_8_threads_are_all_durable_and_present() {
    const THREADS: u64 = 8;
    const EACH: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let tracker = Arc::new(SyncTracker::default());
    let o = opts(16 << 10).hook(tracker.clone());
    let log = Log::open(dir.path(), o.clone()).unwrap();
    let start = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = log.clone();
            let tracker = tracker.clone();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let mut mine = Vec::new();
                for i in 0..EACH {
                    let id = t * 1000 + i;
                    let e = entry(id, (id as usize * 37) % 900);
                    let (seq, hash) = log.append_with(&e, Durability::Sync).unwrap();
                    assert!(tracker.is_durable(seq), "seq {seq} returned before a sync");
                    mine.push((seq, hash, e));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<_> = threads
        .into_iter()
        .flat_map(|h| {
            let mine = h.join().unwrap();
            assert!(mine.windows(2).all(|w| w[0].0 < w[1].0), "a thread's order");
            mine
        })
        .collect();
    all.sort_by_key(|(seq, _, _)| *seq);
    let n = THREADS * EACH;
    assert_eq!(
        all.iter().map(|a| a.0).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    let syncs = tracker.syncs();
    eprintln!("{n} Sync appends from {THREADS} threads took {syncs} fdatasyncs");
    assert!(syncs < n as usize, "group commit shares syncs");
    drop(log);
    let log = Log::open(dir.path(), o).unwrap();
    assert_eq!(log.recovery_report().torn_tail, None);
    let got = read_all(&log);
    assert_eq!(got.len() as u64, n);
    for ((seq, hash, e), (s, h, g)) in all.iter().zip(&got) {
        assert_eq!((seq, hash, e), (s, h, g));
    }
    assert_eq!(log.verify().damage, None);
}

#[test]
fn wait_for_wakes_when_the_record_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(16 << 10)).unwrap();
    for seq in 0..20u64 {
        let start = Arc::new(Barrier::new(2));
        let waiter = {
            let log = log.clone();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let t = Instant::now();
                let there = log.wait_for(seq, Some(Duration::from_secs(20)));
                (there, t.elapsed(), log.next_seq())
            })
        };
        start.wait();
        let d = if seq % 2 == 0 {
            Durability::Buffered
        } else {
            Durability::Sync
        };
        log.append_with(&entry(seq, 10), d).unwrap();
        let (there, waited, next) = waiter.join().unwrap();
        assert!(there, "seq {seq}");
        assert!(
            waited < Duration::from_secs(10),
            "seq {seq}: woken by the timeout"
        );
        assert!(next > seq);
    }
    let t = Instant::now();
    assert!(!log.wait_for(100, Some(Duration::from_millis(30))));
    assert!(t.elapsed() >= Duration::from_millis(30));
    // A read-only handle has no writer to wait for.
    let ro = Log::open_read_only(dir.path()).unwrap();
    assert!(ro.wait_for(5, None));
    assert!(!ro.wait_for(20, None));
}

const THREADS: usize = 8;

const PER_THREAD: usize = 100;

const ROUNDS: usize = 3;

/// Each thread creates its own sessions, then appends to all of them, round
/// by round, so that sessions of every shard interleave.
fn concurrent_sessions(max_open: usize) {
    // This is about interleaving, not durability: on tmpfs the ~10 fsyncs of
    // each create cost nothing, which keeps 800 creates quick and the threads
    // racing rather than queueing on the disk.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempdir()
    };
    let store = Store::open_with(dir.path(), options().max_open_sessions(max_open)).unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                let mut sessions = Vec::new();
                for s in 0..PER_THREAD {
                    let initial = vec![Item::user_text(format!("t{t} s{s}"))];
                    let (id, head) = store
                        .create_session(None, RequestConfig::default(), &initial)
                        .unwrap();
                    sessions.push((id, head, as_given(&initial)));
                }
                for round in 0..ROUNDS {
                    for (s, (id, head, expected)) in sessions.iter_mut().enumerate() {
                        let call_id = format!("t{t}s{s}r{round}");
                        let delta = vec![
                            answer(&format!("{call_id} says")),
                            call(&call_id, "{}"),
                            result(&call_id, &"r".repeat(s * 7 % 500)),
                        ];
                        store.save_delta(*id, head, &delta).unwrap();
                        expected.extend(as_given(&delta));
                    }
                }
                sessions
            })
        })
        .collect();
    let sessions: Vec<_> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert_eq!(sessions.len(), THREADS * PER_THREAD);

    for (id, head, expected) in &sessions {
        let state = store.restore(*id).unwrap();
        assert_eq!(&state.history, expected, "session {id}");
        assert_eq!(state.head, Some(*head));
        assert!(state.is_ready_to_send());
    }
    // Every session was just reopened by one thread: the open-log budget
    // holds exactly (a log whose LOCK is held is open).
    let locked = sessions
        .iter()
        .filter(|(id, _, _)| {
            let lock = File::open(store.session_dir(*id).join("LOCK")).unwrap();
            matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
        })
        .count();
    assert!(locked <= max_open, "{locked} logs open, budget {max_open}");
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    let list = store.list().unwrap();
    assert_eq!(list.len(), THREADS * PER_THREAD);
    let by_id: BTreeMap<SessionId, _> = list.iter().map(|i| (i.id, i)).collect();
    for (id, head, expected) in &sessions {
        let info = by_id[id];
        assert_eq!(info.entries, 1 + 2 * ROUNDS as u64);
        assert_eq!(info.head, Some(*head));
        assert_eq!(&store.restore(*id).unwrap().history, expected);
    }
}

#[test]
fn eight_threads_append_to_their_own_sessions_and_all_restore_exactly() {
    concurrent_sessions(256);
}

#[test]
fn concurrent_sessions_restore_exactly_under_a_small_open_log_budget() {
    concurrent_sessions(32);
}

/// Holds up the removal of a stale `.prep` file (an early step of a writer's
/// open) until released, and reports that it did.
struct HoldOpen {
    entered: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: Barrier,
}

impl IoHook for HoldOpen {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if let IoOp::Remove { path } = op {
            if path.extension().is_some_and(|e| e == "prep") {
                if let Some(tx) = self.entered.lock().unwrap().take() {
                    tx.send(()).unwrap();
                    self.release.wait();
                }
            }
        }
        Ok(())
    }
}

#[test]
fn a_slow_open_holds_up_neither_its_shard_nor_a_second_caller_for_it() {
    let dir = tempdir();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let hook = Arc::new(HoldOpen {
        entered: std::sync::Mutex::new(None),
        release: Barrier::new(2),
    });
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let create = |text: &str| {
        store
            .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
            .unwrap()
            .0
    };
    // Two sessions in one shard (the store shards by the id's last byte).
    let slow = create("slow");
    let other = loop {
        let id = create("other");
        if id.0[15] % 16 == slow.0[15] % 16 {
            break id;
        }
    };
    store.close().unwrap();
    File::create(store.session_dir(slow).join("next-9-9.prep")).unwrap();
    *hook.entered.lock().unwrap() = Some(entered_tx);

    let store = &store;
    thread::scope(|s| {
        let first = s.spawn(|| store.session(slow).map(|h| h.log().head()));
        entered.recv_timeout(Duration::from_secs(30)).unwrap();
        let second = s.spawn(|| store.session(slow).map(|h| h.log().head()));
        let (done_tx, done) = std::sync::mpsc::channel();
        s.spawn(move || {
            let restored = store.restore(other).map(|r| r.history);
            done_tx.send(restored).unwrap();
        });
        let neighbour = done.recv_timeout(Duration::from_secs(10));
        let second_early = second.is_finished();
        hook.release.wait();
        let neighbour = neighbour.expect("the shard's other session waited for the slow open");
        assert_eq!(neighbour.unwrap(), vec![Item::user_text("other")]);
        assert!(!second_early, "a second caller did not wait for the open");
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert_eq!(a.unwrap(), b.unwrap());
    });
    assert_eq!(
        store.restore(slow).unwrap().history,
        vec![Item::user_text("slow")]
    );
}
