//! What push and eviction both do with a segment's bytes: read the synced
//! prefix of a file, and name its content.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Reads `len` bytes of a file from its start (holes read as zeros).
pub(super) fn read_prefix(path: &Path, len: u64) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(buf)
}

/// BLAKE3 of a segment's bytes, hex.
pub(super) fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}
