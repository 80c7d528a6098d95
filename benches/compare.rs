//! Side by side, in one process, on the same items: session-store against
//! the seed's JSONL + SHA-256 chain, SQLite (WAL) and redb.
//!
//! The headline table (`compare/sessions.rs`) is what agent runtimes do:
//! many sessions saved turn by turn through the public `Store` API, round-
//! robin, with every peer in the same shape: workload A, 200 sessions × 100
//! realistic turns, and workload B, 10,000 sessions × 5 small turns. It
//! reports append throughput, save latency percentiles, allocated disk,
//! replay of every session, open + restore of one session, and `list`, and
//! checks them against issue 14's targets.
//!
//! The creation table (`compare/creation.rs`) times `Store::create_session`
//! one at a time and 64 at once, `Buffered` and `Sync`, against a file per
//! session, and checks issue 17's targets.
//!
//! The forks table (`compare/forks.rs`) forks a 100 MB session 100 times
//! by reference, against the copy-fork it replaces, and restores a fork of
//! a fork of a fork against a flat session; it checks issue 18's targets.
//! The payload table (`compare/payloads.rs`) measures a session compacted
//! 50 times with 64 KiB tool outputs: the disk the store takes against its
//! unique content, with the payload area and without, and checks issue 18's
//! target.
//!
//! The durable table (`compare/durable.rs`) runs 1, 8, 64 and 256 writer
//! threads, a session each, every turn durable: the store's `Sync` against
//! JSONL with `fdatasync` per turn, SQLite `synchronous=FULL`, and the bound
//! of one shared file with group commit; it checks issue 49's targets.
//!
//! The last table is the more favourable path: one log written through
//! `Log::append_batch`, with the raw limit (memcpy into a prefaulted map plus
//! BLAKE3 and CRC32), durable appends, replay and verify.
//!
//! ```text
//! cargo bench --bench compare               # full: the issue's sizes, 5 repetitions
//! cargo bench --bench compare -- --quick    # CI-sized, 3 repetitions: A 50 × 40, B 1,000 × 5,
//!                                           # single log 2k turns
//! cargo bench --bench compare -- --headline # the headline, creation and forks tables only (with --quick too)
//! cargo bench --bench compare -- --create   # the creation table only (with --quick too)
//! cargo bench --bench compare -- --forks    # the forks table only (with --quick too)
//! cargo bench --bench compare -- --sessions # the headline table only (with --quick too)
//! cargo bench --bench compare -- --payloads # the payload table only (with --quick too)
//! cargo bench --bench compare -- --durable  # the durable table only (with --quick too)
//! cargo bench --bench compare -- --single   # the single-log table only (with --quick, --large too)
//! cargo bench --bench compare -- --reps 3   # repetitions (default: 5, quick 3)
//! cargo bench --bench compare -- --large    # also: peak RSS while replaying 1 GB,
//!                                           # restore 1 GB vs 10 MB
//! ```
//! `BENCH_LARGE=1` is the same as `--large`. Workloads are seeded. Every
//! figure is the median of the repetitions, and repetitions are interleaved
//! across systems so that a noisy neighbour slows all of them alike; each
//! system gets an untimed warm-up pass, and its previous files are deleted
//! before it runs. Appends time only the appending: opening a store and
//! closing it are outside the clock, for every system. Replay and verify
//! include opening, for every system. Each peer runs in its best ordinary
//! configuration: see the README's "Performance" section for what each row
//! does.
//!
//! In the last table, the quick mode's 25 MB fit in one 64 MiB segment, so
//! it never rolls; the full mode's 224 MB roll three times, and show what a
//! roll costs.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use redb::ReadableTable;
use rusqlite::{params, Connection, TransactionBehavior};
use session_store::{Durability, Item, Log, LogEntry, LogOptions, RestoredState};
use sha2::{Digest, Sha256};

mod common;
// A file of its own, next to this one (a bench target is a crate root).
#[path = "compare/creation.rs"]
mod creation;
#[path = "compare/durable.rs"]
mod durable;
#[path = "compare/forks.rs"]
mod forks;
#[path = "compare/payloads.rs"]
mod payloads;
#[path = "compare/sessions.rs"]
mod sessions;
use common::Workload;

const REDB_ITEMS: redb::TableDefinition<u64, &str> = redb::TableDefinition::new("items");

struct Config {
    quick: bool,
    large: bool,
    turns: usize,
    reps: usize,
    durable_commits: usize,
}

/// One measured row of the table.
#[derive(Clone)]
struct Row {
    op: String,
    system: String,
    items: u64,
    bytes: u64,
    commits: u64,
    secs: f64,
    /// The raw limit's MB/s for this row's workload.
    raw_mb_s: f64,
}

impl Row {
    fn items_s(&self) -> f64 {
        self.items as f64 / self.secs
    }
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs
    }
    fn commits_s(&self) -> f64 {
        self.commits as f64 / self.secs
    }
}

/// Passes per repetition of a limit (raw, BLAKE3 alone), of which the
/// fastest counts: a limit is the best the machine can do, so noise must not
/// lower it and flatter the systems measured against it.
const LIMIT_PASSES: usize = 3;

fn best_of(passes: usize, mut f: impl FnMut()) -> f64 {
    (0..passes)
        .map(|_| time(&mut f))
        .fold(f64::INFINITY, f64::min)
}

