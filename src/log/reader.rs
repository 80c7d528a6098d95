//! Readers: snapshots of the committed prefix, record views, the iterator.

use std::sync::Arc;

use super::Published;
use crate::chain::EntryHash;
use crate::error::{CorruptKind, Error, Result};
use crate::format::{self, RecordRef, FIRST_RECORD_OFFSET};
use crate::payload::{resolve_logged, with_payload, PayloadArea};
use crate::schema::{read_archive, ArchivedLogEntry, EntryArchive, EntryKind, LogEntry};
use crate::segment::Segment;

pub(super) fn snapshot_of(p: &Published) -> Snapshot {
    let n = p.segments.len();
    let segs = p
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let end = if i + 1 == n {
                p.tip.end
            } else {
                s.footer.lock().map_or(p.tip.end, |f| f.data_end)
            };
            (s.clone(), end)
        })
        .collect();
    Snapshot {
        segs,
        next_seq: p.tip.next_seq,
        head: p.tip.hash,
        last_session_start: p.tip.last_session_start,
        evicted: p.evicted,
        payloads: None,
    }
}

/// A consistent, immutable view of a committed prefix of the log.
///
/// Example: [`Snapshot::iter`].
pub struct Snapshot {
    pub(super) segs: Vec<(Arc<Segment>, u64)>,
    pub(super) next_seq: u64,
    pub(super) head: EntryHash,
    pub(super) last_session_start: Option<u64>,
    /// Seq and hash the first segment continues, when the log's prefix
    /// below it is evicted.
    pub(super) evicted: Option<(u64, EntryHash)>,
    /// Where references to large items resolve (the store's payload area).
    pub(super) payloads: Option<Arc<PayloadArea>>,
}

/// One record, borrowed from the map: validated (CRC, then rkyv bytecheck),
/// never copied (but for a record of a segment before format 9, whose entry
/// the view holds converted: DESIGN.md, "Schema versions").
///
/// Example: [`Snapshot::iter`].
#[derive(Debug, Clone)]
pub struct RecordView<'a> {
    /// Sequence number.
    pub seq: u64,
    /// Timestamp, ms.
    pub ts: u64,
    /// Entry kind.
    pub kind: EntryKind,
    /// This record's chain hash.
    pub hash: EntryHash,
    /// The previous record's hash.
    pub prev_hash: EntryHash,
    /// The archived entry ([`RecordView::entry`]).
    entry: EntryArchive<'a>,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Where the entry's references to large items resolve.
    pub(crate) payloads: Option<&'a PayloadArea>,
}

impl Snapshot {
    /// Seq of the first record held locally: 0, unless the log's prefix is
    /// evicted to an archive ([`Snapshot::evicted`]).
    ///
    /// Example: [`Snapshot::iter`].
    pub fn first_seq(&self) -> u64 {
        self.segs.first().map_or(0, |(s, _)| s.header.first_seq)
    }

    /// The seqs of the log's evicted prefix (first and last), if its
    /// segments were evicted to an archive: reading them fails with
    /// [`Error::Evicted`] until they are fetched back.
    ///
    /// Example: [`EVICTED_FILE`](crate::log::EVICTED_FILE).
    pub fn evicted(&self) -> Option<(u64, u64)> {
        self.evicted.map(|(next, _)| (0, next - 1))
    }

