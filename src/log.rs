//! The log: a directory of rolling segments with one writer (across
//! processes), group commit, recovery on open, and any number of readers.

use std::cell::Cell;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rkyv::util::AlignedVec;

use crate::chain::EntryHash;
use crate::error::{CorruptKind, Error, Result};
use crate::format::{
    self, Footer, IndexEntry, Mark, RecordHeader, SegmentHeader, FOOTER_LEN, FORMAT_VERSION,
    INDEX_ENTRY_LEN, MAX_PAYLOAD_LEN, RECORD_ALIGN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::schema::{ArchivedLogEntry, EntryKind, LogEntry};
use crate::segment::{
    io_err, parse_segment_name, run_hook, sync_dir, Hook, IoHook, IoOp, Point, Prepared, Scan,
    ScanMode, Segment, INDEX_STRIDE_BYTES,
};
use crate::state::RestoredState;

/// The default (largest) segment size: 64 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// The default size of a log's first segment: 256 KiB.
pub const DEFAULT_INITIAL_SEGMENT_SIZE: u64 = 256 << 10;
const LOCK_FILE: &str = "LOCK";
/// Writeback of appended bytes is started every this many bytes.
const WRITEBACK_CHUNK: u64 = 4 << 20;
const PAGE: u64 = 4096;

/// When an append counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Written to the page cache; survives a process crash, not a power loss,
    /// until the next [`Log::sync`] or `Sync` append.
    #[default]
    Buffered,
    /// `fdatasync`ed before `append` returns, shared among concurrent appenders
    /// (group commit).
    Sync,
}

/// What open does with damage at or before the durable point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse with [`Error::Corrupt`].
    #[default]
    Strict,
    /// Cut the log at the first bad record and report it.
    Salvage,
}

/// How to open a log.
#[derive(Clone)]
pub struct LogOptions {
    /// Largest size of new segments in bytes (rounded up to 4 KiB; at least 8 KiB).
    pub segment_size: u64,
    /// Size of a log's first segment. Each roll doubles the size up to
    /// `segment_size`, so that the many small sessions of a store reserve
    /// little disk while long ones get large segments.
    pub initial_segment_size: u64,
    /// Durability of [`Log::append`].
    pub durability: Durability,
    /// What to do with damage found on open.
    pub recovery: RecoveryMode,
    /// Prepare (create, allocate and map) the next segment in the background.
    pub prepare_ahead: bool,
    /// The fault seam, for tests.
    pub hook: Option<Arc<dyn IoHook>>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size: DEFAULT_SEGMENT_SIZE,
            initial_segment_size: DEFAULT_INITIAL_SEGMENT_SIZE,
            durability: Durability::Buffered,
            recovery: RecoveryMode::Strict,
            prepare_ahead: true,
            hook: None,
        }
    }
}

impl std::fmt::Debug for LogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOptions")
            .field("segment_size", &self.segment_size)
            .field("durability", &self.durability)
            .field("recovery", &self.recovery)
            .field("prepare_ahead", &self.prepare_ahead)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl LogOptions {
    /// Sets the segment size.
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Sets the default durability.
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets the recovery mode.
    pub fn recovery(mut self, m: RecoveryMode) -> Self {
        self.recovery = m;
        self
    }

    /// Installs an I/O hook (the test seam).
    pub fn hook(mut self, hook: Arc<dyn IoHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Sets the size of a log's first segment.
    pub fn initial_segment_size(mut self, bytes: u64) -> Self {
        self.initial_segment_size = bytes;
        self
    }

    fn max_segment_len(&self) -> u64 {
        self.segment_size.max(2 * PAGE).div_ceil(PAGE) * PAGE
    }

    /// Length of the segment after one of `current` bytes (0: the first).
    fn next_segment_len(&self, current: u64) -> u64 {
        let max = self.max_segment_len();
        let initial = (self.initial_segment_size.max(2 * PAGE).div_ceil(PAGE) * PAGE).min(max);
        current.saturating_mul(2).clamp(initial, max)
    }
}

/// Bytes that were cut off (writer) or would be (reader) after the last good record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TornTail {
    /// The segment.
    pub segment: PathBuf,
    /// Offset of the first bad byte.
    pub offset: u64,
    /// The seq of the first record cut (by position), if the cut is at a record.
    pub seq: Option<u64>,
    /// Why the record there was rejected.
    pub reason: String,
    /// Whether the damage lay before the durable point (only in salvage mode).
    pub salvaged: bool,
}

/// What open found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Segments in the log.
    pub segments: usize,
    /// Records kept.
    pub records: u64,
    /// A torn (or salvaged) tail, if one was found.
    pub torn_tail: Option<TornTail>,
    /// Files removed: unfinished segment preparations, or segments after a salvage cut.
    pub removed: Vec<PathBuf>,
}

/// The first break `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub segment: PathBuf,
    /// Offset in it.
    pub offset: u64,
    /// Seq of the record, where known.
    pub seq: Option<u64>,
    /// What failed.
    pub kind: CorruptKind,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in {} at offset {}",
            self.kind,
            self.segment.display(),
            self.offset
        )?;
        if let Some(seq) = self.seq {
            write!(f, ", seq {seq}")?;
        }
        Ok(())
    }
}

/// The result of [`Log::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: usize,
    /// Records whose CRC, chain link and archive checked out.
    pub records: u64,
    /// Record bytes checked.
    pub bytes: u64,
    /// Seq and hash of the last good record.
    pub head: Option<(u64, EntryHash)>,
    /// The first break, if any.
    pub damage: Option<Damage>,
    /// An unrecovered torn tail (not damage).
    pub torn_tail: Option<TornTail>,
}

thread_local! {
    /// Each thread's buffer for encoding its batches, reused across calls
    /// (taken out while in use, so a nested append gets a fresh one).
    static ENCODE_BUFFER: Cell<AlignedVec> = Cell::new(AlignedVec::new());
}

/// A thread keeps its encoding buffer only up to this capacity.
const MAX_KEPT_ENCODE_BUFFER: usize = 8 << 20;

/// One record of an encoded batch.
struct Encoded {
    /// Offset of its (blank) header in the batch buffer.
    start: usize,
    payload_len: usize,
    kind: EntryKind,
    ts: u64,
}

/// Encodes `entries` into `buf`, record after record: a blank 64-byte
/// header, the rkyv payload, zero padding to a multiple of 16. Every record
/// starts 16-byte aligned, so each payload archives exactly as it would at
/// offset 0.
fn encode_batch(entries: &[LogEntry], buf: &mut AlignedVec, out: &mut Vec<Encoded>) -> Result<()> {
    buf.clear();
    for entry in entries {
        let start = buf.len();
        buf.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
        *buf = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(entry, std::mem::take(buf))
            .map_err(|e| Error::invalid(format!("cannot archive entry: {e}")))?;
        let payload_len = buf.len() - start - RECORD_HEADER_LEN;
        if payload_len == 0 || payload_len > MAX_PAYLOAD_LEN {
            return Err(Error::invalid(format!(
                "entry of {payload_len} bytes is too large"
            )));
        }
        buf.resize(start + format::record_len(payload_len), 0);
        out.push(Encoded {
            start,
            payload_len,
            kind: entry.kind(),
            ts: entry.ts(),
        });
    }
    Ok(())
}

/// The committed state readers see, published after every append batch.
#[derive(Clone)]
struct Published {
    segments: Arc<Vec<Arc<Segment>>>,
    tip: Tip,
}

/// The record bytes from which `verify` scans segments on several threads.
const PARALLEL_VERIFY_BYTES: u64 = 8 << 20;

