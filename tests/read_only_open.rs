//! Guards the read-only open's shortcuts: it starts its scan of the last
//! segment at a version 2 durable mark (which names the last `SessionStart`
//! below it), and it reads a sealed segment's index only when a reader first
//! seeks into that segment. Each shortcut must give exactly what a full scan
//! gives, fall back when the mark cannot be believed, and leave damage in what
//! it skipped to the iterator and to `verify`.

mod engine;

use std::fs;
use std::path::{Path, PathBuf};

use engine::{
    edit, entry, mark_of, opts, read_all, segment_files, sweep_tempdir, Countdown, OpKind, Span,
};
use session_store::format::{self, Footer, Mark, FOOTER_LEN, MARK_SLOT_LEN, SEGMENT_HEADER_LEN};
use session_store::{CorruptKind, Durability, EntryHash, Error, Log, LogEntry, RecoveryMode};

const SEG: u64 = 16 << 10;

fn start(i: u64) -> LogEntry {
    engine::session_start(i)
}

/// A log with sealed segments, a `SessionStart` below the active segment's
/// mark, and `tail` more entries appended after the last sync (above it).
/// Returns the writer, still open.
fn build(dir: &Path, tail: &[LogEntry]) -> Log {
    let log = Log::open(dir, opts(SEG)).unwrap();
    let mut i = 0;
    while segment_files(dir).len() < 3 {
        log.append(&entry(i, 300)).unwrap();
        i += 1;
    }
    log.append(&start(i)).unwrap();
    for j in 1..6 {
        log.append_with(&entry(i + j, 200), Durability::Sync)
            .unwrap();
    }
    for e in tail {
        log.append(e).unwrap();
    }
    log
}

