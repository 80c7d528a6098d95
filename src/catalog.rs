//! The per-session catalog file: what `list()` shows, without reading logs.
//!
//! The byte layout is in `format::catalog` (and DESIGN.md, "Catalog and
//! listing cache").
//!
//! The file may be empty (0 bytes, no block on disk; see [`create_empty`]):
//! a fork by reference's, or an untitled new session's, which holds nothing
//! its log (and a fork's parent) do not say, until it must (a fork's title
//! of its own, a title past the log's first [`TITLE_SCAN_RECORDS`] records,
//! new origins). Readers take its identity from the log, its title from the
//! first user text in the log's first records (or a fork's from its
//! parent), its numbers from the log; its head slot lives in the listing
//! cache only.
//!
//! The head slot is flagged dirty while a writer has the session open: the
//! writer's open writes it dirty and syncs it before the log changes, and a
//! clean close (after the log is synced) writes it clean with the final
//! numbers. In between, saves change only the writer's copy in memory, so a
//! dirty slot's numbers are never read: the store takes them from the log.
//!
//! Beside the per-session files, the store keeps a listing cache
//! ([`ListCache`], `list.cache` in the root): a copy of every catalog in
//! fixed slots, so that `list` reads one file instead of one per session.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::format::catalog::{
    framed, unframe, HEAD_AT, HEAD_LEN, IDENT_AT, IDENT_MAGIC, IDENT_MAX, IDENT_SLOT_LEN, TITLE_AT,
    TITLE_MAGIC, TITLE_MAX, TITLE_SLOT_LEN,
};
pub(crate) use crate::format::catalog::{HeadSlot, CATALOG_LEN};
use crate::fs::{io_err, Hook, HookedFile, ParkableFile};
use crate::log::Durability;
use crate::schema::{SessionId, SessionOrigin};

mod list_cache;
pub(crate) use list_cache::{CachedSession, ListCache};

/// Catalog file name inside a session directory.
pub(crate) const CATALOG_FILE: &str = "catalog";

/// The immutable part.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Identity {
    pub(crate) created_ms: u64,
    #[serde(default)]
    pub(crate) forked_from: Option<SessionOrigin>,
    #[serde(default)]
    pub(crate) compacted_from: Option<SessionOrigin>,
    /// The session's own default durability, chosen at its creation;
    /// `None`: the store's option. Kept in the catalog file only (the list
    /// cache does not carry it), and lost with a damaged identity slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) durability: Option<Durability>,
}

/// Everything in a catalog file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogRecord {
    pub(crate) head: Option<HeadSlot>,
    pub(crate) title: Option<String>,
    pub(crate) identity: Option<Identity>,
    /// The file is empty ([`create_empty`]): not damage, but a session
    /// whose identity is its log's, whose title is the first user text in
    /// its log's first records (a fork's: its parent's), and whose head slot
    /// was never written (its numbers are the log's).
    pub(crate) empty: bool,
}

/// A writer's token: random bits of a fresh UUID v7.
fn writer_token() -> u32 {
    let id = SessionId::new_v7();
    u32::from_le_bytes([id.0[12], id.0[13], id.0[14], id.0[15]])
}

/// Creates a catalog file (0600) with its identity, in the page cache: a
/// new session's first sync makes it durable (`Store::create_session`).
pub(crate) fn create(
    path: &Path,
    identity: &Identity,
    title: Option<&str>,
    hook: &Hook,
) -> Result<HookedFile> {
    let file = HookedFile::create(path, hook)?;
    file.write_at(0, &encode(identity, title, None)?)?;
    Ok(file)
}

/// Creates an empty catalog file (0600), which takes no block on disk: the
/// session exists, and what a catalog would hold is what its log (and a
/// fork's parent) say: a fork by reference that inherits its parent's
/// title, or a session with no title yet (see [`CatalogRecord::empty`]).
pub(crate) fn create_empty(path: &Path, hook: &Hook) -> Result<HookedFile> {
    HookedFile::create(path, hook)
}

