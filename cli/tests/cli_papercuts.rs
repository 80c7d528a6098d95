//! Guards the command line against the papercuts a new user met: a closed
//! pipe that panics or stops an upload, `demo` edge cases, world-readable
//! `file://` archives, commands that take an id but not a name or prefix,
//! exit codes that mix "not found" with failures, a typo that creates a
//! store, `demo` writing into the user's store, and hints that drop
//! `--root`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use session_store::{Item, RequestConfig, SessionId, Store};

const BIN: &str = env!("CARGO_BIN_EXE_session-store");

fn bare() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("SESSION_STORE_DIR")
        .env_remove("XDG_DATA_HOME");
    c
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(root: &Path, args: &[&str]) -> Run {
    let out = bare().arg("--root").arg(root).args(args).output().unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    r
}

/// A store with `n` sessions of a few turns, the first named `user_123`.
fn store(root: &Path, n: usize) -> Vec<SessionId> {
    let store = Store::open(root).unwrap();
    let ids = (0..n)
        .map(|i| {
            let (id, mut head) = if i == 0 {
                store
                    .create_named("user_123", None, RequestConfig::model("m"), &[])
                    .unwrap()
            } else {
                store
                    .create_session(None, RequestConfig::model("m"), &[])
                    .unwrap()
            };
            for t in 0..3 {
                let items = [
                    Item::user_text(format!("session {i} turn {t}")),
                    Item::assistant_text("ok"),
                ];
                store.save_delta(id, &mut head, &items).unwrap();
            }
            id
        })
        .collect();
    store.close().unwrap();
    ids
}

