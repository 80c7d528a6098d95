//! Byte layout of the store's journal files, which make `Sync` commits of
//! many sessions durable with one shared `fdatasync` (see `log::journal`):
//! pure functions, no I/O, little-endian. DESIGN.md ("The shared journal")
//! has the diagram.
//!
//! ```text
//! journal file (<token>-<k>.jnl, 0600), zero-filled as it grows
//!    0 header (64 B): magic "SSJN", crc u32 (of 8..64), version u32,
//!      clean u8, pad[3], generation u64, boot id [16], token [16], reserved [8]
//!   64 frames, back to back, each 16-byte aligned:
//!      magic "SSJF", crc u32 (of 8..80 and the records), records_len u32,
//!      pad[4], generation u64, session id [16], start_seq u64,
//!      start_hash [32], then records_len bytes of whole records
//! ```
//!
//! A frame is valid when its magic, generation (the header's) and CRC are;
//! the frames of a file are read up to the first that is not.

use super::{crc, hash_at, u32_at, u64_at, RECORD_ALIGN};
use crate::chain::EntryHash;

/// The journal file header's magic.
pub(crate) const JOURNAL_MAGIC: [u8; 4] = *b"SSJN";
/// A frame's magic.
pub(crate) const FRAME_MAGIC: [u8; 4] = *b"SSJF";
/// The journal layout's version: 2 from segment format 9 on, whose records
/// its frames hold (version 1's held format 8's, and is never replayed).
pub(crate) const JOURNAL_VERSION: u32 = 2;
/// Header length; the first frame starts here.
pub(crate) const JOURNAL_HEADER_LEN: usize = 64;
/// A frame's header length; its records follow.
pub(crate) const FRAME_HEADER_LEN: usize = 80;

const H_CRC: usize = 4;
const H_VERSION: usize = 8;
const H_CLEAN: usize = 12;
const H_GENERATION: usize = 16;
const H_BOOT: usize = 24;
const H_TOKEN: usize = 40;

const F_CRC: usize = 4;
const F_LEN: usize = 8;
const F_GENERATION: usize = 16;
const F_SESSION: usize = 24;
const F_START_SEQ: usize = 40;
const F_START_HASH: usize = 48;

const _: () = assert!(H_TOKEN + 16 + 8 == JOURNAL_HEADER_LEN);
const _: () = assert!(F_START_HASH + 32 == FRAME_HEADER_LEN);
const _: () = assert!(FRAME_HEADER_LEN.is_multiple_of(RECORD_ALIGN));

/// A journal file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JournalHeader {
    /// Every frame it holds was checkpointed: nothing to recover.
    pub(crate) clean: bool,
    /// Drawn afresh (random) each time the file is taken up; frames carry it.
    pub(crate) generation: u64,
    /// The kernel's boot id when the file was taken up (zeros if unknown).
    pub(crate) boot: [u8; 16],
    /// The owning store handle's token, as in the file's name.
    pub(crate) token: [u8; 16],
}

