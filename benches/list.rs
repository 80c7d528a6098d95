//! Listing 10k sessions against the floor any listing has: reading the
//! directory and stat-ing one file per session.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use session_store::Store;

mod common;

fn list(c: &mut Criterion) {
    let root = common::list_fixture();
    let store = Store::open_with(&root, common::list_store_options()).expect("store");
    assert_eq!(store.list().expect("list").len(), common::LIST_SESSIONS);
    let sessions = root.join("sessions");

    let mut g = c.benchmark_group("list_10k");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20)
        .throughput(Throughput::Elements(common::LIST_SESSIONS as u64));
    g.bench_function("store_list", |b| b.iter(|| store.list().expect("list")));
    g.bench_function("readdir_and_stat_10k_files", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for e in std::fs::read_dir(&sessions).expect("read_dir") {
                let meta =
                    std::fs::metadata(e.expect("entry").path().join("catalog")).expect("stat");
                n += meta.len() as usize;
            }
            n
        })
    });
    g.bench_function("readdir_only", |b| {
        b.iter(|| std::fs::read_dir(&sessions).expect("read_dir").count())
    });
    g.finish();
}

criterion_group!(benches, list);
criterion_main!(benches);
