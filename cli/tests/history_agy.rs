//! Guards the agy history reader against misreporting another agent's work: tool inputs shown as results, FIFO pairings shifted, another workspace's transcript guessed, parent/child workspaces mixed, and panics or side effects on hostile input.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rusqlite::Connection;
use serde_json::{json, Value};
use session_store::history::agy::{
    self, discover_by_cwd, discover_by_session, parse_transcript_bytes, transcript_path,
    AgyTranscript,
};
use session_store::{
    history::Discovery, history::HistoryMessage, history::HistoryReader, history::HistoryRole,
    history::HistoryService, history::Locator, history::NotFoundReason, ContentPart, Error, Item,
    Role,
};

// ---------------------------------------------------------------- helpers

fn jsonl(steps: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for step in steps {
        out.extend_from_slice(step.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn parse(steps: &[Value]) -> Vec<HistoryMessage> {
    parse_transcript_bytes(&jsonl(steps)).messages()
}

fn user(i: u64, text: &str) -> Value {
    json!({"step_index": i, "source": "USER_EXPLICIT", "type": "USER_INPUT", "status": "DONE",
           "created_at": format!("2025-06-01T10:00:{i:02}Z"), "content": text})
}

fn planner(i: u64, text: &str, calls: &[&str]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|name| json!({"name": name, "args": {"Input": "\"args are inputs\""}}))
        .collect();
    json!({"step_index": i, "source": "MODEL", "type": "PLANNER_RESPONSE", "status": "DONE",
           "created_at": format!("2025-06-01T10:00:{i:02}Z"), "content": text, "tool_calls": calls})
}

fn exec(i: u64, step_type: &str, content: &str) -> Value {
    json!({"step_index": i, "source": "MODEL", "type": step_type, "status": "DONE",
           "created_at": format!("2025-06-01T10:00:{i:02}Z"), "content": content})
}

fn roles(messages: &[HistoryMessage]) -> Vec<HistoryRole> {
    messages.iter().map(|m| m.role).collect()
}

/// The (tool name, text) of every tool result, in order.
fn tool_results(messages: &[HistoryMessage]) -> Vec<(&str, &str)> {
    messages
        .iter()
        .filter(|m| m.role == HistoryRole::ToolResult)
        .map(|m| (m.tool_name.as_deref().unwrap(), m.text.as_str()))
        .collect()
}

fn tool_names(messages: &[HistoryMessage]) -> Vec<&str> {
    messages
        .iter()
        .filter(|m| m.role == HistoryRole::ToolResult)
        .map(|m| m.tool_name.as_deref().unwrap_or("<none>"))
        .collect()
}

/// A fake home with agy's layout.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".gemini/antigravity-cli/brain")).unwrap();
        Home { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn db_path(&self) -> PathBuf {
        agy::database_path(self.path())
    }

    fn write_transcript(&self, id: &str, steps: &[Value]) -> PathBuf {
        let path = transcript_path(self.path(), id).unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, jsonl(steps)).unwrap();
        path
    }

    /// Build `conversation_summaries.db` with rows (id, workspace_uris JSON,
    /// last_modified_time).
    fn write_db(&self, with_stamp: bool, rows: &[(&str, Value, i64)]) {
        let conn = Connection::open(self.db_path()).unwrap();
        let stamp_col = if with_stamp {
            ", last_modified_time INTEGER"
        } else {
            ""
        };
        conn.execute_batch(&format!(
            "CREATE TABLE conversation_summaries (conversation_id TEXT PRIMARY KEY, \
             title TEXT, workspace_uris TEXT{stamp_col})"
        ))
        .unwrap();
        for (id, uris, stamp) in rows {
            if with_stamp {
                conn.execute(
                    "INSERT INTO conversation_summaries VALUES (?1, 't', ?2, ?3)",
                    rusqlite::params![id, uris.to_string(), stamp],
                )
                .unwrap();
            } else {
                conn.execute(
                    "INSERT INTO conversation_summaries VALUES (?1, 't', ?2)",
                    rusqlite::params![id, uris.to_string()],
                )
                .unwrap();
            }
        }
    }

    fn found_id(&self, cwd: &str) -> Option<String> {
        match discover_by_cwd(self.path(), Some(Path::new(cwd))) {
            Discovery::Found { session_id, .. } => session_id,
            Discovery::NotFound(_) => None,
        }
    }

    fn side_files(&self) -> Vec<String> {
        let dir = self.path().join(".gemini/antigravity-cli");
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("conversation_summaries.db-"))
            .collect();
        names.sort();
        names
    }
}

fn reason(d: Discovery) -> NotFoundReason {
    match d {
        Discovery::NotFound(reason) => reason,
        Discovery::Found { path, .. } => panic!("expected nothing found, got {}", path.display()),
    }
}

// ---------------------------------------------------------- seed cases

