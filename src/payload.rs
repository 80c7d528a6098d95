//! The store-wide payload area: large items stored once, by content.
//!
//! ```text
//! <root>/payloads/<first 2 hex digits>/<64 hex digits of BLAKE3>   one item's archive
//! <root>/payloads/LOCK                                             writers: shared flock;
//!                                                                  collection: exclusive
//! ```
//!
//! A payload file holds one `LoggedItem` archived alone (rkyv, as records
//! hold entries), named by the BLAKE3 hash of those bytes. A record refers
//! to it with [`LoggedItem::External`](crate::schema::LoggedItemOf::External) (hash and
//! length), so a compaction snapshot or a fork that repeats a large tool
//! output stores a reference only. A payload is written (temporary name,
//! rename) before the record that refers to it is appended, and synced by
//! the next group commit of any log of the store before that commit syncs
//! its records; recovery cuts a log at the first record past its durable
//! mark whose payload did not survive. DESIGN.md, "Payloads", has the whole
//! argument.
//!
//! # Example
//!
//! ```
//! use session_store::{Item, RequestConfig, Store, StoreOptions};
//! # fn main() -> session_store::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open_with(dir.path(), StoreOptions::default().payload_threshold(16 << 10))?;
//! let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
//! // A pasted build log of 96 KB: stored once, apart from its record.
//! let paste = Item::user_text("test result: ok\n".repeat(6_000));
//! store.save_delta(id, &mut head, &[paste.clone()])?;
//! let info = store.info(id)?.unwrap();
//! assert!(info.payload_bytes > 90_000 && info.bytes < 1_000);
//! assert_eq!(store.restore(id)?.history, [paste]);
//! assert!(store.verify_payloads(id)?.is_empty());
//!
//! store.delete(id)?;
//! assert_eq!(store.collect_payloads()?.removed, 1);
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Under the store's root: sessions deleted while forks still read them.
pub(crate) const RETIRED_DIR: &str = "retired";

use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, io_err, sync_dir, Hook, HookedFile};
use crate::item::Item;
use crate::schema::{bounded_json_len, json_len, ArchivedLoggedItem, LoggedItem, LoggedPayloadRef};

/// The directory under the store root.
pub(crate) const PAYLOADS_DIR: &str = "payloads";
/// The lock file that keeps collection away from writers.
const LOCK_FILE: &str = "LOCK";

/// Distinguishes the temporary files of concurrent writers in one process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Payloads at least this long are read through a map rather than into
/// memory: copying a large one into fresh memory costs the kernel's zeroing
/// of every page first (a 1 MB payload is 256 page faults), and the item
/// made from it copies the bytes again anyway.
const MAP_FROM: usize = 64 << 10;

/// A payload file's bytes as read: copied into aligned memory, or mapped
/// (page-aligned) when large. Either way aligned as an archive needs.
pub(crate) enum PayloadBytes {
    /// Read into memory.
    Read(rkyv::util::AlignedVec<16>),
    /// Mapped read-only.
    Mapped(crate::mmap::FileMap),
}

impl std::ops::Deref for PayloadBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            PayloadBytes::Read(v) => v,
            PayloadBytes::Mapped(m) => m,
        }
    }
}

impl PayloadBytes {
    /// The bytes, owned (an upload to an archive).
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            PayloadBytes::Read(v) => v.into_vec(),
            PayloadBytes::Mapped(m) => m.to_vec(),
        }
    }
}

/// What is wrong with a payload a record refers to.
///
/// Example: [the module](crate::payload#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadProblem {
    /// No file has its name.
    Missing,
    /// The file is not as long as the reference says.
    Length {
        /// The length the record names.
        expected: u64,
        /// The file's length.
        actual: u64,
    },
    /// The bytes do not hash to the name.
    Hash,
    /// The bytes hash right but are no valid item archive.
    Invalid(String),
}