/// Runs with stdout into a pipe whose reader has left before the command
/// starts (`… | head -0`): every write meets a closed pipe, however fast
/// the command prints.
fn closed_pipe(root: &Path, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = bare()
        .arg("--root")
        .arg(root)
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn a_closed_pipe_ends_quietly_and_stops_no_upload() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let ids = store(&root, 40);
    for args in [
        &["verify", "--all"][..],
        &["ls"][..],
        &["export", &ids[1].to_string()][..],
        &["show", &ids[1].to_string()][..],
    ] {
        let (code, stderr) = closed_pipe(&root, args);
        assert_eq!(code, 141, "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
    // The uploads of a push go on when nobody reads what it prints.
    let archive = tmp.path().join("archive");
    let url = format!("file://{}", archive.display());
    let (code, stderr) = closed_pipe(&root, &["archive", "push", "--to", &url, "--all"]);
    assert_eq!(code, 141, "{stderr}");
    let listed = run(&root, &["archive", "ls", "--from", &url]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(
        listed.stdout.lines().count(),
        ids.len() + 1,
        "{}",
        listed.stdout
    );
}

#[test]
fn demo_refuses_zero_sessions_or_turns_as_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["demo", "--sessions", "0"][..],
        &["demo", "--turns", "0"][..],
    ] {
        let r = run(&tmp.path().join("d"), args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
    }
    let r = run(
        &tmp.path().join("d"),
        &["demo", "--sessions", "1", "--turns", "1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_file_archive_is_private() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    store(&root, 2);
    let archive = tmp.path().join("archive");
    let url = format!("file://{}", archive.display());
    let r = run(&root, &["archive", "push", "--to", &url, "--all"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut seen = 0;
    let mut stack = vec![archive];
    while let Some(p) = stack.pop() {
        let meta = fs::metadata(&p).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{}", p.display());
            stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{}", p.display());
            seen += 1;
        }
    }
    assert!(seen >= 4, "{seen} files");
}

#[test]
fn every_command_takes_a_name_an_id_prefix_or_an_uppercase_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let ids = store(&root, 3);
    let named = ids[0].to_string();
    // ls shows the name; ls --json carries it.
    let ls = run(&root, &["ls"]);
    assert!(
        ls.stdout.lines().next().unwrap().contains("NAME"),
        "{}",
        ls.stdout
    );
    assert!(ls.stdout.contains("user_123"), "{}", ls.stdout);
    let json = run(&root, &["ls", "--json"]);
    assert!(
        json.stdout.contains(r#""name":"user_123""#),
        "{}",
        json.stdout
    );
    for args in [
        &["export", "user_123"][..],
        &["verify", "user_123"][..],
        &["show", "user_123"][..],
        &["stat", "user_123"][..],
    ] {
        let r = run(&root, args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    // A unique prefix of an id, and an id in capitals.
    let other = ids[2].to_string();
    let prefix = (8..=36)
        .map(|n| &other[..n])
        .find(|p| ids.iter().filter(|i| i.to_string().starts_with(p)).count() == 1)
        .unwrap();
    assert_eq!(run(&root, &["verify", prefix]).code, 0);
    assert_eq!(run(&root, &["export", &other.to_uppercase()]).code, 0);
    assert_eq!(run(&root, &["show", &other.to_uppercase()]).code, 0);
    // fork, append and rm by name.
    let fork = run(&root, &["fork", "user_123", "--at", "0"]);
    assert_eq!(fork.code, 0, "{}", fork.stderr);
    let mut append = bare()
        .arg("--root")
        .arg(&root)
        .args(["append", "user_123", "--text"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    append.stdin.take().unwrap().write_all(b"one more").unwrap();
    assert!(append.wait().unwrap().success());
    let rm = run(&root, &["rm", "user_123"]);
    assert_eq!(rm.code, 0, "{}", rm.stderr);
    assert_eq!(run(&root, &["show", &named]).code, 3);
}

#[test]
fn exit_codes_tell_usage_from_not_found_from_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    store(&root, 2);
    let url = format!("file://{}", tmp.path().join("archive").display());
    let usage: &[&[&str]] = &[
        &["archive", "push", "--to", &url],
        &["archive", "pull", "--from", &url, "--seq", "3", "--all"],
        &["grep", "(unclosed"],
    ];
    for args in usage {
        let r = run(&root, args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
    }
    let missing = SessionId::new_v7().to_string();
    for args in [&["show", &missing][..], &["export", "no-such-name"][..]] {
        let r = run(&root, args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with("error: not found"), "{}", r.stderr);
    }
    let help = bare().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("3 not found"), "{help}");
}

#[test]
fn a_typo_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("typo");
    for args in [
        &["gc"][..],
        &["archive", "push", "--all", "--to", "file:///x"][..],
    ] {
        let r = run(&typo, args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("typo"), "{args:?}: {}", r.stderr);
        assert!(!typo.exists(), "{args:?} made the store");
    }
    let root = tmp.path().join("store");
    store(&root, 1);
    let no_archive = tmp.path().join("no-archive");
    let url = format!("file://{}", no_archive.display());
    let r = run(&root, &["archive", "ls", "--from", &url]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let r = run(&typo, &["archive", "pull", "--all", "--from", &url]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(!no_archive.exists() && !typo.exists());
    // A directory that holds other things is not made a store.
    let unrelated = tmp.path().join("photos");
    fs::create_dir(&unrelated).unwrap();
    fs::write(unrelated.join("cat.jpg"), b"jpeg").unwrap();
    let input = tmp.path().join("in.jsonl");
    fs::write(&input, "{\"role\":\"user\",\"content\":\"hi\"}\n").unwrap();
    let r = run(
        &unrelated,
        &["import", "--format", "responses", input.to_str().unwrap()],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!unrelated.join("sessions").exists());
    // An empty directory may become one.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let r = run(
        &empty,
        &["import", "--format", "responses", input.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn demo_writes_into_a_fresh_directory_unless_given_a_root() {
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users-store");
    let out = bare()
        .env("SESSION_STORE_DIR", &users)
        .args(["demo", "--sessions", "1", "--turns", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!users.exists(), "demo wrote into $SESSION_STORE_DIR");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // It says where, and how to clean up.
    let last = stdout.lines().last().unwrap();
    assert!(last.contains("rm -r"), "{stdout}");
    let dir = stdout
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("store: ")
        .to_owned();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_stat_hint_keeps_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let ids = store(&root, 1);
    let r = run(&root, &["stat", &ids[0].to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let hint = format!("session-store --root {} verify", root.display());
    assert!(r.stdout.contains(&hint), "{}", r.stdout);
}

/// The files' sizes, each file once (a segment and its `LOCK` name are
/// one), apparent and allocated.
fn sizes(dir: &Path, seen: &mut std::collections::HashSet<u64>) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut allocated) = (0, 0);
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = fs::symlink_metadata(e.path()).unwrap();
        if meta.is_dir() {
            let (a, b) = sizes(&e.path(), seen);
            apparent += a;
            allocated += b;
        } else if seen.insert(meta.ino()) {
            apparent += meta.len();
            allocated += meta.blocks() * 512;
        }
    }
    (apparent, allocated)
}

#[test]
fn a_demo_stores_files_are_about_as_large_as_what_they_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let r = run(&root, &["demo", "--sessions", "6", "--turns", "12"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (apparent, allocated) = sizes(&root, &mut Default::default());
    assert!(
        apparent <= 2 * allocated,
        "apparent {apparent} bytes for {allocated} allocated"
    );
}

/// `ls` after a clear (a compaction to no history) shows the question that
/// followed it, not the first one the session ever had.
#[test]
fn ls_titles_a_cleared_session_by_its_next_question() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let id = store(root, 1)[0];
    let store = Store::open(root).unwrap();
    let head = store.head(id).unwrap().unwrap();
    let head = store.compact(id, head, &[]).unwrap();
    let next = [
        Item::user_text("after the clear"),
        Item::assistant_text("ok"),
    ];
    store.append(id, head, &next).unwrap();
    store.close().unwrap();
    let r = run(root, &["ls"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("after the clear"), "{}", r.stdout);
    assert!(!r.stdout.contains("session 0 turn 0"), "{}", r.stdout);
}

/// `ls` SIZE counts what a session holds: its records and the large items
/// they keep in the store's payload area (a 1 MB message is 1 MB, not the
/// record's reference to it), as `ls --json` and `stat` say.
#[test]
fn ls_size_includes_the_payloads_a_session_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = Store::open(root).unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::model("m"), &[])
        .unwrap();
    let big = [
        Item::user_text("x".repeat(1 << 20)),
        Item::assistant_text("ok"),
    ];
    store.append(id, head, &big).unwrap();
    store.close().unwrap();
    let r = run(root, &["ls"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("1.0 MiB"), "{}", r.stdout);
    let r = run(root, &["ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let payload = listed["payload_bytes"].as_u64().unwrap();
    assert!((1 << 20..2 << 20).contains(&payload), "{listed}");
    let r = run(root, &["stat", "--json", &id.to_string()]);
    let stat: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(stat["payload_bytes"].as_u64(), Some(payload), "{stat}");
}

/// Copies the tree at `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        match e.file_type().unwrap().is_dir() {
            true => copy_tree(&src, &dst),
            false => drop(fs::copy(&src, &dst).unwrap()),
        }
    }
}

/// A `Sync` store at `root`.
fn sync_store(root: &Path) -> Store {
    let log = session_store::LogOptions::default().durability(session_store::Durability::Sync);
    Store::open_with(root, session_store::StoreOptions::default().log(log)).unwrap()
}

/// A crashed handle's journal whose frames do not continue their session's
/// log (the log went on with another second turn) is not put back: every
/// writable open warns, naming the session and the journal file, and a
/// write to that session fails with the reason, rather than burying the
/// acknowledged records.
#[test]
fn a_journal_that_could_not_be_put_back_is_warned_of_and_its_session_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, copy) = (tmp.path().join("store"), tmp.path().join("copy"));
    let store = sync_store(&root);
    let (id, head) = store
        .create_session(None, RequestConfig::model("m"), &[])
        .unwrap();
    let head = store.append(id, head, &[Item::user_text("first")]).unwrap();
    store.close().unwrap();
    copy_tree(&root, &copy);
    // The crashed handle's second turn, in its journal only.
    let store = sync_store(&root);
    store
        .append(id, head, &[Item::user_text("second")])
        .unwrap();
    let journal = fs::read_dir(root.join("journal"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jnl"))
        .expect("the crashed handle's journal");
    // The copy goes on with another second turn, then gets the journal.
    let other = sync_store(&copy);
    other
        .append(id, head, &[Item::user_text("another")])
        .unwrap();
    other.close().unwrap();
    let name = journal.file_name().unwrap();
    fs::copy(&journal, copy.join("journal").join(name)).unwrap();
    store.abandon();
    let text = tmp.path().join("text");
    fs::write(&text, "a third turn").unwrap();
    let id = id.to_string();
    let r = run(&copy, &["append", "--text", &id, text.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let name = name.to_str().unwrap();
    assert!(
        r.stderr.contains(&format!("warning: session {id}")) && r.stderr.contains(name),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("could not be put back"), "{}", r.stderr);
    // Reads show what the log holds; the journal is kept for the next open.
    let r = run(&copy, &["export", &id, "--format", "wire"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("another") && !r.stdout.contains("second"));
    assert!(copy.join("journal").join(name).exists());
}
