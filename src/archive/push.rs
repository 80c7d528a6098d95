//! Push: a session's sealed segments and synced tail up, then its manifest.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::{StreamExt, TryStreamExt};

use super::check::clear_marks;
use super::payloads::refs_in_ranges;
use super::segment_bytes::{content_hash, read_prefix};
use super::{
    archive_err, hex, Archive, ArchivedSegment, ArchivedTail, Manifest, ObjectKind,
    CONCURRENT_TRANSFERS, MANIFEST_VERSION,
};
use crate::catalog::{self, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::format::SEGMENT_HEADER_LEN;
use crate::log::evicted;
use crate::log::{Archivable, EvictedSegment, SealedSegment};
use crate::schema::SessionId;
use crate::store::{now_ms, Store};

/// What a push did.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Segment objects this push created.
    pub uploaded_segments: usize,
    /// Sealed segments the archive held already.
    pub skipped_segments: usize,
    /// Whether a tail object was created.
    pub uploaded_tail: bool,
    /// Bytes uploaded (segments and tail).
    pub uploaded_bytes: u64,
    /// Seq after the last archived record.
    pub next_seq: u64,
    /// Payload objects (large items the pushed records name) this push
    /// created.
    pub uploaded_payloads: usize,
}

/// An upload's outcome: created (or found), bytes, whether a tail, the
/// object, and a segment's content hash.
type Uploaded = (bool, u64, bool, object_store::path::Path, Option<String>);

/// A file a push sends up: a sealed segment, or the synced prefix of the
/// active segment (its first `len_bytes`) as a tail object.
struct Upload {
    object: object_store::path::Path,
    file: PathBuf,
    len_bytes: u64,
    is_tail: bool,
}

/// What a push sends, and what its manifest will name.
struct PushPlan {
    /// Every sealed segment of the log: evicted, archived before, or going up.
    segments: Vec<ArchivedSegment>,
    tail: Option<ArchivedTail>,
    uploads: Vec<Upload>,
    /// Sealed segments the archive holds already, as they are here.
    skipped_segments: usize,
}

/// Progress of a transfer, for a progress bar.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Bytes moved so far.
    pub done_bytes: u64,
    /// Bytes this call will move.
    pub total_bytes: u64,
}

