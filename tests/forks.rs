//! Guards forks by reference against a fork that reads a different history
//! than it was forked from, a parent deleted under its forks, an export that
//! needs the store it came from, and a chain of forks that loops: restore
//! through the parent's log, the hash check of the link, forks of forks,
//! deleting parents (retired, then collected), export and import, verify;
//! and a fork at a hash or seq that keeps other than the history up to it.

mod common;

use std::fs;
use std::path::Path;

use common::store::{as_given, ids, kinds, open, options, tempdir, turn, turn_end};
use session_store::{
    Deletion, EntryHash, EntryKind, Error, Item, ListFilter, Log, LogOptions, RequestConfig,
    RestoredState, SessionId, SessionOrigin, Store, StoreOptions,
};

/// A question and its answer (`pad` bytes more): a turn of two entries.
fn chat(n: usize, pad: usize) -> Vec<Item> {
    vec![
        Item::user_text(format!("question {n}")),
        Item::assistant_text(format!("answer {n} {}", "o".repeat(pad))),
    ]
}

/// A session with `turns` turns; its id and head.
fn session(store: &Store, turns: usize) -> (SessionId, EntryHash) {
    session_about(store, "task", turns)
}

/// [`session`] whose first item is `task`. Two sessions made alike within
/// one millisecond have the same entries, and so the same hashes: a test
/// that needs another hash at a seq needs another task.
fn session_about(store: &Store, task: &str, turns: usize) -> (SessionId, EntryHash) {
    let (id, mut head) = store
        .create_session(
            Some("sys"),
            RequestConfig::model("m"),
            &[Item::user_text(task)],
        )
        .unwrap();
    for n in 0..turns {
        store.save_delta(id, &mut head, &chat(n, 2000)).unwrap();
    }
    (id, head)
}

/// What a runtime resumes from, without the log position.
fn resumed(s: &RestoredState) -> (Option<String>, RequestConfig, Vec<Item>) {
    (s.system_prompt.clone(), s.config.clone(), s.history.clone())
}

/// Replaces a session's directory with another's (a different log under
/// the parent's name), the store closed.
fn swap_dir(root: &Path, from: SessionId, onto: SessionId) {
    let sessions = root.join("sessions");
    let onto = sessions.join(onto.to_string());
    fs::remove_dir_all(&onto).unwrap();
    fs::create_dir(&onto).unwrap();
    for e in fs::read_dir(sessions.join(from.to_string())).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), onto.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_fork_holds_one_small_entry_and_restores_the_parents_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, head) = session(&store, 20);
    let at = store.snapshot(parent).unwrap().next_seq() - 1;
    let (fork, fork_head) = store.fork_at(parent, head).unwrap();
    assert_eq!(kinds(&store, fork), vec![EntryKind::ForkedFrom]);
    // Its wire line (what `tail` prints) reads back: no field collides
    // with the line's own `seq` and `hash`.
    let snap = store.snapshot(fork).unwrap();
    let rec = snap.iter().next().unwrap().unwrap();
    let line = session_store::wire::parse_line(&rec.wire_line().unwrap(), 1).unwrap();
    assert_eq!(line.entry, rec.entry().to_entry());
    assert_eq!((line.seq, line.hash), (Some(0), Some(rec.hash)));
    // Its log holds one record, whatever the parent's size.
    assert!(store.snapshot(fork).unwrap().bytes() < 512);
    let expected = store.restore(parent).unwrap();
    let state = store.restore(fork).unwrap();
    assert_eq!(resumed(&state), resumed(&expected));
    assert_eq!(
        state.forked_from,
        Some(SessionOrigin {
            session_id: parent,
            at_hash: head
        })
    );
    assert_eq!(state.head, Some(fork_head));
    assert_eq!((state.entries, state.turn_count), (1, 0));
    // The link names the parent's seq and hash.
    let link = store.verify_fork_link(fork).unwrap().unwrap();
    assert_eq!((link.parent, link.seq, link.hash), (parent, at, head));
    // Listed as a fork, with the parent's title.
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!(info.forked_from.map(|o| o.session_id), Some(parent));
    assert_eq!(info.title.as_deref(), Some("task"));
    let forks = store
        .list_filtered(&ListFilter {
            forked_from: Some(parent),
            ..ListFilter::default()
        })
        .unwrap();
    assert_eq!(forks.iter().map(|s| s.id).collect::<Vec<_>>(), vec![fork]);
    assert_eq!(store.forks_of(parent), vec![fork]);

    // The two go separate ways; the fork's own entries follow the parent's.
    let mut fh = fork_head;
    store
        .save_delta(fork, &mut fh, &[Item::user_text("fork only")])
        .unwrap();
    let mut ph = head;
    store
        .save_delta(parent, &mut ph, &[Item::user_text("parent only")])
        .unwrap();
    let state = store.restore(fork).unwrap();
    assert_eq!(state.history.len(), expected.history.len() + 1);
    assert_eq!(state.history.last(), Some(&Item::user_text("fork only")));
    assert_eq!(state.head, Some(fh));
    // The same after a reopen, read without a writer.
    store.close().unwrap();
    let store = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(store.restore(fork).unwrap().history, state.history);
}

