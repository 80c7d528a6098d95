//! Large items stored once, store-wide: moving them to the payload area on
//! the way in, checking the references (`verify`), and collecting what no
//! session refers to. The area itself is `crate::payload`.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::fs::{self, File};

use super::Store;
use crate::catalog::HeadSlot;
use crate::error::{Error, Result};
use crate::fs::io_err;
use crate::log::Log;
use crate::payload::RETIRED_DIR;
use crate::payload::{PayloadCollection, PayloadDamage};
use crate::schema::{ArchivedLogEntry, LogEntry, LoggedItem, LoggedPayloadRef, SessionId};

/// An entry with its large items replaced by references, and the archives
/// of those items (with the references that name them), not yet written.
pub(super) struct Planned {
    pub(super) entry: LogEntry,
    pub(super) payloads: Vec<Payload>,
}

/// A large item's archive, and the reference that names it.
pub(super) type Payload = (LoggedPayloadRef, rkyv::util::AlignedVec);

/// `entry` with every item of at least `threshold` text bytes replaced by a
/// reference to its archive; `None` when it has no such item.
pub(super) fn plan(entry: &LogEntry, threshold: usize) -> Option<Planned> {
    if !entry.items().iter().any(|i| i.text_len() >= threshold) {
        return None;
    }
    let mut entry = entry.clone();
    let mut payloads = Vec::new();
    refer_in_place(&mut entry, threshold, |r, bytes| {
        payloads.push((r, bytes));
        Ok(rkyv::util::AlignedVec::new())
    })
    .expect("keeping the archives in memory cannot fail");
    Some(Planned { entry, payloads })
}

/// Replaces every item of `entry` of at least `threshold` text bytes by a
/// reference to its archive, giving each archive to `take`, which returns
/// the buffer to archive the next one into.
fn refer_in_place(
    entry: &mut LogEntry,
    threshold: usize,
    mut take: impl FnMut(LoggedPayloadRef, rkyv::util::AlignedVec) -> Result<rkyv::util::AlignedVec>,
) -> Result<()> {
    let mut buf = rkyv::util::AlignedVec::new();
    for item in entry.items_mut() {
        if item.text_len() >= threshold {
            let bytes = item.to_payload_in(buf);
            let r = LoggedPayloadRef {
                hash: *blake3::hash(&bytes).as_bytes(),
                len: bytes.len() as u64,
            };
            *item = LoggedItem::External(Box::new(r));
            buf = take(r, bytes)?;
        }
    }
    Ok(())
}

thread_local! {
    /// The save path's buffer for a large item's archive: kept, so that
    /// archiving an item of hundreds of KB does not fault in fresh pages
    /// each time.
    static PAYLOAD_BUFFER: Cell<rkyv::util::AlignedVec> =
        Cell::new(rkyv::util::AlignedVec::new());
}

/// A thread keeps its payload buffer only up to this capacity.
const MAX_KEPT_PAYLOAD_BUFFER: usize = 8 << 20;

/// The writers' lock of the payload area, held while a save's payloads are
/// written and until its records are appended; `None` for a save with no
/// large item, which never touches the area.
pub(super) type PayloadGuard = Option<File>;

