//! Pull: a session back from its objects alone, every object checked before
//! the session appears in the store, up to a point if asked.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use parking_lot::{Condvar, Mutex};

use super::check::{check_object, clear_marks, end_batch_at, find_cut, Checked};
use super::payloads::refs_of_images;
use super::push::Transfer;
use super::segment_bytes::read_prefix;
use super::{archive_err, hex, Archive, ObjectKind, CONCURRENT_TRANSFERS};
use crate::catalog::{self, Identity, CATALOG_FILE};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::format::SEGMENT_HEADER_LEN;
use crate::fs::{self as hooked_fs, sync_dir, HookedFile};
use crate::log::continues;
use crate::schema::{LoggedPayloadRef, SessionId};
use crate::segment::segment_name;
use crate::state::ForkLink;
use crate::store::{Store, MAX_FORK_DEPTH};

/// How far a restore goes.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestorePoint {
    /// Everything archived: the sealed segments and the longest tail that
    /// continues them.
    #[default]
    Latest,
    /// Up to and including the record with this seq.
    Seq(u64),
    /// Up to and including the record with this hash.
    Hash(EntryHash),
}

/// What a pull restored.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullReport {
    /// The session.
    pub id: SessionId,
    /// Objects downloaded and checked.
    pub objects: usize,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// Seq and hash of the restored session's last record.
    pub head: (u64, EntryHash),
    /// Payload objects (large items its records name that the store
    /// lacked) downloaded, and their bytes (not in `downloaded_bytes`).
    pub downloaded_payloads: (usize, u64),
}

/// What `fetch_and_check` staged: the head it cut at, the bytes downloaded,
/// the objects used, and the payloads their records name.
struct Fetched {
    head: (u64, EntryHash),
    downloaded: u64,
    objects: usize,
    refs: Vec<LoggedPayloadRef>,
}

/// A checked object, staged as a file.
struct Staged {
    object: ObjectPath,
    kind: ObjectKind,
    checked: Checked,
    file: PathBuf,
}

