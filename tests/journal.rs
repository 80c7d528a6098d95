//! The shared journal: `Sync` commits of different sessions made durable by
//! one `fdatasync` of the store handle's journal, and what recovery makes
//! of a journal its owner left (a power loss before the segments were
//! synced, a killed process, a journal sync that failed).
//!
//! The crash images here are built from the I/O hook's record: every file
//! keeps the writes a later `fdatasync` of it covered, and loses the rest
//! (zeros where nothing durable was under them). Each such test also
//! builds the image with the journal's syncs left out, and shows that
//! acknowledged turns are then lost: the test fails if the shared sync is
//! skipped.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use session_store::log::{IoHook, IoOp};
use session_store::{
    Durability, Item, LogOptions, RecoveryMode, RequestConfig, SessionId, Store, StoreOptions, Turn,
};

fn is_journal(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jnl")
}

#[derive(Debug, Clone)]
enum Event {
    Write(PathBuf, u64, Vec<u8>),
    Sync(PathBuf),
    Create(PathBuf),
    Rename(PathBuf, PathBuf),
    Link(PathBuf, PathBuf),
    Remove(PathBuf),
}

/// Records writes and syncs, and (when armed) holds the first journal sync
/// after a frame until `hold_for` frames are written, so that several
/// sessions' commits wait on one sync.
///
/// Armed with `stall_first_frame`, the next frame's write waits half a
/// second before it is made (and recorded), or fails then with
/// `fail_stalled`: a frame still being written while others land.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    frames: AtomicUsize,
    hold_for: AtomicUsize,
    held: AtomicBool,
    stall_first_frame: AtomicBool,
    fail_stalled: AtomicBool,
}

impl IoHook for Recorder {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match op {
            IoOp::Write { path, offset, data } => {
                if is_journal(path) && data.starts_with(b"SSJF") {
                    if self.stall_first_frame.swap(false, Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(500));
                        if self.fail_stalled.load(Ordering::SeqCst) {
                            return Err(io::Error::other("injected frame write failure"));
                        }
                    }
                    self.frames.fetch_add(1, Ordering::SeqCst);
                }
                let e = Event::Write(path.to_path_buf(), *offset, data.to_vec());
                self.events.lock().unwrap().push(e);
            }
            IoOp::Sync { path } => {
                let hold = self.hold_for.load(Ordering::SeqCst);
                if is_journal(path)
                    && hold > 0
                    && self.frames.load(Ordering::SeqCst) > 0
                    && !self.held.swap(true, Ordering::SeqCst)
                {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while self.frames.load(Ordering::SeqCst) < hold && Instant::now() < deadline {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
                self.events
                    .lock()
                    .unwrap()
                    .push(Event::Sync(path.to_path_buf()));
            }
            IoOp::Allocate { path, .. } | IoOp::Create { path } => {
                let e = Event::Create(path.to_path_buf());
                self.events.lock().unwrap().push(e);
            }
            IoOp::Rename { from, to } => {
                let e = Event::Rename(from.to_path_buf(), to.to_path_buf());
                self.events.lock().unwrap().push(e);
            }
            IoOp::Link { from, to } => {
                let e = Event::Link(from.to_path_buf(), to.to_path_buf());
                self.events.lock().unwrap().push(e);
            }
            IoOp::Remove { path } => {
                let e = Event::Remove(path.to_path_buf());
                self.events.lock().unwrap().push(e);
            }
            _ => {}
        }
        Ok(())
    }
}

impl Recorder {
    fn syncs_since(&self, from: usize) -> (usize, usize) {
        let events = self.events.lock().unwrap();
        let syncs = events[from..].iter().filter_map(|e| match e {
            Event::Sync(p) => Some(is_journal(p)),
            _ => None,
        });
        syncs.fold((0, 0), |(j, s), journal| match journal {
            true => (j + 1, s),
            false => (j, s + 1),
        })
    }

    fn len(&self) -> usize {
        self.events.lock().unwrap().len()
    }
}

/// A `Sync` store at `store/` beneath `work`, its I/O recorded.
fn recorded_store(work: &Path) -> (PathBuf, Arc<Recorder>, Store) {
    let root = work.join("store");
    let hook = Arc::new(Recorder::default());
    let store = sync_store(&root, hook.clone());
    (root, hook, store)
}

fn sync_store(root: &Path, hook: Arc<dyn IoHook>) -> Store {
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .hook(hook);
    Store::open_with(root, StoreOptions::default().log(log)).unwrap()
}

fn turn_items(session: usize, turn: usize) -> Vec<Item> {
    vec![
        Item::user_text(format!(
            "session {session} turn {turn}: {}",
            "q".repeat(700)
        )),
        Item::assistant_text(format!("answer {session}/{turn}: {}", "a".repeat(2200))),
    ]
}

