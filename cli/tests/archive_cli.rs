//! Guards `session-store archive push/pull/ls` against a real S3-compatible
//! server (`s3s-fs`, in process), configured the way users configure it:
//! through the `AWS_*` environment. A pushed store pulls back whole into
//! another root, a second push uploads nothing old, and a pull of a
//! damaged archive fails naming the object, exit code 1.

#[path = "../../tests/s3/mod.rs"]
mod s3;

use std::path::Path;

use assert_cmd::Command;
use s3::S3Server;
use session_store::{Item, LogOptions, RequestConfig, SessionId, Store, StoreOptions};

const BIN: &str = env!("CARGO_BIN_EXE_session-store");

fn cmd(server: &S3Server, root: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("SESSION_STORE_DIR")
        .env_remove("XDG_DATA_HOME")
        .arg("--root")
        .arg(root)
        .timeout(std::time::Duration::from_secs(120));
    for (k, v) in server.env() {
        c.env(k, v);
    }
    c
}

fn run(server: &S3Server, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = cmd(server, root).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sessions(root: &Path, n: usize) -> Vec<SessionId> {
    let store = Store::open_with(
        root,
        StoreOptions::default().log(LogOptions::default().segment_size(16 << 10)),
    )
    .unwrap();
    let ids = (0..n)
        .map(|s| {
            let (id, mut head) = store
                .create_session(None, RequestConfig::model("gpt-5"), &[])
                .unwrap();
            for t in 0..30 {
                let items = [
                    Item::user_text(format!("session {s} turn {t} {}", "words ".repeat(150))),
                    Item::assistant_text(format!("reply {t}")),
                ];
                store.save_delta(id, &mut head, &items).unwrap();
            }
            id
        })
        .collect();
    store.close().unwrap();
    ids
}

#[test]
fn push_all_pull_all_and_ls_through_the_environment() {
    let server = S3Server::start();
    let here = tempfile::tempdir().unwrap();
    let ids = sessions(here.path(), 3);
    let url = server.url("team/a");

    let (code, out, err) = run(
        &server,
        here.path(),
        &["archive", "push", "--to", &url, "--all"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    for line in out.lines() {
        assert!(!line.contains(" 0 segment(s) uploaded"), "{line}");
        assert!(line.contains("tail uploaded"), "{line}");
    }
    // A second push uploads nothing old.
    let (code, out, _) = run(
        &server,
        here.path(),
        &["archive", "push", "--to", &url, "--all"],
    );
    assert_eq!(code, 0);
    for line in out.lines() {
        assert!(line.contains(" 0 segment(s) uploaded"), "{line}");
        assert!(line.contains("tail unchanged"), "{line}");
    }

    let (code, out, _) = run(&server, here.path(), &["archive", "ls", "--from", &url]);
    assert_eq!(code, 0);
    for id in &ids {
        let line = out
            .lines()
            .find(|l| l.starts_with(&id.to_string()))
            .unwrap();
        let cols: Vec<_> = line.split_whitespace().collect();
        // archived and local entries agree.
        assert_eq!(cols[4], cols[5], "{line}");
    }

    let there = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        &server,
        there.path(),
        &["archive", "pull", "--from", &url, "--all"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let a = Store::open(here.path()).unwrap();
    let b = Store::open(there.path()).unwrap();
    for id in &ids {
        assert_eq!(
            b.restore(*id).unwrap().history,
            a.restore(*id).unwrap().history
        );
    }
    let (code, _, _) = run(&server, there.path(), &["verify", "--all"]);
    assert_eq!(code, 0);

    // One session to a point.
    let there2 = tempfile::tempdir().unwrap();
    let id = ids[0].to_string();
    let (code, out, err) = run(
        &server,
        there2.path(),
        &["archive", "pull", "--from", &url, &id, "--seq", "10"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("head seq 10"), "{out}");

    // A damaged object: exit 1, named.
    let victim = format!("team/a/{id}/segments/");
    let dir = server.object_file(&victim);
    let first = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[400] ^= 0x40;
    std::fs::write(&first, bytes).unwrap();
    let there3 = tempfile::tempdir().unwrap();
    let (code, _, err) = run(
        &server,
        there3.path(),
        &["archive", "pull", "--from", &url, &id],
    );
    assert_eq!(code, 1);
    let name = first.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "{err}");
}

/// A session whose segments before an in-place compaction are evictable.
fn compacted(root: &Path) -> SessionId {
    let store = Store::open_with(
        root,
        StoreOptions::default().log(LogOptions::default().segment_size(16 << 10)),
    )
    .unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("gpt-5"), &[])
        .unwrap();
    for t in 0..40 {
        let items = [
            Item::user_text(format!("turn {t} {}", "words ".repeat(150))),
            Item::assistant_text(format!("reply {t}")),
        ];
        store.save_delta(id, &mut head, &items).unwrap();
    }
    head = store
        .compact(id, head, &[Item::assistant_text("summary")])
        .unwrap();
    store
        .save_delta(id, &mut head, &[Item::user_text("after the summary")])
        .unwrap();
    store.close().unwrap();
    id
}

#[test]
fn evict_then_verify_and_export_fetch_back_with_archive() {
    let server = S3Server::start();
    let here = tempfile::tempdir().unwrap();
    let id = compacted(here.path());
    let sid = id.to_string();
    let url = server.url("team/e");
    let (_, exported, _) = run(&server, here.path(), &["export", &sid]);

    // Not pushed yet: refused, exit 1.
    let (code, _, err) = run(
        &server,
        here.path(),
        &["archive", "evict", "--to", &url, &sid],
    );
    assert_eq!(code, 1);
    assert!(err.contains("manifest"), "{err}");

    let (code, _, err) = run(
        &server,
        here.path(),
        &["archive", "push", "--to", &url, &sid],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        &server,
        here.path(),
        &["archive", "evict", "--to", &url, "--all"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("now only in the archive"), "{out}");
    assert!(!out.contains(" 0 segment(s) evicted"), "{out}");

    let (_, out, _) = run(&server, here.path(), &["archive", "ls", "--from", &url]);
    let line = out.lines().find(|l| l.starts_with(&sid)).unwrap();
    let cols: Vec<_> = line.split_whitespace().collect();
    assert_eq!(cols[4], cols[5], "archived and local entries agree: {line}");
    assert_ne!(cols[6], "0", "evicted segments shown: {line}");

    // Without the archive: a typed refusal naming the range, exit 1.
    let (code, out, _) = run(&server, here.path(), &["verify", &sid]);
    assert_eq!(code, 1);
    assert!(
        out.contains("NOT CHECKED") && out.contains("--archive"),
        "{out}"
    );
    let (code, _, err) = run(&server, here.path(), &["export", &sid]);
    assert_eq!(code, 1);
    assert!(err.contains("evicted"), "{err}");

    // With it: fetched back, checked, the same bytes as before.
    let (code, out, err) = run(&server, here.path(), &["export", "--archive", &url, &sid]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, exported);
    let (code, out, err) = run(&server, here.path(), &["verify", "--archive", &url, &sid]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": ok"), "{out}");
}
