//! Replay throughput (items/s) of one 2,000-turn session (~20 MB): borrowed
//! views, owned entries, owned runtime `Item`s, `restore`, and `Store::restore`.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use session_store::{Log, LogOptions, RestoredState, Store, StoreOptions};

mod common;
use common::Workload;

fn replay(c: &mut Criterion) {
    let w = Workload::turns(3, 2000);
    let dir = common::tempdir();
    let log = common::write_log(dir.path(), &w, LogOptions::default());
    let snap = log.snapshot();
    let items = w.items();

    let mut g = c.benchmark_group("replay");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20)
        .throughput(Throughput::Elements(items));

    g.bench_function("views", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for rec in snap.iter() {
                n += rec.expect("record").entry().items().len();
            }
            assert_eq!(n as u64, items);
            n
        })
    });
    g.bench_function("owned_entries", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for rec in snap.entries_from(0) {
                n += black_box(rec.expect("record").2).items().len();
            }
            n
        })
    });
    g.bench_function("items_apply_archived", |b| {
        b.iter(|| {
            let mut state = RestoredState::default();
            for rec in snap.iter() {
                state
                    .apply_archived(rec.expect("record").entry())
                    .expect("applies");
            }
            assert_eq!(state.history.len() as u64, items);
            state
        })
    });
    g.bench_function("log_restore", |b| {
        b.iter(|| log.restore().expect("restore"))
    });
    drop(snap);
    log.close().expect("close");
    g.bench_function("open_read_only_and_restore", |b| {
        b.iter(|| {
            Log::open_read_only(dir.path())
                .expect("open")
                .restore()
                .expect("restore")
        })
    });

    // The same history as one session of a store.
    let store_dir = common::tempdir();
    let store = Store::open_with(store_dir.path(), StoreOptions::default()).expect("store");
    let (id, mut head) = store
        .create_session(None, Default::default(), &[])
        .expect("create");
    for t in &w.turns {
        store.save_delta(id, &mut head, t).expect("save");
    }
    g.bench_function("store_restore", |b| {
        b.iter(|| {
            let s = store.restore(id).expect("restore");
            assert_eq!(s.history.len() as u64, items);
            s
        })
    });
    g.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
