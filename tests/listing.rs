//! Guards `list` and `info` against showing a session other than its log
//! holds: counts, bytes, heads, titles and filters, after a clean reopen (the
//! catalogs alone), after a crash (the log over a stale catalog), whatever
//! state the listing cache is in, while a writer holds the session, and with
//! two stores on one root.

mod common;

use std::fs;
use std::thread;

use common::store::{answer, copy_session, ids, open, options, tempdir, tree, turn, CountOps};
use session_store::schema::now_ms;
use session_store::{
    log::IoOp, EntryHash, Item, ListFilter, LogOptions, RequestConfig, RestoredState, SessionId,
    Store,
};

/// Spins (no sleep) until the millisecond clock has passed every time read so far.
fn next_ms() -> u64 {
    let t = now_ms() + 1;
    while now_ms() < t {
        thread::yield_now();
    }
    t
}

#[test]
fn list_is_newest_first_with_true_counts_bytes_and_heads() {
    let dir = tempdir();
    let store = open(dir.path());
    let mut created = Vec::new();
    for i in 0..6 {
        let (id, mut head) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[Item::user_text(format!("task {i}"))],
            )
            .unwrap();
        for n in 0..i {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        created.push(id);
    }
    let list = store.list().unwrap();
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(ids(&list), newest_first);
    for (i, id) in created.iter().enumerate() {
        let info = list.iter().find(|s| s.id == *id).unwrap();
        let log = store.log(*id).unwrap();
        let verify = log.verify();
        assert_eq!(info.entries, 1 + 4 * i as u64);
        assert_eq!(info.entries, verify.records);
        assert_eq!(info.bytes, verify.bytes);
        assert!(info.bytes > 0);
        assert_eq!(info.head, store.head(*id).unwrap());
        assert_eq!(info.created_ms, id.created_ms().unwrap());
        assert!(info.updated_ms >= info.created_ms);
        assert_eq!(info.title, Some(format!("task {i}")));
        assert_eq!(store.info(*id).unwrap().as_ref(), Some(info));
    }
}

#[test]
fn the_title_is_an_excerpt_of_the_first_user_text() {
    let dir = tempdir();
    let id_late = {
        let store = open(dir.path());
        let (from_history, _) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[
                    Item::system_text("hook text is not a title"),
                    Item::user_text("   "),
                    Item::user_text("  Fix the flaky build\nwith more detail below"),
                ],
            )
            .unwrap();
        let (late, mut head) = store
            .create_session(
                Some("system prompt is not a title"),
                RequestConfig::default(),
                &[],
            )
            .unwrap();
        store
            .save_delta(late, &mut head, &[answer("assistant text is not a title")])
            .unwrap();
        assert_eq!(store.info(late).unwrap().unwrap().title, None);
        store
            .save_delta(late, &mut head, &[Item::user_text("Later question")])
            .unwrap();
        store
            .save_delta(late, &mut head, &[Item::user_text("A second question")])
            .unwrap();
        let long = "ß".repeat(200);
        let (long_id, _) = store
            .create_session(
                None,
                RequestConfig::default(),
                &[Item::user_text(long.clone())],
            )
            .unwrap();

        let title = |id| store.info(id).unwrap().unwrap().title;
        assert_eq!(title(from_history).as_deref(), Some("Fix the flaky build"));
        assert_eq!(title(late).as_deref(), Some("Later question"));
        let t = title(long_id).unwrap();
        let body = t
            .strip_suffix('…')
            .expect("a cut title ends with an ellipsis");
        assert!(
            !body.is_empty() && body.len() <= 120,
            "{} bytes",
            body.len()
        );
        assert!(long.starts_with(body));
        late
    };
    // The first title sticks across a reopen.
    let store = open(dir.path());
    let mut head = store.head(id_late).unwrap().unwrap();
    store
        .save_delta(id_late, &mut head, &[Item::user_text("Third question")])
        .unwrap();
    assert_eq!(
        store.info(id_late).unwrap().unwrap().title.as_deref(),
        Some("Later question")
    );
}

