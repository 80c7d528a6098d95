//! Guards against session creation that syncs on a `Buffered` caller's path,
//! that makes creations of different ids wait for each other, that lets two
//! creators of one id both succeed, whose torn remains after a crash pass
//! for a session or block its id, or whose leftovers in `staging/` outlive it.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread;
use std::time::Duration;

mod common;
mod engine;

use common::store::{open, tempdir};
use engine::copy_tree;

use session_store::{
    log::IoHook, log::IoOp, Durability, Error, Item, LogOptions, RequestConfig, SessionId, Store,
    StoreOptions,
};

/// The syncs, directory syncs and renames seen, with their paths; a
/// rename onto a `LOCK` is the writer lock moving to a new active segment
/// (DESIGN.md, "The writer lock"), seen as "lock moved".
#[derive(Default)]
struct Count(Mutex<Vec<(&'static str, PathBuf)>>);

impl IoHook for Count {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let seen = match op {
            IoOp::Sync { path } => ("fdatasync", path.to_path_buf()),
            IoOp::SyncDir { path } => ("fsync dir", path.to_path_buf()),
            IoOp::Rename { to, .. } if to.ends_with("LOCK") => ("lock moved", to.to_path_buf()),
            IoOp::Rename { to, .. } => ("rename", to.to_path_buf()),
            _ => return Ok(()),
        };
        self.0.lock().unwrap().push(seen);
        Ok(())
    }
}

impl Count {
    fn take(&self) -> Vec<(&'static str, PathBuf)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn store_with(dir: &Path, durability: Durability, hook: Arc<dyn IoHook>) -> Store {
    let log = LogOptions::default().durability(durability).hook(hook);
    Store::open_with(dir, StoreOptions::default().log(log)).unwrap()
}

fn create(store: &Store, id: SessionId, text: &str) -> session_store::Result<()> {
    store
        .create_session_with_id(
            id,
            Some("sys"),
            RequestConfig::default(),
            &[Item::user_text(text)],
        )
        .map(drop)
}

fn kinds(ops: &[(&'static str, PathBuf)]) -> Vec<&'static str> {
    ops.iter().map(|(k, _)| *k).collect()
}

#[test]
fn a_buffered_creation_syncs_nothing_until_the_session_first_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let count = Arc::new(Count::default());
    let store = store_with(dir.path(), Durability::Buffered, count.clone());
    count.take();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    let session = store.session_dir(id);
    assert_eq!(
        count.take(),
        vec![("lock moved", session.join("LOCK"))],
        "the creation synced or renamed"
    );
    assert!(session.join("CREATING").exists());
    // The marker is a second name of the lock file the creation took (no
    // inode of its own), and `LOCK` now names the first segment, whose
    // descriptor holds the lock.
    {
        use std::os::unix::fs::MetadataExt;
        let id_of = |name: &str| {
            let m = std::fs::metadata(session.join(name)).unwrap();
            (m.dev(), m.ino())
        };
        assert_eq!(id_of("LOCK"), id_of("00000000000000000000.seg"));
        assert_ne!(id_of("CREATING"), id_of("LOCK"));
    }
    store
        .save_delta(id, &mut head, &[Item::assistant_text("hello")])
        .unwrap();
    assert_eq!(count.take(), vec![], "a Buffered save synced");
    assert!(store.exists(id));
    assert_eq!(store.list().unwrap().len(), 1);

    // The first sync makes the creation durable: the records, the catalog,
    // the session's directory (after the marker went) and `sessions/`.
    store.log(id).unwrap().sync().unwrap();
    let ops = count.take();
    assert_eq!(
        kinds(&ops),
        ["fdatasync", "fdatasync", "fsync dir", "fsync dir"],
        "{ops:?}"
    );
    assert_eq!(ops[1].1, session.join("catalog"));
    assert_eq!(ops[2].1, session);
    assert_eq!(ops[3].1, dir.path().join("sessions"));
    assert!(!session.join("CREATING").exists());
    // Later syncs go through the store's journal: the first makes its
    // directory and file durable, then each is one `fdatasync` of it.
    store
        .save_delta(id, &mut head, &[Item::user_text("again")])
        .unwrap();
    store.log(id).unwrap().sync().unwrap();
    let ops = count.take();
    assert_eq!(
        kinds(&ops),
        ["fsync dir", "fdatasync", "fsync dir", "fdatasync"],
        "{ops:?}"
    );
    assert!(ops[3].1.extension().is_some_and(|e| e == "jnl"), "{ops:?}");
    store
        .save_delta(id, &mut head, &[Item::user_text("and again")])
        .unwrap();
    store.log(id).unwrap().sync().unwrap();
    let ops = count.take();
    assert_eq!(kinds(&ops), ["fdatasync"]);
    assert!(ops[0].1.extension().is_some_and(|e| e == "jnl"), "{ops:?}");
    // Nor does a creation after the store closed its sessions.
    store.close().unwrap();
    count.take();
    store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    assert_eq!(
        kinds(&count.take()),
        ["lock moved"],
        "the creation synced or renamed"
    );
}

#[test]
fn a_sync_creation_returns_durable_after_two_fdatasyncs_and_two_directory_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let count = Arc::new(Count::default());
    let store = store_with(dir.path(), Durability::Sync, count.clone());
    count.take();
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    let ops = count.take();
    let session = store.session_dir(id);
    assert_eq!(
        ops.iter().map(|(k, p)| (*k, p.clone())).collect::<Vec<_>>(),
        vec![
            ("lock moved", session.join("LOCK")),
            ("fdatasync", session.join("00000000000000000000.seg")),
            ("fdatasync", session.join("catalog")),
            ("fsync dir", session.clone()),
            ("fsync dir", dir.path().join("sessions")),
        ]
    );
    assert!(!session.join("CREATING").exists());
}

/// Holds the creation of one id at its first operation on its directory
/// under `sessions/` until released.
struct Hold {
    id: String,
    reached: Mutex<Option<mpsc::Sender<()>>>,
    released: (Mutex<bool>, Condvar),
}

impl Hold {
    /// A hook that holds the creation of `id` before its `mkdir` (and a
    /// rename into its place), and what says when one got there.
    fn new(id: SessionId) -> (Arc<Hold>, mpsc::Receiver<()>) {
        let (reached_tx, reached) = mpsc::channel();
        let hold = Arc::new(Hold {
            id: id.to_string(),
            reached: Mutex::new(Some(reached_tx)),
            released: (Mutex::new(false), Condvar::new()),
        });
        (hold, reached)
    }

    /// Lets every held creation go on.
    fn release(&self) {
        *self.released.0.lock().unwrap() = true;
        self.released.1.notify_all();
    }
}

/// A `Buffered` store at `root` whose creation of `id` (with `text`) has
/// started on a thread and is held before its `mkdir` until released.
fn held_creation(
    root: &Path,
    id: SessionId,
    text: &'static str,
) -> (
    Arc<Hold>,
    Store,
    thread::JoinHandle<session_store::Result<()>>,
) {
    let (hold, reached) = Hold::new(id);
    let store = store_with(root, Durability::Buffered, hold.clone());
    let creation = {
        let store = store.clone();
        thread::spawn(move || create(&store, id, text))
    };
    reached.recv().unwrap();
    (hold, store, creation)
}

impl IoHook for Hold {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let path = match op {
            IoOp::CreateDir { path } => *path,
            IoOp::Rename { to, .. } => *to,
            _ => return Ok(()),
        };
        let ours = path.file_name().is_some_and(|n| n == self.id.as_str())
            && path.parent().and_then(Path::file_name) == Some("sessions".as_ref());
        if ours {
            if let Some(tx) = self.reached.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            let (lock, cv) = &self.released;
            let mut released = lock.lock().unwrap();
            while !*released {
                released = cv.wait(released).unwrap();
            }
        }
        Ok(())
    }
}

#[test]
fn creations_of_different_ids_do_not_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let held = SessionId::new_v7();
    let (hold, store, slow) = held_creation(dir.path(), held, "slow");
    // The held creation is in the middle of making its session; another id
    // goes ahead.
    let (done_tx, done) = mpsc::channel();
    let other = SessionId::new_v7();
    let fast = {
        let store = store.clone();
        thread::spawn(move || {
            let r = create(&store, other, "fast");
            done_tx.send(()).unwrap();
            r
        })
    };
    let went_ahead = done.recv_timeout(Duration::from_secs(20)).is_ok();
    hold.release();
    slow.join().unwrap().unwrap();
    fast.join().unwrap().unwrap();
    assert!(
        went_ahead,
        "a creation waited for another id's creation to finish"
    );
    assert!(store.exists(held) && store.exists(other));
}

#[test]
fn of_many_threads_creating_one_id_exactly_one_succeeds() {
    const THREADS: usize = 16;
    for durability in [Durability::Buffered, Durability::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let log = LogOptions::default().durability(durability);
        let store = Store::open_with(dir.path(), StoreOptions::default().log(log)).unwrap();
        for _ in 0..8 {
            let id = SessionId::new_v7();
            let barrier = Arc::new(Barrier::new(THREADS));
            let results: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    thread::spawn(move || {
                        barrier.wait();
                        create(&store, id, &format!("thread {t}")).map(|()| t)
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            let winners: Vec<usize> = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .copied()
                .collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            for r in &results {
                if let Err(e) = r {
                    assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
                }
            }
            let state = store.restore(id).unwrap();
            assert_eq!(
                state.history,
                vec![Item::user_text(format!("thread {}", winners[0]))]
            );
        }
        store.close().unwrap();
    }
}

const ROLE: &str = "SESSION_STORE_CREATION_CHILD";

/// The child side of the cross-process test: creates the session named in
/// its role and says how that went.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (id, root) = role.split_once(':').expect("id:root");
    let store = Store::open(root).unwrap();
    let said = match create(
        &store,
        id.parse().unwrap(),
        &format!("pid {}", std::process::id()),
    ) {
        Ok(()) => "created".to_string(),
        Err(Error::InvalidInput { .. }) => "refused".to_string(),
        Err(e) => format!("error {e}"),
    };
    store.close().unwrap();
    println!("CHILD {said}");
}

#[test]
fn of_many_processes_creating_one_id_exactly_one_succeeds() {
    const CHILDREN: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path()).unwrap();
    for _ in 0..3 {
        let id = SessionId::new_v7();
        let children: Vec<_> = (0..CHILDREN)
            .map(|_| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "child", "--nocapture", "--test-threads=1"])
                    .env(ROLE, format!("{id}:{}", dir.path().display()))
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let said: Vec<String> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(out.status.success(), "child failed: {stdout}");
                stdout
                    .lines()
                    .find_map(|l| l.split_once("CHILD ").map(|(_, s)| s.to_string()))
                    .unwrap_or_else(|| panic!("child said nothing: {stdout}"))
            })
            .collect();
        let created = said.iter().filter(|s| *s == "created").count();
        let refused = said.iter().filter(|s| *s == "refused").count();
        assert_eq!((created, refused), (1, CHILDREN - 1), "{said:?}");
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.restore(id).unwrap().history.len(), 1);
    }
}

