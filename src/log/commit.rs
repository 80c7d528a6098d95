//! Durability: group commit, settling rolls off the append lock, close.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::journal::JournalPort;
use super::{Inner, Log, ReleaseHint};
use crate::error::{Error, Result};
use crate::format::journal::FrameStart;
use crate::format::Point;
use crate::format::FIRST_RECORD_OFFSET;
use crate::fs::{sync_dir, Hook};
use crate::payload::PayloadArea;
use crate::segment::Segment;

#[derive(Default)]
pub(super) struct SyncState {
    /// Every record below this seq is durable (in its segment, or through
    /// the store's journal).
    pub(super) durable_next: u64,
    /// Every record below this seq is durable in its segment alone.
    pub(super) checkpointed_next: u64,
    pub(super) in_progress: bool,
}

/// What a roll leaves to do off the append lock: `fdatasync` the segment it
/// sealed, then the successor (its header), fsync the directory (which
/// makes its successor's name durable), then give the successor its first
/// mark and sync it. Done by a background
/// thread, or by whatever needs it first: a group commit (before it syncs the
/// successor), the next roll (before it writes its seal), or `close`.
/// Until the successor has a mark, recovery checks the sealed segment (see
/// `Log::open`), so the mark must come last.
pub(super) struct Settle {
    pub(super) pending: Mutex<Option<Unsettled>>,
    pub(super) dir: PathBuf,
    pub(super) hook: Hook,
    pub(super) poisoned: Arc<AtomicBool>,
    /// The payload area of the store the log belongs to: a settle makes
    /// the payloads written since the last sync durable before the sealed
    /// segment, whose records recovery no longer reads once a successor
    /// vouches for it.
    pub(super) payloads: OnceLock<Arc<PayloadArea>>,
}

pub(super) struct Unsettled {
    /// `None` for a roll out of an empty segment, which the rename replaced.
    pub(super) sealed: Option<Arc<Segment>>,
    pub(super) successor: Arc<Segment>,
}

impl Settle {
    /// Settles the last roll, if it is not yet. A failure poisons the log:
    /// the kernel may have dropped the pages, so it is never retried; and a
    /// poisoned log settles nothing (nothing may vouch for a roll after a
    /// failed sync).
    pub(super) fn run(&self) -> Result<()> {
        let mut pending = self.pending.lock();
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let Some(u) = pending.take() else {
            return Ok(());
        };
        let result = (|| {
            if let Some(sealed) = &u.sealed {
                if let Some(payloads) = self.payloads.get() {
                    payloads.sync_pending()?;
                }
                sealed.sync()?;
            }
            // The successor's header, written unsynced at the roll, before
            // any mark is written beside it: recovery takes a header that
            // does not read beside no valid mark for a roll that never
            // settled, and beside a valid one for damage.
            u.successor.sync()?;
            sync_dir(&self.dir, &self.hook)?;
            if u.successor.mark.lock().is_none() {
                let h = u.successor.header;
                u.successor.write_mark(Point {
                    end: FIRST_RECORD_OFFSET,
                    next_seq: h.first_seq,
                    hash: h.start_hash,
                    session_start: None,
                })?;
            }
            u.successor.sync()
        })();
        if result.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}

impl Log {
    /// Blocks until every record appended so far is durable (one shared
    /// `fdatasync` for concurrent callers).
    ///
    /// Example: [the module](crate::log#example).
    pub fn sync(&self) -> Result<()> {
        if self.inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let next = self.inner.published.lock().tip.next_seq;
        match next {
            0 => Ok(()),
            n => self.wait_durable(n - 1),
        }
    }

    /// Arms `work` to run in the next group commit, after its `fdatasync`
    /// and before it counts as done: a failure there fails the sync and
    /// poisons the log. The next [`Log::sync`] commits even when every
    /// record is believed durable (a reopened log's are), so that nothing
    /// returns as durable before `work` has run.
    pub(crate) fn on_first_sync(&self, work: super::FirstSync) {
        *self.inner.first_sync.lock() = Some(work);
        let mut s = self.inner.sync.lock();
        s.durable_next = 0;
        s.checkpointed_next = 0;
    }

    /// Makes this log's `Sync` commits durable through the store's shared
    /// journal from now on (see `journal.rs`).
    pub(crate) fn attach_journal(&self, port: JournalPort) {
        let _ = self.inner.journal.set(port);
    }

    /// Blocks until every record appended so far is durable in its segment
    /// alone, not only through the journal (a checkpoint).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let next = self.inner.published.lock().tip.next_seq;
        match next {
            0 => Ok(()),
            n => self.wait_synced(n - 1, true),
        }
    }

