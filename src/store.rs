//! The store: many sessions, one log directory each, with the session API an
//! agent runtime embeds.
//!
//! Layout under the root: `sessions/<uuid>/` holds one log's segments, its
//! `LOCK` and its `catalog`; `trash/` holds sessions being deleted;
//! `staging/` holds sessions being created, which are renamed into
//! `sessions/` whole.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::catalog::{
    self, CachedSession, HeadSlot, Identity, ListCache, SessionCatalog, CATALOG_FILE,
};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::export::WireLine;
use crate::fs::{self as hooked_fs, io_err, sync_dir, Hook, HookedFile};
use crate::item::Item;
use crate::log::{Durability, ExpectHead, Log, LogOptions, RecoveryReport, Snapshot};
use crate::schema::{
    group_delta, JsonText, LogEntry, LoggedItem, RequestConfig, SessionId, SessionOrigin,
    WorkerResult,
};
use crate::state::RestoredState;

const SHARDS: usize = 16;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Options for each session's log.
    pub log: LogOptions,
    /// How many session logs may be open at once (file descriptors and maps).
    /// Exceeded only while callers hold more handles than this: a log that
    /// another handle still uses is never evicted.
    pub max_open_sessions: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            log: LogOptions::default(),
            max_open_sessions: 256,
        }
    }
}

impl StoreOptions {
    /// Sets the log options.
    pub fn log(mut self, log: LogOptions) -> Self {
        self.log = log;
        self
    }

    /// Sets the open-session budget.
    pub fn max_open_sessions(mut self, n: usize) -> Self {
        self.max_open_sessions = n.max(1);
        self
    }
}

/// What `list()` shows of a session.
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
    /// Hash of the last entry.
    pub head: Option<EntryHash>,
    /// Fork origin.
    pub forked_from: Option<SessionOrigin>,
    /// Compaction origin.
    pub compacted_from: Option<SessionOrigin>,
}

/// Filters for [`Store::list_filtered`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only sessions written at or after this time, ms.
    pub updated_since_ms: Option<u64>,
    /// Only forks of this session.
    pub forked_from: Option<SessionId>,
    /// Only titles containing this text (case-insensitive).
    pub title_contains: Option<String>,
}

struct OpenSession {
    log: Log,
    catalog: Arc<SessionCatalog>,
    tick: u64,
}

#[derive(Default)]
struct Shard {
    open: HashMap<SessionId, OpenSession>,
    /// Sessions a thread is opening or closing, outside the shard lock.
    opening: HashSet<SessionId>,
    tick: u64,
}

impl Shard {
    /// Takes an open session out to be closed, marked in transition until
    /// `Store::close_sessions` is done: before that, a new open would find
    /// its lock taken.
    fn take_to_close(&mut self, id: SessionId) -> Option<(SessionId, OpenSession)> {
        let s = self.open.remove(&id)?;
        self.opening.insert(id);
        Some((id, s))
    }
}

struct Inner {
    root: PathBuf,
    opts: StoreOptions,
    shards: Vec<Mutex<Shard>>,
    /// One per shard: signalled when an open that others wait for ends.
    opened: Vec<Condvar>,
    cache: Arc<ListCache>,
    /// The first failure to close an evicted session, which no caller was
    /// waiting for: `Store::close` reports it.
    eviction_failure: Mutex<Option<Error>>,
}

/// A store of sessions. `Send + Sync`; clones are cheap and share everything.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// A cheap handle to one open session.
#[derive(Clone)]
pub struct SessionHandle {
    id: SessionId,
    log: Log,
    catalog: Arc<SessionCatalog>,
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
    pub fn open(root: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(root, StoreOptions::default())
    }

