//! Guards the archived form of schema 6 (`LoggedItem::Extended`: a typed
//! item with its provider's id, status and extra fields): a log written by
//! schema 6 code is committed under `tests/fixtures/schema_v6/`, and today's
//! code must read back exactly its entries and head, and write its items
//! back as they were given.
//!
//! `REGENERATE_FIXTURES=1 cargo test --test fixtures_schema_v6` rewrites
//! it; only do that with the code of the schema it is named after.

mod common;

use std::path::PathBuf;

use serde_json::Value;
use session_store::{group_delta, responses, Form, Item, LogEntry};

/// The head hash the fixture log was written with.
const HEAD: &str = "7ecc38ada148b5247c135acf03bae93bdfb3050181ecace8ea7ee247ca211e01";

/// Items as a provider and the Agents SDK give them: ids, statuses, a
/// shorthand message, fields added after this code, an item with no type.
const GIVEN: [&str; 7] = [
    r#"{"role":"user","content":"What is in src/?"}"#,
    r#"{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAAB+/==","status":"completed"}"#,
    r#"{"id":"fc_1","type":"function_call","call_id":"call_1","name":"ls","arguments":"{}","namespace":"fs","status":"completed"}"#,
    r#"{"type":"function_call_output","call_id":"call_1","output":"lib.rs","caller":{"type":"direct"}}"#,
    r#"{"id":"msg_1","type":"message","role":"assistant","status":"completed","phase":"final_answer","content":[{"type":"output_text","text":"The crate.","annotations":[],"logprobs":[]}]}"#,
    r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks","prompt_cache_breakpoint":{}}]}"#,
    r#"{"__enc__":1,"v":1,"kid":"k1","payload":"Zm9v"}"#,
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_v6/log")
}

fn items() -> Vec<Item> {
    GIVEN
        .iter()
        .map(|j| Item::from_responses_json(j).unwrap())
        .collect()
}

fn entries() -> Vec<LogEntry> {
    group_delta(&items(), 1_797_000_000_000)
}

#[test]
fn the_committed_schema_v6_log_reads_with_todays_types() {
    let dir = fixture_dir();
    if common::regenerate_fixture(&dir, &entries()) {
        return;
    }
    let log = common::read_fixture(&dir, &entries(), HEAD);
    let history = log.restore().unwrap().history;
    let back: Vec<Value> = responses::history_to_items(&history, Form::AsStored)
        .unwrap()
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    let given: Vec<Value> = GIVEN
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(back, given);
    assert_eq!(history, items());
}
