//! The log: a directory of rolling segments with one writer (across
//! processes), group commit, recovery on open, and any number of readers.
//!
//! A [`Store`](crate::Store) keeps one log per session; a log can also be
//! used alone, with entries of one's own making.
//!
//! # Example
//!
//! ```
//! use session_store::schema::{group_delta, now_ms, LogEntry};
//! use session_store::{Item, Log, LogOptions, RequestConfig};
//! # fn main() -> session_store::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default())?;
//! let (ts, config) = (now_ms(), RequestConfig::model("gpt-5"));
//! log.append(&LogEntry::SessionStart { ts, system_prompt: None, config, history: vec![], forked_from: None, compacted_from: None })?;
//! for entry in group_delta(&[Item::user_text("Lint the repo."), Item::assistant_text("No warnings.")], ts) {
//!     log.append(&entry)?;
//! }
//! log.sync()?; // durable from here on
//! assert_eq!(log.restore()?.history.len(), 2);
//! log.close()?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::chain::EntryHash;
use crate::format::Point;
use crate::fs::BaseDir;
use crate::segment::Segment;

mod commit;
pub(crate) mod evicted;
mod fetched;
pub(crate) mod journal;
mod lock;
mod opening;
mod reader;
mod recovery;
mod replay;
mod verify;
mod writer;
#[cfg(feature = "whitebox")]
pub use writer::seal_delta;

pub use crate::fs::{IoHook, IoOp};
pub use evicted::{EvictedRecord, EvictedSegment, EVICTED_FILE};
#[cfg(feature = "archive")]
pub(crate) use opening::continues;
#[cfg(feature = "archive")]
pub(crate) use reader::Archivable;
pub use reader::{Iter, RecordView, Snapshot};
pub use verify::{Damage, VerifyReport};
pub(crate) use writer::entry_hash;

use crate::payload::PayloadArea;
use commit::{Settle, SyncState};
use reader::snapshot_of;
use writer::Writer;

/// The default (largest) segment size: 64 MiB.
///
/// Example: [`Log::open`].
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// The default size of a log's first segment: 256 KiB.
///
/// Example: [`Log::open`].
pub const DEFAULT_INITIAL_SEGMENT_SIZE: u64 = 256 << 10;
/// The one-writer lock file in a log directory.
pub(crate) const LOCK_FILE: &str = "LOCK";
/// Writeback of appended bytes is started every this many bytes.
const WRITEBACK_CHUNK: u64 = 4 << 20;
const PAGE: u64 = 4096;

/// When an append counts as done.
///
/// Example: [`Log::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Written to the page cache; survives a process crash, not a power loss,
    /// until the next [`Log::sync`] or `Sync` append.
    #[default]
    Buffered,
    /// `fdatasync`ed before `append` returns, shared among concurrent appenders
    /// (group commit).
    Sync,
}

/// What [`Log::append_batch`] requires of the log's head before it writes.
///
/// Example: [`Log::append_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpectHead {
    /// Append whatever the head is.
    #[default]
    Any,
    /// Append only to an empty log.
    Empty,
    /// Append only if the last record has this hash.
    Hash(EntryHash),
}

impl ExpectHead {
    /// The head this expectation names (`None`: empty), or `None` for `Any`.
    fn wanted(self) -> Option<Option<EntryHash>> {
        match self {
            ExpectHead::Any => None,
            ExpectHead::Empty => Some(None),
            ExpectHead::Hash(h) => Some(Some(h)),
        }
    }
}

