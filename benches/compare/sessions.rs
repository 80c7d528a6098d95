//! The headline table: what agent runtimes do. Many sessions, each saved
//! turn by turn through the public `Store` API, turn `t` of every session
//! before turn `t + 1` of any (round-robin), with default `StoreOptions`.
//! Every peer gets the same shape:
//! - JSONL + SHA-256: one file per session, every file kept open behind a
//!   `BufWriter` that is flushed once per turn (what `Buffered` promises:
//!   the turn is in the page cache when the save returns);
//! - SQLite WAL, `synchronous=NORMAL` (no fsync per commit, as `Buffered`):
//!   one database, a session column, the composite primary key
//!   `(session, seq)`, one transaction per turn;
//! - redb: one table keyed by `(session, seq)`, one write transaction per
//!   turn, with `Durability::None` and with its default, `Immediate`.
//!
//! Peers store one record per item, `{"ts":…,"item":{…}}` serialized from
//! the borrowed item (a session's first record carries its `SessionStart`
//! instead), so MB/s counts the same bytes for everyone: the items' JSON.
//!
//! A pass creates every session (timed on its own, reported, not part of
//! the append figures), saves every turn (each save timed: latency
//! percentiles; their wall time: throughput), closes (untimed), sums the
//! allocated blocks, then replays every session from a fresh open.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use session_store::{
    EntryHash, Item, Log, LogEntry, RequestConfig, SessionId, Store, StoreOptions,
};

use crate::common::{self, Mix, Rng};
use crate::{interleave_dirs, medians, sqlite_open, target, time, DirRun, Jsonl, Op, Removals};

/// One workload's size and mix.
#[derive(Clone, Copy)]
pub struct Shape {
    /// "A" or "B".
    pub name: &'static str,
    /// Sessions written side by side.
    pub sessions: usize,
    /// Turns per session.
    pub turns: usize,
    /// Item sizes.
    pub mix: Mix,
    /// Seed of the items and ids.
    pub seed: u64,
}

/// The two workloads, or CI-sized ones.
pub fn shapes(quick: bool) -> [Shape; 2] {
    [
        Shape {
            name: "A",
            sessions: if quick { 50 } else { 200 },
            turns: if quick { 40 } else { 100 },
            mix: common::TURNS,
            seed: 21,
        },
        Shape {
            name: "B",
            // `COMPARE_B_SESSIONS` sets B's sessions in either mode (the
            // issue's 10,000 beside a quick A, say).
            sessions: std::env::var("COMPARE_B_SESSIONS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(if quick { 400 } else { 10_000 }),
            turns: 5,
            mix: common::SMALL,
            seed: 22,
        },
    ]
}

/// The sessions of one workload, generated once and shared by every system.
struct Sessions {
    shape: Shape,
    ids: Vec<SessionId>,
    /// `ids` as text: the peers' session keys and file names.
    names: Vec<String>,
    /// `turns[session][turn]`: the items of one save.
    turns: Vec<Vec<Vec<Item>>>,
    items: u64,
    item_json_bytes: u64,
    /// The item JSON of the largest save.
    largest_save_bytes: u64,
}

impl Sessions {
    fn new(shape: Shape) -> Sessions {
        let mut id_rng = Rng::new(shape.seed);
        let names: Vec<String> = (0..shape.sessions)
            .map(|s| uuid_v7_text(common::TS0 + s as u64, &mut id_rng))
            .collect();
        let ids = names.iter().map(|n| n.parse().expect("id")).collect();
        let turns: Vec<Vec<Vec<Item>>> = (0..shape.sessions)
            .map(|s| {
                let mut rng = Rng::new(shape.seed * 1_000_000 + s as u64);
                (0..shape.turns as u64)
                    .map(|i| common::turn(&mut rng, &shape.mix, i))
                    .collect()
            })
            .collect();
        let all = || turns.iter().flatten().flatten();
        let json_len = |i: &Item| serde_json::to_vec(i).expect("json").len() as u64;
        Sessions {
            shape,
            ids,
            names,
            items: all().count() as u64,
            item_json_bytes: all().map(json_len).sum(),
            largest_save_bytes: turns
                .iter()
                .flatten()
                .map(|turn| turn.iter().map(json_len).sum())
                .max()
                .unwrap_or(0),
            turns,
        }
    }

    fn saves(&self) -> u64 {
        (self.shape.sessions * self.shape.turns) as u64
    }
}

/// A UUID v7 in canonical text, its time `ms` and its random bits from `rng`.
fn uuid_v7_text(ms: u64, rng: &mut Rng) -> String {
    let (a, b) = (rng.next_u64(), rng.next_u64());
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        ms >> 16,
        ms & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a peer stores per item (or, first, per session).
#[derive(Serialize)]
struct Record<'a> {
    ts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<&'a LogEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<&'a Item>,
}

/// A stored record read back: the item, if it is one.
#[derive(Deserialize)]
struct Stored {
    item: Option<Item>,
}

impl Record<'_> {
    fn start_json(start: &LogEntry) -> Vec<u8> {
        let r = Record {
            ts: now_ms(),
            start: Some(start),
            item: None,
        };
        serde_json::to_vec(&r).expect("json")
    }

    /// One JSON record per item, all stamped with the time of the save.
    fn items_json(turn: &[Item]) -> impl Iterator<Item = Vec<u8>> + '_ {
        let ts = now_ms();
        turn.iter().map(move |item| {
            let r = Record {
                ts,
                start: None,
                item: Some(item),
            };
            serde_json::to_vec(&r).expect("json")
        })
    }
}

/// Parses stored records into the session's items.
fn parse_items<'a>(records: impl Iterator<Item = &'a [u8]>) -> Vec<Item> {
    records
        .filter_map(|r| serde_json::from_slice::<Stored>(r).expect("parse").item)
        .collect()
}

// ---------------------------------------------------------------- systems

#[derive(Clone, Copy, PartialEq)]
enum System {
    Store,
    /// The store with every item in its record: what the payload area
    /// (issue 18) costs or saves the same writes, in the same run.
    StoreInline,
    /// The store without its page-cache worker (`populate_ahead: false`):
    /// what bringing the next pages in on another core saves the same
    /// writes, in the same run.
    StoreNoAhead,
    Jsonl,
    Sqlite,
    RedbNone,
    RedbImmediate,
}