fn time(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

fn fresh() -> tempfile::TempDir {
    common::tempdir()
}

// ---------------------------------------------------------------- session-store

// Each `*_append` opens or creates its store, times only the appends, and
// closes the store untimed: a `close` that syncs is not part of appending.

fn ss_append(dir: &Path, w: &Workload) -> f64 {
    let log = Log::open(dir, LogOptions::default()).expect("open");
    let secs = time(|| {
        for t in &w.entries {
            log.append_batch(t, Durability::Buffered, session_store::log::ExpectHead::Any)
                .expect("append");
        }
    });
    log.close().expect("close");
    secs
}

fn ss_replay(dir: &Path) -> Vec<Item> {
    Log::open_read_only(dir)
        .expect("open")
        .restore()
        .expect("restore")
        .history
}

fn ss_verify(dir: &Path) {
    let r = Log::open_read_only(dir).expect("open").verify();
    assert!(r.damage.is_none(), "{:?}", r.damage);
}

// ---------------------------------------------------------------- JSONL + SHA-256

/// The seed's writer: one JSON line per entry, `hash = sha256(prev || json)`,
/// the hash spliced in as the line's first field.
struct Jsonl {
    out: BufWriter<File>,
    prev: [u8; 32],
}

impl Jsonl {
    fn create(path: &Path) -> Jsonl {
        Jsonl {
            out: BufWriter::new(File::create(path).expect("create")),
            prev: [0; 32],
        }
    }

    /// One `save_delta`: the turn's entries, then a flush so that the turn
    /// reaches the page cache (what `Buffered` promises) before returning.
    fn save(&mut self, entries: &[LogEntry]) {
        for e in entries {
            self.chain(&serde_json::to_vec(e).expect("json"));
        }
        self.flush();
    }

    /// Writes one line: the JSON object `json` with
    /// `"hash": sha256(prev || json)` spliced in as its first field.
    fn chain(&mut self, json: &[u8]) {
        let mut h = Sha256::new();
        h.update(self.prev);
        h.update(json);
        self.prev = h.finalize().into();
        self.out.write_all(b"{\"hash\":\"").expect("write");
        self.out
            .write_all(hex::encode(self.prev).as_bytes())
            .expect("write");
        self.out.write_all(b"\",").expect("write");
        self.out.write_all(&json[1..]).expect("write");
        self.out.write_all(b"\n").expect("write");
    }

    /// Hands what is buffered to the kernel (the page cache).
    fn flush(&mut self) {
        self.out.flush().expect("flush");
    }
}

fn jsonl_append(path: &Path, w: &Workload) -> f64 {
    let mut j = Jsonl::create(path);
    time(|| {
        for t in &w.entries {
            j.save(t);
        }
    })
}

/// Replay: read lines, parse, fold (moving the items, no extra clone).
fn jsonl_replay(path: &Path) -> Vec<Item> {
    let mut history = Vec::new();
    let mut r = BufReader::new(File::open(path).expect("open"));
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).expect("read") == 0 {
            break;
        }
        match serde_json::from_str::<LogEntry>(&line).expect("parse") {
            LogEntry::SessionStart { history: h, .. } => {
                history = h.into_iter().map(|i| i.into_item()).collect()
            }
            LogEntry::UserInput { item, .. } => history.push(item.into_item()),
            LogEntry::AssistantItems { items, .. }
            | LogEntry::ToolResults { items, .. }
            | LogEntry::HookInjectedItems { items, .. } => {
                history.extend(items.into_iter().map(|i| i.into_item()))
            }
            _ => {}
        }
    }
    history
}

/// Verify: recompute the chain over the bytes as written (no re-serialization).
fn jsonl_verify(path: &Path) {
    let mut r = BufReader::new(File::open(path).expect("open"));
    let mut line = Vec::new();
    let mut prev = [0u8; 32];
    let prefix = b"{\"hash\":\"".len();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).expect("read") == 0 {
            break;
        }
        let body = &line[prefix + 64 + 2..line.len() - 1];
        let mut h = Sha256::new();
        h.update(prev);
        h.update(b"{");
        h.update(body);
        prev = h.finalize().into();
        let mut stored = [0u8; 32];
        hex::decode_to_slice(&line[prefix..prefix + 64], &mut stored).expect("hex");
        assert_eq!(stored, prev, "JSONL chain broken");
    }
}

// ---------------------------------------------------------------- SQLite

#[derive(Clone, Copy, PartialEq)]
enum Batch {
    /// One autocommit insert per item.
    PerItem,
    /// One transaction per turn.
    PerTurn,
}

const ITEMS_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS items(seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, body TEXT NOT NULL)";

/// A WAL connection with `synchronous` set and `schema` created.
fn sqlite_open(path: &Path, synchronous: &str, schema: &str) -> Connection {
    let c = Connection::open(path).expect("sqlite open");
    c.pragma_update(None, "journal_mode", "WAL").expect("wal");
    c.pragma_update(None, "synchronous", synchronous)
        .expect("synchronous");
    c.busy_timeout(std::time::Duration::from_secs(60))
        .expect("busy timeout");
    c.execute_batch(schema).expect("schema");
    c
}

fn sqlite_save(c: &mut Connection, turn: &[Item], ts: u64, batch: Batch) {
    const INSERT: &str = "INSERT INTO items(ts, body) VALUES (?1, ?2)";
    match batch {
        Batch::PerItem => {
            let mut stmt = c.prepare_cached(INSERT).expect("prepare");
            for item in turn {
                let body = serde_json::to_string(item).expect("json");
                stmt.execute(params![ts as i64, body]).expect("insert");
            }
        }
        Batch::PerTurn => {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .expect("begin");
            {
                let mut stmt = tx.prepare_cached(INSERT).expect("prepare");
                for item in turn {
                    let body = serde_json::to_string(item).expect("json");
                    stmt.execute(params![ts as i64, body]).expect("insert");
                }
            }
            tx.commit().expect("commit");
        }
    }
}

fn sqlite_append(path: &Path, w: &Workload, synchronous: &str, batch: Batch) -> f64 {
    let mut c = sqlite_open(path, synchronous, ITEMS_SCHEMA);
    time(|| {
        for (i, t) in w.turns.iter().enumerate() {
            sqlite_save(&mut c, t, common::TS0 + i as u64, batch);
        }
    })
}

fn sqlite_replay(path: &Path) -> Vec<Item> {
    let c = Connection::open(path).expect("open");
    let mut stmt = c
        .prepare("SELECT body FROM items ORDER BY seq")
        .expect("prepare");
    let mut rows = stmt.query([]).expect("query");
    let mut history = Vec::new();
    while let Some(row) = rows.next().expect("row") {
        let body = row.get_ref(0).expect("body").as_str().expect("text");
        history.push(serde_json::from_str::<Item>(body).expect("parse"));
    }
    history
}

