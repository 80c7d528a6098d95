//! Guards against large payloads stored more than once, a record that
//! points at a missing or altered payload without `verify` saying so, an
//! export that needs the store it came from, an import that changes the
//! chain, and a collection that removes a payload a session still needs.

mod engine;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use session_store::{
    log::IoHook, log::IoOp, payload::PayloadProblem, Error, Item, LogOptions, RequestConfig, Store,
    StoreOptions, ToolOutput,
};

const BIG: usize = 64 << 10;

fn big_output(call_id: &str, fill: char) -> Item {
    Item::ToolOutput {
        extra: Default::default(),
        id: None,
        call_id: call_id.into(),
        output: Some(ToolOutput::Text(fill.to_string().repeat(BIG))),
        is_error: None,
        custom: false,
        status: None,
    }
}

fn turn(n: usize) -> Vec<Item> {
    vec![
        Item::user_text(format!("question {n}")),
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: format!("c{n}"),
            name: "read".into(),
            arguments: "{}".into(),
            status: None,
        },
        big_output(&format!("c{n}"), char::from(b'a' + (n % 26) as u8)),
        Item::assistant_text(format!("answer {n}")),
    ]
}

/// Every payload file of the store.
fn payload_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(shards) = std::fs::read_dir(root.join("payloads")) else {
        return out;
    };
    for shard in shards.flatten().filter(|e| e.path().is_dir()) {
        out.extend(
            std::fs::read_dir(shard.path())
                .unwrap()
                .flatten()
                .map(|e| e.path()),
        );
    }
    out.sort();
    out
}

#[test]
fn large_items_restore_from_the_payload_area_and_small_ones_never_touch_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store
        .save_delta(id, &mut head, &[Item::assistant_text("small")])
        .unwrap();
    assert!(
        !dir.path().join("payloads").exists(),
        "no large item, no payload area"
    );
    let mut expected = vec![Item::user_text("hi"), Item::assistant_text("small")];
    for n in 0..3 {
        store.save_delta(id, &mut head, &turn(n)).unwrap();
        expected.extend(turn(n));
    }
    assert_eq!(payload_files(dir.path()).len(), 3, "one file per output");
    // The record holds a reference, not the 64 KiB.
    assert!(store.log(id).unwrap().bytes() < 3 * BIG as u64);
    assert_eq!(store.restore(id).unwrap().history, expected);
    assert_eq!(
        store.history_tail(id, Some(2)).unwrap().items,
        expected[expected.len() - 2..]
    );
    store.close().unwrap();
    let store = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(store.restore(id).unwrap().history, expected);
    assert!(store.verify_payloads(id).unwrap().is_empty());
}

#[test]
fn a_log_read_without_its_store_reports_the_reference_not_a_different_item() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.close().unwrap();
    // Copied out of its store, the log has no payload area to resolve in.
    let alone = tempfile::tempdir().unwrap();
    copy_tree(
        &dir.path().join("sessions").join(id.to_string()),
        &alone.path().join(id.to_string()),
    );
    let log = session_store::Log::open_read_only(alone.path().join(id.to_string())).unwrap();
    match log.restore() {
        Err(Error::Payload {
            seq: 0, problem, ..
        }) => {
            assert!(problem.contains("without the store"), "{problem}")
        }
        other => panic!("expected a payload error, got {other:?}"),
    }
}

#[test]
fn a_log_opened_on_its_own_in_its_store_resolves_and_checks_its_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.close().unwrap();
    let session = dir.path().join("sessions").join(id.to_string());
    let read = session_store::Log::open_read_only(&session).unwrap();
    assert_eq!(read.restore().unwrap().history, turn(0));
    drop(read);
    let log = session_store::Log::open(&session, LogOptions::default()).unwrap();
    assert_eq!(log.restore().unwrap().history, turn(0));
    drop(log);

    // Recovery through a direct open checks the payloads past the mark as
    // the store does: the record whose payload was lost is cut, never
    // marked durable.
    let (image, id) = image_with_lost_payload(|p| std::fs::remove_file(p).unwrap());
    let session = image.path().join("sessions").join(id.to_string());
    let log = session_store::Log::open(&session, LogOptions::default()).unwrap();
    // Turn 1's save is one batch: cut whole at its lost payload.
    let mut expected = vec![Item::user_text("hi")];
    expected.extend(turn(0));
    assert!(log.restore().unwrap().history == expected);
    let torn = log
        .recovery_report()
        .torn_tail
        .clone()
        .expect("a torn tail");
    assert!(torn.reason.contains("payload"), "{}", torn.reason);
    drop(log);
    let store = Store::open(image.path()).unwrap();
    assert!(store.restore(id).unwrap().history == expected);
    assert!(store.verify_payloads(id).unwrap().is_empty());
}

