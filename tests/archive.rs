//! Guards archival to object storage against a real S3-compatible server
//! (`s3s-fs`, started in process): a pushed session pulls back whole on
//! another store and lives on there; a point-in-time restore stops exactly
//! at its point; continuous archival uploads every sealed segment and
//! reports failures; a killed push is completed by the next one without an
//! object duplicated or overwritten; a damaged or missing object is refused
//! by name before anything lands in the store.

mod s3;

use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use s3::S3Server;
use session_store::{
    archive::Archiver, archive::RestorePoint, archive::RetryPolicy, Archive, Error, Item,
    LogOptions, RequestConfig, SessionId, Store, StoreOptions,
};

/// Small segments, so that a few turns seal several.
fn opts() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(16 << 10))
}

/// A store whose sealed segments `archiver` uploads.
fn archived_store(root: &std::path::Path, archiver: &Archiver) -> Store {
    let log = LogOptions::default()
        .segment_size(16 << 10)
        .on_seal(archiver.observer());
    Store::open_with(root, StoreOptions::default().log(log)).unwrap()
}

/// A server, an archive on it, its continuous archiver, and a store (in
/// the temporary directory) whose seals it uploads.
fn continuously_archived() -> (S3Server, Archive, Archiver, tempfile::TempDir, Store) {
    let server = S3Server::start();
    let a = archive(&server, "s");
    let archiver = Archiver::start(a.clone()).unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = archived_store(here.path(), &archiver);
    (server, a, archiver, here, store)
}

/// A session's title, creation time and fork origin.
type Named = (Option<String>, u64, Option<session_store::SessionOrigin>);

/// Checks that `fork`'s catalog file is empty (it holds nothing its log and
/// its parent do not say) and that `a`'s manifest of it names its title
/// (its parent's), its creation time and its origin all the same; returns
/// them.
fn names_the_fork(store: &Store, a: &Archive, fork: SessionId) -> Named {
    let catalog = store.session_dir(fork).join("catalog");
    assert_eq!(std::fs::metadata(catalog).unwrap().len(), 0);
    let info = store.info(fork).unwrap().unwrap();
    let want = (info.title, info.created_ms, info.forked_from);
    assert!(want.0.is_some() && want.1 > 0 && want.2.is_some());
    let m = a.manifest(fork).unwrap().unwrap();
    assert_eq!((m.title, m.created_ms, m.forked_from), want);
    want
}

/// A server, an archive on it, and a session of `turns` turns pushed there.
fn pushed(turns: usize) -> (S3Server, Archive, tempfile::TempDir, Store, SessionId) {
    let server = S3Server::start();
    let a = archive(&server, "s");
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = session(&store, turns);
    a.push(&store, id).unwrap();
    (server, a, here, store, id)
}

fn archive(server: &S3Server, prefix: &str) -> Archive {
    Archive::open_with(&server.url(prefix), server.options()).unwrap()
}

/// A session with `turns` turns of about 1 KiB each.
fn session(store: &Store, turns: usize) -> SessionId {
    let (id, mut head) = store
        .create_session(Some("Be brief."), RequestConfig::model("gpt-5"), &[])
        .unwrap();
    add_turns(store, id, &mut head, 0, turns);
    id
}

fn add_turns(
    store: &Store,
    id: SessionId,
    head: &mut session_store::EntryHash,
    from: usize,
    turns: usize,
) {
    for n in from..from + turns {
        let items = [
            Item::user_text(format!("question {n}: {}", "why? ".repeat(100))),
            Item::assistant_text(format!("answer {n}: {}", "because. ".repeat(60))),
        ];
        store.save_delta(id, head, &items).unwrap();
    }
}

fn sealed_count(store: &Store, id: SessionId) -> usize {
    let paths = store.log(id).unwrap().segment_paths();
    paths.len() - 1
}

fn object_names(archive: &Archive, id: SessionId, dir: &str) -> Vec<String> {
    let mut names = object_names_under(archive, &format!("s/{id}/{dir}"));
    names.sort();
    names
}

fn archive_object(err: Error) -> String {
    match err {
        Error::Archive { object, .. } => object,
        other => panic!("expected an archive error, got {other}"),
    }
}