#[test]
fn seed_1_multi_turn_conversation_with_paired_outputs() {
    let messages = parse(&[
        user(0, "list the files"),
        planner(1, "Looking.", &["default_api:run_command"]),
        json!({"step_index": 2, "source": "MODEL", "type": "RUN_COMMAND", "status": "DONE",
               "created_at": "2025-06-01T10:00:02Z", "content": "Ran ls", "output": "a.txt\nb.txt",
               "exit_code": 0}),
        planner(3, "Two files.", &[]),
        user(4, "thanks"),
        planner(5, "You're welcome.", &[]),
    ]);
    assert_eq!(
        roles(&messages),
        [
            HistoryRole::User,
            HistoryRole::Assistant,
            HistoryRole::ToolResult,
            HistoryRole::Assistant,
            HistoryRole::User,
            HistoryRole::Assistant
        ]
    );
    let result = &messages[2];
    assert_eq!(result.tool_name.as_deref(), Some("run_command"));
    assert_eq!(result.text, "Ran ls\na.txt\nb.txt\nexit code: 0");
    assert!(!result.is_error);
    assert_eq!(result.source_ref, "#step=2");
    assert_eq!(result.timestamp.as_deref(), Some("2025-06-01T10:00:02Z"));
    assert_eq!(messages[0].text, "list the files");
    assert_eq!(messages[5].text, "You're welcome.");
    // The call's args are inputs: they never show up as output.
    assert!(messages.iter().all(|m| !m.text.contains("args are inputs")));
}

#[test]
fn seed_2_tool_errors_are_flagged() {
    let messages = parse(&[
        planner(0, "", &["a", "b", "c", "d", "e"]),
        json!({"step_index": 1, "source": "SYSTEM", "type": "ERROR_MESSAGE", "content": "boom"}),
        json!({"step_index": 2, "type": "VIEW_FILE", "status": "ERROR", "content": "no such file"}),
        json!({"step_index": 3, "type": "RUN_COMMAND", "status": "DONE", "output": "fail", "exit_code": 2}),
        json!({"step_index": 4, "type": "LIST_DIRECTORY", "status": "DONE", "error": "permission denied"}),
        json!({"step_index": 5, "type": "RUN_COMMAND", "status": "DONE", "output": "ok", "exit_code": 0,
               "error": null}),
    ]);
    let flags: Vec<(&str, bool)> = messages
        .iter()
        .map(|m| (m.tool_name.as_deref().unwrap(), m.is_error))
        .collect();
    assert_eq!(
        flags,
        [
            ("a", true),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", false)
        ]
    );
    assert_eq!(messages[1].text, "no such file");
    assert_eq!(messages[2].text, "fail\nexit code: 2");
    assert_eq!(messages[3].text, "permission denied");
}

#[test]
fn seed_3_several_calls_in_one_turn_pair_in_fifo_order() {
    let messages = parse(&[
        user(0, "go"),
        planner(
            1,
            "Three things.",
            &["list_dir", "view_file", "run_command"],
        ),
        exec(2, "LIST_DIRECTORY", "dir listing"),
        exec(3, "VIEW_FILE", "file body"),
        exec(4, "RUN_COMMAND", "command output"),
    ]);
    let pairs = tool_results(&messages);
    assert_eq!(
        pairs,
        [
            ("list_dir", "dir listing"),
            ("view_file", "file body"),
            ("run_command", "command output")
        ]
    );
}

#[test]
fn seed_4_calls_without_results_get_no_fake_results() {
    let messages = parse(&[
        user(0, "go"),
        planner(1, "Trying.", &["run_command", "view_file"]),
        user(2, "stop, do something else"),
        exec(3, "RUN_COMMAND", "late output"),
    ]);
    assert_eq!(
        roles(&messages),
        [
            HistoryRole::User,
            HistoryRole::Assistant,
            HistoryRole::User,
            HistoryRole::ToolResult
        ]
    );
    // The user's turn cleared the queue: the late result is not paired with
    // the abandoned call.
    assert_eq!(tool_names(&messages), ["RUN_COMMAND"]);
    assert!(messages.iter().all(|m| !m.text.contains("args are inputs")));

    let only_calls = parse(&[planner(0, "", &["run_command"])]);
    assert!(only_calls.is_empty());
}

#[test]
fn seed_5_orphan_generic_and_unknown_entries_are_filtered_known_kept() {
    let messages = parse(&[
        user(0, "hi"),
        exec(1, "GENERIC", "noise"),
        exec(2, "SOMETHING_NEW", "more noise"),
        exec(3, "VIEW_FILE", "file body"),
        exec(4, "ERROR_MESSAGE", "it broke"),
    ]);
    assert_eq!(tool_names(&messages), ["VIEW_FILE", "ERROR_MESSAGE"]);
    assert!(messages.iter().all(|m| !m.text.contains("noise")));
    assert!(messages[2].is_error);
}

#[test]
fn seed_6_interleaved_generic_and_unknown_keep_fifo_alignment() {
    let messages = parse(&[
        planner(0, "Two calls.", &["first", "second"]),
        exec(1, "GENERIC", "noise"),
        exec(2, "RUN_COMMAND", "first output"),
        exec(3, "CHECKPOINT", "noise"),
        exec(4, "GENERIC", "noise"),
        exec(5, "VIEW_FILE", "second output"),
    ]);
    let pairs = tool_results(&messages);
    assert_eq!(
        pairs,
        [("first", "first output"), ("second", "second output")]
    );
}

#[test]
fn seed_7_structured_content_and_empty_texts_filtered() {
    let messages = parse(&[
        json!({"step_index": 0, "type": "PLANNER_RESPONSE", "source": "MODEL",
               "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": ""}, "  ", "world", 7]}),
        json!({"step_index": 1, "type": "PLANNER_RESPONSE", "source": "MODEL", "content": ["", {"text": " "}]}),
        json!({"step_index": 2, "type": "PLANNER_RESPONSE", "source": "MODEL", "content": ""}),
        json!({"step_index": 3, "type": "USER_INPUT", "source": "USER_EXPLICIT",
               "content": [{"text": "part one"}, {"text": "part two"}]}),
    ]);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].text, "Hello\nworld");
    assert_eq!(messages[1].text, "part one\npart two");
}