/// The systems of a run. redb with its default durability fsyncs every
/// commit, which makes it the slowest row by far on a shared disk and no
/// target names it: the quick mode leaves it out.
fn systems(quick: bool) -> Vec<System> {
    let mut all = vec![
        System::Store,
        System::StoreInline,
        System::StoreNoAhead,
        System::Jsonl,
        System::Sqlite,
        System::RedbNone,
        System::RedbImmediate,
    ];
    if quick {
        all.pop();
    }
    all
}

/// One system's writes of one workload.
trait Writer {
    /// Creates session `s` (its `SessionStart`).
    fn create(&mut self, s: usize);
    /// Saves one turn of session `s`.
    fn save(&mut self, s: usize, turn: &[Item]);
    /// Closes: untimed, for every system. Dropping is enough for most.
    fn close(self: Box<Self>) {}
}

impl System {
    fn label(self) -> &'static str {
        match self {
            System::Store => "session-store (Store::save_delta, default options)",
            System::StoreInline => {
                "session-store, every item in its record (`payload_threshold(usize::MAX)`)"
            }
            System::StoreNoAhead => {
                "session-store, no pages brought in ahead (`populate_ahead: false`)"
            }
            System::Jsonl => "JSONL + SHA-256 (file per session, flush per turn)",
            System::Sqlite => "SQLite WAL NORMAL, txn per turn",
            System::RedbNone => "redb Durability::None, txn per turn",
            System::RedbImmediate => "redb default (Immediate), txn per turn",
        }
    }

    fn writer<'a>(self, dir: &Path, w: &'a Sessions) -> Box<dyn Writer + 'a> {
        match self {
            System::Store | System::StoreInline | System::StoreNoAhead => Box::new(StoreWriter {
                store: Store::open_with(
                    dir,
                    match self {
                        System::StoreInline => {
                            StoreOptions::default().payload_threshold(usize::MAX)
                        }
                        System::StoreNoAhead => {
                            let mut opts = StoreOptions::default();
                            opts.log.populate_ahead = false;
                            opts
                        }
                        _ => StoreOptions::default(),
                    },
                )
                .expect("open store"),
                ids: &w.ids,
                heads: Vec::with_capacity(w.ids.len()),
            }),
            System::Jsonl => Box::new(JsonlWriter {
                dir: dir.to_path_buf(),
                names: &w.names,
                files: Vec::with_capacity(w.names.len()),
            }),
            System::Sqlite => Box::new(Keyed::new(
                SqliteTable(sqlite_open(&dir.join("db"), "NORMAL", SQLITE_SCHEMA)),
                &w.names,
            )),
            System::RedbNone | System::RedbImmediate => Box::new(Keyed::new(
                RedbTable {
                    db: redb::Database::create(dir.join("db")).expect("redb create"),
                    durability: match self {
                        System::RedbNone => redb::Durability::None,
                        _ => redb::Durability::Immediate,
                    },
                },
                &w.names,
            )),
        }
    }

    /// Replays every session into owned items from a fresh open; returns
    /// the time it took (the results are dropped after the clock stops).
    fn replay(self, dir: &Path, w: &Sessions) -> f64 {
        let start = Instant::now();
        let histories: Vec<Vec<Item>> = match self {
            System::Store | System::StoreInline | System::StoreNoAhead => {
                let store = Store::open(dir).expect("open store");
                w.ids
                    .iter()
                    .map(|&id| store.restore(id).expect("restore").history)
                    .collect()
            }
            System::Jsonl => w
                .names
                .iter()
                .map(|n| {
                    let text = std::fs::read(jsonl_path(dir, n)).expect("read");
                    parse_items(text.split(|&b| b == b'\n').filter(|l| !l.is_empty()))
                })
                .collect(),
            System::Sqlite => {
                let c = Connection::open(dir.join("db")).expect("open");
                let mut stmt = c
                    .prepare("SELECT body FROM records WHERE session = ?1 ORDER BY seq")
                    .expect("prepare");
                w.names
                    .iter()
                    .map(|n| {
                        let mut rows = stmt.query([n]).expect("query");
                        let mut items = Vec::new();
                        while let Some(row) = rows.next().expect("row") {
                            let body = row.get_ref(0).expect("body").as_bytes().expect("text");
                            items.extend(parse_items(std::iter::once(body)));
                        }
                        items
                    })
                    .collect()
            }
            System::RedbNone | System::RedbImmediate => {
                let db = redb::Database::open(dir.join("db")).expect("redb open");
                let tx = db.begin_read().expect("read");
                let t = tx.open_table(REDB_RECORDS).expect("table");
                w.names
                    .iter()
                    .map(|n| {
                        let range = t
                            .range((n.as_str(), 0u64)..=(n.as_str(), u64::MAX))
                            .expect("range");
                        let values: Vec<_> = range.map(|kv| kv.expect("kv").1).collect();
                        parse_items(values.iter().map(|v| v.value().as_bytes()))
                    })
                    .collect()
            }
        };
        let secs = start.elapsed().as_secs_f64();
        let items: u64 = histories.iter().map(|h| h.len() as u64).sum();
        assert_eq!(items, w.items, "{} replayed the wrong items", self.label());
        secs
    }
}

struct StoreWriter<'a> {
    store: Store,
    ids: &'a [SessionId],
    heads: Vec<EntryHash>,
}

impl Writer for StoreWriter<'_> {
    fn create(&mut self, s: usize) {
        assert_eq!(self.heads.len(), s, "sessions are created in order");
        let head = self
            .store
            .create_session_with_id(
                self.ids[s],
                Some(common::SYSTEM_PROMPT),
                RequestConfig::model(common::MODEL),
                &[],
            )
            .expect("create");
        self.heads.push(head);
    }

    fn save(&mut self, s: usize, turn: &[Item]) {
        self.store
            .save_delta(self.ids[s], &mut self.heads[s], turn)
            .expect("save_delta");
    }

    fn close(self: Box<Self>) {
        self.store.close().expect("close");
    }
}

fn jsonl_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.jsonl"))
}

struct JsonlWriter<'a> {
    dir: PathBuf,
    names: &'a [String],
    files: Vec<Jsonl>,
}

