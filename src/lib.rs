//! session-store: an embedded, append-only, hash-chained log store for the
//! session logs of LLM agent runtimes.
//!
//! A [`Store`] holds many sessions, one [`Log`] directory each. An agent
//! runtime writes its conversation with [`Store::save_delta`], which groups
//! runtime [`Item`]s into [`LogEntry`] records, and resumes with
//! [`Store::restore`], which replays archived records from the last
//! `SessionStart` straight into runtime items.
//!
//! ```
//! use session_store::{Item, RequestConfig, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path())?;
//! let (id, mut head) = store.create_session(Some("Be brief."), RequestConfig::model("gpt-5"), &[])?;
//! store.save_delta(id, &mut head, &[Item::user_text("hi"), Item::assistant_text("hello")])?;
//!
//! let state = store.restore(id)?;
//! assert_eq!(state.history, vec![Item::user_text("hi"), Item::assistant_text("hello")]);
//! assert_eq!(state.head, Some(head));
//! assert!(state.check().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every record carries a CRC32 and chains the previous record's BLAKE3
//! hash; see `DESIGN.md` for the byte layout, the fsync points, recovery and
//! the threat model.
//!
//! # Errors a runtime handles
//!
//! Every call returns [`Error`]; the kinds a runtime must be ready for, and
//! what to do:
//!
//! | kind | means | do |
//! |---|---|---|
//! | [`Error::HeadMismatch`] | another writer (or an earlier, half-known attempt) moved the session: nothing was written | read [`Store::head`] (it carries the stored head), reconcile, retry with it; or [`Store::ensure_head_or_fork`] |
//! | [`Error::Locked`] | another process writes this session | retry later, or read it through a read-only view ([`Store::open_read_only`], [`Store::subscribe`]) |
//! | [`Error::Io`] | the OS refused: a full disk ([`Error::is_storage_full`]), too many open files ([`Error::is_out_of_descriptors`], returned only after the store closed its idle sessions and tried once more), a permission, a read-only medium; it names the operation and the file | fix the cause; the call did not return its result, so read the head before retrying a save |
//! | [`Error::Poisoned`] | an earlier write or sync of this session failed, and its writer refuses more | fix the cause, then call again: once no handle holds the poisoned writer, the store reopens the session through recovery, and its head says what was kept |
//! | [`Error::Corrupt`] | bytes on disk failed their check at or before the durable point; it names the segment, offset and seq | stop writing that session; `session-store verify`, then salvage ([`RecoveryMode::Salvage`]), restore from a copy, or delete it: other sessions are unaffected |
//! | [`Error::JournalUnapplied`] | acknowledged records that only a crashed handle's journal held do not continue the session's log; it names the journal file | the session is read as its log holds it and not written; [`Store::unapplied_journals`] lists them; keep the journal file for inspection, then open with [`RecoveryMode::Salvage`] to write on without them |
//! | [`Error::NotFound`] | no such session (or entry, for a fork) | — |
//! | [`Error::InvalidInput`] | the call was refused before anything was written: an invalid id, JSON that would not export, a write to a read-only store | fix the input |
//! | [`Error::ItemForm`] | an item does not fit a provider's wire form; names the item and field | fix the item |
//! | [`Error::Wire`] | a wire-form line (import) is unacceptable; names line and column | fix the input |
//! | [`Error::Cancelled`] | (`AsyncStore`) the runtime shut down before the call finished | read the head to learn whether it took effect |
//!
//! A restore never hides lost data: after a salvage cut,
//! [`RestoredState::salvaged`] is set and [`RestoredState::check`] reports
//! [`Problem::Salvaged`] first.
//!
//! # Features
//!
//! - `history`: readers of other agents' transcripts (`HistoryService`;
//!   `agy`, `claude`, `codex`), with a bundled SQLite and zstd.
//! - `tokio`: `AsyncStore`, the store's calls as futures that never block
//!   a runtime worker, and subscriptions as streams.
//! - `archive`: `Archive`, sealed segments to object storage (`object_store`:
//!   S3, a local directory, memory) and restore from it; `Archiver`,
//!   continuous archival of each segment as it seals.
//!
//! With no feature the crate is the bare library. The `session-store`
//! command is the crate `session-store-cli` beside it (`cli/`), which turns
//! on `history` and `archive`.
#![deny(unsafe_code)]