impl std::fmt::Display for PayloadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadProblem::Missing => write!(f, "missing"),
            PayloadProblem::Length { expected, actual } => {
                write!(f, "{actual} bytes, the record names {expected}")
            }
            PayloadProblem::Hash => write!(f, "content does not match its BLAKE3 hash"),
            PayloadProblem::Invalid(e) => write!(f, "not a valid item archive: {e}"),
        }
    }
}

/// A reference that does not resolve to its payload, as `verify` reports it.
///
/// Example: [the module](crate::payload#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadDamage {
    /// The record that refers to the payload.
    pub seq: u64,
    /// The payload's BLAKE3 hash, hex.
    pub hash: String,
    /// What is wrong.
    pub problem: PayloadProblem,
}

impl std::fmt::Display for PayloadDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "payload {} at seq {}: {}",
            self.hash, self.seq, self.problem
        )
    }
}

/// What [`Store::collect_payloads`](crate::Store::collect_payloads) did.
///
/// Example: [the module](crate::payload#example).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayloadCollection {
    /// Payloads some session refers to, kept.
    pub kept: u64,
    /// Payload files removed, nothing referring to them.
    pub removed: u64,
    /// Bytes of the files removed.
    pub removed_bytes: u64,
    /// Temporary files of interrupted writes, removed.
    pub removed_temporary: u64,
}

/// A file of the area: its path, the hash its name spells (`None` for a
/// temporary file or another name), its length.
type AreaFile = (PathBuf, Option<[u8; 32]>, u64);

/// The payload area of one store.
pub(crate) struct PayloadArea {
    dir: PathBuf,
    hook: Hook,
    /// Payloads written (or found) since the last sync and not known to be
    /// durable: every group commit of a log of the store syncs them first
    /// (`sync_pending`).
    pending: parking_lot::Mutex<Pending>,
    /// Held through a whole `sync_pending`, so that no sync returns while
    /// payloads it should cover are still being synced by another.
    syncing: parking_lot::Mutex<()>,
    /// Payloads this process wrote, or read back and found whole, since the
    /// area's last collection, with the inode their file had: a save that
    /// repeats one need not read it while its name still holds that file
    /// (another process's collection may have removed it since, and another
    /// writer written it again, unsynced).
    known: parking_lot::Mutex<HashMap<[u8; 32], u64>>,
}

/// What the next sync of the area must make durable.
#[derive(Default)]
struct Pending {
    files: Vec<PathBuf>,
    /// A shard directory was made, or a payload found whose shard a crashed
    /// writer may have made: `payloads/` is synced too.
    new_shard: bool,
    /// `payloads/` was made, or may have been made by a process that died
    /// before a sync (true until this area's first sync of payloads): the
    /// store's root, which holds its name, is synced too.
    new_area: bool,
}

impl std::fmt::Debug for PayloadArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadArea")
            .field("dir", &self.dir)
            .finish()
    }
}

