//! Creating and deleting sessions.
//!
//! A session is created in place, in `sessions/<id>/`, which its creator
//! makes with one `mkdir` (two creators of one id: one makes it) and holds
//! by its writer `LOCK` (one takes it). A `CREATING` file made first marks
//! the creation as not yet durable: on a `Buffered` store nothing is synced
//! until the session's first sync, which makes the log, the catalog and
//! the names durable and only then removes the marker. A directory holding
//! the marker whose log has no entry is what a crash left of a creation
//! that was never durable: it is no session, and its id is free. A deleted
//! session is renamed into `trash/` first, so a crash never brings it back.

use std::path::Path;
use std::sync::Arc;

use super::forks::{fork_is_registered, sync_registry, Deletion, FORK_FIRST_SEGMENT_BYTES};
use super::payloads::payload_count;
use super::title::user_text;
use super::{now_ms, SessionHandle, Store};
use crate::catalog::{self, Identity, SessionCatalog, CATALOG_FILE};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, sync_dir, HookedFile};
use crate::item::Item;
use crate::log::{Durability, ExpectHead, FirstSync, Log, ReleaseHint, LOCK_FILE};
use crate::payload::PayloadArea;
use crate::schema::{LogEntry, LoggedItem, RequestConfig, SessionId, SessionOrigin};

/// The file that marks a session whose creation is not durable yet.
pub(super) const CREATING_FILE: &str = "CREATING";

/// How old a staged directory without a lock file must be to be swept.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(600);

/// Claims of one id's directory that may meet a leftover or lose a race
/// before one of them settles who creates it.
const CLAIM_TRIES: usize = 4;

/// What a session directory holds, as its lock holder finds it.
enum Found {
    /// A session, finished or with its creation pending.
    Session,
    /// Nothing but what an unfinished creation left: free for the taking.
    Leftover,
}

impl Store {
    /// Creates a session with a fresh UUID v7 id. Returns it and its head.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// // A session that starts from a conversation held elsewhere.
    /// let earlier = [Item::user_text("Where is the config?"), Item::assistant_text("In config.toml.")];
    /// let config = RequestConfig { reasoning_effort: Some("low".into()), ..RequestConfig::model("gpt-5") };
    /// let (id, head) = store.create_session(Some("You are a coding agent."), config, &earlier)?;
    ///
    /// let state = store.restore(id)?;
    /// assert_eq!(state.history, earlier);
    /// assert_eq!(state.config.model.as_deref(), Some("gpt-5"));
    /// assert_eq!(state.head, Some(head));
    /// # Ok(()) }
    /// ```
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
    ///
    /// On a [`Durability::Buffered`] store this syncs nothing: the session
    /// becomes durable with its first sync (a `Sync` save, [`Log::sync`],
    /// or closing it), and a power loss before that loses it whole, never
    /// leaving a session that does not read. On a `Sync` store it returns
    /// once the session is durable. Creations of different ids do not wait
    /// for each other; of two creators of one id, in threads or processes,
    /// one succeeds and the other gets [`Error::InvalidInput`].
    ///
    /// ```
    /// use session_store::{Error, RequestConfig, SessionId, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// // The id the runtime already gave the conversation.
    /// let id: SessionId = "0199ffff-0000-7000-8000-000000000001".parse()?;
    /// store.create_session_with_id(id, None, RequestConfig::model("gpt-5"), &[])?;
    /// let again = store.create_session_with_id(id, None, RequestConfig::model("gpt-5"), &[]);
    /// assert!(matches!(again, Err(Error::InvalidInput { .. })));
    /// # Ok(()) }
    /// ```
    pub fn create_session_with_id(
        &self,
        id: SessionId,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
    ) -> Result<EntryHash> {
        self.create_with_entries(id, &[first_entry(system_prompt, config, history)])
    }

