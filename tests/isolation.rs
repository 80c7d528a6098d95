//! Guards against one damaged or crashed session taking a store-wide
//! operation down, and against inspection changing files: `list` shows every
//! session, flags the ones it cannot read, and writes nothing.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use session_store::{Durability, Item, RequestConfig, SessionId, Store};

mod engine;
use engine::copy_tree;

/// Every file under `dir` with its bytes.
fn snapshot_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(snapshot_files(&p));
        } else {
            out.insert(p.clone(), fs::read(&p).unwrap());
        }
    }
    out
}

/// A store with three sessions at `root`, as a killed process leaves it:
/// every catalog dirty, nothing closed, no lock held.
fn crashed_store(root: &Path) -> Vec<SessionId> {
    let live = tempfile::tempdir().unwrap();
    let store = Store::open(live.path()).unwrap();
    let ids = (0..3)
        .map(|i| {
            // The last chooses its durability, which its catalog file holds
            // (the others' are empty: what they would hold, their logs say).
            let (id, mut head) = match i {
                2 => store.create_session_with_durability(
                    None,
                    RequestConfig::default(),
                    &[],
                    Durability::Buffered,
                ),
                _ => store.create_session(None, RequestConfig::default(), &[]),
            }
            .unwrap();
            let turn = [
                Item::user_text(format!("session {i}")),
                Item::assistant_text("ok"),
            ];
            store.save_delta(id, &mut head, &turn).unwrap();
            // Durable: a creation no sync covered that a crash tore is no
            // session at all (`creation.rs`); damage here is damage.
            store.log(id).unwrap().sync().unwrap();
            id
        })
        .collect();
    // A copy while the writers are open: their catalogs dirty, as after a
    // crash, and no process holding their locks.
    copy_tree(live.path(), root);
    drop(store);
    ids
}

fn flip(path: &Path, at: usize) {
    let mut b = fs::read(path).unwrap();
    b[at] ^= 0xff;
    fs::write(path, b).unwrap();
}

fn first_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.remove(0)
}

#[test]
fn list_shows_every_session_and_flags_the_ones_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let ids = crashed_store(dir.path());
    let sessions = dir.path().join("sessions");
    // One session's segment header is damaged; another's catalog identity.
    flip(&first_segment(&sessions.join(ids[1].to_string())), 20);
    flip(&sessions.join(ids[2].to_string()).join("catalog"), 512 + 10);
    fs::remove_file(dir.path().join("list.cache")).unwrap();

    let store = Store::open(dir.path()).unwrap();
    let listed: BTreeMap<SessionId, _> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s))
        .collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    let healthy = &listed[&ids[0]];
    assert_eq!(healthy.error, None);
    assert_eq!(healthy.entries, 3, "the session start and two entries");
    let broken_log = listed[&ids[1]].error.as_deref().unwrap();
    assert!(broken_log.contains("corrupt"), "{broken_log}");
    let broken_catalog = &listed[&ids[2]];
    let why = broken_catalog.error.as_deref().unwrap();
    assert!(why.contains("catalog"), "{why}");
    // What the log says is still listed, and the session still restores.
    assert_eq!(broken_catalog.entries, 3);
    assert_eq!(
        broken_catalog.head,
        store.restore(ids[2]).unwrap().head,
        "rebuilt from the log"
    );
    assert_eq!(store.restore(ids[0]).unwrap().history.len(), 2);
}

#[test]
fn listing_and_restoring_crashed_sessions_change_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let ids = crashed_store(dir.path());
    let store = Store::open(dir.path()).unwrap();
    let before = snapshot_files(dir.path());
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 3);
    for id in &ids {
        assert_eq!(store.restore(*id).unwrap().history.len(), 2);
        assert!(store.info(*id).unwrap().is_some());
        let _ = store.snapshot(*id).unwrap().verify();
    }
    let after = snapshot_files(dir.path());
    let changed: Vec<&PathBuf> = before
        .iter()
        .filter(|(p, b)| after.get(*p) != Some(*b))
        .map(|(p, _)| p)
        .chain(after.keys().filter(|p| !before.contains_key(*p)))
        .collect();
    assert!(changed.is_empty(), "inspection changed {changed:?}");
}

/// Fails every write to files named `name` while armed.
struct FailWritesTo {
    name: &'static str,
    armed: std::sync::atomic::AtomicBool,
}

impl session_store::log::IoHook for FailWritesTo {
    fn before(&self, op: &session_store::log::IoOp<'_>) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let path = match op {
            session_store::log::IoOp::Write { path, .. }
            | session_store::log::IoOp::Sync { path } => path,
            _ => return Ok(()),
        };
        if self.armed.load(Ordering::SeqCst) && path.file_name().is_some_and(|n| n == self.name) {
            return Err(std::io::Error::other(format!(
                "injected failure of {}",
                self.name
            )));
        }
        Ok(())
    }
}

