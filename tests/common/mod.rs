//! Fixtures shared by the integration tests: items of every variant, entries of
//! every kind, with every optional field both set and unset somewhere; and, in
//! [`store`], the helpers of the tests of the session API.
#![allow(dead_code)]

pub mod store;

use session_store::{
    schema::LoggedItem, ContentPart, EntryHash, Item, ItemStatus, JsonText, LogEntry,
    RequestConfig, Role, SessionId, SessionOrigin, ToolOutput, WorkerResult,
};

/// A timestamp in the range real logs carry.
pub const TS: u64 = 1_764_000_000_000;

/// A fixed UUID v7 session id.
pub fn session_id() -> SessionId {
    "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".parse().unwrap()
}

/// A hash whose 32 bytes are all `byte`.
pub fn hash(byte: u8) -> EntryHash {
    EntryHash([byte; 32])
}

/// An origin at the hash made of `byte`.
pub fn origin(byte: u8) -> SessionOrigin {
    SessionOrigin {
        session_id: session_id(),
        at_hash: hash(byte),
    }
}

/// A tool call without provider state.
pub fn call(call_id: &str) -> Item {
    Item::ToolCall {
        extra: Default::default(),
        id: None,
        call_id: call_id.into(),
        name: "shell".into(),
        arguments: r#"{"cmd":"ls"}"#.into(),
        status: None,
    }
}

/// A tool result without provider state.
pub fn result(call_id: &str) -> Item {
    Item::ToolResult {
        extra: Default::default(),
        id: None,
        call_id: call_id.into(),
        summary: "ok".into(),
        content: Some("a\nb\n".into()),
    }
}

/// A reasoning item without provider state.
pub fn reasoning(text: &str) -> Item {
    Item::Reasoning {
        extra: Default::default(),
        id: None,
        text: text.into(),
        summary: vec!["thought".into()],
        encrypted_content: Some("gAAAAB\u{0}\u{7f}==".into()),
        status: None,
    }
}