/// Where the log ends: what the writer extends, and what it publishes.
#[derive(Clone, Copy)]
struct Tip {
    /// Offset just past the last record in the active segment.
    end: u64,
    next_seq: u64,
    /// Hash of the last record (the start hash if none).
    head: EntryHash,
    /// Seq of the last `SessionStart` in the log.
    last_session_start: Option<u64>,
    /// Offset of the last `SessionStart` in the active segment, for its marks.
    session_start_offset: Option<u64>,
}

struct Writer {
    segments: Vec<Arc<Segment>>,
    tip: Tip,
    last_indexed: Option<u64>,
    active_sealed: bool,
    prepared: Option<JoinHandle<Result<Prepared>>>,
    prep_counter: u64,
    /// Offset from which writeback has not been started.
    writeback_from: u64,
}

#[derive(Default)]
struct SyncState {
    durable_next: u64,
    in_progress: bool,
}

/// What a roll leaves to do off the append lock: `fdatasync` the segment it
/// sealed, fsync the directory (which makes its successor's name durable),
/// then give the successor its first mark and sync it. Done by a background
/// thread, or by whatever needs it first: a group commit (before it syncs the
/// successor), the next roll (before it writes its seal), or `close`.
/// Until the successor has a mark, recovery checks the sealed segment (see
/// `Log::open`), so the mark must come last.
struct Settle {
    pending: Mutex<Option<Unsettled>>,
    dir: PathBuf,
    hook: Hook,
    poisoned: Arc<AtomicBool>,
}

struct Unsettled {
    /// `None` for a roll out of an empty segment, which the rename replaced.
    sealed: Option<Arc<Segment>>,
    successor: Arc<Segment>,
}

impl Settle {
    /// Settles the last roll, if it is not yet. A failure poisons the log:
    /// the kernel may have dropped the pages, so it is never retried; and a
    /// poisoned log settles nothing (nothing may vouch for a roll after a
    /// failed sync).
    fn run(&self) -> Result<()> {
        let mut pending = self.pending.lock();
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let Some(u) = pending.take() else {
            return Ok(());
        };
        let result = (|| {
            if let Some(sealed) = &u.sealed {
                sealed.sync()?;
            }
            sync_dir(&self.dir, &self.hook)?;
            if u.successor.mark.lock().is_none() {
                let h = u.successor.header;
                u.successor.write_mark(Point {
                    end: SEGMENT_HEADER_LEN as u64,
                    next_seq: h.first_seq,
                    hash: h.start_hash,
                    session_start: None,
                })?;
            }
            u.successor.sync()
        })();
        if result.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}

struct Inner {
    dir: PathBuf,
    opts: LogOptions,
    log_id: [u8; 16],
    writer: Option<Mutex<Writer>>,
    published: Mutex<Published>,
    committed: Condvar,
    sync: Mutex<SyncState>,
    synced: Condvar,
    poisoned: Arc<AtomicBool>,
    settle: Arc<Settle>,
    /// Set by the first `Sync` commit or `sync` call: from then on, segments
    /// are prepared zero-filled (see `segment::zero_fill`).
    syncs: AtomicBool,
    report: RecoveryReport,
    _lock: Option<File>,
}

/// An append-only, hash-chained log in one directory. Cheap to clone; clones
/// share the writer.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.inner.dir).finish()
    }
}

/// Segment files by first seq, and leftover preparations.
type Listing = (Vec<(u64, PathBuf)>, Vec<PathBuf>);