    /// Seq and hash the first local segment continues, when the prefix is
    /// evicted.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn evicted_end(&self) -> Option<(u64, EntryHash)> {
        self.evicted
    }

    /// Seq of the log's first record, local or evicted.
    pub(crate) fn log_start(&self) -> u64 {
        match self.evicted {
            Some(_) => 0,
            None => self.first_seq(),
        }
    }

    /// The error a read of the evicted prefix gets.
    fn evicted_error(&self) -> Option<Error> {
        let (first_seq, last_seq) = self.evicted()?;
        let session = self
            .segs
            .first()
            .and_then(|(s, _)| s.path.parent()?.file_name())
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Some(Error::Evicted {
            session,
            first_seq,
            last_seq,
        })
    }

    /// Seq of the next record to be written.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Seq and hash of the last record.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn head(&self) -> Option<(u64, EntryHash)> {
        (self.next_seq > self.first_seq()).then(|| (self.next_seq - 1, self.head))
    }

    /// Seq of the last `SessionStart`.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn last_session_start(&self) -> Option<u64> {
        self.last_session_start
    }

    /// Bytes of record data in the snapshot.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn bytes(&self) -> u64 {
        self.segs
            .iter()
            .map(|(_, end)| end - FIRST_RECORD_OFFSET)
            .sum()
    }

    /// Asks the kernel to read in, ahead, the mapped bytes of every segment
    /// from the one that holds `seq` on: a replay from `seq` is about to read
    /// them all, and a cold one then waits on a few large reads, not a page
    /// fault at a time.
    pub(crate) fn will_read_from(&self, seq: u64) {
        let first = self
            .segs
            .partition_point(|(s, _)| s.header.first_seq <= seq)
            .saturating_sub(1);
        for (seg, end) in &self.segs[first.min(self.segs.len())..] {
            seg.map
                .will_read(FIRST_RECORD_OFFSET as usize, *end as usize);
        }
    }

    /// Records, in order, from the first (seq 0): a log whose prefix is
    /// evicted yields [`Error::Evicted`] first.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("What changed?"), Item::assistant_text("Two commits.")])?;
    ///
    /// let snap = store.snapshot(id)?;
    /// let mut texts = Vec::new();
    /// for record in snap.iter() {
    ///     let record = record?; // checked (CRC, archive) as it is read
    ///     texts.extend(record.entry().items().iter().filter_map(|item| item.to_item().text()));
    /// }
    /// assert_eq!(texts, ["What changed?", "Two commits."]);
    /// let answer = snap.iter_from(2).next().expect("seq 2 is there")?;
    /// assert!(answer.wire_line()?.contains(r#""text":"Two commits.""#));
    /// # Ok(()) }
    /// ```
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// Records from `seq` on, found through the sparse index. A `seq` in
    /// the evicted prefix yields [`Error::Evicted`].
    ///
    /// Example: [`Snapshot::iter`].
    pub fn iter_from(&self, seq: u64) -> Iter<'_> {
        if seq < self.evicted.map_or(0, |(next, _)| next) {
            return Iter {
                snap: self,
                seg: 0,
                offset: FIRST_RECORD_OFFSET,
                seq,
                skip_to: seq,
                done: false,
                error: self.evicted_error(),
            };
        }
        let seq = seq.max(self.first_seq());
        let seg = self
            .segs
            .partition_point(|(s, _)| s.header.first_seq <= seq)
            .saturating_sub(1);
        let mut error = None;
        let (offset, at_seq) = match self.segs.get(seg) {
            Some((s, _)) => {
                if let Err(e) = s.ensure_index() {
                    error = Some(e);
                }
                let index = s.index.read();
                let i = index.partition_point(|e| e.seq <= seq);
                match i.checked_sub(1).map(|i| index[i]) {
                    Some(e) => (e.offset, e.seq),
                    None => (FIRST_RECORD_OFFSET, s.header.first_seq),
                }
            }
            None => (FIRST_RECORD_OFFSET, seq),
        };
        Iter {
            snap: self,
            seg,
            offset,
            seq: at_seq,
            skip_to: seq,
            done: seq >= self.next_seq,
            error,
        }
    }

    /// Seq of the last `SessionStart` at or before `seq`: where a replay
    /// that ends at `seq` starts (a fork's parent is read this way). The
    /// tip and the sealed segments' footers say it at once; only the
    /// segment that holds `seq` (and, in a log without footers, the ones
    /// before it) is walked, by record headers alone. A header whose kind
    /// byte is damaged can only make the answer earlier, never wrong: the
    /// replay from there meets the real `SessionStart`, which resets the
    /// history, and checks every record's CRC on the way.
    pub(crate) fn session_start_at_or_before(&self, seq: u64) -> Result<Option<u64>> {
        if let Some(s) = self.last_session_start.filter(|&s| s <= seq) {
            return Ok(Some(s));
        }
        if self.segs.is_empty() {
            return Ok(None);
        }
        let at = self
            .segs
            .partition_point(|(s, _)| s.header.first_seq <= seq)
            .saturating_sub(1);
        // The last segment before `at` with a footer says what came before it.
        let mut walk_from = 0;
        let mut found = None;
        for j in (0..at).rev() {
            if let Some(f) = *self.segs[j].0.footer.lock() {
                found = f.last_session_start;
                walk_from = j + 1;
                break;
            }
        }
        for (seg, end) in &self.segs[walk_from..=at] {
            let bytes = seg.records(FIRST_RECORD_OFFSET as usize, *end as usize);
            let mut off = 0;
            loop {
                let rec = format::next_record(bytes, off)
                    .map_err(|kind| seg.corrupt(FIRST_RECORD_OFFSET + off as u64, None, kind))?;
                let Some(rec) = rec else { break };
                if rec.header.seq > seq {
                    return Ok(found);
                }
                if rec.header.kind == EntryKind::SessionStart as u8 {
                    found = Some(rec.header.seq);
                }
                off += rec.len();
            }
        }
        Ok(found)
    }

    /// Owned entries from `seq` on.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn entries_from(
        &self,
        seq: u64,
    ) -> impl Iterator<Item = Result<(u64, EntryHash, LogEntry)>> + '_ {
        self.iter_from(seq)
            .map(|r| r.and_then(|v| Ok((v.seq, v.hash, v.to_entry()?))))
    }
}

