//! Byte layouts of segment files and the record codec: pure functions, no
//! I/O. Everything is little-endian.
//!
//! The diagrams of the segment header, the durable mark slot, the record,
//! the index and the footer, and the version history, are in `DESIGN.md`
//! ("Byte layouts", "Format version history"): one place for them. The
//! offsets below are derived from one another and checked against those
//! diagrams by the constant assertions and the unit tests.
//!
//! Versions: a version 1 segment differs only in its mark slot, which has no
//! `session_start` field and keeps its CRC32 (of bytes 0..56) at 56, with 60..64
//! reserved. Readers take both; a writer continues a version 1 segment with
//! version 1 marks, and every segment it creates is of the current version.
//! Version 3 has version 2's layout; it says that records may hold schema 2
//! entries (the Responses and Messages items), so that a reader built before
//! schema 2 refuses the segment instead of taking its records for damage.
//! Versions 4, 5 and 6 do the same for schema 3 (`items_removed`), schema 4
//! (`forked_from`, the first entry of a fork by reference) and schema 5
//! (`LoggedItem::External`, an item kept in the store's payload area).
//! Version 7 gives every record of a batch but its last another magic
//! ([`RECORD_MAGIC_BATCH`]), so that recovery can cut a batch a crash left
//! incomplete; a reader built before it would take that magic for damage.
//! Version 8 has version 7's layout; its records may hold schema 6 items
//! (`LoggedItem::Extended`: an item with what its provider gave beyond the
//! typed fields), which a reader built before it would take for damage.

use crate::chain::EntryHash;
use crate::error::CorruptKind;

pub(crate) mod catalog;
pub(crate) mod journal;

/// Current format version: every new segment is written with it.
pub const FORMAT_VERSION: u32 = 9;
/// The oldest version still read.
pub const OLDEST_VERSION: u32 = 1;

/// Segment header magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SSLOGSEG";
/// Footer magic.
pub const FOOTER_MAGIC: [u8; 8] = *b"SSLOGEND";
/// Record magic: a record that ends its batch (every record of a segment
/// of format version 6 or older).
pub const RECORD_MAGIC: [u8; 4] = *b"SREC";
/// The magic of a record that more records of the same batch follow, in the
/// same segment (format version 7). It differs from [`RECORD_MAGIC`] in three
/// bits, one per byte, so no single flipped bit turns one into the other.
/// Neither the CRC nor the chain covers the magic: the chain of a batch is
/// the chain of its entries, whatever the batch, and a flipped magic bit
/// fails the record as any unknown magic does.
pub const RECORD_MAGIC_BATCH: [u8; 4] = *b"Srec";

/// Length of the segment header; records start here.
pub const SEGMENT_HEADER_LEN: usize = 256;
const HDR_VERSION: usize = 8;
const HDR_FLAGS: usize = HDR_VERSION + 4;
const HDR_LOG_ID: usize = HDR_FLAGS + 4;
const HDR_FIRST_SEQ: usize = HDR_LOG_ID + 16;
const HDR_SEGMENT_LEN: usize = HDR_FIRST_SEQ + 8;
const HDR_START_HASH: usize = HDR_SEGMENT_LEN + 8;
const HDR_CRC: usize = HDR_START_HASH + 32;
/// Offset of the first durable-mark slot.
pub const MARK_SLOT_0: usize = 96;
/// Length of one mark slot.
pub const MARK_SLOT_LEN: usize = 64;
const MARK_SESSION_START: usize = 56;
const MARK_CRC_V1: usize = 56;
const MARK_CRC: usize = 60;

/// Length of a record header; the payload starts here.
pub const RECORD_HEADER_LEN: usize = 64;
const REC_CRC: usize = 4;
const REC_PREV_HASH: usize = 8;
/// Start of the bytes the chain link covers.
pub const REC_LINKED_START: usize = 40;
const REC_PAYLOAD_LEN: usize = REC_LINKED_START;
const REC_KIND: usize = REC_PAYLOAD_LEN + 4;
const REC_FLAGS: usize = REC_KIND + 1;
const REC_SEQ: usize = 48;
const REC_TS: usize = REC_SEQ + 8;
/// Records start at, and are padded to, multiples of this.
pub const RECORD_ALIGN: usize = 16;
/// The largest payload a record may carry.
pub const MAX_PAYLOAD_LEN: usize = (u32::MAX as usize) & !(RECORD_ALIGN - 1);