impl Archive {
    /// Restores a session from the archive into `store` (which must not
    /// hold it): lists its objects, checks that they are contiguous in seq,
    /// downloads and checks each (header, every CRC, seq and chain link,
    /// footer) and that each continues the one before, all before the
    /// session appears in the store. A gap, a broken link or damage is
    /// [`Error::Archive`] naming the object. The restored session opens,
    /// restores, appends and verifies like any other.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn pull(&self, store: &Store, id: SessionId, point: RestorePoint) -> Result<PullReport> {
        self.pull_with(store, id, point, |_| {})
    }

    /// [`Archive::pull`], telling `progress` as bytes come down.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn pull_with(
        &self,
        store: &Store,
        id: SessionId,
        point: RestorePoint,
        progress: impl Fn(Transfer) + Send + Sync,
    ) -> Result<PullReport> {
        self.pull_fork_chain(store, id, point, &progress, 0)
    }

    /// Brings the parent a fork by reference reads into the store, if the
    /// store lacks it: pulled from the archive (its own parent first, to
    /// [`MAX_FORK_DEPTH`]), or an error naming it before anything is written.
    fn bring_parent(
        &self,
        store: &Store,
        fork: SessionId,
        link: ForkLink,
        progress: &(dyn Fn(Transfer) + Send + Sync),
        depth: usize,
    ) -> Result<()> {
        if store.exists(link.parent) {
            return Ok(());
        }
        let missing = |why: String| archive_err(&self.manifest_path(link.parent), why);
        if depth >= MAX_FORK_DEPTH {
            return Err(missing(format!(
                "fork {fork}: its chain of parents is deeper than {MAX_FORK_DEPTH} or loops"
            )));
        }
        let Some(m) = self.manifest(link.parent)? else {
            return Err(missing(format!(
                "missing: fork {fork} reads its parent {} up to seq {}, which is neither in the store nor in the archive; push the parent, or restore it first",
                link.parent, link.seq
            )));
        };
        if m.next_seq() <= link.seq {
            return Err(missing(format!(
                "holds the parent of fork {fork} up to seq {}, the fork reads it up to seq {}",
                m.next_seq().saturating_sub(1),
                link.seq
            )));
        }
        self.pull_fork_chain(
            store,
            link.parent,
            RestorePoint::Latest,
            progress,
            depth + 1,
        )
        .map(|_| ())
    }

    fn pull_fork_chain(
        &self,
        store: &Store,
        id: SessionId,
        point: RestorePoint,
        progress: &(dyn Fn(Transfer) + Send + Sync),
        depth: usize,
    ) -> Result<PullReport> {
        if store.is_read_only() {
            return Err(Error::invalid(format!(
                "store {} is read-only: cannot restore into it",
                store.root().display()
            )));
        }
        let dest = store.session_dir(id);
        if store.exists(id) || dest.exists() {
            return Err(Error::invalid(format!(
                "session {id} exists in {}: delete it first to restore it from the archive",
                store.root().display()
            )));
        }
        let manifest_path = self.manifest_path(id);
        let Some(manifest) = self.manifest(id)? else {
            return Err(archive_err(
                &manifest_path,
                "missing: no session with this id is archived",
            ));
        };
        if let Some(link) = manifest.fork_link {
            self.bring_parent(store, id, link, progress, depth)?;
        }
        let plan = self.block_on(self.plan(id, &manifest, point))?;
        // Staged where the store sweeps what a crash leaves (after ten
        // minutes), never where it lists sessions.
        let staging = store
            .root()
            .join("staging")
            .join(format!("{id}-restore-{}", SessionId::new_v7()));
        hooked_fs::create_dir(&staging, store.hook())?;
        let result = self.fetch_and_check(&plan, &staging, point, &manifest.log_id, progress);
        let result = result.and_then(|fetched| {
            let Fetched {
                head: report_head,
                downloaded,
                objects,
                refs,
            } = fetched;
            // The large items its records name, durable in the store before
            // the session appears, and kept from a collection (the writers'
            // lock) until it has.
            let area = store.payload_area();
            let _writers = (!refs.is_empty()).then(|| area.lock_shared()).transpose()?;
            let downloaded_payloads = self.get_payloads(area, &refs)?;
            write_catalog(&staging, &manifest)?;
            sync_dir(&staging, store.hook())?;
            if dest.exists() {
                return Err(Error::invalid(format!(
                    "session {id} appeared during the restore"
                )));
            }
            // A fork is registered in its parent before it appears, as a
            // fork's creation does, so that the parent's delete keeps it.
            if let Some(link) = manifest.fork_link {
                store.register_fork(link.parent, id)?;
            }
            hooked_fs::rename(&staging, &dest, store.hook())?;
            sync_dir(&store.root().join("sessions"), store.hook())?;
            if manifest.fork_link.is_some() {
                // Its link to the parent must hold: refused now, never by a
                // later restore.
                if let Err(e) = store.verify_fork_link(id) {
                    let _ = hooked_fs::remove_dir_all(&dest, store.hook());
                    let _ = sync_dir(&store.root().join("sessions"), store.hook());
                    return Err(e);
                }
            }
            Ok(PullReport {
                id,
                objects,
                downloaded_bytes: downloaded,
                head: report_head,
                downloaded_payloads,
            })
        });
        if result.is_err() {
            let _ = hooked_fs::remove_dir_all(&staging, store.hook());
            if let Some(link) = manifest.fork_link {
                store.unregister_fork(link.parent, id);
            }
        }
        result
    }

    /// The objects a restore to `point` needs, in log order, checked for
    /// gaps by name and against the manifest.
    async fn plan(
        &self,
        id: SessionId,
        manifest: &super::Manifest,
        point: RestorePoint,
    ) -> Result<Vec<(ObjectPath, ObjectKind, u64)>> {
        let listed = self.list_objects(id).await?;
        // Every segment the manifest names must be there as named.
        for s in &manifest.segments {
            let found = listed.iter().any(|(p, k, n)| {
                p.as_ref() == s.object
                    && *k
                        == ObjectKind::Sealed {
                            first_seq: s.first_seq,
                            last_seq: s.last_seq,
                        }
                    && *n == s.len_bytes
            });
            if !found {
                return Err(Error::Archive {
                    object: s.object.clone(),
                    reason: "named by the manifest but missing (or of another length)".into(),
                });
            }
        }
        let mut plan = Vec::new();
        let mut next = 0u64;
        let mut prev: Option<&ObjectPath> = None;
        for (path, kind, len) in listed.iter().filter(|(_, k, _)| !k.is_tail()) {
            if kind.first_seq() != next {
                let after = prev.map_or("the start of the log".to_string(), |p| p.to_string());
                return Err(archive_err(
                    path,
                    format!(
                        "does not follow {after}: expected first seq {next}, found {}",
                        kind.first_seq()
                    ),
                ));
            }
            next = kind.next_seq();
            prev = Some(path);
            plan.push((path.clone(), *kind, *len));
        }
        // The longest tail that continues the sealed segments; shorter ones
        // (earlier pushes) and ones a later seal superseded are left.
        let tail = listed
            .iter()
            .filter(|(_, k, _)| k.is_tail() && k.first_seq() == next)
            .max_by_key(|(_, k, _)| k.next_seq());
        if let Some(t) = tail {
            plan.push(t.clone());
        } else if let Some(t) = manifest.tail.as_ref().filter(|t| t.first_seq == next) {
            return Err(Error::Archive {
                object: t.object.clone(),
                reason: "named by the manifest but missing".into(),
            });
        }
        if plan.is_empty() {
            return Err(archive_err(
                &self.manifest_path(id),
                "the archive holds no segment of this session",
            ));
        }
        if let RestorePoint::Seq(seq) = point {
            match plan.iter().position(|(_, k, _)| seq < k.next_seq()) {
                Some(i) => plan.truncate(i + 1),
                None => {
                    return Err(Error::not_found(format!(
                        "seq {seq} in the archive of session {id} (it ends before seq {next})",
                        next = plan.last().map_or(0, |(_, k, _)| k.next_seq())
                    )))
                }
            }
        }
        Ok(plan)
    }

    /// Downloads, checks and stages every object of `plan`, checks that each
    /// continues the one before, and cuts the staged log at `point`.
    /// Returns what it staged.
    fn fetch_and_check(
        &self,
        plan: &[(ObjectPath, ObjectKind, u64)],
        staging: &Path,
        point: RestorePoint,
        log_id: &str,
        progress: &(dyn Fn(Transfer) + Send + Sync),
    ) -> Result<Fetched> {
        let (mut staged, downloaded) = self.stage_objects(plan, staging, progress)?;
        check_continuity(&staged, log_id)?;
        let objects = staged.len();
        let head = cut_staged(&mut staged, point)?;
        // Only what the records up to the cut name.
        let refs = refs_of_images(staged.iter().map(|s| s.checked.payloads.as_slice()), head.0);
        Ok(Fetched {
            head,
            downloaded,
            objects,
            refs,
        })
    }

    /// Downloads every object of `plan`, `CONCURRENT_TRANSFERS` at a time,
    /// checks each alone (off the runtime's workers) and writes it into
    /// `staging`, telling `progress` as bytes come down. Returns the staged
    /// objects in plan order, and the bytes downloaded.
    fn stage_objects(
        &self,
        plan: &[(ObjectPath, ObjectKind, u64)],
        staging: &Path,
        progress: &(dyn Fn(Transfer) + Send + Sync),
    ) -> Result<(Vec<Staged>, u64)> {
        let total_bytes = plan.iter().map(|(_, _, n)| n).sum();
        let done = AtomicU64::new(0);
        progress(Transfer {
            done_bytes: 0,
            total_bytes,
        });
        // A failed download ends the stream, but a check already handed to
        // the blocking pool runs on and writes its file: the caller removes
        // the staging directory only once every such write is over.
        let writing = Arc::new(Writing::default());
        let staged: Result<Vec<Staged>> = self.block_on(
            futures_util::stream::iter(plan.iter().cloned())
                .map(|(object, kind, _)| {
                    let done = &done;
                    let writing = &writing;
                    async move {
                        let bytes = self.get_bytes(&object).await?;
                        let len = bytes.len() as u64;
                        let dir = staging.to_path_buf();
                        let busy = Writing::enter(writing);
                        // The scan is CPU work: off the runtime's workers.
                        let staged = tokio::task::spawn_blocking({
                            let object = object.clone();
                            move || {
                                let _busy = busy;
                                stage_object(&bytes, object, kind, &dir)
                            }
                        })
                        .await
                        .map_err(|e| archive_err(&object, format!("check failed: {e}")))??;
                        let done_bytes = done.fetch_add(len, Ordering::Relaxed) + len;
                        progress(Transfer {
                            done_bytes,
                            total_bytes,
                        });
                        Ok::<_, Error>(staged)
                    }
                })
                .buffered(CONCURRENT_TRANSFERS)
                .try_collect(),
        );
        if staged.is_err() {
            writing.wait_until_idle();
        }
        Ok((staged?, done.load(Ordering::Relaxed)))
    }
}