impl Writer for JsonlWriter<'_> {
    fn create(&mut self, s: usize) {
        assert_eq!(self.files.len(), s, "sessions are created in order");
        let mut f = Jsonl::create(&jsonl_path(&self.dir, &self.names[s]));
        f.chain(&Record::start_json(&common::session_start(&[], now_ms())));
        f.flush();
        self.files.push(f);
    }

    fn save(&mut self, s: usize, turn: &[Item]) {
        let f = &mut self.files[s];
        for json in Record::items_json(turn) {
            f.chain(&json);
        }
        f.flush();
    }
}

/// A peer that keeps records in one table keyed by `(session, seq)`.
trait Table {
    /// Inserts `bodies` as records `seq, seq + 1, …` of `session`, in one
    /// transaction; returns how many.
    fn insert(&mut self, session: &str, seq: u64, bodies: impl Iterator<Item = Vec<u8>>) -> u64;
}

/// A [`Table`] written as sessions: each session's next seq, one
/// transaction per save.
struct Keyed<'a, T> {
    table: T,
    names: &'a [String],
    next: Vec<u64>,
}

impl<'a, T> Keyed<'a, T> {
    fn new(table: T, names: &'a [String]) -> Self {
        Keyed {
            table,
            names,
            next: Vec::with_capacity(names.len()),
        }
    }
}

impl<T: Table> Writer for Keyed<'_, T> {
    fn create(&mut self, s: usize) {
        assert_eq!(self.next.len(), s, "sessions are created in order");
        let start = Record::start_json(&common::session_start(&[], now_ms()));
        let n = self.table.insert(&self.names[s], 0, std::iter::once(start));
        self.next.push(n);
    }

    fn save(&mut self, s: usize, turn: &[Item]) {
        let n = self
            .table
            .insert(&self.names[s], self.next[s], Record::items_json(turn));
        self.next[s] += n;
    }
}

const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS records(
    session TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (session, seq))";

struct SqliteTable(Connection);

impl Table for SqliteTable {
    fn insert(&mut self, session: &str, seq: u64, bodies: impl Iterator<Item = Vec<u8>>) -> u64 {
        let tx = self
            .0
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        let mut n = 0;
        {
            let mut stmt = tx
                .prepare_cached("INSERT INTO records(session, seq, body) VALUES (?1, ?2, ?3)")
                .expect("prepare");
            for body in bodies {
                let body = std::str::from_utf8(&body).expect("utf-8");
                stmt.execute(params![session, (seq + n) as i64, body])
                    .expect("insert");
                n += 1;
            }
        }
        tx.commit().expect("commit");
        n
    }
}

const REDB_RECORDS: redb::TableDefinition<(&str, u64), &str> =
    redb::TableDefinition::new("records");

struct RedbTable {
    db: redb::Database,
    durability: redb::Durability,
}

impl Table for RedbTable {
    fn insert(&mut self, session: &str, seq: u64, bodies: impl Iterator<Item = Vec<u8>>) -> u64 {
        let mut tx = self.db.begin_write().expect("begin");
        tx.set_durability(self.durability);
        let mut n = 0;
        {
            let mut t = tx.open_table(REDB_RECORDS).expect("table");
            for body in bodies {
                let body = std::str::from_utf8(&body).expect("utf-8");
                t.insert((session, seq + n), body).expect("insert");
                n += 1;
            }
        }
        tx.commit().expect("commit");
        n
    }
}

// ---------------------------------------------------------------- one pass

/// Save latency percentiles of one pass, in seconds.
#[derive(Clone, Copy)]
struct Latency {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Latency {
    fn of(mut ns: Vec<u64>) -> Latency {
        ns.sort_unstable();
        // Nearest rank.
        let q = |q: f64| {
            ns[((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1] as f64 / 1e9
        };
        Latency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: q(1.0),
        }
    }
}

/// What one pass of one system measured.
struct Pass {
    create_s: f64,
    append_s: f64,
    /// CPU time of the whole process (every thread: the store's workers
    /// too) while saving.
    cpu_s: f64,
    latency: Latency,
    /// Allocated bytes of the files under the system's directory.
    file_bytes: u64,
    /// Allocated bytes of the directories under it (the root not counted).
    dir_bytes: u64,
    replay_s: f64,
    /// The same replay with the system's files dropped from the page cache
    /// first ([`common::drop_from_page_cache`]).
    cold_replay_s: f64,
}

fn pass(system: System, dir: &Path, w: &Sessions) -> Pass {
    let mut writer = system.writer(dir, w);
    let create_s = time(|| {
        for s in 0..w.shape.sessions {
            writer.create(s);
        }
    });
    let mut ns = Vec::with_capacity(w.saves() as usize);
    let cpu_before = process_cpu_s();
    let append_s = time(|| {
        for t in 0..w.shape.turns {
            for (s, turns) in w.turns.iter().enumerate() {
                let start = Instant::now();
                writer.save(s, &turns[t]);
                ns.push(start.elapsed().as_nanos() as u64);
            }
        }
    });
    let cpu_s = process_cpu_s() - cpu_before;
    writer.close();
    let (file_bytes, dir_bytes) = common::allocated(dir);
    let replay_s = system.replay(dir, w);
    common::drop_from_page_cache(dir);
    common::settle_writeback();
    let cold_replay_s = system.replay(dir, w);
    Pass {
        create_s,
        append_s,
        cpu_s,
        latency: Latency::of(ns),
        file_bytes,
        dir_bytes,
        replay_s,
        cold_replay_s,
    }
}

/// CPU time (user and system) of this process so far, every thread, from
/// `/proc/self/stat` (clock ticks: 10 ms at the usual 100 Hz).
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command's closing parenthesis: state is 3rd,
    // utime 14th and stime 15th of the whole line.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

// ---------------------------------------------------------------- figures

/// One system's medians over the repetitions.
struct Figures {
    system: System,
    create_s: f64,
    append_s: f64,
    cpu_s: f64,
    latency: Latency,
    /// The slowest save of all repetitions.
    worst_s: f64,
    file_bytes: f64,
    dir_bytes: f64,
    replay_s: f64,
    cold_replay_s: f64,
}

impl Figures {
    fn of(system: System, passes: &[Pass]) -> Figures {
        let m = |f: &dyn Fn(&Pass) -> f64| common::median(passes.iter().map(f).collect());
        Figures {
            system,
            create_s: m(&|p| p.create_s),
            append_s: m(&|p| p.append_s),
            cpu_s: m(&|p| p.cpu_s),
            latency: Latency {
                p50: m(&|p| p.latency.p50),
                p99: m(&|p| p.latency.p99),
                p999: m(&|p| p.latency.p999),
                max: m(&|p| p.latency.max),
            },
            worst_s: passes.iter().map(|p| p.latency.max).fold(0.0, f64::max),
            file_bytes: m(&|p| p.file_bytes as f64),
            dir_bytes: m(&|p| p.dir_bytes as f64),
            replay_s: m(&|p| p.replay_s),
            cold_replay_s: m(&|p| p.cold_replay_s),
        }
    }