fn list_segments(dir: &Path) -> Result<Listing> {
    let mut segs = Vec::new();
    let mut preps = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("read dir", dir))? {
        let entry = entry.map_err(io_err("read dir", dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = parse_segment_name(name) {
            segs.push((seq, entry.path()));
        } else if name.ends_with(".prep") {
            preps.push(entry.path());
        }
    }
    segs.sort();
    Ok((segs, preps))
}

/// Outcome of opening the segments of a directory.
struct Opened {
    segments: Vec<Arc<Segment>>,
    tip: Tip,
    active_sealed: bool,
    report: RecoveryReport,
    log_id: Option<[u8; 16]>,
}

impl Opened {
    /// Makes the recovered records readable and returns the view to publish.
    fn publish(&self) -> Published {
        if let Some(last) = self.segments.last() {
            last.map.publish(self.tip.end);
        }
        Published {
            segments: Arc::new(self.segments.clone()),
            tip: self.tip,
        }
    }
}

impl Log {
    /// Opens (or creates) the log in `dir` for writing, recovering it.
    ///
    /// Fails with [`Error::Locked`] while another writer holds it, and with
    /// [`Error::Corrupt`] on damage at or before the durable point (unless
    /// [`RecoveryMode::Salvage`]). A torn tail is cut and reported in
    /// [`Log::recovery_report`].
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err("create dir", &dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        // A reader probing for a live writer (`Store::list`) holds a shared
        // lock for a moment; only a lock still held after a few tries is a writer.
        let mut tries = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if tries < 5 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked { path: lock_path }),
                Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", &lock_path, e)),
            }
        }
        let hook: Hook = opts.hook.clone();
        let (_, preps) = list_segments(&dir)?;
        let mut removed = Vec::new();
        for p in preps {
            run_hook(&hook, IoOp::Remove { path: &p }).map_err(io_err("remove", &p))?;
            fs::remove_file(&p).map_err(io_err("remove", &p))?;
            removed.push(p);
        }
        let mut salvaged: Option<TornTail> = None;
        let mut opened = loop {
            let (mut paths, _) = list_segments(&dir)?;
            if paths.is_empty() {
                break create_first_segment(&dir, &opts, &hook)?;
            }
            let successor = match last_roll(&paths, &hook)? {
                LastRoll::Settled => None,
                LastRoll::Holds(prev) => {
                    // Intact, perhaps only in the page cache: make it durable
                    // before anything is written after it.
                    prev.sync()?;
                    sync_dir(&dir, &hook)?;
                    None
                }
                LastRoll::Torn => paths.pop(),
            };
            let result = open_segments(&paths, true, opts.recovery, &hook);
            if let (Ok(_), Some((_, p))) = (&result, &successor) {
                // Nothing in it was durable: a record there is durable only
                // once the segment before it is.
                run_hook(&hook, IoOp::Remove { path: p }).map_err(io_err("remove", p))?;
                fs::remove_file(p).map_err(io_err("remove", p))?;
                sync_dir(&dir, &hook)?;
                removed.push(p.clone());
            }
            let damage = match result {
                Ok(o) if opts.recovery == RecoveryMode::Salvage => match verify_opened(&o) {
                    None => break o,
                    Some(d) => d,
                },
                Ok(o) => break o,
                Err(Error::Corrupt {
                    segment,
                    offset,
                    seq,
                    kind,
                }) if opts.recovery == RecoveryMode::Salvage => Damage {
                    segment,
                    offset,
                    seq,
                    kind,
                },
                Err(e) => return Err(e),
            };
            // Salvage: cut the log at the first bad record and try again.
            // Every cut removes bytes, so this ends.
            removed.extend(cut_at(&dir, &paths, &damage, &hook)?);
            salvaged.get_or_insert(TornTail {
                segment: damage.segment.clone(),
                offset: damage.offset,
                seq: damage.seq,
                reason: damage.kind.to_string(),
                salvaged: true,
            });
        };
        if salvaged.is_some() {
            opened.report.torn_tail = salvaged;
        }
        opened.report.removed.splice(0..0, removed);
        Ok(Log::from_opened(dir, opts, opened, Some(lock)))
    }

    /// Opens the log read-only, without taking the writer lock: it sees the
    /// prefix committed at open; call [`Log::refresh`] to see more.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let (paths, _) = list_segments(&dir)?;
        if paths.is_empty() {
            return Err(Error::not_found(format!(
                "no segments in {}",
                dir.display()
            )));
        }
        let mut paths = paths;
        if let LastRoll::Torn = last_roll(&paths, &None)? {
            // What a recovering writer removes.
            paths.pop();
        }
        let opened = open_segments(&paths, false, RecoveryMode::Strict, &None)?;
        Ok(Log::from_opened(dir, LogOptions::default(), opened, None))
    }

    fn from_opened(dir: PathBuf, opts: LogOptions, o: Opened, lock: Option<File>) -> Log {
        let syncs = opts.durability == Durability::Sync;
        let published = o.publish();
        let last_indexed = o
            .segments
            .last()
            .and_then(|s| s.index.read().last().map(|e| e.offset));
        let writer = lock.is_some().then(|| {
            Mutex::new(Writer {
                segments: o.segments,
                tip: o.tip,
                last_indexed,
                active_sealed: o.active_sealed,
                prepared: None,
                prep_counter: 0,
                writeback_from: o.tip.end,
            })
        });
        let poisoned = Arc::new(AtomicBool::new(false));
        let settle = Arc::new(Settle {
            pending: Mutex::new(None),
            dir: dir.clone(),
            hook: opts.hook.clone(),
            poisoned: poisoned.clone(),
        });
        Log {
            inner: Arc::new(Inner {
                dir,
                opts,
                log_id: o.log_id.unwrap_or_default(),
                writer,
                published: Mutex::new(published),
                committed: Condvar::new(),
                sync: Mutex::new(SyncState {
                    durable_next: o.tip.next_seq,
                    in_progress: false,
                }),
                synced: Condvar::new(),
                poisoned,
                settle,
                syncs: AtomicBool::new(syncs),
                report: o.report,
                _lock: lock,
            }),
        }
    }

    /// Re-reads a read-only log to see what was committed since.
    pub fn refresh(&mut self) -> Result<()> {
        if self.inner.writer.is_some() {
            return Ok(());
        }
        *self = Log::open_read_only(&self.inner.dir)?;
        Ok(())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What recovery found when this log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// True when no other clone of this handle exists.
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Whether this handle can append.
    pub fn is_writable(&self) -> bool {
        self.inner.writer.is_some()
    }

    /// Appends one entry with the log's default durability.
    pub fn append(&self, entry: &LogEntry) -> Result<(u64, EntryHash)> {
        let r = self.append_batch(
            std::slice::from_ref(entry),
            self.inner.opts.durability,
            None,
        )?;
        Ok(r[0])
    }

    /// Appends one entry with the given durability.
    pub fn append_with(
        &self,
        entry: &LogEntry,
        durability: Durability,
    ) -> Result<(u64, EntryHash)> {
        let r = self.append_batch(std::slice::from_ref(entry), durability, None)?;
        Ok(r[0])
    }

    /// Appends entries in order under one lock, and (with `Sync`) one sync.
    ///
    /// With `expect_head = Some(h)`, nothing is written unless the log's head
    /// hash is `h` (`None` inside: the log is empty); otherwise the result is
    /// [`Error::HeadMismatch`].
    pub fn append_batch(
        &self,
        entries: &[LogEntry],
        durability: Durability,
        expect_head: Option<Option<EntryHash>>,
    ) -> Result<Vec<(u64, EntryHash)>> {
        if self.inner.writer.is_none() {
            return Err(Error::invalid("log was opened read-only"));
        }
        for entry in entries {
            entry.check()?;
        }
        // Encoding needs no lock: concurrent appenders encode in parallel, and
        // an entry that cannot be encoded is refused without poisoning.
        let mut buf = ENCODE_BUFFER.try_with(Cell::take).unwrap_or_default();
        let mut records = Vec::with_capacity(entries.len());
        let encoded = encode_batch(entries, &mut buf, &mut records);
        let result =
            encoded.and_then(|()| self.append_encoded(&mut buf, &records, durability, expect_head));
        if buf.capacity() <= MAX_KEPT_ENCODE_BUFFER {
            // Fails only while the thread's locals are being destroyed.
            let _ = ENCODE_BUFFER.try_with(|c| c.set(buf));
        }
        result
    }

    /// The locked part of [`Log::append_batch`]: the batch's records are
    /// encoded in `buf` with blank headers.
    fn append_encoded(
        &self,
        buf: &mut [u8],
        records: &[Encoded],
        durability: Durability,
        expect_head: Option<Option<EntryHash>>,
    ) -> Result<Vec<(u64, EntryHash)>> {
        let inner = &*self.inner;
        let Some(writer) = &inner.writer else {
            return Err(Error::invalid("log was opened read-only"));
        };
        let mut w = writer.lock();
        if inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        if let Some(expected) = expect_head {
            let actual = (w.tip.next_seq > 0).then_some(w.tip.head);
            if actual != expected {
                return Err(Error::HeadMismatch {
                    session: inner.dir.display().to_string(),
                    expected,
                    actual,
                });
            }
        }
        let mut out = Vec::with_capacity(records.len());
        let result = self.write_entries(&mut w, buf, records, &mut out);
        // Publish only a batch written whole; after a failure the writer is
        // poisoned and readers keep the last good view.
        if result.is_ok() && !out.is_empty() {
            let mut p = inner.published.lock();
            // Compare identity, not names: a roll out of an empty segment
            // replaces it with a file of the same name.
            let rolled = p.segments.len() != w.segments.len()
                || !matches!(
                    (p.segments.last(), w.segments.last()),
                    (Some(a), Some(b)) if Arc::ptr_eq(a, b)
                );
            if rolled {
                p.segments = Arc::new(w.segments.clone());
            }
            p.tip = w.tip;
            drop(p);
            inner.committed.notify_all();
        }
        if let Err(e) = result {
            inner.poisoned.store(true, Ordering::Release);
            inner.synced.notify_all();
            return Err(e);
        }
        self.maybe_prepare(&mut w);
        drop(w);
        if durability == Durability::Sync {
            if let Some(&(last, _)) = out.last() {
                self.wait_durable(last)?;
            }
        }
        Ok(out)
    }

    /// Chains the encoded records (headers, hashes) and writes them with as
    /// few `pwrite`s as the segment boundaries allow. Records are
    /// position-independent, so a record that does not fit is written to the
    /// next segment unchanged.
    fn write_entries(
        &self,
        w: &mut Writer,
        buf: &mut [u8],
        records: &[Encoded],
        out: &mut Vec<(u64, EntryHash)>,
    ) -> Result<()> {
        // `buf[flushed..]` is not written yet; it goes to the active segment at `at`.
        let mut flushed = 0usize;
        let mut at = w.tip.end;
        for (k, r) in records.iter().enumerate() {
            let rec_end = records.get(k + 1).map_or(buf.len(), |n| n.start);
            let rec_len = (rec_end - r.start) as u64;
            let mut offset = at + (r.start - flushed) as u64;
            let fits =
                !w.active_sealed && w.segments.last().is_some_and(|s| s.fits(offset, rec_len));
            if !fits {
                self.flush(w, &buf[flushed..r.start], at)?;
                flushed = r.start;
                self.roll(w, rec_len)?;
                at = w.tip.end;
                offset = at;
            }
            let header = RecordHeader {
                prev_hash: w.tip.head,
                payload_len: r.payload_len as u32,
                kind: r.kind as u8,
                seq: w.tip.next_seq,
                ts: r.ts,
            };
            header.write(&mut buf[r.start..r.start + RECORD_HEADER_LEN]);
            let hash =
                format::seal_record(&mut buf[r.start..r.start + RECORD_HEADER_LEN + r.payload_len]);
            if w.last_indexed
                .is_none_or(|last| offset - last >= INDEX_STRIDE_BYTES)
            {
                let seg = w.segments.last().expect("a log always has a segment");
                seg.index.write().push(IndexEntry {
                    seq: header.seq,
                    offset,
                });
                w.last_indexed = Some(offset);
            }
            out.push((header.seq, hash));
            w.tip.head = hash;
            w.tip.next_seq += 1;
            if r.kind == EntryKind::SessionStart {
                w.tip.last_session_start = Some(header.seq);
                w.tip.session_start_offset = Some(offset);
            }
        }
        self.flush(w, &buf[flushed..], at)
    }

    /// Writes encoded records at `at` in the active segment and makes them
    /// readable through its map (not yet published to snapshots).
    fn flush(&self, w: &mut Writer, bytes: &[u8], at: u64) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let seg = w.segments.last().expect("a log always has a segment");
        seg.write_at(at, bytes)?;
        let end = at + bytes.len() as u64;
        seg.map.publish(end);
        w.tip.end = end;
        // Start writeback early, so that the seal's fdatasync at the next
        // roll (and a Sync commit) finds little left to write.
        if end - w.writeback_from >= WRITEBACK_CHUNK {
            seg.start_writeback(w.writeback_from, end);
            w.writeback_from = end;
        }
        Ok(())
    }

    fn maybe_prepare(&self, w: &mut Writer) {
        if !self.inner.opts.prepare_ahead || w.prepared.is_some() {
            return;
        }
        let Some(seg) = w.segments.last() else { return };
        if w.tip.end < seg.len() / 2 {
            return;
        }
        w.prep_counter += 1;
        let path = self
            .inner
            .dir
            .join(format!("next-{}-{}.prep", w.tip.next_seq, w.prep_counter));
        let len = self.inner.opts.next_segment_len(seg.len());
        let hook = self.inner.opts.hook.clone();
        let zero = self.inner.syncs.load(Ordering::Relaxed);
        w.prepared = Some(std::thread::spawn(move || {
            Prepared::create(path, len, zero, &hook)
        }));
    }

    /// Seals the active segment (if it has records) and starts the next one,
    /// large enough for a record of `rec_len` bytes.
    fn roll(&self, w: &mut Writer, rec_len: u64) -> Result<()> {
        let inner = &*self.inner;
        let hook = &inner.opts.hook;
        let active = w
            .segments
            .last()
            .expect("a log always has a segment")
            .clone();
        let empty = w.tip.next_seq == active.header.first_seq;
        // At most one roll is unsettled: the segment before the one being
        // sealed must be durable before this seal can be written.
        inner.settle.run()?;
        let mut sealed = None;
        if !w.active_sealed && !empty {
            let footer = active.seal(Footer {
                record_count: w.tip.next_seq - active.header.first_seq,
                first_seq: active.header.first_seq,
                last_hash: w.tip.head,
                last_session_start: w.tip.last_session_start,
                data_end: w.tip.end,
                index_offset: 0,
                index_count: 0,
                index_crc: 0,
            })?;
            *active.footer.lock() = Some(footer);
            sealed = Some(active.clone());
        }
        let needed = (SEGMENT_HEADER_LEN + FOOTER_LEN + 2 * INDEX_ENTRY_LEN) as u64 + rec_len;
        let len = inner
            .opts
            .next_segment_len(active.len())
            .max(needed.div_ceil(PAGE) * PAGE);
        let prepared = match w.prepared.take().map(|h| h.join()) {
            Some(Ok(Ok(p))) if p.len() >= len => Some(p),
            Some(Ok(Ok(p))) => {
                p.discard();
                None
            }
            // A failed preparation is retried in the foreground, where its
            // error reaches the caller.
            _ => None,
        };
        let prepared = match prepared {
            Some(p) => p,
            None => {
                w.prep_counter += 1;
                let path = inner
                    .dir
                    .join(format!("next-{}-{}.prep", w.tip.next_seq, w.prep_counter));
                Prepared::create(path, len, inner.syncs.load(Ordering::Relaxed), hook)?
            }
        };
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            log_id: inner.log_id,
            first_seq: w.tip.next_seq,
            segment_len: prepared.len(),
            start_hash: w.tip.head,
        };
        // An empty active segment has the same name; the rename replaces it.
        let seg = Arc::new(prepared.activate(&inner.dir, header, false, hook)?);
        // The seal's fdatasync and the directory's fsync happen off the lock.
        // (A last segment that was sealed when the log opened, the open synced.)
        *inner.settle.pending.lock() = Some(Unsettled {
            sealed,
            successor: seg.clone(),
        });
        if inner.opts.prepare_ahead {
            let settle = inner.settle.clone();
            // A failure poisons the log and the next append reports it. If
            // no thread can be had, whatever needs the settle does it.
            let _ = std::thread::Builder::new()
                .name("session-store-settle".into())
                .spawn(move || settle.run());
        }
        if !w.active_sealed && empty {
            w.segments.pop();
        }
        w.segments.push(seg);
        w.tip.end = SEGMENT_HEADER_LEN as u64;
        w.writeback_from = w.tip.end;
        w.last_indexed = None;
        w.tip.session_start_offset = None;
        w.active_sealed = false;
        Ok(())
    }

    /// Blocks until every record appended so far is durable (one shared
    /// `fdatasync` for concurrent callers).
    pub fn sync(&self) -> Result<()> {
        if self.inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let next = self.inner.published.lock().tip.next_seq;
        match next {
            0 => Ok(()),
            n => self.wait_durable(n - 1),
        }
    }

    fn wait_durable(&self, seq: u64) -> Result<()> {
        let inner = &*self.inner;
        inner.syncs.store(true, Ordering::Relaxed);
        let mut s = inner.sync.lock();
        loop {
            if inner.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned);
            }
            if s.durable_next > seq {
                return Ok(());
            }
            if s.in_progress {
                inner.synced.wait(&mut s);
                continue;
            }
            s.in_progress = true;
            drop(s);
            let result = self.sync_now();
            s = inner.sync.lock();
            s.in_progress = false;
            match result {
                Ok(upto) => {
                    s.durable_next = s.durable_next.max(upto);
                    inner.synced.notify_all();
                }
                Err(e) => {
                    inner.poisoned.store(true, Ordering::Release);
                    inner.synced.notify_all();
                    return Err(e);
                }
            }
        }
    }

    /// One group commit, outside the append lock: writes the durable mark of
    /// the previous commit, then `fdatasync`s the active segment.
    fn sync_now(&self) -> Result<u64> {
        let p = self.inner.published.lock().clone();
        // A record is durable only once the roll into its segment is:
        // recovery discards the successor of a segment that is torn. Settled
        // after the snapshot, so that a roll before it is covered (one after
        // it leaves this sync's segment sealed, which changes nothing here).
        self.inner.settle.run()?;
        let seg = p.segments.last().expect("a log always has a segment");
        let previous = *seg.mark.lock();
        let last_synced = *seg.synced.lock();
        if let Some(at) = last_synced {
            if previous.is_none_or(|m| m.durable_end != at.end) {
                seg.write_mark(at)?;
            }
        }
        seg.sync()?;
        *seg.synced.lock() = Some(p.tip.point());
        Ok(p.tip.next_seq)
    }

    /// Makes everything durable and records the durable point in the header,
    /// so the next open need not hash the active segment.
    pub fn close(self) -> Result<()> {
        if self.inner.writer.is_none() {
            return Ok(());
        }
        self.sync()?;
        // A roll with nothing synced after it: settle it, which also gives
        // the last segment a mark, so that the next open need not check the
        // segment before it.
        self.inner.settle.run()?;
        let p = self.inner.published.lock().clone();
        let seg = p.segments.last().expect("a log always has a segment");
        // The mark names only what an fdatasync covered: another clone may
        // have appended since `sync` returned.
        let synced = *seg.synced.lock();
        let marked = seg.mark.lock().map(|m| (m.durable_end, m.next_seq));
        if let (None, Some(at)) = (*seg.footer.lock(), synced) {
            if marked != Some((at.end, at.next_seq)) {
                seg.write_mark(at)?;
                seg.sync()?;
            }
        }
        // A failure anywhere in the background since.
        if self.inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// A consistent view of everything committed so far.
    pub fn snapshot(&self) -> Snapshot {
        let p = self.inner.published.lock().clone();
        snapshot_of(&p)
    }

    /// Seq and hash of the last record, if any.
    pub fn head(&self) -> Option<(u64, EntryHash)> {
        let p = self.inner.published.lock();
        (p.tip.next_seq > first_seq(&p)).then(|| (p.tip.next_seq - 1, p.tip.head))
    }

    /// Number of the next record.
    pub fn next_seq(&self) -> u64 {
        self.inner.published.lock().tip.next_seq
    }

    /// Blocks until the log holds a record with `seq`, or `timeout` passes.
    /// Returns whether it does.
    pub fn wait_for(&self, seq: u64, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut p = self.inner.published.lock();
        loop {
            if p.tip.next_seq > seq {
                return true;
            }
            if self.inner.writer.is_none() && timeout.is_none() {
                return false;
            }
            match deadline {
                None => self.inner.committed.wait(&mut p),
                Some(d) => {
                    if self.inner.committed.wait_until(&mut p, d).timed_out() {
                        return p.tip.next_seq > seq;
                    }
                }
            }
        }
    }

    /// Replays from the last `SessionStart` (found through the footers and the
    /// sparse index, never by scanning from seq 0) into a [`RestoredState`].
    pub fn restore(&self) -> Result<RestoredState> {
        self.snapshot().restore()
    }

    /// Checks every CRC, chain link and archive, and reports the first break.
    /// Never modifies files.
    pub fn verify(&self) -> VerifyReport {
        let mut report = self.snapshot().verify();
        report.torn_tail = self
            .inner
            .report
            .torn_tail
            .clone()
            .filter(|_| self.inner.writer.is_none());
        report
    }

    /// Every segment file, in order.
    pub fn segment_paths(&self) -> Vec<PathBuf> {
        self.inner
            .published
            .lock()
            .segments
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }

    /// Total bytes of record data committed.
    pub fn bytes(&self) -> u64 {
        self.snapshot().bytes()
    }
}

