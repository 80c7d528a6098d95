//! Guards against losing acknowledged records, or leaving a log that will not
//! open or verify, when the writing process is killed with SIGKILL at a random
//! moment.
//!
//! The test binary re-runs itself as the child (`CRASH_KILL_CHILD=dir`). The
//! child appends, alternating `Sync` and `Buffered`, and prints each
//! acknowledged `seq` and its durability on stdout. The parent kills it after a
//! random delay, reopens, verifies, and checks that every acknowledged record
//! is present: after a process crash even `Buffered` records survive, since
//! they are in the page cache. `CRASH_KILL_ITERATIONS` raises the count
//! (default 100, bounded by `CRASH_KILL_SECONDS`, default 90).
//!
//! A second loop does the same to a store whose turns carry large tool
//! outputs (stored once in the payload area) and whose compactions repeat
//! them: a kill between a payload's write, rename and sync and its record's
//! must never leave a record that names a missing payload, nor lose an
//! acknowledged turn.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use session_store::{
    schema::LoggedItem, Durability, Item, Log, LogEntry, LogOptions, Store, StoreOptions,
    ToolOutput, Turn,
};

fn entry(i: u64) -> LogEntry {
    let size = (i * 7919 % 5000) as usize;
    LogEntry::UserInput {
        ts: 1_700_000_000_000 + i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "k".repeat(size)))),
    }
}

fn opts() -> LogOptions {
    LogOptions::default().segment_size(64 << 10)
}

/// The child: appends forever, reporting each acknowledged seq.
fn child(dir: &str) {
    let log = Log::open(dir, opts()).expect("child open");
    let mut i = log.next_seq();
    loop {
        let durability = if i.is_multiple_of(3) {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let (seq, _) = log
            .append_with(&entry(i), durability)
            .expect("child append");
        assert_eq!(seq, i);
        println!(
            "{seq} {}",
            if durability == Durability::Sync {
                "sync"
            } else {
                "buffered"
            }
        );
        i += 1;
    }
}

/// The campaign's size: `CRASH_KILL_ITERATIONS` kills (default
/// `iterations`) within `CRASH_KILL_SECONDS` (default `seconds`).
fn campaign(iterations: u64, seconds: u64) -> (u64, Duration) {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        env("CRASH_KILL_ITERATIONS", iterations),
        Duration::from_secs(env("CRASH_KILL_SECONDS", seconds)),
    )
}

/// The next value of a xorshift generator.
fn next_random(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Runs this binary's test `test` as the child (`env` names the child's
/// directory), kills it with SIGKILL after `delay`, and returns the numbers
/// its acknowledgement lines (`<number> <word>`) began with.
fn run_and_kill(test: &str, env: (&str, &std::path::Path), delay: Duration) -> Vec<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Read acknowledgements on a thread, so the kill lands at a random moment.
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            if let (Some(n), Some(_)) = (parts.next(), parts.next()) {
                if let Ok(n) = n.parse::<u64>() {
                    acked.push(n);
                }
            }
        }
        acked
    });
    std::thread::sleep(delay);
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    if let Ok(dir) = std::env::var("CRASH_KILL_CHILD") {
        child(&dir);
        return;
    }
    let (iterations, budget) = campaign(100, 90);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let started = Instant::now();
    let mut kills = 0u64;
    let mut acknowledged = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    while kills < iterations && started.elapsed() < budget {
        let delay = Duration::from_millis(5 + next_random(&mut rng) % 60);
        let acked = run_and_kill(
            "sigkill_at_random_moments_loses_nothing_acknowledged",
            ("CRASH_KILL_CHILD", &path),
            delay,
        );
        kills += 1;
        let log =
            Log::open(&path, opts()).unwrap_or_else(|e| panic!("kill {kills}: reopen failed: {e}"));
        let report = log.verify();
        assert_eq!(report.damage, None, "kill {kills}: log does not verify");
        if let Some(&last) = acked.last() {
            assert!(
                log.next_seq() > last,
                "kill {kills}: acknowledged seq {last} missing (log has {})",
                log.next_seq()
            );
            acknowledged += acked.len() as u64;
        }
        // Spot-check content of the last acknowledged record.
        if let Some(&last) = acked.last() {
            let got = log.snapshot().entries_from(last).next().unwrap().unwrap();
            assert_eq!(got.2, entry(last), "kill {kills}: record {last} differs");
        }
    }
    println!(
        "crash kill: {kills} kills, {acknowledged} acknowledged appends checked, in {:.1?}",
        started.elapsed()
    );
    assert!(
        kills >= iterations.min(20),
        "only {kills} kills ran in the time budget"
    );
}

