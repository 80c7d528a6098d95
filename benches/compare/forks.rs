//! Forks by reference (issue 18): what a fork costs on disk and in time,
//! against the copy-fork it replaces, and what reading a chain of forks
//! costs against a flat session with the same live history, through the
//! public `Store` API.
//!
//! - The parent: realistic turns (`common::TURNS`) saved turn by turn until
//!   it holds 100 MB of records (10 MB with `--quick`).
//! - 100 forks of it (`Store::fork_at_seq` at random points, and
//!   `Store::fork_at` its head), each timed alone; the disk they add is the
//!   store's allocated blocks (files and directories, `st_blocks`) after
//!   the store's close, less before. Both durabilities: `Buffered` (the
//!   default, sparse segments) and `Sync` (a zeroed first segment).
//! - The same forks of a 1 MB parent: the time must not follow the size.
//! - Before (the copy-fork this replaces, emulated through the API as it
//!   worked: restore the parent, create a session whose `SessionStart`
//!   carries the history): 3 of them, their time and disk, times 100.
//! - A new empty session's disk (`create_session`), for comparison.
//! - Restore of a fork of a fork of a fork (each adding turns) against a
//!   flat session saved with the same items, both read by a store that has
//!   neither open (read-only opens of every log on the way), interleaved.
//! - Append of small items (`Workload::small`) through `save_delta` into a
//!   session with no forks and into a fork: the append path is the same
//!   code for both (and unchanged by forks by reference).

use std::path::Path;
use std::time::Instant;

use session_store::{Durability, LogOptions, RequestConfig, SessionId, Store, StoreOptions};

use crate::common::{self, Workload};
use crate::{target, Op};

/// Forks per case.
const FORKS: usize = 100;

/// Copy-forks measured for the baseline (each copies the whole parent).
const COPIES: usize = 3;

fn options(durability: Durability) -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().durability(durability))
}

