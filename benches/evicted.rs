//! Saves when more sessions are busy than a budget of 256 (round-robin is
//! the LRU's worst case), in one run, three ways: over `max_open_sessions`
//! (every save reopens a session the store closed), over
//! `max_active_sessions` only (every save unparks a session the store
//! parked: one file opened, no scan), and within both (neither). 300
//! sessions of growing history (one turn of about 2.3 KB each round); mean
//! save latency per round at a few points of the sessions' growth.
//!
//! ```text
//! cargo bench --bench evicted [-- --sessions N --rounds N --budget N]
//! ```
#![allow(missing_docs)]

use std::time::Instant;

use session_store::{EntryHash, Item, RequestConfig, SessionId, Store, StoreOptions};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Mean µs per save of each round, saving one turn to every session in turn.
fn rounds(opts: StoreOptions, sessions: usize, rounds: usize) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open_with(dir.path(), opts).expect("open");
    let mut ids: Vec<(SessionId, EntryHash)> = (0..sessions)
        .map(|_| {
            store
                .create_session(Some("sys"), RequestConfig::model("gpt-5"), &[])
                .expect("create")
        })
        .collect();
    (0..rounds)
        .map(|t| {
            let start = Instant::now();
            for (s, (id, head)) in ids.iter_mut().enumerate() {
                let turn = [
                    Item::user_text(format!("question {s} {t} ").repeat(10)),
                    Item::assistant_text(format!("answer {s} {t} ").repeat(200)),
                ];
                store.save_delta(*id, head, &turn).expect("save");
            }
            start.elapsed().as_secs_f64() * 1e6 / sessions as f64
        })
        .collect()
}

fn main() {
    let sessions = arg("--sessions", 300);
    let n = arg("--rounds", 100);
    let budget = arg("--budget", 256);
    let all = sessions * 2;
    let closed = rounds(
        StoreOptions::default()
            .max_open_sessions(budget)
            .max_active_sessions(budget),
        sessions,
        n,
    );
    let parked = rounds(
        StoreOptions::default()
            .max_open_sessions(all)
            .max_active_sessions(budget),
        sessions,
        n,
    );
    let within = rounds(
        StoreOptions::default()
            .max_open_sessions(all)
            .max_active_sessions(all),
        sessions,
        n,
    );
    println!("{sessions} sessions saved round-robin, mean µs per save in a round");
    let (reopens, unparks) = match budget < sessions {
        true => ("every save reopens", "every save unparks"),
        false => ("none does", "none does"),
    };
    println!(
        "| round | open {budget} ({reopens}) | open {all}, active {budget} ({unparks}) | open and active {all} | reopen ÷ neither | unpark ÷ neither |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for r in [0, n / 4, n / 2, 3 * n / 4, n - 1] {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1}× | {:.1}× |",
            r + 1,
            closed[r],
            parked[r],
            within[r],
            closed[r] / within[r],
            parked[r] / within[r]
        );
    }
}
