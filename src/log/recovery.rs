//! Opening a log: listing its files, recovery of the last roll and the
//! torn tail, and salvage cuts.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use super::commit::{Settle, SyncState};
use super::opening::{open_segments, Opened, PastMark, PayloadCheck};
use super::reader::snapshot_of;
use super::writer::Writer;
use super::{
    Damage, Durability, Inner, LastRecovery, Log, LogOptions, RecoveryMode, RecoveryReport,
    ReleaseHint, Tip, TornTail, LAST_RECOVERY_FILE, LOCK_FILE,
};
use crate::chain::EntryHash;
use crate::error::{CorruptKind, Error, Result};
use crate::format::{Mark, SegmentHeader, FIRST_RECORD_OFFSET, FORMAT_VERSION, SEGMENT_HEADER_LEN};
use crate::fs::{self as hooked_fs, io_err, sync_dir, Hook};
use crate::payload::PayloadArea;
use crate::segment::{
    parse_segment_name, segment_name, Prepared, RecordCheck, ScanMode, Segment, Space,
};

/// What a log's directory holds, as one listing of it saw.
pub(super) struct Listing {
    /// Segment files by first seq.
    pub(super) segments: Vec<(u64, PathBuf)>,
    /// Leftover preparations.
    pub(super) preparations: Vec<PathBuf>,
    /// Whether [`LAST_RECOVERY_FILE`] is there.
    pub(super) last_recovery: bool,
    /// Whether the file the caller asked about is there.
    pub(super) marker: bool,
}

pub(super) fn list_segments(dir: &Path) -> Result<Listing> {
    list_segments_and(dir, None)
}

