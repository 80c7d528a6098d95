//! Guards the session API against losing, reordering, mixing up or silently
//! diverging what an agent runtime saved: restore, fork, compaction, listing,
//! deletion, hostile ids, concurrent writers, subscriptions, the ready-to-send
//! check, import, and listing after a crash.

mod engine;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use session_store::format::{RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use session_store::{
    log::IoHook, log::IoOp, schema::LoggedItem, state::UsageRecord, wire::entry_line,
    wire::parse_line, wire::WireLine, ContentPart, EntryHash, EntryKind, Error, Item, ItemStatus,
    JsonText, ListFilter, LogEntry, LogOptions, Problem, RequestConfig, RestoredState, Role,
    SessionId, SessionOrigin, Store, StoreOptions, WorkerResult,
};

use session_store::schema::now_ms;

/// Appends a `TurnEnd`.
fn turn_end(store: &Store, id: SessionId, head: &mut EntryHash, turn_count: u64) {
    let entry = LogEntry::TurnEnd {
        ts: now_ms(),
        turn_count,
    };
    store.save_entries(id, head, &[entry]).unwrap();
}

/// Appends a `ConfigChanged`.
fn config_changed(store: &Store, id: SessionId, head: &mut EntryHash, config: RequestConfig) {
    let entry = LogEntry::ConfigChanged {
        ts: now_ms(),
        config,
    };
    store.save_entries(id, head, &[entry]).unwrap();
}

/// Small segments, so that a few turns already roll.
const SEGMENT_BYTES: u64 = 16 << 10;

fn options() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(SEGMENT_BYTES))
}

fn open(root: &Path) -> Store {
    Store::open_with(root, options()).unwrap()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn call(call_id: &str, arguments: &str) -> Item {
    Item::ToolCall {
        extra: Default::default(),
        id: Some(format!("fc_{call_id}")),
        call_id: call_id.into(),
        name: "shell".into(),
        arguments: arguments.into(),
        status: Some(ItemStatus::Completed),
    }
}

fn result(call_id: &str, output: &str) -> Item {
    Item::ToolResult {
        extra: Default::default(),
        id: Some(format!("fco_{call_id}")),
        call_id: call_id.into(),
        summary: format!("ran {call_id}"),
        content: Some(output.into()),
    }
}

fn reasoning(text: &str) -> Item {
    Item::Reasoning {
        extra: Default::default(),
        id: Some("rs_0123".into()),
        text: text.into(),
        summary: vec![format!("summary: {text}")],
        // Opaque bytes that must come back exactly, NUL and all.
        encrypted_content: Some(format!("gAAAAB{}+/=\u{0}\u{7f}é", text.len())),
        status: Some(ItemStatus::Completed),
    }
}

fn answer(text: &str) -> Item {
    Item::Message {
        extra: Default::default(),
        id: Some("msg_0456".into()),
        role: Role::Assistant,
        content: vec![ContentPart::Text { text: text.into() }],
        status: Some(ItemStatus::Completed),
    }
}

/// One realistic turn: user, reasoning + call, result (`pad` bytes), answer.
/// `save_delta` groups it into four entries.
fn turn(n: usize, pad: usize) -> Vec<Item> {
    let call_id = format!("call_{n}");
    vec![
        Item::user_text(format!("question {n}")),
        reasoning(&format!("thinking about {n}")),
        call(&call_id, &format!(r#"{{"cmd": "grep -n {n}",  "x": "ü"}}"#)),
        result(&call_id, &format!("{n}:{}", "o".repeat(pad))),
        answer(&format!("answer {n}")),
    ]
}

const TURN_KINDS: [EntryKind; 4] = [
    EntryKind::UserInput,
    EntryKind::AssistantItems,
    EntryKind::ToolResults,
    EntryKind::AssistantItems,
];

/// What a restore gives back of `items`: all of them, as given.
fn as_given(items: &[Item]) -> Vec<Item> {
    items.to_vec()
}

fn kinds(store: &Store, id: SessionId) -> Vec<EntryKind> {
    let snap = store.snapshot(id).unwrap();
    let kinds = snap.iter().map(|r| r.unwrap().kind).collect();
    kinds
}

fn hashes(store: &Store, id: SessionId) -> Vec<(u64, EntryHash)> {
    let snap = store.snapshot(id).unwrap();
    let hashes = snap
        .iter()
        .map(|r| r.unwrap())
        .map(|r| (r.seq, r.hash))
        .collect();
    hashes
}

/// Every path under `root` with its length (directories as `None`).
fn tree(root: &Path) -> BTreeMap<PathBuf, Option<u64>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if e.file_type().unwrap().is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(e.metadata().unwrap().len()));
            }
        }
    }
    out
}

fn session_dirs(root: &Path) -> BTreeSet<String> {
    ["sessions", "trash"]
        .iter()
        .flat_map(|d| fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path().display().to_string())
        .collect()
}

fn ids(infos: &[session_store::SessionInfo]) -> Vec<SessionId> {
    infos.iter().map(|i| i.id).collect()
}

/// Spins (no sleep) until the millisecond clock has passed every time read so far.
fn next_ms() -> u64 {
    let t = now_ms() + 1;
    while now_ms() < t {
        thread::yield_now();
    }
    t
}

// ---------------------------------------------------------------------------
// The seed's session tests, ported.
// ---------------------------------------------------------------------------

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
fn restore_round_trips_everything_ids_and_statuses_included() {
    let dir = tempdir();
    let initial = vec![
        Item::system_text("hook: repo is clean"),
        Item::Message {
            extra: Default::default(),
            id: Some("msg_u0".into()),
            role: Role::User,
            content: vec![ContentPart::Text {
                text: "start".into(),
            }],
            status: Some(ItemStatus::Completed),
        },
    ];
    let delta = vec![
        Item::Message {
            extra: Default::default(),
            id: Some("msg_u1".into()),
            role: Role::User,
            content: vec![
                ContentPart::Text {
                    text: "first part".into(),
                },
                ContentPart::Text {
                    text: " and\u{0} second".into(),
                },
            ],
            status: None,
        },
        reasoning("plan"),
        Item::Message {
            extra: Default::default(),
            id: Some("msg_a1".into()),
            role: Role::Assistant,
            content: vec![
                ContentPart::Text { text: "ok".into() },
                ContentPart::Refusal {
                    refusal: "not that".into(),
                },
            ],
            status: Some(ItemStatus::Incomplete),
        },
        call("c1", "{\"cmd\":  \"ls -la\",\n \"env\": {\"ü\": \"\\n\"}}"),
        result("c1", "total 0\n"),
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "c1b".into(),
            summary: String::new(),
            content: None,
        },
        Item::system_text("hook: tests passed"),
        answer("done"),
    ];
    let config = RequestConfig {
        model: Some("m2".into()),
        temperature: Some(0.25),
        top_p: None,
        max_output_tokens: Some(4096),
        reasoning_effort: Some("high".into()),
        extra: Some(JsonText::parse(r#"{"store": false, "n": 1.50}"#).unwrap()),
    };
    let all: Vec<Item> = initial.iter().chain(&delta).cloned().collect();
    let expected = as_given(&all);
    assert!(
        all.iter().any(|i| *i != i.without_provider_state()),
        "the items must carry provider state to keep"
    );

    let (id, head) = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(Some("system prompt"), config.clone(), &initial)
            .unwrap();
        store.save_delta(id, &mut head, &delta).unwrap();
        let state = store.restore(id).unwrap();
        assert_eq!(state.history, expected);
        assert_eq!(state.system_prompt.as_deref(), Some("system prompt"));
        assert_eq!(state.config, config);
        (id, head)
    };
    // And from disk, through a fresh store.
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.history, expected);
    assert_eq!(state.config, config);
    assert_eq!(state.head, Some(head));
    assert_eq!(state.forked_from, None);
    assert_eq!(state.compacted_from, None);
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
fn a_fork_keeps_state_and_then_goes_its_own_way() {
    let dir = tempdir();
    let store = open(dir.path());
    let config = RequestConfig {
        temperature: Some(0.5),
        ..RequestConfig::model("m-fork")
    };
    let initial = vec![Item::user_text("Refactor the parser")];
    let (src, mut src_head) = store
        .create_session(Some("be careful"), config.clone(), &initial)
        .unwrap();
    let mut history = initial.clone();
    for n in 0..5 {
        let items = turn(n, 4000);
        store.save_delta(src, &mut src_head, &items).unwrap();
        history.extend(items);
    }
    let (fork, mut fork_head) = store.fork_at(src, src_head).unwrap();
    assert_ne!(fork, src);
    let state = store.restore(fork).unwrap();
    assert_eq!(state.history, as_given(&history));
    assert_eq!(state.system_prompt.as_deref(), Some("be careful"));
    assert_eq!(state.config, config);
    let origin = SessionOrigin {
        session_id: src,
        at_hash: src_head,
    };
    assert_eq!(state.forked_from, Some(origin));
    assert_eq!(state.head, Some(fork_head));
    // A fork by reference: one small entry naming the parent, no copy.
    assert_eq!(kinds(&store, fork), vec![EntryKind::ForkedFrom]);

    // The two go separate ways.
    store
        .save_delta(fork, &mut fork_head, &[Item::user_text("fork only")])
        .unwrap();
    store
        .save_delta(src, &mut src_head, &[Item::user_text("source only")])
        .unwrap();
    let fork_state = store.restore(fork).unwrap();
    let src_state = store.restore(src).unwrap();
    assert_eq!(
        fork_state.history.last(),
        Some(&Item::user_text("fork only"))
    );
    assert_eq!(
        src_state.history.last(),
        Some(&Item::user_text("source only"))
    );
    assert_eq!(fork_state.history.len(), history.len() + 1);
    assert_eq!(src_state.history.len(), history.len() + 1);
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!(info.forked_from, Some(origin));
    assert_eq!(info.title.as_deref(), Some("Refactor the parser"));
}