#[test]
fn a_fork_reads_its_parent_from_the_last_session_start_at_or_before_the_fork_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, mut head) = session(&store, 10);
    let before = store.restore(parent).unwrap();
    let (early, _) = store.fork_at(parent, head).unwrap();
    // The parent compacts after the fork point: the fork still reads the
    // history before it (found by the walk of one segment's headers).
    head = store
        .compact(parent, head, &[Item::user_text("summary")])
        .unwrap();
    store.save_delta(parent, &mut head, &chat(99, 10)).unwrap();
    assert_eq!(resumed(&store.restore(early).unwrap()), resumed(&before));
    // A fork after the compaction starts at it.
    let (late, _) = store.fork_at(parent, head).unwrap();
    let late_state = store.restore(late).unwrap();
    assert_eq!(late_state.history[0], Item::user_text("summary"));
    assert_eq!(
        resumed(&late_state),
        resumed(&store.restore(parent).unwrap())
    );
    // Forking by seq at every point gives the parent's history there.
    let snap = store.snapshot(parent).unwrap();
    for seq in [0, 1, 5, snap.next_seq() - 3, snap.next_seq() - 1] {
        let (f, _) = store.fork_at_seq(parent, seq).unwrap();
        let link = store.verify_fork_link(f).unwrap().unwrap();
        assert_eq!(link.seq, seq);
        // The copy-fork of old: the parent's history replayed to `seq`.
        let mut copy = RestoredState::default();
        for rec in snap.iter() {
            let rec = rec.unwrap();
            if rec.seq > seq {
                break;
            }
            copy.apply_archived(rec.entry()).unwrap();
        }
        assert_eq!(
            resumed(&store.restore(f).unwrap()),
            resumed(&copy),
            "seq {seq}"
        );
    }
}

#[test]
fn forks_of_forks_follow_the_chain_and_hashes_in_inherited_history_fork_the_ancestor() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (root_id, root_head) = session(&store, 3);
    let mut expected = store.restore(root_id).unwrap().history;
    let mut id = root_id;
    let mut head = root_head;
    let mut chain = vec![root_id];
    for level in 0..3 {
        (id, head) = store.fork_at(id, head).unwrap();
        let items = chat(100 + level, 10);
        store.save_delta(id, &mut head, &items).unwrap();
        expected.extend(items);
        chain.push(id);
    }
    let state = store.restore(id).unwrap();
    assert_eq!(state.history, expected);
    assert_eq!(state.forked_from.unwrap().session_id, chain[2]);
    assert!(store.verify_fork_link(id).unwrap().is_some());
    // The root's head is in the great-grandchild's inherited history: a
    // fork there is a fork of the root.
    let (f, _) = store.fork_at(id, root_head).unwrap();
    assert_eq!(
        store.restore(f).unwrap().forked_from.unwrap().session_id,
        root_id
    );
    // `ensure_head_or_fork` with a stale head forks by reference too.
    let (same, h) = store.ensure_head_or_fork(id, head).unwrap();
    assert_eq!((same, h), (id, head));
    let (other, _) = store.ensure_head_or_fork(id, root_head).unwrap();
    assert_ne!(other, id);
    assert_eq!(kinds(&store, other), vec![EntryKind::ForkedFrom]);
    assert_eq!(
        store.restore(other).unwrap().history,
        store.restore(root_id).unwrap().history
    );
}