/// What open does with damage at or before the durable point.
///
/// ```
/// use session_store::{CorruptKind, Error, Log, LogOptions, RecoveryMode};
/// # use session_store::{schema::{group_delta, now_ms}, Item};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let log = Log::open(dir.path(), LogOptions::default())?;
/// # for entry in group_delta(&[Item::user_text("Deploy?"), Item::assistant_text("Deploying.")], now_ms()) {
/// #     log.append(&entry)?;
/// # }
/// # let segment = log.segment_paths()[0].clone();
/// # log.close()?;
/// # let mut bytes = std::fs::read(&segment).unwrap();
/// # let at = bytes.windows(10).position(|w| w == b"Deploying.").unwrap();
/// # bytes[at] ^= 0x40;
/// # std::fs::write(&segment, bytes).unwrap();
/// // A log of a question (seq 0) and its answer (seq 1), and a bit of the
/// // answer flipped on disk. `Strict` refuses the log:
/// let refused = Log::open(dir.path(), LogOptions::default()).unwrap_err();
/// assert!(matches!(refused, Error::Corrupt { seq: Some(1), kind: CorruptKind::Crc { .. }, .. }));
///
/// // `Salvage` keeps the records before the damage, and says what it cut.
/// let log = Log::open(dir.path(), LogOptions::default().recovery(RecoveryMode::Salvage))?;
/// assert_eq!(log.next_seq(), 1);
/// assert!(log.recovery_report().torn_tail.as_ref().is_some_and(|t| t.salvaged));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse with [`Error::Corrupt`](crate::Error::Corrupt).
    #[default]
    Strict,
    /// Cut the log at the first bad record and report it.
    Salvage,
}

/// How to open a log.
///
/// Example: [`Log::open`].
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
    /// Bring the active segment's next pages into the page cache in the
    /// background (one thread for the process), so that an append's `pwrite`
    /// finds them and only copies: about half of a 9 KB save's time on this
    /// project's machine (see `segment::ahead`). Only for a segment that
    /// holds at least 32 KiB, at most 256 KiB ahead of its end.
    pub populate_ahead: bool,
    /// The fault seam, for tests.
    pub hook: Option<Arc<dyn IoHook>>,
    /// Told of every segment the writer seals (at a roll), on the appending
    /// thread with the writer lock held: it must only queue work (continuous
    /// archival does, see `Archive`).
    pub on_seal: Option<SealObserver>,
}

/// What [`LogOptions::on_seal`] is called with.
///
/// Example: [`LogOptions::on_seal`].
pub type SealObserver = Arc<dyn Fn(&SealedSegment) + Send + Sync>;

/// A sealed segment: immutable from its seal on.
///
/// Example: [`LogOptions::on_seal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSegment {
    /// The segment file.
    pub path: PathBuf,
    /// Seq of its first record.
    pub first_seq: u64,
    /// Seq of its last record.
    pub last_seq: u64,
    /// The hash its first record chains from.
    pub start_hash: EntryHash,
    /// Hash of its last record.
    pub last_hash: EntryHash,
    /// File length.
    pub len_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size: DEFAULT_SEGMENT_SIZE,
            initial_segment_size: DEFAULT_INITIAL_SEGMENT_SIZE,
            durability: Durability::Buffered,
            recovery: RecoveryMode::Strict,
            prepare_ahead: true,
            populate_ahead: true,
            hook: None,
            on_seal: None,
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
            .field("populate_ahead", &self.populate_ahead)
            .field("hook", &self.hook.is_some())
            .field("on_seal", &self.on_seal.is_some())
            .finish()
    }
}

impl LogOptions {
    /// Sets the segment size.
    ///
    /// Example: [`Log::open`].
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Sets the default durability.
    ///
    /// Example: [`Log::open`].
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets the recovery mode.
    ///
    /// Example: [`Log::open`].
    pub fn recovery(mut self, m: RecoveryMode) -> Self {
        self.recovery = m;
        self
    }

    /// Installs an I/O hook (the test seam).
    ///
    /// Example: [`Log::open`].
    pub fn hook(mut self, hook: Arc<dyn IoHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Installs an observer of seals ([`LogOptions::on_seal`]).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use session_store::schema::{group_delta, now_ms};
    /// use session_store::{Item, Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sealed = Arc::new(Mutex::new(Vec::new()));
    /// let seen = sealed.clone();
    /// let opts = LogOptions::default().segment_size(8192).initial_segment_size(8192);
    /// let opts = opts.on_seal(Arc::new(move |s| seen.lock().unwrap().push(s.path.clone())));
    /// let log = Log::open(dir.path(), opts)?;
    /// for entry in group_delta(&vec![Item::user_text("x".repeat(1000)); 20], now_ms()) {
    ///     log.append(&entry)?; // 20 KB of pasted text: more than one segment
    /// }
    /// assert!(!sealed.lock().unwrap().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn on_seal(mut self, observer: SealObserver) -> Self {
        self.on_seal = Some(observer);
        self
    }

