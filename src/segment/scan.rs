//! The scan of a segment's records: what every open, `verify` and the
//! archive's check walk the bytes with, record by record (CRC, seq, chain
//! link, batches, a trusted point), and what it finds.

use crate::chain::EntryHash;
use crate::error::CorruptKind;
use crate::format::{self, Footer, IndexEntry, Mark, Point};
use crate::schema::EntryKind;

use super::INDEX_STRIDE_BYTES;

/// What a scan of a segment's records found.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    /// Offset just past the last good record.
    pub(crate) end: u64,
    /// Seq the next record would have.
    pub(crate) next_seq: u64,
    /// Hash of the last good record (the start hash if none).
    pub(crate) last_hash: EntryHash,
    /// Good records.
    pub(crate) count: u64,
    /// Sparse index of the good records.
    pub(crate) index: Vec<IndexEntry>,
    /// Seq and offset of the last SessionStart among them.
    pub(crate) last_session_start: Option<(u64, u64)>,
    /// Where and why the scan stopped early, if it did on a bad record.
    pub(crate) stop: Option<(u64, Option<u64>, CorruptKind)>,
    /// The state at [`ScanMode::checkpoint`], if the scan reached that offset
    /// on a record boundary: what a mark there must name.
    pub(crate) checkpoint: Option<Point>,
    /// Whether the scan reached [`ScanMode::trusted`]'s end on a record
    /// boundary, the record there having its hash.
    pub(crate) trusted_reached: bool,
}

impl Scan {
    /// Whether a scan up to `footer.data_end` found exactly the records the
    /// footer summarizes: a seal to believe.
    pub(crate) fn agrees_with(&self, footer: &Footer) -> bool {
        self.stop.is_none()
            && self.end == footer.data_end
            && self.count == footer.record_count
            && self.last_hash == footer.last_hash
    }
}

/// How thoroughly to scan.
#[derive(Clone, Copy)]
pub(crate) struct ScanMode<'p> {
    /// Below this offset, trust CRCs and skip chain hashing (the durable mark
    /// says those bytes were checked and synced); `mark` gives the hash there.
    pub(crate) trusted: Option<Mark>,
    /// Also validate every payload as an archive.
    pub(crate) check_archives: bool,
    /// Check CRCs below the mark too. A writer does (it must tell damage
    /// before the mark from a torn tail); a read-only open leaves them to the
    /// iterator, which checks every record it yields, and to `verify`.
    pub(crate) crc_below_mark: bool,
    /// An offset at which to record the scan's state ([`Scan::checkpoint`]).
    pub(crate) checkpoint: Option<u64>,
    /// A further check of each record past the trusted mark, on its payload
    /// bytes: a store's writer checks that the items it keeps in the
    /// store's payload area are there (`PayloadArea::check_record`).
    pub(crate) past_mark: Option<RecordCheck<'p>>,
}

/// What [`ScanMode::past_mark`] runs, on a record's payload and its
/// segment's format version: `Err` names what is wrong.
pub(crate) type RecordCheck<'p> =
    &'p (dyn Fn(&[u8], u32) -> std::result::Result<(), String> + Sync);

/// Where a batch whose last record a scan has not met began, and the scan's
/// state before it.
struct BatchStart {
    off: usize,
    next_seq: u64,
    count: u64,
    index_len: usize,
    last_session_start: Option<(u64, u64)>,
    /// The chain hash before it, when the scan knew it (not below a
    /// trusted mark).
    hash: Option<EntryHash>,
    last_start: Option<(usize, usize)>,
}

