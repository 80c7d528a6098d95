//! Guards the JSON wire form against drift: every tag, field name and omission
//! is pinned to exact text, and bad lines must be typed errors that say where.

mod common;

use std::io::Cursor;

use common::{hash, origin, session_id};
use session_store::{
    schema::LoggedContentPart, schema::LoggedItem, schema::LoggedRole, wire::entry_line,
    wire::parse_line, wire::LineReader, Error, Item, JsonText, LogEntry, RequestConfig,
    WorkerResult,
};

/// `value` serializes to exactly `expected`, and `expected` parses back to `value`.
fn assert_item_json(value: &LoggedItem, expected: &str) {
    assert_eq!(serde_json::to_string(value).unwrap(), expected);
    let back: LoggedItem = serde_json::from_str(expected).unwrap();
    assert_eq!(&back, value);
}

/// `entry` serializes to exactly `expected`, and `expected`, read as a wire
/// line without seq or hashes, parses back to `entry`.
fn assert_entry_json(entry: &LogEntry, expected: &str) {
    assert_eq!(serde_json::to_string(entry).unwrap(), expected);
    let wire = parse_line(expected, 1).unwrap();
    assert_eq!(&wire.entry, entry);
}

fn user_hi() -> LoggedItem {
    LoggedItem::from(Item::user_text("hi"))
}

const USER_HI: &str = r#"{"kind":"message","role":"user","content":[{"kind":"text","text":"hi"}]}"#;

fn wire_error(line: &str, line_no: u64) -> (u64, u64, String) {
    match parse_line(line, line_no) {
        Err(Error::Wire {
            line,
            column,
            message,
        }) => (line, column, message),
        other => panic!("expected a wire error for {line:?}, got {other:?}"),
    }
}

// ---- items ----

#[test]
fn message_with_both_content_parts() {
    for (role, name) in [
        (LoggedRole::User, "user"),
        (LoggedRole::Assistant, "assistant"),
        (LoggedRole::System, "system"),
    ] {
        let item = LoggedItem::Message {
            role,
            content: vec![
                LoggedContentPart::Text { text: "hi".into() },
                LoggedContentPart::Refusal {
                    refusal: "no".into(),
                },
            ],
        };
        let expected = format!(
            r#"{{"kind":"message","role":"{name}","content":[{{"kind":"text","text":"hi"}},{{"kind":"refusal","refusal":"no"}}]}}"#
        );
        assert_item_json(&item, &expected);
    }
}

#[test]
fn content_parts_alone() {
    let text = LoggedContentPart::Text { text: "a".into() };
    let refusal = LoggedContentPart::Refusal {
        refusal: "b".into(),
    };
    assert_eq!(
        serde_json::to_string(&text).unwrap(),
        r#"{"kind":"text","text":"a"}"#
    );
    assert_eq!(
        serde_json::to_string(&refusal).unwrap(),
        r#"{"kind":"refusal","refusal":"b"}"#
    );
}

#[test]
fn tool_call_keeps_arguments_as_text() {
    let item = LoggedItem::ToolCall {
        call_id: "c1".into(),
        name: "shell".into(),
        arguments: r#"{"cmd":"ls"}"#.into(),
    };
    assert_item_json(
        &item,
        r#"{"kind":"tool_call","call_id":"c1","name":"shell","arguments":"{\"cmd\":\"ls\"}"}"#,
    );
}

#[test]
fn tool_result_with_and_without_content() {
    let full = LoggedItem::ToolResult {
        call_id: "c1".into(),
        summary: "ok".into(),
        content: Some("a\nb".into()),
    };
    assert_item_json(
        &full,
        r#"{"kind":"tool_result","call_id":"c1","summary":"ok","content":"a\nb"}"#,
    );
    let bare = LoggedItem::ToolResult {
        call_id: "c2".into(),
        summary: String::new(),
        content: None,
    };
    assert_item_json(
        &bare,
        r#"{"kind":"tool_result","call_id":"c2","summary":""}"#,
    );
}