    /// Sets the size of a log's first segment.
    ///
    /// Example: [`Log::open`].
    pub fn initial_segment_size(mut self, bytes: u64) -> Self {
        self.initial_segment_size = bytes;
        self
    }

    fn max_segment_len(&self) -> u64 {
        self.segment_size.max(2 * PAGE).div_ceil(PAGE) * PAGE
    }

    /// Length of the segment after one of `current` bytes (0: the first):
    /// double the one before, from the initial size up to the largest, so
    /// that a log's files are at most about twice what they hold. This holds
    /// for sparse segments too: they cost no disk beyond what they hold, but
    /// their size is what `ls -l`, `du --apparent-size` and copy tools that
    /// do not keep holes see.
    fn next_segment_len(&self, current: u64) -> u64 {
        let max = self.max_segment_len();
        let initial = (self.initial_segment_size.max(2 * PAGE).div_ceil(PAGE) * PAGE).min(max);
        current.saturating_mul(2).clamp(initial, max)
    }
}

/// Bytes that were cut off (writer) or would be (reader) after the last good record.
///
/// Example: [`RecoveryMode`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
///
/// Example: [`RecoveryMode`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

impl RecoveryReport {
    /// Whether recovery changed the log: cut a tail or removed a segment
    /// (leftover preparations of a segment are routine and do not count).
    ///
    /// Example: [`Store::session`](crate::Store::session).
    pub fn changed_the_log(&self) -> bool {
        self.torn_tail.is_some()
            || self
                .removed
                .iter()
                .any(|p| p.extension().is_none_or(|e| e != "prep"))
    }
}

/// The last recovery that changed a log, as its writer recorded it in the
/// log's directory ([`LAST_RECOVERY_FILE`]), so that what a writer cut stays
/// known after the fact ([`Log::last_recovery`]).
///
/// Example: [`Log::last_recovery`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LastRecovery {
    /// When it ran, ms since the Unix epoch.
    pub at_ms: u64,
    /// What it found and did.
    pub report: RecoveryReport,
}

/// The file in a log's directory that holds its [`LastRecovery`] (JSON).
///
/// Example: [`Log::last_recovery`].
pub const LAST_RECOVERY_FILE: &str = "last-recovery.json";

/// The committed state readers see, published after every append batch.
#[derive(Clone)]
struct Published {
    segments: Arc<Vec<Arc<Segment>>>,
    tip: Tip,
    /// Seq and hash the first segment continues, when the log's prefix
    /// below it is evicted (`evicted.json`).
    evicted: Option<(u64, EntryHash)>,
}

/// Where a writer this process let go ([`Log::release`]) left the active
/// segment: its file, the log's id, and the end of its records. A writer
/// that reopens the log with it (`Log::reopen_released`) checks only CRCs
/// below that point, as below a durable mark, instead of hashing every
/// record again: the point's own record is still hashed and must match, and
/// a hint for another file or another log is ignored. It lives in memory
/// only (the store's released sessions), never on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReleaseHint {
    /// The active segment's file.
    pub(crate) segment: PathBuf,
    /// The log's id, which the segment's header carries.
    pub(crate) log_id: [u8; 16],
    /// The end of its records when the writer let go.
    pub(crate) point: Point,
}

/// Where the log ends: what the writer extends, and what it publishes.
#[derive(Clone, Copy)]
/// The writer's position at the end of the active segment, in the
/// vocabulary of [`Point`] (see `format`), plus the seq of the log's last
/// `SessionStart`.
struct Tip {
    /// Offset just past the last record in the active segment.
    end: u64,
    /// Seq of the next record.
    next_seq: u64,
    /// Hash of the last record (the start hash if none).
    hash: EntryHash,
    /// Offset of the last `SessionStart` in the active segment, for its marks.
    session_start: Option<u64>,
    /// Seq of the last `SessionStart` in the log.
    last_session_start: Option<u64>,
}

