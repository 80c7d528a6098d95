//! The append path: encoding batches, chaining and writing records, rolls
//! and preparing the next segment.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use rkyv::util::AlignedVec;

use super::commit::Unsettled;
use super::{Durability, ExpectHead, Log, Tip, PAGE, WRITEBACK_CHUNK};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::format::{
    self, Footer, IndexEntry, RecordHeader, SegmentHeader, FIRST_RECORD_OFFSET, FOOTER_LEN,
    FORMAT_VERSION, INDEX_ENTRY_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::schema::{Archivable, EntryKind, LogEntry, LoggedPayloadRef, MeasureItem};
use crate::segment::{ahead, Prepared, Segment, Space, INDEX_STRIDE_BYTES};

thread_local! {
    /// Each thread's buffer for encoding its batches, reused across calls
    /// (taken out while in use, so a nested append gets a fresh one).
    static ENCODE_BUFFER: Cell<AlignedVec> = Cell::new(AlignedVec::new());
}

/// A thread keeps its encoding buffer only up to this capacity.
const MAX_KEPT_ENCODE_BUFFER: usize = 8 << 20;

/// The records an active segment holds, at least, for [`Log::close`] to
/// seal it. A read-only view of an unsealed segment starts at its durable
/// mark and has no index below it, so reaching a record there (a fork at
/// a seq, a history tail) walks the record headers from the segment's
/// start, faulting in its pages: about 0.2 ms a MiB here. A sealed
/// segment's footer holds the index. The next append after a seal starts
/// a new segment, so every segment sealed this way holds at least this
/// much: a session closed and reopened often gets one more segment per
/// 8 MiB at most.
pub(super) const SEAL_AT_CLOSE_BYTES: u64 = 8 << 20;

/// One record of an encoded batch.
pub(super) struct Encoded {
    /// Offset of its (blank) header in the batch buffer.
    pub(super) start: usize,
    pub(super) payload_len: usize,
    pub(super) kind: EntryKind,
    pub(super) ts: u64,
}

impl Encoded {
    /// Fills in this record's header in `buf` (the batch buffer it was
    /// encoded into) as record `seq` after the record whose hash is `prev`,
    /// with its CRC, and returns its chain hash. `continues` marks a record
    /// of a batch that more records follow (outside the chain).
    fn seal(&self, buf: &mut [u8], prev: EntryHash, seq: u64, continues: bool) -> EntryHash {
        let header = RecordHeader {
            prev_hash: prev,
            payload_len: self.payload_len as u32,
            kind: self.kind as u8,
            seq,
            ts: self.ts,
            continues,
        };
        format::write_record_header(&mut buf[self.start..], &header)
    }
}

/// Encodes `entries` into `buf`, record after record, framed by the record
/// codec (`format::begin_record`, `format::end_record`): a blank header, the
/// rkyv payload, zero padding. Every record starts 16-byte aligned, so each
/// payload archives exactly as it would at offset 0. With `line_check`,
/// which measures an item kept in the payload area, an entry whose wire
/// line import could not read back is refused
/// ([`LogEntry::check_line_len`]).
fn encode_batch<E: Archivable>(
    entries: &[E],
    buf: &mut AlignedVec,
    out: &mut Vec<Encoded>,
    mut line_check: Option<&mut MeasureItem<'_>>,
) -> Result<()> {
    buf.clear();
    for entry in entries {
        let start = format::begin_record(buf);
        *buf = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(entry, std::mem::take(buf))
            .map_err(|e| Error::invalid(format!("cannot archive entry: {e}")))?;
        let payload_len = format::end_record(buf, start)
            .map_err(|e| Error::invalid(format!("entry of {} bytes is too large", e.len)))?;
        let payload = &buf[start + RECORD_HEADER_LEN..][..payload_len as usize];
        if let Some(external) = line_check.as_deref_mut() {
            LogEntry::check_archived_line_len(payload, entry.external_len(), external)?;
        }
        out.push(Encoded {
            start,
            payload_len: payload_len as usize,
            kind: entry.kind(),
            ts: entry.ts(),
        });
    }
    Ok(())
}

/// The hash `entry` gets as record `seq` after a record with hash `prev`:
/// the same bytes the writer produces (the writer alone checks the line
/// length, since only it can read the items in the payload area).
pub(crate) fn entry_hash(prev: &EntryHash, seq: u64, entry: &LogEntry) -> Result<EntryHash> {
    let mut buf = AlignedVec::new();
    let mut records = Vec::with_capacity(1);
    encode_batch(std::slice::from_ref(entry), &mut buf, &mut records, None)?;
    // The magic is outside the chain: any batch gives the same hash.
    Ok(records[0].seal(&mut buf, *prev, seq, false))
}

pub(super) struct Writer {
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) tip: Tip,
    pub(super) last_indexed: Option<u64>,
    pub(super) active_sealed: bool,
    pub(super) prepared: Option<JoinHandle<Result<Prepared>>>,
    pub(super) prep_counter: u64,
    /// Offset from which writeback has not been started.
    pub(super) writeback_from: u64,
    /// Offset up to which the active segment's pages were asked for
    /// (`segment::ahead`).
    pub(super) populated_to: u64,
    /// The last roll's settle is left for later (a log whose commits go
    /// through the journal): `maybe_prepare` starts it on a thread once
    /// the new segment is half full.
    pub(super) settle_later: bool,
}