/// Checks one downloaded object alone and writes it into `dir` under its
/// segment name.
fn stage_object(bytes: &[u8], object: ObjectPath, kind: ObjectKind, dir: &Path) -> Result<Staged> {
    let checked = check_object(bytes, kind).map_err(|(offset, seq, k)| {
        let at = seq.map_or(String::new(), |s| format!(", seq {s}"));
        archive_err(&object, format!("{k} at offset {offset}{at}"))
    })?;
    let file = dir.join(segment_name(kind.first_seq()));
    write_file(&file, bytes, None)?;
    Ok(Staged {
        object,
        kind,
        checked,
        file,
    })
}

/// Checks that the staged objects, in order, are of the log the manifest
/// names and each continues the one before.
fn check_continuity(staged: &[Staged], log_id: &str) -> Result<()> {
    let first_log_id = staged[0].checked.header.log_id;
    if hex(&first_log_id) != log_id {
        return Err(archive_err(
            &staged[0].object,
            format!(
                "belongs to log {}, the manifest names {log_id}",
                hex(&first_log_id)
            ),
        ));
    }
    let mut expect = None;
    for s in staged {
        continues(&s.checked.header, &first_log_id, expect)
            .map_err(|k| archive_err(&s.object, format!("{k} at its header")))?;
        expect = Some((s.checked.next_seq, s.checked.last_hash));
    }
    Ok(())
}

