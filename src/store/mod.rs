//! The store: many sessions, one log directory each, with the session API an
//! agent runtime embeds.
//!
//! Layout under the root: `sessions/<uuid>/` holds one log's segments, its
//! `LOCK` and its `catalog`; `trash/` holds sessions being deleted;
//! `staging/` holds what creations of older versions left (they built
//! sessions there); this one creates them in place (`staging`).
//! `payloads/` holds the large items of every session, once each, by
//! BLAKE3 (`crate::payload`; `payloads` moves them there and collects them).
//!
//! This file holds the store itself: opening and options.
//! The rest is one concern a file:
//! - `listing`: `list`, `info`, and a session's listing entry;
//! - `shards`: the cache of open sessions (one writer each), eviction, close;
//! - `staging`: creating a session in place, its pending durability, deleting it;
//! - `session`: the session API, saves, restore, forks, import, reads;
//! - `subscription`: following a session's entries as they are committed;
//! - `payloads`: large items to the payload area, their check, collection.
//!
//! # Example
//!
//! A runtime creates a session, saves each turn as it goes, and resumes it
//! later, in this process or the next:
//!
//! ```
//! use session_store::{Item, RequestConfig, Store};
//! # fn main() -> session_store::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path())?;
//! let (id, mut head) = store.create_session(Some("You are a coding agent."), RequestConfig::model("gpt-5"), &[])?;
//! store.save_delta(id, &mut head, &[Item::user_text("Which Rust version do we need?")])?;
//! store.save_delta(id, &mut head, &[Item::assistant_text("1.89, says Cargo.toml.")])?;
//! store.close()?;
//!
//! let store = Store::open(dir.path())?;
//! let state = store.restore(id)?;
//! assert_eq!(state.system_prompt.as_deref(), Some("You are a coding agent."));
//! assert_eq!(state.history.last(), Some(&Item::assistant_text("1.89, says Cargo.toml.")));
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Once, OnceLock};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::catalog::{self, HeadSlot, Identity, ListCache, CATALOG_FILE};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, sync_dir, BaseDir, Hook};
use crate::log::journal::Journal;
use crate::log::{Log, LogOptions, LOCK_FILE};
use crate::payload::PayloadArea;
use crate::schema::{ArchivedLogEntry, SessionId, SessionOrigin};

mod budget;
mod commit;
mod forks;
mod journal;
mod lifecycle;
mod listing;
mod names;
mod payloads;
mod session;
mod shards;
mod staging;
mod subscription;
mod tail;
mod title;
mod transfer;

pub use budget::{
    active_budget_for, default_max_active_sessions, default_max_open_sessions, open_budget_for,
    FDS_PER_ACTIVE_SESSION, FDS_PER_PARKED_SESSION,
};
pub use commit::Turn;
pub use forks::{Deletion, ExportedEntry, MAX_FORK_DEPTH};
pub use journal::UnappliedJournal;
pub use names::{MAX_NAME_BYTES, NAME_DOMAIN};
pub use shards::SessionHandle;
pub use subscription::{SubscribedEntry, Subscription, DEFAULT_POLL_INTERVAL};
pub use tail::{HistoryTail, HistoryTailView};
pub(crate) use title::empty_catalog_title;

use shards::{Candidates, Shard};

const SHARDS: usize = 16;

pub(crate) use crate::schema::now_ms;

/// The most sessions whose read-only views a store remembers
/// (`Inner::viewed`); past it, it forgets them all and starts again. Each is
/// a path and a point, about 200 bytes.
const VIEW_HINTS: usize = 4096;

/// The directories of a store's root that an open makes when missing.
const STORE_DIRS: [&str; 3] = ["sessions", "trash", "staging"];