fn first_seq(p: &Published) -> u64 {
    p.segments.first().map_or(0, |s| s.header.first_seq)
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = &self.writer {
            if let Some(h) = w.lock().prepared.take() {
                if let Ok(Ok(p)) = h.join() {
                    p.discard();
                }
            }
        }
    }
}

/// Whether a segment with header `h` may follow a segment that ended with
/// `expect` (next seq, last hash), `None` meaning it is the first: it must name
/// the log's id, and continue the seq and the chain (a log starts at seq 0 and
/// never drops its head, so a later first seq means deleted segments).
fn continues(
    h: &SegmentHeader,
    log_id: &[u8; 16],
    expect: Option<(u64, EntryHash)>,
) -> Result<(), CorruptKind> {
    if h.log_id != *log_id {
        return Err(CorruptKind::ForeignLog);
    }
    let (seq, hash) = match expect {
        None if h.first_seq != 0 => return Err(CorruptKind::MissingSegment),
        None => (0, EntryHash::genesis()),
        Some(e) => e,
    };
    if h.first_seq != seq {
        return Err(CorruptKind::SeqGap {
            expected: seq,
            found: h.first_seq,
        });
    }
    if h.start_hash != hash {
        return Err(CorruptKind::ChainLink {
            expected: hash,
            actual: h.start_hash,
        });
    }
    Ok(())
}