/// A store whose sessions were created (and saved to) and never synced,
/// copied as a power loss could leave it: every session keeps its
/// `CREATING` marker and no process holds its lock.
fn crashed_before_the_first_sync(root: &Path) -> Vec<SessionId> {
    let live = tempfile::tempdir().unwrap();
    let store = Store::open(live.path()).unwrap();
    let ids = (0..3)
        .map(|i| {
            let (id, mut head) = store
                .create_session(
                    None,
                    RequestConfig::default(),
                    &[Item::user_text(format!("s{i}"))],
                )
                .unwrap();
            store
                .save_delta(id, &mut head, &[Item::assistant_text("ok")])
                .unwrap();
            id
        })
        .collect();
    copy_tree(live.path(), root);
    drop(store);
    ids
}

fn zero(path: &Path, range: std::ops::Range<u64>) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    let zeros = vec![0u8; (range.end - range.start) as usize];
    f.write_all_at(&zeros, range.start).unwrap();
}

fn segment_of(dir: &Path) -> PathBuf {
    dir.join("00000000000000000000.seg")
}

#[test]
fn a_creation_torn_before_its_first_sync_is_no_session_and_frees_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let ids = crashed_before_the_first_sync(dir.path());
    let sessions = dir.path().join("sessions");
    // What a power loss may leave of unsynced files: a segment whose header
    // never reached the disk, and one with no records.
    zero(&segment_of(&sessions.join(ids[0].to_string())), 0..4096);
    zero(
        &segment_of(&sessions.join(ids[1].to_string())),
        256..64 << 10,
    );
    // And a catalog that never reached it, of a session whose log did.
    zero(&sessions.join(ids[2].to_string()).join("catalog"), 0..1024);
    fs::remove_file(dir.path().join("list.cache")).unwrap();

    let store = Store::open(dir.path()).unwrap();
    let listed = store.list().unwrap();
    let listed_ids: BTreeSet<SessionId> = listed.iter().map(|s| s.id).collect();
    assert_eq!(listed_ids, BTreeSet::from([ids[2]]), "only the intact one");
    // Its lost catalog is rebuilt from the log, and is no damage.
    assert_eq!(listed[0].error, None, "{:?}", listed[0]);
    assert_eq!(listed[0].entries, 2);
    for id in &ids[..2] {
        assert!(!store.exists(*id));
        assert!(store.info(*id).unwrap().is_none());
        let err = store.session(*id).err().expect("no session");
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        // Its id is free again.
        create(&store, *id, "again").unwrap();
        assert_eq!(
            store.restore(*id).unwrap().history,
            vec![Item::user_text("again")]
        );
    }
    // The intact one is a session (a process crash keeps what a `Buffered`
    // creation wrote), and its first sync finishes its creation.
    let kept = ids[2];
    assert!(store.exists(kept));
    let err = create(&store, kept, "mine?").unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(store.restore(kept).unwrap().history.len(), 2);
    store.log(kept).unwrap().sync().unwrap();
    assert!(!store.session_dir(kept).join("CREATING").exists());
    store.close().unwrap();
    // Its catalog was written again before the first sync: without the
    // listing cache, nothing reads as damaged.
    fs::remove_file(dir.path().join("list.cache")).unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.list().unwrap().len(), 3);
    for s in store.list().unwrap() {
        assert_eq!(s.error, None, "{s:?}");
        assert_eq!(store.log(s.id).unwrap().verify().damage, None);
    }
}