    /// Creates a session with a fresh id whose saves default to
    /// `durability` rather than the store's option: a `Sync` session in a
    /// `Buffered` store (or the other way round). The choice is kept in the
    /// session's catalog, so it holds after a reopen; a call's own
    /// durability ([`crate::Turn::durability`]) still overrides it.
    ///
    /// ```
    /// use session_store::{Durability, Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?; // `Buffered` by default
    /// // A session whose every save is on disk before it returns: one that
    /// // runs payments, say.
    /// let config = RequestConfig::model("gpt-5");
    /// let (id, mut head) = store.create_session_with_durability(None, config, &[], Durability::Sync)?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Pay invoice 2291.")])?;
    /// # Ok(()) }
    /// ```
    pub fn create_session_with_durability(
        &self,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
        durability: Durability,
    ) -> Result<(SessionId, EntryHash)> {
        let id = SessionId::new_v7();
        let entry = first_entry(system_prompt, config, history);
        let head = self.create_with_entries_as(id, &[entry], Some(durability), None)?;
        Ok((id, head))
    }

    /// Creates a session whose log starts with `entries` (the first a `SessionStart`).
    pub(super) fn create_with_entries(
        &self,
        id: SessionId,
        entries: &[LogEntry],
    ) -> Result<EntryHash> {
        self.create_with_entries_as(id, entries, None, None)
    }

    /// [`Store::create_with_entries`] with the session's own durability.
    pub(crate) fn create_with_entries_as(
        &self,
        id: SessionId,
        entries: &[LogEntry],
        durability: Option<Durability>,
        title: Option<String>,
    ) -> Result<EntryHash> {
        self.create_entries(id, entries, durability, title, false)
    }

    /// Creates a session whose log starts with `entries`: with their large
    /// items moved to the payload area, or, `exact`, as they are (an import,
    /// whose entries already hold the references its hashes commit to, and
    /// whose payloads its caller wrote and keeps locked).
    pub(super) fn create_entries(
        &self,
        id: SessionId,
        entries: &[LogEntry],
        durability: Option<Durability>,
        title: Option<String>,
        exact: bool,
    ) -> Result<EntryHash> {
        self.writable()?;
        let (history, forked_from, compacted_from) = origin_of(entries)?;
        let dir = self.session_dir(id);
        // The refusals that need no look into `sessions/`, before anything
        // is made or locked. A retired session's id stays taken until it
        // is collected: its forks read it by that id. A session that
        // exists is refused by `claim`, whose `mkdir` finds its directory.
        if self.is_open_here(id) || self.is_retired(id) {
            return Err(already_exists(id));
        }
        let title = title.or_else(|| {
            entries
                .iter()
                .flat_map(|e| e.items())
                .chain(history.iter())
                .find_map(user_text)
        });
        let identity = Identity {
            created_ms: id.created_ms().unwrap_or_else(now_ms),
            forked_from,
            compacted_from,
            durability,
        };
        // One retry when the process ran out of file descriptors: this
        // store's idle sessions are closed to make room (a failed attempt
        // is cleared away as any failed creation is).
        let attempt = || -> Result<EntryHash> {
            let lock = self.claim(id, &dir)?;
            // The log takes the lock; this second descriptor of it keeps it
            // held until the log moves it into its first segment. A failed
            // creation is cleared away under the lock (below), so that no
            // other creator of the id claims the directory meanwhile.
            let held = lock.try_clone().map_err(hooked_fs::io_err("dup", &dir))?;
            // Payloads first: written before any record that refers to them,
            // and synced by the creation's first group commit before its log.
            let (entries, _payloads) = match exact {
                true => (std::borrow::Cow::Borrowed(entries), None),
                false => self.externalize(entries)?,
            };
            let built = self.build(id, &dir, lock, &entries, &identity, title.as_deref());
            let result = match built {
                Ok(handle) => {
                    let head = handle.log.head().map(|(_, h)| h).expect("just written");
                    self.keep_open(self.shard(id).lock(), &handle);
                    Ok(head)
                }
                Err(e) => {
                    self.clear_failed_creation(&dir, &held);
                    Err(e)
                }
            };
            drop(held);
            result
        };
        self.making_room(attempt)
    }

