//! The benchmarks' shared workload: deterministic, seeded agent sessions.
//!
//! One turn is what an agent runtime saves with one `save_delta`:
//! - a user message of about 200 B;
//! - reasoning: a summary of about 200 B plus `encrypted_content` of about 3 KB;
//! - a tool call whose arguments are about 300 B of JSON;
//! - a tool result of about 4 KB, and now and then (1 turn in 200) one of
//!   64 KB–1 MB, log-uniform;
//! - an assistant message of about 1 KB.
//!
//! The small-item mix has the same shape with every item about 200 B.
//! Sizes vary by ±25% around their means. Text is sliced from fixed pools of
//! words and base64, so generating a gigabyte costs little more than copying it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use session_store::format::{record_len, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use session_store::{
    group_delta, schema::LoggedItem, Durability, Item, Log, LogEntry, LogOptions, RequestConfig,
    SessionId, Store, StoreOptions,
};

/// The timestamp of the first turn; turn `i` is one second later per index.
pub const TS0: u64 = 1_764_000_000_000;

/// A small, fast, deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5EED_5E55_1011_57AE)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A length around `mean`, ±25%.
    pub fn around(&mut self, mean: usize) -> usize {
        let spread = (mean / 2).max(1) as u64;
        mean - mean / 4 + self.below(spread) as usize
    }
}

const POOL_BYTES: usize = 2 << 20;

struct Pools {
    words: String,
    base64: String,
}

fn pools() -> &'static Pools {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    POOLS.get_or_init(|| {
        const WORDS: &[&str] = &[
            "the", "session", "log", "file", "tool", "call", "result", "error", "cargo", "build",
            "test", "passed", "failed", "src", "main", "fn", "let", "struct", "impl", "return",
            "value", "index", "segment", "record", "hash", "chain", "open", "read", "write",
            "sync", "bytes", "offset", "path", "user", "model", "reply", "check", "fix", "change",
            "line", "column", "warning", "module", "crate", "version", "update", "commit", "diff",
        ];
        let mut rng = Rng::new(0xC0FFEE);
        let mut words = String::with_capacity(POOL_BYTES + 16);
        let mut line = 0;
        while words.len() < POOL_BYTES {
            let w = WORDS[rng.below(WORDS.len() as u64) as usize];
            words.push_str(w);
            line += w.len() + 1;
            if line > 72 {
                words.push('\n');
                line = 0;
            } else {
                words.push(' ');
            }
        }
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let base64 = (0..POOL_BYTES)
            .map(|_| B64[rng.below(64) as usize] as char)
            .collect();
        Pools { words, base64 }
    })
}

fn slice(pool: &str, rng: &mut Rng, len: usize) -> String {
    let len = len.min(pool.len());
    let start = rng.below((pool.len() - len + 1) as u64) as usize;
    pool[start..start + len].to_owned()
}

/// Prose of exactly `len` bytes (ASCII words, spaces and newlines).
pub fn text(rng: &mut Rng, len: usize) -> String {
    slice(&pools().words, rng, len)
}

/// Prose without newlines, for JSON string values.
fn flat_text(rng: &mut Rng, len: usize) -> String {
    text(rng, len).replace('\n', " ")
}

/// Base64-looking opaque bytes, like a provider's `encrypted_content`.
pub fn opaque(rng: &mut Rng, len: usize) -> String {
    slice(&pools().base64, rng, len)
}

const TOOLS: &[&str] = &["shell", "read_file", "apply_patch", "search", "list_dir"];

/// Mean sizes of one turn's items, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// User message text.
    pub user: usize,
    /// Reasoning summary.
    pub summary: usize,
    /// Reasoning `encrypted_content`.
    pub encrypted: usize,
    /// Tool call arguments (JSON).
    pub arguments: usize,
    /// Tool result content.
    pub result: usize,
    /// One turn in this many carries a large tool result (0: never).
    pub large_every: u64,
    /// Assistant message text.
    pub assistant: usize,
}

/// Realistic agent turns.
pub const TURNS: Mix = Mix {
    user: 200,
    summary: 200,
    encrypted: 3000,
    arguments: 300,
    result: 4096,
    large_every: 200,
    assistant: 1000,
};

