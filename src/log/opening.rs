//! Opening the segments of a log: sealed segments by their footers, the
//! active one by a scan of its records.

use std::path::PathBuf;
use std::sync::Arc;

use super::evicted::{prefix_below, EvictedPrefix};
use super::{Published, RecoveryMode, RecoveryReport, ReleaseHint, Tip, TornTail};
use crate::chain::EntryHash;
use crate::error::{CorruptKind, Result};
use crate::format::{
    IndexEntry, Mark, Point, RecordHeader, SegmentHeader, FIRST_RECORD_OFFSET, FOOTER_LEN,
    RECORD_ALIGN, RECORD_HEADER_LEN,
};
use crate::fs::Hook;
use crate::schema::EntryKind;
use crate::segment::{RecordCheck, Scan, ScanMode, Segment};

/// A store's check of the payloads its records name, at open (see
/// `PayloadArea::check_record`).
#[derive(Clone, Copy)]
pub(super) struct PayloadCheck<'p> {
    /// Checks a record past the durable mark: its payloads are all there.
    pub(super) check: RecordCheck<'p>,
    /// Makes the payloads that `check` found durable (a writer's check
    /// notes them for the store's next sync): run before a mark or a seal's
    /// sync vouches for the records that name them, since a crashed
    /// writer's payloads may be in the page cache only.
    pub(super) sync: &'p dyn Fn() -> Result<()>,
}

/// What an open trusts and checks past the last segment's durable mark.
#[derive(Clone, Copy, Default)]
pub(super) struct PastMark<'p> {
    /// A release hint this process left (see [`ReleaseHint`]).
    pub(super) hint: Option<&'p ReleaseHint>,
    /// The store's check of the payloads the records name.
    pub(super) payloads: Option<PayloadCheck<'p>>,
}

/// What the sealed segments of a log say about the log up to their end.
pub(super) struct SealedPrefix {
    pub(super) segments: Vec<Arc<Segment>>,
    log_id: Option<[u8; 16]>,
    /// Seq and hash the next segment must start with (`None`: none sealed).
    pub(super) expect: Option<(u64, EntryHash)>,
    last_session_start: Option<u64>,
    records: u64,
    /// Seq and hash the first local segment continues, when the log's
    /// prefix below it is evicted (see `evicted`).
    pub(super) evicted: Option<(u64, EntryHash)>,
}

/// Opens the segments `paths` (in seq order, at least one): every one but
/// the last must be sealed; the last is the active segment (or a sealed one
/// the log has not rolled past). A writer that `keeps_lagging_mark` leaves a
/// mark that lags but agrees with the records as it is (see
/// `cut_tail_and_mark`). `payloads` checks each record of the last segment
/// past its durable mark; one that fails it is where the torn tail starts.
pub(super) fn open_segments(
    paths: &[(u64, PathBuf)],
    writable: bool,
    keeps_lagging_mark: bool,
    mode: RecoveryMode,
    hook: &Hook,
    past_mark: PastMark<'_>,
) -> Result<Opened> {
    let (last, sealed) = paths
        .split_last()
        .expect("open_segments is called with at least one path");
    let evicted = evicted_below(&paths[0])?;
    let prefix = open_sealed(sealed, evicted, writable, hook)?;
    open_last(
        last,
        prefix,
        writable,
        keeps_lagging_mark,
        mode,
        hook,
        past_mark,
    )
}

/// Opens a segment and checks that it is the one its name says, continuing
/// the prefix before it.
fn open_in_order(
    (name_seq, path): &(u64, PathBuf),
    prefix: &mut SealedPrefix,
    writable: bool,
    hook: &Hook,
) -> Result<Segment> {
    let seg = Segment::open(path, writable, hook)?;
    let h = seg.header;
    if h.first_seq != *name_seq {
        return Err(seg.corrupt(
            0,
            None,
            CorruptKind::Footer(format!(
                "file name says seq {name_seq}, header says {}",
                h.first_seq
            )),
        ));
    }
    let first_id = *prefix.log_id.get_or_insert(h.log_id);
    continues(&h, &first_id, prefix.expect).map_err(|kind| seg.corrupt(0, None, kind))?;
    Ok(seg)
}

/// The evicted prefix below the log's first local segment `first`, as its
/// directory's record tells it.
pub(super) fn evicted_below((seq, path): &(u64, PathBuf)) -> Result<Option<EvictedPrefix>> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    prefix_below(dir, *seq)
}

