//! Guards saves against losing, reordering or silently diverging what an
//! agent runtime saved: every kind of entry is logged in a chain that
//! verifies, tool calls keep their arguments byte for byte, a session resumes
//! with the head it held, a save from a stale head writes nothing, and the
//! benchmarks' encoder writes the very records a save writes.

mod common;

use common::store::{
    answer, as_given, call, kinds, open, reasoning, result, tempdir, turn, turn_end,
};
use session_store::schema::now_ms;
use session_store::{
    state::UsageRecord, EntryHash, EntryKind, Error, Item, JsonText, LogEntry, Problem,
    RequestConfig, WorkerResult,
};

const TURN_KINDS: [EntryKind; 4] = [
    EntryKind::UserInput,
    EntryKind::AssistantItems,
    EntryKind::ToolResults,
    EntryKind::AssistantItems,
];

#[test]
fn a_run_logs_its_entries_and_the_chain_is_intact() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(Some("You are terse."), RequestConfig::model("m1"), &[])
        .unwrap();
    let mut expected = vec![EntryKind::SessionStart];
    for n in 0..12 {
        store.save_delta(id, &mut head, &turn(n, 2000)).unwrap();
        turn_end(&store, id, &mut head, n as u64 + 1);
        expected.extend(TURN_KINDS);
        expected.push(EntryKind::TurnEnd);
    }
    let usage = UsageRecord {
        ts: 0,
        history_len: 60,
        input_total_tokens: 1234,
        cache_read_tokens: 1000,
        cache_write_tokens: 34,
        output_tokens: 56,
    };
    store
        .save_entries(id, &mut head, &[usage.entry(now_ms())])
        .unwrap();
    let payload = JsonText::parse(r#"{"k": [1, 2.50]}"#).unwrap();
    let extension = LogEntry::Extension {
        ts: now_ms(),
        domain: "my-plugin".into(),
        payload,
    };
    store.save_entries(id, &mut head, &[extension]).unwrap();
    let done = WorkerResult {
        text: Some("done".into()),
        stop_reason: "end_turn".into(),
    };
    let runs = [
        LogEntry::RunCompleted {
            ts: now_ms(),
            interrupted: false,
            result: done,
        },
        LogEntry::RunErrored {
            ts: now_ms(),
            interrupted: true,
            message: "cancelled by user".into(),
        },
    ];
    store.save_entries(id, &mut head, &runs[..1]).unwrap();
    store.save_entries(id, &mut head, &runs[1..]).unwrap();
    expected.extend([
        EntryKind::LlmUsage,
        EntryKind::Extension,
        EntryKind::RunCompleted,
        EntryKind::RunErrored,
    ]);

    let log = store.log(id).unwrap();
    assert!(log.segment_paths().len() > 2, "the run must span rolls");
    let report = log.verify();
    assert_eq!(report.damage, None);
    assert_eq!(report.records, expected.len() as u64);
    assert_eq!(report.head, Some((expected.len() as u64 - 1, head)));
    assert_eq!(kinds(&store, id), expected);
    let snap = log.snapshot();
    let mut prev = EntryHash::genesis();
    for rec in snap.iter() {
        let rec = rec.unwrap();
        assert_eq!(rec.prev_hash, prev, "seq {} does not link", rec.seq);
        prev = rec.hash;
    }
    assert_eq!(prev, head);
    assert_eq!(store.head(id).unwrap(), Some(head));

    let state = store.restore(id).unwrap();
    assert_eq!(state.head, Some(head));
    assert_eq!(state.head_seq, Some(expected.len() as u64 - 1));
    assert_eq!(state.entries, expected.len() as u64);
    assert_eq!(state.turn_count, 12);
    assert!(state.last_run_interrupted, "the errored run came last");
    assert_eq!(state.history.len(), 12 * 5);
    assert_eq!(state.usage.len(), 1);
    assert_eq!(state.usage[0].input_total_tokens, 1234);
    assert_ne!(state.usage[0].ts, 0, "a zero ts is replaced with now");
    assert_eq!(state.extensions.len(), 1);
    assert_eq!(state.extensions[0].domain, "my-plugin");
    assert_eq!(state.extensions[0].payload.as_str(), r#"{"k":[1,2.50]}"#);
}

#[test]
fn tool_calls_pair_up_and_keep_their_arguments_byte_for_byte() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let args_a = "{\"path\":\"a.rs\",   \"n\": 1.0e3}";
    let args_b = "{\n  \"q\": \"\\u00fc \\\"quoted\\\"\"\n}";
    let parallel = vec![
        Item::user_text("read both"),
        reasoning("two reads"),
        call("a", args_a),
        call("b", args_b),
        result("a", &"A".repeat(20_000)),
        result("b", "B"),
        answer("read them"),
    ];
    store.save_delta(id, &mut head, &parallel).unwrap();
    // A call whose result arrives in a later save.
    let pending = vec![Item::user_text("now run"), call("c", "{}")];
    store.save_delta(id, &mut head, &pending).unwrap();
    let state = store.restore(id).unwrap();
    assert_eq!(
        state.check(),
        vec![Problem::CallWithoutResult {
            index: 8,
            call_id: "c".into()
        }]
    );
    store
        .save_delta(id, &mut head, &[result("c", "ran")])
        .unwrap();

    let snap = store.snapshot(id).unwrap();
    let entries: Vec<LogEntry> = snap.entries_from(0).map(|r| r.unwrap().2).collect();
    let shape: Vec<(EntryKind, usize)> = entries
        .iter()
        .map(|e| (e.kind(), e.items().len()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (EntryKind::SessionStart, 0),
            (EntryKind::UserInput, 1),
            (EntryKind::AssistantItems, 3),
            (EntryKind::ToolResults, 2),
            (EntryKind::AssistantItems, 1),
            (EntryKind::UserInput, 1),
            (EntryKind::AssistantItems, 1),
            (EntryKind::ToolResults, 1),
        ]
    );
    let state = store.restore(id).unwrap();
    let mut all = parallel.clone();
    all.extend(pending);
    all.push(result("c", "ran"));
    assert_eq!(state.history, as_given(&all));
    assert_eq!(state.check(), vec![]);
    let args: Vec<&str> = state
        .history
        .iter()
        .filter_map(|i| match i {
            Item::ToolCall { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, vec![args_a, args_b, "{}"]);
}

#[test]
fn a_session_resumes_after_a_pause_with_the_held_head() {
    let dir = tempdir();
    let mut all = Vec::new();
    let (id, mut head) = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(Some("sys"), RequestConfig::model("m"), &[])
            .unwrap();
        for n in 0..6 {
            let items = turn(n, 3000);
            store.save_delta(id, &mut head, &items).unwrap();
            all.extend(items);
        }
        (id, head)
        // The store is dropped without close(): the process simply went away.
    };
    let stale = {
        let store = open(dir.path());
        assert_eq!(store.recovery_report(id).unwrap().torn_tail, None);
        assert_eq!(store.head(id).unwrap(), Some(head));
        let stale = head;
        for n in 6..9 {
            let items = turn(n, 3000);
            store.save_delta(id, &mut head, &items).unwrap();
            all.extend(items);
        }
        store.close().unwrap();
        stale
    };
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.history, as_given(&all));
    assert_eq!(state.head, Some(head));
    assert_eq!(store.log(id).unwrap().verify().damage, None);
    // The head from before the second pause no longer matches.
    let mut old = stale;
    let err = store.save_delta(id, &mut old, &turn(99, 1)).unwrap_err();
    assert!(matches!(err, Error::HeadMismatch { .. }), "{err}");
}