#[test]
fn seed_8_empty_file_malformed_lines_and_missing_file() {
    let empty = parse_transcript_bytes(b"");
    assert!(empty.entries.is_empty() && empty.messages().is_empty());
    assert_eq!(parse_transcript_bytes(b"\n\n  \r\n").malformed_lines, 0);

    let mut bytes = b"not json\n{\"truncated\": \n[1,2]\n\"string\"\n".to_vec();
    bytes.extend(jsonl(&[user(0, "survivor")]));
    bytes.extend_from_slice(b"{\"step_index\": 1, \"type\": \"PLANNER_RESP");
    let t = parse_transcript_bytes(&bytes);
    assert_eq!(t.malformed_lines, 5);
    assert_eq!(t.messages().len(), 1);
    assert_eq!(t.messages()[0].text, "survivor");

    let home = Home::new();
    let missing = home.path().join("nope.jsonl");
    assert!(matches!(
        AgyTranscript::read(&missing),
        Err(Error::NotFound { what }) if what.contains(&*missing.to_string_lossy())
    ));
    let empty_file = home.path().join("empty.jsonl");
    fs::write(&empty_file, b"").unwrap();
    assert!(agy::AgyReader
        .read_messages(&empty_file)
        .unwrap()
        .is_empty());
}

#[test]
fn seed_9_session_id_resolves_to_its_transcript() {
    let home = Home::new();
    let id = "0b7c6a52-1c1e-4e43-9d1e-5f4f3bd7d2a1";
    let want = home
        .path()
        .join(".gemini/antigravity-cli/brain")
        .join(id)
        .join(".system_generated/logs/transcript.jsonl");
    assert_eq!(transcript_path(home.path(), id), Some(want.clone()));
    assert_eq!(
        reason(discover_by_session(home.path(), id)),
        NotFoundReason::TranscriptMissing { path: want.clone() }
    );
    home.write_transcript(id, &[user(0, "hi")]);
    assert_eq!(
        discover_by_session(home.path(), id),
        Discovery::Found {
            path: want,
            session_id: Some(id.into())
        }
    );
}

#[test]
fn seed_10_reader_is_registered_and_discovery_goes_through_the_service() {
    let home = Home::new();
    let path = home.write_transcript("conv-a", &[user(0, "hello"), planner(1, "hi there", &[])]);
    home.write_db(true, &[("conv-a", json!(["file:///work/proj"]), 1)]);

    let service = HistoryService::with_default_readers();
    assert!(service.sources().any(|s| s == agy::SOURCE));
    for name in ["agy-jsonl", "agy", "antigravity"] {
        assert_eq!(
            service.reader(name).map(|r| r.source()),
            Some(agy::SOURCE),
            "{name}"
        );
    }

    let by_cwd = service.discover("agy", home.path(), &Locator::Cwd(Some("/work/proj".into())));
    assert_eq!(by_cwd.path(), Some(path.as_path()));
    let by_id = service.discover(
        "agy-jsonl",
        home.path(),
        &Locator::SessionId("conv-a".into()),
    );
    assert_eq!(by_id.path(), Some(path.as_path()));

    let messages = service.read_messages("agy", &path).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].source_ref, format!("{}#step=1", path.display()));
    let compact = service.read_compact("agy", &path).unwrap();
    assert_eq!(compact.message_count, 2);
    assert_eq!(compact.last_assistant_message.unwrap().text, "hi there");
    assert_eq!(compact.last_user_message.unwrap().text, "hello");
    assert!(compact.last_tool_result.is_none());
    assert_eq!(compact.updated_at.as_deref(), Some("2025-06-01T10:00:01Z"));

    let empty = HistoryService::empty();
    assert!(matches!(
        reason(empty.discover("agy", home.path(), &Locator::SessionId("conv-a".into()))),
        NotFoundReason::UnknownSource { .. }
    ));
    assert!(matches!(
        empty.read_messages("agy", &path),
        Err(Error::InvalidInput { .. })
    ));
}

/// A transcript sits in `brain/` in every fail-closed case, so a reader that
/// fell back to scanning would find it.
fn home_with_stray_transcript() -> Home {
    let home = Home::new();
    home.write_transcript("stray", &[user(0, "someone else's work")]);
    home
}

/// The reason discovery by cwd gives after `setup` has damaged the index.
fn fail_closed_reason(setup: impl FnOnce(&Home)) -> NotFoundReason {
    let home = home_with_stray_transcript();
    setup(&home);
    reason(discover_by_cwd(home.path(), Some(Path::new("/work/proj"))))
}

