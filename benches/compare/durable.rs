//! The `durable` table (issue 49): agent servers that run many
//! conversations at once and want every acknowledged turn to survive a
//! power loss. N writer threads, each owning one session, each turn four
//! items of about 3 KB (a question, a tool call, its result, an answer),
//! every turn durable before the next. Sessions are created before the
//! clock starts.
//!
//! Systems, each in a fresh directory:
//! - the store, `Durability::Sync`, `Store::commit_turn` per turn; its
//!   `fdatasync`s counted by its own I/O hook;
//! - JSONL with the seed's SHA-256 chain, a file per session, `fdatasync`
//!   per turn;
//! - SQLite in WAL mode with `synchronous=FULL`, one database, a connection
//!   per thread, one transaction per turn;
//! - the bound: one shared file, each turn's JSON lines written at its own
//!   offset and made durable by leader/follower group commit (one
//!   `fdatasync` for every turn written before it began): what one
//!   store-wide log could do;
//! - the store again, `Durability::Buffered`: the same commits with no
//!   sync at all, the most its `Sync` commits could reach on this machine
//!   (encoding, hashing and writing records cost CPU the bound does not
//!   spend);
//! - the store `Buffered` with the bound's shared file beside it: each
//!   turn committed, then its JSON lines group-committed to the shared
//!   file. This is the least work of a design that keeps a segment per
//!   session and makes records durable through one shared file (the
//!   store's journal), so it bounds what such a design reaches here.
//!
//! It prints turns/s, the latency of a turn (p50, p99, max), `fdatasync`s
//! per turn, and the ratios with their targets.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use session_store::log::{IoHook, IoOp};
use session_store::{
    group_delta, Durability, Item, LogOptions, RequestConfig, Store, StoreOptions, ToolOutput, Turn,
};

use super::common::{self, Rng};
use super::{
    fresh, run_order, sqlite_open, sqlite_save, BareGroupCommit, Batch, Jsonl, ITEMS_SCHEMA,
};

/// Bytes of each of a turn's four items, about.
const ITEM_BYTES: usize = 3_000;

/// What one system's run measured.
#[derive(Clone, Debug)]
struct Run {
    turns: u64,
    secs: f64,
    /// Each turn's latency, seconds, sorted.
    lat: Vec<f64>,
    /// `fdatasync`s (and directory syncs) per turn, where counted.
    syncs: Option<f64>,
}

impl Run {
    fn turns_s(&self) -> f64 {
        self.turns as f64 / self.secs
    }

    fn pct(&self, p: f64) -> f64 {
        let i = ((self.lat.len() as f64 * p) as usize).min(self.lat.len() - 1);
        self.lat[i]
    }
}

/// Counts the syncs the store asks for.
#[derive(Default)]
struct Syncs(AtomicU64);

impl IoHook for Syncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if matches!(op, IoOp::Sync { .. } | IoOp::SyncDir { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Writer `w`'s turn `t`: four items of about 3 KB.
fn turn(w: usize, t: usize) -> Vec<Item> {
    let mut rng = Rng::new((w as u64) << 32 | t as u64);
    let call_id = format!("call_{w}_{t}");
    let args = format!(
        "{{\"path\":\"src/{w}.rs\",\"query\":\"{}\"}}",
        common::text(&mut rng, ITEM_BYTES).replace(['\n', '"', '\\'], " ")
    );
    vec![
        Item::user_text(common::text(&mut rng, ITEM_BYTES)),
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: call_id.clone(),
            name: "search".into(),
            arguments: args,
            status: None,
        },
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id,
            output: Some(ToolOutput::Text(common::text(&mut rng, ITEM_BYTES))),
            is_error: None,
            custom: false,
            status: None,
        },
        Item::assistant_text(common::text(&mut rng, ITEM_BYTES)),
    ]
}

/// Runs `writers` threads of `turns` turns each; `save(writer, turn)` makes
/// one turn durable. The clock runs from the first writer's first turn to
/// the last writer's last: the main thread may come back from the barrier
/// long after the writers have started (two cores, 256 threads).
fn timed<S: Send>(
    writers: usize,
    turns: usize,
    states: Vec<S>,
    save: impl Fn(&mut S, usize, usize) + Sync,
) -> (f64, Vec<f64>) {
    let start = Barrier::new(writers);
    let mut lat = Vec::with_capacity(writers * turns);
    let mut span: Option<(Instant, Instant)> = None;
    std::thread::scope(|s| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(w, mut st)| {
                let (start, save) = (&start, &save);
                s.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let mut mine = Vec::with_capacity(turns);
                    for t in 0..turns {
                        let t0 = Instant::now();
                        save(&mut st, w, t);
                        mine.push(t0.elapsed().as_secs_f64());
                    }
                    (began, Instant::now(), mine)
                })
            })
            .collect();
        for h in handles {
            let (began, ended, mine) = h.join().expect("writer");
            lat.extend(mine);
            span = Some(match span {
                None => (began, ended),
                Some((b, e)) => (b.min(began), e.max(ended)),
            });
        }
    });
    lat.sort_by(f64::total_cmp);
    let (began, ended) = span.expect("one writer at least");
    ((ended - began).as_secs_f64(), lat)
}