#[test]
fn fifty_compactions_store_each_output_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let mut history = Vec::new();
    for n in 0..50 {
        let t = turn(n);
        store.save_delta(id, &mut head, &t).unwrap();
        history.extend(t);
        let keep = &history[history.len().saturating_sub(20)..];
        head = store.compact(id, head, keep).unwrap();
    }
    // 50 distinct outputs, each once, whatever the snapshots repeat.
    assert_eq!(payload_files(dir.path()).len(), 50);
    let unique = 50 * BIG as u64;
    let on_disk = engine::allocated_bytes(dir.path());
    assert!(
        on_disk < unique * 12 / 10,
        "{on_disk} bytes on disk for {unique} of unique content"
    );
    let restored = store.restore(id).unwrap().history;
    assert_eq!(restored, history[history.len() - 20..]);
}

/// The payloads' bytes on disk: what one session's `payload_bytes` must say
/// when it is the store's only session.
fn payload_file_bytes(root: &Path) -> u64 {
    payload_files(root)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// `payload_bytes` does not count a compaction's snapshot again (it repeats
/// references the session holds): for the writer, from a clean slot, from
/// the log after a crash (the slot dirty), with and without the listing
/// cache, and for a writer that reopened from a clean slot and compacts
/// again.
#[test]
fn payload_bytes_count_each_payload_once_wherever_they_are_read_from() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let listed = |store: &Store| store.list().unwrap()[0].payload_bytes;
    let store = Store::open(root).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let mut history = Vec::new();
    for n in 0..4 {
        let t = turn(n);
        store.save_delta(id, &mut head, &t).unwrap();
        history.extend(t);
        head = store.compact(id, head, &history).unwrap();
    }
    let want = payload_file_bytes(root);
    assert!(want >= 4 * BIG as u64, "{want}");
    assert_eq!(listed(&store), want);
    assert_eq!(store.info(id).unwrap().unwrap().payload_bytes, want);
    let crashed = tempfile::tempdir().unwrap();
    copy_tree(root, crashed.path());
    store.close().unwrap();
    for root in [root, crashed.path()] {
        for cache in [true, false] {
            if !cache {
                let _ = std::fs::remove_file(root.join("list.cache"));
            }
            let ro = Store::open_read_only(root).unwrap();
            assert_eq!(listed(&ro), want, "{} cache {cache}", root.display());
        }
    }
    for root in [root, crashed.path()] {
        let store = Store::open(root).unwrap();
        let mut head = store.head(id).unwrap().unwrap();
        let t = turn(4);
        store.save_delta(id, &mut head, &t).unwrap();
        let mut all = history.clone();
        all.extend(t);
        store.compact(id, head, &all).unwrap();
        let want = payload_file_bytes(root);
        assert_eq!(listed(&store), want, "{}", root.display());
        store.close().unwrap();
        let ro = Store::open_read_only(root).unwrap();
        assert_eq!(listed(&ro), want, "{}", root.display());
    }
}

#[test]
fn a_fork_refers_to_its_parents_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.save_delta(id, &mut head, &turn(1)).unwrap();
    let (fork, _) = store.fork_at(id, head).unwrap();
    assert_eq!(
        store.restore(fork).unwrap().history,
        store.restore(id).unwrap().history
    );
    // The fork's history names the same two payloads.
    assert_eq!(payload_files(dir.path()).len(), 2);
    assert!(store.verify_payloads(fork).unwrap().is_empty());
    let mut fork_head = store.head(fork).unwrap().unwrap();
    store.save_delta(fork, &mut fork_head, &turn(2)).unwrap();
    let expected = store.restore(fork).unwrap().history;
    // The parent is deleted: retired while the fork reads it, and its
    // payloads are still referred to (through the retired log).
    let deletion = store.delete(id).unwrap();
    assert!(matches!(deletion, session_store::Deletion::Retired { .. }));
    let r = store.collect_payloads().unwrap();
    assert_eq!((r.kept, r.removed), (3, 0));
    store.close().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(store.restore(fork).unwrap().history == expected);
    // The export stands alone: it imports into a store that never saw the
    // parent, which keeps the outputs in its own payload area.
    let mut export = Vec::new();
    store.export(fork, &mut export).unwrap();
    assert!(!String::from_utf8_lossy(&export).contains("session_store_payload"));
    let other = tempfile::tempdir().unwrap();
    let elsewhere = Store::open(other.path()).unwrap();
    let imported = elsewhere.import_from(&export[..]).unwrap();
    assert!(elsewhere.restore(imported).unwrap().history == expected);
    assert_eq!(payload_files(other.path()).len(), 3);
    // Once the fork is gone too, nothing refers to them.
    store.delete(fork).unwrap();
    let r = store.collect_payloads().unwrap();
    assert_eq!((r.kept, r.removed), (0, 3));
}

