//! Eviction: a session's oldest sealed segments removed from the local disk
//! once the archive is verified to hold them byte for byte, with a durable
//! record of what was removed (`evicted.json`); and the fetch-back that
//! places them again, checked, before a read that reaches them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};

use super::check::check_object;
use super::payloads::{refs_in_ranges, refs_of_images};
use super::segment_bytes::{content_hash, read_prefix};
use super::{
    archive_err, hex, Archive, ArchivedSegment, Manifest, ObjectKind, CONCURRENT_TRANSFERS,
};
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, sync_dir, HookedFile};
use crate::log::evicted::{self, EvictedRecord, EvictedSegment};
use crate::log::{Archivable, SealedSegment};
use crate::schema::{LoggedPayloadRef, SessionId};
use crate::segment::segment_name;
use crate::store::{FetchBack, Store};

/// What an eviction did.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictReport {
    /// Segment files removed by this call.
    pub evicted_segments: usize,
    /// Their bytes.
    pub evicted_bytes: u64,
    /// Seqs (first, last) of the session's whole evicted prefix after the
    /// call, if any.
    pub evicted: Option<(u64, u64)>,
    /// Why the next sealed segment was kept, if one was (not archived yet,
    /// or read by `restore`).
    pub kept: Option<String>,
}

/// What a fetch-back placed.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Segment files placed again.
    pub fetched_segments: usize,
    /// Their bytes.
    pub fetched_bytes: u64,
}

/// The temporary name of a segment being placed by a fetch-back: not a
/// segment name, so that a crash leaves nothing the log opens.
const FETCH_SUFFIX: &str = ".fetch";

