//! Guards against two processes writing one log: a second writer in another
//! process gets `Locked`, and the lock goes away with its holder, even one
//! killed mid-session. The lock is held through the active segment, which
//! `LOCK` names too, and moves with each roll without a moment unlocked.
//! Through the store, a session another writer holds can still be read and
//! forked, and writing to it is refused with `Locked`.
//!
//! The other process is this test binary again, running only [`child`] with
//! the role in an environment variable.

mod common;
mod engine;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::store::{open, tempdir, turn};
use engine::{entry, opts, Countdown, OpKind};
use session_store::{Error, Log, RequestConfig};

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
        "roll" => {
            // Rolls twice, so that the lock has moved off the first
            // segment (which `LOCK` named first) and off the second.
            let log = Log::open(dir, opts(SEG)).unwrap();
            for i in 0..6 {
                log.append(&entry(i, 6 << 10)).unwrap();
            }
            assert!(log.segment_paths().len() >= 3, "the writer rolled");
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

/// The lock goes with the last handle, though a snapshot it handed out
/// keeps the active segment (whose descriptor held the lock) open.
#[test]
fn the_lock_is_released_when_the_last_handle_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    log.append(&entry(0, 10)).unwrap();
    let clone = log.clone();
    let snapshot = log.snapshot();
    drop(log);
    assert!(
        run_child("write", dir.path()).starts_with("locked"),
        "a clone still holds the writer"
    );
    drop(clone);
    assert_eq!(run_child("write", dir.path()), "opened");
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.next_seq(), 2, "the child's append is there");
    // The snapshot still reads what it saw.
    assert_eq!(snapshot.entries_from(0).count(), 1);
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

/// Runs a child in `role` until it holds the log in `dir`, checks that a
/// writer here is refused meanwhile, kills the child, and opens the log
/// as its next writer.
fn open_after_killing(role: &str, dir: &Path) -> Log {
    let mut child = child_command(role, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(&mut child, "CHILD holding");
    match Log::open(dir, opts(SEG)) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked while the child holds the log, got {other:?}"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    Log::open(dir, opts(SEG)).unwrap()
}

#[test]
fn a_killed_writer_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_after_killing("hold", dir.path());
    assert_eq!(log.next_seq(), 5, "the killed writer's appends survive");
    assert_eq!(log.verify().damage, None);
}

/// The inode `path` names.
fn ino(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// A writer holds its lock through its active segment's descriptor,
/// `LOCK` being a second name of that segment: after every roll `LOCK`
/// names the new active segment, and a second writer, in this process or
/// another, is refused all along. Closed, the log lets the next writer in,
/// and the disk holds nothing more than the segments.
#[test]
fn the_lock_moves_to_each_active_segment_and_keeps_out_a_second_writer() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("LOCK");
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    let mut rolls = 0;
    for i in 0..12 {
        log.append(&entry(i, 6 << 10)).unwrap();
        let segments = log.segment_paths();
        let active = segments.last().unwrap();
        assert_eq!(ino(&lock), ino(active), "LOCK names the active segment");
        if segments.len() > rolls + 1 {
            rolls = segments.len() - 1;
            match Log::open(dir.path(), opts(SEG)) {
                Err(Error::Locked { .. }) => {}
                other => panic!("a second writer after a roll: {other:?}"),
            }
            assert!(run_child("write", dir.path()).starts_with("locked"));
        }
    }
    assert!(rolls >= 3, "{rolls} rolls");
    assert!(
        !dir.path().join("LOCK.next").exists(),
        "no second name left beside LOCK"
    );
    drop(log);
    assert_eq!(run_child("write", dir.path()), "opened");
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.next_seq(), 13, "the child's append is there");
    assert_eq!(ino(&lock), ino(log.segment_paths().last().unwrap()));
    assert_eq!(log.verify().damage, None);
}

