//! Guards the Claude Code reader against showing the wrong history: abandoned branches or subagents mixed into the main transcript, a split response shown twice, thinking or tool results lost on import, another workspace's session guessed, a compaction losing what came before it, and a re-import duplicating a session.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "common/cli.rs"]
mod cli;

use cli::export;
use proptest::prelude::*;
use serde_json::Value;
use session_store::history::claude::{
    self, discover_by_cwd, discover_by_session, encode_project_dir, parse_session_bytes,
    ClaudeSession,
};
use session_store::{
    history::Discovery, history::HistoryRole, history::HistoryService, history::Locator,
    history::NotFoundReason, Item, Store, ToolOutput,
};

const SESSION: &str = "5f0c6a3e-1b2d-4c5e-8f90-0a1b2c3d4e5f";

fn fixture(name: &str) -> Vec<u8> {
    fs::read(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .join("tests/fixtures/claude")
            .join(name),
    )
    .unwrap()
}

/// A fake `~/.claude` with sessions placed in their project directories.
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
        self.dir.path().join(".claude")
    }

    fn place(&self, cwd: &str, session: &str, bytes: &[u8]) -> PathBuf {
        let dir = claude::projects_dir(&self.root()).join(encode_project_dir(Path::new(cwd)));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{session}.jsonl"));
        fs::write(&path, bytes).unwrap();
        path
    }
}

fn branching() -> ClaudeSession {
    parse_session_bytes(&fixture("branching.jsonl"))
}

#[test]
fn the_path_from_the_last_leaf_leaves_abandoned_branches_and_subagents_out() {
    let session = branching();
    let messages = session.main.messages();
    let texts: Vec<(HistoryRole, &str)> =
        messages.iter().map(|m| (m.role, m.text.as_str())).collect();
    assert_eq!(
        texts,
        vec![
            (HistoryRole::User, "Fix the failing test"),
            (HistoryRole::ToolResult, "1 failed"),
            (
                HistoryRole::ToolResult,
                "fn add(a: i32, b: i32) -> i32 { a - b }"
            ),
            (HistoryRole::Assistant, "Fixed: `add` subtracted."),
        ]
    );
    assert_eq!(messages[1].tool_name.as_deref(), Some("Bash"));
    assert!(messages[1].is_error);
    assert_eq!(messages[2].tool_name.as_deref(), Some("Read"));
    assert!(!messages[2].is_error);
    assert!(
        messages[0].source_ref.ends_with("#line=4"),
        "{}",
        messages[0].source_ref
    );
    assert_eq!(
        messages[0].timestamp.as_deref(),
        Some("2026-03-01T10:00:01.000Z")
    );

    let stats = &session.main.stats;
    // a3 and u3, the abandoned answer, are left out and counted by kind;
    // the progress line of a2's tool call belongs with it.
    assert_eq!(stats.off_path, 2);
    assert_eq!(stats.left_out.get("assistant"), Some(&1));
    assert_eq!(stats.left_out.get("user"), Some(&1));
    assert_eq!(stats.malformed_lines, 2);
    assert_eq!(stats.first_malformed, vec![11, 12]);
    assert_eq!(stats.unknown_types.get("mystery-from-the-future"), Some(&1));
    assert_eq!(stats.sidechain_lines, 2);

    let sub = session.sidechain("a7f3").expect("the in-file subagent");
    let texts: Vec<String> = sub.messages().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["Search the tree for TODOs", "Found 2 TODOs."]);
}