/// Opens the sealed segments by their footers, without reading records. A
/// reader defers their indexes to their first use. A prefix recorded as
/// `evicted` is expected to be missing: the first segment continues the
/// record instead of the log's start.
pub(super) fn open_sealed(
    paths: &[(u64, PathBuf)],
    evicted: Option<EvictedPrefix>,
    writable: bool,
    hook: &Hook,
) -> Result<SealedPrefix> {
    let mut prefix = SealedPrefix {
        segments: Vec::with_capacity(paths.len() + 1),
        log_id: evicted.map(|e| e.log_id),
        expect: evicted.map(|e| (e.next_seq, e.last_hash)),
        last_session_start: None,
        records: evicted.map_or(0, |e| e.next_seq),
        evicted: evicted.map(|e| (e.next_seq, e.last_hash)),
    };
    for named in paths {
        let seg = open_in_order(named, &mut prefix, writable, hook)?;
        let Some(f) = seg.read_footer(writable)? else {
            return Err(seg.corrupt(
                seg.len() - FOOTER_LEN as u64,
                None,
                CorruptKind::Footer("segment before the last is not sealed".into()),
            ));
        };
        *seg.footer.lock() = Some(f);
        seg.map.publish(f.data_end);
        prefix.expect = Some((f.first_seq + f.record_count, f.last_hash));
        if f.last_session_start.is_some() {
            prefix.last_session_start = f.last_session_start;
        }
        prefix.records += f.record_count;
        prefix.segments.push(Arc::new(seg));
    }
    Ok(prefix)
}

/// Opens the last segment by a scan of its records, and decides what its end
/// is: a seal the records agree with, or the last good record, with a torn
/// tail (or, before the durable mark, damage) after it. A writer cuts the
/// tail and brings the mark up to date.
fn open_last(
    named: &(u64, PathBuf),
    mut prefix: SealedPrefix,
    writable: bool,
    keeps_lagging_mark: bool,
    mode: RecoveryMode,
    hook: &Hook,
    past_mark: PastMark<'_>,
) -> Result<Opened> {
    let PastMark { hint, payloads } = past_mark;
    let seg = open_in_order(named, &mut prefix, writable, hook)?;
    // Its footer may be a seal that never became durable (its successor was
    // not created yet), so it is only believed once the records agree.
    let footer = seg.read_footer(true).unwrap_or(None);
    // As `Segment::open` just read it from the header.
    let mark = *seg.mark.lock();
    let limit = footer.map_or(seg.len() - FOOTER_LEN as u64, |f| f.data_end);
    let limit = seg.data_limit(FIRST_RECORD_OFFSET, limit);
    // A hint this process left for this very file of this log, within the
    // records: trusted as a durable mark is (CRCs only below it, and no
    // payload check: this process wrote or checked those payloads, and a
    // writer's next sync covers any it has not synced yet).
    let hint = hint
        .filter(|h| h.segment == seg.path && h.log_id == seg.header.log_id)
        .map(|h| h.point)
        .filter(|p| p.next_seq >= seg.header.first_seq && p.end <= limit);
    let scan = scan_last(&seg, mark, limit, writable, hint, payloads.map(|p| p.check));
    let sync_payloads = || payloads.map_or(Ok(()), |p| (p.sync)());
    let session_start = scan.last_session_start.map(|(_, offset)| offset);
    let mut last_session_start = prefix.last_session_start;
    if let Some((seq, _)) = scan.last_session_start {
        last_session_start = Some(seq);
    }
    let mut report = RecoveryReport {
        records: prefix.records + scan.count,
        ..RecoveryReport::default()
    };
    let mut segments = prefix.segments;
    if let Some(f) = footer.filter(|f| scan.agrees_with(f)) {
        if writable {
            // The seal may be in the page cache only (a process killed
            // mid-roll): make it durable before a successor can exist.
            sync_payloads()?;
            seg.sync()?;
        }
        *seg.footer.lock() = Some(f);
        segments.push(Arc::new(seg));
        report.segments = segments.len();
        return Ok(Opened {
            segments,
            durable_next: scan.next_seq,
            tip: Tip {
                end: f.data_end,
                next_seq: scan.next_seq,
                hash: scan.last_hash,
                // The footer, which verify checks, rather than the mark.
                last_session_start: f.last_session_start,
                session_start,
            },
            active_sealed: true,
            report,
            log_id: prefix.log_id,
            evicted: prefix.evicted,
        });
    }
    report.torn_tail = torn_tail(&seg, mark, &scan, mode)?;
    let tip = Tip {
        end: scan.end,
        next_seq: scan.next_seq,
        hash: scan.last_hash,
        last_session_start,
        session_start,
    };
    let durable_next = match writable {
        true => cut_tail_and_mark(
            &seg,
            mark,
            &scan,
            &tip,
            keeps_lagging_mark,
            &sync_payloads,
            &mut report,
        )?,
        false => tip.next_seq,
    };
    *seg.index.write() = scan.index;
    segments.push(Arc::new(seg));
    report.segments = segments.len();
    Ok(Opened {
        segments,
        tip,
        durable_next,
        active_sealed: false,
        report,
        log_id: prefix.log_id,
        evicted: prefix.evicted,
    })
}