#[test]
fn fork_at_truncates_by_hash_and_by_seq() {
    let dir = tempdir();
    // Every item in its record, so that the turns span segments.
    let store = Store::open_with(dir.path(), options().payload_threshold(usize::MAX)).unwrap();
    let initial = vec![Item::user_text("zero")];
    let (src, h0) = store
        .create_session(None, RequestConfig::model("m"), &initial)
        .unwrap();
    let mut head = h0;
    let first = turn(1, 9000);
    store.save_delta(src, &mut head, &first).unwrap();
    let h1 = head;
    let second = turn(2, 9000);
    store.save_delta(src, &mut head, &second).unwrap();
    turn_end(&store, src, &mut head, 2);
    assert!(store.log(src).unwrap().segment_paths().len() > 1);

    let upto_first: Vec<Item> = initial.iter().chain(&first).cloned().collect();
    // seq 4 is the last entry of the first turn (1 start + 4 entries).
    let (by_hash, _) = store.fork_at(src, h1).unwrap();
    let (by_seq, _) = store.fork_at_seq(src, 4).unwrap();
    for fork in [by_hash, by_seq] {
        let state = store.restore(fork).unwrap();
        assert_eq!(state.history, as_given(&upto_first));
        assert_eq!(
            state.forked_from,
            Some(SessionOrigin {
                session_id: src,
                at_hash: h1
            })
        );
    }
    // Mid-turn: after the reasoning and call, before the result.
    let (mid, _) = store.fork_at_seq(src, 2).unwrap();
    assert_eq!(
        store.restore(mid).unwrap().history,
        as_given(&upto_first[..4])
    );
    let (start, _) = store.fork_at_seq(src, 0).unwrap();
    let state = store.restore(start).unwrap();
    assert_eq!(state.history, as_given(&initial));
    assert_eq!(state.forked_from.unwrap().at_hash, h0);

    let listed = store.list().unwrap().len();
    let err = store.fork_at(src, EntryHash([7; 32])).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let next = store.log(src).unwrap().next_seq();
    let err = store.fork_at_seq(src, next).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert_eq!(
        store.list().unwrap().len(),
        listed,
        "a failed fork creates nothing"
    );
    // The source is untouched.
    assert_eq!(store.head(src).unwrap(), Some(head));
}

#[test]
fn a_config_change_is_logged_and_restored() {
    let dir = tempdir();
    let id = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(None, RequestConfig::model("small"), &[])
            .unwrap();
        store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
        let bigger = RequestConfig {
            model: Some("large".into()),
            reasoning_effort: Some("high".into()),
            extra: Some(JsonText::parse(r#"{"parallel_tool_calls": true}"#).unwrap()),
            ..RequestConfig::default()
        };
        config_changed(&store, id, &mut head, bigger.clone());
        let snap = store.snapshot(id).unwrap();
        let (_, _, last) = snap.entries_from(5).next().unwrap().unwrap();
        assert!(
            matches!(&last, LogEntry::ConfigChanged { config, .. } if *config == bigger),
            "{last:?}"
        );
        assert_eq!(store.restore(id).unwrap().config, bigger);
        // A fork carries the config in force.
        let (fork, _) = store.fork_at(id, head).unwrap();
        assert_eq!(store.restore(fork).unwrap().config, bigger);
        id
    };
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.config.model.as_deref(), Some("large"));
    assert_eq!(
        state.config.extra.as_ref().map(JsonText::as_str),
        Some(r#"{"parallel_tool_calls":true}"#)
    );
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

// ---------------------------------------------------------------------------
// Compaction.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Listing.
// ---------------------------------------------------------------------------

#[test]
fn list_is_newest_first_with_true_counts_bytes_and_heads() {
    let dir = tempdir();
    let store = open(dir.path());
    let mut created = Vec::new();
    for i in 0..6 {
        let (id, mut head) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[Item::user_text(format!("task {i}"))],
            )
            .unwrap();
        for n in 0..i {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        created.push(id);
    }
    let list = store.list().unwrap();
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(ids(&list), newest_first);
    for (i, id) in created.iter().enumerate() {
        let info = list.iter().find(|s| s.id == *id).unwrap();
        let log = store.log(*id).unwrap();
        let verify = log.verify();
        assert_eq!(info.entries, 1 + 4 * i as u64);
        assert_eq!(info.entries, verify.records);
        assert_eq!(info.bytes, verify.bytes);
        assert!(info.bytes > 0);
        assert_eq!(info.head, store.head(*id).unwrap());
        assert_eq!(info.created_ms, id.created_ms().unwrap());
        assert!(info.updated_ms >= info.created_ms);
        assert_eq!(info.title, Some(format!("task {i}")));
        assert_eq!(store.info(*id).unwrap().as_ref(), Some(info));
    }
}

#[test]
fn the_title_is_an_excerpt_of_the_first_user_text() {
    let dir = tempdir();
    let id_late = {
        let store = open(dir.path());
        let (from_history, _) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[
                    Item::system_text("hook text is not a title"),
                    Item::user_text("   "),
                    Item::user_text("  Fix the flaky build\nwith more detail below"),
                ],
            )
            .unwrap();
        let (late, mut head) = store
            .create_session(
                Some("system prompt is not a title"),
                RequestConfig::default(),
                &[],
            )
            .unwrap();
        store
            .save_delta(late, &mut head, &[answer("assistant text is not a title")])
            .unwrap();
        assert_eq!(store.info(late).unwrap().unwrap().title, None);
        store
            .save_delta(late, &mut head, &[Item::user_text("Later question")])
            .unwrap();
        store
            .save_delta(late, &mut head, &[Item::user_text("A second question")])
            .unwrap();
        let long = "ß".repeat(200);
        let (long_id, _) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[Item::user_text(long.clone())],
            )
            .unwrap();

        let title = |id| store.info(id).unwrap().unwrap().title;
        assert_eq!(title(from_history).as_deref(), Some("Fix the flaky build"));
        assert_eq!(title(late).as_deref(), Some("Later question"));
        let t = title(long_id).unwrap();
        let body = t
            .strip_suffix('…')
            .expect("a cut title ends with an ellipsis");
        assert!(
            !body.is_empty() && body.len() <= 120,
            "{} bytes",
            body.len()
        );
        assert!(long.starts_with(body));
        late
    };
    // The first title sticks across a reopen.
    let store = open(dir.path());
    let mut head = store.head(id_late).unwrap().unwrap();
    store
        .save_delta(id_late, &mut head, &[Item::user_text("Third question")])
        .unwrap();
    assert_eq!(
        store.info(id_late).unwrap().unwrap().title.as_deref(),
        Some("Later question")
    );
}

#[test]
fn list_filters_by_update_time_fork_origin_and_title() {
    let dir = tempdir();
    let store = open(dir.path());
    let cfg = RequestConfig::default();
    let (parent, ph) = store
        .create_session(None, cfg.clone(), &[Item::user_text("Parent task ALPHA")])
        .unwrap();
    let (other, mut oh) = store
        .create_session(None, cfg.clone(), &[Item::user_text("unrelated beta")])
        .unwrap();
    let (f1, _) = store.fork_at(parent, ph).unwrap();
    let (f2, _) = store.fork_at_seq(parent, 0).unwrap();
    let (compact, ch) = store
        .create_session(
            None,
            cfg.clone(),
            &[Item::user_text("Parent task ALPHA, again")],
        )
        .unwrap();
    store
        .compact(compact, ch, &[Item::user_text("summary")])
        .unwrap();
    let (fork_of_other, _) = store.fork_at(other, oh).unwrap();

    let since = next_ms();
    store
        .save_delta(other, &mut oh, &[Item::user_text("more")])
        .unwrap();
    let (fresh, _) = store.create_session(None, cfg.clone(), &[]).unwrap();

    let filter = |f: ListFilter| ids(&store.list_filtered(&f).unwrap());
    let recent = ListFilter {
        updated_since_ms: Some(since),
        ..ListFilter::default()
    };
    let forks = ListFilter {
        forked_from: Some(parent),
        ..ListFilter::default()
    };
    let alpha = |s: &str| ListFilter {
        title_contains: Some(s.into()),
        ..ListFilter::default()
    };
    assert_eq!(filter(recent.clone()), vec![fresh, other]);
    assert_eq!(
        filter(forks.clone()),
        vec![f2, f1],
        "a compaction is not a fork"
    );
    assert_eq!(filter(alpha("alpha")), vec![compact, f2, f1, parent]);
    assert_eq!(filter(alpha("TASK al")), vec![compact, f2, f1, parent]);
    assert_eq!(filter(alpha("gamma")), vec![]);
    assert_eq!(
        filter(ListFilter {
            updated_since_ms: Some(since),
            ..forks.clone()
        }),
        vec![]
    );
    assert_eq!(
        filter(ListFilter {
            forked_from: Some(other),
            ..ListFilter::default()
        }),
        vec![fork_of_other]
    );
    assert_eq!(filter(ListFilter::default()).len(), 7);

    // Reading, reopening and closing are not updates.
    store.restore(parent).unwrap();
    store.restore(f1).unwrap();
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    store.restore(parent).unwrap();
    assert_eq!(
        ids(&store.list_filtered(&recent).unwrap()),
        vec![fresh, other]
    );
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(
        ids(&store.list_filtered(&recent).unwrap()),
        vec![fresh, other]
    );
}

#[test]
fn list_after_a_clean_reopen_reads_only_the_catalog() {
    let dir = tempdir();
    let store = open(dir.path());
    let (a, mut ah) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    for n in 0..6 {
        store.save_delta(a, &mut ah, &turn(n, 3000)).unwrap();
    }
    let (b, _) = store.fork_at_seq(a, 3).unwrap();
    let before = store.list().unwrap();
    let restored: Vec<RestoredState> = [a, b]
        .iter()
        .map(|id| store.restore(*id).unwrap())
        .collect();
    store.close().unwrap();
    drop(store);

    // Hide every segment: a list that opened a log would see it empty (or fail).
    let hidden = tempdir();
    let mut moved = Vec::new();
    for id in [a, b] {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let to = hidden.path().join(format!(
                    "{id}-{}",
                    path.file_name().unwrap().to_str().unwrap()
                ));
                fs::rename(&path, &to).unwrap();
                moved.push((to, path));
            }
        }
    }
    let store = open(dir.path());
    let tree_before = tree(dir.path());
    assert_eq!(store.list().unwrap(), before);
    assert_eq!(
        tree(dir.path()),
        tree_before,
        "list must not create segments"
    );
    drop(store);
    for (from, to) in moved {
        fs::rename(from, to).unwrap();
    }
    let store = open(dir.path());
    let again: Vec<RestoredState> = [a, b]
        .iter()
        .map(|id| store.restore(*id).unwrap())
        .collect();
    assert_eq!(again, restored);
}