/// Allocated bytes under `dir`: every file's and directory's blocks.
pub fn disk_bytes(dir: &Path) -> u64 {
    let (files, dirs) = crate::common::allocated(dir);
    files + dirs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A `Buffered` store at `dir` holding one session of `w`'s turns; its id.
fn parent(dir: &Path, w: &Workload) -> SessionId {
    let store = Store::open_with(dir, options(Durability::Buffered)).expect("open");
    let (id, mut head) = store
        .create_session(
            Some(common::SYSTEM_PROMPT),
            RequestConfig::model(common::MODEL),
            &[],
        )
        .expect("create");
    for t in &w.turns {
        store.save_delta(id, &mut head, t).expect("save");
    }
    store.close().expect("close");
    id
}

/// What forking one parent measured.
struct Forked {
    parent_mb: f64,
    fork_ms: Vec<f64>,
    added_bytes: u64,
}

/// `FORKS` forks of `parent` in the store at `dir`, opened with
/// `durability`: half by seq at random points, half at the head.
fn fork_many(dir: &Path, parent: SessionId, durability: Durability, seed: u64) -> Forked {
    let before = disk_bytes(dir);
    let store = Store::open_with(dir, options(durability)).expect("open");
    let snap = store.snapshot(parent).expect("snapshot");
    let parent_mb = snap.bytes() as f64 / 1e6;
    let head = snap.head().expect("head").1;
    let next = snap.next_seq();
    drop(snap);
    let mut rng = common::Rng::new(seed);
    let mut fork_ms = Vec::with_capacity(FORKS);
    for i in 0..FORKS {
        let seq = rng.below(next);
        let t = Instant::now();
        if i % 2 == 0 {
            store.fork_at_seq(parent, seq).expect("fork");
        } else {
            store.fork_at(parent, head).expect("fork");
        }
        fork_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    store.close().expect("close");
    Forked {
        parent_mb,
        fork_ms,
        added_bytes: disk_bytes(dir) - before,
    }
}

/// The copy-fork this replaces: restore, then a session that starts with
/// the history. Its median time (ms) and disk per copy (bytes).
fn copy_forks(dir: &Path, parent: SessionId, durability: Durability) -> (f64, u64) {
    let before = disk_bytes(dir);
    let store = Store::open_with(dir, options(durability)).expect("open");
    let mut ms = Vec::new();
    for _ in 0..COPIES {
        let t = Instant::now();
        let state = store.restore(parent).expect("restore");
        store
            .create_session(
                state.system_prompt.as_deref(),
                state.config.clone(),
                &state.history,
            )
            .expect("copy");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    store.close().expect("close");
    (median(ms), (disk_bytes(dir) - before) / COPIES as u64)
}

/// A new empty session's disk, averaged over 20, with `durability`.
fn empty_session_bytes(durability: Durability) -> u64 {
    let tmp = crate::fresh();
    let store = Store::open_with(tmp.path(), options(durability)).expect("open");
    store.close().expect("close");
    drop(store);
    let before = disk_bytes(tmp.path());
    let store = Store::open_with(tmp.path(), options(durability)).expect("open");
    for _ in 0..20 {
        common::create_session(&store);
    }
    store.close().expect("close");
    (disk_bytes(tmp.path()) - before) / 20
}

/// Restore of a fork of a fork of a fork against a flat session with the
/// same items: medians (ms) over `reps` interleaved rounds.
fn chain_restore(quick: bool, reps: usize) -> (f64, f64, usize) {
    let (root_turns, level_turns) = if quick { (150, 50) } else { (600, 200) };
    let w = Workload::turns(31, root_turns + 3 * level_turns);
    let tmp = crate::fresh();
    let store = Store::open_with(tmp.path(), options(Durability::Buffered)).expect("open");
    let create = || {
        store
            .create_session(
                Some(common::SYSTEM_PROMPT),
                RequestConfig::model(common::MODEL),
                &[],
            )
            .expect("create")
    };
    let (flat, mut fh) = create();
    for t in &w.turns {
        store.save_delta(flat, &mut fh, t).expect("save");
    }
    let (mut id, mut head) = create();
    for t in &w.turns[..root_turns] {
        store.save_delta(id, &mut head, t).expect("save");
    }
    for level in 0..3 {
        (id, head) = store.fork_at(id, head).expect("fork");
        let from = root_turns + level * level_turns;
        for t in &w.turns[from..from + level_turns] {
            store.save_delta(id, &mut head, t).expect("save");
        }
    }
    store.close().expect("close");
    drop(store);
    let store = Store::open_with(tmp.path(), options(Durability::Buffered)).expect("open");
    let items = store.restore(flat).expect("restore").history.len();
    assert_eq!(
        store.restore(id).expect("restore").history.len(),
        items,
        "the chain and the flat session hold the same history"
    );
    let (mut chain_ms, mut flat_ms) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(3) * 4 {
        let t = Instant::now();
        std::hint::black_box(store.restore(id).expect("restore"));
        chain_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::hint::black_box(store.restore(flat).expect("restore"));
        flat_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    (median(chain_ms), median(flat_ms), items)
}

/// Items per second of `save_delta` with small items, turn by turn, into
/// a session with no forks and into a fork by reference of a session of the
/// same size: medians over `reps` interleaved rounds.
fn append_rates(quick: bool, reps: usize) -> (f64, f64) {
    let w = Workload::small(41, if quick { 2_000 } else { 10_000 });
    let items = w.items() as f64;
    let (mut plain, mut forked) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(3) {
        for into_fork in [false, true] {
            let tmp = crate::fresh();
            let store = Store::open_with(tmp.path(), options(Durability::Buffered)).expect("open");
            let (mut id, mut head) = store
                .create_session(
                    Some(common::SYSTEM_PROMPT),
                    RequestConfig::model(common::MODEL),
                    &[],
                )
                .expect("create");
            if into_fork {
                (id, head) = store.fork_at(id, head).expect("fork");
            }
            let t = Instant::now();
            for turn in &w.turns {
                store.save_delta(id, &mut head, turn).expect("save");
            }
            let rate = items / t.elapsed().as_secs_f64();
            store.close().expect("close");
            match into_fork {
                false => plain.push(rate),
                true => forked.push(rate),
            }
        }
    }
    (median(plain), median(forked))
}

/// Prints the forks table and checks issue 18's targets.
pub fn run(quick: bool, reps: usize) {
    let big_mb = if quick { 10.0 } else { 100.0 };
    // About 10.5 KB of records a realistic turn.
    let turns = (big_mb * 1e6 / 10_500.0) as usize;
    eprintln!(
        "compare: forks, {} mode: a {big_mb} MB parent ({turns} turns), {FORKS} forks a case",
        if quick { "quick" } else { "full" }
    );
    let big = Workload::turns(21, turns);
    let small = Workload::turns(22, 100);
    println!();
    println!("## Forks by reference (issue 18)");
    println!();
    println!(
        "| case | parent | fork, median | fork, p99 | disk added by {FORKS} forks | disk a fork |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut big_buffered = None;
    let mut small_median = None;
    // Every case's files, removed together at the end: a removal just
    // before a case slows its forks (new inodes) on ext4, see `creation`.
    let mut kept = Vec::new();
    for durability in [Durability::Buffered, Durability::Sync] {
        for (w, label) in [(&small, "small"), (&big, "large")] {
            let tmp = crate::fresh();
            let p = parent(tmp.path(), w);
            let f = fork_many(tmp.path(), p, durability, 7);
            println!(
                "| by reference, {durability:?} | {:.1} MB | {:.3} ms | {:.3} ms | {:.1} KB | {:.1} KB |",
                f.parent_mb,
                median(f.fork_ms.clone()),
                pct(f.fork_ms.clone(), 0.99),
                f.added_bytes as f64 / 1e3,
                f.added_bytes as f64 / 1e3 / FORKS as f64
            );
            if durability == Durability::Buffered {
                match label {
                    "small" => small_median = Some(median(f.fork_ms.clone())),
                    _ => {
                        let (copy_ms, copy_bytes) = copy_forks(tmp.path(), p, durability);
                        println!(
                            "| copy (before), {durability:?} | {:.1} MB | {copy_ms:.1} ms | | {:.1} MB (×{FORKS}, from {COPIES}) | {:.1} MB |",
                            f.parent_mb,
                            copy_bytes as f64 * FORKS as f64 / 1e6,
                            copy_bytes as f64 / 1e6
                        );
                        big_buffered = Some((f, copy_ms, copy_bytes));
                    }
                }
            }
            kept.push(tmp);
        }
    }
    for durability in [Durability::Buffered, Durability::Sync] {
        println!(
            "| new empty session, {durability:?} | | | | | {:.1} KB |",
            empty_session_bytes(durability) as f64 / 1e3
        );
    }
    let (chain_ms, flat_ms, items) = chain_restore(quick, reps);
    println!();
    println!(
        "Restore of a fork of a fork of a fork: {chain_ms:.2} ms; of a flat session with the same {items} items: {flat_ms:.2} ms ({:.2}×)",
        chain_ms / flat_ms
    );
    let (plain, forked) = append_rates(quick, reps);
    println!(
        "Append, small items through `save_delta` (Buffered): a session with no forks {:.0} k items/s; a fork by reference {:.0} k items/s ({:.2}×)",
        plain / 1e3,
        forked / 1e3,
        forked / plain
    );
    println!();
    println!("Targets (issue 18):");
    let (f, copy_ms, copy_bytes) = big_buffered.expect("measured");
    target(
        &format!(
            "{FORKS} forks of a {:.0} MB session add on disk, Buffered (before: {:.0} MB)",
            f.parent_mb,
            copy_bytes as f64 * FORKS as f64 / 1e6
        ),
        Some(f.added_bytes as f64 / 1e6),
        Op::Below,
        1.0,
        " MB",
    );
    let big_median = median(f.fork_ms.clone());
    target(
        &format!(
            "one fork of a {:.0} MB session, median (before: {copy_ms:.0} ms, {:.0}× slower)",
            f.parent_mb,
            copy_ms / big_median
        ),
        Some(big_median),
        Op::Below,
        5.0,
        " ms",
    );
    target(
        "one fork, p99 of the same",
        Some(pct(f.fork_ms.clone(), 0.99)),
        Op::Below,
        5.0,
        " ms",
    );
    if let Some(s) = small_median {
        println!(
            "- fork time against the parent's size: {:.2}× from a {:.1} MB to a {:.0} MB parent",
            big_median / s,
            small.payload_bytes as f64 / 1e6,
            f.parent_mb
        );
    }
    target(
        "restore of a fork of a fork of a fork against a flat session",
        Some(chain_ms / flat_ms),
        Op::AtMost,
        1.5,
        "×",
    );
}