#[test]
fn list_filters_by_update_time_fork_origin_and_title() {
    let dir = tempdir();
    let store = open(dir.path());
    let cfg = RequestConfig::default();
    let (parent, ph) = store
        .create_session(None, cfg.clone(), &[Item::user_text("Parent task ALPHA")])
        .unwrap();
    let (other, mut oh) = store
        .create_session(None, cfg.clone(), &[Item::user_text("unrelated beta")])
        .unwrap();
    let (f1, _) = store.fork_at(parent, ph).unwrap();
    let (f2, _) = store.fork_at_seq(parent, 0).unwrap();
    let (compact, ch) = store
        .create_session(
            None,
            cfg.clone(),
            &[Item::user_text("Parent task ALPHA, again")],
        )
        .unwrap();
    store
        .compact(compact, ch, &[Item::user_text("summary")])
        .unwrap();
    let (fork_of_other, _) = store.fork_at(other, oh).unwrap();

    let since = next_ms();
    store
        .save_delta(other, &mut oh, &[Item::user_text("more")])
        .unwrap();
    let (fresh, _) = store.create_session(None, cfg.clone(), &[]).unwrap();

    let filter = |f: ListFilter| ids(&store.list_filtered(&f).unwrap());
    let recent = ListFilter {
        updated_since_ms: Some(since),
        ..ListFilter::default()
    };
    let forks = ListFilter {
        forked_from: Some(parent),
        ..ListFilter::default()
    };
    let alpha = |s: &str| ListFilter {
        title_contains: Some(s.into()),
        ..ListFilter::default()
    };
    assert_eq!(filter(recent.clone()), vec![fresh, other]);
    assert_eq!(
        filter(forks.clone()),
        vec![f2, f1],
        "a compaction is not a fork"
    );
    assert_eq!(filter(alpha("alpha")), vec![compact, f2, f1, parent]);
    assert_eq!(filter(alpha("TASK al")), vec![compact, f2, f1, parent]);
    assert_eq!(filter(alpha("gamma")), vec![]);
    assert_eq!(
        filter(ListFilter {
            updated_since_ms: Some(since),
            ..forks.clone()
        }),
        vec![]
    );
    assert_eq!(
        filter(ListFilter {
            forked_from: Some(other),
            ..ListFilter::default()
        }),
        vec![fork_of_other]
    );
    assert_eq!(filter(ListFilter::default()).len(), 7);

    // Reading, reopening and closing are not updates.
    store.restore(parent).unwrap();
    store.restore(f1).unwrap();
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    store.restore(parent).unwrap();
    assert_eq!(
        ids(&store.list_filtered(&recent).unwrap()),
        vec![fresh, other]
    );
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(
        ids(&store.list_filtered(&recent).unwrap()),
        vec![fresh, other]
    );
}

#[test]
fn list_after_a_clean_reopen_reads_only_the_catalog() {
    let dir = tempdir();
    let store = open(dir.path());
    let (a, mut ah) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("a")])
        .unwrap();
    for n in 0..6 {
        store.save_delta(a, &mut ah, &turn(n, 3000)).unwrap();
    }
    let (b, _) = store.fork_at_seq(a, 3).unwrap();
    let before = store.list().unwrap();
    let restored: Vec<RestoredState> = [a, b]
        .iter()
        .map(|id| store.restore(*id).unwrap())
        .collect();
    store.close().unwrap();
    drop(store);

    // Hide every segment: a list that opened a log would see it empty (or fail).
    let hidden = tempdir();
    let mut moved = Vec::new();
    for id in [a, b] {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let to = hidden.path().join(format!(
                    "{id}-{}",
                    path.file_name().unwrap().to_str().unwrap()
                ));
                fs::rename(&path, &to).unwrap();
                moved.push((to, path));
            }
        }
    }
    let store = open(dir.path());
    let tree_before = tree(dir.path());
    assert_eq!(store.list().unwrap(), before);
    assert_eq!(
        tree(dir.path()),
        tree_before,
        "list must not create segments"
    );
    drop(store);
    for (from, to) in moved {
        fs::rename(from, to).unwrap();
    }
    let store = open(dir.path());
    let again: Vec<RestoredState> = [a, b]
        .iter()
        .map(|id| store.restore(*id).unwrap())
        .collect();
    assert_eq!(again, restored);
}