/// How to open a store.
///
/// Example: [`Store::open_with`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Options for each session's log.
    pub log: LogOptions,
    /// How many session logs may be open at once: each holds its writer
    /// lock (one file descriptor), its maps and its state. Exceeded only
    /// while callers hold more handles than this: a log that another
    /// handle still uses is never evicted. Default
    /// [`default_max_open_sessions`]: from the process's open-file limit.
    /// A store whose open runs out of file descriptors closes half of its
    /// idle sessions and keeps at most that many open from then on.
    pub max_open_sessions: usize,
    /// How many of the open sessions keep their files (the active segment
    /// and the catalog: two more descriptors) open between uses. Past it,
    /// the least recently used idle ones are parked: their files closed,
    /// their lock, maps and state kept, so that their next save opens one
    /// file instead of the whole log (see DESIGN.md, "Store"). A save of a
    /// session parked for longer than this many uses of the store opens
    /// its file for that save only and leaves it parked; a second save
    /// within that window makes it active again. Default
    /// [`default_max_active_sessions`].
    pub max_active_sessions: usize,
    /// Items whose strings hold at least this many bytes (tool outputs,
    /// `encrypted_content`, images and files, long texts) are stored once
    /// in the store-wide payload area, and records refer to them by BLAKE3
    /// hash; `usize::MAX` keeps every item in its record. Default
    /// [`DEFAULT_PAYLOAD_THRESHOLD`] (32 KiB).
    pub payload_threshold: usize,
}

/// The default [`StoreOptions::payload_threshold`]: 32 KiB. Each payload is
/// a file of its own (a create, a rename, and an `fdatasync` at the next
/// sync), so the threshold keeps them to the items that are worth it: the
/// large tool outputs and attachments that compaction snapshots and forks
/// repeat, while the few-KiB results of an ordinary turn stay in their
/// record (see DESIGN.md, "Payloads").
///
/// Example: [the payload module](crate::payload#example).
pub const DEFAULT_PAYLOAD_THRESHOLD: usize = 32 * 1024;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            log: LogOptions::default(),
            max_open_sessions: default_max_open_sessions(),
            max_active_sessions: default_max_active_sessions(),
            payload_threshold: DEFAULT_PAYLOAD_THRESHOLD,
        }
    }
}

impl StoreOptions {
    /// Sets the log options.
    ///
    /// Example: [`Store::open_with`].
    pub fn log(mut self, log: LogOptions) -> Self {
        self.log = log;
        self
    }

    /// Sets the open-session budget.
    ///
    /// Example: [`Store::open_with`].
    pub fn max_open_sessions(mut self, n: usize) -> Self {
        self.max_open_sessions = n.max(1);
        self
    }

    /// Sets the active-session budget (at least 1): how many open sessions
    /// keep their files open between uses.
    ///
    /// Example: [`Store::open_with`].
    pub fn max_active_sessions(mut self, n: usize) -> Self {
        self.max_active_sessions = n.max(1);
        self
    }

    /// Sets the payload threshold in bytes (at least 1; `usize::MAX` keeps
    /// every item in its record).
    ///
    /// Example: [`Store::open_with`].
    pub fn payload_threshold(mut self, bytes: usize) -> Self {
        self.payload_threshold = bytes.max(1);
        self
    }
}

/// What `list()` shows of a session.
///
/// Example: [`Store::info`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The id.
    pub id: SessionId,
    /// Creation time, ms.
    pub created_ms: u64,
    /// Last write, ms.
    pub updated_ms: u64,
    /// An excerpt of the first user text.
    pub title: Option<String>,
    /// Entries in the log.
    pub entries: u64,
    /// Bytes of record data.
    pub bytes: u64,
    /// Bytes of the items kept in the store's payload area that its
    /// records refer to, not counting a compaction's snapshot again (it
    /// repeats items the session holds). `bytes + payload_bytes` is what
    /// the session holds.
    pub payload_bytes: u64,
    /// Hash of the last entry.
    pub head: Option<EntryHash>,
    /// Fork origin.
    pub forked_from: Option<SessionOrigin>,
    /// Compaction origin.
    pub compacted_from: Option<SessionOrigin>,
    /// The name the session was created with ([`Store::create_named`]),
    /// if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why this session could not be read in full, if it could not: a
    /// damaged catalog or log. The other fields say what could be read (the
    /// creation time from the id, at least).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Filters for [`Store::list_filtered`].
///
/// Example: [`Store::list_filtered`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only sessions written at or after this time, ms.
    pub updated_since_ms: Option<u64>,
    /// Only forks of this session.
    pub forked_from: Option<SessionId>,
    /// Only titles containing this text (case-insensitive).
    pub title_contains: Option<String>,
    /// `Some(true)`: only sessions whose live history starts at a
    /// compaction ([`Store::compact`]); `Some(false)`: only the others.
    pub compacted: Option<bool>,
}

