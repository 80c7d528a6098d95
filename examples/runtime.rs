//! An async agent runtime's use of the store, end to end: 64 sessions
//! saving turns at once (reasoning with `encrypted_content`, tool calls and
//! results, usage), a compaction, a fork, a restart, and every session
//! restored exactly and ready to send. It prints the turn commits' latency
//! and how late a 1 ms timer fired meanwhile, the figures issue 17 sets
//! targets for.
//!
//! ```sh
//! cargo run --release --example runtime --features tokio -- [--sync] [--turns N] [--think-ms N]
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use session_store::{
    state::UsageRecord, AsyncStore, Durability, Item, LogOptions, RequestConfig, SessionId, Store,
    StoreOptions, Turn,
};

const SESSIONS: usize = 64;

/// One realistic turn of session `s`: a question, reasoning that must be
/// re-sent byte for byte, a tool call and its (sizeable) output, an answer.
fn turn(s: usize, n: usize) -> Vec<Item> {
    let call_id = format!("call_{s}_{n}");
    vec![
        Item::user_text(format!("session {s}, turn {n}: what changed in src/?")),
        Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: String::new(),
            summary: vec![format!("Look at the diff of turn {n}.")],
            encrypted_content: Some(format!("gAAAAB{}", "x".repeat(600))),
            status: None,
        },
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: call_id.clone(),
            name: "shell".into(),
            arguments: format!(r#"{{"cmd":"git diff --stat HEAD~{n}"}}"#),
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id,
            summary: String::new(),
            content: Some(format!(" src/file_{n}.rs | 12 ++++++------\n").repeat(40)),
        },
        Item::assistant_text(format!("Turn {n}: twelve lines changed in file_{n}.rs.")),
    ]
}

/// The value at quantile `q` of sorted samples.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// What one run measured.
pub struct Figures {
    /// Turn commits' latency, sorted.
    pub commits: Vec<Duration>,
    /// How late each 1 ms timer tick fired, sorted.
    pub lateness: Vec<Duration>,
    /// The run's wall time.
    pub wall: Duration,
}

impl Figures {
    /// The figures, latencies sorted.
    fn sorted(mut commits: Vec<Duration>, mut lateness: Vec<Duration>, wall: Duration) -> Figures {
        commits.sort();
        lateness.sort();
        Figures {
            commits,
            lateness,
            wall,
        }
    }
}

/// Runs the workload on `root` with `durability`, `turns` turns a session,
/// each session waiting `think` between its turns (the model's time; zero
/// saturates the machine with commits), checks everything after a restart,
/// and returns the figures.
pub async fn run(
    root: &std::path::Path,
    durability: Durability,
    turns: usize,
    think: Duration,
) -> Figures {
    let opts = StoreOptions::default().log(LogOptions::default().durability(durability));
    let store = AsyncStore::new(Store::open_with(root, opts).expect("open the store"));

    let (stop, timer) = start_timer();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (id, mut head) = store
                .create_session(
                    Some("You are a careful coding agent.".into()),
                    RequestConfig::model("gpt-5"),
                    vec![],
                )
                .await
                .expect("create");
            let mut expected: Vec<Item> = Vec::new();
            let mut latencies = Vec::with_capacity(turns);
            for n in 0..turns {
                pace(s, n, think).await;
                let items = turn(s, n);
                expected.extend(items.iter().cloned());
                let usage = UsageRecord {
                    history_len: expected.len() as u64,
                    input_total_tokens: 9000,
                    cache_read_tokens: 8000,
                    output_tokens: 700,
                    ..UsageRecord::default()
                };
                let t0 = Instant::now();
                head = store
                    .commit_turn(id, head, Turn::new(items, n as u64 + 1).usage(usage))
                    .await
                    .expect("commit a turn");
                latencies.push(t0.elapsed());
                // Session 0 compacts halfway: a summary plus the last turn.
                if s == 0 && n == turns / 2 {
                    let mut summary = vec![Item::user_text("Summary: the diffs so far.")];
                    summary.extend(turn(s, n));
                    head = store
                        .compact(id, head, summary.clone())
                        .await
                        .expect("compact");
                    expected = summary;
                }
            }
            (id, head, expected, latencies)
        }));
    }
    let mut sessions: Vec<(SessionId, _, Vec<Item>)> = Vec::new();
    let mut commits = Vec::new();
    for t in tasks {
        let (id, head, expected, latencies) = t.await.expect("a session task");
        commits.extend(latencies);
        sessions.push((id, head, expected));
    }
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let lateness = timer.await.expect("the timer task");

    // A fork of session 1 at its head, then a restart.
    let (parent, parent_head, parent_items) = sessions[1].clone();
    let (fork, _) = store.fork_at(parent, parent_head).await.expect("fork");
    sessions.push((fork, parent_head, parent_items));
    store.close().await.expect("close");
    drop(store);
    let store = AsyncStore::new(Store::open(root).expect("reopen"));
    for (id, _, expected) in &sessions {
        let state = store.restore(*id).await.expect("restore");
        assert!(
            state.check().is_empty(),
            "session {id}: {:?}",
            state.check()
        );
        let expected: Vec<Item> = expected.to_vec();
        assert_eq!(state.history, expected, "session {id}");
    }
    assert!(store
        .restore(sessions[0].0)
        .await
        .unwrap()
        .compacted_from
        .is_some());

    Figures::sorted(commits, lateness, wall)
}

/// Waits the model's time before turn `n` of session `s`: `think`, spread
/// from half to one and a half times it, as a model's latency spreads.
async fn pace(s: usize, n: usize, think: Duration) {
    if !think.is_zero() {
        let jitter = (s * 7919 + n * 104_729) % 1000;
        tokio::time::sleep(think.mul_f64(0.5 + jitter as f64 / 1000.0)).await;
    }
}

