//! Guards compaction against losing its origin or the history it replaced:
//! a compaction in place records where it came from, `list`, `info` and
//! `restore` agree on it, the older entries stay in the log, and a restore
//! starts at the last `SessionStart` without reading the segments before it.

mod common;

use std::fs;

use common::store::{as_given, config_changed, ids, open, tempdir, turn};
use session_store::format::{RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use session_store::schema::now_ms;
use session_store::{
    schema::LoggedItem, EntryHash, Error, Item, ListFilter, LogEntry, RequestConfig, SessionOrigin,
    Store,
};

#[test]
fn compaction_in_place_records_its_origin_and_list_agrees_with_restore() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(Some("sys"), RequestConfig::model("m"), &[])
        .unwrap();
    for n in 0..4 {
        store.save_delta(id, &mut head, &turn(n, 5000)).unwrap();
    }
    config_changed(&store, id, &mut head, RequestConfig::model("m2"));
    let summary = vec![Item::user_text("Summary: four questions answered")];
    // A stale head writes nothing.
    let stale = store.log(id).unwrap().snapshot().head().unwrap().1;
    let before = store.log(id).unwrap().next_seq();
    assert!(matches!(
        store.compact(id, EntryHash::genesis(), &summary),
        Err(Error::HeadMismatch { session, .. }) if session == id
    ));
    assert_eq!(store.log(id).unwrap().next_seq(), before);
    let compacted_at = store.compact(id, stale, &summary).unwrap();
    let origin = SessionOrigin {
        session_id: id,
        at_hash: head,
    };
    let check = |store: &Store| {
        let state = store.restore(id).unwrap();
        assert_eq!(state.history, summary);
        assert_eq!(state.system_prompt.as_deref(), Some("sys"));
        assert_eq!(state.config, RequestConfig::model("m2"));
        assert_eq!(state.compacted_from, Some(origin));
        assert_eq!(state.forked_from, None);
        let info = store.info(id).unwrap().unwrap();
        assert_eq!(
            info.compacted_from, state.compacted_from,
            "info agrees with restore"
        );
        let listed = store.list().unwrap();
        let listed = listed.iter().find(|s| s.id == id).unwrap();
        assert_eq!(
            listed.compacted_from, state.compacted_from,
            "list agrees with restore"
        );
        let compacted = ListFilter {
            compacted: Some(true),
            ..ListFilter::default()
        };
        assert_eq!(ids(&store.list_filtered(&compacted).unwrap()), vec![id]);
    };
    check(&store);
    let mut head = compacted_at;
    store.save_delta(id, &mut head, &turn(9, 10)).unwrap();
    let mut expected = summary.clone();
    expected.extend(as_given(&turn(9, 10)));
    assert_eq!(store.restore(id).unwrap().history, expected);
    // The history before the compaction stays in the log.
    assert_eq!(
        store.snapshot(id).unwrap().iter().count() as u64,
        before + 5
    );
    store.close().unwrap();
    // From the disk, cleanly closed: the catalog says it too.
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.compacted_from, Some(origin));
    let listed = store.list().unwrap();
    assert_eq!(listed[0].compacted_from, Some(origin));
    // A fork of a compacted session keeps the compacted history.
    let (fork, _) = store.fork_at(id, compacted_at).unwrap();
    assert_eq!(store.restore(fork).unwrap().history, summary);
    let not_compacted = ListFilter {
        compacted: Some(false),
        ..ListFilter::default()
    };
    assert_eq!(
        ids(&store.list_filtered(&not_compacted).unwrap()),
        vec![fork]
    );
}

#[test]
fn restore_starts_at_the_last_session_start_without_reading_older_segments() {
    let dir = tempdir();
    let (id, first_segment) = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(Some("sys"), RequestConfig::model("m"), &[])
            .unwrap();
        for n in 0..8 {
            store.save_delta(id, &mut head, &turn(n, 4000)).unwrap();
        }
        let log = store.log(id).unwrap();
        let segments_before = log.segment_paths();
        assert!(segments_before.len() > 2);
        // An in-log compaction: a SessionStart in a later segment.
        let summary = [Item::user_text("summary of 8 turns")];
        let restart = LogEntry::SessionStart {
            ts: now_ms(),
            system_prompt: Some("sys 2".into()),
            config: RequestConfig::model("m2"),
            history: summary.iter().map(LoggedItem::from).collect(),
            forked_from: None,
            compacted_from: None,
        };
        store.save_entries(id, &mut head, &[restart]).unwrap();
        store.save_delta(id, &mut head, &turn(100, 10)).unwrap();
        let start_seq = log.snapshot().last_session_start().unwrap();
        assert_eq!(start_seq, 1 + 8 * 4);
        store.close().unwrap();
        (id, segments_before[0].clone())
    };
    let expected: Vec<Item> = std::iter::once(Item::user_text("summary of 8 turns"))
        .chain(as_given(&turn(100, 10)))
        .collect();
    {
        let store = open(dir.path());
        let state = store.restore(id).unwrap();
        assert_eq!(state.history, expected);
        assert_eq!(state.system_prompt.as_deref(), Some("sys 2"));
        assert_eq!(state.entries, 1 + 8 * 4 + 1 + 4);
    }
    // Damage the first record's payload in the sealed first segment. A restore
    // that read from seq 0 would trip over it; one that starts at the last
    // SessionStart never sees it.
    let mut bytes = fs::read(&first_segment).unwrap();
    bytes[SEGMENT_HEADER_LEN + RECORD_HEADER_LEN + 8] ^= 0xff;
    fs::write(&first_segment, bytes).unwrap();
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.history, expected);
    // The damage is real: replaying from the start does hit it, as a fork
    // at seq 1 must (its parent has no later SessionStart before seq 1).
    let (fork, _) = store.fork_at_seq(id, 1).unwrap();
    let err = store.restore(fork).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}
