//! The async runtime workload of `examples/runtime.rs` as a benchmark: 64
//! sessions committing turns concurrently through `AsyncStore`, Buffered and
//! Sync, back to back (think time 0: every core busy with commits) and paced
//! as a model paces them (20 ms), with a 1 ms timer on the same runtime.
//! Prints the table the README quotes, with issue 17's targets beside it.
//!
//! `cargo bench --bench runtime --features tokio -- [--turns N] [--think-ms N]`

#[path = "../examples/runtime.rs"]
mod runtime;

fn main() {
    runtime::run_all();
    println!(
        "targets: Buffered commit p99 < 200 µs; timer p99 < 2,000 µs late; \
         Sync: one fdatasync per commit group, not per entry"
    );
}
