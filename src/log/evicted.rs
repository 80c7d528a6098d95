//! The record of a log's evicted prefix: sealed segments whose local files
//! were removed once an archive was verified to hold them byte for byte
//! (`Archive::evict`). The opener reads it to tell an expected missing
//! prefix from damage; a fetch-back places the files again and drops them
//! from it.
//!
//! Order (see DESIGN.md, "Durability and fsync points"): the record is
//! written durably (temp, `fdatasync`, rename, directory `fsync`) before any
//! file it lists is removed, and files are removed from the lowest seq up,
//! the directory synced after each; a fetch-back places files from the
//! highest seq down, each synced and renamed into place and the directory
//! synced, before the record drops them. So after any crash the local
//! segments are a contiguous suffix of the log, and the record lists at
//! least the prefix that is missing.

use std::path::Path;

use crate::chain::{from_hex, to_hex, EntryHash};
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, sync_dir, Hook};

/// The record's file in a log's directory.
///
/// ```
/// use session_store::log::EVICTED_FILE;
/// use session_store::{RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (id, _) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// // Nothing of this session went to an archive: no record, no evicted prefix.
/// assert!(!store.session_dir(id).join(EVICTED_FILE).exists());
/// let snap = store.snapshot(id)?;
/// assert_eq!((snap.evicted(), snap.first_seq()), (None, 0));
/// # Ok(()) }
/// ```
pub const EVICTED_FILE: &str = "evicted.json";
/// The record's format version.
const EVICTED_VERSION: u32 = 1;

/// What a log's directory says about its evicted prefix.
///
/// Example: [`EVICTED_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvictedRecord {
    /// The record's format version (1).
    pub version: u32,
    /// The log's id (hex), which every segment header carries.
    pub log_id: String,
    /// The evicted segments, in log order.
    pub segments: Vec<EvictedSegment>,
}

/// One evicted segment.
///
/// Example: [`EVICTED_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvictedSegment {
    /// Its file name (`<first_seq:020>.seg`).
    pub name: String,
    /// Seq of its first record.
    pub first_seq: u64,
    /// Seq of its last record.
    pub last_seq: u64,
    /// The hash its first record chains from.
    pub start_hash: EntryHash,
    /// Hash of its last record.
    pub last_hash: EntryHash,
    /// File length.
    pub len_bytes: u64,
    /// BLAKE3 of the file's bytes, hex.
    pub content_hash: String,
    /// The archive object that holds it.
    pub object: String,
}

#[cfg_attr(not(feature = "archive"), allow(dead_code))]
impl EvictedRecord {
    /// A record of no segments yet.
    ///
    /// Example: [`EVICTED_FILE`].
    pub fn new(log_id: &[u8; 16]) -> EvictedRecord {
        EvictedRecord {
            version: EVICTED_VERSION,
            log_id: to_hex(log_id),
            segments: Vec::new(),
        }
    }

    /// The log id as bytes, if the hex is well formed.
    fn log_id_bytes(&self) -> Option<[u8; 16]> {
        from_hex(&self.log_id)
    }
}

/// The evicted prefix below a log's first local segment, as the opener
/// needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EvictedPrefix {
    pub(crate) log_id: [u8; 16],
    /// Seq after its last record: the first local segment's first seq.
    pub(crate) next_seq: u64,
    /// Hash of its last record: the first local segment's start hash.
    pub(crate) last_hash: EntryHash,
}

/// Reads a log directory's record, `None` if it has none.
pub fn read(dir: &Path) -> Result<Option<EvictedRecord>> {
    let path = dir.join(EVICTED_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path, e)),
    };
    let bad =
        |why: String| Error::invalid(format!("{}: not an eviction record: {why}", path.display()));
    let record: EvictedRecord = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    if record.version != EVICTED_VERSION {
        return Err(bad(format!("version {}", record.version)));
    }
    Ok(Some(record))
}

/// Writes the record durably (or removes it when it lists nothing), and
/// syncs the directory.
#[cfg_attr(not(feature = "archive"), allow(dead_code))]
pub(crate) fn write(dir: &Path, record: &EvictedRecord, hook: &Hook) -> Result<()> {
    let path = dir.join(EVICTED_FILE);
    if record.segments.is_empty() {
        match hooked_fs::remove_file(&path, hook) {
            Ok(()) => {}
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        return sync_dir(dir, hook);
    }
    let json = serde_json::to_vec_pretty(record).expect("an eviction record serializes");
    hooked_fs::write_atomic(&path, &json, hook)
}

/// The evicted prefix below `first_local` (the first local segment's first
/// seq): the record's segments below it, if they run from seq 0 without a
/// gap up to it. `None` when nothing is missing (`first_local` 0), or when
/// the record does not account for the missing prefix, which the opener
/// then reports as damage (a missing segment), as without a record.
pub(crate) fn prefix_below(dir: &Path, first_local: u64) -> Result<Option<EvictedPrefix>> {
    if first_local == 0 {
        return Ok(None);
    }
    let Some(record) = read(dir)? else {
        return Ok(None);
    };
    let Some(log_id) = record.log_id_bytes() else {
        return Ok(None);
    };
    let mut next = 0u64;
    let mut last_hash = EntryHash::genesis();
    for s in record
        .segments
        .iter()
        .take_while(|s| s.first_seq < first_local)
    {
        if s.first_seq != next || s.start_hash != last_hash || s.last_seq < s.first_seq {
            return Ok(None);
        }
        next = s.last_seq + 1;
        last_hash = s.last_hash;
    }
    Ok((next == first_local).then_some(EvictedPrefix {
        log_id,
        next_seq: next,
        last_hash,
    }))
}