impl Archive {
    /// Evicts a session's oldest sealed segments: those the manifest lists
    /// whose archived bytes, downloaded, have the local file's BLAKE3 (and
    /// the manifest's, when it names one), from the log's first local
    /// segment on and below the segment of its last `SessionStart` (which
    /// `restore` reads, so restoring needs nothing remote); never the active
    /// segment. The record of what goes (`evicted.json`) is made durable
    /// before any file is removed. A segment not archived yet stops the
    /// eviction there (the report says why); archived bytes that differ are
    /// [`Error::Archive`] naming the object, and nothing is evicted.
    ///
    /// A session that forks by reference read (its registered forks) keeps
    /// its segments: a fork's restore reads the parent's records up to its
    /// fork point.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn evict(&self, store: &Store, id: SessionId) -> Result<EvictReport> {
        if store.is_read_only() {
            return Err(Error::invalid(format!(
                "store {} is read-only: cannot evict from it",
                store.root().display()
            )));
        }
        let forks = store.forks_of(id);
        if let Some(fork) = forks.first() {
            return Err(Error::invalid(format!(
                "session {id} has forks by reference ({fork} …) that read its records: it keeps its segments"
            )));
        }
        let _one_at_a_time = self.inner.evicting.lock();
        let handle = store.session(id)?;
        let log = handle.log().clone();
        let snap = log.snapshot();
        let mut report = EvictReport {
            evicted: snap.evicted(),
            ..EvictReport::default()
        };
        let Some(restore_from) = snap.last_session_start() else {
            report.kept = Some("the log has no SessionStart; restore reads it whole".into());
            return Ok(report);
        };
        let manifest = self.manifest(id)?.ok_or_else(|| {
            archive_err(
                &self.manifest_path(id),
                "no manifest: push the session before evicting it",
            )
        })?;
        let active = log.segment_paths().pop();
        let local = snap.archivable();
        let (picks, kept) = pick_segments(
            &local,
            snap.first_seq(),
            active.as_ref(),
            restore_from,
            &manifest,
        )?;
        report.kept = kept;
        let Some((last, _)) = picks.last() else {
            return Ok(report);
        };
        let next = last.last_seq + 1;
        // The log's first records may be where the catalog leaves the
        // title: the file holds it, durably, before they go.
        handle.keep_title_in_file()?;
        let last_hash = last.last_hash;
        let hashes = self.verify_remote(&picks)?;
        // The large items their records name must be archived too: the
        // store's collection no longer sees them once the files are gone.
        let ranges: Vec<(u64, u64)> = picks
            .iter()
            .map(|(s, _)| (s.first_seq, s.last_seq))
            .collect();
        let refs = refs_in_ranges(&snap, &ranges)?;
        self.block_on(self.put_payloads(store.payload_area(), &refs, true))?;
        // The record first, durably; then the files, lowest seq first, so
        // that a crash leaves the local segments a contiguous suffix.
        let dir = store.session_dir(id);
        let log_id = snap.log_id().expect("a log with sealed segments has an id");
        let record = record_with(&dir, &log_id, &picks, hashes)?;
        let hook = store.hook();
        evicted::write(&dir, &record, hook)?;
        for (s, _) in &picks {
            hooked_fs::remove_file(&s.path, hook)?;
            sync_dir(&dir, hook)?;
            report.evicted_segments += 1;
            report.evicted_bytes += s.len_bytes;
        }
        log.forget_evicted(next, last_hash);
        report.evicted = Some((0, next - 1));
        Ok(report)
    }

    /// Downloads each picked segment's object and compares it with the
    /// local file (length and BLAKE3, and the manifest's content hash when
    /// it names one). Returns the content hashes, in order.
    fn verify_remote(&self, picks: &[(SealedSegment, ArchivedSegment)]) -> Result<Vec<String>> {
        self.block_on(
            futures_util::stream::iter(picks.iter())
                .map(|(s, a)| async move {
                    let object = object_store::path::Path::from(a.object.as_str());
                    let remote = self.get_bytes(&object).await?;
                    let path = s.path.clone();
                    let len = s.len_bytes;
                    let local = tokio::task::spawn_blocking(move || {
                        read_prefix(&path, len).map(|b| content_hash(&b))
                    })
                    .await
                    .map_err(|e| archive_err(&object, format!("hash failed: {e}")))??;
                    let there = content_hash(&remote);
                    let claimed = a.content_hash.as_ref().is_some_and(|h| *h != local);
                    if remote.len() as u64 != len || there != local || claimed {
                        return Err(archive_err(
                            &object,
                            format!(
                                "the archived bytes differ from the local segment's ({} bytes, BLAKE3 {there}; local {len} bytes, {local}): not evicted",
                                remote.len()
                            ),
                        ));
                    }
                    Ok(local)
                })
                .buffered(CONCURRENT_TRANSFERS)
                .try_collect(),
        )
    }

    /// Places a session's evicted segments again: downloads each object the
    /// record (`evicted.json`) names and checks it (its length and BLAKE3
    /// against the record, then its header, footer and every record's CRC
    /// and chain link, the first seq and start hash, the last hash, and
    /// that the last continues into the first local segment) before
    /// anything is written; then writes each, highest seq first, to a
    /// temporary name, syncs it, renames it into place and syncs the
    /// directory, and only then drops them from the record. A refused
    /// object is [`Error::Archive`] naming it, with nothing placed.
    ///
    /// It writes, so the store must be writable: a read-only store never
    /// fetches back (its reads of an evicted range are
    /// [`Error::Evicted`]).
    ///
    /// Example: [the module](crate::archive#example).
    pub fn fetch_back(&self, store: &Store, id: SessionId) -> Result<FetchReport> {
        if store.is_read_only() {
            return Err(Error::invalid(format!(
                "store {} is read-only: a fetch-back places segment files; open it writable",
                store.root().display()
            )));
        }
        let _one_at_a_time = self.inner.evicting.lock();
        let handle = store.session(id)?;
        let log = handle.log().clone();
        let dir = store.session_dir(id);
        let hook = store.hook();
        sweep_fetches(&dir, hook)?;
        let Some(mut record) = evicted::read(&dir)? else {
            return Ok(FetchReport::default());
        };
        let snap = log.snapshot();
        let Some((first_local, local_start)) = snap.evicted_end() else {
            return Ok(FetchReport::default());
        };
        let wanted: Vec<EvictedSegment> = record
            .segments
            .iter()
            .filter(|s| s.first_seq < first_local)
            .cloned()
            .collect();
        let fetched = self.fetch_checked(&wanted, &record.log_id)?;
        // The objects continue each other and the local log (the opener
        // checked the record against the first local segment).
        let mut expect = (0, crate::chain::EntryHash::genesis());
        for s in &wanted {
            if (s.first_seq, s.start_hash) != expect {
                return Err(Error::Archive {
                    object: s.object.clone(),
                    reason: format!(
                        "does not continue the segment before it (the record expects seq {} from {})",
                        expect.0, expect.1
                    ),
                });
            }
            expect = (s.last_seq + 1, s.last_hash);
        }
        if expect != (first_local, local_start) {
            let last = wanted.last().map_or_else(String::new, |s| s.object.clone());
            return Err(Error::Archive {
                object: last,
                reason: format!("does not continue into the local log at seq {first_local}"),
            });
        }
        // The large items their records name, durable in the store before
        // the segments are placed, and kept from a collection (the
        // writers' lock) until they are.
        let refs = refs_of_images(fetched.iter().map(|(_, r)| r.as_slice()), u64::MAX);
        let area = store.payload_area();
        let _writers = (!refs.is_empty()).then(|| area.lock_shared()).transpose()?;
        self.get_payloads(area, &refs)?;
        let mut report = FetchReport::default();
        for (s, (bytes, _)) in wanted.iter().zip(&fetched).rev() {
            place(&dir, s, bytes, hook)?;
            report.fetched_segments += 1;
            report.fetched_bytes += bytes.len() as u64;
        }
        record.segments.retain(|s| s.first_seq >= first_local);
        evicted::write(&dir, &record, hook)?;
        log.adopt_fetched()?;
        Ok(report)
    }

    /// Downloads the objects of `wanted` and checks each against its entry
    /// and its own bytes, all before anything is placed.
    /// Returns each one's bytes and the payloads its records name.
    fn fetch_checked(&self, wanted: &[EvictedSegment], log_id: &str) -> Result<Vec<Fetched>> {
        self.block_on(
            futures_util::stream::iter(wanted.iter())
                .map(|s| async move {
                    let object = object_store::path::Path::from(s.object.as_str());
                    let bytes = self.get_bytes(&object).await?;
                    let entry = s.clone();
                    let log_id = log_id.to_string();
                    let name = object.clone();
                    tokio::task::spawn_blocking(move || {
                        let refs = check_fetched(&entry, &bytes, &log_id)
                            .map_err(|why| archive_err(&name, why))?;
                        Ok::<_, Error>((bytes, refs))
                    })
                    .await
                    .map_err(|e| archive_err(&object, format!("check failed: {e}")))?
                })
                .buffered(CONCURRENT_TRANSFERS)
                .try_collect(),
        )
    }
}