    /// Opens (or creates) a store at `root`.
    pub fn open_with(root: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let root = root.as_ref().to_path_buf();
        let hook = &opts.log.hook;
        let new_root = !root.is_dir();
        let mut created = new_root;
        for dir in ["sessions", "trash", "staging"] {
            let dir = root.join(dir);
            if !dir.is_dir() {
                hooked_fs::create_dir(&dir, hook)?;
                created = true;
            }
        }
        // The directories hold every session: their names must be durable
        // before any session in them is acknowledged.
        if created {
            sync_dir(&root, hook)?;
        }
        if new_root {
            let parent = root.parent().filter(|p| !p.as_os_str().is_empty());
            sync_dir(parent.unwrap_or(Path::new(".")), hook)?;
        }
        // Finish deletions a crash interrupted.
        if let Ok(entries) = fs::read_dir(root.join("trash")) {
            for e in entries.flatten() {
                let _ = hooked_fs::remove_dir_all(&e.path(), hook);
            }
        }
        let cache = Arc::new(ListCache::open(&root, hook)?);
        let shards = opts.max_open_sessions.clamp(1, SHARDS);
        Ok(Store {
            inner: Arc::new(Inner {
                cache,
                root,
                opts,
                shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
                opened: (0..shards).map(|_| Condvar::new()).collect(),
                eviction_failure: Mutex::new(None),
            }),
        })
    }