/// Turn `n` of the store loop: a question and a tool output, of 40 KiB
/// (above the payload threshold) on even turns, of 2 KiB on odd ones.
fn store_turn(n: u64) -> Vec<Item> {
    let size = if n.is_multiple_of(2) {
        40 << 10
    } else {
        2 << 10
    };
    vec![
        Item::user_text(format!("turn {n}")),
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: format!("c{n}"),
            output: Some(ToolOutput::Text(
                char::from(b'a' + (n % 26) as u8).to_string().repeat(size),
            )),
            is_error: None,
            custom: false,
            status: None,
        },
    ]
}

fn store_opts() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(64 << 10))
}

/// The last turn number in a restored history, from its last question.
fn last_turn(history: &[Item]) -> Option<u64> {
    history.iter().rev().find_map(|i| match i {
        Item::Message { content, .. } => match content.first() {
            Some(session_store::ContentPart::Text { text }) => {
                text.strip_prefix("turn ")?.parse().ok()
            }
            _ => None,
        },
        _ => None,
    })
}

/// The store child: commits turns forever (every third `Sync`, the rest
/// `Buffered`; every tenth a compaction that keeps the last output),
/// reporting each acknowledged turn.
fn store_child(dir: &str) {
    let store = Store::open_with(dir, store_opts()).expect("child open");
    let id = store.list().expect("child list")[0].id;
    let mut head = store.head(id).expect("child head").expect("a head");
    let mut n = last_turn(&store.restore(id).expect("child restore").history).map_or(0, |t| t + 1);
    loop {
        let items = store_turn(n);
        let mut turn = Turn::new(&items[..], n + 1);
        turn.durability = Some(if n.is_multiple_of(3) {
            Durability::Sync
        } else {
            Durability::Buffered
        });
        head = store.commit_turn(id, head, &turn).expect("child commit");
        println!("{n} turn");
        if n.is_multiple_of(10) {
            let mut kept = vec![Item::assistant_text(format!("summary up to {n}"))];
            kept.extend(items);
            head = store.compact(id, head, &kept).expect("child compact");
        }
        n += 1;
    }
}

#[test]
fn sigkill_of_a_store_writing_large_items_loses_nothing_acknowledged() {
    if let Ok(dir) = std::env::var("CRASH_KILL_STORE_CHILD") {
        store_child(&dir);
        return;
    }
    let (iterations, budget) = campaign(60, 60);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let id = {
        let store = Store::open_with(&root, store_opts()).unwrap();
        let (id, _) = store
            .create_session(None, session_store::RequestConfig::default(), &[])
            .unwrap();
        store.close().unwrap();
        id
    };
    let started = Instant::now();
    let mut kills = 0u64;
    let mut acknowledged = 0u64;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    while kills < iterations && started.elapsed() < budget {
        let delay = Duration::from_millis(10 + next_random(&mut rng) % 80);
        let acked = run_and_kill(
            "sigkill_of_a_store_writing_large_items_loses_nothing_acknowledged",
            ("CRASH_KILL_STORE_CHILD", &root),
            delay,
        );
        kills += 1;
        let store = Store::open_with(&root, store_opts())
            .unwrap_or_else(|e| panic!("kill {kills}: reopen failed: {e}"));
        let history = store
            .restore(id)
            .unwrap_or_else(|e| panic!("kill {kills}: restore failed: {e}"))
            .history;
        let v = store.verify(id).unwrap();
        assert_eq!(v.damage, None, "kill {kills}: the log does not verify");
        let damage = store.verify_payloads(id).unwrap();
        assert!(damage.is_empty(), "kill {kills}: {damage:?}");
        if let Some(&last) = acked.last() {
            let got = last_turn(&history).expect("a turn");
            assert!(
                got >= last,
                "kill {kills}: acknowledged turn {last} missing (the log ends at {got})"
            );
            // The last turn's output, whichever side of the threshold, reads back whole.
            let expected = store_turn(got);
            let tail = &history[history.len().saturating_sub(2)..];
            assert!(
                tail == expected.as_slice(),
                "kill {kills}: turn {got} reads back otherwise: {} items, the last {:?}",
                history.len(),
                tail.iter()
                    .map(|i| format!("{i:?}").chars().take(120).collect::<String>())
                    .collect::<Vec<_>>()
            );
            acknowledged += acked.len() as u64;
        }
        store.close().unwrap();
    }
    println!(
        "store crash kill: {kills} kills, {acknowledged} acknowledged turns checked, in {:.1?}",
        started.elapsed()
    );
    assert!(
        kills >= iterations.min(15),
        "only {kills} kills ran in the time budget"
    );
    assert!(acknowledged > 0, "no child acknowledged a turn");
}