#[test]
fn a_failed_buffered_creation_leaves_nothing_and_its_id_stays_free() {
    /// Fails the creation of the catalog while armed.
    struct FailCatalog(AtomicBool);
    impl IoHook for FailCatalog {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            match op {
                IoOp::Create { path }
                    if path.ends_with("catalog") && self.0.load(Ordering::SeqCst) =>
                {
                    Err(io::Error::other("injected failure"))
                }
                _ => Ok(()),
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(FailCatalog(AtomicBool::new(true)));
    let store = store_with(dir.path(), Durability::Buffered, hook.clone());
    let id = SessionId::new_v7();
    let err = create(&store, id, "first").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(!store.exists(id));
    assert_eq!(
        fs::read_dir(dir.path().join("sessions")).unwrap().count(),
        0
    );
    hook.0.store(false, Ordering::SeqCst);
    create(&store, id, "second").unwrap();
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("second")]
    );
}

#[test]
fn a_failed_creation_is_cleared_away_under_the_writer_lock() {
    /// Fails the creation of the catalog (after the writer lock moved
    /// into the first segment), then, when the failed creation removes
    /// what it made, tries the lock as another creator of the id would.
    #[derive(Default)]
    struct FailThenProbe {
        /// Whether the lock was free at a removal: `Some` once probed.
        free_at_removal: Mutex<Option<bool>>,
    }
    impl IoHook for FailThenProbe {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            match op {
                IoOp::Create { path } if path.ends_with("catalog") => {
                    Err(io::Error::other("injected failure"))
                }
                IoOp::Remove { path } | IoOp::RemoveDir { path } => {
                    let dir = if path.ends_with("catalog") {
                        path.parent().unwrap()
                    } else {
                        path
                    };
                    let lock = dir.join("LOCK");
                    let mut seen = self.free_at_removal.lock().unwrap();
                    if seen.is_none() && lock.exists() {
                        let probe = fs::File::open(&lock).unwrap();
                        *seen = Some(probe.try_lock().is_ok());
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(FailThenProbe::default());
    let store = store_with(dir.path(), Durability::Buffered, hook.clone());
    let id = SessionId::new_v7();
    let err = create(&store, id, "first").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_eq!(
        *hook.free_at_removal.lock().unwrap(),
        Some(false),
        "the failed creation's files were removed while another creator could take the id's lock"
    );
    assert!(!store.exists(id));
    assert_eq!(
        fs::read_dir(dir.path().join("sessions")).unwrap().count(),
        0
    );
}

#[test]
fn a_session_with_nothing_of_its_own_to_keep_has_an_empty_catalog_until_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let catalog_len = |id: SessionId| {
        let path = root.join("sessions").join(id.to_string()).join("catalog");
        fs::metadata(path).unwrap().len()
    };
    let cfg = || RequestConfig::model("m");
    let store = Store::open(root).unwrap();
    let (untitled, mut head) = store.create_session(Some("sys"), cfg(), &[]).unwrap();
    let task = [Item::user_text("task")];
    let (titled, _) = store.create_session(Some("sys"), cfg(), &task).unwrap();
    let (chosen, _) = store
        .create_session_with_durability(Some("sys"), cfg(), &[], Durability::Sync)
        .unwrap();
    store.close().unwrap();
    // No block for what the log says already: an untitled session's
    // identity. A title or a durability of its own needs the file.
    let lens = [untitled, titled, chosen].map(catalog_len);
    assert_eq!(lens, [0, 1024, 1024]);
    // Without the listing cache, read-only: listed from its log, no
    // damage, its creation time its id's, and nothing written.
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = Store::open_read_only(root).unwrap();
    let info = store.info(untitled).unwrap().unwrap();
    assert_eq!((info.title, info.error), (None, None));
    assert_eq!(info.created_ms, untitled.created_ms().unwrap());
    assert_eq!(info.head, Some(head));
    let listed = store.list().unwrap();
    assert!(listed.iter().all(|i| i.error.is_none()), "{listed:?}");
    drop(store);
    assert_eq!(catalog_len(untitled), 0);
    // Its first question becomes its title, which its log's first records
    // say: the save writes only its records, and the clean close gives the
    // catalog its slots.
    let store = Store::open(root).unwrap();
    let question = [Item::user_text("first question")];
    store.save_delta(untitled, &mut head, &question).unwrap();
    assert_eq!(catalog_len(untitled), 0);
    store.close().unwrap();
    assert_eq!(catalog_len(untitled), 1024);
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = Store::open_read_only(root).unwrap();
    let info = store.info(untitled).unwrap().unwrap();
    assert_eq!(info.title.as_deref(), Some("first question"));
    assert_eq!((info.error, info.head), (None, Some(head)));
}

/// A title in the log's first records stays out of an empty catalog file,
/// and every reader finds it: a read-only store without the listing cache,
/// a writer that reopens the session (a later question does not replace
/// it), and a store opened on what a crash left before any close. A title
/// that comes later than the records a reader reads for it goes into the
/// file.
#[test]
fn a_title_in_the_first_records_is_read_from_the_log_and_a_later_one_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let catalog_len = |root: &Path, id: SessionId| {
        let path = root.join("sessions").join(id.to_string()).join("catalog");
        fs::metadata(path).unwrap().len()
    };
    let cfg = || RequestConfig::model("m");
    let answer = |t: &str| Item::assistant_text(t);
    let store = Store::open(root).unwrap();
    let (early, mut eh) = store.create_session(Some("sys"), cfg(), &[]).unwrap();
    store
        .save_delta(early, &mut eh, &[answer("hello")])
        .unwrap();
    let asked = [Item::user_text("early question\nmore"), answer("a")];
    store.save_delta(early, &mut eh, &asked).unwrap();
    // Past the records a reader of an empty file reads for the title.
    let (late, mut lh) = store.create_session(Some("sys"), cfg(), &[]).unwrap();
    for i in 0..20 {
        let text = format!("step {i}");
        store.save_delta(late, &mut lh, &[answer(&text)]).unwrap();
    }
    // An untitled log past those records: its file holds slots, so that
    // no reader reads them for a title it has not.
    assert_eq!(catalog_len(root, late), 1024);
    store
        .save_delta(late, &mut lh, &[Item::user_text("late question")])
        .unwrap();
    // What a crash leaves: no close has written a clean slot anywhere, and
    // the early title is in the log only.
    let crashed = tempfile::tempdir().unwrap();
    copy_tree(root, crashed.path());
    assert_eq!(catalog_len(crashed.path(), early), 0);
    assert_eq!(catalog_len(crashed.path(), late), 1024);
    // The clean close gives the early one's catalog its slots too.
    store.close().unwrap();
    assert_eq!(catalog_len(root, early), 1024);
    for root in [root, crashed.path()] {
        let _ = fs::remove_file(root.join("list.cache"));
        let titles =
            |store: &Store| [early, late].map(|id| store.info(id).unwrap().unwrap().title.unwrap());
        let want = ["early question", "late question"];
        let ro = Store::open_read_only(root).unwrap();
        assert_eq!(titles(&ro), want, "{}", root.display());
        assert!(ro.list().unwrap().iter().all(|i| i.error.is_none()));
        drop(ro);
        let store = Store::open(root).unwrap();
        let mut head = store.head(early).unwrap().unwrap();
        let again = [Item::user_text("another question")];
        store.save_delta(early, &mut head, &again).unwrap();
        assert_eq!(titles(&store), want, "{}", root.display());
        store.close().unwrap();
        let listed: Vec<_> = Store::open_read_only(root)
            .unwrap()
            .list()
            .unwrap()
            .into_iter()
            .map(|i| i.title.unwrap())
            .collect();
        assert_eq!(listed, ["late question", "early question"]);
    }
}

/// A clear (a compaction to no history, as the Agents SDK's
/// `clear_session`) takes the title with it: the next question is the new
/// one, for the writer, for a reader after a crash (the old title is still
/// in the log's first records) and after the clean close, with or without
/// the listing cache.
#[test]
fn a_clear_forgets_the_title_and_the_next_question_is_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root).unwrap();
    let (id, head) = store
        .create_session(None, RequestConfig::model("m"), &[])
        .unwrap();
    let first = [Item::user_text("old question"), Item::assistant_text("a")];
    let head = store.append(id, head, &first).unwrap();
    let title = |store: &Store| store.info(id).unwrap().unwrap().title;
    assert_eq!(title(&store).as_deref(), Some("old question"));
    let head = store.compact(id, head, &[]).unwrap();
    assert_eq!(title(&store), None);
    let untitled = tempfile::tempdir().unwrap();
    copy_tree(root, untitled.path());
    let next = [Item::user_text("new question"), Item::assistant_text("b")];
    store.append(id, head, &next).unwrap();
    assert_eq!(title(&store).as_deref(), Some("new question"));
    let crashed = tempfile::tempdir().unwrap();
    copy_tree(root, crashed.path());
    store.close().unwrap();
    for (root, want) in [
        (root, Some("new question")),
        (crashed.path(), Some("new question")),
        (untitled.path(), None),
    ] {
        for cache in [true, false] {
            if !cache {
                let _ = fs::remove_file(root.join("list.cache"));
            }
            let ro = Store::open_read_only(root).unwrap();
            assert_eq!(title(&ro).as_deref(), want, "{}", root.display());
            let listed = ro.list().unwrap();
            assert_eq!(listed[0].title.as_deref(), want, "{}", root.display());
        }
    }
    // A compaction that keeps a history keeps the title.
    let store = Store::open(root).unwrap();
    let head = store.head(id).unwrap().unwrap();
    let summary = [Item::assistant_text("summary so far")];
    store.compact(id, head, &summary).unwrap();
    assert_eq!(title(&store).as_deref(), Some("new question"));
}

