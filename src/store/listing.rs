//! The listing: `list`, `list_filtered` and `info`, from the listing
//! cache, the catalogs, or (for a slot that cannot be believed) the log.

use std::fs;

use super::payloads::payload_count;
use super::shards::head_slot_of;
use super::{
    empty_catalog_title, last_entry_ms, log_origins, rebuilt_identity, staging, ListFilter,
    SessionInfo, Store,
};
use crate::catalog::{self, HeadSlot, Identity, ListCache, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::fs::io_err;
use crate::log::Log;
use crate::schema::SessionId;

impl Store {
    /// All sessions, newest first, from the catalog files alone.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let history = [Item::user_text("Fix the flaky test")];
    /// let (first, _) = store.create_session(None, RequestConfig::model("gpt-5"), &history)?;
    /// let (second, _) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let ids: Vec<_> = store.list()?.iter().map(|s| s.id).collect();
    /// assert_eq!(ids, [second, first]);
    /// # Ok(()) }
    /// ```
    pub fn list(&self) -> Result<Vec<SessionInfo>> {
        self.list_filtered(&ListFilter::default())
    }

    /// Sessions matching `filter`, newest first.
    ///
    /// ```
    /// use session_store::{Item, ListFilter, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let config = RequestConfig::model("gpt-5");
    /// let (id, _) = store.create_session(None, config.clone(), &[Item::user_text("Deploy to staging")])?;
    /// store.create_session(None, config, &[Item::user_text("Explain the borrow checker")])?;
    ///
    /// let filter = ListFilter { title_contains: Some("deploy".into()), ..ListFilter::default() };
    /// let found = store.list_filtered(&filter)?;
    /// assert_eq!(found.len(), 1);
    /// assert_eq!(found[0].id, id);
    /// # Ok(()) }
    /// ```
    pub fn list_filtered(&self, filter: &ListFilter) -> Result<Vec<SessionInfo>> {
        let sessions = self.inner.root.join("sessions");
        // Membership from the directory, contents from the listing cache in
        // one read; the catalog files only where the cache cannot be trusted.
        let cached = ListCache::read_all(&self.inner.root)?;
        let mut names = self.names()?;
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
            // A clean slot is exact, and so is one this store left and no
            // writer has written since. Another dirty one is not (a writer
            // keeps its numbers in memory, or crashed): the session is
            // listed from its live log if it is open here, else from the log.
            let trusted = cached
                .get(&id)
                .filter(|_| !self.is_open_here(id))
                .filter(|c| self.is_exact(id, &c.head));
            let info = match trusted {
                Some(c) => session_info(id, &c.identity, &c.head, c.title.clone()),
                // One session's damage never hides the others: it is listed
                // with what is known of it and the error.
                None => match self.info(id) {
                    Ok(Some(info)) => info,
                    Ok(None) => continue,
                    Err(e) => damaged_info(id, &e),
                },
            };
            if filter.updated_since_ms.is_some_and(|t| info.updated_ms < t)
                || filter
                    .forked_from
                    .is_some_and(|f| info.forked_from.map(|o| o.session_id) != Some(f))
                || filter
                    .compacted
                    .is_some_and(|c| info.compacted_from.is_some() != c)
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
            let mut info = info;
            info.name = names.remove(&id);
            out.push(info);
        }
        out.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        Ok(out)
    }

    /// Whether a session's head slot, as read, holds the log's numbers:
    /// clean, or dirty exactly as this store left it when it let the
    /// session go (see `Inner::released`).
    fn is_exact(&self, id: SessionId, head: &HeadSlot) -> bool {
        // A version 1 slot has no payload count: the log has it.
        head.payload_bytes.is_some()
            && (!head.dirty || self.inner.released.lock().get(&id).map(|r| &r.left) == Some(head))
    }

    /// One session's listing entry; `None` if it does not exist. Reads
    /// only: a catalog left dirty by a crashed writer is completed from a
    /// read-only view of the log (the next writer recovers it), and a
    /// damaged catalog is rebuilt from the log as far as it can be, with the
    /// damage in [`SessionInfo::error`].
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Summarise README.md")])?;
    ///
    /// let info = store.info(id)?.expect("the session exists");
    /// assert_eq!(info.title.as_deref(), Some("Summarise README.md"));
    /// assert_eq!(info.entries, 2); // its `SessionStart` and the user input
    /// assert_eq!(info.head, Some(head));
    /// # Ok(()) }
    /// ```
    pub fn info(&self, id: SessionId) -> Result<Option<SessionInfo>> {
        let path = self.session_dir(id).join(CATALOG_FILE);
        let record = match catalog::read(&path) {
            Ok(r) => r,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        if let Some(handle) = self.open_handle_here(id) {
            let identity = record
                .identity
                .unwrap_or_else(|| rebuilt_identity(id, &handle.log));
            let head = handle.head_slot(true, Some(handle.catalog.updated_ms()));
            let title = match record.empty {
                true => handle.catalog.title(),
                false => record.title,
            };
            return Ok(Some(session_info(id, &identity, &head, title)));
        }
        let trusted = record
            .head
            .filter(|h| self.is_exact(id, h))
            .filter(|_| record.identity.is_some());
        if let (Some(head), Some(identity)) = (trusted, &record.identity) {
            return Ok(Some(session_info(id, identity, &head, record.title)));
        }
        // Written by a live writer elsewhere, stale after a crash, never
        // written, or damaged: read the log.
        let dir = self.session_dir(id);
        let log = Log::open_read_only_in_store(&dir, self.inner.payloads.clone());
        let pending = dir.join(staging::CREATING_FILE).exists();
        // A creation that a crash tore before it was durable is no session.
        // So is a fork whose registration in its parent a crash lost.
        let log = match pending {
            true => match staging::pending_session_log(&dir, log)? {
                Some(l) => l,
                None => return Ok(None),
            },
            false => log?,
        };
        let head = head_slot_read(&log, record.head);
        // An empty catalog is no damage: the identity is the log's, the
        // title the log's or the parent's (`catalog::create_empty`).
        let title = match record.empty {
            true => empty_catalog_title(&self.inner.root, &log).0,
            false => record.title,
        };
        let mut info = match &record.identity {
            // A crash may have come between a compaction in the log and
            // its identity slot: the origins come from the log too.
            Some(identity) => {
                let (forked_from, compacted_from) = log_origins(&log);
                let identity = Identity {
                    forked_from,
                    compacted_from,
                    ..identity.clone()
                };
                session_info(id, &identity, &head, title)
            }
            None => session_info(id, &rebuilt_identity(id, &log), &head, title),
        };
        // A catalog that no sync covered yet is lost to a crash, not damaged.
        if record.identity.is_none() && !pending && !record.empty {
            info.error = Some(format!(
                "damaged catalog {}: identity rebuilt from the log",
                path.display()
            ));
        }
        Ok(Some(info))
    }
}

/// The head slot of a log read because its recorded slot (`recorded`, if it
/// could be read) is dirty: the numbers from the log, and the time of the
/// last write as recorded, or, when the log has entries the slot does not
/// count (a writer keeps its numbers in memory), as its last entry says.
fn head_slot_read(log: &Log, recorded: Option<HeadSlot>) -> HeadSlot {
    // With no slot recorded (an empty catalog), the last entry's time.
    let updated_ms = Some(recorded.map_or(0, |h| h.updated_ms));
    let payload_bytes = payload_count(log, recorded.as_ref());
    let mut head = head_slot_of(log, updated_ms, payload_bytes);
    if recorded.is_none_or(|r| r.next_seq < head.next_seq) {
        if let Some(ts) = last_entry_ms(log) {
            head.updated_ms = head.updated_ms.max(ts);
        }
    }
    head
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
        payload_bytes: head.payload_bytes.unwrap_or(0),
        head: (entries > 0).then_some(head.head),
        forked_from: identity.forked_from,
        compacted_from: identity.compacted_from,
        name: None,
        error: None,
    }
}

/// The listing entry of a session that could not be read: its id, its
/// creation time from the id, and the error.
fn damaged_info(id: SessionId, e: &Error) -> SessionInfo {
    let identity = Identity {
        created_ms: id.created_ms().unwrap_or(0),
        forked_from: None,
        compacted_from: None,
        durability: None,
    };
    let mut info = session_info(id, &identity, &HeadSlot::default(), None);
    info.error = Some(e.to_string());
    info
}
