//! Guards the Codex reader against losing or inventing history: Responses items altered on import (encrypted reasoning, argument text), metadata lines shown as conversation, a compaction or rolled-back turn misread, a compressed rollout unread, another workspace's rollout guessed, and a re-import duplicating a session.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "common/cli.rs"]
mod cli;

use cli::export;
use proptest::prelude::*;
use serde_json::Value;
use session_store::history::codex::{
    self, discover_by_cwd, discover_by_session, parse_rollout_bytes, read_rollout,
};
use session_store::{
    history::Discovery, history::HistoryRole, history::HistoryService, history::NotFoundReason,
    Error, Form, Item, Store, ToolOutput,
};

const CURRENT: &str = "rollout-2025-12-28T12-18-30-019b64e5-57fa-7463-b644-fba7e456f905.jsonl";
const CURRENT_ID: &str = "019b64e5-57fa-7463-b644-fba7e456f905";
const LEGACY: &str = "rollout-2025-05-07T17-24-21-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl";
const ZSTD: &str = "rollout-2026-01-10T08-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl.zst";
const ZSTD_ID: &str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
const PARENT: &str = "rollout-2026-02-01T00-00-01-0199ffff-0000-7000-8000-000000000001.jsonl";
const CHILD: &str = "rollout-2026-02-01T00-00-02-0199ffff-0000-7000-8000-000000000002.jsonl";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("tests/fixtures/codex")
        .join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    fs::read(fixture_path(name)).unwrap()
}

/// A fake `~/.codex` with rollouts in their date directories.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join(".codex")
    }

    fn place(&self, under: &str, name: &str) -> PathBuf {
        let dir = self.root().join(under);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        fs::write(&path, fixture(name)).unwrap();
        path
    }
}

