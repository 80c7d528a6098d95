//! `demo`: plays a realistic agent runtime against a store, then restores,
//! checks, verifies, lists and exports what it wrote.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use session_store::schema::now_ms;
use session_store::{
    state::UsageRecord, Item, Log, LogEntry, RequestConfig, SessionId, Store, Turn, WorkerResult,
};

use crate::inspect::count;
use crate::progress;
use crate::transfer::{write_file_atomically, write_session, ExportFormat};

#[derive(clap::Args)]
pub struct Args {
    /// Sessions to write
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    sessions: u32,
    /// User turns per session
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    turns: u32,
}

/// What a developer asks a coding agent, to open each demo session (and
/// title it).
const TASKS: &[&str] = &[
    "Fix the failing test in src/log/recovery.rs",
    "Why does the build fail on the CI runner but not locally?",
    "Add a --json flag to the ls command",
    "Find where the config file is read and add a default for the timeout",
    "Refactor the session cache to evict by last use",
    "Write a benchmark for the append path",
    "The export drops the last line when the file ends without a newline",
    "Explain what the chain hash protects against",
    "Upgrade the HTTP client and fix what breaks",
    "Add retries with backoff to the uploader",
    "Review the diff of the last commit for error handling",
    "Speed up the restore of large sessions",
];

/// A small deterministic generator, so every run writes the same sessions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn text(&mut self, len: usize) -> String {
        const WORDS: &[&str] = &[
            "the", "build", "fails", "on", "test", "module", "function", "returns", "error",
            "path", "config", "file", "fix", "read", "update", "value", "check", "log", "session",
            "store", "agent", "tool", "call",
        ];
        let mut s = String::with_capacity(len + 12);
        while s.len() < len {
            s.push_str(WORDS[(self.next() % WORDS.len() as u64) as usize]);
            s.push(' ');
        }
        s.truncate(len);
        s
    }

    fn opaque(&mut self, len: usize) -> String {
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::from("gAAAAA");
        while s.len() < len {
            s.push(B64[(self.next() % 64) as usize] as char);
        }
        s
    }
}

