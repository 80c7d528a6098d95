//! Forks by reference: creating one, reading the history it inherits from
//! its parent, checking the link, and what deleting a parent does.
//!
//! A fork's log starts with a `ForkedFrom` entry naming its parent, the
//! parent's seq and that record's hash; nothing of the parent is copied.
//! Its history is read from the parent's log, from the parent's last
//! `SessionStart` at or before the seq, each time it is restored, and the
//! record at the seq must still have the recorded hash.
//!
//! A parent is never deleted under its forks. Each fork is registered in
//! its parent's directory (`forks/<fork id>`, durable before the fork is
//! created, under the `forks/LOCK` flock that a delete takes too). Deleting
//! a session that live forks name moves it to `root/retired/`: hidden from
//! `list`, `exists` and every writer, still read by its forks. The delete
//! of the last fork collects it, and so does every store's housekeeping at
//! its first write (the sweep finishes what a crash interrupted). See
//! DESIGN.md, "Forks".

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::payloads::plan;
use super::{now_ms, Store};
use crate::catalog::CATALOG_FILE;
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::export::entry_line;
use crate::fs::{self as hooked_fs, io_err, sync_dir, HookedFile};
use crate::log::{entry_hash, Log, Snapshot, LOCK_FILE};
use crate::schema::{LogEntry, LoggedItem, SessionId};
use crate::state::{ForkLink, RestoredState};

/// The directory, in a session's own, where its forks are registered.
const FORKS_DIR: &str = "forks";
/// The flock in [`FORKS_DIR`] that fork creation and deletion take.
const FORKS_LOCK: &str = "LOCK";
pub(crate) use crate::payload::RETIRED_DIR;

/// The first segment of a fork's log, where it is reserved (a log that
/// syncs; a sparse one takes the blocks it holds): the smallest a log
/// makes, since a fork starts with one small record.
pub(super) const FORK_FIRST_SEGMENT_BYTES: u64 = 8 << 10;

/// How long a chain of forks (a fork of a fork of …) may be. A store never
/// makes a longer one by itself; a chain that loops or passes this is
/// [`Error::BrokenFork`].
///
/// Example: [`Store::fork_at`].
pub const MAX_FORK_DEPTH: usize = 4096;

/// What [`Store::delete`] did.
///
/// ```
/// use session_store::{Deletion, Item, RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// store.save_delta(id, &mut head, &[Item::user_text("Draft the release notes.")])?;
/// let (fork, _) = store.fork_at(id, head)?;
///
/// // The fork still reads the parent's history: the parent is retired.
/// assert_eq!(store.delete(id)?, Deletion::Retired { forks: vec![fork] });
/// assert!(!store.exists(id));
/// assert_eq!(store.restore(fork)?.history, [Item::user_text("Draft the release notes.")]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// The session is gone.
    Removed,
    /// Live forks read the session's history: it is retired (hidden from
    /// listing and every writer) and removed with the last of them.
    Retired {
        /// The forks that keep it.
        forks: Vec<SessionId>,
    },
}

/// One entry of a session's self-contained history, as
/// [`Store::export_entries`] gives it.
///
/// Example: [`Store::export_entries`].
#[derive(Debug)]
pub struct ExportedEntry<'a> {
    /// Its seq in the exported chain.
    pub seq: u64,
    /// Its hash in the exported chain.
    pub hash: EntryHash,
    /// The hash before it; `None` at seq 0.
    pub prev_hash: Option<EntryHash>,
    /// The entry.
    pub entry: &'a LogEntry,
}

impl ExportedEntry<'_> {
    /// The entry's wire line (no newline).
    ///
    /// Example: [`Store::export_entries`].
    pub fn wire_line(&self) -> String {
        entry_line(self.seq, &self.hash, self.prev_hash.as_ref(), self.entry)
    }
}