/// Scans the last segment's records up to `limit` (a data limit: no hole
/// before it). A read-only open starts
/// at a version 2 mark, which says where the last SessionStart below it is;
/// a writer scans them all, since it must tell damage below the mark from a
/// torn tail.
///
/// A `hint` (see [`ReleaseHint`]) is trusted like a durable mark when it
/// lies past the mark: below it only CRCs are checked (a read-only open
/// leaves even those to the iterator, as below its mark), and the record
/// that ends at it must have its hash. `past_mark` checks each record past
/// the trusted point.
///
/// A scan that does not reach the hint on a record boundary with its hash
/// (the records there differ, after a Salvage and new appends, or end before
/// it), or that ends below it, is done again as if there were no hint: the
/// log is then the records' alone, not cut at the hint.
fn scan_last(
    seg: &Segment,
    mark: Option<Mark>,
    limit: u64,
    writable: bool,
    hint: Option<Point>,
    past_mark: Option<RecordCheck<'_>>,
) -> Scan {
    let durable = mark.filter(|m| m.next_seq >= seg.header.first_seq);
    let scan_trusting = |trusted| scan_last_from(seg, mark, limit, writable, trusted, past_mark);
    // A hint names at least one record: at the segment's first record
    // offset it would be "reached" before any check, with its hash in
    // place of the header's start hash.
    let past = |p: &Point| p.end > FIRST_RECORD_OFFSET && durable.is_none_or(|m| p.end > m.end);
    if let Some(p) = hint.filter(past) {
        let scan = scan_trusting(Some(Mark::at(0, p)));
        if scan.trusted_reached && scan.end >= p.end {
            return scan;
        }
    }
    scan_trusting(durable)
}

/// [`scan_last`] trusting `trusted` (the durable mark, or a hint past it).
fn scan_last_from(
    seg: &Segment,
    mark: Option<Mark>,
    limit: u64,
    writable: bool,
    trusted: Option<Mark>,
    past_mark: Option<RecordCheck<'_>>,
) -> Scan {
    let h = seg.header;
    let skip = mark
        .filter(|_| !writable)
        .and_then(|m| mark_to_start_at(seg, m, limit));
    let Some((m, session_start)) = skip else {
        return seg.scan(
            FIRST_RECORD_OFFSET,
            limit,
            h.first_seq,
            h.start_hash,
            ScanMode {
                trusted,
                check_archives: false,
                crc_below_mark: writable,
                // What the records say at the mark's end: a writer may keep
                // a mark that lags but agrees with them (`cut_tail_and_mark`).
                checkpoint: mark.filter(|_| writable).map(|m| m.end),
                past_mark,
            },
        );
    };
    let mut tail = seg.scan(
        m.end,
        limit,
        m.next_seq,
        m.hash,
        ScanMode {
            // A view's hint past the mark (a view this process read of this
            // file before) is trusted from the mark on.
            trusted: trusted.filter(|t| t.end > m.end),
            check_archives: false,
            crc_below_mark: false,
            checkpoint: None,
            past_mark,
        },
    );
    tail.count += m.next_seq - h.first_seq;
    if let Some((seq, offset)) = session_start {
        tail.index.insert(0, IndexEntry { seq, offset });
        tail.last_session_start = tail.last_session_start.or(session_start);
    }
    tail
}