impl JournalHeader {
    /// The header's bytes.
    pub(crate) fn encode(&self) -> [u8; JOURNAL_HEADER_LEN] {
        let mut b = [0u8; JOURNAL_HEADER_LEN];
        b[..4].copy_from_slice(&JOURNAL_MAGIC);
        b[H_VERSION..H_VERSION + 4].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
        b[H_CLEAN] = u8::from(self.clean);
        b[H_GENERATION..H_GENERATION + 8].copy_from_slice(&self.generation.to_le_bytes());
        b[H_BOOT..H_BOOT + 16].copy_from_slice(&self.boot);
        b[H_TOKEN..H_TOKEN + 16].copy_from_slice(&self.token);
        let c = crc(&b[8..]);
        b[H_CRC..H_CRC + 4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// The version of a whole header in `b` (magic and CRC) of another
    /// version than this layout's: a journal whose frames hold records of
    /// another segment format, never replayed and never removed.
    pub(crate) fn other_version(b: &[u8]) -> Option<u32> {
        let b = b.get(..JOURNAL_HEADER_LEN)?;
        let version = u32_at(b, H_VERSION);
        let whole = b[..4] == JOURNAL_MAGIC && u32_at(b, H_CRC) == crc(&b[8..]);
        (whole && version != JOURNAL_VERSION).then_some(version)
    }

    /// The header in `b`, if it is one (magic, CRC and version).
    pub(crate) fn decode(b: &[u8]) -> Option<JournalHeader> {
        let b = b.get(..JOURNAL_HEADER_LEN)?;
        let valid = b[..4] == JOURNAL_MAGIC
            && u32_at(b, H_CRC) == crc(&b[8..])
            && u32_at(b, H_VERSION) == JOURNAL_VERSION;
        valid.then(|| JournalHeader {
            clean: b[H_CLEAN] != 0,
            generation: u64_at(b, H_GENERATION),
            boot: b[H_BOOT..H_BOOT + 16].try_into().expect("16 bytes"),
            token: b[H_TOKEN..H_TOKEN + 16].try_into().expect("16 bytes"),
        })
    }
}

/// Where a frame's records continue a session's log: the seq of its first
/// record and the hash of the record before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameStart {
    /// The session the records belong to.
    pub(crate) session: [u8; 16],
    /// Seq of the frame's first record.
    pub(crate) seq: u64,
    /// Hash of the record before it (the log's start hash for seq 0).
    pub(crate) hash: EntryHash,
}

/// The frame's bytes: header, then `records` (whole records, so a multiple
/// of [`RECORD_ALIGN`] long).
pub(crate) fn encode_frame(generation: u64, start: &FrameStart, records: &[u8]) -> Vec<u8> {
    debug_assert!(records.len().is_multiple_of(RECORD_ALIGN));
    let mut b = Vec::with_capacity(FRAME_HEADER_LEN + records.len());
    b.extend_from_slice(&FRAME_MAGIC);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(records.len() as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&generation.to_le_bytes());
    b.extend_from_slice(&start.session);
    b.extend_from_slice(&start.seq.to_le_bytes());
    b.extend_from_slice(start.hash.as_bytes());
    b.extend_from_slice(records);
    let c = crc(&b[8..]);
    b[F_CRC..F_CRC + 4].copy_from_slice(&c.to_le_bytes());
    b
}

/// The valid frames of generation `generation` at the start of `b` (the
/// bytes after a journal header), in order: each with where it starts and
/// its records. Reading stops at the first frame that is not valid.
pub(crate) fn frames(b: &[u8], generation: u64) -> Vec<(FrameStart, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(h) = b.get(at..at + FRAME_HEADER_LEN) {
        if h[..4] != FRAME_MAGIC || u64_at(h, F_GENERATION) != generation {
            break;
        }
        let len = u32_at(h, F_LEN) as usize;
        let end = at + FRAME_HEADER_LEN + len;
        let Some(whole) = b.get(at..end) else { break };
        if !len.is_multiple_of(RECORD_ALIGN) || u32_at(h, F_CRC) != crc(&whole[8..]) {
            break;
        }
        let start = FrameStart {
            session: h[F_SESSION..F_SESSION + 16].try_into().expect("16 bytes"),
            seq: u64_at(h, F_START_SEQ),
            hash: hash_at(h, F_START_HASH),
        };
        out.push((start, &whole[FRAME_HEADER_LEN..]));
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(n: u8) -> FrameStart {
        FrameStart {
            session: [n; 16],
            seq: u64::from(n) * 10,
            hash: EntryHash([n; 32]),
        }
    }

    #[test]
    fn header_round_trips_and_refuses_damage() {
        let h = JournalHeader {
            clean: true,
            generation: 7,
            boot: [3; 16],
            token: [9; 16],
        };
        let mut b = h.encode();
        assert_eq!(JournalHeader::decode(&b), Some(h));
        b[H_GENERATION] ^= 1;
        assert_eq!(JournalHeader::decode(&b), None);
        assert_eq!(JournalHeader::decode(&b[..10]), None);
    }

    #[test]
    fn frames_stop_at_the_first_torn_or_stale_one() {
        let mut b = Vec::new();
        b.extend(encode_frame(4, &start(1), &[1; 32]));
        b.extend(encode_frame(4, &start(2), &[2; 16]));
        let third = b.len();
        b.extend(encode_frame(3, &start(3), &[3; 16]));
        let got = frames(&b, 4);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (start(1), &[1u8; 32][..]));
        assert_eq!(got[1], (start(2), &[2u8; 16][..]));
        // A torn frame of the right generation ends the frames too.
        let mut torn = b[..third].to_vec();
        torn.extend(encode_frame(4, &start(3), &[3; 16]));
        let last = torn.len() - 1;
        torn[last] ^= 0xff;
        assert_eq!(frames(&torn, 4).len(), 2);
        // Cut short, or a length past the end: no panic, no frame.
        assert_eq!(frames(&b[..third - 1], 4).len(), 1);
        assert!(frames(&[0u8; 200], 4).is_empty());
    }
}