/// Commits `turns` Sync turns to each session from a thread of its own;
/// returns how many each had acknowledged.
fn commit_concurrently(store: &Store, ids: &[SessionId], turns: usize) -> Vec<usize> {
    thread::scope(|s| {
        let workers: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                s.spawn(move || {
                    let mut head = store.restore(id).unwrap().head.unwrap();
                    let done = store.restore(id).unwrap().turn_count as usize;
                    for t in done..done + turns {
                        let items = turn_items(k, t);
                        let turn = Turn::new(&items[..], t as u64 + 1);
                        head = store.commit_turn(id, head, &turn).unwrap();
                    }
                    done + turns
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

fn create_sessions(store: &Store, n: usize) -> Vec<SessionId> {
    (0..n)
        .map(|_| {
            let config = RequestConfig::model("gpt-5");
            store.create_session(None, config, &[]).unwrap().0
        })
        .collect()
}

#[test]
fn sync_commits_of_several_sessions_share_one_fdatasync() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(Recorder::default());
    let store = sync_store(dir.path(), hook.clone());
    let ids = create_sessions(&store, 4);
    // One turn each first: the journal file exists from then on.
    commit_concurrently(&store, &ids[..1], 1);
    let from = hook.len();
    let written = hook.frames.load(Ordering::SeqCst);
    hook.hold_for.store(written + 4, Ordering::SeqCst);
    let acked = commit_concurrently(&store, &ids, 1);
    let (journal, segments) = hook.syncs_since(from);
    // The first leader's sync waited for all four frames; at most one more
    // sync covers the three written while it ran.
    assert_eq!(segments, 0, "no segment was synced for a commit");
    assert!(journal <= 2, "{journal} journal syncs for 4 commits");
    for (id, n) in ids.iter().zip(acked) {
        assert_eq!(store.restore(*id).unwrap().turn_count, n as u64);
    }
    store.close().unwrap();
    // A clean close leaves no journal behind.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Copies `root` to `out` as a power loss after `events` could leave it:
/// each file keeps what a sync of it covered; a write after its file's last
/// sync is undone (zeros, or the synced bytes under it). With
/// `skip_journal_syncs`, the journal's syncs count for nothing.
fn crash_image(root: &Path, out: &Path, events: &[Event], skip_journal_syncs: bool) {
    crash_image_at(root, out, events, events.len(), None, skip_journal_syncs);
}

/// [`crash_image`] for a power loss after `events[..at]` (the tree holds
/// the writes of all of `events`: those from `at` on are undone too), where
/// with `landed` each unsynced write before `at` reached the disk or not,
/// as the seed says. Files are followed through renames and links: the
/// image holds the names there were at the crash (every directory
/// operation before it lands), each with what its file kept.
fn crash_image_at(
    root: &Path,
    out: &Path,
    events: &[Event],
    at: usize,
    mut landed: Option<&mut u64>,
    skip_journal_syncs: bool,
) {
    type Writes<'a> = Vec<(u64, &'a [u8], bool)>;
    let mut names: HashMap<PathBuf, usize> = HashMap::new();
    let mut names_at = None;
    let mut inodes = 0usize;
    let mut inode = |names: &mut HashMap<PathBuf, usize>, p: &Path| {
        *names.entry(p.to_path_buf()).or_insert_with(|| {
            inodes += 1;
            inodes
        })
    };
    let mut durable: HashMap<usize, Writes<'_>> = HashMap::new();
    let mut pending: HashMap<usize, Writes<'_>> = HashMap::new();
    let mut managed = std::collections::HashSet::new();
    for (k, e) in events.iter().enumerate() {
        if k == at {
            names_at = Some(names.clone());
        }
        match e {
            Event::Write(p, off, data) => {
                let i = inode(&mut names, p);
                let lands = k < at && landed.as_deref_mut().is_some_and(coin);
                pending.entry(i).or_default().push((*off, data, lands));
            }
            Event::Sync(p) => {
                let i = inode(&mut names, p);
                if k < at && !(skip_journal_syncs && is_journal(p)) {
                    let moved = pending.remove(&i).unwrap_or_default();
                    durable.entry(i).or_default().extend(moved);
                }
            }
            Event::Create(p) => {
                managed.insert(p.clone());
                names.remove(p);
                inode(&mut names, p);
            }
            Event::Rename(from, to) => {
                managed.extend([from.clone(), to.clone()]);
                if let Some(i) = names.remove(from) {
                    names.insert(to.clone(), i);
                }
            }
            Event::Link(from, to) => {
                managed.insert(to.clone());
                if let Some(&i) = names.get(from) {
                    names.insert(to.clone(), i);
                }
            }
            Event::Remove(p) => {
                managed.insert(p.clone());
                names.remove(p);
            }
        }
    }
    let names_at = names_at.unwrap_or_else(|| names.clone());
    copy_tree(root, out);
    let inside = |p: &Path| out.join(p.strip_prefix(root).unwrap());
    for p in &managed {
        let _ = std::fs::remove_file(inside(p));
    }
    for (name, i) in &names_at {
        // The file's bytes now, under a name it has now.
        let Some((now, _)) = names.iter().find(|(_, j)| *j == i) else {
            continue;
        };
        let Ok(mut bytes) = std::fs::read(now) else {
            continue;
        };
        let kept = durable.get(i).map(Vec::as_slice).unwrap_or_default();
        let writes = pending.get(i).map(Vec::as_slice).unwrap_or_default();
        for &(off, data, _) in writes {
            let (from, to) = (off as usize, (off as usize + data.len()).min(bytes.len()));
            if from >= to {
                continue;
            }
            bytes[from..to].fill(0);
            for &(k_off, k_data, _) in kept {
                let (k_from, k_to) = (k_off as usize, k_off as usize + k_data.len());
                let (a, b) = (from.max(k_from), to.min(k_to));
                if a < b {
                    bytes[a..b].copy_from_slice(&k_data[a - k_from..b - k_from]);
                }
            }
        }
        for &(off, data, lands) in writes {
            let from = off as usize;
            let to = (from + data.len()).min(bytes.len());
            if lands && from < to {
                bytes[from..to].copy_from_slice(&data[..to - from]);
            }
        }
        std::fs::write(inside(name), bytes).unwrap();
    }
}

/// A fair coin from `seed` (xorshift).
fn coin(seed: &mut u64) -> bool {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed & 1 == 1
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// How many of `acked` turns each session of the image at `root` holds.
fn turns_kept(root: &Path, ids: &[SessionId]) -> Vec<u64> {
    let store = Store::open(root).unwrap();
    ids.iter()
        .map(|&id| store.restore(id).map_or(0, |s| s.turn_count))
        .collect()
}

#[test]
fn turns_acknowledged_by_one_journal_sync_survive_a_power_loss_before_the_checkpoint() {
    let work = tempfile::tempdir().unwrap();
    let (root, hook, store) = recorded_store(work.path());
    let ids = create_sessions(&store, 6);
    let acked = commit_concurrently(&store, &ids, 12);
    // The power fails here: after the acknowledgements, before any close
    // or checkpoint synced a segment.
    let events = hook.events.lock().unwrap().clone();
    let (journal, segments) = {
        let syncs = events.iter().filter_map(|e| match e {
            Event::Sync(p) => Some(is_journal(p)),
            _ => None,
        });
        syncs.fold(
            (0, 0),
            |(j, s), is| if is { (j + 1, s) } else { (j, s + 1) },
        )
    };
    assert!(journal > 0 && journal < 6 * 12, "{journal} journal syncs");
    let image = work.path().join("image");
    crash_image(&root, &image, &events, false);
    let acked: Vec<u64> = acked.into_iter().map(|n| n as u64).collect();
    assert_eq!(turns_kept(&image, &ids), acked, "{segments} segment syncs");
    // Every turn intact, in order; the journal is gone once recovered.
    let reopened = Store::open(&image).unwrap();
    for (k, id) in ids.iter().enumerate() {
        let state = reopened.restore(*id).unwrap();
        let want: Vec<Item> = (0..12).flat_map(|t| turn_items(k, t)).collect();
        assert_eq!(state.history, want);
        assert!(reopened.verify(*id).unwrap().damage.is_none());
    }
    let journals = std::fs::read_dir(image.join("journal")).unwrap().count();
    assert_eq!(journals, 0);
    // Without the journal's syncs, the same crash loses acknowledged turns.
    let skipped = work.path().join("skipped");
    crash_image(&root, &skipped, &events, true);
    let kept = turns_kept(&skipped, &ids);
    assert!(
        kept.iter().zip(&acked).any(|(k, a)| k < a),
        "the test cannot see the journal: {kept:?} of {acked:?}"
    );
    store.abandon();
}

/// Power losses at random points of a workload whose sessions roll often
/// (16 KiB first segments) and mix `Buffered` turns with `Sync` ones: every
/// turn a `Sync` commit acknowledged before the crash point is there after
/// recovery, in order, and nothing else but whole turns.
#[test]
fn every_acknowledged_turn_survives_power_losses_at_random_points() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let root = work.path().join("store");
    let hook = Arc::new(Recorder::default());
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .initial_segment_size(16 << 10)
        .segment_size(64 << 10)
        .hook(hook.clone());
    let store = Store::open_with(&root, StoreOptions::default().log(log)).unwrap();
    let ids = create_sessions(&store, 4);
    let start = hook.len();
    // (session, turns acknowledged, the event count when it returned)
    let acks = Mutex::new(Vec::new());
    thread::scope(|s| {
        for (k, &id) in ids.iter().enumerate() {
            let (store, hook, acks) = (&store, &hook, &acks);
            s.spawn(move || {
                let mut head = store.restore(id).unwrap().head.unwrap();
                for t in 0..60 {
                    // Two Buffered turns, then a Sync one, which makes all
                    // three durable: a segment sealed meanwhile holds
                    // records no frame has.
                    let items = turn_items(k, t);
                    let durability = match t % 3 {
                        2 => Durability::Sync,
                        _ => Durability::Buffered,
                    };
                    let turn = Turn::new(&items[..], t as u64 + 1).durability(durability);
                    head = store.commit_turn(id, head, &turn).unwrap();
                    if durability == Durability::Sync {
                        acks.lock().unwrap().push((k, t as u64 + 1, hook.len()));
                    }
                }
            });
        }
    });
    let events = hook.events.lock().unwrap().clone();
    let acks = acks.into_inner().unwrap();
    // `JOURNAL_CRASH_TRIALS` and `JOURNAL_CRASH_SEED` widen the search.
    let env =
        |name: &str, default: u64| std::env::var(name).map_or(default, |v| v.parse().unwrap());
    let mut seed = env("JOURNAL_CRASH_SEED", 0x9e37_79b9_7f4a_7c15);
    for trial in 0..env("JOURNAL_CRASH_TRIALS", 24) {
        coin(&mut seed);
        let at = start + (seed % (events.len() - start) as u64) as usize;
        let image = work.path().join(format!("crash-{trial}"));
        let mut landed = seed;
        crash_image_at(&root, &image, &events, at, Some(&mut landed), false);
        let reopened = Store::open(&image).unwrap();
        for (k, id) in ids.iter().enumerate() {
            let acked = acks
                .iter()
                .filter(|(s, _, when)| *s == k && *when <= at)
                .map(|(_, n, _)| *n)
                .max()
                .unwrap_or(0);
            let state = reopened.restore(*id).unwrap();
            let why = format!("trial {trial}, crash at event {at}, session {k}");
            assert!(
                state.turn_count >= acked,
                "{why}: {} < {acked}",
                state.turn_count
            );
            let want: Vec<Item> = (0..state.turn_count as usize)
                .flat_map(|t| turn_items(k, t))
                .collect();
            assert_eq!(state.history, want, "{why}");
            assert!(reopened.verify(*id).unwrap().damage.is_none(), "{why}");
        }
        drop(reopened);
        std::fs::remove_dir_all(&image).unwrap();
    }
    store.abandon();
}

#[test]
fn a_journal_that_rotated_recovers_what_its_files_hold() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let (root, hook, store) = recorded_store(work.path());
    let ids = create_sessions(&store, 4);
    // About 3 KiB a commit over 4 sessions: more than two 32 MiB files.
    let acked = commit_concurrently(&store, &ids, 6000);
    let events = hook.events.lock().unwrap().clone();
    let files: std::collections::BTreeSet<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Sync(p) if is_journal(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(files.len(), 2, "both journal files taken up: {files:?}");
    let image = work.path().join("image");
    crash_image(&root, &image, &events, false);
    let acked: Vec<u64> = acked.into_iter().map(|n| n as u64).collect();
    assert_eq!(turns_kept(&image, &ids), acked);
    store.abandon();
}

/// Each session commits its next turn from a thread of its own, each
/// thread started 100 ms after the one before; returns whether each commit
/// was acknowledged.
fn commit_one_each_staggered(store: &Store, ids: &[SessionId]) -> Vec<bool> {
    thread::scope(|s| {
        let workers: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                let worker = s.spawn(move || {
                    let state = store.restore(id).unwrap();
                    let turn = state.turn_count as usize;
                    let items = turn_items(k, turn);
                    let next = Turn::new(&items[..], turn as u64 + 1);
                    store.commit_turn(id, state.head.unwrap(), &next).is_ok()
                });
                thread::sleep(Duration::from_millis(100));
                worker
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// Two sessions commit a turn each, the second 100 ms after the first,
/// whose frame's write is stalled for half a second (and fails then, with
/// `fail`); then the power fails. Returns whether each turn was
/// acknowledged, and how many turns each session's image holds.
fn stalled_first_frame(fail: bool) -> (Vec<bool>, Vec<u64>) {
    let work = tempfile::tempdir().unwrap();
    let (root, hook, store) = recorded_store(work.path());
    let ids = create_sessions(&store, 2);
    hook.fail_stalled.store(fail, Ordering::SeqCst);
    hook.stall_first_frame.store(true, Ordering::SeqCst);
    let acked = commit_one_each_staggered(&store, &ids);
    let events = hook.events.lock().unwrap().clone();
    let image = work.path().join("image");
    crash_image(&root, &image, &events, false);
    let kept = turns_kept(&image, &ids);
    store.abandon();
    (acked, kept)
}

/// Frames are written outside the journal's lock, so they land out of
/// order: a sync that began while an earlier frame was still being
/// written covers neither it nor those after it.
#[test]
fn a_frame_still_being_written_is_not_acknowledged_by_a_sync_begun_before_it_landed() {
    let (acked, kept) = stalled_first_frame(false);
    assert_eq!(acked, [true, true]);
    assert_eq!(kept, [1, 1], "an acknowledged turn lost to a power loss");
}

/// A frame whose write failed stops the journal's reading: the frames
/// written after it, whose writes went well, sync their segments.
#[test]
fn frames_after_one_that_failed_to_write_sync_their_segments() {
    let (acked, kept) = stalled_first_frame(true);
    assert_eq!(acked, [true, true], "a fallback to the segment's sync");
    assert_eq!(kept, [1, 1], "an acknowledged turn lost to a power loss");
}

/// A commit whose frame is still being written when the store closes (its
/// session kept open past the close by another handle, here a `Log`) is
/// acknowledged and kept: the close waits for the frame and its sync. A
/// commit of that session after the close is kept as well, and nothing
/// hangs. Each turn survives a power loss right after.
#[test]
fn a_frame_landing_while_the_store_closes_is_kept_and_later_commits_go_on() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let (root, hook, store) = recorded_store(work.path());
    let ids = create_sessions(&store, 1);
    commit_concurrently(&store, &ids, 1);
    let kept_open = store.log(ids[0]).unwrap();
    hook.stall_first_frame.store(true, Ordering::SeqCst);
    let (acked, closed) = thread::scope(|s| {
        let commit = s.spawn(|| commit_concurrently(&store, &ids, 1));
        thread::sleep(Duration::from_millis(100));
        let closed = store.close();
        (commit.join().unwrap(), closed)
    });
    closed.unwrap();
    assert_eq!(acked, [2]);
    assert_eq!(commit_concurrently(&store, &ids, 1), [3]);
    let events = hook.events.lock().unwrap().clone();
    let image = work.path().join("image");
    crash_image(&root, &image, &events, false);
    assert_eq!(turns_kept(&image, &ids), [3], "an acknowledged turn lost");
    drop(kept_open);
    // The commit after the close took the journal up again; the next
    // close leaves none behind.
    store.close().unwrap();
    let left = std::fs::read_dir(root.join("journal")).unwrap().count();
    assert_eq!(left, 0);
}

fn shm() -> PathBuf {
    match Path::new("/dev/shm").is_dir() {
        true => PathBuf::from("/dev/shm"),
        false => std::env::temp_dir(),
    }
}

/// Fails every journal `fdatasync` once `fail` is set.
struct FailJournalSync {
    fail: AtomicBool,
}

impl IoHook for FailJournalSync {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match op {
            IoOp::Sync { path } if is_journal(path) && self.fail.load(Ordering::SeqCst) => {
                Err(io::Error::other("injected journal fdatasync failure"))
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn a_failed_journal_sync_acknowledges_nothing_and_later_commits_sync_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(FailJournalSync {
        fail: AtomicBool::new(false),
    });
    let store = sync_store(dir.path(), hook.clone());
    let ids = create_sessions(&store, 2);
    commit_concurrently(&store, &ids, 1);
    hook.fail.store(true, Ordering::SeqCst);
    let head = store.restore(ids[0]).unwrap().head.unwrap();
    let items = turn_items(0, 1);
    let failed = store.commit_turn(ids[0], head, &Turn::new(&items[..], 2));
    assert!(
        failed.is_err(),
        "a commit whose sync failed was acknowledged"
    );
    // The other session's next commit does not count on the journal.
    let head = store.restore(ids[1]).unwrap().head.unwrap();
    let items = turn_items(1, 1);
    store
        .commit_turn(ids[1], head, &Turn::new(&items[..], 2))
        .unwrap();
    assert_eq!(store.restore(ids[1]).unwrap().turn_count, 2);
}

/// Fails the first journal `fdatasync` once armed, after holding it for
/// half a second (so that another session's frame lands meanwhile).
#[derive(Default)]
struct FailOneSlowJournalSync {
    armed: AtomicBool,
}

impl IoHook for FailOneSlowJournalSync {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match op {
            IoOp::Sync { path } if is_journal(path) && self.armed.swap(false, Ordering::SeqCst) => {
                thread::sleep(Duration::from_millis(500));
                Err(io::Error::other("injected journal fdatasync failure"))
            }
            _ => Ok(()),
        }
    }
}

/// A frame that landed while a journal sync was failing was not covered by
/// it: its commit syncs its segment instead of failing with the one the
/// sync covered.
#[test]
fn a_frame_after_a_failed_journal_sync_falls_back_to_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(FailOneSlowJournalSync::default());
    let store = sync_store(dir.path(), hook.clone());
    let ids = create_sessions(&store, 2);
    commit_concurrently(&store, &ids, 1);
    hook.armed.store(true, Ordering::SeqCst);
    let results = commit_one_each_staggered(&store, &ids);
    assert_eq!(
        results,
        [false, true],
        "the covered commit fails, the later one falls back"
    );
    assert_eq!(store.restore(ids[1]).unwrap().turn_count, 2);
}

const ROLE: &str = "SESSION_STORE_JOURNAL_CHILD";

/// The child side of the kill test: commits Sync turns to the sessions
/// named in its role from a thread each, printing each acknowledgement,
/// until it is killed.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (root, ids) = role.split_once('|').expect("root|ids");
    let ids: Vec<SessionId> = ids.split(',').map(|s| s.parse().unwrap()).collect();
    let log = LogOptions::default().durability(Durability::Sync);
    let store = Store::open_with(root, StoreOptions::default().log(log)).unwrap();
    thread::scope(|s| {
        for (k, &id) in ids.iter().enumerate() {
            let store = &store;
            s.spawn(move || {
                let mut head = store.restore(id).unwrap().head.unwrap();
                for t in 0.. {
                    let items = turn_items(k, t);
                    head = store
                        .commit_turn(id, head, &Turn::new(&items[..], t as u64 + 1))
                        .unwrap();
                    println!("ACK {k} {}", t + 1);
                }
            });
        }
    });
}

#[test]
fn a_killed_writer_loses_no_acknowledged_turn_and_its_journal_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let ids = {
        let store = Store::open(dir.path()).unwrap();
        let ids = create_sessions(&store, 4);
        store.close().unwrap();
        ids
    };
    let list: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, format!("{}|{}", dir.path().display(), list.join(",")))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(700));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let mut acked = [0u64; 4];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(rest) = line.strip_prefix("ACK ") {
            let (k, n) = rest.split_once(' ').unwrap();
            let k: usize = k.parse().unwrap();
            acked[k] = acked[k].max(n.parse().unwrap());
        }
    }
    assert!(
        acked.iter().all(|&n| n > 0),
        "the child committed: {acked:?}"
    );
    let journal = dir.path().join("journal");
    assert!(std::fs::read_dir(&journal).unwrap().count() > 0);
    let store = Store::open(dir.path()).unwrap();
    for (k, id) in ids.iter().enumerate() {
        let state = store.restore(*id).unwrap();
        assert!(
            state.turn_count >= acked[k],
            "{k}: {} < {}",
            state.turn_count,
            acked[k]
        );
        assert!(store.verify(*id).unwrap().damage.is_none());
    }
    assert_eq!(std::fs::read_dir(&journal).unwrap().count(), 0);
}

/// Whatever bytes an orphaned journal holds (garbage, a valid header with
/// garbage frames, a real journal with bytes flipped), opening the store
/// never panics, and every session still holds at least what its segments
/// held (frames that do not continue a log are never applied).
#[test]
fn a_damaged_orphan_journal_never_panics_and_never_rewrites_history() {
    use proptest::prelude::*;
    let work = tempfile::tempdir_in(shm()).unwrap();
    let (root, _, store) = recorded_store(work.path());
    let ids = create_sessions(&store, 2);
    commit_concurrently(&store, &ids, 3);
    let (_, journal) = only_journal(&root);
    store.close().unwrap();
    let want: Vec<Vec<Item>> = ids
        .iter()
        .map(|id| {
            Store::open_read_only(&root)
                .unwrap()
                .restore(*id)
                .unwrap()
                .history
        })
        .collect();
    let base = work.path().join("base");
    copy_tree(&root, &base);
    let used = journal.iter().rposition(|&b| b != 0).unwrap_or(0) + 1;
    let cases = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..4096),
        proptest::collection::vec((0..used, any::<u8>()), 1..8).prop_map(move |flips| {
            let mut bytes = journal.clone();
            bytes.truncate(used);
            for (at, b) in flips {
                bytes[at] ^= b.max(1);
            }
            bytes
        }),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    });
    let n = AtomicUsize::new(0);
    runner
        .run(&cases, |bytes| {
            let k = n.fetch_add(1, Ordering::SeqCst);
            let image = work.path().join(format!("case-{k}"));
            copy_tree(&base, &image);
            std::fs::create_dir_all(image.join("journal")).unwrap();
            let name = format!("{}-0.jnl", "ab".repeat(16));
            std::fs::write(image.join("journal").join(name), &bytes).unwrap();
            let opened = Store::open(&image);
            prop_assert!(opened.is_ok(), "{:?}", opened.err());
            let store = opened.unwrap();
            for (id, want) in ids.iter().zip(&want) {
                prop_assert_eq!(&store.restore(*id).unwrap().history, want);
            }
            drop(store);
            std::fs::remove_dir_all(&image).unwrap();
            Ok(())
        })
        .unwrap();
}