#[test]
fn reasoning_omits_empty_summary_and_absent_encrypted_content() {
    let full = LoggedItem::Reasoning {
        text: "t".into(),
        summary: vec!["s1".into(), "s2".into()],
        encrypted_content: Some("gAAAA==".into()),
    };
    assert_item_json(
        &full,
        r#"{"kind":"reasoning","text":"t","summary":["s1","s2"],"encrypted_content":"gAAAA=="}"#,
    );
    let bare = LoggedItem::Reasoning {
        text: "t".into(),
        summary: vec![],
        encrypted_content: None,
    };
    assert_item_json(&bare, r#"{"kind":"reasoning","text":"t"}"#);
}

// ---- entries, one test per kind ----

#[test]
fn session_start_full() {
    let entry = LogEntry::SessionStart {
        ts: 1_764_000_000_000,
        system_prompt: Some("Be terse.".into()),
        config: RequestConfig {
            model: Some("gpt-5".into()),
            temperature: Some(0.5),
            top_p: Some(1.0),
            max_output_tokens: Some(4096),
            reasoning_effort: Some("high".into()),
            extra: Some(JsonText::parse(r#"{"b": [1, 2.50], "a": {}}"#).unwrap()),
        },
        history: vec![user_hi()],
        forked_from: Some(origin(1)),
        compacted_from: Some(origin(2)),
    };
    let (sid, h1, h2) = (session_id(), hash(1), hash(2));
    let expected = format!(
        concat!(
            r#"{{"kind":"session_start","ts":1764000000000,"system_prompt":"Be terse.","#,
            r#""config":{{"model":"gpt-5","temperature":0.5,"top_p":1.0,"max_output_tokens":4096,"#,
            r#""reasoning_effort":"high","extra":{{"b":[1,2.50],"a":{{}}}}}},"#,
            r#""history":[{USER_HI}],"#,
            r#""forked_from":{{"session_id":"{sid}","at_hash":"{h1}"}},"#,
            r#""compacted_from":{{"session_id":"{sid}","at_hash":"{h2}"}}}}"#
        ),
        USER_HI = USER_HI,
        sid = sid,
        h1 = h1,
        h2 = h2
    );
    assert_entry_json(&entry, &expected);
}

#[test]
fn session_start_minimal_omits_none() {
    let entry = LogEntry::SessionStart {
        ts: 0,
        system_prompt: None,
        config: RequestConfig::default(),
        history: vec![],
        forked_from: None,
        compacted_from: None,
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"session_start","ts":0,"config":{},"history":[]}"#,
    );
}

#[test]
fn user_input() {
    let entry = LogEntry::UserInput {
        ts: 1,
        item: user_hi(),
    };
    assert_entry_json(
        &entry,
        &format!(r#"{{"kind":"user_input","ts":1,"item":{USER_HI}}}"#),
    );
}

#[test]
fn assistant_items() {
    let entry = LogEntry::AssistantItems {
        ts: 2,
        items: vec![
            LoggedItem::Reasoning {
                text: "r".into(),
                summary: vec!["s".into()],
                encrypted_content: Some("gAAA".into()),
            },
            LoggedItem::ToolCall {
                call_id: "c1".into(),
                name: "shell".into(),
                arguments: "{}".into(),
            },
        ],
    };
    assert_entry_json(
        &entry,
        concat!(
            r#"{"kind":"assistant_items","ts":2,"items":["#,
            r#"{"kind":"reasoning","text":"r","summary":["s"],"encrypted_content":"gAAA"},"#,
            r#"{"kind":"tool_call","call_id":"c1","name":"shell","arguments":"{}"}]}"#
        ),
    );
}

#[test]
fn tool_results() {
    let entry = LogEntry::ToolResults {
        ts: 3,
        items: vec![LoggedItem::ToolResult {
            call_id: "c1".into(),
            summary: "ok".into(),
            content: None,
        }],
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"tool_results","ts":3,"items":[{"kind":"tool_result","call_id":"c1","summary":"ok"}]}"#,
    );
}

#[test]
fn hook_injected_items() {
    let entry = LogEntry::HookInjectedItems {
        ts: 4,
        items: vec![LoggedItem::from(Item::system_text("note"))],
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"hook_injected_items","ts":4,"items":[{"kind":"message","role":"system","content":[{"kind":"text","text":"note"}]}]}"#,
    );
}

#[test]
fn turn_end() {
    let entry = LogEntry::TurnEnd {
        ts: 5,
        turn_count: 2,
    };
    assert_entry_json(&entry, r#"{"kind":"turn_end","ts":5,"turn_count":2}"#);
}

#[test]
fn run_completed_with_and_without_text() {
    let entry = LogEntry::RunCompleted {
        ts: 6,
        interrupted: false,
        result: WorkerResult {
            text: Some("done".into()),
            stop_reason: "end_turn".into(),
        },
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"run_completed","ts":6,"interrupted":false,"result":{"text":"done","stop_reason":"end_turn"}}"#,
    );
    let entry = LogEntry::RunCompleted {
        ts: 6,
        interrupted: true,
        result: WorkerResult {
            text: None,
            stop_reason: "max_tokens".into(),
        },
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"run_completed","ts":6,"interrupted":true,"result":{"stop_reason":"max_tokens"}}"#,
    );
}