impl Tip {
    /// The end of the active segment, as a mark would record it.
    fn point(&self) -> Point {
        Point {
            end: self.end,
            next_seq: self.next_seq,
            hash: self.hash,
            session_start: self.session_start,
        }
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
    /// Set by [`Log::park`], cleared by [`Log::unpark`]: an append to a
    /// parked log (a save that leaves its session parked,
    /// [`Log::open_for_one_use`]) prepares no next segment and asks for no
    /// pages ahead, which would keep a descriptor, disk space or pages for
    /// a session that keeps none.
    parked: AtomicBool,
    report: RecoveryReport,
    /// A read-only view whose directory held no [`LAST_RECOVERY_FILE`] when
    /// it was opened: its restores need not look for one (one that a
    /// writer's recovery writes later is about a log this view did not see).
    no_last_recovery: bool,
    /// What the next group commit must make durable besides the records,
    /// after its `fdatasync` (see [`Log::on_first_sync`]).
    first_sync: Mutex<Option<FirstSync>>,
    /// The store's shared journal, through which `Sync` commits become
    /// durable once the store attaches it (see `journal.rs`).
    journal: OnceLock<journal::JournalPort>,
    /// The point of the active segment below which records are durable
    /// through the journal (`None` before the first frame).
    journaled: Mutex<Option<(std::sync::Weak<Segment>, Point)>>,
    /// The writer lock (`None` for a read-only view): see `lock.rs`.
    lock: Mutex<Option<lock::WriterLock>>,
}

/// Work a log's first sync runs after its `fdatasync`, before the sync
/// counts as done: what makes a new session durable beside its records.
pub(crate) type FirstSync = Box<dyn FnOnce() -> crate::error::Result<()> + Send>;

/// An append-only, hash-chained log in one directory. Cheap to clone; clones
/// share the writer.
///
/// Example: [the module](crate::log#example).
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
    /// The payload area of the store this log belongs to, which resolves
    /// its records' references to large items; `None` for a log opened on
    /// its own.
    payloads: Option<Arc<PayloadArea>>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.inner.dir).finish()
    }
}

impl Log {
    /// The directory.
    ///
    /// Example: [`Log::open`].
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What recovery found when this log was opened.
    ///
    /// Example: [`Log::open`].
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// Whether this is a read-only view whose directory held no
    /// [`LAST_RECOVERY_FILE`] when it was opened.
    pub(crate) fn saw_no_last_recovery(&self) -> bool {
        self.inner.no_last_recovery
    }

    /// Whether the log is parked ([`Log::park`] since the last
    /// [`Log::unpark`]).
    pub(crate) fn is_parked(&self) -> bool {
        self.inner.parked.load(Ordering::Acquire)
    }

    /// Whether a failed write or sync poisoned the writer.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.inner
            .poisoned
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// True when no other clone of this handle exists.
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Whether this handle can append.
    ///
    /// Example: [`Log::open`].
    pub fn is_writable(&self) -> bool {
        self.inner.writer.is_some()
    }

