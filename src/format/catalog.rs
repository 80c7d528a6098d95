//! Byte layouts of a session's catalog file and of the store's listing
//! cache (`list.cache`), and the codec of the head slot both hold: pure
//! functions, no I/O, little-endian. DESIGN.md ("Catalog and listing
//! cache") has the diagrams.
//!
//! ```text
//! catalog (1024 B, 0600)
//!    0 head slot (128 B): magic "SSCP", crc u32 (of 8..88), dirty u8, pad[3],
//!      writer u32, next_seq u64, bytes u64, updated_ms u64, first_seq u64,
//!      head_hash [32], payload_bytes u64
//!  128 title slot (384 B): magic "SSCT", crc u32 (of 8..12+len), len u32, utf8 bytes
//!  512 identity (512 B): magic "SSCI", crc u32, len u32, JSON {created_ms, forked_from, compacted_from}
//!
//! list.cache, 640 B a slot, 0600
//!    0 magic "SSL2"   4 crc u32 (of 8..640)   8 session id [16]
//!   24 head slot (the catalog's 88 B head encoding)
//!  112 created_ms u64   120 has_forked u8   121 has_compacted u8   122 reserved [6]
//!  128 forked_from id [16] + hash [32]      176 compacted_from id [16] + hash [32]
//!  224 title len u16    226 title (UTF-8, at most 414 B)
//! ```
//!
//! Version 1 of both (magics "SSCH" and "SSLC") has a head slot of 80 bytes
//! without `payload_bytes` (its CRC covers 8..80), and in the cache
//! everything after it 8 bytes earlier. Both are still read; a version 1
//! head slot has no payload count, so the store takes that from the log.

use crate::chain::EntryHash;

/// Catalog file length.
pub(crate) const CATALOG_LEN: usize = 1024;

/// The head slot's magic (version 2, with `payload_bytes`).
const HEAD_MAGIC: [u8; 4] = *b"SSCP";
/// The version 1 head slot's magic: no `payload_bytes`.
const HEAD_MAGIC_V1: [u8; 4] = *b"SSCH";
/// Where the head slot is in the catalog.
pub(crate) const HEAD_AT: u64 = 0;
/// The head slot's encoded length.
pub(crate) const HEAD_LEN: usize = HEAD_PAYLOAD_BYTES + 8;
/// The version 1 head slot's encoded length.
const HEAD_LEN_V1: usize = HEAD_PAYLOAD_BYTES;
const HEAD_DIRTY: usize = 8;
const HEAD_WRITER: usize = 12;
const HEAD_NEXT_SEQ: usize = 16;
const HEAD_BYTES: usize = HEAD_NEXT_SEQ + 8;
const HEAD_UPDATED: usize = HEAD_BYTES + 8;
const HEAD_FIRST_SEQ: usize = HEAD_UPDATED + 8;
const HEAD_HASH: usize = HEAD_FIRST_SEQ + 8;
const HEAD_PAYLOAD_BYTES: usize = HEAD_HASH + 32;

/// The title slot's magic.
pub(crate) const TITLE_MAGIC: [u8; 4] = *b"SSCT";
/// Where the title slot is in the catalog.
pub(crate) const TITLE_AT: u64 = 128;
/// The title slot's length.
pub(crate) const TITLE_SLOT_LEN: usize = 384;
/// The longest title the slot holds, in bytes.
pub(crate) const TITLE_MAX: usize = TITLE_SLOT_LEN - FRAME_HEADER_LEN;

/// The identity slot's magic.
pub(crate) const IDENT_MAGIC: [u8; 4] = *b"SSCI";
/// Where the identity slot is in the catalog.
pub(crate) const IDENT_AT: u64 = 512;
/// The identity slot's length.
pub(crate) const IDENT_SLOT_LEN: usize = 512;
/// The longest identity JSON the slot holds, in bytes.
pub(crate) const IDENT_MAX: usize = IDENT_SLOT_LEN - FRAME_HEADER_LEN;

/// A framed slot's header: magic, CRC, length.
const FRAME_HEADER_LEN: usize = 12;

const _: () = assert!(HEAD_LEN <= TITLE_AT as usize);
const _: () = assert!(TITLE_AT as usize + TITLE_SLOT_LEN == IDENT_AT as usize);
const _: () = assert!(IDENT_AT as usize + IDENT_SLOT_LEN == CATALOG_LEN);

/// The listing cache slot's magic (version 2).
pub(crate) const CACHE_MAGIC: [u8; 4] = *b"SSL2";
/// The version 1 slot's magic.
const CACHE_MAGIC_V1: [u8; 4] = *b"SSLC";
/// One listing cache slot's length.
pub(crate) const CACHE_SLOT_LEN: usize = 640;
/// Where, in a cache slot, its fields are: version 2's, or version 1's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheLayout {
    /// The session id (16 bytes).
    pub(crate) id: usize,
    /// The head slot's encoding.
    pub(crate) head: usize,
    /// `created_ms`.
    pub(crate) created: usize,
    /// The flags: forked at this byte, compacted at the next.
    pub(crate) flags: usize,
    /// The fork origin: id and hash (48 bytes).
    pub(crate) forked: usize,
    /// The compaction origin: id and hash (48 bytes).
    pub(crate) compacted: usize,
    /// The title's length (u16); the title follows.
    pub(crate) title_len: usize,
}