    fn disk_bytes(&self) -> f64 {
        self.file_bytes + self.dir_bytes
    }
}

/// Everything measured on one workload.
struct Report {
    w: Sessions,
    figures: Vec<Figures>,
    /// The floor of any save that puts the turn in the page cache: the
    /// median time of one pass of [`write_floor`].
    floor_s: f64,
    /// The same with every saved byte hashed into a keyed BLAKE3 chain, as
    /// the issue requires: one pass of [`write_floor`], [`FloorChain::PerSave`].
    chain_floor_s: f64,
    /// The same with one hash a record, chained ([`FloorChain::PerRecord`]).
    record_chain_floor_s: f64,
    /// The slowest save of that floor over all its repetitions: what the
    /// machine makes of the workload's saves with nothing but a write and
    /// the chain's hashes, the bound beside the worst-save target.
    record_chain_floor_worst_s: f64,
    /// The per-record floor writing session-store's own records, encoded
    /// from the caller's items in the clock ([`FloorChain::Format`]).
    format_floor_s: f64,
    /// The per-record floor with only as many files kept open as the
    /// store's default open budget ([`write_floor`]'s `kept`: an open
    /// session keeps one descriptor, its active segment's), the
    /// others opened and closed around each save, and that budget; `None`
    /// when the budget holds every session (the per-record floor itself).
    budget_floor: Option<(f64, usize)>,
    /// The floor of any replay from a file per session: the median time of
    /// one pass of [`read_floor`].
    read_floor_s: f64,
    /// The same floor with every file dropped from the page cache first.
    cold_read_floor_s: f64,
    /// That cold floor with each session's file in a directory of its own
    /// ([`FloorLayout::Dir`]).
    cold_dir_read_floor_s: f64,
    /// The same floor with each session's file in a directory of its own,
    /// listed before the read ([`FloorLayout::Dir`]).
    dir_read_floor_s: f64,
    /// (`Store::open` + `restore`, `Log::open_read_only` + `restore`) of one session.
    one_session: (f64, f64),
    one_session_items: usize,
    /// The store's record bytes (every session's snapshot, and the payload
    /// area's files) and the compact JSON of the entries they hold.
    records: (u64, u64),
    /// Repetitions of every pass and bound.
    reps: usize,
    /// For the workload with the most sessions.
    list: Option<ListFigures>,
}

impl Report {
    fn find(&self, system: System) -> &Figures {
        self.figures
            .iter()
            .find(|f| f.system == system)
            .expect("every system runs")
    }
}

/// The store's record bytes under `root` (each session's records, and the
/// apparent size of every payload file) and the compact JSON of the entries
/// the workload's saves make (`group_delta` of each turn, and each session's
/// first `SessionStart`), as the issue compares them.
fn record_bytes(root: &Path, w: &Sessions) -> (u64, u64) {
    let mut records: u64 = w
        .ids
        .iter()
        .map(|&id| {
            Log::open_read_only(session_dir(root, id))
                .expect("open")
                .snapshot()
                .bytes()
        })
        .sum();
    let mut stack = vec![root.join("payloads")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = e.metadata().expect("stat");
            if meta.is_dir() {
                stack.push(e.path());
            } else if e.file_name() != "LOCK" {
                records += meta.len();
            }
        }
    }
    let ts = now_ms();
    let start = LogEntry::SessionStart {
        ts,
        system_prompt: Some(common::SYSTEM_PROMPT.into()),
        config: RequestConfig::model(common::MODEL),
        history: vec![],
        forked_from: None,
        compacted_from: None,
    };
    let json = |e: &LogEntry| serde_json::to_vec(e).expect("json").len() as u64;
    let turns: u64 = w
        .turns
        .iter()
        .flatten()
        .flat_map(|turn| session_store::group_delta(turn, ts))
        .map(|e| json(&e))
        .sum();
    (records, turns + json(&start) * w.ids.len() as u64)
}

fn measure(shape: Shape, systems: &[System], reps: usize, list: bool) -> Report {
    eprintln!(
        "headline {}: {} sessions × {} turns, generating…",
        shape.name, shape.sessions, shape.turns
    );
    let w = Sessions::new(shape);
    let mut runs: Vec<DirRun<Pass>> = systems
        .iter()
        .map(|&sys| {
            let w = &w;
            Box::new(move |d: &Path| {
                let p = pass(sys, d, w);
                eprintln!(
                    "  {:<52} append {:>8.1} ms  replay {:>8.1} ms",
                    sys.label(),
                    p.append_s * 1e3,
                    p.replay_s * 1e3
                );
                p
            }) as DirRun<Pass>
        })
        .collect();
    let (passes, dirs) = interleave_dirs(reps, &mut runs, Removals::AtTheEnd);
    drop(runs);
    let figures = systems
        .iter()
        .zip(&passes)
        .map(|(&s, p)| Figures::of(s, p))
        .collect();
    let root = dirs[0].path();
    let one_session = one_session(root, w.ids[0], reps);
    let one_session_items = Log::open_read_only(session_dir(root, w.ids[0]))
        .expect("open")
        .restore()
        .expect("restore")
        .history
        .len();
    let list = list.then(|| list_figures(root, w.ids.len(), reps));
    let records = record_bytes(root, &w);
    // The write floors in turns, so that the machine's state falls
    // on all alike.
    let every = w.names.len();
    // An open session, parked or not, keeps its active segment's
    // descriptor (which holds its writer lock): the store writes through
    // kept files for as many sessions as its open budget holds.
    let budget_kept = session_store::store::default_max_open_sessions().min(every);
    let (mut floors, mut chained, mut per_record, mut formatted, mut budgeted) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut record_chain_floor_worst_s: f64 = 0.0;
    for _ in 0..reps {
        floors.push(write_floor(&w, FloorChain::None, every).0);
        chained.push(write_floor(&w, FloorChain::PerSave, every).0);
        let (secs, worst) = write_floor(&w, FloorChain::PerRecord, every);
        per_record.push(secs);
        record_chain_floor_worst_s = record_chain_floor_worst_s.max(worst);
        formatted.push(write_floor(&w, FloorChain::Format, every).0);
        if budget_kept < every {
            budgeted.push(write_floor(&w, FloorChain::PerRecord, budget_kept).0);
        }
    }
    let floor_s = common::median(floors);
    let chain_floor_s = common::median(chained);
    let record_chain_floor_s = common::median(per_record);
    let format_floor_s = common::median(formatted);
    let budget_floor = (budget_kept < every).then(|| (common::median(budgeted), budget_kept));
    let read_floor_s = common::median(
        (0..reps)
            .map(|_| read_floor(&w, FloorLayout::File, false))
            .collect(),
    );
    let dir_read_floor_s = common::median(
        (0..reps)
            .map(|_| read_floor(&w, FloorLayout::Dir, false))
            .collect(),
    );
    let cold_read_floor_s = common::median(
        (0..reps)
            .map(|_| read_floor(&w, FloorLayout::File, true))
            .collect(),
    );
    let cold_dir_read_floor_s = common::median(
        (0..reps)
            .map(|_| read_floor(&w, FloorLayout::Dir, true))
            .collect(),
    );
    Report {
        w,
        figures,
        cold_read_floor_s,
        cold_dir_read_floor_s,
        floor_s,
        chain_floor_s,
        record_chain_floor_s,
        record_chain_floor_worst_s,
        format_floor_s,
        budget_floor,
        read_floor_s,
        dir_read_floor_s,
        one_session,
        one_session_items,
        records,
        reps,
        list,
    }
}

/// How much of the saved bytes a write floor hashes, and in what pieces.
#[derive(Clone, Copy, PartialEq)]
enum FloorChain {
    /// No hash.
    None,
    /// One keyed BLAKE3 a save over all its bytes.
    PerSave,
    /// One keyed BLAKE3 a record (an item's JSON line), keyed by the hash
    /// of the record before it: the chain of every record that the design
    /// card asks for, with hashes that do not depend on how records were
    /// batched (DESIGN.md, "The hash chain").
    PerRecord,
    /// session-store's own records, made in the clock: the caller's items
    /// encoded as its writer encodes them (the grouped entries archived
    /// with rkyv) and each record sealed (CRC32 and its keyed BLAKE3,
    /// chained) as its writer seals them ([`session_store::seal_delta`]).
    /// The bytes made before the clock are not used.
    Format,
}

/// The least a save can cost that leaves the turn in the page cache, as
/// `Buffered` and the JSONL peer do: one `write(2)` per save of bytes made
/// before the clock (the turn's JSON records), to a file per session kept
/// open, round-robin as every system saves; with [`FloorChain::None`],
/// no encoding, no hash, no state. Returns the time of all saves.
///
/// With [`FloorChain::PerSave`], each save also hashes its bytes once,
/// keyed by the session's previous hash (BLAKE3), and keeps the digest as
/// the next key: the least a save costs that writes once and puts every
/// byte it saves into a keyed BLAKE3 chain, as the issue requires of every
/// record. One hash over the whole turn is what any chain's input must at
/// least cover, and hashes faster than one per record (a larger input is
/// hashed several chunks at a time). [`FloorChain::PerRecord`] hashes each
/// record on its own instead, keyed by the one before, as session-store's
/// format does. [`FloorChain::Format`] writes session-store's records
/// instead of the JSON lines, encoding the caller's items into them in the
/// clock: the least a store writing those records with one `write(2)` a
/// save can cost, with no session to find, no head to check and no
/// payload area.
///
/// Only the first `kept` sessions' files stay open; each save of any other
/// session opens its file (append) and closes it again, as a store must
/// for the sessions its descriptor budget cannot hold. Keeping one fixed
/// set open is the best any replacement policy does for a round-robin over
/// more sessions than it holds (each session is next used after every
/// other), so with `kept` the store's open budget this is the least such
/// a store's save can cost.
///
/// Also returns the slowest save, each timed as the systems' saves are.
fn write_floor(w: &Sessions, chain: FloorChain, kept: usize) -> (f64, f64) {
    use std::io::Write;
    let dir = crate::fresh();
    // Per session, per turn: the turn's records, and the same bytes whole.
    type Turn = (Vec<Vec<u8>>, Vec<u8>);
    let turns: Vec<Vec<Turn>> = w
        .turns
        .iter()
        .map(|turns| {
            turns
                .iter()
                .map(|turn| {
                    let records: Vec<Vec<u8>> = Record::items_json(turn)
                        .map(|mut line| {
                            line.push(b'\n');
                            line
                        })
                        .collect();
                    let whole = records.concat();
                    (records, whole)
                })
                .collect()
        })
        .collect();
    let paths: Vec<PathBuf> = w.names.iter().map(|n| dir.path().join(n)).collect();
    // A session past `kept` has no file open between its saves.
    let mut files: Vec<Option<std::fs::File>> = paths
        .iter()
        .enumerate()
        .map(|(s, path)| {
            let file = std::fs::File::create(path).expect("create");
            (s < kept).then_some(file)
        })
        .collect();
    let mut keys = vec![[0u8; 32]; files.len()];
    // For `Format`: each session's head and next seq, and the buffer its
    // records are encoded into.
    let mut heads = vec![(EntryHash::genesis(), 0u64); files.len()];
    let mut buf = rkyv::util::AlignedVec::<16>::new();
    let mut worst = std::time::Duration::ZERO;
    let secs = time(|| {
        for t in 0..w.shape.turns {
            for (s, (((file, path), turns), key)) in files
                .iter_mut()
                .zip(&paths)
                .zip(&turns)
                .zip(&mut keys)
                .enumerate()
            {
                let start = Instant::now();
                let (records, whole) = &turns[t];
                let mut bytes: &[u8] = whole;
                match chain {
                    FloorChain::None => {}
                    FloorChain::PerSave => *key = *blake3::keyed_hash(key, whole).as_bytes(),
                    FloorChain::PerRecord => {
                        for r in records {
                            *key = *blake3::keyed_hash(key, r).as_bytes();
                        }
                    }
                    FloorChain::Format => {
                        let (head, seq) = &mut heads[s];
                        let ts = common::TS0 + t as u64;
                        session_store::seal_delta(&w.turns[s][t], ts, head, seq, &mut buf)
                            .expect("encode");
                        bytes = &buf;
                    }
                }
                match file {
                    Some(file) => file.write_all(bytes).expect("write"),
                    None => std::fs::OpenOptions::new()
                        .append(true)
                        .open(path)
                        .and_then(|mut f| f.write_all(bytes))
                        .expect("write"),
                }
                worst = worst.max(start.elapsed());
            }
        }
    });
    (secs, worst.as_secs_f64())
}

/// How the sessions of a read floor lie on disk.
#[derive(Clone, Copy, PartialEq)]
enum FloorLayout {
    /// A file per session, as the JSONL peer keeps them.
    File,
    /// A directory per session holding its one file, as a store whose
    /// session is a directory keeps them: the read lists the directory
    /// first, to find the file (session-store lists a session's directory
    /// to find its segments).
    Dir,
}

/// The least a replay costs that reads each session from a file of its
/// own into owned items: one `std::fs::read` of the session's JSONL bytes
/// (written before the clock, in the page cache as every system's are)
/// and a clone of its items, built before the clock; no parse, no check,
/// no hash. With [`FloorLayout::Dir`], each file is in a directory of its
/// session's, listed before the read. Returns the time for all sessions.
fn read_floor(w: &Sessions, layout: FloorLayout, cold: bool) -> f64 {
    let dir = crate::fresh();
    let file = |name: &str| match layout {
        FloorLayout::File => dir.path().join(name),
        FloorLayout::Dir => dir.path().join(name).join("session.jsonl"),
    };
    for (name, turns) in w.names.iter().zip(&w.turns) {
        let bytes: Vec<u8> = turns
            .iter()
            .flat_map(|turn| Record::items_json(turn))
            .flat_map(|mut line| {
                line.push(b'\n');
                line
            })
            .collect();
        if layout == FloorLayout::Dir {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        std::fs::write(file(name), bytes).expect("write");
    }
    if cold {
        common::drop_from_page_cache(dir.path());
        common::settle_writeback();
    }
    let start = Instant::now();
    let histories: Vec<(Vec<u8>, Vec<Item>)> = w
        .names
        .iter()
        .zip(&w.turns)
        .map(|(name, turns)| {
            let path = match layout {
                FloorLayout::File => file(name),
                FloorLayout::Dir => std::fs::read_dir(dir.path().join(name))
                    .expect("list")
                    .next()
                    .expect("a file")
                    .expect("entry")
                    .path(),
            };
            let text = std::fs::read(path).expect("read");
            (text, turns.iter().flatten().cloned().collect())
        })
        .collect();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        histories.iter().map(|h| h.1.len() as u64).sum::<u64>(),
        w.items
    );
    secs
}

fn session_dir(root: &Path, id: SessionId) -> PathBuf {
    let store = Store::open(root).expect("open store");
    store.session_dir(id)
}

/// `Store::open` + `restore` of one session against the read-only path.
/// Opening is inside the clock for both; dropping is outside, for both.
fn one_session(root: &Path, id: SessionId, reps: usize) -> (f64, f64) {
    let dir = session_dir(root, id);
    let through_store = || {
        let start = Instant::now();
        let store = Store::open(root).expect("open store");
        let state = store.restore(id).expect("restore");
        let secs = start.elapsed().as_secs_f64();
        drop((state, store));
        secs
    };
    let read_only = || {
        let start = Instant::now();
        let state = Log::open_read_only(&dir)
            .expect("open")
            .restore()
            .expect("restore");
        let secs = start.elapsed().as_secs_f64();
        drop(state);
        secs
    };
    // At least 31 pairs: a small session's restore takes 20–30 µs, where
    // three pairs (a quick run's) moved the ratio from 1.04× to 1.46×
    // between runs of the same code (a probe of 600 pairs: 1.08×).
    let m = medians((3 * reps).max(31), &[&through_store, &read_only]);
    (m[0], m[1])
}

/// `Store::list` times, and what they are compared with.
struct ListFigures {
    /// Without `list.cache`.
    cold: f64,
    /// With the `list.cache` the writing run left (what the next start of a
    /// runtime finds).
    as_written: f64,
    /// `read_dir` + `stat` of every session's catalog file.
    stat: f64,
}

/// `Store::list` without `list.cache` (deleted before each cold run), and
/// with the cache the writing run left. Only `list` is timed; opening the
/// store is not. (`list` writes nothing, so a list after a cold one is as
/// cold: the cache is the writers'.)
fn list_figures(root: &Path, sessions: usize, reps: usize) -> ListFigures {
    let cache = root.join("list.cache");
    let saved = root.with_extension("list.cache.saved");
    std::fs::copy(&cache, &saved).expect("save list.cache");
    let list = || {
        let store = Store::open(root).expect("open store");
        let start = Instant::now();
        let n = store.list().expect("list").len();
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(n, sessions);
        secs
    };
    let cold = || {
        // Gone already when this ran last (the order of the cases changes
        // from one repetition to the next).
        match std::fs::remove_file(&cache) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("delete list.cache: {e}"),
            _ => {}
        }
        list()
    };
    let as_written = || {
        std::fs::copy(&saved, &cache).expect("restore list.cache");
        list()
    };
    let sessions_dir = root.join("sessions");
    let stat = || {
        time(|| {
            for e in std::fs::read_dir(&sessions_dir).expect("read_dir") {
                let path = e.expect("entry").path().join("catalog");
                std::hint::black_box(std::fs::metadata(path).expect("stat"));
            }
        })
    };
    let m = medians(reps, &[&cold, &as_written, &stat]);
    std::fs::remove_file(&saved).expect("remove saved cache");
    ListFigures {
        cold: m[0],
        as_written: m[1],
        stat: m[2],
    }
}