fn run_sql(home: &Home, sql: &str) {
    Connection::open(home.db_path())
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

#[test]
fn seed_11_fail_closed_when_database_is_missing_unreadable_or_corrupt() {
    use NotFoundReason::{DatabaseMissing, DatabaseSchema, DatabaseUnreadable};

    let r = fail_closed_reason(|_| {});
    assert!(matches!(r, DatabaseMissing { .. }), "{r:?}");

    let r = fail_closed_reason(|h| fs::create_dir(h.db_path()).unwrap());
    assert!(matches!(r, DatabaseUnreadable { .. }), "{r:?}");

    let r =
        fail_closed_reason(|h| fs::write(h.db_path(), b"not sqlite at all, ".repeat(8)).unwrap());
    assert!(matches!(r, DatabaseUnreadable { .. }), "{r:?}");
    assert!(!r.to_string().is_empty());

    // A valid SQLite file whose header was damaged.
    let r = fail_closed_reason(|h| {
        h.write_db(true, &[("stray", json!(["file:///work/proj"]), 1)]);
        let mut bytes = fs::read(h.db_path()).unwrap();
        bytes[..16].copy_from_slice(b"garbage garbage!");
        fs::write(h.db_path(), bytes).unwrap();
    });
    assert!(matches!(r, DatabaseUnreadable { .. }), "{r:?}");

    let r = fail_closed_reason(|h| run_sql(h, "CREATE TABLE other (x)"));
    assert!(matches!(r, DatabaseSchema { .. }), "{r:?}");

    let r = fail_closed_reason(|h| {
        run_sql(
            h,
            "CREATE TABLE conversation_summaries (conversation_id TEXT)",
        )
    });
    assert!(matches!(r, DatabaseSchema { .. }), "{r:?}");

    // An empty file is an empty database: no table.
    let r = fail_closed_reason(|h| fs::write(h.db_path(), b"").unwrap());
    assert!(matches!(r, DatabaseSchema { .. }), "{r:?}");
}

#[test]
fn seed_12_fail_closed_without_cwd_or_match() {
    let home = home_with_stray_transcript();
    home.write_db(true, &[("stray", json!(["file:///elsewhere"]), 1)]);
    assert_eq!(
        reason(discover_by_cwd(home.path(), None)),
        NotFoundReason::NoCwd
    );
    assert!(matches!(
        reason(discover_by_cwd(home.path(), Some(Path::new("/work/proj")))),
        NotFoundReason::NoMatchingWorkspace { .. }
    ));
    assert!(matches!(
        reason(discover_by_cwd(
            home.path(),
            Some(Path::new("relative/dir"))
        )),
        NotFoundReason::InvalidCwd { .. }
    ));
    let service = HistoryService::with_default_readers();
    assert_eq!(
        reason(service.discover("agy", home.path(), &Locator::Cwd(None))),
        NotFoundReason::NoCwd
    );
}

#[test]
fn seed_13_exact_uri_normalisation_isolates_root_parent_and_child() {
    let home = Home::new();
    for id in ["root", "parent", "proj", "child"] {
        home.write_transcript(id, &[user(0, id)]);
    }
    home.write_db(
        true,
        &[
            ("root", json!(["file:///"]), 1),
            ("parent", json!(["file:///work"]), 1),
            ("proj", json!(["file://localhost/work/my%20proj/"]), 1),
            (
                "child",
                json!(["file:///work/my%20proj/sub", "https://example.invalid/"]),
                1,
            ),
        ],
    );
    let cases = [
        ("/", Some("root")),
        ("/work", Some("parent")),
        ("/work/", Some("parent")),
        ("/work/my proj", Some("proj")),
        ("/work/my proj/", Some("proj")),
        ("/work//my proj/.", Some("proj")),
        ("/work/my proj/sub/..", Some("proj")),
        ("/work/my proj/sub", Some("child")),
        ("/work/my proj/sub/deeper", None),
        ("/work/my", None),
        ("/work/my%20proj", None),
        ("/other", None),
    ];
    for (cwd, want) in cases {
        assert_eq!(home.found_id(cwd).as_deref(), want, "cwd {cwd}");
    }

    // Without a root entry, `/` matches nothing, and nothing matches `/`.
    let home = Home::new();
    home.write_transcript("proj", &[user(0, "p")]);
    home.write_db(true, &[("proj", json!(["file:///work/proj"]), 1)]);
    assert_eq!(home.found_id("/"), None);
    assert_eq!(home.found_id("/work"), None);
    assert_eq!(home.found_id("/work/proj/x"), None);
    assert_eq!(home.found_id("/work/proj"), Some("proj".into()));
}

// --------------------------------------------------------------- extras

#[test]
fn newest_match_wins_by_last_modified_then_by_mtime() {
    let home = Home::new();
    let old = home.write_transcript("old", &[user(0, "old")]);
    home.write_transcript("new", &[user(0, "new")]);
    home.write_transcript("other-ws", &[user(0, "other")]);
    // `old` has the newer file but the older index stamp: the stamp decides.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(later)
        .unwrap();
    home.write_db(
        true,
        &[
            ("old", json!(["file:///w"]), 100),
            ("new", json!(["file:///w"]), 200),
            ("gone", json!(["file:///w"]), 300),
            ("other-ws", json!(["file:///x"]), 400),
        ],
    );
    assert_eq!(home.found_id("/w").as_deref(), Some("new"));

    // Without the column, the transcript's mtime decides.
    let home = Home::new();
    let old = home.write_transcript("old", &[user(0, "old")]);
    home.write_transcript("new", &[user(0, "new")]);
    let earlier = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(earlier)
        .unwrap();
    home.write_db(
        false,
        &[
            ("old", json!(["file:///w"]), 0),
            ("new", json!(["file:///w"]), 0),
        ],
    );
    assert_eq!(home.found_id("/w").as_deref(), Some("new"));

    // Matches whose transcripts are all gone: nothing, not a neighbour.
    let home = home_with_stray_transcript();
    home.write_db(true, &[("gone", json!(["file:///w"]), 1)]);
    assert_eq!(
        reason(discover_by_cwd(home.path(), Some(Path::new("/w")))),
        NotFoundReason::NoTranscriptForWorkspace {
            cwd: "/w".into(),
            matches: 1
        }
    );
}

/// A transcript outside `brain/` that a traversing conversation id (`../x`)
/// would reach.
fn write_escaped_transcript(home: &Home) {
    let escaped = home
        .path()
        .join(".gemini/antigravity-cli/x/.system_generated/logs");
    fs::create_dir_all(&escaped).unwrap();
    fs::write(
        escaped.join("transcript.jsonl"),
        jsonl(&[user(0, "escaped")]),
    )
    .unwrap();
}

#[test]
fn index_rows_cannot_escape_brain() {
    let home = Home::new();
    write_escaped_transcript(&home);
    home.write_db(true, &[("../x", json!(["file:///w"]), 1)]);
    assert!(matches!(
        reason(discover_by_cwd(home.path(), Some(Path::new("/w")))),
        NotFoundReason::NoTranscriptForWorkspace { .. }
    ));
}

#[test]
fn path_traversing_session_ids_find_nothing() {
    let home = Home::new();
    write_escaped_transcript(&home);
    let long = "a".repeat(10_000);
    for id in ["../x", "..", ".", "", "a/b", "x\0", "/etc", long.as_str()] {
        assert!(transcript_path(home.path(), id).is_none(), "{id:?}");
        assert!(
            matches!(
                reason(discover_by_session(home.path(), id)),
                NotFoundReason::InvalidSessionId { .. }
            ),
            "{id:?}"
        );
    }
    let service = HistoryService::with_default_readers();
    assert!(service
        .discover("agy", home.path(), &Locator::SessionId("../x".into()))
        .path()
        .is_none());
}

#[test]
fn database_is_byte_identical_and_gains_no_side_files() {
    let home = home_with_stray_transcript();
    home.write_transcript("conv", &[user(0, "mine")]);
    home.write_db(true, &[("conv", json!(["file:///w"]), 1)]);
    let before = fs::read(home.db_path()).unwrap();
    let mtime_before = fs::metadata(home.db_path()).unwrap().modified().unwrap();
    for cwd in ["/w", "/nope"] {
        discover_by_cwd(home.path(), Some(Path::new(cwd)));
    }
    assert_eq!(home.found_id("/w").as_deref(), Some("conv"));
    assert_eq!(fs::read(home.db_path()).unwrap(), before);
    assert_eq!(
        fs::metadata(home.db_path()).unwrap().modified().unwrap(),
        mtime_before
    );
    assert_eq!(home.side_files(), Vec::<String>::new());
}

#[test]
fn live_wal_database_is_read_without_touching_the_main_file() {
    let home = Home::new();
    home.write_transcript("committed", &[user(0, "a")]);
    home.write_transcript("in-wal", &[user(0, "b")]);
    home.write_db(true, &[("committed", json!(["file:///w"]), 1)]);
    // agy still running: its connection holds the WAL, and the newest row
    // lives only there.
    let writer = Connection::open(home.db_path()).unwrap();
    let mode: String = writer
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    writer.execute_batch("PRAGMA wal_autocheckpoint=0").unwrap();
    writer
        .execute(
            "INSERT INTO conversation_summaries VALUES ('in-wal', 't', '[\"file:///w\"]', 2)",
            [],
        )
        .unwrap();
    let before = fs::read(home.db_path()).unwrap();
    assert!(home
        .side_files()
        .contains(&"conversation_summaries.db-wal".to_string()));
    assert_eq!(home.found_id("/w").as_deref(), Some("in-wal"));
    assert_eq!(fs::read(home.db_path()).unwrap(), before);
    drop(writer);
}

#[test]
fn steps_are_ordered_by_step_index() {
    let unindexed =
        json!({"type": "RUN_COMMAND", "source": "MODEL", "content": "unindexed output"});
    let t = parse_transcript_bytes(&jsonl(&[
        exec(3, "RUN_COMMAND", "second output"),
        unindexed,
        planner(1, "Two calls.", &["one", "two"]),
        user(0, "start"),
        exec(2, "VIEW_FILE", "first output"),
    ]));
    let messages = t.messages();
    let got: Vec<(HistoryRole, &str, Option<&str>)> = messages
        .iter()
        .map(|m| (m.role, m.text.as_str(), m.tool_name.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (HistoryRole::User, "start", None),
            (HistoryRole::Assistant, "Two calls.", None),
            (HistoryRole::ToolResult, "first output", Some("one")),
            (HistoryRole::ToolResult, "second output", Some("two")),
            // No index: it stays after the line above it (step 3).
            (
                HistoryRole::ToolResult,
                "unindexed output",
                Some("RUN_COMMAND")
            ),
        ]
    );
    assert_eq!(messages[4].source_ref, "#line=2");
    assert_eq!(messages[0].source_ref, "#step=0");
}

#[test]
fn default_api_prefix_is_stripped_and_args_decoded() {
    let bytes = jsonl(&[
        json!({"step_index": 0, "type": "PLANNER_RESPONSE", "source": "MODEL", "tool_calls": [
            {"name": "default_api:run_command",
             "args": {"CommandLine": "\"ls -la\"", "Cwd": "\"/tmp\"", "Blocking": "true",
                      "WaitMs": "500", "Plain": "not json", "Nested": "{\"a\":[1,2]}"}},
            {"name": "default_api:view_file", "args": "{\"AbsolutePath\":\"\\\"/x\\\"\"}"},
            {"name": "default_api:"},
        ]}),
        exec(1, "RUN_COMMAND", "ok"),
    ]);
    let t = parse_transcript_bytes(&bytes);
    assert_eq!(tool_names(&t.messages()), ["run_command"]);
    let import = t.to_import();
    let calls: Vec<(&str, Value)> = import
        .items
        .iter()
        .filter_map(|item| match item {
            Item::ToolCall {
                name, arguments, ..
            } => Some((name.as_str(), serde_json::from_str(arguments).unwrap())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            (
                "run_command",
                json!({"CommandLine": "ls -la", "Cwd": "/tmp", "Blocking": true, "WaitMs": 500,
                       "Plain": "not json", "Nested": {"a": [1, 2]}})
            ),
            ("view_file", json!({"AbsolutePath": "/x"})),
            ("unknown", json!({})),
        ]
    );
}

#[test]
fn a_ten_megabyte_line_is_read_whole() {
    let big = "x".repeat(10 * 1024 * 1024);
    let home = Home::new();
    let path = home.write_transcript(
        "big",
        &[
            user(0, "dump it"),
            planner(1, "", &["view_file"]),
            exec(2, "VIEW_FILE", &big),
        ],
    );
    let messages = agy::AgyReader.read_messages(&path).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].text.len(), big.len());
    let import = agy::AgyReader.read_import(&path).unwrap();
    match import.items.last() {
        Some(Item::ToolResult {
            summary, content, ..
        }) => {
            assert!(summary.chars().count() <= 201);
            assert_eq!(content.as_ref().map(String::len), Some(big.len()));
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
}

#[test]
fn non_utf8_bytes_are_replaced_not_fatal() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(
        b"{\"step_index\":0,\"type\":\"USER_INPUT\",\"content\":\"caf\xE9 \xFF\xFE\"}\n",
    );
    bytes.extend_from_slice(b"\xFF\xFF\xFF garbage \xC3\n");
    bytes.extend_from_slice(
        b"\xEF\xBB\xBF{\"step_index\":1,\"type\":\"PLANNER_RESPONSE\",\"content\":\"ok\"}\n",
    );
    let t = parse_transcript_bytes(&bytes);
    let messages = t.messages();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0].text, "caf\u{FFFD} \u{FFFD}\u{FFFD}");
    assert_eq!(messages[1].text, "ok");
    // A byte-order mark does not cost a line, wherever it is.
    assert_eq!(t.malformed_lines, 1);
    let with_bom =
        parse_transcript_bytes(b"\xEF\xBB\xBF{\"type\":\"USER_INPUT\",\"content\":\"hi\"}");
    assert_eq!(with_bom.messages().len(), 1);
}