/// A writer killed after rolling leaves `LOCK` naming its active segment,
/// locked by nobody: the next writer takes it at once and keeps it there.
/// A `LOCK` left naming an older segment, or a file of its own, and a
/// `LOCK.next` a crash left between the two names, are set right by the
/// next writer's open.
#[test]
fn a_lock_left_by_a_killed_or_crashed_writer_is_taken_and_set_right() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("LOCK");
    let log = open_after_killing("roll", dir.path());
    assert_eq!(log.next_seq(), 6, "the killed writer's appends survive");
    let segments = log.segment_paths();
    assert_eq!(ino(&lock), ino(segments.last().unwrap()));
    drop(log);

    // As a crash between a roll's steps leaves it: `LOCK` naming the
    // first segment, `LOCK.next` the second.
    std::fs::remove_file(&lock).unwrap();
    std::fs::hard_link(&segments[0], &lock).unwrap();
    std::fs::hard_link(&segments[1], dir.path().join("LOCK.next")).unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(ino(&lock), ino(segments.last().unwrap()));
    assert!(!dir.path().join("LOCK.next").exists());
    assert!(run_child("write", dir.path()).starts_with("locked"));
    drop(log);

    // A `LOCK` of its own (as every log had before this layout).
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(&lock, b"").unwrap();
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(ino(&lock), ino(segments.last().unwrap()));
    assert_eq!(log.next_seq(), 6);
    assert_eq!(log.verify().damage, None);
}

/// A lock that cannot move (every link or rename of the move fails, as on a
/// file system without hard links) stays where it was: the writer goes on
/// across rolls, a second writer is still refused, and the next open that
/// can move it does.
#[test]
fn a_lock_that_cannot_move_stays_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("LOCK");
    let hook = Countdown::new(OpKind::LockMove, 1, true);
    let log = Log::open(dir.path(), opts(SEG).hook(hook.clone())).unwrap();
    let first = ino(&lock);
    for i in 0..8 {
        log.append(&entry(i, 6 << 10)).unwrap();
    }
    assert!(log.segment_paths().len() >= 3, "the writer rolled");
    assert!(hook.failed() >= 3, "every move was tried and failed");
    assert_eq!(ino(&lock), first, "LOCK names the file it named");
    assert!(run_child("write", dir.path()).starts_with("locked"));
    assert_eq!(log.verify().damage, None);
    drop(log);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(ino(&lock), ino(log.segment_paths().last().unwrap()));
    assert_eq!(log.next_seq(), 8);
}

/// A `LOCK` removed or replaced under a live writer (an operator's
/// doing) does not let a second writer in: the newcomer locks the new
/// `LOCK`, but the active segment it must write is locked by the writer,
/// so its open is refused.
#[test]
fn a_lock_file_removed_under_a_writer_lets_no_second_writer_in() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("LOCK");
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    log.append(&entry(0, 10)).unwrap();
    std::fs::remove_file(&lock).unwrap();
    let active = log.segment_paths().pop().unwrap();
    let before = std::fs::read(&active).unwrap();
    match Log::open(dir.path(), opts(SEG)) {
        Err(Error::Locked { path }) => assert_eq!(path, lock),
        other => panic!("a second writer after LOCK was removed: {other:?}"),
    }
    // Refused before its recovery wrote anything into the live log.
    assert_eq!(std::fs::read(&active).unwrap(), before);
    assert!(run_child("write", dir.path()).starts_with("locked"));
    log.append(&entry(1, 10)).unwrap();
    assert_eq!(log.verify().damage, None);
    drop(log);
    let log = Log::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.next_seq(), 2);
}

/// A session that another writer holds can still be read, restored and
/// forked (read-only), while writing to it is refused with `Locked`.
#[test]
fn a_held_session_can_be_read_and_forked_but_not_written() {
    let dir = tempdir();
    let holder = open(dir.path());
    let (id, mut head) = holder
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    holder.save_delta(id, &mut head, &turn(0, 100)).unwrap();
    let other = open(dir.path());
    let state = other.restore(id).unwrap();
    assert_eq!(state.head, Some(head));
    let (fork, _) = other.fork_at(id, head).unwrap();
    assert_eq!(other.restore(fork).unwrap().history, state.history);
    let mut stale = head;
    match other.save_delta(id, &mut stale, &turn(1, 10)) {
        Err(session_store::Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}