/// Every item about 200 B.
pub const SMALL: Mix = Mix {
    user: 200,
    summary: 100,
    encrypted: 100,
    arguments: 200,
    result: 200,
    large_every: 0,
    assistant: 200,
};

/// One turn's five items.
pub fn turn(rng: &mut Rng, mix: &Mix, index: u64) -> Vec<Item> {
    let call_id = format!("call_{index:08x}_{:04x}", rng.below(1 << 16));
    let n = rng.around(mix.user);
    let user = text(rng, n);
    let n = rng.around(mix.summary);
    let summary = vec![text(rng, n)];
    let n = rng.around(mix.encrypted);
    let reasoning = Item::Reasoning {
        extra: Default::default(),
        id: None,
        text: String::new(),
        summary,
        encrypted_content: Some(opaque(rng, n)),
        status: None,
    };
    let args_len = rng.around(mix.arguments).saturating_sub(48);
    let arguments = serde_json::json!({
        "cmd": flat_text(rng, args_len),
        "cwd": "/work/project",
        "timeout_ms": 120000,
    })
    .to_string();
    let name = TOOLS[rng.below(TOOLS.len() as u64) as usize].to_owned();
    let result_len = if mix.large_every > 0 && rng.below(mix.large_every) == 0 {
        // Log-uniform in 64 KB ..= 1 MB.
        (65_536.0 * 16f64.powf(rng.unit())) as usize
    } else {
        rng.around(mix.result)
    };
    let content = Some(text(rng, result_len));
    let n = rng.around(mix.assistant);
    let assistant = Item::assistant_text(text(rng, n));
    vec![
        Item::user_text(user),
        reasoning,
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: call_id.clone(),
            name,
            arguments,
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id,
            summary: format!("exit status 0, {result_len} bytes of output"),
            content,
        },
        assistant,
    ]
}

/// A session's worth of turns, as runtime items and as the log entries
/// `save_delta` would write for them.
pub struct Workload {
    /// Items, one vector per turn.
    pub turns: Vec<Vec<Item>>,
    /// `group_delta` of each turn.
    pub entries: Vec<Vec<LogEntry>>,
    /// Sum of the rkyv payload lengths of all entries: the bytes every system
    /// is credited with in MB/s, and the bytes the raw limit moves.
    pub payload_bytes: u64,
}

impl Workload {
    /// `n` turns of `mix`, from `seed`.
    pub fn new(seed: u64, mix: &Mix, n: usize) -> Workload {
        let mut rng = Rng::new(seed);
        let turns: Vec<Vec<Item>> = (0..n as u64).map(|i| turn(&mut rng, mix, i)).collect();
        let entries: Vec<Vec<LogEntry>> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| group_delta(t, TS0 + i as u64 * 1000))
            .collect();
        let payload_bytes = entries
            .iter()
            .flatten()
            .map(|e| e.to_archive().len() as u64)
            .sum();
        Workload {
            turns,
            entries,
            payload_bytes,
        }
    }

    /// Realistic turns.
    pub fn turns(seed: u64, n: usize) -> Workload {
        Workload::new(seed, &TURNS, n)
    }

    /// The small-item mix.
    pub fn small(seed: u64, n: usize) -> Workload {
        Workload::new(seed, &SMALL, n)
    }

    /// Items in all turns.
    pub fn items(&self) -> u64 {
        self.turns.iter().map(|t| t.len() as u64).sum()
    }

    /// Entries in all turns.
    pub fn entry_count(&self) -> u64 {
        self.entries.iter().map(|t| t.len() as u64).sum()
    }
}

/// The system prompt of every benchmark session.
pub const SYSTEM_PROMPT: &str =
    "You are a coding agent. Use the tools to inspect and change the repository.";

/// The model every benchmark session names.
pub const MODEL: &str = "bench-model";

/// Creates a session as a runtime starts one: a system prompt, a config,
/// no history yet.
pub fn create_session(store: &Store) -> SessionId {
    store
        .create_session(Some(SYSTEM_PROMPT), RequestConfig::model(MODEL), &[])
        .expect("create")
        .0
}