impl Store {
    /// The store's payload area.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn payload_area(&self) -> &crate::payload::PayloadArea {
        &self.inner.payloads
    }

    /// The store's threshold: items of at least this many text bytes go to
    /// the payload area.
    pub(super) fn payload_threshold(&self) -> usize {
        self.inner.opts.payload_threshold
    }

    /// `entries` with their large items moved to the payload area: each
    /// such item's archive written (or found there) before this returns, so
    /// the records that refer to them can be appended. Borrows
    /// `entries` unchanged, touching nothing, when no item is large.
    pub(super) fn externalize<'e>(
        &self,
        entries: &'e [LogEntry],
    ) -> Result<(Cow<'e, [LogEntry]>, PayloadGuard)> {
        let threshold = self.payload_threshold();
        let planned: Vec<Option<Planned>> = entries.iter().map(|e| plan(e, threshold)).collect();
        let given: Vec<LoggedPayloadRef> = entries
            .iter()
            .flat_map(|e| e.items())
            .filter_map(|i| match i {
                LoggedItem::External(r) => Some(**r),
                _ => None,
            })
            .collect();
        if planned.iter().all(Option::is_none) && given.is_empty() {
            return Ok((Cow::Borrowed(entries), None));
        }
        let guard = self.write_payloads(planned.iter().flatten().flat_map(|p| &p.payloads))?;
        // A reference the caller wrote itself must name a payload this
        // store holds, checked under the lock that keeps collection away,
        // and made durable with the records that name it (its writer may
        // not have synced it).
        for r in given {
            if let Err(problem) = self.inner.payloads.adopt(&r) {
                return Err(Error::invalid(format!(
                    "an entry refers to payload {} that this store does not hold intact: {problem}",
                    crate::chain::EntryHash(r.hash)
                )));
            }
        }
        let out = entries
            .iter()
            .zip(planned)
            .map(|(e, p)| p.map_or_else(|| e.clone(), |p| p.entry))
            .collect();
        Ok((Cow::Owned(out), guard))
    }

    /// Writes the payloads of `planned` entries, under the writers' lock,
    /// which the caller holds until the entries are appended. Nothing is
    /// synced here, whatever the save's durability: the group commit that
    /// makes the save's records durable (at once for a `Sync` save, at the
    /// next sync for a `Buffered` one) syncs the payloads first.
    pub(super) fn write_payloads<'p>(
        &self,
        payloads: impl IntoIterator<Item = &'p Payload>,
    ) -> Result<PayloadGuard> {
        let guard = self.payload_writers_lock()?;
        for (r, bytes) in payloads {
            self.inner.payloads.put_named(bytes, *r)?;
        }
        Ok(Some(guard))
    }

    fn payload_writers_lock(&self) -> Result<File> {
        self.writable()?;
        self.inner.payloads.lock_shared()
    }

    /// [`Store::externalize`] of entries the caller gives up (the save
    /// path's, made from runtime items, which never refer to the area
    /// themselves): each large item is archived where it lies, into the
    /// thread's kept buffer, and written at once.
    pub(super) fn externalize_owned(
        &self,
        mut entries: Vec<LogEntry>,
    ) -> Result<(Vec<LogEntry>, PayloadGuard)> {
        let threshold = self.payload_threshold();
        let large = |e: &LogEntry| e.items().iter().any(|i| i.text_len() >= threshold);
        if !entries.iter().any(large) {
            return Ok((entries, None));
        }
        let guard = self.payload_writers_lock()?;
        let mut kept = PAYLOAD_BUFFER.try_with(Cell::take).unwrap_or_default();
        let written = entries.iter_mut().try_for_each(|e| {
            refer_in_place(e, threshold, |r, bytes| {
                let put = self.inner.payloads.put_named(&bytes, r);
                kept = bytes;
                put.map(|()| std::mem::take(&mut kept))
            })
        });
        if kept.capacity() <= MAX_KEPT_PAYLOAD_BUFFER {
            // Fails only while the thread's locals are being destroyed.
            let _ = PAYLOAD_BUFFER.try_with(|c| c.set(kept));
        }
        written?;
        Ok((entries, Some(guard)))
    }

    /// Checks every payload the session's records refer to: present, of
    /// the length and BLAKE3 hash the record names, a valid item archive.
    /// Returns what does not resolve, by record; reads only.
    ///
    /// Example: [the `payload` module](crate::payload#example).
    pub fn verify_payloads(&self, id: SessionId) -> Result<Vec<PayloadDamage>> {
        let snap = self.snapshot(id)?;
        let mut damage = Vec::new();
        let mut checked = HashSet::new();
        // The local records: an evicted prefix's payloads are the archive's.
        for rec in snap.iter_from(snap.first_seq()) {
            let rec = rec?;
            for r in rec.entry().items().iter().filter_map(|i| i.payload_ref()) {
                // One check per payload and record is enough: a record that
                // repeats a payload repeats its verdict.
                if !checked.insert((rec.seq, r.hash)) {
                    continue;
                }
                let problem = match self.inner.payloads.read(&r) {
                    Ok(bytes) => crate::payload::check_archive(&bytes).err(),
                    Err(p) => Some(p),
                };
                if let Some(problem) = problem {
                    damage.push(PayloadDamage {
                        seq: rec.seq,
                        hash: crate::chain::EntryHash(r.hash).to_string(),
                        problem,
                    });
                }
            }
        }
        Ok(damage)
    }

    /// Removes the payloads no session of the store refers to (mark and
    /// sweep). It runs under the payload area's exclusive lock, which every
    /// save holds shared from its first payload until its records are
    /// appended, so no save is between the two while the marks are taken
    /// and files removed: a payload a writer is about to refer to is either
    /// marked, or written again by that writer after the sweep. Saves of
    /// large items wait for it; other saves do not. A crash mid-sweep
    /// leaves unreferenced payloads for the next one.
    ///
    /// The mark reads every session directory, listed or not: sessions,
    /// creations not yet durable, and retired parents that forks still
    /// read; each as far as its log reads, unsynced records included (a
    /// `Buffered` writer's, here or in another process). A log that cannot
    /// be read fails the collection, naming it, rather than let it lose
    /// what it refers to.
    ///
    /// Example: [the `payload` module](crate::payload#example).
    pub fn collect_payloads(&self) -> Result<PayloadCollection> {
        self.writable()?;
        self.inner.payloads.collect(|| {
            let mut referenced = HashSet::new();
            for place in ["sessions", RETIRED_DIR] {
                let dir = self.inner.root.join(place);
                let entries = match fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(Error::io("read dir", &dir, e)),
                };
                for entry in entries {
                    let entry = entry.map_err(io_err("read dir", &dir))?;
                    let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                        continue;
                    };
                    let log = match self.open_log_here(id) {
                        Some(log) => log,
                        None => match Log::open_read_only(entry.path()) {
                            Ok(log) => log,
                            // A directory whose creation has not written a segment yet.
                            Err(Error::NotFound { .. }) => continue,
                            Err(e) => return Err(e),
                        },
                    };
                    mark_references(&log, &mut referenced)?;
                }
            }
            Ok(referenced)
        })
    }
}