fn store_run(
    dir: &Path,
    writers: usize,
    turns: usize,
    items: &[Vec<Vec<Item>>],
    durability: Durability,
    shared: Option<&[Vec<Vec<u8>>]>,
) -> Run {
    let syncs = Arc::new(Syncs::default());
    let opts = StoreOptions {
        log: LogOptions {
            durability,
            ..LogOptions::default()
        }
        .hook(syncs.clone()),
        ..StoreOptions::default()
    };
    let store = Store::open_with(dir, opts).expect("open");
    let sessions: Vec<_> = (0..writers)
        .map(|_| {
            store
                .create_session(None, RequestConfig::model("m"), &[])
                .expect("create")
        })
        .collect();
    // With `shared`, each turn's JSON lines also go to one shared file
    // made durable by group commit, as the bound's do.
    let log =
        shared.map(|lines| BareGroupCommit::create(&dir.join("shared.log"), shared_len(lines)));
    let before = syncs.0.load(Ordering::Relaxed);
    let (secs, lat) = timed(writers, turns, sessions, |(id, head), w, t| {
        let turn = Turn::new(&items[w][t][..], t as u64 + 1);
        *head = store.commit_turn(*id, *head, &turn).expect("commit");
        if let (Some(log), Some(lines)) = (&log, shared) {
            log.commit(&lines[w][t]);
        }
    });
    let counted = syncs.0.load(Ordering::Relaxed) - before
        + log.map_or(0, |l| l.syncs.load(Ordering::Relaxed));
    store.close().expect("close");
    let n = (writers * turns) as u64;
    Run {
        turns: n,
        secs,
        lat,
        syncs: Some(counted as f64 / n as f64),
    }
}

fn jsonl_run(dir: &Path, writers: usize, turns: usize, items: &[Vec<Vec<Item>>]) -> Run {
    let files: Vec<Jsonl> = (0..writers)
        .map(|w| Jsonl::create(&dir.join(format!("{w}.jsonl"))))
        .collect();
    let (secs, lat) = timed(writers, turns, files, |j, w, t| {
        j.save(&group_delta(&items[w][t], common::TS0 + t as u64));
        j.out.get_ref().sync_data().expect("fdatasync");
    });
    Run {
        turns: (writers * turns) as u64,
        secs,
        lat,
        syncs: Some(1.0),
    }
}

fn sqlite_run(dir: &Path, writers: usize, turns: usize, items: &[Vec<Vec<Item>>]) -> Run {
    let path = dir.join("db");
    drop(sqlite_open(&path, "FULL", ITEMS_SCHEMA));
    let conns: Vec<_> = (0..writers)
        .map(|_| sqlite_open(&path, "FULL", ITEMS_SCHEMA))
        .collect();
    let (secs, lat) = timed(writers, turns, conns, |c, w, t| {
        sqlite_save(c, &items[w][t], common::TS0 + t as u64, Batch::PerTurn);
    });
    Run {
        turns: (writers * turns) as u64,
        secs,
        lat,
        syncs: None,
    }
}

/// Each writer's turns as the JSON lines the bound writes, made before
/// the clock.
fn json_lines(items: &[Vec<Vec<Item>>]) -> Vec<Vec<Vec<u8>>> {
    items
        .iter()
        .map(|ts| {
            ts.iter()
                .enumerate()
                .map(|(t, turn)| {
                    let mut out = Vec::new();
                    for e in group_delta(turn, common::TS0 + t as u64) {
                        serde_json::to_writer(&mut out, &e).expect("json");
                        out.write_all(b"\n").expect("write");
                    }
                    out
                })
                .collect()
        })
        .collect()
}

/// The shared file's length for `lines`, zero-filled before the clock.
fn shared_len(lines: &[Vec<Vec<u8>>]) -> u64 {
    lines.iter().flatten().map(|l| l.len() as u64).sum::<u64>() + (1 << 20)
}

/// The bound: every turn's JSON lines into one shared file, group commit.
fn bound_run(dir: &Path, writers: usize, turns: usize, lines: &[Vec<Vec<u8>>]) -> Run {
    let log = BareGroupCommit::create(&dir.join("shared.log"), shared_len(lines));
    let (secs, lat) = timed(writers, turns, vec![(); writers], |(), w, t| {
        log.commit(&lines[w][t]);
    });
    Run {
        turns: (writers * turns) as u64,
        secs,
        lat,
        syncs: Some(log.syncs.load(Ordering::Relaxed) as f64 / (writers * turns) as f64),
    }
}

