//! Guards the archived schema against silent change: a log whose records hold
//! every `LogEntry` and `LoggedItem` variant of schema 1 (the item model before
//! the Responses and Messages items) is committed under
//! `tests/fixtures/schema_v1/`, and today's code must read back exactly those
//! entries, the same restored state and the same head hash.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_schema_v1` rewrites it;
//! only do that with the code of the schema it is named after.

mod common;

use std::path::PathBuf;

use session_store::{
    schema::LoggedContentPart, schema::LoggedItem, schema::LoggedRole, ContentPart, EntryHash,
    Item, JsonText, LogEntry, RequestConfig, SessionId, SessionOrigin, WorkerResult,
};

/// The head hash the fixture was written with.
const HEAD: &str = "356fe643467bb0e3b2b14b33a259b8c20691e1583d6f6a080e1db071112acbda";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v1")
}

fn origin(byte: u8) -> SessionOrigin {
    SessionOrigin {
        session_id: SessionId([byte; 16]),
        at_hash: EntryHash([byte; 32]),
    }
}

/// One entry of every kind, and every item, role and content part of schema 1.
fn entries() -> Vec<LogEntry> {
    let ts = 1_764_500_000_000;
    let config = RequestConfig {
        model: Some("gpt-5".into()),
        temperature: Some(0.5),
        top_p: Some(0.875),
        max_output_tokens: Some(4096),
        reasoning_effort: Some("high".into()),
        extra: Some(JsonText::parse(r#"{"store":false,"big":12345678901234567890123}"#).unwrap()),
    };
    let message = |role, parts: Vec<LoggedContentPart>| LoggedItem::Message {
        role,
        content: parts,
    };
    let text = |t: &str| LoggedContentPart::Text { text: t.into() };
    vec![
        LogEntry::SessionStart {
            ts,
            system_prompt: Some("You are a careful agent.".into()),
            config: config.clone(),
            history: vec![
                message(LoggedRole::System, vec![text("project: session-store")]),
                message(LoggedRole::User, vec![text("earlier question")]),
                message(LoggedRole::Assistant, vec![text("earlier answer")]),
            ],
            forked_from: Some(origin(1)),
            compacted_from: Some(origin(2)),
        },
        LogEntry::UserInput {
            ts: ts + 1,
            item: message(LoggedRole::User, vec![text("list src/"), text(" please")]),
        },
        LogEntry::AssistantItems {
            ts: ts + 2,
            items: vec![
                LoggedItem::Reasoning {
                    text: "the user wants a listing".into(),
                    summary: vec!["listing".into(), "of src/".into()],
                    encrypted_content: Some("gAAAAB".repeat(50)),
                },
                LoggedItem::Reasoning {
                    text: String::new(),
                    summary: vec![],
                    encrypted_content: None,
                },
                LoggedItem::ToolCall {
                    call_id: "call_1".into(),
                    name: "shell".into(),
                    arguments: r#"{ "cmd" : "ls src" }"#.into(),
                },
            ],
        },
        LogEntry::ToolResults {
            ts: ts + 3,
            items: vec![
                LoggedItem::ToolResult {
                    call_id: "call_1".into(),
                    summary: "exit 0".into(),
                    content: Some("lib.rs\nlog.rs\n".into()),
                },
                LoggedItem::ToolResult {
                    call_id: "call_0".into(),
                    summary: "no output".into(),
                    content: None,
                },
            ],
        },
        LogEntry::HookInjectedItems {
            ts: ts + 4,
            items: vec![message(LoggedRole::System, vec![text("hook: tests pass")])],
        },
        LogEntry::AssistantItems {
            ts: ts + 5,
            items: vec![message(
                LoggedRole::Assistant,
                vec![
                    text("Here it is."),
                    LoggedContentPart::Refusal {
                        refusal: "I will not delete it.".into(),
                    },
                ],
            )],
        },
        LogEntry::TurnEnd {
            ts: ts + 6,
            turn_count: 1,
        },
        LogEntry::LlmUsage {
            ts: ts + 7,
            history_len: 9,
            input_total_tokens: 1200,
            cache_read_tokens: 800,
            cache_write_tokens: 100,
            output_tokens: 64,
        },
        LogEntry::ConfigChanged {
            ts: ts + 8,
            config: RequestConfig::model("gpt-5-mini"),
        },
        LogEntry::Extension {
            ts: ts + 9,
            domain: "my-plugin".into(),
            payload: JsonText::parse(r#"{"z": 1, "a": [1.50, "\u00e9"]}"#).unwrap(),
        },
        LogEntry::RunErrored {
            ts: ts + 10,
            interrupted: true,
            message: "rate limited".into(),
        },
        LogEntry::RunCompleted {
            ts: ts + 11,
            interrupted: false,
            result: WorkerResult {
                text: Some("done".into()),
                stop_reason: "end_turn".into(),
            },
        },
    ]
}

#[test]
fn the_committed_schema_v1_log_reads_with_todays_types() {
    let dir = fixture_dir();
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD);

    let state = log.restore().unwrap();
    let expected: Vec<Item> = entries()
        .iter()
        .flat_map(|e| e.items().to_vec())
        .map(LoggedItem::into_item)
        .collect();
    assert_eq!(state.history, expected);
    assert_eq!(
        state.history[3],
        Item::Message {
            extra: Default::default(),
            id: None,
            role: session_store::Role::User,
            content: vec![
                ContentPart::Text {
                    text: "list src/".into()
                },
                ContentPart::Text {
                    text: " please".into()
                },
            ],
            status: None,
        }
    );
    assert_eq!(
        state.system_prompt.as_deref(),
        Some("You are a careful agent.")
    );
    assert_eq!(state.config, RequestConfig::model("gpt-5-mini"));
    assert_eq!(state.turn_count, 1);
    assert!(!state.last_run_interrupted);
    assert_eq!(state.usage.len(), 1);
    assert_eq!(state.extensions.len(), 1);
    assert_eq!(
        state.extensions[0].payload.as_str(),
        r#"{"z":1,"a":[1.50,"\u00e9"]}"#
    );
    assert_eq!(state.forked_from, Some(origin(1)));
    assert_eq!(state.compacted_from, Some(origin(2)));
    assert_eq!(state.head.map(|h| h.to_string()).as_deref(), Some(HEAD));
    assert_eq!(state.entries, entries().len() as u64);
}