#[test]
fn a_parent_whose_record_at_the_fork_point_changed_is_damage_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, other, fork) = {
        let store = open(dir.path());
        let (parent, _) = session(&store, 3);
        let (other, _) = session_about(&store, "another task", 4);
        let (fork, _) = store.fork_at_seq(parent, 4).unwrap();
        store.close().unwrap();
        (parent, other, fork)
    };
    // Another log under the parent's name: seq 4 exists, with another hash.
    swap_dir(dir.path(), other, parent);
    let store = open(dir.path());
    for err in [
        store.restore(fork).unwrap_err(),
        store.verify_fork_link(fork).unwrap_err(),
        store.export(fork, Vec::new()).unwrap_err(),
    ] {
        match err {
            Error::BrokenFork {
                session,
                parent: p,
                seq,
                ref what,
            } => {
                assert_eq!((session, p, seq), (fork, parent, 4));
                assert!(what.contains("hash"), "{what}");
            }
            e => panic!("expected BrokenFork, got {e}"),
        }
    }
}

#[test]
fn a_missing_or_short_parent_is_damage_not_an_empty_history() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, short, fork) = {
        let store = open(dir.path());
        let (parent, _) = session(&store, 5);
        let (short, _) = session(&store, 0);
        let (fork, _) = store.fork_at_seq(parent, 7).unwrap();
        store.close().unwrap();
        (parent, short, fork)
    };
    swap_dir(dir.path(), short, parent);
    let store = open(dir.path());
    let err = store.restore(fork).unwrap_err();
    assert!(
        matches!(&err, Error::BrokenFork { seq: 7, what, .. } if what.contains("ends before")),
        "{err}"
    );
    store.close().unwrap();
    fs::remove_dir_all(dir.path().join("sessions").join(parent.to_string())).unwrap();
    let store = open(dir.path());
    for err in [
        store.restore(fork).unwrap_err(),
        store.verify_fork_link(fork).unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::BrokenFork { parent: p, what, .. } if *p == parent && what.contains("missing")),
            "{err}"
        );
    }
}

#[test]
fn a_chain_of_forks_that_loops_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, fork) = {
        let store = open(dir.path());
        let (parent, _) = session(&store, 0);
        let (fork, _) = store.fork_at_seq(parent, 0).unwrap();
        store.close().unwrap();
        (parent, fork)
    };
    // The parent's log becomes a copy of the fork's: it names itself.
    swap_dir(dir.path(), fork, parent);
    let store = open(dir.path());
    let err = store.restore(fork).unwrap_err();
    assert!(
        matches!(&err, Error::BrokenFork { what, .. } if what.contains("loops")),
        "{err}"
    );
    // Verify meets the changed hash at the first link.
    let err = store.verify_fork_link(fork).unwrap_err();
    assert!(matches!(&err, Error::BrokenFork { .. }), "{err}");
}

#[test]
fn the_log_alone_refuses_to_restore_a_fork_rather_than_lose_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, head) = session(&store, 2);
    let (fork, _) = store.fork_at(parent, head).unwrap();
    store.close().unwrap();
    let log = Log::open_read_only(dir.path().join("sessions").join(fork.to_string())).unwrap();
    let err = log.restore().unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput { what } if what.contains(&parent.to_string())),
        "{err}"
    );
}

#[test]
fn a_compacted_fork_needs_nothing_from_its_parent_to_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, fork, expected) = {
        let store = open(dir.path());
        let (parent, head) = session(&store, 3);
        let (fork, fh) = store.fork_at(parent, head).unwrap();
        let fh = store
            .compact(fork, fh, &[Item::user_text("fork summary")])
            .unwrap();
        let state = store.restore(fork).unwrap();
        assert_eq!(state.forked_from.unwrap().session_id, parent);
        assert_eq!(state.head, Some(fh));
        store.close().unwrap();
        (parent, fork, state)
    };
    fs::remove_dir_all(dir.path().join("sessions").join(parent.to_string())).unwrap();
    let store = open(dir.path());
    assert_eq!(store.restore(fork).unwrap(), expected);
    // Its full log still names the parent: verify says the link is gone.
    assert!(matches!(
        store.verify_fork_link(fork).unwrap_err(),
        Error::BrokenFork { .. }
    ));
}