impl PayloadArea {
    /// The area under the store `root` (created at the first write).
    pub(crate) fn new(root: &Path, hook: Hook) -> PayloadArea {
        PayloadArea {
            dir: root.join(PAYLOADS_DIR),
            hook,
            pending: parking_lot::Mutex::new(Pending {
                new_area: true,
                ..Pending::default()
            }),
            syncing: parking_lot::Mutex::new(()),
            known: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The payload area of the store whose session directory `dir` is
    /// (`<root>/sessions/<id>`, or a retired parent's `<root>/retired/<id>`),
    /// if that store has one: how a log opened on its own finds the area its
    /// references resolve in.
    pub(crate) fn of_session_dir(dir: &Path, hook: &Hook) -> Option<Arc<PayloadArea>> {
        // `Log::open(".")` from inside the directory names it too.
        let dir = match dir.file_name() {
            Some(_) => dir.to_path_buf(),
            None => dir.canonicalize().ok()?,
        };
        let sessions = dir.parent()?;
        // A live session's, or a retired parent's that forks still read.
        let place = sessions.file_name()?;
        if place != "sessions" && place != RETIRED_DIR {
            return None;
        }
        let root = sessions.parent()?;
        root.join(PAYLOADS_DIR)
            .is_dir()
            .then(|| Arc::new(PayloadArea::new(root, hook.clone())))
    }

    /// The store's root, which names `payloads/`: `.` for an area under a
    /// relative root of one part (a log opened as `sessions/<id>` from
    /// the root), whose parent is the empty path.
    fn root(&self) -> &Path {
        self.dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The file of the payload with this hash.
    pub(crate) fn path(&self, hash: &[u8; 32]) -> PathBuf {
        let hex = crate::chain::EntryHash(*hash).to_string();
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Takes the writers' (shared) lock: held from the first payload a save
    /// writes or reuses until its records are appended, so that collection
    /// (exclusive) never runs between the two.
    pub(crate) fn lock_shared(&self) -> Result<File> {
        let lock = self.lock_file()?;
        lock.lock_shared().map_err(io_err("lock", &self.dir))?;
        Ok(lock)
    }

    fn lock_file(&self) -> Result<File> {
        if !hooked_fs::dir_exists(&self.dir)? {
            // The root is synced by the next sync of payloads, not now, so
            // a store that never syncs (`Buffered`) pays no `fsync` for its
            // first large item. Noted under the list's lock (the flag is
            // already set until this area's first sync; this matters only
            // where `payloads/` went away since).
            let mut pending = self.pending.lock();
            hooked_fs::create_dir(&self.dir, &self.hook)?;
            pending.new_area = true;
        }
        Ok(HookedFile::open_or_create(&self.dir.join(LOCK_FILE), &self.hook)?.into_file())
    }

    /// Stores `bytes` (one item's archive) under their hash, unless the
    /// payload is there already; returns the reference. Nothing is synced:
    /// the payload is written under a temporary name and renamed, and the
    /// next group commit of any log of the store (`sync_pending`, from
    /// `Log::sync_now`, or a roll's settle) makes it durable before the
    /// records it covers. A record that reaches the disk before its payload
    /// (writeback, then a power loss) lies past its log's durable mark, where
    /// recovery checks every payload and cuts the log at the first that is
    /// not whole. The caller holds [`PayloadArea::lock_shared`].
    // The store names what it writes itself (`put_named`); the archive's
    // pull and fetch-back put what they download.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn put(&self, bytes: &[u8]) -> Result<LoggedPayloadRef> {
        let r = LoggedPayloadRef {
            hash: *blake3::hash(bytes).as_bytes(),
            len: bytes.len() as u64,
        };
        self.put_named(bytes, r)?;
        Ok(r)
    }

    /// [`PayloadArea::put`] of `bytes` whose reference `r` the caller made
    /// from them (their BLAKE3 hash and length), so they are not hashed
    /// again.
    pub(crate) fn put_named(&self, bytes: &[u8], r: LoggedPayloadRef) -> Result<()> {
        debug_assert_eq!(r.len, bytes.len() as u64);
        let hash = r.hash;
        let path = self.path(&hash);
        let shard = path.parent().expect("a payload path has a shard directory");
        if let Ok(m) = fs::metadata(&path) {
            if m.len() == r.len {
                if self.known.lock().get(&hash) == Some(&m.ino()) {
                    return Ok(());
                }
                // Another process's, or an earlier run's: a power loss may
                // have left its name over torn bytes, so it is read back
                // once, and synced by the next sync (its writer may have
                // died before syncing it).
                if self.adopt(&r).is_ok() {
                    return Ok(());
                }
            }
        }
        {
            // Made and noted under one lock: a sync that sees the shard sees
            // that `payloads/` must be synced for it.
            let mut pending = self.pending.lock();
            if !hooked_fs::dir_exists(shard)? {
                hooked_fs::create_dir(shard, &self.hook)?;
                pending.new_shard = true;
            }
        }
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = shard.join(format!(
            "{}.{}.{n}.tmp",
            crate::chain::EntryHash(hash),
            std::process::id()
        ));
        let written = HookedFile::create(&tmp, &self.hook).and_then(|file| file.write_at(0, bytes));
        if let Err(e) = written.and_then(|()| hooked_fs::rename(&tmp, &path, &self.hook)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let ino = fs::metadata(&path).map_or(0, |m| m.ino());
        self.pending.lock().files.push(path);
        self.known.lock().insert(hash, ino);
        Ok(())
    }

    /// Takes a payload already in the area, found rather than written: it is
    /// read back whole (length, BLAKE3, archive), and noted for the next
    /// sync, with its shard's entry in `payloads/`, since the process that
    /// wrote it may have died before syncing either. What names it may be
    /// appended, or placed, once that sync has run.
    pub(crate) fn adopt(&self, r: &LoggedPayloadRef) -> std::result::Result<(), PayloadProblem> {
        let bytes = self.read(r)?;
        check_archive(&bytes)?;
        let path = self.path(&r.hash);
        let ino = fs::metadata(&path).map_or(0, |m| m.ino());
        let mut pending = self.pending.lock();
        pending.files.push(path);
        pending.new_shard = true;
        drop(pending);
        self.known.lock().insert(r.hash, ino);
        Ok(())
    }

    /// Forgets what this process knew of payload `hash`: the next `put` of
    /// it reads the file back, and writes it again if it is not whole.
    // Only the archive's pull and fetch-back forget.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn forget(&self, hash: &[u8; 32]) {
        self.known.lock().remove(hash);
    }

    /// Makes every payload written since the last sync durable: each file
    /// `fdatasync`ed, then each of their shard directories `fsync`ed (and
    /// `payloads/` when a shard was made, and the store's root at this
    /// area's first sync or when it made `payloads/`). Runs at the start
    /// of every group commit of a log of the store, so that no record
    /// becomes durable before the payloads it names. One sync at a time: a
    /// second caller waits, so that it never returns while payloads it
    /// covers are still being synced by the first. A payload collected
    /// since is skipped.
    pub(crate) fn sync_pending(&self) -> Result<()> {
        let _one = self.syncing.lock();
        let pending = {
            let mut p = self.pending.lock();
            // Nothing written or found: the root waits for a sync that
            // has payloads to make durable.
            if p.files.is_empty() && !p.new_shard {
                return Ok(());
            }
            std::mem::take(&mut *p)
        };
        let synced = (|| {
            let mut dirs: Vec<&Path> = Vec::new();
            for path in &pending.files {
                match HookedFile::open(path, false, &self.hook) {
                    Ok(f) => f.sync()?,
                    Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                        continue
                    }
                    Err(e) => return Err(e),
                }
                let dir = path.parent().expect("a payload path has a shard directory");
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
            if pending.new_shard {
                dirs.push(&self.dir);
            }
            if pending.new_area {
                dirs.push(self.root());
            }
            dirs.into_iter().try_for_each(|d| sync_dir(d, &self.hook))
        })();
        if synced.is_err() {
            // Not known to be durable: the next sync tries them again.
            let mut p = self.pending.lock();
            p.files.extend(pending.files);
            p.new_shard |= pending.new_shard;
            p.new_area |= pending.new_area;
        }
        synced
    }

    /// Recovery's check of a record past its log's durable mark, given its
    /// payload bytes: every payload the entry refers to is there, of the
    /// length and BLAKE3 hash the reference names. A record whose archive
    /// does not validate is left to the checks that read it. A writer's
    /// open (`pending`) notes each payload found for the next sync: its own
    /// writer may have crashed before syncing it, and this open's mark will
    /// cover the record.
    pub(crate) fn check_record(
        &self,
        bytes: &[u8],
        version: u32,
        pending: bool,
    ) -> std::result::Result<(), String> {
        let Ok(entry) = crate::schema::read_archive(bytes, version) else {
            return Ok(());
        };
        for r in entry.get().items().iter().filter_map(|i| i.payload_ref()) {
            if let Err(problem) = self.read(&r) {
                return Err(format!(
                    "payload {}: {problem}",
                    crate::chain::EntryHash(r.hash)
                ));
            }
            if pending {
                // Found, not written: its shard's entry too.
                let mut p = self.pending.lock();
                p.files.push(self.path(&r.hash));
                p.new_shard = true;
            }
        }
        Ok(())
    }

    /// Reads the payload `r` names and checks its length, its hash and its
    /// archive. Reads only.
    pub(crate) fn read(
        &self,
        r: &LoggedPayloadRef,
    ) -> std::result::Result<PayloadBytes, PayloadProblem> {
        let path = self.path(&r.hash);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(PayloadProblem::Missing),
            Err(e) => return Err(PayloadProblem::Invalid(format!("cannot open: {e}"))),
        };
        let actual = file
            .metadata()
            .map_err(|e| PayloadProblem::Invalid(format!("cannot stat: {e}")))?
            .len();
        if actual != r.len {
            return Err(PayloadProblem::Length {
                expected: r.len,
                actual,
            });
        }
        let bytes = file_bytes(&file, actual as usize, crate::mmap::FileMap::new)
            .map_err(|e| PayloadProblem::Invalid(format!("cannot read: {e}")))?;
        if blake3::hash(&bytes).as_bytes() != &r.hash {
            return Err(PayloadProblem::Hash);
        }
        Ok(bytes)
    }

    /// Every payload file and temporary file in the area, with its length.
    fn files(&self) -> Result<Vec<AreaFile>> {
        let mut out = Vec::new();
        let shards = match fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io("read dir", &self.dir, e)),
        };
        for shard in shards {
            let shard = shard.map_err(io_err("read dir", &self.dir))?;
            if !shard.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let shard = shard.path();
            for f in fs::read_dir(&shard).map_err(io_err("read dir", &shard))? {
                let f = f.map_err(io_err("read dir", &shard))?;
                let len = f.metadata().map_or(0, |m| m.len());
                let name = f.file_name();
                let hash = name.to_str().and_then(parse_hash);
                out.push((f.path(), hash, len));
            }
        }
        Ok(out)
    }