#[test]
fn blocks_map_to_items_losslessly_and_one_response_stays_one() {
    let import = claude::import_of(&branching().main, None);
    let items = &import.items;
    // The isMeta caveat is imported (the model saw it), then the path.
    assert!(matches!(&items[0], Item::Message { .. }));
    // Given as a string, and kept so (see `Extra`).
    assert!(items[1].is_user_message());
    assert_eq!(items[1].text().as_deref(), Some("Fix the failing test"));
    assert_eq!(
        items[2],
        Item::Thinking {
            extra: Default::default(),
            thinking: "Run the tests first.".into(),
            signature: Some("EqQBCkYIBxgCKkB+/sig==".into()),
        }
    );
    match &items[3] {
        Item::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            assert_eq!((call_id.as_str(), name.as_str()), ("toolu_1", "Bash"));
            assert_eq!(
                arguments,
                r#"{"command":"cargo test","description":"Run tests"}"#
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        items[4],
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: "toolu_1".into(),
            output: Some(ToolOutput::Text("1 failed".into())),
            is_error: Some(true),
            custom: false,
            status: None,
        }
    );
    assert_eq!(
        items[5],
        Item::RedactedThinking {
            extra: Default::default(),
            data: "EmwKAhgBEgy+/redacted==".into()
        }
    );
    assert!(matches!(&items[6], Item::ToolCall { call_id, .. } if call_id == "toolu_2"));
    assert!(matches!(
        &items[7],
        Item::ToolOutput {
            output: Some(ToolOutput::Parts(_)),
            is_error: None,
            ..
        }
    ));
    assert_eq!(items[8], Item::assistant_text("Fixed: `add` subtracted."));
    assert_eq!(items.len(), 9);
    assert!(import.compactions.is_empty());
    assert_eq!(import.provenance["reader"], "claude-code");
    assert_eq!(
        import.provenance["unknown_types"]["mystery-from-the-future"],
        1
    );
    // One response over two lines: thinking then the call, joined once.
    assert_eq!(
        items
            .iter()
            .filter(|i| matches!(i, Item::Thinking { .. }))
            .count(),
        1
    );
}

#[test]
fn a_compaction_keeps_the_history_before_it() {
    for (name, before, after) in [("compaction.jsonl", 2, 3), ("compaction-old.jsonl", 2, 2)] {
        let session = parse_session_bytes(&fixture(name));
        assert_eq!(session.main.segments.len(), 2, "{name}");
        let import = claude::import_of(&session.main, None);
        assert_eq!(import.items.len(), before, "{name}");
        assert_eq!(import.compactions.len(), 1, "{name}");
        assert!(import.compactions[0].history.is_empty());
        assert_eq!(import.compactions[0].items.len(), after, "{name}");
        let summary = import.compactions[0].items[0].text().unwrap();
        assert!(
            summary.contains("continued from a previous conversation"),
            "{name}"
        );
        // Messages show everything in order, the summary included.
        assert_eq!(session.main.messages().len(), before + after, "{name}");
    }
}

#[test]
fn discovery_by_session_finds_the_file_in_any_project() {
    let home = Home::new();
    let path = home.place("/home/a/proj", SESSION, &fixture("branching.jsonl"));
    assert_eq!(
        discover_by_session(&home.root(), SESSION),
        Discovery::Found {
            path: path.clone(),
            session_id: Some(SESSION.into())
        }
    );
    for bad in ["../x", "", "a/b", "a.b"] {
        assert!(matches!(
            discover_by_session(&home.root(), bad),
            Discovery::NotFound(NotFoundReason::InvalidSessionId { .. })
        ));
    }
    assert!(matches!(
        discover_by_session(&home.root(), "00000000-0000-4000-8000-000000000000"),
        Discovery::NotFound(NotFoundReason::TranscriptMissing { .. })
    ));
    // The same id in two projects: no guess.
    home.place("/home/a/other", SESSION, &fixture("branching.jsonl"));
    assert!(matches!(
        discover_by_session(&home.root(), SESSION),
        Discovery::NotFound(NotFoundReason::Ambiguous { .. })
    ));
    let empty = Home::new();
    assert!(matches!(
        discover_by_session(&empty.root(), SESSION),
        Discovery::NotFound(NotFoundReason::NoTranscripts { .. })
    ));
}