/// The one journal file under `root`, with its bytes.
fn only_journal(root: &Path) -> (PathBuf, Vec<u8>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("journal"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let path = files.pop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// `n` sessions with one turn each, closed, copied to `copy`; then their
/// second turns acknowledged through the journal only (the handle
/// abandoned). Returns the ids, the journal's bytes, and the first
/// session's directory relative to the store's root.
fn second_turns_in_a_journal(
    work: &Path,
    n: usize,
    copy: &Path,
) -> (Vec<SessionId>, Vec<u8>, PathBuf) {
    let root = work.join("store");
    let store = sync_store(&root, Arc::new(Recorder::default()));
    let ids = create_sessions(&store, n);
    commit_concurrently(&store, &ids, 1);
    let session = store.session_dir(ids[0]);
    store.close().unwrap();
    copy_tree(&root, copy);
    let store = sync_store(&root, Arc::new(Recorder::default()));
    commit_concurrently(&store, &ids, 1);
    let (_, frames) = only_journal(&root);
    store.abandon();
    let session = session.strip_prefix(&root).unwrap().to_path_buf();
    (ids, frames, session)
}

fn store_with(root: &Path, recovery: RecoveryMode) -> Store {
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .recovery(recovery);
    Store::open_with(root, StoreOptions::default().log(log)).unwrap()
}

/// Acknowledged records that only an orphaned journal holds, whose frames
/// do not continue their session's log (here the log went on with another
/// second turn), are never dropped silently: the open names the session
/// and the journal file, the file is kept, and the session is read as its
/// log holds it but not written, until a `Salvage` open goes on without
/// them. The other session's frames are put back as usual.
#[test]
fn journal_frames_that_do_not_continue_their_log_keep_the_file_and_stop_the_sessions_writes() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let other = work.path().join("other");
    let (ids, frames, _) = second_turns_in_a_journal(work.path(), 2, &other);
    // The copy goes on with another second turn in session 0.
    let store = store_with(&other, RecoveryMode::Strict);
    let state = store.restore(ids[0]).unwrap();
    let items = turn_items(99, 1);
    store
        .commit_turn(ids[0], state.head.unwrap(), &Turn::new(&items[..], 2))
        .unwrap();
    let own_history = store.restore(ids[0]).unwrap().history;
    store.close().unwrap();
    let orphan = other
        .join("journal")
        .join(format!("{}-0.jnl", "ef".repeat(16)));
    std::fs::write(&orphan, &frames).unwrap();

    let store = store_with(&other, RecoveryMode::Strict);
    let unapplied = store.unapplied_journals();
    assert_eq!(unapplied.len(), 1, "{unapplied:?}");
    assert_eq!(unapplied[0].session, ids[0]);
    assert_eq!(unapplied[0].journal, orphan);
    assert!(!unapplied[0].dropped);
    assert!(
        unapplied[0].reason.contains("chain"),
        "{}",
        unapplied[0].reason
    );
    // Session 1's frame continued its log: put back.
    assert_eq!(store.restore(ids[1]).unwrap().turn_count, 2);
    // Session 0 reads as its log holds it, and refuses writes.
    let state = store.restore(ids[0]).unwrap();
    assert_eq!(state.history, own_history);
    let items = turn_items(0, 2);
    let refused = store.commit_turn(ids[0], state.head.unwrap(), &Turn::new(&items[..], 3));
    match refused {
        Err(session_store::Error::JournalUnapplied {
            session, journal, ..
        }) => assert_eq!((session, journal), (ids[0], orphan.clone())),
        other => panic!("{other:?}"),
    }
    commit_concurrently(&store, &ids[1..], 1);
    store.close().unwrap();
    assert!(orphan.exists(), "the journal was removed");
    // The next open tries again, and refuses again.
    let store = store_with(&other, RecoveryMode::Strict);
    assert_eq!(store.unapplied_journals().len(), 1);
    assert_eq!(store.restore(ids[1]).unwrap().turn_count, 3);
    store.close().unwrap();

    // Salvage goes on without them, and the file goes.
    let store = store_with(&other, RecoveryMode::Salvage);
    let unapplied = store.unapplied_journals();
    assert_eq!(unapplied.len(), 1);
    assert!(unapplied[0].dropped);
    commit_concurrently(&store, &ids[..1], 1);
    store.close().unwrap();
    assert!(!orphan.exists(), "a salvaged journal was kept");
    let store = store_with(&other, RecoveryMode::Strict);
    assert!(store.unapplied_journals().is_empty());
    assert_eq!(store.restore(ids[0]).unwrap().turn_count, 3);
    store.close().unwrap();
}

/// Fails every `fdatasync` of a segment: recovery's checkpoint of the
/// frames it put back fails.
struct FailSegmentSync;

impl IoHook for FailSegmentSync {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match op {
            IoOp::Sync { path } if path.extension().is_some_and(|e| e == "seg") => {
                Err(io::Error::other("injected segment sync failure"))
            }
            _ => Ok(()),
        }
    }
}