const SYSTEMS: [&str; 6] = [
    "session-store Sync",
    "JSONL+SHA-256, fdatasync, file per session",
    "SQLite WAL synchronous=FULL",
    "bound: one shared file, group commit",
    "session-store Buffered, no sync (its ceiling here)",
    "session-store Buffered + the bound's shared file (a journal's ceiling)",
];

/// Turns per writer: about 1,600 turns in all at 1 writer, fewer per
/// writer as writers grow, never under 8.
fn turns_for(writers: usize, quick: bool) -> usize {
    let total = if quick { 400 } else { 1_600 };
    (total / writers).max(8)
}

pub fn run(quick: bool, reps: usize) {
    let counts: &[usize] = if quick { &[1, 8, 64] } else { &[1, 8, 64, 256] };
    eprintln!(
        "compare: durable, {} mode, writers {counts:?}, {reps} repetitions",
        if quick { "quick" } else { "full" }
    );
    println!("\n## Durable commits: N writers, a session each, 4 items of ~3 KB a turn, every turn durable\n");
    println!("| writers | system | turns/s | p50 ms | p99 ms | max ms | syncs/turn |");
    println!("|---:|---|---:|---:|---:|---:|---:|");
    let mut summary = Vec::new();
    for &writers in counts {
        let turns = turns_for(writers, quick);
        let items: Vec<Vec<Vec<Item>>> = (0..writers)
            .map(|w| (0..turns).map(|t| turn(w, t)).collect())
            .collect();
        type System<'a> = Box<dyn FnMut(&Path) -> Run + 'a>;
        let items = &items;
        let lines = &json_lines(items);
        let mut systems: Vec<System<'_>> = vec![
            Box::new(move |d| store_run(d, writers, turns, items, Durability::Sync, None)),
            Box::new(move |d| jsonl_run(d, writers, turns, items)),
            Box::new(move |d| sqlite_run(d, writers, turns, items)),
            Box::new(move |d| bound_run(d, writers, turns, lines)),
            Box::new(move |d| store_run(d, writers, turns, items, Durability::Buffered, None)),
            Box::new(move |d| {
                store_run(d, writers, turns, items, Durability::Buffered, Some(lines))
            }),
        ];
        // Interleaved repetitions, each system in a fresh directory, after
        // an untimed warm-up of each; the run with the median turns/s
        // counts.
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); systems.len()];
        for rep in 0..=reps {
            for i in run_order(systems.len(), rep) {
                let d = fresh();
                let r = systems[i](d.path());
                if rep > 0 {
                    runs[i].push(r);
                }
            }
        }
        let medians: Vec<Run> = runs
            .into_iter()
            .map(|mut rs| {
                rs.sort_by(|a, b| a.turns_s().total_cmp(&b.turns_s()));
                rs[rs.len() / 2].clone()
            })
            .collect();
        for (name, r) in SYSTEMS.iter().zip(&medians) {
            println!(
                "| {writers} | {name} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
                r.turns_s(),
                r.pct(0.50) * 1e3,
                r.pct(0.99) * 1e3,
                r.lat.last().copied().unwrap_or(0.0) * 1e3,
                r.syncs.map_or("-".into(), |s| format!("{s:.3}")),
            );
        }
        summary.push((writers, medians));
    }
    // The last five columns bound the three target columns. The store without any
    // sync (the same commits, `Buffered`) against JSONL and against the
    // shared-log bound, which writes JSON lines prepared before the clock
    // and hashes nothing. Then that store with the bound's shared file
    // beside it, each turn's lines group-committed there after its commit:
    // the least a design that keeps each session's segment and makes its
    // records durable through one shared file does (the shared file zero-
    // filled before the clock, as the bound's is).
    println!("\n| writers | store ÷ JSONL+fdatasync (target ≥ 1.5 at 64, 256) | store ÷ bound (target ≥ 0.8 at 64, 256) | store ÷ SQLite FULL | store p99 ÷ bound p99 (target ≤ 1.5) | store Buffered ÷ JSONL+fdatasync (the most the first can reach here) | store Buffered ÷ bound (the most the second can reach here) | Buffered + shared file ÷ JSONL+fdatasync (the most a journal beside the segments reaches) | Buffered + shared file ÷ bound (the same) | Buffered + shared file p99 ÷ bound p99 (the same) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (writers, m) in &summary {
        let s = &m[0];
        println!(
            "| {writers} | {:.2}× | {:.2}× | {:.1}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
            s.turns_s() / m[1].turns_s(),
            s.turns_s() / m[3].turns_s(),
            s.turns_s() / m[2].turns_s(),
            s.pct(0.99) / m[3].pct(0.99),
            m[4].turns_s() / m[1].turns_s(),
            m[4].turns_s() / m[3].turns_s(),
            m[5].turns_s() / m[1].turns_s(),
            m[5].turns_s() / m[3].turns_s(),
            m[5].pct(0.99) / m[3].pct(0.99),
        );
    }
}
