//! The large items a session's records name, carried with its segments: a
//! push uploads each payload the pushed records name before the manifest
//! that publishes them, and a pull or a fetch-back downloads each one the
//! store lacks, checks it and makes it durable before the segments that
//! name it are placed.
//!
//! Payload objects are shared by every session of the archive, named by
//! their BLAKE3 hash (`<prefix>/payloads/<64 hex digits>`), as the store's
//! payload area is shared by its sessions: written once, never
//! overwritten, never removed by this crate.

use std::collections::HashSet;

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{PutMode, PutOptions, PutPayload};

use super::{archive_err, remote, Archive, CONCURRENT_TRANSFERS};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::log::Snapshot;
use crate::payload::{check_archive, PayloadArea};
use crate::schema::LoggedPayloadRef;

/// Under the archive's prefix: where payload objects are. No session id
/// parses as this name, so `Archive::sessions` passes it by.
const PAYLOADS: &str = "payloads";

impl Archive {
    /// The object of the payload with this hash.
    pub(crate) fn payload_path(&self, hash: &[u8; 32]) -> ObjectPath {
        self.inner
            .prefix
            .child(PAYLOADS)
            .child(EntryHash(*hash).to_string())
    }

    /// Uploads each payload of `refs` (read from `area`, whose read checks
    /// length and BLAKE3) that the archive does not hold. An object already
    /// there must have the payload's length, and with `check_existing` its
    /// bytes are downloaded and must have its hash (an eviction's check: the
    /// local copy may be collected once the records that name it are gone).
    /// Returns how many this call created. Runs before the manifest, or the
    /// eviction record, that depends on them is written.
    pub(crate) async fn put_payloads(
        &self,
        area: &PayloadArea,
        refs: &[LoggedPayloadRef],
        check_existing: bool,
    ) -> Result<usize> {
        let created: Vec<bool> = futures_util::stream::iter(refs.iter())
            .map(|r| async move {
                let object = self.payload_path(&r.hash);
                let bytes = area.read(r).map_err(|p| {
                    archive_err(
                        &object,
                        format!("cannot be uploaded: the local payload is {p}"),
                    )
                })?;
                let body = PutPayload::from(bytes::Bytes::from(bytes.into_vec()));
                let opts = PutOptions::from(PutMode::Create);
                match self.inner.objects.put_opts(&object, body, opts).await {
                    Ok(_) => self.keep_private(&object).map(|()| true),
                    // Named by its hash: the same name holds the same bytes,
                    // unless the object was changed in the archive, which
                    // its length shows (and every download checks the hash).
                    Err(object_store::Error::AlreadyExists { .. }) => {
                        let size = self.object_size(&object).await?;
                        if size != r.len {
                            return Err(archive_err(
                                &object,
                                format!(
                                    "already exists with {size} bytes, the payload has {}; an archived object is never overwritten",
                                    r.len
                                ),
                            ));
                        }
                        if check_existing {
                            let there = self.get_bytes(&object).await?;
                            if blake3::hash(&there).as_bytes() != &r.hash {
                                return Err(archive_err(
                                    &object,
                                    "already exists with other bytes than its name's hash; an archived object is never overwritten",
                                ));
                            }
                        }
                        Ok(false)
                    }
                    Err(e) => Err(remote(&object, e)),
                }
            })
            .buffer_unordered(CONCURRENT_TRANSFERS)
            .try_collect()
            .await?;
        Ok(created.into_iter().filter(|c| *c).count())
    }

    /// The size of an object, from a HEAD request.
    async fn object_size(&self, object: &ObjectPath) -> Result<u64> {
        let meta = self
            .inner
            .objects
            .head(object)
            .await
            .map_err(|e| remote(object, e))?;
        Ok(meta.size as u64)
    }