/// The torn tail after the last good record of an unsealed last segment, if
/// the scan stopped before its end. Damage below the durable mark is
/// refused in [`RecoveryMode::Strict`].
fn torn_tail(
    seg: &Segment,
    mark: Option<Mark>,
    scan: &Scan,
    mode: RecoveryMode,
) -> Result<Option<TornTail>> {
    let durable_end = mark.map_or(FIRST_RECORD_OFFSET, |m| m.end);
    // Records that end (zeros) before the mark were synced and are gone:
    // that is damage too, not a clean end.
    let stop = scan.stop.clone().or_else(|| {
        (scan.end < durable_end).then_some((scan.end, Some(scan.next_seq), CorruptKind::Truncated))
    });
    let Some((offset, seq, kind)) = stop else {
        return Ok(None);
    };
    let salvaged = offset < durable_end;
    if salvaged && mode == RecoveryMode::Strict {
        return Err(seg.corrupt(offset, seq, kind));
    }
    Ok(Some(TornTail {
        segment: seg.path.clone(),
        offset,
        seq,
        reason: kind.to_string(),
        salvaged,
    }))
}

/// A writer's end of recovery: everything after the last good record goes,
/// footer included, so that stale bytes can never validate later; then the
/// mark names exactly what is kept (so that damage to it later is caught,
/// not cut as a torn tail).
///
/// A writer that `keeps_lagging_mark` (one that reopens a log this process
/// let go without a close, see `Log::release`) leaves a mark that merely
/// lags: one naming a point the records agree with (`scan` checked it, and
/// chained every record after it), when nothing was cut. Such a mark
/// promises only what was synced, which is true, and rewriting it would put
/// two `fdatasync`s on every such open; the records after it are made
/// durable and marked by the next commit or the close.
///
/// Returns the seq below which the log is durable: the kept mark's, or all
/// of it.
fn cut_tail_and_mark(
    seg: &Segment,
    mark: Option<Mark>,
    scan: &Scan,
    tip: &Tip,
    keeps_lagging_mark: bool,
    sync_payloads: &dyn Fn() -> Result<()>,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let cut = seg.zero_range(tip.end, seg.len())?;
    if cut {
        report.torn_tail.get_or_insert_with(|| TornTail {
            segment: seg.path.clone(),
            offset: tip.end,
            seq: None,
            reason: "stale bytes after the last record".into(),
            salvaged: false,
        });
        seg.sync()?;
    }
    let point = tip.point();
    let exact = mark.is_some_and(|m| {
        m.end == point.end
            && m.next_seq == point.next_seq
            && (!seg.header.marks_session_start() || m.session_start == point.session_start)
    });
    if exact {
        return Ok(tip.next_seq);
    }
    let lags = mark.filter(|m| {
        keeps_lagging_mark
            && !cut
            && report.torn_tail.is_none()
            && mark_disagrees(m, &seg.header, scan).is_none()
    });
    if let Some(m) = lags {
        return Ok(m.next_seq);
    }
    // No mark at all: the segment never synced (a creation durable only at
    // its first sync, see `Log::create_unsynced`), so nothing in it is
    // durable yet, and that is what its durable point says.
    if keeps_lagging_mark && mark.is_none() && !cut && report.torn_tail.is_none() {
        return Ok(seg.header.first_seq);
    }
    if tip.end > FIRST_RECORD_OFFSET || mark.is_some() {
        // Everything kept is now durable: record it so later damage is
        // caught (and so a mark beyond a salvage cut stops counting). The
        // payloads its records name first: a crashed writer's may be in the
        // page cache only.
        sync_payloads()?;
        seg.sync()?;
        seg.write_mark(point)?;
        seg.sync()?;
    }
    Ok(tip.next_seq)
}

/// The smallest record: a header and one payload byte, padded.
const MIN_RECORD_LEN: u64 = (RECORD_HEADER_LEN + RECORD_ALIGN) as u64;

/// The highest offset a version 2 mark's `session_start` field can name.
const MARK_SESSION_START_LIMIT: u64 = u32::MAX as u64 * RECORD_ALIGN as u64;

