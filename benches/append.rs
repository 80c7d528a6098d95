//! Append throughput: `Buffered` at fixed payload sizes and on realistic turns,
//! and `Sync` commits per second from 1 thread and from 8 threads sharing
//! group commit.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use session_store::{Durability, Log, LogOptions};

mod common;
use common::Workload;

fn buffered(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_buffered");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    for size in [256usize, 2 << 10, 64 << 10] {
        let entry = common::entry_of_size(size, 1);
        let payload = entry.to_archive().len() as u64;
        g.throughput(Throughput::Bytes(payload));
        g.bench_with_input(BenchmarkId::new("payload", size), &entry, |b, entry| {
            // A fresh log per sample keeps the disk footprint to one sample's worth.
            b.iter_custom(|iters| {
                let dir = common::tempdir();
                let log = Log::open(dir.path(), LogOptions::default()).expect("open");
                let start = Instant::now();
                for _ in 0..iters {
                    log.append(entry).expect("append");
                }
                start.elapsed()
            })
        });
    }
    // Realistic turns, one `append_batch` per turn as `save_delta` does.
    for (name, w) in [
        ("turns", Workload::turns(1, 2000)),
        ("small_items", Workload::small(1, 2000)),
    ] {
        g.throughput(Throughput::Elements(w.items()));
        g.bench_function(BenchmarkId::new("workload", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = common::tempdir();
                    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
                    let start = Instant::now();
                    for t in &w.entries {
                        log.append_batch(
                            t,
                            Durability::Buffered,
                            session_store::log::ExpectHead::Any,
                        )
                        .expect("append");
                    }
                    total += start.elapsed();
                }
                total
            })
        });
    }
    g.finish();
}

/// Durable commits: one `append_batch` of one turn per commit, each returning
/// only once `fdatasync` covered it.
fn sync(c: &mut Criterion) {
    let w = Workload::small(2, 256);
    let mut g = c.benchmark_group("append_sync");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10)
        .throughput(Throughput::Elements(1));
    for threads in [1usize, 8] {
        let dir = common::tempdir();
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        g.bench_function(BenchmarkId::new("commits_threads", threads), |b| {
            b.iter_custom(|iters| {
                let per_thread = iters.div_ceil(threads as u64);
                let start = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let log = &log;
                        let w = &w;
                        s.spawn(move || {
                            for i in 0..per_thread {
                                let turn = &w.entries[(i as usize * threads + t) % w.entries.len()];
                                log.append_batch(
                                    turn,
                                    Durability::Sync,
                                    session_store::log::ExpectHead::Any,
                                )
                                .expect("append");
                            }
                        });
                    }
                });
                // Criterion divides by `iters`; the threads did `per_thread * threads`.
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per_thread * threads as u64) as f64)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, buffered, sync);
criterion_main!(benches);
