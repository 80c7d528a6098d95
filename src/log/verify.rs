//! Verification: the full check of a snapshot, and the damage it reports.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::opening::{continues, mark_disagrees};
use super::{Log, Snapshot, TornTail};
use crate::chain::EntryHash;
use crate::error::{CorruptKind, Error};
use crate::format::{FIRST_RECORD_OFFSET, FOOTER_LEN};
use crate::segment::{Scan, ScanMode};

/// The first break `verify` found.
///
/// Example: [`Log::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub segment: PathBuf,
    /// Offset in it.
    pub offset: u64,
    /// Seq of the record, where known.
    pub seq: Option<u64>,
    /// What failed.
    pub kind: CorruptKind,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in {} at offset {}",
            self.kind,
            self.segment.display(),
            self.offset
        )?;
        if let Some(seq) = self.seq {
            write!(f, ", seq {seq}")?;
        }
        Ok(())
    }
}

/// The result of [`Log::verify`].
///
/// Example: [`Log::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: usize,
    /// Records whose CRC, chain link and archive checked out.
    pub records: u64,
    /// Record bytes checked.
    pub bytes: u64,
    /// Seq and hash of the last good record.
    pub head: Option<(u64, EntryHash)>,
    /// The first break, if any.
    pub damage: Option<Damage>,
    /// An unrecovered torn tail (not damage).
    pub torn_tail: Option<TornTail>,
    /// Seqs (first, last) of the evicted prefix, which was not checked:
    /// the first local segment was checked to continue the eviction
    /// record's last hash.
    pub evicted: Option<(u64, u64)>,
}

/// The record bytes from which `verify` scans segments on several threads.
const PARALLEL_VERIFY_BYTES: u64 = 8 << 20;

impl Log {
    /// Checks every CRC, chain link and archive, and reports the first break.
    /// Never modifies files.
    ///
    /// ```
    /// use session_store::schema::{group_delta, now_ms};
    /// use session_store::{Item, Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let log = Log::open(dir.path(), LogOptions::default())?;
    /// for entry in group_delta(&[Item::user_text("Deploy?"), Item::assistant_text("Deploying.")], now_ms()) {
    ///     log.append(&entry)?;
    /// }
    /// // The nightly check: every byte read and hashed again.
    /// let report = log.verify();
    /// assert!(report.damage.is_none() && report.torn_tail.is_none());
    /// assert_eq!((report.records, report.head), (2, log.head()));
    /// # Ok(()) }
    /// ```
    pub fn verify(&self) -> VerifyReport {
        let mut report = self.snapshot().verify();
        report.torn_tail = self
            .inner
            .report
            .torn_tail
            .clone()
            .filter(|_| self.inner.writer.is_none());
        report
    }
}

impl Snapshot {
    /// Scans every segment's records (CRC, chain, archive), each from its own
    /// header's seq and start hash, on up to as many threads as the machine
    /// has cores: a segment's links do not depend on the segments before it
    /// once its header is known, and `verify` then checks, in order, that
    /// each header continues the scan before it. The last segment's scan
    /// records its state at `last_checkpoint` (a mark's end).
    fn scan_segments(&self, last_checkpoint: Option<u64>) -> Vec<Scan> {
        let n = self.segs.len();
        let scan = |i: usize| {
            let (seg, end) = &self.segs[i];
            seg.scan(
                FIRST_RECORD_OFFSET,
                seg.data_limit(FIRST_RECORD_OFFSET, *end),
                seg.header.first_seq,
                seg.header.start_hash,
                ScanMode {
                    trusted: None,
                    check_archives: true,
                    crc_below_mark: true,
                    checkpoint: last_checkpoint.filter(|_| i + 1 == n),
                    past_mark: None,
                },
            )
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(n);
        // Threads cost more than they save on a small log.
        if threads <= 1 || self.bytes() < PARALLEL_VERIFY_BYTES {
            return (0..n).map(scan).collect();
        }
        // Largest (latest) segments first, so that no thread is left with a
        // big one at the end.
        let next = AtomicUsize::new(0);
        let done: Vec<Mutex<Option<Scan>>> = (0..n).map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(i) = n.checked_sub(k + 1) else { break };
                    *done[i].lock() = Some(scan(i));
                });
            }
        });
        done.into_iter()
            .map(|m| m.into_inner().expect("every segment is scanned"))
            .collect()
    }

    /// Full check of the snapshot: headers, CRCs, chain, archives, footers,
    /// and the active segment's durable mark. Segments are scanned in
    /// parallel; damage is reported at the first place in log order.
    ///
    /// Example: [`Log::verify`].
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport {
            segments: self.segs.len(),
            ..VerifyReport::default()
        };
        // The active segment's mark, which a reader may have believed; one
        // beyond the snapshot (a writer moved on) is not checked.
        let mark = self
            .segs
            .last()
            .and_then(|(seg, end)| seg.read_mark().filter(|m| m.end <= *end));
        let scans = self.scan_segments(mark.map(|m| m.end));
        report.evicted = self.evicted();
        let mut expect: Option<(u64, EntryHash)> = self.evicted;
        let mut last_session_start = None;
        let last = self.segs.len().saturating_sub(1);
        for (i, ((seg, end), scan)) in self.segs.iter().zip(scans).enumerate() {
            let damage = |offset, seq, kind| Damage {
                segment: seg.path.clone(),
                offset,
                seq,
                kind,
            };
            let h = seg.header;
            if let Err(kind) = continues(&h, &self.segs[0].0.header.log_id, expect) {
                report.damage = Some(damage(0, None, kind));
                return report;
            }
            if let Err(e) = seg.ensure_index() {
                report.damage = Some(match e {
                    Error::Corrupt {
                        offset, seq, kind, ..
                    } => damage(offset, seq, kind),
                    other => damage(
                        seg.len() - FOOTER_LEN as u64,
                        None,
                        CorruptKind::Footer(format!("index unreadable: {other}")),
                    ),
                });
                return report;
            }
            // The scan started from this header, which continues `expect`.
            report.records += scan.count;
            report.bytes += scan.end - FIRST_RECORD_OFFSET;
            if scan.count > 0 {
                report.head = Some((scan.next_seq - 1, scan.last_hash));
            }
            if let Some((offset, seq, kind)) = scan.stop {
                report.damage = Some(damage(offset, seq, kind));
                return report;
            }
            if scan.end != *end {
                report.damage = Some(damage(
                    scan.end,
                    Some(scan.next_seq),
                    CorruptKind::Truncated,
                ));
                return report;
            }
            if let Some((seq, _)) = scan.last_session_start {
                last_session_start = Some(seq);
            }
            // A segment sealed after this snapshot was taken is checked only up to
            // the snapshot's end; its footer describes more.
            let footer = *seg.footer.lock();
            if let Some(f) = footer.filter(|f| f.data_end == *end) {
                let why = if f.record_count != scan.count || f.last_hash != scan.last_hash {
                    Some("count or last hash disagrees with the records")
                } else if f.last_session_start != last_session_start {
                    Some("last SessionStart disagrees with the records")
                } else {
                    None
                };
                if let Some(why) = why {
                    let at = seg.len() - FOOTER_LEN as u64;
                    report.damage = Some(damage(at, None, CorruptKind::Footer(why.into())));
                    return report;
                }
            } else if let Some((at, why)) = mark
                .filter(|_| i == last)
                .and_then(|m| mark_disagrees(&m, &h, &scan))
            {
                report.damage = Some(damage(at, None, CorruptKind::Mark(why)));
                return report;
            }
            expect = Some((scan.next_seq, scan.last_hash));
        }
        report
    }
}