#[test]
fn export_writes_payloads_inline_and_import_keeps_the_chain_at_any_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.save_delta(id, &mut head, &turn(1)).unwrap();
    head = store.compact(id, head, &turn(1)).unwrap();
    let mut wire = Vec::new();
    store.export(id, &mut wire).unwrap();
    let text = String::from_utf8(wire.clone()).unwrap();
    assert!(
        text.contains(&"b".repeat(BIG)),
        "the output is in the export"
    );
    assert!(!text.contains("session_store_payload"));
    for threshold in [4096, 100, usize::MAX] {
        let other = tempfile::tempdir().unwrap();
        let opts = StoreOptions::default().payload_threshold(threshold);
        let imported_into = Store::open_with(other.path(), opts).unwrap();
        let new = imported_into.import_from(&wire[..]).unwrap();
        assert_eq!(
            imported_into.head(new).unwrap(),
            Some(head),
            "threshold {threshold}"
        );
        assert_eq!(
            imported_into.restore(new).unwrap().history,
            store.restore(id).unwrap().history
        );
        // Stored as the exporting store stored them: references.
        assert_eq!(payload_files(other.path()).len(), 2);
    }
    // Lines without hashes take the importing store's threshold.
    let bare: String = text
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["seq", "hash", "prev_hash"] {
                v.as_object_mut().unwrap().remove(k);
            }
            format!("{v}\n")
        })
        .collect();
    let other = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default().payload_threshold(usize::MAX);
    let inline = Store::open_with(other.path(), opts).unwrap();
    let new = inline.import_from(bare.as_bytes()).unwrap();
    assert!(payload_files(other.path()).is_empty());
    assert_eq!(
        inline.restore(new).unwrap().history,
        store.restore(id).unwrap().history
    );
}

/// A history whose record stays over 32 MiB after its large items move
/// out: its wire line is measured, with each large item read back from the
/// payload area (the measure once refused any entry that named one).
#[test]
fn a_history_over_32_mib_that_names_large_items_starts_a_session_and_exports_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // 1,100 outputs just under the threshold (inline) and two over it.
    let small = "s".repeat((32 << 10) - 64);
    let mut history = vec![big_output("c0", 'x')];
    for n in 0..1_100 {
        history.push(Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: format!("k{n}"),
            output: Some(ToolOutput::Text(small.clone())),
            is_error: None,
            custom: false,
            status: None,
        });
    }
    history.push(big_output("c1", 'y'));
    let (id, head) = store
        .create_session(None, RequestConfig::default(), &history)
        .unwrap();
    assert_eq!(payload_files(dir.path()).len(), 2);
    assert_eq!(store.restore(id).unwrap().history, history);
    let mut wire = Vec::new();
    store.export(id, &mut wire).unwrap();
    let other = tempfile::tempdir().unwrap();
    let imported_into = Store::open(other.path()).unwrap();
    let new = imported_into.import_from(&wire[..]).unwrap();
    assert_eq!(imported_into.head(new).unwrap(), Some(head));
    assert_eq!(imported_into.restore(new).unwrap().history, history);
}

