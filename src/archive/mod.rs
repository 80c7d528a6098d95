//! Archive: a session's sealed segments as immutable objects in object
//! storage (`object_store`: S3, a local directory, memory), a manifest per
//! session, the synced prefix of the active segment as a tail object, restore
//! from the objects alone, and continuous archival as segments seal.
//!
//! Object names, under the archive's prefix (see DESIGN.md, "Archive"):
//!
//! ```text
//! <prefix>/<session-id>/segments/<first_seq:020>-<last_seq:020>.seg   a sealed segment file, byte for byte
//! <prefix>/<session-id>/tail/<first_seq:020>-<next_seq:020>.seg       the active segment's synced prefix
//! <prefix>/<session-id>/manifest.json                                 the session's manifest (the one object rewritten)
//! <prefix>/payloads/<blake3 hex>                                      a large item the records name, shared by sessions
//! ```
//!
//! The calls block: the archive runs its own small tokio runtime for the
//! object store's requests. From async code, call them on a blocking thread.
//!
//! # Example
//!
//! ```
//! use session_store::archive::{Archive, RestorePoint};
//! use session_store::{Item, RequestConfig, Store};
//! # fn main() -> session_store::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let laptop = Store::open(dir.path().join("laptop"))?;
//! let (id, mut head) = laptop.create_session(None, RequestConfig::model("gpt-5"), &[])?;
//! laptop.save_delta(id, &mut head, &[Item::user_text("Back this chat up."), Item::assistant_text("Will do.")])?;
//!
//! let archive = Archive::open(&format!("file://{}", dir.path().join("archive").display()))?;
//! assert_eq!(archive.push(&laptop, id)?.next_seq, 3);
//! assert_eq!(archive.manifest(id)?.map(|m| m.next_seq()), Some(3));
//!
//! // Another machine: the session from the archive alone, checked object by object.
//! let server = Store::open(dir.path().join("server"))?;
//! assert_eq!(archive.pull(&server, id, RestorePoint::Latest)?.head, (2, head));
//! assert_eq!(server.restore(id)?.history, laptop.restore(id)?.history);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use crate::chain::{to_hex as hex, EntryHash};
use crate::error::{Error, Result};
use crate::log::Durability;
use crate::schema::{SessionId, SessionOrigin};
use crate::state::ForkLink;

mod check;
mod continuous;
mod evict;
mod payloads;
mod push;
mod restore;
mod segment_bytes;

pub use continuous::{ArchiveFailure, ArchiveStatus, Archiver, RetryPolicy};
pub use evict::{EvictReport, FetchReport};
pub use push::{PushReport, Transfer};
pub use restore::{PullReport, RestorePoint};

/// The manifest's own format version.
const MANIFEST_VERSION: u32 = 1;
/// How many objects move at once.
const CONCURRENT_TRANSFERS: usize = 4;

/// How much lower than its caller's the archiver's threads' CPU priority
/// is: their nice value is the caller's plus this (at most 19), so that on
/// busy cores the writers run first and uploads wait.
///
/// Example: [`Archiver`].
pub const ARCHIVER_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority by [`ARCHIVER_NICE`]. On Linux
/// the nice value is per thread, and `setpriority(PRIO_PROCESS, 0)` sets
/// the calling thread's. Failure leaves the priority as it was: archival
/// still works, only without yielding.
pub(crate) fn lower_priority() {
    if let Ok(now) = rustix::process::getpriority_process(None) {
        let _ = rustix::process::setpriority_process(None, (now + ARCHIVER_NICE).min(19));
    }
}

/// An archive: a place in an object store that holds sessions. Cheap to
/// clone; clones share the connection and the runtime.
///
/// Example: [the module](crate::archive#example).
#[derive(Clone)]
pub struct Archive {
    inner: Arc<Inner>,
}