/// An evicted session whose catalog file is empty (a fork, an untitled
/// session) has its head in the listing cache only: `Store::close` must
/// still close it clean, or `list` reads its log ever after.
#[test]
fn an_evicted_session_with_an_empty_catalog_is_closed_clean_by_store_close() {
    let dir = tempdir();
    let store = Store::open_with(dir.path(), options().max_open_sessions(1)).unwrap();
    let user = [Item::user_text("a")];
    let (a, mut ah) = store
        .create_session(None, RequestConfig::default(), &user)
        .unwrap();
    store.save_delta(a, &mut ah, &turn(0, 100)).unwrap();
    // Each open evicts the one before, which a Buffered store lets go dirty.
    let (fork, mut fh) = store.fork_at(a, ah).unwrap();
    store.save_delta(fork, &mut fh, &turn(1, 100)).unwrap();
    let (untitled, mut uh) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store
        .save_delta(untitled, &mut uh, &[answer("no question")])
        .unwrap();
    store.log(a).unwrap();
    store.close().unwrap();
    drop(store);
    let catalog = |id: SessionId| {
        let path = dir.path().join("sessions").join(id.to_string());
        fs::metadata(path.join("catalog")).unwrap().len()
    };
    assert_eq!([a, fork, untitled].map(catalog), [1024, 0, 0]);
    let listed = open(dir.path()).list().unwrap();
    // Without their segments, only clean list-cache slots can list them.
    let hidden = tempdir();
    for id in [fork, untitled] {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let name = format!("{id}-{}", path.file_name().unwrap().to_str().unwrap());
                fs::rename(&path, hidden.path().join(name)).unwrap();
            }
        }
    }
    assert_eq!(open(dir.path()).list().unwrap(), listed);
}

/// Copies the files of a session directory whose names pass `keep`.
fn copy_session(from: &Path, to: &Path, keep: impl Fn(&str) -> bool) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if keep(&name) && !name.ends_with(".prep") {
            fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

#[test]
fn after_a_crash_list_shows_what_the_log_holds_not_a_stale_catalog() {
    // Two crash images of one live session: the catalog's head slot lags
    // the log, or runs ahead of a log that lost its unsynced tail.
    for catalog_lags in [true, false] {
        let live = tempdir();
        let store = open(live.path());
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("crashy")])
            .unwrap();
        for n in 0..3 {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        let src = store.session_dir(id);
        let image = tempdir();
        let dst = image.path().join("sessions").join(id.to_string());
        let is_catalog = |n: &str| n == "catalog";
        // Image at time 1: the whole directory, the writer still running.
        copy_session(&src, &dst, |_| true);
        let at_1 = (
            store.log(id).unwrap().next_seq(),
            head,
            store.restore(id).unwrap(),
        );
        for n in 3..9 {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        let at_2 = (
            store.log(id).unwrap().next_seq(),
            head,
            store.restore(id).unwrap(),
        );
        assert!(store.log(id).unwrap().segment_paths().len() > 1);
        // Image at time 2 of one half.
        if catalog_lags {
            copy_session(&src, &dst, |n| !is_catalog(n) && n != "LOCK");
        } else {
            copy_session(&src, &dst, is_catalog);
        }
        let bytes_2 = store.log(id).unwrap().bytes();
        let (entries, head, state) = if catalog_lags { at_2 } else { at_1 };

        let crashed = open(image.path());
        let list = crashed.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].entries, entries, "catalog_lags={catalog_lags}");
        assert_eq!(list[0].head, Some(head), "catalog_lags={catalog_lags}");
        if catalog_lags {
            assert_eq!(list[0].bytes, bytes_2);
        }
        assert_eq!(crashed.restore(id).unwrap(), state);
        // The repaired slot is what a later store sees too.
        crashed.close().unwrap();
        drop(crashed);
        let later = open(image.path());
        assert_eq!(later.list().unwrap()[0].entries, entries);
    }
}

// ---------------------------------------------------------------------------
// Lifecycle.
// ---------------------------------------------------------------------------

#[test]
fn delete_is_durable_and_forks_of_the_deleted_session_still_restore() {
    let dir = tempdir();
    let (parent, fork, fork_history) = {
        let store = open(dir.path());
        let initial = vec![Item::user_text("parent")];
        let (parent, mut ph) = store
            .create_session(Some("sys"), RequestConfig::model("m"), &initial)
            .unwrap();
        store.save_delta(parent, &mut ph, &turn(0, 9000)).unwrap();
        store.save_delta(parent, &mut ph, &turn(1, 9000)).unwrap();
        let (fork, mut fh) = store.fork_at(parent, ph).unwrap();
        store.save_delta(fork, &mut fh, &turn(2, 10)).unwrap();
        let fork_history = store.restore(fork).unwrap().history;

        assert!(store.exists(parent));
        store.delete(parent).unwrap();
        assert!(!store.exists(parent));
        assert!(!store.session_dir(parent).exists());
        assert_eq!(fs::read_dir(dir.path().join("trash")).unwrap().count(), 0);
        assert_eq!(ids(&store.list().unwrap()), vec![fork]);
        for err in [
            store.restore(parent).unwrap_err(),
            store.delete(parent).unwrap_err(),
            store.save_delta(parent, &mut ph, &turn(3, 1)).unwrap_err(),
        ] {
            assert!(matches!(err, Error::NotFound { .. }), "{err}");
        }
        assert_eq!(store.restore(fork).unwrap().history, fork_history);
        (parent, fork, fork_history)
    };
    let store = open(dir.path());
    assert!(!store.exists(parent));
    assert!(store.exists(fork));
    assert_eq!(ids(&store.list().unwrap()), vec![fork]);
    let state = store.restore(fork).unwrap();
    assert_eq!(state.history, fork_history);
    assert_eq!(state.forked_from.unwrap().session_id, parent);
    drop(store);
    // A session this store has not opened deletes as well.
    let store = open(dir.path());
    store.delete(fork).unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.list().unwrap(), vec![]);
    assert_eq!(
        fs::read_dir(dir.path().join("sessions")).unwrap().count(),
        0
    );
}

#[test]
fn creating_an_existing_id_is_refused_and_leaves_it_alone() {
    let dir = tempdir();
    let store = open(dir.path());
    let id = SessionId::new_v7();
    let head = store
        .create_session_with_id(
            id,
            None,
            RequestConfig::default(),
            &[Item::user_text("mine")],
        )
        .unwrap();
    let err = store
        .create_session_with_id(
            id,
            None,
            RequestConfig::default(),
            &[Item::user_text("theirs")],
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("mine")]
    );
    assert!(!store.exists(SessionId::new_v7()));
}

/// A creation looks for an existing session only once its `mkdir` finds
/// the directory there: a session this store has not opened, whether
/// another store holds it open or nobody does, is refused all the same.
#[test]
fn creating_an_id_another_store_has_or_had_is_refused_and_leaves_it_alone() {
    let dir = tempdir();
    let first = open(dir.path());
    let id = SessionId::new_v7();
    let mut head = first
        .create_session_with_id(id, None, RequestConfig::default(), &[])
        .unwrap();
    first
        .save_delta(id, &mut head, &[Item::user_text("mine")])
        .unwrap();
    let theirs = [Item::user_text("theirs")];
    // Held open by the first store (synced, so no `CREATING` marker).
    first.sync(id).unwrap();
    let second = open(dir.path());
    let err = second
        .create_session_with_id(id, None, RequestConfig::default(), &theirs)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    // Nobody holds it.
    first.close().unwrap();
    drop(first);
    let err = second
        .create_session_with_id(id, None, RequestConfig::default(), &theirs)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(second.head(id).unwrap(), Some(head));
    assert_eq!(
        second.restore(id).unwrap().history,
        vec![Item::user_text("mine")]
    );
    // And the session still takes saves.
    second
        .save_delta(id, &mut head, &[Item::user_text("more")])
        .unwrap();
    assert_eq!(second.restore(id).unwrap().history.len(), 2);
}

/// Fails every write and sync under `sessions/` while armed.
struct FailSessions(AtomicBool);

impl IoHook for FailSessions {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let path = match op {
            IoOp::Write { path, .. } | IoOp::Sync { path } => path,
            _ => return Ok(()),
        };
        let staged = path.components().any(|c| c.as_os_str() == "sessions");
        if staged && self.0.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected failure"));
        }
        Ok(())
    }
}

fn entries_of(root: &Path, sub: &str) -> BTreeSet<String> {
    fs::read_dir(root.join(sub))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_failed_creation_leaves_nothing_behind_and_its_id_stays_free() {
    let dir = tempdir();
    let hook = Arc::new(FailSessions(AtomicBool::new(true)));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let id = SessionId::new_v7();
    let history = [Item::user_text("first try")];
    let err = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(!store.exists(id));
    // The half-made session is gone, directory and all.
    assert_eq!(entries_of(dir.path(), "sessions"), BTreeSet::new());
    assert_eq!(entries_of(dir.path(), "staging"), BTreeSet::new());

    hook.0.store(false, Ordering::SeqCst);
    let head = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap();
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
    assert_eq!(ids(&store.list().unwrap()), vec![id]);
}

#[test]
fn the_leftover_of_an_unfinished_creation_does_not_block_its_id() {
    let dir = tempdir();
    let id = SessionId::new_v7();
    {
        // What a creation that died before its catalog leaves: a log, no catalog.
        let store = open(dir.path());
        let other = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("old")])
            .unwrap()
            .0;
        store.close().unwrap();
        let from = store.session_dir(other);
        let to = store.session_dir(id);
        copy_session(&from, &to, |name| name != "catalog");
        fs::remove_dir_all(&from).unwrap();
    }
    let store = open(dir.path());
    assert!(!store.exists(id));
    let history = [Item::user_text("new")];
    let head = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap();
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
    // The leftover went to the trash, which the next open empties.
    drop(store);
    let store = open(dir.path());
    assert_eq!(entries_of(dir.path(), "trash"), BTreeSet::new());
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
}

/// Holds up the removal of a stale `.prep` file (an early step of a writer's
/// open) until released, and reports that it did.
struct HoldOpen {
    entered: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: Barrier,
}

impl IoHook for HoldOpen {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if let IoOp::Remove { path } = op {
            if path.extension().is_some_and(|e| e == "prep") {
                if let Some(tx) = self.entered.lock().unwrap().take() {
                    tx.send(()).unwrap();
                    self.release.wait();
                }
            }
        }
        Ok(())
    }
}

#[test]
fn a_slow_open_holds_up_neither_its_shard_nor_a_second_caller_for_it() {
    let dir = tempdir();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let hook = Arc::new(HoldOpen {
        entered: std::sync::Mutex::new(None),
        release: Barrier::new(2),
    });
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let create = |text: &str| {
        store
            .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
            .unwrap()
            .0
    };
    // Two sessions in one shard (the store shards by the id's last byte).
    let slow = create("slow");
    let other = loop {
        let id = create("other");
        if id.0[15] % 16 == slow.0[15] % 16 {
            break id;
        }
    };
    store.close().unwrap();
    File::create(store.session_dir(slow).join("next-9-9.prep")).unwrap();
    *hook.entered.lock().unwrap() = Some(entered_tx);

    let store = &store;
    thread::scope(|s| {
        let first = s.spawn(|| store.session(slow).map(|h| h.log().head()));
        entered.recv_timeout(Duration::from_secs(30)).unwrap();
        let second = s.spawn(|| store.session(slow).map(|h| h.log().head()));
        let (done_tx, done) = std::sync::mpsc::channel();
        s.spawn(move || {
            let restored = store.restore(other).map(|r| r.history);
            done_tx.send(restored).unwrap();
        });
        let neighbour = done.recv_timeout(Duration::from_secs(10));
        let second_early = second.is_finished();
        hook.release.wait();
        let neighbour = neighbour.expect("the shard's other session waited for the slow open");
        assert_eq!(neighbour.unwrap(), vec![Item::user_text("other")]);
        assert!(!second_early, "a second caller did not wait for the open");
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert_eq!(a.unwrap(), b.unwrap());
    });
    assert_eq!(
        store.restore(slow).unwrap().history,
        vec![Item::user_text("slow")]
    );
}