/// Length of the footer.
pub const FOOTER_LEN: usize = 128;
/// Length of one index entry.
pub const INDEX_ENTRY_LEN: usize = 16;
const FTR_COUNT: usize = 8;
const FTR_FIRST_SEQ: usize = 16;
const FTR_LAST_SEQ: usize = 24;
const FTR_LAST_HASH: usize = 32;
const FTR_LAST_START: usize = 64;
const FTR_DATA_END: usize = 72;
const FTR_INDEX_OFFSET: usize = 80;
const FTR_INDEX_COUNT: usize = 88;
const FTR_INDEX_CRC: usize = 96;
const FTR_CRC: usize = 124;

const _: () = assert!(HDR_CRC == 80 && MARK_SLOT_0 >= HDR_CRC + 4);
const _: () = assert!(MARK_SLOT_0 + 2 * MARK_SLOT_LEN <= SEGMENT_HEADER_LEN);
const _: () = assert!(
    SEGMENT_HEADER_LEN.is_multiple_of(RECORD_ALIGN)
        && RECORD_HEADER_LEN.is_multiple_of(RECORD_ALIGN)
);
const _: () = assert!(REC_FLAGS + 3 == REC_SEQ && REC_TS + 8 == RECORD_HEADER_LEN);

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn hash_at(b: &[u8], at: usize) -> EntryHash {
    EntryHash(b[at..at + 32].try_into().expect("32 bytes"))
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Rounds `n` up to a multiple of [`RECORD_ALIGN`].
pub fn align_record(n: usize) -> usize {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// Total bytes a record with `payload_len` bytes of payload occupies.
pub fn record_len(payload_len: usize) -> usize {
    align_record(RECORD_HEADER_LEN + payload_len)
}

/// The fixed part of a segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version ([`FORMAT_VERSION`] for every segment written now).
    pub version: u32,
    /// The log this segment belongs to.
    pub log_id: [u8; 16],
    /// Seq of the segment's first record.
    pub first_seq: u64,
    /// The file's allocated length.
    pub segment_len: u64,
    /// Hash of the record before `first_seq`.
    pub start_hash: EntryHash,
}

impl SegmentHeader {
    /// Whether this segment's marks name the last `SessionStart` below them
    /// (version 2 on; version 1 marks have no such field).
    pub fn marks_session_start(&self) -> bool {
        self.version >= 2
    }

    /// The 256 header bytes, with both mark slots empty.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[..8].copy_from_slice(&SEGMENT_MAGIC);
        b[HDR_VERSION..HDR_VERSION + 4].copy_from_slice(&self.version.to_le_bytes());
        b[HDR_LOG_ID..HDR_LOG_ID + 16].copy_from_slice(&self.log_id);
        b[HDR_FIRST_SEQ..HDR_FIRST_SEQ + 8].copy_from_slice(&self.first_seq.to_le_bytes());
        b[HDR_SEGMENT_LEN..HDR_SEGMENT_LEN + 8].copy_from_slice(&self.segment_len.to_le_bytes());
        b[HDR_START_HASH..HDR_START_HASH + 32].copy_from_slice(self.start_hash.as_bytes());
        let c = crc(&b[..HDR_CRC]);
        b[HDR_CRC..HDR_CRC + 4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses and checks a header. `(offset, kind)` on failure.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, (u64, CorruptKind)> {
        if b.len() < SEGMENT_HEADER_LEN {
            return Err((0, CorruptKind::Truncated));
        }
        if b[..8] != SEGMENT_MAGIC {
            return Err((0, CorruptKind::Magic));
        }
        let stored = u32_at(b, HDR_CRC);
        let actual = crc(&b[..HDR_CRC]);
        if stored != actual {
            return Err((
                HDR_CRC as u64,
                CorruptKind::Crc {
                    expected: stored,
                    actual,
                },
            ));
        }
        let version = u32_at(b, HDR_VERSION);
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err((HDR_VERSION as u64, CorruptKind::Version { found: version }));
        }
        Ok(SegmentHeader {
            version,
            log_id: b[HDR_LOG_ID..HDR_LOG_ID + 16].try_into().expect("16 bytes"),
            first_seq: u64_at(b, HDR_FIRST_SEQ),
            segment_len: u64_at(b, HDR_SEGMENT_LEN),
            start_hash: hash_at(b, HDR_START_HASH),
        })
    }
}

// Positions in a segment. Three types describe one, with one vocabulary:
// `end` (the offset just past the last record), `next_seq` (the seq of the
// record that would start at `end`), `hash` (of the record just below `end`,
// the segment's start hash if none) and `session_start` (the offset of the
// last `SessionStart` record of the segment below `end`). [`Point`] is the
// position itself; [`Mark`] is a point made durable, as a header slot stores
// it; the log's `Tip` is the writer's point at the end of the active
// segment, plus the seq of the log's last `SessionStart`.

/// A position in a segment, on a record boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// Offset just past the last record.
    pub end: u64,
    /// Seq of the record that would start at `end`.
    pub next_seq: u64,
    /// Hash of the record just below `end` (the start hash if none).
    pub hash: EntryHash,
    /// Offset of the last `SessionStart` record of this segment below `end`.
    pub session_start: Option<u64>,
}