impl Archive {
    /// Pushes a session: every sealed segment the archive does not hold yet
    /// (each created once, never overwritten), the synced prefix of the
    /// active segment as a tail object (after syncing the session, when the
    /// store is writable), then the manifest. A later push uploads only what
    /// is new.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn push(&self, store: &Store, id: SessionId) -> Result<PushReport> {
        self.push_with(store, id, |_| {})
    }

    /// [`Archive::push`], telling `progress` as bytes go up.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn push_with(
        &self,
        store: &Store,
        id: SessionId,
        progress: impl Fn(Transfer) + Send + Sync,
    ) -> Result<PushReport> {
        if !store.is_read_only() {
            store.checkpoint(id)?;
        }
        let snap = store.snapshot(id)?;
        let local = snap.archivable();
        let cat = catalog::read(&store.session_dir(id).join(CATALOG_FILE)).ok();
        let log_id = snap.log_id().map(|id| hex(&id));
        // Segments evicted from the local disk: archived already, and
        // verified so when they were evicted.
        let evicted: Vec<_> = evicted::read(&store.session_dir(id))?
            .map_or_else(Vec::new, |r| r.segments)
            .into_iter()
            .filter(|e| e.first_seq < snap.first_seq())
            .collect();
        self.block_on(async {
            let existing = self.get_manifest(id).await?;
            if let Some(m) = &existing {
                self.refuse_other_history(id, m, log_id.as_deref(), &local, &evicted)?;
            }
            let there: HashMap<String, u64> = self
                .list_objects(id)
                .await?
                .into_iter()
                .map(|(p, _, n)| (p.to_string(), n))
                .collect();
            let mut plan = self.plan_push(id, &local, &evicted, existing.as_ref(), &there)?;
            let mut report = PushReport {
                skipped_segments: plan.skipped_segments,
                ..PushReport::default()
            };
            // The large items the records going up name: uploaded before
            // the manifest that publishes those records, so that an
            // archive's records always resolve.
            let refs = refs_in_ranges(&snap, &ranges_going_up(&local, &plan.uploads))?;
            report.uploaded_payloads = self
                .put_payloads(store.payload_area(), &refs, false)
                .await?;
            let created = self.upload(plan.uploads, &progress).await?;
            tally(created, &mut plan.segments, &mut report);
            let Some(log_id) = log_id else {
                // An empty log has no segment with records: nothing to name.
                return Ok(report);
            };
            let mut manifest = manifest_for_catalog(id, log_id, cat.as_ref());
            manifest.segments = plan.segments;
            manifest.tail = plan.tail;
            // A fork's first record names its parent (an evicted one's is
            // read from the manifest it already has).
            manifest.fork_link = snap
                .fork_link()
                .ok()
                .flatten()
                .or(existing.as_ref().and_then(|m| m.fork_link));
            if cat.as_ref().is_none_or(|c| c.identity.is_none()) {
                identity_from_listing(&mut manifest, store, id);
            }
            report.next_seq = manifest.next_seq();
            self.put_manifest(&manifest).await?;
            Ok(report)
        })
    }

    /// Pushes every session of the store, in id order, returning each
    /// session's report.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn push_all(&self, store: &Store) -> Result<Vec<(SessionId, PushReport)>> {
        let mut out = Vec::new();
        for info in store.list()? {
            out.push((info.id, self.push(store, info.id)?));
        }
        Ok(out)
    }

    /// Refuses a push over a manifest of another history of the session:
    /// another log under the same id, or one that is not a prefix of the
    /// local log (a session restored to a point and appended to since).
    fn refuse_other_history(
        &self,
        id: SessionId,
        m: &Manifest,
        log_id: Option<&str>,
        local: &Archivable,
        evicted: &[EvictedSegment],
    ) -> Result<()> {
        if let Some(ours) = log_id {
            if m.log_id != ours {
                return Err(archive_err(
                    &self.manifest_path(id),
                    format!(
                        "names log {}, but the local session's log is {ours}: another log under the same id",
                        m.log_id
                    ),
                ));
            }
        }
        // The archive must hold a prefix of this log.
        let differs = m.segments.iter().find(|s| {
            let key = (s.first_seq, s.last_seq, s.last_hash);
            !local
                .sealed
                .iter()
                .any(|l| (l.first_seq, l.last_seq, l.last_hash) == key)
                && !evicted
                    .iter()
                    .any(|e| (e.first_seq, e.last_seq, e.last_hash) == key)
        });
        let local_next = local
            .tail
            .as_ref()
            .map(|t| t.next_seq)
            .or(local.sealed.last().map(|s| s.last_seq + 1))
            .unwrap_or(0);
        if let Some(s) = differs {
            return Err(Error::Archive {
                object: s.object.clone(),
                reason: "is not a segment of the local log: the archive holds another history of this session".into(),
            });
        }
        if m.next_seq() > local_next {
            return Err(archive_err(
                &self.manifest_path(id),
                format!(
                    "names records up to seq {}, the local log ends before seq {local_next}: the archive holds more of this session than this store",
                    m.next_seq()
                ),
            ));
        }
        Ok(())
    }

    /// What a push sends: the sealed segments the archive lacks (`there`
    /// lists its objects and their lengths) or holds unnamed, and the tail
    /// unless it is there; with the segments and tail its manifest names.
    fn plan_push(
        &self,
        id: SessionId,
        local: &Archivable,
        evicted: &[EvictedSegment],
        existing: Option<&Manifest>,
        there: &HashMap<String, u64>,
    ) -> Result<PushPlan> {
        let mut plan = PushPlan {
            segments: evicted.iter().map(evicted_segment).collect(),
            tail: None,
            uploads: Vec::new(),
            skipped_segments: evicted.len(),
        };
        for s in &local.sealed {
            let path = self.segment_path(id, s.first_seq, s.last_seq);
            // The content hash of a segment archived before: the
            // manifest's, recomputed when the segment goes up.
            let known = existing
                .and_then(|m| m.segments.iter().find(|a| a.object == path.as_ref()))
                .and_then(|a| a.content_hash.clone());
            plan.segments
                .push(archived_segment(&path, s, known.clone()));
            let upload = Upload {
                object: path,
                file: s.path.clone(),
                len_bytes: s.len_bytes,
                is_tail: false,
            };
            match (there.get(upload.object.as_ref()), known) {
                // Archived, with the content hash the manifest names:
                // the local file must have it too.
                (Some(&n), Some(hash)) if n == s.len_bytes => {
                    let local = content_hash(&read_prefix(&s.path, s.len_bytes)?);
                    if local != hash {
                        return Err(archive_err(
                            &upload.object,
                            format!(
                                "is archived with BLAKE3 {hash}, the local segment's is {local}: another history under the same name"
                            ),
                        ));
                    }
                    plan.skipped_segments += 1;
                }
                // Listed without a hash (an older manifest, or an
                // upload a cut-off push left unnamed): the create finds
                // it and compares the bytes, and the hash is recorded.
                (Some(&n), None) if n == s.len_bytes => plan.uploads.push(upload),
                (Some(_), _) => return Err(archive_err(
                    &upload.object,
                    "already exists with another length; an archived object is never overwritten",
                )),
                (None, _) => plan.uploads.push(upload),
            }
        }
        if let Some(t) = &local.tail {
            let path = self.tail_path(id, t.first_seq, t.next_seq);
            plan.tail = Some(ArchivedTail {
                object: path.to_string(),
                first_seq: t.first_seq,
                next_seq: t.next_seq,
                last_hash: t.hash,
                len_bytes: t.end,
            });
            if !there.contains_key(path.as_ref()) {
                plan.uploads.push(Upload {
                    object: path,
                    file: t.path.clone(),
                    len_bytes: t.end,
                    is_tail: true,
                });
            }
        }
        Ok(plan)
    }

    /// Creates each upload's object, `CONCURRENT_TRANSFERS` at a time (a
    /// tail with its header's marks cleared), telling `progress` as bytes
    /// go up.
    async fn upload(
        &self,
        uploads: Vec<Upload>,
        progress: &(dyn Fn(Transfer) + Send + Sync),
    ) -> Result<Vec<Uploaded>> {
        let total_bytes = uploads.iter().map(|u| u.len_bytes).sum();
        let done = AtomicU64::new(0);
        progress(Transfer {
            done_bytes: 0,
            total_bytes,
        });
        futures_util::stream::iter(uploads)
            .map(|u| {
                let done = &done;
                async move {
                    let len = u.len_bytes;
                    let mut bytes = read_prefix(&u.file, len)?;
                    if u.is_tail {
                        clear_marks(&mut bytes[..SEGMENT_HEADER_LEN]);
                    }
                    let hash = (!u.is_tail).then(|| content_hash(&bytes));
                    let created = self.put_immutable(&u.object, bytes.into()).await?;
                    let done_bytes = done.fetch_add(len, Ordering::Relaxed) + len;
                    progress(Transfer {
                        done_bytes,
                        total_bytes,
                    });
                    Ok::<_, Error>((created, len, u.is_tail, u.object, hash))
                }
            })
            .buffer_unordered(CONCURRENT_TRANSFERS)
            .try_collect()
            .await
    }
}

