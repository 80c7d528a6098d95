//! Guards the item model of real runtimes against loss: a Responses-API
//! history and a Messages-API history, with every item and content part those
//! APIs define, go through import, the log, restore, fork, compaction and
//! export without an item lost or changed, and what does not fit is an error
//! that names the item and field.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;
use session_store::{anthropic, responses, Form};
use session_store::{Error, Item, RequestConfig, SessionId, Store};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("tests/fixtures/items")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

fn cli(root: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::cargo_bin("session-store").unwrap();
    cmd.arg("--root").arg(root).args(args);
    if let Some(input) = stdin {
        cmd.write_stdin(input.to_string());
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `export --resend` must give back for an imported Responses item: the
/// same JSON, without `id` and `status` on the items the model types.
fn responses_expected(line: &str) -> Value {
    let mut v: Value = serde_json::from_str(line).unwrap();
    let typed = [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
    ];
    if typed.contains(&v["type"].as_str().unwrap()) {
        let obj = v.as_object_mut().unwrap();
        obj.remove("id");
        obj.remove("status");
    }
    v
}

fn values(text: &str) -> Vec<Value> {
    lines(text)
        .into_iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_responses_history_survives_import_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("responses.jsonl");
    let id = cli(
        dir.path(),
        &["import", "--format", "responses", "-"],
        Some(&input),
    );
    let id = id.trim();
    let as_given: Vec<Value> = values(&input);
    let resend = cli(
        dir.path(),
        &["export", "--format", "responses", "--resend", id],
        None,
    );
    let expected: Vec<Value> = lines(&input).into_iter().map(responses_expected).collect();
    assert_eq!(values(&resend), expected);
    let out = cli(dir.path(), &["export", "--format", "responses", id], None);
    assert_eq!(values(&out), as_given);
    // Opaque items come back byte for byte; typed ones keep their exact strings.
    let out_lines = lines(&out);
    for (given, got) in lines(&input).iter().zip(&out_lines) {
        let opaque = responses_expected(given) == serde_json::from_str::<Value>(given).unwrap();
        if opaque
            && (got.contains("_68a")
                || got.contains("new_1")
                || got.contains("approval_request_id"))
        {
            assert_eq!(got, given);
        }
    }
    for exact in [
        r#""encrypted_content":"gAAAAABo+1/x+ZW5j==\n""#,
        r#""arguments":"{\"path\": \"notes.txt\",  \"lines\" : [1, 2.50]}""#,
        r#""input":"*** Begin Patch\n*** Update File: src/a.rs\n-old\n+new\n*** End Patch\n""#,
    ] {
        assert!(out.contains(exact), "{exact} not in the export");
    }
    // The wire form carries it all too: wire export, wire import, Responses export.
    let wire = cli(dir.path(), &["export", id], None);
    let again = cli(dir.path(), &["import", "-"], Some(&wire));
    let out2 = cli(
        dir.path(),
        &["export", "--format", "responses", again.trim()],
        None,
    );
    assert_eq!(out2, out);
}

#[test]
fn an_anthropic_history_survives_import_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("anthropic.jsonl");
    let id = cli(
        dir.path(),
        &["import", "--format", "anthropic", "-"],
        Some(&input),
    );
    let out = cli(
        dir.path(),
        &["export", "--format", "anthropic", id.trim()],
        None,
    );
    assert_eq!(values(&out), values(&input));
    for exact in [
        r#""signature":"EqQBCkYIBxgCKkA+/sig==""#,
        r#""data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT""#,
        r#""input":{"path":"a.txt","opts":{"z":1,"a":2.50},"u":"\u00e9"}"#,
        r#""input":{ "pretty" : true }"#,
        r#"{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://rkyv.org","title":"rkyv","encrypted_content":"Eo8B","page_age":null}]}"#,
    ] {
        assert!(out.contains(exact), "{exact} not in the export");
    }
    let wire = cli(dir.path(), &["export", id.trim()], None);
    let again = cli(dir.path(), &["import", "-"], Some(&wire));
    let out2 = cli(
        dir.path(),
        &["export", "--format", "anthropic", again.trim()],
        None,
    );
    assert_eq!(out2, out);
}

fn responses_history() -> Vec<Item> {
    let text = fixture("responses.jsonl");
    lines(&text)
        .into_iter()
        .map(|l| Item::from_responses_json(l).unwrap())
        .collect()
}

fn anthropic_history() -> Vec<Item> {
    let text = fixture("anthropic.jsonl");
    let list = format!("[{}]", lines(&text).join(","));
    anthropic::history_from_json(&list).unwrap()
}

#[test]
fn restored_histories_are_ready_to_send_and_survive_fork_and_compaction() {
    for history in [responses_history(), anthropic_history()] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        store.save_delta(id, &mut head, &history).unwrap();
        let state = store.restore(id).unwrap();
        assert_eq!(state.history, history);
        assert_eq!(state.check(), vec![], "{history:#?}");
        let (fork, _) = store.fork_at(id, head).unwrap();
        assert_eq!(store.restore(fork).unwrap().history, history);
        // Compacted in place with the whole history as the summary.
        store.compact(id, head, &state.history).unwrap();
        assert_eq!(store.restore(id).unwrap().history, history);
        store.close().unwrap();
        // And after a reopen, from the disk.
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.restore(id).unwrap().history, history);
    }
}

#[test]
fn whole_histories_go_both_ways_as_json_lists() {
    let history = responses_history();
    let json = responses::history_to_json(&history, Form::AsStored).unwrap();
    assert_eq!(responses::history_from_json(&json).unwrap(), history);
    let history = anthropic_history();
    let json = anthropic::history_to_json(&history).unwrap();
    assert_eq!(anthropic::history_from_json(&json).unwrap(), history);
}