#[test]
fn push_then_pull_restores_the_session_on_another_store() {
    let server = S3Server::start();
    let a = archive(&server, "s");
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = session(&store, 60);
    let sealed = sealed_count(&store, id);
    assert!(
        sealed >= 3,
        "the workload seals several segments ({sealed})"
    );

    let report = a.push(&store, id).unwrap();
    assert_eq!(report.uploaded_segments, sealed);
    assert!(
        report.uploaded_tail,
        "the active segment's records go up as a tail"
    );
    let state = store.restore(id).unwrap();
    let info = store.info(id).unwrap().unwrap();
    assert_eq!(report.next_seq, info.entries);

    // Segment names list in log order.
    let names = object_names(&a, id, "segments");
    assert_eq!(names.len(), sealed);
    let manifest = a.manifest(id).unwrap().unwrap();
    let named: Vec<_> = manifest.segments.iter().map(|s| s.object.clone()).collect();
    assert_eq!(names, named);
    assert_eq!(manifest.title, info.title);
    for w in manifest.segments.windows(2) {
        assert_eq!(w[0].last_seq + 1, w[1].first_seq);
        assert_eq!(w[0].last_hash, w[1].start_hash);
    }

    // A later push uploads nothing old.
    let mut head = state.head.unwrap();
    add_turns(&store, id, &mut head, 60, 20);
    let again = a.push(&store, id).unwrap();
    assert_eq!(again.skipped_segments, sealed);
    assert_eq!(
        again.uploaded_segments,
        sealed_count(&store, id) - sealed,
        "only the segments sealed since"
    );
    let state = store.restore(id).unwrap();
    store.close().unwrap();

    // Another machine: an empty store.
    let there = tempfile::tempdir().unwrap();
    let other = Store::open(there.path()).unwrap();
    let pulled = a.pull(&other, id, RestorePoint::Latest).unwrap();
    assert_eq!(pulled.head.1, state.head.unwrap());
    let restored = other.restore(id).unwrap();
    assert_eq!(restored.history, state.history);
    assert_eq!(restored.head, state.head);
    let listed = other.info(id).unwrap().unwrap();
    assert_eq!(listed.title, info.title);
    assert_eq!(listed.created_ms, info.created_ms);
    assert!(listed.error.is_none(), "{:?}", listed.error);

    // It lives on: appends, verifies, reopens.
    let mut head = restored.head.unwrap();
    other
        .save_delta(id, &mut head, &[Item::user_text("after the restore")])
        .unwrap();
    let report = other.log(id).unwrap().verify();
    assert!(report.damage.is_none(), "{:?}", report.damage);
    other.close().unwrap();
    let other = Store::open(there.path()).unwrap();
    assert_eq!(other.head(id).unwrap(), Some(head));
    assert_eq!(
        other.restore(id).unwrap().history.last(),
        Some(&Item::user_text("after the restore"))
    );

    // Pulling onto a session that exists is refused.
    let err = a.pull(&other, id, RestorePoint::Latest).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");

    let sessions = a.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].id, id);
    assert_eq!(
        sessions[0].segment_objects as usize,
        sealed_count(&store, id)
    );
}