/// A fork's empty catalog is no catalog lost to a crash: the writer that
/// reopens a fork whose creation no sync covered keeps it empty, and the
/// fork keeps its parent's title (a rewritten catalog would have none).
#[test]
fn a_fork_reopened_before_its_first_sync_keeps_its_empty_catalog_and_title() {
    let dir = tempfile::tempdir().unwrap();
    let fork = {
        let live = tempfile::tempdir().unwrap();
        let store = Store::open(live.path()).unwrap();
        let (parent, head) = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("p")])
            .unwrap();
        let (fork, _) = store.fork_at(parent, head).unwrap();
        copy_tree(live.path(), dir.path());
        fork
    };
    let fork_dir = dir.path().join("sessions").join(fork.to_string());
    assert!(fork_dir.join("CREATING").exists(), "no sync covered it");
    let store = Store::open(dir.path()).unwrap();
    let mut head = store.snapshot(fork).unwrap().head().unwrap().1;
    let question = [Item::user_text("question")];
    store.save_delta(fork, &mut head, &question).unwrap();
    store.close().unwrap();
    assert!(!fork_dir.join("CREATING").exists());
    assert_eq!(fs::metadata(fork_dir.join("catalog")).unwrap().len(), 0);
    fs::remove_file(dir.path().join("list.cache")).unwrap();
    let info = Store::open_read_only(dir.path())
        .unwrap()
        .info(fork)
        .unwrap()
        .unwrap();
    assert_eq!((info.title.as_deref(), info.error), (Some("p"), None));
}

