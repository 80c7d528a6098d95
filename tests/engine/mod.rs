//! Helpers shared by the engine's integration tests: deterministic entries,
//! byte-level access to segment files, and a countdown I/O hook.
#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use session_store::format::{self, Mark, SEGMENT_HEADER_LEN};
use session_store::{
    log::IoHook, log::IoOp, schema::LoggedItem, EntryHash, Item, Log, LogEntry, LogOptions,
    RequestConfig,
};

/// Entry number `i`, with a text of about `size` bytes. The same `(i, size)`
/// always gives the same entry, so readers can recompute what they expect.
pub fn entry(i: u64, size: usize) -> LogEntry {
    LogEntry::UserInput {
        ts: 1_700_000_000_000 + i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "x".repeat(size)))),
    }
}

/// A compaction entry number `i`, carrying one summary item. The same `i`
/// always gives the same entry.
pub fn session_start(i: u64) -> LogEntry {
    LogEntry::SessionStart {
        ts: 1_700_000_000_000 + i,
        system_prompt: Some(format!("compacted at {i}")),
        config: RequestConfig::default(),
        history: vec![LoggedItem::from(Item::user_text(format!("summary {i}")))],
        forked_from: None,
        compacted_from: None,
    }
}

/// Options with segments of `segment_size` from the first one on (rather
/// than doubling up to it) and no background preparation (deterministic
/// file sets); tests that want it turn preparation back on.
pub fn opts(segment_size: u64) -> LogOptions {
    let mut o = LogOptions::default()
        .segment_size(segment_size)
        .initial_segment_size(segment_size);
    o.prepare_ahead = false;
    o
}

/// Every record of a log, owned.
pub fn read_all(log: &Log) -> Vec<(u64, EntryHash, LogEntry)> {
    log.snapshot()
        .entries_from(0)
        .map(|r| r.expect("records of a recovered log read back"))
        .collect()
}

/// The entries of a log, without seqs and hashes.
pub fn entries(log: &Log) -> Vec<LogEntry> {
    read_all(log).into_iter().map(|(_, _, e)| e).collect()
}

/// The files in `dir` named `*.{ext}`, sorted.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// The segment files in `dir`, in seq order.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, "seg")
}

/// Every file in `dir` other than the lock, with its bytes.
pub fn save_dir(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "LOCK"))
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Puts `dir` back to a state saved by [`save_dir`]: files written since are removed.
pub fn restore_dir(dir: &Path, saved: &[(PathBuf, Vec<u8>)]) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n != "LOCK") && !saved.iter().any(|(s, _)| *s == p) {
            fs::remove_file(&p).unwrap();
        }
    }
    for (p, b) in saved {
        fs::write(p, b).unwrap();
    }
}

/// Where one record lies in its segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Its seq.
    pub seq: u64,
    /// Offset of its first byte.
    pub start: usize,
    /// Offset just past its payload (the CRC covers up to here).
    pub body_end: usize,
    /// Offset just past its padding.
    pub end: usize,
}

/// The records of a segment's bytes, read with the record codec alone (not
/// the engine's scan): from the header on, until the first thing that is
/// not a well-formed record.
pub fn spans(bytes: &[u8]) -> Vec<Span> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    while let Ok(Some(rec)) = format::next_record(bytes, at) {
        if rec.check_crc().is_err() {
            break;
        }
        out.push(Span {
            seq: rec.header.seq,
            start: at,
            body_end: at + rec.body.len(),
            end: at + rec.len(),
        });
        at += rec.len();
    }
    out
}

/// The newest valid durable mark in a segment file's header.
pub fn mark_of(path: &Path) -> Option<Mark> {
    let b = fs::read(path).unwrap();
    Mark::newest(&b[..SEGMENT_HEADER_LEN])
}