#[test]
fn a_head_conflict_forks_and_a_stale_save_writes_nothing() {
    let dir = tempdir();
    let store = open(dir.path());
    let initial = vec![Item::user_text("shared start")];
    let (id, h0) = store
        .create_session(None, RequestConfig::model("m"), &initial)
        .unwrap();
    // Two writers hold the same head; A writes first.
    let mut head_a = h0;
    let mut head_b = h0;
    store.save_delta(id, &mut head_a, &turn(1, 100)).unwrap();
    let log = store.log(id).unwrap();
    let next = log.next_seq();
    let bytes_before = log.bytes();

    let err = store
        .save_delta(id, &mut head_b, &turn(2, 100))
        .unwrap_err();
    match err {
        Error::HeadMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, Some(h0));
            assert_eq!(actual, Some(head_a));
        }
        other => panic!("expected HeadMismatch, got {other}"),
    }
    // Every other writer checks the head too, including an empty delta.
    let stale_writes: Vec<(&str, Result<(), Error>)> = vec![
        ("empty delta", store.save_delta(id, &mut head_b, &[])),
        (
            "config",
            store.save_entries(
                id,
                &mut head_b,
                &[LogEntry::ConfigChanged {
                    ts: now_ms(),
                    config: RequestConfig::model("x"),
                }],
            ),
        ),
        (
            "entries",
            store.save_entries(
                id,
                &mut head_b,
                &[LogEntry::TurnEnd {
                    ts: now_ms(),
                    turn_count: 9,
                }],
            ),
        ),
    ];
    for (what, r) in stale_writes {
        assert!(
            matches!(r, Err(Error::HeadMismatch { .. })),
            "{what}: {r:?}"
        );
    }
    assert_eq!(
        head_b, h0,
        "a failed save must not advance the caller's head"
    );
    assert_eq!(log.next_seq(), next, "a failed save must write nothing");
    assert_eq!(log.bytes(), bytes_before);
    assert_eq!(log.verify().damage, None);

    // Holding the current head: no fork.
    assert_eq!(store.ensure_head_or_fork(id, head_a).unwrap(), (id, head_a));
    // Holding an old head: B gets its own session from where it was.
    let (fork, mut fork_head) = store.ensure_head_or_fork(id, head_b).unwrap();
    assert_ne!(fork, id);
    let fork_state = store.restore(fork).unwrap();
    assert_eq!(fork_state.history, as_given(&initial));
    assert_eq!(fork_state.forked_from.unwrap().at_hash, h0);
    let b_turn = turn(2, 100);
    store.save_delta(fork, &mut fork_head, &b_turn).unwrap();

    let a_hist: Vec<Item> = initial.iter().cloned().chain(turn(1, 100)).collect();
    let b_hist: Vec<Item> = initial.iter().cloned().chain(b_turn).collect();
    assert_eq!(store.restore(id).unwrap().history, as_given(&a_hist));
    assert_eq!(store.restore(fork).unwrap().history, as_given(&b_hist));
    assert_eq!(store.head(id).unwrap(), Some(head_a));
}