    /// Removes every payload not in `referenced`, and the temporary files
    /// of interrupted writes. `mark` runs under the exclusive lock, so no
    /// save is between writing a payload and appending its record while the
    /// marks are taken and the files removed.
    pub(crate) fn collect(
        &self,
        mark: impl FnOnce() -> Result<HashSet<[u8; 32]>>,
    ) -> Result<PayloadCollection> {
        let mut report = PayloadCollection::default();
        if !hooked_fs::dir_exists(&self.dir)? {
            return Ok(report);
        }
        let lock = self.lock_file()?;
        lock.lock().map_err(io_err("lock", &self.dir))?;
        let referenced = mark()?;
        // What is removed must be written again by the next save that needs it.
        self.known.lock().clear();
        for (path, hash, len) in self.files()? {
            match hash {
                Some(h) if referenced.contains(&h) => report.kept += 1,
                Some(_) => {
                    hooked_fs::remove_file(&path, &self.hook)?;
                    report.removed += 1;
                    report.removed_bytes += len;
                }
                // A temporary file: its writer is not between its write
                // and its record (the lock says so), so it is garbage.
                None if path.extension().is_some_and(|e| e == "tmp") => {
                    hooked_fs::remove_file(&path, &self.hook)?;
                    report.removed_temporary += 1;
                }
                None => {}
            }
        }
        drop(lock);
        Ok(report)
    }
}