/// Adds the payloads every local record of `log` refers to. Those that
/// only records evicted to an archive name are not marked: the eviction put
/// them in the archive, and a fetch-back brings them again.
fn mark_references(log: &Log, referenced: &mut HashSet<[u8; 32]>) -> Result<()> {
    let snap = log.snapshot();
    for rec in snap.iter_from(snap.first_seq()) {
        let rec = rec?;
        let items = rec.entry().items();
        referenced.extend(items.iter().filter_map(|i| i.payload_ref().map(|r| r.hash)));
    }
    Ok(())
}

/// The bytes of the payload-area items a session's records refer to: each
/// reference's length, except in a `SessionStart` that compacts in place
/// after the first record (its history repeats items the session already
/// holds; see `HeadSlot::payload_bytes`). From `recorded`, a head slot
/// whose count is of exactly this log (its head and next seq are the log's:
/// the chain binds every record), without reading a record; else from
/// every local record (a record that does not read ends the count).
pub(crate) fn payload_count(log: &Log, recorded: Option<&HeadSlot>) -> u64 {
    let snap = log.snapshot();
    let head = snap.head().map(|(_, h)| h).unwrap_or_default();
    let exact = recorded.filter(|h| {
        h.first_seq == snap.log_start() && h.next_seq == snap.next_seq() && h.head == head
    });
    if let Some(bytes) = exact.and_then(|h| h.payload_bytes) {
        return bytes;
    }
    let first = snap.log_start();
    snap.iter_from(snap.first_seq())
        .map_while(|r| r.ok())
        .filter(|r| {
            r.seq == first
                || !matches!(
                    r.entry(),
                    ArchivedLogEntry::SessionStart { compacted_from, .. } if compacted_from.is_some()
                )
        })
        .map(|r| {
            let refs = r.entry().items().iter().filter_map(|i| i.payload_ref());
            refs.fold(0u64, |n, p| n.saturating_add(p.len))
        })
        .fold(0u64, u64::saturating_add)
}
