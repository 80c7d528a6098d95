//! Guards the archived form of schema 3 (`ItemsRemoved`, the entry behind
//! the Agents SDK's `pop_item`): a log written by schema 3 code is
//! committed under `tests/fixtures/schema_v3/`, and today's code must read
//! back exactly its entries, the history they leave and its head hash.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_schema_v3` rewrites it;
//! only do that with the code of the schema it is named after.

mod common;

use std::path::PathBuf;

use session_store::{group_delta, schema::LoggedItem, Item, LogEntry, RequestConfig};

/// The head hash the fixture was written with.
const HEAD: &str = "d85f46333d473c01aaa65dae7e5178b79d230173758363b6577caf6b4148e62e";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v3")
}

fn entries() -> Vec<LogEntry> {
    let ts = 1_796_000_000_000;
    let mut out = vec![LogEntry::SessionStart {
        ts,
        system_prompt: None,
        config: RequestConfig::model("gpt-5"),
        history: vec![LoggedItem::from(Item::user_text("kept"))],
        forked_from: None,
        compacted_from: None,
    }];
    let items = [
        Item::user_text("one"),
        Item::assistant_text("two"),
        Item::assistant_text("three"),
    ];
    out.extend(group_delta(&items, ts + 1));
    out.push(LogEntry::ItemsRemoved {
        ts: ts + 2,
        count: 1,
    });
    out.extend(group_delta(&[Item::user_text("four")], ts + 3));
    out.push(LogEntry::ItemsRemoved {
        ts: ts + 4,
        count: 2,
    });
    out.push(LogEntry::ItemsRemoved {
        ts: ts + 5,
        count: 0,
    });
    out
}

#[test]
fn the_committed_schema_v3_log_reads_with_todays_types() {
    let dir = fixture_dir();
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD);
    let state = log.restore().unwrap();
    assert_eq!(
        state.history,
        vec![Item::user_text("kept"), Item::user_text("one")]
    );
    let tail = log.snapshot().history_tail(Some(1)).unwrap();
    assert_eq!(tail.items, vec![Item::user_text("one")]);
    assert_eq!(log.snapshot().history_len().unwrap(), 2);
}