struct Inner {
    root: PathBuf,
    opts: StoreOptions,
    /// Large items, stored once for the whole store.
    payloads: Arc<PayloadArea>,
    shards: Vec<Mutex<Shard>>,
    /// One per shard: signalled when an open that others wait for ends.
    opened: Vec<Condvar>,
    /// Whether the store was opened for writing.
    writable: bool,
    /// The listing cache, which writers keep: opened by the first write.
    cache: OnceLock<Arc<ListCache>>,
    /// Set once the first write ran the housekeeping an open leaves.
    housekept: Once,
    /// Sessions open in all shards together: eviction starts only when
    /// this passes `max_open_sessions`, however they spread over shards.
    open_count: AtomicUsize,
    /// Open sessions not parked (their files open, or opened at their next
    /// use): parking starts when this passes `max_active_sessions`.
    active_count: AtomicUsize,
    /// The most sessions this store keeps open, lowered from
    /// `max_open_sessions` to what it kept after an open ran out of file
    /// descriptors, so that it stays clear of the process's limit from
    /// then on (`Store::making_room`).
    open_ceiling: AtomicUsize,
    /// The clock of last use, store-wide, so that eviction picks the least
    /// recently used session of all shards.
    tick: AtomicU64,
    /// Eviction's candidates: the least recently used sessions one look
    /// over every shard found (`Store::evict_down_to`).
    victims: Mutex<Candidates>,
    /// Parking's candidates, as `victims` are eviction's.
    park_victims: Mutex<Candidates>,
    /// The first failure to close an evicted session, which no caller was
    /// waiting for: `Store::close` reports it.
    eviction_failure: Mutex<Option<Error>>,
    /// Sessions this store let go of without a clean close (evicted from a
    /// `Buffered` store), with the dirty head slot it left: while the
    /// catalog still holds exactly that, no writer has opened the session
    /// since, and the slot's numbers are the log's.
    released: Mutex<HashMap<SessionId, Released>>,
    /// Where this store's read-only views of a session found records past
    /// its durable mark to end (`Log::view_hint`): the next view hashes
    /// only what lies past that, so that repeated reads of a session whose
    /// writer has not marked it (another process's, or one that crashed)
    /// do not hash the same records each time. At most `VIEW_HINTS`.
    viewed: Mutex<HashMap<SessionId, crate::log::ReleaseHint>>,
    /// Set by `Store::abandon`: the last drop closes nothing.
    abandoned: AtomicBool,
    /// The shared journal of this handle's `Sync` commits (a writable
    /// store's; see `log::journal` and `store::journal`).
    journal: Option<Arc<Journal>>,
    /// Sessions whose records in orphaned journals the open could not put
    /// back (`Store::unapplied_journals`).
    unapplied: Mutex<Vec<UnappliedJournal>>,
    /// `Store` values sharing this (an `Arc` count would not tell two last
    /// drops at once apart): the one that takes it to none closes.
    handles: AtomicUsize,
    /// What fetches a session's evicted segments back before a read that
    /// reaches them (an archive, `Store::attach_archive`).
    fetcher: Mutex<Option<Arc<dyn FetchBack>>>,
    /// `sessions/`, kept open from the first park on: a parked session's
    /// files reopen beneath it (`openat`), walking two components of their
    /// path rather than all of it.
    sessions_dir: OnceLock<Arc<BaseDir>>,
}

/// What a store keeps of a session it let go of dirty (`Inner::released`).
struct Released {
    /// The head slot it left in the catalog.
    left: HeadSlot,
    /// Where its writer left the active segment, so that the reopen need
    /// not hash the records again (`Log::reopen_released`).
    hint: Option<crate::log::ReleaseHint>,
}

/// Fetches the evicted prefix of a session back into its directory (an
/// archive, feature `archive`), so that the store stays below the archive
/// in the layers.
pub(crate) trait FetchBack: Send + Sync {
    /// Places the session's evicted segments again, checked first.
    fn fetch_back(&self, store: &Store, id: SessionId) -> Result<()>;
}