/// An evicted session whose catalog file is empty (a fork, an untitled
/// session) has its head in the listing cache only: `Store::close` must
/// still close it clean, or `list` reads its log ever after.
#[test]
fn an_evicted_session_with_an_empty_catalog_is_closed_clean_by_store_close() {
    let dir = tempdir();
    let store = Store::open_with(dir.path(), options().max_open_sessions(1)).unwrap();
    let user = [Item::user_text("a")];
    let (a, mut ah) = store
        .create_session(None, RequestConfig::default(), &user)
        .unwrap();
    store.save_delta(a, &mut ah, &turn(0, 100)).unwrap();
    // Each open evicts the one before, which a Buffered store lets go dirty.
    let (fork, mut fh) = store.fork_at(a, ah).unwrap();
    store.save_delta(fork, &mut fh, &turn(1, 100)).unwrap();
    let (untitled, mut uh) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    store
        .save_delta(untitled, &mut uh, &[answer("no question")])
        .unwrap();
    store.log(a).unwrap();
    store.close().unwrap();
    drop(store);
    let catalog = |id: SessionId| {
        let path = dir.path().join("sessions").join(id.to_string());
        fs::metadata(path.join("catalog")).unwrap().len()
    };
    assert_eq!([a, fork, untitled].map(catalog), [1024, 0, 0]);
    let listed = open(dir.path()).list().unwrap();
    // Without their segments, only clean list-cache slots can list them.
    let hidden = tempdir();
    for id in [fork, untitled] {
        let sdir = dir.path().join("sessions").join(id.to_string());
        for e in fs::read_dir(&sdir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "seg") {
                let name = format!("{id}-{}", path.file_name().unwrap().to_str().unwrap());
                fs::rename(&path, hidden.path().join(name)).unwrap();
            }
        }
    }
    assert_eq!(open(dir.path()).list().unwrap(), listed);
}

#[test]
fn after_a_crash_list_shows_what_the_log_holds_not_a_stale_catalog() {
    // Two crash images of one live session: the catalog's head slot lags
    // the log, or runs ahead of a log that lost its unsynced tail.
    for catalog_lags in [true, false] {
        let live = tempdir();
        let store = open(live.path());
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[Item::user_text("crashy")])
            .unwrap();
        for n in 0..3 {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        let src = store.session_dir(id);
        let image = tempdir();
        let dst = image.path().join("sessions").join(id.to_string());
        let is_catalog = |n: &str| n == "catalog";
        // Image at time 1: the whole directory, the writer still running.
        copy_session(&src, &dst, |_| true);
        let at_1 = (
            store.log(id).unwrap().next_seq(),
            head,
            store.restore(id).unwrap(),
        );
        for n in 3..9 {
            store.save_delta(id, &mut head, &turn(n, 3000)).unwrap();
        }
        let at_2 = (
            store.log(id).unwrap().next_seq(),
            head,
            store.restore(id).unwrap(),
        );
        assert!(store.log(id).unwrap().segment_paths().len() > 1);
        // Image at time 2 of one half.
        if catalog_lags {
            copy_session(&src, &dst, |n| !is_catalog(n) && n != "LOCK");
        } else {
            copy_session(&src, &dst, is_catalog);
        }
        let bytes_2 = store.log(id).unwrap().bytes();
        let (entries, head, state) = if catalog_lags { at_2 } else { at_1 };

        let crashed = open(image.path());
        let list = crashed.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].entries, entries, "catalog_lags={catalog_lags}");
        assert_eq!(list[0].head, Some(head), "catalog_lags={catalog_lags}");
        if catalog_lags {
            assert_eq!(list[0].bytes, bytes_2);
        }
        assert_eq!(crashed.restore(id).unwrap(), state);
        // The repaired slot is what a later store sees too.
        crashed.close().unwrap();
        drop(crashed);
        let later = open(image.path());
        assert_eq!(later.list().unwrap()[0].entries, entries);
    }
}