#[test]
fn point_in_time_restore_stops_at_a_seq_or_a_hash() {
    let (_server, a, _here, store, id) = pushed(50);
    let manifest = a.manifest(id).unwrap().unwrap();
    let entries: Vec<_> = store
        .snapshot(id)
        .unwrap()
        .iter()
        .map(|r| r.map(|v| (v.seq, v.hash)).unwrap())
        .collect();
    // Inside the second segment, at its last record, and in the tail.
    let inside = manifest.segments[1].first_seq + 2;
    let at_end = manifest.segments[1].last_seq;
    let in_tail = manifest.tail.as_ref().unwrap().first_seq + 1;
    for (k, point) in [
        RestorePoint::Seq(inside),
        RestorePoint::Seq(at_end),
        RestorePoint::Hash(entries[in_tail as usize].1),
        RestorePoint::Hash(entries[inside as usize + 3].1),
        RestorePoint::Seq(0),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let other = Store::open(dir.path()).unwrap();
        let seq = match point {
            RestorePoint::Seq(s) => s,
            RestorePoint::Hash(h) => entries.iter().find(|e| e.1 == h).unwrap().0,
            RestorePoint::Latest => unreachable!(),
        };
        let pulled = a.pull(&other, id, point).unwrap();
        assert_eq!(pulled.head, entries[seq as usize], "point {k}");
        let log = other.log(id).unwrap();
        assert_eq!(log.head(), Some(entries[seq as usize]), "point {k}");
        let v = log.verify();
        assert!(v.damage.is_none(), "point {k}: {:?}", v.damage);
        assert_eq!(v.records, seq + 1);
        // The cut log takes appends from its point on.
        let mut head = entries[seq as usize].1;
        other
            .save_delta(id, &mut head, &[Item::user_text("a new branch")])
            .unwrap();
        assert!(other.log(id).unwrap().verify().damage.is_none());
        // Its new branch is another history: pushing it over the archive's
        // is refused.
        let err = a.push(&other, id).unwrap_err();
        assert!(matches!(err, Error::Archive { .. }), "point {k}: {err}");
        other.close().unwrap();
    }
    // A point past the archive is NotFound, and nothing is left behind.
    let dir = tempfile::tempdir().unwrap();
    let other = Store::open(dir.path()).unwrap();
    let past = a.pull(&other, id, RestorePoint::Seq(1 << 40)).unwrap_err();
    assert!(matches!(past, Error::NotFound { .. }), "{past}");
    let unknown = EntryHashExt::unknown();
    let err = a.pull(&other, id, RestorePoint::Hash(unknown)).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(!other.exists(id));
    assert_eq!(
        std::fs::read_dir(dir.path().join("staging"))
            .unwrap()
            .count(),
        0
    );
}

struct EntryHashExt;
impl EntryHashExt {
    fn unknown() -> session_store::EntryHash {
        "00".repeat(32).parse().unwrap()
    }
}

#[test]
fn continuous_archival_uploads_each_segment_as_it_seals() {
    let (_server, a, archiver, _here, store) = continuously_archived();
    let id = session(&store, 80);
    assert!(archiver.wait_idle(Duration::from_secs(60)));
    let sealed = sealed_count(&store, id);
    let status = archiver.status();
    assert_eq!(status.uploaded as usize, sealed, "{status:?}");
    assert_eq!(status.failed, 0);
    assert!(archiver.failures().is_empty());
    let manifest = a.manifest(id).unwrap().unwrap();
    assert_eq!(manifest.segments.len(), sealed);
    assert_eq!(object_names(&a, id, "segments").len(), sealed);

    // What continuous archival holds restores up to the last seal.
    let dir = tempfile::tempdir().unwrap();
    let other = Store::open(dir.path()).unwrap();
    let pulled = a.pull(&other, id, RestorePoint::Latest).unwrap();
    assert_eq!(pulled.head.0, manifest.segments.last().unwrap().last_seq);
    assert!(other.log(id).unwrap().verify().damage.is_none());
    // A push afterwards adds only the tail.
    let report = a.push(&store, id).unwrap();
    assert_eq!(report.uploaded_segments, 0);
    assert_eq!(report.skipped_segments, sealed);
    assert!(report.uploaded_tail);
    // Dropped before the store that holds its observer: it stops all the same.
    drop(archiver);
    let mut head = store.head(id).unwrap().unwrap();
    add_turns(&store, id, &mut head, 80, 20);
}

/// A fork's catalog file is empty: the manifest that continuous archival
/// makes at its first seal takes its identity from its log and its title
/// from its parent all the same.
#[test]
fn continuous_archival_names_a_forks_title_and_origin_without_its_catalog() {
    let (_server, a, archiver, _here, store) = continuously_archived();
    let parent = session(&store, 2);
    let head = store.head(parent).unwrap().unwrap();
    let (fork, mut fork_head) = store.fork_at(parent, head).unwrap();
    add_turns(&store, fork, &mut fork_head, 10, 40);
    assert!(archiver.wait_idle(Duration::from_secs(60)));
    assert!(sealed_count(&store, fork) > 0);
    names_the_fork(&store, &a, fork);
}

