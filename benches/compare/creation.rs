//! Session creation (issue 17, item 8): what starting a session costs, alone
//! and when 64 runtime tasks start theirs at once, on a `Buffered` and on a
//! `Sync` store, through `Store::create_session` as a runtime calls it.
//!
//! The peer is the JSONL store of the headline table in the same shape: a
//! file per session created with its first record (a `SessionStart`'s
//! JSON) written; durably, that file is `fdatasync`ed and its directory
//! `fsync`ed before the creation counts as done.
//!
//! Each creation is timed on its own. "One at a time" creates sessions one
//! after another in one thread; "64 at once" starts 64 threads at a barrier,
//! each creating one session, several rounds into the same store. The store
//! is closed (untimed) every 64 creations, so that no creation evicts. The
//! figures are medians over the repetitions of each one's percentile.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use session_store::{Durability, LogOptions, Store, StoreOptions};

use crate::common;
use crate::{target, Op};

/// Threads that create at once.
const AT_ONCE: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Store,
    Jsonl,
    /// The floor of any store whose session is a directory: the
    /// directory, and one file in it holding the `SessionStart`'s JSON.
    DirFloor,
}

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Store => "session-store",
            Peer::Jsonl => "JSONL (file per session)",
            Peer::DirFloor => "floor: a directory and one file per session",
        }
    }
}

/// Creates sessions into one directory: a store, or the JSONL peer's.
struct Creator {
    peer: Peer,
    durability: Durability,
    store: Option<Store>,
    dir: std::path::PathBuf,
}

impl Creator {
    fn new(peer: Peer, durability: Durability, dir: &Path) -> Creator {
        let store = (peer == Peer::Store).then(|| {
            let opts = StoreOptions::default().log(LogOptions::default().durability(durability));
            Store::open_with(dir, opts).expect("open store")
        });
        if peer != Peer::Store {
            std::fs::create_dir_all(dir.join("sessions")).expect("create dir");
        }
        Creator {
            peer,
            durability,
            store,
            dir: dir.to_path_buf(),
        }
    }

    /// Creates one session; returns how long that took, ns.
    fn create_one(&self, n: u64) -> u64 {
        let start = Instant::now();
        match &self.store {
            Some(store) => {
                common::create_session(store);
            }
            None => {
                let start_json =
                    serde_json::to_vec(&common::session_start(&[], common::TS0)).expect("json");
                let sessions = self.dir.join("sessions");
                // The file, and the directories whose `fsync` makes its
                // name durable, innermost first.
                let (path, synced) = match self.peer {
                    Peer::DirFloor => {
                        let home = sessions.join(format!("{n:016}"));
                        std::fs::create_dir(&home).expect("create dir");
                        (home.join("log"), vec![home, sessions])
                    }
                    _ => (sessions.join(format!("{n:016}.jsonl")), vec![sessions]),
                };
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .expect("create");
                f.write_all(&start_json).expect("write");
                f.write_all(b"\n").expect("write");
                if self.durability == Durability::Sync {
                    f.sync_data().expect("fdatasync");
                    for d in synced {
                        std::fs::File::open(&d)
                            .and_then(|d| d.sync_all())
                            .expect("fsync dir");
                    }
                }
            }
        }
        start.elapsed().as_nanos() as u64
    }

    /// Closes what is open (untimed): past the store's open-session budget
    /// a creation would evict, and so close and sync, another session.
    fn close_open(&self) {
        if let Some(store) = &self.store {
            store.close().expect("close");
        }
    }
}

/// p50 and max of one pass, seconds.
#[derive(Clone, Copy)]
struct Figures {
    p50: f64,
    max: f64,
}

fn figures(mut ns: Vec<u64>) -> Figures {
    ns.sort_unstable();
    Figures {
        p50: ns[(ns.len() - 1) / 2] as f64 / 1e9,
        max: *ns.last().expect("one creation at least") as f64 / 1e9,
    }
}

/// `count` creations one after another. The directory is returned, to be
/// removed only after every pass: on ext4, inodes freed in the last minute
/// are skipped by each allocation (`recently_deleted`), so removing a
/// pass's files before the next pass slowed that pass's creations up to
/// 20×, whichever system it was.
fn one_at_a_time(peer: Peer, durability: Durability, count: usize) -> (Figures, tempfile::TempDir) {
    let dir = common::tempdir();
    let c = Creator::new(peer, durability, dir.path());
    // Untimed: the first creation warms the directories and the cache file.
    c.create_one(u64::MAX);
    let ns = (0..count as u64)
        .map(|n| {
            if n % AT_ONCE as u64 == 0 {
                c.close_open();
            }
            c.create_one(n)
        })
        .collect();
    c.close_open();
    (figures(ns), dir)
}

