//! The store's listing cache (`list.cache` in the root): a copy of every
//! session's catalog in fixed slots, so that `list` reads one file instead
//! of one per session.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use parking_lot::Mutex;

use super::{HeadSlot, Identity};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::format::catalog::{
    cache_layout_of, cache_slot_crc_ok, seal_cache_slot, CACHE_LAYOUT, CACHE_MAGIC, CACHE_SLOT_LEN,
    HEAD_LEN,
};
use crate::fs::{Hook, HookedFile};
use crate::schema::{SessionId, SessionOrigin};

/// What the listing cache holds of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedSession {
    pub(crate) id: SessionId,
    pub(crate) head: HeadSlot,
    pub(crate) title: Option<String>,
    pub(crate) identity: Identity,
}

/// The store's listing cache file: fixed slots, one per session, laid out
/// as `format::catalog` says.
///
/// It is a copy, never the truth: a slot that is missing, damaged, names
/// another session or is dirty sends `list` to the session's own catalog
/// file (and a dirty one on to the log).
pub(crate) struct ListCache {
    file: HookedFile,
    table: Mutex<SlotTable>,
}

#[derive(Default)]
struct SlotTable {
    by_id: HashMap<SessionId, u32>,
    taken: std::collections::HashSet<u32>,
    next: u32,
    /// The cache file's length when its placements were last all learnt.
    /// New placements (any process's) only ever extend the file, so while
    /// its length is this, there is nothing new to learn.
    learned_len: u64,
}

/// The listing cache's file name, in the store root.
const LIST_CACHE_FILE: &str = "list.cache";

impl CachedSession {
    fn encode(&self) -> [u8; CACHE_SLOT_LEN] {
        let at = CACHE_LAYOUT;
        let mut b = [0u8; CACHE_SLOT_LEN];
        b[..4].copy_from_slice(&CACHE_MAGIC);
        b[at.id..at.id + 16].copy_from_slice(&self.id.0);
        b[at.head..at.head + HEAD_LEN].copy_from_slice(&self.head.encode());
        b[at.created..at.created + 8].copy_from_slice(&self.identity.created_ms.to_le_bytes());
        for (flag_at, at, origin) in [
            (at.flags, at.forked, &self.identity.forked_from),
            (at.flags + 1, at.compacted, &self.identity.compacted_from),
        ] {
            if let Some(o) = origin {
                b[flag_at] = 1;
                b[at..at + 16].copy_from_slice(&o.session_id.0);
                b[at + 16..at + 48].copy_from_slice(o.at_hash.as_bytes());
            }
        }
        if let Some(t) = &self.title {
            let t = &t.as_bytes()[..t.len().min(at.title_max())];
            b[at.title_len..at.title_len + 2].copy_from_slice(&(t.len() as u16).to_le_bytes());
            b[at.title()..at.title() + t.len()].copy_from_slice(t);
        }
        seal_cache_slot(&mut b);
        b
    }

    /// A slot of either version, if it reads.
    fn decode(b: &[u8]) -> Option<CachedSession> {
        let at = cache_layout_of(b.get(..4)?)?;
        if !cache_slot_crc_ok(b) {
            return None;
        }
        let origin = |flag_at: usize, at: usize| -> Option<SessionOrigin> {
            (b[flag_at] == 1).then(|| SessionOrigin {
                session_id: SessionId(b[at..at + 16].try_into().expect("16 bytes")),
                at_hash: EntryHash(b[at + 16..at + 48].try_into().expect("32 bytes")),
            })
        };
        let title_len = usize::from(u16::from_le_bytes(
            b[at.title_len..at.title_len + 2].try_into().ok()?,
        ));
        let title = match title_len {
            0 => None,
            n if n <= at.title_max() => Some(
                std::str::from_utf8(&b[at.title()..at.title() + n])
                    .ok()?
                    .to_owned(),
            ),
            _ => return None,
        };
        Some(CachedSession {
            id: SessionId(b[at.id..at.id + 16].try_into().ok()?),
            head: HeadSlot::decode(&b[at.head..at.created])?,
            title,
            identity: Identity {
                created_ms: u64::from_le_bytes(b[at.created..at.created + 8].try_into().ok()?),
                forked_from: origin(at.flags, at.forked),
                compacted_from: origin(at.flags + 1, at.compacted),
                durability: None,
            },
        })
    }
}

impl ListCache {
    /// Opens (or creates) the cache in `root`. Its placements are learnt
    /// when a session is first looked up in it (`slot_for`), not here, so
    /// that opening a store costs the same whatever it holds.
    pub(crate) fn open(root: &Path, hook: &Hook) -> Result<ListCache> {
        let path = root.join(LIST_CACHE_FILE);
        let file = HookedFile::open_or_create(&path, hook)?;
        Ok(ListCache {
            file,
            table: Mutex::new(SlotTable::default()),
        })
    }

