//! Resume cost follows the live history, not the log: restore from the last
//! `SessionStart` of a log with 10 MB of older entries, and of one with 1 GB,
//! both ending with the same live history (a compaction and 200 turns).
//!
//! The 1 GB case runs with `BENCH_LARGE=1` (which builds its fixture once,
//! under `target/bench-data`), or whenever that fixture already exists.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use session_store::{Log, LogOptions};

mod common;

fn restore(c: &mut Criterion) {
    let mut cases = vec![("10MB", common::small_log())];
    let large_cached = common::data_dir().join("restore-1g-v2/COMPLETE").exists();
    if large_cached || std::env::var_os("BENCH_LARGE").is_some_and(|v| v == "1") {
        cases.push(("1GB", common::large_log()));
    } else {
        eprintln!("restore: skipping the 1 GB case (set BENCH_LARGE=1 to build it once)");
    }
    let mut g = c.benchmark_group("restore_from_last_session_start");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20);
    for (name, dir) in &cases {
        let log = Log::open(dir, LogOptions::default()).expect("open");
        let items = log.restore().expect("restore").history.len() as u64;
        g.throughput(Throughput::Elements(items));
        g.bench_with_input(BenchmarkId::new("open_log", name), &log, |b, log| {
            b.iter(|| log.restore().expect("restore"))
        });
        drop(log);
        g.bench_with_input(
            BenchmarkId::new("open_read_only_and_restore", name),
            dir,
            |b, dir| {
                b.iter(|| {
                    Log::open_read_only(dir)
                        .expect("open")
                        .restore()
                        .expect("restore")
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, restore);
criterion_main!(benches);
