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

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use session_store::{Durability, Item, Log, LogEntry, LogOptions, LoggedItem};

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

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    if let Ok(dir) = std::env::var("CRASH_KILL_CHILD") {
        child(&dir);
        return;
    }
    let iterations: u64 = std::env::var("CRASH_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let budget = Duration::from_secs(
        std::env::var("CRASH_KILL_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(90),
    );
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let started = Instant::now();
    let mut kills = 0u64;
    let mut acknowledged = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    while kills < iterations && started.elapsed() < budget {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sigkill_at_random_moments_loses_nothing_acknowledged",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CRASH_KILL_CHILD", &path)
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
                if let (Some(seq), Some(_)) = (parts.next(), parts.next()) {
                    if let Ok(seq) = seq.parse::<u64>() {
                        acked.push(seq);
                    }
                }
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(5 + rng % 60));
        child.kill().unwrap();
        child.wait().unwrap();
        let acked = reader.join().unwrap();
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
