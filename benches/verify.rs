//! `verify` throughput (bytes/s) against single-thread BLAKE3 over the same
//! record bytes: once record by record (keyed by the previous hash, as the
//! chain does), once as one contiguous buffer (BLAKE3 at its best).
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use session_store::LogOptions;

mod common;
use common::Workload;

fn verify(c: &mut Criterion) {
    let w = Workload::turns(4, 2000);
    let dir = common::tempdir();
    let log = common::write_log(dir.path(), &w, LogOptions::default());
    let report = log.verify();
    assert!(report.damage.is_none());
    let records = common::record_bytes(&log);
    let record_total: u64 = records.iter().map(|r| r.len() as u64).sum();
    let contiguous: Vec<u8> = records.concat();

    let mut g = c.benchmark_group("verify");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20);
    g.throughput(Throughput::Bytes(report.bytes));
    g.bench_function("log_verify", |b| {
        b.iter(|| {
            let r = log.verify();
            assert!(r.damage.is_none());
            r
        })
    });
    g.throughput(Throughput::Bytes(record_total));
    g.bench_function("blake3_keyed_per_record", |b| {
        b.iter(|| {
            let mut key = [0u8; 32];
            for r in &records {
                key = *blake3::keyed_hash(&key, r).as_bytes();
            }
            key
        })
    });
    g.bench_function("blake3_contiguous", |b| {
        b.iter(|| blake3::hash(black_box(&contiguous)))
    });
    g.bench_function("crc32_contiguous", |b| {
        b.iter(|| crc32fast::hash(black_box(&contiguous)))
    });
    g.finish();
}

criterion_group!(benches, verify);
criterion_main!(benches);