/// The cut: finds the object and record `point` names, removes the staged
/// objects past it, and leaves the last one ending there. Returns the seq
/// and hash of the restored log's last record.
fn cut_staged(staged: &mut Vec<Staged>, point: RestorePoint) -> Result<(u64, EntryHash)> {
    match point {
        RestorePoint::Latest => {
            let last = staged.last().expect("a plan is never empty");
            if last.kind.is_tail() {
                rewrite_unsealed(last, last.checked.data_end)?;
            }
            Ok((last.checked.next_seq - 1, last.checked.last_hash))
        }
        RestorePoint::Seq(seq) => {
            let last = staged.last().expect("a plan is never empty");
            cut_at(last, |s, _| s == seq)
        }
        RestorePoint::Hash(hash) => {
            let mut found = None;
            for (i, s) in staged.iter().enumerate() {
                let bytes = read_prefix(&s.file, s.checked.data_end)?;
                if find_cut(&bytes, &s.checked.header, s.checked.data_end, |_, h| {
                    *h == hash
                })
                .is_some()
                {
                    found = Some(i);
                    break;
                }
            }
            let Some(i) = found else {
                return Err(Error::not_found(format!("entry {hash} in the archive")));
            };
            for s in staged.drain(i + 1..) {
                hooked_fs::remove_file(&s.file, &None)?;
            }
            cut_at(&staged[i], |_, h| *h == hash)
        }
    }
}

/// Cuts a staged object after the record `stop` names: a sealed segment
/// whose last record it is stays whole; otherwise the segment becomes the
/// log's active one, its records past the point gone.
fn cut_at(s: &Staged, stop: impl Fn(u64, &EntryHash) -> bool) -> Result<(u64, EntryHash)> {
    let bytes = read_prefix(&s.file, s.checked.data_end)?;
    let (end, seq, hash) = find_cut(&bytes, &s.checked.header, s.checked.data_end, stop)
        .ok_or_else(|| {
            archive_err(
                &s.object,
                "does not hold the record the restore point names",
            )
        })?;
    if s.kind.is_tail() || end != s.checked.data_end {
        rewrite_unsealed(s, end)?;
    }
    Ok((seq, hash))
}

/// Rewrites a staged segment as an active one: its header (marks cleared)
/// and records below `end`, then zeros (a hole) to its full length, so that
/// the log's recovery reads it as a segment that was being written. The
/// record that ends at `end` ends its batch: a restore point inside a batch
/// is where the restored log's history ends, not an incomplete batch.
fn rewrite_unsealed(s: &Staged, end: u64) -> Result<()> {
    let mut bytes = read_prefix(&s.file, end)?;
    clear_marks(&mut bytes[..SEGMENT_HEADER_LEN]);
    end_batch_at(&mut bytes, end);
    hooked_fs::remove_file(&s.file, &None)?;
    write_file(&s.file, &bytes, Some(s.checked.header.segment_len))
}

/// Writes a new file (0600) and syncs it.
fn write_file(path: &Path, bytes: &[u8], len: Option<u64>) -> Result<()> {
    let file = HookedFile::create(path, &None)?;
    let f = file.file();
    (&*f)
        .write_all(bytes)
        .map_err(|e| Error::io("write", path, e))?;
    if let Some(len) = len {
        f.set_len(len)
            .map_err(|e| Error::io("ftruncate", path, e))?;
    }
    file.sync()
}

/// The restored session's catalog, from the manifest's identity and title.
fn write_catalog(dir: &Path, m: &super::Manifest) -> Result<()> {
    let identity = Identity {
        created_ms: m.created_ms,
        forked_from: m.forked_from,
        compacted_from: m.compacted_from,
        durability: m.durability,
    };
    let file = catalog::create(
        &dir.join(CATALOG_FILE),
        &identity,
        m.title.as_deref(),
        &None,
    )?;
    file.sync()
}

/// How many staged writes run in the blocking pool.
#[derive(Default)]
struct Writing {
    count: Mutex<usize>,
    idle: Condvar,
}

/// One staged write, counted in [`Writing`] until it is dropped.
struct Busy(Arc<Writing>);

impl Writing {
    fn enter(this: &Arc<Writing>) -> Busy {
        *this.count.lock() += 1;
        Busy(this.clone())
    }

    fn wait_until_idle(&self) {
        let mut count = self.count.lock();
        while *count > 0 {
            self.idle.wait(&mut count);
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut count = self.0.count.lock();
        *count -= 1;
        if *count == 0 {
            self.0.idle.notify_all();
        }
    }
}