#[test]
fn export_of_a_fork_imports_as_a_standalone_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (root_id, head) = session(&store, 3);
    let (mid, mut mh) = store.fork_at(root_id, head).unwrap();
    store.save_delta(mid, &mut mh, &chat(7, 10)).unwrap();
    let (leaf, mut lh) = store.fork_at(mid, mh).unwrap();
    store.save_delta(leaf, &mut lh, &chat(8, 10)).unwrap();
    let expected = store.restore(leaf).unwrap();
    let mut wire = Vec::new();
    let lines = store.export(leaf, &mut wire).unwrap();
    assert_eq!(lines, 3);
    let text = String::from_utf8(wire.clone()).unwrap();
    let first = text.lines().next().unwrap();
    assert!(first.contains(r#""kind":"session_start""#), "{first}");
    assert!(first.contains(&mid.to_string()), "{first}");
    // Into a store that has never seen the parents.
    let other = tempfile::tempdir().unwrap();
    let other = open(other.path());
    let imported = other.import_from(wire.as_slice()).unwrap();
    let state = other.restore(imported).unwrap();
    assert_eq!(resumed(&state), resumed(&expected));
    assert_eq!(state.forked_from, expected.forked_from);
    assert_eq!(kinds(&other, imported)[0], EntryKind::SessionStart);
    // Its export is the same lines, hashes included.
    let mut again = Vec::new();
    other.export(imported, &mut again).unwrap();
    assert_eq!(again, wire);
}

#[test]
fn deleting_a_parent_retires_it_until_its_last_fork_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, head) = session(&store, 3);
    let expected = store.restore(parent).unwrap();
    let (f1, _) = store.fork_at(parent, head).unwrap();
    let (f2, _) = store.fork_at(parent, head).unwrap();
    let mut forks = vec![f1, f2];
    forks.sort();
    assert_eq!(store.delete(parent).unwrap(), Deletion::Retired { forks });
    // Gone for users: not listed, not a session, not forkable, not writable.
    assert!(!store.exists(parent));
    assert!(store.list().unwrap().iter().all(|s| s.id != parent));
    assert!(store.info(parent).unwrap().is_none());
    assert!(matches!(
        store.fork_at(parent, head).unwrap_err(),
        Error::NotFound { .. }
    ));
    assert!(matches!(
        store.restore(parent).unwrap_err(),
        Error::NotFound { .. }
    ));
    assert!(matches!(
        store.delete(parent).unwrap_err(),
        Error::NotFound { .. }
    ));
    // The forks read it as before, after a reopen too.
    store.close().unwrap();
    let store = open(dir.path());
    for f in [f1, f2] {
        assert_eq!(resumed(&store.restore(f).unwrap()), resumed(&expected));
        assert!(store.verify_fork_link(f).unwrap().is_some());
    }
    let retired = dir.path().join("retired").join(parent.to_string());
    assert!(retired.exists());
    assert_eq!(store.delete(f1).unwrap(), Deletion::Removed);
    assert!(retired.exists(), "one fork still reads it");
    assert_eq!(resumed(&store.restore(f2).unwrap()), resumed(&expected));
    assert_eq!(store.delete(f2).unwrap(), Deletion::Removed);
    assert!(!retired.exists(), "collected with its last fork");
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn a_retired_chain_is_collected_from_the_leaf_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (a, ah) = session(&store, 2);
    let (b, bh) = store.fork_at(a, ah).unwrap();
    let (c, _) = store.fork_at(b, bh).unwrap();
    let expected = store.restore(c).unwrap();
    assert!(matches!(store.delete(a).unwrap(), Deletion::Retired { .. }));
    assert!(matches!(store.delete(b).unwrap(), Deletion::Retired { .. }));
    assert_eq!(store.restore(c).unwrap(), expected);
    assert_eq!(store.list().unwrap().len(), 1);
    store.delete(c).unwrap();
    let retired = dir.path().join("retired");
    assert_eq!(fs::read_dir(&retired).unwrap().count(), 0);
}

