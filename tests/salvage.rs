//! Guards the salvage mode: damage anywhere (a sealed record, a footer, a
//! header) is cut at the first bad record and reported, leaving a log that
//! verifies and appends, while strict mode refuses or reports the same damage.

use std::path::Path;

use session_store::{schema::LoggedItem, Error, Item, Log, LogEntry, LogOptions, RecoveryMode};

fn entry(i: u64) -> LogEntry {
    LogEntry::UserInput {
        ts: i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "s".repeat(700)))),
    }
}

fn opts(mode: RecoveryMode) -> LogOptions {
    LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(8192).recovery(mode)
    }
}

fn build(dir: &Path, n: u64) -> Vec<std::path::PathBuf> {
    let log = Log::open(dir, opts(RecoveryMode::Strict)).unwrap();
    for i in 0..n {
        log.append(&entry(i)).unwrap();
    }
    let segs = log.segment_paths();
    log.close().unwrap();
    segs
}

fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

fn contents(log: &Log) -> Vec<LogEntry> {
    log.snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect()
}

#[test]
fn a_flipped_sealed_record_is_found_by_verify_and_cut_by_salvage() {
    let dir = tempfile::tempdir().unwrap();
    let segs = build(dir.path(), 40);
    assert!(segs.len() >= 4);
    // Inside the payload of the first record of the second segment.
    flip(&segs[1], 256 + 100);
    let strict = Log::open(dir.path(), opts(RecoveryMode::Strict)).unwrap();
    let damage = strict.verify().damage.expect("verify finds the flip");
    assert_eq!(damage.segment, segs[1]);
    assert_eq!(damage.offset, 256);
    let first_of_second = damage.seq.unwrap();
    drop(strict);

    let log = Log::open(dir.path(), opts(RecoveryMode::Salvage)).unwrap();
    let report = log.recovery_report().clone();
    let torn = report.torn_tail.expect("the cut is reported");
    assert!(torn.salvaged);
    assert_eq!(torn.segment, segs[1]);
    assert_eq!(torn.offset, 256);
    for later in &segs[2..] {
        assert!(
            report.removed.contains(later),
            "{} not removed",
            later.display()
        );
    }
    let kept = contents(&log);
    assert_eq!(kept, (0..first_of_second).map(entry).collect::<Vec<_>>());
    assert_eq!(log.verify().damage, None);
    log.append(&entry(first_of_second)).unwrap();
    drop(log);
    let log = Log::open(dir.path(), opts(RecoveryMode::Strict)).unwrap();
    assert_eq!(log.next_seq(), first_of_second + 1);
    assert_eq!(log.verify().damage, None);
}

#[test]
fn a_damaged_footer_is_corrupt_in_strict_mode_and_cut_in_salvage_mode() {
    let dir = tempfile::tempdir().unwrap();
    let segs = build(dir.path(), 40);
    let len = std::fs::metadata(&segs[0]).unwrap().len();
    flip(&segs[0], len - 128 + 20);
    match Log::open(dir.path(), opts(RecoveryMode::Strict)) {
        Err(Error::Corrupt { segment, .. }) => assert_eq!(segment, segs[0]),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let log = Log::open(dir.path(), opts(RecoveryMode::Salvage)).unwrap();
    assert!(log.recovery_report().torn_tail.as_ref().unwrap().salvaged);
    assert_eq!(log.verify().damage, None);
    // The footer's segment keeps its records; only later segments are gone.
    let kept = contents(&log);
    assert!(!kept.is_empty() && kept.len() < 40);
    assert_eq!(kept, (0..kept.len() as u64).map(entry).collect::<Vec<_>>());
}

#[test]
fn a_damaged_first_header_salvages_to_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let segs = build(dir.path(), 40);
    flip(&segs[0], 20);
    assert!(matches!(
        Log::open(dir.path(), opts(RecoveryMode::Strict)),
        Err(Error::Corrupt { .. })
    ));
    let log = Log::open(dir.path(), opts(RecoveryMode::Salvage)).unwrap();
    assert_eq!(log.next_seq(), 0);
    log.append(&entry(0)).unwrap();
    assert_eq!(log.verify().damage, None);
}

#[test]
fn a_damaged_header_of_the_last_or_second_to_last_segment_is_cut_by_salvage() {
    for which in [1usize, 2] {
        let dir = tempfile::tempdir().unwrap();
        let segs = build(dir.path(), 40);
        assert!(segs.len() >= 3, "{} segments", segs.len());
        let damaged = &segs[segs.len() - which];
        // A broken header, and (for the second to last) a last segment
        // without a mark: the case recovery checks for an unsettled roll.
        flip(damaged, 20);
        if which == 2 {
            let last = &segs[segs.len() - 1];
            let mut b = std::fs::read(last).unwrap();
            b[96..224].fill(0);
            std::fs::write(last, b).unwrap();
        }
        match Log::open(dir.path(), opts(RecoveryMode::Strict)) {
            Err(Error::Corrupt { segment, .. }) => assert_eq!(&segment, damaged, "{which}"),
            other => panic!("{which}: expected Corrupt, got {other:?}"),
        }
        let log = Log::open(dir.path(), opts(RecoveryMode::Salvage)).unwrap();
        assert!(log.recovery_report().torn_tail.as_ref().unwrap().salvaged);
        assert_eq!(log.verify().damage, None);
        assert!(!log.segment_paths().contains(damaged), "{which}");
        let kept = contents(&log);
        assert!(!kept.is_empty() && kept.len() < 40, "{which}");
        assert_eq!(kept, (0..kept.len() as u64).map(entry).collect::<Vec<_>>());
    }
}

/// A salvaged restore says it is partial: `RestoredState::salvaged` is set
/// and `check()` reports `Problem::Salvaged` first, in the salvaging open
/// and in every later open, read-only ones included, through the record the
/// writer left (`last-recovery.json`). Never an empty `check()` on lost data
/// (issue 17, item 9).
#[test]
fn a_salvaged_restore_says_it_is_partial_in_every_later_open() {
    use session_store::Problem;
    let dir = tempfile::tempdir().unwrap();
    let segs = build(dir.path(), 40);
    flip(&segs[1], 256 + 100);
    let log = Log::open(dir.path(), opts(RecoveryMode::Salvage)).unwrap();
    let lost_from = log.next_seq();
    let check = |state: &session_store::RestoredState| {
        let cut = state
            .salvaged
            .as_ref()
            .expect("the restore says it is partial");
        assert_eq!(cut.seq, Some(lost_from));
        assert!(matches!(
            state.check().first(),
            Some(Problem::Salvaged { seq: Some(s), .. }) if *s == lost_from
        ));
    };
    check(&log.restore().unwrap());
    drop(log);
    check(&Log::open_read_only(dir.path()).unwrap().restore().unwrap());
    check(
        &Log::open(dir.path(), opts(RecoveryMode::Strict))
            .unwrap()
            .restore()
            .unwrap(),
    );
    // A log that was never salvaged restores whole.
    let clean = tempfile::tempdir().unwrap();
    build(clean.path(), 3);
    let state = Log::open_read_only(clean.path())
        .unwrap()
        .restore()
        .unwrap();
    assert_eq!(state.salvaged, None);
    assert!(state.check().is_empty());
}
