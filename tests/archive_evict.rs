//! Guards eviction of archived segments from the local disk: a session with
//! an evicted prefix opens, restores and appends with no archive reachable;
//! reads that reach the prefix fetch it back (checked before anything is
//! placed) or fail with a typed error naming the range; eviction refuses
//! what the archive does not hold byte for byte; a failure between the
//! record and the removal, or during a fetch-back, leaves a session that
//! opens and verifies; read-only inspection writes nothing.

mod s3;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use s3::S3Server;
use session_store::{
    log::IoHook, log::IoOp, log::EVICTED_FILE, Archive, EntryHash, Error, Item, LogOptions,
    RequestConfig, SessionId, Store, StoreOptions,
};

/// Small segments, so that a few turns seal several.
fn opts() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(16 << 10))
}

fn add_turns(store: &Store, id: SessionId, head: &mut EntryHash, from: usize, turns: usize) {
    for n in from..from + turns {
        let items = [
            Item::user_text(format!("question {n}: {}", "why? ".repeat(100))),
            Item::assistant_text(format!("answer {n}: {}", "because. ".repeat(60))),
        ];
        store.save_delta(id, head, &items).unwrap();
    }
}

/// A session of 60 turns, compacted in place, then 10 more: the segments
/// before the compaction's `SessionStart` are evictable.
fn compacted_session(store: &Store) -> SessionId {
    let (id, mut head) = store
        .create_session(Some("Be brief."), RequestConfig::model("gpt-5"), &[])
        .unwrap();
    add_turns(store, id, &mut head, 0, 60);
    head = store
        .compact(id, head, &[Item::assistant_text("summary of 60 turns")])
        .unwrap();
    add_turns(store, id, &mut head, 60, 10);
    id
}

/// A compacted session pushed to an in-memory archive.
fn pushed_to_memory() -> (Archive, tempfile::TempDir, Store, SessionId) {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = compacted_session(&store);
    a.push(&store, id).unwrap();
    (a, here, store, id)
}

/// A compacted session pushed to an archive on a fresh S3 server.
fn pushed_to_s3() -> (S3Server, Archive, tempfile::TempDir, Store, SessionId) {
    let server = S3Server::start();
    let a = s3_archive(&server);
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = compacted_session(&store);
    a.push(&store, id).unwrap();
    (server, a, here, store, id)
}

/// The store closed and opened again on the same root.
fn reopen(store: Store, root: &Path, options: StoreOptions) -> Store {
    store.close().unwrap();
    drop(store);
    Store::open_with(root, options).unwrap()
}