#[test]
fn continuous_archival_uploads_the_large_items_a_sealed_segment_names() {
    let (_server, a, archiver, _here, store) = continuously_archived();
    let (id, mut head) = store
        .create_session(None, RequestConfig::model("gpt-5"), &[])
        .unwrap();
    for n in 0..8 {
        let output = Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: format!("c{n}"),
            output: Some(session_store::ToolOutput::Text(
                format!("{n}").repeat(40 << 10),
            )),
            is_error: None,
            custom: false,
            status: None,
        };
        store.save_delta(id, &mut head, &[output]).unwrap();
        add_turns(&store, id, &mut head, n * 10, 10);
    }
    assert!(archiver.wait_idle(Duration::from_secs(60)));
    assert_eq!(archiver.status().failed, 0, "{:?}", archiver.failures());
    assert!(!object_names_under(&a, "s/payloads").is_empty());

    // No push ran: what the archiver uploaded alone pulls back whole, each
    // record's large item with it.
    let dir = tempfile::tempdir().unwrap();
    let other = Store::open(dir.path()).unwrap();
    let pulled = a.pull(&other, id, RestorePoint::Latest).unwrap();
    assert!(pulled.downloaded_payloads.0 >= 1, "{pulled:?}");
    assert!(other.verify_payloads(id).unwrap().is_empty());
    let mine = store.restore(id).unwrap().history;
    let theirs = other.restore(id).unwrap().history;
    assert!(!theirs.is_empty() && mine.starts_with(&theirs));
}

fn object_names_under(archive: &Archive, prefix: &str) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use futures_util::StreamExt;
        archive
            .object_store()
            .list(Some(&ObjectPath::from(prefix)))
            .map(|m| m.unwrap().location.to_string())
            .collect()
            .await
    })
}

/// The nice value of each of this process's threads whose name begins
/// `prefix` (the kernel keeps 15 bytes of a name), from `/proc`.
fn thread_nices(prefix: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread ended meanwhile
        };
        // After the name's closing parenthesis, nice is the 17th field.
        let rest = stat.rsplit_once(')').unwrap().1;
        out.push(rest.split_whitespace().nth(16).unwrap().parse().unwrap());
    }
    out
}

#[test]
fn the_continuous_archiver_runs_below_the_writers_priority() {
    let ours: i64 = std::fs::read_to_string("/proc/thread-self/stat")
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    let a = Archive::open("memory://").unwrap();
    let archiver = Archiver::start(a.clone()).unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = archived_store(here.path(), &archiver);
    let id = session(&store, 40);
    assert!(archiver.wait_idle(Duration::from_secs(60)));
    assert!(archiver.status().uploaded > 0);
    // The upload worker and its runtime's threads (one name, cut to
    // `session-store-u`), each below this thread's priority.
    let nices = thread_nices("session-store-u");
    assert!(nices.len() >= 2, "{nices:?}");
    let want = (ours + i64::from(session_store::archive::ARCHIVER_NICE)).min(19);
    assert!(nices.iter().all(|&n| n == want), "{nices:?}, want {want}");
    // The writers' threads, and a plain archive's, keep the caller's.
    assert!(thread_nices("session-store-a").iter().all(|&n| n == ours));
    let _ = store.head(id).unwrap();
}

#[test]
fn continuous_archival_reports_an_upload_that_keeps_failing() {
    // A port that nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The client's own retries off: the archiver's are under test.
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("archive")
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test-secret")
        .with_region("us-east-1")
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let a = Archive::from_object_store(std::sync::Arc::new(s3), "s", "s3://archive/s").unwrap();
    let archiver = Archiver::start_with(
        a,
        RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
        },
    )
    .unwrap();
    let here = tempfile::tempdir().unwrap();
    let store = archived_store(here.path(), &archiver);
    let id = session(&store, 20);
    assert!(archiver.wait_idle(Duration::from_secs(120)));
    let sealed = sealed_count(&store, id);
    let status = archiver.status();
    assert_eq!(status.failed as usize, sealed, "{status:?}");
    assert_eq!(status.uploaded, 0);
    assert!(status.retries >= 2 * sealed as u64, "{status:?}");
    let failures = archiver.failures();
    assert_eq!(failures.len(), sealed);
    let paths = store.log(id).unwrap().segment_paths();
    assert_eq!(failures[0].segment, paths[0]);
    assert_eq!(failures[0].attempts, 3);
    // Taken once.
    assert!(archiver.failures().is_empty());
}