/// The listing cache is a copy: deleted, damaged or stale, `list` still shows
/// what the catalogs and logs hold.
#[test]
fn list_is_right_whatever_state_the_listing_cache_is_in() {
    let dir = tempdir();
    let expected = {
        let store = open(dir.path());
        for n in 0..5 {
            let (id, mut head) = store
                .create_session(None, RequestConfig::default(), &[])
                .unwrap();
            store.save_delta(id, &mut head, &turn(n, 10 * n)).unwrap();
        }
        let list = store.list().unwrap();
        store.close().unwrap();
        list
    };
    let cache = dir.path().join("list.cache");
    let check = |what: &str| {
        let store = open(dir.path());
        assert_eq!(store.list().unwrap(), expected, "{what}");
        // A second listing (the cache backfilled) agrees too.
        assert_eq!(store.list().unwrap(), expected, "{what}, again");
    };
    check("intact");
    let original = std::fs::read(&cache).unwrap();
    assert!(original.len() >= 5 * 640, "one slot per session");

    std::fs::remove_file(&cache).unwrap();
    check("cache deleted");

    let mut damaged = original.clone();
    for slot in 0..5 {
        damaged[slot * 640 + 30] ^= 0xff;
    }
    std::fs::write(&cache, &damaged).unwrap();
    check("every slot damaged");

    // A crash leaves the cache as it was while a writer held the session:
    // dirty, and behind. Nobody holds it now, so list must not trust it.
    let store = open(dir.path());
    let id = expected[0].id;
    let mut head = expected[0].head.unwrap();
    store.save_delta(id, &mut head, &turn(9, 5)).unwrap();
    let while_open = std::fs::read(&cache).unwrap();
    store.save_delta(id, &mut head, &turn(10, 5)).unwrap();
    store.close().unwrap();
    std::fs::write(&cache, &while_open).unwrap();
    let store = open(dir.path());
    let listed = store.list().unwrap();
    let fresh = listed.iter().find(|s| s.id == id).unwrap();
    assert_eq!(fresh.head, Some(head), "a stale dirty slot was trusted");
}

/// A save writes its entries and nothing else: the catalog and the listing
/// cache stay dirty while the writer has the session, and every `list`, in
/// this store or another on the same root, still shows the live numbers.
#[test]
fn a_save_writes_no_catalog_and_list_still_shows_it() {
    let dir = tempdir();
    // Writes and syncs of the catalogs and the listing cache.
    let hook = CountOps::new(|op| match op {
        IoOp::Write { path, .. } | IoOp::Sync { path } => {
            path.ends_with("catalog") || path.ends_with("list.cache")
        }
        _ => false,
    });
    let store = Store::open_with(
        dir.path(),
        options().log(LogOptions::default().hook(hook.clone())),
    )
    .unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("title")])
        .unwrap();
    let before = hook.seen();
    let mut saved_at = 0;
    for n in 0..5 {
        saved_at = now_ms();
        store.save_delta(id, &mut head, &turn(n, 100)).unwrap();
    }
    assert_eq!(
        hook.seen(),
        before,
        "a save wrote a catalog or the listing cache"
    );
    let entries = store.log(id).unwrap().next_seq();
    let check = |info: &session_store::SessionInfo, who: &str| {
        assert_eq!(info.head, Some(head), "{who}");
        assert_eq!(info.entries, entries, "{who}");
        assert!(info.updated_ms >= saved_at, "{who}: an old update time");
        assert_eq!(info.title.as_deref(), Some("title"), "{who}");
    };
    check(&store.list().unwrap()[0], "the writer's store");
    // Another store on the root, as another process: the slot is dirty and
    // the writer is live, so it reads the log.
    let other = Store::open_read_only(dir.path()).unwrap();
    check(&other.list().unwrap()[0], "another store");
    check(&other.info(id).unwrap().unwrap(), "another store's info");
    let live = store.list().unwrap()[0].clone();
    store.close().unwrap();
    // Clean now: the slot itself, with the writer's numbers and time.
    assert_eq!(other.list().unwrap()[0], live);
}