/// The `SessionStart` every benchmark log begins with, carrying `history`.
pub fn session_start(history: &[Item], ts: u64) -> LogEntry {
    LogEntry::SessionStart {
        ts,
        system_prompt: Some(SYSTEM_PROMPT.into()),
        config: RequestConfig::model(MODEL),
        history: history.iter().map(LoggedItem::from).collect(),
        forked_from: None,
        compacted_from: None,
    }
}

/// An entry whose rkyv payload is close to `payload_bytes` (one assistant message).
pub fn entry_of_size(payload_bytes: usize, seed: u64) -> LogEntry {
    let make = |len: usize| LogEntry::AssistantItems {
        ts: TS0,
        items: vec![LoggedItem::from(&Item::assistant_text(text(
            &mut Rng::new(seed),
            len,
        )))],
    };
    let overhead = make(0).to_archive().len();
    make(payload_bytes.saturating_sub(overhead))
}

/// Writes a log: a `SessionStart`, then every turn of `w` as one batch.
pub fn write_log(dir: &Path, w: &Workload, opts: LogOptions) -> Log {
    let log = Log::open(dir, opts).expect("open bench log");
    log.append(&session_start(&[], TS0)).expect("append");
    for t in &w.entries {
        log.append_batch(t, Durability::Buffered, session_store::log::ExpectHead::Any)
            .expect("append");
    }
    log
}

/// Where generated fixtures are cached between runs: `target/bench-data`.
pub fn data_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-data")
}

/// A cached fixture directory: built by `build` once (into a temporary
/// sibling, renamed into place when complete), reused afterwards.
pub fn cached(name: &str, build: impl FnOnce(&Path)) -> PathBuf {
    let root = data_dir();
    let dir = root.join(name);
    if dir.join("COMPLETE").exists() {
        return dir;
    }
    std::fs::create_dir_all(&root).expect("create bench-data");
    let tmp = root.join(format!("{name}.building"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create fixture dir");
    eprintln!("building cached fixture {} (once)…", dir.display());
    build(&tmp);
    std::fs::write(tmp.join("COMPLETE"), b"").expect("mark fixture");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).expect("move fixture into place");
    dir
}

/// The live history every restore fixture ends with: a compaction
/// (`SessionStart` with 20 carried-over items) and then 200 turns (~2 MB).
pub const LIVE_TURNS: usize = 200;

/// A log of about `older_bytes` of older turns, then the live history.
/// Returns the number of items the restore yields.
pub fn write_restore_log(dir: &Path, older_bytes: u64) -> u64 {
    let log = Log::open(dir, LogOptions::default()).expect("open");
    log.append(&session_start(&[], TS0)).expect("append");
    let mut rng = Rng::new(7);
    let mut written = 0u64;
    let mut i = 0u64;
    while written < older_bytes {
        let t = turn(&mut rng, &TURNS, i);
        let entries = group_delta(&t, TS0 + i * 1000);
        written += entries
            .iter()
            .map(|e| e.to_archive().len() as u64)
            .sum::<u64>();
        log.append_batch(
            &entries,
            Durability::Buffered,
            session_store::log::ExpectHead::Any,
        )
        .expect("append");
        i += 1;
    }
    let live = Workload::turns(99, LIVE_TURNS);
    let carried: Vec<Item> = live.turns[..4].iter().flatten().cloned().collect();
    log.append(&session_start(&carried, TS0 + i * 1000))
        .expect("append");
    for t in &live.entries {
        log.append_batch(t, Durability::Buffered, session_store::log::ExpectHead::Any)
            .expect("append");
    }
    log.close().expect("close");
    carried.len() as u64 + live.items()
}

/// The 1 GB restore/RSS fixture, cached.
pub fn large_log() -> PathBuf {
    cached("restore-1g-v2", |d| {
        write_restore_log(d, 1 << 30);
    })
}

/// The 10 MB restore fixture, cached.
pub fn small_log() -> PathBuf {
    cached("restore-10m-v2", |d| {
        write_restore_log(d, 10 << 20);
    })
}

/// A fresh temporary directory under the bench-data root (same file system
/// as the fixtures; /tmp may be a tmpfs on other machines).
pub fn tempdir() -> tempfile::TempDir {
    let root = data_dir();
    std::fs::create_dir_all(&root).expect("create bench-data");
    tempfile::Builder::new()
        .prefix("tmp-")
        .tempdir_in(root)
        .expect("tempdir")
}

/// The bytes of every record (header and payload, padding excluded), read
/// from the segment files.
pub fn record_bytes(log: &Log) -> Vec<Vec<u8>> {
    let snap = log.snapshot();
    let mut lens = snap.iter().map(|r| {
        let r = r.expect("record");
        (r.seq, r.payload_len as usize)
    });
    let mut out = Vec::new();
    let paths = log.segment_paths();
    let mut pending = lens.next();
    for (i, path) in paths.iter().enumerate() {
        let next_first = paths.get(i + 1).map(|p| {
            let name = p.file_stem().and_then(|s| s.to_str()).expect("name");
            name.parse::<u64>().expect("segment name")
        });
        let file = std::fs::read(path).expect("read segment");
        let mut offset = SEGMENT_HEADER_LEN;
        while let Some((seq, payload_len)) = pending {
            if next_first.is_some_and(|f| seq >= f) {
                break;
            }
            out.push(file[offset..offset + RECORD_HEADER_LEN + payload_len].to_vec());
            offset += record_len(payload_len);
            pending = lens.next();
        }
    }
    out
}

/// Sessions in the listing fixture.
pub const LIST_SESSIONS: usize = 10_000;

/// Store options for the listing fixture.
pub fn list_store_options() -> StoreOptions {
    // Small segments: 10k sessions at the default 8 MiB would reserve 80 GB.
    StoreOptions::default().log(LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(16 << 10)
    })
}