impl RecordView<'_> {
    /// The archived entry, checked.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn entry(&self) -> &ArchivedLogEntry {
        self.entry.get()
    }
}

impl<'a> RecordView<'a> {
    /// The entry, as the record holds it (borrowed for the snapshot's
    /// life) or converted from an older segment's layout.
    pub(crate) fn into_archive(self) -> EntryArchive<'a> {
        self.entry
    }
}

impl RecordView<'_> {
    /// Calls `f` with each item of this entry that is kept in the store's
    /// payload area, read and checked (length, BLAKE3, archive), in order.
    ///
    /// ```
    /// # use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(dir.path())?;
    /// # let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// # store.save_delta(id, &mut head, &[Item::user_text("test result: ok\n".repeat(6_000))])?;
    /// // A session of one pasted build log of 96 KB, which went to the payload area.
    /// let mut apart = Vec::new();
    /// for record in store.snapshot(id)?.iter() {
    ///     record?.for_each_payload_item(&mut |item| apart.push(item.to_item().text().map_or(0, |t| t.len())))?;
    /// }
    /// assert_eq!(apart, [96_000]);
    /// # Ok(()) }
    /// ```
    pub fn for_each_payload_item(
        &self,
        f: &mut dyn FnMut(&crate::schema::ArchivedLoggedItem),
    ) -> Result<()> {
        for item in self.entry().items() {
            if let Some(r) = item.payload_ref() {
                with_payload(self.payloads, self.seq, &r, |i| f(i))?;
            }
        }
        Ok(())
    }

    /// The owned entry, with every item that lives in the store's payload
    /// area read back in place of its reference: the entry as it was saved.
    ///
    /// Example: [`Snapshot::iter`].
    pub fn to_entry(&self) -> Result<LogEntry> {
        let mut entry = self.entry().to_entry();
        let archived = self.entry().items();
        if archived.iter().any(|i| i.payload_ref().is_some()) {
            for (item, a) in entry.items_mut().iter_mut().zip(archived) {
                if a.payload_ref().is_some() {
                    *item = resolve_logged(self.payloads, self.seq, a)?;
                }
            }
        }
        Ok(entry)
    }
}

// Only the archive reads these.
#[cfg_attr(not(feature = "archive"), allow(dead_code))]
/// What of a snapshot can be archived: its sealed segments, and the synced
/// prefix of its active segment.
pub(crate) struct Archivable {
    pub(crate) sealed: Vec<super::SealedSegment>,
    pub(crate) tail: Option<TailPoint>,
}

#[cfg_attr(not(feature = "archive"), allow(dead_code))]
/// The synced prefix of the active segment: the records below `end`.
#[derive(Debug, Clone)]
pub(crate) struct TailPoint {
    pub(crate) path: std::path::PathBuf,
    pub(crate) first_seq: u64,
    pub(crate) end: u64,
    pub(crate) next_seq: u64,
    pub(crate) hash: EntryHash,
}