/// Fails every `fdatasync` of a log while armed.
struct FailSyncs(AtomicBool);

impl IoHook for FailSyncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        // The hook sees the store's catalog and list-cache syncs too.
        let of_a_log =
            matches!(op, IoOp::Sync { path } if path.extension().is_some_and(|e| e == "seg"));
        if of_a_log && self.0.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        Ok(())
    }
}

#[test]
fn a_session_that_fails_to_close_is_reported_by_store_close_even_after_eviction() {
    for evicted in [false, true] {
        let dir = tempdir();
        let hook = Arc::new(FailSyncs(AtomicBool::new(false)));
        let store = Store::open_with(
            dir.path(),
            StoreOptions::default()
                .log(LogOptions::default().hook(hook.clone()))
                .max_open_sessions(1),
        )
        .unwrap();
        let create = |text: &str| {
            store
                .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
                .unwrap()
        };
        let (a, mut head_a) = create("a");
        let (b, _) = create("b");
        // A's new items are in the page cache only; its close must sync them.
        store
            .save_delta(a, &mut head_a, &[answer("unsynced")])
            .unwrap();
        hook.0.store(true, Ordering::SeqCst);
        if evicted {
            // Opening B evicts A, which a Buffered store lets go unsynced:
            // the sync that fails is its clean close in `Store::close`.
            store.log(b).unwrap();
        }
        let err = store.close().unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{evicted}: {err}");
        // Reported once; the failed session recovers on its next open.
        hook.0.store(false, Ordering::SeqCst);
        store.close().unwrap();
        let history = store.restore(a).unwrap().history;
        assert_eq!(
            history,
            as_given(&[Item::user_text("a"), answer("unsynced")]),
            "{evicted}"
        );
    }
}

#[test]
fn hostile_ids_are_invalid_input_and_touch_nothing() {
    let dir = tempdir();
    let store = open(dir.path());
    let (real, _) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("x")])
        .unwrap();
    let valid = real.to_string();
    assert_eq!(valid.parse::<SessionId>().unwrap(), real);
    // Strange entries under sessions/ are not sessions.
    for name in [valid.to_uppercase(), "not-a-session".to_string()] {
        let stray = dir.path().join("sessions").join(name);
        fs::create_dir(&stray).unwrap();
        fs::copy(
            store.session_dir(real).join("catalog"),
            stray.join("catalog"),
        )
        .unwrap();
    }
    let before = tree(dir.path());

    // Each of these is exactly 36 bytes, so it gets past a length check.
    let same_length = [
        "../".repeat(12),
        format!("/{}", &valid[1..]),
        format!("{}/..", &valid[..33]),
        format!("{}\0", &valid[..35]),
        format!("{}g", &valid[..35]),
        format!(" {}", &valid[1..]),
        "é".repeat(18),
        valid.to_uppercase(),
        valid.replace('-', "_"),
    ];
    let mut hostile: Vec<String> = vec![
        "../x".into(),
        "..".into(),
        ".".into(),
        String::new(),
        "/etc/passwd".into(),
        "/".into(),
        "x\0y".into(),
        "\0".into(),
        "a".repeat(10_000),
        format!("{valid}/../../x"),
        format!("../{valid}"),
        format!("{valid}\0"),
        valid.replace('-', ""),
        format!("{{{valid}}}"),
        format!("urn:uuid:{valid}"),
        "not-a-uuid".into(),
    ];
    for s in &same_length {
        assert_eq!(s.len(), 36, "{s:?}");
    }
    hostile.extend(same_length);
    for s in &hostile {
        match s.parse::<SessionId>().map_err(Error::from) {
            Err(Error::InvalidInput { what }) => {
                assert!(what.len() < 200, "the error message must not echo 10 kB");
            }
            other => panic!("{s:?} parsed as {other:?}"),
        }
        let json = serde_json::to_string(s).unwrap();
        assert!(serde_json::from_str::<SessionId>(&json).is_err(), "{s:?}");
    }
    assert_eq!(tree(dir.path()), before);
    assert_eq!(ids(&store.list().unwrap()), vec![real]);
    assert_eq!(tree(dir.path()), before);
}

// ---------------------------------------------------------------------------
// Concurrency.
// ---------------------------------------------------------------------------

const THREADS: usize = 8;
const PER_THREAD: usize = 100;
const ROUNDS: usize = 3;

/// Each thread creates its own sessions, then appends to all of them, round
/// by round, so that sessions of every shard interleave.
fn concurrent_sessions(max_open: usize) {
    // This is about interleaving, not durability: on tmpfs the ~10 fsyncs of
    // each create cost nothing, which keeps 800 creates quick and the threads
    // racing rather than queueing on the disk.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempdir()
    };
    let store = Store::open_with(dir.path(), options().max_open_sessions(max_open)).unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                let mut sessions = Vec::new();
                for s in 0..PER_THREAD {
                    let initial = vec![Item::user_text(format!("t{t} s{s}"))];
                    let (id, head) = store
                        .create_session(None, RequestConfig::default(), &initial)
                        .unwrap();
                    sessions.push((id, head, as_given(&initial)));
                }
                for round in 0..ROUNDS {
                    for (s, (id, head, expected)) in sessions.iter_mut().enumerate() {
                        let call_id = format!("t{t}s{s}r{round}");
                        let delta = vec![
                            answer(&format!("{call_id} says")),
                            call(&call_id, "{}"),
                            result(&call_id, &"r".repeat(s * 7 % 500)),
                        ];
                        store.save_delta(*id, head, &delta).unwrap();
                        expected.extend(as_given(&delta));
                    }
                }
                sessions
            })
        })
        .collect();
    let sessions: Vec<_> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert_eq!(sessions.len(), THREADS * PER_THREAD);

    for (id, head, expected) in &sessions {
        let state = store.restore(*id).unwrap();
        assert_eq!(&state.history, expected, "session {id}");
        assert_eq!(state.head, Some(*head));
        assert!(state.is_ready_to_send());
    }
    // Every session was just reopened by one thread: the open-log budget
    // holds exactly (a log whose LOCK is held is open).
    let locked = sessions
        .iter()
        .filter(|(id, _, _)| {
            let lock = File::open(store.session_dir(*id).join("LOCK")).unwrap();
            matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
        })
        .count();
    assert!(locked <= max_open, "{locked} logs open, budget {max_open}");
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    let list = store.list().unwrap();
    assert_eq!(list.len(), THREADS * PER_THREAD);
    let by_id: BTreeMap<SessionId, _> = list.iter().map(|i| (i.id, i)).collect();
    for (id, head, expected) in &sessions {
        let info = by_id[id];
        assert_eq!(info.entries, 1 + 2 * ROUNDS as u64);
        assert_eq!(info.head, Some(*head));
        assert_eq!(&store.restore(*id).unwrap().history, expected);
    }
}

#[test]
fn eight_threads_append_to_their_own_sessions_and_all_restore_exactly() {
    concurrent_sessions(256);
}

#[test]
fn concurrent_sessions_restore_exactly_under_a_small_open_log_budget() {
    concurrent_sessions(32);
}

#[test]
fn the_open_log_budget_holds_exactly_when_it_is_not_a_multiple_of_the_shards() {
    for max_open in [1, 3, 5, 17] {
        let dir = tempdir();
        let store = Store::open_with(dir.path(), options().max_open_sessions(max_open)).unwrap();
        let ids: Vec<SessionId> = (0..40)
            .map(|i| {
                let text = format!("session {i}");
                store
                    .create_session(None, RequestConfig::default(), &[Item::user_text(text)])
                    .unwrap()
                    .0
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let history = store.restore(*id).unwrap().history;
            assert_eq!(history, vec![Item::user_text(format!("session {i}"))]);
        }
        let locked = ids
            .iter()
            .filter(|id| {
                let lock = File::open(store.session_dir(**id).join("LOCK")).unwrap();
                matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
            })
            .count();
        assert!(
            (1..=max_open).contains(&locked),
            "{locked} logs open, budget {max_open}"
        );
    }
}

// ---------------------------------------------------------------------------
// Subscriptions.
// ---------------------------------------------------------------------------

/// The default open-log budget follows the process's open-file limit, so
/// that a store with default options never runs the process out of file
/// descriptors: under a soft limit of 200, 300 sessions saved round-robin
/// all restore (a fixed budget of 256 sessions, three descriptors each,
/// fails with "too many open files"), and a higher limit gives a budget
/// that holds more sessions than the old 256.
#[test]
fn the_default_open_budget_keeps_the_process_under_its_file_limit() {
    if let Ok(root) = std::env::var("OPEN_BUDGET_CHILD") {
        assert_eq!(session_store::store::default_max_open_sessions(), 100);
        assert_eq!(session_store::store::default_max_active_sessions(), 25);
        many_sessions_round_robin(Path::new(&root), StoreOptions::default(), 300);
        return;
    }
    use session_store::{store::active_budget_for, store::open_budget_for};
    // Three quarters of the limit: half for the active sessions (three
    // descriptors each), half for the parked ones' locks.
    assert_eq!(open_budget_for(Some(1024)), 512);
    assert_eq!(active_budget_for(Some(1024)), 128);
    assert_eq!(open_budget_for(Some(20_000)), 10_000);
    assert_eq!(active_budget_for(Some(20_000)), 2_500);
    assert_eq!(open_budget_for(Some(200)), 100);
    assert_eq!(active_budget_for(Some(200)), 25);
    assert_eq!(open_budget_for(Some(20)), 16);
    assert_eq!(active_budget_for(Some(20)), 16);
    assert_eq!(open_budget_for(Some(u64::MAX)), 16_384);
    assert_eq!(active_budget_for(Some(u64::MAX)), 16_384);
    assert_eq!(open_budget_for(None), 256);
    assert_eq!(active_budget_for(None), 64);

    run_under_file_limit(
        "the_default_open_budget_keeps_the_process_under_its_file_limit",
        "OPEN_BUDGET_CHILD",
        200,
    );
}

/// Creates, saves to round-robin and restores `sessions` sessions of a
/// store at `root` opened with `options`.
fn many_sessions_round_robin(root: &Path, options: StoreOptions, sessions: usize) {
    let store = Store::open_with(root, options).unwrap();
    let mut all = Vec::new();
    for s in 0..sessions {
        let initial = vec![Item::user_text(format!("session {s}"))];
        let (id, head) = store
            .create_session(None, RequestConfig::default(), &initial)
            .unwrap();
        all.push((id, head, initial));
    }
    for round in 0..3 {
        for (id, head, expected) in all.iter_mut() {
            let delta = vec![answer(&format!("round {round}"))];
            store.save_delta(*id, head, &delta).unwrap();
            expected.extend(as_given(&delta));
        }
    }
    for (id, head, expected) in &all {
        let state = store.restore(*id).unwrap();
        assert_eq!(&state.history, expected, "session {id}");
        assert_eq!(state.head, Some(*head));
    }
    store.close().unwrap();
}

/// Runs this binary's test `test` in a child under `ulimit -n <limit>`,
/// with `env` naming a fresh directory; asserts that it passed.
fn run_under_file_limit(test: &str, env: &str, limit: u32) {
    let dir = tempdir();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" --exact \"$1\" --nocapture --test-threads=1"
        ))
        .arg(std::env::current_exe().unwrap())
        .arg(test)
        .env(env, dir.path())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{test} under `ulimit -n {limit}`: {status}"
    );
}

