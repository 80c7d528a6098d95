//! Guards against the `session-store` command breaking the interface scripts rely on:
//! wrong output, a lossy export/import, hostile files that import or panic, damage or a
//! held lock that goes unreported, and exit codes other than 0, 1 and 2.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;
use session_store::{
    EntryHash, Item, LogEntry, LogOptions, RequestConfig, SessionId, Store, StoreOptions,
};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_session-store");

/// Long enough for a debug build on a busy machine; short enough that a hang fails.
const TIMEOUT: Duration = Duration::from_secs(120);

/// What one run of the command gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The command with a clean environment: the store comes only from what a test sets.
fn bare() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("SESSION_STORE_DIR")
        .env_remove("XDG_DATA_HOME")
        .timeout(TIMEOUT);
    c
}

/// The command on the store at `root`.
fn cmd(root: &Path) -> Command {
    let mut c = bare();
    c.arg("--root").arg(root);
    // Relative paths a command might write land in the test's directory.
    if let Some(dir) = root.parent() {
        c.current_dir(dir);
    }
    c
}

/// Runs to the end. Whatever the input, the command must not panic.
fn finish(c: &mut Command) -> Run {
    let out = c.output().expect("spawn session-store");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "the command panicked: {}",
        run.stderr
    );
    run
}

fn run(root: &Path, args: &[&str]) -> Run {
    finish(cmd(root).args(args))
}

/// Runs, expects success, returns stdout.
fn ok(root: &Path, args: &[&str]) -> String {
    let r = run(root, args);
    assert_eq!(r.code, Some(0), "{args:?} failed: {}", r.stderr);
    r.stdout
}

/// Asserts a runtime error: exactly one line on stderr, and exit 1, or 3
/// when what the command was given does not exist ("not found"). Returns
/// that line.
fn one_line_error(r: &Run, what: &str) -> String {
    let expected = if r.stderr.starts_with("error: not found") {
        3
    } else {
        1
    };
    assert_eq!(
        r.code,
        Some(expected),
        "{what}: expected exit {expected}; stdout {:?} stderr {:?}",
        r.stdout,
        r.stderr
    );
    let line = r.stderr.trim_end_matches('\n');
    assert!(
        !line.is_empty() && !line.contains('\n'),
        "{what}: the error is not one line: {:?}",
        r.stderr
    );
    assert!(
        line.starts_with("error: "),
        "{what}: not an error line: {line:?}"
    );
    line.to_string()
}

/// Sessions present under the root, counted as directories so that a
/// half-created session (directory but no catalog) counts too.
fn session_dirs(root: &Path) -> usize {
    match fs::read_dir(root.join("sessions")) {
        Ok(rd) => rd.count(),
        Err(_) => 0,
    }
}

