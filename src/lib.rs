//! session-store: an embedded, append-only, hash-chained log store for the
//! session logs of LLM agent runtimes.
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
pub use item::{ContentPart, Item, ItemStatus, Role};
pub use log::{Durability, Log, LogOptions, RecoveryMode};
pub use schema::{
    group_delta, EntryKind, JsonText, LogEntry, LoggedContentPart, LoggedItem, LoggedRole,
    RequestConfig, SessionId, SessionOrigin, WorkerResult,
};
pub use state::{check_history, collect_state, Problem, RestoredState};
pub use store::{ListFilter, SessionInfo, Store, StoreOptions};