#[test]
fn run_errored() {
    let entry = LogEntry::RunErrored {
        ts: 7,
        interrupted: true,
        message: "boom".into(),
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"run_errored","ts":7,"interrupted":true,"message":"boom"}"#,
    );
}

#[test]
fn config_changed_shows_extra_as_json() {
    let entry = LogEntry::ConfigChanged {
        ts: 8,
        config: RequestConfig {
            extra: Some(JsonText::parse(r#"{ "k" : "v w" }"#).unwrap()),
            ..RequestConfig::model("m")
        },
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"config_changed","ts":8,"config":{"model":"m","extra":{"k":"v w"}}}"#,
    );
}

#[test]
fn config_extra_null_is_kept_apart_from_absent() {
    let entry = LogEntry::ConfigChanged {
        ts: 8,
        config: RequestConfig {
            extra: Some(JsonText::parse("null").unwrap()),
            ..RequestConfig::default()
        },
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"config_changed","ts":8,"config":{"extra":null}}"#,
    );
}

#[test]
fn llm_usage() {
    let entry = LogEntry::LlmUsage {
        ts: 9,
        history_len: 2,
        input_total_tokens: 3,
        cache_read_tokens: 4,
        cache_write_tokens: 5,
        output_tokens: 6,
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"llm_usage","ts":9,"history_len":2,"input_total_tokens":3,"cache_read_tokens":4,"cache_write_tokens":5,"output_tokens":6}"#,
    );
}