    /// Clears away what a failed creation left in `dir`, under the lock
    /// only. `held` keeps the lock only while `LOCK` names its file: past
    /// the lock's move into the first segment, the log let it go when it
    /// dropped. It is taken again where it is now, so that no other creator
    /// of the id has claimed the directory meanwhile (one that has clears
    /// what is left at its claim).
    fn clear_failed_creation(&self, dir: &Path, held: &std::fs::File) {
        let lock_path = dir.join(LOCK_FILE);
        let still_held = hooked_fs::names(&lock_path, held).unwrap_or(false);
        let relocked = match still_held {
            true => None,
            false => hooked_fs::lock_writer(&lock_path, self.hook()).ok(),
        };
        if still_held || relocked.is_some() {
            self.discard_creation(dir);
        }
        drop(relocked);
    }

    /// Makes `id`'s directory (or finds it) and takes its writer lock, for
    /// a creation: on success the directory holds only the lock file and
    /// the `CREATING` marker. Refused while a writer or another creator
    /// holds the lock, or when a session is there.
    fn claim(&self, id: SessionId, dir: &Path) -> Result<std::fs::File> {
        let lock_path = dir.join(LOCK_FILE);
        for _ in 0..CLAIM_TRIES {
            // A new id's directory is made with no look for it first: a
            // look misses the directory cache and waits on `sessions/`
            // behind every other creation's `mkdir`, which holds it while
            // the file system allocates an inode (most of a creation's
            // wait when many start at once). Only a directory that was
            // there already can hold a session, refused here before its
            // lock is taken.
            let made = hooked_fs::create_dir_new(dir, self.hook())?;
            if !made && dir.join(CATALOG_FILE).exists() && !dir.join(CREATING_FILE).exists() {
                return Err(already_exists(id));
            }
            let lock = match hooked_fs::lock_writer(&lock_path, self.hook()) {
                Ok(lock) => lock,
                Err(Error::Locked { .. }) => return Err(already_exists(id)),
                // Removed by a failed creation since (which removes its
                // directory with the lock held, so a lock taken on a file
                // it removed is never returned): claim it again.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    continue
                }
                Err(e) => return Err(e),
            };
            return match found(dir, &self.inner.payloads)? {
                Found::Session => Err(already_exists(id)),
                // Retired since the look before the `mkdir` (a retire is one
                // rename out of `sessions/`, which the `mkdir` found done):
                // the id stays taken while its forks read it.
                Found::Leftover if self.is_retired(id) => {
                    self.discard_creation(dir);
                    Err(already_exists(id))
                }
                Found::Leftover => {
                    self.clear_leftover(dir)?;
                    Ok(lock)
                }
            };
        }
        Err(Error::invalid(format!(
            "session {id} is being created and removed by others"
        )))
    }

    /// Empties a claimed directory but for its lock and the `CREATING`
    /// marker, which comes first: while anything else is there, the marker
    /// says that it is no durable session.
    fn clear_leftover(&self, dir: &Path) -> Result<()> {
        let creating = dir.join(CREATING_FILE);
        if !creating.exists() {
            // The marker is a name (its presence is what counts, and a
            // directory's names reach the disk in order), so a second name
            // of the lock file serves: no inode of its own to allocate,
            // which is most of what a creation costs on a busy ext4. A file
            // system without hard links gets a file.
            if hooked_fs::link(&dir.join(LOCK_FILE), &creating, self.hook()).is_err() {
                HookedFile::create(&creating, self.hook())?;
            }
        }
        // The catalog first: without it, nothing here passes for a session.
        let catalog = dir.join(CATALOG_FILE);
        if catalog.exists() {
            hooked_fs::remove_file(&catalog, self.hook())?;
        }
        let entries = std::fs::read_dir(dir).map_err(hooked_fs::io_err("read dir", dir))?;
        for e in entries {
            let e = e.map_err(hooked_fs::io_err("read dir", dir))?;
            if e.file_name() == LOCK_FILE || e.file_name() == CREATING_FILE {
                continue;
            }
            match e.file_type().is_ok_and(|t| t.is_dir()) {
                true => hooked_fs::remove_dir_all(&e.path(), self.hook())?,
                false => hooked_fs::remove_file(&e.path(), self.hook())?,
            }
        }
        Ok(())
    }

    /// Writes a new session into its claimed directory: the log and its
    /// entries, then the catalog (a session "exists" once its catalog
    /// does), and its slot in the listing cache, all in the page cache. Its
    /// first sync makes it durable; a `Sync` store's runs here.
    fn build(
        &self,
        id: SessionId,
        dir: &Path,
        lock: std::fs::File,
        entries: &[LogEntry],
        identity: &Identity,
        title: Option<&str>,
    ) -> Result<SessionHandle> {
        let cache = self.writable()?;
        let mut opts = self.inner.opts.log.clone();
        let durability = identity.durability.unwrap_or(opts.durability);
        opts.durability = durability;
        // A fork holds one small record: where its first segment is
        // reserved (a log that syncs), it is the smallest one, and rolls
        // double from there if the fork grows.
        if parent_of(entries).is_some() {
            opts.initial_segment_size = opts.initial_segment_size.min(FORK_FIRST_SEGMENT_BYTES);
        }
        let log = Log::create_unsynced(dir, opts, lock)?.with_payloads(self.inner.payloads.clone());
        self.attach_journal(id, &log);
        log.append_batch(entries, Durability::Buffered, ExpectHead::Empty)?;
        let path = dir.join(CATALOG_FILE);
        // A session with nothing of its own to keep that its log (and a
        // fork's parent) do not say has an empty catalog, which takes no
        // block on disk (issue 18): a fork by reference whose title is its
        // parent's, or a session with no title yet whose id tells its
        // creation time. Either chose no durability of its own.
        let inherits = match parent_of(entries) {
            Some(_) => title.is_some(),
            None => title.is_none() && id.created_ms() == Some(identity.created_ms),
        };
        let empty = inherits && identity.durability.is_none();
        let file = match empty {
            true => catalog::create_empty(&path, self.hook())?,
            false => catalog::create(&path, identity, title, self.hook())?,
        };
        cache.place_new(id);
        let catalog = Arc::new(SessionCatalog::created(
            id,
            file,
            identity.clone(),
            title,
            (!empty, parent_of(entries).is_none()),
            Some(cache),
        ));
        catalog.count_payload_bytes(payload_count(&log, None), false);
        let handle = SessionHandle { id, log, catalog };
        // Dirty, unsynced: neither file has ever said "clean" about this
        // session, and a lost slot sends `list` to the log.
        handle.write_head(true, None)?;
        handle
            .log
            .on_first_sync(self.first_sync(dir, parent_of(entries)));
        if durability == Durability::Sync {
            handle.log.sync()?;
        }
        Ok(handle)
    }

    /// What a session's first sync does after its log's `fdatasync`: the
    /// catalog's data, then the marker goes, then the session's directory
    /// (its files' names and the marker's removal) and `sessions/` (the
    /// session's own name) are synced. The marker goes only after
    /// everything it guards is durable; a crash before the directory syncs
    /// leaves it, or leaves a session whose every part is durable.
    ///
    /// A fork's first sync also makes its registration in its parent
    /// durable (`fsync` of the parent's `forks/`, wherever the parent is
    /// now), before the marker goes: until then a crash may keep the fork's
    /// records but not its registration, and a marked fork whose parent
    /// does not know it is no session (`holds_entries`).
    pub(super) fn first_sync(&self, dir: &Path, parent: Option<SessionId>) -> FirstSync {
        let dir = dir.to_path_buf();
        let sessions = self.inner.root.join("sessions");
        let registries = parent.map(|p| self.registry_dirs(p));
        let hook = self.hook().clone();
        Box::new(move || {
            HookedFile::open(&dir.join(CATALOG_FILE), false, &hook)?.sync()?;
            if let Some(registries) = &registries {
                sync_registry(registries, &hook)?;
            }
            hooked_fs::remove_file(&dir.join(CREATING_FILE), &hook)?;
            sync_dir(&dir, &hook)?;
            sync_dir(&sessions, &hook)
        })
    }

    /// Opens a session's log as its writer. A session whose creation is
    /// not durable yet (its `CREATING` marker is there) gets its first
    /// sync armed again, or, when its log holds no entry, is what a crash
    /// left of a creation: [`Error::NotFound`].
    /// `released` is `Some` for a log this store let go unsynced, with its
    /// writer's hint (`Log::release`).
    pub(super) fn open_writer(
        &self,
        id: SessionId,
        dir: &Path,
        released: Option<Option<&ReleaseHint>>,
    ) -> Result<Log> {
        self.refuse_unapplied(id)?;
        let pending = dir.join(CREATING_FILE).exists();
        let opts = self.inner.opts.log.clone();
        // A log this store let go unsynced (an eviction) reopens without
        // syncing what it left; any other gets the full recovery.
        let opened = Log::open_in_store(dir, opts, released, self.inner.payloads.clone());
        let log = match opened {
            Ok(log) => Some(log),
            // Damage is a pending creation's torn remains, unless its log
            // reads (then the writer's failure is news).
            Err(e) if !pending || !is_torn(&e) || holds_entries(dir, &self.inner.payloads)? => {
                return Err(e)
            }
            Err(_) => None,
        };
        if let Some(log) = &log {
            self.attach_journal(id, log);
        }
        match log {
            Some(log) if !pending => Ok(log),
            Some(log) if log.head().is_some() && fork_is_registered(dir, &log) => {
                // Its catalog, which no sync covered, may be lost: written
                // again from the log, before the first sync makes it durable.
                let path = dir.join(CATALOG_FILE);
                if catalog::read(&path).map_or(true, |r| r.identity.is_none() && !r.empty) {
                    let identity = super::rebuilt_identity(id, &log);
                    catalog::create(&path, &identity, None, self.hook())?;
                }
                let parent = log.snapshot().fork_link().ok().flatten();
                log.on_first_sync(self.first_sync(dir, parent.map(|l| l.parent)));
                Ok(log)
            }
            _ => Err(Error::not_found(format!(
                "session {id} (its creation never finished)"
            ))),
        }
    }

    /// Removes what a failed creation made (best effort: a leftover is
    /// cleared by the next claim of its id). The catalog goes first, so that
    /// nothing left behind passes for a session.
    fn discard_creation(&self, dir: &Path) {
        let _ = hooked_fs::remove_file(&dir.join(CATALOG_FILE), self.hook());
        let _ = hooked_fs::remove_dir_all(dir, self.hook());
    }

    /// Removes what creations killed before their first sync left in
    /// `sessions/`: a directory with no catalog, or with the `CREATING`
    /// marker, whose writer lock can be taken (no creator or writer holds
    /// it, in this process or another) and whose log holds no entry: empty,
    /// the lock file alone, or a torn first segment. A directory whose log
    /// holds an entry is never removed here, catalog or not. Best effort,
    /// at a store's first write (see [`Store::open_with`]).
    pub(super) fn sweep_torn_creations(&self) {
        let sessions = self.inner.root.join("sessions");
        let Ok(entries) = std::fs::read_dir(&sessions) else {
            return;
        };
        for e in entries.flatten() {
            let Some(id) = e
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<SessionId>().ok())
            else {
                continue;
            };
            let dir = e.path();
            if dir.join(CATALOG_FILE).exists() && !dir.join(CREATING_FILE).exists() {
                continue;
            }
            let Ok(lock) = hooked_fs::lock_writer(&dir.join(LOCK_FILE), self.hook()) else {
                continue;
            };
            if matches!(holds_entries(&dir, &self.inner.payloads), Ok(false))
                && !self.is_retired(id)
            {
                self.discard_creation(&dir);
            }
            drop(lock);
        }
    }

    /// Removes what creations of versions before this one left in
    /// `staging/`, where they built sessions before renaming them into
    /// `sessions/`: a staged directory whose creation lock can be taken has
    /// no creator any more. One without the lock file is swept only once it
    /// is older than [`STALE_STAGING`]. Best effort: what cannot be removed
    /// now is tried again by the next store's housekeeping.
    pub(super) fn sweep_staging(&self) {
        let staging = self.inner.root.join("staging");
        let Ok(entries) = std::fs::read_dir(&staging) else {
            return;
        };
        for e in entries.flatten() {
            let dir = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let creator_gone = match std::fs::File::open(dir.join(CREATING_FILE)) {
                Ok(f) => f.try_lock().is_ok(),
                Err(_) => e
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_STAGING)),
            };
            if creator_gone {
                let _ = hooked_fs::remove_dir_all(&dir, self.hook());
            }
        }
    }

    /// [`Store::delete`] without the fork registry's tidying: says whether
    /// the session was removed or retired.
    pub(super) fn delete_or_retire(&self, id: SessionId) -> Result<Deletion> {
        let cache = self.writable()?;
        let dir = self.session_dir(id);
        if !dir.join(CATALOG_FILE).exists() {
            return Err(Error::not_found(format!("session {id}")));
        }
        let lock_path = dir.join(LOCK_FILE);
        if !self.drop_open_if_unused(id) {
            return Err(Error::Locked { path: lock_path });
        }
        // The writer lock, so that no other process writes it; no recovery.
        let lock = hooked_fs::lock_writer(&lock_path, self.hook())?;
        // The listing cache is a copy: its slot goes first, while the catalog
        // is still in place (a crash after it leaves a session that `list`
        // finds through its catalog).
        if let Ok(catalog) =
            SessionCatalog::open(id, dir.join(CATALOG_FILE), Some(cache), self.hook())
        {
            let _ = catalog.forget();
        }
        // Held across the rename: no fork of this session is created
        // meanwhile, and none that exists is left without it.
        let forks_lock = match self.retire_if_forked(id, &dir)? {
            Ok(retired) => return Ok(retired),
            Err(forks_lock) => forks_lock,
        };
        let trash = self
            .inner
            .root
            .join("trash")
            .join(format!("{id}-{}", now_ms()));
        hooked_fs::rename(&dir, &trash, self.hook())?;
        sync_dir(&self.inner.root.join("sessions"), self.hook())?;
        sync_dir(&self.inner.root.join("trash"), self.hook())?;
        drop(forks_lock);
        // Removed while the lock is still held, so that an open emptying the
        // trash meanwhile leaves this directory alone.
        let _ = hooked_fs::remove_dir_all(&trash, self.hook());
        drop(lock);
        Ok(Deletion::Removed)
    }
}