/// A session of one item in a store at `root`, closed: its id and
/// directory.
fn closed_session(root: &Path) -> (SessionId, PathBuf) {
    let store = Store::open(root).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store
        .save_delta(id, &mut head, &[Item::user_text("hello")])
        .unwrap();
    store.close().unwrap();
    (id, root.join("sessions").join(id.to_string()))
}

#[test]
fn a_session_directory_without_its_catalog_is_no_session_to_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (id, session) = closed_session(dir.path());
    fs::remove_file(session.join("catalog")).unwrap();

    // A reader's open answers it from the directory listing it makes
    // anyway: its segments are there, its catalog is not.
    let store = Store::open(dir.path()).unwrap();
    for err in [
        store.restore(id).map(|_| ()),
        store.read_log(id).map(|_| ()),
        store.restore(SessionId::new_v7()).map(|_| ()),
    ]
    .map(|r| r.expect_err("no session"))
    {
        match &err {
            Error::NotFound { what } => assert!(what.starts_with("session "), "{what}"),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
}

/// A retire between a creation's look for a retired id and its `mkdir`
/// (another store's `delete` of a session that forks read) leaves
/// the id taken: the creation is refused and the forks still read their
/// parent.
#[test]
fn a_creation_racing_the_retire_of_its_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new_v7();
    let other = Store::open(dir.path()).unwrap();
    create(&other, id, "parent").unwrap();
    let (fork, _) = other.fork_at_seq(id, 0).unwrap();
    other.sync(id).unwrap();
    other.sync(fork).unwrap();
    // Held before its `mkdir`, past its look into `retired/`.
    let (hold, creator, creation) = held_creation(dir.path(), id, "impostor");
    let retired = other.delete(id).unwrap();
    assert!(
        matches!(retired, session_store::Deletion::Retired { .. }),
        "{retired:?}"
    );
    hold.release();
    let err = creation.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(
        !creator.session_dir(id).exists(),
        "the refused creation's directory stays"
    );
    assert_eq!(
        other.restore(fork).unwrap().history,
        vec![Item::user_text("parent")]
    );
}