#[test]
fn discovery_by_cwd_is_exact_for_parent_child_and_lossy_names() {
    let home = Home::new();
    let parent = home.place(
        "/work/proj",
        "11111111-1111-4111-8111-111111111111",
        &fixture("workspace-parent.jsonl"),
    );
    let child = home.place(
        "/work/proj/sub",
        "22222222-2222-4222-8222-222222222222",
        &fixture("workspace-child.jsonl"),
    );
    // `/work/proj-sub` has the child's directory name; it is written last,
    // so only the cwd check keeps it out.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let lossy = home.place(
        "/work/proj-sub",
        "33333333-3333-4333-8333-333333333333",
        &fixture("workspace-lossy.jsonl"),
    );
    assert_eq!(lossy.parent(), child.parent());
    let found = |cwd: &str| {
        discover_by_cwd(&home.root(), Some(Path::new(cwd)))
            .path()
            .map(Path::to_owned)
    };
    assert_eq!(found("/work/proj"), Some(parent.clone()));
    assert_eq!(found("/work/proj/"), Some(parent));
    assert_eq!(found("/work/proj/sub"), Some(child));
    assert_eq!(found("/work/proj/sub/../sub/."), found("/work/proj/sub"));
    assert_eq!(found("/work/proj-sub"), Some(lossy));
    for none in ["/work", "/", "/work/proj/sub/deeper", "/work/pro"] {
        assert_eq!(found(none), None, "{none}");
    }
    assert!(matches!(
        discover_by_cwd(&home.root(), None),
        Discovery::NotFound(NotFoundReason::NoCwd)
    ));
    assert!(matches!(
        discover_by_cwd(&home.root(), Some(Path::new("relative"))),
        Discovery::NotFound(NotFoundReason::InvalidCwd { .. })
    ));
}

#[test]
fn subagent_files_are_read_apart_from_the_main_transcript() {
    let home = Home::new();
    let path = home.place("/home/a/proj", SESSION, &fixture("branching.jsonl"));
    let subagents = path.parent().unwrap().join(SESSION).join("subagents");
    fs::create_dir_all(&subagents).unwrap();
    fs::write(
        subagents.join("agent-b2c4.jsonl"),
        fixture("subagent-agent-b2c4.jsonl"),
    )
    .unwrap();
    let session = ClaudeSession::read_with_subagents(&path).unwrap();
    assert_eq!(
        session.sidechains.keys().collect::<Vec<_>>(),
        vec!["a7f3", "b2c4"]
    );
    let review = session.sidechain("b2c4").unwrap().messages();
    assert_eq!(review.last().unwrap().text, "Looks right.");
    assert_eq!(
        session.main.messages(),
        ClaudeSession::read(&path).unwrap().main.messages()
    );
}

fn run_cli(home: &Home, root: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = cli::command(root);
    cmd.env_remove("CLAUDE_CONFIG_DIR")
        .args(["history", "claude", "--home"])
        .arg(home.dir.path())
        .args(args);
    cli::run(cmd)
}

fn anthropic_items(lines: &[String]) -> Vec<Item> {
    lines
        .iter()
        .flat_map(|l| Item::from_anthropic_message(l).unwrap())
        .collect()
}