fn export(store: &Store, id: SessionId) -> Vec<u8> {
    let mut out = Vec::new();
    store.export(id, &mut out).unwrap();
    out
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in walk(dir) {
        out.insert(entry.clone(), std::fs::read(&entry).unwrap());
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn segment_files(store: &Store, id: SessionId) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(store.session_dir(id))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
}

fn s3_archive(server: &S3Server) -> Archive {
    Archive::open_with(&server.url("s"), server.options()).unwrap()
}

#[test]
fn an_evicted_session_restores_and_appends_with_no_archive_reachable() {
    let (server, a, here, store, id) = pushed_to_s3();
    let state = store.restore(id).unwrap();
    let entries = store.info(id).unwrap().unwrap().entries;
    let before = segment_files(&store, id);

    let report = a.evict(&store, id).unwrap();
    assert!(report.evicted_segments >= 2, "{report:?}");
    let after = segment_files(&store, id);
    assert_eq!(after.len() + report.evicted_segments, before.len());
    let (first, last) = report.evicted.unwrap();
    assert_eq!(first, 0);
    let record = store.evicted_segments(id).unwrap();
    assert_eq!(record.len(), report.evicted_segments);
    assert_eq!(record.last().unwrap().last_seq, last);
    assert!(report.kept.unwrap().contains("SessionStart"));

    // The server gone, the store reopened: restore needs nothing remote.
    drop(server);
    let store = reopen(store, here.path(), opts());
    assert_eq!(store.restore(id).unwrap(), state);
    assert_eq!(store.info(id).unwrap().unwrap().entries, entries);
    let mut head = state.head.unwrap();
    add_turns(&store, id, &mut head, 70, 3);
    assert_eq!(store.restore(id).unwrap().head, Some(head));

    // A read of the evicted range names it, and says what to do.
    let snap = store.snapshot(id).unwrap();
    assert_eq!(snap.evicted(), Some((0, last)));
    let err = snap.iter().next().unwrap().unwrap_err();
    assert!(
        matches!(err, Error::Evicted { first_seq: 0, last_seq, .. } if last_seq == last),
        "{err}"
    );
    assert!(err.to_string().contains("--archive"), "{err}");
    let err = store.verify(id).unwrap_err();
    assert!(matches!(err, Error::Evicted { .. }), "{err}");
    let mut out = Vec::new();
    assert!(matches!(
        store.export(id, &mut out).unwrap_err(),
        Error::Evicted { .. }
    ));
    // The local part checks out, continuing the record's last hash.
    let local = store.log(id).unwrap().verify();
    assert!(local.damage.is_none(), "{:?}", local.damage);
    assert_eq!(local.evicted, Some((0, last)));
}

#[test]
fn verify_and_export_fetch_back_the_same_bytes() {
    let (_server, a, here, store, id) = pushed_to_s3();
    let exported = export(&store, id);
    let files = segment_files(&store, id);
    let report = a.evict(&store, id).unwrap();
    assert!(report.evicted_segments >= 2);

    // A second store on the same root (the first closed): verify fetches.
    let store = reopen(store, here.path(), opts());
    store.attach_archive(&a);
    let v = store.verify(id).unwrap();
    assert!(v.damage.is_none() && v.evicted.is_none(), "{v:?}");
    assert_eq!(segment_files(&store, id), files);
    assert!(store.evicted_segments(id).unwrap().is_empty());
    assert!(!store.session_dir(id).join(EVICTED_FILE).exists());
    assert_eq!(export(&store, id), exported);

    // Evicted again, export fetches back through the open writer.
    let again = a.evict(&store, id).unwrap();
    assert_eq!(again.evicted_segments, report.evicted_segments);
    assert_eq!(export(&store, id), exported);
    assert_eq!(segment_files(&store, id), files);
    let v = store.log(id).unwrap().verify();
    assert!(v.damage.is_none() && v.evicted.is_none(), "{v:?}");

    // Eviction keeps the archive's manifest whole: a push after it names
    // the evicted segments too, and a pull elsewhere is complete.
    a.evict(&store, id).unwrap();
    a.push(&store, id).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open_with(other_dir.path(), opts()).unwrap();
    a.pull(&other, id, session_store::archive::RestorePoint::Latest)
        .unwrap();
    assert_eq!(export(&other, id), exported);
}

#[test]
fn memory_archive_evicts_and_fetches_back() {
    let (a, here, store, id) = pushed_to_memory();
    let exported = export(&store, id);
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 2);
    let fetched = a.fetch_back(&store, id).unwrap();
    assert!(fetched.fetched_segments >= 2);
    assert_eq!(export(&store, id), exported);

    // Everything but the active segment evicted: the log opens from it alone.
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("gpt-5"), &[])
        .unwrap();
    add_turns(&store, id, &mut head, 0, 40);
    head = store
        .compact(id, head, &[Item::assistant_text("summary")])
        .unwrap();
    a.push(&store, id).unwrap();
    let exported = export(&store, id);
    let state = store.restore(id).unwrap();
    a.evict(&store, id).unwrap();
    assert_eq!(segment_files(&store, id).len(), 1);
    store.close().unwrap();
    drop(store);
    let store = Store::open_read_only(here.path()).unwrap();
    assert_eq!(store.restore(id).unwrap(), state);
    drop(store);
    let store = Store::open_with(here.path(), opts()).unwrap();
    assert_eq!(store.restore(id).unwrap(), state);
    add_turns(&store, id, &mut head, 40, 1);
    store.attach_archive(&a);
    let mut lines = export(&store, id);
    assert!(lines.len() > exported.len());
    lines.truncate(exported.len());
    assert_eq!(lines, exported);
}