#[test]
fn results_without_output_get_a_placeholder() {
    let t = parse_transcript_bytes(&jsonl(&[
        planner(0, "", &["write_to_file"]),
        json!({"step_index": 1, "type": "WRITE_TO_FILE", "status": "DONE"}),
    ]));
    let messages = t.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].text, "(WRITE_TO_FILE produced no output)");
    assert_eq!(messages[0].tool_name.as_deref(), Some("write_to_file"));
    match &t.to_import().items[1] {
        Item::ToolResult {
            summary, content, ..
        } => {
            assert_eq!(summary, "(WRITE_TO_FILE produced no output)");
            assert_eq!(content, &None);
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
}

#[test]
fn system_entries_are_skipped_except_errors() {
    let messages = parse(&[
        planner(0, "Calling.", &["run_command"]),
        json!({"step_index": 1, "source": "SYSTEM", "type": "USER_INPUT", "content": "injected"}),
        json!({"step_index": 2, "source": "SYSTEM", "type": "PLANNER_RESPONSE", "content": "internal"}),
        json!({"step_index": 3, "source": "SYSTEM", "type": "RUN_COMMAND", "content": "internal run"}),
        exec(4, "RUN_COMMAND", "real output"),
        json!({"step_index": 5, "source": "SYSTEM", "type": "ERROR_MESSAGE", "content": "quota exceeded"}),
    ]);
    let got: Vec<&str> = messages.iter().map(|m| m.text.as_str()).collect();
    // The skipped SYSTEM user input did not clear the queue either.
    assert_eq!(got, ["Calling.", "real output", "quota exceeded"]);
    assert_eq!(tool_names(&messages), ["run_command", "ERROR_MESSAGE"]);
}

#[test]
fn json_lines_match_the_cli_form() {
    let messages = parse(&[user(0, "hi"), exec(1, "RUN_COMMAND", "out")]);
    let lines: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::from_str(&m.to_json_line()).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"role": "user", "text": "hi", "tool_name": null, "is_error": false,
                   "timestamp": "2025-06-01T10:00:00Z", "ref": "#step=0"}),
            json!({"role": "tool_result", "text": "out", "tool_name": "RUN_COMMAND",
                   "is_error": false, "timestamp": "2025-06-01T10:00:01Z", "ref": "#step=1"}),
        ]
    );
}