/// Applies `f` to the bytes of `path` and writes them back.
pub fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    use std::os::unix::fs::FileExt;
    let old = fs::read(path).unwrap();
    let mut b = old.clone();
    f(&mut b);
    if b.len() != old.len() {
        fs::write(path, b).unwrap();
        return;
    }
    // Only the bytes that changed are written, so that a sparse segment
    // keeps its holes (a read-only open reads a small one into memory up
    // to its first hole, and maps the rest: both must meet the damage).
    let file = fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut at = 0;
    while at < b.len() {
        if b[at] == old[at] {
            at += 1;
            continue;
        }
        let end = (at..b.len()).find(|&i| b[i] == old[i]).unwrap_or(b.len());
        file.write_all_at(&b[at..end], at as u64).unwrap();
        at = end;
    }
}

/// Which kind of I/O operation a [`Countdown`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A `pwrite` into a segment file: its header, records, marks or footer.
    Write,
    /// An `fdatasync` of a segment.
    Sync,
    /// Creating and reserving a segment file.
    Allocate,
    /// A rename in the log directory.
    Rename,
    /// An fsync of the directory.
    SyncDir,
    /// Removing a file.
    Remove,
    /// A step of the writer lock's move to a new active segment (the link
    /// `LOCK.next`, its rename over `LOCK`, the removal of one a crash
    /// left), counted apart: a failed one leaves the lock where it was.
    LockMove,
}

impl OpKind {
    /// The kind of `op`.
    pub fn of(op: &IoOp<'_>) -> Option<OpKind> {
        let lock_move = |p: &Path| p.ends_with("LOCK") || p.ends_with("LOCK.next");
        Some(match op {
            IoOp::Rename { to, .. } if lock_move(to) => OpKind::LockMove,
            IoOp::Link { to, .. } if lock_move(to) => OpKind::LockMove,
            IoOp::Remove { path } if lock_move(path) => OpKind::LockMove,
            IoOp::Write { .. } => OpKind::Write,
            IoOp::Sync { .. } => OpKind::Sync,
            IoOp::Allocate { .. } => OpKind::Allocate,
            IoOp::Rename { .. } => OpKind::Rename,
            IoOp::SyncDir { .. } => OpKind::SyncDir,
            IoOp::Remove { .. } => OpKind::Remove,
            _ => return None,
        })
    }
}

/// Fails the `nth` (1-based) operation of one kind, and with `sticky` every
/// later one too (a full disk). `nth == 0` never fails: it only counts.
pub struct Countdown {
    kind: OpKind,
    nth: AtomicU64,
    sticky: bool,
    seen: AtomicU64,
    failed: AtomicU64,
}

