//! session-store: an embedded, append-only, hash-chained log store for the
//! session logs of LLM agent runtimes.
#![deny(unsafe_code)]

pub mod history;
pub mod item;