fn create_first_segment(dir: &Path, opts: &LogOptions, hook: &Hook) -> Result<Opened> {
    let log_id = *uuid::Uuid::now_v7().as_bytes();
    let zero = opts.durability == Durability::Sync;
    let prep = Prepared::create(dir.join("first.prep"), opts.next_segment_len(0), zero, hook)?;
    let header = SegmentHeader {
        version: FORMAT_VERSION,
        log_id,
        first_seq: 0,
        segment_len: prep.len(),
        start_hash: EntryHash::genesis(),
    };
    let seg = prep.activate(dir, header, true, hook)?;
    Ok(Opened {
        segments: vec![Arc::new(seg)],
        tip: Tip {
            end: SEGMENT_HEADER_LEN as u64,
            next_seq: 0,
            head: EntryHash::genesis(),
            last_session_start: None,
            session_start_offset: None,
        },
        active_sealed: false,
        report: RecoveryReport::default(),
        log_id: Some(log_id),
    })
}

/// Whether the roll into the last segment may not have settled, and if so,
/// whether the segment it sealed is intact.
enum LastRoll {
    /// The last segment has a mark or a seal, written only after the roll
    /// into it settled; or it is the only segment.
    Settled,
    /// Unsettled, but the segment before it holds its records and its seal.
    Holds(Box<Segment>),
    /// Unsettled, and the segment before it is torn (a power failure before
    /// its `fdatasync`): no record after the tear was ever durable, the last
    /// segment's included.
    Torn,
}

fn last_roll(paths: &[(u64, PathBuf)], hook: &Hook) -> Result<LastRoll> {
    let [.., (_, prev), (_, last)] = paths else {
        return Ok(LastRoll::Settled);
    };
    // A segment that does not open is damage that `open_segments` reports
    // (and Salvage cuts), as it did before rolls settled late.
    let Ok(last) = Segment::open(last, false, hook) else {
        return Ok(LastRoll::Settled);
    };
    if last.read_mark().is_some() || matches!(last.read_footer(false), Ok(Some(_))) {
        return Ok(LastRoll::Settled);
    }
    let Ok(prev) = Segment::open(prev, false, hook) else {
        return Ok(LastRoll::Settled);
    };
    let f = match prev.read_footer(true) {
        Ok(Some(f)) => f,
        Ok(None) | Err(Error::Corrupt { .. }) => return Ok(LastRoll::Torn),
        Err(e) => return Err(e),
    };
    let h = prev.header;
    // Below its own mark, the segment was synced before it was sealed.
    let mark = prev
        .read_mark()
        .filter(|m| m.next_seq >= h.first_seq && m.durable_end <= f.data_end);
    let scan = prev.scan(
        SEGMENT_HEADER_LEN as u64,
        f.data_end,
        h.first_seq,
        h.start_hash,
        ScanMode {
            trusted: mark,
            check_archives: false,
            crc_below_mark: false,
            checkpoint: None,
        },
    );
    Ok(if scan.agrees_with(&f) {
        LastRoll::Holds(Box::new(prev))
    } else {
        LastRoll::Torn
    })
}

/// The full check of a freshly opened log, for salvage mode.
fn verify_opened(o: &Opened) -> Option<Damage> {
    // A mark that disagrees with the records is no reason to cut any: the
    // writer's open has just rewritten it from its own scan.
    snapshot_of(&o.publish())
        .verify()
        .damage
        .filter(|d| !matches!(d.kind, CorruptKind::Mark(_)))
}