/// The error of reading or writing, as (index, field).
fn place(e: Error) -> (Option<usize>, String) {
    match e {
        Error::ItemForm { index, field, .. } => (index, field),
        other => panic!("expected an item form error, got {other:?}"),
    }
}

#[test]
fn what_does_not_fit_the_typed_model_is_kept_as_given() {
    // Each is kept: typed where it can be, its JSON as given where not.
    let odd_responses = [
        r#"{"type":"message","role":"user","content":"hi","phase":"x"}"#,
        r#"{"type":"message","role":"owner","content":"hi"}"#,
        r#"{"type":"message","role":"user","content":[{"type":"input_text"}]}"#,
        r#"{"type":"message","role":"user","content":[{"type":"input_image","detail":7}]}"#,
        r#"{"type":"message","role":"assistant","content":[{"type":"input_text","text":"x"}]}"#,
        r#"{"type":"function_call","call_id":"c","name":"f"}"#,
        r#"{"type":"reasoning","summary":[{"type":"x","text":"t"}]}"#,
        r#"{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t","x":1}]}"#,
        r#"{"type":"function_call_output","call_id":"c","output":7}"#,
        r#"{"content":[]}"#,
        r#"[1]"#,
    ];
    for json in odd_responses {
        let item = Item::from_responses_json(json).unwrap();
        let back: Value =
            serde_json::from_str(&item.to_responses_json(Form::AsStored).unwrap()).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap(), "{json}");
    }
    // What is not JSON a wire line can hold is still refused, naming the item.
    for (json, field) in [(r#"{"a":1e400}"#, ""), (r#"{"a":"#, "")] {
        let list = format!("[{{\"type\":\"web_search_call\"}},{json}]");
        let err = responses::history_from_json(&list).unwrap_err();
        assert!(matches!(err, Error::ItemForm { .. }), "{json}: {err:?}");
        let _ = field;
    }
    let odd_anthropic = [
        r#"{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}"#,
        r#"{"role":"user","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}"#,
        r#"{"role":"assistant","content":[{"type":"thinking","signature":"s"}]}"#,
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":"yes"}]}"#,
    ];
    for json in odd_anthropic {
        let items = Item::from_anthropic_message(json).unwrap();
        let back: Value =
            serde_json::from_str(&Item::to_anthropic_messages(&items).unwrap()[0]).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap(), "{json}");
    }
    // A Messages history is a list of `{role, content}`.
    let bad_anthropic = [
        (r#"{"role":"system","content":"x"}"#, "role"),
        (r#"{"role":"user"}"#, "content"),
        (r#"{"role":"user","content":"x","model":"m"}"#, "model"),
    ];
    for (json, field) in bad_anthropic {
        let list = format!("[{{\"role\":\"user\",\"content\":\"hi\"}},{json}]");
        assert_eq!(
            place(anthropic::history_from_json(&list).unwrap_err()),
            (Some(1), field.to_string()),
            "{json}"
        );
    }
    // Items with no form in the other API.
    let thinking = Item::Thinking {
        extra: Default::default(),
        thinking: "t".into(),
        signature: None,
    };
    assert_eq!(
        place(thinking.to_responses_json(Form::AsStored).unwrap_err()).1,
        "type"
    );
    let history = [Item::user_text("hi"), Item::system_text("be brief")];
    assert_eq!(
        place(Item::to_anthropic_messages(&history).unwrap_err()),
        (Some(1), "role".to_string())
    );
    let call = Item::ToolCall {
        extra: Default::default(),
        id: None,
        call_id: "c".into(),
        name: "f".into(),
        arguments: "{not json".into(),
        status: None,
    };
    assert_eq!(
        place(Item::to_anthropic_messages(&[call]).unwrap_err()),
        (Some(0), "arguments".to_string())
    );
    let reasoning = responses_history()
        .into_iter()
        .find(Item::is_reasoning)
        .unwrap();
    assert_eq!(
        place(Item::to_anthropic_messages(&[reasoning]).unwrap_err()).1,
        "type"
    );
}

#[test]
fn other_spellings_are_typed_and_kept() {
    let easy = Item::from_responses_json(r#"{"role":"user","content":"hi"}"#).unwrap();
    assert!(easy.is_user_message());
    assert_eq!(easy.text().as_deref(), Some("hi"));
    assert_eq!(
        easy.to_responses_json(Form::AsStored).unwrap(),
        r#"{"role":"user","content":"hi"}"#
    );
    let items = Item::from_anthropic_message(r#"{"role":"user","content":"hi"}"#).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].text().as_deref(), Some("hi"));
    assert_eq!(
        Item::to_anthropic_messages(&items).unwrap(),
        vec![r#"{"role":"user","content":"hi"}"#.to_string()]
    );
    // Runtime items without a provider origin go to both APIs.
    let history = [
        Item::user_text("hi"),
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: "c1".into(),
            name: "f".into(),
            arguments: "{\"a\":1}".into(),
            status: None,
        },
        Item::assistant_text("hello"),
    ];
    assert_eq!(
        Item::to_anthropic_messages(&history).unwrap(),
        vec![
            r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#.to_string(),
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":{"a":1}},{"type":"text","text":"hello"}]}"#.to_string(),
        ]
    );
    let _ = SessionId::new_v7();
}

#[test]
fn a_bad_line_fails_the_import_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}],\"model\":\"m\"}\n";
    let out = Command::cargo_bin("session-store")
        .unwrap()
        .arg("--root")
        .arg(dir.path())
        .args(["import", "--format", "anthropic", "-"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("line 2") && err.contains("model"), "{err}");
}