impl Log {
    /// Appends one entry with the log's default durability.
    ///
    /// Example: [the module](crate::log#example).
    pub fn append(&self, entry: &LogEntry) -> Result<(u64, EntryHash)> {
        let r = self.append_batch(
            std::slice::from_ref(entry),
            self.inner.opts.durability,
            ExpectHead::Any,
        )?;
        Ok(r[0])
    }

    /// Appends one entry with the given durability.
    ///
    /// Example: [`Log::append_batch`].
    pub fn append_with(
        &self,
        entry: &LogEntry,
        durability: Durability,
    ) -> Result<(u64, EntryHash)> {
        let r = self.append_batch(std::slice::from_ref(entry), durability, ExpectHead::Any)?;
        Ok(r[0])
    }

    /// Appends entries in order under one lock, and (with `Sync`) one sync.
    ///
    /// Nothing is written unless the log's head is what `expect_head` says;
    /// otherwise the result is [`Error::HeadConflict`]. The batch is in the
    /// log whole or not at all, after a crash too: it goes into one segment,
    /// and recovery cuts a batch whose last record a crash kept from the
    /// disk (see DESIGN.md, recovery step 6).
    ///
    /// ```
    /// use session_store::log::ExpectHead;
    /// use session_store::schema::{group_delta, now_ms};
    /// use session_store::{Durability, Error, Item, Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let log = Log::open(dir.path(), LogOptions::default())?;
    /// let entries = group_delta(&[Item::user_text("Ship it?"), Item::assistant_text("Shipped.")], now_ms());
    /// let written = log.append_batch(&entries, Durability::Sync, ExpectHead::Empty)?;
    /// assert_eq!(written.len(), 2);
    ///
    /// // A second writer that thought the log empty writes nothing.
    /// let late = log.append_batch(&entries, Durability::Sync, ExpectHead::Empty);
    /// assert!(matches!(late, Err(Error::HeadConflict { .. })));
    /// # Ok(()) }
    /// ```
    pub fn append_batch(
        &self,
        entries: &[LogEntry],
        durability: Durability,
        expect_head: ExpectHead,
    ) -> Result<Vec<(u64, EntryHash)>> {
        self.append_archivable(entries, durability, expect_head)
    }

