//! Guards the async API: `AsyncStore` under a multi-threaded and a
//! current-thread tokio runtime keeps every promise of `Store` (64 sessions
//! saving at once, compaction, a fork, a restart), never blocks a runtime
//! worker (a 1 ms timer keeps firing while a turn loop saves), and its
//! subscription stream yields every entry once, in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use session_store::{
    state::UsageRecord, AsyncStore, Durability, Error, Item, LogOptions, RequestConfig, Store,
    StoreOptions, Turn,
};

fn turn_items(session: usize, n: usize) -> Vec<Item> {
    let call_id = format!("call_{session}_{n}");
    vec![
        Item::user_text(format!("session {session} question {n}")),
        Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: String::new(),
            summary: vec![format!("thinking {n}")],
            encrypted_content: Some(format!("opaque-{session}-{n}")),
            status: None,
        },
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: call_id.clone(),
            name: "shell".into(),
            arguments: format!(r#"{{"cmd":"ls {n}"}}"#),
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id,
            summary: String::new(),
            content: Some(format!("file-{n}\n").repeat(20)),
        },
        Item::assistant_text(format!("answer {n}")),
    ]
}

/// 64 sessions, each a task committing turns; one compacts, one is forked;
/// then a restart, and every session restores exactly.
async fn sixty_four_sessions(root: &std::path::Path, durability: Durability) {
    let store = AsyncStore::new(
        Store::open_with(
            root,
            StoreOptions::default().log(LogOptions::default().durability(durability)),
        )
        .unwrap(),
    );
    const SESSIONS: usize = 64;
    const TURNS: usize = 6;
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (id, mut head) = store
                .create_session(Some("sys".into()), RequestConfig::model("m"), vec![])
                .await
                .unwrap();
            let mut expected = Vec::new();
            for n in 0..TURNS {
                let items = turn_items(s, n);
                expected.extend(items.iter().cloned());
                let usage = UsageRecord {
                    output_tokens: n as u64,
                    ..UsageRecord::default()
                };
                let turn = Turn::new(items, n as u64 + 1).usage(usage);
                head = store.commit_turn(id, head, turn).await.unwrap();
                if s == 0 && n == 3 {
                    let summary = vec![Item::user_text("summary of turns 0-3")];
                    head = store.compact(id, head, summary.clone()).await.unwrap();
                    expected = summary;
                }
            }
            (id, head, expected)
        }));
    }
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    let (parent, parent_head, parent_items) = sessions[1].clone();
    let (fork, _) = store.fork_at(parent, parent_head).await.unwrap();
    // A stale head is refused with the session named, and nothing written.
    let (id0, head0, _) = sessions[0].clone();
    let stale = store
        .append(id0, parent_head, vec![Item::user_text("x")])
        .await
        .unwrap_err();
    assert!(matches!(stale, Error::HeadMismatch { session, .. } if session == id0));
    store.close().await.unwrap();
    drop(store);

    let store = AsyncStore::new(Store::open(root).unwrap());
    for (id, head, expected) in &sessions {
        let state = store.restore(*id).await.unwrap();
        assert_eq!(&state.history, expected, "session {id}");
        assert_eq!(state.head, Some(*head));
        assert_eq!(state.turn_count, TURNS as u64);
        assert!(state.check().is_empty(), "{:?}", state.check());
    }
    assert_eq!(store.restore(fork).await.unwrap().history, parent_items);
    assert!(store.restore(id0).await.unwrap().compacted_from.is_some());
    assert_eq!(store.list().await.unwrap().len(), SESSIONS + 1);
    let (_, h) = (id0, head0);
    assert_eq!(store.restore(id0).await.unwrap().head, Some(h));
    // A fork by reference: its link checks, and deleting its parent
    // retires the parent, which the fork still reads.
    let link = store.verify_fork_link(fork).await.unwrap().unwrap();
    assert_eq!(link.parent, parent);
    let (by_seq, _) = store.fork_at_seq(parent, link.seq).await.unwrap();
    assert!(matches!(
        store.delete(parent).await.unwrap(),
        session_store::Deletion::Retired { forks } if forks.len() == 2
    ));
    assert_eq!(store.restore(by_seq).await.unwrap().history, parent_items);
}

#[test]
fn sixty_four_sessions_on_a_multi_threaded_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    for durability in [Durability::Buffered, Durability::Sync] {
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(sixty_four_sessions(dir.path(), durability));
    }
}

#[test]
fn sixty_four_sessions_on_a_current_thread_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(sixty_four_sessions(dir.path(), Durability::Buffered));
}

/// A turn loop that never yields on its own (Buffered saves are fast) must
/// not starve the runtime: on a current-thread runtime, a 1 ms timer task
/// fires while the loop saves, because every save awaits the blocking pool.
/// The lateness is printed, not asserted (benchmarks hold the figures).
#[test]
fn a_timer_keeps_firing_while_a_turn_loop_saves() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = AsyncStore::new(Store::open(dir.path()).unwrap());
        let ticks = Arc::new(AtomicU64::new(0));
        let worst_late_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let timer = {
            let (ticks, worst, stop) = (ticks.clone(), worst_late_us.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let due = Instant::now() + Duration::from_millis(1);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let late = Instant::now().saturating_duration_since(due);
                    worst.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), vec![])
            .await
            .unwrap();
        let started = Instant::now();
        let mut n = 0;
        while n < 100 || started.elapsed() < Duration::from_millis(50) {
            head = store
                .commit_turn(id, head, Turn::new(turn_items(0, n), n as u64 + 1))
                .await
                .unwrap();
            n += 1;
        }
        let during = ticks.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        timer.await.unwrap();
        assert!(
            during > 0,
            "the timer never fired during {n} saves: a save blocked the runtime's only worker"
        );
        println!(
            "{n} turns in {:?}; the 1 ms timer fired {during} times, at worst {} µs late",
            started.elapsed(),
            worst_late_us.load(Ordering::Relaxed)
        );
    });
}

