//! Guards the transcript readers against losing real content: the results of
//! parallel tool calls written as sibling nodes, calls of one response on a
//! side branch, the history before a compaction whose logical parent is not
//! in the file, files without `parentUuid`, the transcript's own times,
//! titles, models and usage, and Codex prompts that only events carry.

use serde_json::{json, Value};
use session_store::history::claude::parse_session_bytes;
use session_store::history::codex::parse_rollout_bytes;
use session_store::{history::HistoryImport, history::ItemCounts, LogEntry, SessionId, Store};

const S: &str = "5f0c6a3e-1b2d-4c5e-8f90-0a1b2c3d4e5f";

/// A Claude Code line: `uuid`, `parent`, a timestamp second, and the rest.
fn line(uuid: &str, parent: Option<&str>, second: u32, rest: Value) -> String {
    let mut v = json!({
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": S,
        "isSidechain": false,
        "cwd": "/home/a/proj",
        "version": "2.1.39",
        "timestamp": format!("2026-03-01T10:00:{second:02}.000Z"),
    });
    v.as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    v.to_string()
}

fn user(text: &str) -> Value {
    json!({"type": "user", "message": {"role": "user", "content": text}})
}

fn call(msg: &str, id: &str, model: &str) -> Value {
    json!({"type": "assistant", "message": {"id": msg, "role": "assistant", "model": model,
        "content": [{"type": "tool_use", "id": id, "name": "Glob", "input": {"pattern": "*"}, "caller": {"type": "direct"}}],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "output_tokens": 7}}})
}

fn result(id: &str) -> Value {
    json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}})
}

fn answer(msg: &str, text: &str, model: &str) -> Value {
    json!({"type": "assistant", "message": {"id": msg, "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": 20, "output_tokens": 3}}})
}

fn bytes(lines: &[String]) -> Vec<u8> {
    lines.join("\n").into_bytes()
}

fn counts(import: &HistoryImport) -> ItemCounts {
    import.counts()
}

/// Parallel calls: each result a node of its own, hanging off the line of
/// its call; one call of the response on a side branch; a progress line.
fn parallel() -> Vec<String> {
    vec![
        line("u1", None, 0, user("Find the files")),
        line("a1", Some("u1"), 1, call("msg_1", "t1", "claude-a")),
        line("a2", Some("a1"), 2, call("msg_1", "t2", "claude-a")),
        // A third call of the same response, on a side branch of u1.
        line("a3", Some("u1"), 2, call("msg_1", "t3", "claude-a")),
        line(
            "p1",
            Some("a1"),
            3,
            json!({"type": "progress", "data": {"type": "hook_progress"}}),
        ),
        line("r1", Some("a1"), 3, result("t1")),
        line("r3", Some("a3"), 3, result("t3")),
        line("r2", Some("a2"), 4, result("t2")),
        line(
            "a4",
            Some("r2"),
            5,
            answer("msg_2", "Found them.", "claude-b"),
        ),
    ]
}

#[test]
fn parallel_tool_results_and_calls_on_side_branches_are_kept() {
    let session = parse_session_bytes(&bytes(&parallel()));
    let import = claude_import(&session.main);
    let c = counts(&import);
    assert_eq!((c.tool_calls, c.tool_results), (3, 3), "{c}");
    assert_eq!((c.user_messages, c.assistant_messages), (1, 1), "{c}");
    // Every call has its result, so the Messages history is valid.
    let state = restore_import(&import);
    assert!(state.check().is_empty(), "{:?}", state.check());
    // Nothing was left out: the progress line belongs to its call.
    assert_eq!(session.main.stats.off_path, 0, "{:?}", session.main.stats);
}