#[test]
fn a_killed_push_is_completed_by_the_next_without_overwriting() {
    let (_server, a, _here, store, id) = pushed(60);
    let names = object_names(&a, id, "segments");
    // What a push killed after its second upload leaves: two segments, no
    // tail, no manifest.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store_obj = a.object_store().clone();
    let tails = object_names(&a, id, "tail");
    let meta_before = rt.block_on(async {
        for n in &names[2..] {
            store_obj
                .delete(&ObjectPath::from(n.as_str()))
                .await
                .unwrap();
        }
        for n in tails {
            store_obj.delete(&ObjectPath::from(n)).await.unwrap();
        }
        store_obj
            .delete(&ObjectPath::from(format!("s/{id}/manifest.json")))
            .await
            .unwrap();
        let mut metas = Vec::new();
        for n in &names[..2] {
            metas.push(store_obj.head(&ObjectPath::from(n.as_str())).await.unwrap());
        }
        metas
    });
    // A restore now is refused: the session has no manifest.
    let dir = tempfile::tempdir().unwrap();
    let other = Store::open(dir.path()).unwrap();
    let err = a.pull(&other, id, RestorePoint::Latest).unwrap_err();
    assert!(archive_object(err).ends_with("manifest.json"));

    let report = a.push(&store, id).unwrap();
    assert_eq!(report.skipped_segments, 2);
    assert_eq!(report.uploaded_segments, names.len() - 2);
    assert!(report.uploaded_tail);
    assert_eq!(
        object_names(&a, id, "segments"),
        names,
        "nothing duplicated"
    );
    assert_eq!(object_names(&a, id, "tail").len(), 1);
    rt.block_on(async {
        for (n, before) in names[..2].iter().zip(&meta_before) {
            let after = store_obj.head(&ObjectPath::from(n.as_str())).await.unwrap();
            assert_eq!(
                after.last_modified, before.last_modified,
                "{n} not rewritten"
            );
            assert_eq!(after.e_tag, before.e_tag);
        }
    });
    let pulled = a.pull(&other, id, RestorePoint::Latest).unwrap();
    assert_eq!(Some(pulled.head.1), store.head(id).unwrap());

    // An object under a segment's name with other bytes is never replaced.
    let first = ObjectPath::from(names[0].as_str());
    rt.block_on(async {
        store_obj.delete(&first).await.unwrap();
        store_obj.put(&first, vec![7u8; 300].into()).await.unwrap();
    });
    let err = a.push(&store, id).unwrap_err();
    assert_eq!(archive_object(err), names[0]);
    let bytes = rt.block_on(async { store_obj.get(&first).await.unwrap().bytes().await.unwrap() });
    assert_eq!(&bytes[..], &[7u8; 300][..]);
}

#[test]
fn a_damaged_or_missing_object_is_refused_by_name() {
    let (server, a, _here, store, id) = pushed(60);
    let names = object_names(&a, id, "segments");
    let dir = tempfile::tempdir().unwrap();
    let other = Store::open(dir.path()).unwrap();
    let nothing_left = |other: &Store| {
        assert!(!other.exists(id));
        assert!(!other.session_dir(id).exists());
        assert_eq!(
            std::fs::read_dir(dir.path().join("staging"))
                .unwrap()
                .count(),
            0
        );
    };

    // One flipped bit in a record of the second segment, on the server's disk.
    let file = server.object_file(&names[1]);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[256 + 64 + 10] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let err = a.pull(&other, id, RestorePoint::Latest).unwrap_err();
    let msg = err.to_string();
    assert_eq!(archive_object(err), names[1], "{msg}");
    assert!(msg.contains("CRC"), "{msg}");
    nothing_left(&other);
    bytes[256 + 64 + 10] ^= 1;
    std::fs::write(&file, &bytes).unwrap();

    // The third segment replaced by a well-formed segment of another log.
    let stranger = session(&store, 60);
    a.push(&store, stranger).unwrap();
    let theirs = object_names(&a, stranger, "segments");
    let file = server.object_file(&names[2]);
    let mine = std::fs::read(&file).unwrap();
    std::fs::copy(server.object_file(&theirs[2]), &file).unwrap();
    let err = a.pull(&other, id, RestorePoint::Latest).unwrap_err();
    assert_eq!(archive_object(err), names[2]);
    nothing_left(&other);
    std::fs::write(&file, &mine).unwrap();

    // A segment gone: a gap.
    std::fs::remove_file(server.object_file(&names[1])).unwrap();
    let err = a.pull(&other, id, RestorePoint::Latest).unwrap_err();
    assert_eq!(archive_object(err), names[1], "the manifest names it");
    nothing_left(&other);
}

