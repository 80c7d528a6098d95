//! Guards replay and grouping against resuming a session with the wrong
//! history or counters, and against re-sending a history a provider rejects
//! without saying where.

mod common;

use common::{call, full_config, origin, reasoning, result, TS};
use proptest::prelude::*;
use session_store::{
    group_delta, schema::LoggedItem, state::check_history, state::collect_state,
    state::ExtensionRecord, state::UsageRecord, Item, JsonText, LogEntry, Problem, RequestConfig,
    RestoredState, WorkerResult,
};

fn logged(items: &[Item]) -> Vec<LoggedItem> {
    items.iter().map(LoggedItem::from).collect()
}

fn start(history: &[Item]) -> LogEntry {
    LogEntry::SessionStart {
        ts: TS,
        system_prompt: Some("first prompt".into()),
        config: RequestConfig::model("m1"),
        history: logged(history),
        forked_from: None,
        compacted_from: Some(origin(9)),
    }
}

fn user(text: &str) -> LogEntry {
    LogEntry::UserInput {
        ts: TS,
        item: LoggedItem::from(Item::user_text(text)),
    }
}

fn assistant(items: &[Item]) -> LogEntry {
    LogEntry::AssistantItems {
        ts: TS,
        items: logged(items),
    }
}

fn tools(items: &[Item]) -> LogEntry {
    LogEntry::ToolResults {
        ts: TS,
        items: logged(items),
    }
}

fn completed(interrupted: bool) -> LogEntry {
    LogEntry::RunCompleted {
        ts: TS,
        interrupted,
        result: WorkerResult {
            text: None,
            stop_reason: "end_turn".into(),
        },
    }
}

fn errored(interrupted: bool) -> LogEntry {
    LogEntry::RunErrored {
        ts: TS,
        interrupted,
        message: "boom".into(),
    }
}

fn turn_end(turn_count: u64) -> LogEntry {
    LogEntry::TurnEnd { ts: TS, turn_count }
}

/// A compact picture of grouped entries: kind name and item count.
fn shape(entries: &[LogEntry]) -> Vec<(&'static str, usize)> {
    entries
        .iter()
        .map(|e| (e.kind().name(), e.items().len()))
        .collect()
}

fn flatten(entries: &[LogEntry]) -> Vec<Item> {
    entries
        .iter()
        .flat_map(|e| e.items().iter().cloned().map(LoggedItem::into_item))
        .collect()
}

// ---- collect_state ----

#[test]
fn empty_log_gives_the_default_state() {
    let state = collect_state(Vec::<LogEntry>::new());
    assert_eq!(state, RestoredState::default());
    assert!(state.history.is_empty());
    assert_eq!((state.turn_count, state.entries), (0, 0));
    assert!(!state.last_run_interrupted);
    assert_eq!((state.head, state.head_seq), (None, None));
    assert!(state.is_ready_to_send());
}

#[test]
fn a_full_turn() {
    let answer = Item::assistant_text("hello");
    let entries = [
        start(&[]),
        user("hi"),
        assistant(&[reasoning("plan"), answer.clone()]),
        turn_end(1),
        completed(false),
    ];
    let state = collect_state(&entries);
    assert_eq!(
        state.history,
        vec![Item::user_text("hi"), reasoning("plan"), answer]
    );
    assert_eq!(state.system_prompt.as_deref(), Some("first prompt"));
    assert_eq!(state.config, RequestConfig::model("m1"));
    assert_eq!(state.compacted_from, Some(origin(9)));
    assert_eq!(state.turn_count, 1);
    assert_eq!(state.entries, 5);
    assert!(!state.last_run_interrupted);
    assert!(state.is_ready_to_send(), "{:?}", state.check());
}

#[test]
fn tool_calls_and_results_keep_log_order() {
    let entries = [
        user("list"),
        assistant(&[reasoning("r"), call("c1"), call("c2")]),
        tools(&[result("c1"), result("c2")]),
        LogEntry::HookInjectedItems {
            ts: TS,
            items: logged(&[Item::system_text("hook")]),
        },
        assistant(&[Item::assistant_text("done")]),
    ];
    let state = collect_state(&entries);
    assert_eq!(
        state.history,
        vec![
            Item::user_text("list"),
            reasoning("r"),
            call("c1"),
            call("c2"),
            result("c1"),
            result("c2"),
            Item::system_text("hook"),
            Item::assistant_text("done"),
        ]
    );
    assert!(state.check().is_empty(), "{:?}", state.check());
}

