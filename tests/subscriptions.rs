//! Guards subscriptions against missing, repeating or reordering entries: a
//! subscriber sees every entry once, in order, across rolls, from where it
//! asked to start, also from another store that follows a writer without
//! taking its lock.

mod common;

use std::thread;
use std::time::Duration;

use common::store::{open, tempdir, turn, turn_end};
use session_store::{EntryHash, LogEntry, RequestConfig, Store};

#[test]
fn a_subscription_sees_every_entry_once_in_order_across_rolls() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    for n in 0..3 {
        store.save_delta(id, &mut head, &turn(n, 100)).unwrap();
    }
    let mut sub = store.subscribe(id, 0).unwrap();
    let mut late = store.subscribe(id, 7).unwrap();
    const LATER_TURNS: usize = 30;
    let writer = {
        let store = store.clone();
        thread::spawn(move || {
            for n in 3..3 + LATER_TURNS {
                store.save_delta(id, &mut head, &turn(n, 1500)).unwrap();
            }
            head
        })
    };
    let total = 1 + 4 * (3 + LATER_TURNS) as u64;
    let wait = Duration::from_secs(20);
    let mut seen = Vec::new();
    while (seen.len() as u64) < total {
        let got = sub.next_timeout(wait).expect("an entry within the timeout");
        seen.push(got.unwrap());
    }
    let head = writer.join().unwrap();
    assert!(store.log(id).unwrap().segment_paths().len() > 3);
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..total).collect::<Vec<_>>());
    let snap = store.snapshot(id).unwrap();
    let logged: Vec<(u64, EntryHash, LogEntry)> =
        snap.entries_from(0).map(|r| r.unwrap()).collect();
    let seen_tuples: Vec<(u64, EntryHash, LogEntry)> = seen
        .iter()
        .map(|e| (e.seq, e.hash, e.entry.clone()))
        .collect();
    assert_eq!(seen_tuples, logged);
    for pair in seen.windows(2) {
        assert_eq!(
            pair[1].prev_hash, pair[0].hash,
            "prev_hash links each entry"
        );
    }
    assert_eq!(seen.last().unwrap().hash, head);
    assert!(
        sub.next_timeout(Duration::from_millis(50)).is_none(),
        "nothing extra"
    );

    // One more, appended after the subscriber caught up, arrives once.
    let mut head = head;
    turn_end(&store, id, &mut head, 33);
    let session_store::store::SubscribedEntry {
        seq, hash, entry, ..
    } = sub.next_timeout(wait).unwrap().unwrap();
    assert_eq!((seq, hash), (total, head));
    assert!(matches!(entry, LogEntry::TurnEnd { turn_count: 33, .. }));
    assert!(sub.next_timeout(Duration::from_millis(20)).is_none());

    // A subscription from the middle starts there.
    let mut from_7 = Vec::new();
    while let Some(r) = late.next_timeout(Duration::from_millis(20)) {
        from_7.push(r.unwrap().seq);
    }
    assert_eq!(from_7, (7..=total).collect::<Vec<_>>());
}

/// A store in another process (here: other `Store`s on the same root, which
/// hold their own file locks) follows a session that a writer is appending
/// to: from a read-only store, and from a writable one without taking the
/// writer's lock. Every entry arrives once, in order, across rolls
/// (issue 17, item 6).
#[test]
fn a_subscription_follows_a_writer_elsewhere_without_its_lock() {
    let dir = tempdir();
    let writer = open(dir.path());
    let (id, mut head) = writer
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    writer.save_delta(id, &mut head, &turn(0, 100)).unwrap();
    let reader = Store::open_read_only(dir.path()).unwrap();
    let mut from_reader = reader
        .subscribe(id, 0)
        .unwrap()
        .poll_interval(Duration::from_millis(2));
    let other = Store::open(dir.path()).unwrap();
    let mut from_other = other
        .subscribe(id, 0)
        .unwrap()
        .poll_interval(Duration::from_millis(2));
    const TURNS: usize = 25;
    let appender = thread::spawn(move || {
        for n in 1..=TURNS {
            writer.save_delta(id, &mut head, &turn(n, 1500)).unwrap();
        }
        let rolled = writer.log(id).unwrap().segment_paths().len() > 2;
        writer.close().unwrap();
        (head, rolled)
    });
    let total = 1 + 4 * (TURNS as u64 + 1);
    let collect = |sub: &mut session_store::Subscription| {
        let mut seen = Vec::new();
        while (seen.len() as u64) < total {
            let e = sub
                .next_timeout(Duration::from_secs(20))
                .unwrap_or_else(|| {
                    panic!(
                        "an entry within the timeout after {} of {total}",
                        seen.len()
                    )
                })
                .unwrap();
            seen.push((e.seq, e.hash, e.entry));
        }
        assert!(sub.next_timeout(Duration::from_millis(30)).is_none());
        seen
    };
    let (seen_r, seen_o) = (collect(&mut from_reader), collect(&mut from_other));
    let (head, rolled) = appender.join().unwrap();
    assert!(rolled, "the writer rolled segments while followed");
    let logged: Vec<(u64, EntryHash, LogEntry)> = reader
        .snapshot(id)
        .unwrap()
        .entries_from(0)
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(seen_r, logged);
    assert_eq!(seen_o, logged);
    assert_eq!(logged.last().unwrap().1, head);
}