/// A store of sessions. `Send + Sync`; clones are cheap and share everything.
///
/// Dropping the last clone closes the store as [`Store::close`] does, its
/// failures unreported (call `close` to see them): without it, each session
/// a `Buffered` store wrote would keep a durable mark that lags its records,
/// and every later read-only open would hash the records past the mark again.
/// (An `AsyncStore` dropped inside a runtime closes on
/// its blocking pool.) A session whose log a caller still holds then
/// ([`Store::log`], [`Store::read_log`] of a session this store writes, a
/// [`SessionHandle`]) is left to that handle, whose drop closes nothing:
/// call [`Log::close`] on it.
///
/// Example: [the module](crate::store#example).
pub struct Store {
    inner: Arc<Inner>,
    /// Whether this handle is still counted in `Inner::handles` (false once
    /// `Store::into_last` gave its count back).
    counted: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.inner.root)
            .finish()
    }
}

impl Store {
    /// Opens (or creates) a store at `root` with default options.
    ///
    /// ```
    /// use session_store::{RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("agent-sessions"))?;
    /// let (id, _head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// assert!(store.exists(id));
    /// assert!(store.session_dir(id).starts_with(store.root()));
    /// # Ok(()) }
    /// ```
    pub fn open(root: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(root, StoreOptions::default())
    }

    /// Opens (or creates) a store at `root`.
    ///
    /// Opening an existing store looks at `sessions/` and nothing else: its
    /// housekeeping (finishing deletions a crash interrupted, sweeping what
    /// creations killed before their first sync left in `sessions/` and
    /// what dead creations of older versions left in `staging/`, collecting
    /// retired sessions no fork reads any more) and the opening of its
    /// listing cache wait for its first write, which runs them first. A
    /// runtime that opens the store to restore a session pays for neither.
    ///
    /// ```
    /// use session_store::{Durability, LogOptions, Store, StoreOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// // Every save durable before it returns; tool outputs of 64 KiB and
    /// // more stored once in the payload area.
    /// let opts = StoreOptions::default()
    ///     .log(LogOptions::default().durability(Durability::Sync))
    ///     .payload_threshold(64 * 1024)
    ///     .max_open_sessions(256);
    /// let store = Store::open_with(dir.path(), opts)?;
    /// assert!(!store.is_read_only());
    /// # Ok(()) }
    /// ```
    pub fn open_with(root: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let root = root.as_ref().to_path_buf();
        let hook = &opts.log.hook;
        if !hooked_fs::dir_exists(&root.join("sessions"))? {
            let new_root = !hooked_fs::dir_exists(&root)?;
            for dir in STORE_DIRS {
                let dir = root.join(dir);
                if !hooked_fs::dir_exists(&dir)? {
                    hooked_fs::create_dir(&dir, hook)?;
                }
            }
            // The directories hold every session: their names must be
            // durable before any session in them is acknowledged.
            sync_dir(&root, hook)?;
            if new_root {
                let parent = root.parent().filter(|p| !p.as_os_str().is_empty());
                sync_dir(parent.unwrap_or(Path::new(".")), hook)?;
            }
        }
        let store = Store::with_parts(root, opts, true);
        // Before any session is read or written: the records that only a
        // journal of a handle now gone holds go back into their logs.
        store.recover_journals()?;
        Ok(store)
    }

    /// The housekeeping an open leaves to the first write (see
    /// [`Store::open_with`]), best effort: what fails is tried again at the
    /// next store's first write. A directory of [`STORE_DIRS`] that is
    /// missing is made; `trash/` and `staging/` are listed only when their
    /// link count says that they hold a subdirectory.
    fn keep_house(&self) {
        let root = &self.inner.root;
        let hook = self.hook();
        let mut created = false;
        let mut may_hold = |name: &str| {
            let dir = root.join(name);
            match hooked_fs::dir_links(&dir) {
                Ok(Some(links)) => !hooked_fs::holds_no_subdirectory(links),
                Ok(None) => {
                    created |= hooked_fs::create_dir(&dir, hook).is_ok();
                    false
                }
                Err(_) => false,
            }
        };
        let (trash_may_hold, staging_may_hold) = (may_hold("trash"), may_hold("staging"));
        if created {
            let _ = sync_dir(root, hook);
        }
        // Finish deletions a crash interrupted; not one still running
        // (its deleter holds the session's lock until the removal is done).
        let trash = match trash_may_hold {
            true => fs::read_dir(root.join("trash")).ok(),
            false => None,
        };
        if let Some(entries) = trash {
            for e in entries.flatten() {
                let dir = e.path();
                let running = fs::File::open(dir.join(LOCK_FILE))
                    .is_ok_and(|l| matches!(l.try_lock(), Err(fs::TryLockError::WouldBlock)));
                if !running {
                    let _ = hooked_fs::remove_dir_all(&dir, hook);
                }
            }
        }
        if staging_may_hold {
            self.sweep_staging();
        }
        self.sweep_torn_creations();
        self.sweep_retired();
    }