// --------------------------------------------------------------- import

fn import_fixture() -> Vec<u8> {
    jsonl(&[
        user(0, "do two things"),
        json!({"step_index": 1, "source": "MODEL", "type": "PLANNER_RESPONSE",
               "content": [{"text": "On it."}, {"text": "Both now."}],
               "tool_calls": [{"name": "default_api:run_command", "args": {"CommandLine": "\"make\""}},
                              {"name": "view_file", "args": {"AbsolutePath": "\"/a\""}}]}),
        json!({"step_index": 2, "source": "MODEL", "type": "RUN_COMMAND", "output": "built\nall good",
               "exit_code": 0}),
        json!({"step_index": 3, "source": "MODEL", "type": "VIEW_FILE", "status": "ERROR",
               "content": "no such file"}),
        planner(4, "Now a third.", &["grep_search"]),
        user(5, "never mind"),
        exec(6, "LIST_DIRECTORY", "orphan listing"),
    ])
}

#[test]
fn import_pairs_calls_and_results_with_deterministic_ids() {
    let t = AgyTranscript::parse(&import_fixture(), "/h/transcript.jsonl");
    let import = t.to_import();
    assert_eq!(
        import,
        AgyTranscript::parse(&import_fixture(), "/h/transcript.jsonl").to_import()
    );
    let want = vec![
        Item::user_text("do two things"),
        Item::Message {
            extra: Default::default(),
            id: None,
            role: Role::Assistant,
            content: vec![
                ContentPart::Text {
                    text: "On it.".into(),
                },
                ContentPart::Text {
                    text: "Both now.".into(),
                },
            ],
            status: None,
        },
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: "agy-1-0".into(),
            name: "run_command".into(),
            arguments: r#"{"CommandLine":"make"}"#.into(),
            status: None,
        },
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: "agy-1-1".into(),
            name: "view_file".into(),
            arguments: r#"{"AbsolutePath":"/a"}"#.into(),
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "agy-1-0".into(),
            summary: "built".into(),
            content: Some("built\nall good\nexit code: 0".into()),
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "agy-1-1".into(),
            summary: "no such file".into(),
            content: Some("no such file".into()),
        },
        Item::assistant_text("Now a third."),
        // Unpaired: the user moved on. No result is invented.
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: "agy-4-0".into(),
            name: "grep_search".into(),
            arguments: r#"{"Input":"args are inputs"}"#.into(),
            status: None,
        },
        Item::user_text("never mind"),
        // Orphan: an id of its own, and no call is invented for it.
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "agy-6-result".into(),
            summary: "orphan listing".into(),
            content: Some("orphan listing".into()),
        },
    ];
    assert_eq!(import.items, want);
    assert_eq!(import.extension_domain, "history.agy");
    assert_eq!(
        import.provenance,
        json!({"reader": "agy-jsonl", "transcript": "/h/transcript.jsonl",
               "steps": [0, 1, 2, 3, 4, 5, 6], "unindexed_lines": [], "malformed_lines": 0,
               "error_call_ids": ["agy-1-1"]})
    );
}

