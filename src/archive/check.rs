//! The check of a downloaded object, before any of it is written: its
//! header, every record's CRC, seq, chain link and archive, and for a sealed
//! segment its footer and index, through the same scan as `verify`.

use crate::chain::EntryHash;
use crate::error::CorruptKind;
use crate::format::{
    self, Footer, SegmentHeader, FIRST_RECORD_OFFSET, FOOTER_LEN, MARK_SLOT_0, MARK_SLOT_LEN,
    SEGMENT_HEADER_LEN,
};
use crate::schema::LoggedPayloadRef;
use crate::segment::{scan_bytes, ScanMode};

use super::ObjectKind;

/// What a checked object holds.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) header: SegmentHeader,
    /// Offset just past the last record.
    pub(crate) data_end: u64,
    pub(crate) next_seq: u64,
    pub(crate) last_hash: EntryHash,
    /// The payloads its records name (see `payloads.rs`), each once, with
    /// the seq of the first record that names it.
    pub(crate) payloads: Vec<(u64, LoggedPayloadRef)>,
}

/// Where and why an object failed its check.
pub(crate) type Failure = (u64, Option<u64>, CorruptKind);

/// Checks an object's bytes against its name.
pub(crate) fn check_object(bytes: &[u8], kind: ObjectKind) -> Result<Checked, Failure> {
    // Payloads are read in place (rkyv), at offsets that are multiples of
    // 16 from the segment's start: a download's buffer may lie anywhere.
    let copy;
    let bytes = if (bytes.as_ptr() as usize).is_multiple_of(format::RECORD_ALIGN) {
        bytes
    } else {
        let mut v = rkyv::util::AlignedVec::<{ format::RECORD_ALIGN }>::with_capacity(bytes.len());
        v.extend_from_slice(bytes);
        copy = v;
        &copy[..]
    };
    let header = SegmentHeader::decode(bytes).map_err(|(at, k)| (at, None, k))?;
    if header.first_seq != kind.first_seq() {
        return Err((
            0,
            None,
            CorruptKind::SeqGap {
                expected: kind.first_seq(),
                found: header.first_seq,
            },
        ));
    }
    let mode = ScanMode {
        trusted: None,
        check_archives: true,
        crc_below_mark: true,
        checkpoint: None,
        past_mark: None,
    };
    let len = bytes.len() as u64;
    let (data_end, footer) = match kind {
        ObjectKind::Sealed { .. } => {
            if len != header.segment_len || len < (SEGMENT_HEADER_LEN + FOOTER_LEN) as u64 {
                return Err((len, None, CorruptKind::Truncated));
            }
            let at = bytes.len() - FOOTER_LEN;
            let footer = match Footer::decode(&bytes[at..]) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    let why = "a sealed segment's object has no footer".to_string();
                    return Err((at as u64, None, CorruptKind::Footer(why)));
                }
                Err(k) => return Err((at as u64, None, k)),
            };
            if footer.data_end < FIRST_RECORD_OFFSET || footer.data_end > at as u64 {
                return Err((at as u64, None, CorruptKind::Truncated));
            }
            let ib = footer.index_offset as usize;
            let ie = ib.saturating_add(footer.index_count as usize * format::INDEX_ENTRY_LEN);
            let index = bytes
                .get(ib..ie)
                .filter(|_| ib as u64 >= footer.data_end && ie <= at)
                .ok_or((footer.index_offset, None, CorruptKind::Truncated))?;
            format::decode_index(index, footer.index_crc)
                .map_err(|k| (footer.index_offset, None, k))?;
            (footer.data_end, Some(footer))
        }
        ObjectKind::Tail { .. } => (len, None),
    };
    let scan = scan_bytes(
        &bytes[..data_end as usize],
        FIRST_RECORD_OFFSET,
        header.first_seq,
        header.start_hash,
        mode,
    );
    if let Some(stop) = scan.stop {
        return Err(stop);
    }
    if scan.end != data_end {
        return Err((scan.end, Some(scan.next_seq), CorruptKind::Truncated));
    }
    if let Some(f) = footer {
        if f.record_count != scan.count || f.last_hash != scan.last_hash {
            let why = "count or last hash disagrees with the records".to_string();
            return Err((len - FOOTER_LEN as u64, None, CorruptKind::Footer(why)));
        }
    }
    if scan.next_seq != kind.next_seq() {
        return Err((
            scan.end,
            None,
            CorruptKind::SeqGap {
                expected: kind.next_seq(),
                found: scan.next_seq,
            },
        ));
    }
    Ok(Checked {
        header,
        data_end,
        next_seq: scan.next_seq,
        last_hash: scan.last_hash,
        payloads: payload_refs(&bytes[..data_end as usize], header.first_seq),
    })
}

/// The payloads the records of checked (and aligned) segment bytes name,
/// each once, in the order first met, with the seq of the record that
/// first names it (the first record's is `first_seq`).
fn payload_refs(bytes: &[u8], first_seq: u64) -> Vec<(u64, LoggedPayloadRef)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut at = FIRST_RECORD_OFFSET as usize;
    let mut seq = first_seq;
    let version = format::header_version(bytes).unwrap_or(format::FORMAT_VERSION);
    while let Ok(Some(rec)) = format::next_record(bytes, at) {
        at += rec.len();
        seq += 1;
        // The scan accessed every record's archive already.
        let Ok(entry) = crate::schema::read_archive(rec.payload(), version) else {
            continue;
        };
        for r in entry.get().items().iter().filter_map(|i| i.payload_ref()) {
            if seen.insert(r.hash) {
                out.push((seq - 1, r));
            }
        }
    }
    out
}

/// The end offset of record `seq` in checked segment bytes (or of the record
/// whose hash is `hash`), walking from the first record: where a restore to
/// that point cuts the segment, with that record's seq and hash.
pub(crate) fn find_cut(
    bytes: &[u8],
    header: &SegmentHeader,
    data_end: u64,
    stop: impl Fn(u64, &EntryHash) -> bool,
) -> Option<(u64, u64, EntryHash)> {
    let bytes = &bytes[..data_end as usize];
    let mut at = FIRST_RECORD_OFFSET as usize;
    let mut seq = header.first_seq;
    while let Ok(Some(rec)) = format::next_record(bytes, at) {
        let hash = rec.link();
        at += rec.len();
        if stop(seq, &hash) {
            return Some((at as u64, seq, hash));
        }
        seq += 1;
    }
    None
}

/// Gives the record of checked segment bytes that ends at `end` the magic of
/// a batch's last record. Neither its CRC nor the chain covers the magic, so
/// the record stays the same record with the same hash.
pub(crate) fn end_batch_at(bytes: &mut [u8], end: u64) {
    let mut at = FIRST_RECORD_OFFSET as usize;
    while let Ok(Some(rec)) = format::next_record(bytes, at) {
        let next = at + rec.len();
        if next as u64 >= end {
            bytes[at..at + 4].copy_from_slice(&format::RECORD_MAGIC);
            return;
        }
        at = next;
    }
}

/// Clears a segment header's durable-mark slots: a mark is a claim about a
/// local file's syncs, and an archived prefix must not carry one that names
/// records past it. Recovery reads a segment without a mark from its records.
pub(crate) fn clear_marks(bytes: &mut [u8]) {
    bytes[MARK_SLOT_0..MARK_SLOT_0 + 2 * MARK_SLOT_LEN].fill(0);
}