/// A small session written through the library: a SessionStart, then per
/// turn a user input, an assistant reply and a turn end. The store is closed.
fn build_session(root: &Path, turns: &[&str]) -> (SessionId, EntryHash) {
    let store = Store::open(root).unwrap();
    let (id, mut head) = store
        .create_session(
            Some("You are terse."),
            RequestConfig::model("test-model"),
            &[],
        )
        .unwrap();
    for (i, text) in turns.iter().enumerate() {
        store
            .save_delta(
                id,
                &mut head,
                &[
                    Item::user_text(*text),
                    Item::assistant_text(format!("reply {i}")),
                ],
            )
            .unwrap();
        let end = LogEntry::TurnEnd {
            ts: session_store::schema::now_ms(),
            turn_count: i as u64 + 1,
        };
        store.save_entries(id, &mut head, &[end]).unwrap();
    }
    store.close().unwrap();
    (id, head)
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn ls_ids(root: &Path) -> Vec<String> {
    json_lines(&ok(root, &["ls", "--json"]))
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// Parses the stdout of `import` or `fork`, which must be the new id and nothing else.
fn printed_id(stdout: &str) -> String {
    let id = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("the output is not one line: {stdout:?}"));
    assert!(
        id.parse::<SessionId>().is_ok() && !id.contains('\n'),
        "printed more than the new id: {stdout:?}"
    );
    id.to_string()
}

fn store_dir() -> (TempDir, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().join("store");
    (tmp, root)
}

#[test]
fn demo_with_root_writes_sessions_that_verify() {
    let (_tmp, root) = store_dir();
    let r = run(&root, &["demo", "--sessions", "3", "--turns", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.stdout.lines().next(),
        Some(format!("store: {}", root.display()).as_str())
    );
    // Progress bars are for terminals only.
    assert_eq!(r.stderr, "");
    assert!(ls_ids(&root).len() >= 3);
    let verified = ok(&root, &["verify", "--all"]);
    assert!(verified.lines().count() >= 3);
    assert!(verified.lines().all(|l| l.contains(": ok, ")), "{verified}");
}

#[test]
fn demo_without_root_writes_into_a_fresh_temporary_directory() {
    let tmp = TempDir::new().unwrap();
    let r = finish(
        bare()
            .env("TMPDIR", tmp.path())
            .env("HOME", tmp.path())
            .args(["demo", "--sessions", "1", "--turns", "1"]),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    let root = PathBuf::from(first.strip_prefix("store: ").unwrap());
    assert!(root.starts_with(tmp.path()), "{first}");
    assert!(!ls_ids(&root).is_empty());
    assert!(!tmp.path().join(".local/share/session-store").exists());
}

#[test]
fn store_is_found_through_session_store_dir_then_xdg_data_home() {
    let tmp = TempDir::new().unwrap();
    let env_root = tmp.path().join("from-env");
    let (env_id, _) = build_session(&env_root, &["in the env store"]);
    let xdg = tmp.path().join("xdg");
    let (xdg_id, _) = build_session(&xdg.join("session-store"), &["in the xdg store"]);

    let r = finish(bare().env("SESSION_STORE_DIR", &env_root).args(["ls"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains(&env_id.to_string()), "{}", r.stdout);
    assert!(!r.stdout.contains(&xdg_id.to_string()));

    let r = finish(bare().env("XDG_DATA_HOME", &xdg).args(["ls"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains(&xdg_id.to_string()), "{}", r.stdout);
    assert!(!r.stdout.contains(&env_id.to_string()));
}

#[test]
fn ls_shows_every_session_newest_first_and_json_is_one_object_per_line() {
    let (_tmp, root) = store_dir();
    let (older, _) = build_session(&root, &["the older one"]);
    let (newer, head) = build_session(&root, &["the newer one", "second turn"]);

    let table = ok(&root, &["ls"]);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with(&newer.to_string()) && rows[0].contains("the newer one"));
    assert!(rows[1].starts_with(&older.to_string()) && rows[1].contains("the older one"));

    let objects = json_lines(&ok(&root, &["ls", "--json"]));
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[0]["id"], newer.to_string());
    assert_eq!(objects[0]["entries"], 7);
    assert_eq!(objects[0]["head"], head.to_string());
    assert_eq!(objects[0]["title"], "the newer one");
    assert_eq!(objects[1]["id"], older.to_string());
    assert_eq!(objects[1]["entries"], 4);
}

#[test]
fn show_prints_a_plain_transcript_and_cuts_long_texts_unless_full() {
    let (_tmp, root) = store_dir();
    let long = format!("start {} end", "word ".repeat(300));
    let (id, _) = build_session(&root, &["short question", &long]);
    let id = id.to_string();

    let cut = ok(&root, &["show", &id]);
    // stdout is a pipe here: no colours.
    assert!(!cut.contains('\x1b'), "{cut:?}");
    assert!(cut.contains("system: You are terse."));
    assert!(cut.contains("user: short question"));
    assert!(cut.contains("assistant: reply 0"));
    assert!(cut.contains("user: start word"));
    assert!(!cut.contains(" end"), "a long text was not cut");
    assert!(cut.contains("more chars]"));
    assert!(cut.contains("-- 2 turns, interrupted: false"));

    let full = ok(&root, &["show", &id, "--full"]);
    assert!(full.contains(&long));
    assert!(!full.contains("more chars]"));
}

#[test]
fn export_writes_the_same_wire_lines_to_stdout_and_to_a_file() {
    let (tmp, root) = store_dir();
    let (id, head) = build_session(&root, &["export me"]);
    let id = id.to_string();

    let stdout = ok(&root, &["export", &id]);
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 4);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"], i as u64);
    }
    assert_eq!(lines[0]["kind"], "session_start");
    assert_eq!(lines[0]["prev_hash"], Value::Null);
    assert_eq!(lines[1]["prev_hash"], lines[0]["hash"]);
    assert_eq!(lines[3]["hash"], head.to_string());

    let file = tmp.path().join("one.jsonl");
    let printed = ok(&root, &["export", &id, "-o", file.to_str().unwrap()]);
    assert_eq!(printed, "");
    assert_eq!(fs::read_to_string(&file).unwrap(), stdout);
}

#[test]
fn export_all_writes_one_file_per_session() {
    let (tmp, root) = store_dir();
    let (a, _) = build_session(&root, &["first"]);
    let (b, _) = build_session(&root, &["second", "more"]);
    let dir = tmp.path().join("out");

    let r = run(&root, &["export", "--all", "-o", dir.to_str().unwrap()]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // A closing summary, on stderr.
    assert!(
        r.stderr.starts_with("exported 2 of 2 sessions to "),
        "{}",
        r.stderr
    );
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut expected = vec![format!("{a}.jsonl"), format!("{b}.jsonl")];
    expected.sort();
    assert_eq!(names, expected);
    for id in [a, b] {
        let id = id.to_string();
        assert_eq!(
            fs::read_to_string(dir.join(format!("{id}.jsonl"))).unwrap(),
            ok(&root, &["export", &id])
        );
    }
}

#[test]
fn export_import_export_is_byte_identical_apart_from_the_id() {
    let (tmp, root) = store_dir();
    // The demo writes every entry kind the runtime produces, forks included.
    ok(&root, &["demo", "--sessions", "3", "--turns", "2"]);
    let ids = ls_ids(&root);
    for (n, id) in ids.iter().enumerate() {
        let first = ok(&root, &["export", id]);
        let file = tmp.path().join(format!("{n}.jsonl"));
        fs::write(&file, &first).unwrap();

        let r = run(&root, &["import", file.to_str().unwrap()]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert_eq!(r.stderr, "");
        let new = printed_id(&r.stdout);
        assert_ne!(&new, id);
        let second = ok(&root, &["export", &new]);
        assert_eq!(second.replace(&new, id), first, "session {id}");
    }
}

#[test]
fn import_reads_stdin_and_assigns_seq_and_hashes_when_absent() {
    let (tmp, root) = store_dir();
    let (id, head) = build_session(&root, &["from stdin", "and more"]);
    let exported = ok(&root, &["export", &id.to_string()]);

    let r = finish(
        cmd(&root)
            .args(["import", "-"])
            .write_stdin(exported.clone()),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let new = printed_id(&r.stdout);
    assert_eq!(ok(&root, &["export", &new]), exported);

    // Without seq/hash/prev_hash, import computes them: the same chain.
    let bare_lines: String = json_lines(&exported)
        .into_iter()
        .map(|mut v| {
            let o = v.as_object_mut().unwrap();
            o.remove("seq");
            o.remove("hash");
            o.remove("prev_hash");
            format!("{v}\n")
        })
        .collect();
    let file = tmp.path().join("bare.jsonl");
    fs::write(&file, bare_lines).unwrap();
    let new = printed_id(&ok(&root, &["import", file.to_str().unwrap()]));
    let again = json_lines(&ok(&root, &["export", &new]));
    assert_eq!(again.last().unwrap()["hash"], head.to_string());
    assert_eq!(session_dirs(&root), 3);
}

/// Imports `file`, expects nothing imported and one error line naming the file and `line`.
fn assert_import_rejected(root: &Path, file: &Path, line: u64, what: &[&str]) {
    let before = session_dirs(root);
    let r = run(root, &["import", file.to_str().unwrap()]);
    let err = one_line_error(&r, &format!("import {}", file.display()));
    assert_eq!(r.stdout, "", "a rejected import printed an id");
    assert_eq!(
        session_dirs(root),
        before,
        "a rejected import left a session"
    );
    assert!(
        err.len() < 4096,
        "the error echoes the input: {} bytes",
        err.len()
    );
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains(&format!("line {line}")), "{err}");
    for w in what {
        assert!(err.contains(w), "{err} does not mention {w:?}");
    }
}

/// An exported session of 7 lines, to be spoiled one line at a time.
fn exported_lines(root: &Path) -> Vec<String> {
    let (id, _) = build_session(root, &["hello there", "second turn"]);
    let text = ok(root, &["export", &id.to_string()]);
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 7);
    lines
}

fn write_lines(path: &Path, lines: &[String]) {
    fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn import_rejects_a_bad_json_line() {
    let (tmp, root) = store_dir();
    let mut lines = exported_lines(&root);
    let half = lines[2].len() / 2;
    lines[2].truncate(half);
    let file = tmp.path().join("bad-json.jsonl");
    write_lines(&file, &lines);
    assert_import_rejected(&root, &file, 3, &["malformed JSON"]);

    let r = finish(cmd(&root).args(["import", "-"]).write_stdin("{\"kind\":\n"));
    one_line_error(&r, "import - of bad JSON");
    assert!(r.stderr.contains("<stdin>") && r.stderr.contains("line 1"));
}

/// Replaces `from` with `to` once in line `index` (0-based) of an export,
/// then expects the import rejected at that line, the error mentioning `what`.
fn assert_spoiled_line_rejected(
    root: &Path,
    lines: &[String],
    index: usize,
    (from, to): (&str, &str),
    what: &str,
) {
    assert!(
        lines[index].contains(from),
        "{from:?} not in {}",
        lines[index]
    );
    let mut spoiled = lines.to_vec();
    spoiled[index] = lines[index].replacen(from, to, 1);
    let file = root
        .parent()
        .unwrap()
        .join(format!("spoiled-{index}.jsonl"));
    write_lines(&file, &spoiled);
    assert_import_rejected(root, &file, index as u64 + 1, &[what]);
}

#[test]
fn import_rejects_a_forged_hash_and_forged_content() {
    let (_tmp, root) = store_dir();
    let lines = exported_lines(&root);
    let v: Value = serde_json::from_str(&lines[2]).unwrap();
    let hash = v["hash"].as_str().unwrap();
    let other = format!(
        "{}{}",
        &hash[..63],
        if hash.ends_with('0') { "1" } else { "0" }
    );
    assert_spoiled_line_rejected(&root, &lines, 2, (hash, &other), "broken chain");
    // The text changed, the hash kept: the chain exposes it.
    let content = ("hello there", "hello THERE");
    assert_spoiled_line_rejected(&root, &lines, 1, content, "broken chain");
}

#[test]
fn import_rejects_a_seq_gap() {
    let (tmp, root) = store_dir();
    let lines = exported_lines(&root);
    let seq = ("{\"seq\":3,", "{\"seq\":4,");
    assert_spoiled_line_rejected(&root, &lines, 3, seq, "seq gap");

    // A line left out is a gap too.
    let mut lines = lines;
    lines.remove(2);
    let file = tmp.path().join("gap.jsonl");
    write_lines(&file, &lines);
    assert_import_rejected(&root, &file, 3, &["seq gap"]);
}

#[test]
fn import_rejects_an_unknown_kind() {
    let (_tmp, root) = store_dir();
    let lines = exported_lines(&root);
    let kind = ("\"kind\":\"user_input\"", "\"kind\":\"launch_missiles\"");
    assert_spoiled_line_rejected(&root, &lines, 1, kind, "launch_missiles");
}

#[test]
fn import_rejects_a_100_mb_line_without_echoing_it() {
    let (tmp, root) = store_dir();
    let lines = exported_lines(&root);
    let file = tmp.path().join("huge.jsonl");
    // Written in chunks: the test itself never holds the line.
    let mut f = std::io::BufWriter::new(fs::File::create(&file).unwrap());
    writeln!(f, "{}", lines[0]).unwrap();
    write!(
        f,
        "{{\"seq\":1,\"hash\":\"{}\",\"kind\":\"user_input\",\"ts\":1,\"item\":{{\"kind\":\"message\",\"role\":\"user\",\"content\":[{{\"kind\":\"text\",\"text\":\"",
        "ab".repeat(32)
    )
    .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..100 {
        f.write_all(&chunk).unwrap();
    }
    writeln!(f, "\"}}]}}}}").unwrap();
    f.into_inner().unwrap().sync_all().unwrap();
    assert!(fs::metadata(&file).unwrap().len() > 100 << 20);
    assert_import_rejected(&root, &file, 2, &["broken chain"]);
}

#[test]
fn import_rejects_non_utf8_bytes() {
    let (tmp, root) = store_dir();
    let lines = exported_lines(&root);
    let mut bytes = format!("{}\n", lines[0]).into_bytes();
    bytes.extend_from_slice(b"{\"seq\":1,\"kind\":\"user_input\",\"note\":\"\xff\xfe\xc3\"}\n");
    let file = tmp.path().join("latin.jsonl");
    fs::write(&file, bytes).unwrap();
    assert_import_rejected(&root, &file, 2, &["UTF-8"]);
}

#[test]
fn import_rejects_an_empty_file() {
    let (tmp, root) = store_dir();
    build_session(&root, &["already here"]);
    let file = tmp.path().join("empty.jsonl");
    fs::write(&file, "").unwrap();
    assert_import_rejected(&root, &file, 1, &["empty"]);
    fs::write(&file, "\n  \n\n").unwrap();
    assert_import_rejected(&root, &file, 1, &["empty"]);
}

#[test]
fn verify_exits_0_on_intact_sessions_by_id_and_with_all() {
    let (_tmp, root) = store_dir();
    let (a, _) = build_session(&root, &["one"]);
    let (b, _) = build_session(&root, &["two", "three"]);
    let (a, b) = (a.to_string(), b.to_string());

    let out = ok(&root, &["verify", &a]);
    assert_eq!(out.lines().count(), 1);
    assert!(out.starts_with(&format!("{a}: ok, 4 records")), "{out}");

    let r = run(&root, &["verify", "--all"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "verified 2 sessions: 2 ok, 0 damaged or not checked\n"
    );
    assert!(r.stdout.contains(&format!("{a}: ok, 4 records")));
    assert!(r.stdout.contains(&format!("{b}: ok, 7 records")));
}

/// A session of several 16 KiB segments, all sealed but the last.
fn build_rolled_session(root: &Path) -> (SessionId, Vec<PathBuf>) {
    let opts = StoreOptions::default().log(LogOptions::default().segment_size(16 << 10));
    let store = Store::open_with(root, opts).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("test-model"), &[])
        .unwrap();
    let mut turn = 0;
    while store.log(id).unwrap().segment_paths().len() < 3 {
        let text = format!("turn {turn} {}", "lorem ipsum ".repeat(100));
        store
            .save_delta(id, &mut head, &[Item::user_text(text)])
            .unwrap();
        turn += 1;
    }
    store.close().unwrap();
    drop(store);
    let mut segs: Vec<PathBuf> = fs::read_dir(root.join("sessions").join(id.to_string()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    (id, segs)
}

#[test]
fn verify_exits_1_and_names_the_segment_and_offset_of_a_flipped_byte() {
    let (_tmp, root) = store_dir();
    let (healthy, _) = build_session(&root, &["untouched"]);
    let (id, segs) = build_rolled_session(&root);
    let id = id.to_string();
    ok(&root, &["verify", &id]);

    // Inside the payload of the first record of the first (sealed) segment.
    let record_start = 256u64;
    let mut bytes = fs::read(&segs[0]).unwrap();
    bytes[record_start as usize + 64 + 8] ^= 0x01;
    fs::write(&segs[0], bytes).unwrap();

    let r = run(&root, &["verify", &id]);
    assert_eq!(r.code, Some(1), "{} {}", r.stdout, r.stderr);
    let seg_name = segs[0].file_name().unwrap().to_str().unwrap();
    let report = r.stdout.trim_end();
    assert!(report.starts_with(&format!("{id}: DAMAGED")), "{report}");
    assert!(report.contains(seg_name), "{report}");
    assert!(
        report.contains(&format!("offset {record_start}")),
        "{report}"
    );
    assert!(report.contains("seq 0"), "{report}");

    let r = run(&root, &["verify", "--all"]);
    assert_eq!(r.code, Some(1));
    assert!(r.stdout.contains(&format!("{healthy}: ok")), "{}", r.stdout);
    ok(&root, &["verify", &healthy.to_string()]);

    // Reading the damaged session is an error, never a panic or made-up data.
    for args in [
        vec!["export", id.as_str()],
        vec!["tail", id.as_str(), "--from", "0"],
    ] {
        let r = run(&root, &args);
        let err = one_line_error(&r, &args.join(" "));
        assert!(err.contains(seg_name) && err.contains("offset"), "{err}");
    }
    for args in [vec!["show", id.as_str()], vec!["stat", id.as_str()]] {
        run(&root, &args);
    }
}

#[test]
fn a_second_writer_gets_a_locked_error_while_a_process_holds_the_session() {
    let (_tmp, root) = store_dir();
    let (id, mut head) = build_session(&root, &["held"]);
    let store = Store::open(&root).unwrap();
    store.session(id).unwrap();

    let r = run(&root, &["rm", &id.to_string()]);
    let err = one_line_error(&r, "rm of a held session");
    assert!(err.contains("locked"), "{err}");
    assert!(err.contains("LOCK"), "{err}");
    // Nothing was deleted: the holder still writes.
    store
        .save_delta(id, &mut head, &[Item::user_text("still mine")])
        .unwrap();

    drop(store);
    ok(&root, &["rm", &id.to_string()]);
}

#[test]
fn read_commands_work_beside_a_live_writer() {
    let (_tmp, root) = store_dir();
    let (id, mut head) = build_session(&root, &["live session"]);
    let store = Store::open(&root).unwrap();
    store
        .save_delta(id, &mut head, &[Item::user_text("written while held")])
        .unwrap();
    let id = id.to_string();

    assert!(ok(&root, &["show", &id]).contains("user: written while held"));
    let exported = json_lines(&ok(&root, &["export", &id]));
    assert_eq!(exported.last().unwrap()["hash"], head.to_string());
    let stat: Value = serde_json::from_str(&ok(&root, &["stat", &id, "--json"])).unwrap();
    assert_eq!(stat["head_hash"], head.to_string());
    assert_eq!(json_lines(&ok(&root, &["tail", &id])).len(), 5);
    assert!(ok(&root, &["verify", &id]).contains(": ok, 5 records"));
    assert!(ls_ids(&root).contains(&id));

    // And reading did not lock the writer out.
    store
        .save_delta(id.parse().unwrap(), &mut head, &[Item::user_text("after")])
        .unwrap();
}

#[test]
fn stat_reports_segments_records_and_head() {
    let (_tmp, root) = store_dir();
    let (id, head) = build_session(&root, &["count me", "and me"]);
    let id = id.to_string();

    let text = ok(&root, &["stat", &id]);
    assert!(text.contains(&format!("session      {id}")), "{text}");
    assert!(text.contains("segments     1"), "{text}");
    assert!(text.contains("records      7"), "{text}");
    assert!(
        text.contains(&format!("head         seq 6, {head}")),
        "{text}"
    );
    assert!(text.contains("last start   seq 0"), "{text}");
    // stat checks no record: it says so instead of calling the log clean.
    assert!(
        text.contains("recovery     no torn tail; records not verified"),
        "{text}"
    );

    let out = ok(&root, &["stat", &id, "--json"]);
    assert_eq!(out.lines().count(), 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], id);
    assert_eq!(v["segments"], 1);
    assert_eq!(v["records"], 7);
    assert_eq!(v["head_seq"], 6);
    assert_eq!(v["head_hash"], head.to_string());
    assert_eq!(v["last_session_start"], 0);
    assert_eq!(v["recovery"]["torn_tail"], Value::Null);
    assert!(v["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn tail_without_follow_prints_the_last_entries_and_exits() {
    let (_tmp, root) = store_dir();
    let turns: Vec<String> = (0..5).map(|i| format!("turn {i}")).collect();
    let turns: Vec<&str> = turns.iter().map(String::as_str).collect();
    let (id, head) = build_session(&root, &turns);
    let id = id.to_string();

    let exported = ok(&root, &["export", &id]);
    let all: Vec<&str> = exported.lines().collect();
    assert_eq!(all.len(), 16);
    let tail = ok(&root, &["tail", &id]);
    let tail: Vec<&str> = tail.lines().collect();
    assert_eq!(tail, all[6..], "the last 10 entries, as exported");
    assert_eq!(json_lines(tail[9])[0]["hash"], head.to_string());

    let from = ok(&root, &["tail", &id, "--from", "2"]);
    assert_eq!(from.lines().collect::<Vec<_>>(), all[2..]);
    assert_eq!(ok(&root, &["tail", &id, "--from", "16"]), "");
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line the follower printed, as JSON; on a timeout or an early exit,
/// fails with what the child said on stderr.
fn next_json(
    rx: &mpsc::Receiver<std::io::Result<String>>,
    child: &mut KillOnDrop,
    what: &str,
) -> Value {
    match rx.recv_timeout(TIMEOUT) {
        Ok(line) => serde_json::from_str(&line.unwrap()).unwrap(),
        Err(e) => {
            let _ = child.0.kill();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err);
            panic!("tail -f printed no {what} ({e}); stderr: {err}")
        }
    }
}

#[test]
fn tail_follow_prints_an_entry_a_live_writer_appends() {
    let (_tmp, root) = store_dir();
    let (id, mut head) = build_session(&root, &["follow me"]);
    // This process is the writer for the whole test.
    let store = Store::open(&root).unwrap();
    store.session(id).unwrap();

    let mut child = KillOnDrop(
        std::process::Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .args(["tail", "-f", &id.to_string()])
            .env_remove("SESSION_STORE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The existing entries first: then the follower is past them.
    for seq in 0..4 {
        assert_eq!(next_json(&rx, &mut child, "existing entry")["seq"], seq);
    }
    store
        .save_delta(id, &mut head, &[Item::user_text("are you following?")])
        .unwrap();
    let new = next_json(&rx, &mut child, "appended entry");
    assert_eq!(new["seq"], 4);
    assert_eq!(new["hash"], head.to_string());
    assert_eq!(new["item"]["content"][0]["text"], "are you following?");
    assert_eq!(child.0.try_wait().unwrap(), None, "tail -f exited");
}

#[test]
fn fork_at_a_seq_or_a_hash_prints_the_new_id() {
    let (_tmp, root) = store_dir();
    let (id, _) = build_session(&root, &["before the fork", "after the fork"]);
    let id = id.to_string();
    let lines = json_lines(&ok(&root, &["export", &id]));
    let at = lines[3]["hash"].as_str().unwrap().to_string();

    let by_seq = printed_id(&ok(&root, &["fork", &id, "--at", "3"]));
    let by_hash = printed_id(&ok(&root, &["fork", &id, "--at", &at]));
    assert_ne!(by_seq, by_hash);

    let listed = json_lines(&ok(&root, &["ls", "--json"]));
    for fork in [&by_seq, &by_hash] {
        let info = listed.iter().find(|v| v["id"] == fork.as_str()).unwrap();
        assert_eq!(info["forked_from"]["session_id"], id.as_str());
        assert_eq!(info["forked_from"]["at_hash"], at.as_str());
        let shown = ok(&root, &["show", fork]);
        assert!(shown.contains("before the fork"), "{shown}");
        assert!(!shown.contains("after the fork"), "{shown}");
    }
    // A fork starts from one SessionStart that carries the history.
    assert_eq!(ok(&root, &["export", &by_seq]).lines().count(), 1);
}

#[test]
fn forks_are_listed_with_their_parent_and_rm_of_a_parent_says_what_happens() {
    let (_tmp, root) = store_dir();
    let (parent, _) = build_session(&root, &["before the fork", "after the fork"]);
    let parent = parent.to_string();
    let fork = printed_id(&ok(&root, &["fork", &parent, "--at", "3"]));
    let ls = ok(&root, &["ls"]);
    let row = ls.lines().find(|l| l.starts_with(&fork)).unwrap();
    assert!(row.contains(&format!("[fork of {parent}]")), "{ls}");
    let verified = ok(&root, &["verify", &fork]);
    assert!(verified.contains("link checked"), "{verified}");

    // rm of the parent: removed from the listing, kept for the fork, said on stderr.
    let r = run(&root, &["rm", &parent]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr.contains(&fork) && r.stderr.contains("kept"),
        "{}",
        r.stderr
    );
    assert_eq!(ls_ids(&root), vec![fork.clone()]);
    let shown = ok(&root, &["show", &fork]);
    assert!(shown.contains("before the fork"), "{shown}");
    assert!(!shown.contains("after the fork"), "{shown}");
    // Its export imports into an empty store, standalone.
    let export = ok(&root, &["export", &fork]);
    let (_other_tmp, other) = store_dir();
    let file = _other_tmp.path().join("fork.jsonl");
    std::fs::write(&file, &export).unwrap();
    let imported = printed_id(&ok(&other, &["import", file.to_str().unwrap()]));
    assert_eq!(ok(&other, &["show", &imported]), shown);
    // The last fork's rm collects the parent.
    assert_eq!(ok(&root, &["rm", &fork]), "");
    assert_eq!(std::fs::read_dir(root.join("retired")).unwrap().count(), 0);
}

#[test]
fn verify_reports_a_fork_whose_parent_is_gone_as_damaged() {
    let (_tmp, root) = store_dir();
    let (parent, _) = build_session(&root, &["one"]);
    let fork = printed_id(&ok(&root, &["fork", &parent.to_string(), "--at", "1"]));
    std::fs::remove_dir_all(root.join("sessions").join(parent.to_string())).unwrap();
    let r = run(&root, &["verify", &fork]);
    assert_eq!(r.code, Some(1), "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("DAMAGED") && r.stdout.contains("parent session is missing"),
        "{}",
        r.stdout
    );
}

#[test]
fn rm_deletes_a_session_and_only_that_one() {
    let (_tmp, root) = store_dir();
    let (gone, _) = build_session(&root, &["delete me"]);
    let (kept, _) = build_session(&root, &["keep me"]);
    let gone = gone.to_string();

    assert_eq!(ok(&root, &["rm", &gone]), "");
    assert_eq!(ls_ids(&root), vec![kept.to_string()]);
    assert!(!root.join("sessions").join(&gone).exists());
    let err = one_line_error(&run(&root, &["show", &gone]), "show of a deleted session");
    assert!(err.contains("not found"), "{err}");
    let err = one_line_error(&run(&root, &["rm", &gone]), "rm twice");
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn completions_print_a_bash_script() {
    let (_tmp, root) = store_dir();
    let script = ok(&root, &["completions", "bash"]);
    assert!(script.contains("complete -F"), "{script}");
    for sub in ["verify", "import", "export", "tail", "fork"] {
        assert!(script.contains(sub), "no {sub} in the script");
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let r = finish(bare().arg("--help"));
    assert_eq!(r.code, Some(0));
    let help = r.stdout;
    assert!(help.contains("Exit codes"), "{help}");
    assert!(help.contains("0 success"), "{help}");
    assert!(help.contains("1 error"), "{help}");
    assert!(help.contains("2 usage error"), "{help}");
}

#[test]
fn usage_errors_exit_2() {
    let (_tmp, root) = store_dir();
    let (id, _) = build_session(&root, &["usage"]);
    let id = id.to_string();
    let cases: &[&[&str]] = &[
        &[],
        &["frobnicate"],
        &["ls", "--yaml"],
        &["verify", &id, "--all"],
        &["verify"],
        &["export"],
        &["export", "--all"],
        &["export", &id, "--all", "-o", "x"],
        &["fork", &id],
        &["show"],
        &["import"],
        &["completions", "klingon"],
        &["demo", "--sessions", "many"],
        &["tail", &id, "--from", "-1"],
        // Hashes that do not parse are usage errors too.
        &["fork", &id, "--at", "abc"],
        &["fork", &id, "--at", &"g".repeat(64)],
        &["append", &id, "--head", "abc"],
    ];
    for args in cases {
        let r = run(&root, args);
        assert_eq!(r.code, Some(2), "{args:?}: {} {}", r.stdout, r.stderr);
        assert_eq!(r.stdout, "", "{args:?}");
        assert!(r.stderr.starts_with("error: "), "{args:?}: {}", r.stderr);
    }
    assert_eq!(session_dirs(&root), 1, "a usage error changed the store");
    // Every command that takes an id takes a session's name or a unique id
    // prefix: text that is no id is looked up (never a path), and what no
    // session answers to is not found (exit 3).
    let names: &[&[&str]] = &[
        &["show", "not-a-uuid"],
        &["show", ".."],
        &["show", "../../etc/passwd"],
        &["stat", "nope"],
        &["tail", "nope"],
        &["export", "nope"],
        &["rm", "nope"],
        &["verify", "nope"],
        &["verify", &id, "nope"],
        &["fork", "nope", "--at", "0"],
        &["append", "nope"],
    ];
    for args in names {
        let r = run(&root, args);
        assert_eq!(r.code, Some(3), "{args:?}: {} {}", r.stdout, r.stderr);
        assert!(r.stderr.contains("not found"), "{args:?}: {}", r.stderr);
    }
    assert_eq!(session_dirs(&root), 1, "a lookup changed the store");
}

#[test]
fn odd_input_gives_one_error_line_and_never_a_panic() {
    let (tmp, root) = store_dir();
    let (id, _) = build_session(&root, &["odd"]);
    let id = id.to_string();
    let missing = SessionId::new_v7().to_string();
    let dir = tmp.path().to_str().unwrap().to_string();
    let no_dir = tmp.path().join("no/such/dir/f.jsonl");
    let no_dir = no_dir.to_str().unwrap();
    let zero_hash = "0".repeat(64);
    let cases: &[&[&str]] = &[
        &["show", &missing],
        &["stat", &missing],
        &["tail", &missing],
        &["export", &missing],
        &["rm", &missing],
        &["fork", &missing, "--at", "0"],
        &["fork", &id, "--at", &zero_hash],
        &["fork", &id, "--at", "18446744073709551615"],
        &["fork", &id, "--at", "4"],
        &["export", &id, "-o", no_dir],
        &["export", "--all", "-o", "/dev/null/x"],
        &["import", no_dir],
        &["import", &dir],
    ];
    for args in cases {
        let r = run(&root, args);
        one_line_error(&r, &args.join(" "));
    }
    // verify of a session that does not exist: not found.
    let r = run(&root, &["verify", &missing]);
    assert_eq!(r.code, Some(3));
    assert_eq!(r.stderr, format!("error: not found: session {missing}\n"));
    // An empty tail range is not an error.
    assert_eq!(
        ok(&root, &["tail", &id, "--from", "18446744073709551615"]),
        ""
    );

    // A root that is a file.
    let file = tmp.path().join("a-file");
    fs::write(&file, "").unwrap();
    let r = run(&file, &["ls"]);
    one_line_error(&r, "ls with a file as root");
    assert_eq!(session_dirs(&root), 1);
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Flips a payload byte of the first record of a rolled session's first,
/// sealed segment, so that reading the session fails part of the way in.
fn damage_first_segment(segs: &[PathBuf]) {
    let mut bytes = fs::read(&segs[0]).unwrap();
    bytes[256 + 64 + 8] ^= 0x01;
    fs::write(&segs[0], bytes).unwrap();
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_failed_export_leaves_no_file_behind() {
    let (tmp, root) = store_dir();
    let (healthy, _) = build_session(&root, &["healthy"]);
    let (id, segs) = build_rolled_session(&root);
    damage_first_segment(&segs);
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();

    let file = out.join("damaged.jsonl");
    let r = run(
        &root,
        &["export", &id.to_string(), "-o", file.to_str().unwrap()],
    );
    one_line_error(&r, "export of a damaged session");
    assert_eq!(
        names_in(&out),
        Vec::<String>::new(),
        "a partial export was left"
    );

    // An existing file is replaced only by a complete export.
    fs::write(&file, "before\n").unwrap();
    let r = run(
        &root,
        &["export", &id.to_string(), "-o", file.to_str().unwrap()],
    );
    one_line_error(&r, "export over an existing file");
    assert_eq!(fs::read_to_string(&file).unwrap(), "before\n");
    fs::remove_file(&file).unwrap();

    let missing = out.join("no/such/dir/f.jsonl");
    let r = run(
        &root,
        &[
            "export",
            &healthy.to_string(),
            "-o",
            missing.to_str().unwrap(),
        ],
    );
    let err = one_line_error(&r, "export into a missing directory");
    assert!(err.contains("no/such/dir/f.jsonl"), "{err}");
    assert_eq!(names_in(&out), Vec::<String>::new());

    // --all exports the healthy session, reports the damaged one, leaves no part of it.
    let all = out.join("all");
    let r = run(&root, &["export", "--all", "-o", all.to_str().unwrap()]);
    assert_eq!(r.code, Some(1), "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&id.to_string()), "{}", r.stderr);
    assert_eq!(names_in(&all), vec![format!("{healthy}.jsonl")]);
}

#[test]
fn everything_the_cli_writes_is_private() {
    let (tmp, root) = store_dir();
    let r = run(&root, &["demo", "--sessions", "1", "--turns", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let exported: Vec<String> = names_in(&root)
        .into_iter()
        .filter(|n| n.starts_with("export-"))
        .collect();
    assert_eq!(exported.len(), 1, "{:?}", names_in(&root));
    assert_eq!(mode(&root.join(&exported[0])), 0o600, "demo's export");
    let id = ls_ids(&root)[0].clone();
    let session = root.join("sessions").join(&id);
    assert_eq!(mode(&session), 0o700, "a session's directory");
    assert_eq!(mode(&session.join("LOCK")), 0o600, "a session's LOCK");

    let file = tmp.path().join("one.jsonl");
    ok(&root, &["export", &id, "-o", file.to_str().unwrap()]);
    assert_eq!(mode(&file), 0o600, "export -o");
    let dir = tmp.path().join("all/nested");
    ok(&root, &["export", "--all", "-o", dir.to_str().unwrap()]);
    assert_eq!(mode(&dir), 0o700, "export --all directory");
    assert_eq!(mode(&tmp.path().join("all")), 0o700, "its parent");
    for name in names_in(&dir) {
        assert_eq!(mode(&dir.join(&name)), 0o600, "export --all file {name}");
    }

    let r =
        finish(
            bare()
                .env("TMPDIR", tmp.path())
                .args(["demo", "--sessions", "1", "--turns", "1"]),
        );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    let demo_root = PathBuf::from(first.strip_prefix("store: ").unwrap());
    assert_eq!(mode(&demo_root), 0o700, "demo's temporary store");
}

#[test]
fn errors_name_the_file_and_say_the_os_reason_once() {
    let (tmp, root) = store_dir();
    let file = tmp.path().join("afile");
    fs::write(&file, "").unwrap();
    // A write command there tries to make the store's directories.
    let r = run(&file, &["demo", "--sessions", "1", "--turns", "1"]);
    let err = one_line_error(&r, "a file as root");
    assert_eq!(
        err.to_lowercase().matches("not a directory").count(),
        1,
        "{err}"
    );
    assert!(err.contains("afile"), "{err}");
    // A read command only says that no store is there, and makes none.
    let err = one_line_error(&run(&file, &["ls"]), "a file as root");
    assert!(
        err.contains("no store at") && err.contains("afile"),
        "{err}"
    );

    let (id, _) = build_session(&root, &["full disk"]);
    if Path::new("/dev/full").exists() {
        let r = run(&root, &["export", &id.to_string(), "-o", "/dev/full"]);
        let err = one_line_error(&r, "export to /dev/full");
        assert!(err.contains("/dev/full"), "{err}");
        assert_eq!(err.matches("No space left").count(), 1, "{err}");
    }
}

#[test]
fn human_output_has_a_header_local_times_plurals_and_newest_update_first() {
    let (_tmp, root) = store_dir();
    let (older, head) = build_session(&root, &["older but touched last", "two"]);
    let (newer, _) = build_session(&root, &["newer"]);
    let store = Store::open(&root).unwrap();
    let mut head = head;
    // Update times are kept to the millisecond, stamped with the entries:
    // "later" must not share newer's last one.
    std::thread::sleep(std::time::Duration::from_millis(2));
    store
        .save_delta(older, &mut head, &[Item::user_text("later")])
        .unwrap();
    let (fork, _) = store.fork_at_seq(older, 6).unwrap();
    let (lone, _) = store
        .create_session(None, RequestConfig::model("m"), &[])
        .unwrap();
    store.close().unwrap();

    let table = finish(cmd(&root).env("TZ", "JST-9").arg("ls")).stdout;
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[0].starts_with("ID ") && rows[0].contains("UPDATED"),
        "{table}"
    );
    let order: Vec<&str> = rows[1..].iter().map(|r| &r[..36]).collect();
    let older_at = order.iter().position(|r| *r == older.to_string()).unwrap();
    let newer_at = order.iter().position(|r| *r == newer.to_string()).unwrap();
    assert!(older_at < newer_at, "not sorted by last update: {table}");
    assert!(rows[1..].iter().all(|r| r.contains(" JST ")), "{table}");
    assert!(rows[1..].iter().any(|r| r.contains(" B ")), "{table}");
    let utc = finish(cmd(&root).env("TZ", "UTC0").arg("ls")).stdout;
    assert!(utc.lines().skip(1).all(|r| r.contains(" UTC ")), "{utc}");

    let verified = ok(&root, &["verify", &lone.to_string(), &newer.to_string()]);
    assert!(
        verified.contains(&format!("{lone}: ok, 1 record, ")),
        "{verified}"
    );
    assert!(
        verified.contains(&format!("{newer}: ok, 4 records, ")),
        "{verified}"
    );
    assert!(!verified.contains(" bytes"), "{verified}");

    let shown = ok(&root, &["show", &fork.to_string()]);
    assert!(
        shown.trim_end().ends_with("2 turns, interrupted: false"),
        "{shown}"
    );
    let shown = ok(&root, &["show", &lone.to_string()]);
    assert!(
        shown.trim_end().ends_with("0 turns, interrupted: false"),
        "{shown}"
    );

    let demo = ok(&root, &["demo", "--sessions", "4", "--turns", "1"]);
    assert!(
        demo.contains("asked for, plus 1 from forks; 1 session compacted in place"),
        "{demo}"
    );
}

#[test]
fn append_adds_text_or_wire_entries_after_the_head_check() {
    let (tmp, root) = store_dir();
    let (id, head) = build_session(&root, &["first"]);
    let id = id.to_string();

    let r = finish(
        cmd(&root)
            .args(["append", &id, "--text"])
            .write_stdin("a note\n"),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let new_head = r.stdout.trim_end().to_string();
    assert_eq!(new_head.len(), 64, "{}", r.stdout);
    let lines = json_lines(&ok(&root, &["export", &id]));
    assert_eq!(lines.last().unwrap()["hash"], new_head.as_str());
    assert!(ok(&root, &["show", &id]).contains("user: a note\n"));

    // A stale head is refused and nothing is written.
    let r = finish(
        cmd(&root)
            .args(["append", &id, "--text", "--head", &head.to_string()])
            .write_stdin("late"),
    );
    one_line_error(&r, "append on a stale head");
    assert_eq!(json_lines(&ok(&root, &["export", &id])).len(), lines.len());

    // Wire-form entries from a file, at the given (current) head.
    let mut entry = lines[1].clone();
    for key in ["seq", "hash", "prev_hash"] {
        entry.as_object_mut().unwrap().remove(key);
    }
    let file = tmp.path().join("entries.jsonl");
    fs::write(&file, format!("{entry}\n{entry}\n")).unwrap();
    let printed = ok(
        &root,
        &["append", &id, file.to_str().unwrap(), "--head", &new_head],
    );
    let after = json_lines(&ok(&root, &["export", &id]));
    assert_eq!(after.len(), lines.len() + 2);
    assert_eq!(after.last().unwrap()["hash"], printed.trim_end());
    ok(&root, &["verify", &id]);

    // Lines that carry a seq or hash are refused: the store computes them.
    fs::write(&file, format!("{}\n", lines[1])).unwrap();
    one_line_error(
        &run(&root, &["append", &id, file.to_str().unwrap()]),
        "a line with a seq",
    );
    assert_eq!(json_lines(&ok(&root, &["export", &id])).len(), after.len());
}

#[test]
fn a_read_command_on_a_path_without_a_store_fails_and_creates_nothing() {
    let tmp = TempDir::new().unwrap();
    let missing = tmp.path().join("does/not/exist");
    for args in [&["ls"][..], &["verify", "--all"][..]] {
        let r = finish(bare().arg("--root").arg(&missing).args(args));
        let err = one_line_error(&r, "no store");
        assert!(err.contains("no store at"), "{args:?}: {err}");
        assert!(err.contains("does/not/exist"), "{args:?}: {err}");
    }
    assert!(
        !tmp.path().join("does").exists(),
        "a read command made a store"
    );
}

/// Unmounts on drop.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn read_commands_work_on_a_read_only_medium_and_writes_say_why_they_fail() {
    let (tmp, root) = store_dir();
    let (id, _) = build_session(&root, &["one", "two"]);
    let mnt = tmp.path().join("ro");
    fs::create_dir(&mnt).unwrap();
    let bind = std::process::Command::new("mount")
        .args(["--bind"])
        .arg(&root)
        .arg(&mnt)
        .status();
    if !matches!(bind, Ok(s) if s.success()) {
        println!("read-only medium test skipped: cannot bind-mount here ({bind:?}); needs root");
        return;
    }
    let _guard = Unmount(mnt.clone());
    let remount = std::process::Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(&mnt)
        .status();
    if !matches!(remount, Ok(s) if s.success()) {
        println!("read-only medium test skipped: cannot remount read-only ({remount:?})");
        return;
    }
    let id = id.to_string();
    assert!(ok(&mnt, &["ls"]).contains(&id));
    assert!(ok(&mnt, &["show", &id]).contains("two"));
    ok(&mnt, &["stat", &id]);
    ok(&mnt, &["verify", "--all"]);
    ok(&mnt, &["tail", &id]);
    assert!(ok(&mnt, &["export", &id]).lines().count() > 2);
    let r = run(&mnt, &["rm", &id]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("Read-only file system"), "{}", r.stderr);
}

#[test]
fn ls_marks_a_session_it_cannot_read_and_lists_the_others() {
    let (_tmp, root) = store_dir();
    let (good, _) = build_session(&root, &["fine"]);
    let (bad, _) = build_session(&root, &["broken"]);
    // A damaged catalog and no listing cache: ls must read the log, and
    // cannot: its only segment's header is damaged too.
    let dir = root.join("sessions").join(bad.to_string());
    for (file, at) in [("catalog", 512 + 10), ("00000000000000000000.seg", 20)] {
        let p = dir.join(file);
        let mut b = fs::read(&p).unwrap();
        b[at] ^= 0xff;
        fs::write(&p, b).unwrap();
    }
    fs::remove_file(root.join("list.cache")).unwrap();
    let text = ok(&root, &["ls"]);
    let line = |id: SessionId| {
        text.lines()
            .find(|l| l.starts_with(&id.to_string()))
            .unwrap_or_else(|| panic!("{id} not listed: {text}"))
            .to_string()
    };
    assert!(line(good).contains("fine"), "{text}");
    assert!(line(bad).contains("DAMAGED"), "{text}");
    let json = ok(&root, &["ls", "--json"]);
    let flagged: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v.get("error").is_some())
        .collect();
    assert_eq!(flagged.len(), 1, "{json}");
    assert_eq!(flagged[0]["id"], bad.to_string());
}

/// A user who may not look into an existing store (another user's 0700
/// store) gets the OS reason for the directory that is there, once, from
/// read and write commands alike, and never "create dir" for a directory
/// that exists (issue 15, case 17). Needs root, to run the binary as
/// `nobody` with `setpriv`; elsewhere it says why it is skipped.
#[test]
fn a_store_the_user_may_not_enter_is_permission_denied_not_created() {
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if !root_user {
        println!("permission test skipped: not running as root");
        return;
    }
    let as_nobody = || {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .env_remove("SESSION_STORE_DIR")
            .env_remove("XDG_DATA_HOME")
            .timeout(TIMEOUT);
        c
    };
    if !as_nobody()
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("permission test skipped: setpriv cannot run {BIN} as nobody");
        return;
    }
    let (tmp, root) = store_dir();
    build_session(&root, &["mine"]);
    let before = names_in(&root);
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        fs::metadata(&root).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for args in [
        &["ls"][..],
        &["demo", "--sessions", "1", "--turns", "1"][..],
    ] {
        let r = finish(as_nobody().arg("--root").arg(&root).args(args));
        let err = one_line_error(&r, &format!("{args:?} as nobody"));
        assert_eq!(err.matches("Permission denied").count(), 1, "{err}");
        assert!(!err.contains("create dir"), "{err}");
        assert!(err.contains(&*root.to_string_lossy()), "{err}");
    }
    // Nothing was made there.
    assert_eq!(names_in(&root), before);
}

/// Inspection recovers nothing, so a writer's recovery is the one that cuts
/// a torn tail: what it cut is recorded durably and `stat` and `ls --json`
/// still show it afterwards (issue 15, case 4).
#[test]
fn what_a_writer_cut_stays_visible_to_stat_and_ls() {
    let (_tmp, root) = store_dir();
    let (id, head) = build_session(&root, &["before the crash"]);
    let sid = id.to_string();
    // Garbage after the last record, as a torn write leaves it.
    let dir = root.join("sessions").join(&sid);
    let seg = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "seg"))
        .unwrap();
    let v: Value = serde_json::from_str(&ok(&root, &["stat", &sid, "--json"])).unwrap();
    let torn_at = session_store::format::FIRST_RECORD_OFFSET + v["bytes"].as_u64().unwrap();
    let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xab; 48], torn_at).unwrap();
    drop(f);

    let v: Value = serde_json::from_str(&ok(&root, &["stat", &sid, "--json"])).unwrap();
    assert!(v["recovery"]["torn_tail"].is_object(), "{v}");
    assert_eq!(v["last_recovery"], Value::Null);

    // A writer opens the session: its recovery cuts the tail.
    let store = Store::open(&root).unwrap();
    let mut head = head;
    store
        .save_delta(id, &mut head, &[Item::user_text("after")])
        .unwrap();
    store.close().unwrap();

    let v: Value = serde_json::from_str(&ok(&root, &["stat", &sid, "--json"])).unwrap();
    assert_eq!(v["recovery"]["torn_tail"], Value::Null, "{v}");
    let cut = &v["last_recovery"]["report"]["torn_tail"];
    assert_eq!(cut["offset"].as_u64(), Some(torn_at), "{v}");
    assert!(v["last_recovery"]["at_ms"].as_u64().unwrap() > 0);
    let text = ok(&root, &["stat", &sid]);
    assert!(
        text.contains("last cut") && text.contains("torn tail"),
        "{text}"
    );
    let listed: Value = serde_json::from_str(ok(&root, &["ls", "--json"]).trim()).unwrap();
    assert_eq!(listed["last_recovery"], v["last_recovery"]);
}

/// Export and import are library calls: `Store::export` writes the very
/// bytes the CLI prints, and `Store::import_from` reads them back into a
/// session with the same chain (issue 17, item 5).
#[test]
fn library_export_is_the_cli_export_and_imports_back() {
    let (_tmp, root) = store_dir();
    let (id, _) = build_session(&root, &["first", "second"]);
    let cli = ok(&root, &["export", &id.to_string()]);
    let store = Store::open(&root).unwrap();
    let mut bytes = Vec::new();
    let lines = store.export(id, &mut bytes).unwrap();
    assert_eq!(String::from_utf8(bytes.clone()).unwrap(), cli);
    assert_eq!(lines, cli.lines().count() as u64);
    let first: Value = serde_json::from_str(cli.lines().next().unwrap()).unwrap();
    assert_eq!(first["prev_hash"], Value::Null);

    let copy = store.import_from(std::io::Cursor::new(&bytes)).unwrap();
    let mut again = Vec::new();
    store.export(copy, &mut again).unwrap();
    assert_eq!(again, bytes);
    // A broken line is refused with its number, and nothing is created.
    let before = store.list().unwrap().len();
    let mut bad = cli.clone();
    bad.push_str("{\"kind\":\"turn_end\"}\n");
    match store.import_from(std::io::Cursor::new(bad)) {
        Err(session_store::Error::Wire { line, .. }) => {
            assert_eq!(line, cli.lines().count() as u64 + 1)
        }
        other => panic!("expected a wire error, got {other:?}"),
    }
    assert_eq!(store.list().unwrap().len(), before);
}

/// `export --format markdown` renders the whole log readably: a heading per
/// turn, tool calls in code blocks, long results folded, a fence no output
/// can close, and the fork and compaction points marked (issue 20, item 4).
#[test]
fn markdown_export_marks_turns_tools_forks_and_compactions() {
    let (_tmp, root) = store_dir();
    let store = Store::open(&root).unwrap();
    let (id, head) = store
        .create_session(Some("Be terse."), RequestConfig::model("m1"), &[])
        .unwrap();
    let long = "line of output\n".repeat(40);
    let turn = |n: usize, output: &str| {
        vec![
            Item::user_text(format!("question {n}")),
            Item::ToolCall {
                extra: Default::default(),
                id: None,
                call_id: format!("call_{n}"),
                name: "shell".into(),
                arguments: r#"{"cmd":"ls"}"#.into(),
                status: None,
            },
            Item::ToolResult {
                extra: Default::default(),
                id: None,
                call_id: format!("call_{n}"),
                summary: String::new(),
                content: Some(output.into()),
            },
            Item::assistant_text(format!("answer {n}")),
        ]
    };
    let head = store
        .append(id, head, &turn(1, "```\nsneaky fence\n```"))
        .unwrap();
    let head = store.append(id, head, &turn(2, &long)).unwrap();
    let head = store
        .compact(id, head, &[Item::user_text("summary of two turns")])
        .unwrap();
    store.append(id, head, &turn(3, "ok")).unwrap();
    let (fork, _) = store.fork_at_seq(id, 2).unwrap();
    store.close().unwrap();

    let md = ok(&root, &["export", "--format", "markdown", &id.to_string()]);
    for want in [
        "## Turn 1",
        "## Turn 2",
        "## Turn 3",
        "**System prompt**",
        "**Tool call** `shell`",
        "\"cmd\": \"ls\"",
        "<details><summary><b>Result</b>",
        "## Compacted",
        "summary of two turns",
        "**Assistant**",
    ] {
        assert!(md.contains(want), "missing {want:?} in:\n{md}");
    }
    // The output with a fence inside sits in a longer fence.
    assert!(
        md.contains("````text\n```\nsneaky fence\n```\n````"),
        "{md}"
    );
    let md = ok(
        &root,
        &["export", "--format", "markdown", &fork.to_string()],
    );
    assert!(md.contains(&format!("Forked from session `{id}`")), "{md}");
    // Import reads no Markdown: a usage error.
    let r = run(&root, &["import", "--format", "markdown", "-"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
}

/// `grep` searches every session's texts, tool arguments and outputs,
/// prints session, seq and kind with the matching line (and context), and
/// filters by kind; no match exits 1, and a damaged session is reported
/// without stopping the others (issue 20, item 5).
#[test]
fn grep_finds_lines_across_sessions_by_kind_with_context() {
    let (_tmp, root) = store_dir();
    let store = Store::open(&root).unwrap();
    let (a, head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store
        .append(
            a,
            head,
            &[
                Item::user_text("please find the NEEDLE"),
                Item::ToolCall {
                    extra: Default::default(),
                    id: None,
                    call_id: "c1".into(),
                    name: "grep".into(),
                    arguments: r#"{"pattern":"needle"}"#.into(),
                    status: None,
                },
                Item::ToolResult {
                    extra: Default::default(),
                    id: None,
                    call_id: "c1".into(),
                    summary: String::new(),
                    content: Some("one\ntwo\nfound needle here\nthree\nfour".into()),
                },
            ],
        )
        .unwrap();
    let (b, head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store
        .append(b, head, &[Item::assistant_text("no match in this one")])
        .unwrap();
    store.close().unwrap();

    let out = ok(&root, &["grep", "needle"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with(&format!("{a} 2 assistant_items:")),
        "{out}"
    );
    assert!(lines[0].ends_with(r#"{"pattern":"needle"}"#), "{out}");
    assert_eq!(lines[1], format!("{a} 3 tool_results:found needle here"));
    // Case-insensitive, one kind, with context.
    let out = ok(&root, &["grep", "-i", "--kind", "user_input", "needle"]);
    assert_eq!(out, format!("{a} 1 user_input:please find the NEEDLE\n"));
    let out = ok(
        &root,
        &["grep", "-C", "1", "--kind", "tool_results", "needle"],
    );
    assert_eq!(
        out,
        format!(
            "{a} 3 tool_results-two\n{a} 3 tool_results:found needle here\n{a} 3 tool_results-three\n--\n"
        )
    );
    let out = ok(&root, &["grep", "-c", "-i", "needle"]);
    assert_eq!(out, format!("{a}\t3\n"));
    let out = ok(&root, &["grep", "--json", "found"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["session"], a.to_string());
    assert_eq!(v["seq"], 3);
    assert_eq!(v["kind"], "tool_results");
    assert_eq!(v["line_no"], 3);
    // Only the sessions named.
    assert_eq!(
        run(&root, &["grep", "needle", &b.to_string()]).code,
        Some(1)
    );
    assert_eq!(run(&root, &["grep", "absent-word"]).code, Some(1));
    assert_eq!(
        run(&root, &["grep", "--kind", "nonsense", "x"]).code,
        Some(2)
    );
    // A pattern that does not parse is a usage error, its message whole.
    let r = run(&root, &["grep", "(unclosed"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("regex parse error"), "{}", r.stderr);
    assert!(r.stderr.lines().count() > 2, "{}", r.stderr);

    // A damaged session is reported; the other is still searched.
    let seg = fs::read_dir(root.join("sessions").join(b.to_string()))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "seg"))
        .unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    bytes[session_store::format::FIRST_RECORD_OFFSET as usize + 70] ^= 0xff;
    fs::write(&seg, bytes).unwrap();
    let r = run(&root, &["grep", "needle"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stdout.lines().count(), 2, "{}", r.stdout);
    assert!(r.stderr.contains(&format!("session {b}")), "{}", r.stderr);
}

#[test]
fn verify_names_a_missing_payload_and_gc_removes_only_unreferenced_ones() {
    let (_tmp, root) = store_dir();
    let big = Item::ToolResult {
        extra: Default::default(),
        id: None,
        call_id: "c1".into(),
        summary: "x".repeat(40 << 10),
        content: None,
    };
    let store = Store::open(&root).unwrap();
    let (kept, _) = store
        .create_session(None, RequestConfig::default(), std::slice::from_ref(&big))
        .unwrap();
    let (gone, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    let other = Item::ToolResult {
        extra: Default::default(),
        id: None,
        call_id: "c2".into(),
        summary: "y".repeat(40 << 10),
        content: None,
    };
    store.save_delta(gone, &mut head, &[other]).unwrap();
    store.delete(gone).unwrap();
    store.close().unwrap();
    let kept = kept.to_string();
    assert!(ok(&root, &["verify", &kept]).starts_with(&format!("{kept}: ok")));
    // The deleted session's payload goes; the kept one's stays.
    let out = ok(&root, &["gc"]);
    assert!(out.contains("1 kept, 1 removed"), "{out}");
    assert!(ok(&root, &["verify", &kept]).starts_with(&format!("{kept}: ok")));
    let shown = ok(&root, &["export", &kept]);
    assert!(
        shown.contains(&"x".repeat(40 << 10)),
        "export writes it inline"
    );
    // Its payload removed by hand: verify names the record and the hash.
    let shard = fs::read_dir(root.join("payloads"))
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    let file = fs::read_dir(&shard)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let hash = file.file_name().unwrap().to_str().unwrap().to_string();
    fs::remove_file(&file).unwrap();
    let r = run(&root, &["verify", &kept]);
    assert_eq!(r.code, Some(1), "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim_end(),
        format!("{kept}: DAMAGED: payload {hash} at seq 0: missing")
    );
}