/// A store learns the listing cache's slots when it first needs one, not
/// at its open: a later store still finds each session's slot and puts a new
/// session after all of them, so the cache alone lists every session.
#[test]
fn a_later_store_finds_every_slot_of_the_listing_cache() {
    let dir = tempdir();
    let mut sessions: Vec<(SessionId, EntryHash)> = {
        let store = open(dir.path());
        let made = (0..4)
            .map(|_| {
                store
                    .create_session(None, RequestConfig::default(), &[])
                    .unwrap()
            })
            .collect();
        store.close().unwrap();
        made
    };
    let store = open(dir.path());
    let (id, mut head) = sessions[2];
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    sessions[2].1 = head;
    sessions.push(
        store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap(),
    );
    store.close().unwrap();
    drop(store);
    let cache = fs::read(dir.path().join("list.cache")).unwrap();
    assert_eq!(cache.len(), sessions.len() * 640, "one slot per session");
    // Without their catalog files, the sessions are listed from the cache
    // alone, or not at all.
    for (id, _) in &sessions {
        let catalog = dir
            .path()
            .join("sessions")
            .join(id.to_string())
            .join("catalog");
        fs::rename(&catalog, catalog.with_extension("hidden")).unwrap();
    }
    let listed = Store::open_read_only(dir.path()).unwrap().list().unwrap();
    for (id, head) in &sessions {
        let info = listed.iter().find(|s| s.id == *id).unwrap();
        assert_eq!((info.head, &info.error), (Some(*head), &None), "{id}");
    }
}

/// Two stores on one root (as two processes would be) place sessions in the
/// listing cache without taking each other's slots or giving one session two
/// slots, so `list` never shows an old state of a session as clean.
#[test]
fn two_stores_on_one_root_keep_the_listing_cache_honest() {
    let dir = tempdir();
    let a = open(dir.path());
    let b = open(dir.path());
    let (y, _) = b
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let (x, mut x_head) = a
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    a.close().unwrap();
    // B writes X, which A placed.
    b.save_delta(x, &mut x_head, &turn(1, 10)).unwrap();
    b.close().unwrap();
    let (z, _) = a
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    a.close().unwrap();
    drop((a, b));
    let listed = open(dir.path()).list().unwrap();
    let ids: Vec<_> = listed.iter().map(|s| s.id).collect();
    for id in [x, y, z] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let x_info = listed.iter().find(|s| s.id == x).unwrap();
    assert_eq!(x_info.head, Some(x_head), "list shows an old state of X");
    assert_eq!(x_info.entries, 1 + 4);
}

/// `Store::close` leaves open a session another handle still uses: marking
/// it clean while it can still be written would mislead `list`.
#[test]
fn close_keeps_sessions_in_use_open() {
    let dir = tempdir();
    let store = open(dir.path());
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let held = store.log(id).unwrap();
    store.close().unwrap();
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    drop(held);
    let info = store
        .list()
        .unwrap()
        .into_iter()
        .find(|s| s.id == id)
        .unwrap();
    assert_eq!(info.head, Some(head));
}