#[test]
fn verify_names_a_missing_a_torn_and_an_altered_payload() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.save_delta(id, &mut head, &turn(1)).unwrap();
    store.save_delta(id, &mut head, &turn(2)).unwrap();
    store.close().unwrap();
    // Which turn's output a file holds: its fill byte, mid-file.
    let mut by_turn: Vec<(u64, PathBuf)> = payload_files(dir.path())
        .into_iter()
        .map(|p| {
            let content = std::fs::read(&p).unwrap();
            (u64::from(content[content.len() / 2] - b'a'), p)
        })
        .collect();
    by_turn.sort();
    assert_eq!(by_turn.len(), 3);
    let hash_of = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    // Seq 0 is the SessionStart with turn 0; turns 1 and 2 are four
    // entries each (user input, the call, the output, the answer).
    let want: Vec<(u64, String)> = vec![
        (0, hash_of(&by_turn[0].1)),
        (3, hash_of(&by_turn[1].1)),
        (7, hash_of(&by_turn[2].1)),
    ];
    std::fs::remove_file(&by_turn[0].1).unwrap();
    let torn = &by_turn[1].1;
    let bytes = std::fs::read(torn).unwrap();
    std::fs::write(torn, &bytes[..bytes.len() / 2]).unwrap();
    let altered = &by_turn[2].1;
    let mut bytes = std::fs::read(altered).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(altered, &bytes).unwrap();

    let store = Store::open_read_only(dir.path()).unwrap();
    let damage = store.verify_payloads(id).unwrap();
    let found: Vec<(u64, String)> = damage.iter().map(|d| (d.seq, d.hash.clone())).collect();
    assert_eq!(found, want);
    assert_eq!(damage[0].problem, PayloadProblem::Missing);
    assert!(matches!(damage[1].problem, PayloadProblem::Length { .. }));
    assert_eq!(damage[2].problem, PayloadProblem::Hash);
    assert!(damage[0].to_string().contains(&want[0].1));
    // Restore refuses rather than return a different history.
    assert!(matches!(
        store.restore(id),
        Err(Error::Payload { seq: 0, .. })
    ));
}

#[test]
fn collection_removes_only_what_no_session_refers_to() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (keep, _) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    let (gone, mut head) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.save_delta(gone, &mut head, &turn(1)).unwrap();
    // A temporary file an interrupted write left.
    let shard = payload_files(dir.path())
        .into_iter()
        .find(|p| p.file_name().unwrap() != "LOCK")
        .unwrap();
    std::fs::write(shard.with_extension("1.2.tmp"), b"torn").unwrap();
    let r = store.collect_payloads().unwrap();
    assert_eq!((r.kept, r.removed, r.removed_temporary), (2, 0, 1));
    store.delete(gone).unwrap();
    let r = store.collect_payloads().unwrap();
    assert_eq!((r.kept, r.removed), (1, 1));
    assert!(r.removed_bytes > BIG as u64);
    assert_eq!(store.restore(keep).unwrap().history, turn(0));
    assert!(store.verify_payloads(keep).unwrap().is_empty());
    // A read-only store does not collect.
    assert!(Store::open_read_only(dir.path())
        .unwrap()
        .collect_payloads()
        .is_err());
}

/// Fails, while armed, every operation `hit` picks.
struct FailWhile {
    armed: AtomicBool,
    hit: fn(&IoOp<'_>) -> bool,
}

impl FailWhile {
    fn new(hit: fn(&IoOp<'_>) -> bool) -> Arc<FailWhile> {
        Arc::new(FailWhile {
            armed: AtomicBool::new(false),
            hit,
        })
    }

    fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::SeqCst);
    }
}

impl IoHook for FailWhile {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        match self.armed.load(Ordering::SeqCst) && (self.hit)(op) {
            true => Err(io::Error::other("injected failure")),
            false => Ok(()),
        }
    }
}

/// A segment write: the save's payload is written, its record is not.
fn segment_write(op: &IoOp<'_>) -> bool {
    matches!(op, IoOp::Write { path, .. } if is_segment(path))
}

/// The `fdatasync` of a payload.
fn payload_sync(op: &IoOp<'_>) -> bool {
    matches!(op, IoOp::Sync { path } if path.components().any(|c| c.as_os_str() == "payloads"))
}

/// Records the syncs of the store: each `fdatasync` and directory `fsync`,
/// in order, as (kind, path).
#[derive(Default)]
struct Syncs(std::sync::Mutex<Vec<(&'static str, PathBuf)>>);

impl IoHook for Syncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let seen = match op {
            IoOp::Sync { path } => ("fdatasync", path.to_path_buf()),
            IoOp::SyncDir { path } => ("fsync", path.to_path_buf()),
            _ => return Ok(()),
        };
        self.0.lock().unwrap().push(seen);
        Ok(())
    }
}