/// Frames kept for no fault of theirs (their log would not open, or not
/// take them) name their journal file, not the log's, and no recovery
/// mode drops them: a log whose segment header is damaged refuses its
/// writes with the orphan named; under `Salvage`, a log whose sync fails
/// keeps the file too; once it syncs, the frames are put back.
#[test]
fn frames_kept_for_no_fault_of_theirs_survive_every_mode_and_name_their_file() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let base = work.path().join("base");
    let (ids, frames, session) = second_turns_in_a_journal(work.path(), 1, &base);
    let with_orphan = |name: &str| {
        let image = work.path().join(name);
        copy_tree(&base, &image);
        let orphan = image
            .join("journal")
            .join(format!("{}-0.jnl", "ab".repeat(16)));
        std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
        std::fs::write(&orphan, &frames).unwrap();
        let session = image.join(&session);
        (image, orphan, session)
    };

    // A damaged segment header: the log's open fails, naming the segment.
    let (image, orphan, session) = with_orphan("damaged");
    let segment = std::fs::read_dir(&session)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    let store = store_with(&image, RecoveryMode::Strict);
    let unapplied = store.unapplied_journals();
    assert_eq!(unapplied.len(), 1, "{unapplied:?}");
    assert_eq!(unapplied[0].journal, orphan);
    assert!(!unapplied[0].dropped);
    drop(store);
    assert!(orphan.exists());

    // Salvage, with the log's sync failing: kept.
    let (image, orphan, _) = with_orphan("failing");
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .recovery(RecoveryMode::Salvage)
        .hook(Arc::new(FailSegmentSync));
    let store = Store::open_with(&image, StoreOptions::default().log(log)).unwrap();
    let unapplied = store.unapplied_journals();
    assert_eq!(unapplied.len(), 1, "{unapplied:?}");
    assert_eq!(unapplied[0].journal, orphan);
    assert!(
        !unapplied[0].dropped,
        "salvage dropped frames it could apply"
    );
    drop(store);
    assert!(orphan.exists(), "salvage removed frames it could apply");
    let store = store_with(&image, RecoveryMode::Salvage);
    assert!(store.unapplied_journals().is_empty());
    assert_eq!(store.restore(ids[0]).unwrap().turn_count, 2);
    store.close().unwrap();
}