/// One parent to read on the way to a fork's history: its snapshot, the seq to
/// replay from, and the link (naming the seq to stop at) that led to it.
struct Level {
    snap: Snapshot,
    from: u64,
    child: SessionId,
    link: ForkLink,
}

impl Store {
    /// Starts a fork of the session at the entry whose hash is `at_hash`
    /// (its head, or any entry of its history, inherited ones included):
    /// a new session whose log names the parent, the entry's seq and hash,
    /// and copies nothing. Returns the fork's id and head.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Name the new service.")])?;
    /// let asked = head;
    /// store.save_delta(id, &mut head, &[Item::assistant_text("Call it Beacon.")])?;
    ///
    /// // Another answer to the same question; the first stays as it was.
    /// let (fork, mut fork_head) = store.fork_at(id, asked)?;
    /// store.save_delta(fork, &mut fork_head, &[Item::assistant_text("Call it Lantern.")])?;
    /// assert_eq!(store.restore(fork)?.history[1], Item::assistant_text("Call it Lantern."));
    /// assert_eq!(store.forks_of(id), [fork]);
    /// # Ok(()) }
    /// ```
    pub fn fork_at(&self, id: SessionId, at_hash: EntryHash) -> Result<(SessionId, EntryHash)> {
        let (parent, seq) = self.find_entry(id, at_hash)?;
        self.fork_by_reference(parent, seq, at_hash)
    }

    /// Like [`Store::fork_at`], by the seq of an entry of the session's own log.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Plan the migration.")])?;
    /// store.save_delta(id, &mut head, &[Item::assistant_text("Step 1: back up.")])?;
    /// // Seq 0 is the `SessionStart`, seq 1 the question.
    /// let (fork, _) = store.fork_at_seq(id, 1)?;
    /// assert_eq!(store.restore(fork)?.history, [Item::user_text("Plan the migration.")]);
    /// # Ok(()) }
    /// ```
    pub fn fork_at_seq(&self, id: SessionId, seq: u64) -> Result<(SessionId, EntryHash)> {
        let snap = self.snapshot(id)?;
        let missing = || Error::not_found(format!("seq {seq} in session {id}"));
        if seq < snap.first_seq() || seq >= snap.next_seq() {
            return Err(missing());
        }
        let hash = snap.iter_from(seq).next().ok_or_else(missing)??.hash;
        self.fork_by_reference(id, seq, hash)
    }

    /// The session and seq that hold `hash` in `id`'s history: its own log
    /// (the head at once, else a walk), else the history it inherits.
    fn find_entry(&self, id: SessionId, hash: EntryHash) -> Result<(SessionId, u64)> {
        let mut session = id;
        let mut limit = u64::MAX;
        for _ in 0..=MAX_FORK_DEPTH {
            let snap = self.read_session(session)?.snapshot();
            if let Some((seq, h)) = snap.head().filter(|(s, _)| *s <= limit) {
                if h == hash {
                    return Ok((session, seq));
                }
            }
            for rec in snap.iter() {
                let rec = rec?;
                if rec.seq > limit {
                    break;
                }
                if rec.hash == hash {
                    return Ok((session, rec.seq));
                }
            }
            match snap.fork_link()? {
                Some(link) => {
                    session = link.parent;
                    limit = link.seq;
                }
                None => break,
            }
        }
        Err(Error::not_found(format!("entry {hash} in session {id}")))
    }

