//! Session creation: one `Store::create_session` at a time, and 64 threads
//! creating one session each at once, on a `Buffered` and on a `Sync`
//! store (issue 17, item 8). The compare program prints the same shapes'
//! p50 and max against a file-per-session peer.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use session_store::{Durability, LogOptions, Store, StoreOptions};

mod common;

const AT_ONCE: usize = 64;

fn store(dir: &std::path::Path, durability: Durability) -> Store {
    let opts = StoreOptions::default().log(LogOptions::default().durability(durability));
    Store::open_with(dir, opts).expect("open store")
}

fn creation(c: &mut Criterion) {
    for durability in [Durability::Buffered, Durability::Sync] {
        let name = format!("create_{durability:?}").to_lowercase();
        let mut g = c.benchmark_group(name);
        g.measurement_time(Duration::from_secs(5))
            .warm_up_time(Duration::from_secs(1))
            .sample_size(20);

        // Each batch of 64 is closed outside the clock: past the store's
        // open-session budget a creation would evict (and so close and
        // sync) another session, which is the budget's cost, not creation's.
        let dir = common::tempdir();
        let s = store(dir.path(), durability);
        g.throughput(Throughput::Elements(1));
        g.bench_function("one", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let start = Instant::now();
                    common::create_session(&s);
                    total += start.elapsed();
                    if i % AT_ONCE as u64 == AT_ONCE as u64 - 1 {
                        s.close().expect("close");
                    }
                }
                total
            })
        });
        s.close().expect("close");

        // 64 threads released together; the figure is the wall time until
        // the last of them is done.
        let dir = common::tempdir();
        let s = store(dir.path(), durability);
        g.throughput(Throughput::Elements(AT_ONCE as u64));
        g.bench_function("64_threads_at_once", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let barrier = Arc::new(Barrier::new(AT_ONCE + 1));
                    let threads: Vec<_> = (0..AT_ONCE)
                        .map(|_| {
                            let (s, barrier) = (s.clone(), barrier.clone());
                            std::thread::spawn(move || {
                                barrier.wait();
                                common::create_session(&s);
                            })
                        })
                        .collect();
                    barrier.wait();
                    let start = Instant::now();
                    for t in threads {
                        t.join().expect("thread");
                    }
                    total += start.elapsed();
                    s.close().expect("close");
                }
                total
            })
        });
        s.close().expect("close");
        g.finish();
    }
}

criterion_group!(benches, creation);
criterion_main!(benches);
