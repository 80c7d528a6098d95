//! The per-session catalog file: what `list()` shows, without reading logs.
//!
//! ```text
//! catalog (1024 B, 0600)
//!   0  head slot (128 B): magic "SSCH", crc u32 (of 8..80), dirty u8, pad[7],
//!      next_seq u64, bytes u64, updated_ms u64, first_seq u64, head_hash [32]
//!  128 title slot (384 B): magic "SSCT", crc u32 (of 8..12+len), len u32, utf8 bytes
//!  512 identity (512 B): magic "SSCI", crc u32, len u32, JSON {created_ms, forked_from, compacted_from}
//! ```
//!
//! The head slot is rewritten (pwrite, page cache) with every store write and
//! flagged dirty while a writer has the session open; a clean close clears
//! the flag. A dirty slot whose session no writer holds is stale after a
//! crash, and the store rebuilds it from the log.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::schema::SessionOrigin;
use crate::segment::io_err;

const HEAD_MAGIC: [u8; 4] = *b"SSCH";
const TITLE_MAGIC: [u8; 4] = *b"SSCT";
const IDENT_MAGIC: [u8; 4] = *b"SSCI";
const HEAD_AT: u64 = 0;
const HEAD_LEN: usize = 80;
const TITLE_AT: u64 = 128;
const TITLE_MAX: usize = 384 - 12;
const IDENT_AT: u64 = 512;
const IDENT_MAX: usize = 512 - 12;
/// Catalog file length.
pub(crate) const CATALOG_LEN: usize = 1024;
/// Catalog file name inside a session directory.
pub(crate) const CATALOG_FILE: &str = "catalog";

/// The mutable part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HeadSlot {
    pub(crate) dirty: bool,
    pub(crate) next_seq: u64,
    pub(crate) bytes: u64,
    pub(crate) updated_ms: u64,
    pub(crate) first_seq: u64,
    pub(crate) head: EntryHash,
}

/// The immutable part.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Identity {
    pub(crate) created_ms: u64,
    #[serde(default)]
    pub(crate) forked_from: Option<SessionOrigin>,
    #[serde(default)]
    pub(crate) compacted_from: Option<SessionOrigin>,
}

/// Everything in a catalog file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogRecord {
    pub(crate) head: Option<HeadSlot>,
    pub(crate) title: Option<String>,
    pub(crate) identity: Option<Identity>,
}

fn framed(magic: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out
}

fn unframe(magic: [u8; 4], b: &[u8], max: usize) -> Option<&[u8]> {
    if b.len() < 12 || b[..4] != magic {
        return None;
    }
    let len = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
    if len > max || 12 + len > b.len() {
        return None;
    }
    let crc = u32::from_le_bytes(b[4..8].try_into().ok()?);
    (crc32fast::hash(&b[8..12 + len]) == crc).then(|| &b[12..12 + len])
}

impl HeadSlot {
    fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[..4].copy_from_slice(&HEAD_MAGIC);
        b[8] = u8::from(self.dirty);
        b[16..24].copy_from_slice(&self.next_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        b[32..40].copy_from_slice(&self.updated_ms.to_le_bytes());
        b[40..48].copy_from_slice(&self.first_seq.to_le_bytes());
        b[48..80].copy_from_slice(self.head.as_bytes());
        let crc = crc32fast::hash(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<HeadSlot> {
        let b = b.get(..HEAD_LEN)?;
        if b[..4] != HEAD_MAGIC
            || crc32fast::hash(&b[8..]) != u32::from_le_bytes(b[4..8].try_into().ok()?)
        {
            return None;
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(HeadSlot {
            dirty: b[8] != 0,
            next_seq: u(16),
            bytes: u(24),
            updated_ms: u(32),
            first_seq: u(40),
            head: EntryHash(b[48..80].try_into().ok()?),
        })
    }
}

/// Creates a catalog file (0600) with its identity, durably.
pub(crate) fn create(path: &Path, identity: &Identity, title: Option<&str>) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err("create", path))?;
    let mut buf = vec![0u8; CATALOG_LEN];
    let ident = serde_json::to_vec(identity).expect("identity serializes");
    if ident.len() > IDENT_MAX {
        return Err(Error::invalid("catalog identity too large"));
    }
    let framed_ident = framed(IDENT_MAGIC, &ident);
    buf[IDENT_AT as usize..IDENT_AT as usize + framed_ident.len()].copy_from_slice(&framed_ident);
    if let Some(t) = title {
        let t = excerpt(t);
        let f = framed(TITLE_MAGIC, t.as_bytes());
        buf[TITLE_AT as usize..TITLE_AT as usize + f.len()].copy_from_slice(&f);
    }
    file.write_all_at(&buf, 0).map_err(io_err("write", path))?;
    file.sync_data().map_err(io_err("fdatasync", path))?;
    Ok(file)
}

/// Opens an existing catalog file for updates.
pub(crate) fn open(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err("open", path))
}

/// Rewrites the head slot.
pub(crate) fn write_head(file: &File, path: &Path, head: &HeadSlot) -> Result<()> {
    file.write_all_at(&head.encode(), HEAD_AT)
        .map_err(io_err("write", path))
}

/// Sets the title once it is known.
pub(crate) fn write_title(file: &File, path: &Path, title: &str) -> Result<()> {
    let f = framed(TITLE_MAGIC, excerpt(title).as_bytes());
    file.write_all_at(&f, TITLE_AT)
        .map_err(io_err("write", path))
}

/// Reads a whole catalog file; damaged parts read as `None`.
pub(crate) fn read(path: &Path) -> Result<CatalogRecord> {
    // One open, one pread, one close: listing reads thousands of these.
    let file = File::open(path).map_err(io_err("open", path))?;
    let mut bytes = vec![0u8; CATALOG_LEN];
    let mut filled = 0;
    while filled < CATALOG_LEN {
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    bytes.truncate(filled);
    let part = |at: u64, len: usize| {
        bytes
            .get(at as usize..(at as usize + len).min(bytes.len()))
            .unwrap_or(&[])
    };
    Ok(CatalogRecord {
        head: HeadSlot::decode(part(HEAD_AT, HEAD_LEN)),
        title: unframe(TITLE_MAGIC, part(TITLE_AT, 384), TITLE_MAX)
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(str::to_owned),
        identity: unframe(IDENT_MAGIC, part(IDENT_AT, 512), IDENT_MAX)
            .and_then(|b| serde_json::from_slice(b).ok()),
    })
}

/// The first line of a text, cut at a character boundary to fit the title slot.
pub(crate) fn excerpt(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let mut out = String::new();
    for c in line.chars() {
        if out.len() + c.len_utf8() > 120.min(TITLE_MAX) {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}