#[cfg(feature = "whitebox")]
thread_local! {
    /// Records whose chain link an open's scan hashed on this thread.
    static LINKS_HASHED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many records the scans of log opens on this thread have hashed so
/// far (not counting those below a trusted point, which are not): what a
/// test reads to see that a shortcut was taken. Hidden, not a stable API
/// (feature `whitebox`).
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub fn links_hashed_by_opens() -> u64 {
    LINKS_HASHED.with(|n| n.get())
}

/// The scan itself, over the bytes `0..limit` of a segment.
pub(crate) fn scan_bytes(
    bytes: &[u8],
    from: u64,
    mut next_seq: u64,
    mut hash: EntryHash,
    mode: ScanMode<'_>,
) -> Scan {
    let mut scan = Scan::empty(from, next_seq, hash);
    // A record's archive is read as its segment's version wrote it.
    let version = format::header_version(bytes).unwrap_or(format::FORMAT_VERSION);
    let trusted = mode
        .trusted
        .filter(|m| m.end >= from && (m.end as usize) <= bytes.len());
    let mut hash_known = true;
    let mut last_start = None;
    let mut off = from as usize;
    let mut last_indexed: Option<u64> = None;
    // The scan as it was before the first record of a batch whose last
    // record has not been met yet (`RECORD_MAGIC_BATCH`).
    let mut batch_open: Option<BatchStart> = None;
    loop {
        if let Some(m) = trusted {
            if off as u64 == m.end {
                hash = m.hash;
                hash_known = true;
                scan.trusted_reached = true;
            }
        }
        if hash_known && mode.checkpoint == Some(off as u64) {
            scan.checkpoint = Some(Point {
                end: off as u64,
                next_seq,
                hash,
                session_start: scan.last_session_start.map(|(_, at)| at),
            });
        }
        // Damage is reported with the seq the record at `off` must have: the
        // seq field of a damaged header cannot be trusted.
        let seq = Some(next_seq);
        let rec = match format::next_record(bytes, off) {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(kind) => {
                scan.stop = Some((off as u64, seq, kind));
                break;
            }
        };
        let h = rec.header;
        let body_end = off + rec.body.len();
        let rec_end = off + rec.len();
        let in_trusted = trusted.is_some_and(|m| (off as u64) < m.end);
        let expected_hash = hash_known.then_some(hash);
        let mark_at_end = trusted.filter(|m| rec_end as u64 == m.end);
        let checked = check_record(
            &rec,
            next_seq,
            expected_hash,
            mark_at_end,
            in_trusted,
            (mode, version),
        );
        if let Err(kind) = checked {
            scan.stop = Some((off as u64, seq, kind));
            break;
        }
        // Below a trusted point the chain is not hashed, except for the
        // record that ends at the checkpoint, whose state a mark there is
        // held to (a durable mark below a writer's release hint).
        if in_trusted && (mode.checkpoint != Some(rec_end as u64) || mark_at_end.is_some()) {
            hash_known = false;
        } else {
            hash = rec.link();
            hash_known = true;
            #[cfg(feature = "whitebox")]
            LINKS_HASHED.with(|n| n.set(n.get() + 1));
        }
        if !h.continues {
            batch_open = None;
        } else if batch_open.is_none() {
            batch_open = Some(BatchStart::before(&scan, off, expected_hash, last_start));
        }
        last_start = Some((off, body_end));
        scan.count_record(&h, off, &mut last_indexed);
        next_seq += 1;
        off = rec_end;
        scan.end = off as u64;
        scan.next_seq = next_seq;
    }
    scan.finish(bytes, batch_open, last_start, hash_known.then_some(hash));
    scan
}

impl Scan {
    /// Ends a scan whose walk stopped: a batch whose last record it did not
    /// meet is cut off, and the last hash is set, from `hash` (the chain's
    /// where it was hashed) or else from the last record's bytes.
    fn finish(
        &mut self,
        bytes: &[u8],
        batch_open: Option<BatchStart>,
        mut last_start: Option<(usize, usize)>,
        mut hash: Option<EntryHash>,
    ) {
        if let Some(b) = batch_open {
            self.cut_before(&b);
            last_start = b.last_start;
            hash = b.hash;
        }
        self.last_hash = match (hash, last_start) {
            (Some(h), _) => h,
            (None, None) => self.last_hash,
            // The bounds from the first pass: the bytes are not re-parsed, since
            // another process's writer may be changing bytes beyond its commit.
            (None, Some((at, body_end))) => format::record_link(&bytes[at..body_end]),
        };
    }
}

impl Scan {
    /// A scan from `from` that has met no record yet.
    fn empty(from: u64, next_seq: u64, hash: EntryHash) -> Scan {
        Scan {
            end: from,
            next_seq,
            last_hash: hash,
            count: 0,
            index: Vec::new(),
            last_session_start: None,
            stop: None,
            checkpoint: None,
            trusted_reached: false,
        }
    }

    /// Counts a good record at `off`: its index entry when the last one is
    /// `INDEX_STRIDE_BYTES` behind (`last_indexed`), and whether it is a
    /// SessionStart.
    fn count_record(
        &mut self,
        h: &format::RecordHeader,
        off: usize,
        last_indexed: &mut Option<u64>,
    ) {
        if h.kind == EntryKind::SessionStart as u8 {
            self.last_session_start = Some((h.seq, off as u64));
        }
        if last_indexed.is_none_or(|at| off as u64 - at >= INDEX_STRIDE_BYTES) {
            self.index.push(IndexEntry {
                seq: h.seq,
                offset: off as u64,
            });
            *last_indexed = Some(off as u64);
        }
        self.count += 1;
    }

    /// Ends the scan before a batch a crash cut short: as a torn tail
    /// starting at its first record (whatever stopped it after).
    fn cut_before(&mut self, b: &BatchStart) {
        self.end = b.off as u64;
        self.next_seq = b.next_seq;
        self.count = b.count;
        self.index.truncate(b.index_len);
        self.last_session_start = b.last_session_start;
        // The reason is the damage that stopped the scan inside the batch,
        // if any (a record past the mark whose payload was lost, say), else
        // that the batch ends before its last record.
        let why = self
            .stop
            .take()
            .map_or(CorruptKind::IncompleteBatch, |(_, _, k)| k);
        self.stop = Some((b.off as u64, Some(b.next_seq), why));
        self.checkpoint = self.checkpoint.filter(|p| p.end <= b.off as u64);
    }
}

impl BatchStart {
    /// The state of `scan` before the record at `off`, the first of a
    /// batch, which chains from `hash` when that is known.
    fn before(
        scan: &Scan,
        off: usize,
        hash: Option<EntryHash>,
        last_start: Option<(usize, usize)>,
    ) -> BatchStart {
        BatchStart {
            off,
            next_seq: scan.next_seq,
            count: scan.count,
            index_len: scan.index.len(),
            last_session_start: scan.last_session_start,
            hash,
            last_start,
        }
    }
}

/// The checks of one record of a scan that expects `next_seq`, chained from
/// `hash` when it is known: its CRC (unless below a trusted mark, and the
/// mode does not ask), seq, link, the mark's hash if the record ends at the
/// mark, and (if the mode asks) its archive, as the segment's `version`
/// wrote it.
fn check_record(
    rec: &format::RecordRef<'_>,
    next_seq: u64,
    hash: Option<EntryHash>,
    mark_at_end: Option<Mark>,
    in_trusted: bool,
    (mode, version): (ScanMode<'_>, u32),
) -> Result<(), CorruptKind> {
    let h = rec.header;
    if mode.crc_below_mark || !in_trusted {
        rec.check_crc()?;
    }
    // `next_seq == u64::MAX` is the last seq there can be: no record may
    // claim it, since the one after it could not be numbered.
    if h.seq != next_seq || next_seq == u64::MAX {
        return Err(CorruptKind::SeqGap {
            expected: next_seq,
            found: h.seq,
        });
    }
    if let Some(expected) = hash.filter(|&e| e != h.prev_hash) {
        return Err(CorruptKind::ChainLink {
            expected,
            actual: h.prev_hash,
        });
    }
    // The chain is not hashed below the mark, so the record that ends at it
    // must match the mark's hash: otherwise an edit with a fixed-up CRC there
    // would pass, and the next mark would adopt it.
    if let Some(m) = mark_at_end {
        let actual = rec.link();
        if actual != m.hash {
            return Err(CorruptKind::ChainLink {
                expected: m.hash,
                actual,
            });
        }
    }
    if mode.check_archives {
        crate::schema::read_archive(rec.payload(), version).map_err(CorruptKind::InvalidArchive)?;
    }
    if let Some(check) = mode.past_mark.filter(|_| !in_trusted) {
        check(rec.payload(), version).map_err(CorruptKind::Payload)?;
    }
    Ok(())
}
