//! Guards against what creations killed before their first sync leave in
//! `sessions/` staying there forever: an empty directory, a lock file
//! alone, a `CREATING` marker with a segment that holds no entry. The next
//! store to write sweeps them; a session whose log holds an entry is never
//! swept, catalog or not, and neither is a directory a creator holds.

use std::fs;
use std::path::Path;

use session_store::{Item, Log, LogOptions, RequestConfig, SessionId, Store};

fn dir_of(root: &Path, id: SessionId) -> std::path::PathBuf {
    root.join("sessions").join(id.to_string())
}

#[test]
fn the_next_writer_sweeps_torn_creations_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let kept = {
        let store = Store::open(root).unwrap();
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        store
            .save_delta(id, &mut head, &[Item::user_text("keep me")])
            .unwrap();
        store.close().unwrap();
        id
    };
    // What killed creations leave.
    let empty = SessionId::new_v7();
    fs::create_dir(dir_of(root, empty)).unwrap();
    let lock_only = SessionId::new_v7();
    fs::create_dir(dir_of(root, lock_only)).unwrap();
    fs::write(dir_of(root, lock_only).join("LOCK"), b"").unwrap();
    let torn = SessionId::new_v7();
    {
        let log = Log::open(dir_of(root, torn), LogOptions::default()).unwrap();
        log.close().unwrap();
    }
    fs::write(dir_of(root, torn).join("CREATING"), b"").unwrap();
    // A log with an entry but no catalog (lost): not a torn creation.
    let no_catalog = SessionId::new_v7();
    {
        let log = Log::open(dir_of(root, no_catalog), LogOptions::default()).unwrap();
        for e in session_store::group_delta(&[Item::user_text("mine")], 1) {
            log.append(&e).unwrap();
        }
        log.close().unwrap();
    }
    // A creation in progress: its lock is held.
    let held = SessionId::new_v7();
    fs::create_dir(dir_of(root, held)).unwrap();
    let lock = fs::File::create(dir_of(root, held).join("LOCK")).unwrap();
    lock.lock().unwrap();

    // Opening sweeps nothing; the first write does.
    let store = Store::open(root).unwrap();
    assert!(dir_of(root, empty).exists());
    store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    for gone in [empty, lock_only, torn] {
        assert!(!dir_of(root, gone).exists(), "{gone} was not swept");
    }
    for stays in [kept, no_catalog, held] {
        assert!(dir_of(root, stays).exists(), "{stays} was swept");
    }
    assert_eq!(
        store.restore(kept).unwrap().history,
        [Item::user_text("keep me")]
    );
    drop(lock);
}