/// A fetched segment's bytes and the payloads its records name.
type Fetched = (bytes::Bytes, Vec<(u64, LoggedPayloadRef)>);

/// Whether fetched bytes are the evicted segment `s` of log `log_id`.
/// Returns the payloads its records name, with the seq that first names each.
fn check_fetched(
    s: &EvictedSegment,
    bytes: &[u8],
    log_id: &str,
) -> Result<Vec<(u64, LoggedPayloadRef)>, String> {
    let hash = content_hash(bytes);
    if bytes.len() as u64 != s.len_bytes || hash != s.content_hash {
        return Err(format!(
            "is not the evicted {}: {} bytes, BLAKE3 {hash}; the record says {} bytes, {}",
            s.name,
            bytes.len(),
            s.len_bytes,
            s.content_hash
        ));
    }
    let kind = ObjectKind::Sealed {
        first_seq: s.first_seq,
        last_seq: s.last_seq,
    };
    let checked = check_object(bytes, kind).map_err(|(offset, seq, k)| {
        let at = seq.map_or(String::new(), |s| format!(", seq {s}"));
        format!("{k} at offset {offset}{at}")
    })?;
    if hex(&checked.header.log_id) != log_id
        || checked.header.start_hash != s.start_hash
        || checked.last_hash != s.last_hash
    {
        return Err(format!(
            "its log id, start hash or last hash is not the evicted {}'s",
            s.name
        ));
    }
    Ok(checked.payloads)
}

/// Writes a fetched segment under a temporary name, syncs it, renames it
/// to its segment name and syncs the directory.
fn place(dir: &Path, s: &EvictedSegment, bytes: &[u8], hook: &crate::fs::Hook) -> Result<()> {
    let name = segment_name(s.first_seq);
    let tmp = dir.join(format!("{name}{FETCH_SUFFIX}"));
    let written = HookedFile::create(&tmp, hook).and_then(|file| {
        file.write_at(0, bytes)?;
        file.sync()
    });
    if let Err(e) = written.and_then(|()| hooked_fs::rename(&tmp, &dir.join(&name), hook)) {
        let _ = hooked_fs::remove_file(&tmp, hook);
        return Err(e);
    }
    sync_dir(dir, hook)
}