/// [`list_segments`], also noting whether a file named `marker` is there.
fn list_segments_and(dir: &Path, marker: Option<&str>) -> Result<Listing> {
    let mut listing = Listing {
        segments: Vec::new(),
        preparations: Vec::new(),
        last_recovery: false,
        marker: false,
    };
    for entry in fs::read_dir(dir).map_err(io_err("read dir", dir))? {
        let entry = entry.map_err(io_err("read dir", dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = parse_segment_name(name) {
            listing.segments.push((seq, entry.path()));
        } else if name.ends_with(".prep") {
            listing.preparations.push(entry.path());
        } else if name == LAST_RECOVERY_FILE {
            listing.last_recovery = true;
        } else if Some(name) == marker {
            listing.marker = true;
        }
    }
    listing.segments.sort();
    Ok(listing)
}

impl Log {
    /// Opens (or creates) the log in `dir` for writing, recovering it.
    ///
    /// Fails with [`Error::Locked`] while another writer holds it, and with
    /// [`Error::Corrupt`] on damage at or before the durable point (unless
    /// [`RecoveryMode::Salvage`]). A torn tail is cut and reported in
    /// [`Log::recovery_report`].
    ///
    /// The log of a store's session (`<root>/sessions/<id>`, beside the
    /// store's `payloads/`) opens with the store's payload area, as the
    /// store opens it: its references to large items resolve, and recovery
    /// checks the payloads of the records past the durable mark.
    ///
    /// ```
    /// use session_store::schema::{now_ms, LogEntry};
    /// use session_store::{Durability, Error, Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let opts = LogOptions::default().durability(Durability::Sync).segment_size(4 << 20);
    /// let log = Log::open(dir.path().join("agent-7"), opts.clone())?;
    /// assert!(log.is_writable() && !log.recovery_report().changed_the_log());
    /// let (seq, hash) = log.append(&LogEntry::TurnEnd { ts: now_ms(), turn_count: 1 })?;
    /// assert_eq!((log.head(), log.next_seq()), (Some((seq, hash)), 1));
    /// assert!(log.bytes() > 0 && log.segment_paths()[0].starts_with(log.dir()));
    ///
    /// // One writer at a time, across processes too.
    /// let second = Log::open(dir.path().join("agent-7"), opts);
    /// assert!(matches!(second, Err(Error::Locked { .. })));
    /// # Ok(()) }
    /// ```
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<Log> {
        let dir = dir.as_ref();
        match PayloadArea::of_session_dir(dir, &opts.hook) {
            Some(area) => Log::open_in_store(dir, opts, None, area),
            None => Log::open_writer(dir, opts, false, None, None),
        }
    }

    /// [`Log::open`] of a session of a store, whose records may refer to
    /// the store's `payloads`: recovery also cuts the log at the first
    /// record past the durable mark whose payloads are not all there
    /// (written, but not yet synced, when the power went).
    ///
    /// `released` is `Some` for a log this process let go with
    /// [`Log::release`]: its mark lags what the page cache holds, and
    /// recovery keeps it so (see `cut_tail_and_mark`) rather than sync
    /// everything again. With its hint (what [`Log::release`] returned),
    /// records below the hint's point in the same file of the same log are
    /// checked by CRC only, as below a durable mark, and the record that
    /// ends at the point is hashed and must match it: a session's reopen
    /// then costs no hashing of what this process wrote.
    pub(crate) fn open_in_store(
        dir: impl AsRef<Path>,
        opts: LogOptions,
        released: Option<Option<&ReleaseHint>>,
        payloads: Arc<PayloadArea>,
    ) -> Result<Log> {
        let log = Log::open_writer(
            dir.as_ref(),
            opts,
            released.is_some(),
            released.flatten(),
            Some(&payloads),
        )?;
        Ok(log.with_payloads(payloads))
    }

    fn open_writer(
        dir: &Path,
        opts: LogOptions,
        keeps_lagging_mark: bool,
        hint: Option<&ReleaseHint>,
        payloads: Option<&PayloadArea>,
    ) -> Result<Log> {
        // What the check finds is noted for the store's next sync, which
        // runs before this open writes a mark over it.
        let check = |bytes: &[u8], version: u32| {
            payloads.map_or(Ok(()), |a| a.check_record(bytes, version, true))
        };
        let sync = || payloads.map_or(Ok(()), |a| a.sync_pending());
        let past_mark = payloads.map(|_| PayloadCheck {
            check: &check,
            sync: &sync,
        });
        let dir = dir.to_path_buf();
        let hook: Hook = opts.hook.clone();
        hooked_fs::create_dir(&dir, &hook)?;
        let lock = hooked_fs::lock_writer(&dir.join(LOCK_FILE), &hook)?;
        let Listing {
            segments: listed,
            preparations: preps,
            ..
        } = list_segments(&dir)?;
        if let Some((_, last)) = listed.last() {
            super::lock::refuse_if_held_elsewhere(&lock, last, &dir.join(LOCK_FILE))?;
        }
        let mut removed = Vec::new();
        for p in preps {
            hooked_fs::remove_file(&p, &hook)?;
            removed.push(p);
        }
        let past = PastMark {
            hint,
            payloads: past_mark,
        };
        let mut opened =
            open_recovering(&dir, &opts, listed, keeps_lagging_mark, past, &mut removed)?;
        opened.report.removed.splice(0..0, removed);
        if opened.report.changed_the_log() {
            // Best effort: the log is consistent without it, and a full
            // disk must not keep the log from opening (`full_disk.rs`).
            record_recovery(&dir, &opened.report, &hook);
        }
        Log::writer_from_opened(dir, opts, opened, lock)
    }

    /// Creates a new log in `dir`, which holds no segment, as its writer,
    /// with `lock` the directory's [`LOCK_FILE`] already taken by the
    /// caller, and syncs nothing: the first segment's zeros, header and name
    /// are left to the first sync, so the caller must arm
    /// [`Log::on_first_sync`] with what makes the directory durable (the
    /// store's pending creation) before anything syncs. Until then a crash
    /// may leave the directory with a torn or missing first segment, which
    /// only that caller's own marker tells from damage.
    pub(crate) fn create_unsynced(dir: &Path, opts: LogOptions, lock: File) -> Result<Log> {
        let hook: Hook = opts.hook.clone();
        let opened = create_first_segment(dir, &opts, &hook, false)?;
        Log::writer_from_opened(dir.to_path_buf(), opts, opened, lock)
    }

    /// The last recovery that changed the log in `dir` (cut a torn tail,
    /// removed a segment), as its writer recorded it; `None` if none ever
    /// did. Reads only.
    ///
    /// ```
    /// use session_store::schema::{now_ms, LogEntry};
    /// use session_store::{Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let log = Log::open(dir.path(), LogOptions::default())?;
    /// log.append(&LogEntry::TurnEnd { ts: now_ms(), turn_count: 1 })?;
    /// log.close()?;
    /// // Clean closes and opens cut nothing: there is no recovery to tell of.
    /// assert_eq!(Log::last_recovery(dir.path())?, None);
    /// # Ok(()) }
    /// ```
    pub fn last_recovery(dir: impl AsRef<Path>) -> Result<Option<LastRecovery>> {
        let path = dir.as_ref().join(LAST_RECOVERY_FILE);
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| Error::invalid(format!("{}: not a recovery record: {e}", path.display())))
    }

    /// Opens the log read-only, without taking the writer lock: it sees the
    /// prefix committed at open; call [`Log::refresh`] to see more.
    ///
    /// The log of a store's session opens with the store's payload area, as
    /// by [`Log::open`].
    ///
    /// ```
    /// use session_store::schema::{now_ms, LogEntry};
    /// use session_store::{Log, LogOptions};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = Log::open(dir.path(), LogOptions::default())?;
    /// writer.append(&LogEntry::TurnEnd { ts: now_ms(), turn_count: 1 })?;
    ///
    /// // A monitor beside the writer: no lock, no writes.
    /// let mut reader = Log::open_read_only(dir.path())?;
    /// writer.append(&LogEntry::TurnEnd { ts: now_ms(), turn_count: 2 })?;
    /// assert_eq!(reader.next_seq(), 1);
    /// reader.refresh()?;
    /// assert_eq!(reader.next_seq(), 2);
    /// assert!(!reader.is_writable());
    /// # Ok(()) }
    /// ```
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Log> {
        let dir = dir.as_ref();
        Log::view(dir, PayloadArea::of_session_dir(dir, &None), false)
    }

    /// A read-only view of the log in `dir`, checked against the store's
    /// `payloads` where it has them; `seen` as for [`Log::read_only`].
    fn view(dir: &Path, payloads: Option<Arc<PayloadArea>>, seen: bool) -> Result<Log> {
        match payloads {
            Some(p) => Ok(Log::read_only(dir, Some(&p), None, None, seen)?.with_payloads(p)),
            None => Log::read_only(dir, None, None, None, seen),
        }
    }

    /// [`Log::open_read_only`] of a session of a store: the view also ends
    /// before the first record past the durable mark whose payloads are
    /// not all in the store's `payloads`, where a recovering writer will
    /// cut the log (see [`Log::open_in_store`]).
    pub(crate) fn open_read_only_in_store(
        dir: impl AsRef<Path>,
        payloads: Arc<PayloadArea>,
    ) -> Result<Log> {
        Log::view(dir.as_ref(), Some(payloads), false)
    }

    /// [`Log::open_read_only_in_store`] of a directory that must also hold
    /// a file named `marker` (a session's catalog), or it is
    /// [`Error::NotFound`]: the directory listing the open makes anyway
    /// answers that, with no `stat` of its own.
    ///
    /// `hint` is what an earlier view of this process found
    /// ([`Log::view_hint`]): the records up to it are not hashed again
    /// when they still end there with its hash (see [`ReleaseHint`]).
    pub(crate) fn open_read_only_in_store_if(
        dir: impl AsRef<Path>,
        payloads: Arc<PayloadArea>,
        marker: &str,
        hint: Option<&ReleaseHint>,
    ) -> Result<Log> {
        let log = Log::read_only(dir.as_ref(), Some(&payloads), Some(marker), hint, false)?;
        Ok(log.with_payloads(payloads))
    }

    /// Where this read-only view found the records of its unsealed last
    /// segment to end, when that lies past the segment's durable mark: the
    /// records it hashed that the mark does not vouch for, which a later
    /// view of this process can take as checked
    /// ([`Log::open_read_only_in_store_if`]). `None` for a writer, a sealed
    /// last segment, or a view that ends at the mark.
    pub(crate) fn view_hint(&self) -> Option<ReleaseHint> {
        if self.inner.writer.is_some() {
            return None;
        }
        let p = self.inner.published.lock();
        let seg = p.segments.last().expect("a log always has a segment");
        let point = p.tip.point();
        let sealed = seg.footer.lock().is_some();
        let marked = seg.mark.lock().map(|m| m.end);
        (!sealed && marked.is_none_or(|end| point.end > end)).then(|| ReleaseHint {
            segment: seg.path.clone(),
            log_id: self.inner.log_id,
            point,
        })
    }

    /// `seen`: the log is read again (a refresh, which a subscription runs
    /// every few milliseconds), so its pages are likely cached, and nothing
    /// is prefetched.
    fn read_only(
        dir: &Path,
        payloads: Option<&PayloadArea>,
        marker: Option<&str>,
        hint: Option<&ReleaseHint>,
        seen: bool,
    ) -> Result<Log> {
        let check = |bytes: &[u8], version: u32| {
            payloads.map_or(Ok(()), |a| a.check_record(bytes, version, false))
        };
        let never = || Ok(());
        let past_mark = payloads.map(|_| PayloadCheck {
            check: &check,
            sync: &never,
        });
        let dir = dir.to_path_buf();
        let Listing {
            segments: paths,
            last_recovery,
            marker: marked,
            ..
        } = list_segments_and(&dir, marker)?;
        if let Some(name) = marker.filter(|_| !marked) {
            return Err(Error::not_found(format!("{name} in {}", dir.display())));
        }
        if paths.is_empty() {
            return Err(Error::not_found(format!(
                "no segments in {}",
                dir.display()
            )));
        }
        // Every read below finds its bytes asked for already (a cold page
        // cache reads them at once).
        if !seen {
            crate::segment::prefetch(&paths);
        }
        let mut paths = paths;
        if let LastRoll::Torn | LastRoll::Unreadable(_) =
            last_roll(&paths, &None, past_mark.map(|p| p.check))?
        {
            // What a recovering writer removes.
            paths.pop();
        }
        let opened = open_segments(
            &paths,
            false,
            false,
            RecoveryMode::Strict,
            &None,
            PastMark {
                hint,
                payloads: past_mark,
            },
        )?;
        let mut log = Log::from_opened(dir, LogOptions::default(), opened, None);
        Arc::get_mut(&mut log.inner)
            .expect("no other handle of a log just made")
            .no_last_recovery = !last_recovery;
        Ok(log)
    }

    pub(super) fn from_opened(
        dir: PathBuf,
        opts: LogOptions,
        o: Opened,
        lock: Option<File>,
    ) -> Log {
        let syncs = opts.durability == Durability::Sync;
        let published = o.publish();
        let last_indexed = o
            .segments
            .last()
            .and_then(|s| s.index.read().last().map(|e| e.offset));
        let writer = lock.is_some().then(|| {
            Mutex::new(Writer {
                segments: o.segments,
                tip: o.tip,
                last_indexed,
                active_sealed: o.active_sealed,
                prepared: None,
                prep_counter: 0,
                writeback_from: o.tip.end,
                populated_to: o.tip.end,
                settle_later: false,
            })
        });
        let poisoned = Arc::new(AtomicBool::new(false));
        let settle = Arc::new(Settle {
            pending: Mutex::new(None),
            dir: dir.clone(),
            hook: opts.hook.clone(),
            payloads: OnceLock::new(),
            poisoned: poisoned.clone(),
        });
        Log {
            inner: Arc::new(Inner {
                dir,
                opts,
                log_id: o.log_id.unwrap_or_default(),
                writer,
                published: Mutex::new(published),
                committed: Condvar::new(),
                sync: Mutex::new(SyncState {
                    durable_next: o.durable_next,
                    checkpointed_next: o.durable_next,
                    in_progress: false,
                }),
                synced: Condvar::new(),
                poisoned,
                settle,
                syncs: AtomicBool::new(syncs),
                parked: AtomicBool::new(false),
                report: o.report,
                no_last_recovery: false,
                first_sync: Mutex::new(None),
                journal: OnceLock::new(),
                journaled: Mutex::new(None),
                lock: Mutex::new(lock.map(super::lock::WriterLock::File)),
            }),
            payloads: None,
        }
    }

    /// [`Log::from_opened`] for a writer, whose lock then moves to its
    /// active segment (see `lock.rs`).
    fn writer_from_opened(dir: PathBuf, opts: LogOptions, o: Opened, lock: File) -> Result<Log> {
        let log = Log::from_opened(dir, opts, o, Some(lock));
        let active = log.inner.published.lock().segments.last().cloned();
        if let Some(active) = active {
            log.inner.hold_lock_in(&active)?;
        }
        Ok(log)
    }

    /// Re-reads a read-only log to see what was committed since.
    ///
    /// Example: [`Log::open_read_only`].
    pub fn refresh(&mut self) -> Result<()> {
        if self.inner.writer.is_some() {
            return Ok(());
        }
        let dir = self.inner.dir.clone();
        let payloads = self.payloads.take();
        let payloads = payloads.or_else(|| PayloadArea::of_session_dir(&dir, &None));
        *self = Log::view(&dir, payloads, true)?;
        Ok(())
    }
}

/// Records what a writer's recovery changed, durably, after the change: a
/// crash between the two, or a failure to write (a full disk), loses the
/// record, never the log's consistency.
fn record_recovery(dir: &Path, report: &RecoveryReport, hook: &Hook) {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let last = LastRecovery {
        at_ms,
        report: report.clone(),
    };
    let json = serde_json::to_vec(&last).expect("a recovery report serializes");
    let _ = hooked_fs::write_atomic(&dir.join(LAST_RECOVERY_FILE), &json, hook);
}

/// A log's first segment: durable, named only once its header is, with
/// `durable`; otherwise made under its final name and left to the log's
/// first sync (`Log::create_unsynced`).
fn create_first_segment(
    dir: &Path,
    opts: &LogOptions,
    hook: &Hook,
    durable: bool,
) -> Result<Opened> {
    let log_id = *uuid::Uuid::now_v7().as_bytes();
    let space = match opts.durability {
        Durability::Sync => Space::Zeroed,
        Durability::Buffered => Space::Sparse,
    };
    let len = opts.next_segment_len(0);
    let header = |len| SegmentHeader {
        version: FORMAT_VERSION,
        log_id,
        first_seq: 0,
        segment_len: len,
        start_hash: EntryHash::genesis(),
    };
    let seg = if durable {
        let prep = Prepared::create(dir.join("first.prep"), len, space, hook)?;
        let h = header(prep.len());
        prep.activate(dir, h, (true, true), hook)?
    } else {
        let prep = Prepared::create_unsynced(dir.join(segment_name(0)), len, space, hook)?;
        let h = header(prep.len());
        prep.activate_in_place(h)?
    };
    Ok(Opened {
        segments: vec![Arc::new(seg)],
        durable_next: 0,
        tip: Tip {
            end: FIRST_RECORD_OFFSET,
            next_seq: 0,
            hash: EntryHash::genesis(),
            last_session_start: None,
            session_start: None,
        },
        active_sealed: false,
        report: RecoveryReport::default(),
        log_id: Some(log_id),
        evicted: None,
    })
}

/// Opens the `listed` segments of the log in `dir` (or creates its first),
/// recovering the last roll; in [`RecoveryMode::Salvage`], cuts the log at
/// the first bad record and tries again, until it opens whole. The files
/// it removes are added to `removed`.
fn open_recovering(
    dir: &Path,
    opts: &LogOptions,
    listed: Vec<(u64, PathBuf)>,
    keeps_lagging_mark: bool,
    past: PastMark<'_>,
    removed: &mut Vec<PathBuf>,
) -> Result<Opened> {
    let hook = &opts.hook;
    // The listing stands until a salvage cut removes files (removing a
    // preparation changes no segment).
    let mut listed = Some(listed);
    let mut salvaged: Option<TornTail> = None;
    let mut opened = loop {
        let mut paths = match listed.take() {
            Some(paths) => paths,
            None => list_segments(dir)?.segments,
        };
        if paths.is_empty() {
            break create_first_segment(dir, opts, hook, true)?;
        }
        // The segment before an unsettled roll, intact, perhaps only in the
        // page cache: made durable before anything is written after it,
        // the payloads its records name first.
        let keep = |prev: &Segment| -> Result<()> {
            past.payloads.map_or(Ok(()), |p| (p.sync)())?;
            prev.sync()?;
            sync_dir(dir, hook)
        };
        let successor = match last_roll(&paths, hook, past.payloads.map(|p| p.check))? {
            LastRoll::Settled => None,
            LastRoll::Holds(prev) => {
                keep(&prev)?;
                None
            }
            LastRoll::Unreadable(prev) => {
                keep(&prev)?;
                paths.pop()
            }
            LastRoll::Torn => paths.pop(),
        };
        let result = open_segments(&paths, true, keeps_lagging_mark, opts.recovery, hook, past);
        if let (Ok(_), Some((_, p))) = (&result, &successor) {
            // Nothing in it was durable: a record there is durable only
            // once the segment before it is.
            hooked_fs::remove_file(p, hook)?;
            sync_dir(dir, hook)?;
            removed.push(p.clone());
        }
        let damage = match result {
            Ok(o) if opts.recovery == RecoveryMode::Salvage => match verify_opened(&o) {
                None => break o,
                Some(d) => d,
            },
            Ok(o) => break o,
            Err(Error::Corrupt {
                segment,
                offset,
                seq,
                kind,
            }) if opts.recovery == RecoveryMode::Salvage => Damage {
                segment,
                offset,
                seq,
                kind,
            },
            Err(e) => return Err(e),
        };
        // Salvage: cut the log at the first bad record and try again.
        // Every cut removes bytes, so this ends.
        removed.extend(cut_at(dir, &paths, &damage, hook)?);
        salvaged.get_or_insert(TornTail {
            segment: damage.segment.clone(),
            offset: damage.offset,
            seq: damage.seq,
            reason: damage.kind.to_string(),
            salvaged: true,
        });
    };
    if salvaged.is_some() {
        opened.report.torn_tail = salvaged;
    }
    Ok(opened)
}

/// Whether the roll into the last segment may not have settled, and if so,
/// whether the segment it sealed is intact.
enum LastRoll {
    /// The last segment has a mark or a seal, written only after the roll
    /// into it settled; or it is the only segment.
    Settled,
    /// Unsettled, but the segment before it holds its records and its seal.
    Holds(Box<Segment>),
    /// As `Holds`, but the last segment's header does not read: the roll
    /// into it never settled, and nothing in it was durable.
    Unreadable(Box<Segment>),
    /// Unsettled, and the segment before it is torn (a power failure before
    /// its `fdatasync`), or the last segment's header never became durable:
    /// no record after the tear was ever durable, the last segment's
    /// included.
    Torn,
}

fn last_roll(
    paths: &[(u64, PathBuf)],
    hook: &Hook,
    past_mark: Option<RecordCheck<'_>>,
) -> Result<LastRoll> {
    let [.., (_, prev), (_, last)] = paths else {
        return Ok(LastRoll::Settled);
    };
    // A last segment whose header does not read, and that holds no valid
    // mark, is a roll that never settled: a roll writes the header
    // unsynced, and the settle syncs it with the first mark, before
    // anything in the segment is vouched for. Nothing in it was ever
    // durable. Any other failure to open is damage that `open_segments`
    // reports (and Salvage cuts).
    let unreadable = match Segment::open(last, false, hook) {
        Ok(last) => {
            if last.read_mark().is_some() || matches!(last.read_footer(false), Ok(Some(_))) {
                return Ok(LastRoll::Settled);
            }
            false
        }
        // With a valid mark, the settle did sync the header: damage.
        Err(Error::Corrupt {
            kind: CorruptKind::Magic | CorruptKind::Crc { .. } | CorruptKind::Version { .. },
            offset,
            ..
        }) if offset < SEGMENT_HEADER_LEN as u64 && !holds_a_mark(last)? => true,
        Err(_) => return Ok(LastRoll::Settled),
    };
    let Ok(prev) = Segment::open(prev, false, hook) else {
        return Ok(LastRoll::Settled);
    };
    let f = match prev.read_footer(true) {
        Ok(Some(f)) => f,
        Ok(None) | Err(Error::Corrupt { .. }) => return Ok(LastRoll::Torn),
        Err(_) if unreadable => return Ok(LastRoll::Torn),
        Err(e) => return Err(e),
    };
    let h = prev.header;
    // Below its own mark, the segment was synced before it was sealed.
    let mark = prev
        .read_mark()
        .filter(|m| m.next_seq >= h.first_seq && m.end <= f.data_end);
    let scan = prev.scan(
        FIRST_RECORD_OFFSET,
        prev.data_limit(FIRST_RECORD_OFFSET, f.data_end),
        h.first_seq,
        h.start_hash,
        ScanMode {
            trusted: mark,
            check_archives: false,
            crc_below_mark: false,
            checkpoint: None,
            // A record past its mark whose payload is gone was never
            // durable: the segment is torn there, and cut as a tail.
            past_mark,
        },
    );
    Ok(match scan.agrees_with(&f) {
        true if unreadable => LastRoll::Unreadable(Box::new(prev)),
        true => LastRoll::Holds(Box::new(prev)),
        false => LastRoll::Torn,
    })
}

/// The full check of a freshly opened log, for salvage mode.
fn verify_opened(o: &Opened) -> Option<Damage> {
    // A mark that disagrees with the records is no reason to cut any: the
    // writer's open has just rewritten it from its own scan.
    snapshot_of(&o.publish())
        .verify()
        .damage
        .filter(|d| !matches!(d.kind, CorruptKind::Mark(_)))
}

/// Cuts the log at `damage`: later segments are removed, and the damaged one
/// is zeroed from the bad record on (removed whole if its header is bad).
fn cut_at(
    dir: &Path,
    paths: &[(u64, PathBuf)],
    damage: &Damage,
    hook: &Hook,
) -> Result<Vec<PathBuf>> {
    let Some(k) = paths.iter().position(|(_, p)| *p == damage.segment) else {
        return Err(Error::Corrupt {
            segment: damage.segment.clone(),
            offset: damage.offset,
            seq: damage.seq,
            kind: damage.kind.clone(),
        });
    };
    let mut removed = Vec::new();
    let mut remove = |p: &Path| -> Result<()> {
        hooked_fs::remove_file(p, hook)?;
        removed.push(p.to_path_buf());
        Ok(())
    };
    for (_, p) in paths[k + 1..].iter().rev() {
        remove(p)?;
    }
    let path = &paths[k].1;
    match Segment::open(path, true, hook) {
        Ok(seg) if damage.offset >= FIRST_RECORD_OFFSET => {
            seg.zero_range(damage.offset.min(seg.len()), seg.len())?;
            seg.sync()?;
        }
        _ => remove(path)?,
    }
    sync_dir(dir, hook)?;
    Ok(removed)
}

/// Whether the segment file at `path` holds a valid durable mark in its
/// header's slots (read raw: its header may not decode).
fn holds_a_mark(path: &Path) -> Result<bool> {
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    let read = File::open(path).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_at(&mut header, 0)
    });
    match read {
        Ok(_) => Ok(Mark::newest(&header).is_some()),
        Err(e) => Err(Error::io("read", path, e)),
    }
}