#[test]
fn ids_and_statuses_do_not_come_back() {
    let items = common::every_item();
    let state = collect_state([assistant(&items)]);
    let expected: Vec<Item> = items.to_vec();
    assert_eq!(state.history, expected);
}

#[test]
fn session_start_replaces_the_history() {
    let restart = LogEntry::SessionStart {
        ts: TS,
        system_prompt: None,
        config: full_config(),
        history: logged(&[Item::user_text("summary")]),
        forked_from: Some(origin(4)),
        compacted_from: None,
    };
    let entries = [
        start(&[Item::user_text("old")]),
        user("more"),
        restart,
        user("new"),
    ];
    let state = collect_state(&entries);
    assert_eq!(
        state.history,
        vec![Item::user_text("summary"), Item::user_text("new")]
    );
    // Everything the second start says replaces the first, absent fields included.
    assert_eq!(state.system_prompt, None);
    assert_eq!(state.config, full_config());
    assert_eq!(state.forked_from, Some(origin(4)));
    assert_eq!(state.compacted_from, None);
    assert_eq!(state.entries, 4);
}

#[test]
fn turn_count_is_the_last_turn_end_not_a_tally() {
    assert_eq!(collect_state([turn_end(3)]).turn_count, 3);
    assert_eq!(collect_state([turn_end(1), turn_end(1)]).turn_count, 1);
    assert_eq!(
        collect_state([turn_end(1), turn_end(2), user("x"), turn_end(5)]).turn_count,
        5
    );
}

#[test]
fn interrupted_runs() {
    let interrupted = |entries: &[LogEntry]| collect_state(entries).last_run_interrupted;
    assert!(interrupted(&[completed(true)]));
    assert!(interrupted(&[errored(true)]));
    assert!(!interrupted(&[completed(false)]));
    assert!(!interrupted(&[errored(false)]));
    // The last run decides, whichever way it ended.
    assert!(!interrupted(&[completed(true), completed(false)]));
    assert!(!interrupted(&[errored(true), completed(false)]));
    assert!(!interrupted(&[completed(true), errored(false)]));
    assert!(interrupted(&[completed(false), errored(true)]));
    assert!(interrupted(&[errored(false), completed(true)]));
    // Entries that are not runs leave it alone.
    assert!(interrupted(&[completed(true), user("x"), turn_end(1)]));
}

#[test]
fn config_changed_replaces_the_config() {
    let changed = LogEntry::ConfigChanged {
        ts: TS,
        config: full_config(),
    };
    let state = collect_state([start(&[]), user("x"), changed]);
    assert_eq!(state.config, full_config());
    assert_eq!(
        state.history,
        vec![Item::user_text("x")],
        "history untouched"
    );
    assert_eq!(state.system_prompt.as_deref(), Some("first prompt"));
}