/// An import whose first user text is a large item (which the store keeps
/// in its payload area) takes it as its title at creation, as every reader
/// of the session then says, and a later question does not replace it.
#[test]
fn an_import_whose_first_question_is_large_is_titled_by_it() {
    use session_store::{schema::LoggedItem, wire::WireLine, LogEntry};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root).unwrap();
    let big = format!("Large imported question\n{}", "x".repeat(40_000));
    let entry = LogEntry::SessionStart {
        ts: 5,
        system_prompt: None,
        config: RequestConfig::model("m"),
        history: vec![LoggedItem::from(&Item::user_text(big))],
        forked_from: None,
        compacted_from: None,
    };
    let line = WireLine {
        seq: None,
        hash: None,
        prev_hash: None,
        entry,
    };
    let id = store.import(&[(1, line)]).unwrap();
    let want = Some("Large imported question".to_string());
    let title = |store: &Store| store.info(id).unwrap().unwrap().title;
    assert_eq!(title(&store), want);
    let mut head = store.head(id).unwrap().unwrap();
    let later = [Item::user_text("hello")];
    store.save_delta(id, &mut head, &later).unwrap();
    assert_eq!(title(&store), want);
    store.close().unwrap();
    drop(store);
    assert_eq!(title(&Store::open_read_only(root).unwrap()), want);
    fs::remove_file(root.join("list.cache")).unwrap();
    assert_eq!(title(&Store::open_read_only(root).unwrap()), want);
}

