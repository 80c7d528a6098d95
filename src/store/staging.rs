//! Creating and deleting sessions. A new session is built whole in
//! `staging/` and renamed into `sessions/`; a deleted one is renamed into
//! `trash/` first, so a crash never leaves half a session under `sessions/`.

use std::path::Path;

use super::{now_ms, Store};
use crate::catalog::{self, Identity, SessionCatalog, CATALOG_FILE};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, io_err, sync_dir, HookedFile};
use crate::item::Item;
use crate::log::{Durability, ExpectHead, Log, LogOptions, LOCK_FILE};
use crate::schema::{LogEntry, LoggedItem, RequestConfig, SessionId};

/// The lock file a creation holds in its staged directory.
const CREATING_FILE: &str = "CREATING";

/// How old a staged directory without a lock file must be to be swept.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(600);

impl Store {
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
    pub(super) fn create_with_entries(
        &self,
        id: SessionId,
        entries: &[LogEntry],
    ) -> Result<EntryHash> {
        self.writable()?;
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
        // The creation holds a lock in its staged directory until the
        // session is in place: an open that can take it knows the creator is
        // gone and sweeps the leftover (`Store::sweep_staging`).
        let creating = self.start_staging(&staged);
        let built = creating.and_then(|_lock| {
            self.build_session(&staged, entries, &identity, title.as_deref())?;
            self.place_session(id, &staged, &dir)?;
            // Placed: the marker goes (it would be harmless if it stayed).
            let _ = hooked_fs::remove_file(&dir.join(CREATING_FILE), self.hook());
            Ok(())
        });
        if let Err(e) = built {
            let _ = hooked_fs::remove_dir_all(&staged, self.hook());
            return Err(e);
        }
        self.writable()?.place_new(id);
        let handle = self.session(id)?;
        Ok(handle.log.head().map(|(_, h)| h).expect("just written"))
    }

    /// Makes a staged directory and takes the lock that says a creation is
    /// running in it; the returned file holds the lock until dropped.
    fn start_staging(&self, staged: &Path) -> Result<HookedFile> {
        hooked_fs::create_dir(staged, self.hook())?;
        let path = staged.join(CREATING_FILE);
        let lock = HookedFile::open_or_create(&path, self.hook())?;
        lock.file().lock().map_err(io_err("lock", &path))?;
        Ok(lock)
    }

    /// Removes what creations that died left in `staging/`: a staged
    /// directory whose creation lock can be taken has no creator any more.
    /// One without the lock file is swept only once it is older than
    /// [`STALE_STAGING`] (a leftover of an older version, or a creator that
    /// has made the directory but not yet its lock). Best effort: what
    /// cannot be removed now is tried again at the next open.
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

    /// Deletes a session durably. Forks of it keep working: they carry
    /// their history.
    ///
    /// A refused delete changes nothing: [`Error::Locked`] while a handle of
    /// this store (a [`Subscription`](crate::Subscription), a
    /// [`SessionHandle`](crate::SessionHandle), a [`Log`]) or a writer in
    /// another process holds the session. Deleting needs no readable log: a
    /// damaged session is deleted like any other. Once the session's
    /// directory is durably in `trash/`, the delete is done and returns
    /// `Ok`; what is left in the trash is removed now or by the next open.
    pub fn delete(&self, id: SessionId) -> Result<()> {
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
        let trash = self
            .inner
            .root
            .join("trash")
            .join(format!("{id}-{}", now_ms()));
        hooked_fs::rename(&dir, &trash, self.hook())?;
        sync_dir(&self.inner.root.join("sessions"), self.hook())?;
        sync_dir(&self.inner.root.join("trash"), self.hook())?;
        // Removed while the lock is still held, so that an open emptying the
        // trash meanwhile leaves this directory alone.
        let _ = hooked_fs::remove_dir_all(&trash, self.hook());
        drop(lock);
        Ok(())
    }
}

/// [`user_item_text`] of a logged item.
pub(super) fn user_text(item: &LoggedItem) -> Option<String> {
    match item {
        LoggedItem::Message {
            role: crate::schema::LoggedRole::User,
            ..
        } => user_item_text(&item.clone().into_item()),
        _ => None,
    }
}

/// The text of a user message that has some, as the title takes it.
pub(super) fn user_item_text(item: &Item) -> Option<String> {
    if !item.is_user_message() {
        return None;
    }
    let t = item.text()?;
    (!t.trim().is_empty()).then_some(t)
}