    /// Brings each payload of `refs` into `area`, durable: one already there
    /// whole is taken as found (read back, and synced, since whoever wrote
    /// it may not have); any other is downloaded (its size checked by a
    /// HEAD request first, so that a hostile archive cannot make it
    /// allocate more), checked (length, BLAKE3, archive) and written, as it
    /// arrives. Then every one is synced. The caller holds the area's
    /// writers' lock ([`PayloadArea::lock_shared`]) until the records that
    /// name them are in place, so that no collection removes them between.
    /// Returns how many were downloaded and their bytes.
    pub(crate) fn get_payloads(
        &self,
        area: &PayloadArea,
        refs: &[LoggedPayloadRef],
    ) -> Result<(usize, u64)> {
        let mut missing = Vec::new();
        for r in refs {
            if area.adopt(r).is_err() {
                // Damaged or absent: written anew, never taken as known.
                area.forget(&r.hash);
                missing.push(r);
            }
        }
        let fetched: Vec<u64> = self.block_on(
            futures_util::stream::iter(missing)
                .map(|r| async move {
                    let object = self.payload_path(&r.hash);
                    let lacking = |reason: String| {
                        archive_err(
                            &object,
                            format!(
                                "a record names this payload, and the archive cannot give it: {reason}"
                            ),
                        )
                    };
                    let size = match self.object_size(&object).await {
                        Err(Error::Archive { reason, .. }) => return Err(lacking(reason)),
                        other => other?,
                    };
                    if size != r.len {
                        return Err(archive_err(
                            &object,
                            format!("holds {size} bytes, the record names {}", r.len),
                        ));
                    }
                    let bytes = match self.get_bytes(&object).await {
                        Err(Error::Archive { reason, .. }) => return Err(lacking(reason)),
                        other => other?,
                    };
                    check_payload(&bytes, r).map_err(|why| archive_err(&object, why))?;
                    area.put(&bytes)
                        .map_err(|e| archive_err(&object, format!("cannot be stored: {e}")))?;
                    Ok::<_, Error>(bytes.len() as u64)
                })
                .buffer_unordered(CONCURRENT_TRANSFERS)
                .try_collect(),
        )?;
        area.sync_pending()?;
        Ok((fetched.len(), fetched.iter().sum()))
    }
}

/// Checks downloaded payload bytes against the reference that names them:
/// length, BLAKE3, and an item archive that is no reference itself.
fn check_payload(bytes: &[u8], r: &LoggedPayloadRef) -> std::result::Result<(), String> {
    if bytes.len() as u64 != r.len {
        return Err(format!(
            "holds {} bytes, the record names {}",
            bytes.len(),
            r.len
        ));
    }
    if blake3::hash(bytes).as_bytes() != &r.hash {
        return Err("its bytes do not have the BLAKE3 hash they are named by".into());
    }
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    check_archive(&aligned)
        .map(|_| ())
        .map_err(|p| format!("is not a payload: {p}"))
}

/// The payloads the records of `snap` with seqs in `ranges` (first, last,
/// inclusive) name, each once, in the order first met.
pub(crate) fn refs_in_ranges(
    snap: &Snapshot,
    ranges: &[(u64, u64)],
) -> Result<Vec<LoggedPayloadRef>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &(first, last) in ranges {
        for rec in snap.iter_from(first) {
            let rec = rec?;
            if rec.seq > last {
                break;
            }
            for r in rec.entry().items().iter().filter_map(|i| i.payload_ref()) {
                if seen.insert(r.hash) {
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

/// [`refs_in_ranges`] over checked segment images: the payloads their
/// records up to seq `last` name, each once.
pub(crate) fn refs_of_images<'a>(
    refs: impl IntoIterator<Item = &'a [(u64, LoggedPayloadRef)]>,
    last: u64,
) -> Vec<LoggedPayloadRef> {
    let mut seen = HashSet::new();
    refs.into_iter()
        .flatten()
        .filter(|(seq, r)| *seq <= last && seen.insert(r.hash))
        .map(|(_, r)| *r)
        .collect()
}
