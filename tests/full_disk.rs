//! Guards against a full disk turning into SIGBUS, a panic or silent loss:
//! appends on a filled file system must fail with `Error::Io`, poison the
//! writer, and leave a log that reopens with every acknowledged record.
//!
//! Needs root to mount a small tmpfs; elsewhere it prints why it is skipped.

use std::path::Path;
use std::process::Command;

use session_store::{schema::LoggedItem, Durability, Error, Item, Log, LogEntry, LogOptions};

fn entry(i: u64) -> LogEntry {
    LogEntry::UserInput {
        ts: i,
        item: LoggedItem::from(Item::user_text(format!("{i}:{}", "d".repeat(3000)))),
    }
}

struct Mount<'a>(&'a Path);

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// Appends with `durability` until the disk is full, checks the failure is
/// `Io` with `StorageFull` and poisons the writer; returns the appends
/// acknowledged.
fn fill(log: &Log, durability: Durability) -> u64 {
    let mut acked = 0u64;
    let err = loop {
        match log.append_with(&entry(acked), durability) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 10_000, "the disk never filled up");
    };
    match &err {
        Error::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{err}")
        }
        other => panic!("expected Error::Io on a full disk, got {other:?}"),
    }
    assert!(acked > 10, "the disk filled after only {acked} appends");
    assert!(matches!(log.append(&entry(acked)), Err(Error::Poisoned)));
    acked
}

/// Reopens the log and checks that it holds exactly the `acked` appends.
fn reopens_with(dir: &Path, opts: LogOptions, acked: u64) {
    let log = Log::open(dir, opts).unwrap();
    assert_eq!(log.next_seq(), acked);
    assert_eq!(log.verify().damage, None);
    let entries: Vec<_> = log
        .snapshot()
        .entries_from(0)
        .map(|r| r.unwrap().2)
        .collect();
    assert_eq!(entries.last(), Some(&entry(acked - 1)));
}

#[test]
fn appends_on_a_full_disk_fail_with_io_and_recover() {
    let Some((_dir, mnt)) = small_tmpfs("512k") else {
        return;
    };
    let _guard = Mount(&mnt);
    let opts = LogOptions::default().segment_size(64 << 10);
    let log = Log::open(mnt.join("log"), opts.clone()).unwrap();
    let acked = fill(&log, Durability::Sync);
    drop(log);
    // Free space, reopen: every acknowledged record is there and appends work.
    for e in std::fs::read_dir(mnt.join("log")).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".prep") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    reopens_with(&mnt.join("log"), opts, acked);
    println!("full disk: {acked} appends acknowledged before ENOSPC; reopened intact");
}

/// Mounts a tmpfs of `size` at a fresh directory; `None` (with the reason
/// printed) where this process may not.
fn small_tmpfs(size: &str) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root {
        println!("full disk test skipped: not running as root, cannot mount a tmpfs");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&mnt)
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        println!("full disk test skipped: mounting a tmpfs failed ({status:?})");
        return None;
    }
    Some((dir, mnt))
}

/// A log that never syncs has sparse segments: the disk fills at a write
/// rather than at an allocation, and recovery on the still full disk must
/// not need new blocks (it only zeroes what holds data).
#[test]
fn buffered_appends_on_a_full_disk_fail_with_io_and_reopen_while_full() {
    let Some((_dir, mnt)) = small_tmpfs("256k") else {
        return;
    };
    let _guard = Mount(&mnt);
    // Segments far larger than the disk: sparse, they still fit.
    let opts = LogOptions::default().segment_size(8 << 20);
    let log = Log::open(mnt.join("log"), opts.clone()).unwrap();
    let acked = fill(&log, Durability::Buffered);
    drop(log);
    // Reopen with the disk still full: recovery cuts the partial record.
    reopens_with(&mnt.join("log"), opts, acked);
    println!("full disk, buffered: {acked} appends before ENOSPC; reopened while full");
}

/// After a full disk, freeing a little space must be enough to go on: a roll
/// whose full-size (doubled) segment no longer fits falls back to a smaller
/// one that holds the record, instead of failing every save until as much
/// space as the doubled segment is free (issue 15, case 10).
#[test]
fn saves_go_on_after_a_full_disk_frees_a_little_space() {
    use session_store::{RequestConfig, Store, StoreOptions};
    let Some((_dir, mnt)) = small_tmpfs("8m") else {
        return;
    };
    let _guard = Mount(&mnt);
    let ballast = mnt.join("ballast");
    std::fs::write(&ballast, vec![1u8; 1 << 20]).unwrap();
    // Synced segments are reserved and double: 2 MiB, 4 MiB, then 8 MiB,
    // which never fits this disk.
    let opts = StoreOptions::default().log(
        LogOptions::default()
            .durability(Durability::Sync)
            .initial_segment_size(2 << 20),
    );
    let root = mnt.join("store");
    let store = Store::open_with(&root, opts.clone()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let turn = |i: u64| vec![Item::user_text(format!("{i}:{}", "t".repeat(3000)))];
    let mut saved = 0u64;
    let err = loop {
        match store.save_delta(id, &mut head, &turn(saved)) {
            Ok(()) => saved += 1,
            Err(e) => break e,
        }
        assert!(saved < 10_000, "the disk never filled up");
    };
    assert!(err.is_storage_full(), "expected a full disk, got {err}");
    drop(store);
    std::fs::remove_file(&ballast).unwrap();
    // 1 MiB is free now; the next doubled segment would need far more.
    let store = Store::open_with(&root, opts).unwrap();
    let mut head = store.head(id).unwrap().unwrap();
    for i in 0..20 {
        store
            .save_delta(id, &mut head, &turn(saved + i))
            .unwrap_or_else(|e| panic!("save {i} after freeing 1 MiB: {e}"));
    }
    store
        .save_delta(id, &mut head, &[Item::user_text("hello world")])
        .unwrap();
    let restored = store.restore(id).unwrap();
    assert_eq!(restored.history.len() as u64, saved + 21);
    println!("full disk, store: {saved} saves before ENOSPC; 21 more after freeing 1 MiB");
}
