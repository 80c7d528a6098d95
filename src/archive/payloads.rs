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
    /// length and BLAKE3) that the archive does not hold; an object already
    /// there must have the payload's length. Returns how many this call
    /// created. Runs before the manifest naming the records is written.
    pub(crate) async fn put_payloads(
        &self,
        area: &PayloadArea,
        refs: &[LoggedPayloadRef],
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
                    Ok(_) => Ok(true),
                    // Named by its hash: the same name holds the same bytes,
                    // unless the object was changed in the archive, which
                    // its length shows (and every download checks the hash).
                    Err(object_store::Error::AlreadyExists { .. }) => {
                        let meta = self
                            .inner
                            .objects
                            .head(&object)
                            .await
                            .map_err(|e| remote(&object, e))?;
                        if meta.size as u64 != r.len {
                            return Err(archive_err(
                                &object,
                                format!(
                                    "already exists with {} bytes, the payload has {}; an archived object is never overwritten",
                                    meta.size, r.len
                                ),
                            ));
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

    /// Downloads each payload of `refs` that `area` lacks (or holds damaged),
    /// checks its length, BLAKE3 hash and archive, and writes it into
    /// `area`; then makes every one durable. The caller holds the area's
    /// writers' lock ([`PayloadArea::lock_shared`]) until the records that
    /// name them are in place, so that no collection removes them between.
    /// Returns how many were downloaded and their bytes.
    pub(crate) fn get_payloads(
        &self,
        area: &PayloadArea,
        refs: &[LoggedPayloadRef],
    ) -> Result<(usize, u64)> {
        let missing: Vec<&LoggedPayloadRef> =
            refs.iter().filter(|r| area.read(r).is_err()).collect();
        let fetched: Vec<(ObjectPath, bytes::Bytes)> = self.block_on(
            futures_util::stream::iter(missing)
                .map(|r| async move {
                    let object = self.payload_path(&r.hash);
                    let bytes = match self.get_bytes(&object).await {
                        Err(Error::Archive { reason, .. }) => {
                            return Err(archive_err(
                                &object,
                                format!(
                                    "a record names this payload, and the archive cannot give it: {reason}"
                                ),
                            ))
                        }
                        other => other?,
                    };
                    check_payload(&bytes, r).map_err(|why| archive_err(&object, why))?;
                    Ok::<_, Error>((object, bytes))
                })
                .buffer_unordered(CONCURRENT_TRANSFERS)
                .try_collect(),
        )?;
        let mut bytes = 0;
        for (object, b) in &fetched {
            area.put(b)
                .map_err(|e| archive_err(object, format!("cannot be stored: {e}")))?;
            bytes += b.len() as u64;
        }
        area.sync_pending()?;
        Ok((fetched.len(), bytes))
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
            for r in rec.entry.items().iter().filter_map(|i| i.payload_ref()) {
                if seen.insert(r.hash) {
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

/// [`refs_in_ranges`] over checked segment images: the payloads their
/// records name, each once.
pub(crate) fn refs_of_images<'a>(
    refs: impl IntoIterator<Item = &'a [LoggedPayloadRef]>,
) -> Vec<LoggedPayloadRef> {
    let mut seen = HashSet::new();
    refs.into_iter()
        .flatten()
        .filter(|r| seen.insert(r.hash))
        .copied()
        .collect()
}