/// The stream yields every entry once, in order, including those committed
/// after it was opened, and ends soon after it is dropped.
#[test]
fn a_subscription_stream_yields_every_entry_once_in_order() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = AsyncStore::new(Store::open(dir.path()).unwrap());
        let (id, head) = store
            .create_session(None, RequestConfig::default(), vec![])
            .await
            .unwrap();
        let head = store
            .commit_turn(id, head, Turn::new(turn_items(0, 0), 1))
            .await
            .unwrap();
        let mut stream = store.subscribe(id, 0).await.unwrap();
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                let mut head = head;
                for n in 1..20 {
                    head = store
                        .commit_turn(id, head, Turn::new(turn_items(0, n), n as u64 + 1))
                        .await
                        .unwrap();
                }
                head
            })
        };
        // 1 SessionStart, then per turn 4 entries of items and a TurnEnd.
        let total = 1 + 20 * 5;
        let mut seen = Vec::new();
        while seen.len() < total {
            let entry = tokio::time::timeout(Duration::from_secs(20), stream.next())
                .await
                .expect("an entry within the timeout")
                .expect("the stream goes on")
                .unwrap();
            seen.push(entry);
        }
        let last = writer.await.unwrap();
        let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..total as u64).collect::<Vec<_>>());
        assert_eq!(seen.last().unwrap().hash, last);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), stream.next())
                .await
                .is_err(),
            "nothing extra"
        );
        drop(stream);
    });
}

#[tokio::test(flavor = "current_thread")]
async fn the_last_async_store_dropped_closes_on_the_blocking_pool_not_the_worker() {
    use session_store::{log::IoHook, log::IoOp};
    use std::sync::Mutex;
    struct Syncs(Mutex<Vec<std::thread::ThreadId>>);
    impl IoHook for Syncs {
        fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
            if matches!(op, IoOp::Sync { .. }) {
                self.0.lock().unwrap().push(std::thread::current().id());
            }
            Ok(())
        }
    }
    let hook = Arc::new(Syncs(Mutex::new(Vec::new())));
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default().log(LogOptions::default().hook(hook.clone()));
    let store = AsyncStore::new(Store::open_with(dir.path(), opts).unwrap());
    let (id, head) = store
        .create_session(None, RequestConfig::default(), vec![Item::user_text("hi")])
        .await
        .unwrap();
    store
        .append(id, head, vec![Item::assistant_text("hello")])
        .await
        .unwrap();
    hook.0.lock().unwrap().clear();
    // On the runtime's only worker, this test's thread.
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(10);
    while hook.0.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let syncs = hook.0.lock().unwrap().clone();
    assert!(!syncs.is_empty(), "the drop closed the store (its sync)");
    let me = std::thread::current().id();
    assert!(
        syncs.iter().all(|t| *t != me),
        "the close synced on the runtime's worker"
    );
}

#[test]
fn of_two_async_stores_dropped_at_once_on_two_workers_neither_closes_there() {
    use session_store::{log::IoHook, log::IoOp};
    use std::cell::Cell;
    use std::sync::Barrier;
    thread_local! {
        static DROPPING: Cell<bool> = const { Cell::new(false) };
    }
    /// Syncs made by a thread while it drops an `AsyncStore`.
    struct OnDropper(AtomicU64);
    impl IoHook for OnDropper {
        fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
            if matches!(op, IoOp::Sync { .. }) && DROPPING.with(Cell::get) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_all()
        .build()
        .unwrap();
    let hook = Arc::new(OnDropper(AtomicU64::new(0)));
    let mut closed_on_a_worker = 0;
    let rounds = 300;
    for _ in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions::default().log(LogOptions::default().hook(hook.clone()));
        let store = Store::open_with(dir.path(), opts).unwrap();
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
            .unwrap();
        // Unsynced, so that the close syncs.
        store
            .save_delta(id, &mut head, &[Item::assistant_text("hello")])
            .unwrap();
        let a = AsyncStore::new(store);
        let b = a.clone();
        let barrier = Arc::new(Barrier::new(2));
        let before = hook.0.load(Ordering::Relaxed);
        runtime.block_on(async {
            let drop_on_a_worker = |s: AsyncStore, barrier: Arc<Barrier>| {
                tokio::spawn(async move {
                    barrier.wait();
                    DROPPING.with(|d| d.set(true));
                    drop(s);
                    DROPPING.with(|d| d.set(false));
                })
            };
            let x = drop_on_a_worker(a, barrier.clone());
            let y = drop_on_a_worker(b, barrier);
            x.await.unwrap();
            y.await.unwrap();
        });
        if hook.0.load(Ordering::Relaxed) > before {
            closed_on_a_worker += 1;
        }
    }
    assert_eq!(
        closed_on_a_worker, 0,
        "{closed_on_a_worker} of {rounds} last drops synced on a runtime worker"
    );
}