/// The seq ranges of the records going up: of the sealed segments among
/// `uploads`, and of the tail when it is among them and holds records.
fn ranges_going_up(local: &Archivable, uploads: &[Upload]) -> Vec<(u64, u64)> {
    local
        .sealed
        .iter()
        .filter(|s| uploads.iter().any(|u| u.file == s.path))
        .map(|s| (s.first_seq, s.last_seq))
        .chain(
            local
                .tail
                .iter()
                .filter(|t| t.next_seq > t.first_seq)
                .filter(|_| uploads.iter().any(|u| u.is_tail))
                .map(|t| (t.first_seq, t.next_seq - 1)),
        )
        .collect()
}

/// Counts what the uploads created in `report`, and records each uploaded
/// segment's content hash in its manifest entry.
fn tally(created: Vec<Uploaded>, segments: &mut [ArchivedSegment], report: &mut PushReport) {
    for (was_created, len, is_tail, object, hash) in created {
        if let Some(a) = segments.iter_mut().find(|a| a.object == object.as_ref()) {
            a.content_hash = hash;
        }
        match (is_tail, was_created) {
            (true, c) => report.uploaded_tail = c,
            (false, true) => report.uploaded_segments += 1,
            (false, false) => report.skipped_segments += 1,
        }
        if was_created {
            report.uploaded_bytes += len;
        }
    }
}

/// A damaged catalog: the manifest takes what the store lists of the
/// session.
fn identity_from_listing(manifest: &mut Manifest, store: &Store, id: SessionId) {
    if let Ok(Some(info)) = store.info(id) {
        manifest.created_ms = info.created_ms;
        manifest.title = manifest.title.take().or(info.title);
        manifest.forked_from = info.forked_from;
        manifest.compacted_from = info.compacted_from;
    }
}

/// An evicted segment's manifest entry.
fn evicted_segment(e: &EvictedSegment) -> ArchivedSegment {
    ArchivedSegment {
        object: e.object.clone(),
        first_seq: e.first_seq,
        last_seq: e.last_seq,
        start_hash: e.start_hash,
        last_hash: e.last_hash,
        len_bytes: e.len_bytes,
        content_hash: Some(e.content_hash.clone()),
    }
}

pub(super) fn archived_segment(
    path: &object_store::path::Path,
    s: &SealedSegment,
    content_hash: Option<String>,
) -> ArchivedSegment {
    ArchivedSegment {
        object: path.to_string(),
        first_seq: s.first_seq,
        last_seq: s.last_seq,
        start_hash: s.start_hash,
        last_hash: s.last_hash,
        len_bytes: s.len_bytes,
        content_hash,
    }
}

/// A manifest with the catalog's identity and title.
pub(super) fn manifest_for_catalog(
    id: SessionId,
    log_id: String,
    cat: Option<&catalog::CatalogRecord>,
) -> Manifest {
    let identity = cat.and_then(|c| c.identity.clone());
    Manifest {
        version: MANIFEST_VERSION,
        session: id,
        log_id,
        segments: Vec::new(),
        tail: None,
        title: cat.and_then(|c| c.title.clone()),
        created_ms: identity.as_ref().map_or(0, |i| i.created_ms),
        fork_link: None,
        forked_from: identity.as_ref().and_then(|i| i.forked_from),
        compacted_from: identity.as_ref().and_then(|i| i.compacted_from),
        durability: identity.as_ref().and_then(|i| i.durability),
        written_ms: now_ms(),
    }
}

impl ObjectKind {
    /// Whether the kind is a tail.
    pub(super) fn is_tail(self) -> bool {
        matches!(self, ObjectKind::Tail { .. })
    }
}