/// The runtime item of `item`, read from the payload area when it refers
/// there; the record's `seq` names it in errors. A log read without its
/// store (`area` is `None`) cannot resolve a reference, and says so.
pub(crate) fn resolve_item(
    area: Option<&PayloadArea>,
    seq: u64,
    item: &ArchivedLoggedItem,
) -> Result<Item> {
    match item.payload_ref() {
        None => Ok(item.to_item()),
        Some(r) => with_payload(area, seq, &r, |i| i.to_item()),
    }
}

/// [`resolve_item`], to the logged form (export and inlining).
pub(crate) fn resolve_logged(
    area: Option<&PayloadArea>,
    seq: u64,
    item: &ArchivedLoggedItem,
) -> Result<LoggedItem> {
    let deserialize = |i: &ArchivedLoggedItem| {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LoggedItem, rkyv::rancor::Error>(i)
            .expect("deserializing a validated archive cannot fail")
    };
    match item.payload_ref() {
        None => Ok(deserialize(item)),
        Some(r) => with_payload(area, seq, &r, deserialize),
    }
}

pub(crate) fn with_payload<T>(
    area: Option<&PayloadArea>,
    seq: u64,
    r: &LoggedPayloadRef,
    f: impl FnOnce(&ArchivedLoggedItem) -> T,
) -> Result<T> {
    let bytes = read_payload(area, seq, r)?;
    Ok(f(payload_item(&bytes, seq, r)?))
}