/// Every `Item` variant and both content parts, with the ids and statuses that
/// the log drops set, and every optional field both set and unset.
pub fn every_item() -> Vec<Item> {
    vec![
        Item::Message {
            extra: Default::default(),
            id: Some("msg_1".into()),
            role: Role::User,
            content: vec![ContentPart::Text { text: "hi".into() }],
            status: Some(ItemStatus::Completed),
        },
        Item::Message {
            extra: Default::default(),
            id: Some("msg_2".into()),
            role: Role::Assistant,
            content: vec![
                ContentPart::Text {
                    text: "part one, ".into(),
                },
                ContentPart::Refusal {
                    refusal: "no".into(),
                },
                ContentPart::Text {
                    text: "part two".into(),
                },
            ],
            status: Some(ItemStatus::Incomplete),
        },
        Item::Message {
            extra: Default::default(),
            id: None,
            role: Role::System,
            content: vec![],
            status: Some(ItemStatus::InProgress),
        },
        Item::ToolCall {
            extra: Default::default(),
            id: Some("fc_1".into()),
            call_id: "call_1".into(),
            name: "shell".into(),
            // Arguments are kept as the model spelled them, spaces included.
            arguments: "{ \"cmd\" : \"ls -la\" }".into(),
            status: Some(ItemStatus::Completed),
        },
        Item::ToolResult {
            extra: Default::default(),
            id: Some("fco_1".into()),
            call_id: "call_1".into(),
            summary: "listed".into(),
            content: Some("total 0\n".into()),
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "call_2".into(),
            summary: String::new(),
            content: None,
        },
        Item::Reasoning {
            extra: Default::default(),
            id: Some("rs_1".into()),
            text: "thinking".into(),
            summary: vec!["one".into(), "two".into()],
            // Opaque provider state: padding, a NUL, a quote and a backslash must all survive.
            encrypted_content: Some("gAAAAABn\u{0}\"\\/+==".into()),
            status: Some(ItemStatus::Completed),
        },
        Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: String::new(),
            summary: vec![],
            encrypted_content: None,
            status: None,
        },
        Item::Message {
            extra: Default::default(),
            id: Some("msg_3".into()),
            role: Role::Developer,
            content: vec![
                ContentPart::InputImage {
                    image_url: Some("data:image/png;base64,AAAA".into()),
                    file_id: None,
                    detail: Some("low".into()),
                },
                ContentPart::InputFile {
                    file_id: Some("file-1".into()),
                    file_data: Some("aGk=".into()),
                    filename: Some("a.txt".into()),
                    file_url: None,
                },
                ContentPart::InputAudio {
                    data: "UklGRg==".into(),
                    format: "wav".into(),
                },
                ContentPart::Opaque {
                    json: JsonText::parse(r#"{"type":"image","source":{"z":1,"a":2.50}}"#).unwrap(),
                },
            ],
            status: None,
        },
        Item::Message {
            extra: Default::default(),
            id: None,
            role: Role::Assistant,
            content: vec![ContentPart::OutputText {
                text: "cited".into(),
                annotations: Some(
                    JsonText::parse(r#"[{"type":"url_citation","url":"u"}]"#).unwrap(),
                ),
                logprobs: Some(JsonText::parse(r#"[{"token":"c","logprob":-1.0e-2}]"#).unwrap()),
            }],
            status: None,
        },
        Item::CustomToolCall {
            extra: Default::default(),
            id: Some("ctc_1".into()),
            call_id: "call_3".into(),
            name: "apply_patch".into(),
            input: "*** Begin Patch\n".into(),
            status: Some(ItemStatus::Completed),
        },
        Item::ToolOutput {
            extra: Default::default(),
            id: Some("ctco_1".into()),
            call_id: "call_3".into(),
            output: Some(ToolOutput::Parts(vec![
                ContentPart::Text { text: "ok".into() },
                ContentPart::Opaque {
                    json: JsonText::parse(r#"{"type":"image","n":1e2}"#).unwrap(),
                },
            ])),
            is_error: Some(false),
            custom: true,
            status: Some(ItemStatus::Completed),
        },
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: "call_4".into(),
            output: None,
            is_error: None,
            custom: false,
            status: None,
        },
        Item::ReasoningParts {
            extra: Default::default(),
            id: Some("rs_2".into()),
            summary: vec!["s".into()],
            content: vec!["one".into(), "two".into()],
            encrypted_content: Some("gAAAA+/==".into()),
            status: None,
        },
        Item::Thinking {
            extra: Default::default(),
            thinking: "hmm".into(),
            signature: Some("EqQB+/sig==".into()),
        },
        Item::RedactedThinking {
            extra: Default::default(),
            data: "EmwKAh+/==".into(),
        },
        Item::Opaque {
            role: None,
            json: JsonText::parse(
                r#"{"type":"web_search_call","id":"ws_1","status":"completed","z":1,"a":1.0e3}"#,
            )
            .unwrap(),
        },
        Item::Opaque {
            role: Some(Role::Assistant),
            json: JsonText::parse(r#"{"type":"server_tool_use","id":"srvtoolu_1","input":{}}"#)
                .unwrap(),
        },
    ]
}

/// A config with every field set, including floats and an `extra` object.
pub fn full_config() -> RequestConfig {
    RequestConfig {
        model: Some("gpt-5".into()),
        temperature: Some(0.1 + 0.2),
        top_p: Some(-0.0),
        max_output_tokens: Some(u64::MAX),
        reasoning_effort: Some("high".into()),
        extra: Some(JsonText::parse(r#"{"b": [1, 2.50, 1e2], "a": {"x": "y z"}}"#).unwrap()),
    }
}

fn logged(items: &[Item]) -> Vec<LoggedItem> {
    items.iter().map(LoggedItem::from).collect()
}

/// One entry of every kind, some with every optional field set and some with none.
pub fn every_entry() -> Vec<LogEntry> {
    let items = every_item();
    vec![
        LogEntry::SessionStart {
            ts: TS,
            system_prompt: Some("You are terse.".into()),
            config: full_config(),
            history: logged(&items),
            forked_from: Some(origin(1)),
            compacted_from: Some(origin(2)),
        },
        LogEntry::SessionStart {
            ts: 0,
            system_prompt: None,
            config: RequestConfig::default(),
            history: vec![],
            forked_from: None,
            compacted_from: None,
        },
        LogEntry::UserInput {
            ts: TS + 1,
            item: LoggedItem::from(&items[0]),
        },
        LogEntry::AssistantItems {
            ts: TS + 2,
            items: logged(&[items[6].clone(), items[1].clone(), items[3].clone()]),
        },
        LogEntry::ToolResults {
            ts: TS + 3,
            items: logged(&items[4..6]),
        },
        LogEntry::HookInjectedItems {
            ts: TS + 4,
            items: logged(&items[2..3]),
        },
        LogEntry::TurnEnd {
            ts: TS + 5,
            turn_count: 7,
        },
        LogEntry::RunCompleted {
            ts: TS + 6,
            interrupted: false,
            result: WorkerResult {
                text: Some("done".into()),
                stop_reason: "end_turn".into(),
            },
        },
        LogEntry::RunCompleted {
            ts: TS + 7,
            interrupted: true,
            result: WorkerResult::default(),
        },
        LogEntry::RunErrored {
            ts: TS + 8,
            interrupted: true,
            message: "provider returned 500".into(),
        },
        LogEntry::ConfigChanged {
            ts: TS + 9,
            config: RequestConfig::model("gpt-5-mini"),
        },
        LogEntry::LlmUsage {
            ts: TS + 10,
            history_len: 9,
            input_total_tokens: 1200,
            cache_read_tokens: 1000,
            cache_write_tokens: 200,
            output_tokens: u64::MAX,
        },
        LogEntry::Extension {
            ts: u64::MAX,
            domain: "history.agy".into(),
            payload: JsonText::parse(r#"{"z": 1, "a": [true, null, "é\u00e9"], "n": -1.50e+3}"#)
                .unwrap(),
        },
        LogEntry::ItemsRemoved {
            ts: TS + 11,
            count: u64::MAX,
        },
    ]
}

/// Archives `entry` and copies the bytes to `offset` bytes past a 16-byte boundary.
pub fn archive_at(entry: &LogEntry, offset: usize) -> rkyv::util::AlignedVec {
    let bytes = entry.to_archive();
    let mut out = rkyv::util::AlignedVec::new();
    out.extend_from_slice(&vec![0u8; offset]);
    out.extend_from_slice(&bytes);
    out
}

/// With `REGENERATE_FIXTURES` set, writes `entries` as the committed fixture
/// log in `dir` (replacing it) in small segments, prints the new head hash, and
/// returns true; otherwise returns false.
pub fn regenerate_fixture(dir: &std::path::Path, entries: &[LogEntry]) -> bool {
    if std::env::var("REGENERATE_FIXTURES").is_err() {
        return false;
    }
    let _ = std::fs::remove_dir_all(dir);
    let opts = session_store::LogOptions {
        prepare_ahead: false,
        ..session_store::LogOptions::default().segment_size(16 << 10)
    };
    let log = session_store::Log::open(dir, opts).unwrap();
    for e in entries {
        log.append(e).unwrap();
    }
    let head = log.head().unwrap().1;
    log.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
    println!("new head: {head}");
    true
}

/// Opens the committed fixture log in `dir` read-only and checks that it
/// verifies clean and reads back exactly `entries` up to the head `head`.
pub fn read_fixture(dir: &std::path::Path, entries: &[LogEntry], head: &str) -> session_store::Log {
    let log = session_store::Log::open_read_only(dir).expect("the fixture opens");
    let report = log.verify();
    assert_eq!(report.damage, None);
    assert_eq!(report.torn_tail, None);
    let got: Vec<LogEntry> = log
        .snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(got, entries);
    assert_eq!(log.head().unwrap().1.to_string(), head);
    log
}