impl CacheLayout {
    /// Where the title starts.
    pub(crate) const fn title(&self) -> usize {
        self.title_len + 2
    }

    /// The longest title this layout holds.
    pub(crate) const fn title_max(&self) -> usize {
        CACHE_SLOT_LEN - self.title()
    }
}

/// The layout every slot is written in.
pub(crate) const CACHE_LAYOUT: CacheLayout = cache_layout(HEAD_LEN);

const fn cache_layout(head_len: usize) -> CacheLayout {
    let created = 24 + head_len;
    CacheLayout {
        id: 8,
        head: 24,
        created,
        flags: created + 8,
        forked: created + 16,
        compacted: created + 64,
        title_len: created + 112,
    }
}

/// Sets a cache slot's CRC (of its bytes from 8 on).
pub(crate) fn seal_cache_slot(b: &mut [u8; CACHE_SLOT_LEN]) {
    let crc = crc32fast::hash(&b[8..]);
    b[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Whether a cache slot's CRC holds.
pub(crate) fn cache_slot_crc_ok(b: &[u8]) -> bool {
    b.len() >= CACHE_SLOT_LEN && b[4..8] == crc32fast::hash(&b[8..CACHE_SLOT_LEN]).to_le_bytes()
}

/// A cache slot's layout, by its magic; `None` for an unknown magic.
pub(crate) fn cache_layout_of(magic: &[u8]) -> Option<CacheLayout> {
    match magic {
        m if m == CACHE_MAGIC => Some(CACHE_LAYOUT),
        m if m == CACHE_MAGIC_V1 => Some(cache_layout(HEAD_LEN_V1)),
        _ => None,
    }
}

/// The mutable part of a catalog: where the log stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HeadSlot {
    pub(crate) dirty: bool,
    /// A token each writer's open draws at random (0 in files written
    /// before it existed): a store that let a session go with the slot dirty
    /// can tell its own slot from one another writer has written since.
    pub(crate) writer: u32,
    pub(crate) next_seq: u64,
    pub(crate) bytes: u64,
    pub(crate) updated_ms: u64,
    pub(crate) first_seq: u64,
    pub(crate) head: EntryHash,
    /// The bytes of payload-area items the records before `next_seq` refer
    /// to, but for a `SessionStart` that compacts in place after the first
    /// record (its history repeats what the session holds); `None` in a
    /// version 1 slot.
    pub(crate) payload_bytes: Option<u64>,
}

impl HeadSlot {
    /// The slot's bytes: version 2, or version 1 (its 80 bytes, then zeros)
    /// for a slot with no payload count, which no reader then believes.
    pub(crate) fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        let (magic, len) = match self.payload_bytes {
            Some(_) => (HEAD_MAGIC, HEAD_LEN),
            None => (HEAD_MAGIC_V1, HEAD_LEN_V1),
        };
        b[..4].copy_from_slice(&magic);
        b[HEAD_DIRTY] = u8::from(self.dirty);
        b[HEAD_WRITER..HEAD_WRITER + 4].copy_from_slice(&self.writer.to_le_bytes());
        for (at, n) in [
            (HEAD_NEXT_SEQ, self.next_seq),
            (HEAD_BYTES, self.bytes),
            (HEAD_UPDATED, self.updated_ms),
            (HEAD_FIRST_SEQ, self.first_seq),
        ] {
            b[at..at + 8].copy_from_slice(&n.to_le_bytes());
        }
        if let Some(n) = self.payload_bytes {
            b[HEAD_PAYLOAD_BYTES..HEAD_LEN].copy_from_slice(&n.to_le_bytes());
        }
        b[HEAD_HASH..HEAD_HASH + 32].copy_from_slice(self.head.as_bytes());
        let crc = crc32fast::hash(&b[8..len]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The slot in `b` (version 2 or 1), if it reads: magic and CRC.
    pub(crate) fn decode(b: &[u8]) -> Option<HeadSlot> {
        let len = match b.get(..4)? {
            m if m == HEAD_MAGIC => HEAD_LEN,
            m if m == HEAD_MAGIC_V1 => HEAD_LEN_V1,
            _ => return None,
        };
        let b = b.get(..len)?;
        if crc32fast::hash(&b[8..]) != u32::from_le_bytes(b[4..8].try_into().ok()?) {
            return None;
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(HeadSlot {
            dirty: b[HEAD_DIRTY] != 0,
            writer: u32::from_le_bytes(b[HEAD_WRITER..HEAD_WRITER + 4].try_into().ok()?),
            next_seq: u(HEAD_NEXT_SEQ),
            bytes: u(HEAD_BYTES),
            updated_ms: u(HEAD_UPDATED),
            first_seq: u(HEAD_FIRST_SEQ),
            head: EntryHash(b[HEAD_HASH..HEAD_HASH + 32].try_into().ok()?),
            payload_bytes: (len == HEAD_LEN).then(|| u(HEAD_PAYLOAD_BYTES)),
        })
    }
}

/// A framed slot: magic, CRC32 of the length and body, length, body.
pub(crate) fn framed(magic: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The body of a framed slot in `b`, if it reads: magic, length at most
/// `max`, CRC.
pub(crate) fn unframe(magic: [u8; 4], b: &[u8], max: usize) -> Option<&[u8]> {
    if b.len() < FRAME_HEADER_LEN || b[..4] != magic {
        return None;
    }
    let len = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
    if len > max || FRAME_HEADER_LEN + len > b.len() {
        return None;
    }
    let crc = u32::from_le_bytes(b[4..8].try_into().ok()?);
    let body = FRAME_HEADER_LEN..FRAME_HEADER_LEN + len;
    (crc32fast::hash(&b[8..body.end]) == crc).then(|| &b[body])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Catalog and cache bytes come from disk: any of them, with any of
        /// the magics, decode to a slot or to nothing, never a panic.
        #[test]
        fn arbitrary_slot_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..700),
            magic in 0usize..4,
        ) {
            let mut bytes = bytes;
            let magics = [HEAD_MAGIC, HEAD_MAGIC_V1, CACHE_MAGIC, CACHE_MAGIC_V1];
            if bytes.len() >= 4 {
                bytes[..4].copy_from_slice(&magics[magic]);
            }
            let _ = HeadSlot::decode(&bytes);
            let _ = cache_layout_of(&bytes);
            let _ = cache_slot_crc_ok(&bytes);
            let _ = unframe(TITLE_MAGIC, &bytes, TITLE_MAX);
            let _ = unframe(IDENT_MAGIC, &bytes, IDENT_MAX);
        }
    }

    fn slot() -> HeadSlot {
        HeadSlot {
            dirty: true,
            writer: 7,
            next_seq: 12,
            bytes: 3400,
            updated_ms: 1_700_000_000_000,
            first_seq: 2,
            head: EntryHash([9; 32]),
            payload_bytes: Some(1 << 20),
        }
    }

    #[test]
    fn a_head_slot_reads_back_and_a_flipped_bit_fails_it() {
        let b = slot().encode();
        assert_eq!(HeadSlot::decode(&b), Some(slot()));
        for bit in 0..HEAD_LEN * 8 {
            let mut bad = b;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(HeadSlot::decode(&bad), None, "bit {bit}");
        }
    }

    #[test]
    fn a_head_slot_without_a_count_is_written_and_read_as_version_1() {
        let want = HeadSlot {
            payload_bytes: None,
            ..slot()
        };
        let b = want.encode();
        assert_eq!(b[..4], HEAD_MAGIC_V1);
        assert_eq!(b[HEAD_LEN_V1..], [0; 8]);
        assert_eq!(HeadSlot::decode(&b[..HEAD_LEN_V1]), Some(want));
        assert_eq!(HeadSlot::decode(&b), Some(want));
    }

    #[test]
    fn the_cache_layouts_match_their_diagrams() {
        let v2 = CACHE_LAYOUT;
        assert_eq!(
            (v2.created, v2.flags, v2.forked, v2.compacted, v2.title_len),
            (112, 120, 128, 176, 224)
        );
        assert_eq!(v2.title_max(), 414);
        let v1 = cache_layout_of(&CACHE_MAGIC_V1).unwrap();
        assert_eq!(
            (v1.created, v1.flags, v1.forked, v1.compacted, v1.title_len),
            (104, 112, 120, 168, 216)
        );
        assert_eq!(v1.title_max(), 422);
        assert!(cache_layout_of(b"SSLX").is_none());
    }

    #[test]
    fn a_frame_reads_back_within_its_bounds_only() {
        let f = framed(TITLE_MAGIC, b"a title");
        assert_eq!(unframe(TITLE_MAGIC, &f, TITLE_MAX), Some(&b"a title"[..]));
        assert_eq!(unframe(TITLE_MAGIC, &f, 3), None);
        assert_eq!(unframe(IDENT_MAGIC, &f, TITLE_MAX), None);
        assert_eq!(unframe(TITLE_MAGIC, &f[..f.len() - 1], TITLE_MAX), None);
        let mut bad = f.clone();
        bad[13] ^= 1;
        assert_eq!(unframe(TITLE_MAGIC, &bad, TITLE_MAX), None);
    }
}
