//! Guards against losing acknowledged records, or keeping records that break
//! the chain, when the power fails: a simulated crash keeps what was synced
//! plus a random subset of unsynced writes, each whole, torn, zeroed or garbage.
//!
//! Every write, sync, allocation, rename and directory sync of the writer is
//! recorded through the `IoHook` seam. A crash at event `k` rebuilds the
//! directory from events `..k` alone. Trials are seeded; a failure prints the
//! seed, and `POWER_LOSS_SEED=<seed>` replays just that trial.
//! Each crash image is opened read-only first (a reader starts at the durable
//! mark), and what the reader reads and restores must equal what the
//! recovering writer keeps.
//! `POWER_LOSS_TRIALS` raises the count (default 2,000, bounded by
//! `POWER_LOSS_SECONDS`, default 120).

mod engine;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use session_store::{
    log::IoHook, log::IoOp, schema::LoggedItem, Durability, Item, Log, LogEntry, LogOptions,
};

#[derive(Debug, Clone)]
enum Event {
    Allocate(PathBuf, u64),
    Write(PathBuf, u64, Vec<u8>),
    Sync(PathBuf),
    Rename(PathBuf, PathBuf),
    /// A second name (`LOCK.next` of the active segment, before it is
    /// renamed over `LOCK`).
    Link(PathBuf, PathBuf),
    SyncDir,
    Remove(PathBuf),
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl IoHook for Recorder {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let e = match op {
            IoOp::Allocate { path, len } => Event::Allocate(path.to_path_buf(), *len),
            IoOp::Write { path, offset, data } => {
                Event::Write(path.to_path_buf(), *offset, data.to_vec())
            }
            IoOp::Sync { path } => Event::Sync(path.to_path_buf()),
            IoOp::Rename { from, to } => Event::Rename(from.to_path_buf(), to.to_path_buf()),
            IoOp::Link { from, to } => Event::Link(from.to_path_buf(), to.to_path_buf()),
            IoOp::SyncDir { .. } => Event::SyncDir,
            IoOp::Remove { path } => Event::Remove(path.to_path_buf()),
            _ => return Ok(()),
        };
        self.events.lock().unwrap().push(e);
        Ok(())
    }
}

use engine::Rng;

/// One file as the crash sees it: bytes known durable, and writes since.
struct Inode {
    len: u64,
    durable: Vec<(u64, Vec<u8>)>,
    pending: Vec<(u64, Vec<u8>)>,
}

/// Rebuilds the directory as a power failure after `events[..k]` could leave it.
fn crash_image(events: &[Event], rng: &mut Rng, out: &Path) {
    let mut inodes: Vec<Inode> = Vec::new();
    let mut names: HashMap<PathBuf, usize> = HashMap::new();
    let mut durable_names: HashMap<PathBuf, usize> = HashMap::new();
    let mut pending_ops: Vec<Event> = Vec::new();
    for e in events {
        match e {
            Event::Allocate(p, len) => {
                inodes.push(Inode {
                    len: *len,
                    durable: Vec::new(),
                    pending: Vec::new(),
                });
                names.insert(p.clone(), inodes.len() - 1);
                pending_ops.push(e.clone());
            }
            Event::Write(p, off, data) => {
                let i = names[p];
                inodes[i].pending.push((*off, data.clone()));
            }
            Event::Sync(p) => {
                let i = names[p];
                let pending = std::mem::take(&mut inodes[i].pending);
                inodes[i].durable.extend(pending);
            }
            Event::Rename(from, to) => {
                let i = names.remove(from).expect("renamed file exists");
                names.insert(to.clone(), i);
                pending_ops.push(e.clone());
            }
            Event::Link(from, to) => {
                let i = names[from];
                names.insert(to.clone(), i);
                pending_ops.push(e.clone());
            }
            Event::Remove(p) => {
                names.remove(p);
                pending_ops.push(e.clone());
            }
            Event::SyncDir => {
                durable_names = names.clone();
                pending_ops.clear();
            }
        }
    }
    // Directory operations after the last directory sync persist as a prefix.
    let keep = rng.below(pending_ops.len() as u64 + 1) as usize;
    let mut visible = durable_names;
    // Re-derive inode numbers for allocations in order.
    let mut alloc_ids = Vec::new();
    {
        let mut n = 0usize;
        for e in events {
            if let Event::Allocate(..) = e {
                alloc_ids.push(n);
                n += 1;
            }
        }
    }
    let mut alloc_seen = events
        .iter()
        .filter(|e| matches!(e, Event::Allocate(..)))
        .count()
        - pending_ops
            .iter()
            .filter(|e| matches!(e, Event::Allocate(..)))
            .count();
    let mut shadow: HashMap<PathBuf, usize> = visible.clone();
    for e in pending_ops.iter().take(keep) {
        match e {
            Event::Allocate(p, _) => {
                shadow.insert(p.clone(), alloc_ids[alloc_seen]);
                alloc_seen += 1;
            }
            Event::Rename(from, to) => {
                if let Some(i) = shadow.remove(from) {
                    shadow.insert(to.clone(), i);
                }
            }
            Event::Link(from, to) => {
                if let Some(&i) = shadow.get(from) {
                    shadow.insert(to.clone(), i);
                }
            }
            Event::Remove(p) => {
                shadow.remove(p);
            }
            _ => {}
        }
    }
    visible = shadow;
    std::fs::create_dir_all(out).unwrap();
    for (path, i) in visible {
        let inode = &inodes[i];
        let mut bytes = vec![0u8; inode.len as usize];
        for (off, data) in &inode.durable {
            bytes[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
        for (off, data) in &inode.pending {
            engine::unsynced_write(&mut bytes, *off as usize, data, rng);
        }
        std::fs::write(out.join(path.file_name().unwrap()), bytes).unwrap();
    }
}

fn entry(rng: &mut Rng, i: u64) -> LogEntry {
    // Now and then a compaction, so that marks name SessionStarts.
    if rng.below(8) == 0 {
        return engine::session_start(i);
    }
    let size = match rng.below(10) {
        0 => 3000 + rng.below(9000) as usize,
        1..=3 => 400 + rng.below(1200) as usize,
        _ => rng.below(200) as usize,
    };
    LogEntry::UserInput {
        ts: 1_700_000_000_000 + i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "y".repeat(size)))),
    }
}