// ---------------------------------------------------------------- output

/// Runs the headline workloads and prints their tables and the targets.
pub fn run(quick: bool, reps: usize) {
    let [a, b] = shapes(quick);
    let systems = systems(quick);
    let reports = [
        measure(a, &systems, reps, false),
        measure(b, &systems, reps, true),
    ];
    println!();
    println!(
        "## Headline: many sessions through `Store` ({} mode; median of {reps} interleaved repetitions)",
        if quick { "quick" } else { "full" }
    );
    println!(
        "Store's default budgets here: {} open sessions, {} of them active (from the soft open-file limit; `max_open_sessions`, `max_active_sessions`)",
        session_store::store::default_max_open_sessions(),
        session_store::store::default_max_active_sessions()
    );
    for r in &reports {
        print_report(r);
    }
    print_targets(&reports);
}

fn print_report(r: &Report) {
    let w = &r.w;
    println!();
    println!(
        "Workload {}: {} sessions × {} turns round-robin, {} saves, {} items, {:.1} MB of item JSON",
        w.shape.name,
        w.shape.sessions,
        w.shape.turns,
        w.saves(),
        w.items,
        w.item_json_bytes as f64 / 1e6
    );
    println!();
    println!("| system | turns/s | MB/s | append: store ÷ this | CPU ÷ wall | save p50 µs | p99 µs | p99.9 µs | max µs | worst µs | create all ms | disk MB | of which dirs MB | disk ÷ JSONL | replay all ms | replay: store ÷ this | cold replay all ms | cold: store ÷ this |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let store = r.find(System::Store);
    let jsonl = r.find(System::Jsonl);
    for f in &r.figures {
        let us = |s: f64| s * 1e6;
        println!(
            "| {} | {:.0} | {:.1} | {:.2}× | {:.2} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.2}× | {:.1} | {:.2}× |",
            f.system.label(),
            w.saves() as f64 / f.append_s,
            w.item_json_bytes as f64 / 1e6 / f.append_s,
            f.append_s / store.append_s,
            f.cpu_s / f.append_s,
            us(f.latency.p50),
            us(f.latency.p99),
            us(f.latency.p999),
            us(f.latency.max),
            us(f.worst_s),
            f.create_s * 1e3,
            f.disk_bytes() / 1e6,
            f.dir_bytes / 1e6,
            f.disk_bytes() / jsonl.disk_bytes(),
            f.replay_s * 1e3,
            f.replay_s / store.replay_s,
            f.cold_replay_s * 1e3,
            f.cold_replay_s / store.cold_replay_s,
        );
    }
    println!();
    let (through_store, read_only) = r.one_session;
    println!(
        "One session ({} items): Store::open + restore {:.2} ms; Log::open_read_only + restore {:.2} ms; ratio {:.2}×",
        r.one_session_items,
        through_store * 1e3,
        read_only * 1e3,
        through_store / read_only
    );
    if let Some(l) = &r.list {
        let n = w.shape.sessions;
        println!(
            "List {n} sessions: Store::list without list.cache {:.1} ms; with the list.cache the writers left {:.2} ms; \
             read_dir + stat of {n} catalog files {:.2} ms",
            l.cold * 1e3,
            l.as_written * 1e3,
            l.stat * 1e3
        );
    }
}

fn print_targets(reports: &[Report]) {
    println!();
    println!("Notes: turns/s and MB/s count `save_delta` (or the peer's save) only: creating the sessions is its own column, opening and closing are outside every clock. MB/s counts the items' JSON for every system. Latency is per save; p50–max are medians over the repetitions of each one's percentile, worst is the slowest save of all repetitions. CPU ÷ wall is the process's CPU time (every thread, user and system, in 10 ms ticks) over the saves' wall time: above 1, a system's own threads worked beside the saving one (session-store's page-cache worker; SQLite and redb run none). Disk is `st_blocks × 512` of everything under the system's directory after closing; the directories' share is shown apart. Replay opens afresh (inside the clock) and restores every session into owned items; the peers read and parse their records. Cold replay is the same after every file of the system was synced and dropped from the page cache (`posix_fadvise(DONTNEED)`; directories stay cached) and the machine's writeback had ended (`sync(1)`).");
    println!();
    println!("Targets (issue 14), this run:");
    for r in reports {
        let name = r.w.shape.name;
        let store = r.find(System::Store);
        let jsonl = r.find(System::Jsonl);
        let sqlite = r.find(System::Sqlite);
        let per = |what: &str| format!("{name}: {what}");
        target(
            &per("append ÷ JSONL + SHA-256"),
            Some(jsonl.append_s / store.append_s),
            Op::AtLeast,
            1.5,
            "×",
        );
        println!(
            "- {name}: bound: one write(2) of the turn's bytes per save and nothing else takes {:.1} ms for the {} saves \
             (JSONL + SHA-256 {:.1} ms, session-store {:.1} ms): no save that leaves the turn in the page cache with one \
             write can beat JSONL + SHA-256 by more than {:.2}× here; session-store takes {:.2}× the bound",
            r.floor_s * 1e3,
            r.w.saves(),
            jsonl.append_s * 1e3,
            store.append_s * 1e3,
            jsonl.append_s / r.floor_s,
            store.append_s / r.floor_s
        );
        println!(
            "- {name}: bound: the same, with each save's bytes hashed once into a keyed BLAKE3 chain (one hash a save, \
             keyed by the session's previous one: the least the issue's chain of every record costs) takes {:.1} ms: \
             no save that writes once and chains what it saves can beat JSONL + SHA-256 by more than {:.2}× here; \
             session-store takes {:.2}× this bound",
            r.chain_floor_s * 1e3,
            jsonl.append_s / r.chain_floor_s,
            store.append_s / r.chain_floor_s
        );
        println!(
            "- {name}: bound: the same, hashing each record (an item's JSON line) on its own, keyed by the record \
             before it, as session-store's format does (a record's hash does not depend on its batch), takes {:.1} ms: \
             no save that writes once and chains each record can beat JSONL + SHA-256 by more than {:.2}× here; \
             session-store takes {:.2}× this bound",
            r.record_chain_floor_s * 1e3,
            jsonl.append_s / r.record_chain_floor_s,
            store.append_s / r.record_chain_floor_s
        );
        println!(
            "- {name}: bound: the same, writing session-store's own records instead of JSON lines, made in the clock: \
             the caller's items encoded as its writer encodes them (the grouped entries as rkyv archives) and each \
             record sealed as its writer seals them (CRC32, keyed BLAKE3 chained), every item in its record; no \
             session to find, no head to check, no payload area; takes {:.1} ms: no store writing these records \
             with one write(2) a save to a file per session can beat JSONL + SHA-256 by more than {:.2}× here; \
             session-store takes {:.2}× this bound",
            r.format_floor_s * 1e3,
            jsonl.append_s / r.format_floor_s,
            store.append_s / r.format_floor_s
        );
        if let Some((budget_floor_s, kept)) = r.budget_floor {
            println!(
                "- {name}: bound: the same with only {} of the {} sessions' files kept open (session-store's default open \
                 budget under this open-file limit), the others opened and closed around each save, takes {:.1} ms: no \
                 store that can keep only that many sessions' files open can beat JSONL + SHA-256 (which keeps all of \
                 them open, one descriptor a session) by more than {:.2}× here; session-store takes {:.2}× this bound",
                kept,
                r.w.names.len(),
                budget_floor_s * 1e3,
                jsonl.append_s / budget_floor_s,
                store.append_s / budget_floor_s
            );
        }
        target(
            &per("append ÷ SQLite txn per turn"),
            Some(sqlite.append_s / store.append_s),
            Op::AtLeast,
            3.0,
            "×",
        );
        target(
            &per("save p99.9 ÷ JSONL's"),
            Some(store.latency.p999 / jsonl.latency.p999),
            Op::AtMost,
            2.0,
            "×",
        );
        target(
            &per("worst save (all repetitions)"),
            Some(store.worst_s * 1e3),
            Op::Below,
            5.0,
            " ms",
        );
        println!(
            "- {name}: bound: the slowest save of the per-record bound above (one write and a keyed BLAKE3 a record, \
             nothing else) over its {} repetitions took {:.2} ms (JSONL + SHA-256's worst {:.2} ms, session-store's {:.2} ms); \
             the largest save carries {:.2} MB of item JSON",
            r.reps,
            r.record_chain_floor_worst_s * 1e3,
            jsonl.worst_s * 1e3,
            store.worst_s * 1e3,
            r.w.largest_save_bytes as f64 / 1e6
        );
        target(
            &per("Store::open + restore of one session ÷ read-only path"),
            Some(r.one_session.0 / r.one_session.1),
            Op::AtMost,
            1.2,
            "×",
        );
        target(
            &per("replay of all sessions ÷ JSONL + SHA-256"),
            Some(jsonl.replay_s / store.replay_s),
            Op::AtLeast,
            3.0,
            "×",
        );
        target(
            &per("cold replay of all sessions ÷ JSONL + SHA-256 (issue 49)"),
            Some(jsonl.cold_replay_s / store.cold_replay_s),
            Op::AtLeast,
            1.2,
            "×",
        );
        println!(
            "- {name}: bound: reading each session's file whole from a cold page cache (one `std::fs::read` a \
             session, files dropped first as for the cold replays), with no parse, takes {:.1} ms (JSONL's cold \
             replay {:.1} ms, session-store's {:.1} ms): no cold replay that reads a file per session, one after \
             the other, can beat JSONL's by more than {:.2}× here; session-store takes {:.2}× the bound",
            r.cold_read_floor_s * 1e3,
            jsonl.cold_replay_s * 1e3,
            store.cold_replay_s * 1e3,
            jsonl.cold_replay_s / r.cold_read_floor_s,
            store.cold_replay_s / r.cold_read_floor_s
        );
        println!(
            "- {name}: bound: the same with each session's file in a directory of its own, listed before the read \
             (directories stay cached, as the store's do), takes {:.1} ms: no cold replay from a directory per \
             session can beat JSONL's by more than {:.2}× here; session-store takes {:.2}× this bound",
            r.cold_dir_read_floor_s * 1e3,
            jsonl.cold_replay_s / r.cold_dir_read_floor_s,
            store.cold_replay_s / r.cold_dir_read_floor_s
        );
        println!(
            "- {name}: bound: reading each session's file whole (one `std::fs::read`) and cloning its items, with no parse, \
             no check and no hash, takes {:.1} ms for the {} sessions (JSONL {:.1} ms, session-store {:.1} ms): no replay \
             that reads a file per session into owned items can beat JSONL by more than {:.2}× here; session-store takes \
             {:.2}× the bound",
            r.read_floor_s * 1e3,
            r.w.shape.sessions,
            jsonl.replay_s * 1e3,
            store.replay_s * 1e3,
            jsonl.replay_s / r.read_floor_s,
            store.replay_s / r.read_floor_s
        );
        println!(
            "- {name}: bound: the same with each session's file in a directory of its own, listed before the read \
             (a `read_dir` and one `std::fs::read` a session), takes {:.1} ms: no replay from a directory per session \
             can beat JSONL by more than {:.2}× here; session-store takes {:.2}× this bound",
            r.dir_read_floor_s * 1e3,
            jsonl.replay_s / r.dir_read_floor_s,
            store.replay_s / r.dir_read_floor_s
        );
        target(
            &per(if name == "A" {
                "allocated disk ÷ JSONL's"
            } else {
                "allocated disk ÷ JSONL's (issue 49)"
            }),
            Some(store.disk_bytes() / jsonl.disk_bytes()),
            Op::AtMost,
            1.3,
            "×",
        );
        println!(
            "- {name}: bound: JSONL's files plus one directory a session ({:.1} MB of directories here, as the \
             store's) take {:.2}× JSONL's disk: no layout with a directory per session can do better here",
            store.dir_bytes / 1e6,
            (jsonl.disk_bytes() + store.dir_bytes) / jsonl.disk_bytes()
        );
        let (records, json) = r.records;
        target(
            &per("record bytes (with the payload area's) ÷ the entries' compact JSON (issue 49)"),
            Some(records as f64 / json as f64),
            Op::AtMost,
            1.3,
            "×",
        );
        if let Some(l) = &r.list {
            let n = r.w.shape.sessions;
            target(
                &per(&format!("list {n} sessions without list.cache")),
                Some(l.cold * 1e3),
                Op::Below,
                200.0,
                " ms",
            );
            target(
                &per(&format!(
                    "list {n} sessions with the list.cache the writers left ÷ stat of {n} files"
                )),
                Some(l.as_written / l.stat),
                Op::AtMost,
                1.0,
                "×",
            );
        }
    }
}