/// What a crash left retired is collected by the housekeeping of the next
/// store, which its first write runs (an open alone only looks).
#[test]
fn a_store_collects_what_a_crash_left_retired_at_its_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, fork) = {
        let store = open(dir.path());
        let (parent, head) = session(&store, 1);
        let (fork, _) = store.fork_at(parent, head).unwrap();
        store.delete(parent).unwrap();
        store.close().unwrap();
        (parent, fork)
    };
    // A crash after the fork's removal, before its parent was collected.
    fs::remove_dir_all(dir.path().join("sessions").join(fork.to_string())).unwrap();
    let retired = dir.path().join("retired").join(parent.to_string());
    assert!(retired.exists());
    let store = open(dir.path());
    assert_eq!(store.restore(fork).ok(), None);
    assert!(retired.exists(), "an open alone wrote");
    session(&store, 1);
    assert!(!retired.exists());
}

#[test]
fn a_registration_whose_fork_never_came_to_be_does_not_keep_a_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, _) = session(&store, 1);
    let (fork, _) = store.fork_at_seq(parent, 0).unwrap();
    store.delete(fork).unwrap();
    // A registration left by a crash before its fork was created.
    let forks = dir
        .path()
        .join("sessions")
        .join(parent.to_string())
        .join("forks");
    fs::write(forks.join(SessionId::new_v7().to_string()), b"").unwrap();
    assert_eq!(store.delete(parent).unwrap(), Deletion::Removed);
    assert!(!dir.path().join("retired").join(parent.to_string()).exists());
}

#[test]
fn a_fork_on_a_sync_store_reserves_the_smallest_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default().log(
        LogOptions::default()
            .durability(session_store::Durability::Sync)
            .segment_size(1 << 20),
    );
    let store = Store::open_with(dir.path(), opts).unwrap();
    let (parent, head) = session(&store, 2);
    let (fork, mut fh) = store.fork_at(parent, head).unwrap();
    let len = |id: SessionId| -> u64 {
        store
            .log(id)
            .unwrap()
            .segment_paths()
            .iter()
            .map(|p| fs::metadata(p).unwrap().len())
            .sum()
    };
    // A new session reserves the initial 256 KiB; a fork, 8 KiB.
    assert_eq!(len(parent), 256 << 10);
    assert_eq!(len(fork), 8 << 10);
    // And grows like any log.
    for n in 0..10 {
        store.save_delta(fork, &mut fh, &chat(n, 2000)).unwrap();
    }
    assert!(store.log(fork).unwrap().segment_paths().len() > 1);
    assert_eq!(store.restore(fork).unwrap().head, Some(fh));
}

#[test]
fn the_tail_of_a_fork_and_removals_reach_into_the_inherited_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, head) = session(&store, 3);
    let (fork, fh) = store.fork_at(parent, head).unwrap();
    let fh = store.append(fork, fh, &[Item::user_text("own")]).unwrap();
    // One own item and two of the parent's go.
    let fh = store.remove_last(fork, fh, 3).unwrap();
    let state = store.restore(fork).unwrap();
    let parent_history = store.restore(parent).unwrap().history;
    assert_eq!(
        state.history[..],
        parent_history[..parent_history.len() - 2]
    );
    let tail = store.history_tail(fork, Some(2)).unwrap();
    assert_eq!(tail.items[..], state.history[state.history.len() - 2..]);
    assert_eq!(store.history_len(fork).unwrap(), state.history.len() as u64);
    assert_eq!(tail.head, Some(fh));
    // The log alone refuses, as its restore does.
    assert!(store.snapshot(fork).unwrap().history_tail(None).is_err());
}

#[test]
fn a_forked_from_entry_cannot_be_saved_or_imported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (parent, head) = session(&store, 1);
    let link = session_store::LogEntry::ForkedFrom {
        ts: 1,
        parent,
        parent_seq: 0,
        parent_hash: head,
    };
    let mut stale = head;
    let err = store
        .save_entries(parent, &mut stale, std::slice::from_ref(&link))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(store.head(parent).unwrap(), Some(head));
    let mut wire = Vec::new();
    store.export(parent, &mut wire).unwrap();
    wire.extend_from_slice(session_store::wire::entry_line(9, &head, None, &link).as_bytes());
    let line = String::from_utf8(wire).unwrap();
    // Without seq and hashes, so that only the kind is refused.
    let lines: Vec<String> = line
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["seq", "hash", "prev_hash"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v.to_string()
        })
        .collect();
    let err = store.import_from(lines.join("\n").as_bytes()).unwrap_err();
    assert!(
        matches!(&err, Error::Wire { message, .. } if message.contains("forked_from")),
        "{err}"
    );
}