impl Syncs {
    fn take(&self) -> Vec<(&'static str, PathBuf)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Whether `path` is a segment file.
/// Whether a sync of `path` makes records durable: a segment's, or the
/// store's journal's (which `Sync` commits go through).
fn is_segment(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "seg" || e == "jnl")
}

/// Whether a recorded sync is the directory `fsync` of `dir`.
fn is_fsync_of(kind: &str, path: &Path, dir: &Path) -> bool {
    kind == "fsync" && path == dir
}

fn in_payloads(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "payloads")
}

#[test]
fn a_sync_save_syncs_its_payloads_then_its_records_in_one_group_commit() {
    use session_store::Durability;
    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(Syncs::default());
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .hook(syncs.clone());
    let store = Store::open_with(dir.path(), StoreOptions::default().log(log)).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    // A first commit makes the journal.
    store
        .save_delta(id, &mut head, &[Item::user_text("small")])
        .unwrap();
    // Two large outputs in one save, in two new shard directories.
    let mut items = turn(0);
    items.push(big_output("c0b", 'z'));
    syncs.take();
    store.save_delta(id, &mut head, &items).unwrap();
    let seen = syncs.take();
    let files: Vec<_> = seen.iter().filter(|(k, _)| *k == "fdatasync").collect();
    // Two payloads, then the records (the journal): three fdatasyncs in all.
    assert_eq!(files.len(), 3, "{seen:?}");
    assert!(files[..2].iter().all(|(_, p)| in_payloads(p)), "{seen:?}");
    assert!(is_segment(&files[2].1), "{seen:?}");
    // The payloads' directories (their shards and `payloads/`, which holds
    // the new shards) before the segment.
    let segment_at = seen.iter().position(|(_, p)| is_segment(p));
    let dirs_before: Vec<_> = seen[..segment_at.unwrap()]
        .iter()
        .filter(|(k, p)| *k == "fsync" && in_payloads(p))
        .collect();
    assert!(
        dirs_before.iter().any(|(_, p)| p.ends_with("payloads")),
        "{seen:?}"
    );
    assert_eq!(dirs_before.len(), 3, "two shards and payloads/: {seen:?}");
    // And the root, which names the new `payloads/`.
    assert!(
        seen[..segment_at.unwrap()]
            .iter()
            .any(|(k, p)| is_fsync_of(k, p, dir.path())),
        "{seen:?}"
    );
    // A save that repeats both outputs writes nothing to the area and
    // syncs only its segment.
    store.save_delta(id, &mut head, &items).unwrap();
    let seen = syncs.take();
    assert!(seen.iter().all(|(_, p)| !in_payloads(p)), "{seen:?}");
    assert_eq!(seen.len(), 1, "{seen:?}");
}