#[cfg(feature = "archive")]
pub mod archive;
#[cfg(feature = "tokio")]
mod async_store;
mod catalog;
mod chain;
mod error;
mod export;
mod fs;
#[cfg(feature = "history")]
pub mod history;
mod id;
mod item;
mod json;
pub mod log;
mod mmap;
pub mod payload;
pub mod schema;
mod segment;
pub mod state;
pub mod store;

// The byte layouts, public only to the tests, benches and fuzz targets
// (feature `whitebox`); not a stable API.
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub mod format;
// Without `whitebox`, what only the tests use (`Footer::last_seq`) is dead.
#[cfg(not(feature = "whitebox"))]
#[allow(dead_code)]
mod format;

#[cfg(feature = "archive")]
pub use archive::Archive;
#[cfg(feature = "tokio")]
pub use async_store::{AsyncStore, EntryStream};
pub use chain::EntryHash;
pub use error::{CorruptKind, Error, Result};
pub use item::{
    anthropic, responses, CallLink, ContentPart, Extra, Form, Item, ItemStatus, ItemView, JsonSink,
    JsonTree, Role, ToolOutput, TreeSink, WireForm,
};
pub use log::{Durability, Log, LogOptions, RecoveryMode, Snapshot, VerifyReport};
pub use schema::{
    group_delta, EntryKind, JsonText, LogEntry, RequestConfig, SessionId, SessionOrigin,
    WorkerResult,
};
pub use state::{Problem, RestoredState};
pub use store::{
    Deletion, HistoryTail, ListFilter, SessionHandle, SessionInfo, Store, StoreOptions,
    Subscription, Turn, UnappliedJournal,
};

/// The wire form: one JSON object a log entry, as `export` writes and
/// `import` reads.
///
/// # Example
///
/// ```
/// use session_store::wire::{parse_line, LineReader};
/// use session_store::{Item, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// // Lines another tool wrote, without `seq` and hashes: import assigns them.
/// let input = r#"{"kind":"session_start","ts":1767225600000,"config":{"model":"gpt-5"},"history":[]}
/// {"kind":"user_input","ts":1767225601000,"item":{"kind":"message","role":"user","content":[{"kind":"text","text":"Is main green?"}]}}"#;
/// let mut reader = LineReader::new(input.as_bytes());
/// let mut lines = Vec::new();
/// while let Some((no, text)) = reader.next_line()? {
///     lines.push((no, parse_line(text, no)?));
/// }
/// let store = Store::open(dir.path())?;
/// let id = store.import(&lines)?;
/// assert_eq!(store.restore(id)?.history, [Item::user_text("Is main green?")]);
/// # Ok(()) }
/// ```
pub mod wire {
    pub use crate::export::{entry_line, parse_line, LineReader, WireLine, MAX_LINE_BYTES};
}

/// Checks bytes as a payload file's content, as every read of the payload
/// area and every download from an archive does before trusting them (an
/// item archive, valid JSON texts, no reference itself), and returns the
/// item. Public only to the fuzz targets (feature `whitebox`).
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub fn check_payload_bytes(bytes: &[u8]) -> std::result::Result<Item, payload::PayloadProblem> {
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    payload::check_archive(&aligned).map(|item| item.to_item())
}
/// Drops a file's clean pages from the page cache, for the benchmarks'
/// cold reads (feature `whitebox`).
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub fn drop_from_page_cache(file: &std::fs::File) -> std::io::Result<()> {
    mmap::drop_cached(file)
}
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub use log::seal_delta;
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub use schema::JSON_GROWTH;
#[cfg(feature = "whitebox")]
#[doc(hidden)]
pub use segment::links_hashed_by_opens;