/// The length of the JSON the item kept as `r` exports as: read from
/// `area` and measured, or bounded ([`bounded_json_len`]) when the log has
/// no area. For the writer's line-length check of an entry that refers to
/// large items, which runs only for an entry near the limit.
pub(crate) fn item_json_len(area: Option<&PayloadArea>, r: &LoggedPayloadRef) -> Result<usize> {
    let Some(area) = area else {
        return Ok(bounded_json_len(r));
    };
    let unmeasured = |problem: String| {
        Error::invalid(format!(
            "entry refers to the large item {}, which cannot be measured: {problem}",
            crate::chain::EntryHash(r.hash)
        ))
    };
    let bytes = area.read(r).map_err(|p| unmeasured(p.to_string()))?;
    let item = check_archive(&bytes).map_err(|p| unmeasured(p.to_string()))?;
    // Deserializing validated archived data into owned types has no failure path.
    let item = rkyv::deserialize::<LoggedItem, rkyv::rancor::Error>(item)
        .expect("deserializing a validated archive cannot fail");
    json_len(&item)
}

/// The bytes of the payload `r` names, for the record `seq`: read from
/// `area` and checked (length, BLAKE3); [`payload_item`] checks the archive.
pub(crate) fn read_payload(
    area: Option<&PayloadArea>,
    seq: u64,
    r: &LoggedPayloadRef,
) -> Result<PayloadBytes> {
    let area = area.ok_or_else(|| {
        payload_error(
            seq,
            r,
            "the log was read without the store whose payload area holds it".into(),
        )
    })?;
    area.read(r)
        .map_err(|p| payload_error(seq, r, p.to_string()))
}

/// The item archived in `bytes`, the payload `r` of the record `seq`, read
/// by [`read_payload`]: checked as [`check_archive`] does.
pub(crate) fn payload_item<'b>(
    bytes: &'b [u8],
    seq: u64,
    r: &LoggedPayloadRef,
) -> Result<&'b ArchivedLoggedItem> {
    check_archive(bytes).map_err(|p| payload_error(seq, r, p.to_string()))
}

fn payload_error(seq: u64, r: &LoggedPayloadRef, problem: String) -> Error {
    Error::Payload {
        seq,
        hash: crate::chain::EntryHash(r.hash).to_string(),
        problem,
    }
}

/// Validates a payload's archive: a `LoggedItem` that is itself no
/// reference (a payload never refers to another).
pub(crate) fn check_archive(
    bytes: &[u8],
) -> std::result::Result<&ArchivedLoggedItem, PayloadProblem> {
    let item = rkyv::access::<ArchivedLoggedItem, rkyv::rancor::Error>(bytes)
        .map_err(|e| PayloadProblem::Invalid(e.to_string()))?;
    if item.payload_ref().is_some() {
        return Err(PayloadProblem::Invalid(
            "a payload refers to another payload".into(),
        ));
    }
    item.check_json_texts(|text| crate::schema::check_json(text).map_err(PayloadProblem::Invalid))?;
    Ok(item)
}