struct Inner {
    objects: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    runtime: tokio::runtime::Runtime,
    /// One eviction or fetch-back at a time through this archive.
    evicting: parking_lot::Mutex<()>,
    /// The directory of a `file://` archive, whose files and directories
    /// are kept private (0600, 0700) as the store's own are.
    local_root: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("url", &self.inner.url)
            .finish()
    }
}

/// A session's manifest: what its archived objects hold, and the catalog's
/// identity and title, so that a restore can rebuild the catalog. Written
/// after the objects it names.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The manifest's format version (1).
    pub version: u32,
    /// The session.
    pub session: SessionId,
    /// The log's id (every segment header carries it), hex.
    pub log_id: String,
    /// The sealed segments, in log order.
    pub segments: Vec<ArchivedSegment>,
    /// The tail object, if the last push had records past the sealed ones.
    pub tail: Option<ArchivedTail>,
    /// The catalog's title.
    pub title: Option<String>,
    /// The catalog's creation time, ms since the Unix epoch.
    pub created_ms: u64,
    /// The catalog's fork origin.
    #[serde(default)]
    pub forked_from: Option<SessionOrigin>,
    /// The catalog's compaction origin.
    #[serde(default)]
    pub compacted_from: Option<SessionOrigin>,
    /// For a fork by reference, its parent (session, seq, hash): a pull of
    /// the fork brings the parent too, or fails before anything is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_link: Option<ForkLink>,
    /// The session's own durability, if it chose one.
    #[serde(default)]
    pub durability: Option<Durability>,
    /// When the manifest was written, ms since the Unix epoch.
    pub written_ms: u64,
}

impl Manifest {
    /// Seq after the last record the manifest names (0: none).
    ///
    /// Example: [the module](crate::archive#example).
    pub fn next_seq(&self) -> u64 {
        match (&self.tail, self.segments.last()) {
            (Some(t), _) => t.next_seq,
            (None, Some(s)) => s.last_seq + 1,
            (None, None) => 0,
        }
    }

    /// Bytes of the objects the manifest names.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len_bytes).sum::<u64>()
            + self.tail.as_ref().map_or(0, |t| t.len_bytes)
    }
}

/// A sealed segment in an archive.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArchivedSegment {
    /// Its object's name.
    pub object: String,
    /// Seq of its first record.
    pub first_seq: u64,
    /// Seq of its last record.
    pub last_seq: u64,
    /// The hash its first record chains from.
    pub start_hash: EntryHash,
    /// Hash of its last record.
    pub last_hash: EntryHash,
    /// Object length.
    pub len_bytes: u64,
    /// BLAKE3 of the object's bytes, hex (manifests written before it was
    /// recorded have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

/// The archived synced prefix of a session's active segment.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArchivedTail {
    /// Its object's name.
    pub object: String,
    /// Seq of its first record.
    pub first_seq: u64,
    /// Seq after its last record.
    pub next_seq: u64,
    /// Hash of its last record.
    pub last_hash: EntryHash,
    /// Object length.
    pub len_bytes: u64,
}

/// A session found in an archive's listing.
///
/// Example: [the module](crate::archive#example).
#[derive(Debug, Clone)]
pub struct ArchivedSession {
    /// The session.
    pub id: SessionId,
    /// Its manifest; `None` when it is missing (a first push that did not
    /// finish) or does not parse.
    pub manifest: Option<Manifest>,
    /// Segment objects present.
    pub segment_objects: u64,
    /// Tail objects present.
    pub tail_objects: u64,
    /// Bytes of all its objects.
    pub bytes: u64,
}

/// Which object a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectKind {
    /// `segments/<first>-<last>.seg`.
    Sealed { first_seq: u64, last_seq: u64 },
    /// `tail/<first>-<next>.seg`.
    Tail { first_seq: u64, next_seq: u64 },
}

impl ObjectKind {
    fn first_seq(self) -> u64 {
        match self {
            ObjectKind::Sealed { first_seq, .. } | ObjectKind::Tail { first_seq, .. } => first_seq,
        }
    }