fn sqlite_verify(path: &Path) {
    let c = Connection::open(path).expect("open");
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(ok, "ok");
}

// ---------------------------------------------------------------- redb

fn redb_save(db: &redb::Database, turn: &[Item], seq: &AtomicU64, d: redb::Durability) {
    let mut tx = db.begin_write().expect("begin");
    tx.set_durability(d);
    {
        let mut t = tx.open_table(REDB_ITEMS).expect("table");
        for item in turn {
            let body = serde_json::to_string(item).expect("json");
            // Seqs are taken inside the write transaction, which redb serializes.
            let s = seq.fetch_add(1, Ordering::Relaxed);
            t.insert(s, body.as_str()).expect("insert");
        }
    }
    tx.commit().expect("commit");
}

fn redb_append(path: &Path, w: &Workload, d: redb::Durability) -> f64 {
    let db = redb::Database::create(path).expect("redb create");
    let seq = AtomicU64::new(0);
    time(|| {
        for t in &w.turns {
            redb_save(&db, t, &seq, d);
        }
    })
}

fn redb_replay(path: &Path) -> Vec<Item> {
    let db = redb::Database::open(path).expect("redb open");
    let tx = db.begin_read().expect("read");
    let t = tx.open_table(REDB_ITEMS).expect("table");
    let mut history = Vec::new();
    for kv in t.iter().expect("iter") {
        let (_, v) = kv.expect("kv");
        history.push(serde_json::from_str::<Item>(v.value()).expect("parse"));
    }
    history
}

fn redb_verify(path: &Path) {
    let mut db = redb::Database::open(path).expect("redb open");
    assert!(db.check_integrity().expect("check"));
}

// ---------------------------------------------------------------- raw limit

/// The entries' rkyv payloads, 16-byte aligned, as the engine would write them.
fn archives(w: &Workload) -> Vec<rkyv::util::AlignedVec> {
    w.entries
        .iter()
        .flatten()
        .map(LogEntry::to_archive)
        .collect()
}

/// An anonymous map of `len` bytes, written once per page so that no page
/// faults remain (the engine prefaults its segments the same way).
fn prefaulted_map(len: usize) -> memmap2::MmapMut {
    let mut m = memmap2::MmapOptions::new()
        .len(len)
        .populate()
        .map_anon()
        .expect("map");
    for page in m.chunks_mut(4096) {
        page[0] = 1;
    }
    m
}

/// The raw limit: copy each payload into the map, CRC32 and BLAKE3 (keyed by
/// the previous hash) over it.
fn raw_append(map: &mut memmap2::MmapMut, payloads: &[rkyv::util::AlignedVec]) -> [u8; 32] {
    let mut key = [0u8; 32];
    let mut at = 0usize;
    for p in payloads {
        let dst = &mut map[at..at + p.len()];
        dst.copy_from_slice(p);
        let crc = crc32fast::hash(dst);
        key = *blake3::keyed_hash(&key, dst).as_bytes();
        key[0] ^= crc as u8;
        at += p.len().next_multiple_of(16);
    }
    key
}

// ---------------------------------------------------------------- durable appends

/// Runs `commits` durable saves of the workload's turns from `threads`
/// threads; `save(thread_state, turn_index)` does one commit.
fn durable<S: Send>(
    threads: usize,
    commits: usize,
    mut make: impl FnMut() -> S,
    save: impl Fn(&mut S, usize) + Sync,
) -> f64 {
    let mut states: Vec<S> = (0..threads).map(|_| make()).collect();
    let per_thread = commits / threads;
    time(|| {
        std::thread::scope(|s| {
            for (t, st) in states.iter_mut().enumerate() {
                let save = &save;
                s.spawn(move || {
                    for i in 0..per_thread {
                        save(st, i * threads + t);
                    }
                });
            }
        })
    })
}

fn turn_items(w: &Workload, n: usize) -> u64 {
    w.turns[..n].iter().map(|t| t.len() as u64).sum()
}

fn turn_bytes(w: &Workload, n: usize) -> u64 {
    w.entries[..n]
        .iter()
        .flatten()
        .map(|e| e.to_archive().len() as u64)
        .sum()
}

// ---------------------------------------------------------------- the run

struct Runner<'a> {
    cfg: &'a Config,
    rows: Vec<Row>,
}

impl Runner<'_> {
    fn push(&mut self, op: &str, system: &str, items: u64, bytes: u64, commits: u64, secs: f64) {
        eprintln!(
            "  {op:<28} {system:<40} {:>12.0} items/s",
            items as f64 / secs
        );
        self.rows.push(Row {
            op: op.into(),
            system: system.into(),
            items,
            bytes,
            commits,
            secs,
            raw_mb_s: f64::NAN,
        });
    }

    /// Append rows for one workload; returns the directories of the last
    /// repetition of each system, for replay and verify.
    fn append(&mut self, name: &str, w: &Workload) -> Dirs {
        let (items, bytes, turns) = (w.items(), w.payload_bytes, w.turns.len() as u64);
        let op = format!("append, {name}");
        let payloads = archives(w);
        let raw_len: usize = payloads.iter().map(|p| p.len().next_multiple_of(16)).sum();
        let mut map = prefaulted_map(raw_len);
        type Run<'a> = DirRun<'a, f64>;
        // (label, commits, run); the first four keep their last directory.
        let systems: Vec<(&str, u64, Run)> = vec![
            (
                "session-store (Buffered)",
                turns,
                Box::new(|d| ss_append(d, w)),
            ),
            (
                "JSONL + SHA-256 (BufWriter, flush per turn)",
                turns,
                Box::new(|d| jsonl_append(&d.join("log.jsonl"), w)),
            ),
            (
                "SQLite WAL NORMAL, txn per turn",
                turns,
                Box::new(|d| sqlite_append(&d.join("db"), w, "NORMAL", Batch::PerTurn)),
            ),
            (
                "redb Durability::None, txn per turn",
                turns,
                Box::new(|d| redb_append(&d.join("db"), w, redb::Durability::None)),
            ),
            (
                "SQLite WAL NORMAL, autocommit per item",
                items,
                Box::new(|d| sqlite_append(&d.join("db"), w, "NORMAL", Batch::PerItem)),
            ),
            (
                "raw limit (memcpy + BLAKE3 + CRC32)",
                0,
                Box::new(|_| {
                    best_of(LIMIT_PASSES, || {
                        black_box(raw_append(&mut map, &payloads));
                    })
                }),
            ),
        ];
        let labels: Vec<(&str, u64)> = systems.iter().map(|(l, c, _)| (*l, *c)).collect();
        let mut runs: Vec<Run> = systems.into_iter().map(|(_, _, run)| run).collect();
        let (times, kept) = interleave_dirs(self.cfg.reps, &mut runs, Removals::BeforeEachRun);
        drop(runs);
        for ((label, commits), t) in labels.into_iter().zip(times) {
            self.push(&op, label, items, bytes, commits, common::median(t));
        }
        let raw = find(&self.rows, &op, "raw limit").expect("raw row").secs;
        let raw_mb_s = bytes as f64 / 1e6 / raw;
        for r in self.rows.iter_mut().filter(|r| r.op == op) {
            r.raw_mb_s = raw_mb_s;
        }
        let mut kept = kept.into_iter();
        Dirs {
            ss: kept.next(),
            jsonl: kept.next(),
            sqlite: kept.next(),
            redb: kept.next(),
            raw_mb_s,
        }
    }
}