/// A durable mark: a [`Point`] below which everything was synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Increases with every write; the valid slot with the highest wins.
    pub generation: u64,
    /// Offset in the segment below which records are durable.
    pub end: u64,
    /// Seq of the record at `end`.
    pub next_seq: u64,
    /// Hash of the record just below `end` (the start hash if none).
    pub hash: EntryHash,
    /// Offset of the last `SessionStart` record of this segment below
    /// `end`, if any. Always `None` in a version 1 mark, and in a
    /// version 2 mark whose record lies beyond what the field can hold.
    pub session_start: Option<u64>,
}

impl Mark {
    /// The mark of generation `generation` at `at`.
    pub fn at(generation: u64, at: Point) -> Mark {
        Mark {
            generation,
            end: at.end,
            next_seq: at.next_seq,
            hash: at.hash,
            session_start: at.session_start,
        }
    }

    /// The slot bytes, laid out for a segment of format `version`.
    pub fn encode(&self, version: u32) -> [u8; MARK_SLOT_LEN] {
        let mut b = [0u8; MARK_SLOT_LEN];
        b[..8].copy_from_slice(&self.generation.to_le_bytes());
        b[8..16].copy_from_slice(&self.end.to_le_bytes());
        b[16..24].copy_from_slice(&self.next_seq.to_le_bytes());
        b[24..56].copy_from_slice(self.hash.as_bytes());
        let crc_at = if version == 1 {
            MARK_CRC_V1
        } else {
            let slot = self.session_start.and_then(session_start_slot).unwrap_or(0);
            b[MARK_SESSION_START..MARK_SESSION_START + 4].copy_from_slice(&slot.to_le_bytes());
            MARK_CRC
        };
        let c = crc(&b[..crc_at]);
        b[crc_at..crc_at + 4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// The slot's offset in the header for this generation.
    pub fn slot_offset(generation: u64) -> usize {
        MARK_SLOT_0 + (generation % 2) as usize * MARK_SLOT_LEN
    }

    /// The newest valid mark in a header (of the version the header names),
    /// if any.
    pub fn newest(header: &[u8]) -> Option<Mark> {
        let version = header_version(header)?;
        (0..2)
            .filter_map(|i| {
                let at = MARK_SLOT_0 + i * MARK_SLOT_LEN;
                let b = header.get(at..at + MARK_SLOT_LEN)?;
                let crc_at = if version == 1 { MARK_CRC_V1 } else { MARK_CRC };
                let valid = u32_at(b, crc_at) == crc(&b[..crc_at]) && b.iter().any(|&x| x != 0);
                valid.then(|| Mark {
                    generation: u64_at(b, 0),
                    end: u64_at(b, 8),
                    next_seq: u64_at(b, 16),
                    hash: hash_at(b, 24),
                    session_start: match u32_at(b, MARK_SESSION_START) {
                        0 => None,
                        _ if version == 1 => None,
                        slot => Some(u64::from(slot) * RECORD_ALIGN as u64),
                    },
                })
            })
            .max_by_key(|m| m.generation)
    }
}

/// A record offset as the mark's `session_start` field holds it: in units of
/// [`RECORD_ALIGN`], never 0 (that is the header). `None` if it does not fit.
fn session_start_slot(offset: u64) -> Option<u32> {
    if offset < SEGMENT_HEADER_LEN as u64 || !offset.is_multiple_of(RECORD_ALIGN as u64) {
        return None;
    }
    u32::try_from(offset / RECORD_ALIGN as u64).ok()
}

/// The fields of a record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Hash of the previous record.
    pub prev_hash: EntryHash,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Entry kind code.
    pub kind: u8,
    /// Sequence number.
    pub seq: u64,
    /// Timestamp, ms.
    pub ts: u64,
    /// More records of the same batch follow ([`RECORD_MAGIC_BATCH`]).
    pub continues: bool,
}

impl RecordHeader {
    /// Writes the header into `out[..64]`, CRC left zero (see [`seal_record`]).
    pub fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(match self.continues {
            true => &RECORD_MAGIC_BATCH,
            false => &RECORD_MAGIC,
        });
        out[REC_CRC..REC_CRC + 4].fill(0);
        out[REC_PREV_HASH..REC_PREV_HASH + 32].copy_from_slice(self.prev_hash.as_bytes());
        out[REC_PAYLOAD_LEN..REC_PAYLOAD_LEN + 4].copy_from_slice(&self.payload_len.to_le_bytes());
        out[REC_KIND] = self.kind;
        out[REC_FLAGS..REC_SEQ].fill(0);
        out[REC_SEQ..REC_SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        out[REC_TS..REC_TS + 8].copy_from_slice(&self.ts.to_le_bytes());
    }