/// Removes what a fetch-back cut off by a crash left under temporary names.
fn sweep_fetches(dir: &Path, hook: &crate::fs::Hook) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("read dir", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read dir", dir, e))?;
        if entry.file_name().to_string_lossy().ends_with(FETCH_SUFFIX) {
            hooked_fs::remove_file(&entry.path(), hook)?;
        }
    }
    Ok(())
}

impl FetchBack for Archive {
    fn fetch_back(&self, store: &Store, id: SessionId) -> Result<()> {
        Archive::fetch_back(self, store, id).map(|_| ())
    }
}

impl Store {
    /// Attaches an archive to the store: a read that reaches a session's
    /// evicted segments ([`Store::export`], [`Store::verify`],
    /// [`Store::export_entries`]) fetches them back from it first
    /// ([`Archive::fetch_back`]). A read-only store does not fetch back.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn attach_archive(&self, archive: &Archive) {
        self.set_fetcher(Some(Arc::new(archive.clone())));
    }

    /// Detaches the archive: reads of evicted segments fail with
    /// [`Error::Evicted`].
    ///
    /// Example: [the module](crate::archive#example).
    pub fn detach_archive(&self) {
        self.set_fetcher(None);
    }

    /// The session's eviction record, if it has evicted segments (or had,
    /// and a crash left the record listing segments present again).
    ///
    /// Example: [the module](crate::archive#example).
    pub fn evicted_segments(&self, id: SessionId) -> Result<Vec<EvictedSegment>> {
        Ok(evicted::read(&self.session_dir(id))?.map_or_else(Vec::new, |r| r.segments))
    }
}

/// A segment an eviction takes, with the manifest's entry for it.
type Pick = (SealedSegment, ArchivedSegment);

/// The sealed segments an eviction takes, oldest first, each with the
/// manifest's entry for it: the contiguous run from the log's first local
/// segment (`first_seq`) that the manifest names as they are here, below
/// the segment of `restore_from` and never the `active` one. With the
/// report's reason for keeping the next segment, when it is that restore
/// reads it or that it is not archived yet.
fn pick_segments(
    local: &Archivable,
    first_seq: u64,
    active: Option<&PathBuf>,
    restore_from: u64,
    manifest: &Manifest,
) -> Result<(Vec<Pick>, Option<String>)> {
    let mut picks = Vec::new();
    let mut next = first_seq;
    for s in &local.sealed {
        let name = segment_name(s.first_seq);
        if s.first_seq != next || Some(&s.path) == active {
            break;
        }
        if s.last_seq >= restore_from {
            let why = format!(
                "{name} and after: restore reads from the last SessionStart (seq {restore_from})"
            );
            return Ok((picks, Some(why)));
        }
        let Some(a) = manifest
            .segments
            .iter()
            .find(|a| a.first_seq == s.first_seq)
        else {
            return Ok((picks, Some(format!("{name} and after: not archived yet"))));
        };
        let same = (a.last_seq, a.start_hash, a.last_hash, a.len_bytes)
            == (s.last_seq, s.start_hash, s.last_hash, s.len_bytes);
        if !same {
            return Err(Error::Archive {
                object: a.object.clone(),
                reason: format!("the manifest's entry differs from the local {name}: not evicted"),
            });
        }
        picks.push((s.clone(), a.clone()));
        next = s.last_seq + 1;
    }
    Ok((picks, None))
}

/// The session's record of evicted segments (`evicted.json` in `dir`, or a
/// new one) with `picks` in place of what it held from their first seq on;
/// `hashes` are their content hashes, in order.
fn record_with(
    dir: &Path,
    log_id: &[u8; 16],
    picks: &[Pick],
    hashes: Vec<String>,
) -> Result<EvictedRecord> {
    let mut record = evicted::read(dir)?.unwrap_or_else(|| EvictedRecord::new(log_id));
    let first_pick = picks[0].0.first_seq;
    record.segments.retain(|s| s.first_seq < first_pick);
    for ((s, a), content_hash) in picks.iter().zip(hashes) {
        record.segments.push(EvictedSegment {
            name: segment_name(s.first_seq),
            first_seq: s.first_seq,
            last_seq: s.last_seq,
            start_hash: s.start_hash,
            last_hash: s.last_hash,
            len_bytes: s.len_bytes,
            content_hash,
            object: a.object.clone(),
        });
    }
    Ok(record)
}