    /// Seq after the object's last record.
    fn next_seq(self) -> u64 {
        match self {
            ObjectKind::Sealed { last_seq, .. } => last_seq + 1,
            ObjectKind::Tail { next_seq, .. } => next_seq,
        }
    }
}

/// Parses `<a:020>-<b:020>.seg`.
fn parse_range(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".seg")?;
    let (a, b) = stem.split_once('-')?;
    if a.len() != 20 || b.len() != 20 {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl Archive {
    /// Opens an archive by URL: `s3://bucket/prefix` (configured from the
    /// `AWS_*` environment variables, as `AmazonS3Builder::from_env` reads
    /// them: `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_REGION`, keys),
    /// `file:///path` (a directory, created private, 0700, if missing; every
    /// file and directory written under it is private too) or `memory://` (a
    /// fresh in-memory store, for tests).
    ///
    /// Example: [the module](crate::archive#example).
    pub fn open(url: &str) -> Result<Archive> {
        Archive::open_with(url, std::iter::empty::<(String, String)>())
    }

    /// [`Archive::open`] with further options for an `s3://` URL, as
    /// `object_store`'s configuration keys (`aws_endpoint`,
    /// `aws_allow_http`, …), applied after the environment.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn open_with<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Archive> {
        let bad = |why: &str| Error::invalid(format!("archive URL {url:?}: {why}"));
        let (objects, prefix): (Arc<dyn ObjectStore>, &str) =
            if let Some(rest) = url.strip_prefix("memory://") {
                (Arc::new(object_store::memory::InMemory::new()), rest)
            } else if let Some(path) = url.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return Err(bad("a file URL needs an absolute path (file:///…)"));
                }
                {
                    use std::os::unix::fs::DirBuilderExt;
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(path)
                        .map_err(|e| Error::io("mkdir", path, e))?;
                }
                let fs = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(|e| bad(&e.to_string()))?;
                (Arc::new(fs), "")
            } else if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                for (k, v) in options {
                    let key = k
                        .as_ref()
                        .parse()
                        .map_err(|e: object_store::Error| bad(&e.to_string()))?;
                    b = b.with_config(key, v);
                }
                (
                    Arc::new(b.build().map_err(|e| bad(&e.to_string()))?),
                    prefix,
                )
            } else {
                return Err(bad("expected s3://, file:/// or memory://"));
            };
        Archive::from_object_store(objects, prefix, url)
    }

    /// An archive in any `object_store` store, under `prefix`; `url` is
    /// what errors and listings call it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use object_store::memory::InMemory;
    /// use session_store::archive::Archive;
    /// # fn main() -> session_store::Result<()> {
    /// // A store the application configured itself, here in memory.
    /// let objects = Arc::new(InMemory::new());
    /// let archive = Archive::from_object_store(objects, "team-a", "memory://team-a")?;
    /// assert_eq!(archive.url(), "memory://team-a");
    /// assert!(archive.sessions()?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn from_object_store(
        objects: Arc<dyn ObjectStore>,
        prefix: &str,
        url: &str,
    ) -> Result<Archive> {
        Archive::with_runtime(
            objects,
            ObjectPath::from(prefix.trim_matches('/')),
            url,
            false,
        )
    }

    /// An archive on a runtime of its own: two workers, named
    /// `session-store-archive`, or `session-store-uploader` at a lower CPU
    /// priority ([`lower_priority`]) when `background`.
    fn with_runtime(
        objects: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
        url: &str,
        background: bool,
    ) -> Result<Archive> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2).enable_all();
        match background {
            true => builder
                .thread_name("session-store-uploader")
                .on_thread_start(lower_priority),
            false => builder.thread_name("session-store-archive"),
        };
        let runtime = builder
            .build()
            .map_err(|e| Error::io("start the archive's runtime", url, e))?;
        Ok(Archive {
            inner: Arc::new(Inner {
                objects,
                prefix,
                url: url.to_string(),
                runtime,
                evicting: parking_lot::Mutex::new(()),
                local_root: url.strip_prefix("file://").map(std::path::PathBuf::from),
            }),
        })
    }

    /// The same archive on a runtime of its own whose threads run at a
    /// lower CPU priority ([`lower_priority`]): the continuous archiver's,
    /// so that its uploads yield the CPU to the writers.
    pub(crate) fn in_background(&self) -> Result<Archive> {
        Archive::with_runtime(
            self.inner.objects.clone(),
            self.inner.prefix.clone(),
            &self.inner.url,
            true,
        )
    }

    /// The URL the archive was opened with.
    ///
    /// Example: [`Archive::from_object_store`].
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The object store underneath.
    ///
    /// Example: [`Archive::from_object_store`].
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.objects
    }

    fn session_path(&self, id: SessionId) -> ObjectPath {
        self.inner.prefix.child(id.to_string())
    }

    pub(crate) fn manifest_path(&self, id: SessionId) -> ObjectPath {
        self.session_path(id).child("manifest.json")
    }

    pub(crate) fn segment_path(&self, id: SessionId, first_seq: u64, last_seq: u64) -> ObjectPath {
        self.session_path(id)
            .child("segments")
            .child(format!("{first_seq:020}-{last_seq:020}.seg"))
    }

    pub(crate) fn tail_path(&self, id: SessionId, first_seq: u64, next_seq: u64) -> ObjectPath {
        self.session_path(id)
            .child("tail")
            .child(format!("{first_seq:020}-{next_seq:020}.seg"))
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.inner.runtime.block_on(f)
    }

    /// The session's manifest, or `None` if the archive has none.
    ///
    /// Example: [the module](crate::archive#example).
    pub fn manifest(&self, id: SessionId) -> Result<Option<Manifest>> {
        self.block_on(self.get_manifest(id))
    }

    async fn get_manifest(&self, id: SessionId) -> Result<Option<Manifest>> {
        let path = self.manifest_path(id);
        let bytes = match self.inner.objects.get(&path).await {
            Ok(r) => r.bytes().await.map_err(|e| remote(&path, e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(remote(&path, e)),
        };
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| archive_err(&path, format!("manifest does not parse: {e}")))?;
        if m.version != MANIFEST_VERSION || m.session != id {
            return Err(archive_err(
                &path,
                format!(
                    "manifest version {} of session {}, expected version {MANIFEST_VERSION} of {id}",
                    m.version, m.session
                ),
            ));
        }
        Ok(Some(m))
    }

    /// Writes the manifest (the one object that is overwritten).
    async fn put_manifest(&self, m: &Manifest) -> Result<()> {
        let path = self.manifest_path(m.session);
        let body = serde_json::to_vec_pretty(m).expect("a manifest serializes");
        self.inner
            .objects
            .put(&path, PutPayload::from(body))
            .await
            .map_err(|e| remote(&path, e))?;
        self.keep_private(&path)
    }

    /// Makes what a `file://` archive wrote for `path` private: the file
    /// 0600, and each directory from the archive's root down to it 0700
    /// (`object_store` writes them with the process's umask).
    pub(crate) fn keep_private(&self, path: &ObjectPath) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let Some(root) = &self.inner.local_root else {
            return Ok(());
        };
        let mode = |p: &std::path::Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io("chmod", p, e))
        };
        let mut dir = root.clone();
        let segments: Vec<String> = path.parts().map(|p| p.as_ref().to_owned()).collect();
        let Some((file, dirs)) = segments.split_last() else {
            return Ok(());
        };
        for part in dirs {
            dir.push(part);
            mode(&dir, 0o700)?;
        }
        mode(&dir.join(file), 0o600)
    }

    /// Uploads an immutable object: created, never overwritten. An object
    /// already there with the same bytes counts as uploaded (an earlier
    /// push that was cut off after the upload); with other bytes it is an
    /// error naming the object. Returns whether this call created it.
    async fn put_immutable(&self, path: &ObjectPath, bytes: bytes::Bytes) -> Result<bool> {
        let opts = PutOptions::from(PutMode::Create);
        match self
            .inner
            .objects
            .put_opts(path, PutPayload::from_bytes(bytes.clone()), opts)
            .await
        {
            Ok(_) => self.keep_private(path).map(|()| true),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let there = self.get_bytes(path).await?;
                if there == bytes {
                    Ok(false)
                } else {
                    Err(archive_err(
                        path,
                        "already exists with other bytes; an archived object is never overwritten",
                    ))
                }
            }
            Err(e) => Err(remote(path, e)),
        }
    }

    async fn get_bytes(&self, path: &ObjectPath) -> Result<bytes::Bytes> {
        let r = self
            .inner
            .objects
            .get(path)
            .await
            .map_err(|e| remote(path, e))?;
        r.bytes().await.map_err(|e| remote(path, e))
    }

    /// The objects of a session, by kind, in log order, with their sizes.
    async fn list_objects(&self, id: SessionId) -> Result<Vec<(ObjectPath, ObjectKind, u64)>> {
        use futures_util::TryStreamExt;
        let base = self.session_path(id);
        let metas: Vec<_> = self
            .inner
            .objects
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|e| remote(&base, e))?;
        let mut out = Vec::new();
        for meta in metas {
            let parts: Vec<_> = meta
                .location
                .prefix_match(&base)
                .into_iter()
                .flatten()
                .collect();
            let kind = match parts.as_slice() {
                [dir, name] if dir.as_ref() == "segments" => parse_range(name.as_ref())
                    .filter(|(a, b)| a <= b)
                    .map(|(first_seq, last_seq)| ObjectKind::Sealed {
                        first_seq,
                        last_seq,
                    }),
                [dir, name] if dir.as_ref() == "tail" => parse_range(name.as_ref())
                    .filter(|(a, b)| a < b)
                    .map(|(first_seq, next_seq)| ObjectKind::Tail {
                        first_seq,
                        next_seq,
                    }),
                [name] if name.as_ref() == "manifest.json" => continue,
                _ => None,
            };
            match kind {
                Some(kind) => out.push((meta.location, kind, meta.size)),
                None => {
                    return Err(archive_err(
                        &meta.location,
                        "not an object this archive writes (a segment or tail name out of form)",
                    ))
                }
            }
        }
        out.sort_by_key(|(_, k, _)| (k.first_seq(), k.next_seq()));
        Ok(out)
    }

    /// Every session in the archive, with its manifest and what its objects
    /// hold, sorted by id.
    ///
    /// Example: [`Archive::from_object_store`].
    pub fn sessions(&self) -> Result<Vec<ArchivedSession>> {
        self.block_on(async {
            let listing = self
                .inner
                .objects
                .list_with_delimiter(Some(&self.inner.prefix))
                .await
                .map_err(|e| remote(&self.inner.prefix, e))?;
            let mut out = Vec::new();
            for dir in listing.common_prefixes {
                let Some(id) = dir.filename().and_then(|n| n.parse::<SessionId>().ok()) else {
                    continue;
                };
                let objects = self.list_objects(id).await?;
                let count = |tail: bool| {
                    objects
                        .iter()
                        .filter(|(_, k, _)| matches!(k, ObjectKind::Tail { .. }) == tail)
                        .count() as u64
                };
                out.push(ArchivedSession {
                    id,
                    manifest: self.get_manifest(id).await.ok().flatten(),
                    segment_objects: count(false),
                    tail_objects: count(true),
                    bytes: objects.iter().map(|(_, _, n)| n).sum(),
                });
            }
            out.sort_by_key(|s| s.id);
            Ok(out)
        })
    }
}

/// An object-store failure, naming the object.
fn remote(path: &ObjectPath, e: object_store::Error) -> Error {
    archive_err(path, e.to_string())
}

pub(crate) fn archive_err(path: &ObjectPath, reason: impl Into<String>) -> Error {
    Error::Archive {
        object: path.to_string(),
        reason: reason.into(),
    }
}