#[test]
fn a_fork_whose_registration_a_crash_lost_before_its_first_sync_is_no_session() {
    let dir = tempfile::tempdir().unwrap();
    let (parent, fork) = {
        let store = open(dir.path());
        let (parent, head) = session(&store, 1);
        store.sync(parent).unwrap();
        let (fork, _) = store.fork_at(parent, head).unwrap();
        // What a power loss before the fork's first sync may leave: the
        // fork's files and marker, without the registration.
        let fork_dir = dir.path().join("sessions").join(fork.to_string());
        let kept = tempfile::tempdir().unwrap();
        for e in fs::read_dir(&fork_dir).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), kept.path().join(e.file_name())).unwrap();
        }
        // The power loss: nothing closed.
        store.abandon();
        fs::remove_dir_all(&fork_dir).unwrap();
        fs::create_dir(&fork_dir).unwrap();
        for e in fs::read_dir(kept.path()).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), fork_dir.join(e.file_name())).unwrap();
        }
        assert!(fork_dir.join("CREATING").exists());
        (parent, fork)
    };
    let registration = dir
        .path()
        .join("sessions")
        .join(parent.to_string())
        .join("forks")
        .join(fork.to_string());
    fs::remove_file(&registration).unwrap();
    let store = open(dir.path());
    assert!(!store.exists(fork));
    assert!(store.info(fork).unwrap().is_none());
    assert!(store.list().unwrap().iter().all(|s| s.id != fork));
    // So the parent's delete removes it, and the id is free again.
    assert_eq!(store.delete(parent).unwrap(), Deletion::Removed);
    store
        .create_session_with_id(fork, None, RequestConfig::default(), &[])
        .unwrap();
}

fn catalog_len(root: &Path, id: SessionId) -> u64 {
    let path = root.join("sessions").join(id.to_string()).join("catalog");
    fs::metadata(path).unwrap().len()
}

/// What `list` says of each session, but the time of its last write
/// (which the cache and the log may tell apart by a few ms), by id.
type Listed = (SessionId, Option<String>, u64, u64, Option<EntryHash>);
fn listed(store: &Store) -> Vec<(Listed, Option<SessionOrigin>, Option<SessionOrigin>)> {
    let mut out: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| {
            assert_eq!(i.error, None, "{}", i.id);
            let row = (i.id, i.title, i.created_ms, i.entries, i.head);
            (row, i.forked_from, i.compacted_from)
        })
        .collect();
    out.sort_by_key(|l| l.0 .0);
    out
}

#[test]
fn a_fork_keeps_an_empty_catalog_and_lists_from_its_log_and_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (parent, fork, fork2, from_cache) = {
        let store = open(root);
        let (parent, head) = session(&store, 2);
        let (fork, fork_head) = store.fork_at(parent, head).unwrap();
        let (fork2, _) = store.fork_at(fork, fork_head).unwrap();
        store.close().unwrap();
        (parent, fork, fork2, listed(&store))
    };
    // No block for a fork's catalog: it says nothing its log and its
    // parent do not.
    assert_eq!(catalog_len(root, parent), 1024);
    assert_eq!((catalog_len(root, fork), catalog_len(root, fork2)), (0, 0));
    let title = from_cache
        .iter()
        .find(|l| l.0 .0 == fork2)
        .unwrap()
        .0
         .1
        .clone();
    assert_eq!(title.as_deref(), Some("task"));
    // Without the listing cache, `list` reads the catalogs and the logs,
    // and says the same; read-only, it writes nothing.
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = Store::open_read_only(root).unwrap();
    assert_eq!(listed(&store), from_cache);
    let info = store.info(fork2).unwrap().unwrap();
    assert_eq!(info.forked_from.unwrap().session_id, fork);
    drop(store);
    assert_eq!((catalog_len(root, fork), catalog_len(root, fork2)), (0, 0));
    // A deleted parent is retired: its forks still take their title there.
    let store = open(root);
    store.delete(parent).unwrap();
    store.close().unwrap();
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = open(root);
    for id in [fork, fork2] {
        let info = store.info(id).unwrap().unwrap();
        assert_eq!((info.title.as_deref(), info.error), (Some("task"), None));
    }
}

