//! Guards against two processes writing one log: a second writer in another
//! process gets `Locked`, and the lock goes away with its holder, even one
//! killed mid-session.
//!
//! The other process is this test binary again, running only [`child`] with
//! the role in an environment variable.

mod engine;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use engine::{entry, opts};
use session_store::{Error, Log};

const ROLE: &str = "SESSION_STORE_LOCK_TEST_ROLE";
const SEG: u64 = 16 << 10;

/// The child's side. Does nothing in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (what, dir) = role.split_once(':').expect("role:dir");
    let result = match what {
        "write" => match Log::open(dir, opts(SEG)) {
            Ok(log) => {
                log.append(&entry(100, 1)).unwrap();
                "opened".to_string()
            }
            Err(Error::Locked { path }) => format!("locked {}", path.display()),
            Err(e) => format!("error {e}"),
        },
        "read" => match Log::open_read_only(dir) {
            Ok(log) => format!("read {}", log.next_seq()),
            Err(e) => format!("error {e}"),
        },
        "hold" => {
            let log = Log::open(dir, opts(SEG)).unwrap();
            for i in 0..5 {
                log.append(&entry(i, 10)).unwrap();
            }
            println!("CHILD holding");
            std::io::stdout().flush().unwrap();
            // Block until the parent closes stdin or kills us.
            let _ = std::io::stdin().lines().count();
            "released".to_string()
        }
        other => panic!("unknown role {other}"),
    };
    println!("CHILD {result}");
}

fn child_command(role: &str, dir: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, format!("{role}:{}", dir.display()));
    c
}

/// Runs a child to completion and returns what it reported.
fn run_child(role: &str, dir: &Path) -> String {
    let out = child_command(role, dir).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    stdout
        .lines()
        .find_map(|l| l.split_once("CHILD ").map(|(_, said)| said))
        .unwrap_or_else(|| panic!("child said nothing: {stdout}"))
        .to_string()
}

#[test]
fn a_second_writer_in_another_process_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    for i in 0..3 {
        log.append(&entry(i, 10)).unwrap();
    }
    let lock = dir.path().join("LOCK");
    assert_eq!(
        run_child("write", dir.path()),
        format!("locked {}", lock.display())
    );
    // Readers in other processes need no lock, and see what was committed.
    assert_eq!(run_child("read", dir.path()), "read 3");
    // The refused writer changed nothing.
    assert_eq!(log.next_seq(), 3);
    assert_eq!(log.verify().damage, None);
}

#[test]
fn the_lock_is_released_when_the_last_handle_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    log.append(&entry(0, 10)).unwrap();
    let clone = log.clone();
    drop(log);
    assert!(
        run_child("write", dir.path()).starts_with("locked"),
        "a clone still holds the writer"
    );
    drop(clone);
    assert_eq!(run_child("write", dir.path()), "opened");
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.next_seq(), 2, "the child's append is there");
}

fn wait_for_line(child: &mut Child, want: &str) {
    let stdout = child.stdout.as_mut().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("child ended before {want:?}"))
            .unwrap();
        // libtest prints "test child ... " on the same line.
        if line.ends_with(want) {
            return;
        }
    }
}

#[test]
fn a_killed_writer_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = child_command("hold", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(&mut child, "CHILD holding");
    match Log::open(dir.path(), opts(SEG)) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked while the child holds the log, got {other:?}"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.next_seq(), 5, "the killed writer's appends survive");
    assert_eq!(log.verify().damage, None);
}