/// The first seq of a segment file, from its name.
fn first_seq_of(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// A forged change to a mark, and what it is.
type Forgery = (&'static str, Box<dyn Fn(&mut Mark)>);

/// What a reader must see: compared between the shortcut and a full scan.
fn view(log: &Log) -> (Option<u64>, u64, Option<u64>, usize, String) {
    let snap = log.snapshot();
    let restored = log.restore().unwrap();
    (
        snap.last_session_start(),
        snap.next_seq(),
        log.recovery_report().torn_tail.as_ref().map(|t| t.offset),
        restored.history.len(),
        format!("{:?}", log.head()),
    )
}

#[test]
fn a_read_only_open_from_the_mark_sees_what_the_writer_sees() {
    for tail in [
        vec![],
        vec![entry(900, 50)],
        vec![start(901), entry(902, 40)],
    ] {
        let dir = sweep_tempdir();
        let writer = build(dir.path(), &tail);
        let active = segment_files(dir.path()).pop().unwrap();
        let mark = mark_of(&active).expect("synced commits leave a mark");
        assert!(
            mark.session_start.is_some(),
            "the mark names the SessionStart"
        );
        let reader = Log::open_read_only(dir.path()).unwrap();
        assert_eq!(view(&reader), view(&writer), "tail {tail:?}");
        assert_eq!(read_all(&reader), read_all(&writer));
        // Seeking below the SessionStart in the active segment still works:
        // the reader's index there is only partial.
        let first = reader.snapshot().iter().next().unwrap().unwrap().seq;
        let active_first = first_seq_of(&active);
        let snap = reader.snapshot();
        let from = snap.iter_from(active_first).next().unwrap().unwrap();
        assert_eq!((first, from.seq), (0, active_first));
        assert_eq!(reader.verify().damage, None);
        writer.close().unwrap();
    }
}

/// Rewrites the newest mark of `path` with `f` applied, with a valid CRC.
fn forge_mark(path: &Path, f: impl FnOnce(&mut Mark)) {
    let mut m = mark_of(path).unwrap();
    f(&mut m);
    edit(path, |b| {
        let at = Mark::slot_offset(m.generation);
        b[at..at + MARK_SLOT_LEN].copy_from_slice(&m.encode(format::FORMAT_VERSION));
    });
}

#[test]
fn a_mark_that_cannot_be_believed_falls_back_to_the_full_scan() {
    let dir = sweep_tempdir();
    let writer = build(dir.path(), &[]);
    let expected = view(&writer);
    let records = read_all(&writer);
    writer.close().unwrap();
    let active = segment_files(dir.path()).pop().unwrap();
    let original = fs::read(&active).unwrap();
    let good = mark_of(&active).unwrap();
    let forgeries: Vec<Forgery> = vec![
        // Points at an ordinary record, not a SessionStart.
        (
            "not a SessionStart",
            Box::new(|m| m.session_start = Some(SEGMENT_HEADER_LEN as u64)),
        ),
        (
            "pointer into the record",
            Box::new(|m| m.session_start = m.session_start.map(|o| o + 16)),
        ),
        (
            "pointer past the end",
            Box::new(|m| m.session_start = Some(m.end)),
        ),
        ("end inside the header", Box::new(|m| m.end = 128)),
        ("seq before the segment", Box::new(|m| m.next_seq = 0)),
        ("more records than fit", Box::new(|m| m.next_seq = u64::MAX)),
    ];
    for (what, f) in &forgeries {
        forge_mark(&active, f);
        assert_ne!(mark_of(&active), Some(good), "{what}: the forgery took");
        let reader = Log::open_read_only(dir.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(view(&reader), expected, "{what}");
        assert_eq!(read_all(&reader), records, "{what}");
        fs::write(&active, &original).unwrap();
    }
    // A mark that claims more durable bytes than there are records is what
    // a lost synced write looks like: the full scan refuses it, as before.
    for (what, end) in [
        ("end past the file", 1 << 40),
        ("misaligned end", good.end + 8),
    ] {
        forge_mark(&active, |m| m.end = end);
        match Log::open_read_only(dir.path()) {
            Err(Error::Corrupt { segment, .. }) => assert_eq!(segment, active, "{what}"),
            other => panic!("{what}: expected Corrupt, got {other:?}"),
        }
        fs::write(&active, &original).unwrap();
    }
    // A mark that says "no SessionStart here" cannot be told from the truth
    // without the scan it saves; `verify` compares it with the records.
    forge_mark(&active, |m| m.session_start = None);
    let reader = Log::open_read_only(dir.path()).unwrap();
    let d = reader.verify().damage.expect("verify checks the mark");
    let slot = Mark::slot_offset(mark_of(&active).unwrap().generation) as u64;
    assert_eq!((d.segment, d.offset), (active.clone(), slot));
    assert!(matches!(d.kind, CorruptKind::Mark(_)), "{:?}", d.kind);
    // The writer's open rewrites it from its full scan.
    Log::open(dir.path(), opts(SEG)).unwrap().close().unwrap();
    assert_eq!(mark_of(&active).unwrap().session_start, good.session_start);
    assert_eq!(
        Log::open_read_only(dir.path()).unwrap().verify().damage,
        None
    );
    // Likewise a mark whose seq or hash is not the records' at its end: a
    // reader believes it (its view is wrong), and verify says so.
    let original = fs::read(&active).unwrap();
    let lies: Vec<Forgery> = vec![
        ("seq", Box::new(|m| m.next_seq += 5)),
        ("hash", Box::new(|m| m.hash = EntryHash([7; 32]))),
    ];
    for (what, f) in &lies {
        forge_mark(&active, f);
        let reader = Log::open_read_only(dir.path()).unwrap();
        let d = reader
            .verify()
            .damage
            .unwrap_or_else(|| panic!("{what}: undetected"));
        let slot = Mark::slot_offset(mark_of(&active).unwrap().generation) as u64;
        assert_eq!((d.segment, d.offset), (active.clone(), slot), "{what}");
        assert!(
            matches!(d.kind, CorruptKind::Mark(_)),
            "{what}: {:?}",
            d.kind
        );
        fs::write(&active, &original).unwrap();
    }
}

/// Builds and closes a log, then flips a payload byte of the record two past
/// its last `SessionStart`, which lies below the active segment's mark.
/// Returns the active segment, that record, and the `SessionStart`'s seq.
fn flip_below_the_mark(dir: &Path) -> (PathBuf, Span, u64) {
    let writer = build(dir, &[]);
    let ss = writer.snapshot().last_session_start().unwrap();
    writer.close().unwrap();
    let active = segment_files(dir).pop().unwrap();
    let spans = engine::spans(&fs::read(&active).unwrap());
    let victim = *spans.iter().find(|s| s.seq == ss + 2).unwrap();
    assert!((victim.start as u64) < mark_of(&active).unwrap().end);
    edit(&active, |b| b[victim.start + 70] ^= 0x01);
    (active, victim, ss)
}

#[test]
fn a_salvage_cut_below_the_mark_clears_the_mark_before_zeroing() {
    let dir = sweep_tempdir();
    let (active, victim, ss) = flip_below_the_mark(dir.path());
    let salvage = || opts(SEG).recovery(RecoveryMode::Salvage);
    // A crash after the mark is cleared, before the records are zeroed: the
    // second write (the first of the zeros) fails.
    let hook = Countdown::new(OpKind::Write, 2, true);
    assert!(Log::open(dir.path(), salvage().hook(hook.clone())).is_err());
    assert_eq!(hook.failed(), 1, "the zeroing was reached");
    assert_eq!(
        mark_of(&active),
        None,
        "no mark names the records being cut"
    );
    // A reader now walks the segment and stops at the damage.
    assert_eq!(Log::open_read_only(dir.path()).unwrap().next_seq(), ss + 2);
    // The next salvage completes the cut and leaves an exact mark.
    let log = Log::open(dir.path(), salvage()).unwrap();
    assert_eq!(log.next_seq(), ss + 2);
    log.close().unwrap();
    let m = mark_of(&active).unwrap();
    assert_eq!((m.next_seq, m.end), (ss + 2, victim.start as u64));
    assert_eq!(
        Log::open_read_only(dir.path()).unwrap().verify().damage,
        None
    );
}

#[test]
fn verify_checks_the_footers_last_session_start() {
    let dir = sweep_tempdir();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    log.append(&start(0)).unwrap();
    let mut i = 1;
    while segment_files(dir.path()).len() < 3 {
        log.append(&entry(i, 300)).unwrap();
        i += 1;
    }
    log.close().unwrap();
    let sealed = segment_files(dir.path()).remove(1);
    edit(&sealed, |b| {
        let at = b.len() - FOOTER_LEN;
        let mut f = Footer::decode(&b[at..]).unwrap().unwrap();
        assert_eq!(f.last_session_start, Some(0));
        f.last_session_start = None;
        b[at..].copy_from_slice(&f.encode());
    });
    let d = Log::open_read_only(dir.path())
        .unwrap()
        .verify()
        .damage
        .unwrap();
    assert_eq!(d.segment, sealed);
    assert!(matches!(d.kind, CorruptKind::Footer(_)), "{:?}", d.kind);
}

#[test]
fn a_damaged_record_below_the_mark_is_reported_when_read() {
    let dir = sweep_tempdir();
    let (active, victim, ss) = flip_below_the_mark(dir.path());
    // The open trusts the mark and skips the record; reading it fails, at it.
    let reader = Log::open_read_only(dir.path()).unwrap();
    match reader.restore() {
        Err(Error::Corrupt {
            segment,
            offset,
            seq,
            ..
        }) => {
            assert_eq!(
                (segment, offset, seq),
                (active.clone(), victim.start as u64, Some(ss + 2))
            )
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let d = reader.verify().damage.expect("verify finds it");
    assert_eq!((d.segment, d.offset), (active, victim.start as u64));
}

#[test]
fn a_sealed_segments_index_is_checked_when_first_used() {
    let dir = sweep_tempdir();
    let writer = build(dir.path(), &[]);
    writer.close().unwrap();
    let sealed = segment_files(dir.path()).remove(1);
    let len = fs::metadata(&sealed).unwrap().len() as usize;
    let bytes = fs::read(&sealed).unwrap();
    let footer = Footer::decode(&bytes[len - FOOTER_LEN..]).unwrap().unwrap();
    assert!(footer.index_count > 0);
    let first = first_seq_of(&sealed);
    edit(&sealed, |b| b[footer.index_offset as usize + 3] ^= 0x40);

    // A reader opens without reading it...
    let reader = Log::open_read_only(dir.path()).unwrap();
    assert!(reader.restore().is_ok(), "the live history is elsewhere");
    // ...and meets it when it seeks there, and in verify, at the index.
    let err = reader
        .snapshot()
        .iter_from(first + 1)
        .next()
        .unwrap()
        .unwrap_err();
    match err {
        Error::Corrupt {
            segment, offset, ..
        } => {
            assert_eq!((segment, offset), (sealed.clone(), footer.index_offset))
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    let d = reader.verify().damage.expect("verify checks every index");
    assert_eq!((d.segment, d.offset), (sealed.clone(), footer.index_offset));
    // A writer still refuses at open.
    match Log::open(dir.path(), opts(SEG)) {
        Err(Error::Corrupt {
            segment, offset, ..
        }) => {
            assert_eq!((segment, offset), (sealed, footer.index_offset))
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn verify_scans_segments_in_parallel_and_reports_the_first_damage() {
    // Large enough (over 8 MiB of records) for verify to use threads.
    let dir = sweep_tempdir();
    let log = Log::open(dir.path(), opts(1 << 20)).unwrap();
    for i in 0..160 {
        log.append(&entry(i, 64 << 10)).unwrap();
    }
    assert!(log.bytes() > 8 << 20);
    log.close().unwrap();
    let files = segment_files(dir.path());
    assert!(files.len() >= 4);
    // Damage the last record of the second segment and the first of the third.
    let second = engine::spans(&fs::read(&files[1]).unwrap());
    let third = engine::spans(&fs::read(&files[2]).unwrap());
    let (a, b) = (second.last().unwrap(), &third[0]);
    edit(&files[2], |bytes| bytes[b.start + 70] ^= 0x01);
    let d = Log::open_read_only(dir.path())
        .unwrap()
        .verify()
        .damage
        .unwrap();
    assert_eq!(
        (d.segment, d.offset, d.seq),
        (files[2].clone(), b.start as u64, Some(b.seq))
    );
    edit(&files[1], |bytes| bytes[a.start + 70] ^= 0x01);
    let report = Log::open_read_only(dir.path()).unwrap().verify();
    let d = report.damage.unwrap();
    assert_eq!(
        (d.segment, d.offset, d.seq),
        (files[1].clone(), a.start as u64, Some(a.seq))
    );
    // What is counted is what lies before the damage, as a walk would count it.
    assert_eq!(report.records, a.seq);
}

#[test]
fn a_sealed_footer_that_claims_records_past_a_hole_is_refused_by_name() {
    use std::os::unix::fs::MetadataExt;
    let dir = sweep_tempdir();
    // Segments of 128 KiB, within what a read-only open reads into memory
    // rather than maps, and records of 20 KB: the one that does not fit
    // leaves a gap before the footer, a hole in the sparse file.
    let log = Log::open(dir.path(), opts(128 << 10)).unwrap();
    let mut i = 0;
    while segment_files(dir.path()).len() < 2 {
        log.append(&entry(i, 20_000)).unwrap();
        i += 1;
    }
    log.close().unwrap();
    let sealed = segment_files(dir.path()).remove(0);
    let meta = fs::metadata(&sealed).unwrap();
    assert!(
        meta.blocks() * 512 < meta.len(),
        "the sealed segment is sparse"
    );
    assert_eq!(
        Log::open_read_only(dir.path())
            .unwrap()
            .restore()
            .unwrap()
            .history
            .len() as u64,
        i
    );
    // A footer (with a good CRC) whose records end inside the hole: a
    // read-only open reads this small segment into memory up to its hole,
    // and must refuse the footer rather than look past what it read.
    edit(&sealed, |b| {
        let at = b.len() - FOOTER_LEN;
        let mut f = Footer::decode(&b[at..]).unwrap().unwrap();
        let end = (at as u64 - 4096) & !15;
        assert!(f.data_end < end);
        (f.data_end, f.index_offset, f.index_count) = (end, end, 0);
        b[at..].copy_from_slice(&f.encode());
    });
    let meta = fs::metadata(&sealed).unwrap();
    assert!(meta.blocks() * 512 < meta.len(), "the edit kept the hole");
    let opened = Log::open_read_only(dir.path()).and_then(|l| l.restore());
    match opened {
        Err(Error::Corrupt { segment, kind, .. }) => {
            assert_eq!(segment, sealed);
            assert!(matches!(kind, CorruptKind::Footer(_)), "{kind:?}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_whole_read_of_a_mapped_segment_reads_and_checks_what_a_mapped_read_does() {
    let dir = sweep_tempdir();
    // 500 KB of records in a sparse 4 MiB segment: more than a read-only
    // open reads into memory at once, so it maps the file, and the first
    // read of most of the records copies them (`Map::committed_slice_in`).
    let log = Log::open(dir.path(), opts(4 << 20)).unwrap();
    for i in 0..100 {
        log.append(&entry(i, 5_000)).unwrap();
    }
    let written = read_all(&log);
    log.close().unwrap();
    assert_eq!(segment_files(dir.path()).len(), 1);

    // A whole read first.
    let reader = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(read_all(&reader), written);
    assert_eq!(reader.restore().unwrap().history.len(), 100);
    // A tail read first (the map serves it), then a whole one.
    let reader = Log::open_read_only(dir.path()).unwrap();
    let tail: Vec<_> = reader
        .snapshot()
        .entries_from(95)
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(tail, written[95..]);
    assert_eq!(read_all(&reader), written);

    // A flipped byte below the mark is met by a whole read, at its record.
    let active = segment_files(dir.path()).remove(0);
    let spans = engine::spans(&fs::read(&active).unwrap());
    let victim = *spans.iter().find(|s| s.seq == 10).unwrap();
    edit(&active, |b| b[victim.start + 70] ^= 0x01);
    match Log::open_read_only(dir.path()).unwrap().restore() {
        Err(Error::Corrupt {
            segment,
            offset,
            seq,
            ..
        }) => assert_eq!(
            (segment, offset, seq),
            (active, victim.start as u64, Some(10))
        ),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// Read-only opens racing a writer that appends and syncs (each sync
/// writes a durable mark) never see a healthy log as damaged: the open
/// reads the mark before it asks where the segment's data ends, so the
/// mark never names bytes past that end. (Asked the other way round, about
/// one open in 1,500 failed with a `Truncated` record below the mark.) On
/// a memory file system where there is one, where syncs cost nothing and
/// marks come fastest.
#[test]
fn read_only_opens_racing_a_syncing_writer_see_no_damage() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let shm = Path::new("/dev/shm");
    let base = match shm.is_dir() {
        true => tempfile::tempdir_in(shm),
        false => tempfile::tempdir(),
    }
    .unwrap();
    let opens = Arc::new(AtomicUsize::new(0));
    for round in 0..12 {
        let dir = base.path().join(format!("round-{round}"));
        let log = Log::open(&dir, opts(1 << 20)).unwrap();
        log.append(&entry(0, 100)).unwrap();
        log.sync().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (dir, stop, opens) = (dir.clone(), stop.clone(), opens.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match Log::open_read_only(&dir) {
                            Ok(_) => {}
                            Err(e) => return Err(e),
                        }
                        opens.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        // Up to 120 KiB of records: the segment's data stays small enough
        // to be read rather than mapped.
        // Each sync waits for two opens since the last, so that opens and
        // marks interleave however fast the file system syncs.
        let mut i = 1;
        while log.bytes() < 120 << 10 {
            let seen = opens.load(Ordering::Relaxed);
            while opens.load(Ordering::Relaxed) < seen + 2
                && !readers.iter().any(|r| r.is_finished())
            {
                std::thread::yield_now();
            }
            log.append(&entry(i, 250)).unwrap();
            log.sync().unwrap();
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            if let Err(e) = r.join().unwrap() {
                panic!("round {round}, a read-only open of a healthy log failed: {e}");
            }
        }
    }
    assert!(opens.load(Ordering::Relaxed) > 0);
}

/// The active segment of a store's session, and its newest durable mark.
fn active_mark(store: &session_store::Store, id: session_store::SessionId) -> Option<Mark> {
    let segs = segment_files(&store.session_dir(id));
    mark_of(segs.last().unwrap())
}

fn said(text: &str) -> session_store::Item {
    session_store::Item::assistant_text(text)
}

/// A store with a session of three `Buffered` saves after its creation,
/// none synced.
fn three_saves(root: &Path) -> (session_store::Store, session_store::SessionId, EntryHash) {
    use session_store::{Item, RequestConfig, Store};
    let store = Store::open(root).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    for i in 0..3 {
        store
            .save_delta(id, &mut head, &[said(&format!("answer {i}"))])
            .unwrap();
    }
    (store, id, head)
}

#[test]
fn dropping_the_last_clone_of_a_store_closes_it() {
    let dir = sweep_tempdir();
    let (store, id, head) = three_saves(dir.path());
    let before = active_mark(&store, id);
    // Buffered saves: the mark lags them, and the drop of a clone that is
    // not the last closes nothing.
    let clone = store.clone();
    drop(clone);
    assert_eq!(active_mark(&store, id), before);
    let next_seq = store.snapshot(id).unwrap().next_seq();
    let dir_of = store.session_dir(id);
    drop(store);
    let mark = mark_of(segment_files(&dir_of).last().unwrap()).unwrap();
    assert_eq!(mark.next_seq, next_seq, "the drop marked every record");
    assert_eq!(mark.hash, head);
}

#[test]
fn a_subscription_holding_the_last_clone_of_a_store_closes_it_when_dropped() {
    let dir = sweep_tempdir();
    let (store, id, _) = three_saves(dir.path());
    let next_seq = store.snapshot(id).unwrap().next_seq();
    let session = store.session_dir(id);
    // It follows the session through the log this store has open.
    let followed = store.subscribe(id, 0).unwrap();
    drop(store);
    drop(followed);
    let mark = mark_of(segment_files(&session).last().unwrap());
    assert_eq!(
        mark.map(|m| m.next_seq),
        Some(next_seq),
        "the drop marked every record"
    );
}

#[test]
fn a_view_trusts_the_records_it_hashed_past_a_lagging_mark_only_while_they_bear_it_out() {
    use session_store::{Item, Store};
    let dir = sweep_tempdir();
    let root = dir.path();
    let (id, marked, session, kept) =
        engine::closed_session(root, &[Item::user_text("q"), said("one")]);
    // A writer appends past the mark and ends as a crash ends it.
    let write = |text: &str| {
        let writer = Store::open(root).unwrap();
        let mut head = marked;
        writer.save_delta(id, &mut head, &[said(text)]).unwrap();
        writer.abandon();
        head
    };
    let head_a = write("two A");
    let viewer = Store::open_read_only(root).unwrap();
    let mark = active_mark(&viewer, id).unwrap();
    assert_eq!(mark.hash, marked, "the mark lags the last save");
    let texts = |store: &Store| -> Vec<Item> { store.restore(id).unwrap().history };
    let with_a = vec![Item::user_text("q"), said("one"), said("two A")];
    let hashed = session_store::links_hashed_by_opens;
    let before = hashed();
    assert_eq!(texts(&viewer), with_a);
    assert!(
        hashed() > before,
        "the first view hashes what lies past the mark"
    );
    // The next view trusts what the first hashed.
    let before = hashed();
    assert_eq!(texts(&viewer), with_a);
    assert_eq!(hashed(), before, "the second view hashed records again");
    // The same file of the same log, back to its state at the mark, and
    // another record of the same length where "two A" ended: the view's
    // hint names that end with a hash the record there no longer has.
    engine::put_back(kept.path(), &session);
    let head_b = write("two B");
    assert_ne!(head_b, head_a);
    let with_b = vec![Item::user_text("q"), said("one"), said("two B")];
    assert_eq!(texts(&viewer), with_b, "the view is the records', whole");
    assert_eq!(viewer.head(id).unwrap(), Some(head_b));
    // More records after the ones the view hashed: seen, chained from them.
    let mut head = head_b;
    let writer = Store::open(root).unwrap();
    writer.save_delta(id, &mut head, &[said("three")]).unwrap();
    writer.abandon();
    let mut longer = with_b;
    longer.push(said("three"));
    assert_eq!(texts(&viewer), longer);
    assert_eq!(viewer.head(id).unwrap(), Some(head));
    assert!(viewer.verify(id).unwrap().damage.is_none());
}