#[test]
fn a_tampered_object_is_refused_at_fetch_back_and_nothing_is_placed() {
    let (server, a, _here, store, id) = pushed_to_s3();
    a.evict(&store, id).unwrap();
    let record = store.evicted_segments(id).unwrap();
    let victim = &record[1];
    let file = server.object_file(&victim.object);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[256 + 64 + 10] ^= 1;
    std::fs::write(&file, &bytes).unwrap();

    let before = tree(&store.session_dir(id));
    store.attach_archive(&a);
    let mut out = Vec::new();
    let err = store.export(id, &mut out).unwrap_err();
    match &err {
        Error::Archive { object, .. } => assert_eq!(object, &victim.object, "{err}"),
        other => panic!("expected the object named, got {other}"),
    }
    assert!(out.is_empty());
    assert_eq!(tree(&store.session_dir(id)), before, "nothing placed");

    // Repaired remotely, the next read fetches it.
    bytes[256 + 64 + 10] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    assert!(store.verify(id).unwrap().damage.is_none());
}

#[test]
fn evict_refuses_what_the_archive_does_not_hold() {
    let server = S3Server::start();
    let a = s3_archive(&server);
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = compacted_session(&store);

    // Never pushed: no manifest.
    let err = a.evict(&store, id).unwrap_err();
    assert!(matches!(err, Error::Archive { .. }), "{err}");
    assert!(!store.session_dir(id).join(EVICTED_FILE).exists());

    // Pushed, then remote bytes changed: refused by name, nothing evicted.
    a.push(&store, id).unwrap();
    let manifest = a.manifest(id).unwrap().unwrap();
    let first = &manifest.segments[0];
    assert!(first.content_hash.is_some(), "push records a content hash");
    let file = server.object_file(&first.object);
    let mine = std::fs::read(&file).unwrap();
    let mut other = mine.clone();
    let at = other.len() / 2;
    other[at] ^= 0x40;
    std::fs::write(&file, &other).unwrap();
    let files = segment_files(&store, id);
    let err = a.evict(&store, id).unwrap_err();
    match &err {
        Error::Archive { object, reason } => {
            assert_eq!(object, &first.object);
            assert!(reason.contains("differ"), "{reason}");
        }
        other => panic!("expected the object named, got {other}"),
    }
    assert_eq!(segment_files(&store, id), files);
    assert!(!store.session_dir(id).join(EVICTED_FILE).exists());
    std::fs::write(&file, &mine).unwrap();

    // Segments sealed after the push are not archived: kept, and said so.
    let second = tempfile::tempdir().unwrap();
    let store2 = Store::open_with(second.path(), opts()).unwrap();
    let (id2, mut head) = store2
        .create_session(Some("Be brief."), RequestConfig::model("gpt-5"), &[])
        .unwrap();
    add_turns(&store2, id2, &mut head, 0, 20);
    a.push(&store2, id2).unwrap();
    let archived = a.manifest(id2).unwrap().unwrap().segments.len();
    add_turns(&store2, id2, &mut head, 20, 60);
    head = store2
        .compact(id2, head, &[Item::assistant_text("summary")])
        .unwrap();
    add_turns(&store2, id2, &mut head, 80, 5);
    let report = a.evict(&store2, id2).unwrap();
    assert_eq!(report.evicted_segments, archived);
    assert!(report.kept.unwrap().contains("not archived"));
}