#[test]
fn the_transcripts_times_models_and_usage_are_imported() {
    let session = parse_session_bytes(&bytes(&parallel()));
    let import = claude_import(&session.main);
    let (store, _dir, id) = write(&import);
    let entries = entries(&store, id);
    let base = 1_772_359_200_000u64; // 2026-03-01T10:00:00Z
    let LogEntry::SessionStart { ts, config, .. } = &entries[0] else {
        panic!("{:?}", entries[0]);
    };
    assert_eq!(*ts, base);
    assert_eq!(config.model.as_deref(), Some("claude-a"));
    let user_ts: Vec<u64> = entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::UserInput { ts, .. } => Some(*ts),
            _ => None,
        })
        .collect();
    assert_eq!(user_ts, [base]);
    assert!(
        entries
            .iter()
            .all(|e| e.ts() >= base && e.ts() <= base + 5_000),
        "every entry keeps the transcript's time: {entries:?}"
    );
    let changes: Vec<&str> = entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::ConfigChanged { config, .. } => config.model.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(changes, ["claude-b"]);
    let usage: Vec<(u64, u64, u64, u64)> = entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::LlmUsage {
                input_total_tokens,
                cache_read_tokens,
                cache_write_tokens,
                output_tokens,
                ..
            } => Some((
                *input_total_tokens,
                *cache_read_tokens,
                *cache_write_tokens,
                *output_tokens,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(usage, [(115, 100, 5, 7), (20, 0, 0, 3)]);
}

#[test]
fn history_before_a_compaction_whose_logical_parent_is_missing_is_kept() {
    let lines = vec![
        line("u1", None, 0, user("First prompt")),
        line("a1", Some("u1"), 1, answer("msg_1", "one", "claude-a")),
        line("u2", Some("a1"), 2, user("Second prompt")),
        line("a2", Some("u2"), 3, answer("msg_2", "two", "claude-a")),
        line(
            "b1",
            None,
            4,
            json!({"type": "system", "subtype": "compact_boundary", "logicalParentUuid": "not-in-this-file",
                   "compactMetadata": {"trigger": "auto", "preTokens": 1000}}),
        ),
        line(
            "s1",
            Some("b1"),
            5,
            json!({"type": "user", "isCompactSummary": true, "message": {"role": "user", "content": "Summary so far"}}),
        ),
        line("u3", Some("s1"), 6, user("Third prompt")),
        line("a3", Some("u3"), 7, answer("msg_3", "three", "claude-a")),
    ];
    let session = parse_session_bytes(&bytes(&lines));
    let import = claude_import(&session.main);
    assert_eq!(import.items.len(), 4, "{:?}", import.items);
    assert_eq!(import.compactions.len(), 1);
    assert_eq!(import.compactions[0].items.len(), 3);
    assert_eq!(import.title.as_deref(), Some("First prompt"));
    let (store, _dir, id) = write(&import);
    let info = store.info(id).unwrap().unwrap();
    assert!(info.compacted_from.is_some());
    assert_eq!(
        HistoryImport::stored_counts(&store, id).unwrap(),
        import.counts()
    );
}

#[test]
fn a_file_without_parent_links_is_read_in_file_order_and_titled_by_its_summary() {
    let mut lines: Vec<String> = (0..7)
        .map(|i| {
            let mut v: Value = serde_json::from_str(&line(
                &format!("n{i}"),
                None,
                i,
                if i % 2 == 0 {
                    user(&format!("prompt {i}"))
                } else {
                    answer(&format!("msg_{i}"), "reply", "claude-a")
                },
            ))
            .unwrap();
            v.as_object_mut().unwrap().remove("parentUuid");
            v.to_string()
        })
        .collect();
    lines.push(
        json!({"type": "summary", "summary": "Listing the tree", "leafUuid": "n6"}).to_string(),
    );
    let session = parse_session_bytes(&bytes(&lines));
    let import = claude_import(&session.main);
    assert_eq!(import.items.len(), 7);
    assert_eq!(import.title.as_deref(), Some("Listing the tree"));
    let (store, _dir, id) = write(&import);
    assert_eq!(
        store.info(id).unwrap().unwrap().title.as_deref(),
        Some("Listing the tree")
    );
}

#[test]
fn codex_prompts_only_in_events_are_imported_and_title_the_session() {
    let lines = [
        json!({"timestamp": "2026-01-10T08:00:00.000Z", "type": "session_meta", "payload": {"id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "cwd": "/home/a/proj", "cli_version": "0.128.0"}}),
        json!({"timestamp": "2026-01-10T08:00:00.100Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/home/a/proj</cwd>\n</environment_context>"}]}}),
        json!({"timestamp": "2026-01-10T08:00:01.000Z", "type": "turn_context", "payload": {"cwd": "/home/a/proj", "model": "gpt-5.3-codex"}}),
        json!({"timestamp": "2026-01-10T08:00:01.500Z", "type": "event_msg", "payload": {"type": "user_message", "message": "List the files", "images": []}}),
        json!({"timestamp": "2026-01-10T08:00:02.000Z", "type": "response_item", "payload": {"type": "message", "role": "assistant", "phase": "final_answer", "content": [{"type": "output_text", "text": "README.md"}]}}),
        json!({"timestamp": "2026-01-10T08:00:02.100Z", "type": "event_msg", "payload": {"type": "token_count", "info": {"last_token_usage": {"input_tokens": 900, "cached_input_tokens": 800, "output_tokens": 12}}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let t = parse_rollout_bytes(text.as_bytes());
    let import = session_store::history::codex::import_of(&t);
    let c = import.counts();
    // The environment context and the prompt from the event.
    assert_eq!((c.user_messages, c.assistant_messages), (2, 1), "{c}");
    assert_eq!(import.title.as_deref(), Some("List the files"));
    // The `phase` message is typed, and shown.
    assert!(t.messages().iter().any(|m| m.text == "README.md"));
    let (store, _dir, id) = write(&import);
    let entries = entries(&store, id);
    let LogEntry::SessionStart { config, .. } = &entries[0] else {
        panic!()
    };
    assert_eq!(config.model.as_deref(), Some("gpt-5.3-codex"));
    assert!(entries.iter().any(|e| matches!(
        e,
        LogEntry::LlmUsage {
            input_total_tokens: 900,
            cache_read_tokens: 800,
            output_tokens: 12,
            ..
        }
    )));
    assert_eq!(
        store.info(id).unwrap().unwrap().title.as_deref(),
        Some("List the files")
    );
}

fn claude_import(t: &session_store::history::ItemTranscript) -> HistoryImport {
    session_store::history::claude::import_of(t, None)
}

fn write(import: &HistoryImport) -> (Store, tempfile::TempDir, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let id = import.write_to(&store).unwrap();
    (store, dir, id)
}

fn restore_import(import: &HistoryImport) -> session_store::RestoredState {
    let (store, _dir, id) = write(import);
    store.restore(id).unwrap()
}

fn entries(store: &Store, id: SessionId) -> Vec<LogEntry> {
    let mut out = Vec::new();
    store
        .export_entries(id, |e| {
            out.push(e.entry.clone());
            Ok(())
        })
        .unwrap();
    out
}
