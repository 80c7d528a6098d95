//! Continuous archival: each segment queued for upload as it seals, uploaded
//! on a background thread with retries and exponential backoff; failures
//! are kept for the caller, never dropped.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::check::check_object;
use super::push::{archived_segment, manifest_for_catalog};
use super::segment_bytes::content_hash;
use super::segment_bytes::read_prefix;
use super::{hex, Archive, ObjectKind};
use crate::error::{Error, Result};
use crate::log::{SealObserver, SealedSegment};
use crate::payload::PayloadArea;
use crate::schema::SessionId;

/// One upload that failed for good, after every retry.
///
/// Example: [`Archiver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFailure {
    /// The local segment file.
    pub segment: PathBuf,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub error: String,
}

/// Where continuous archival stands.
///
/// Example: [`Archiver`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveStatus {
    /// Segments sealed and queued, not yet uploaded or failed.
    pub pending: u64,
    /// Segments uploaded (or found already archived with the same bytes).
    pub uploaded: u64,
    /// Bytes uploaded.
    pub uploaded_bytes: u64,
    /// Segments whose upload failed for good (see [`Archiver::failures`]).
    pub failed: u64,
    /// Uploads that failed and were retried.
    pub retries: u64,
}

#[derive(Default)]
struct State {
    status: ArchiveStatus,
    failures: Vec<ArchiveFailure>,
}

struct Shared {
    state: Mutex<State>,
    idle: Condvar,
    /// Set when the archiver is dropped: the worker finishes the queue and
    /// stops, even while stores still hold observers (and so the channel).
    stopping: std::sync::atomic::AtomicBool,
}