    /// Reads the header fields from `b` without checking the CRC.
    pub fn read(b: &[u8]) -> Result<RecordHeader, CorruptKind> {
        if b.len() < RECORD_HEADER_LEN {
            return Err(CorruptKind::Truncated);
        }
        let continues = match &b[..4] {
            m if m == RECORD_MAGIC => false,
            m if m == RECORD_MAGIC_BATCH => true,
            _ => return Err(CorruptKind::Magic),
        };
        let payload_len = u32_at(b, REC_PAYLOAD_LEN);
        if payload_len == 0
            || payload_len as usize > MAX_PAYLOAD_LEN
            || b[REC_FLAGS..REC_SEQ] != [0, 0, 0]
        {
            return Err(CorruptKind::Truncated);
        }
        Ok(RecordHeader {
            prev_hash: hash_at(b, REC_PREV_HASH),
            payload_len,
            kind: b[REC_KIND],
            seq: u64_at(b, REC_SEQ),
            ts: u64_at(b, REC_TS),
            continues,
        })
    }

    /// Total length of this record, padding included.
    pub fn record_len(&self) -> usize {
        record_len(self.payload_len as usize)
    }
}

/// Offset of the first record in every segment, just past the header.
pub const FIRST_RECORD_OFFSET: u64 = SEGMENT_HEADER_LEN as u64;

// The record codec. Every writer of records frames them with
// [`begin_record`], [`end_record`] and [`write_record_header`]; every walker
// reads them with [`next_record`] or [`read_record`]. A change of the record
// layout touches these and DESIGN.md only.

/// Why a payload cannot be framed as a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadLenError {
    /// The payload's length in bytes (0, or over [`MAX_PAYLOAD_LEN`]).
    pub len: usize,
}

/// Starts a record at the end of `buf`, which holds whole records only (its
/// length is a multiple of [`RECORD_ALIGN`]): appends a blank header, after
/// which the caller appends the payload. Returns the record's start.
pub fn begin_record(buf: &mut rkyv::util::AlignedVec) -> usize {
    debug_assert!(
        buf.len().is_multiple_of(RECORD_ALIGN),
        "records start aligned"
    );
    let start = buf.len();
    buf.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
    start
}

/// Ends the record begun at `start`: checks the payload's length and pads
/// the record with zeros to a multiple of [`RECORD_ALIGN`]. Returns the
/// payload's length.
pub fn end_record(buf: &mut rkyv::util::AlignedVec, start: usize) -> Result<u32, PayloadLenError> {
    let len = buf.len() - start - RECORD_HEADER_LEN;
    if len == 0 || len > MAX_PAYLOAD_LEN {
        return Err(PayloadLenError { len });
    }
    buf.resize(start + record_len(len), 0);
    Ok(len as u32)
}