/// Runs one workload and checks `crashes` crash points in it. Panics with the seed.
fn trial(seed: u64, crashes: usize) -> usize {
    let mut rng = Rng(seed);
    // fsync costs nothing on tmpfs; the crash is simulated, not real.
    let work = match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let recorder = Arc::new(Recorder::default());
    let opts = LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(8192)
    };
    let log = Log::open(work.path().join("log"), opts.clone().hook(recorder.clone())).unwrap();
    let mut appended: Vec<LogEntry> = Vec::new();
    // (event count at completion, records durable by then)
    let mut durable_marks: Vec<(usize, usize)> = Vec::new();
    let ops = 5 + rng.below(40);
    for i in 0..ops {
        let e = entry(&mut rng, i);
        match rng.below(6) {
            0 => {
                log.append_with(&e, Durability::Sync).unwrap();
                appended.push(e);
                durable_marks.push((recorder.events.lock().unwrap().len(), appended.len()));
            }
            1 => {
                log.append_with(&e, Durability::Buffered).unwrap();
                appended.push(e);
                log.sync().unwrap();
                durable_marks.push((recorder.events.lock().unwrap().len(), appended.len()));
            }
            _ => {
                log.append_with(&e, Durability::Buffered).unwrap();
                appended.push(e);
            }
        }
    }
    drop(log);
    let events = recorder.events.lock().unwrap().clone();
    if std::env::var("POWER_LOSS_DEBUG").is_ok() {
        for (i, e) in events.iter().enumerate() {
            match e {
                Event::Write(p, off, d) => eprintln!(
                    "{i}: write {} @{off} +{}",
                    p.file_name().unwrap().to_string_lossy(),
                    d.len()
                ),
                other => eprintln!("{i}: {other:?}"),
            }
        }
        eprintln!("durable marks: {durable_marks:?}");
    }
    let mut checked = 0;
    for c in 0..crashes {
        let k = rng.below(events.len() as u64 + 1) as usize;
        let must_have = durable_marks
            .iter()
            .filter(|(at, _)| *at <= k)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        let dir = work.path().join(format!("crash-{c}"));
        crash_image(&events[..k], &mut rng, &dir);
        let ctx = format!(
            "seed {seed}, crash {c} at event {k} of {}; replay with POWER_LOSS_SEED={seed}",
            events.len()
        );
        let has_segment = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".seg"));
        if !has_segment {
            assert_eq!(
                must_have, 0,
                "{ctx}: acknowledged records but no segment survived"
            );
            continue;
        }
        // A reader first, on the image as the crash left it: it starts at the
        // mark when it can, and must see what the recovering writer keeps.
        let reader = Log::open_read_only(&dir)
            .unwrap_or_else(|e| panic!("{ctx}: read-only open failed: {e}"));
        let read: Vec<LogEntry> = reader
            .snapshot()
            .entries_from(0)
            .map(|r| {
                r.unwrap_or_else(|e| panic!("{ctx}: reader's read failed: {e}"))
                    .2
            })
            .collect();
        let reader_restored = reader
            .restore()
            .unwrap_or_else(|e| panic!("{ctx}: reader's restore failed: {e}"));
        drop(reader);
        let log =
            Log::open(&dir, opts.clone()).unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        assert_eq!(
            reader_restored,
            log.restore().unwrap(),
            "{ctx}: the reader restored another state than the writer"
        );
        let got: Vec<LogEntry> = log
            .snapshot()
            .entries_from(0)
            .map(|r| r.unwrap_or_else(|e| panic!("{ctx}: read failed: {e}")).2)
            .collect();
        assert!(
            got.len() >= must_have,
            "{ctx}: {} records after recovery, {must_have} were acknowledged durable",
            got.len()
        );
        assert!(
            got.len() <= appended.len(),
            "{ctx}: more records than appended"
        );
        for (i, (a, b)) in got.iter().zip(&appended).enumerate() {
            assert_eq!(
                a, b,
                "{ctx}: record {i} differs: not a prefix of what was appended"
            );
        }
        assert_eq!(read, got, "{ctx}: the reader saw other records");
        let report = log.verify();
        assert_eq!(
            report.damage, None,
            "{ctx}: chain does not verify after recovery"
        );
        let extra = entry(&mut rng, 9999);
        log.append_with(&extra, Durability::Sync)
            .unwrap_or_else(|e| panic!("{ctx}: append after recovery: {e}"));
        drop(log);
        let log =
            Log::open(&dir, opts.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        assert_eq!(
            log.next_seq() as usize,
            got.len() + 1,
            "{ctx}: append after recovery was lost"
        );
        checked += 1;
    }
    checked
}

#[test]
fn power_loss_keeps_a_verified_prefix_with_every_acknowledged_record() {
    engine::run_seeded_trials("POWER_LOSS", 2000, 120, 200, |seed| trial(seed, 8));
}