    /// A consistent view of everything committed so far.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn snapshot(&self) -> Snapshot {
        let p = self.inner.published.lock().clone();
        let mut snap = snapshot_of(&p);
        snap.payloads = self.payloads.clone();
        snap
    }

    /// The same log, resolving references to large items in `payloads`.
    pub(crate) fn with_payloads(mut self, payloads: Arc<PayloadArea>) -> Log {
        // A log serves one store: the first area given stays.
        let _ = self.inner.settle.payloads.set(payloads.clone());
        self.payloads = Some(payloads);
        self
    }

    /// Seq and hash of the last record, if any.
    ///
    /// Example: [`Log::open`].
    pub fn head(&self) -> Option<(u64, EntryHash)> {
        let p = self.inner.published.lock();
        (p.tip.next_seq > first_seq(&p)).then(|| (p.tip.next_seq - 1, p.tip.hash))
    }

    /// Number of the next record.
    ///
    /// Example: [`Log::open`].
    pub fn next_seq(&self) -> u64 {
        self.inner.published.lock().tip.next_seq
    }

    /// Blocks until the log holds a record with `seq`, or `timeout` passes.
    /// Returns whether it does.
    ///
    /// Example: [`Store::subscribe`](crate::Store::subscribe), which waits through it.
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

    /// Every segment file, in order.
    ///
    /// Example: [`Log::open`].
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
    ///
    /// Example: [`Log::open`].
    pub fn bytes(&self) -> u64 {
        self.snapshot().bytes()
    }

    /// Closes every segment's file but the one that holds the writer lock
    /// (the active segment's, pinned: see `lock.rs`), keeping the maps, the
    /// lock and all the state: what the store does to an idle session past
    /// its budget of active ones, which then holds one descriptor (its
    /// lock, through which its saves still write). Until
    /// [`Log::unpark`], each use of a file opens it for that use only,
    /// beneath `base` when the file lies there (see `ParkableFile`). The
    /// lock held all along is what keeps the state true: no other writer
    /// can have changed the log meanwhile. The store parks only a log no
    /// handle holds, whose writer is idle; it does not wait for the writer
    /// lock, which a settle after a roll does not take either.
    ///
    /// A next segment prepared ahead (with its own descriptor) is removed
    /// if its preparation is done: the next append past half the active
    /// segment after an unpark prepares another (a parked log prepares
    /// none). One still being prepared is left to the next roll.
    pub(crate) fn park(&self, base: Option<&Arc<BaseDir>>) {
        self.inner.parked.store(true, Ordering::Release);
        for seg in self.inner.published.lock().segments.iter() {
            seg.parkable().park(base);
        }
        let Some(w) = &self.inner.writer else { return };
        let Some(mut w) = w.try_lock() else { return };
        // A batch that rolled and then failed left its new segment in the
        // writer's list only.
        for seg in &w.segments {
            seg.parkable().park(base);
        }
        if w.prepared.as_ref().is_some_and(|h| h.is_finished()) {
            if let Some(Ok(Ok(p))) = w.prepared.take().map(|h| h.join()) {
                p.discard();
            }
        }
    }

    /// Whether each segment's file is parked, in order, and whether with a
    /// directory to reopen it beneath; the file that holds the writer lock
    /// (pinned open, never parked) is left out.
    #[cfg(test)]
    pub(crate) fn files_parked(&self) -> Vec<(bool, bool)> {
        let p = self.inner.published.lock();
        p.segments
            .iter()
            .filter(|s| !s.parkable().is_pinned())
            .map(|s| (s.parkable().is_parked(), s.parkable().is_parked_beneath()))
            .collect()
    }

    /// Whether a writer holds its lock through its active segment's own
    /// descriptor, `LOCK` being a second name of that segment.
    #[cfg(test)]
    pub(crate) fn holds_lock_in_segment(&self) -> bool {
        self.inner.lock_in_segment()
    }

    /// Lets the next use of each segment's file keep it open again, and
    /// opens the active segment's now: an open that runs out of file
    /// descriptors fails here, where the store can make room and try again
    /// (`Store::making_room`), rather than in the middle of an append.
    pub(crate) fn unpark(&self) -> crate::error::Result<()> {
        self.inner.parked.store(false, Ordering::Release);
        self.open_for_one_use()
    }

    /// [`Log::unpark`] for one save that leaves the log parked: its files
    /// open to be kept until the next [`Log::park`], and its appends
    /// meanwhile prepare no next segment and ask for no pages ahead.
    pub(crate) fn open_for_one_use(&self) -> crate::error::Result<()> {
        let segments = self.inner.published.lock().segments.clone();
        for seg in segments.iter() {
            seg.parkable().unpark();
        }
        match segments.last() {
            Some(active) if self.inner.writer.is_some() => active.parkable().open_now(),
            _ => Ok(()),
        }
    }
}

fn first_seq(p: &Published) -> u64 {
    p.segments.first().map_or(0, |s| s.header.first_seq)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Records durable through the journal only are made durable in the
        // segment before the lock goes (best effort: a failure leaves them
        // to the journal's recovery).
        let journal_only = {
            let s = self.sync.lock();
            s.durable_next > s.checkpointed_next
        };
        if journal_only {
            let _ = self.checkpoint();
        }
        if let Some(w) = &self.writer {
            if let Some(h) = w.lock().prepared.take() {
                if let Ok(Ok(p)) = h.join() {
                    p.discard();
                }
            }
        }
        // The writer is gone: its lock goes now, though a snapshot (or a
        // settle or page-cache thread) may keep the segment, and with it
        // the descriptor that holds the lock, open for a while yet.
        self.let_go_of_lock();
    }
}
