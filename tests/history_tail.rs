//! Guards the reads behind the Agents SDK's `get_items(limit)` and
//! `pop_item`: the tail of the live history must be exactly what `restore`
//! ends with, across appends, removals (`ItemsRemoved`), compactions and
//! reopening, and a removal must keep the log's every entry and its chain.

use session_store::{EntryKind, Item, LogOptions, RequestConfig, Store, StoreOptions};

#[test]
fn the_tail_is_what_restore_ends_with() {
    assert_eq!(tail_walk(StoreOptions::default()), 1);
}

/// The same walk over logs of many small segments: a tail read back across
/// segment boundaries, sealed ones (with their index) and the active one.
#[test]
fn the_tail_is_what_restore_ends_with_across_segments() {
    let segments = tail_walk(StoreOptions {
        log: LogOptions {
            segment_size: 8192,
            initial_segment_size: 8192,
            ..LogOptions::default()
        },
        ..StoreOptions::default()
    });
    assert!(segments > 3, "{segments} segments");
}

/// Runs the walk and returns how many segments the log ended with.
fn tail_walk(opts: StoreOptions) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("start")])
        .unwrap();
    // A fixed pseudo-random walk of appends of 0..4 items, removals of
    // 0..6 and compactions.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut n = 0;
    for step in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        head = match x % 10 {
            0..=5 => {
                let items: Vec<Item> = (0..x % 4)
                    .map(|i| {
                        n += 1;
                        match i % 2 {
                            0 => Item::user_text(format!("u{n}")),
                            _ => Item::assistant_text(format!("a{n}")),
                        }
                    })
                    .collect();
                store.append(id, head, &items).unwrap()
            }
            6..=8 => store.remove_last(id, head, (x >> 8) % 6).unwrap(),
            _ => store
                .compact(id, head, &[Item::user_text(format!("summary {step}"))])
                .unwrap(),
        };
        if step % 25 == 0 {
            // Reopened: the same reads from the files alone.
            store.close().unwrap();
        }
        let history = store.restore(id).unwrap().history;
        for limit in [
            None,
            Some(0),
            Some(1),
            Some(3),
            Some(history.len()),
            Some(1000),
        ] {
            let tail = store.history_tail(id, limit).unwrap();
            let want = limit.map_or(0, |l| history.len().saturating_sub(l));
            assert_eq!(tail.items, history[want..], "step {step}, limit {limit:?}");
            assert_eq!(store.history_len(id).unwrap(), history.len() as u64);
            assert_eq!(tail.head, Some(head));
        }
    }
    let segments = std::fs::read_dir(dir.path().join("sessions").join(id.to_string()))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("seg".as_ref()))
        .count();
    let snap = store.snapshot(id).unwrap();
    assert!(snap
        .iter()
        .any(|r| r.unwrap().kind == EntryKind::ItemsRemoved));
    assert!(store.log(id).unwrap().verify().damage.is_none());
    store.close().unwrap();
    segments
}

#[test]
fn a_removal_with_a_stale_head_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    let moved = store.append(id, head, &[Item::user_text("b")]).unwrap();
    let err = store.remove_last(id, head, 1).unwrap_err();
    assert!(
        matches!(err, session_store::Error::HeadMismatch { .. }),
        "{err}"
    );
    assert_eq!(store.head(id).unwrap(), Some(moved));
    assert_eq!(store.restore(id).unwrap().history.len(), 2);
    // More than there is empties the history, and exports and imports back.
    store.remove_last(id, moved, u64::MAX).unwrap();
    assert!(store.restore(id).unwrap().history.is_empty());
    let mut out = Vec::new();
    store.export(id, &mut out).unwrap();
    let copy = store.import_from(out.as_slice()).unwrap();
    assert_eq!(store.restore(copy).unwrap().history, Vec::<Item>::new());
    assert_eq!(store.head(copy).unwrap(), store.head(id).unwrap());
}

/// Records of 10 KB, so that a segment's sparse index has an entry every
/// few records: a tail read walks back run by run, and must still end where
/// `restore` does, removals included.
#[test]
fn the_tail_walks_back_through_the_sparse_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("start")])
        .unwrap();
    for i in 0..300 {
        let items: Vec<Item> = (0..10)
            .map(|j| Item::user_text(format!("{i}.{j} {}", "x".repeat(1000))))
            .collect();
        head = store.append(id, head, &items).unwrap();
        if i % 40 == 39 {
            head = store.remove_last(id, head, 13).unwrap();
        }
    }
    for reopened in [false, true] {
        let history = store.restore(id).unwrap().history;
        for limit in [1, 9, 10, 11, 95, 1000, history.len()] {
            let tail = store.history_tail(id, Some(limit)).unwrap();
            let want = history.len().saturating_sub(limit);
            assert_eq!(
                tail.items,
                history[want..],
                "limit {limit}, reopened {reopened}"
            );
        }
        store.close().unwrap();
    }
}

/// A short tail checks the records it reads and no others: a record damaged
/// before the tail leaves `history_tail(Some(1))` exact, and a tail that
/// reaches it fails with the damage named, never with other items (and,
/// read in place, with nothing lent).
#[test]
fn a_tail_that_reaches_a_damaged_record_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    for i in 0..20 {
        head = store
            .append(id, head, &[Item::user_text(format!("item {i}"))])
            .unwrap();
    }
    store.close().unwrap();
    let seg = dir
        .path()
        .join("sessions")
        .join(id.to_string())
        .join("00000000000000000000.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    // Walk the records (64-byte header, payload padded to 16) to seq 10,
    // the entry that holds "item 9", and flip a byte of its payload.
    let mut at = 256;
    for _ in 0..10 {
        let len = u32::from_le_bytes(bytes[at + 40..at + 44].try_into().unwrap()) as usize;
        at += 64 + len.div_ceil(16) * 16;
    }
    assert_eq!(
        u64::from_le_bytes(bytes[at + 48..at + 56].try_into().unwrap()),
        10
    );
    bytes[at + 64] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();

    let store = Store::open_read_only(dir.path()).unwrap();
    let tail = store.history_tail(id, Some(1)).unwrap();
    assert_eq!(tail.items, vec![Item::user_text("item 19")]);
    for limit in [Some(15), None] {
        let err = store.history_tail(id, limit).unwrap_err();
        assert!(
            matches!(err, session_store::Error::Corrupt { .. }),
            "limit {limit:?}: {err}"
        );
        // Read in place, nothing is lent before every record is checked.
        let mut lent = false;
        let err = store
            .with_history_tail(id, limit, |_| lent = true)
            .unwrap_err();
        assert!(
            matches!(err, session_store::Error::Corrupt { .. }),
            "limit {limit:?}: {err}"
        );
        assert!(!lent, "limit {limit:?}");
    }
}