/// Fails the first operation `pick` selects once armed.
struct FailOnce {
    armed: AtomicBool,
    pick: fn(&IoOp<'_>) -> bool,
}

impl IoHook for FailOnce {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if (self.pick)(op) && self.armed.swap(false, Ordering::SeqCst) {
            return Err(io::Error::other("injected"));
        }
        Ok(())
    }
}

fn hooked(pick: fn(&IoOp<'_>) -> bool) -> (Arc<FailOnce>, StoreOptions) {
    let hook = Arc::new(FailOnce {
        armed: AtomicBool::new(false),
        pick,
    });
    let log = LogOptions::default()
        .segment_size(16 << 10)
        .hook(hook.clone());
    (hook, StoreOptions::default().log(log))
}

#[test]
fn a_failure_between_the_record_and_the_removal_leaves_a_session_that_verifies() {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let (hook, options) = hooked(
        |op| matches!(op, IoOp::Remove { path } if path.extension().is_some_and(|e| e == "seg")),
    );
    let store = Store::open_with(here.path(), options.clone()).unwrap();
    let id = compacted_session(&store);
    a.push(&store, id).unwrap();
    let exported = export(&store, id);
    hook.armed.store(true, Ordering::SeqCst);
    let err = a.evict(&store, id).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(
        store.session_dir(id).join(EVICTED_FILE).exists(),
        "the record came first"
    );
    // Every listed segment is still present: simply local.
    let store = reopen(store, here.path(), options);
    let v = store.verify(id).unwrap();
    assert!(v.damage.is_none() && v.evicted.is_none(), "{v:?}");
    assert_eq!(export(&store, id), exported);
    // And the next eviction completes.
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 2);
}

#[test]
fn a_failure_during_fetch_back_leaves_a_session_that_opens_and_verifies() {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    // The second placement's rename fails: one segment placed, the rest not.
    let (hook, options) = hooked(
        |op| matches!(op, IoOp::Rename { from, .. } if from.to_string_lossy().ends_with(".fetch")),
    );
    let store = Store::open_with(here.path(), options.clone()).unwrap();
    let id = compacted_session(&store);
    a.push(&store, id).unwrap();
    let exported = export(&store, id);
    let state = store.restore(id).unwrap();
    let evicted = a.evict(&store, id).unwrap().evicted_segments;
    assert!(evicted >= 2);
    hook.armed.store(true, Ordering::SeqCst);
    let err = a.fetch_back(&store, id).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    let store = reopen(store, here.path(), options);
    assert_eq!(store.restore(id).unwrap(), state);
    let local = store.log(id).unwrap().verify();
    assert!(local.damage.is_none(), "{:?}", local.damage);
    store.attach_archive(&a);
    let v = store.verify(id).unwrap();
    assert!(v.damage.is_none() && v.evicted.is_none(), "{v:?}");
    assert_eq!(export(&store, id), exported);
    let leftovers: Vec<_> = walk(&store.session_dir(id))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".fetch"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_placed_segment_and_the_rest_evicted_open_as_a_contiguous_suffix() {
    // A crash after the highest evicted segment was placed again, before
    // the others: the record still lists them all.
    let (a, here, store, id) = pushed_to_memory();
    let files = segment_files(&store, id);
    let dir = store.session_dir(id);
    let saved: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|n| (n.clone(), std::fs::read(dir.join(n)).unwrap()))
        .collect();
    let n = a.evict(&store, id).unwrap().evicted_segments;
    store.close().unwrap();
    drop(store);
    let (name, bytes) = &saved[n - 1];
    std::fs::write(dir.join(name), bytes).unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let snap = store.snapshot(id).unwrap();
    let last = store.evicted_segments(id).unwrap()[n - 2].last_seq;
    assert_eq!(snap.evicted(), Some((0, last)));

    // A segment missing that the record does not list is damage, as ever.
    store.close().unwrap();
    drop(store);
    std::fs::remove_file(dir.join(&files[n])).unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let err = store.restore(id).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[test]
fn read_only_inspection_of_an_evicted_session_writes_nothing() {
    let (a, here, store, id) = pushed_to_memory();
    let state = store.restore(id).unwrap();
    a.evict(&store, id).unwrap();
    store.close().unwrap();
    drop(store);

    let before = tree(here.path());
    let ro = Store::open_read_only(here.path()).unwrap();
    ro.attach_archive(&a);
    assert_eq!(ro.restore(id).unwrap(), state);
    assert_eq!(ro.list().unwrap().len(), 1);
    assert!(ro.info(id).unwrap().unwrap().error.is_none());
    let err = ro.verify(id).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let mut out = Vec::new();
    assert!(ro.export(id, &mut out).is_err());
    assert!(a.fetch_back(&ro, id).is_err());
    assert!(ro.snapshot(id).unwrap().iter().next().unwrap().is_err());
    assert_eq!(tree(here.path()), before, "a read-only store wrote");
}

/// A tool output of 40 KiB: above the default payload threshold, so it is
/// stored once in the store's payload area and its records refer to it.
fn big_output(n: usize) -> Item {
    Item::ToolOutput {
        extra: Default::default(),
        id: None,
        call_id: format!("c{n}"),
        output: Some(session_store::ToolOutput::Text(
            char::from(b'a' + (n % 26) as u8)
                .to_string()
                .repeat(40 << 10),
        )),
        is_error: None,
        custom: false,
        status: None,
    }
}

/// The payload objects of a `memory://arch` archive, by hash.
fn payload_objects(a: &Archive) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut names: Vec<String> = rt.block_on(async {
        use futures_util::StreamExt;
        a.object_store()
            .list(Some(&object_store::path::Path::from("arch/payloads")))
            .map(|m| m.unwrap().location.filename().unwrap().to_string())
            .collect()
            .await
    });
    names.sort();
    names
}