/// One run of a system in the directory it is given.
type DirRun<'a, T> = Box<dyn FnMut(&Path) -> T + 'a>;

/// When [`interleave_dirs`] removes a run's files.
#[derive(Clone, Copy)]
enum Removals {
    /// Just before the same system's next run, which reuses the memory
    /// they held (the single-log rows, hundreds of MB a run).
    BeforeEachRun,
    /// After the last run: on ext4, an inode freed in the last minute is
    /// skipped by each new file's allocation, so removing a run's files
    /// slows whichever system creates files inside its clock next (the
    /// store's payload files, a session's first segment).
    AtTheEnd,
}

/// Runs each system `reps` times, interleaved across systems so that a
/// noisy neighbour slows every system alike rather than one of them, each
/// in a fresh directory, whose files go as `removals` says. Returns each
/// system's results and the directory of its last run.
/// The order of `n` systems in repetition `rep`: the repetition's first
/// system is `rep % n`, and the others follow in an order drawn from `rep`
/// (seeded, the same in every run), so that a system's predecessor changes
/// from one repetition to the next.
fn run_order(n: usize, rep: usize) -> Vec<usize> {
    let first = rep % n.max(1);
    let mut rest: Vec<usize> = (0..n).filter(|&i| i != first).collect();
    let mut rng = common::Rng::new(0x5eed_0000 + rep as u64);
    for i in (1..rest.len()).rev() {
        rest.swap(i, rng.below(i as u64 + 1) as usize);
    }
    std::iter::once(first).chain(rest).take(n).collect()
}