/// Whether a read-only open may start its scan of the last segment at mark
/// `m` rather than at the first record, and if so, the seq and offset of the
/// last `SessionStart` the mark names. Only a version 2 mark qualifies, and
/// only one consistent with the segment: its end inside the record area, on
/// a record boundary, with a seq no lower than the segment's first, and its
/// `SessionStart` pointer (if any) naming a whole `SessionStart` record
/// below the end. Anything else falls back to the full scan, which decides.
///
/// The records skipped are neither CRC-checked nor chained here: the
/// iterator checks the CRC of every record it yields, and `verify` checks
/// everything, exactly as for the records below a mark of a full scan.
pub(super) fn mark_to_start_at(
    seg: &Segment,
    m: Mark,
    limit: u64,
) -> Option<(Mark, Option<(u64, u64)>)> {
    let h = seg.header;
    let header_end = FIRST_RECORD_OFFSET;
    // No more records than fit below the end; and an end whose every
    // SessionStart offset the mark's field can hold (else "none" is unsure).
    let most_records = (m.end.saturating_sub(header_end)) / MIN_RECORD_LEN;
    let consistent = h.marks_session_start()
        && (header_end..=limit).contains(&m.end)
        && m.end <= MARK_SESSION_START_LIMIT
        && m.end.is_multiple_of(RECORD_ALIGN as u64)
        && m.next_seq >= h.first_seq
        && m.next_seq - h.first_seq <= most_records
        && (m.end == header_end) == (m.next_seq == h.first_seq)
        && (m.next_seq > h.first_seq || m.hash == h.start_hash);
    if !consistent {
        return None;
    }
    let Some(offset) = m.session_start else {
        return Some((m, None));
    };
    if offset < header_end || offset + RECORD_HEADER_LEN as u64 > m.end {
        return None;
    }
    let rec = seg.map.with_view(offset as usize, m.end as usize, |b| {
        RecordHeader::read(b).ok()
    })?;
    let whole = offset + rec.record_len() as u64 <= m.end;
    let named =
        rec.kind == EntryKind::SessionStart as u8 && (h.first_seq..m.next_seq).contains(&rec.seq);
    (whole && named).then_some((m, Some((rec.seq, offset))))
}

/// Whether a segment with header `h` may follow a segment that ended with
/// `expect` (next seq, last hash), `None` meaning it is the first: it must name
/// the log's id, and continue the seq and the chain (a log starts at seq 0 and
/// never drops its head, so a later first seq means deleted segments).
pub(crate) fn continues(
    h: &SegmentHeader,
    log_id: &[u8; 16],
    expect: Option<(u64, EntryHash)>,
) -> Result<(), CorruptKind> {
    if h.log_id != *log_id {
        return Err(CorruptKind::ForeignLog);
    }
    let (seq, hash) = match expect {
        None if h.first_seq != 0 => return Err(CorruptKind::MissingSegment),
        None => (0, EntryHash::genesis()),
        Some(e) => e,
    };
    if h.first_seq != seq {
        return Err(CorruptKind::SeqGap {
            expected: seq,
            found: h.first_seq,
        });
    }
    if h.start_hash != hash {
        return Err(CorruptKind::ChainLink {
            expected: hash,
            actual: h.start_hash,
        });
    }
    Ok(())
}

/// Outcome of opening the segments of a directory.
pub(super) struct Opened {
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) tip: Tip,
    /// Records below this seq are durable (those after a lagging mark that
    /// recovery kept are not yet).
    pub(super) durable_next: u64,
    pub(super) active_sealed: bool,
    pub(super) report: RecoveryReport,
    pub(super) log_id: Option<[u8; 16]>,
    /// Seq and hash the first local segment continues, when the prefix
    /// below it is evicted.
    pub(super) evicted: Option<(u64, EntryHash)>,
}

impl Opened {
    /// Makes the recovered records readable and returns the view to publish.
    pub(super) fn publish(&self) -> Published {
        if let Some(last) = self.segments.last() {
            last.map.publish(self.tip.end);
        }
        Published {
            segments: Arc::new(self.segments.clone()),
            tip: self.tip,
            evicted: self.evicted,
        }
    }
}

/// Whether the durable mark `m` of the unsealed segment with header `h`
/// disagrees with its records, which `scan` verified with a checkpoint at the
/// mark's end: where and why if so. A read-only open believes a version 2
/// mark's end, seq, hash and `SessionStart` without reading the records below
/// it, so each must be what the records say at that point.
pub(super) fn mark_disagrees(m: &Mark, h: &SegmentHeader, scan: &Scan) -> Option<(u64, String)> {
    let why = match scan.checkpoint {
        None => format!("its end {} is not a record boundary", m.end),
        Some(at) if at.next_seq != m.next_seq => format!(
            "names seq {} at its end, the records {}",
            m.next_seq, at.next_seq
        ),
        Some(at) if at.hash != m.hash => {
            "its hash is not the hash of the record below its end".to_string()
        }
        Some(at) if h.marks_session_start() && at.session_start != m.session_start => format!(
            "names the last SessionStart at {:?}, the records at {:?}",
            m.session_start, at.session_start
        ),
        Some(_) => return None,
    };
    Some((Mark::slot_offset(m.generation) as u64, why))
}