/// A whole catalog file's bytes.
fn encode(identity: &Identity, title: Option<&str>, head: Option<&HeadSlot>) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; CATALOG_LEN];
    if let Some(head) = head {
        buf[HEAD_AT as usize..HEAD_AT as usize + HEAD_LEN].copy_from_slice(&head.encode());
    }
    let framed_ident = identity_slot(identity)?;
    buf[IDENT_AT as usize..IDENT_AT as usize + framed_ident.len()].copy_from_slice(&framed_ident);
    if let Some(t) = title {
        let f = framed(TITLE_MAGIC, excerpt(t).as_bytes());
        buf[TITLE_AT as usize..TITLE_AT as usize + f.len()].copy_from_slice(&f);
    }
    Ok(buf)
}

/// Rewrites the head slot.
fn write_head(file: &HookedFile, head: &HeadSlot) -> Result<()> {
    file.write_at(HEAD_AT, &head.encode())
}

/// The identity slot's bytes.
fn identity_slot(identity: &Identity) -> Result<Vec<u8>> {
    let ident = serde_json::to_vec(identity).expect("identity serializes");
    if ident.len() > IDENT_MAX {
        return Err(Error::invalid("catalog identity too large"));
    }
    Ok(framed(IDENT_MAGIC, &ident))
}

/// Sets the title once it is known.
fn write_title(file: &HookedFile, title: &str) -> Result<()> {
    file.write_at(TITLE_AT, &framed(TITLE_MAGIC, excerpt(title).as_bytes()))
}

/// Reads a whole catalog file; damaged parts read as `None`.
pub(crate) fn read(path: &Path) -> Result<CatalogRecord> {
    // One open, one pread, one close: listing reads thousands of these.
    let file = File::open(path).map_err(io_err("open", path))?;
    read_from(&file, path)
}