/// Fills in the header of a framed record (`rec` starts at the record and
/// holds at least its header and payload), computes its CRC, and returns its
/// chain hash.
pub fn write_record_header(rec: &mut [u8], header: &RecordHeader) -> EntryHash {
    header.write(rec);
    seal_record(&mut rec[..RECORD_HEADER_LEN + header.payload_len as usize])
}

/// Computes and stores the CRC of a fully written record (`rec` holds header and
/// payload, padding excluded) and returns its chain hash.
pub fn seal_record(rec: &mut [u8]) -> EntryHash {
    let c = crc(&rec[REC_PREV_HASH..]);
    rec[REC_CRC..REC_CRC + 4].copy_from_slice(&c.to_le_bytes());
    record_link(rec)
}

/// The CRC check of a record: `rec` holds header and payload, padding excluded.
pub fn check_record_crc(rec: &[u8]) -> Result<(), CorruptKind> {
    let stored = u32_at(rec, REC_CRC);
    let actual = crc(&rec[REC_PREV_HASH..]);
    if stored == actual {
        Ok(())
    } else {
        Err(CorruptKind::Crc {
            expected: stored,
            actual,
        })
    }
}

/// The chain hash of a record (header and payload, padding excluded).
pub fn record_link(rec: &[u8]) -> EntryHash {
    hash_at(rec, REC_PREV_HASH).link(&rec[REC_LINKED_START..])
}

/// The `prev_hash` field of the record starting at `b`, if there is room for it.
pub fn prev_hash_of(b: &[u8]) -> Option<EntryHash> {
    (b.len() >= REC_PREV_HASH + 32).then(|| hash_at(b, REC_PREV_HASH))
}

/// A whole record found in a segment's bytes, not yet CRC-checked.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Its header's fields.
    pub header: RecordHeader,
    /// Its header and payload, without the padding: what the CRC covers.
    pub body: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// The rkyv payload.
    pub fn payload(&self) -> &'a [u8] {
        &self.body[RECORD_HEADER_LEN..]
    }

    /// Total length, padding included: the next record starts this far on.
    pub fn len(&self) -> usize {
        self.header.record_len()
    }

    /// Always false: a record holds at least a header and one payload byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Checks the stored CRC.
    pub fn check_crc(&self) -> Result<(), CorruptKind> {
        check_record_crc(self.body)
    }

    /// This record's chain hash.
    pub fn link(&self) -> EntryHash {
        record_link(self.body)
    }
}

/// Reads the record that must start at `bytes[at..]`: a bad or incomplete
/// header, or a record that runs past the end of `bytes`, is an error.
pub fn read_record(bytes: &[u8], at: usize) -> Result<RecordRef<'_>, CorruptKind> {
    let rest = bytes.get(at..).ok_or(CorruptKind::Truncated)?;
    let header = RecordHeader::read(rest)?;
    if header.record_len() > rest.len() {
        return Err(CorruptKind::Truncated);
    }
    Ok(RecordRef {
        header,
        body: &rest[..RECORD_HEADER_LEN + header.payload_len as usize],
    })
}

/// The next record of a walk at `bytes[at..]`, or `None` where the records
/// end: at zeros (a segment's unused space is zero), or at the end of
/// `bytes`. Bytes that are neither zeros nor a whole record are an error.
pub fn next_record(bytes: &[u8], at: usize) -> Result<Option<RecordRef<'_>>, CorruptKind> {
    let rest = bytes.get(at..).unwrap_or_default();
    match rest.get(..RECORD_HEADER_LEN) {
        None if rest.iter().any(|&b| b != 0) => Err(CorruptKind::Truncated),
        None => Ok(None),
        Some(head) if head.iter().all(|&b| b == 0) => Ok(None),
        Some(_) => read_record(bytes, at).map(Some),
    }
}

/// A sealed segment's footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Records in the segment.
    pub record_count: u64,
    /// Seq of the first record (the header's `first_seq`).
    pub first_seq: u64,
    /// Hash of the last record (the start hash when empty).
    pub last_hash: EntryHash,
    /// Seq of the last `SessionStart` in the log up to the end of this segment.
    pub last_session_start: Option<u64>,
    /// Offset just past the last record.
    pub data_end: u64,
    /// Offset of the index.
    pub index_offset: u64,
    /// Index entries.
    pub index_count: u64,
    /// CRC32 of the index bytes.
    pub index_crc: u32,
}