    /// Creates a fork of `parent` at `seq` (whose hash is `hash`),
    /// registered in the parent first.
    fn fork_by_reference(
        &self,
        parent: SessionId,
        seq: u64,
        hash: EntryHash,
    ) -> Result<(SessionId, EntryHash)> {
        self.writable()?;
        let title = self.info(parent).ok().flatten().and_then(|i| i.title);
        let dir = self.session_dir(parent);
        let gone = || Error::not_found(format!("session {parent}"));
        if !dir.join(CATALOG_FILE).exists() {
            return Err(gone());
        }
        // The prefix the fork names must survive whatever the fork does: on
        // a `Buffered` store, what this store appended to the parent is
        // made durable first (nothing to do when it already is).
        self.sync(parent)?;
        let fork = SessionId::new_v7();
        let (lock, made) = self.lock_forks(&dir).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => gone(),
            e => e,
        })?;
        // A delete of the parent holds this lock across its rename: once
        // it is ours, the parent is either still here or gone for good.
        if !dir.join(CATALOG_FILE).exists() {
            return Err(gone());
        }
        // The registration goes first. It is made durable by the fork's
        // first sync, before the fork's `CREATING` marker goes; until then
        // a marked fork whose registration a crash lost is no session
        // (`holds_entries`), so no crash leaves a fork its parent does not
        // know of. A new registry's own name is made durable now.
        let forks = dir.join(FORKS_DIR);
        let registration = forks.join(fork.to_string());
        HookedFile::create(&registration, self.hook())?;
        if made {
            sync_dir(&dir, self.hook())?;
        }
        let entry = LogEntry::ForkedFrom {
            ts: now_ms(),
            parent,
            parent_seq: seq,
            parent_hash: hash,
        };
        let created = self.create_with_entries_as(fork, &[entry], None, title);
        if created.is_err() {
            let _ = hooked_fs::remove_file(&registration, self.hook());
        }
        drop(lock);
        Ok((fork, created?))
    }

    /// Registers `fork` in `parent`'s registry of forks (a fork restored
    /// from an archive, whose parent is in this store), durably: the
    /// registration file, then `fsync` of the registry (and of the parent's
    /// directory when the registry is new). Removed again by
    /// [`Store::unregister_fork`] if the fork does not land.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn register_fork(&self, parent: SessionId, fork: SessionId) -> Result<()> {
        self.writable()?;
        let dir = self.session_dir(parent);
        if !dir.join(CATALOG_FILE).exists() {
            return Err(Error::not_found(format!("session {parent}")));
        }
        let (lock, made) = self.lock_forks(&dir)?;
        let forks = dir.join(FORKS_DIR);
        HookedFile::create(&forks.join(fork.to_string()), self.hook())?;
        sync_dir(&forks, self.hook())?;
        if made {
            sync_dir(&dir, self.hook())?;
        }
        drop(lock);
        Ok(())
    }

    /// Removes a registration [`Store::register_fork`] made.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn unregister_fork(&self, parent: SessionId, fork: SessionId) {
        let path = self
            .session_dir(parent)
            .join(FORKS_DIR)
            .join(fork.to_string());
        let _ = hooked_fs::remove_file(&path, self.hook());
    }

    /// Takes the fork registry's flock in the session directory `dir`,
    /// making the registry if needed; `true` when this call made it.
    fn lock_forks(&self, dir: &Path) -> Result<(fs::File, bool)> {
        let forks = dir.join(FORKS_DIR);
        let made = hooked_fs::create_dir_new(&forks, self.hook())?;
        let path = forks.join(FORKS_LOCK);
        let lock = HookedFile::open_or_create(&path, self.hook())?.into_file();
        lock.lock().map_err(io_err("lock", &path))?;
        Ok((lock, made))
    }

    /// The registered forks of the session in `dir` that still exist (as
    /// sessions, or retired themselves because forks of theirs do).
    fn live_forks(&self, dir: &Path) -> Vec<SessionId> {
        let Ok(entries) = fs::read_dir(dir.join(FORKS_DIR)) else {
            return Vec::new();
        };
        let mut live: Vec<SessionId> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<SessionId>().ok())
            .filter(|&f| self.exists(f) || self.is_retired(f))
            .collect();
        live.sort();
        live
    }

    fn retired_dir(&self, id: SessionId) -> PathBuf {
        self.inner.root.join(RETIRED_DIR).join(id.to_string())
    }

    /// Where the registry of `parent`'s forks may be: in `sessions/`, or in
    /// `retired/` once the parent is deleted.
    pub(super) fn registry_dirs(&self, parent: SessionId) -> [PathBuf; 2] {
        [
            self.session_dir(parent).join(FORKS_DIR),
            self.retired_dir(parent).join(FORKS_DIR),
        ]
    }

    /// Whether `id` is a retired session (deleted, still read by forks).
    pub(super) fn is_retired(&self, id: SessionId) -> bool {
        self.retired_dir(id).join(CATALOG_FILE).exists()
    }

    /// The forks of a session that read its history (its registered forks
    /// that exist), sorted.
    ///
    /// Example: [`Store::fork_at`].
    pub fn forks_of(&self, id: SessionId) -> Vec<SessionId> {
        self.live_forks(&self.session_dir(id))
    }

    /// The log to read a session from, a retired one included (forks
    /// still read those).
    fn read_session(&self, id: SessionId) -> Result<Log> {
        match self.reader(id) {
            Err(Error::NotFound { .. }) if self.is_retired(id) => {
                Log::open_read_only_in_store(self.retired_dir(id), self.inner.payloads.clone())
            }
            r => r,
        }
    }

    /// Replays a session's live history: for a fork whose history still
    /// starts in its parent, the parent's first (following the chain of
    /// forks), then its own entries.
    pub(super) fn restore_session(&self, id: SessionId) -> Result<RestoredState> {
        let log = self.reader(id)?;
        let snap = log.snapshot();
        let base = match snap.restore_link()? {
            Some(link) => self.inherited(id, link)?,
            None => RestoredState::default(),
        };
        log.restore_onto(&snap, base)
    }

    /// The history a fork starts with: its parent's at the link's seq,
    /// as a copy-fork's `SessionStart` would hold it (system prompt,
    /// config and items). Every parent on the way is read from its last
    /// `SessionStart` at or before the seq, and every link is checked.
    fn inherited(&self, fork: SessionId, link: ForkLink) -> Result<RestoredState> {
        let mut state = RestoredState::default();
        for level in self.chain(fork, link)?.iter().rev() {
            state = replay_to_link(level, state)?;
        }
        Ok(state)
    }

    /// The parents to read for a fork's history, from its own parent up to
    /// the first whose log has a `SessionStart` at or before the seq its
    /// child names. Each parent must exist and hold that seq; the chain
    /// must not loop or pass [`MAX_FORK_DEPTH`].
    fn chain(&self, fork: SessionId, link: ForkLink) -> Result<Vec<Level>> {
        let mut levels: Vec<Level> = Vec::new();
        let mut seen = HashSet::from([fork]);
        let (mut child, mut link) = (fork, link);
        loop {
            let broken = |what: String| Error::BrokenFork {
                session: child,
                parent: link.parent,
                seq: link.seq,
                what,
            };
            if !seen.insert(link.parent) {
                return Err(broken("the chain of forks loops".into()));
            }
            if levels.len() >= MAX_FORK_DEPTH {
                return Err(broken(format!(
                    "the chain of forks is deeper than {MAX_FORK_DEPTH}"
                )));
            }
            let snap = match self.read_session(link.parent) {
                Err(Error::NotFound { .. }) => {
                    return Err(broken("the parent session is missing".into()))
                }
                r => r?.snapshot(),
            };
            if link.seq < snap.first_seq() || link.seq >= snap.next_seq() {
                return Err(broken(format!(
                    "the parent's log ends before it (next seq {})",
                    snap.next_seq()
                )));
            }
            let start = snap.session_start_at_or_before(link.seq)?;
            let up = match start {
                Some(_) => None,
                None => Some(snap.fork_link()?.ok_or_else(|| {
                    broken("the parent's log has no session start before it".into())
                })?),
            };
            let from = start.unwrap_or(snap.first_seq());
            levels.push(Level {
                snap,
                from,
                child,
                link,
            });
            match up {
                Some(up) => (child, link) = (link.parent, up),
                None => return Ok(levels),
            }
        }
    }

    /// Checks a session's fork link, and every link up its chain of
    /// parents: each parent exists and its record at the named seq has the
    /// recorded hash. `Ok(None)` for a session that is no fork by
    /// reference; [`Error::BrokenFork`] names the first link that fails.
    ///
    /// ```
    /// use session_store::{RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let (fork, _) = store.fork_at(id, head)?;
    /// let link = store.verify_fork_link(fork)?.expect("a fork by reference");
    /// assert_eq!((link.parent, link.hash), (id, head));
    /// assert_eq!(store.verify_fork_link(id)?, None);
    /// # Ok(()) }
    /// ```
    pub fn verify_fork_link(&self, id: SessionId) -> Result<Option<ForkLink>> {
        let Some(first) = self.snapshot(id)?.fork_link()? else {
            return Ok(None);
        };
        for level in self.chain(id, first)? {
            let found = level
                .snap
                .iter_from(level.link.seq)
                .next()
                .ok_or_else(|| no_record(&level))??
                .hash;
            if found != level.link.hash {
                return Err(hash_mismatch(level.child, &level.link, found));
            }
        }
        Ok(Some(first))
    }

    /// Calls `f` with each entry of the session's history as a standalone
    /// session holds it: the log's entries, except that a fork's leading
    /// `ForkedFrom` becomes a `SessionStart` carrying the history it
    /// inherits (with `forked_from` naming the parent), and the chain is
    /// computed afresh from genesis. What [`Store::export`] writes, and what
    /// imports as a session that needs no other. Returns the entries.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Check the disk usage.")])?;
    /// let (fork, _) = store.fork_at(id, head)?;
    ///
    /// // The fork's export stands alone: its first line carries the history.
    /// let mut lines = Vec::new();
    /// store.export_entries(fork, |entry| {
    ///     lines.push(entry.wire_line());
    ///     Ok(())
    /// })?;
    /// assert!(lines[0].contains(r#""kind":"session_start""#));
    /// assert!(lines[0].contains("Check the disk usage."));
    /// # Ok(()) }
    /// ```
    pub fn export_entries(
        &self,
        id: SessionId,
        mut f: impl FnMut(ExportedEntry<'_>) -> Result<()>,
    ) -> Result<u64> {
        self.fetch_if_evicted(id, 0)?;
        let snap = self.snapshot(id)?;
        let Some(link) = snap.fork_link()? else {
            let mut n = 0;
            for rec in snap.iter() {
                let rec = rec?;
                f(ExportedEntry {
                    seq: rec.seq,
                    hash: rec.hash,
                    prev_hash: (rec.seq > 0).then_some(rec.prev_hash),
                    entry: &rec.to_entry()?,
                })?;
                n += 1;
            }
            return Ok(n);
        };
        let base = self.inherited(id, link)?;
        let mut prev: Option<EntryHash> = None;
        let mut n = 0u64;
        for rec in snap.iter() {
            let rec = rec?;
            let entry = if rec.seq == snap.first_seq() {
                LogEntry::SessionStart {
                    ts: rec.ts,
                    system_prompt: base.system_prompt.clone(),
                    config: base.config.clone(),
                    history: base.history.iter().map(LoggedItem::from).collect(),
                    forked_from: Some(link.origin()),
                    compacted_from: None,
                }
            } else {
                rec.to_entry()?
            };
            // The hash of the entry as this store would keep it (its large
            // items as references), so that an import into a store of the
            // same threshold keeps them once again (`Store::import`).
            let stored = plan(&entry, self.payload_threshold());
            let kept = stored.as_ref().map_or(&entry, |p| &p.entry);
            let hash = entry_hash(&prev.unwrap_or_else(EntryHash::genesis), n, kept)?;
            f(ExportedEntry {
                seq: n,
                hash,
                prev_hash: prev,
                entry: &entry,
            })?;
            prev = Some(hash);
            n += 1;
        }
        Ok(n)
    }

    /// Deletes a session durably. Forks of it keep working: a session that
    /// forks by reference read is retired, not removed (below).
    ///
    /// A refused delete changes nothing: [`Error::Locked`] while a handle of
    /// this store (a [`Subscription`](crate::Subscription), a
    /// [`SessionHandle`](crate::SessionHandle), a [`Log`]) or a writer in
    /// another process holds the session. Deleting needs no readable log: a
    /// damaged session is deleted like any other. Once the session's
    /// directory is durably in `trash/`, the delete is done and returns
    /// `Ok`; what is left in the trash is removed now or by the next
    /// store's housekeeping (at its first write).
    ///
    /// A session whose history forks still read is retired rather than
    /// removed, and the result says which ([`Deletion`]). A retired session
    /// is hidden from `list`, `info`, `exists` and every writer, and removed
    /// with the last fork that reads it (or by the housekeeping of the next
    /// store's first write after that).
    ///
    /// ```
    /// use session_store::{Deletion, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, _head) = store.create_session(None, RequestConfig::model("m"), &[])?;
    /// assert_eq!(store.delete(id)?, Deletion::Removed);
    /// assert!(!store.exists(id));
    /// # Ok(()) }
    /// ```
    pub fn delete(&self, id: SessionId) -> Result<Deletion> {
        let link = Log::open_read_only(self.session_dir(id))
            .ok()
            .and_then(|l| l.snapshot().fork_link().ok().flatten());
        let done = self.delete_or_retire(id)?;
        if let (Deletion::Removed, Some(link)) = (&done, link) {
            // Tidy the parent's registry, then collect it if it was kept
            // for this fork alone.
            for dir in [self.session_dir(link.parent), self.retired_dir(link.parent)] {
                let registration = dir.join(FORKS_DIR).join(id.to_string());
                if registration.exists() {
                    let _ = hooked_fs::remove_file(&registration, self.hook());
                }
            }
            self.collect_retired(link.parent);
        }
        Ok(done)
    }

    /// With `id`'s writer lock held (its directory `dir`): takes the fork
    /// registry's lock, and retires the session if live forks read it.
    /// `Ok(None)` when none do: the caller removes it, holding the
    /// returned lock across its rename so that no fork is created meanwhile.
    pub(super) fn retire_if_forked(
        &self,
        id: SessionId,
        dir: &Path,
    ) -> Result<std::result::Result<Deletion, fs::File>> {
        let (lock, _) = self.lock_forks(dir)?;
        let forks = self.live_forks(dir);
        if forks.is_empty() {
            return Ok(Err(lock));
        }
        let retired = self.inner.root.join(RETIRED_DIR);
        if !hooked_fs::dir_exists(&retired)? {
            hooked_fs::create_dir(&retired, self.hook())?;
            sync_dir(&self.inner.root, self.hook())?;
        }
        hooked_fs::rename(dir, &self.retired_dir(id), self.hook())?;
        sync_dir(&self.inner.root.join("sessions"), self.hook())?;
        sync_dir(&retired, self.hook())?;
        drop(lock);
        Ok(Ok(Deletion::Retired { forks }))
    }

    /// Removes the retired session `id` if no live fork reads it any more,
    /// then its own parent the same way. Best effort: what fails or is
    /// busy is left for the next store's housekeeping.
    fn collect_retired(&self, id: SessionId) {
        let mut next = Some(id);
        let mut steps = 0;
        while let Some(id) = next.take() {
            steps += 1;
            if steps > MAX_FORK_DEPTH {
                return;
            }
            let dir = self.retired_dir(id);
            if !dir.exists() {
                return;
            }
            let Ok(writer) = hooked_fs::lock_writer(&dir.join(LOCK_FILE), self.hook()) else {
                return;
            };
            let Ok((lock, _)) = self.lock_forks(&dir) else {
                return;
            };
            if !self.live_forks(&dir).is_empty() {
                return;
            }
            let link = Log::open_read_only(&dir)
                .ok()
                .and_then(|l| l.snapshot().fork_link().ok().flatten());
            let trash = self
                .inner
                .root
                .join("trash")
                .join(format!("{id}-{}", now_ms()));
            let moved = hooked_fs::rename(&dir, &trash, self.hook())
                .and_then(|()| sync_dir(&self.inner.root.join(RETIRED_DIR), self.hook()))
                .and_then(|()| sync_dir(&self.inner.root.join("trash"), self.hook()));
            if moved.is_err() {
                return;
            }
            let _ = hooked_fs::remove_dir_all(&trash, self.hook());
            drop((lock, writer));
            next = link.map(|l| l.parent);
        }
    }

    /// Collects every retired session that no live fork reads any more:
    /// what a crash between a fork's delete and its parent's removal left.
    pub(super) fn sweep_retired(&self) {
        let Ok(entries) = fs::read_dir(self.inner.root.join(RETIRED_DIR)) else {
            return;
        };
        for id in entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<SessionId>().ok())
        {
            self.collect_retired(id);
        }
    }
}