#[test]
fn a_reopened_fork_keeps_its_parents_title_and_a_compaction_fills_its_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (parent, fork) = {
        let store = open(root);
        let (parent, head) = session(&store, 1);
        let (fork, _) = store.fork_at(parent, head).unwrap();
        store.close().unwrap();
        (parent, fork)
    };
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = open(root);
    // Its own first question does not become its title: it has one.
    let mut head = store.snapshot(fork).unwrap().head().unwrap().1;
    store.save_delta(fork, &mut head, &chat(7, 10)).unwrap();
    store.close().unwrap();
    assert_eq!(catalog_len(root, fork), 0);
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!((info.title.as_deref(), info.error), (Some("task"), None));
    assert_eq!(info.forked_from.unwrap().session_id, parent);
    // A compaction in place names new origins, which the log's first
    // record does not: the catalog then holds every slot.
    let store = open(root);
    store
        .compact(fork, head, &[Item::user_text("summary")])
        .unwrap();
    store.close().unwrap();
    let from_cache = listed(&store);
    assert_eq!(catalog_len(root, fork), 1024);
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = Store::open_read_only(root).unwrap();
    assert_eq!(listed(&store), from_cache);
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!(info.title.as_deref(), Some("task"));
    assert!(info.compacted_from.is_some());
}

#[test]
fn a_fork_of_an_untitled_parent_keeps_a_catalog_and_takes_its_own_title() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = open(root);
    let (parent, head) = store
        .create_session(Some("sys"), RequestConfig::model("m"), &[])
        .unwrap();
    let (fork, mut fork_head) = store.fork_at(parent, head).unwrap();
    assert_eq!(catalog_len(root, fork), 1024);
    store
        .save_delta(fork, &mut fork_head, &chat(1, 10))
        .unwrap();
    store.close().unwrap();
    fs::remove_file(root.join("list.cache")).unwrap();
    let store = Store::open_read_only(root).unwrap();
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!(info.title.as_deref(), Some("question 1"));
    assert_eq!(store.info(parent).unwrap().unwrap().title, None);
}

#[test]
fn a_fork_keeps_state_and_then_goes_its_own_way() {
    let dir = tempdir();
    let store = open(dir.path());
    let config = RequestConfig {
        temperature: Some(0.5),
        ..RequestConfig::model("m-fork")
    };
    let initial = vec![Item::user_text("Refactor the parser")];
    let (src, mut src_head) = store
        .create_session(Some("be careful"), config.clone(), &initial)
        .unwrap();
    let mut history = initial.clone();
    for n in 0..5 {
        let items = turn(n, 4000);
        store.save_delta(src, &mut src_head, &items).unwrap();
        history.extend(items);
    }
    let (fork, mut fork_head) = store.fork_at(src, src_head).unwrap();
    assert_ne!(fork, src);
    let state = store.restore(fork).unwrap();
    assert_eq!(state.history, as_given(&history));
    assert_eq!(state.system_prompt.as_deref(), Some("be careful"));
    assert_eq!(state.config, config);
    let origin = SessionOrigin {
        session_id: src,
        at_hash: src_head,
    };
    assert_eq!(state.forked_from, Some(origin));
    assert_eq!(state.head, Some(fork_head));
    // A fork by reference: one small entry naming the parent, no copy.
    assert_eq!(kinds(&store, fork), vec![EntryKind::ForkedFrom]);

    // The two go separate ways.
    store
        .save_delta(fork, &mut fork_head, &[Item::user_text("fork only")])
        .unwrap();
    store
        .save_delta(src, &mut src_head, &[Item::user_text("source only")])
        .unwrap();
    let fork_state = store.restore(fork).unwrap();
    let src_state = store.restore(src).unwrap();
    assert_eq!(
        fork_state.history.last(),
        Some(&Item::user_text("fork only"))
    );
    assert_eq!(
        src_state.history.last(),
        Some(&Item::user_text("source only"))
    );
    assert_eq!(fork_state.history.len(), history.len() + 1);
    assert_eq!(src_state.history.len(), history.len() + 1);
    let info = store.info(fork).unwrap().unwrap();
    assert_eq!(info.forked_from, Some(origin));
    assert_eq!(info.title.as_deref(), Some("Refactor the parser"));
}