impl Footer {
    /// The footer bytes.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[..8].copy_from_slice(&FOOTER_MAGIC);
        let last_seq = self
            .first_seq
            .wrapping_add(self.record_count)
            .wrapping_sub(1);
        for (at, v) in [
            (FTR_COUNT, self.record_count),
            (FTR_FIRST_SEQ, self.first_seq),
            (FTR_LAST_SEQ, last_seq),
            (FTR_LAST_START, self.last_session_start.unwrap_or(u64::MAX)),
            (FTR_DATA_END, self.data_end),
            (FTR_INDEX_OFFSET, self.index_offset),
            (FTR_INDEX_COUNT, self.index_count),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[FTR_LAST_HASH..FTR_LAST_HASH + 32].copy_from_slice(self.last_hash.as_bytes());
        b[FTR_INDEX_CRC..FTR_INDEX_CRC + 4].copy_from_slice(&self.index_crc.to_le_bytes());
        let c = crc(&b[..FTR_CRC]);
        b[FTR_CRC..FTR_CRC + 4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses the footer from the last [`FOOTER_LEN`] bytes. `None` when no
    /// footer is there (unsealed); `Err` when one is there but damaged.
    pub fn decode(b: &[u8]) -> Result<Option<Footer>, CorruptKind> {
        if b.len() != FOOTER_LEN {
            return Err(CorruptKind::Truncated);
        }
        if b[..8] != FOOTER_MAGIC {
            return Ok(None);
        }
        let stored = u32_at(b, FTR_CRC);
        let actual = crc(&b[..FTR_CRC]);
        if stored != actual {
            return Err(CorruptKind::Crc {
                expected: stored,
                actual,
            });
        }
        let f = Footer {
            record_count: u64_at(b, FTR_COUNT),
            first_seq: u64_at(b, FTR_FIRST_SEQ),
            last_hash: hash_at(b, FTR_LAST_HASH),
            last_session_start: Some(u64_at(b, FTR_LAST_START)).filter(|&s| s != u64::MAX),
            data_end: u64_at(b, FTR_DATA_END),
            index_offset: u64_at(b, FTR_INDEX_OFFSET),
            index_count: u64_at(b, FTR_INDEX_COUNT),
            index_crc: u32_at(b, FTR_INDEX_CRC),
        };
        if u64_at(b, FTR_LAST_SEQ) != f.first_seq.wrapping_add(f.record_count).wrapping_sub(1) {
            return Err(CorruptKind::Footer(
                "last_seq disagrees with first_seq and count".into(),
            ));
        }
        Ok(Some(f))
    }

    /// Seq of the last record, if any.
    pub fn last_seq(&self) -> Option<u64> {
        (self.record_count > 0).then(|| self.first_seq + self.record_count - 1)
    }
}

/// One sparse-index entry: the record with `seq` starts at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Sequence number.
    pub seq: u64,
    /// Offset in the segment.
    pub offset: u64,
}

/// Encodes index entries.
pub fn encode_index(entries: &[IndexEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * INDEX_ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&e.seq.to_le_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
    }
    out
}

/// Decodes index entries, checking their CRC.
pub fn decode_index(b: &[u8], expected_crc: u32) -> Result<Vec<IndexEntry>, CorruptKind> {
    let actual = crc(b);
    if actual != expected_crc {
        return Err(CorruptKind::Crc {
            expected: expected_crc,
            actual,
        });
    }
    Ok(b.chunks_exact(INDEX_ENTRY_LEN)
        .map(|c| IndexEntry {
            seq: u64_at(c, 0),
            offset: u64_at(c, 8),
        })
        .collect())
}

/// CRC32 of index bytes.
pub fn index_crc(b: &[u8]) -> u32 {
    crc(b)
}

/// The format version a segment header names (unchecked: the header's CRC
/// is the opener's to check), if the bytes reach it.
pub fn header_version(header: &[u8]) -> Option<u32> {
    header
        .get(HDR_VERSION..HDR_VERSION + 4)
        .map(|_| u32_at(header, HDR_VERSION))
}

#[cfg(test)]
mod tests;