/// Makes a fork's registration durable: `fsync` of its parent's registry,
/// wherever the parent is (a retire may move it meanwhile: the other place
/// is tried when the first is gone).
pub(super) fn sync_registry(registries: &[PathBuf; 2], hook: &crate::fs::Hook) -> Result<()> {
    let (first, other) = match registries[0].exists() {
        true => (&registries[0], &registries[1]),
        false => (&registries[1], &registries[0]),
    };
    match sync_dir(first, hook) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            sync_dir(other, hook)
        }
        r => r,
    }
}

/// Whether the log in the session directory `dir`, if it is a fork's, is
/// registered in its parent (in `sessions/` or `retired/` of the same
/// store). A log that is no fork, or whose first record does not read, is.
pub(super) fn fork_is_registered(dir: &Path, log: &Log) -> bool {
    let Ok(Some(link)) = log.snapshot().fork_link() else {
        return true;
    };
    let (Some(name), Some(root)) = (dir.file_name(), dir.parent().and_then(Path::parent)) else {
        return true;
    };
    ["sessions", RETIRED_DIR].iter().any(|place| {
        root.join(place)
            .join(link.parent.to_string())
            .join(FORKS_DIR)
            .join(name)
            .exists()
    })
}

/// Replays `level`'s parent from `level.from` through the link's seq onto
/// `base`, checking that record's hash; returns the history a fork
/// inherits there (system prompt, config, items), as a copy-fork's
/// `SessionStart` held it.
fn replay_to_link(level: &Level, base: RestoredState) -> Result<RestoredState> {
    let Level {
        snap,
        from,
        child,
        link,
    } = level;
    let mut state = base;
    for rec in snap.iter_from(*from) {
        let rec = rec?;
        state.apply_record(&rec)?;
        if rec.seq == link.seq {
            if rec.hash != link.hash {
                return Err(hash_mismatch(*child, link, rec.hash));
            }
            return Ok(RestoredState {
                system_prompt: state.system_prompt,
                config: state.config,
                history: state.history,
                ..RestoredState::default()
            });
        }
    }
    Err(no_record(level))
}

/// The parent's log has no record at the seq the link names (its bounds
/// were checked: a record there is unreadable or the log ends early).
fn no_record(level: &Level) -> Error {
    Error::BrokenFork {
        session: level.child,
        parent: level.link.parent,
        seq: level.link.seq,
        what: "the parent's log has no record there".into(),
    }
}

fn hash_mismatch(child: SessionId, link: &ForkLink, found: EntryHash) -> Error {
    Error::BrokenFork {
        session: child,
        parent: link.parent,
        seq: link.seq,
        what: format!(
            "the parent's record has hash {found}, the fork recorded {}",
            link.hash
        ),
    }
}
