//! Guards the archived form of format 9, whose records hold the compact
//! entry root (a `RequestConfig`, the origins of a `SessionStart` and a
//! fork's parent hash boxed, so the root is 56 bytes, not 232): a log with
//! every entry kind, each boxed field set, is committed under
//! `tests/fixtures/format_v9/`, and today's code must read back exactly
//! those entries and that head.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_format_v9` rewrites
//! it; only do that with the code of the format it is named after.

mod common;

use std::path::PathBuf;

use session_store::format::FORMAT_VERSION;
use session_store::schema::{LoggedContentPart, LoggedItem, LoggedRole, COMPACT_ROOT_VERSION};
use session_store::{
    EntryHash, EntryKind, JsonText, LogEntry, RequestConfig, SessionId, SessionOrigin, WorkerResult,
};

/// The head hash the fixture log was written with.
const HEAD: &str = "cfab81efb23d4c124359b5ea1806a1d06cf676544662f0b0d9e44c14cb9e08ab";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format_v9/log")
}

fn origin(byte: u8) -> SessionOrigin {
    SessionOrigin {
        session_id: SessionId([byte; 16]),
        at_hash: EntryHash([byte; 32]),
    }
}

/// One entry of every kind, with every field the compact root boxes set.
fn entries() -> Vec<LogEntry> {
    let ts = 1_797_100_000_000;
    let config = RequestConfig {
        model: Some("gpt-5.1".into()),
        temperature: Some(0.25),
        top_p: Some(0.5),
        max_output_tokens: Some(8192),
        reasoning_effort: Some("medium".into()),
        extra: Some(JsonText::parse(r#"{"store":false}"#).unwrap()),
    };
    let user = LoggedItem::Message {
        role: LoggedRole::User,
        content: vec![LoggedContentPart::Text {
            text: "list src/".into(),
        }],
    };
    vec![
        LogEntry::ForkedFrom {
            ts,
            parent: SessionId([9; 16]),
            parent_seq: 41,
            parent_hash: EntryHash([0xab; 32]),
        },
        LogEntry::SessionStart {
            ts: ts + 1,
            system_prompt: Some("You are a careful agent.".into()),
            config: config.clone(),
            history: vec![user.clone()],
            forked_from: Some(origin(1)),
            compacted_from: Some(origin(2)),
        },
        LogEntry::SessionStart {
            ts: ts + 2,
            system_prompt: None,
            config: RequestConfig::default(),
            history: vec![],
            forked_from: None,
            compacted_from: Some(origin(3)),
        },
        LogEntry::UserInput {
            ts: ts + 3,
            item: user,
        },
        LogEntry::AssistantItems {
            ts: ts + 4,
            items: vec![LoggedItem::ToolCall {
                call_id: "call_1".into(),
                name: "shell".into(),
                arguments: r#"{"cmd":"ls src"}"#.into(),
            }],
        },
        LogEntry::ToolResults {
            ts: ts + 5,
            items: vec![LoggedItem::ToolResult {
                call_id: "call_1".into(),
                summary: "lib.rs".into(),
                content: None,
            }],
        },
        LogEntry::HookInjectedItems {
            ts: ts + 6,
            items: vec![LoggedItem::Message {
                role: LoggedRole::System,
                content: vec![LoggedContentPart::Text {
                    text: "hook: tests pass".into(),
                }],
            }],
        },
        LogEntry::TurnEnd {
            ts: ts + 7,
            turn_count: 1,
        },
        LogEntry::RunCompleted {
            ts: ts + 8,
            interrupted: false,
            result: WorkerResult {
                text: Some("done".into()),
                stop_reason: "end_turn".into(),
            },
        },
        LogEntry::RunErrored {
            ts: ts + 9,
            interrupted: true,
            message: "rate limited".into(),
        },
        LogEntry::ConfigChanged {
            ts: ts + 10,
            config,
        },
        LogEntry::LlmUsage {
            ts: ts + 11,
            history_len: 4,
            input_total_tokens: 1200,
            cache_read_tokens: 800,
            cache_write_tokens: 100,
            output_tokens: 64,
        },
        LogEntry::Extension {
            ts: ts + 12,
            domain: "my-plugin".into(),
            payload: JsonText::parse(r#"{"a":[1.50,"\u00e9"]}"#).unwrap(),
        },
        LogEntry::ItemsRemoved {
            ts: ts + 13,
            count: 1,
        },
    ]
}

#[test]
fn the_committed_format_v9_log_reads_with_todays_types() {
    let dir = fixture_dir();
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD);
    let seg = std::fs::read(dir.join("00000000000000000000.seg")).unwrap();
    assert_eq!(u32::from_le_bytes(seg[8..12].try_into().unwrap()), 9);
    let state = log.restore().unwrap();
    assert_eq!(state.compacted_from, Some(origin(3)));
    assert_eq!(state.forked_from, None);
    assert_eq!(state.config.model.as_deref(), Some("gpt-5.1"));
}

/// The root is 56 bytes wherever the entry kind: a record of an entry
/// with nothing out of line holds the root alone, and every kind's record
/// is no larger than its fields need.
#[test]
fn a_records_root_takes_56_bytes_whatever_its_kind() {
    const { assert!(FORMAT_VERSION >= COMPACT_ROOT_VERSION) };
    let dir = tempfile::tempdir().unwrap();
    let log = session_store::Log::open(dir.path(), Default::default()).unwrap();
    for e in entries() {
        log.append(&e).unwrap();
    }
    let snap = log.snapshot();
    for r in snap.iter() {
        let r = r.unwrap();
        let fixed = matches!(
            r.kind,
            EntryKind::TurnEnd | EntryKind::LlmUsage | EntryKind::ItemsRemoved
        );
        if fixed {
            assert_eq!(r.payload_len, 56, "{:?}", r.kind);
        }
        // The largest here, a SessionStart with its config and both
        // origins, held 232 bytes of root before anything out of line.
        assert!(r.payload_len < 420, "{:?}: {}", r.kind, r.payload_len);
    }
    assert_eq!(snap.iter().count(), entries().len());
}

/// A log of older segments is read through their own layout: every read
/// path gives what a restore gives, the history tail too, which lends
/// items from entries it converted (`Taken::Converted`), and a writer's
/// appends go on in format 9 segments beside them.
#[test]
fn a_log_of_older_segments_reads_the_same_through_every_path() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v1");
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&fixture).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let log = session_store::Log::open(dir.path(), Default::default()).unwrap();
    for e in entries().into_iter().skip(3) {
        log.append(&e).unwrap();
    }
    log.close().unwrap();
    let log = session_store::Log::open_read_only(dir.path()).unwrap();
    assert_eq!(log.verify().damage, None);
    let history = log.restore().unwrap().history;
    assert!(history.len() > 4, "items of both layouts");
    let snap = log.snapshot();
    for limit in [None, Some(1), Some(3), Some(history.len())] {
        let tail = snap.history_tail(limit).unwrap().items;
        let want = &history[history.len() - limit.unwrap_or(history.len())..];
        assert_eq!(tail, want, "limit {limit:?}");
    }
    let read: Vec<LogEntry> = snap
        .iter()
        .map(|r| r.unwrap().to_entry().unwrap())
        .collect();
    let versions: Vec<u32> = log
        .segment_paths()
        .iter()
        .map(|p| {
            let b = std::fs::read(p).unwrap();
            u32::from_le_bytes(b[8..12].try_into().unwrap())
        })
        .collect();
    assert!(versions.first() < versions.last(), "{versions:?}");
    assert_eq!(*versions.last().unwrap(), FORMAT_VERSION);
    assert_eq!(&read[read.len() - (entries().len() - 3)..], &entries()[3..]);
}