/// A budget set above what the process may open does not fail the store:
/// an open that runs out of file descriptors closes the idle sessions and
/// tries again (under `ulimit -n 64`, 100 sessions with a budget of 10,000
/// fail with "too many open files" without it). Where the process runs out
/// moves with the limit, so the test runs under limits from 30 to 72: a
/// read-only open or a session's reopen that takes the out-of-descriptors
/// error of a pending creation's log for its torn remains ("its creation
/// never finished") fails under a third of them.
#[test]
fn running_out_of_file_descriptors_closes_idle_sessions_and_goes_on() {
    if let Ok(root) = std::env::var("SHED_CHILD") {
        many_sessions_round_robin(Path::new(&root), options().max_open_sessions(10_000), 100);
        return;
    }
    for limit in (30..=72).step_by(3) {
        run_under_file_limit(
            "running_out_of_file_descriptors_closes_idle_sessions_and_goes_on",
            "SHED_CHILD",
            limit,
        );
    }
}

/// Running out of file descriptors with parked sessions open: the shed
/// parks idle active sessions first (two descriptors each, no open), so
/// that the parked sessions it then closes can open their files again for
/// their last writes. Closing parked sessions first, with no descriptor
/// left, failed their catalogs' writes, and `Store::close` reported it.
#[test]
fn running_out_of_file_descriptors_with_parked_sessions_fails_nothing() {
    if let Ok(root) = std::env::var("PARKED_SHED_CHILD") {
        let opts = options().max_open_sessions(1_000).max_active_sessions(2);
        let store = Store::open_with(Path::new(&root), opts).unwrap();
        let mut sessions = numbered_sessions(&store, 8);
        for (i, (id, head)) in sessions.iter_mut().enumerate() {
            let item = [Item::assistant_text(format!("turn of {i}"))];
            store.save_delta(*id, head, &item).unwrap();
        }
        // Every descriptor left taken: the creation meets `EMFILE`.
        let mut hog = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            hog.push(f);
        }
        let (new, _) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        drop(hog);
        store.close().unwrap();
        let again = Store::open(Path::new(&root)).unwrap();
        for (id, head) in sessions.iter().chain([(new, EntryHash::default())].iter()) {
            let report = again.verify(*id).unwrap();
            assert!(report.damage.is_none(), "{id}");
            if *id != new {
                assert_eq!(again.head(*id).unwrap(), Some(*head));
            }
        }
        return;
    }
    run_under_file_limit(
        "running_out_of_file_descriptors_with_parked_sessions_fails_nothing",
        "PARKED_SHED_CHILD",
        64,
    );
}

/// `n` new sessions, each with a first user text naming its number.
fn numbered_sessions(store: &Store, n: usize) -> Vec<(SessionId, EntryHash)> {
    (0..n)
        .map(|i| {
            let first = [Item::user_text(format!("session {i}"))];
            store
                .create_session(None, RequestConfig::default(), &first)
                .unwrap()
        })
        .collect()
}

/// A session whose creation is not durable yet (a `Buffered` store has
/// not synced it) is no torn creation because the process could not open
/// its log: a creation of its id that runs out of file descriptors there
/// refuses, and the session keeps its history (the store once took it for
/// a creation's leftover, cleared it and created the id anew).
#[test]
fn a_creation_out_of_file_descriptors_leaves_a_pending_session_alone() {
    if let Ok(root) = std::env::var("PENDING_CHILD") {
        let store = Store::open_with(Path::new(&root), options().max_open_sessions(1)).unwrap();
        let history = vec![Item::user_text("keep me")];
        let (id, _) = store
            .create_session(None, RequestConfig::default(), &history)
            .unwrap();
        // The second session evicts the first, unsynced: still pending.
        let (other, _) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        assert!(store.session_dir(id).join("CREATING").exists());
        // Every descriptor but one taken: the claim's lock gets it, the
        // look at what the directory holds runs out.
        let mut held = Vec::new();
        while let Ok(f) = File::open("/dev/null") {
            held.push(f);
        }
        held.pop();
        let refused = store.create_session_with_id(id, None, RequestConfig::default(), &[]);
        drop(held);
        let err = refused.expect_err("the id is a session's");
        assert!(
            matches!(err, Error::InvalidInput { .. }) || err.is_out_of_descriptors(),
            "{err}"
        );
        assert_eq!(store.restore(id).unwrap().history, history);
        assert!(store.restore(other).unwrap().history.is_empty());
        store.close().unwrap();
        assert_eq!(open(Path::new(&root)).restore(id).unwrap().history, history);
        return;
    }
    run_under_file_limit(
        "a_creation_out_of_file_descriptors_leaves_a_pending_session_alone",
        "PENDING_CHILD",
        256,
    );
}

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

// ---------------------------------------------------------------------------
// The ready-to-send check.
// ---------------------------------------------------------------------------

#[test]
fn check_reports_each_kind_of_broken_history_with_its_position() {
    let q = |t: &str| Item::user_text(t);
    let cases: Vec<(&str, Vec<Item>, Vec<Problem>)> = vec![
        ("ready", [turn(0, 10), turn(1, 10)].concat(), vec![]),
        (
            "call without result",
            vec![q("q"), reasoning("r"), call("c1", "{}"), answer("a")],
            vec![Problem::CallWithoutResult {
                index: 2,
                call_id: "c1".into(),
            }],
        ),
        (
            "result without call",
            vec![q("q"), result("c9", "orphan"), answer("a")],
            vec![Problem::ResultWithoutCall {
                index: 1,
                call_id: "c9".into(),
            }],
        ),
        (
            "duplicate call_id",
            vec![
                q("q"),
                call("c1", "{}"),
                result("c1", "1"),
                q("q2"),
                call("c1", "{}"),
                result("c1", "2"),
            ],
            vec![
                Problem::DuplicateCallId {
                    index: 4,
                    first: 1,
                    call_id: "c1".into(),
                },
                Problem::DuplicateCallId {
                    index: 5,
                    first: 2,
                    call_id: "c1".into(),
                },
            ],
        ),
        (
            "dangling reasoning",
            vec![
                q("q"),
                reasoning("r1"),
                q("q2"),
                answer("a"),
                reasoning("r2"),
            ],
            vec![
                Problem::DanglingReasoning { index: 1 },
                Problem::DanglingReasoning { index: 4 },
            ],
        ),
    ];
    let dir = tempdir();
    let store = open(dir.path());
    for (name, items, expected) in cases {
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        store.save_delta(id, &mut head, &items).unwrap();
        let state = store.restore(id).unwrap();
        assert_eq!(state.check(), expected, "{name}");
        assert_eq!(state.is_ready_to_send(), expected.is_empty(), "{name}");
    }

    // A fork between a call and its result holds an unanswered call.
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[q("start")])
        .unwrap();
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    assert!(store.restore(id).unwrap().is_ready_to_send());
    let (fork, _) = store.fork_at_seq(id, 2).unwrap();
    assert_eq!(
        store.restore(fork).unwrap().check(),
        vec![Problem::CallWithoutResult {
            index: 3,
            call_id: "call_0".into()
        }]
    );
}

// ---------------------------------------------------------------------------
// Import.
// ---------------------------------------------------------------------------

fn export_lines(store: &Store, id: SessionId) -> Vec<String> {
    let snap = store.snapshot(id).unwrap();
    let mut prev = None;
    let mut lines = Vec::new();
    for rec in snap.iter() {
        let rec = rec.unwrap();
        lines.push(entry_line(
            rec.seq,
            &rec.hash,
            prev.as_ref(),
            &rec.entry.to_entry(),
        ));
        prev = Some(rec.hash);
    }
    lines
}

fn parse_all(lines: &[String]) -> Vec<(u64, WireLine)> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, parse_line(l, i as u64 + 1).unwrap()))
        .collect()
}

