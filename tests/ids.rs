//! Guards the promise that an id names one session or none: a creation of a
//! taken id is refused and leaves that session alone, whichever store holds
//! it; a failed or unfinished creation leaves its id free; and a hostile id
//! is refused before it touches a file.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::store::{copy_session, ids, open, tempdir, tree};
use session_store::{
    log::IoHook, log::IoOp, Error, Item, LogOptions, RequestConfig, SessionId, Store, StoreOptions,
};

#[test]
fn creating_an_existing_id_is_refused_and_leaves_it_alone() {
    let dir = tempdir();
    let store = open(dir.path());
    let id = SessionId::new_v7();
    let head = store
        .create_session_with_id(
            id,
            None,
            RequestConfig::default(),
            &[Item::user_text("mine")],
        )
        .unwrap();
    let err = store
        .create_session_with_id(
            id,
            None,
            RequestConfig::default(),
            &[Item::user_text("theirs")],
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("mine")]
    );
    assert!(!store.exists(SessionId::new_v7()));
}

/// A creation looks for an existing session only once its `mkdir` finds
/// the directory there: a session this store has not opened, whether
/// another store holds it open or nobody does, is refused all the same.
#[test]
fn creating_an_id_another_store_has_or_had_is_refused_and_leaves_it_alone() {
    let dir = tempdir();
    let first = open(dir.path());
    let id = SessionId::new_v7();
    let mut head = first
        .create_session_with_id(id, None, RequestConfig::default(), &[])
        .unwrap();
    first
        .save_delta(id, &mut head, &[Item::user_text("mine")])
        .unwrap();
    let theirs = [Item::user_text("theirs")];
    // Held open by the first store (synced, so no `CREATING` marker).
    first.sync(id).unwrap();
    let second = open(dir.path());
    let err = second
        .create_session_with_id(id, None, RequestConfig::default(), &theirs)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    // Nobody holds it.
    first.close().unwrap();
    drop(first);
    let err = second
        .create_session_with_id(id, None, RequestConfig::default(), &theirs)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(second.head(id).unwrap(), Some(head));
    assert_eq!(
        second.restore(id).unwrap().history,
        vec![Item::user_text("mine")]
    );
    // And the session still takes saves.
    second
        .save_delta(id, &mut head, &[Item::user_text("more")])
        .unwrap();
    assert_eq!(second.restore(id).unwrap().history.len(), 2);
}

/// Fails every write and sync under `sessions/` while armed.
struct FailSessions(AtomicBool);

impl IoHook for FailSessions {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let path = match op {
            IoOp::Write { path, .. } | IoOp::Sync { path } => path,
            _ => return Ok(()),
        };
        let staged = path.components().any(|c| c.as_os_str() == "sessions");
        if staged && self.0.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected failure"));
        }
        Ok(())
    }
}

fn entries_of(root: &Path, sub: &str) -> BTreeSet<String> {
    fs::read_dir(root.join(sub))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_failed_creation_leaves_nothing_behind_and_its_id_stays_free() {
    let dir = tempdir();
    let hook = Arc::new(FailSessions(AtomicBool::new(true)));
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let id = SessionId::new_v7();
    let history = [Item::user_text("first try")];
    let err = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(!store.exists(id));
    // The half-made session is gone, directory and all.
    assert_eq!(entries_of(dir.path(), "sessions"), BTreeSet::new());
    assert_eq!(entries_of(dir.path(), "staging"), BTreeSet::new());

    hook.0.store(false, Ordering::SeqCst);
    let head = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap();
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
    assert_eq!(ids(&store.list().unwrap()), vec![id]);
}

#[test]
fn the_leftover_of_an_unfinished_creation_does_not_block_its_id() {
    let dir = tempdir();
    let id = SessionId::new_v7();
    {
        // What a creation that died before its catalog leaves: a log, no catalog.
        let store = open(dir.path());
        let other = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("old")])
            .unwrap()
            .0;
        store.close().unwrap();
        let from = store.session_dir(other);
        let to = store.session_dir(id);
        copy_session(&from, &to, |name| name != "catalog");
        fs::remove_dir_all(&from).unwrap();
    }
    let store = open(dir.path());
    assert!(!store.exists(id));
    let history = [Item::user_text("new")];
    let head = store
        .create_session_with_id(id, None, RequestConfig::default(), &history)
        .unwrap();
    assert_eq!(store.head(id).unwrap(), Some(head));
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
    // The leftover went to the trash, which the next open empties.
    drop(store);
    let store = open(dir.path());
    assert_eq!(entries_of(dir.path(), "trash"), BTreeSet::new());
    assert_eq!(store.restore(id).unwrap().history, history.to_vec());
}

#[test]
fn hostile_ids_are_invalid_input_and_touch_nothing() {
    let dir = tempdir();
    let store = open(dir.path());
    let (real, _) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("x")])
        .unwrap();
    let valid = real.to_string();
    assert_eq!(valid.parse::<SessionId>().unwrap(), real);
    // Strange entries under sessions/ are not sessions.
    for name in [valid.to_uppercase(), "not-a-session".to_string()] {
        let stray = dir.path().join("sessions").join(name);
        fs::create_dir(&stray).unwrap();
        fs::copy(
            store.session_dir(real).join("catalog"),
            stray.join("catalog"),
        )
        .unwrap();
    }
    let before = tree(dir.path());

    // Each of these is exactly 36 bytes, so it gets past a length check.
    let same_length = [
        "../".repeat(12),
        format!("/{}", &valid[1..]),
        format!("{}/..", &valid[..33]),
        format!("{}\0", &valid[..35]),
        format!("{}g", &valid[..35]),
        format!(" {}", &valid[1..]),
        "é".repeat(18),
        valid.to_uppercase(),
        valid.replace('-', "_"),
    ];
    let mut hostile: Vec<String> = vec![
        "../x".into(),
        "..".into(),
        ".".into(),
        String::new(),
        "/etc/passwd".into(),
        "/".into(),
        "x\0y".into(),
        "\0".into(),
        "a".repeat(10_000),
        format!("{valid}/../../x"),
        format!("../{valid}"),
        format!("{valid}\0"),
        valid.replace('-', ""),
        format!("{{{valid}}}"),
        format!("urn:uuid:{valid}"),
        "not-a-uuid".into(),
    ];
    for s in &same_length {
        assert_eq!(s.len(), 36, "{s:?}");
    }
    hostile.extend(same_length);
    for s in &hostile {
        match s.parse::<SessionId>().map_err(Error::from) {
            Err(Error::InvalidInput { what }) => {
                assert!(what.len() < 200, "the error message must not echo 10 kB");
            }
            other => panic!("{s:?} parsed as {other:?}"),
        }
        let json = serde_json::to_string(s).unwrap();
        assert!(serde_json::from_str::<SessionId>(&json).is_err(), "{s:?}");
    }
    assert_eq!(tree(dir.path()), before);
    assert_eq!(ids(&store.list().unwrap()), vec![real]);
    assert_eq!(tree(dir.path()), before);
}