fn local_payloads(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = walk(&root.join("payloads"))
        .into_iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
        .filter(|n| n.len() == 64)
        .collect();
    names.sort();
    names
}

#[test]
fn large_items_go_to_the_archive_with_their_records_and_come_back_with_them() {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("gpt-5"), &[])
        .unwrap();
    for n in 0..12 {
        let turn = [Item::user_text(format!("read file {n}")), big_output(n)];
        store.save_delta(id, &mut head, &turn).unwrap();
        add_turns(&store, id, &mut head, 100 + n * 4, 4);
    }
    // The snapshot repeats the last output: a reference, not a copy.
    head = store
        .compact(
            id,
            head,
            &[Item::assistant_text("summary of 12 reads"), big_output(11)],
        )
        .unwrap();
    add_turns(&store, id, &mut head, 0, 30);
    let exported = export(&store, id);
    let state = store.restore(id).unwrap();
    assert_eq!(local_payloads(here.path()).len(), 12);

    // A push uploads each payload the pushed records name, once.
    let pushed = a.push(&store, id).unwrap();
    assert_eq!(pushed.uploaded_payloads, 12);
    assert_eq!(payload_objects(&a), local_payloads(here.path()));
    assert_eq!(a.push(&store, id).unwrap().uploaded_payloads, 0);

    // Evicted, the old outputs are named only by archived records: the
    // store's collection removes them, and restore (from the snapshot)
    // still resolves the one the snapshot repeats.
    let before = local_payloads(here.path());
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 2);
    let collected = store.collect_payloads().unwrap();
    assert!(collected.removed >= 1, "{collected:?}");
    let after = local_payloads(here.path());
    let gone: Vec<&String> = before.iter().filter(|p| !after.contains(p)).collect();
    assert_eq!(gone.len() as u64, collected.removed);
    assert_eq!(store.restore(id).unwrap(), state);

    // A fetch-back brings the payloads its records name with them.
    assert!(a.fetch_back(&store, id).unwrap().fetched_segments >= 2);
    assert_eq!(local_payloads(here.path()).len(), 12);
    assert!(store.verify_payloads(id).unwrap().is_empty());
    assert_eq!(export(&store, id), exported);

    // A pull onto another store downloads them too, before the session
    // appears.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open_with(other_dir.path(), opts()).unwrap();
    let pulled = a
        .pull(&other, id, session_store::archive::RestorePoint::Latest)
        .unwrap();
    assert_eq!(pulled.downloaded_payloads.0, 12);
    assert_eq!(export(&other, id), exported);
    assert!(other.verify_payloads(id).unwrap().is_empty());
    assert_eq!(other.restore(id).unwrap(), state);

    // A store that holds a damaged copy of a payload (same length, other
    // bytes) gets it written anew by the pull, never kept.
    let fourth_dir = tempfile::tempdir().unwrap();
    let fourth = Store::open_with(fourth_dir.path(), opts()).unwrap();
    let (_, mut fourth_head) = fourth
        .create_session(None, RequestConfig::model("gpt-5"), &[big_output(11)])
        .unwrap();
    let _ = &mut fourth_head;
    let damaged = walk(&fourth_dir.path().join("payloads"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n.len() == 64))
        .unwrap();
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[100] ^= 0xFF;
    std::fs::write(&damaged, &bytes).unwrap();
    let pulled = a
        .pull(&fourth, id, session_store::archive::RestorePoint::Latest)
        .unwrap();
    assert_eq!(
        pulled.downloaded_payloads.0, 12,
        "the damaged one is fetched too"
    );
    assert!(fourth.verify_payloads(id).unwrap().is_empty());
    assert_eq!(export(&fourth, id), exported);

    // A payload the archive lost fails the pull by name, and nothing of
    // the session lands.
    let lost = gone[0].clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(
        a.object_store()
            .delete(&object_store::path::Path::from(format!(
                "arch/payloads/{lost}"
            ))),
    )
    .unwrap();
    let third_dir = tempfile::tempdir().unwrap();
    let third = Store::open_with(third_dir.path(), opts()).unwrap();
    let err = a
        .pull(&third, id, session_store::archive::RestorePoint::Latest)
        .unwrap_err();
    match err {
        Error::Archive { object, .. } => assert!(object.ends_with(&lost), "{object}"),
        other => panic!("expected an archive error, got {other}"),
    }
    assert!(!third.exists(id));
    assert!(third.list().unwrap().is_empty());

    // An eviction puts a payload its segments name back into the archive
    // before it removes anything.
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 1);
    assert!(payload_objects(&a).contains(&lost));
}