#[test]
fn a_store_handle_syncs_the_root_at_its_first_sync_of_payloads_even_where_payloads_exists() {
    use session_store::Durability;
    // `payloads/` made by an earlier process, which may have died before
    // its root was synced: a new store handle syncs the root once, at its
    // first commit with payloads, and not again.
    let dir = tempfile::tempdir().unwrap();
    let sync_opts = |log: LogOptions| StoreOptions::default().log(log.durability(Durability::Sync));
    let store = Store::open_with(dir.path(), sync_opts(LogOptions::default())).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store.save_delta(id, &mut head, &turn(0)).unwrap();
    drop(store);
    assert!(dir.path().join("payloads").is_dir());

    let syncs = Arc::new(Syncs::default());
    let store = Store::open_with(
        dir.path(),
        sync_opts(LogOptions::default().hook(syncs.clone())),
    )
    .unwrap();
    let root_syncs = |seen: &[(&'static str, PathBuf)]| {
        seen.iter()
            .filter(|(k, p)| is_fsync_of(k, p, dir.path()))
            .count()
    };
    // A commit with no payloads leaves the root for one that has some.
    store
        .save_delta(id, &mut head, &[Item::user_text("small")])
        .unwrap();
    syncs.take();
    store.save_delta(id, &mut head, &turn(1)).unwrap();
    let seen = syncs.take();
    let segment_at = seen.iter().position(|(_, p)| is_segment(p)).unwrap();
    assert_eq!(root_syncs(&seen[..segment_at]), 1, "{seen:?}");
    store.save_delta(id, &mut head, &turn(2)).unwrap();
    let seen = syncs.take();
    assert_eq!(root_syncs(&seen), 0, "once a store handle: {seen:?}");
}

#[test]
fn a_buffered_save_syncs_nothing_and_its_payloads_go_before_its_records_at_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(Syncs::default());
    let log = LogOptions::default().hook(syncs.clone());
    let store = Store::open_with(dir.path(), StoreOptions::default().log(log)).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    // The first save makes `payloads/`, and syncs nothing either; the
    // first sync makes its name in the root durable, before the records.
    syncs.take();
    store.save_delta(id, &mut head, &turn(9)).unwrap();
    assert_eq!(
        syncs.take(),
        vec![],
        "a Buffered first large item syncs nothing"
    );
    store.sync(id).unwrap();
    let seen = syncs.take();
    let root_at = seen.iter().position(|(k, p)| is_fsync_of(k, p, dir.path()));
    let first_segment = seen.iter().position(|(_, p)| is_segment(p));
    assert!(
        matches!((root_at, first_segment), (Some(r), Some(s)) if r < s),
        "the root before the records: {seen:?}"
    );
    for n in 0..3 {
        store.save_delta(id, &mut head, &turn(n)).unwrap();
    }
    assert_eq!(syncs.take(), vec![], "a Buffered save syncs nothing");
    store.sync(id).unwrap();
    let seen = syncs.take();
    let last_payload = seen.iter().rposition(|(_, p)| in_payloads(p)).unwrap();
    let first_segment = seen.iter().position(|(_, p)| is_segment(p)).unwrap();
    assert!(last_payload < first_segment, "{seen:?}");
    let payload_syncs = seen
        .iter()
        .filter(|(k, p)| *k == "fdatasync" && in_payloads(p))
        .count();
    assert_eq!(payload_syncs, 3, "{seen:?}");
}

#[test]
fn a_failed_payload_sync_fails_the_commit_before_its_records_are_synced() {
    use session_store::Durability;
    let dir = tempfile::tempdir().unwrap();
    let hook = FailWhile::new(payload_sync);
    let log = LogOptions::default()
        .durability(Durability::Sync)
        .hook(hook.clone());
    let store = Store::open_with(dir.path(), StoreOptions::default().log(log)).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    hook.arm(true);
    let err = store.save_delta(id, &mut head, &turn(0)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Io {
                op: "fdatasync",
                ..
            }
        ),
        "{err}"
    );
    // The payload stays pending: no later commit of the store returns
    // before it is synced (this one fails on it too, or on the poisoned log).
    let mut again = store.head(id).unwrap().unwrap();
    let err = store.save_delta(id, &mut again, &turn(1)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Poisoned
                | Error::Io {
                    op: "fdatasync",
                    ..
                }
        ),
        "{err}"
    );
    hook.arm(false);
    // As a crash leaves it: nothing closed.
    store.abandon();
    // Reopened (its recovery checks the records past the mark, whose
    // payload is in the page cache), the session reads whole and a save
    // syncs the payload it left pending.
    let store = Store::open(dir.path()).unwrap();
    assert!(store.verify_payloads(id).unwrap().is_empty());
    let state = store.restore(id).unwrap();
    let mut head = state.head.unwrap();
    store.save_delta(id, &mut head, &turn(2)).unwrap();
    // The first failed save's records were in the page cache, and its
    // payload with them: nothing was lost, nothing dangles. (The second
    // save failed before appending or after, as the reopen of the poisoned
    // log met the failing sync: either way its turn is whole or absent.)
    let mut expected = vec![Item::user_text("hi")];
    expected.extend(turn(0));
    let mut with_second = expected.clone();
    with_second.extend(turn(1));
    assert!(state.history == expected || state.history == with_second);
}

#[test]
fn a_payload_whose_record_failed_is_garbage_for_the_next_collection() {
    let dir = tempfile::tempdir().unwrap();
    let hook = FailWhile::new(segment_write);
    let opts = StoreOptions::default().log(LogOptions::default().hook(hook.clone()));
    let store = Store::open_with(dir.path(), opts).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store.sync(id).unwrap();
    hook.arm(true);
    assert!(store.save_delta(id, &mut head, &turn(0)).is_err());
    hook.arm(false);
    store.abandon();
    // The payload is there, no record refers to it.
    assert_eq!(payload_files(dir.path()).len(), 1);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.restore(id).unwrap().history,
        vec![Item::user_text("hi")]
    );
    let r = store.collect_payloads().unwrap();
    assert_eq!((r.kept, r.removed), (0, 1));
}