impl Countdown {
    /// A hook failing the `nth` operation of `kind`.
    pub fn new(kind: OpKind, nth: u64, sticky: bool) -> Arc<Countdown> {
        Arc::new(Countdown {
            kind,
            nth: AtomicU64::new(nth),
            sticky,
            seen: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// Operations of the kind seen so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// Operations failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }
}

impl IoHook for Countdown {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if OpKind::of(op) != Some(self.kind) {
            return Ok(());
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        let nth = self.nth.load(Ordering::SeqCst);
        if nth != 0 && (n == nth || (self.sticky && n > nth)) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other(format!(
                "injected {:?} failure #{n}",
                self.kind
            )));
        }
        Ok(())
    }
}

/// A temporary directory on tmpfs when there is one: sweeps that reopen a log
/// thousands of times test recovery logic, not the disk, and each reopen
/// fsyncs.
pub fn sweep_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new().tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A seedable generator for test decisions (splitmix64): good enough spread,
/// and a failing trial replays from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The number in environment variable `name`, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `trial(seed)` for seeds 1, 2, … until the trials it reports reach
/// `{prefix}_TRIALS` (default `trials`) or `{prefix}_SECONDS` (default
/// `seconds`) pass; with `{prefix}_SEED` set, runs that seed alone. Returns
/// the trials and the seeds run, and checks that at least `floor` trials ran.
pub fn run_seeded_trials(
    prefix: &str,
    trials: usize,
    seconds: u64,
    floor: usize,
    mut trial: impl FnMut(u64) -> usize,
) -> (usize, u64) {
    if let Ok(seed) = std::env::var(format!("{prefix}_SEED")) {
        let seed: u64 = seed.parse().expect("the seed is a number");
        return (trial(seed), 1);
    }
    let want: usize = env_or(&format!("{prefix}_TRIALS"), trials);
    let budget = std::time::Duration::from_secs(env_or(&format!("{prefix}_SECONDS"), seconds));
    let started = std::time::Instant::now();
    let (mut done, mut seed) = (0, 0u64);
    while done < want && started.elapsed() < budget {
        seed += 1;
        done += trial(seed);
    }
    println!(
        "{prefix}: {done} trials over {seed} seeds in {:.1?}",
        started.elapsed()
    );
    assert!(
        done >= want.min(floor),
        "only {done} trials ran in the time budget"
    );
    (done, seed)
}

/// Lays an unsynced write of `data` at `off` into `bytes` as a power failure
/// may have left it: each 512-byte sector whole, lost, zeroed, garbage or
/// torn. Returns the end of the last sector that changed anything.
pub fn unsynced_write(bytes: &mut [u8], off: usize, data: &[u8], rng: &mut Rng) -> usize {
    let mut landed = 0;
    let mut at = 0usize;
    while at < data.len() {
        let abs = off + at;
        let n = (512 - abs % 512).min(data.len() - at);
        let dst = &mut bytes[abs..abs + n];
        match rng.below(8) {
            0..=2 => dst.copy_from_slice(&data[at..at + n]),
            3..=4 => {
                at += n;
                continue;
            }
            5 => dst.fill(0),
            6 => {
                for b in dst.iter_mut() {
                    *b = rng.next() as u8;
                }
            }
            _ => {
                // Torn inside the sector.
                let cut = rng.below(n as u64) as usize;
                dst[..cut].copy_from_slice(&data[at..at + cut]);
            }
        }
        landed = abs + n;
        at += n;
    }
    landed
}

/// Copies the tree `from` to `to`: a store as it is now, for a test to
/// open as a crash would leave it.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let (p, q) = (e.path(), to.join(e.file_name()));
        if p.is_dir() {
            copy_tree(&p, &q);
        } else {
            fs::copy(&p, &q).unwrap();
        }
    }
}

/// A store at `root` holding one session of `items`, closed (its mark names
/// its end), and a copy of the session's directory as it is then, to put
/// back later ([`put_back`]). Returns the session, its head, its directory
/// and the copy.
pub fn closed_session(
    root: &Path,
    items: &[Item],
) -> (
    session_store::SessionId,
    EntryHash,
    PathBuf,
    tempfile::TempDir,
) {
    let store = session_store::Store::open(root).unwrap();
    let (first, rest) = items.split_first().expect("at least one item");
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), std::slice::from_ref(first))
        .unwrap();
    store.save_delta(id, &mut head, rest).unwrap();
    store.close().unwrap();
    let dir = store.session_dir(id);
    drop(store);
    let kept = tempfile::tempdir().unwrap();
    copy_tree(&dir, kept.path());
    (id, head, dir, kept)
}

/// Puts a session's directory back as [`closed_session`] kept it: the same
/// log id and files, new inodes.
pub fn put_back(kept: &Path, dir: &Path) {
    fs::remove_dir_all(dir).unwrap();
    copy_tree(kept, dir);
}

/// Allocated bytes (`st_blocks × 512`) of everything under `dir` (files and
/// directories, `dir` itself not counted). A file of several names (a
/// session's `LOCK` is a second name of its active segment) counts once,
/// as `du` counts it.
pub fn allocated_bytes(dir: &Path) -> u64 {
    fn walk(dir: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut total = 0;
        for e in fs::read_dir(dir).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                total += m.blocks() * 512 + walk(&e.path(), seen);
            } else if m.nlink() == 1 || seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
        total
    }
    walk(dir, &mut std::collections::HashSet::new())
}