#[test]
fn usage_and_extensions_are_collected_in_order() {
    let usage = |ts: u64, n: u64| LogEntry::LlmUsage {
        ts,
        history_len: n,
        input_total_tokens: n + 1,
        cache_read_tokens: n + 2,
        cache_write_tokens: n + 3,
        output_tokens: n + 4,
    };
    let extension = |ts: u64, domain: &str, payload: &str| LogEntry::Extension {
        ts,
        domain: domain.into(),
        payload: JsonText::parse(payload).unwrap(),
    };
    let entries = [
        usage(1, 10),
        extension(2, "b", r#"{"x":1}"#),
        user("x"),
        usage(3, 20),
        extension(4, "a", "[1,2]"),
        start(&[]),
    ];
    let state = collect_state(&entries);
    assert_eq!(
        state.usage,
        vec![
            UsageRecord {
                ts: 1,
                history_len: 10,
                input_total_tokens: 11,
                cache_read_tokens: 12,
                cache_write_tokens: 13,
                output_tokens: 14,
            },
            UsageRecord {
                ts: 3,
                history_len: 20,
                input_total_tokens: 21,
                cache_read_tokens: 22,
                cache_write_tokens: 23,
                output_tokens: 24,
            },
        ]
    );
    assert_eq!(
        state.extensions,
        vec![
            ExtensionRecord {
                ts: 2,
                domain: "b".into(),
                payload: JsonText::parse(r#"{"x":1}"#).unwrap(),
            },
            ExtensionRecord {
                ts: 4,
                domain: "a".into(),
                payload: JsonText::parse("[1,2]").unwrap(),
            },
        ]
    );
    assert!(state.history.is_empty(), "the start replaced the history");
    assert_eq!(state.entries, 6);
}

#[test]
fn collect_state_takes_owned_and_borrowed_entries() {
    let entries = vec![user("a"), turn_end(1)];
    let borrowed = collect_state(entries.iter());
    let owned = collect_state(entries.clone());
    assert_eq!(borrowed, owned);
    let mut stepwise = RestoredState::default();
    for entry in &entries {
        stepwise.apply(entry);
    }
    assert_eq!(stepwise, owned);
}

// ---- group_delta ----

#[test]
fn group_delta_of_nothing_is_nothing() {
    assert!(group_delta(&[], TS).is_empty());
}

#[test]
fn each_user_message_is_one_user_input() {
    let items = [Item::user_text("a"), Item::user_text("b")];
    let entries = group_delta(&items, TS);
    assert_eq!(shape(&entries), [("user_input", 1), ("user_input", 1)]);
    assert!(matches!(&entries[0], LogEntry::UserInput { ts: TS, .. }));
    assert_eq!(flatten(&entries), items);
}

#[test]
fn a_run_of_tool_results_is_one_tool_results() {
    let items = [result("c1"), result("c2"), result("c3")];
    let entries = group_delta(&items, TS);
    assert_eq!(shape(&entries), [("tool_results", 3)]);
    assert_eq!(flatten(&entries), items);
}

#[test]
fn a_run_of_assistant_output_is_one_assistant_items() {
    let items = [
        reasoning("r"),
        Item::assistant_text("a"),
        call("c1"),
        reasoning("r2"),
        call("c2"),
    ];
    let entries = group_delta(&items, TS);
    assert_eq!(shape(&entries), [("assistant_items", 5)]);
    assert_eq!(flatten(&entries), items);
}

#[test]
fn each_system_message_is_one_hook_injected_items() {
    let items = [Item::system_text("a"), Item::system_text("b")];
    let entries = group_delta(&items, TS);
    assert_eq!(
        shape(&entries),
        [("hook_injected_items", 1), ("hook_injected_items", 1)]
    );
    assert_eq!(flatten(&entries), items);
}

#[test]
fn mixed_runs_split_where_the_kind_changes_and_keep_order() {
    let items = [
        Item::user_text("u1"),
        reasoning("r"),
        call("c1"),
        call("c2"),
        result("c1"),
        result("c2"),
        Item::system_text("hook"),
        Item::assistant_text("a"),
        result("c3"),
        Item::system_text("s"),
        result("c4"),
        Item::user_text("u2"),
        Item::user_text("u3"),
        call("c5"),
    ];
    let entries = group_delta(&items, TS);
    assert_eq!(
        shape(&entries),
        [
            ("user_input", 1),
            ("assistant_items", 3),
            ("tool_results", 2),
            ("hook_injected_items", 1),
            ("assistant_items", 1),
            ("tool_results", 1),
            ("hook_injected_items", 1),
            ("tool_results", 1),
            ("user_input", 1),
            ("user_input", 1),
            ("assistant_items", 1),
        ]
    );
    assert_eq!(flatten(&entries), items);
    assert!(entries.iter().all(|e| e.ts() == TS));
}

#[test]
fn group_delta_drops_provider_state() {
    let items = common::every_item();
    let expected: Vec<Item> = items.to_vec();
    assert_eq!(flatten(&group_delta(&items, TS)), expected);
}

fn any_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        Just(Item::user_text("u")),
        Just(Item::assistant_text("a")),
        Just(Item::system_text("s")),
        Just(call("c")),
        Just(result("c")),
        Just(reasoning("r")),
    ]
}

