//! Guards the on-disk format against silent change: a log written by format
//! v1 is committed under `tests/fixtures/v1/`, and today's code must open it,
//! verify it, and read back exactly the entries and head hash it was written
//! with. A format change must either keep reading it or say why not.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_v1` rewrites it (only for
//! a deliberate format version bump).

mod common;

use std::path::PathBuf;

use session_store::{
    group_delta, schema::LoggedItem, Item, JsonText, Log, LogEntry, LogOptions, RequestConfig,
    WorkerResult,
};

/// The head hash the fixture was written with.
const HEAD_V1: &str = "220f834dd548b16f61b2f83dfee0f065966b7d244f04217a26a8cac87adac428";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
}

fn entries() -> Vec<LogEntry> {
    let ts = 1_764_000_000_000;
    let mut out = vec![LogEntry::SessionStart {
        ts,
        system_prompt: Some("You are a careful coding agent.".into()),
        config: RequestConfig {
            model: Some("gpt-5".into()),
            temperature: Some(0.25),
            extra: Some(
                JsonText::parse(r#"{"store": false, "n": 12345678901234567890123}"#).unwrap(),
            ),
            ..RequestConfig::default()
        },
        history: vec![LoggedItem::from(Item::system_text(
            "project: session-store",
        ))],
        forked_from: None,
        compacted_from: None,
    }];
    for t in 0..12u64 {
        let items = vec![
            Item::user_text(format!("turn {t}: what is in src/?")),
            Item::Reasoning {
                extra: Default::default(),
                id: None,
                text: String::new(),
                summary: vec![format!("look at the tree, turn {t}")],
                encrypted_content: Some(format!("gAAAAB{}", "Zm9v".repeat(200 + t as usize))),
                status: None,
            },
            Item::ToolCall {
                extra: Default::default(),
                id: None,
                call_id: format!("call_{t}"),
                name: "shell".into(),
                arguments: r#"{"cmd":"ls src"}"#.into(),
                status: None,
            },
            Item::ToolResult {
                extra: Default::default(),
                id: None,
                call_id: format!("call_{t}"),
                summary: "exit 0".into(),
                content: Some("lib.rs\nlog.rs\n".repeat(40)),
            },
            Item::assistant_text(format!("src/ holds the crate, turn {t}.")),
        ];
        out.extend(group_delta(&items, ts + t * 1000));
        out.push(LogEntry::TurnEnd {
            ts: ts + t * 1000 + 1,
            turn_count: t + 1,
        });
    }
    out.push(LogEntry::RunCompleted {
        ts: ts + 99_000,
        interrupted: false,
        result: WorkerResult {
            text: Some("done".into()),
            stop_reason: "end_turn".into(),
        },
    });
    out
}

#[test]
fn the_committed_v1_log_still_reads_and_verifies() {
    let dir = fixture_dir();
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD_V1);
    assert!(
        log.segment_paths().len() >= 3,
        "the fixture spans several segments"
    );
}

/// A writer continues a version 1 log: it rolls off the version 1 active
/// segment before its first record (so that no reader of version 1 meets a
/// record of a later schema there), the segments it rolls to are of the
/// current version, and readers take the mix.
#[test]
fn a_v1_log_is_continued_and_rolled_into_current_segments() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixture_dir()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let version = |p: &std::path::Path| {
        let b = std::fs::read(p).unwrap();
        u32::from_le_bytes(b[8..12].try_into().unwrap())
    };
    let segments = || {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        v.sort();
        v
    };
    let before = segments();
    assert!(before.iter().all(|p| version(p) == 1));
    let opts = LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(16 << 10)
    };
    let mut expected = entries();
    let log = Log::open(dir.path(), opts.clone()).unwrap();
    let more = entries();
    // One commit, which leaves a version 1 mark in the old active segment.
    log.append_with(&more[1], session_store::Durability::Sync)
        .unwrap();
    log.sync().unwrap();
    expected.push(more[1].clone());
    let mark =
        session_store::format::Mark::newest(&std::fs::read(before.last().unwrap()).unwrap()[..256])
            .expect("a version 1 mark");
    assert_eq!(
        mark.session_start, None,
        "version 1 marks have no such field"
    );
    for e in &more {
        log.append(e).unwrap();
        expected.push(e.clone());
    }
    log.close().unwrap();
    let after = segments();
    assert!(after.len() > before.len(), "the appends rolled");
    // The version 1 segment holds exactly the records it held before.
    let records = |p: &std::path::Path| {
        let b = std::fs::read(p).unwrap();
        let mut at = session_store::format::FIRST_RECORD_OFFSET as usize;
        let mut n = 0;
        while let Ok(Some(rec)) = session_store::format::next_record(&b, at) {
            at += rec.len();
            n += 1;
        }
        n
    };
    let old_active = before.last().unwrap();
    let fixture_copy = fixture_dir().join(old_active.file_name().unwrap());
    assert_eq!(records(old_active), records(&fixture_copy));
    assert_eq!(version(&after[before.len() - 1]), 1);
    assert!(after[before.len()..]
        .iter()
        .all(|p| version(p) == session_store::format::FORMAT_VERSION));

    let reader = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.verify().damage, None);
    let got: Vec<LogEntry> = reader
        .snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(got, expected);
    let restored = reader.restore().unwrap();
    assert_eq!(restored.history.len(), 1 + 12 * 5);
}