#[test]
fn an_entry_that_names_a_payload_the_store_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    let forged = session_store::schema::LoggedItem::External(Box::new(
        session_store::schema::LoggedPayloadRef {
            hash: [7; 32],
            len: 100,
        },
    ));
    let entry = session_store::LogEntry::ToolResults {
        ts: 1,
        items: vec![forged],
    };
    let before = head;
    let err = store.save_entries(id, &mut head, &[entry]).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(store.head(id).unwrap(), Some(before));

    // A file that has the hash its name says, but is no item archive: the
    // length and hash check pass, the archive check refuses it.
    let garbage = vec![0xA5u8; 4096];
    let hash = blake3::hash(&garbage);
    let hex = hash.to_hex().to_string();
    let shard = dir.path().join("payloads").join(&hex[..2]);
    std::fs::create_dir_all(&shard).unwrap();
    std::fs::write(shard.join(&hex), &garbage).unwrap();
    let forged = session_store::schema::LoggedItem::External(Box::new(
        session_store::schema::LoggedPayloadRef {
            hash: *hash.as_bytes(),
            len: garbage.len() as u64,
        },
    ));
    let entry = session_store::LogEntry::ToolResults {
        ts: 1,
        items: vec![forged],
    };
    let err = store.save_entries(id, &mut head, &[entry]).unwrap_err();
    match &err {
        Error::InvalidInput { what } => assert!(what.contains(&hex), "{what}"),
        other => panic!("expected invalid input, got {other}"),
    }
    assert_eq!(store.head(id).unwrap(), Some(before));
}

/// Copies a directory tree: what a power loss would keep if every page
/// written so far had reached the disk.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        match e.file_type().unwrap().is_dir() {
            true => copy_tree(&e.path(), &target),
            false => {
                std::fs::copy(e.path(), &target).unwrap();
            }
        }
    }
}

/// The crash image of a `Buffered` store whose last save (turn 1, not
/// synced) reached the disk but for its payload, which `lose` damages;
/// turn 0 was synced.
fn image_with_lost_payload(lose: fn(&Path)) -> (tempfile::TempDir, session_store::SessionId) {
    let live = tempfile::tempdir().unwrap();
    let store = Store::open(live.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store.save_delta(id, &mut head, &turn(0)).unwrap();
    store.sync(id).unwrap();
    let synced = payload_files(live.path());
    store.save_delta(id, &mut head, &turn(1)).unwrap();
    let image = tempfile::tempdir().unwrap();
    copy_tree(live.path(), image.path());
    let lost: Vec<_> = payload_files(image.path())
        .into_iter()
        .filter(|p| !synced.iter().any(|s| s.file_name() == p.file_name()))
        .collect();
    assert_eq!(lost.len(), 1);
    lose(&lost[0]);
    drop(store);
    (image, id)
}

#[test]
fn recovery_cuts_the_log_at_a_record_past_the_mark_whose_payload_was_lost() {
    let losses: [fn(&Path); 3] = [
        |p| std::fs::remove_file(p).unwrap(),
        // Torn: the name survived, the length did not.
        |p| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(100).unwrap();
        },
        // Torn: the length survived, some blocks are zeros.
        |p| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            std::os::unix::fs::FileExt::write_at(&f, &[0u8; 4096], 8192).unwrap();
        },
    ];
    for lose in losses {
        let (image, id) = image_with_lost_payload(lose);
        let store = Store::open(image.path()).unwrap();
        let mut expected = vec![Item::user_text("hi")];
        expected.extend(turn(0));
        // Turn 1 is cut as a torn tail where its tool output's record
        // names a payload that is not there; its question and call,
        // recorded before it in the same batch (one save), go with it: a
        // batch is in the log whole or not at all.
        // A reader's view ends where the writer will cut...
        let restored = store.restore(id).unwrap().history;
        assert!(restored == expected, "{} items", restored.len());
        // ...and the writer's open cuts there, and records it.
        store.log(id).unwrap();
        let restored = store.restore(id).unwrap().history;
        assert!(restored == expected, "{} items", restored.len());
        assert!(store.verify_payloads(id).unwrap().is_empty());
        let last = session_store::Log::last_recovery(store.session_dir(id))
            .unwrap()
            .expect("the cut is recorded");
        let torn = last.report.torn_tail.expect("a torn tail");
        assert!(!torn.salvaged);
        assert!(torn.reason.contains("payload"), "{}", torn.reason);
        // The session goes on, and its next save writes the payload again.
        let mut head = store.head(id).unwrap().unwrap();
        store.save_delta(id, &mut head, &turn(1)).unwrap();
        expected.extend(turn(1));
        store.close().unwrap();
        let store = Store::open(image.path()).unwrap();
        assert!(store.restore(id).unwrap().history == expected);
        assert!(store.verify_payloads(id).unwrap().is_empty());
    }
}