/// Cuts the log at `damage`: later segments are removed, and the damaged one
/// is zeroed from the bad record on (removed whole if its header is bad).
fn cut_at(
    dir: &Path,
    paths: &[(u64, PathBuf)],
    damage: &Damage,
    hook: &Hook,
) -> Result<Vec<PathBuf>> {
    let Some(k) = paths.iter().position(|(_, p)| *p == damage.segment) else {
        return Err(Error::Corrupt {
            segment: damage.segment.clone(),
            offset: damage.offset,
            seq: damage.seq,
            kind: damage.kind.clone(),
        });
    };
    let mut removed = Vec::new();
    let mut remove = |p: &Path| -> Result<()> {
        run_hook(hook, IoOp::Remove { path: p }).map_err(io_err("remove", p))?;
        fs::remove_file(p).map_err(io_err("remove", p))?;
        removed.push(p.to_path_buf());
        Ok(())
    };
    for (_, p) in paths[k + 1..].iter().rev() {
        remove(p)?;
    }
    let path = &paths[k].1;
    match Segment::open(path, true, hook) {
        Ok(seg) if damage.offset >= SEGMENT_HEADER_LEN as u64 => {
            seg.zero_range(damage.offset.min(seg.len()), seg.len())?;
            seg.sync()?;
        }
        _ => remove(path)?,
    }
    sync_dir(dir, hook)?;
    Ok(removed)
}

fn open_segments(
    paths: &[(u64, PathBuf)],
    writable: bool,
    mode: RecoveryMode,
    hook: &Hook,
) -> Result<Opened> {
    let mut segments: Vec<Arc<Segment>> = Vec::new();
    let mut report = RecoveryReport::default();
    let mut log_id = None;
    let mut expect: Option<(u64, EntryHash)> = None;
    let mut last_session_start = None;
    for (i, (name_seq, path)) in paths.iter().enumerate() {
        let is_last = i + 1 == paths.len();
        let seg = Segment::open(path, writable, hook)?;
        let h = seg.header;
        if h.first_seq != *name_seq {
            return Err(seg.corrupt(
                0,
                None,
                CorruptKind::Footer(format!(
                    "file name says seq {name_seq}, header says {}",
                    h.first_seq
                )),
            ));
        }
        let first_id = *log_id.get_or_insert(h.log_id);
        continues(&h, &first_id, expect).map_err(|kind| seg.corrupt(0, None, kind))?;
        // The last segment's footer may be a seal that never became durable
        // (its successor was not created yet), so it is only believed once
        // the records agree with it.
        // A reader defers the indexes of sealed segments to their first use.
        let footer = match seg.read_footer(writable || is_last) {
            Ok(f) => f,
            Err(_) if is_last => None,
            Err(e) => return Err(e),
        };
        if !is_last {
            let Some(f) = footer else {
                return Err(seg.corrupt(
                    seg.len() - FOOTER_LEN as u64,
                    None,
                    CorruptKind::Footer("segment before the last is not sealed".into()),
                ));
            };
            *seg.footer.lock() = Some(f);
            seg.map.publish(f.data_end);
            expect = Some((f.first_seq + f.record_count, f.last_hash));
            if f.last_session_start.is_some() {
                last_session_start = f.last_session_start;
            }
            report.records += f.record_count;
            segments.push(Arc::new(seg));
            continue;
        }
        // The last segment: scan its records. A read-only open starts at a
        // version 2 mark, which says where the last SessionStart below it is;
        // a writer scans them all, since it must tell damage below the mark
        // from a torn tail.
        let mark = seg.read_mark();
        let limit = footer.map_or(seg.len() - FOOTER_LEN as u64, |f| f.data_end);
        let skip = mark
            .filter(|_| !writable)
            .and_then(|m| mark_to_start_at(&seg, m, limit));
        let scan: Scan = match skip {
            Some((m, session_start)) => {
                let mut tail = seg.scan(
                    m.durable_end,
                    limit,
                    m.next_seq,
                    m.durable_hash,
                    ScanMode {
                        trusted: None,
                        check_archives: false,
                        crc_below_mark: false,
                        checkpoint: None,
                    },
                );
                tail.count += m.next_seq - h.first_seq;
                if let Some((seq, offset)) = session_start {
                    tail.index.insert(0, IndexEntry { seq, offset });
                    tail.last_session_start = tail.last_session_start.or(session_start);
                }
                tail
            }
            None => seg.scan(
                SEGMENT_HEADER_LEN as u64,
                limit,
                h.first_seq,
                h.start_hash,
                ScanMode {
                    trusted: mark.filter(|m| m.next_seq >= h.first_seq),
                    check_archives: false,
                    crc_below_mark: writable,
                    checkpoint: None,
                },
            ),
        };
        let session_start_offset = scan.last_session_start.map(|(_, offset)| offset);
        let sealed = footer.filter(|f| scan.agrees_with(f));
        if let Some((seq, _)) = scan.last_session_start {
            last_session_start = Some(seq);
        }
        report.records += scan.count;
        if let Some(f) = sealed {
            // The footer, which verify checks, rather than the mark.
            last_session_start = f.last_session_start;
            if writable {
                // The seal may be in the page cache only (a process killed
                // mid-roll): make it durable before a successor can exist.
                seg.sync()?;
            }
            *seg.footer.lock() = Some(f);
            segments.push(Arc::new(seg));
            report.segments = segments.len();
            return Ok(Opened {
                segments,
                tip: Tip {
                    end: f.data_end,
                    next_seq: scan.next_seq,
                    head: scan.last_hash,
                    last_session_start,
                    session_start_offset,
                },
                active_sealed: true,
                report,
                log_id,
            });
        }
        let durable_end = mark.map_or(SEGMENT_HEADER_LEN as u64, |m| m.durable_end);
        // Records that end (zeros) before the mark were synced and are gone:
        // that is damage too, not a clean end.
        let stop = scan.stop.clone().or_else(|| {
            (scan.end < durable_end).then_some((
                scan.end,
                Some(scan.next_seq),
                CorruptKind::Truncated,
            ))
        });
        if let Some((offset, seq, kind)) = &stop {
            let salvaged = *offset < durable_end;
            if salvaged && mode == RecoveryMode::Strict {
                return Err(seg.corrupt(*offset, *seq, kind.clone()));
            }
            report.torn_tail = Some(TornTail {
                segment: seg.path.clone(),
                offset: *offset,
                seq: *seq,
                reason: kind.to_string(),
                salvaged,
            });
        }
        let tip = Tip {
            end: scan.end,
            next_seq: scan.next_seq,
            head: scan.last_hash,
            last_session_start,
            session_start_offset,
        };
        if writable {
            // Everything after the last good record goes, footer included, so
            // that stale bytes can never validate later.
            let dirty = seg.zero_range(scan.end, seg.len())?;
            if dirty {
                if report.torn_tail.is_none() {
                    report.torn_tail = Some(TornTail {
                        segment: seg.path.clone(),
                        offset: scan.end,
                        seq: None,
                        reason: "stale bytes after the last record".into(),
                        salvaged: false,
                    });
                }
                seg.sync()?;
            }
            let point = tip.point();
            let exact = mark.is_some_and(|m| {
                m.durable_end == point.end
                    && m.next_seq == point.next_seq
                    && (h.version == 1 || m.session_start == point.session_start)
            });
            if (scan.end > SEGMENT_HEADER_LEN as u64 || mark.is_some()) && !exact {
                // Everything kept is now durable: record it so later damage is
                // caught (and so a mark beyond a salvage cut stops counting).
                seg.sync()?;
                seg.write_mark(point)?;
                seg.sync()?;
            }
        }
        *seg.index.write() = scan.index.clone();
        segments.push(Arc::new(seg));
        report.segments = segments.len();
        return Ok(Opened {
            segments,
            tip,
            active_sealed: false,
            report,
            log_id,
        });
    }
    unreachable!("open_segments is called with at least one path")
}