    /// The fault seam every write of this store goes through.
    fn hook(&self) -> &Hook {
        &self.inner.opts.log.hook
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The directory of a session.
    pub fn session_dir(&self, id: SessionId) -> PathBuf {
        self.inner.root.join("sessions").join(id.to_string())
    }

    /// Whether a session exists.
    pub fn exists(&self, id: SessionId) -> bool {
        self.session_dir(id).join(CATALOG_FILE).exists()
    }

    /// The shard of a session: there are at most `SHARDS`, and no more than
    /// `max_open_sessions`, so that every shard may hold at least one log.
    fn slot(&self, id: SessionId) -> usize {
        id.0[15] as usize % self.inner.shards.len()
    }

    fn shard(&self, id: SessionId) -> &Mutex<Shard> {
        &self.inner.shards[self.slot(id)]
    }

    /// Opens (or finds open) a session's log, as the one writer.
    ///
    /// The open itself (recovery, a scan of the active segment) runs outside
    /// the shard lock, so that it does not hold up the shard's other
    /// sessions; a second caller for the same session waits for it.
    pub fn session(&self, id: SessionId) -> Result<SessionHandle> {
        let slot = self.slot(id);
        let mut shard = self.inner.shards[slot].lock();
        loop {
            shard.tick += 1;
            let tick = shard.tick;
            if let Some(s) = shard.open.get_mut(&id) {
                s.tick = tick;
                return Ok(SessionHandle {
                    id,
                    log: s.log.clone(),
                    catalog: s.catalog.clone(),
                });
            }
            if !shard.opening.contains(&id) {
                break;
            }
            self.inner.opened[slot].wait(&mut shard);
        }
        shard.opening.insert(id);
        drop(shard);
        let opened = self.open_session(id);
        let mut shard = self.inner.shards[slot].lock();
        shard.opening.remove(&id);
        self.inner.opened[slot].notify_all();
        let handle = opened?;
        // The shards' budgets add up to `max_open_sessions` exactly.
        let (max, shards) = (self.inner.opts.max_open_sessions, self.inner.shards.len());
        let budget = (max / shards + usize::from(slot < max % shards)).max(1);
        // Evict the least recently used sessions that no one else holds. A
        // loop, not one eviction: a shard that went over budget while all its
        // sessions were in use comes back under it.
        let mut evicted = Vec::new();
        while shard.open.len() >= budget {
            let Some(victim) = shard
                .open
                .iter()
                .filter(|(_, s)| s.log.is_unshared())
                .min_by_key(|(_, s)| s.tick)
                .map(|(k, _)| *k)
            else {
                break;
            };
            evicted.extend(shard.take_to_close(victim));
        }
        shard.tick += 1;
        let tick = shard.tick;
        shard.open.insert(
            id,
            OpenSession {
                log: handle.log.clone(),
                catalog: handle.catalog.clone(),
                tick,
            },
        );
        drop(shard);
        if let Err(e) = self.close_sessions(slot, evicted) {
            self.inner.eviction_failure.lock().get_or_insert(e);
        }
        Ok(handle)
    }

    /// Closes sessions taken out of shard `slot` with `Shard::take_to_close`,
    /// outside the shard lock (closing syncs), then lets their waiters in.
    /// Returns the first failure; every session is closed (or, on a
    /// failure, left poisoned for the next open to recover) either way.
    fn close_sessions(&self, slot: usize, sessions: Vec<(SessionId, OpenSession)>) -> Result<()> {
        if sessions.is_empty() {
            return Ok(());
        }
        let ids: Vec<SessionId> = sessions.iter().map(|(id, _)| *id).collect();
        let mut result = Ok(());
        for (_, s) in sessions {
            // The first failure stands; it names the session's segment or
            // catalog file.
            result = result.and(close_session(s));
        }
        let mut shard = self.inner.shards[slot].lock();
        for id in &ids {
            shard.opening.remove(id);
        }
        drop(shard);
        self.inner.opened[slot].notify_all();
        result
    }

    /// Opens a session's log as writer and its catalog, and marks the
    /// catalog dirty with the head the log has.
    fn open_session(&self, id: SessionId) -> Result<SessionHandle> {
        let dir = self.session_dir(id);
        let catalog_path = dir.join(CATALOG_FILE);
        if !catalog_path.exists() {
            return Err(Error::not_found(format!("session {id}")));
        }
        let log = Log::open(&dir, self.inner.opts.log.clone())?;
        let catalog = Arc::new(SessionCatalog::open(
            id,
            catalog_path,
            Some(&self.inner.cache),
            self.hook(),
        )?);
        let handle = SessionHandle { id, log, catalog };
        // The log is authoritative: rebuild the head slot from it now.
        let updated_ms = Some(handle.catalog.updated_ms()).filter(|&ms| ms > 0);
        handle
            .catalog
            .begin_writing(handle.head_slot(true, updated_ms))?;
        Ok(handle)
    }

    /// Closes every open session that no other handle uses cleanly (sync,
    /// exact durable marks, clean catalog); the others stay open.
    ///
    /// Returns the first failure to close a session, this call's or an
    /// earlier eviction's (a session whose close failed is poisoned and
    /// recovers when next opened).
    pub fn close(&self) -> Result<()> {
        let mut result = match self.inner.eviction_failure.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        for (slot, shard) in self.inner.shards.iter().enumerate() {
            // A session another handle still uses stays open: marking it
            // clean while it can still be written would mislead `list`.
            let open: Vec<_> = {
                let mut shard = shard.lock();
                let ids: Vec<SessionId> = shard
                    .open
                    .iter()
                    .filter(|(_, s)| s.log.is_unshared())
                    .map(|(id, _)| *id)
                    .collect();
                ids.into_iter()
                    .filter_map(|id| shard.take_to_close(id))
                    .collect()
            };
            // The first failure stands.
            result = result.and(self.close_sessions(slot, open));
        }
        result
    }

    /// Creates a session with a fresh UUID v7 id. Returns it and its head.
    pub fn create_session(
        &self,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
    ) -> Result<(SessionId, EntryHash)> {
        let id = SessionId::new_v7();
        let head = self.create_session_with_id(id, system_prompt, config, history)?;
        Ok((id, head))
    }

    /// Creates a session with a caller-chosen id.
    pub fn create_session_with_id(
        &self,
        id: SessionId,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
    ) -> Result<EntryHash> {
        let entry = LogEntry::SessionStart {
            ts: now_ms(),
            system_prompt: system_prompt.map(str::to_owned),
            config,
            history: history.iter().map(LoggedItem::from).collect(),
            forked_from: None,
            compacted_from: None,
        };
        self.create_with_entries(id, &[entry])
    }

    /// Creates a session whose log starts with `entries` (the first a `SessionStart`).
    fn create_with_entries(&self, id: SessionId, entries: &[LogEntry]) -> Result<EntryHash> {
        let Some(LogEntry::SessionStart {
            history,
            forked_from,
            compacted_from,
            ..
        }) = entries.first()
        else {
            return Err(Error::invalid(
                "a session must start with a session_start entry",
            ));
        };
        let dir = self.session_dir(id);
        if dir.join(CATALOG_FILE).exists() {
            return Err(Error::invalid(format!("session {id} already exists")));
        }
        let title = entries
            .iter()
            .flat_map(|e| e.items())
            .chain(history.iter())
            .find_map(user_text);
        let identity = Identity {
            created_ms: id.created_ms().unwrap_or_else(now_ms),
            forked_from: *forked_from,
            compacted_from: *compacted_from,
        };
        // The session is built whole in `staging/` and renamed into place, so
        // that a failure or a crash never leaves a half-made session under
        // `sessions/`, where it would block its id.
        let staged = self
            .inner
            .root
            .join("staging")
            .join(format!("{id}-{}", SessionId::new_v7()));
        let built = self.build_session(&staged, entries, &identity, title.as_deref());
        let placed = built.and_then(|()| self.place_session(id, &staged, &dir));
        if let Err(e) = placed {
            let _ = hooked_fs::remove_dir_all(&staged, self.hook());
            return Err(e);
        }
        self.inner.cache.place_new(id);
        let handle = self.session(id)?;
        Ok(handle.log.head().map(|(_, h)| h).expect("just written"))
    }

    /// Writes a new session's log and catalog in `dir`, durably.
    fn build_session(
        &self,
        dir: &Path,
        entries: &[LogEntry],
        identity: &Identity,
        title: Option<&str>,
    ) -> Result<()> {
        hooked_fs::create_dir(dir, self.hook())?;
        // The log first, then the catalog: a session "exists" once its catalog does.
        let opts = LogOptions {
            prepare_ahead: false,
            ..self.inner.opts.log.clone()
        };
        let log = Log::open(dir, opts)?;
        log.append_batch(entries, Durability::Buffered, ExpectHead::Empty)?;
        log.close()?;
        catalog::create(&dir.join(CATALOG_FILE), identity, title, self.hook())?;
        sync_dir(dir, self.hook())
    }

    /// Renames a staged session to `dir`, durably. A directory already there
    /// without a catalog is what an older version left of a failed creation:
    /// it is moved to `trash/` first.
    fn place_session(&self, id: SessionId, staged: &Path, dir: &Path) -> Result<()> {
        let sessions = self.inner.root.join("sessions");
        // Placings take turns, across processes too: otherwise two creators
        // of one id could both find the leftover, and the second would move
        // the first one's new session to the trash.
        let lock_path = self.inner.root.join("staging").join("LOCK");
        let lock = HookedFile::open_or_create(&lock_path, self.hook())?;
        lock.file().lock().map_err(io_err("lock", &lock_path))?;
        let mut renamed = hooked_fs::rename(staged, dir, self.hook());
        let occupied = matches!(
            &renamed,
            Err(Error::Io { source, .. }) if matches!(
                source.kind(),
                std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists
            )
        );
        if occupied {
            if dir.join(CATALOG_FILE).exists() {
                return Err(Error::invalid(format!("session {id} already exists")));
            }
            let trash = self
                .inner
                .root
                .join("trash")
                .join(format!("{id}-unfinished-{}", now_ms()));
            hooked_fs::rename(dir, &trash, self.hook())?;
            renamed = hooked_fs::rename(staged, dir, self.hook());
        }
        renamed?;
        sync_dir(&sessions, self.hook())?;
        sync_dir(&self.inner.root.join("staging"), self.hook())
    }

    /// Appends new history items, grouped with [`group_delta`], if the
    /// session's head is `head`; advances `head`. On a mismatch nothing is
    /// written and the result is [`Error::HeadMismatch`].
    pub fn save_delta(&self, id: SessionId, head: &mut EntryHash, items: &[Item]) -> Result<()> {
        let entries = group_delta(items, now_ms());
        self.save_entries(id, head, &entries)
    }

    /// Appends entries if the head matches; advances `head`.
    pub fn save_entries(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        entries: &[LogEntry],
    ) -> Result<()> {
        if entries.is_empty() {
            // Nothing to write, but a stale head must still be reported.
            let actual = self.head(id)?;
            if actual != Some(*head) {
                return Err(Error::HeadMismatch {
                    session: id.to_string(),
                    expected: Some(*head),
                    actual,
                });
            }
            return Ok(());
        }
        let s = self.session(id)?;
        let written = s
            .log
            .append_batch(
                entries,
                self.inner.opts.log.durability,
                ExpectHead::Hash(*head),
            )
            .map_err(|e| match e {
                Error::HeadConflict {
                    expected, actual, ..
                } => Error::HeadMismatch {
                    session: id.to_string(),
                    expected,
                    actual,
                },
                e => e,
            })?;
        if let Some(&(_, h)) = written.last() {
            *head = h;
        }
        if !s.catalog.has_title() {
            if let Some(t) = entries.iter().flat_map(|e| e.items()).find_map(user_text) {
                s.catalog.set_title(&t)?;
            }
        }
        s.touch(true, None)
    }

    /// Records the end of a turn.
    pub fn save_turn_end(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        turn_count: u64,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::TurnEnd {
                ts: now_ms(),
                turn_count,
            }],
        )
    }

    /// Records a completed run.
    pub fn save_run_completed(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        interrupted: bool,
        result: WorkerResult,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::RunCompleted {
                ts: now_ms(),
                interrupted,
                result,
            }],
        )
    }

    /// Records a failed run.
    pub fn save_run_errored(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        interrupted: bool,
        message: &str,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::RunErrored {
                ts: now_ms(),
                interrupted,
                message: message.to_owned(),
            }],
        )
    }

    /// Records token usage.
    pub fn save_usage(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        usage: crate::state::UsageRecord,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::LlmUsage {
                ts: if usage.ts == 0 { now_ms() } else { usage.ts },
                history_len: usage.history_len,
                input_total_tokens: usage.input_total_tokens,
                cache_read_tokens: usage.cache_read_tokens,
                cache_write_tokens: usage.cache_write_tokens,
                output_tokens: usage.output_tokens,
            }],
        )
    }

    /// Records extension data.
    pub fn save_extension(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        domain: &str,
        payload: JsonText,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::Extension {
                ts: now_ms(),
                domain: domain.to_owned(),
                payload,
            }],
        )
    }

    /// Records a config change.
    pub fn save_config_changed(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        config: RequestConfig,
    ) -> Result<()> {
        self.save_entries(
            id,
            head,
            &[LogEntry::ConfigChanged {
                ts: now_ms(),
                config,
            }],
        )
    }

    /// Replays the session from its last `SessionStart`.
    pub fn restore(&self, id: SessionId) -> Result<RestoredState> {
        self.reader(id)?.restore()
    }

    /// The session's current head.
    pub fn head(&self, id: SessionId) -> Result<Option<EntryHash>> {
        Ok(self.session(id)?.log.head().map(|(_, h)| h))
    }

    /// If the stored head is `head`, returns `(id, head)`; otherwise forks the
    /// session at `head` and returns the fork's id and head. This keeps two
    /// writers with divergent histories apart.
    pub fn ensure_head_or_fork(
        &self,
        id: SessionId,
        head: EntryHash,
    ) -> Result<(SessionId, EntryHash)> {
        match self.head(id)? {
            Some(h) if h == head => Ok((id, head)),
            _ => self.fork_at(id, head),
        }
    }

    /// Starts a new session holding the source's history up to the entry
    /// whose hash is `at_hash`.
    pub fn fork_at(&self, id: SessionId, at_hash: EntryHash) -> Result<(SessionId, EntryHash)> {
        let snap = self.snapshot(id)?;
        let mut seq = None;
        for rec in snap.iter() {
            let rec = rec?;
            if rec.hash == at_hash {
                seq = Some(rec.seq);
                break;
            }
        }
        let seq =
            seq.ok_or_else(|| Error::not_found(format!("entry {at_hash} in session {id}")))?;
        self.fork_snapshot(id, &snap, seq)
    }

    /// Like [`Store::fork_at`], by seq.
    pub fn fork_at_seq(&self, id: SessionId, seq: u64) -> Result<(SessionId, EntryHash)> {
        let snap = self.snapshot(id)?;
        if seq >= snap.next_seq() {
            return Err(Error::not_found(format!("seq {seq} in session {id}")));
        }
        self.fork_snapshot(id, &snap, seq)
    }

    fn fork_snapshot(
        &self,
        id: SessionId,
        snap: &Snapshot,
        seq: u64,
    ) -> Result<(SessionId, EntryHash)> {
        let mut state = RestoredState::default();
        let mut at_hash = None;
        for rec in snap.iter() {
            let rec = rec?;
            if rec.seq > seq {
                break;
            }
            state.apply_archived(rec.entry);
            at_hash = Some(rec.hash);
        }
        let at_hash =
            at_hash.ok_or_else(|| Error::not_found(format!("seq {seq} in session {id}")))?;
        let origin = SessionOrigin {
            session_id: id,
            at_hash,
        };
        self.start_from_state(&state, Some(origin), None)
    }

    /// Creates a session whose `SessionStart` carries `state`'s history.
    fn start_from_state(
        &self,
        state: &RestoredState,
        forked_from: Option<SessionOrigin>,
        compacted_from: Option<SessionOrigin>,
    ) -> Result<(SessionId, EntryHash)> {
        let new_id = SessionId::new_v7();
        let entry = LogEntry::SessionStart {
            ts: now_ms(),
            system_prompt: state.system_prompt.clone(),
            config: state.config.clone(),
            history: state.history.iter().map(LoggedItem::from).collect(),
            forked_from,
            compacted_from,
        };
        let head = self.create_with_entries(new_id, &[entry])?;
        Ok((new_id, head))
    }

    /// Starts a new session from a compacted state, recording where it came from.
    pub fn create_compacted_session(
        &self,
        state: &RestoredState,
        source: SessionId,
        source_head: EntryHash,
    ) -> Result<(SessionId, EntryHash)> {
        let origin = SessionOrigin {
            session_id: source,
            at_hash: source_head,
        };
        self.start_from_state(state, None, Some(origin))
    }

    /// Creates a new session from wire-form lines, checking any `seq`, `hash`
    /// and `prev_hash` they carry against what the chain computes. Nothing is
    /// written unless every line checks out.
    pub fn import(&self, lines: &[(u64, WireLine)]) -> Result<SessionId> {
        let wire = |line: u64, message: String| Error::Wire {
            line,
            column: 0,
            message,
        };
        let Some((first_line, first)) = lines.first() else {
            return Err(wire(1, "empty input: no entries to import".into()));
        };
        if !matches!(first.entry, LogEntry::SessionStart { .. }) {
            return Err(wire(
                *first_line,
                "the first entry must be a session_start".into(),
            ));
        }
        let mut prev = EntryHash::genesis();
        let mut prev_shown: Option<EntryHash> = None;
        for (i, (line, w)) in lines.iter().enumerate() {
            let seq = i as u64;
            if let Some(s) = w.seq {
                if s != seq {
                    return Err(wire(
                        *line,
                        format!("seq gap: expected seq {seq}, found {s}"),
                    ));
                }
            }
            if let Some(p) = w.prev_hash {
                if p != prev_shown {
                    return Err(wire(
                        *line,
                        "broken chain: prev_hash does not match the previous entry's hash".into(),
                    ));
                }
            }
            let hash = entry_hash(&prev, seq, &w.entry)?;
            if let Some(h) = w.hash {
                if h != hash {
                    return Err(wire(
                        *line,
                        format!("broken chain: hash {h} does not match the computed {hash}"),
                    ));
                }
            }
            prev = hash;
            prev_shown = Some(hash);
        }
        let entries: Vec<LogEntry> = lines.iter().map(|(_, w)| w.entry.clone()).collect();
        let id = SessionId::new_v7();
        self.create_with_entries(id, &entries)?;
        Ok(id)
    }

    /// A consistent view of a session's committed records.
    pub fn snapshot(&self, id: SessionId) -> Result<Snapshot> {
        Ok(self.reader(id)?.snapshot())
    }

    /// A log to read the session from: this store's writer when it has one,
    /// otherwise the writer when it can be had, otherwise (another process
    /// holds the session) a read-only view of what that writer has committed.
    fn reader(&self, id: SessionId) -> Result<Log> {
        match self.session(id) {
            Ok(s) => Ok(s.log),
            Err(Error::Locked { .. }) => Log::open_read_only(self.session_dir(id)),
            Err(e) => Err(e),
        }
    }

    /// The session's log.
    pub fn log(&self, id: SessionId) -> Result<Log> {
        Ok(self.session(id)?.log)
    }

    /// What recovery found when the session was opened.
    pub fn recovery_report(&self, id: SessionId) -> Result<RecoveryReport> {
        Ok(self.session(id)?.log.recovery_report().clone())
    }

    /// Deletes a session durably. Forks of it keep working: they carry their history.
    pub fn delete(&self, id: SessionId) -> Result<()> {
        let dir = self.session_dir(id);
        if !dir.join(CATALOG_FILE).exists() {
            return Err(Error::not_found(format!("session {id}")));
        }
        let open = self.shard(id).lock().open.remove(&id);
        drop(open);
        // Take the writer lock so no other process is writing it.
        let log = Log::open(
            &dir,
            LogOptions {
                prepare_ahead: false,
                ..self.inner.opts.log.clone()
            },
        )?;
        let trash = self
            .inner
            .root
            .join("trash")
            .join(format!("{id}-{}", now_ms()));
        hooked_fs::rename(&dir, &trash, self.hook())?;
        sync_dir(&self.inner.root.join("sessions"), self.hook())?;
        sync_dir(&self.inner.root.join("trash"), self.hook())?;
        drop(log);
        // The listing cache is a copy: forgetting the slot after the durable
        // rename is enough (a stale slot names a directory that is gone).
        let catalog = trash.join(CATALOG_FILE);
        SessionCatalog::open(id, catalog, Some(&self.inner.cache), self.hook())?.forget()?;
        hooked_fs::remove_dir_all(&trash, self.hook())
    }

    /// All sessions, newest first, from the catalog files alone.
    pub fn list(&self) -> Result<Vec<SessionInfo>> {
        self.list_filtered(&ListFilter::default())
    }

    /// Sessions matching `filter`, newest first.
    pub fn list_filtered(&self, filter: &ListFilter) -> Result<Vec<SessionInfo>> {
        let sessions = self.inner.root.join("sessions");
        // Membership from the directory, contents from the listing cache in
        // one read; the catalog files only where the cache cannot be trusted.
        let cached = ListCache::read_all(&self.inner.root)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(&sessions).map_err(io_err("read dir", &sessions))? {
            let entry = entry.map_err(io_err("read dir", &sessions))?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<SessionId>().ok())
            else {
                continue;
            };
            let trusted = cached
                .get(&id)
                .filter(|c| !c.head.dirty || self.is_open_here(id) || self.writer_elsewhere(id));
            let info = match trusted {
                Some(c) => session_info(id, &c.identity, &c.head, c.title.clone()),
                None => match self.info(id)? {
                    Some(info) => info,
                    None => continue,
                },
            };
            if filter.updated_since_ms.is_some_and(|t| info.updated_ms < t)
                || filter
                    .forked_from
                    .is_some_and(|f| info.forked_from.map(|o| o.session_id) != Some(f))
            {
                continue;
            }
            if let Some(needle) = &filter.title_contains {
                let needle = needle.to_lowercase();
                if !info
                    .title
                    .as_deref()
                    .is_some_and(|t| t.to_lowercase().contains(&needle))
                {
                    continue;
                }
            }
            out.push(info);
        }
        out.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        Ok(out)
    }

    /// One session's listing entry; `None` if it does not exist (or is half-created).
    pub fn info(&self, id: SessionId) -> Result<Option<SessionInfo>> {
        let path = self.session_dir(id).join(CATALOG_FILE);
        let record = match catalog::read(&path) {
            Ok(r) => r,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let Some(identity) = record.identity else {
            return Ok(None);
        };
        let head = match record.head {
            Some(h) if !h.dirty || self.is_open_here(id) || self.writer_elsewhere(id) => h,
            // Stale after a crash (or never written): rebuild from the log.
            _ => self
                .session(id)?
                .head_slot(true, record.head.map(|h| h.updated_ms)),
        };
        if !head.dirty {
            self.backfill_cache(CachedSession {
                id,
                head,
                title: record.title.clone(),
                identity: identity.clone(),
            });
        }
        Ok(Some(session_info(id, &identity, &head, record.title)))
    }

    /// Copies a clean catalog into the listing cache, so the next `list`
    /// need not open the file. Only while holding the session's writer lock
    /// for a moment, so no writer's dirty slot is overwritten with a clean,
    /// older one. Best effort: the cache is only a copy.
    fn backfill_cache(&self, entry: CachedSession) {
        let Ok(lock) = File::open(self.session_dir(entry.id).join("LOCK")) else {
            return;
        };
        if lock.try_lock().is_ok() {
            let _ = self.inner.cache.put(&entry);
        }
    }

    fn is_open_here(&self, id: SessionId) -> bool {
        self.shard(id).lock().open.contains_key(&id)
    }

    fn writer_elsewhere(&self, id: SessionId) -> bool {
        let path = self.session_dir(id).join("LOCK");
        match File::open(&path) {
            Ok(f) => matches!(f.try_lock_shared(), Err(fs::TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// Entries of a session from `from_seq` on, including those committed
    /// later: a blocking iterator, woken by the writer.
    pub fn subscribe(&self, id: SessionId, from_seq: u64) -> Result<Subscription> {
        Ok(Subscription {
            log: self.session(id)?.log,
            next: from_seq,
        })
    }
}

fn session_info(
    id: SessionId,
    identity: &Identity,
    head: &HeadSlot,
    title: Option<String>,
) -> SessionInfo {
    let entries = head.next_seq - head.first_seq;
    SessionInfo {
        id,
        created_ms: identity.created_ms,
        updated_ms: head.updated_ms,
        title,
        entries,
        bytes: head.bytes,
        head: (entries > 0).then_some(head.head),
        forked_from: identity.forked_from,
        compacted_from: identity.compacted_from,
    }
}

fn close_session(s: OpenSession) -> Result<()> {
    let handle = SessionHandle {
        id: SessionId([0; 16]),
        log: s.log.clone(),
        catalog: s.catalog,
    };
    // A failed close leaves the catalog dirty: `list` then reads the log.
    s.log.close()?;
    // Closing is not a write: keep the time of the last one.
    let updated_ms = handle.catalog.updated_ms();
    handle.touch(false, Some(updated_ms))
}

fn user_text(item: &LoggedItem) -> Option<String> {
    match item {
        LoggedItem::Message {
            role: crate::schema::LoggedRole::User,
            ..
        } => {
            let t = item.clone().into_item().text().unwrap_or_default();
            (!t.trim().is_empty()).then_some(t)
        }
        _ => None,
    }
}

/// The hash an entry gets at `seq` after `prev`: the same bytes the log writes.
pub fn entry_hash(prev: &EntryHash, seq: u64, entry: &LogEntry) -> Result<EntryHash> {
    crate::log::entry_hash(prev, seq, entry)
}

impl SessionHandle {
    /// The session id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The session's log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    fn head_slot(&self, dirty: bool, updated_ms: Option<u64>) -> HeadSlot {
        let snap = self.log.snapshot();
        HeadSlot {
            dirty,
            next_seq: snap.next_seq(),
            bytes: snap.bytes(),
            updated_ms: updated_ms.unwrap_or_else(now_ms),
            first_seq: snap.first_seq(),
            head: snap.head().map(|(_, h)| h).unwrap_or_default(),
        }
    }

    fn touch(&self, dirty: bool, updated_ms: Option<u64>) -> Result<()> {
        self.catalog.set_head(self.head_slot(dirty, updated_ms))
    }
}

/// A blocking iterator over a session's entries, present and future.
pub struct Subscription {
    log: Log,
    next: u64,
}

impl Subscription {
    /// The next entry, waiting at most `timeout`; `None` on timeout.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<SubscribedEntry>> {
        self.next_within(Some(timeout))
    }

    fn next_within(&mut self, timeout: Option<Duration>) -> Option<Result<SubscribedEntry>> {
        if !self.log.wait_for(self.next, timeout) {
            return None;
        }
        let snap = self.log.snapshot();
        let rec = snap.iter_from(self.next).next()?.map(|v| SubscribedEntry {
            seq: v.seq,
            hash: v.hash,
            prev_hash: v.prev_hash,
            entry: v.entry.to_entry(),
        });
        if let Ok(e) = &rec {
            self.next = e.seq + 1;
        }
        Some(rec)
    }
}

/// One entry yielded by a [`Subscription`].
#[derive(Debug, Clone, PartialEq)]
pub struct SubscribedEntry {
    /// Sequence number.
    pub seq: u64,
    /// Its chain hash.
    pub hash: EntryHash,
    /// The previous entry's hash (the genesis value for seq 0).
    pub prev_hash: EntryHash,
    /// The entry.
    pub entry: LogEntry,
}

impl SubscribedEntry {
    /// The wire-form line of this entry.
    pub fn wire_line(&self) -> String {
        let prev = (self.seq > 0).then_some(&self.prev_hash);
        crate::export::entry_line(self.seq, &self.hash, prev, &self.entry)
    }
}

impl Iterator for Subscription {
    type Item = Result<SubscribedEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_within(None)
    }
}