#[test]
fn recovery_keeps_records_past_the_mark_whose_payloads_are_whole() {
    let (image, id) = image_with_lost_payload(|_| {});
    let store = Store::open(image.path()).unwrap();
    let mut expected = vec![Item::user_text("hi")];
    expected.extend(turn(0));
    expected.extend(turn(1));
    assert!(store.restore(id).unwrap().history == expected);
    // Nothing was cut.
    let last = session_store::Log::last_recovery(store.session_dir(id)).unwrap();
    assert!(
        last.as_ref().is_none_or(|l| l.report.torn_tail.is_none()),
        "{last:?}"
    );
}

#[test]
fn a_writer_recovering_a_crashed_writers_records_syncs_their_payloads_before_its_mark() {
    // The crashed process's list of payloads to sync died with it: the
    // new writer's open, which marks the records it keeps, syncs the
    // payloads they name first.
    let (image, id) = image_with_lost_payload(|_| {});
    let syncs = Arc::new(Syncs::default());
    let opts = StoreOptions::default().log(LogOptions::default().hook(syncs.clone()));
    let store = Store::open_with(image.path(), opts).unwrap();
    syncs.take();
    store.log(id).unwrap();
    let seen = syncs.take();
    let payload_syncs: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (k, p))| *k == "fdatasync" && in_payloads(p))
        .map(|(i, _)| i)
        .collect();
    assert!(!payload_syncs.is_empty(), "{seen:?}");
    let last_segment_sync = seen
        .iter()
        .rposition(|(_, p)| is_segment(p))
        .expect("the recovery marks the log");
    assert!(
        payload_syncs.iter().all(|&i| i < last_segment_sync),
        "{seen:?}"
    );
    assert!(
        seen[..last_segment_sync]
            .iter()
            .any(|(k, p)| *k == "fsync" && in_payloads(p)),
        "{seen:?}"
    );
}

#[test]
fn every_flipped_byte_of_a_payload_is_named_and_never_read_as_another_item() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &turn(0))
        .unwrap();
    store.sync(id).unwrap();
    let files = payload_files(dir.path());
    assert_eq!(files.len(), 1);
    let file = &files[0];
    let hash = file.file_name().unwrap().to_str().unwrap().to_string();
    let whole = std::fs::read(file).unwrap();
    let expect_named = |what: &str| {
        match store.restore(id) {
            Err(Error::Payload { seq, hash: h, .. }) => {
                assert_eq!((seq, h.as_str()), (0, hash.as_str()), "{what}")
            }
            other => panic!("{what}: expected a payload error, got {other:?}"),
        }
        let damage = store.verify_payloads(id).unwrap();
        assert_eq!(damage.len(), 1, "{what}: {damage:?}");
        assert_eq!((damage[0].seq, damage[0].hash.as_str()), (0, hash.as_str()));
    };
    // Every 61st byte (a prime stride, so every position within a 16-byte
    // field is met), each flip a different bit, and the last byte.
    let mut offsets: Vec<usize> = (0..whole.len()).step_by(61).collect();
    offsets.push(whole.len() - 1);
    for (k, &at) in offsets.iter().enumerate() {
        let mut bytes = whole.clone();
        bytes[at] ^= 1 << (k % 8);
        std::fs::write(file, &bytes).unwrap();
        expect_named(&format!("byte {at} flipped"));
    }
    for len in [0, 1, whole.len() / 2, whole.len() - 1, whole.len() + 1] {
        let mut bytes = whole.clone();
        bytes.resize(len, 0);
        std::fs::write(file, &bytes).unwrap();
        expect_named(&format!("{len} bytes of {}", whole.len()));
    }
    std::fs::write(file, &whole).unwrap();
    assert_eq!(store.restore(id).unwrap().history, turn(0));
    assert!(store.verify_payloads(id).unwrap().is_empty());
}