#[test]
fn fork_at_truncates_by_hash_and_by_seq() {
    let dir = tempdir();
    // Every item in its record, so that the turns span segments.
    let store = Store::open_with(dir.path(), options().payload_threshold(usize::MAX)).unwrap();
    let initial = vec![Item::user_text("zero")];
    let (src, h0) = store
        .create_session(None, RequestConfig::model("m"), &initial)
        .unwrap();
    let mut head = h0;
    let first = turn(1, 9000);
    store.save_delta(src, &mut head, &first).unwrap();
    let h1 = head;
    let second = turn(2, 9000);
    store.save_delta(src, &mut head, &second).unwrap();
    turn_end(&store, src, &mut head, 2);
    assert!(store.log(src).unwrap().segment_paths().len() > 1);

    let upto_first: Vec<Item> = initial.iter().chain(&first).cloned().collect();
    // seq 4 is the last entry of the first turn (1 start + 4 entries).
    let (by_hash, _) = store.fork_at(src, h1).unwrap();
    let (by_seq, _) = store.fork_at_seq(src, 4).unwrap();
    for fork in [by_hash, by_seq] {
        let state = store.restore(fork).unwrap();
        assert_eq!(state.history, as_given(&upto_first));
        assert_eq!(
            state.forked_from,
            Some(SessionOrigin {
                session_id: src,
                at_hash: h1
            })
        );
    }
    // Mid-turn: after the reasoning and call, before the result.
    let (mid, _) = store.fork_at_seq(src, 2).unwrap();
    assert_eq!(
        store.restore(mid).unwrap().history,
        as_given(&upto_first[..4])
    );
    let (start, _) = store.fork_at_seq(src, 0).unwrap();
    let state = store.restore(start).unwrap();
    assert_eq!(state.history, as_given(&initial));
    assert_eq!(state.forked_from.unwrap().at_hash, h0);

    let listed = store.list().unwrap().len();
    let err = store.fork_at(src, EntryHash([7; 32])).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let next = store.log(src).unwrap().next_seq();
    let err = store.fork_at_seq(src, next).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert_eq!(
        store.list().unwrap().len(),
        listed,
        "a failed fork creates nothing"
    );
    // The source is untouched.
    assert_eq!(store.head(src).unwrap(), Some(head));
}

#[test]
fn delete_is_durable_and_forks_of_the_deleted_session_still_restore() {
    let dir = tempdir();
    let (parent, fork, fork_history) = {
        let store = open(dir.path());
        let initial = vec![Item::user_text("parent")];
        let (parent, mut ph) = store
            .create_session(Some("sys"), RequestConfig::model("m"), &initial)
            .unwrap();
        store.save_delta(parent, &mut ph, &turn(0, 9000)).unwrap();
        store.save_delta(parent, &mut ph, &turn(1, 9000)).unwrap();
        let (fork, mut fh) = store.fork_at(parent, ph).unwrap();
        store.save_delta(fork, &mut fh, &turn(2, 10)).unwrap();
        let fork_history = store.restore(fork).unwrap().history;

        assert!(store.exists(parent));
        store.delete(parent).unwrap();
        assert!(!store.exists(parent));
        assert!(!store.session_dir(parent).exists());
        assert_eq!(fs::read_dir(dir.path().join("trash")).unwrap().count(), 0);
        assert_eq!(ids(&store.list().unwrap()), vec![fork]);
        for err in [
            store.restore(parent).unwrap_err(),
            store.delete(parent).unwrap_err(),
            store.save_delta(parent, &mut ph, &turn(3, 1)).unwrap_err(),
        ] {
            assert!(matches!(err, Error::NotFound { .. }), "{err}");
        }
        assert_eq!(store.restore(fork).unwrap().history, fork_history);
        (parent, fork, fork_history)
    };
    let store = open(dir.path());
    assert!(!store.exists(parent));
    assert!(store.exists(fork));
    assert_eq!(ids(&store.list().unwrap()), vec![fork]);
    let state = store.restore(fork).unwrap();
    assert_eq!(state.history, fork_history);
    assert_eq!(state.forked_from.unwrap().session_id, parent);
    drop(store);
    // A session this store has not opened deletes as well.
    let store = open(dir.path());
    store.delete(fork).unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.list().unwrap(), vec![]);
    assert_eq!(
        fs::read_dir(dir.path().join("sessions")).unwrap().count(),
        0
    );
}