    /// Opens an existing store for reading only: nothing is created,
    /// swept, recovered or written, and no lock is taken for writing, so it
    /// works on a read-only medium and beside live writers. Listing,
    /// `info`, `restore`, snapshots, subscriptions' reads and `verify` work as
    /// in a writable store; every write (creating, saving, deleting, opening
    /// a session's writer) fails with [`Error::InvalidInput`].
    ///
    /// Fails with [`Error::NotFound`] naming `root` when no store is there.
    ///
    /// ```
    /// use session_store::{Error, Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = Store::open(dir.path())?;
    /// let (id, mut head) = writer.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// writer.save_delta(id, &mut head, &[Item::user_text("Run the tests.")])?;
    ///
    /// // A dashboard beside the runtime: it reads, and never writes.
    /// let viewer = Store::open_read_only(dir.path())?;
    /// assert_eq!(viewer.restore(id)?.history, [Item::user_text("Run the tests.")]);
    /// let refused = viewer.create_session(None, RequestConfig::model("gpt-5"), &[]);
    /// assert!(matches!(refused, Err(Error::InvalidInput { .. })));
    /// # Ok(()) }
    /// ```
    pub fn open_read_only(root: impl AsRef<Path>) -> Result<Store> {
        let root = root.as_ref().to_path_buf();
        if !hooked_fs::dir_exists(&root.join("sessions"))? {
            return Err(Error::not_found(format!("no store at {}", root.display())));
        }
        Ok(Store::with_parts(root, StoreOptions::default(), false))
    }

    fn with_parts(root: PathBuf, opts: StoreOptions, writable: bool) -> Store {
        // The handle's token names its journal files: unique, as a fresh
        // UUID v7 is.
        let journal = writable.then(|| {
            let token = SessionId::new_v7().0;
            Arc::new(Journal::new(&root, token, opts.log.hook.clone()))
        });
        Store {
            counted: true,
            inner: Arc::new(Inner {
                writable,
                cache: OnceLock::new(),
                housekept: Once::new(),
                payloads: Arc::new(PayloadArea::new(&root, opts.log.hook.clone())),
                root,
                opts,
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
                opened: (0..SHARDS).map(|_| Condvar::new()).collect(),
                eviction_failure: Mutex::new(None),
                released: Mutex::new(HashMap::new()),
                sessions_dir: OnceLock::new(),
                viewed: Mutex::new(HashMap::new()),
                abandoned: AtomicBool::new(false),
                journal,
                unapplied: Mutex::new(Vec::new()),
                handles: AtomicUsize::new(1),
                fetcher: Mutex::new(None),
                open_count: AtomicUsize::new(0),
                active_count: AtomicUsize::new(0),
                open_ceiling: AtomicUsize::new(usize::MAX),
                tick: AtomicU64::new(0),
                victims: Mutex::new(Candidates::default()),
                park_victims: Mutex::new(Candidates::default()),
            }),
        }
    }