/// [`read`] of an open catalog file.
fn read_from(file: &File, path: &Path) -> Result<CatalogRecord> {
    let mut bytes = vec![0u8; CATALOG_LEN];
    let mut filled = 0;
    while filled < CATALOG_LEN {
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    bytes.truncate(filled);
    let part = |at: u64, len: usize| {
        bytes
            .get(at as usize..(at as usize + len).min(bytes.len()))
            .unwrap_or(&[])
    };
    Ok(CatalogRecord {
        empty: bytes.is_empty(),
        head: HeadSlot::decode(part(HEAD_AT, HEAD_LEN)),
        title: unframe(TITLE_MAGIC, part(TITLE_AT, TITLE_SLOT_LEN), TITLE_MAX)
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(str::to_owned),
        identity: unframe(IDENT_MAGIC, part(IDENT_AT, IDENT_SLOT_LEN), IDENT_MAX)
            .and_then(|b| serde_json::from_slice(b).ok()),
    })
}

/// The first line of a text, cut at a character boundary to fit the title slot.
pub(crate) fn excerpt(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let mut out = String::new();
    for c in line.chars() {
        if out.len() + c.len_utf8() > 120.min(TITLE_MAX) {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}

/// A session's catalog, open for updates: its own file (authoritative) and
/// its slot in the store's listing cache (a copy that `list` reads in one go).
pub(crate) struct SessionCatalog {
    id: SessionId,
    /// Closed while the session is parked (`SessionCatalog::park`).
    file: ParkableFile,
    state: Mutex<CatalogState>,
    cache: Option<(Arc<ListCache>, u32)>,
}

struct CatalogState {
    title: Option<String>,
    identity: Identity,
    head: HeadSlot,
    /// This writer's token, stamped on every head slot it writes.
    writer: u32,
    /// Whether the file holds slots: an empty one ([`create_empty`]) stays
    /// empty, its head kept in the cache only, until there is something the
    /// log and the parent cannot say (new origins, a title that is not in
    /// the log's first records: see `title_in_log`).
    stored: bool,
    /// Whether a title found in the log's first [`TITLE_SCAN_RECORDS`]
    /// records may stay out of an empty file until the clean close (see
    /// `SessionCatalog::set_head`): the session is no fork by reference, so
    /// its title is the first user text of its own log, which a reader of
    /// the empty file finds there meanwhile (`store::empty_catalog_title`).
    title_in_log: bool,
    /// The writer's count of the bytes of payload-area items its log's
    /// records refer to (see [`HeadSlot::payload_bytes`]).
    payload_bytes: u64,
}

/// How many records from the start of its log a reader of an empty catalog
/// reads for the session's title: a title saved in a later record is written
/// into the file, so that no reader has to read a long log for it.
pub(crate) const TITLE_SCAN_RECORDS: u64 = 16;

impl SessionCatalog {
    /// Opens a session's catalog file, and takes a slot in `cache`.
    pub(crate) fn open(
        id: SessionId,
        path: PathBuf,
        cache: Option<&Arc<ListCache>>,
        hook: &Hook,
    ) -> Result<SessionCatalog> {
        let file = HookedFile::open(&path, true, hook)?;
        let record = read_from(file.file(), &path)?;
        let identity = record.identity.unwrap_or(Identity {
            created_ms: id.created_ms().unwrap_or(0),
            forked_from: None,
            compacted_from: None,
            durability: None,
        });
        let head = record.head.unwrap_or_default();
        let stored = !record.empty;
        Ok(Self::from_parts(
            id,
            file,
            identity,
            record.title,
            head,
            (stored, false),
            cache,
        ))
    }

    /// Whether the file is empty: the identity and the title are to be
    /// taken from the log and the parent ([`SessionCatalog::adopt`]).
    pub(crate) fn is_empty(&self) -> bool {
        !self.state.lock().stored
    }

    /// The catalog of a session this process has just created, from the
    /// file [`create`] (`stored`) or [`create_empty`] made and what it was
    /// given, without reading the file back.
    pub(crate) fn created(
        id: SessionId,
        file: HookedFile,
        identity: Identity,
        title: Option<&str>,
        (stored, title_in_log): (bool, bool),
        cache: Option<&Arc<ListCache>>,
    ) -> SessionCatalog {
        let title = title.map(excerpt);
        Self::from_parts(
            id,
            file,
            identity,
            title,
            HeadSlot::default(),
            (stored, title_in_log),
            cache,
        )
    }

    /// A catalog of `file` holding these slots, with a slot in `cache`.
    fn from_parts(
        id: SessionId,
        file: HookedFile,
        identity: Identity,
        title: Option<String>,
        head: HeadSlot,
        (stored, title_in_log): (bool, bool),
        cache: Option<&Arc<ListCache>>,
    ) -> SessionCatalog {
        SessionCatalog {
            id,
            file: ParkableFile::new(file, true),
            state: Mutex::new(CatalogState {
                title,
                identity,
                head,
                writer: writer_token(),
                stored,
                title_in_log,
                payload_bytes: 0,
            }),
            cache: cache.map(|c| (c.clone(), c.slot_for(id))),
        }
    }

    /// Takes the identity and the title of a session whose file is empty,
    /// as its log and its parent say them; kept in memory and in the cache.
    /// `title_in_log`: the session is no fork by reference (see
    /// `CatalogState::title_in_log`).
    pub(crate) fn adopt(&self, identity: Identity, title: Option<String>, title_in_log: bool) {
        let mut state = self.state.lock();
        debug_assert!(!state.stored, "adopt is for an empty catalog");
        state.identity = identity;
        state.title = title;
        state.title_in_log = title_in_log;
    }

    /// The recorded title.
    pub(crate) fn title(&self) -> Option<String> {
        self.state.lock().title.clone()
    }

    /// The file, for the store to park and unpark (see `ParkableFile`):
    /// after an unpark it opens again at its next write.
    pub(crate) fn parkable(&self) -> &ParkableFile {
        &self.file
    }

    /// Writes every slot into an empty file, once it must hold what the log
    /// and the parent cannot say. The head goes as it is in memory: dirty
    /// while a writer has the session, as the cache's copy is.
    fn store(&self, state: &mut CatalogState) -> Result<()> {
        let bytes = encode(&state.identity, state.title.as_deref(), Some(&state.head))?;
        self.file.with(|f| f.write_at(0, &bytes))?;
        state.stored = true;
        Ok(())
    }

    /// Makes the file, not the log's first records, hold the title from
    /// now on: an empty file that leaves the title to them gets all its
    /// slots (with the title it has, if any), and a title set later is
    /// written into it. For a log whose first records are about to leave
    /// the disk (an eviction to the archive: `sync`, so that the file holds
    /// the title durably before they go), and for an untitled log past them,
    /// so that no reader reads them for nothing.
    ///
    /// With `sync`, a file that holds slots is synced whoever wrote them (a
    /// compaction's origins, a title, a store that let the session go):
    /// their writes need not have been synced yet.
    pub(crate) fn keep_title_in_file(&self, sync: bool) -> Result<()> {
        let mut state = self.state.lock();
        if !state.stored {
            if !state.title_in_log {
                return Ok(());
            }
            self.store(&mut state)?;
        }
        match sync {
            true => self.file.with(HookedFile::sync),
            false => Ok(()),
        }
    }

    /// The session's own default durability, if it chose one.
    pub(crate) fn durability(&self) -> Option<Durability> {
        self.state.lock().identity.durability
    }

    /// Whether a title is recorded.
    pub(crate) fn has_title(&self) -> bool {
        self.state.lock().title.is_some()
    }

    /// The time of the last write, as recorded.
    pub(crate) fn updated_ms(&self) -> u64 {
        self.state.lock().head.updated_ms
    }

    /// Records the title (the next `set_head` copies it to the cache), the
    /// first user text, which the save that ends at record `last_seq`
    /// brought. An empty file stays empty until the clean close when a
    /// reader finds the title in the log's first records (see
    /// `CatalogState::title_in_log`): a session's first save writes only its
    /// records.
    pub(crate) fn set_title(&self, title: &str, last_seq: u64) -> Result<()> {
        let mut state = self.state.lock();
        if !state.stored {
            state.title = Some(excerpt(title));
            if state.title_in_log && last_seq < TITLE_SCAN_RECORDS {
                return Ok(());
            }
            return self.store(&mut state);
        }
        self.file.with(|f| write_title(f, title))?;
        state.title = Some(excerpt(title));
        Ok(())
    }

    /// Forgets the title, after a clear (a `SessionStart` in place with no
    /// history): the next user text saved is the new one. The file holds
    /// that from now on, since a reader of an empty file would find the old
    /// title in the log's first records.
    pub(crate) fn clear_title(&self) -> Result<()> {
        let mut state = self.state.lock();
        state.title = None;
        state.title_in_log = false;
        if !state.stored {
            return self.store(&mut state);
        }
        self.file
            .with(|f| f.write_at(TITLE_AT, &[0u8; TITLE_SLOT_LEN]))
    }

    /// Records where the session's live history comes from, after a
    /// `SessionStart` was appended (a compaction in place): the identity
    /// slot is rewritten now, and the cache copy with the next `set_head`.
    /// Until the clean close the head is dirty, so `list` takes the origins
    /// from the log meanwhile.
    pub(crate) fn set_origins(
        &self,
        forked_from: Option<SessionOrigin>,
        compacted_from: Option<SessionOrigin>,
    ) -> Result<()> {
        let mut state = self.state.lock();
        if (state.identity.forked_from, state.identity.compacted_from)
            == (forked_from, compacted_from)
        {
            return Ok(());
        }
        state.identity.forked_from = forked_from;
        state.identity.compacted_from = compacted_from;
        if !state.stored {
            return self.store(&mut state);
        }
        let slot = identity_slot(&state.identity)?;
        self.file.with(|f| f.write_at(IDENT_AT, &slot))
    }

    /// Records a write at `updated_ms`, in memory only. The slots on disk
    /// stay dirty while a writer has the session, and `list` takes a dirty
    /// slot's numbers from the log, not the slot; so they are written when
    /// the writer opens the session, closes it or lets it go, and a save
    /// costs no write here.
    pub(crate) fn saved_at(&self, updated_ms: u64) {
        self.state.lock().head.updated_ms = updated_ms;
    }

    /// Records a save as [`SessionCatalog::saved_at`] does, at `stamp` (its
    /// last entry's) when that lies between the last recorded write and
    /// `now`, else at `now`; returns whether it took `stamp`.
    pub(crate) fn saved(&self, stamp: Option<u64>, now: u64) -> bool {
        let mut state = self.state.lock();
        let since = state.head.updated_ms;
        let taken = stamp.filter(|t| (since..=now).contains(t));
        state.head.updated_ms = taken.unwrap_or(now);
        taken.is_some()
    }

    /// Takes the session over from `left`, the slot this store wrote when
    /// it let the session go, if the file still holds exactly that (or, for
    /// an empty file, which holds no head, the list cache's slot): no
    /// writer has opened the session since (each writes its own token), so
    /// the slots are still dirty, durably so since this store's earlier
    /// [`SessionCatalog::begin_writing`], and there is nothing to write or
    /// sync. Returns whether it did.
    pub(crate) fn resume(&self, left: HeadSlot) -> bool {
        let mut state = self.state.lock();
        let now = match state.stored {
            true => Some(state.head),
            false => self.cache.as_ref().and_then(|(cache, slot)| {
                let entry = cache.read_slot(*slot)?;
                (entry.id == self.id).then_some(entry.head)
            }),
        };
        let unchanged = left.dirty && now == Some(left);
        if unchanged {
            state.writer = left.writer;
            state.head = left;
        }
        unchanged
    }

    /// The head slot on disk as this catalog was opened: the file's, or an
    /// empty file's in the listing cache; `None` if neither reads.
    pub(crate) fn recorded_head(&self) -> Option<HeadSlot> {
        let state = self.state.lock();
        match state.stored {
            true => Some(state.head).filter(|h| *h != HeadSlot::default()),
            false => self.cache.as_ref().and_then(|(cache, slot)| {
                let entry = cache.read_slot(*slot)?;
                (entry.id == self.id).then_some(entry.head)
            }),
        }
    }

    /// The writer's count of payload bytes its records refer to.
    pub(crate) fn payload_bytes(&self) -> u64 {
        self.state.lock().payload_bytes
    }

    /// Sets the writer's count of payload bytes (at its open), or adds a
    /// save's to it.
    pub(crate) fn count_payload_bytes(&self, n: u64, add: bool) {
        let mut state = self.state.lock();
        state.payload_bytes = match add {
            true => state.payload_bytes.saturating_add(n),
            false => n,
        };
    }

    /// Marks the session dirty in the cache and the file, durably, before a
    /// writer changes its log: after a power loss, neither may still say
    /// "clean" about an older state.
    pub(crate) fn begin_writing(&self, head: HeadSlot) -> Result<()> {
        debug_assert!(head.dirty);
        self.set_head(head)?;
        if let Some((cache, _)) = &self.cache {
            cache.sync()?;
        }
        self.file.with(HookedFile::sync)
    }

    /// Rewrites the head slot in the file and the cache. The cache is never
    /// cleaner than the file: a dirty head goes to the cache first, a clean
    /// one to the file first, so a crash between the two writes leaves the
    /// cache dirty and `list` asks the file (or the log).
    pub(crate) fn set_head(&self, head: HeadSlot) -> Result<HeadSlot> {
        let mut state = self.state.lock();
        let head = HeadSlot {
            writer: state.writer,
            ..head
        };
        state.head = head;
        if !state.stored && !head.dirty && state.title_in_log && state.title.is_some() {
            // A clean close of a session whose title its log's first
            // records hold: the file takes its slots now, clean head
            // first, so that a reader without the listing cache reads one
            // slot, not the log. The saves before wrote only records.
            self.store(&mut state)?;
            self.write_cache(&state)?;
        } else if !state.stored {
            // Nothing on file to keep in step: an empty catalog's numbers
            // are the log's, and the cache is the only copy.
            self.write_cache(&state)?;
        } else if head.dirty {
            self.write_cache(&state)?;
            self.file.with(|f| write_head(f, &head))?;
        } else {
            self.file.with(|f| write_head(f, &head))?;
            self.write_cache(&state)?;
        }
        Ok(head)
    }

    fn write_cache(&self, state: &CatalogState) -> Result<()> {
        let Some((cache, slot)) = &self.cache else {
            return Ok(());
        };
        let entry = CachedSession {
            id: self.id,
            head: state.head,
            title: state.title.clone(),
            identity: state.identity.clone(),
        };
        cache.write(*slot, &entry)
    }

    /// Frees the cache slot (the session is being deleted).
    pub(crate) fn forget(&self) -> Result<()> {
        match &self.cache {
            Some((cache, slot)) => cache.clear(self.id, *slot),
            None => Ok(()),
        }
    }
}