/// A 1 ms timer on the same runtime: how late it fires shows whether the
/// saves ever hold a worker. Set the flag to stop it; it returns how late
/// each tick fired.
fn start_timer() -> (Arc<AtomicBool>, tokio::task::JoinHandle<Vec<Duration>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut late = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let due = Instant::now() + Duration::from_millis(1);
                tokio::time::sleep(Duration::from_millis(1)).await;
                late.push(Instant::now().saturating_duration_since(due));
            }
            late
        })
    };
    (stop, timer)
}

/// The bound of any commit that leaves the runtime's workers for tokio's
/// blocking pool, as `AsyncStore` does: the same sessions and pacing as
/// [`run`], each "commit" an empty `spawn_blocking` round trip (the hop to
/// a pool thread and the wake-up back), with no store at all.
pub async fn hop_bound(turns: usize, think: Duration) -> Figures {
    bound(turns, think, Arc::new(|_, _| ())).await
}

/// [`hop_bound`] with the least work a commit that keeps the turn does:
/// each round trip writes the turn's JSON (made before the clock) to a file
/// of its session's with one `write(2)`; no encoding, no hash, no state.
pub async fn write_bound(dir: &std::path::Path, turns: usize, think: Duration) -> Figures {
    let files: Vec<std::fs::File> = (0..SESSIONS)
        .map(|s| std::fs::File::create(dir.join(format!("{s}.jsonl"))).expect("a file"))
        .collect();
    let bytes: Vec<Vec<Vec<u8>>> = (0..SESSIONS)
        .map(|s| {
            (0..turns)
                .map(|n| serde_json::to_vec(&turn(s, n)).expect("a turn's JSON"))
                .collect()
        })
        .collect();
    let work = move |s: usize, n: usize| {
        use std::io::Write;
        (&files[s]).write_all(&bytes[s][n]).expect("a write");
    };
    bound(turns, think, Arc::new(work)).await
}

/// The same sessions and pacing as [`run`], each commit a `spawn_blocking`
/// round trip that runs `work(session, turn)` and nothing else.
async fn bound(
    turns: usize,
    think: Duration,
    work: Arc<dyn Fn(usize, usize) + Send + Sync>,
) -> Figures {
    let (stop, timer) = start_timer();
    let started = Instant::now();
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|s| {
            let work = work.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(turns);
                for n in 0..turns {
                    pace(s, n, think).await;
                    let t0 = Instant::now();
                    let work = work.clone();
                    tokio::task::spawn_blocking(move || work(s, n))
                        .await
                        .expect("a bound's task");
                    latencies.push(t0.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut commits = Vec::new();
    for t in tasks {
        commits.extend(t.await.expect("a session task"));
    }
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let lateness = timer.await.expect("the timer task");
    Figures::sorted(commits, lateness, wall)
}

/// Prints one run's figures as a table row.
pub fn print_row(label: &str, f: &Figures) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "| {label:<24} | {:>8} | {:>8.0} | {:>8.0} | {:>8.0} | {:>9.0} | {:>9.0} | {:>6.2} |",
        f.commits.len(),
        us(quantile(&f.commits, 0.5)),
        us(quantile(&f.commits, 0.99)),
        us(quantile(&f.commits, 1.0)),
        us(quantile(&f.lateness, 0.99)),
        us(quantile(&f.lateness, 1.0)),
        f.wall.as_secs_f64(),
    );
}

/// The table's header.
pub fn print_header() {
    println!(
        "| durability, think time | commits | p50 µs | p99 µs | max µs | timer p99 late µs | timer max late µs | wall s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
}

/// Reads `--turns N`, `--think-ms N` and `--sync` from the arguments.
pub fn options() -> (usize, Vec<Duration>, Vec<Durability>) {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse::<u64>().ok())
    };
    let turns = value("--turns").unwrap_or(50) as usize;
    let thinks = match value("--think-ms") {
        Some(ms) => vec![Duration::from_millis(ms)],
        None => vec![Duration::ZERO, Duration::from_millis(20)],
    };
    let durabilities = if args.iter().any(|a| a == "--sync") {
        vec![Durability::Sync]
    } else {
        vec![Durability::Buffered, Durability::Sync]
    };
    (turns, thinks, durabilities)
}

/// Runs every combination and prints the table.
pub fn run_all() {
    let (turns, thinks, durabilities) = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!("{SESSIONS} sessions × {turns} turns, committed concurrently through AsyncStore");
    print_header();
    for &durability in &durabilities {
        for &think in &thinks {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let figures = rt.block_on(run(dir.path(), durability, turns, think));
            print_row(
                &format!("{durability:?}, {} ms", think.as_millis()),
                &figures,
            );
        }
    }
    for &think in &thinks {
        let figures = rt.block_on(hop_bound(turns, think));
        print_row(
            &format!("bound: empty hop, {} ms", think.as_millis()),
            &figures,
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let figures = rt.block_on(write_bound(dir.path(), turns, think));
        print_row(
            &format!("bound: hop + write, {} ms", think.as_millis()),
            &figures,
        );
    }
    println!("every session restored after a restart: items equal, check() empty");
    println!(
        "bound: empty hop: the same sessions and pacing, each commit an empty spawn_blocking round trip \
         (no store): what any commit that leaves the runtime's workers costs here at least"
    );
    println!(
        "bound: hop + write: each round trip also writes the turn's JSON to its session's file with one \
         write(2) (no encoding, no hash): what any commit that puts the turn in the page cache costs here at least"
    );
}

#[allow(dead_code)]
fn main() {
    run_all();
}