/// A journal of another layout version (version 1 framed format 8's
/// records) is never replayed, since its records would land in a format 9
/// segment, and never removed: the open leaves it in place and the
/// sessions read as their segments hold them.
#[test]
fn an_orphan_journal_of_another_version_is_left_in_place_unread() {
    let work = tempfile::tempdir_in(shm()).unwrap();
    let root = work.path().join("store");
    let store = sync_store(&root, Arc::new(Recorder::default()));
    let ids = create_sessions(&store, 2);
    commit_concurrently(&store, &ids, 3);
    let (_, mut journal) = only_journal(&root);
    store.close().unwrap();
    let want: Vec<Vec<Item>> = ids.iter().map(|id| store_history(&root, *id)).collect();
    // The header as version 1 wrote it: the version field, its CRC again.
    journal[8..12].copy_from_slice(&1u32.to_le_bytes());
    journal[12] = 0;
    let crc = crc32fast::hash(&journal[8..64]);
    journal[4..8].copy_from_slice(&crc.to_le_bytes());
    let orphan = root
        .join("journal")
        .join(format!("{}-0.jnl", "cd".repeat(16)));
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, &journal).unwrap();
    let store = Store::open(&root).unwrap();
    for (id, want) in ids.iter().zip(&want) {
        assert_eq!(&store.restore(*id).unwrap().history, want);
    }
    store.close().unwrap();
    assert_eq!(std::fs::read(&orphan).unwrap(), journal, "left as it was");
    // As version 2 (this layout's), the same file is an orphan to recover.
    journal[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&journal[8..64]);
    journal[4..8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&orphan, &journal).unwrap();
    Store::open(&root).unwrap().close().unwrap();
    assert!(
        !orphan.exists(),
        "a journal of this version is recovered and removed"
    );
}