proptest! {
    #[test]
    fn grouping_keeps_every_item_and_merges_only_runs(items in prop::collection::vec(any_item(), 0..24), ts in any::<u64>()) {
        let entries = group_delta(&items, ts);
        prop_assert_eq!(flatten(&entries), items.clone());
        prop_assert_eq!(collect_state(&entries).history, items);
        for entry in &entries {
            prop_assert_eq!(entry.ts(), ts);
            prop_assert!(!entry.items().is_empty());
            match entry {
                LogEntry::UserInput { item, .. } => prop_assert!(item.clone().into_item().is_user_message()),
                LogEntry::HookInjectedItems { items, .. } => {
                    prop_assert_eq!(items.len(), 1);
                    prop_assert!(items[0].clone().into_item().is_system_message());
                }
                LogEntry::AssistantItems { items, .. } => {
                    prop_assert!(items.iter().all(|i| i.clone().into_item().is_assistant_output()));
                }
                LogEntry::ToolResults { items, .. } => {
                    prop_assert!(items.iter().all(|i| i.clone().into_item().is_tool_result()));
                }
                other => prop_assert!(false, "unexpected {:?}", other.kind()),
            }
        }
        // Runs are maximal: two neighbours of a merging kind never share it.
        for pair in entries.windows(2) {
            let merging = matches!(pair[0], LogEntry::AssistantItems { .. } | LogEntry::ToolResults { .. });
            prop_assert!(!(merging && pair[0].kind() == pair[1].kind()), "{:?}", shape(&entries));
        }
    }
}

// ---- check_history / RestoredState::check ----

#[test]
fn a_clean_history_has_no_problems() {
    let history = [
        Item::system_text("s"),
        Item::user_text("u"),
        reasoning("r"),
        reasoning("r2"),
        call("c1"),
        result("c1"),
        reasoning("r3"),
        Item::assistant_text("a"),
    ];
    assert_eq!(check_history(&history), []);
    assert_eq!(check_history(&[]), []);
}

#[test]
fn call_without_result() {
    let history = [Item::user_text("u"), call("c1"), Item::assistant_text("a")];
    assert_eq!(
        check_history(&history),
        [Problem::CallWithoutResult {
            index: 1,
            call_id: "c1".into()
        }]
    );
}

#[test]
fn result_without_call() {
    let history = [Item::user_text("u"), result("c9")];
    assert_eq!(
        check_history(&history),
        [Problem::ResultWithoutCall {
            index: 1,
            call_id: "c9".into()
        }]
    );
}

#[test]
fn a_result_before_its_call_answers_nothing() {
    let history = [result("c1"), call("c1")];
    assert_eq!(
        check_history(&history),
        [
            Problem::ResultWithoutCall {
                index: 0,
                call_id: "c1".into()
            },
            Problem::CallWithoutResult {
                index: 1,
                call_id: "c1".into()
            },
        ]
    );
}

#[test]
fn duplicate_call_ids() {
    let history = [call("c1"), call("c1"), result("c1")];
    assert_eq!(
        check_history(&history),
        [Problem::DuplicateCallId {
            index: 1,
            first: 0,
            call_id: "c1".into()
        }]
    );
    let history = [call("c1"), result("c1"), Item::user_text("u"), result("c1")];
    assert_eq!(
        check_history(&history),
        [Problem::DuplicateCallId {
            index: 3,
            first: 1,
            call_id: "c1".into()
        }]
    );
}

#[test]
fn reasoning_must_be_followed_by_an_assistant_item() {
    let dangling = |history: &[Item]| check_history(history);
    assert_eq!(
        dangling(&[Item::user_text("u"), reasoning("r"), Item::user_text("u2")]),
        [Problem::DanglingReasoning { index: 1 }]
    );
    assert_eq!(
        dangling(&[Item::user_text("u"), reasoning("r")]),
        [Problem::DanglingReasoning { index: 1 }],
        "at the end of the history"
    );
    assert_eq!(
        dangling(&[call("c"), reasoning("r"), result("c")]),
        [Problem::DanglingReasoning { index: 1 }],
        "a tool result is not the model's"
    );
    assert_eq!(
        dangling(&[reasoning("r"), Item::system_text("s")]),
        [Problem::DanglingReasoning { index: 0 }]
    );
    assert_eq!(dangling(&[reasoning("r"), call("c"), result("c")]), []);
}

#[test]
fn problems_come_in_history_order() {
    let history = [
        call("c1"),     // 0: no result
        result("c2"),   // 1: no call
        reasoning("r"), // 2: followed by a user message
        Item::user_text("u"),
        call("c3"), // 4
        call("c3"), // 5: duplicate
        result("c3"),
    ];
    assert_eq!(
        check_history(&history),
        [
            Problem::CallWithoutResult {
                index: 0,
                call_id: "c1".into()
            },
            Problem::ResultWithoutCall {
                index: 1,
                call_id: "c2".into()
            },
            Problem::DanglingReasoning { index: 2 },
            Problem::DuplicateCallId {
                index: 5,
                first: 4,
                call_id: "c3".into()
            },
        ]
    );
}