#[test]
fn extension_shows_payload_as_json() {
    let entry = LogEntry::Extension {
        ts: 10,
        domain: "my-plugin".into(),
        payload: JsonText::parse("{\"z\": 1,\n \"a\": [true, null, \"x\\\"y\"]}").unwrap(),
    };
    assert_entry_json(
        &entry,
        r#"{"kind":"extension","ts":10,"domain":"my-plugin","payload":{"z":1,"a":[true,null,"x\"y"]}}"#,
    );
    let scalar = LogEntry::Extension {
        ts: 10,
        domain: "d".into(),
        payload: JsonText::parse(r#""just text""#).unwrap(),
    };
    assert_entry_json(
        &scalar,
        r#"{"kind":"extension","ts":10,"domain":"d","payload":"just text"}"#,
    );
}

// ---- the line envelope ----

#[test]
fn entry_line_puts_seq_and_hashes_first() {
    let entry = LogEntry::TurnEnd {
        ts: 5,
        turn_count: 2,
    };
    let (h, p) = (hash(0xab), hash(0x01));
    assert_eq!(
        entry_line(0, &h, None, &entry),
        format!(
            r#"{{"seq":0,"hash":"{h}","prev_hash":null,"kind":"turn_end","ts":5,"turn_count":2}}"#
        )
    );
    assert_eq!(
        entry_line(7, &h, Some(&p), &entry),
        format!(
            r#"{{"seq":7,"hash":"{h}","prev_hash":"{p}","kind":"turn_end","ts":5,"turn_count":2}}"#
        )
    );
    assert_eq!(h.to_string(), "ab".repeat(32));
}

#[test]
fn parse_line_reads_the_envelope() {
    let entry = LogEntry::TurnEnd {
        ts: 5,
        turn_count: 2,
    };
    let (h, p) = (hash(0xab), hash(0x01));

    let wire = parse_line(&entry_line(7, &h, Some(&p), &entry), 1).unwrap();
    assert_eq!(
        (wire.seq, wire.hash, wire.prev_hash, wire.entry),
        (Some(7), Some(h), Some(Some(p)), entry.clone())
    );

    let wire = parse_line(&entry_line(0, &h, None, &entry), 1).unwrap();
    assert_eq!(
        wire.prev_hash,
        Some(None),
        "explicit null is kept apart from absent"
    );
}

#[test]
fn parse_line_accepts_lines_without_seq_or_hashes() {
    let wire = parse_line(r#"{"kind":"turn_end","ts":5,"turn_count":2}"#, 1).unwrap();
    assert_eq!((wire.seq, wire.hash, wire.prev_hash), (None, None, None));
    assert_eq!(
        wire.entry,
        LogEntry::TurnEnd {
            ts: 5,
            turn_count: 2
        }
    );
    // Import-style: only some of the envelope present, in any order.
    let wire = parse_line(r#"{"kind":"turn_end","ts":5,"turn_count":2,"seq":3}"#, 1).unwrap();
    assert_eq!((wire.seq, wire.hash), (Some(3), None));
}

#[test]
fn parse_line_accepts_explicit_nulls_and_empty_summary() {
    let line = r#"{"kind":"assistant_items","ts":1,"items":[{"kind":"reasoning","text":"t","summary":[],"encrypted_content":null}]}"#;
    let wire = parse_line(line, 1).unwrap();
    assert_eq!(
        wire.entry.items(),
        &[LoggedItem::Reasoning {
            text: "t".into(),
            summary: vec![],
            encrypted_content: None
        }]
    );
}

// ---- rejected lines ----

#[test]
fn malformed_json_names_line_and_column() {
    // The `x` is the 40th character.
    let (line, column, message) = wire_error(r#"{"kind":"turn_end","ts":1,"turn_count":x}"#, 12);
    assert_eq!((line, column), (12, 40), "{message}");
    let (line, _, _) = wire_error(r#"{"kind":"turn_end""#, 3);
    assert_eq!(line, 3);
    let (line, column, _) = wire_error("", 4);
    assert_eq!((line, column), (4, 0));
    let shown = parse_line("{,", 9).unwrap_err().to_string();
    assert!(shown.starts_with("line 9, column 2:"), "{shown}");
}

#[test]
fn unknown_kind_is_rejected() {
    let (line, _, message) = wire_error(r#"{"kind":"session_started","ts":1}"#, 2);
    assert_eq!(line, 2);
    assert!(message.contains("session_started"), "{message}");
    // The runtime's own tag is not the log's.
    wire_error(r#"{"type":"turn_end","ts":1,"turn_count":1}"#, 1);
    // CamelCase tags must not be accepted either.
    wire_error(r#"{"kind":"TurnEnd","ts":1,"turn_count":1}"#, 1);
}

#[test]
fn unknown_fields_are_rejected_because_they_would_be_lost() {
    let (_, _, message) = wire_error(
        r#"{"kind":"turn_end","ts":1,"turn_count":1,"mood":"ok"}"#,
        1,
    );
    assert!(message.contains("mood"), "{message}");

    // Nested: a field the runtime added to an item, which the log does not know.
    let (_, _, message) = wire_error(
        r#"{"kind":"user_input","ts":1,"item":{"kind":"message","role":"user","content":[],"id":"msg_1"}}"#,
        1,
    );
    assert!(message.contains("item.id"), "{message}");

    let (_, _, message) = wire_error(
        r#"{"kind":"tool_results","ts":1,"items":[{"kind":"tool_result","call_id":"c","summary":"","status":"completed"}]}"#,
        1,
    );
    assert!(message.contains("status"), "{message}");

    let (_, _, message) = wire_error(
        r#"{"kind":"config_changed","ts":1,"config":{"model":"m","seed":7}}"#,
        1,
    );
    assert!(message.contains("config.seed"), "{message}");
}

#[test]
fn missing_fields_and_wrong_types_are_rejected() {
    wire_error(r#"{"kind":"turn_end","turn_count":1}"#, 1);
    wire_error(r#"{"kind":"turn_end","ts":"1","turn_count":1}"#, 1);
    wire_error(r#"{"kind":"turn_end","ts":-1,"turn_count":1}"#, 1);
    wire_error(r#"{"ts":1,"turn_count":1}"#, 1);
    let (_, _, message) = wire_error(r#"{"seq":-1,"kind":"turn_end","ts":1,"turn_count":1}"#, 1);
    assert!(message.contains("seq"), "{message}");
    wire_error(r#"{"seq":1.5,"kind":"turn_end","ts":1,"turn_count":1}"#, 1);
}

#[test]
fn non_objects_are_rejected() {
    for line in ["[]", "[1,2]", r#""turn_end""#, "42", "null", "true"] {
        let (line_no, _, message) = wire_error(line, 5);
        assert_eq!(line_no, 5);
        assert!(message.contains("object"), "{line}: {message}");
    }
}

#[test]
fn bad_hash_hex_is_rejected() {
    let body = r#""kind":"turn_end","ts":1,"turn_count":1"#;
    let good = "ab".repeat(32);
    let bad = [
        format!(r#""{}""#, "AB".repeat(32)),   // uppercase
        format!(r#""{}""#, "ab".repeat(31)),   // short
        format!(r#""{}""#, "ab".repeat(33)),   // long
        format!(r#""{}zz""#, "ab".repeat(31)), // not hex
        "42".to_string(),                      // not a string
        "null".to_string(),                    // the hash itself may not be null
    ];
    for hex in &bad {
        let (_, _, message) = wire_error(&format!(r#"{{"hash":{hex},{body}}}"#), 1);
        assert!(message.starts_with("hash"), "{hex}: {message}");
        if hex != "null" {
            let (_, _, message) = wire_error(
                &format!(r#"{{"hash":"{good}","prev_hash":{hex},{body}}}"#),
                1,
            );
            assert!(message.starts_with("prev_hash"), "{hex}: {message}");
        }
    }
    parse_line(
        &format!(r#"{{"hash":"{good}","prev_hash":"{good}",{body}}}"#),
        1,
    )
    .unwrap();
}

// ---- LineReader ----

#[test]
fn line_reader_skips_blank_lines_and_counts_them() {
    let input = "\n{\"a\":1}\r\n  \n\t\r\n{\"b\":2}\n\n";
    let mut reader = LineReader::new(Cursor::new(input.as_bytes()));
    assert_eq!(
        reader.next_line().unwrap().map(|(n, s)| (n, s.to_owned())),
        Some((2, r#"{"a":1}"#.to_owned()))
    );
    assert_eq!(
        reader.next_line().unwrap().map(|(n, s)| (n, s.to_owned())),
        Some((5, r#"{"b":2}"#.to_owned()))
    );
    assert!(reader.next_line().unwrap().is_none());
    assert!(reader.next_line().unwrap().is_none());
}

#[test]
fn line_reader_reads_a_last_line_without_newline() {
    let mut reader = LineReader::new(Cursor::new(&b"x\ny"[..]));
    assert_eq!(reader.next_line().unwrap().map(|(n, _)| n), Some(1));
    assert_eq!(
        reader.next_line().unwrap().map(|(n, s)| (n, s.to_owned())),
        Some((2, "y".to_owned()))
    );
    assert!(reader.next_line().unwrap().is_none());
}

#[test]
fn line_reader_names_the_non_utf8_line() {
    let input: &[u8] = b"{\"a\":1}\n\n{\"b\":\"\xff\xfe\"}\n{\"c\":3}\n";
    let mut reader = LineReader::new(Cursor::new(input));
    assert_eq!(reader.next_line().unwrap().map(|(n, _)| n), Some(1));
    match reader.next_line() {
        Err(Error::Wire {
            line,
            column,
            message,
        }) => {
            assert_eq!(line, 3);
            assert_eq!(column, 7, "the first bad byte is the 7th");
            assert!(message.contains("UTF-8"), "{message}");
        }
        other => panic!("expected a wire error, got {other:?}"),
    }
}

/// Schema 2's items, in the wire form: the item inside a line, so that JSON it
/// holds comes back spelled as written.
fn assert_item_line(item: LoggedItem, expected_item: &str) {
    let entry = LogEntry::AssistantItems {
        ts: 5,
        items: vec![item],
    };
    let line = format!(r#"{{"kind":"assistant_items","ts":5,"items":[{expected_item}]}}"#);
    assert_entry_json(&entry, &line);
}

#[test]
fn schema_2_items_and_parts() {
    use session_store::{
        schema::LoggedInputAudio, schema::LoggedInputFile, schema::LoggedInputImage,
        schema::LoggedOutputText, schema::LoggedToolOutput,
    };
    let json = |s: &str| JsonText::parse(s).unwrap();
    assert_item_line(
        LoggedItem::Message {
            role: LoggedRole::Developer,
            content: vec![
                LoggedContentPart::OutputText(Box::new(LoggedOutputText {
                    text: "t".into(),
                    annotations: Some(json(r#"[{"z":1,"a":1.0e3}]"#)),
                    logprobs: None,
                })),
                LoggedContentPart::InputImage(Box::new(LoggedInputImage {
                    image_url: None,
                    file_id: Some("file-1".into()),
                    detail: Some("auto".into()),
                })),
                LoggedContentPart::InputFile(Box::new(LoggedInputFile {
                    file_id: None,
                    file_data: Some("aGk=".into()),
                    filename: Some("a.txt".into()),
                    file_url: None,
                })),
                LoggedContentPart::InputAudio(Box::new(LoggedInputAudio {
                    data: "UklG".into(),
                    format: "wav".into(),
                })),
                LoggedContentPart::Opaque {
                    json: json(r#"{"type":"image","source":{"b":2.50}}"#),
                },
            ],
        },
        r#"{"kind":"message","role":"developer","content":[{"kind":"output_text","text":"t","annotations":[{"z":1,"a":1.0e3}]},{"kind":"input_image","file_id":"file-1","detail":"auto"},{"kind":"input_file","file_data":"aGk=","filename":"a.txt"},{"kind":"input_audio","data":"UklG","format":"wav"},{"kind":"opaque","json":{"type":"image","source":{"b":2.50}}}]}"#,
    );
    assert_item_line(
        LoggedItem::CustomToolCall {
            call_id: "c1".into(),
            name: "apply_patch".into(),
            input: "*** Begin".into(),
        },
        r#"{"kind":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"*** Begin"}"#,
    );
    assert_item_line(
        LoggedItem::ToolOutput {
            call_id: "c1".into(),
            output: Some(LoggedToolOutput::Text("done".into())),
            is_error: None,
            custom: true,
        },
        r#"{"kind":"tool_output","call_id":"c1","output":"done","custom":true}"#,
    );
    assert_item_line(
        LoggedItem::ToolOutput {
            call_id: "c2".into(),
            output: Some(LoggedToolOutput::Parts(vec![LoggedContentPart::Opaque {
                json: json(r#"{"type":"image","n":1e2}"#),
            }])),
            is_error: Some(true),
            custom: false,
        },
        r#"{"kind":"tool_output","call_id":"c2","output":[{"kind":"opaque","json":{"type":"image","n":1e2}}],"is_error":true}"#,
    );
    assert_item_line(
        LoggedItem::ToolOutput {
            call_id: "c3".into(),
            output: None,
            is_error: None,
            custom: false,
        },
        r#"{"kind":"tool_output","call_id":"c3"}"#,
    );
    assert_item_line(
        LoggedItem::ReasoningParts {
            summary: vec![],
            content: vec!["a".into(), "b".into()],
            encrypted_content: Some("gAAA".into()),
        },
        r#"{"kind":"reasoning_parts","content":["a","b"],"encrypted_content":"gAAA"}"#,
    );
    assert_item_line(
        LoggedItem::Thinking {
            thinking: "t".into(),
            signature: Some("sig".into()),
        },
        r#"{"kind":"thinking","thinking":"t","signature":"sig"}"#,
    );
    assert_item_line(
        LoggedItem::RedactedThinking { data: "d".into() },
        r#"{"kind":"redacted_thinking","data":"d"}"#,
    );
    assert_item_line(
        LoggedItem::Opaque {
            role: None,
            json: json(r#"{"type":"web_search_call","id":"ws_1","b":1.0,"a":"\u00e9"}"#),
        },
        r#"{"kind":"opaque","json":{"type":"web_search_call","id":"ws_1","b":1.0,"a":"\u00e9"}}"#,
    );
    assert_item_line(
        LoggedItem::Opaque {
            role: Some(LoggedRole::User),
            json: json(r#"{"type":"search_result"}"#),
        },
        r#"{"kind":"opaque","role":"user","json":{"type":"search_result"}}"#,
    );
    // A field schema 2 does not have is still an error, inside parts too.
    let line = r#"{"kind":"assistant_items","ts":5,"items":[{"kind":"message","role":"user","content":[{"kind":"input_audio","data":"a","format":"b","rate":1}]}]}"#;
    let (_, _, message) = wire_error(line, 1);
    assert!(message.contains("items[0].content[0].rate"), "{message}");
}

/// JSON nested `depth` levels deep: `{"a":{"a":…1…}}`.
fn nested(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

#[test]
fn json_the_store_accepts_exports_and_imports_back() {
    use session_store::schema::MAX_JSON_DEPTH;
    // What import would refuse is refused when stored.
    for bad in [
        r#"{"x":1e400}"#.to_string(),
        nested(MAX_JSON_DEPTH + 1),
        nested(127),
    ] {
        let err = JsonText::parse(&bad).unwrap_err();
        assert!(err.to_string().contains("JSON"), "{err}");
    }
    // The deepest accepted payload, in the deepest places it can stand,
    // reads back from its wire line unchanged.
    let deep = JsonText::parse(&nested(MAX_JSON_DEPTH)).unwrap();
    assert!(deep.to_value()["a"]["a"]["a"].is_object());
    let entries = [
        LogEntry::Extension {
            ts: 1,
            domain: "deep".into(),
            payload: deep.clone(),
        },
        LogEntry::SessionStart {
            ts: 2,
            system_prompt: None,
            config: session_store::RequestConfig {
                extra: Some(deep.clone()),
                ..Default::default()
            },
            history: vec![LoggedItem::Opaque {
                role: None,
                json: JsonText::parse(&format!(
                    r#"{{"type":"x","deep":{}}}"#,
                    nested(MAX_JSON_DEPTH - 1)
                ))
                .unwrap(),
            }],
            forked_from: None,
            compacted_from: None,
        },
    ];
    let mut prev = session_store::EntryHash::genesis();
    for (seq, entry) in entries.iter().enumerate() {
        let hash = session_store::EntryHash::genesis();
        let line = entry_line(seq as u64, &hash, (seq > 0).then_some(&prev), entry);
        let back = parse_line(&line, 1).unwrap_or_else(|e| panic!("{e}: {}", &line[..80]));
        assert_eq!(&back.entry, entry);
        prev = hash;
    }
}

/// Whatever the log accepts exports as a line that import reads back: an
/// entry whose JSON would outgrow `MAX_LINE_BYTES` (90 MB of control
/// characters escape to 540 MB) is refused at append, with nothing written,
/// while a large entry under the limit is kept and its line reads back
/// (issue 15, case 13).
#[test]
fn entries_whose_line_import_would_refuse_are_refused_at_append() {
    use session_store::{wire::MAX_LINE_BYTES, Log, LogOptions};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let entry = |text: String| LogEntry::UserInput {
        ts: 1,
        item: LoggedItem::from(Item::user_text(text)),
    };
    // Over the bound that spares the measuring (32 MiB archived): measured,
    // and accepted.
    let large = entry("x".repeat(40 << 20));
    let (seq, hash) = log.append(&large).unwrap();
    let line = entry_line(seq, &hash, None, &large);
    assert!(line.len() < MAX_LINE_BYTES);
    let back = LineReader::new(Cursor::new(format!("{line}\n").into_bytes()))
        .next_line()
        .unwrap()
        .map(|(n, l)| parse_line(l, n).unwrap())
        .unwrap();
    assert_eq!(back.entry, large);
    drop(back);
    drop(line);
    // Six bytes of JSON per byte: refused, and the log is unchanged.
    let controls = entry("\u{1}".repeat(90 << 20));
    match log.append(&controls) {
        Err(Error::InvalidInput { what }) => {
            assert!(what.contains("line"), "{what}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(log.next_seq(), 1);
    log.append(&entry("after".into())).unwrap();
}

/// A value built in memory has no depth limit: `from_value` holds it to
/// `MAX_JSON_DEPTH` as `parse` does, and so does a wire line's payload.
#[test]
fn json_values_deeper_than_the_limit_are_refused() {
    use session_store::schema::MAX_JSON_DEPTH;
    let nested = |depth: usize| {
        let mut v = serde_json::json!(1);
        for _ in 0..depth {
            v = serde_json::Value::Array(vec![v]);
        }
        v
    };
    assert!(JsonText::from_value(&nested(MAX_JSON_DEPTH)).is_ok());
    assert!(matches!(
        JsonText::from_value(&nested(MAX_JSON_DEPTH + 1)),
        Err(Error::InvalidInput { .. })
    ));
}