#[cfg_attr(not(feature = "archive"), allow(dead_code))]
impl Snapshot {
    /// The log's id, from its first segment.
    pub(crate) fn log_id(&self) -> Option<[u8; 16]> {
        self.segs.first().map(|(s, _)| s.header.log_id)
    }

    /// The sealed segments (whole, as their footers describe them), and the
    /// active segment up to its durable mark or the snapshot's end, whichever
    /// is lower: bytes a power loss cannot take back (no tail when the
    /// active segment holds no synced record).
    pub(crate) fn archivable(&self) -> Archivable {
        let mut sealed = Vec::new();
        let mut tail = None;
        for (seg, end) in &self.segs {
            let h = seg.header;
            match *seg.footer.lock() {
                Some(f) if f.data_end == *end && f.record_count > 0 => {
                    sealed.push(super::SealedSegment {
                        path: seg.path.clone(),
                        first_seq: h.first_seq,
                        last_seq: h.first_seq + f.record_count - 1,
                        start_hash: h.start_hash,
                        last_hash: f.last_hash,
                        len_bytes: seg.len(),
                    });
                    continue;
                }
                _ => {}
            }
            // The durable point: what this process's last sync covered (the
            // mark on disk lags it by one sync), or the mark.
            let synced = *seg.synced.lock();
            let durable = seg
                .read_mark()
                .map(|m| (m.end, m.next_seq, m.hash))
                .into_iter()
                .chain(synced.map(|p| (p.end, p.next_seq, p.hash)))
                .max_by_key(|p| p.0);
            let Some(durable) = durable else { continue };
            let (end, next_seq, hash) = if durable.0 <= *end {
                durable
            } else {
                (*end, self.next_seq, self.head)
            };
            if next_seq > h.first_seq {
                tail = Some(TailPoint {
                    path: seg.path.clone(),
                    first_seq: h.first_seq,
                    end,
                    next_seq,
                    hash,
                });
            }
        }
        Archivable { sealed, tail }
    }
}