#[test]
fn restored_state_checks_its_own_history() {
    let state = collect_state([user("u"), assistant(&[reasoning("r"), call("c1")])]);
    assert_eq!(
        state.check(),
        [Problem::CallWithoutResult {
            index: 2,
            call_id: "c1".into()
        }]
    );
    assert_eq!(state.check(), check_history(&state.history));
    assert!(!state.is_ready_to_send());

    let state = collect_state([
        user("u"),
        assistant(&[reasoning("r"), call("c1")]),
        tools(&[result("c1")]),
    ]);
    assert!(state.is_ready_to_send(), "{:?}", state.check());
}

fn opaque(role: Option<session_store::Role>, json: &str) -> Item {
    Item::Opaque {
        role,
        json: JsonText::parse(json).unwrap(),
    }
}

fn custom_call(call_id: &str) -> Item {
    Item::CustomToolCall {
        extra: Default::default(),
        id: None,
        call_id: call_id.into(),
        name: "apply_patch".into(),
        input: "*** Begin Patch".into(),
        status: None,
    }
}

fn output(call_id: &str, custom: bool) -> Item {
    Item::ToolOutput {
        extra: Default::default(),
        id: None,
        call_id: call_id.into(),
        output: None,
        is_error: Some(true),
        custom,
        status: None,
    }
}

#[test]
fn every_form_of_call_and_output_pairs_by_call_id() {
    use session_store::anthropic;
    use session_store::Role;
    // Custom tool calls and their outputs; function calls answered by a full output.
    let paired = [
        custom_call("c1"),
        output("c1", true),
        call("c2"),
        output("c2", false),
    ];
    assert_eq!(check_history(&paired), []);
    assert_eq!(
        check_history(&[custom_call("c1"), result("c2")]),
        [
            Problem::CallWithoutResult {
                index: 0,
                call_id: "c1".into()
            },
            Problem::ResultWithoutCall {
                index: 1,
                call_id: "c2".into()
            },
        ]
    );
    // Anthropic tool_use and tool_result.
    let history = anthropic::history_from_json(
        r#"[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]"#,
    )
    .unwrap();
    assert_eq!(check_history(&history), []);
    assert_eq!(
        check_history(&history[..2]),
        [Problem::CallWithoutResult {
            index: 1,
            call_id: "toolu_1".into()
        }]
    );
    // Opaque items that carry a call id: Responses `call_id` (an output when
    // the type ends in `_output`), Anthropic `tool_use_id` and `*tool_use` ids.
    let computer = opaque(
        None,
        r#"{"type":"computer_call","id":"cu_1","call_id":"c5"}"#,
    );
    let screenshot = opaque(None, r#"{"type":"computer_call_output","call_id":"c5"}"#);
    assert_eq!(check_history(&[computer.clone(), screenshot.clone()]), []);
    assert_eq!(
        check_history(std::slice::from_ref(&screenshot)),
        [Problem::ResultWithoutCall {
            index: 0,
            call_id: "c5".into()
        }]
    );
    assert_eq!(
        check_history(&[computer.clone(), screenshot.clone(), screenshot]),
        [Problem::DuplicateCallId {
            index: 2,
            first: 1,
            call_id: "c5".into()
        }]
    );
    let server_use = opaque(
        Some(Role::Assistant),
        r#"{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{}}"#,
    );
    let server_result = opaque(
        Some(Role::Assistant),
        r#"{"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]}"#,
    );
    assert_eq!(check_history(&[server_use.clone(), server_result]), []);
    assert_eq!(
        check_history(&[server_use]),
        [Problem::CallWithoutResult {
            index: 0,
            call_id: "srv_1".into()
        }]
    );
    // Opaque items without a call id are neither.
    let search = opaque(None, r#"{"type":"web_search_call","id":"ws_1"}"#);
    assert_eq!(check_history(&[search]), []);
    // Thinking must be followed by the model's output too.
    let thinking = Item::Thinking {
        extra: Default::default(),
        thinking: "t".into(),
        signature: None,
    };
    assert_eq!(
        check_history(&[thinking, Item::user_text("u")]),
        [Problem::DanglingReasoning { index: 0 }]
    );
}