    /// [`Log::append_batch`] of any entries that archive as `LogEntry`s
    /// (borrowed ones, for `Store::save_delta`).
    pub(crate) fn append_archivable<E: Archivable>(
        &self,
        entries: &[E],
        durability: Durability,
        expect_head: ExpectHead,
    ) -> Result<Vec<(u64, EntryHash)>> {
        if self.inner.writer.is_none() {
            return Err(Error::invalid("log was opened read-only"));
        }
        for entry in entries {
            entry.check()?;
        }
        // Encoding needs no lock: concurrent appenders encode in parallel, and
        // an entry that cannot be encoded is refused without poisoning.
        let mut buf = ENCODE_BUFFER.try_with(Cell::take).unwrap_or_default();
        let mut records = Vec::with_capacity(entries.len());
        let area = self.payloads.as_deref();
        let mut measure = |r: &LoggedPayloadRef| crate::payload::item_json_len(area, r);
        let encoded = encode_batch(entries, &mut buf, &mut records, Some(&mut measure));
        let result =
            encoded.and_then(|()| self.append_encoded(&mut buf, &records, durability, expect_head));
        if buf.capacity() <= MAX_KEPT_ENCODE_BUFFER {
            // Fails only while the thread's locals are being destroyed.
            let _ = ENCODE_BUFFER.try_with(|c| c.set(buf));
        }
        result
    }

    /// The locked part of [`Log::append_batch`]: the batch's records are
    /// encoded in `buf` with blank headers.
    pub(super) fn append_encoded(
        &self,
        buf: &mut [u8],
        records: &[Encoded],
        durability: Durability,
        expect_head: ExpectHead,
    ) -> Result<Vec<(u64, EntryHash)>> {
        let inner = &*self.inner;
        let Some(writer) = &inner.writer else {
            return Err(Error::invalid("log was opened read-only"));
        };
        let mut w = writer.lock();
        if inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        if let Some(expected) = expect_head.wanted() {
            let actual = (w.tip.next_seq > 0).then_some(w.tip.hash);
            if actual != expected {
                return Err(Error::HeadConflict {
                    log: inner.dir.clone(),
                    expected,
                    actual,
                });
            }
        }
        let mut out = Vec::with_capacity(records.len());
        let result = self.write_entries(&mut w, buf, records, &mut out);
        // Publish only a batch written whole; after a failure the writer is
        // poisoned and readers keep the last good view.
        if result.is_ok() && !out.is_empty() {
            let mut p = inner.published.lock();
            // Compare identity, not names: a roll out of an empty segment
            // replaces it with a file of the same name.
            let rolled = p.segments.len() != w.segments.len()
                || !matches!(
                    (p.segments.last(), w.segments.last()),
                    (Some(a), Some(b)) if Arc::ptr_eq(a, b)
                );
            if rolled {
                p.segments = Arc::new(w.segments.clone());
            }
            p.tip = w.tip;
            drop(p);
            inner.committed.notify_all();
        }
        if let Err(e) = result {
            inner.poisoned.store(true, Ordering::Release);
            inner.synced.notify_all();
            return Err(e);
        }
        self.maybe_prepare(&mut w);
        drop(w);
        if durability == Durability::Sync {
            if let Some(&(last, _)) = out.last() {
                self.wait_durable(last)?;
            }
        }
        Ok(out)
    }