/// A session whose first segments are evictable through a runtime's own
/// snapshot (a `SessionStart` with no compaction origin, which the catalog
/// would keep): 30 turns before it and after, with questions when `asked`
/// (the first one its title); else four 7 KB notes, so that its first
/// segments seal within the records a reader of an empty catalog reads for
/// a title (`TITLE_SCAN_RECORDS`, 16), and three after.
fn restarted_session(store: &Store, asked: bool) -> (SessionId, EntryHash) {
    let (id, mut head) = store
        .create_session(Some("Be brief."), RequestConfig::model("gpt-5"), &[])
        .unwrap();
    let turns = |head: &mut EntryHash, from: usize, n: usize| match asked {
        true => add_turns(store, id, head, from, n),
        false => (from..from + n).for_each(|n| {
            let note = format!("note {n}: {}", "so. ".repeat(1750));
            let items = [Item::assistant_text(note)];
            store.save_delta(id, head, &items).unwrap();
        }),
    };
    let (before, after) = if asked { (30, 30) } else { (4, 3) };
    turns(&mut head, 0, before);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let restart = session_store::LogEntry::SessionStart {
        ts: now.as_millis() as u64,
        system_prompt: None,
        config: RequestConfig::model("gpt-5"),
        history: vec![session_store::schema::LoggedItem::from(
            &Item::assistant_text("summary"),
        )],
        forked_from: None,
        compacted_from: None,
    };
    store.save_entries(id, &mut head, &[restart]).unwrap();
    turns(&mut head, before, after);
    (id, head)
}