/// A session's update time never goes back to a stamp its caller chose:
/// an entry saved with an old `ts` leaves it at the time of the save, for
/// the writer and, after the close, for a reader.
#[test]
fn an_old_stamp_on_a_saved_entry_does_not_move_the_update_time_back() {
    use session_store::{ListFilter, LogEntry};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root).unwrap();
    let (id, mut head) = asked(&store, Item::user_text("q"));
    let before = store.info(id).unwrap().unwrap().updated_ms;
    let restart = LogEntry::SessionStart {
        ts: 1,
        system_prompt: None,
        config: RequestConfig::model("m"),
        history: vec![],
        forked_from: None,
        compacted_from: None,
    };
    store.save_entries(id, &mut head, &[restart]).unwrap();
    let since = ListFilter {
        updated_since_ms: Some(before),
        ..ListFilter::default()
    };
    let found = |store: &Store| store.list_filtered(&since).unwrap().len();
    let updated = |store: &Store| store.info(id).unwrap().unwrap().updated_ms;
    assert!(updated(&store) >= before);
    assert_eq!(found(&store), 1);
    store.close().unwrap();
    drop(store);
    let check = |what: &str| {
        let ro = Store::open_read_only(root).unwrap();
        assert_eq!(found(&ro), 1, "{what}");
        assert!(updated(&ro) >= before, "{what}");
    };
    check("closed");
    // A writer that opens it and saves nothing keeps the time too.
    let store = Store::open(root).unwrap();
    store.log(id).unwrap();
    store.close().unwrap();
    drop(store);
    check("reopened");
    fs::remove_file(root.join("list.cache")).unwrap();
    check("without the listing cache");
}