#[test]
fn an_exported_session_re_imports_to_the_same_hashes() {
    let dir = tempdir();
    let store = open(dir.path());
    let (src, mut head) = store
        .create_session(
            Some("sys"),
            RequestConfig {
                extra: Some(JsonText::parse(r#"{"z": 2.50, "a": [ ], "n": 1.0e3}"#).unwrap()),
                ..RequestConfig::model("m")
            },
            &[Item::user_text("imported")],
        )
        .unwrap();
    for n in 0..5 {
        store.save_delta(src, &mut head, &turn(n, 4000)).unwrap();
        turn_end(&store, src, &mut head, n as u64 + 1);
    }
    config_changed(&store, src, &mut head, RequestConfig::model("m2"));
    let rest = [
        UsageRecord::default().entry(now_ms()),
        LogEntry::Extension {
            ts: now_ms(),
            domain: "x".into(),
            payload: JsonText::parse(r#"[1, {"k": null, "b": 18446744073709551616}]"#).unwrap(),
        },
        LogEntry::RunCompleted {
            ts: now_ms(),
            interrupted: true,
            result: WorkerResult::default(),
        },
    ];
    for entry in rest {
        store.save_entries(src, &mut head, &[entry]).unwrap();
    }
    let lines = export_lines(&store, src);

    let imported = store.import(&parse_all(&lines)).unwrap();
    assert_ne!(imported, src);
    assert_eq!(hashes(&store, imported), hashes(&store, src));
    assert_eq!(
        store.restore(imported).unwrap(),
        store.restore(src).unwrap()
    );
    assert_eq!(export_lines(&store, imported), lines);
    let info = store.info(imported).unwrap().unwrap();
    assert_eq!(info.head, Some(head));
    assert_eq!(info.title.as_deref(), Some("imported"));
    // Lines without seq and hashes import to the same chain too.
    let bare: Vec<(u64, WireLine)> = parse_all(&lines)
        .into_iter()
        .map(|(n, w)| {
            (
                n,
                WireLine {
                    seq: None,
                    hash: None,
                    prev_hash: None,
                    ..w
                },
            )
        })
        .collect();
    let bare_id = store.import(&bare).unwrap();
    assert_eq!(hashes(&store, bare_id), hashes(&store, src));
}

#[test]
fn a_forged_or_gapped_import_writes_nothing() {
    let dir = tempdir();
    let store = open(dir.path());
    let (src, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("src")])
        .unwrap();
    for n in 0..3 {
        store.save_delta(src, &mut head, &turn(n, 100)).unwrap();
    }
    let good = parse_all(&export_lines(&store, src));
    assert!(good.len() > 8);

    type Forge = Box<dyn Fn(&mut Vec<(u64, WireLine)>)>;
    let forgeries: Vec<(&str, Forge)> = vec![
        (
            "forged hash",
            Box::new(|l| l[4].1.hash = Some(EntryHash([0xab; 32]))),
        ),
        (
            "content changed under its hash",
            Box::new(|l| {
                if let LogEntry::UserInput { ts, .. } = &mut l[5].1.entry {
                    *ts += 1;
                } else {
                    panic!("line 6 is a user_input")
                }
            }),
        ),
        (
            "forged prev_hash",
            Box::new(|l| l[3].1.prev_hash = Some(Some(EntryHash([1; 32])))),
        ),
        ("seq gap", Box::new(|l| l[6].1.seq = Some(7))),
        ("missing line", Box::new(|l| drop(l.remove(6)))),
        (
            "first line not a session_start",
            Box::new(|l| drop(l.remove(0))),
        ),
        (
            "bare lines, first not a session_start",
            Box::new(|l| {
                l.remove(0);
                for (_, w) in l.iter_mut() {
                    w.seq = None;
                    w.hash = None;
                    w.prev_hash = None;
                }
            }),
        ),
        ("empty", Box::new(|l| l.clear())),
    ];
    let sessions = session_dirs(dir.path());
    for (name, forge) in forgeries {
        let mut lines = good.clone();
        forge(&mut lines);
        let err = store.import(&lines).unwrap_err();
        assert!(matches!(err, Error::Wire { .. }), "{name}: {err}");
        assert_eq!(session_dirs(dir.path()), sessions, "{name}");
    }
    assert_eq!(ids(&store.list().unwrap()), vec![src]);
    // A hostile id inside a line is refused at parse time; the same line
    // with a real id parses, so the id is what was refused.
    let first = &export_lines(&store, src)[0];
    let with_origin = |id: &str| {
        let origin = format!(
            r#""kind":"session_start","forked_from":{{"session_id":"{id}","at_hash":"{}"}}"#,
            "0".repeat(64)
        );
        first.replacen(r#""kind":"session_start""#, &origin, 1)
    };
    assert!(parse_line(&with_origin(&src.to_string()), 1).is_ok());
    for id in ["../x", "/etc", &src.to_string().to_uppercase()] {
        let err = parse_line(&with_origin(id), 1).unwrap_err();
        assert!(matches!(err, Error::Wire { .. }), "{id}: {err}");
    }
}

/// A session that another writer holds can still be read, restored and
/// forked (read-only), while writing to it is refused with `Locked`.
#[test]
fn a_held_session_can_be_read_and_forked_but_not_written() {
    let dir = tempdir();
    let holder = open(dir.path());
    let (id, mut head) = holder
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    holder.save_delta(id, &mut head, &turn(0, 100)).unwrap();
    let other = open(dir.path());
    let state = other.restore(id).unwrap();
    assert_eq!(state.head, Some(head));
    let (fork, _) = other.fork_at(id, head).unwrap();
    assert_eq!(other.restore(fork).unwrap().history, state.history);
    let mut stale = head;
    match other.save_delta(id, &mut stale, &turn(1, 10)) {
        Err(session_store::Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}

/// The listing cache is a copy: deleted, damaged or stale, `list` still shows
/// what the catalogs and logs hold.
#[test]
fn list_is_right_whatever_state_the_listing_cache_is_in() {
    let dir = tempdir();
    let expected = {
        let store = open(dir.path());
        for n in 0..5 {
            let (id, mut head) = store
                .create_session(None, RequestConfig::default(), &[])
                .unwrap();
            store.save_delta(id, &mut head, &turn(n, 10 * n)).unwrap();
        }
        let list = store.list().unwrap();
        store.close().unwrap();
        list
    };
    let cache = dir.path().join("list.cache");
    let check = |what: &str| {
        let store = open(dir.path());
        assert_eq!(store.list().unwrap(), expected, "{what}");
        // A second listing (the cache backfilled) agrees too.
        assert_eq!(store.list().unwrap(), expected, "{what}, again");
    };
    check("intact");
    let original = std::fs::read(&cache).unwrap();
    assert!(original.len() >= 5 * 640, "one slot per session");

    std::fs::remove_file(&cache).unwrap();
    check("cache deleted");

    let mut damaged = original.clone();
    for slot in 0..5 {
        damaged[slot * 640 + 30] ^= 0xff;
    }
    std::fs::write(&cache, &damaged).unwrap();
    check("every slot damaged");

    // A crash leaves the cache as it was while a writer held the session:
    // dirty, and behind. Nobody holds it now, so list must not trust it.
    let store = open(dir.path());
    let id = expected[0].id;
    let mut head = expected[0].head.unwrap();
    store.save_delta(id, &mut head, &turn(9, 5)).unwrap();
    let while_open = std::fs::read(&cache).unwrap();
    store.save_delta(id, &mut head, &turn(10, 5)).unwrap();
    store.close().unwrap();
    std::fs::write(&cache, &while_open).unwrap();
    let store = open(dir.path());
    let listed = store.list().unwrap();
    let fresh = listed.iter().find(|s| s.id == id).unwrap();
    assert_eq!(fresh.head, Some(head), "a stale dirty slot was trusted");
}

/// Counts the I/O operations `counts` picks.
struct CountOps {
    seen: std::sync::atomic::AtomicUsize,
    counts: fn(&IoOp<'_>) -> bool,
}

impl CountOps {
    fn new(counts: fn(&IoOp<'_>) -> bool) -> Arc<CountOps> {
        Arc::new(CountOps {
            seen: Default::default(),
            counts,
        })
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

impl IoHook for CountOps {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if (self.counts)(op) {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A save writes its entries and nothing else: the catalog and the listing
/// cache stay dirty while the writer has the session, and every `list`, in
/// this store or another on the same root, still shows the live numbers.
#[test]
fn a_save_writes_no_catalog_and_list_still_shows_it() {
    let dir = tempdir();
    // Writes and syncs of the catalogs and the listing cache.
    let hook = CountOps::new(|op| match op {
        IoOp::Write { path, .. } | IoOp::Sync { path } => {
            path.ends_with("catalog") || path.ends_with("list.cache")
        }
        _ => false,
    });
    let store = Store::open_with(
        dir.path(),
        options().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("title")])
        .unwrap();
    let before = hook.seen();
    let mut saved_at = 0;
    for n in 0..5 {
        saved_at = now_ms();
        store.save_delta(id, &mut head, &turn(n, 100)).unwrap();
    }
    assert_eq!(
        hook.seen(),
        before,
        "a save wrote a catalog or the listing cache"
    );
    let entries = store.log(id).unwrap().next_seq();
    let check = |info: &session_store::SessionInfo, who: &str| {
        assert_eq!(info.head, Some(head), "{who}");
        assert_eq!(info.entries, entries, "{who}");
        assert!(info.updated_ms >= saved_at, "{who}: an old update time");
        assert_eq!(info.title.as_deref(), Some("title"), "{who}");
    };
    check(&store.list().unwrap()[0], "the writer's store");
    // Another store on the root, as another process: the slot is dirty and
    // the writer is live, so it reads the log.
    let other = Store::open_read_only(dir.path()).unwrap();
    check(&other.list().unwrap()[0], "another store");
    check(&other.info(id).unwrap().unwrap(), "another store's info");
    let live = store.list().unwrap()[0].clone();
    store.close().unwrap();
    // Clean now: the slot itself, with the writer's numbers and time.
    assert_eq!(other.list().unwrap()[0], live);
}

/// On a `Buffered` store, a save that evicts a session (and reopens its
/// own) syncs nothing: the evicted session is let go dirty, and its next
/// open recovers it without a sync. `list` stays exact throughout, and the
/// store's close leaves every session clean.
#[test]
fn evictions_on_a_buffered_store_put_no_sync_on_the_save_path() {
    let dir = tempdir();
    let hook = CountOps::new(|op| matches!(op, IoOp::Sync { .. } | IoOp::SyncDir { .. }));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default()
            .log(LogOptions::default().hook(hook.clone()))
            .max_open_sessions(2),
    )
    .unwrap();
    let mut sessions = numbered_sessions(&store, 3);
    // Forks of session 0 keep empty catalogs: their heads are in the
    // listing cache only, where their reopen finds them as left.
    for _ in 0..2 {
        let (parent, head) = sessions[0];
        sessions.push(store.fork_at(parent, head).unwrap());
    }
    let syncs = hook.seen();
    for round in 0..3 {
        for (id, head) in &mut sessions {
            store.save_delta(*id, head, &turn(round, 200)).unwrap();
        }
    }
    assert_eq!(
        hook.seen(),
        syncs,
        "saves that evicted and reopened sessions synced"
    );
    let entries: Vec<u64> = sessions
        .iter()
        .map(|(id, _)| store.restore(*id).unwrap().entries)
        .collect();
    let check = |listed: Vec<session_store::SessionInfo>, who: &str| {
        for ((id, head), entries) in sessions.iter().zip(&entries) {
            let info = listed.iter().find(|s| s.id == *id).unwrap();
            assert_eq!(info.head, Some(*head), "{who}");
            assert_eq!(info.entries, *entries, "{who}");
            assert_eq!(info.error, None, "{who}");
        }
    };
    check(store.list().unwrap(), "the evicting store");
    check(
        Store::open_read_only(dir.path()).unwrap().list().unwrap(),
        "another store",
    );
    for (i, (id, head)) in sessions.iter().enumerate() {
        let state = store.restore(*id).unwrap();
        assert_eq!(state.head, Some(*head));
        let first = format!("session {}", if i < 3 { i } else { 0 });
        assert_eq!(state.history[0], Item::user_text(first));
    }
    store.close().unwrap();
    drop(store);

    for (id, _) in &sessions[3..] {
        let catalog = dir.path().join("sessions").join(id.to_string());
        assert_eq!(fs::metadata(catalog.join("catalog")).unwrap().len(), 0);
    }
    // Closed cleanly, each of them: the list comes from the catalogs alone,
    // even with every segment hidden.
    let hidden = tempdir();
    let mut moved = Vec::new();
    for (id, _) in &sessions {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let to = hidden.path().join(format!("{id}-{}", moved.len()));
                fs::rename(&path, &to).unwrap();
                moved.push((to, path));
            }
        }
    }
    check(open(dir.path()).list().unwrap(), "after the close");
    for (from, to) in moved {
        fs::rename(from, to).unwrap();
    }
    let store = open(dir.path());
    for (id, head) in &sessions {
        assert_eq!(store.restore(*id).unwrap().head, Some(*head));
        assert_eq!(store.log(*id).unwrap().verify().damage, None);
    }
}

/// A store learns the listing cache's slots when it first needs one, not
/// at its open: a later store still finds each session's slot and puts a new
/// session after all of them, so the cache alone lists every session.
#[test]
fn a_later_store_finds_every_slot_of_the_listing_cache() {
    let dir = tempdir();
    let mut sessions: Vec<(SessionId, EntryHash)> = {
        let store = open(dir.path());
        let made = (0..4)
            .map(|_| {
                store
                    .create_session(None, RequestConfig::default(), &[])
                    .unwrap()
            })
            .collect();
        store.close().unwrap();
        made
    };
    let store = open(dir.path());
    let (id, mut head) = sessions[2];
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    sessions[2].1 = head;
    sessions.push(
        store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap(),
    );
    store.close().unwrap();
    drop(store);
    let cache = fs::read(dir.path().join("list.cache")).unwrap();
    assert_eq!(cache.len(), sessions.len() * 640, "one slot per session");
    // Without their catalog files, the sessions are listed from the cache
    // alone, or not at all.
    for (id, _) in &sessions {
        let catalog = dir
            .path()
            .join("sessions")
            .join(id.to_string())
            .join("catalog");
        fs::rename(&catalog, catalog.with_extension("hidden")).unwrap();
    }
    let listed = Store::open_read_only(dir.path()).unwrap().list().unwrap();
    for (id, head) in &sessions {
        let info = listed.iter().find(|s| s.id == *id).unwrap();
        assert_eq!((info.head, &info.error), (Some(*head), &None), "{id}");
    }
}

/// Two stores on one root (as two processes would be) place sessions in the
/// listing cache without taking each other's slots or giving one session two
/// slots, so `list` never shows an old state of a session as clean.
#[test]
fn two_stores_on_one_root_keep_the_listing_cache_honest() {
    let dir = tempdir();
    let a = open(dir.path());
    let b = open(dir.path());
    let (y, _) = b
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let (x, mut x_head) = a
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    a.close().unwrap();
    // B writes X, which A placed.
    b.save_delta(x, &mut x_head, &turn(1, 10)).unwrap();
    b.close().unwrap();
    let (z, _) = a
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    a.close().unwrap();
    drop((a, b));
    let listed = open(dir.path()).list().unwrap();
    let ids: Vec<_> = listed.iter().map(|s| s.id).collect();
    for id in [x, y, z] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let x_info = listed.iter().find(|s| s.id == x).unwrap();
    assert_eq!(x_info.head, Some(x_head), "list shows an old state of X");
    assert_eq!(x_info.entries, 1 + 4);
}

/// `Store::close` leaves open a session another handle still uses: marking
/// it clean while it can still be written would mislead `list`.
#[test]
fn close_keeps_sessions_in_use_open() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let held = store.log(id).unwrap();
    store.close().unwrap();
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    drop(held);
    let info = store
        .list()
        .unwrap()
        .into_iter()
        .find(|s| s.id == id)
        .unwrap();
    assert_eq!(info.head, Some(head));
}

/// Counts the writer opens of session logs (each creates its directory if
/// missing, which the hook sees even when it exists).
#[derive(Default)]
struct CountOpens(std::sync::atomic::AtomicUsize);

impl IoHook for CountOpens {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if let IoOp::CreateDir { path } = op {
            if path.parent().is_some_and(|p| p.ends_with("sessions")) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

#[test]
fn sessions_within_the_open_budget_stay_open_however_they_spread_over_shards() {
    let dir = tempdir();
    let hook = Arc::new(CountOpens::default());
    let store = Store::open_with(
        dir.path(),
        options()
            .log(LogOptions::default().hook(hook.clone()))
            .max_open_sessions(20),
    )
    .unwrap();
    // Twenty sessions in one shard (the store shards by the id's last byte).
    let mut sessions: Vec<(SessionId, EntryHash)> = (0..20u8)
        .map(|i| {
            let mut id = SessionId::new_v7();
            id.0[15] = 7;
            id.0[14] = i;
            let head = store
                .create_session_with_id(id, None, RequestConfig::default(), &[])
                .unwrap();
            (id, head)
        })
        .collect();
    let opened = hook.0.load(Ordering::SeqCst);
    for round in 0..3 {
        for (id, head) in &mut sessions {
            store
                .save_delta(*id, head, &[Item::user_text(format!("round {round}"))])
                .unwrap();
        }
    }
    assert_eq!(
        hook.0.load(Ordering::SeqCst),
        opened,
        "sessions were closed and reopened within the budget"
    );
    // One more session than the budget: the least recently used one goes.
    let (extra, _) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let locked = |id: SessionId| {
        let lock = File::open(store.session_dir(id).join("LOCK")).unwrap();
        matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
    };
    assert!(locked(extra));
    assert!(
        !locked(sessions[0].0),
        "the least recently used session stayed open"
    );
    let open = sessions.iter().filter(|(id, _)| locked(*id)).count();
    assert_eq!(open, 19);
}

#[test]
fn a_small_buffered_session_takes_disk_for_what_it_holds() {
    let dir = tempdir();
    // Default options: Buffered, 64 MiB segments (sparse until a sync).
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(Some("be brief"), RequestConfig::default(), &[])
        .unwrap();
    for t in 0..20 {
        let turn = [
            Item::user_text(format!("question {t}: {}", "q".repeat(300))),
            Item::assistant_text(format!("answer {t}: {}", "a".repeat(1200))),
        ];
        store.save_delta(id, &mut head, &turn).unwrap();
    }
    store.close().unwrap();
    let log_bytes = store.log(id).unwrap().bytes();
    let allocated = engine::allocated_bytes(&store.session_dir(id));
    // The records, plus a few blocks for the catalog, the lock and the
    // segment's header page: nowhere near the segment's 64 MiB.
    assert!(
        allocated < log_bytes + (64 << 10),
        "{allocated} bytes allocated for {log_bytes} bytes of records"
    );
    assert_eq!(store.restore(id).unwrap().history.len(), 40);
}

/// The first write after an open sweeps what dead creations of older
/// versions left in `staging/` (an open alone only looks).
#[test]
fn the_first_write_sweeps_the_staged_leftovers_of_creations_that_died() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("kept")])
        .unwrap();
    store.close().unwrap();
    drop(store);
    let staging = dir.path().join("staging");
    let stage = |name: &str, lock_file: bool| {
        let d = staging.join(name);
        fs::create_dir(&d).unwrap();
        fs::write(d.join("00000000000000000000.seg"), b"half a session").unwrap();
        if lock_file {
            File::create(d.join("CREATING")).unwrap();
        }
        d
    };
    let dead = stage("dead", true);
    let live = stage("live", true);
    let young = stage("young-without-lock", false);
    // A creation still running holds its lock (here, this test does).
    let held = File::open(live.join("CREATING")).unwrap();
    held.lock().unwrap();
    let store = open(dir.path());
    assert!(dead.exists(), "an open alone wrote");
    let (other, _) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    assert!(!dead.exists(), "a dead creation's leftover stayed");
    assert!(live.exists(), "a running creation's directory was swept");
    assert!(
        young.exists(),
        "a fresh directory without its lock yet was swept"
    );
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("kept")]
    );
    // New creations build in place: they leave nothing in staging/.
    store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let names: BTreeSet<String> = fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["live", "young-without-lock"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert!(!store.session_dir(id).join("CREATING").exists());
    assert_eq!(store.restore(other).unwrap().history, Vec::<Item>::new());
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

/// `Store::sync` makes durable what this store appended to a session, even
/// after an eviction let the session go unsynced (a Buffered store syncs
/// nothing on eviction): the sync reaches that session's segment.
#[test]
fn sync_reaches_a_session_that_an_eviction_let_go_unsynced() {
    #[derive(Default)]
    struct Syncs(std::sync::Mutex<Vec<PathBuf>>);
    impl IoHook for Syncs {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            if let IoOp::Sync { path } = op {
                self.0.lock().unwrap().push(path.to_path_buf());
            }
            Ok(())
        }
    }
    let dir = tempdir();
    let syncs = Arc::new(Syncs::default());
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default()
            .log(LogOptions::default().hook(syncs.clone()))
            .max_open_sessions(1),
    )
    .unwrap();
    let (a, head_a) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store.append(a, head_a, &turn(0, 100)).unwrap();
    let (b, head_b) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store.append(b, head_b, &turn(1, 100)).unwrap();
    let a_dir = store.session_dir(a);
    let a_synced = || {
        syncs
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.starts_with(&a_dir) && p.extension().is_some_and(|x| x == "seg"))
    };
    assert!(!a_synced(), "a Buffered store synced on its own");
    store.sync(a).unwrap();
    assert!(
        a_synced(),
        "Store::sync did not reach the evicted session's log"
    );
}

/// A failed sync poisons a session's writer; once the cause is gone, the
/// next call reopens the session through recovery instead of returning
/// `Poisoned` for as long as the store lives, and the head the store
/// reports tells the caller what was kept.
#[test]
fn a_poisoned_session_is_reopened_by_the_next_call() {
    let dir = tempdir();
    let hook = Arc::new(FailSyncs(AtomicBool::new(false)));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    let head = store.append(id, head, &turn(0, 100)).unwrap();
    store.sync(id).unwrap();
    hook.0.store(true, Ordering::SeqCst);
    let turn1 =
        session_store::Turn::new(turn(1, 100), 1).durability(session_store::Durability::Sync);
    assert!(matches!(
        store.commit_turn(id, head, &turn1),
        Err(Error::Io { .. })
    ));
    // While the cause lasts, calls fail (the reopen meets it again).
    let again = store.append(id, head, &turn(2, 10));
    assert!(
        matches!(again, Err(Error::Io { .. } | Error::Poisoned)),
        "{again:?}"
    );
    hook.0.store(false, Ordering::SeqCst);
    // The cause is gone: the session reopens, and goes on from its head.
    let kept = store.head(id).unwrap().unwrap();
    let head = store.append(id, kept, &turn(3, 10)).unwrap();
    store.sync(id).unwrap();
    assert_eq!(store.restore(id).unwrap().head, Some(head));
    store.close().unwrap();
}

/// A whole turn (its items, usage and `TurnEnd`) commits as one batch:
/// under `Sync` it costs one `fdatasync` of the log, not one per entry.
/// Counts the `fdatasync`s of segment files.
#[derive(Default)]
struct SegSyncs(std::sync::atomic::AtomicUsize);

impl IoHook for SegSyncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if matches!(op, IoOp::Sync { path } if path.extension().is_some_and(|e| e == "seg")) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[test]
fn a_turn_commit_under_sync_is_one_fdatasync() {
    let dir = tempdir();
    let hook = Arc::new(SegSyncs::default());
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(
            LogOptions::default()
                .hook(hook.clone())
                .durability(session_store::Durability::Sync),
        ),
    )
    .unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let head = store
        .commit_turn(id, head, &session_store::Turn::new(turn(0, 10), 1))
        .unwrap();
    let before = hook.0.load(Ordering::SeqCst);
    let usage = UsageRecord {
        output_tokens: 7,
        ..UsageRecord::default()
    };
    let turn1 = session_store::Turn::new(turn(1, 10), 2).usage(usage);
    let head = store.commit_turn(id, head, &turn1).unwrap();
    assert_eq!(
        hook.0.load(Ordering::SeqCst) - before,
        1,
        "one fdatasync per turn"
    );
    let state = store.restore(id).unwrap();
    assert_eq!((state.turn_count, state.head), (2, Some(head)));
    assert_eq!(state.usage.len(), 1);
}

/// A session may choose its durability at creation: its saves default to
/// it (after a reopen too), other sessions keep the store's, and a call's
/// own durability still overrides it (issue 17, item 3).
#[test]
fn a_session_keeps_the_durability_it_was_created_with() {
    #[derive(Default)]
    struct SegSyncs(Mutex<Vec<PathBuf>>);
    impl IoHook for SegSyncs {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            if let IoOp::Sync { path } = op {
                if path.extension().is_some_and(|e| e == "seg") {
                    self.0.lock().unwrap().push(path.to_path_buf());
                }
            }
            Ok(())
        }
    }
    use session_store::Durability;
    use std::sync::Mutex;
    let dir = tempdir();
    let hook = Arc::new(SegSyncs::default());
    let open = || {
        Store::open_with(
            dir.path(),
            StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
        )
        .unwrap()
    };
    let store = open();
    let (durable, head_d) = store
        .create_session_with_durability(None, RequestConfig::default(), &[], Durability::Sync)
        .unwrap();
    let (plain, head_p) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let synced = |id: SessionId| {
        let d = store.session_dir(id);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&d))
            .count()
    };
    let (d0, p0) = (synced(durable), synced(plain));
    let head_d = store.append(durable, head_d, &turn(0, 10)).unwrap();
    store.append(plain, head_p, &turn(0, 10)).unwrap();
    assert!(synced(durable) > d0, "the Sync session's save synced");
    assert_eq!(
        synced(plain),
        p0,
        "the store's Buffered default holds for the other"
    );
    // A call's own durability overrides the session's.
    let d1 = synced(durable);
    let quick = session_store::Turn::new(turn(1, 10), 1).durability(Durability::Buffered);
    let head_d = store.commit_turn(durable, head_d, &quick).unwrap();
    assert_eq!(synced(durable), d1);
    store.close().unwrap();
    drop(store);
    // After a reopen, the session still syncs its saves.
    let store = open();
    let d2 = {
        let d = store.session_dir(durable);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&d))
            .count()
    };
    store.append(durable, head_d, &turn(2, 10)).unwrap();
    let d3 = {
        let d = store.session_dir(durable);
        hook.0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&d))
            .count()
    };
    assert!(d3 > d2, "the choice held after a reopen");
}