/// Runs the demo in `root` when one was given on the command line (a
/// store's `SESSION_STORE_DIR` is not taken: the demo's sessions are not
/// the user's), else in a fresh temporary directory.
pub fn run(root: &Option<PathBuf>, a: Args) -> Result<ExitCode> {
    let temporary = root.is_none();
    let root = demo_root(root)?;
    let mut out = crate::out::Stdout;
    writeln!(out, "store: {}", root.display())?;
    let store = Store::open(&root)?;
    let started = Instant::now();
    let w = write_sessions(&store, &a)?;
    let write_secs = started.elapsed().as_secs_f64();
    store.close()?;

    // Restore and check everything, through a fresh store.
    let store = Store::open(&root)?;
    let started = Instant::now();
    let restored_items = restore_all(&store, &w.ids)?;
    let restore_secs = started.elapsed().as_secs_f64();
    store.close()?;

    let started = Instant::now();
    let (verified, verified_bytes) = verify_all(&store, &w.ids)?;
    let verify_secs = started.elapsed().as_secs_f64();

    let listed = store.list()?;
    let export_path = root.join(format!("export-{}.jsonl", w.ids[0]));
    let lines = write_file_atomically(&export_path, |out| {
        write_session(
            &store,
            w.ids[0],
            ExportFormat::Wire,
            session_store::Form::AsStored,
            out,
        )
    })?;

    let mb = w.payload_bytes as f64 / 1e6;
    let items = w.items_written;
    writeln!(
        out,
        "wrote     {}: {} asked for, plus {} from forks; {} compacted in place; {items} items, {mb:.1} MB of items",
        count(w.ids.len() as u64, "session"),
        a.sessions,
        w.forks,
        count(u64::from(w.compactions), "session")
    )?;
    writeln!(
        out,
        "          save_delta {:.0} items/s, {:.1} MB/s (Buffered); all writing incl. {} session creations with their fsyncs: {:.2} s",
        items as f64 / w.append_secs,
        mb / w.append_secs,
        w.ids.len(),
        write_secs
    )?;
    writeln!(
        out,
        "restored  {} sessions, {restored_items} live items, all ready to send, {:.0} items/s",
        w.ids.len(),
        restored_items as f64 / restore_secs
    )?;
    writeln!(
        out,
        "verified  {verified} records, {:.1} MB, every CRC and chain link, {:.0} MB/s",
        verified_bytes as f64 / 1e6,
        verified_bytes as f64 / 1e6 / verify_secs
    )?;
    writeln!(
        out,
        "listed    {} sessions; newest: {} \"{}\"",
        listed.len(),
        listed[0].id,
        listed[0].title.as_deref().unwrap_or("")
    )?;
    writeln!(
        out,
        "exported  {} ({lines} lines of JSONL)",
        export_path.display()
    )?;
    if temporary {
        writeln!(
            out,
            "the store is a temporary directory: look around with `session-store --root {} ls`, then `rm -r {}`",
            root.display(),
            root.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The demo's store: `root`, opened once so that it exists, or a fresh
/// temporary directory.
fn demo_root(root: &Option<PathBuf>) -> Result<PathBuf> {
    Ok(match root {
        Some(r) => {
            crate::open_store(&Some(r.clone()))?.close()?;
            r.clone()
        }
        None => tempfile::Builder::new()
            .prefix("session-store-demo-")
            // Private like every store: session logs hold credentials.
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .context("creating a temporary directory")?
            .keep(),
    })
}

/// Restores every session and checks that it is ready to send; returns the
/// live items restored.
fn restore_all(store: &Store, ids: &[SessionId]) -> Result<u64> {
    let mut restored_items = 0u64;
    for &id in ids {
        let state = store.restore(id)?;
        let problems = state.check();
        ensure!(
            problems.is_empty(),
            "session {id} is not ready to send: {problems:?}"
        );
        restored_items += state.history.len() as u64;
    }
    Ok(restored_items)
}

/// Verifies every session's log read-only; returns the records and bytes
/// checked.
fn verify_all(store: &Store, ids: &[SessionId]) -> Result<(u64, u64)> {
    let (mut verified, mut verified_bytes) = (0u64, 0u64);
    for &id in ids {
        let report = Log::open_read_only(store.session_dir(id))?.verify();
        ensure!(report.damage.is_none(), "session {id}: {:?}", report.damage);
        verified += report.records;
        verified_bytes += report.bytes;
    }
    Ok((verified, verified_bytes))
}

/// What the demo's writing phase did.
struct Written {
    ids: Vec<SessionId>,
    items_written: u64,
    payload_bytes: u64,
    append_secs: f64,
    forks: u32,
    compactions: u32,
}

/// Writes `a.sessions` sessions of `a.turns` turns each, compacting every
/// fourth and forking every fifth.
fn write_sessions(store: &Store, a: &Args) -> Result<Written> {
    let mut rng = Rng(0x5e55_1015_u64 | 1);
    let bar = progress(u64::from(a.sessions), "write");
    let mut w = Written {
        ids: Vec::new(),
        items_written: 0,
        payload_bytes: 0,
        append_secs: 0.0,
        forks: 0,
        compactions: 0,
    };
    for s in 0..a.sessions {
        let config = RequestConfig {
            model: Some("gpt-5.1-codex".into()),
            reasoning_effort: Some("medium".into()),
            ..RequestConfig::default()
        };
        let (id, mut head) =
            store.create_session(Some("You are a careful coding agent."), config, &[])?;
        w.ids.push(id);
        for t in 0..a.turns {
            let turn = demo_turn(&mut rng, s, t);
            for item in &turn {
                w.payload_bytes += serde_json::to_string(item)?.len() as u64;
            }
            w.items_written += turn.len() as u64;
            let t0 = Instant::now();
            store.save_delta(id, &mut head, &turn[..3])?;
            // The rest of the turn, its usage and its end in one commit.
            let usage = UsageRecord {
                history_len: u64::from(t) * 5,
                input_total_tokens: 9000,
                cache_read_tokens: 8000,
                output_tokens: 700,
                ..UsageRecord::default()
            };
            let rest = Turn::new(&turn[3..], u64::from(t) + 1).usage(usage);
            head = store.commit_turn(id, head, &rest)?;
            w.append_secs += t0.elapsed().as_secs_f64();
        }
        let done = LogEntry::RunCompleted {
            ts: now_ms(),
            interrupted: false,
            result: WorkerResult {
                text: Some("done".into()),
                stop_reason: "end_turn".into(),
            },
        };
        store.save_entries(id, &mut head, &[done])?;
        if s % 4 == 3 {
            // Compaction in place: a summary plus the last turn's items
            // become the live history; the turns before stay in the log.
            let mut summary = store.restore(id)?.history;
            let keep = summary.len().saturating_sub(5);
            summary.drain(..keep);
            summary.insert(
                0,
                Item::system_text(format!("Summary of earlier work: {}", rng.text(300))),
            );
            store.compact(id, head, &summary)?;
            w.compactions += 1;
        }
        if s % 5 == 1 {
            let (fork_id, _) = store.fork_at_seq(id, 6)?;
            w.ids.push(fork_id);
            w.forks += 1;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(w)
}

/// Turn `t` of session `s`: the user's input, reasoning with encrypted
/// content, a tool call, its result (now and then a large one), the answer.
fn demo_turn(rng: &mut Rng, s: u32, t: u32) -> Vec<Item> {
    let call_id = format!("call_{s}_{t}");
    let user = if t == 0 {
        Item::user_text(TASKS[s as usize % TASKS.len()])
    } else {
        Item::user_text(format!("Turn {t}: {}", rng.text(200)))
    };
    let reasoning = Item::Reasoning {
        extra: Default::default(),
        id: Some(format!("rs_{s}_{t}")),
        text: String::new(),
        summary: vec![rng.text(200)],
        encrypted_content: Some(rng.opaque(3000)),
        status: None,
    };
    let call = Item::ToolCall {
        extra: Default::default(),
        id: Some(format!("fc_{s}_{t}")),
        call_id: call_id.clone(),
        name: "shell".into(),
        arguments: serde_json::json!({ "cmd": rng.text(280) }).to_string(),
        status: None,
    };
    let big = if rng.next().is_multiple_of(50) {
        64 << 10
    } else {
        4000
    };
    let result = Item::ToolResult {
        extra: Default::default(),
        id: None,
        call_id,
        summary: "exit 0".into(),
        content: Some(rng.text(big)),
    };
    let answer = Item::assistant_text(rng.text(1000));
    vec![user, reasoning, call, result, answer]
}