/// Continuous archival: install [`Archiver::observer`] as
/// [`LogOptions::on_seal`](crate::LogOptions::on_seal) (through
/// `StoreOptions::log`), and every segment a session seals is queued and
/// uploaded in the background, then the session's manifest is updated.
/// Uploads are retried with exponential backoff; one that fails every
/// attempt is counted in [`Archiver::status`] and kept in
/// [`Archiver::failures`] until taken. A later `Archive::push` of the
/// session uploads what failed. Dropping the archiver finishes the queue.
///
/// ```
/// use session_store::archive::{Archive, Archiver, RetryPolicy};
/// use session_store::{Item, LogOptions, RequestConfig, Store, StoreOptions};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let archiver = Archiver::start_with(Archive::open("memory://")?, RetryPolicy { attempts: 3, ..RetryPolicy::default() })?;
/// // Small segments, so that this short session seals some.
/// let log = LogOptions::default().segment_size(8192).initial_segment_size(8192).on_seal(archiver.observer());
/// let store = Store::open_with(dir.path(), StoreOptions::default().log(log))?;
/// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// for page in 1..=20 {
///     store.save_delta(id, &mut head, &[Item::user_text(format!("Page {page}: {}", "…".repeat(300)))])?;
/// }
/// assert!(archiver.wait_idle(std::time::Duration::from_secs(60)));
/// assert!(archiver.status().uploaded >= 1 && archiver.failures().is_empty());
/// # Ok(()) }
/// ```
pub struct Archiver {
    tx: Mutex<Option<mpsc::Sender<SealedSegment>>>,
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// How uploads are retried.
///
/// Example: [`Archiver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per segment, the first included.
    pub attempts: u32,
    /// Wait before the first retry; each retry doubles it.
    pub initial_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl Archiver {
    /// Starts the background uploader, with the default retries.
    ///
    /// Example: [`Archiver`].
    pub fn start(archive: Archive) -> Result<Archiver> {
        Archiver::start_with(archive, RetryPolicy::default())
    }

    /// Starts the background uploader. Its threads (the upload worker and
    /// a runtime of its own) run at a lower CPU priority than the caller's
    /// ([`ARCHIVER_NICE`](super::ARCHIVER_NICE)): on busy cores the writers
    /// run first, and the uploads catch up when they pause.
    ///
    /// Example: [`Archiver`].
    pub fn start_with(archive: Archive, retry: RetryPolicy) -> Result<Archiver> {
        let archive = archive.in_background()?;
        let (tx, rx) = mpsc::channel::<SealedSegment>();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("session-store-uploader".into())
                .spawn(move || {
                    super::lower_priority();
                    loop {
                        match rx.recv_timeout(Duration::from_millis(50)) {
                            Ok(seg) => upload_with_retries(&archive, &seg, retry, &shared),
                            Err(mpsc::RecvTimeoutError::Timeout)
                                if !shared.stopping.load(std::sync::atomic::Ordering::Acquire) => {}
                            Err(_) => break,
                        }
                    }
                })
                .map_err(|e| Error::io("spawn the archiver thread", archive_dir(), e))?
        };
        Ok(Archiver {
            tx: Mutex::new(Some(tx)),
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The observer to install as `LogOptions::on_seal`: it only queues.
    ///
    /// Example: [`Archiver`].
    pub fn observer(&self) -> SealObserver {
        let tx = self.tx.lock().clone();
        let shared = self.shared.clone();
        Arc::new(move |seg: &SealedSegment| {
            shared.state.lock().status.pending += 1;
            let stopped = shared.stopping.load(std::sync::atomic::Ordering::Acquire);
            let sent = !stopped && tx.as_ref().is_some_and(|tx| tx.send(seg.clone()).is_ok());
            if !sent {
                fail(&shared, seg, 0, "the archiver has stopped".into());
            }
        })
    }

    /// Where archival stands.
    ///
    /// Example: [`Archiver`].
    pub fn status(&self) -> ArchiveStatus {
        self.shared.state.lock().status
    }

    /// Takes the failures kept so far.
    ///
    /// Example: [`Archiver`].
    pub fn failures(&self) -> Vec<ArchiveFailure> {
        std::mem::take(&mut self.shared.state.lock().failures)
    }

    /// Waits until nothing is pending, or `timeout` passes. Returns whether
    /// the queue is empty.
    ///
    /// Example: [`Archiver`].
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.state.lock();
        while s.status.pending > 0 {
            if self.shared.idle.wait_until(&mut s, deadline).timed_out() {
                return s.status.pending == 0;
            }
        }
        true
    }
}

impl Drop for Archiver {
    fn drop(&mut self) {
        self.tx.lock().take();
        self.shared
            .stopping
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(w) = self.worker.lock().take() {
            let _ = w.join();
        }
    }
}

fn archive_dir() -> PathBuf {
    PathBuf::from("session-store-archiver")
}

fn fail(shared: &Shared, seg: &SealedSegment, attempts: u32, error: String) {
    let mut s = shared.state.lock();
    s.status.pending = s.status.pending.saturating_sub(1);
    s.status.failed += 1;
    s.failures.push(ArchiveFailure {
        segment: seg.path.clone(),
        attempts,
        error,
    });
    shared.idle.notify_all();
}

fn upload_with_retries(
    archive: &Archive,
    seg: &SealedSegment,
    retry: RetryPolicy,
    shared: &Shared,
) {
    let mut backoff = retry.initial_backoff;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match upload_sealed(archive, seg) {
            Ok(()) => {
                let mut s = shared.state.lock();
                s.status.pending = s.status.pending.saturating_sub(1);
                s.status.uploaded += 1;
                s.status.uploaded_bytes += seg.len_bytes;
                shared.idle.notify_all();
                return;
            }
            Err(e) if attempt >= retry.attempts.max(1) => {
                fail(shared, seg, attempt, e.to_string());
                return;
            }
            Err(_) => {
                shared.state.lock().status.retries += 1;
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(retry.max_backoff);
            }
        }
    }
}

/// One attempt: sync the sealed file (its seal's own sync may not have run
/// yet, and what is archived must be what a power loss keeps), upload it,
/// and add it to the session's manifest.
fn upload_sealed(archive: &Archive, seg: &SealedSegment) -> Result<()> {
    let dir = seg
        .path
        .parent()
        .ok_or_else(|| Error::invalid(format!("{} has no directory", seg.path.display())))?;
    let id: SessionId = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Error::invalid(format!(
                "{} is not in a session's directory: continuous archival names objects by session",
                seg.path.display()
            ))
        })?;
    std::fs::File::open(&seg.path)
        .and_then(|f| f.sync_data())
        .map_err(|e| Error::io("fdatasync", &seg.path, e))?;
    let bytes = read_prefix(&seg.path, seg.len_bytes)?;
    let log_id = crate::format::SegmentHeader::decode(&bytes)
        .map_err(|(offset, kind)| Error::Corrupt {
            segment: seg.path.clone(),
            offset,
            seq: None,
            kind,
        })?
        .log_id;
    let object = archive.segment_path(id, seg.first_seq, seg.last_seq);
    let hash = content_hash(&bytes);
    // In a store that keeps large items apart, the ones this segment's
    // records name go up before the manifest names the segment (the
    // segment is checked whole to find them).
    let payloads = match PayloadArea::of_session_dir(dir, &None) {
        Some(area) => {
            let kind = ObjectKind::Sealed {
                first_seq: seg.first_seq,
                last_seq: seg.last_seq,
            };
            let checked =
                check_object(&bytes, kind).map_err(|(offset, seq, kind)| Error::Corrupt {
                    segment: seg.path.clone(),
                    offset,
                    seq,
                    kind,
                })?;
            let refs: Vec<_> = checked.payloads.into_iter().map(|(_, r)| r).collect();
            Some((area, refs))
        }
        None => None,
    };
    archive.block_on(async {
        if let Some((area, refs)) = &payloads {
            archive.put_payloads(area, refs, false).await?;
        }
        archive.put_immutable(&object, bytes.into()).await?;
        let cat = crate::store::read_catalog(id, dir).ok();
        let mut m = match archive.get_manifest(id).await? {
            Some(m) => m,
            None => {
                let mut m = manifest_for_catalog(id, hex(&log_id), cat.as_ref());
                // A fork's first record names its parent.
                m.fork_link = crate::log::Log::open_read_only(dir)
                    .ok()
                    .and_then(|log| log.snapshot().fork_link().ok().flatten());
                m
            }
        };
        let entry = archived_segment(&object, seg, Some(hash));
        m.segments.retain(|s| s.first_seq != entry.first_seq);
        m.segments.push(entry);
        m.segments.sort_by_key(|s| s.first_seq);
        // A tail that this seal covers is superseded.
        m.tail = m.tail.filter(|t| t.first_seq > seg.last_seq);
        if let Some(c) = &cat {
            m.title = c.title.clone().or(m.title);
        }
        m.written_ms = crate::store::now_ms();
        archive.put_manifest(&m).await
    })
}