/// `rounds` rounds of `AT_ONCE` threads creating one session each, started
/// together at a barrier; the directory is kept as by [`one_at_a_time`].
fn at_once(peer: Peer, durability: Durability, rounds: usize) -> (Figures, tempfile::TempDir) {
    let dir = common::tempdir();
    let c = Arc::new(Creator::new(peer, durability, dir.path()));
    c.create_one(u64::MAX);
    let mut ns = Vec::with_capacity(rounds * AT_ONCE);
    for round in 0..rounds {
        let barrier = Arc::new(Barrier::new(AT_ONCE));
        let threads: Vec<_> = (0..AT_ONCE)
            .map(|t| {
                let (c, barrier) = (c.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    c.create_one((round * AT_ONCE + t) as u64)
                })
            })
            .collect();
        ns.extend(threads.into_iter().map(|t| t.join().expect("thread")));
        c.close_open();
    }
    drop(c);
    (figures(ns), dir)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One row: the medians over `reps` passes.
struct Row {
    peer: Peer,
    durability: Durability,
    how: &'static str,
    creations: usize,
    figures: Figures,
}

/// The passes of one row, run in turns with the other rows' (see [`run`]).
struct Passes {
    peer: Peer,
    durability: Durability,
    how: &'static str,
    creations: usize,
    pass: Box<dyn Fn() -> (Figures, tempfile::TempDir)>,
    figures: Vec<Figures>,
}

/// Measures and prints the creation table and the targets.
///
/// The repetitions are interleaved, every row's first pass before any
/// row's second, each round starting one row later: this disk's inode
/// allocation slows down for a minute after many removals, and rows run
/// back to back left that to whichever came first.
pub fn run(quick: bool, reps: usize) {
    let (alone, rounds) = if quick { (100, 4) } else { (400, 16) };
    let mut rows: Vec<Passes> = Vec::new();
    for durability in [Durability::Buffered, Durability::Sync] {
        for peer in [Peer::Store, Peer::Jsonl, Peer::DirFloor] {
            rows.push(Passes {
                peer,
                durability,
                how: "one at a time",
                creations: alone,
                pass: Box::new(move || one_at_a_time(peer, durability, alone)),
                figures: Vec::new(),
            });
            rows.push(Passes {
                peer,
                durability,
                how: "64 at once",
                creations: rounds * AT_ONCE,
                pass: Box::new(move || at_once(peer, durability, rounds)),
                figures: Vec::new(),
            });
        }
    }
    // Every pass's files, removed together at the end (see `one_at_a_time`).
    let mut kept = Vec::new();
    let n = rows.len();
    for rep in 0..reps {
        for i in 0..n {
            let r = &mut rows[(rep + i) % n];
            eprintln!(
                "compare: creation, {} {:?}, {}",
                r.peer.label(),
                r.durability,
                r.how
            );
            let (f, dir) = (r.pass)();
            kept.push(dir);
            r.figures.push(f);
        }
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| Row {
            peer: r.peer,
            durability: r.durability,
            how: r.how,
            creations: r.creations,
            figures: Figures {
                p50: median(r.figures.iter().map(|f| f.p50).collect()),
                max: median(r.figures.iter().map(|f| f.max).collect()),
            },
        })
        .collect();
    println!();
    println!(
        "## Session creation ({} mode; median of {reps} repetitions of each percentile)",
        if quick { "quick" } else { "full" }
    );
    println!();
    println!("| system | durability | creations | each | p50 µs | max µs |");
    println!("| --- | --- | ---: | --- | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {:?} | {} | {} | {:.0} | {:.0} |",
            r.peer.label(),
            r.durability,
            r.creations,
            r.how,
            r.figures.p50 * 1e6,
            r.figures.max * 1e6
        );
    }
    println!();
    println!("Notes: a creation is `Store::create_session` with a system prompt and a config (the JSONL peer: a new file holding that `SessionStart`'s JSON; the floor: a new directory with such a file in it); under `Sync` it returns durable (the peers: `fdatasync` of the file and `fsync` of the directories that name it). \"64 at once\": 64 threads released together by a barrier, each creating one session, in rounds into the same store.");
    println!();
    println!("Targets (issue 17), this run:");
    let store_64 = rows
        .iter()
        .find(|r| {
            r.peer == Peer::Store && r.durability == Durability::Buffered && r.how == "64 at once"
        })
        .expect("row");
    target(
        "64 creations at once, Buffered: p50",
        Some(store_64.figures.p50 * 1e3),
        Op::Below,
        2.0,
        " ms",
    );
    target(
        "64 creations at once, Buffered: max",
        Some(store_64.figures.max * 1e3),
        Op::Below,
        10.0,
        " ms",
    );
    let floor_64 = rows
        .iter()
        .find(|r| {
            r.peer == Peer::DirFloor
                && r.durability == Durability::Buffered
                && r.how == "64 at once"
        })
        .expect("row");
    println!(
        "- bound: making a directory and one file in it, 64 at once (Buffered: nothing synced), takes p50 {:.2} ms, \
         max {:.2} ms here: no store whose session is a directory creates 64 at once faster; session-store takes \
         {:.2}× it at p50 and {:.2}× at the max",
        floor_64.figures.p50 * 1e3,
        floor_64.figures.max * 1e3,
        store_64.figures.p50 / floor_64.figures.p50,
        store_64.figures.max / floor_64.figures.max
    );
}
