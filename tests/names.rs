//! Guards the promise of session names: one name, one session, whoever
//! races for it (threads or processes); a name only ever points at a whole
//! session, whatever write fails on the way; and a name is found without
//! reading a log, by the library and the CLI alike.

use std::process::Command;
use std::sync::{Arc, Barrier};

use session_store::{
    log::IoHook, log::IoOp, store::NAME_DOMAIN, Error, Item, LogOptions, RequestConfig, SessionId,
    Store, StoreOptions,
};

#[test]
fn a_name_finds_its_session_and_is_recorded_in_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.find_name("user_123").unwrap(), None);
    let (id, head) = store
        .create_named(
            "user_123",
            Some("Be brief."),
            RequestConfig::model("gpt-5"),
            &[Item::user_text("hi")],
        )
        .unwrap();
    assert_eq!(store.find_name("user_123").unwrap(), Some(id));
    assert_eq!(store.find_or_create_named("user_123").unwrap(), id);
    let state = store.restore(id).unwrap();
    assert_eq!(state.head, Some(head));
    assert_eq!(state.history, vec![Item::user_text("hi")]);
    assert_eq!(state.extensions.len(), 1);
    assert_eq!(state.extensions[0].domain, NAME_DOMAIN);
    assert_eq!(
        state.extensions[0].payload.as_str(),
        r#"{"name":"user_123"}"#
    );
    // Taken.
    let again = store.create_named("user_123", None, RequestConfig::default(), &[]);
    assert!(
        matches!(again, Err(Error::InvalidInput { .. })),
        "{again:?}"
    );
    // Read-only stores find names too.
    let ro = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.find_name("user_123").unwrap(), Some(id));
    assert!(ro.find_or_create_named("other").is_err());
}

#[test]
fn odd_names_are_distinct_and_bad_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let names = [
        "a",
        "A",
        "a b",
        "a%20b",
        "../../etc/passwd",
        ".",
        ".lock",
        "é",
        "line\nbreak",
        "nul\0byte",
    ];
    let long = "x".repeat(1000);
    let longer = "x".repeat(1001);
    let mut ids = Vec::new();
    for name in names
        .iter()
        .copied()
        .chain([long.as_str(), longer.as_str()])
    {
        ids.push(store.find_or_create_named(name).unwrap());
    }
    for (name, id) in names
        .iter()
        .copied()
        .chain([long.as_str(), longer.as_str()])
        .zip(&ids)
    {
        assert_eq!(store.find_name(name).unwrap(), Some(*id), "{name:?}");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), names.len() + 2);
    for bad in [String::new(), "y".repeat(4097)] {
        assert!(matches!(
            store.find_or_create_named(&bad),
            Err(Error::InvalidInput { .. })
        ));
    }
}

#[test]
fn a_deleted_sessions_name_is_free_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let first = store.find_or_create_named("n").unwrap();
    store.delete(first).unwrap();
    assert_eq!(store.find_name("n").unwrap(), None);
    let second = store.find_or_create_named("n").unwrap();
    assert_ne!(first, second);
    assert_eq!(store.find_name("n").unwrap(), Some(second));
}

#[test]
fn threads_racing_for_a_name_get_one_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let ids: Vec<SessionId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (store, barrier) = (store.clone(), barrier.clone());
                s.spawn(move || {
                    barrier.wait();
                    store.find_or_create_named("shared").unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]));
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn processes_racing_for_a_name_get_one_session() {
    if let Ok(root) = std::env::var("NAMES_CHILD") {
        let store = Store::open(&root).unwrap();
        println!("{}", store.find_or_create_named("shared").unwrap());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "processes_racing_for_a_name_get_one_session",
                    "--nocapture",
                ])
                .env("NAMES_CHILD", dir.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let id = text
            .lines()
            .find_map(|l| l.parse::<SessionId>().ok())
            .expect("the child prints the id");
        ids.push(id);
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.find_name("shared").unwrap(), Some(ids[0]));
    assert_eq!(store.list().unwrap().len(), 1);
}

/// Fails the first operation that `fail` picks.
struct FailAt(Box<dyn Fn(&IoOp<'_>) -> bool + Send + Sync>);

impl IoHook for FailAt {
    fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
        match (self.0)(op) {
            true => Err(std::io::Error::other("injected")),
            false => Ok(()),
        }
    }
}

fn in_names(path: &std::path::Path) -> bool {
    path.parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "names")
}

#[test]
fn a_failed_write_of_the_name_leaves_it_free_and_no_session() {
    type Pick = fn(&IoOp<'_>) -> bool;
    let picks: [(&str, Pick); 4] = [
        (
            "create",
            |op| matches!(op, IoOp::Create { path } if in_names(path) && !path.ends_with(".lock")),
        ),
        (
            "write",
            |op| matches!(op, IoOp::Write { path, .. } if in_names(path)),
        ),
        (
            "sync",
            |op| matches!(op, IoOp::Sync { path } if in_names(path)),
        ),
        (
            "link",
            |op| matches!(op, IoOp::Link { to, .. } if in_names(to)),
        ),
    ];
    for (what, pick) in picks {
        let dir = tempfile::tempdir().unwrap();
        let hook = Arc::new(FailAt(Box::new(pick)));
        let opts = StoreOptions::default().log(LogOptions::default().hook(hook));
        let store = Store::open_with(dir.path(), opts).unwrap();
        let err = store.find_or_create_named("n").unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{what}: {err}");
        assert_eq!(store.find_name("n").unwrap(), None, "{what}");
        assert_eq!(
            store.list().unwrap().len(),
            0,
            "{what}: the session is taken back"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("names"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != ".lock")
            .collect();
        assert!(leftovers.is_empty(), "{what}: {leftovers:?}");
        drop(store);
        // Without the fault, the name is created.
        let store = Store::open(dir.path()).unwrap();
        let id = store.find_or_create_named("n").unwrap();
        assert_eq!(store.find_name("n").unwrap(), Some(id), "{what}");
    }
}