fn store_history(root: &Path, id: SessionId) -> Vec<Item> {
    Store::open_read_only(root)
        .unwrap()
        .restore(id)
        .unwrap()
        .history
}

/// A `Buffered` store's eviction lets a session go without a sync, but not
/// one whose records are durable through the journal only: the release
/// syncs its segment first (the release, or the drop right behind it),
/// since the journal forgets it at its rotation.
#[test]
fn an_evicted_session_with_journal_only_records_syncs_its_segment_first() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(Recorder::default());
    let log = LogOptions::default().hook(hook.clone());
    let opts = StoreOptions::default().log(log).max_open_sessions(1);
    let store = Store::open_with(dir.path(), opts).unwrap();
    let a = create_sessions(&store, 1)[0];
    store.sync(a).unwrap();
    let head = store.restore(a).unwrap().head.unwrap();
    let items = turn_items(0, 0);
    let turn = Turn::new(&items[..], 1).durability(Durability::Sync);
    store.commit_turn(a, head, &turn).unwrap();
    let from = hook.len();
    assert_eq!(hook.syncs_since(from), (0, 0));
    // A second session takes the one open slot: A is let go.
    let b = create_sessions(&store, 1)[0];
    store.restore(b).unwrap();
    let a_dir = store.session_dir(a);
    let synced_a = hook.events.lock().unwrap()[from..].iter().any(|e| {
        matches!(e, Event::Sync(p) if p.starts_with(&a_dir) && p.extension().is_some_and(|x| x == "seg"))
    });
    assert!(synced_a, "A's segment was not synced when it was let go");
    store.close().unwrap();
}