    /// Chains the encoded records (headers, hashes) and writes them with as
    /// few `pwrite`s as the segment boundaries allow. Records are
    /// position-independent, so a record that does not fit is written to the
    /// next segment unchanged.
    ///
    /// A batch of several records goes into one segment (the log rolls
    /// first when the active one cannot hold it all), and every record of
    /// it but the last gets [`format::RECORD_MAGIC_BATCH`]: after a crash in
    /// the middle of its write, recovery cuts what reached the disk of it
    /// (see DESIGN.md, "The durable mark, and recovery"), so a batch is in
    /// the log whole or not at all.
    fn write_entries(
        &self,
        w: &mut Writer,
        buf: &mut [u8],
        records: &[Encoded],
        out: &mut Vec<(u64, EntryHash)>,
    ) -> Result<()> {
        let mut batch = records.len() > 1;
        if batch {
            let start = records[0].start;
            let len = (buf.len() - start) as u64;
            // Room for the index entries the batch may add, too.
            let need = len + (len / INDEX_STRIDE_BYTES + 2) * INDEX_ENTRY_LEN as u64;
            let holds = |w: &Writer| {
                !w.active_sealed
                    && w.segments.last().is_some_and(|s| {
                        s.header.version == FORMAT_VERSION && s.fits(w.tip.end, need)
                    })
            };
            if !holds(w) {
                self.roll(w, need)?;
                // A fresh segment is made to hold it; were it not, the batch
                // would span segments and is written unmarked, as before.
                batch = holds(w);
            }
        }
        // `buf[flushed..]` is not written yet; it goes to the active segment at `at`.
        let mut flushed = 0usize;
        let mut at = w.tip.end;
        for (k, r) in records.iter().enumerate() {
            let rec_end = records.get(k + 1).map_or(buf.len(), |n| n.start);
            let rec_len = (rec_end - r.start) as u64;
            let mut offset = at + (r.start - flushed) as u64;
            // A segment of an older version is never extended: a reader of
            // that version would take records of today's schema for damage.
            let fits = !w.active_sealed
                && w.segments
                    .last()
                    .is_some_and(|s| s.header.version == FORMAT_VERSION && s.fits(offset, rec_len));
            if !fits {
                self.flush(w, &buf[flushed..r.start], at)?;
                flushed = r.start;
                self.roll(w, rec_len)?;
                at = w.tip.end;
                offset = at;
            }
            let seq = w.tip.next_seq;
            let hash = r.seal(buf, w.tip.hash, seq, batch && k + 1 < records.len());
            if w.last_indexed
                .is_none_or(|last| offset - last >= INDEX_STRIDE_BYTES)
            {
                let seg = w.segments.last().expect("a log always has a segment");
                seg.index.write().push(IndexEntry { seq, offset });
                w.last_indexed = Some(offset);
            }
            out.push((seq, hash));
            w.tip.hash = hash;
            w.tip.next_seq += 1;
            if r.kind == EntryKind::SessionStart {
                w.tip.last_session_start = Some(seq);
                w.tip.session_start = Some(offset);
            }
        }
        self.flush(w, &buf[flushed..], at)
    }