/// What the holder of a session directory's lock finds in it: a session
/// once its catalog is there, unless the `CREATING` marker says that its
/// creation may have torn and its log holds no entry.
fn found(dir: &Path, payloads: &Arc<PayloadArea>) -> Result<Found> {
    let session = dir.join(CATALOG_FILE).exists()
        && (!dir.join(CREATING_FILE).exists() || holds_entries(dir, payloads)?);
    Ok(match session {
        true => Found::Session,
        false => Found::Leftover,
    })
}

/// Whether the log in `dir` reads (read-only, as `list` reads it) and holds
/// an entry: a creation writes its entries before its catalog, so a
/// pending creation whose log holds none was torn by a crash.
///
/// A fork's creation also registers it in its parent, durably only at the
/// fork's first sync: a marked fork that its parent does not know is what
/// a crash left of a creation, too.
///
/// The first entry's payloads must be there too: a creation's records name
/// payloads that its first sync makes durable, and a crash before it may
/// keep the records without them (the log's recovery then cuts them).
///
/// An open that fails for a reason that says nothing about the log (the
/// process ran out of file descriptors, a permission, an I/O error) is that
/// error: a session must not pass for a torn creation, and be cleared away,
/// because the process could not open it now.
pub(super) fn holds_entries(dir: &Path, payloads: &Arc<PayloadArea>) -> Result<bool> {
    let opened = Log::open_read_only_in_store(dir, payloads.clone());
    Ok(pending_session_log(dir, opened)?.is_some())
}