#[test]
fn cli_history_claude_reads_imports_once_and_round_trips() {
    let home = Home::new();
    let path = home.place("/home/a/proj", SESSION, &fixture("branching.jsonl"));
    let store_dir = tempfile::tempdir().unwrap();
    let root = store_dir.path();

    let (code, stdout, _) = run_cli(&home, root, &["--session", SESSION, "--json"]);
    assert_eq!(code, 0);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1]["role"], "tool_result");
    assert_eq!(lines[1]["tool_name"], "Bash");
    assert_eq!(lines[1]["is_error"], true);
    assert!(lines[0]["ref"].as_str().unwrap().ends_with(".jsonl#line=4"));

    let (code, stdout, stderr) = run_cli(
        &home,
        root,
        &["--cwd", "/home/a/proj", "--compact", "--verbose"],
    );
    assert_eq!(code, 0);
    let compact: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(compact["message_count"], 4);
    assert!(stderr.contains("mystery-from-the-future x1"), "{stderr}");
    assert!(
        stderr.contains("skipped 2 malformed (line 11, 12)"),
        "{stderr}"
    );
    assert!(stderr.contains("a7f3"), "{stderr}");

    let (code, stdout, _) = run_cli(&home, root, &["--session", SESSION, "--agent", "a7f3"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("Found 2 TODOs.") && !stdout.contains("Fixed"),
        "{stdout}"
    );
    let (code, stdout, stderr) = run_cli(&home, root, &["--session", SESSION, "--agent", "nope"]);
    assert_eq!((code, stdout.as_str()), (0, ""));
    assert_eq!(stderr.lines().count(), 1);

    // Import, then the same content again: one session.
    let (code, first, _) = run_cli(&home, root, &["--session", SESSION, "--import"]);
    assert_eq!(code, 0);
    let (code, again, stderr) = run_cli(&home, root, &["--session", SESSION, "--import"]);
    assert_eq!(code, 0);
    assert_eq!(first, again);
    assert!(stderr.contains("already imported"), "{stderr}");
    assert_eq!(Store::open(root).unwrap().list().unwrap().len(), 1);

    // Export as Messages API messages: every item, and the provenance.
    let id = first.trim();
    let import = HistoryService::with_default_readers()
        .read_import("claude", &path)
        .unwrap();
    // The Messages form groups consecutive items of one side into one
    // message, so it is compared as that form; the store keeps each item.
    assert_eq!(
        export(root, id, "anthropic"),
        Item::to_anthropic_messages(&import.items).unwrap()
    );
    let store = Store::open(root).unwrap();
    let state = store.restore(id.parse().unwrap()).unwrap();
    assert_eq!(state.history, import.items);
    let provenance = state.extensions.last().unwrap().payload.to_value();
    assert_eq!(provenance["content_blake3"], import.content_hash.as_str());
    assert_eq!(provenance["reader"], "claude-code");
    drop(store);

    // A grown transcript is other content: a new session, whole.
    let mut grown = fixture("branching.jsonl");
    grown.extend_from_slice(br#"{"type":"user","uuid":"u9","parentUuid":"sys1","sessionId":"5f0c6a3e-1b2d-4c5e-8f90-0a1b2c3d4e5f","message":{"role":"user","content":"thanks"}}"#);
    grown.push(b'\n');
    fs::write(&path, grown).unwrap();
    let (code, third, _) = run_cli(&home, root, &["--session", SESSION, "--import"]);
    assert_eq!(code, 0);
    assert_ne!(third, first);
    assert_eq!(Store::open(root).unwrap().list().unwrap().len(), 2);

    // Discovery fails closed: nothing printed, exit 0, one line saying so.
    let (code, stdout, stderr) = run_cli(&home, root, &["--cwd", "/home/a", "--verbose"]);
    assert_eq!((code, stdout.as_str()), (0, ""));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_compacted_import_is_compacted_in_the_store_and_round_trips() {
    let home = Home::new();
    home.place("/home/a/proj", SESSION, &fixture("compaction.jsonl"));
    let store_dir = tempfile::tempdir().unwrap();
    let root = store_dir.path();
    let (code, live, _) = run_cli(&home, root, &["--session", SESSION, "--import"]);
    assert_eq!(code, 0);
    let live: session_store::SessionId = live.trim().parse().unwrap();
    let store = Store::open(root).unwrap();
    let state = store.restore(live).unwrap();
    let origin = state.compacted_from.expect("compacted in place");
    assert_eq!(origin.session_id, live);
    // The history before the compaction stays in the log.
    let (fork, _) = store.fork_at(live, origin.at_hash).unwrap();
    let before = store.restore(fork).unwrap();
    drop(store);
    let session = parse_session_bytes(&fixture("compaction.jsonl"));
    let import = claude::import_of(&session.main, None);
    assert_eq!(before.history, import.items);
    assert_eq!(state.history, import.compactions[0].items);
    assert_eq!(
        export(root, &live.to_string(), "anthropic"),
        Item::to_anthropic_messages(&import.compactions[0].items).unwrap()
    );
    assert_eq!(
        export(root, &fork.to_string(), "anthropic"),
        Item::to_anthropic_messages(&import.items).unwrap()
    );
    // Read back, the export is the same conversation.
    let back = anthropic_items(&export(root, &live.to_string(), "anthropic"));
    assert_eq!(
        Item::to_anthropic_messages(&back).unwrap(),
        Item::to_anthropic_messages(&state.history).unwrap()
    );
}

#[test]
fn an_empty_transcript_prints_nothing() {
    let home = Home::new();
    home.place(
        "/home/a/proj",
        SESSION,
        br#"{"type":"summary","summary":"x","leafUuid":"nope"}"#,
    );
    let root = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run_cli(&home, root.path(), &["--session", SESSION]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let service = HistoryService::with_default_readers();
    let d = service.discover(
        "claude",
        home.dir.path(),
        &Locator::SessionId(SESSION.into()),
    );
    assert!(d.path().is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any mix of real lines, cut lines and junk reads without panicking.
    #[test]
    fn arbitrary_lines_never_panic(picks in proptest::collection::vec((0usize..40, 0usize..200, any::<u8>()), 0..40)) {
        let lines: Vec<&[u8]> = fixture_lines();
        let mut bytes = Vec::new();
        for (i, cut, junk) in picks {
            let line = lines[i % lines.len()];
            bytes.extend_from_slice(&line[..cut.min(line.len())]);
            if junk % 7 == 0 { bytes.push(junk); }
            bytes.push(b'\n');
        }
        let session = parse_session_bytes(&bytes);
        let _ = session.main.messages();
        let _ = claude::import_of(&session.main, None);
    }
}

fn fixture_lines() -> Vec<&'static [u8]> {
    let all: &'static [u8] = Box::leak(
        [
            fixture("branching.jsonl"),
            fixture("compaction.jsonl"),
            fixture("compaction-old.jsonl"),
        ]
        .concat()
        .into_boxed_slice(),
    );
    all.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// `ls` lists every session file found, whatever its name; `--path` reads
/// one file wherever it lies; an import reports what the transcript and the
/// store hold.
#[test]
fn cli_lists_transcripts_and_imports_one_by_path_with_a_report() {
    let home = Home::new();
    home.place("/home/a/proj", SESSION, &fixture("branching.jsonl"));
    // Named otherwise than the tool names its files.
    home.place(
        "/home/a/other",
        "copied-session",
        &fixture("compaction.jsonl"),
    );
    let store_dir = tempfile::tempdir().unwrap();
    let root = store_dir.path().join("store");

    let (code, out, err) = run_cli(&home, &root, &["ls"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[0].starts_with("ID"), "{out}");
    assert!(
        out.contains(SESSION) && out.contains("/home/a/proj"),
        "{out}"
    );
    let (code, out, _) = run_cli(&home, &root, &["ls", "--json"]);
    assert_eq!(code, 0);
    let listed: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed.iter().all(|v| v["messages"].as_u64().unwrap() > 0),
        "{out}"
    );

    // A file outside any home, by path.
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("exported.jsonl");
    fs::write(&file, fixture("branching.jsonl")).unwrap();
    let (code, out, err) = run_cli(
        &home,
        &root,
        &["--path", file.to_str().unwrap(), "--import"],
    );
    assert_eq!(code, 0, "{err}");
    let id = out.trim().to_owned();
    assert!(
        err.contains("transcript: ") && err.contains("store: "),
        "{err}"
    );
    let file_line = err.lines().find(|l| l.starts_with("transcript:")).unwrap();
    let store_line = err.lines().find(|l| l.starts_with("store:")).unwrap();
    assert_eq!(
        file_line.trim_start_matches("transcript:").trim(),
        store_line.trim_start_matches("store:").trim()
    );
    assert!(err.contains("left out 2 lines"), "{err}");
    // Twice: the same session, nothing written.
    let (code, again, err) = run_cli(
        &home,
        &root,
        &["--path", file.to_str().unwrap(), "--import"],
    );
    assert_eq!((code, again.trim()), (0, id.as_str()), "{err}");
    assert!(err.contains("already imported"), "{err}");
    // A path that names nothing is not found.
    let (code, _, err) = run_cli(&home, &root, &["--path", "/no/such/file.jsonl"]);
    assert_eq!(code, 3, "{err}");
}