    /// Writes encoded records at `at` in the active segment and makes them
    /// readable through its map (not yet published to snapshots).
    fn flush(&self, w: &mut Writer, bytes: &[u8], at: u64) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let seg = w.segments.last().expect("a log always has a segment");
        seg.write_at(at, bytes)?;
        let end = at + bytes.len() as u64;
        seg.map.publish(end);
        w.tip.end = end;
        // Start writeback early, so that the seal's fdatasync at the next
        // roll (and a Sync commit) finds little left to write.
        if end - w.writeback_from >= WRITEBACK_CHUNK {
            seg.start_writeback(w.writeback_from, end);
            w.writeback_from = end;
        }
        // Ask for the next pages while half of the window is still ahead.
        let window = match self.inner.opts.populate_ahead && !self.is_parked() {
            true => ahead::window(FIRST_RECORD_OFFSET, end),
            false => 0,
        };
        if window > 0 && end + window / 2 > w.populated_to {
            let from = w.populated_to.max(end & !(PAGE - 1));
            w.populated_to = end + window;
            seg.populate_ahead(from, w.populated_to);
        }
        Ok(())
    }

    /// How this log's next segment gets its disk space: sparse until the
    /// log first syncs its segment for a commit, zero-filled from then on.
    /// A log whose commits go through the store's journal syncs its
    /// segments only at checkpoints: sparse too.
    fn space(&self) -> Space {
        let journaled = self
            .inner
            .journal
            .get()
            .is_some_and(|p| p.journal.takes_frames());
        match self.inner.syncs.load(Ordering::Relaxed) && !journaled {
            true => Space::Zeroed,
            false => Space::Sparse,
        }
    }

    /// Runs the last roll's settle on a thread of its own. A failure
    /// poisons the log and the next append reports it. If no thread can be
    /// had, whatever needs the settle does it.
    fn settle_in_background(&self) {
        let settle = self.inner.settle.clone();
        let _ = std::thread::Builder::new()
            .name("session-store-settle".into())
            .spawn(move || settle.run());
    }

    /// Whether this log's commits go through the store's journal.
    fn journal_takes_frames(&self) -> bool {
        self.inner
            .journal
            .get()
            .is_some_and(|p| p.journal.takes_frames())
    }

    pub(super) fn maybe_prepare(&self, w: &mut Writer) {
        if w.settle_later {
            let half = w.segments.last().is_some_and(|s| w.tip.end >= s.len() / 2);
            if half && self.inner.opts.prepare_ahead && !self.is_parked() {
                w.settle_later = false;
                self.settle_in_background();
            }
        }
        // A sparse file is made in an instant: only zero-filled ones are
        // worth a thread.
        if !self.inner.opts.prepare_ahead
            || w.prepared.is_some()
            || self.space() == Space::Sparse
            || self.is_parked()
        {
            return;
        }
        let Some(seg) = w.segments.last() else { return };
        if w.tip.end < seg.len() / 2 {
            return;
        }
        w.prep_counter += 1;
        let path = self
            .inner
            .dir
            .join(format!("next-{}-{}.prep", w.tip.next_seq, w.prep_counter));
        let space = self.space();
        let len = self.inner.opts.next_segment_len(seg.len());
        let hook = self.inner.opts.hook.clone();
        w.prepared = Some(std::thread::spawn(move || {
            Prepared::create(path, len, space, &hook)
        }));
    }

    /// Prepares the next segment in the foreground at `len` bytes or, when
    /// the disk has no room for that, at the largest halving of it that
    /// fits, down to `min_len` (the record that needs the roll): after a full
    /// disk, freeing a little space is enough to go on. Later rolls grow
    /// from the smaller size again.
    fn prepare_fitting(
        &self,
        w: &mut Writer,
        len: u64,
        min_len: u64,
        space: Space,
    ) -> Result<Prepared> {
        let inner = &*self.inner;
        let mut len = len.max(min_len);
        loop {
            w.prep_counter += 1;
            let path = inner
                .dir
                .join(format!("next-{}-{}.prep", w.tip.next_seq, w.prep_counter));
            match Prepared::create(path, len, space, &inner.opts.hook) {
                Err(e) if e.is_storage_full() && len > min_len => {
                    len = (len / 2).div_ceil(PAGE) * PAGE;
                    len = len.max(min_len);
                }
                result => return result,
            }
        }
    }

    /// Seals `active`, the active segment, which holds records: the footer
    /// with the tip's state and the index, then the archiver is told.
    fn seal_active(&self, w: &Writer, active: &Segment) -> Result<()> {
        let footer = active.seal(Footer {
            record_count: w.tip.next_seq - active.header.first_seq,
            first_seq: active.header.first_seq,
            last_hash: w.tip.hash,
            last_session_start: w.tip.last_session_start,
            data_end: w.tip.end,
            index_offset: 0,
            index_count: 0,
            index_crc: 0,
        })?;
        *active.footer.lock() = Some(footer);
        if let Some(on_seal) = &self.inner.opts.on_seal {
            on_seal(&super::SealedSegment {
                path: active.path.clone(),
                first_seq: active.header.first_seq,
                last_seq: w.tip.next_seq - 1,
                start_hash: active.header.start_hash,
                last_hash: w.tip.hash,
                len_bytes: active.len(),
            });
        }
        Ok(())
    }

    /// At close: seals the active segment when it holds at least
    /// [`SEAL_AT_CLOSE_BYTES`] of records, so that a later read-only view
    /// finds any of them through the footer's index; the next append
    /// starts a new segment. Returns the segment it sealed, not yet
    /// synced.
    pub(super) fn seal_at_close(&self) -> Result<Option<Arc<Segment>>> {
        let Some(writer) = &self.inner.writer else {
            return Ok(None);
        };
        let mut w = writer.lock();
        let active = w
            .segments
            .last()
            .expect("a log always has a segment")
            .clone();
        if w.active_sealed || w.tip.end < FIRST_RECORD_OFFSET + SEAL_AT_CLOSE_BYTES {
            return Ok(None);
        }
        // As at a roll: the segment before must be durable first.
        self.inner.settle.run()?;
        self.seal_active(&w, &active)?;
        w.active_sealed = true;
        Ok(Some(active))
    }

    /// Seals the active segment (if it has records) and starts the next one,
    /// large enough for a record of `rec_len` bytes.
    fn roll(&self, w: &mut Writer, rec_len: u64) -> Result<()> {
        let inner = &*self.inner;
        let hook = &inner.opts.hook;
        let active = w
            .segments
            .last()
            .expect("a log always has a segment")
            .clone();
        let empty = w.tip.next_seq == active.header.first_seq;
        // At most one roll is unsettled: the segment before the one being
        // sealed must be durable before this seal can be written.
        inner.settle.run()?;
        let mut sealed = None;
        if !w.active_sealed && !empty {
            self.seal_active(w, &active)?;
            sealed = Some(active.clone());
        }
        let needed = (SEGMENT_HEADER_LEN + FOOTER_LEN + 2 * INDEX_ENTRY_LEN) as u64 + rec_len;
        let space = self.space();
        let len = inner
            .opts
            .next_segment_len(active.len())
            .max(needed.div_ceil(PAGE) * PAGE);
        let prepared = match w.prepared.take().map(|h| h.join()) {
            Some(Ok(Ok(p))) if p.len() >= len => Some(p),
            Some(Ok(Ok(p))) => {
                p.discard();
                None
            }
            // A failed preparation is retried in the foreground, where its
            // error reaches the caller.
            _ => None,
        };
        let prepared = match prepared {
            Some(p) => p,
            None => self.prepare_fitting(w, len, needed.div_ceil(PAGE) * PAGE, space)?,
        };
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            log_id: inner.log_id,
            first_seq: w.tip.next_seq,
            segment_len: prepared.len(),
            start_hash: w.tip.hash,
        };
        // An empty active segment has the same name; the rename replaces it.
        let seg = Arc::new(prepared.activate(&inner.dir, header, (empty, false), hook)?);
        // The lock moves with the active segment: a parked session then
        // holds the one descriptor it writes through.
        // (A segment made just now is nobody else's to have locked.)
        let _ = inner.hold_lock_in(&seg);
        // The seal's fdatasync and the directory's fsync happen off the lock.
        // (A last segment that was sealed when the log opened, the open synced.)
        *inner.settle.pending.lock() = Some(Unsettled {
            sealed,
            successor: seg.clone(),
        });
        // A log whose commits go through the journal needs the settle only
        // for a commit that finds records of the sealed segment in no
        // frame, a checkpoint or the next roll: it is left until the new
        // segment is half full (`maybe_prepare`), so that young sessions
        // do not pay three syncs a roll while nothing waits for them.
        w.settle_later = self.journal_takes_frames();
        if inner.opts.prepare_ahead && !w.settle_later {
            self.settle_in_background();
        }
        if !w.active_sealed && empty {
            w.segments.pop();
        }
        w.segments.push(seg);
        w.tip.end = FIRST_RECORD_OFFSET;
        w.writeback_from = w.tip.end;
        w.populated_to = w.tip.end;
        w.last_indexed = None;
        w.tip.session_start = None;
        w.active_sealed = false;
        Ok(())
    }
}

/// The records [`Store::save_delta`](crate::Store::save_delta) writes for
/// `items` kept in their records, after the record whose hash is `head`
/// and from seq `seq` on: encoded into `buf` as the writer encodes them and
/// sealed as it seals them (CRC32, keyed BLAKE3 chained); `head` and `seq`
/// advance past them. The benchmarks' bound of the record format writes
/// `buf` then. Feature `whitebox`; not a stable API.
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub fn seal_delta(
    items: &[crate::Item],
    ts: u64,
    head: &mut EntryHash,
    seq: &mut u64,
    buf: &mut AlignedVec,
) -> Result<()> {
    let entries = crate::schema::group_delta_borrowed(items, ts);
    let mut records = Vec::with_capacity(entries.len());
    encode_batch(&entries, buf, &mut records, None)?;
    for (k, r) in records.iter().enumerate() {
        *head = r.seal(buf, *head, *seq, k + 1 < records.len());
        *seq += 1;
    }
    Ok(())
}