/// The log of the pending creation in `dir`, as `opened` (its read-only
/// open) found it, if it holds a session ([`holds_entries`]): `None` where
/// the open failed as what a crash leaves of a creation fails (a segment
/// missing, short, unwritten or damaged, [`is_torn`]), or the log holds no
/// entry, or its fork is not registered; the error where the open failed
/// for any other reason.
pub(super) fn pending_session_log(dir: &Path, opened: Result<Log>) -> Result<Option<Log>> {
    match opened {
        Ok(log) => Ok(Some(log).filter(|l| l.head().is_some() && fork_is_registered(dir, l))),
        Err(e) if is_torn(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `e`, the failure to open a pending creation's log, may be what
/// a crash left of it; not where the process or the machine failed the
/// open (out of file descriptors or memory, a permission, an I/O error),
/// or where another writer holds the log.
fn is_torn(e: &Error) -> bool {
    use std::io::ErrorKind;
    match e {
        Error::Io { source, .. } => matches!(
            source.kind(),
            ErrorKind::NotFound | ErrorKind::UnexpectedEof | ErrorKind::InvalidData
        ),
        Error::Locked { .. } => false,
        _ => true,
    }
}

fn already_exists(id: SessionId) -> Error {
    Error::invalid(format!("session {id} already exists"))
}

/// The `SessionStart` of a new session that is neither a fork nor a
/// compaction.
fn first_entry(system_prompt: Option<&str>, config: RequestConfig, history: &[Item]) -> LogEntry {
    LogEntry::SessionStart {
        ts: now_ms(),
        system_prompt: system_prompt.map(str::to_owned),
        config,
        history: history.iter().map(LoggedItem::from).collect(),
        forked_from: None,
        compacted_from: None,
    }
}

/// The parent a new session's entries fork by reference, if they do.
fn parent_of(entries: &[LogEntry]) -> Option<SessionId> {
    match entries.first() {
        Some(LogEntry::ForkedFrom { parent, .. }) => Some(*parent),
        _ => None,
    }
}

/// The history, fork origin and compaction origin a session's first entry
/// gives it. A fork by reference (`Store::fork_at`) has none of its own:
/// its history is its parent's, and so is its title. A first entry that is
/// neither a `SessionStart` nor a `ForkedFrom` is refused.
fn origin_of(
    entries: &[LogEntry],
) -> Result<(&[LoggedItem], Option<SessionOrigin>, Option<SessionOrigin>)> {
    match entries.first() {
        Some(LogEntry::SessionStart {
            history,
            forked_from,
            compacted_from,
            ..
        }) => Ok((history.as_slice(), *forked_from, *compacted_from)),
        Some(LogEntry::ForkedFrom {
            parent,
            parent_hash: hash,
            ..
        }) => Ok((
            &[][..],
            Some(SessionOrigin {
                session_id: *parent,
                at_hash: *hash,
            }),
            None,
        )),
        _ => Err(Error::invalid(
            "a session must start with a session_start entry",
        )),
    }
}