    /// Whether this store was opened with [`Store::open_read_only`].
    ///
    /// Example: [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        !self.inner.writable
    }

    /// Refuses a write to a read-only store. Every write goes through here
    /// first: the first one runs the housekeeping the open left
    /// ([`Store::keep_house`]; the others wait for it) and opens the
    /// listing cache.
    fn writable(&self) -> Result<&Arc<ListCache>> {
        if !self.inner.writable {
            return Err(Error::invalid(format!(
                "the store at {} was opened read-only",
                self.inner.root.display()
            )));
        }
        self.inner.housekept.call_once(|| self.keep_house());
        if let Some(cache) = self.inner.cache.get() {
            return Ok(cache);
        }
        let cache = Arc::new(ListCache::open(&self.inner.root, self.hook())?);
        Ok(self.inner.cache.get_or_init(|| cache))
    }

    /// Installs what fetches evicted segments back (`None`: nothing; a read
    /// of an evicted range is then [`Error::Evicted`]).
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn set_fetcher(&self, fetcher: Option<Arc<dyn FetchBack>>) {
        *self.inner.fetcher.lock() = fetcher;
    }

    /// Before a read from `seq` on: if the session's log has an evicted
    /// prefix that the read reaches and a fetcher is attached, fetches it
    /// back. Without one the read itself fails with [`Error::Evicted`].
    pub(crate) fn fetch_if_evicted(&self, id: SessionId, seq: u64) -> Result<()> {
        let Some(fetcher) = self.inner.fetcher.lock().clone() else {
            return Ok(());
        };
        let reaches = self
            .reader(id)?
            .snapshot()
            .evicted()
            .is_some_and(|(_, last)| seq <= last);
        if reaches {
            fetcher.fetch_back(self, id)?;
        }
        Ok(())
    }

    /// The fault seam every write of this store goes through.
    pub(crate) fn hook(&self) -> &Hook {
        &self.inner.opts.log.hook
    }

    /// The root directory.
    ///
    /// Example: [`Store::open`].
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The directory of a session.
    ///
    /// Example: [`Store::open`].
    pub fn session_dir(&self, id: SessionId) -> PathBuf {
        self.inner.root.join("sessions").join(id.to_string())
    }

    /// Whether a session exists. A session whose creation is not durable
    /// yet, and whose log cannot be opened now for a reason that says
    /// nothing about it (out of file descriptors, say), counts as one.
    ///
    /// Example: [`Store::open`].
    pub fn exists(&self, id: SessionId) -> bool {
        let dir = self.session_dir(id);
        dir.join(CATALOG_FILE).exists()
            && (!dir.join(staging::CREATING_FILE).exists()
                || self.is_open_here(id)
                || staging::holds_entries(&dir, &self.inner.payloads).unwrap_or(true))
    }
}

/// The time of the log's last entry, if it has one that reads.
fn last_entry_ms(log: &Log) -> Option<u64> {
    let snap = log.snapshot();
    let last = snap.head().and_then(|(seq, _)| snap.iter_from(seq).next());
    Some(last?.ok()?.ts)
}

/// A session's identity as its log tells it: the creation time from the id,
/// the origins from its last `SessionStart` (as `restore` reports them).
fn rebuilt_identity(id: SessionId, log: &Log) -> Identity {
    let (forked_from, compacted_from) = log_origins(log);
    Identity {
        created_ms: id.created_ms().unwrap_or(0),
        forked_from,
        compacted_from,
        durability: None,
    }
}

/// The catalog of the session `id` in `dir` (under a store's
/// `sessions/`), as [`catalog::read`] reads it, with an empty one's
/// identity and title filled in from its log and its parent. Reads only.
#[cfg(feature = "archive")]
pub(crate) fn read_catalog(id: SessionId, dir: &Path) -> Result<catalog::CatalogRecord> {
    let mut record = catalog::read(&dir.join(CATALOG_FILE))?;
    if record.empty {
        let log = Log::open_read_only(dir)?;
        record.identity = Some(rebuilt_identity(id, &log));
        if let Some(root) = dir.parent().and_then(Path::parent) {
            record.title = empty_catalog_title(root, &log).0;
        }
    }
    Ok(record)
}

/// The fork and compaction origins of the log's last `SessionStart`.
fn log_origins(log: &Log) -> (Option<SessionOrigin>, Option<SessionOrigin>) {
    let snap = log.snapshot();
    let from = snap.last_session_start().unwrap_or(snap.first_seq());
    // Read archived: a SessionStart's history is not decoded for this.
    let start = snap.iter_from(from).next().and_then(|r| r.ok());
    match start.as_ref().map(|r| r.entry()) {
        Some(ArchivedLogEntry::SessionStart {
            forked_from,
            compacted_from,
            ..
        }) => (
            forked_from
                .as_ref()
                .map(|o| crate::schema::ArchivedSessionOrigin::get(o)),
            compacted_from
                .as_ref()
                .map(|o| crate::schema::ArchivedSessionOrigin::get(o)),
        ),
        Some(ArchivedLogEntry::ForkedFrom {
            parent,
            parent_hash: hash,
            ..
        }) => (
            Some(SessionOrigin {
                session_id: parent.get(),
                at_hash: crate::chain::ArchivedEntryHash::get(hash),
            }),
            None,
        ),
        _ => (None, None),
    }
}