/// A store with room for one open session: opening another lets the first
/// go (unsynced, on a Buffered store), with its writer's release hint.
fn one_open(root: &Path) -> Store {
    Store::open_with(root, options().max_open_sessions(1)).unwrap()
}

#[test]
fn a_released_session_reopens_whole_after_another_writer_appended_to_it() {
    let dir = tempdir();
    let store = one_open(dir.path());
    let (a, mut head_a) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    store
        .save_delta(a, &mut head_a, &[answer("first")])
        .unwrap();
    // Saving to B lets A go, with a hint at A's end.
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Another writer takes A meanwhile, appends past that end, and lets it
    // go unsynced too (so that no durable mark lies past the hint).
    let other = one_open(dir.path());
    let mut other_head = other.head(a).unwrap().unwrap();
    assert_eq!(other_head, head_a);
    other
        .save_delta(a, &mut other_head, &[answer("second"), answer("third")])
        .unwrap();
    other
        .create_session(None, RequestConfig::default(), &[Item::user_text("d")])
        .unwrap();
    // Reopened with the stale hint: the other writer's records are there,
    // chained, and the stale head is refused.
    let err = store
        .save_delta(a, &mut head_a, &[answer("stale")])
        .unwrap_err();
    assert!(matches!(err, Error::HeadMismatch { .. }), "{err}");
    assert_eq!(store.head(a).unwrap(), Some(other_head));
    let mut head = other_head;
    store.save_delta(a, &mut head, &[answer("fourth")]).unwrap();
    store.save_delta(b, &mut head_b, &[answer("b2")]).unwrap();
    let history = store.restore(a).unwrap().history;
    let words = ["first", "second", "third", "fourth"];
    let mut expected = vec![Item::user_text("a")];
    expected.extend(words.iter().map(|w| answer(w)));
    assert_eq!(history, as_given(&expected));
    assert!(store.verify(a).unwrap().damage.is_none());
    store.close().unwrap();
    other.close().unwrap();
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.restore(a).unwrap().history, as_given(&expected));
    assert!(reopened.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_release_hint_is_not_trusted_for_another_log_in_its_place() {
    let dir = tempdir();
    let store = one_open(dir.path());
    let (a, mut head_a) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    for n in 0..6 {
        store
            .save_delta(a, &mut head_a, &[answer(&format!("a{n}"))])
            .unwrap();
    }
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Another log takes the place of A's active segment while A is let go:
    // records of the same sizes as A's (so that one ends where A's hint
    // points) and then more.
    let elsewhere = tempdir();
    let other = Store::open_with(elsewhere.path(), options()).unwrap();
    let (c, mut head_c) = other
        .create_session(None, RequestConfig::default(), &[Item::user_text("c")])
        .unwrap();
    let mut expected = vec![Item::user_text("c")];
    for n in 0..9 {
        let item = answer(&format!("c{n}"));
        other
            .save_delta(c, &mut head_c, std::slice::from_ref(&item))
            .unwrap();
        expected.push(item);
    }
    // Copied while C's writer is open and has synced nothing: no durable
    // mark in it lies past A's hint, so only the hint could be trusted.
    let name = "00000000000000000000.seg";
    fs::copy(
        other.session_dir(c).join(name),
        store.session_dir(a).join(name),
    )
    .unwrap();
    drop(other);
    // A's reopen must read that log whole: a hint trusted for it would find
    // the record at its point with another hash, and cut there or fail.
    let state = store.restore(a).unwrap();
    assert_eq!(state.history, as_given(&expected));
    assert_eq!(store.head(a).unwrap(), Some(head_c));
    let mut head = head_c;
    store.save_delta(a, &mut head, &[answer("after")]).unwrap();
    assert!(store.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_released_session_reopens_past_its_durable_mark_without_a_sync() {
    let dir = tempdir();
    // A closed cleanly: its mark names its end.
    let first = Store::open(dir.path()).unwrap();
    let (a, mut head_a) = first
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    first
        .save_delta(a, &mut head_a, &[answer("synced")])
        .unwrap();
    first.close().unwrap();
    drop(first);
    let hook = Arc::new(SegSyncs::default());
    let log = LogOptions::default()
        .segment_size(SEGMENT_BYTES)
        .hook(hook.clone());
    let store = Store::open_with(dir.path(), options().log(log).max_open_sessions(1)).unwrap();
    // Records past that mark that only the page cache holds; then A is let
    // go, with a hint past its mark.
    store
        .save_delta(a, &mut head_a, &[answer("unsynced")])
        .unwrap();
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // A's reopen keeps the lagging mark, which the hint's scan still checks,
    // and syncs nothing: a Buffered save promises no durability.
    let before = hook.0.load(Ordering::SeqCst);
    store
        .save_delta(a, &mut head_a, &[answer("after")])
        .unwrap();
    assert_eq!(
        hook.0.load(Ordering::SeqCst) - before,
        0,
        "no fdatasync on the reopen"
    );
    let words = ["synced", "unsynced", "after"];
    let mut expected = vec![Item::user_text("a")];
    expected.extend(words.iter().map(|w| answer(w)));
    assert_eq!(store.restore(a).unwrap().history, as_given(&expected));
    store.close().unwrap();
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.restore(a).unwrap().history, as_given(&expected));
    assert!(reopened.verify(a).unwrap().damage.is_none());
}

#[test]
fn a_released_sessions_hint_that_its_records_no_longer_bear_out_cuts_nothing() {
    let dir = tempdir();
    let root = dir.path();
    let (a, marked, session, kept) =
        engine::closed_session(root, &[Item::user_text("a"), answer("one")]);
    // This store lets A go with a hint at the end of "two A", past its mark.
    let store = Store::open_with(root, StoreOptions::default().max_open_sessions(1)).unwrap();
    let mut head_a = marked;
    store
        .save_delta(a, &mut head_a, &[answer("two A")])
        .unwrap();
    let (b, mut head_b) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("b")])
        .unwrap();
    store.save_delta(b, &mut head_b, &[answer("b1")]).unwrap();
    // Meanwhile A's file goes back to its state at the mark, and another
    // writer appends a record of the same length where "two A" ended, then
    // stops as a crash stops it.
    engine::put_back(kept.path(), &session);
    let other = Store::open(root).unwrap();
    let mut head = marked;
    other.save_delta(a, &mut head, &[answer("two B")]).unwrap();
    other.abandon();
    assert_ne!(head, head_a);
    // The reopen with the stale hint reads the records as they are: nothing
    // is cut, and the save goes on from "two B".
    store.save_delta(a, &mut head, &[answer("three")]).unwrap();
    let expected = [
        Item::user_text("a"),
        answer("one"),
        answer("two B"),
        answer("three"),
    ];
    assert_eq!(store.restore(a).unwrap().history, as_given(&expected));
    assert!(store.verify(a).unwrap().damage.is_none());
    store.close().unwrap();
}

// ---------------------------------------------------------------------------
// The benchmarks' encoder.
// ---------------------------------------------------------------------------

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