#[test]
fn a_save_that_reached_the_log_succeeds_whatever_its_catalog_does() {
    use std::sync::atomic::Ordering;
    for name in ["catalog", "list.cache"] {
        let dir = tempfile::tempdir().unwrap();
        let hook = std::sync::Arc::new(FailWritesTo {
            name,
            armed: false.into(),
        });
        let opts = session_store::StoreOptions::default()
            .log(session_store::LogOptions::default().hook(hook.clone()));
        let store = Store::open_with(dir.path(), opts).unwrap();
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        hook.armed.store(true, Ordering::SeqCst);
        let turn = [Item::user_text("hello"), Item::assistant_text("hi")];
        store
            .save_delta(id, &mut head, &turn)
            .unwrap_or_else(|e| panic!("{name}: a save in the log reported {e}"));
        // The head moved with the log: a retry with it is a new save, not
        // the same entries twice.
        assert_eq!(store.head(id).unwrap(), Some(head), "{name}");
        assert_eq!(store.restore(id).unwrap().history, turn.to_vec(), "{name}");
        let listed = store.list().unwrap();
        assert_eq!(
            listed[0].head,
            Some(head),
            "{name}: list shows the live log"
        );
        hook.armed.store(false, Ordering::SeqCst);
        store.close().unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.list().unwrap()[0].head, Some(head), "{name}");
        assert_eq!(store.restore(id).unwrap().history, turn.to_vec(), "{name}");
    }
}

#[test]
fn a_damaged_session_can_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let ids = crashed_store(dir.path());
    let sessions = dir.path().join("sessions");
    flip(&first_segment(&sessions.join(ids[1].to_string())), 20);
    let store = Store::open(dir.path()).unwrap();
    assert!(store.restore(ids[1]).is_err(), "the damage is there");
    store.delete(ids[1]).unwrap();
    assert!(!store.exists(ids[1]));
    let listed: Vec<SessionId> = store.list().unwrap().iter().map(|s| s.id).collect();
    assert_eq!(listed.len(), 2);
    assert!(!listed.contains(&ids[1]));
}

#[test]
fn a_refused_delete_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    let subscription = store.subscribe(id, 0).unwrap();
    let err = store.delete(id).unwrap_err();
    assert!(matches!(err, session_store::Error::Locked { .. }), "{err}");
    // The session is as usable as before the refusal.
    assert_eq!(store.head(id).unwrap(), Some(head));
    store
        .save_delta(id, &mut head, &[Item::assistant_text("b")])
        .unwrap();
    drop(subscription);
    store.delete(id).unwrap();
    assert!(!store.exists(id));
}

/// The first write after an open empties the trash (an open alone only
/// looks), but for a delete still running.
#[test]
fn the_first_write_empties_the_trash_but_not_under_a_running_delete() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    let trash = dir.path().join("trash");
    let leftover = trash.join("left-by-a-crash");
    let running = trash.join("being-deleted");
    for d in [&leftover, &running] {
        fs::create_dir(d).unwrap();
        fs::write(d.join("LOCK"), b"").unwrap();
        fs::write(d.join("catalog"), b"x").unwrap();
    }
    let held = fs::File::open(running.join("LOCK")).unwrap();
    held.lock().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(leftover.exists(), "an open alone wrote");
    store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    drop(store);
    assert!(!leftover.exists());
    assert!(
        running.join("catalog").exists(),
        "a running delete lost its files"
    );
}

#[test]
fn a_read_only_store_reads_everything_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-store-here");
    let err = Store::open_read_only(&missing).unwrap_err();
    assert!(
        matches!(err, session_store::Error::NotFound { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no-store-here"), "{err}");
    assert!(!missing.exists(), "opening for reading made a store");

    let ids = crashed_store(dir.path());
    let before = snapshot_files(dir.path());
    let store = Store::open_read_only(dir.path()).unwrap();
    assert!(store.is_read_only());
    assert_eq!(store.list().unwrap().len(), 3);
    for id in &ids {
        assert_eq!(store.restore(*id).unwrap().history.len(), 2);
        assert_eq!(store.snapshot(*id).unwrap().verify().damage, None);
    }
    let refused = [
        store
            .create_session(None, RequestConfig::default(), &[])
            .map(|_| ()),
        store.delete(ids[0]).map(drop),
        store
            .head(ids[0])
            .and_then(|h| store.save_delta(ids[0], &mut h.unwrap(), &[Item::user_text("x")])),
    ];
    for r in refused {
        let e = r.unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
    }
    assert_eq!(
        snapshot_files(dir.path()),
        before,
        "a read-only store wrote"
    );
}

/// A crash after a compaction leaves the catalog dirty: the listing then
/// reads the compaction's origin from the log, as restore does.
#[test]
fn a_compaction_before_a_crash_is_listed_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let live = tempfile::tempdir().unwrap();
    let store = Store::open(live.path()).unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store
        .compact(id, head, &[Item::user_text("summary")])
        .unwrap();
    // A copy while the writer is open: as a killed process leaves it.
    copy_tree(live.path(), dir.path());
    drop(store);
    let store = Store::open_read_only(dir.path()).unwrap();
    let origin = store.restore(id).unwrap().compacted_from;
    assert!(origin.is_some());
    assert_eq!(store.list().unwrap()[0].compacted_from, origin);
}
