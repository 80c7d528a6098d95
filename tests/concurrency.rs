//! Guards against readers seeing a torn or inconsistent log while the writer
//! appends and rolls, against `Sync` appends that return before they are
//! durable or go missing under contention, and against waiters never woken.

mod engine;

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use engine::{entry, opts, read_all};
use session_store::{log::IoHook, log::IoOp, Durability, EntryHash, Log};

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
            rec.entry.to_entry(),
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