    /// Whether records are durable through the journal only.
    pub(super) fn journal_only(&self) -> bool {
        let s = self.inner.sync.lock();
        s.durable_next > s.checkpointed_next
    }

    pub(super) fn wait_durable(&self, seq: u64) -> Result<()> {
        self.wait_synced(seq, false)
    }

    /// Blocks until record `seq` is durable; with `checkpoint`, durable in
    /// its segment alone.
    fn wait_synced(&self, seq: u64, checkpoint: bool) -> Result<()> {
        let inner = &*self.inner;
        inner.syncs.store(true, Ordering::Relaxed);
        let mut s = inner.sync.lock();
        loop {
            if inner.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned);
            }
            let done = match checkpoint {
                true => s.checkpointed_next,
                false => s.durable_next,
            };
            if done > seq {
                return Ok(());
            }
            if s.in_progress {
                inner.synced.wait(&mut s);
                continue;
            }
            s.in_progress = true;
            drop(s);
            let result = self.sync_now(checkpoint);
            s = inner.sync.lock();
            s.in_progress = false;
            match result {
                Ok((upto, checkpointed)) => {
                    s.durable_next = s.durable_next.max(upto);
                    if checkpointed {
                        s.checkpointed_next = s.checkpointed_next.max(upto);
                    }
                    inner.synced.notify_all();
                }
                Err(e) => {
                    inner.poisoned.store(true, Ordering::Release);
                    inner.synced.notify_all();
                    return Err(e);
                }
            }
        }
    }

    /// One group commit, outside the append lock: through the journal
    /// where the log has one (not for a `checkpoint`, nor for a new
    /// session's first sync); otherwise writes the durable mark of the
    /// previous commit, then `fdatasync`s the active segment. Returns the
    /// seq below which all is durable, and whether in the segment alone.
    pub(super) fn sync_now(&self, checkpoint: bool) -> Result<(u64, bool)> {
        let journal = match checkpoint || self.inner.first_sync.lock().is_some() {
            true => None,
            false => self.inner.journal.get(),
        };
        if let Some(port) = journal {
            if let Some(upto) = self.journal_now(port)? {
                return Ok((upto, false));
            }
        }
        let p = self.inner.published.lock().clone();
        // The store's payloads written since the last sync go first (every
        // record of `p` had its payloads written before it was appended):
        // no record may become durable, nor a mark cover it, before the
        // payloads it names.
        if let Some(payloads) = &self.payloads {
            payloads.sync_pending()?;
        }
        // A record is durable only once the roll into its segment is:
        // recovery discards the successor of a segment that is torn. Settled
        // after the snapshot, so that a roll before it is covered (one after
        // it leaves this sync's segment sealed, which changes nothing here).
        self.inner.settle.run()?;
        let seg = p.segments.last().expect("a log always has a segment");
        let previous = *seg.mark.lock();
        let last_synced = *seg.synced.lock();
        if let Some(at) = last_synced {
            if previous.is_none_or(|m| m.end != at.end) {
                seg.write_mark(at)?;
            }
        }
        seg.sync()?;
        // A new session's own durability, after its records' (a failure
        // poisons the log, so no later sync can vouch for it instead).
        let first = self.inner.first_sync.lock().take();
        if let Some(first) = first {
            first()?;
        }
        *seg.synced.lock() = Some(p.tip.point());
        Ok((p.tip.next_seq, true))
    }

    /// A group commit through the journal: the records past the active
    /// segment's durable point go to the journal as one frame, made durable
    /// with one `fdatasync` shared with other sessions' frames. No mark is
    /// written (a mark vouches for what the segment's own sync covered).
    /// `None` when the journal does not take the frame.
    fn journal_now(&self, port: &JournalPort) -> Result<Option<u64>> {
        let p = self.inner.published.lock().clone();
        if let Some(payloads) = &self.payloads {
            payloads.sync_pending()?;
        }
        let seg = p.segments.last().expect("a log always has a segment");
        let mut start = Point {
            end: FIRST_RECORD_OFFSET,
            next_seq: seg.header.first_seq,
            hash: seg.header.start_hash,
            session_start: None,
        };
        let journaled = self.inner.journaled.lock().clone();
        let journaled_in = |s: &Arc<Segment>| {
            journaled
                .as_ref()
                .filter(|(j, _)| j.upgrade().is_some_and(|j| Arc::ptr_eq(&j, s)))
                .map(|(_, at)| *at)
        };
        // A segment sealed since the last frame: its records are durable
        // once the roll is settled (the settle syncs it), unless every one
        // of them is in the journal already. Then the settle is left for
        // later (see `Writer::settle_later`): recovery takes a roll that
        // never settled for a torn one, and the frames write the records
        // again. A frame already in this segment was covered so.
        let sealed = p.segments.len().checked_sub(2).map(|k| &p.segments[k]);
        let covered = journaled_in(seg).is_some()
            || sealed
                .and_then(journaled_in)
                .is_some_and(|at| at.next_seq == seg.header.first_seq);
        if !covered {
            self.inner.settle.run()?;
        }
        let synced = *seg.synced.lock();
        let journaled = journaled_in(seg);
        for at in [synced, journaled].into_iter().flatten() {
            if at.end > start.end {
                start = at;
            }
        }
        let end = p.tip.end;
        if end > start.end {
            let records = seg.records(start.end as usize, end as usize);
            let frame = FrameStart {
                session: port.session,
                seq: start.next_seq,
                hash: start.hash,
            };
            if !port.journal.commit(&frame, records, &self.inner)? {
                return Ok(None);
            }
        }
        *self.inner.journaled.lock() = Some((Arc::downgrade(seg), p.tip.point()));
        Ok(Some(p.tip.next_seq))
    }

    /// Lets the log go (its lock with it) without making anything durable,
    /// as a `Buffered` log promises nothing more: [`Log::open_in_store`] (`released`)
    /// recovers what the page cache holds and keeps the lagging mark (see
    /// `cut_tail_and_mark`). Only a roll not yet settled is settled first:
    /// settling writes a mark into the log, which must not happen once
    /// another writer may hold it.
    ///
    /// Returns where the writer left the active segment, for
    /// [`Log::reopen_released`] to skip re-hashing what this process wrote
    /// (`None` for a sealed active segment or a read-only handle).
    pub(crate) fn release(self) -> Result<Option<ReleaseHint>> {
        if self.inner.writer.is_some() {
            self.inner.settle.run()?;
            // What is durable through the journal only must be durable in
            // the segment before another writer may take the log: the
            // journal forgets it at its next rotation.
            if self.journal_only() {
                self.checkpoint()?;
            }
        }
        if self.inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let p = self.inner.published.lock();
        let seg = p.segments.last().expect("a log always has a segment");
        let sealed = seg.footer.lock().is_some();
        Ok(
            (self.inner.writer.is_some() && !sealed).then(|| ReleaseHint {
                segment: seg.path.clone(),
                log_id: self.inner.log_id,
                point: p.tip.point(),
            }),
        )
    }

    /// Makes everything durable and records the durable point in the header,
    /// so the next open need not hash the active segment. An active segment
    /// holding at least 8 MiB of records is sealed as well (its footer
    /// indexes them for later views); the next append starts a new one.
    ///
    /// Example: [the module](crate::log#example).
    pub fn close(self) -> Result<()> {
        if self.inner.writer.is_none() {
            return Ok(());
        }
        self.checkpoint()?;
        // A roll with nothing synced after it: settle it, which also gives
        // the last segment a mark, so that the next open need not check the
        // segment before it.
        self.inner.settle.run()?;
        let p = self.inner.published.lock().clone();
        let seg = p.segments.last().expect("a log always has a segment");
        // The mark names only what an fdatasync covered: another clone may
        // have appended since `sync` returned.
        let synced = *seg.synced.lock();
        let marked = seg.mark.lock().map(|m| (m.end, m.next_seq));
        if let (None, Some(at)) = (*seg.footer.lock(), synced) {
            if marked != Some((at.end, at.next_seq)) {
                seg.write_mark(at)?;
                seg.sync()?;
            }
        }
        // A large active segment is sealed too, its footer made durable.
        if let Some(sealed) = self.seal_at_close()? {
            sealed.sync()?;
        }
        // A failure anywhere in the background since.
        if self.inner.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }
}

impl Inner {
    /// Makes every record of the log durable in its segments alone, for the
    /// journal before it is taken up again; the log's own sync state is
    /// left as it is (a later close syncs again, which costs little).
    pub(super) fn checkpoint(&self) -> Result<()> {
        if self.writer.is_none() {
            return Ok(());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        // The segments first: a roll after this leaves the last of them
        // sealed, and synced here; one before it is settled (which syncs
        // the segment it sealed).
        let segments = self.published.lock().segments.clone();
        self.settle.run()?;
        let result = segments.last().expect("a log always has a segment").sync();
        if result.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}