/// 10k sessions, each with a title, cached.
pub fn list_fixture() -> std::path::PathBuf {
    cached("list-10k-v2", |root| {
        let store = Store::open_with(root, list_store_options()).expect("store");
        let mut rng = Rng::new(5);
        for i in 0..LIST_SESSIONS {
            let title = format!("task {i}: {}", text(&mut rng, 120));
            store
                .create_session(
                    Some("system"),
                    RequestConfig::model(MODEL),
                    &[Item::user_text(title)],
                )
                .expect("create");
        }
        store.close().expect("close");
    })
}

/// Median of measurements.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Allocated bytes (`st_blocks × 512`) of the files and of the directories
/// under `dir`, `dir` itself not counted. A file of several names (a
/// session's `LOCK` is a second name of its active segment) counts once,
/// as `du` counts it.
pub fn allocated(dir: &Path) -> (u64, u64) {
    fn walk(dir: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let (mut files, mut dirs) = (0, 0);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return (0, 0);
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                let (f, d) = walk(&e.path(), seen);
                files += f;
                dirs += d + m.blocks() * 512;
            } else if m.nlink() == 1 || seen.insert((m.dev(), m.ino())) {
                files += m.blocks() * 512;
            }
        }
        (files, dirs)
    }
    walk(dir, &mut std::collections::HashSet::new())
}

/// Drops every file under `dir` from the page cache, as after a reboot or
/// long enough for other work to evict it: each file is synced (so that its
/// pages are clean and can go), then `posix_fadvise(DONTNEED)`. Directories
/// stay cached: a resume finds them hot more often than not. Returns the
/// files dropped.
/// Waits until every dirty page of the machine is written (`sync(1)`), so
/// that a cold read that follows does not share the disk with the writeback
/// of whatever ran before it (another system's files, say).
pub fn settle_writeback() {
    let _ = std::process::Command::new("sync").status();
}

pub fn drop_from_page_cache(dir: &Path) -> usize {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            n += drop_from_page_cache(&path);
            continue;
        }
        let Ok(f) = std::fs::File::open(&path) else {
            continue;
        };
        let _ = f.sync_data();
        if session_store::drop_from_page_cache(&f).is_ok() {
            n += 1;
        }
    }
    n
}
