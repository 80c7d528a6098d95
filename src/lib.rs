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
#![deny(unsafe_code)]

mod catalog;
pub mod chain;
pub mod error;
pub mod export;
pub mod format;
pub mod history;
pub mod item;
pub mod log;
pub mod schema;
pub mod segment;
pub mod state;
pub mod store;

mod mmap;

pub use chain::EntryHash;
pub use error::{CorruptKind, Error, Result};
pub use item::{CallLink, ContentPart, Item, ItemStatus, Role, ToolOutput};
pub use log::{Durability, Log, LogOptions, RecoveryMode};
pub use schema::{
    group_delta, EntryKind, JsonText, LogEntry, LoggedContentPart, LoggedInputAudio,
    LoggedInputFile, LoggedInputImage, LoggedItem, LoggedOutputText, LoggedRole, LoggedToolOutput,
    RequestConfig, SessionId, SessionOrigin, WorkerResult,
};
pub use state::{check_history, collect_state, Problem, RestoredState};
pub use store::{ListFilter, SessionInfo, Store, StoreOptions};