/// The benchmarks' bound of the record format writes what `seal_delta`
/// makes of each save: those must be the very records `save_delta` writes
/// (the same linked bytes, so the same chain from the same head, seqs and
/// timestamps), or the bound bounds something else. Two saves: a turn of
/// large items and one of small ones, as the bench's workloads have.
#[test]
fn the_benchmarks_sealed_records_chain_to_the_head_save_delta_leaves() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(Some("You are terse."), RequestConfig::model("m1"), &[])
        .unwrap();
    let saves = [turn(3, 2000), turn(4, 10)];
    let mut sealed = head;
    let mut seq = 1;
    let mut buf = rkyv::util::AlignedVec::<16>::new();
    for items in &saves {
        let from = seq;
        store.save_delta(id, &mut head, items).unwrap();
        // The store stamps a save's records with one time of its own.
        let ts = store
            .snapshot(id)
            .unwrap()
            .iter_from(from)
            .next()
            .unwrap()
            .unwrap()
            .ts;
        session_store::seal_delta(items, ts, &mut sealed, &mut seq, &mut buf).unwrap();
        assert_eq!(sealed, head, "the save from seq {from}");
    }
    assert_eq!(seq, 1 + 2 * TURN_KINDS.len() as u64);
    assert_eq!(kinds(&store, id)[1..], [TURN_KINDS, TURN_KINDS].concat());
}

/// `commit_turn` archives its items straight from the borrowed `Item`s (or,
/// with one for the payload area, from owned entries), and its usage and
/// `TurnEnd` from their mirrors: either way its records are the ones
/// `save_entries` writes for the same entries, byte for byte.
#[test]
fn a_committed_turn_writes_the_records_its_entries_would() {
    for big in [false, true] {
        let dir = tempdir();
        let store = open(dir.path());
        let mut items = turn(7, 2000);
        items.push(Item::user_text("and a plain one"));
        if big {
            items.push(result("call_big", &"x".repeat(40 << 10)));
        }
        let usage = UsageRecord {
            ts: 5,
            history_len: 9,
            input_total_tokens: 812,
            cache_read_tokens: 700,
            cache_write_tokens: 12,
            output_tokens: 40,
        };
        let config = RequestConfig::model("m1");
        let (a, start) = store.create_session(None, config.clone(), &[]).unwrap();
        let turn = session_store::Turn::new(&items[..], 3).usage(usage);
        store.commit_turn(a, start, &turn).unwrap();
        let ts = store
            .snapshot(a)
            .unwrap()
            .iter_from(1)
            .next()
            .unwrap()
            .unwrap()
            .ts;
        let (b, mut head) = store.create_session(None, config, &[]).unwrap();
        let mut entries = session_store::group_delta(&items, ts);
        entries.push(usage.entry(ts));
        entries.push(LogEntry::TurnEnd { ts, turn_count: 3 });
        store.save_entries(b, &mut head, &entries).unwrap();
        let lines = |id| {
            let mut out = Vec::new();
            store
                .export_entries(id, |e| {
                    // The chain differs from the first record on (the
                    // sessions start apart); the entries must not.
                    let mut v: serde_json::Value = serde_json::from_str(&e.wire_line()).unwrap();
                    let line = v.as_object_mut().unwrap();
                    line.remove("hash");
                    line.remove("prev_hash");
                    out.push(v);
                    Ok(())
                })
                .unwrap();
            out.split_off(1)
        };
        assert_eq!(lines(a), lines(b), "big: {big}");
        let (ia, ib) = (
            store.info(a).unwrap().unwrap(),
            store.info(b).unwrap().unwrap(),
        );
        assert_eq!((ia.entries, ia.bytes), (ib.entries, ib.bytes), "big: {big}");
        assert_eq!(ia.payload_bytes, ib.payload_bytes, "big: {big}");
        assert_eq!(ia.payload_bytes > 0, big);
    }
}
