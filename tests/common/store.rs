//! Helpers of the tests of the session API: a store with small segments,
//! realistic turns with provider state, single-entry saves, and I/O hooks
//! that fail or count a store's writes and syncs.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use session_store::schema::now_ms;
use session_store::{
    log::IoHook, log::IoOp, ContentPart, EntryHash, EntryKind, Item, ItemStatus, LogEntry,
    LogOptions, RequestConfig, Role, SessionId, SessionInfo, Store, StoreOptions,
};

/// Appends a `TurnEnd`.
pub fn turn_end(store: &Store, id: SessionId, head: &mut EntryHash, turn_count: u64) {
    let entry = LogEntry::TurnEnd {
        ts: now_ms(),
        turn_count,
    };
    store.save_entries(id, head, &[entry]).unwrap();
}

/// Appends a `ConfigChanged`.
pub fn config_changed(store: &Store, id: SessionId, head: &mut EntryHash, config: RequestConfig) {
    let entry = LogEntry::ConfigChanged {
        ts: now_ms(),
        config,
    };
    store.save_entries(id, head, &[entry]).unwrap();
}

/// Small segments, so that a few turns already roll.
pub const SEGMENT_BYTES: u64 = 16 << 10;

/// Store options with segments of [`SEGMENT_BYTES`].
pub fn options() -> StoreOptions {
    StoreOptions::default().log(LogOptions::default().segment_size(SEGMENT_BYTES))
}

/// A store at `root` with [`options`].
pub fn open(root: &Path) -> Store {
    Store::open_with(root, options()).unwrap()
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A completed tool call with its provider id.
pub fn call(call_id: &str, arguments: &str) -> Item {
    Item::ToolCall {
        extra: Default::default(),
        id: Some(format!("fc_{call_id}")),
        call_id: call_id.into(),
        name: "shell".into(),
        arguments: arguments.into(),
        status: Some(ItemStatus::Completed),
    }
}

/// The result of `call_id`, with its provider id.
pub fn result(call_id: &str, output: &str) -> Item {
    Item::ToolResult {
        extra: Default::default(),
        id: Some(format!("fco_{call_id}")),
        call_id: call_id.into(),
        summary: format!("ran {call_id}"),
        content: Some(output.into()),
    }
}

/// A completed reasoning item with opaque provider state.
pub fn reasoning(text: &str) -> Item {
    Item::Reasoning {
        extra: Default::default(),
        id: Some("rs_0123".into()),
        text: text.into(),
        summary: vec![format!("summary: {text}")],
        // Opaque bytes that must come back exactly, NUL and all.
        encrypted_content: Some(format!("gAAAAB{}+/=\u{0}\u{7f}é", text.len())),
        status: Some(ItemStatus::Completed),
    }
}

/// A completed assistant message with its provider id.
pub fn answer(text: &str) -> Item {
    Item::Message {
        extra: Default::default(),
        id: Some("msg_0456".into()),
        role: Role::Assistant,
        content: vec![ContentPart::Text { text: text.into() }],
        status: Some(ItemStatus::Completed),
    }
}

/// One realistic turn: user, reasoning + call, result (`pad` bytes), answer.
/// `save_delta` groups it into four entries.
pub fn turn(n: usize, pad: usize) -> Vec<Item> {
    let call_id = format!("call_{n}");
    vec![
        Item::user_text(format!("question {n}")),
        reasoning(&format!("thinking about {n}")),
        call(&call_id, &format!(r#"{{"cmd": "grep -n {n}",  "x": "ü"}}"#)),
        result(&call_id, &format!("{n}:{}", "o".repeat(pad))),
        answer(&format!("answer {n}")),
    ]
}

/// What a restore gives back of `items`: all of them, as given.
pub fn as_given(items: &[Item]) -> Vec<Item> {
    items.to_vec()
}

/// The kind of every entry of a session, in order.
pub fn kinds(store: &Store, id: SessionId) -> Vec<EntryKind> {
    let snap = store.snapshot(id).unwrap();
    let kinds = snap.iter().map(|r| r.unwrap().kind).collect();
    kinds
}

/// Every path under `root` with its length (directories as `None`).
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Option<u64>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if e.file_type().unwrap().is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(e.metadata().unwrap().len()));
            }
        }
    }
    out
}

/// The ids of a listing, in its order.
pub fn ids(infos: &[SessionInfo]) -> Vec<SessionId> {
    infos.iter().map(|i| i.id).collect()
}

/// Copies the files of a session directory whose names pass `keep`.
pub fn copy_session(from: &Path, to: &Path, keep: impl Fn(&str) -> bool) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if keep(&name) && !name.ends_with(".prep") {
            fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// `n` new sessions, each with a first user text naming its number.
pub fn numbered_sessions(store: &Store, n: usize) -> Vec<(SessionId, EntryHash)> {
    (0..n)
        .map(|i| {
            let first = [Item::user_text(format!("session {i}"))];
            store
                .create_session(None, RequestConfig::default(), &first)
                .unwrap()
        })
        .collect()
}

/// Fails every `fdatasync` of a log while armed.
pub struct FailSyncs(pub AtomicBool);

impl IoHook for FailSyncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        // The hook sees the store's catalog and list-cache syncs too; a
        // log's records are synced in its segment or the store's journal.
        let records = |p: &std::path::Path| p.extension().is_some_and(|e| e == "seg" || e == "jnl");
        let of_a_log = matches!(op, IoOp::Sync { path } if records(path));
        if of_a_log && self.0.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        Ok(())
    }
}

/// Counts the I/O operations `counts` picks.
pub struct CountOps {
    seen: AtomicUsize,
    counts: fn(&IoOp<'_>) -> bool,
}

impl CountOps {
    /// A hook that counts the operations `counts` picks.
    pub fn new(counts: fn(&IoOp<'_>) -> bool) -> Arc<CountOps> {
        Arc::new(CountOps {
            seen: Default::default(),
            counts,
        })
    }

    /// How many it has counted so far.
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

impl IoHook for CountOps {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        if (self.counts)(op) {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Counts the `fdatasync`s that make records durable: of segment files,
/// and of the store's journal (which `Sync` commits go through).
#[derive(Default)]
pub struct SegSyncs(pub AtomicUsize);

impl IoHook for SegSyncs {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let records = |p: &std::path::Path| p.extension().is_some_and(|e| e == "seg" || e == "jnl");
        if matches!(op, IoOp::Sync { path } if records(path)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}