#[test]
fn response_items_map_to_items_losslessly() {
    let t = parse_rollout_bytes(&fixture(CURRENT));
    assert_eq!(t.session_id.as_deref(), Some(CURRENT_ID));
    assert_eq!(t.cwd.as_deref(), Some("/home/a/proj"));
    let items: Vec<&Item> = t.segments[0].items.iter().map(|i| &i.item).collect();
    assert!(items[0].is_user_message()); // the environment context, imported
    assert_eq!(*items[1], Item::user_text("List the files"));
    match items[2] {
        Item::Reasoning {
            text,
            summary,
            encrypted_content,
            ..
        } => {
            assert_eq!(text, "");
            assert_eq!(summary, &["**Listing files**"]);
            assert_eq!(encrypted_content.as_deref(), Some("gAAAAABpUSenc+/=="));
        }
        other => panic!("{other:?}"),
    }
    // Written back as the rollout has it, its `"content": null` included.
    let back: serde_json::Value =
        serde_json::from_str(&items[2].to_responses_json(Form::AsStored).unwrap()).unwrap();
    assert_eq!(
        back,
        serde_json::json!({"type":"reasoning","summary":[{"type":"summary_text","text":"**Listing files**"}],"content":null,"encrypted_content":"gAAAAABpUSenc+/=="})
    );
    match items[3] {
        Item::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            assert_eq!((call_id.as_str(), name.as_str()), ("call_1", "shell"));
            assert_eq!(
                arguments,
                r#"{"command":["bash","-lc","ls"],"workdir":"/home/a/proj"}"#
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(items[4], Item::ToolResult { call_id, .. } if call_id == "call_1"));
    assert!(
        matches!(items[5], Item::CustomToolCall { name, input, .. } if name == "apply_patch" && input.starts_with("*** Begin Patch\n"))
    );
    assert!(matches!(items[6], Item::ToolOutput { custom: true, .. }));
    // local_shell_call and web_search_call have no typed form: kept whole.
    match items[7] {
        Item::Opaque { role: None, json } => {
            assert!(json.as_str().contains(r#""type":"local_shell_call""#))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        items[8],
        Item::ToolOutput {
            output: Some(ToolOutput::Parts(_)),
            ..
        }
    ));
    assert!(matches!(items[9], Item::Opaque { role: None, .. }));
    // A message with a field the typed model lacks (`phase`) is typed, and
    // keeps the field.
    assert!(items[10].is_assistant_message(), "{:?}", items[10]);
    assert!(items[10]
        .to_responses_json(Form::AsStored)
        .unwrap()
        .contains(r#""phase":"final_answer""#));
    assert_eq!(items.len(), 11);

    assert_eq!(t.stats.malformed_lines, 1);
    assert_eq!(t.stats.unknown_types.get("future_line_type"), Some(&1));
    assert_eq!(t.stats.metadata.get("event_msg"), Some(&3));
    assert_eq!(t.stats.metadata.get("turn_context"), Some(&1));

    // The compaction: replacement history carried, then what followed.
    assert_eq!(t.segments.len(), 2);
    assert_eq!(t.segments[1].carried.len(), 2);
    assert_eq!(t.segments[1].items.len(), 2);
}

#[test]
fn messages_show_the_conversation_not_the_metadata() {
    let messages = parse_rollout_bytes(&fixture(CURRENT)).messages();
    let shown: Vec<(HistoryRole, Option<&str>, &str)> = messages
        .iter()
        .map(|m| (m.role, m.tool_name.as_deref(), m.text.as_str()))
        .collect();
    assert_eq!(shown[0], (HistoryRole::User, None, "List the files"));
    assert_eq!(shown[1].0, HistoryRole::ToolResult);
    assert_eq!(shown[1].1, Some("shell"));
    assert_eq!(shown[2].1, Some("apply_patch"));
    assert_eq!(
        shown[3],
        (
            HistoryRole::ToolResult,
            Some("local_shell_call"),
            "On branch main"
        )
    );
    assert_eq!(
        shown[4],
        (
            HistoryRole::Assistant,
            None,
            "There are two entries: README.md and src."
        )
    );
    assert_eq!(shown[5], (HistoryRole::User, None, "And now run the tests"));
    assert_eq!(shown[6], (HistoryRole::Assistant, None, "All 12 pass."));
    assert_eq!(shown.len(), 7);
    assert!(messages[0].source_ref.ends_with("#line=4"));
    assert_eq!(
        messages[0].timestamp.as_deref(),
        Some("2025-12-28T12:18:31.200Z")
    );
}

#[test]
fn the_oldest_shape_is_read_too() {
    let t = parse_rollout_bytes(&fixture(LEGACY));
    assert_eq!(
        t.session_id.as_deref(),
        Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e")
    );
    assert_eq!(t.stats.metadata.get("record_type"), Some(&2));
    assert_eq!(t.stats.malformed_lines, 0);
    let items: Vec<&Item> = t.items().map(|i| &i.item).collect();
    assert_eq!(items.len(), 5);
    assert!(matches!(items[2], Item::ToolCall { call_id, .. } if call_id == "call_9"));
    // `output` as `{content, success}`: kept whole, shown by its content.
    assert!(matches!(items[3], Item::Opaque { .. }));
    let messages = t.messages();
    assert_eq!(messages[1].text, "[package]\nname = \"x\"");
    assert_eq!(messages[1].tool_name.as_deref(), Some("shell"));
    assert_eq!(messages.last().unwrap().text, "A package named x.");
}

#[test]
fn a_zstd_rollout_is_read_and_a_rolled_back_turn_dropped() {
    let t = read_rollout(&fixture_path(ZSTD)).unwrap();
    assert_eq!(t.session_id.as_deref(), Some(ZSTD_ID));
    let texts: Vec<String> = t.messages().into_iter().map(|m| m.text).collect();
    assert_eq!(
        texts,
        [
            "first question",
            "first answer",
            "second question",
            "second answer"
        ]
    );
    assert_eq!(t.stats.off_path, 2);

    // A stream cut short is a torn tail: what came before is kept.
    let dir = tempfile::tempdir().unwrap();
    let bytes = fixture(ZSTD);
    let torn = dir.path().join("rollout-torn.jsonl.zst");
    fs::write(&torn, &bytes[..bytes.len() - 9]).unwrap();
    let t = read_rollout(&torn).unwrap();
    assert!(t.stats.torn_at_line.is_some(), "{:?}", t.stats);

    // Bytes that are no zstd stream: an error naming the file and line.
    let junk = dir.path().join("rollout-junk.jsonl.zst");
    fs::write(&junk, b"this is not zstd at all").unwrap();
    match read_rollout(&junk) {
        Err(e @ Error::Transcript { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("rollout-junk.jsonl.zst") && text.contains("line 1"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        read_rollout(&dir.path().join("missing.jsonl")),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn discovery_reads_the_meta_and_fails_closed() {
    let home = Home::new();
    let current = home.place("sessions/2025/12/28", CURRENT);
    let zst = home.place("sessions/2026/01/10", ZSTD);
    let archived = home.place("archived_sessions", LEGACY);
    let parent = home.place("sessions/2026/02/01", PARENT);
    let child = home.place("sessions/2026/02/01", CHILD);
    let root = home.root();
    assert_eq!(
        discover_by_session(&root, CURRENT_ID).path(),
        Some(current.as_path())
    );
    assert_eq!(
        discover_by_session(&root, ZSTD_ID).path(),
        Some(zst.as_path())
    );
    assert_eq!(
        discover_by_session(&root, "5973b6c0-94b8-487b-a530-2aeb6098ae0e").path(),
        Some(archived.as_path())
    );
    // The plain file wins over its compressed sibling.
    let plain = zst.with_extension("");
    fs::write(&plain, zstd_decode(&fixture(ZSTD))).unwrap();
    assert_eq!(
        discover_by_session(&root, ZSTD_ID).path(),
        Some(plain.as_path())
    );
    // A file named for an id whose meta says otherwise is not it.
    let liar = root
        .join("sessions/2026/02/01")
        .join(format!("rollout-x-{ZSTD_ID}.jsonl"));
    fs::copy(&parent, &liar).unwrap();
    assert_eq!(
        discover_by_session(&root, ZSTD_ID).path(),
        Some(plain.as_path())
    );
    fs::remove_file(&liar).unwrap();

    let by_cwd = |cwd: &str| {
        discover_by_cwd(&root, Some(Path::new(cwd)))
            .path()
            .map(Path::to_owned)
    };
    assert_eq!(by_cwd("/work/proj"), Some(parent));
    assert_eq!(by_cwd("/work/proj/sub/"), Some(child));
    assert_eq!(by_cwd("/home/a/proj"), Some(current));
    for none in ["/work", "/", "/work/proj/sub/x", "/work/pro"] {
        assert_eq!(by_cwd(none), None, "{none}");
    }
    for bad in ["../x", "a/b", ""] {
        assert!(matches!(
            discover_by_session(&root, bad),
            Discovery::NotFound(NotFoundReason::InvalidSessionId { .. })
        ));
    }
    let empty = Home::new();
    assert!(matches!(
        discover_by_cwd(&empty.root(), Some(Path::new("/work/proj"))),
        Discovery::NotFound(NotFoundReason::NoTranscripts { .. })
    ));
}

fn zstd_decode(bytes: &[u8]) -> Vec<u8> {
    let out = std::process::Command::new("zstd")
        .args(["-dq", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bytes)?;
            child.wait_with_output()
        });
    match out {
        Ok(out) if out.status.success() => out.stdout,
        // Without the zstd command, the library reads it.
        _ => {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("x.jsonl.zst");
            fs::write(&p, bytes).unwrap();
            let t = read_rollout(&p).unwrap();
            assert!(t.stats.torn_at_line.is_none());
            panic!("the zstd command is needed to decode a fixture")
        }
    }
}

fn run_cli(home: &Path, root: &Path, args: &[&str], env_home: bool) -> (i32, String, String) {
    let mut cmd = cli::command(root);
    cmd.env_remove("CODEX_HOME").args(["history", "codex"]);
    if env_home {
        cmd.env("CODEX_HOME", home.join(".codex"));
    } else {
        cmd.arg("--home").arg(home);
    }
    cmd.args(args);
    cli::run(cmd)
}

#[test]
fn cli_history_codex_reads_imports_once_and_round_trips() {
    let home = Home::new();
    let path = home.place("sessions/2025/12/28", CURRENT);
    home.place("sessions/2026/01/10", ZSTD);
    let store_dir = tempfile::tempdir().unwrap();
    let root = store_dir.path();
    let h = home.dir.path();

    let (code, stdout, _) = run_cli(h, root, &["--session", CURRENT_ID, "--json"], false);
    assert_eq!(code, 0);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7);
    assert_eq!(lines[1]["tool_name"], "shell");

    // $CODEX_HOME stands in for --home.
    let (code, stdout, stderr) = run_cli(
        h,
        root,
        &["--cwd", "/home/a/proj", "--compact", "--verbose"],
        true,
    );
    assert_eq!(code, 0, "{stderr}");
    let compact: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(compact["last_assistant_message"]["text"], "All 12 pass.");
    assert!(stderr.contains("future_line_type x1"), "{stderr}");
    assert!(stderr.contains("skipped 1 malformed (line 17)"), "{stderr}");

    let (code, first, _) = run_cli(h, root, &["--session", CURRENT_ID, "--import"], false);
    assert_eq!(code, 0);
    let (code, again, stderr) = run_cli(h, root, &["--session", CURRENT_ID, "--import"], false);
    assert_eq!((code, &again), (0, &first));
    assert!(stderr.contains("already imported"), "{stderr}");
    assert_eq!(Store::open(root).unwrap().list().unwrap().len(), 1);

    // Exported as Responses items, the session keeps every item: the live
    // history after the compaction, and before it (a fork at the point it
    // was compacted).
    let import = HistoryService::with_default_readers()
        .read_import("codex", &path)
        .unwrap();
    let live = first.trim();
    let store = Store::open(root).unwrap();
    let state = store.restore(live.parse().unwrap()).unwrap();
    let origin = state.compacted_from.unwrap();
    let (before, _) = store.fork_at(origin.session_id, origin.at_hash).unwrap();
    drop(store);
    let as_responses = |items: &[Item]| -> Vec<String> {
        items
            .iter()
            .map(|i| i.to_responses_json(Form::AsStored).unwrap())
            .collect()
    };
    assert_eq!(
        export(root, &before.to_string(), "responses"),
        as_responses(&import.items)
    );
    let mut after = import.compactions[0].history.clone();
    after.extend(import.compactions[0].items.iter().cloned());
    assert_eq!(export(root, live, "responses"), as_responses(&after));
    // Opaque items and exact texts survive byte for byte.
    let exported = export(root, &before.to_string(), "responses").join("\n");
    assert!(exported.contains(r#""encrypted_content":"gAAAAABpUSenc+/==""#));
    assert!(exported.contains(r#"{"type":"local_shell_call","call_id":"call_3","status":"completed","action":{"type":"exec","command":["git","status"],"timeout_ms":10000}}"#));

    // The zstd rollout imports too.
    let (code, _, stderr) = run_cli(h, root, &["--session", ZSTD_ID, "--import"], false);
    assert_eq!(code, 0, "{stderr}");

    let (code, stdout, stderr) = run_cli(h, root, &["--cwd", "/home/a", "--verbose"], false);
    assert_eq!((code, stdout.as_str()), (0, ""));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any mix of real lines, cut lines and junk reads without panicking.
    #[test]
    fn arbitrary_lines_never_panic(picks in proptest::collection::vec((0usize..40, 0usize..300, any::<u8>()), 0..40)) {
        let all = [fixture(CURRENT), fixture(LEGACY)].concat();
        let lines: Vec<&[u8]> = all.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        let mut bytes = Vec::new();
        for (i, cut, junk) in picks {
            let line = lines[i % lines.len()];
            bytes.extend_from_slice(&line[..cut.min(line.len())]);
            if junk % 7 == 0 { bytes.push(junk); }
            bytes.push(b'\n');
        }
        let t = parse_rollout_bytes(&bytes);
        let _ = t.messages();
        let _ = codex::import_of(&t);
    }
}
