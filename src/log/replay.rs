//! Recovery's way back from the shared journal (`journal.rs`) into a log:
//! a frame's records appended where they continue it, byte for byte.

use std::path::Path;

use rkyv::util::AlignedVec;

use super::writer::Encoded;
use super::{Durability, ExpectHead, Log};
use crate::error::{CorruptKind, Error, Result};
use crate::format::journal::FrameStart;
use crate::format::{self, RECORD_HEADER_LEN};
use crate::schema::{EntryKind, LogEntry};

impl Log {
    /// Appends what of a journal frame continues this log (recovery): the
    /// frame's records from the log's next seq on, which must chain to its
    /// head. Records the log holds already are passed over; the hashes of
    /// the records appended must be the frame's. `place` names the journal
    /// file in errors. Returns how many records were appended.
    pub(crate) fn replay_frame(
        &self,
        start: &FrameStart,
        records: &[u8],
        place: &Path,
    ) -> Result<usize> {
        let corrupt = |offset: usize, seq: Option<u64>, kind: CorruptKind| Error::Corrupt {
            segment: place.to_path_buf(),
            offset: offset as u64,
            seq,
            kind,
        };
        let found = frame_records(start, records, &corrupt)?;
        let (next, head) = {
            let p = self.inner.published.lock();
            (p.tip.next_seq, p.tip.hash)
        };
        // Where the log's head falls in the frame: before it is a gap; in or
        // after it, the hash there must be the log's.
        let link_at = match next.checked_sub(start.seq) {
            None => {
                let kind = CorruptKind::SeqGap {
                    expected: next,
                    found: start.seq,
                };
                return Err(corrupt(0, Some(start.seq), kind));
            }
            Some(k) => k as usize,
        };
        let hash_before = match link_at {
            0 => Some(start.hash),
            k => found.get(k - 1).map(|(_, r)| format::record_link(r.body)),
        };
        if let Some(expected) = hash_before {
            if expected != head {
                let kind = CorruptKind::ChainLink {
                    expected: head,
                    actual: expected,
                };
                return Err(corrupt(0, Some(next), kind));
            }
        }
        let Some(&(from, _)) = found.get(link_at) else {
            return Ok(0);
        };
        let mut buf = AlignedVec::<16>::new();
        buf.extend_from_slice(&records[from..]);
        let mut encoded = Vec::new();
        for (at, r) in &found[link_at..] {
            let start = at - from;
            let payload = &buf[start + RECORD_HEADER_LEN..][..r.header.payload_len as usize];
            let seq = Some(r.header.seq);
            LogEntry::access_archive(payload)
                .map_err(|e| corrupt(*at, seq, CorruptKind::InvalidArchive(e)))?;
            let kind = EntryKind::from_code(r.header.kind).ok_or_else(|| {
                corrupt(
                    *at,
                    seq,
                    CorruptKind::InvalidArchive("unknown entry kind".into()),
                )
            })?;
            encoded.push(Encoded {
                start,
                payload_len: r.header.payload_len as usize,
                kind,
                ts: r.header.ts,
            });
        }
        let written = self.append_encoded(
            &mut buf,
            &encoded,
            Durability::Buffered,
            ExpectHead::Hash(head),
        )?;
        for ((at, r), (seq, got)) in found[link_at..].iter().zip(&written) {
            let wanted = format::record_link(r.body);
            if *got != wanted {
                let kind = CorruptKind::ChainLink {
                    expected: wanted,
                    actual: *got,
                };
                return Err(corrupt(*at, Some(*seq), kind));
            }
        }
        Ok(written.len())
    }
}

/// A frame's records with their offsets in it, checked against the frame's
/// own chain: each whole, its CRC right, in seq order from `start`, linked
/// to the one before.
fn frame_records<'a>(
    start: &FrameStart,
    records: &'a [u8],
    corrupt: &dyn Fn(usize, Option<u64>, CorruptKind) -> Error,
) -> Result<Vec<(usize, format::RecordRef<'a>)>> {
    let mut found = Vec::new();
    let (mut seq, mut hash, mut at) = (start.seq, start.hash, 0usize);
    while at < records.len() {
        let r = format::read_record(records, at).map_err(|k| corrupt(at, Some(seq), k))?;
        format::check_record_crc(r.body).map_err(|k| corrupt(at, Some(seq), k))?;
        if r.header.seq != seq {
            let kind = CorruptKind::SeqGap {
                expected: seq,
                found: r.header.seq,
            };
            return Err(corrupt(at, Some(seq), kind));
        }
        if r.header.prev_hash != hash {
            let kind = CorruptKind::ChainLink {
                expected: hash,
                actual: r.header.prev_hash,
            };
            return Err(corrupt(at, Some(seq), kind));
        }
        hash = format::record_link(r.body);
        found.push((at, r));
        at += r.header.record_len();
        seq += 1;
    }
    Ok(found)
}
