//! Guards the reads behind the Agents SDK's `get_items(limit)` and
//! `pop_item`: the tail of the live history must be exactly what `restore`
//! ends with, across appends, removals (`ItemsRemoved`), compactions and
//! reopening, and a removal must keep the log's every entry and its chain.

use session_store::{EntryKind, Item, RequestConfig, Store};

#[test]
fn the_tail_is_what_restore_ends_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
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
            assert_eq!(tail.len, history.len() as u64);
            assert_eq!(tail.head, Some(head));
        }
    }
    let snap = store.snapshot(id).unwrap();
    assert!(snap
        .iter()
        .any(|r| r.unwrap().kind == EntryKind::ItemsRemoved));
    assert!(store.log(id).unwrap().verify().damage.is_none());
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