/// Whether a read-only open may start its scan of the last segment at mark
/// `m` rather than at the first record, and if so, the seq and offset of the
/// last `SessionStart` the mark names. Only a version 2 mark qualifies, and
/// only one consistent with the segment: its end inside the record area, on
/// a record boundary, with a seq no lower than the segment's first, and its
/// `SessionStart` pointer (if any) naming a whole `SessionStart` record
/// below the end. Anything else falls back to the full scan, which decides.
///
/// The records skipped are neither CRC-checked nor chained here: the
/// iterator checks the CRC of every record it yields, and `verify` checks
/// everything, exactly as for the records below a mark of a full scan.
/// The smallest record: a header and one payload byte, padded.
const MIN_RECORD_LEN: u64 = (RECORD_HEADER_LEN + RECORD_ALIGN) as u64;

/// The highest offset a version 2 mark's `session_start` field can name.
const MARK_SESSION_START_LIMIT: u64 = u32::MAX as u64 * RECORD_ALIGN as u64;

fn mark_to_start_at(seg: &Segment, m: Mark, limit: u64) -> Option<(Mark, Option<(u64, u64)>)> {
    let h = seg.header;
    let header_end = SEGMENT_HEADER_LEN as u64;
    // No more records than fit below the end; and an end whose every
    // SessionStart offset the mark's field can hold (else "none" is unsure).
    let most_records = (m.durable_end.saturating_sub(header_end)) / MIN_RECORD_LEN;
    let consistent = h.version >= 2
        && (header_end..=limit).contains(&m.durable_end)
        && m.durable_end <= MARK_SESSION_START_LIMIT
        && m.durable_end.is_multiple_of(RECORD_ALIGN as u64)
        && m.next_seq >= h.first_seq
        && m.next_seq - h.first_seq <= most_records
        && (m.durable_end == header_end) == (m.next_seq == h.first_seq)
        && (m.next_seq > h.first_seq || m.durable_hash == h.start_hash);
    if !consistent {
        return None;
    }
    let Some(offset) = m.session_start else {
        return Some((m, None));
    };
    if offset < header_end || offset + RECORD_HEADER_LEN as u64 > m.durable_end {
        return None;
    }
    let rec = seg
        .map
        .with_view(offset as usize, m.durable_end as usize, |b| {
            RecordHeader::read(b).ok()
        })?;
    let whole = offset + rec.record_len() as u64 <= m.durable_end;
    let named =
        rec.kind == EntryKind::SessionStart as u8 && (h.first_seq..m.next_seq).contains(&rec.seq);
    (whole && named).then_some((m, Some((rec.seq, offset))))
}

impl Tip {
    /// The end of the active segment, as a mark would record it.
    fn point(&self) -> Point {
        Point {
            end: self.end,
            next_seq: self.next_seq,
            hash: self.head,
            session_start: self.session_start_offset,
        }
    }
}

fn snapshot_of(p: &Published) -> Snapshot {
    let n = p.segments.len();
    let segs = p
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let end = if i + 1 == n {
                p.tip.end
            } else {
                s.footer.lock().map_or(p.tip.end, |f| f.data_end)
            };
            (s.clone(), end)
        })
        .collect();
    Snapshot {
        segs,
        next_seq: p.tip.next_seq,
        head: p.tip.head,
        last_session_start: p.tip.last_session_start,
    }
}

/// A consistent, immutable view of a committed prefix of the log.
pub struct Snapshot {
    segs: Vec<(Arc<Segment>, u64)>,
    next_seq: u64,
    head: EntryHash,
    last_session_start: Option<u64>,
}

/// One record, borrowed from the map: validated (CRC, then rkyv bytecheck), never copied.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// Sequence number.
    pub seq: u64,
    /// Timestamp, ms.
    pub ts: u64,
    /// Entry kind.
    pub kind: EntryKind,
    /// This record's chain hash.
    pub hash: EntryHash,
    /// The previous record's hash.
    pub prev_hash: EntryHash,
    /// The archived entry.
    pub entry: &'a ArchivedLogEntry,
    /// Payload length in bytes.
    pub payload_len: u32,
}

impl Snapshot {
    /// Seq of the first record in the log.
    pub fn first_seq(&self) -> u64 {
        self.segs.first().map_or(0, |(s, _)| s.header.first_seq)
    }

    /// Seq of the next record to be written.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Seq and hash of the last record.
    pub fn head(&self) -> Option<(u64, EntryHash)> {
        (self.next_seq > self.first_seq()).then(|| (self.next_seq - 1, self.head))
    }

    /// Seq of the last `SessionStart`.
    pub fn last_session_start(&self) -> Option<u64> {
        self.last_session_start
    }

    /// Bytes of record data in the snapshot.
    pub fn bytes(&self) -> u64 {
        self.segs
            .iter()
            .map(|(_, end)| end - SEGMENT_HEADER_LEN as u64)
            .sum()
    }