/// Iterator over a [`Snapshot`]'s records.
///
/// Example: [`Snapshot::iter`].
pub struct Iter<'a> {
    snap: &'a Snapshot,
    seg: usize,
    offset: u64,
    seq: u64,
    skip_to: u64,
    done: bool,
    /// An error found while seeking, yielded first.
    error: Option<Error>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        loop {
            if self.done {
                return None;
            }
            let (seg, end) = self.snap.segs.get(self.seg)?;
            if self.offset >= *end {
                self.seg += 1;
                self.offset = FIRST_RECORD_OFFSET;
                continue;
            }
            match self.read(seg, *end) {
                Ok(Some(view)) => return Some(Ok(view)),
                Ok(None) => continue,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl<'a> Iter<'a> {
    fn read(&mut self, seg: &'a Arc<Segment>, end: u64) -> Result<Option<RecordView<'a>>> {
        let at = RecordPos {
            seg: self.seg,
            offset: self.offset,
            seq: self.seq,
        };
        let (rec, bytes) = self.snap.header_at(seg, end, at)?;
        self.offset += rec.len() as u64;
        self.seq += 1;
        if at.seq < self.skip_to {
            return Ok(None);
        }
        if self.seq >= self.snap.next_seq {
            self.done = true;
        }
        self.snap.check(seg, at, rec, bytes).map(Some)
    }
}

/// Where a record sits in a snapshot: its segment's place, its offset in
/// that segment, and the seq it must carry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordPos {
    seg: usize,
    offset: u64,
    seq: u64,
}

impl Snapshot {
    /// Visits the places of the records from the last back to the one at
    /// `from`, until `visit` returns false. The records are found by their
    /// headers (magic, bounds and seq order checked, as seeking does), a
    /// run at a time: the records between two entries of their segment's
    /// sparse index, so that a walk that stops early reads only the end of
    /// the log. Each record's CRC and archive are checked when it is read,
    /// through [`Snapshot::read_at`].
    pub(crate) fn visit_back(
        &self,
        from: u64,
        mut visit: impl FnMut(RecordPos) -> Result<bool>,
    ) -> Result<()> {
        let from = from.max(self.first_seq());
        let mut next = self.next_seq;
        for (i, (seg, end)) in self.segs.iter().enumerate().rev() {
            let seg_next = next;
            next = seg.header.first_seq;
            if seg_next <= from {
                break;
            }
            seg.ensure_index()?;
            // Where runs start: the segment's first record, then each index
            // entry inside what this snapshot holds.
            let mut starts = vec![(FIRST_RECORD_OFFSET, seg.header.first_seq)];
            starts.extend(
                seg.index
                    .read()
                    .iter()
                    .filter(|e| {
                        e.offset > FIRST_RECORD_OFFSET && e.offset < *end && e.seq < seg_next
                    })
                    .map(|e| (e.offset, e.seq)),
            );
            let mut stop = (*end, seg_next);
            for &(offset, seq) in starts.iter().rev() {
                if stop.1 <= from {
                    return Ok(());
                }
                let mut at = RecordPos {
                    seg: i,
                    offset,
                    seq,
                };
                let mut run = Vec::new();
                while at.offset < stop.0 {
                    let (rec, _) = self.header_at(seg, *end, at)?;
                    if at.seq >= from {
                        run.push(at);
                    }
                    at.offset += rec.len() as u64;
                    at.seq += 1;
                }
                if (at.offset, at.seq) != stop {
                    let why = format!(
                        "records from offset {offset} end at offset {} seq {}, not at the \
                         next index entry's offset {} seq {}",
                        at.offset, at.seq, stop.0, stop.1
                    );
                    return Err(seg.corrupt(offset, Some(seq), CorruptKind::Footer(why)));
                }
                for at in run.into_iter().rev() {
                    if !visit(at)? {
                        return Ok(());
                    }
                }
                stop = (offset, seq);
            }
        }
        Ok(())
    }

    /// The record at `at`, checked as every read is.
    pub(crate) fn read_at(&self, at: RecordPos) -> Result<RecordView<'_>> {
        let (seg, end) = &self.segs[at.seg];
        let (rec, bytes) = self.header_at(seg, *end, at)?;
        self.check(seg, at, rec, bytes)
    }

    /// The record at `at`, its header read and its seq checked, with the
    /// committed bytes from it to its segment's end.
    fn header_at<'s>(
        &self,
        seg: &'s Segment,
        end: u64,
        at: RecordPos,
    ) -> Result<(RecordRef<'s>, &'s [u8])> {
        let bytes = seg.records(at.offset as usize, end as usize);
        let corrupt = |kind| seg.corrupt(at.offset, Some(at.seq), kind);
        let rec = format::read_record(bytes, 0).map_err(corrupt)?;
        if rec.header.seq != at.seq {
            return Err(corrupt(CorruptKind::SeqGap {
                expected: at.seq,
                found: rec.header.seq,
            }));
        }
        Ok((rec, bytes))
    }

    /// Checks the CRC and the archive of `rec`, read at `at` from `bytes`,
    /// and finds its hash in what follows it.
    fn check<'s>(
        &'s self,
        seg: &Segment,
        at: RecordPos,
        rec: RecordRef<'s>,
        bytes: &'s [u8],
    ) -> Result<RecordView<'s>> {
        let corrupt = |kind| seg.corrupt(at.offset, Some(at.seq), kind);
        let h = rec.header;
        let len = rec.len();
        rec.check_crc().map_err(corrupt)?;
        let entry = read_archive(rec.payload(), seg.header.version)
            .map_err(|e| corrupt(CorruptKind::InvalidArchive(e)))?;
        let kind = EntryKind::from_code(h.kind).ok_or_else(|| {
            corrupt(CorruptKind::InvalidArchive(format!(
                "unknown kind {}",
                h.kind
            )))
        })?;
        let hash = if len < bytes.len() {
            format::prev_hash_of(&bytes[len..]).ok_or_else(|| corrupt(CorruptKind::Truncated))?
        } else if let Some((next, _)) = self.segs.get(at.seg + 1) {
            next.header.start_hash
        } else {
            self.head
        };
        Ok(RecordView {
            seq: h.seq,
            ts: h.ts,
            kind,
            hash,
            prev_hash: h.prev_hash,
            entry,
            payload_len: h.payload_len,
            payloads: self.payloads.as_deref(),
        })
    }
}