fn interleave_dirs<T>(
    reps: usize,
    runs: &mut [DirRun<'_, T>],
    removals: Removals,
) -> (Vec<Vec<T>>, Vec<tempfile::TempDir>) {
    let mut results: Vec<Vec<T>> = runs.iter().map(|_| Vec::new()).collect();
    let mut kept: Vec<Option<tempfile::TempDir>> = runs.iter().map(|_| None).collect();
    let mut until_the_end = Vec::new();
    // Pass 0 is an untimed warm-up: on this VM, the first writes into memory
    // the process has not used yet ran up to 2.6× slower, and whichever
    // system went first paid for it.
    for rep in 0..=reps {
        // Each repetition runs the systems in another order, so that no
        // system always runs first or right after the same one (two runs of
        // the same code in one repetition came out 1.4× apart by their place
        // alone; a rotation kept each system behind the same one, whose
        // writeback it then shared).
        for i in run_order(runs.len(), rep) {
            let run = &mut runs[i];
            // Each system's previous files go before it runs (so that it
            // reuses the memory they held rather than the next system), or
            // after the last run.
            match removals {
                Removals::BeforeEachRun => kept[i] = None,
                Removals::AtTheEnd => until_the_end.extend(kept[i].take()),
            }
            let d = fresh();
            let r = run(d.path());
            if rep > 0 {
                results[i].push(r);
            }
            kept[i] = Some(d);
        }
    }
    let kept = kept
        .into_iter()
        .map(|d| d.expect("every system ran"))
        .collect();
    (results, kept)
}

/// Runs each case `reps` times, interleaved, after one untimed pass of
/// each, and returns the median of each case's times.
fn medians(reps: usize, cases: &[&dyn Fn() -> f64]) -> Vec<f64> {
    let mut times = vec![Vec::new(); cases.len()];
    for f in cases {
        f();
    }
    for rep in 0..reps {
        for i in run_order(cases.len(), rep) {
            times[i].push(cases[i]());
        }
    }
    times.into_iter().map(common::median).collect()
}

#[derive(Default)]
struct Dirs {
    ss: Option<tempfile::TempDir>,
    jsonl: Option<tempfile::TempDir>,
    sqlite: Option<tempfile::TempDir>,
    redb: Option<tempfile::TempDir>,
    raw_mb_s: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-child") {
        rss_child(&args[i + 1], Path::new(&args[i + 2]));
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let large = args.iter().any(|a| a == "--large")
        || std::env::var_os("BENCH_LARGE").is_some_and(|v| v == "1");
    let headline_only = args.iter().any(|a| a == "--headline");
    let create_only = args.iter().any(|a| a == "--create");
    let forks_only = args.iter().any(|a| a == "--forks");
    let sessions_only = args.iter().any(|a| a == "--sessions");
    let payloads_only = args.iter().any(|a| a == "--payloads");
    let durable_only = args.iter().any(|a| a == "--durable");
    let single_only = args.iter().any(|a| a == "--single");
    let reps = args.iter().position(|a| a == "--reps").map(|i| {
        args.get(i + 1)
            .and_then(|n| n.parse().ok())
            .expect("--reps N")
    });
    let cfg = Config {
        quick,
        large,
        turns: if quick { 2_000 } else { 20_000 },
        reps: reps.unwrap_or(if quick { 3 } else { 5 }),
        durable_commits: if quick { 160 } else { 800 },
    };
    let started = Instant::now();
    print_cpu_features();
    if create_only || forks_only {
        if create_only {
            creation::run(quick, cfg.reps);
        }
        if forks_only {
            forks::run(quick, cfg.reps);
        }
        eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if durable_only {
        durable::run(quick, cfg.reps);
        eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if payloads_only {
        payloads::run(quick, cfg.reps);
        eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if !single_only {
        sessions::run(quick, cfg.reps);
        if sessions_only {
            eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
            return;
        }
        creation::run(quick, cfg.reps);
        forks::run(quick, cfg.reps);
        if headline_only {
            eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
            return;
        }
        payloads::run(quick, cfg.reps);
        durable::run(quick, cfg.reps);
    }
    eprintln!(
        "compare: single log, {} mode, {} turns, {} repetitions",
        if quick { "quick" } else { "full" },
        cfg.turns,
        cfg.reps
    );
    let turns = Workload::turns(11, cfg.turns);
    let small = Workload::small(12, cfg.turns);
    let mut run = Runner {
        cfg: &cfg,
        rows: Vec::new(),
    };

    let dirs = run.append("turns", &turns);
    let small_dirs = run.append("small items", &small);
    drop(small_dirs);

    durable_rows(&mut run, &turns, dirs.raw_mb_s);
    replay_rows(&mut run, &turns, &dirs);
    verify_rows(&mut run, &turns, &dirs);

    print_table(&run.rows, &turns, &cfg);
    let extra = if cfg.large {
        large_figures()
    } else {
        String::new()
    };
    print!("{extra}");
    eprintln!("compare: done in {:.1} s", started.elapsed().as_secs_f64());
}

/// SQLite `synchronous=FULL`, one connection per thread, in a fresh directory.
fn sqlite_durable(w: &Workload, threads: usize, commits: usize, batch: Batch) -> f64 {
    let d = fresh();
    let path = d.path().join("db");
    drop(sqlite_open(&path, "FULL", ITEMS_SCHEMA));
    durable(
        threads,
        commits,
        || sqlite_open(&path, "FULL", ITEMS_SCHEMA),
        |c, i| sqlite_save(c, &w.turns[i], common::TS0 + i as u64, batch),
    )
}

/// Runs `commits` durable commits from `threads` threads, in a fresh
/// directory, and returns the time they took.
type DurableRun<'a> = Box<dyn Fn(usize, usize) -> f64 + 'a>;

/// Durable appends from 1 and from 8 threads. Repetitions are interleaved
/// across systems and thread counts: fsync latency on a shared disk drifts,
/// and the 8-thread ÷ 1-thread ratio must compare like with like.
/// The bound on group commit on this machine: each commit `pwrite`s its
/// turn's payload bytes and waits for an `fdatasync` that began after its
/// write; one waiter syncs for all. No encoding, hashing, headers or marks,
/// into a file zero-filled and synced beforehand (as the engine's segments
/// are once a log syncs).
struct BareGroupCommit {
    file: File,
    /// `fdatasync`s done.
    syncs: AtomicU64,
    end: Mutex<u64>,
    /// (durable end, a sync is running)
    synced: Mutex<(u64, bool)>,
    done: Condvar,
}

impl BareGroupCommit {
    fn create(path: &Path, len: u64) -> BareGroupCommit {
        let file = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)
            .expect("create");
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            file.write_all_at(&zeros, at).expect("zero-fill");
            at += zeros.len() as u64;
        }
        file.sync_all().expect("sync");
        BareGroupCommit {
            file,
            syncs: AtomicU64::new(0),
            end: Mutex::new(0),
            synced: Mutex::new((0, false)),
            done: Condvar::new(),
        }
    }

    fn commit(&self, bytes: &[u8]) {
        let mine = {
            let mut end = self.end.lock().expect("lock");
            self.file.write_all_at(bytes, *end).expect("pwrite");
            *end += bytes.len() as u64;
            *end
        };
        let mut s = self.synced.lock().expect("lock");
        while s.0 < mine {
            if s.1 {
                s = self.done.wait(s).expect("wait");
                continue;
            }
            s.1 = true;
            drop(s);
            let upto = *self.end.lock().expect("lock");
            self.file.sync_data().expect("fdatasync");
            self.syncs.fetch_add(1, Ordering::Relaxed);
            s = self.synced.lock().expect("lock");
            *s = (s.0.max(upto), false);
            self.done.notify_all();
        }
    }
}

fn durable_rows(run: &mut Runner, w: &Workload, raw_mb_s: f64) {
    let n = run.cfg.durable_commits.min(w.turns.len());
    let turn_payloads: Vec<Vec<u8>> = w.entries[..n]
        .iter()
        .map(|t| t.iter().flat_map(|e| e.to_archive().to_vec()).collect())
        .collect();
    // (label, whether each item is its own commit, run)
    let systems: Vec<(&str, bool, DurableRun)> = vec![
        (
            "session-store (Sync, group commit)",
            false,
            Box::new(|threads, commits| {
                let d = fresh();
                let log = Log::open(d.path(), LogOptions::default()).expect("open");
                durable(
                    threads,
                    commits,
                    || (),
                    |_, i| {
                        log.append_batch(
                            &w.entries[i],
                            Durability::Sync,
                            session_store::log::ExpectHead::Any,
                        )
                        .expect("append");
                    },
                )
            }),
        ),
        (
            "JSONL + SHA-256, fdatasync per turn",
            false,
            Box::new(|threads, commits| {
                let d = fresh();
                let path = d.path().join("log.jsonl");
                let j = Mutex::new(Jsonl::create(&path));
                let file = File::options().append(true).open(&path).expect("open");
                durable(
                    threads,
                    commits,
                    || (),
                    |_, i| {
                        j.lock().expect("lock").save(&w.entries[i]);
                        // Outside the lock, so concurrent writers' syncs can overlap.
                        file.sync_data().expect("fdatasync");
                    },
                )
            }),
        ),
        (
            "SQLite WAL FULL, autocommit per item",
            true,
            Box::new(|threads, commits| sqlite_durable(w, threads, commits, Batch::PerItem)),
        ),
        (
            "SQLite WAL FULL, txn per turn",
            false,
            Box::new(|threads, commits| sqlite_durable(w, threads, commits, Batch::PerTurn)),
        ),
        (
            "bound: bare group commit (pwrite + fdatasync)",
            false,
            Box::new(|threads, commits| {
                let d = fresh();
                let len: usize = turn_payloads[..commits].iter().map(Vec::len).sum();
                let bare = BareGroupCommit::create(&d.path().join("bare"), len as u64);
                durable(
                    threads,
                    commits,
                    || (),
                    |_, i| bare.commit(&turn_payloads[i]),
                )
            }),
        ),
        (
            "redb Durability::Immediate, txn per turn",
            false,
            Box::new(|threads, commits| {
                let d = fresh();
                let db = Arc::new(redb::Database::create(d.path().join("db")).expect("create"));
                let seq = AtomicU64::new(0);
                durable(
                    threads,
                    commits,
                    || (),
                    |_, i| redb_save(&db, &w.turns[i], &seq, redb::Durability::Immediate),
                )
            }),
        ),
    ];
    let thread_counts = [1usize, 8];
    let commits = |threads: usize| run.cfg.durable_commits.min(w.turns.len()) / threads * threads;
    let mut times = vec![vec![Vec::new(); systems.len()]; thread_counts.len()];
    for _ in 0..run.cfg.reps {
        for (t, &threads) in thread_counts.iter().enumerate() {
            for (i, (_, _, f)) in systems.iter().enumerate() {
                times[t][i].push(f(threads, commits(threads)));
            }
        }
    }
    for (t, &threads) in thread_counts.iter().enumerate() {
        let n = commits(threads);
        let (items, bytes) = (turn_items(w, n), turn_bytes(w, n));
        let op = format!(
            "durable append, {threads} thread{}",
            if threads > 1 { "s" } else { "" }
        );
        for ((label, per_item, _), ts) in systems.iter().zip(&times[t]) {
            let c = if *per_item { items } else { n as u64 };
            run.push(&op, label, items, bytes, c, common::median(ts.clone()));
        }
        for r in run.rows.iter_mut().filter(|r| r.op == op) {
            r.raw_mb_s = raw_mb_s;
        }
    }
}

fn replay_rows(run: &mut Runner, w: &Workload, dirs: &Dirs) {
    let op = "replay into Items, turns";
    let (items, bytes) = (w.items(), w.payload_bytes);
    let check = |h: Vec<Item>| assert_eq!(h.len() as u64, items);
    let ss = dirs.ss.as_ref().expect("ss dir").path().to_path_buf();
    let jsonl = dirs.jsonl.as_ref().expect("jsonl").path().join("log.jsonl");
    let sqlite = dirs.sqlite.as_ref().expect("sqlite").path().join("db");
    let redb = dirs.redb.as_ref().expect("redb").path().join("db");
    let log = Log::open_read_only(&ss).expect("open");
    let snap = log.snapshot();
    // Owned items straight from the borrowed views of a log already open.
    let open_log = || {
        let mut s = RestoredState::default();
        for rec in snap.iter() {
            s.apply_archived(rec.expect("record").entry())
                .expect("applies");
        }
        s.history
    };
    // The floor under any replay into owned Items: building the same Items
    // from Items already in memory, which is allocation and copying alone.
    let built = ss_replay(&ss);
    let floor = || built.clone();
    let cases: [(&str, &dyn Fn() -> Vec<Item>); 6] = [
        ("session-store (open + restore)", &|| ss_replay(&ss)),
        ("JSONL + SHA-256 (read, parse, fold)", &|| {
            jsonl_replay(&jsonl)
        }),
        ("SQLite (SELECT ORDER BY seq, parse)", &|| {
            sqlite_replay(&sqlite)
        }),
        ("redb (range scan, parse)", &|| redb_replay(&redb)),
        ("session-store (open log, apply_archived)", &open_log),
        ("floor: clone of the same Items (allocation + copy)", &floor),
    ];
    interleaved(
        run,
        op,
        items,
        bytes,
        &cases.map(|(l, f)| {
            (
                l,
                Box::new(move || time(|| check(f()))) as Box<dyn Fn() -> f64>,
            )
        }),
    );
    for r in run.rows.iter_mut().filter(|r| r.op == op) {
        r.raw_mb_s = dirs.raw_mb_s;
    }
}

/// A labelled measurement: the closure runs once and returns its time.
type Case<'a> = (&'a str, Box<dyn Fn() -> f64 + 'a>);

/// Runs each case `reps` times, interleaved, and pushes the medians.
fn interleaved(run: &mut Runner, op: &str, items: u64, bytes: u64, cases: &[Case<'_>]) {
    let fs: Vec<&dyn Fn() -> f64> = cases.iter().map(|(_, f)| f.as_ref()).collect();
    for ((label, _), t) in cases.iter().zip(medians(run.cfg.reps, &fs)) {
        run.push(op, label, items, bytes, 0, t);
    }
}

fn verify_rows(run: &mut Runner, w: &Workload, dirs: &Dirs) {
    let op = "verify, turns";
    let (items, bytes) = (w.items(), w.payload_bytes);
    let ss = dirs.ss.as_ref().expect("ss").path().to_path_buf();
    let jsonl = dirs.jsonl.as_ref().expect("jsonl").path().join("log.jsonl");
    let sqlite = dirs.sqlite.as_ref().expect("sqlite").path().join("db");
    let redb = dirs.redb.as_ref().expect("redb").path().join("db");
    // BLAKE3 alone over the same record bytes the engine verifies.
    let log = Log::open_read_only(&ss).expect("open");
    let records = common::record_bytes(&log);
    let contiguous = records.concat();
    let per_record = || {
        let mut key = [0u8; 32];
        for r in &records {
            key = *blake3::keyed_hash(&key, r).as_bytes();
        }
        black_box(key);
    };
    let one = || {
        black_box(blake3::hash(&contiguous));
    };
    let cases: [Case; 6] = [
        (
            "session-store (CRC + chain + bytecheck)",
            Box::new(|| time(|| ss_verify(&ss))),
        ),
        (
            "JSONL + SHA-256 (chain over the lines)",
            Box::new(|| time(|| jsonl_verify(&jsonl))),
        ),
        (
            "SQLite PRAGMA integrity_check",
            Box::new(|| time(|| sqlite_verify(&sqlite))),
        ),
        (
            "redb check_integrity",
            Box::new(|| time(|| redb_verify(&redb))),
        ),
        (
            "BLAKE3 alone, keyed per record",
            Box::new(|| best_of(LIMIT_PASSES, per_record)),
        ),
        (
            "BLAKE3 alone, one contiguous buffer",
            Box::new(|| best_of(LIMIT_PASSES, one)),
        ),
    ];
    interleaved(run, op, items, bytes, &cases);
    for r in run.rows.iter_mut().filter(|r| r.op == op) {
        r.raw_mb_s = dirs.raw_mb_s;
    }
}

// ---------------------------------------------------------------- output

fn print_table(rows: &[Row], w: &Workload, cfg: &Config) {
    println!();
    println!("## Second table: one log through `Log::append_batch` (the more favourable path: one session, no `Store`, no session cache, no catalog)");
    println!();
    println!(
        "session-store compare ({} mode): {} turns, {} items, {:.1} MB of payload per workload; median of {} runs",
        if cfg.quick { "quick" } else { "full" },
        w.turns.len(),
        w.items(),
        w.payload_bytes as f64 / 1e6,
        cfg.reps
    );
    println!();
    println!("| operation | system | items/s | MB/s | commits/s | session-store ÷ this | % of raw limit |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let mut ops: Vec<&str> = Vec::new();
    for r in rows {
        if !ops.contains(&r.op.as_str()) {
            ops.push(&r.op);
        }
    }
    for op in ops {
        let group: Vec<&Row> = rows.iter().filter(|r| r.op == op).collect();
        let ss = group
            .iter()
            .find(|r| r.system.starts_with("session-store"))
            .map(|r| r.items_s());
        for r in group {
            let ratio = ss.map_or("".into(), |s| format!("{:.2}×", s / r.items_s()));
            let commits = if r.commits > 0 && op.starts_with("durable") {
                format!("{:.0}", r.commits_s())
            } else {
                String::new()
            };
            println!(
                "| {op} | {} | {:.0} | {:.0} | {commits} | {ratio} | {:.0}% |",
                r.system,
                r.items_s(),
                r.mb_s(),
                100.0 * r.mb_s() / r.raw_mb_s
            );
        }
    }
    println!();
    println!(
        "MB/s counts the same bytes for every system: the rkyv payloads of the items' log entries."
    );
    println!("The ratio column is session-store's first row of the operation divided by that row, in items/s.");
    println!("Systems: median of single passes. Limits (raw, BLAKE3 alone): median of the best of {LIMIT_PASSES} passes per repetition.");
    println!();
    print_targets(rows);
}

fn find<'a>(rows: &'a [Row], op: &str, system: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.op == op && r.system.starts_with(system))
}

/// How a figure must compare with its target.
#[derive(Clone, Copy)]
enum Op {
    AtLeast,
    AtMost,
    Below,
}

/// Prints one target line: the figure, the target, and whether it is met.
fn target(what: &str, v: Option<f64>, op: Op, target: f64, unit: &str) {
    let (sign, ok): (&str, fn(f64, f64) -> bool) = match op {
        Op::AtLeast => ("≥", |v, t| v >= t),
        Op::AtMost => ("≤", |v, t| v <= t),
        Op::Below => ("<", |v, t| v < t),
    };
    let (v, ok) = v.map_or((f64::NAN, false), |v| (v, ok(v, target)));
    println!(
        "- {what}: {v:.2}{unit} (target {sign} {target}{unit}) {}",
        if ok { "met" } else { "MISSED" }
    );
}

fn print_targets(rows: &[Row]) {
    let ratio = |op: &str, a: &str, b: &str| -> Option<f64> {
        Some(find(rows, op, a)?.items_s() / find(rows, op, b)?.items_s())
    };
    let line = |what: &str, v: Option<f64>, t: f64, unit: &str| {
        target(what, v, Op::AtLeast, t, unit);
    };
    // What the limit rows allow at most in this run: a target above its
    // bound cannot be met by any implementation on this machine.
    let bound = |what: &str, v: Option<f64>| {
        println!("  - bound: {what}: {:.2}×", v.unwrap_or(f64::NAN));
    };
    println!("Targets (issue 6):");
    let a = "append, turns";
    line(
        "append Buffered ÷ JSONL",
        ratio(a, "session-store", "JSONL"),
        3.0,
        "×",
    );
    bound("raw limit ÷ JSONL", ratio(a, "raw limit", "JSONL"));
    line(
        "append Buffered ÷ SQLite autocommit per item",
        ratio(a, "session-store", "SQLite WAL NORMAL, autocommit"),
        20.0,
        "×",
    );
    bound(
        "raw limit ÷ SQLite autocommit per item",
        ratio(a, "raw limit", "SQLite WAL NORMAL, autocommit"),
    );
    line(
        "append Buffered, % of raw limit",
        find(rows, a, "session-store").map(|r| 100.0 * r.mb_s() / r.raw_mb_s),
        50.0,
        "%",
    );
    line(
        "replay into Items ÷ JSONL",
        ratio(
            "replay into Items, turns",
            "session-store (open + restore)",
            "JSONL",
        ),
        5.0,
        "×",
    );
    bound(
        "the Items' allocation-and-copy floor ÷ JSONL",
        ratio("replay into Items, turns", "floor", "JSONL"),
    );
    let v = "verify, turns";
    line(
        "verify, % of BLAKE3 keyed per record on the same bytes",
        ratio(v, "session-store", "BLAKE3 alone, keyed").map(|r| 100.0 * r),
        60.0,
        "%",
    );
    line(
        "verify, % of BLAKE3 over one contiguous buffer",
        ratio(v, "session-store", "BLAKE3 alone, one").map(|r| 100.0 * r),
        60.0,
        "%",
    );
    let c1 = find(rows, "durable append, 1 thread", "session-store").map(Row::commits_s);
    let c8 = find(rows, "durable append, 8 threads", "session-store").map(Row::commits_s);
    line(
        "Sync commits/s, 8 threads ÷ 1 thread",
        c1.zip(c8).map(|(a, b)| b / a),
        4.0,
        "×",
    );
    let b1 = find(rows, "durable append, 1 thread", "bound: bare").map(Row::commits_s);
    let b8 = find(rows, "durable append, 8 threads", "bound: bare").map(Row::commits_s);
    bound(
        "bare group commit, 8 threads ÷ 1 thread",
        b1.zip(b8).map(|(a, b)| b / a),
    );
}

// ---------------------------------------------------------------- large: RSS, restore

fn large_figures() -> String {
    let mut out = String::new();
    let large = common::large_log();
    let small = common::small_log();
    let bytes = |dir: &Path| -> u64 {
        std::fs::read_dir(dir)
            .expect("dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .sum()
    };
    out += &format!(
        "\nPeak memory replaying a {:.2} GB log (child process, /proc/self/status):\n\n",
        bytes(&large) as f64 / 1e9
    );
    out += "| replay | items | VmHWM | RssAnon (peak, sampled) | RssFile (peak, sampled) |\n| --- | ---: | ---: | ---: | ---: |\n";
    for (mode, label) in [
        ("stream", "every record → owned Items, dropped per record"),
        ("restore", "restore() from the last SessionStart"),
    ] {
        let o = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--rss-child", mode])
            .arg(&large)
            .output()
            .expect("spawn child");
        assert!(
            o.status.success(),
            "child failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s = String::from_utf8_lossy(&o.stdout);
        let field = |k: &str| {
            s.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")).map(str::to_owned))
                .unwrap_or_default()
        };
        let mb = |k: &str| {
            format!(
                "{:.1} MB",
                field(k).parse::<f64>().unwrap_or(f64::NAN) / 1024.0
            )
        };
        out += &format!(
            "| {label} | {} | {} | {} | {} |\n",
            field("items"),
            mb("VmHWM"),
            mb("RssAnonPeak"),
            mb("RssFilePeak")
        );
    }

    // Restore: the same live history after 10 MB and after 1 GB of older entries.
    let restore = |dir: &Path| {
        common::median(
            (0..15)
                .map(|_| {
                    time(|| {
                        black_box(
                            Log::open_read_only(dir)
                                .expect("open")
                                .restore()
                                .expect("restore"),
                        );
                    })
                })
                .collect(),
        )
    };
    let (r10, r1g) = (restore(&small), restore(&large));
    out += &format!(
        "\nRestore from the last SessionStart (open_read_only + restore, median of 15): 10 MB log {:.2} ms, 1 GB log {:.2} ms, ratio {:.2}× (target ≤ 1.5×)\n",
        r10 * 1e3,
        r1g * 1e3,
        r1g / r10
    );
    out
}

/// Which CPU features the two hashes can use here.
fn print_cpu_features() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .and_then(|l| l.split_once(':'))
        .map_or(Vec::new(), |(_, f)| f.split_whitespace().collect());
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, m)| m.trim());
    let has = |f: &str| if flags.contains(&f) { "yes" } else { "no" };
    println!(
        "CPU: {model}; /proc/cpuinfo flags: sha_ni {}, avx2 {}, avx512f {}, sse4_1 {}",
        has("sha_ni"),
        has("avx2"),
        has("avx512f"),
        has("sse4_1")
    );
    println!("- BLAKE3 (session-store's chain) picks AVX-512, AVX2, SSE4.1 or SSE2 at run time; its SIMD lanes hash 1 KiB chunks side by side, so a record of a few KB fills few of them.");
    println!("- SHA-256 (the JSONL peer) is the `sha2` 0.10.9 crate, built with its default features only (no `asm`, no `force-soft`): on x86_64 it checks for SHA-NI (`sha`, with SSE2, SSSE3, SSE4.1) at run time through `cpufeatures` and uses the SHA extensions when present, else its portable code.");
    println!();
}

fn status_kb(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| {
            v.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// In the child: replay the log and print what /proc/self/status says.
fn rss_child(mode: &str, dir: &Path) {
    let mut anon_peak = status_kb("RssAnon");
    let mut file_peak = status_kb("RssFile");
    let items = match mode {
        "stream" => {
            let log = Log::open_read_only(dir).expect("open");
            let snap = log.snapshot();
            let mut n = 0u64;
            for (i, rec) in snap.iter().enumerate() {
                let rec = rec.expect("record");
                for item in rec.entry().items() {
                    black_box(item.to_item());
                    n += 1;
                }
                if i % 1024 == 0 {
                    anon_peak = anon_peak.max(status_kb("RssAnon"));
                    file_peak = file_peak.max(status_kb("RssFile"));
                }
            }
            n
        }
        "restore" => {
            let log = Log::open_read_only(dir).expect("open");
            let s = log.restore().expect("restore");
            anon_peak = anon_peak.max(status_kb("RssAnon"));
            file_peak = file_peak.max(status_kb("RssFile"));
            s.history.len() as u64
        }
        other => panic!("unknown mode {other}"),
    };
    anon_peak = anon_peak.max(status_kb("RssAnon"));
    println!(
        "items={items} VmHWM={} RssAnonPeak={anon_peak} RssFilePeak={file_peak}",
        status_kb("VmHWM"),
    );
}