/// The titles a store on `root` lists without its listing cache, read-only.
fn titles_without_the_cache(root: &Path, id: SessionId) -> Option<String> {
    let _ = std::fs::remove_file(root.join("list.cache"));
    let ro = Store::open_read_only(root).unwrap();
    let info = ro.info(id).unwrap().unwrap();
    assert_eq!(info.error, None);
    info.title
}

/// A title its empty catalog file leaves to the log's first records goes
/// into the file before an eviction removes those records: a store without
/// its listing cache still lists it.
#[test]
fn an_eviction_keeps_a_title_the_log_held_in_the_catalog() {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let (id, _) = restarted_session(&store, true);
    a.push(&store, id).unwrap();
    let catalog = store.session_dir(id).join("catalog");
    assert_eq!(std::fs::metadata(&catalog).unwrap().len(), 0);
    let title = store.info(id).unwrap().unwrap().title;
    assert!(title.as_deref().unwrap().starts_with("question 0: why?"));
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 2);
    store.close().unwrap();
    drop(store);
    assert!(std::fs::metadata(&catalog).unwrap().len() > 0);
    assert_eq!(titles_without_the_cache(here.path(), id), title);
}

/// An untitled session evicted from the disk gets its first title, within
/// the records a reader of an empty catalog would read, in its catalog
/// file: the log no longer starts at those records.
#[test]
fn a_first_title_after_an_eviction_goes_into_the_catalog() {
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let root = here.path();
    let store = Store::open_with(root, opts()).unwrap();
    let (id, mut head) = restarted_session(&store, false);
    a.push(&store, id).unwrap();
    assert!(a.evict(&store, id).unwrap().evicted_segments >= 1);
    let question = [Item::user_text("first question")];
    let seq = store.log(id).unwrap().next_seq();
    assert!(seq < 16, "within the records read for a title: {seq}");
    store.save_delta(id, &mut head, &question).unwrap();
    store.close().unwrap();
    drop(store);
    let want = Some("first question".to_string());
    assert_eq!(titles_without_the_cache(root, id), want);
    // A writer that reopens it keeps it through a later question.
    let store = Store::open_with(root, opts()).unwrap();
    let later = [Item::user_text("second question")];
    store.save_delta(id, &mut head, &later).unwrap();
    assert_eq!(store.info(id).unwrap().unwrap().title, want);
    store.close().unwrap();
    drop(store);
    assert_eq!(titles_without_the_cache(root, id), want);
}

/// The title goes into the catalog durably before a segment goes: a failed
/// sync of the catalog stops the eviction with every segment in place, and
/// so does one of a catalog whose slots were written before the eviction
/// (a compaction's, after the session's first sync), also when tried again.
#[test]
fn an_eviction_whose_catalog_sync_fails_removes_nothing() {
    let (hook, opts) = hooked(|op| matches!(op, IoOp::Sync { path } if path.ends_with("catalog")));
    let a = Archive::open("memory://arch").unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts).unwrap();
    let (in_log, _) = restarted_session(&store, true);
    let compacted = compacted_session(&store);
    for id in [in_log, compacted] {
        store.log(id).unwrap().sync().unwrap();
        a.push(&store, id).unwrap();
        let files = segment_files(&store, id);
        for _ in 0..2 {
            hook.armed.store(true, Ordering::SeqCst);
            let err = a.evict(&store, id).unwrap_err();
            assert!(err.to_string().contains("catalog"), "{err}");
            assert_eq!(segment_files(&store, id), files);
            assert!(!store.session_dir(id).join(EVICTED_FILE).exists());
        }
        assert!(a.evict(&store, id).unwrap().evicted_segments >= 1);
    }
}
