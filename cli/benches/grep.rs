//! `session-store grep` over a 1 GB store against `grep -c` over that
//! store's export (the wire form, one JSON line per entry), in one run, warm
//! page cache for both. Issue 20's target: ≥ 1 GB/s.
//!
//! `cargo bench --bench grep [-- --gb N] [-- --reps N]`

#[path = "../../benches/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Instant;

use common::{cached, median, turn, Rng, TURNS};
use session_store::{Store, StoreOptions};

fn arg(name: &str) -> Option<f64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn main() {
    let gb = arg("--gb").unwrap_or(1.0);
    let reps = arg("--reps").unwrap_or(5.0) as usize;
    let target = (gb * 1e9) as u64;
    // Sessions of 100 realistic turns (~1 MB each) until the store holds
    // `gb` of records; a rare marker every 1000 turns for the pattern.
    let name = format!("grep-store-{gb}gb");
    let root = cached(&name, |dir| {
        let store = Store::open_with(dir, StoreOptions::default()).expect("store");
        let mut rng = Rng::new(20);
        let mut written = 0u64;
        let mut index = 0u64;
        while written < target {
            let (id, mut head) = store
                .create_session(None, Default::default(), &[])
                .expect("create");
            for _ in 0..100 {
                let mut items = turn(&mut rng, &TURNS, index);
                if index % 1000 == 7 {
                    items.push(session_store::Item::user_text(format!(
                        "marker needle-{index} for grep"
                    )));
                }
                index += 1;
                store.save_delta(id, &mut head, &items).expect("save");
            }
            written += store.info(id).expect("info").map_or(0, |s| s.bytes);
        }
        store.close().expect("close");
    });
    let store = Store::open_read_only(&root).expect("open");
    let sessions = store.list().expect("list");
    let bytes: u64 = sessions.iter().map(|s| s.bytes).sum();
    let export = root.with_extension("jsonl");
    if !export.exists() {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&export).expect("export"));
        for s in &sessions {
            store.export(s.id, &mut out).expect("export");
        }
    }
    let export_bytes = std::fs::metadata(&export).expect("export").len();
    let bin = env!("CARGO_BIN_EXE_session-store");
    let pattern = "needle-[0-9]+";
    let time = |cmd: &mut Command| {
        let t0 = Instant::now();
        let out = cmd.output().expect("run");
        (t0.elapsed().as_secs_f64(), out)
    };
    // Warm both into the page cache.
    let (_, ours) = time(
        Command::new(bin)
            .args(["--root"])
            .arg(&root)
            .args(["grep", "-c", pattern]),
    );
    let (_, theirs) = time(
        Command::new("grep")
            .args(["-c", "-E", pattern])
            .arg(&export),
    );
    let ours_count: u64 = String::from_utf8_lossy(&ours.stdout)
        .lines()
        .filter_map(|l| l.split('\t').nth(1)?.parse::<u64>().ok())
        .sum();
    let theirs_count: u64 = String::from_utf8_lossy(&theirs.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let mut ours_s = Vec::new();
    let mut theirs_s = Vec::new();
    for _ in 0..reps {
        ours_s.push(
            time(
                Command::new(bin)
                    .args(["--root"])
                    .arg(&root)
                    .args(["grep", "-c", pattern]),
            )
            .0,
        );
        theirs_s.push(
            time(
                Command::new("grep")
                    .args(["-c", "-E", pattern])
                    .arg(&export),
            )
            .0,
        );
    }
    let (ours_m, theirs_m) = (median(ours_s), median(theirs_s));
    println!(
        "store: {} sessions, {:.2} GB of records; export {:.2} GB; pattern {pattern:?}; {} cores; median of {reps}",
        sessions.len(),
        bytes as f64 / 1e9,
        export_bytes as f64 / 1e9,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| search | matching lines | median s | GB/s of the store's records |");
    println!("|---|---:|---:|---:|");
    println!(
        "| session-store grep -c | {ours_count} | {ours_m:.3} | {:.2} |",
        bytes as f64 / 1e9 / ours_m
    );
    println!(
        "| grep -c -E over the export | {theirs_count} | {theirs_m:.3} | {:.2} |",
        bytes as f64 / 1e9 / theirs_m
    );
    println!(
        "ratio (grep time / session-store time): {:.2}×; target ≥ 1 GB/s",
        theirs_m / ours_m
    );
}