    fn read_slots(path: &Path) -> Result<Vec<(u32, Option<CachedSession>)>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io("read", path, e)),
        };
        Ok(bytes
            .chunks_exact(CACHE_SLOT_LEN)
            .enumerate()
            .map(|(i, b)| (i as u32, CachedSession::decode(b)))
            .collect())
    }

    /// Every session the cache file describes, read in one go.
    pub(crate) fn read_all(root: &Path) -> Result<HashMap<SessionId, CachedSession>> {
        let mut out = HashMap::new();
        let mut twice = Vec::new();
        for e in ListCache::read_slots(&root.join(LIST_CACHE_FILE))?
            .into_iter()
            .filter_map(|(_, e)| e)
        {
            let id = e.id;
            if out.insert(id, e).is_some() {
                twice.push(id);
            }
        }
        // Two slots naming one session (two processes raced): trust neither.
        for id in twice {
            out.remove(&id);
        }
        Ok(out)
    }

    /// The session's slot. For a session this process has not placed, the
    /// cache file is re-read under its lock (other processes place sessions
    /// too) and every placement found there is learnt; a session still
    /// unplaced gets a new slot at the end.
    pub(super) fn slot_for(&self, id: SessionId) -> u32 {
        if let Some(&slot) = self.table.lock().by_id.get(&id) {
            return slot;
        }
        self.place(id, true)
    }

    /// Places a session known to be new (just created): no re-read needed.
    pub(crate) fn place_new(&self, id: SessionId) {
        self.place(id, false);
    }

    /// Chooses a slot under the cache file's lock and claims it on disk
    /// (a dirty placeholder) before unlocking, so that no two processes take
    /// one slot and no session gets two.
    fn place(&self, id: SessionId, learn: bool) -> u32 {
        let mut t = self.table.lock();
        let locked = self.file.file().lock().is_ok();
        let len = self.file.file().metadata().map_or(0, |m| m.len());
        // Re-reading the whole file for every session placed made listing a
        // store without its cache quadratic; only a longer file has news.
        if learn && len != t.learned_len {
            let slots = ListCache::read_slots(self.file.path()).unwrap_or_default();
            t.learned_len = slots.len() as u64 * CACHE_SLOT_LEN as u64;
            for (slot, e) in slots {
                if let Some(e) = e {
                    if !t.by_id.contains_key(&e.id) && t.taken.insert(slot) {
                        t.by_id.insert(e.id, slot);
                    }
                }
                t.next = t.next.max(slot + 1);
            }
        }
        let slot = match t.by_id.get(&id) {
            Some(&slot) => slot,
            None => {
                let on_disk = len / CACHE_SLOT_LEN as u64;
                let slot = (on_disk as u32).max(t.next);
                let claim = CachedSession {
                    id,
                    head: HeadSlot {
                        dirty: true,
                        ..HeadSlot::default()
                    },
                    title: None,
                    identity: Identity {
                        created_ms: 0,
                        forked_from: None,
                        compacted_from: None,
                        durability: None,
                    },
                };
                let written = self.write(slot, &claim).is_ok();
                // Under the file's lock: what we knew plus our own slot is
                // all there is, if we knew all of it before.
                if written && len == t.learned_len {
                    t.learned_len = len.max((u64::from(slot) + 1) * CACHE_SLOT_LEN as u64);
                }
                t.next = slot + 1;
                t.by_id.insert(id, slot);
                t.taken.insert(slot);
                slot
            }
        };
        if locked {
            let _ = self.file.file().unlock();
        }
        slot
    }

    pub(super) fn sync(&self) -> Result<()> {
        self.file.sync()
    }

    /// One slot's entry as the file holds it now; `None` if it does not
    /// read (missing, damaged).
    pub(super) fn read_slot(&self, slot: u32) -> Option<CachedSession> {
        let mut b = [0u8; CACHE_SLOT_LEN];
        let at = u64::from(slot) * CACHE_SLOT_LEN as u64;
        self.file.file().read_exact_at(&mut b, at).ok()?;
        CachedSession::decode(&b)
    }

    pub(super) fn write(&self, slot: u32, entry: &CachedSession) -> Result<()> {
        self.file
            .write_at(u64::from(slot) * CACHE_SLOT_LEN as u64, &entry.encode())
    }

    pub(super) fn clear(&self, id: SessionId, slot: u32) -> Result<()> {
        self.file.write_at(
            u64::from(slot) * CACHE_SLOT_LEN as u64,
            &[0u8; CACHE_SLOT_LEN],
        )?;
        let mut t = self.table.lock();
        if t.by_id.remove(&id).is_some() {
            t.taken.remove(&slot);
        }
        Ok(())
    }
}