fn parse_hash(name: &str) -> Option<[u8; 32]> {
    name.parse::<crate::chain::EntryHash>().ok().map(|h| h.0)
}

/// All `len` bytes of a payload file: through `map` when the file is
/// large, and read into memory otherwise or where the map fails (a file
/// system that cannot map the file, an address space that is full).
fn file_bytes(
    file: &File,
    len: usize,
    map: impl FnOnce(&File, usize) -> io::Result<crate::mmap::FileMap>,
) -> io::Result<PayloadBytes> {
    if len >= MAP_FROM {
        if let Ok(map) = map(file, len) {
            return Ok(PayloadBytes::Mapped(map));
        }
    }
    // Read into the room unzeroed: the payload would otherwise be written
    // twice, zeros first.
    let mut buf = rkyv::util::AlignedVec::<16>::new();
    crate::mmap::read_to(file, &mut buf, len)?;
    Ok(PayloadBytes::Read(buf))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn file_of(len: usize) -> (File, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        (file, bytes)
    }

    #[test]
    fn a_large_payload_is_mapped_and_a_small_one_read() {
        let (file, bytes) = file_of(MAP_FROM);
        let got = file_bytes(&file, bytes.len(), crate::mmap::FileMap::new).unwrap();
        assert!(matches!(got, PayloadBytes::Mapped(_)));
        assert_eq!(&got[..], &bytes[..]);

        let (file, bytes) = file_of(MAP_FROM - 1);
        let mut mapped = false;
        let got = file_bytes(&file, bytes.len(), |f, n| {
            mapped = true;
            crate::mmap::FileMap::new(f, n)
        })
        .unwrap();
        assert!(!mapped, "a payload under the threshold is not mapped");
        assert!(matches!(got, PayloadBytes::Read(_)));
        assert_eq!(&got[..], &bytes[..]);
    }

    #[test]
    fn a_payload_whose_map_fails_is_read_instead() {
        let (file, bytes) = file_of(MAP_FROM + 4_321);
        let got = file_bytes(&file, bytes.len(), |_, _| {
            Err(io::Error::from_raw_os_error(libc::ENODEV))
        })
        .unwrap();
        assert!(matches!(got, PayloadBytes::Read(_)));
        assert_eq!(&got[..], &bytes[..]);
        assert_eq!(got.as_ptr() as usize % 16, 0, "aligned as an archive needs");
    }

    #[test]
    fn the_root_of_an_area_under_a_relative_root_is_a_path_that_syncs() {
        let hook = Hook::default();
        // `Log::open("sessions/<id>")` from inside the store's root.
        let area = PayloadArea::new(Path::new(""), hook.clone());
        assert_eq!(area.root(), Path::new("."));
        assert_eq!(
            PayloadArea::new(Path::new("st"), hook.clone()).root(),
            Path::new("st")
        );
        let dir = tempfile::tempdir().unwrap();
        let area = PayloadArea::new(dir.path(), hook.clone());
        assert_eq!(area.root(), dir.path());
        // What the sync does with it: an empty path would fail.
        sync_dir(PayloadArea::new(Path::new(""), hook.clone()).root(), &hook).unwrap();
    }

    /// A short file read (the map forced to fail: `PayloadArea::read`
    /// checks the length first, so a short file never reaches a map).
    #[test]
    fn a_payload_file_shorter_than_its_length_is_an_error_when_read() {
        let (file, bytes) = file_of(MAP_FROM);
        let fail = |_: &File, _: usize| Err(io::Error::from_raw_os_error(libc::ENODEV));
        let e = file_bytes(&file, bytes.len() + 1, fail).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