    /// Records, in order, from the first.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(self.first_seq())
    }

    /// Records from `seq` on, found through the sparse index.
    pub fn iter_from(&self, seq: u64) -> Iter<'_> {
        let seq = seq.max(self.first_seq());
        let seg = self
            .segs
            .partition_point(|(s, _)| s.header.first_seq <= seq)
            .saturating_sub(1);
        let mut error = None;
        let (offset, at_seq) = match self.segs.get(seg) {
            Some((s, _)) => {
                if let Err(e) = s.ensure_index() {
                    error = Some(e);
                }
                let index = s.index.read();
                let i = index.partition_point(|e| e.seq <= seq);
                match i.checked_sub(1).map(|i| index[i]) {
                    Some(e) => (e.offset, e.seq),
                    None => (SEGMENT_HEADER_LEN as u64, s.header.first_seq),
                }
            }
            None => (SEGMENT_HEADER_LEN as u64, seq),
        };
        Iter {
            snap: self,
            seg,
            offset,
            seq: at_seq,
            skip_to: seq,
            done: seq >= self.next_seq,
            error,
        }
    }

    /// Replays from the last `SessionStart` into a [`RestoredState`].
    pub fn restore(&self) -> Result<RestoredState> {
        let mut state = RestoredState::default();
        let from = self.last_session_start.unwrap_or(self.first_seq());
        for rec in self.iter_from(from) {
            let rec = rec?;
            state.apply_archived(rec.entry);
            state.head = Some(rec.hash);
            state.head_seq = Some(rec.seq);
        }
        state.entries = self.next_seq - self.first_seq();
        Ok(state)
    }

    /// Owned entries from `seq` on.
    pub fn entries_from(
        &self,
        seq: u64,
    ) -> impl Iterator<Item = Result<(u64, EntryHash, LogEntry)>> + '_ {
        self.iter_from(seq)
            .map(|r| r.map(|v| (v.seq, v.hash, v.entry.to_entry())))
    }

    /// Scans every segment's records (CRC, chain, archive), each from its own
    /// header's seq and start hash, on up to as many threads as the machine
    /// has cores: a segment's links do not depend on the segments before it
    /// once its header is known, and `verify` then checks, in order, that
    /// each header continues the scan before it. The last segment's scan
    /// records its state at `last_checkpoint` (a mark's end).
    fn scan_segments(&self, last_checkpoint: Option<u64>) -> Vec<Scan> {
        let n = self.segs.len();
        let scan = |i: usize| {
            let (seg, end) = &self.segs[i];
            seg.scan(
                SEGMENT_HEADER_LEN as u64,
                *end,
                seg.header.first_seq,
                seg.header.start_hash,
                ScanMode {
                    trusted: None,
                    check_archives: true,
                    crc_below_mark: true,
                    checkpoint: last_checkpoint.filter(|_| i + 1 == n),
                },
            )
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(n);
        // Threads cost more than they save on a small log.
        if threads <= 1 || self.bytes() < PARALLEL_VERIFY_BYTES {
            return (0..n).map(scan).collect();
        }
        // Largest (latest) segments first, so that no thread is left with a
        // big one at the end.
        let next = AtomicUsize::new(0);
        let done: Vec<Mutex<Option<Scan>>> = (0..n).map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(i) = n.checked_sub(k + 1) else { break };
                    *done[i].lock() = Some(scan(i));
                });
            }
        });
        done.into_iter()
            .map(|m| m.into_inner().expect("every segment is scanned"))
            .collect()
    }

    /// Full check of the snapshot: headers, CRCs, chain, archives, footers,
    /// and the active segment's durable mark. Segments are scanned in
    /// parallel; damage is reported at the first place in log order.
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport {
            segments: self.segs.len(),
            ..VerifyReport::default()
        };
        // The active segment's mark, which a reader may have believed; one
        // beyond the snapshot (a writer moved on) is not checked.
        let mark = self
            .segs
            .last()
            .and_then(|(seg, end)| seg.read_mark().filter(|m| m.durable_end <= *end));
        let scans = self.scan_segments(mark.map(|m| m.durable_end));
        let mut expect: Option<(u64, EntryHash)> = None;
        let mut last_session_start = None;
        let last = self.segs.len().saturating_sub(1);
        for (i, ((seg, end), scan)) in self.segs.iter().zip(scans).enumerate() {
            let damage = |offset, seq, kind| Damage {
                segment: seg.path.clone(),
                offset,
                seq,
                kind,
            };
            let h = seg.header;
            if let Err(kind) = continues(&h, &self.segs[0].0.header.log_id, expect) {
                report.damage = Some(damage(0, None, kind));
                return report;
            }
            if let Err(e) = seg.ensure_index() {
                report.damage = Some(match e {
                    Error::Corrupt {
                        offset, seq, kind, ..
                    } => damage(offset, seq, kind),
                    other => damage(
                        seg.len() - FOOTER_LEN as u64,
                        None,
                        CorruptKind::Footer(format!("index unreadable: {other}")),
                    ),
                });
                return report;
            }
            // The scan started from this header, which continues `expect`.
            report.records += scan.count;
            report.bytes += scan.end - SEGMENT_HEADER_LEN as u64;
            if scan.count > 0 {
                report.head = Some((scan.next_seq - 1, scan.last_hash));
            }
            if let Some((offset, seq, kind)) = scan.stop {
                report.damage = Some(damage(offset, seq, kind));
                return report;
            }
            if scan.end != *end {
                report.damage = Some(damage(
                    scan.end,
                    Some(scan.next_seq),
                    CorruptKind::Truncated,
                ));
                return report;
            }
            if let Some((seq, _)) = scan.last_session_start {
                last_session_start = Some(seq);
            }
            // A segment sealed after this snapshot was taken is checked only up to
            // the snapshot's end; its footer describes more.
            let footer = *seg.footer.lock();
            if let Some(f) = footer.filter(|f| f.data_end == *end) {
                let why = if f.record_count != scan.count || f.last_hash != scan.last_hash {
                    Some("count or last hash disagrees with the records")
                } else if f.last_session_start != last_session_start {
                    Some("last SessionStart disagrees with the records")
                } else {
                    None
                };
                if let Some(why) = why {
                    let at = seg.len() - FOOTER_LEN as u64;
                    report.damage = Some(damage(at, None, CorruptKind::Footer(why.into())));
                    return report;
                }
            } else if let Some((at, why)) = mark
                .filter(|_| i == last)
                .and_then(|m| mark_disagrees(&m, &h, &scan))
            {
                report.damage = Some(damage(at, None, CorruptKind::Mark(why)));
                return report;
            }
            expect = Some((scan.next_seq, scan.last_hash));
        }
        report
    }
}

/// Whether the durable mark `m` of the unsealed segment with header `h`
/// disagrees with its records, which `scan` verified with a checkpoint at the
/// mark's end: where and why if so. A read-only open believes a version 2
/// mark's end, seq, hash and `SessionStart` without reading the records below
/// it, so each must be what the records say at that point.
fn mark_disagrees(m: &Mark, h: &SegmentHeader, scan: &Scan) -> Option<(u64, String)> {
    let why = match scan.checkpoint {
        None => format!("its end {} is not a record boundary", m.durable_end),
        Some(at) if at.next_seq != m.next_seq => format!(
            "names seq {} at its end, the records {}",
            m.next_seq, at.next_seq
        ),
        Some(at) if at.hash != m.durable_hash => {
            "its hash is not the hash of the record below its end".to_string()
        }
        Some(at) if h.version >= 2 && at.session_start != m.session_start => format!(
            "names the last SessionStart at {:?}, the records at {:?}",
            m.session_start, at.session_start
        ),
        Some(_) => return None,
    };
    Some((Mark::slot_offset(m.generation) as u64, why))
}

/// Iterator over a [`Snapshot`]'s records.
pub struct Iter<'a> {
    snap: &'a Snapshot,
    seg: usize,
    offset: u64,
    seq: u64,
    skip_to: u64,
    done: bool,
    /// An error found while seeking, yielded first.
    error: Option<Error>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        loop {
            if self.done {
                return None;
            }
            let (seg, end) = self.snap.segs.get(self.seg)?;
            if self.offset >= *end {
                self.seg += 1;
                self.offset = SEGMENT_HEADER_LEN as u64;
                continue;
            }
            match self.read(seg, *end) {
                Ok(Some(view)) => return Some(Ok(view)),
                Ok(None) => continue,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl<'a> Iter<'a> {
    fn read(&mut self, seg: &'a Arc<Segment>, end: u64) -> Result<Option<RecordView<'a>>> {
        let bytes = seg.map.committed_slice(self.offset as usize, end as usize);
        let corrupt = |kind| seg.corrupt(self.offset, Some(self.seq), kind);
        let h = RecordHeader::read(bytes).map_err(corrupt)?;
        let len = h.record_len();
        if len > bytes.len() {
            return Err(corrupt(CorruptKind::Truncated));
        }
        if h.seq != self.seq {
            return Err(corrupt(CorruptKind::SeqGap {
                expected: self.seq,
                found: h.seq,
            }));
        }
        if h.seq < self.skip_to {
            self.offset += len as u64;
            self.seq += 1;
            return Ok(None);
        }
        let body = &bytes[..RECORD_HEADER_LEN + h.payload_len as usize];
        format::check_record_crc(body).map_err(corrupt)?;
        let entry = LogEntry::access_archive(&body[RECORD_HEADER_LEN..])
            .map_err(|e| corrupt(CorruptKind::InvalidArchive(e)))?;
        let kind = EntryKind::from_code(h.kind).ok_or_else(|| {
            corrupt(CorruptKind::InvalidArchive(format!(
                "unknown kind {}",
                h.kind
            )))
        })?;
        let hash = if len < bytes.len() {
            format::prev_hash_of(&bytes[len..]).ok_or_else(|| corrupt(CorruptKind::Truncated))?
        } else if let Some((next, _)) = self.snap.segs.get(self.seg + 1) {
            next.header.start_hash
        } else {
            self.snap.head
        };
        let view = RecordView {
            seq: h.seq,
            ts: h.ts,
            kind,
            hash,
            prev_hash: h.prev_hash,
            entry,
            payload_len: h.payload_len,
        };
        self.offset += len as u64;
        self.seq += 1;
        if self.seq >= self.snap.next_seq {
            self.done = true;
        }
        Ok(Some(view))
    }
}