#[test]
fn memory_and_file_urls_hold_an_archive() {
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let id = session(&store, 40);
    let expected = store.restore(id).unwrap();
    let files = tempfile::tempdir().unwrap();
    let file_url = format!("file://{}/archive", files.path().display());
    for url in ["memory://", file_url.as_str()] {
        let a = Archive::open(url).unwrap();
        assert!(a.push(&store, id).unwrap().uploaded_tail, "{url}");
        let dir = tempfile::tempdir().unwrap();
        let other = Store::open(dir.path()).unwrap();
        let pulled = a.pull(&other, id, RestorePoint::Latest).unwrap();
        assert_eq!(Some(pulled.head.1), expected.head, "{url}");
        let got = other.restore(id).unwrap().history;
        assert_eq!(got.len(), expected.history.len(), "{url}");
        assert!(got == expected.history, "{url}");
    }
    // The file archive is there for another process.
    let a = Archive::open(&file_url).unwrap();
    assert_eq!(a.sessions().unwrap()[0].id, id);
    assert!(files
        .path()
        .join("archive")
        .join(id.to_string())
        .join("manifest.json")
        .exists());
    for bad in ["ftp://x", "file://relative", "s3://"] {
        let err = Archive::open(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{bad}: {err}");
    }
}

#[test]
fn a_push_checks_archived_segments_by_content_not_only_name_and_length() {
    let (_server, a, _here, store, id) = pushed(40);
    let manifest = a.manifest(id).unwrap().unwrap();
    assert!(manifest.segments.iter().all(|s| s.content_hash.is_some()));
    // The same name, length, seqs and last hash, other bytes: a local
    // segment changed under an archived name.
    let seg = store.log(id).unwrap().segment_paths()[0].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[300] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let err = a.push(&store, id).unwrap_err();
    assert_eq!(archive_object(err), manifest.segments[0].object);
    bytes[300] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(a.push(&store, id).unwrap().uploaded_segments, 0);
}

#[test]
fn a_pulled_fork_brings_its_parent_or_fails_before_writing() {
    let server = S3Server::start();
    let a = archive(&server, "s");
    let here = tempfile::tempdir().unwrap();
    let store = Store::open_with(here.path(), opts()).unwrap();
    let parent = session(&store, 30);
    let (fork, mut head) = store.fork_at_seq(parent, 20).unwrap();
    add_turns(&store, fork, &mut head, 100, 5);
    let state = store.restore(fork).unwrap();

    // Only the fork archived: its pull names the missing parent, and
    // nothing lands.
    let lone = archive(&server, "lone");
    lone.push(&store, fork).unwrap();
    let link = lone.manifest(fork).unwrap().unwrap().fork_link.unwrap();
    assert_eq!((link.parent, link.seq), (parent, 20));
    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open_with(other_dir.path(), opts()).unwrap();
    let err = lone.pull(&other, fork, RestorePoint::Latest).unwrap_err();
    let msg = err.to_string();
    assert_eq!(
        archive_object(err),
        format!("lone/{parent}/manifest.json"),
        "{msg}"
    );
    assert!(other.list().unwrap().is_empty());

    // Both archived: the fork's pull brings the parent, registered.
    a.push(&store, parent).unwrap();
    a.push(&store, fork).unwrap();
    a.pull(&other, fork, RestorePoint::Latest).unwrap();
    // The fork's catalog is empty: what it would say reaches the manifest
    // and the pulled store all the same.
    let want = names_the_fork(&store, &a, fork);
    let pulled = other.info(fork).unwrap().unwrap();
    assert_eq!((pulled.title, pulled.created_ms, pulled.forked_from), want);
    assert!(other.exists(parent));
    assert_eq!(other.forks_of(parent), vec![fork]);
    assert_eq!(other.restore(fork).unwrap(), state);
    assert!(other.verify_fork_link(fork).unwrap().is_some());
    // The parent's delete keeps it for the fork, as for a fork made here.
    other.delete(parent).unwrap();
    assert_eq!(other.restore(fork).unwrap(), state);
}