#[test]
fn repeated_or_missing_step_indexes_still_give_unique_call_ids() {
    let t = parse_transcript_bytes(&jsonl(&[
        planner(1, "", &["a"]),
        planner(1, "", &["b"]),
        json!({"type": "PLANNER_RESPONSE", "tool_calls": [{"name": "c"}]}),
    ]));
    let ids: Vec<String> = t
        .to_import()
        .items
        .iter()
        .filter_map(|i| i.call_id().map(str::to_owned))
        .collect();
    assert_eq!(ids, ["agy-1-0", "agy-1-line2-0", "agy-line3-0"]);
    assert_eq!(t.to_import().provenance["unindexed_lines"], json!([3]));
}

// ------------------------------------------------------------- property

fn step_strategy() -> impl Strategy<Value = Value> {
    let step_type = prop::sample::select(vec![
        "USER_INPUT",
        "PLANNER_RESPONSE",
        "RUN_COMMAND",
        "VIEW_FILE",
        "LIST_DIRECTORY",
        "ERROR_MESSAGE",
        "GENERIC",
        "WHATEVER",
    ]);
    let source = prop::sample::select(vec!["USER_EXPLICIT", "MODEL", "SYSTEM"]);
    let content = prop_oneof![
        ".{0,8}".prop_map(Value::from),
        prop::collection::vec(".{0,4}", 0..3).prop_map(|v| json!(v)),
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
    ];
    let calls = prop::collection::vec(("[a-z:_]{0,12}", ".{0,6}"), 0..3);
    (
        prop::option::of(0u64..20),
        step_type,
        source,
        content,
        calls,
        prop::option::of(-2i64..3),
    )
        .prop_map(|(index, ty, source, content, calls, exit)| {
            let mut step = json!({"type": ty, "source": source, "content": content});
            if let Some(i) = index {
                step["step_index"] = json!(i);
            }
            if let Some(code) = exit {
                step["exit_code"] = json!(code);
            }
            step["tool_calls"] = calls
                .into_iter()
                .map(|(name, arg)| json!({"name": name, "args": {"A": arg}}))
                .collect();
            step
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let t = parse_transcript_bytes(&bytes);
        let _ = t.messages();
        let _ = t.compact();
        let _ = t.to_import();
    }

    #[test]
    fn arbitrary_lines_never_panic(lines in prop::collection::vec(
        prop_oneof![".{0,40}".prop_map(String::from), step_strategy().prop_map(|v| v.to_string())],
        0..20,
    )) {
        let t = parse_transcript_bytes(lines.join("\n").as_bytes());
        let _ = t.messages();
        let _ = t.to_import();
    }

    #[test]
    fn results_only_reference_earlier_calls_and_ids_are_unique(
        steps in prop::collection::vec(step_strategy(), 0..30),
    ) {
        let t = parse_transcript_bytes(&jsonl(&steps));
        let import = t.to_import();
        let mut calls = std::collections::HashSet::new();
        let mut results = std::collections::HashSet::new();
        for item in &import.items {
            match item {
                Item::ToolCall { call_id, .. } => prop_assert!(calls.insert(call_id.clone())),
                Item::ToolResult { call_id, .. } => {
                    // Each call gets at most one result; a result either
                    // answers an earlier call or has an id of its own.
                    prop_assert!(results.insert(call_id.clone()));
                    prop_assert!(calls.contains(call_id) || call_id.ends_with("-result"));
                }
                _ => {}
            }
        }
        let tool_results = t.messages().iter().filter(|m| m.role == HistoryRole::ToolResult).count();
        prop_assert_eq!(tool_results, results.len());
    }
}

/// Import writes a session that restores to the converted items, records its
/// provenance, and leaves unpaired calls for the ready-to-send check to report.
#[test]
fn import_then_restore_reports_unpaired_calls() {
    let home = Home::new();
    let path = home.path().join("t.jsonl");
    let lines = [
        json!({"step_index": 0, "source": "USER_EXPLICIT", "type": "USER_INPUT", "status": "DONE", "content": "list files"}),
        json!({"step_index": 1, "source": "MODEL", "type": "PLANNER_RESPONSE", "status": "DONE", "content": "Looking.",
               "tool_calls": [{"name": "list_dir", "args": {"path": "\"/tmp\""}}, {"name": "view_file", "args": {"path": "\"/a\""}}]}),
        json!({"step_index": 2, "source": "MODEL", "type": "LIST_DIRECTORY", "status": "DONE", "content": "a b c"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(&path, text).unwrap();
    let import = AgyTranscript::read(&path).unwrap().to_import();
    let root = tempfile::tempdir().unwrap();
    let store = session_store::Store::open(root.path()).unwrap();
    let id = import.write_to(&store).unwrap();
    let state = store.restore(id).unwrap();
    let expected = import.items.clone();
    assert_eq!(state.history, expected);
    assert_eq!(state.extensions.len(), 1);
    assert_eq!(state.extensions[0].domain, "history.agy");
    let problems = state.check();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(matches!(
        &problems[0],
        session_store::Problem::CallWithoutResult { .. }
    ));
}

/// The `history agy` command: JSON lines, the compact summary, import, the
/// readable form, and "nothing found" (nothing on stdout, one reason line on
/// stderr, exit 0).
#[test]
fn cli_history_agy() {
    let home = Home::new();
    home.write_transcript(
        "conv-cli",
        &[
            user(0, "run the tests"),
            planner(1, "Running them.", &["run_command"]),
            exec(2, "RUN_COMMAND", "ok 12 passed"),
            planner(3, "All green.", &[]),
        ],
    );
    home.write_db(true, &[("conv-cli", json!(["file:///work/proj/"]), 5)]);
    let root = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("session-store")
            .unwrap()
            .arg("--root")
            .arg(root.path())
            .args(["history", "agy", "--home"])
            .arg(home.path())
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            stderr,
        )
    };

    let (code, stdout, _) = run(&["--session", "conv-cli", "--json"]);
    assert_eq!(code, Some(0));
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["role"], "user");
    assert_eq!(lines[0]["tool_name"], Value::Null);
    assert_eq!(lines[0]["is_error"], false);
    assert_eq!(lines[2]["role"], "tool_result");
    assert_eq!(lines[2]["tool_name"], "run_command");
    assert!(lines[2]["ref"].as_str().unwrap().contains("#step=2"));

    let (code, stdout, _) = run(&["--cwd", "/work/proj", "--compact"]);
    assert_eq!(code, Some(0));
    let compact: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(compact["message_count"], 4);
    assert_eq!(compact["last_assistant_message"]["text"], "All green.");

    let (code, stdout, _) = run(&["--cwd", "/work/proj"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("run the tests") && stdout.contains("run_command"),
        "{stdout}"
    );

    let (code, stdout, _) = run(&["--session", "conv-cli", "--import"]);
    assert_eq!(code, Some(0));
    let id: session_store::SessionId = stdout.trim().parse().unwrap();
    let store = session_store::Store::open(root.path()).unwrap();
    let state = store.restore(id).unwrap();
    assert_eq!(
        state.history.len(),
        5,
        "user, assistant, call, result, assistant"
    );
    assert!(state.check().is_empty(), "{:?}", state.check());
    drop(store);

    // Fail closed: a child directory of the workspace matches nothing.
    let (code, stdout, stderr) = run(&["--cwd", "/work/proj/sub", "--verbose"]);
    assert_eq!(code, Some(0));
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (code, stdout, stderr) = run(&["--session", "../escape"]);
    assert_eq!(code, Some(0));
    assert!(stdout.is_empty() && stderr.lines().count() == 1, "{stderr}");
}