/// A new session with no title, then a save of `question`, its title.
fn asked(store: &Store, question: Item) -> (SessionId, session_store::EntryHash) {
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("m"), &[])
        .unwrap();
    store.save_delta(id, &mut head, &[question]).unwrap();
    (id, head)
}

/// The first write after an open sweeps what dead creations of older
/// versions left in `staging/` (an open alone only looks).
#[test]
fn the_first_write_sweeps_the_staged_leftovers_of_creations_that_died() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("kept")])
        .unwrap();
    store.close().unwrap();
    drop(store);
    let staging = dir.path().join("staging");
    let stage = |name: &str, lock_file: bool| {
        let d = staging.join(name);
        fs::create_dir(&d).unwrap();
        fs::write(d.join("00000000000000000000.seg"), b"half a session").unwrap();
        if lock_file {
            File::create(d.join("CREATING")).unwrap();
        }
        d
    };
    let dead = stage("dead", true);
    let live = stage("live", true);
    let young = stage("young-without-lock", false);
    // A creation still running holds its lock (here, this test does).
    let held = File::open(live.join("CREATING")).unwrap();
    held.lock().unwrap();
    let store = open(dir.path());
    assert!(dead.exists(), "an open alone wrote");
    let (other, _) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    assert!(!dead.exists(), "a dead creation's leftover stayed");
    assert!(live.exists(), "a running creation's directory was swept");
    assert!(
        young.exists(),
        "a fresh directory without its lock yet was swept"
    );
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("kept")]
    );
    // New creations build in place: they leave nothing in staging/.
    store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let names: BTreeSet<String> = fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["live", "young-without-lock"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert!(!store.session_dir(id).join("CREATING").exists());
    assert_eq!(store.restore(other).unwrap().history, Vec::<Item>::new());
}
