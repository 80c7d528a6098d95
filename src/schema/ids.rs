//! Session settings and origins: `SessionOrigin`, `RequestConfig`,
//! `WorkerResult` (`SessionId` is a leaf of its own, `crate::id`).

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::chain::EntryHash;
pub use crate::id::SessionId;

use super::{some_json_text, JsonText};

/// Model request settings in force for a session.
///
/// Example: [`Store::create_session`](crate::Store::create_session).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Default,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct RequestConfig {
    /// Model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Output token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Reasoning effort ("low", "medium", "high", …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Anything else, as a JSON object.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_json_text"
    )]
    pub extra: Option<JsonText>,
}

impl RequestConfig {
    /// A config naming only the model.
    ///
    /// Example: [`Store::create_session`](crate::Store::create_session).
    pub fn model(model: impl Into<String>) -> RequestConfig {
        RequestConfig {
            model: Some(model.into()),
            ..RequestConfig::default()
        }
    }
}

impl ArchivedRequestConfig {
    /// The owned config.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn to_owned_config(&self) -> RequestConfig {
        RequestConfig {
            model: self.model.as_ref().map(|s| s.as_str().to_owned()),
            temperature: self.temperature.as_ref().map(|v| v.to_native()),
            top_p: self.top_p.as_ref().map(|v| v.to_native()),
            max_output_tokens: self.max_output_tokens.as_ref().map(|v| v.to_native()),
            reasoning_effort: self
                .reasoning_effort
                .as_ref()
                .map(|s| s.as_str().to_owned()),
            extra: self.extra.as_ref().map(|j| JsonText(j.as_str().to_owned())),
        }
    }
}

/// Where a session came from: a session and the hash of the entry it branched at.
///
/// Example: [`Store::compact`](crate::Store::compact).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct SessionOrigin {
    /// The source session.
    pub session_id: SessionId,
    /// The hash of the last source entry the new session includes.
    pub at_hash: EntryHash,
}

impl ArchivedSessionOrigin {
    /// The owned origin.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn get(&self) -> SessionOrigin {
        SessionOrigin {
            session_id: self.session_id.get(),
            at_hash: self.at_hash.get(),
        }
    }
}

/// What a finished run returned.
///
/// ```
/// use session_store::schema::{now_ms, LogEntry, WorkerResult};
/// use session_store::{RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// let result = WorkerResult { text: Some("All 212 tests pass.".into()), stop_reason: "end_turn".into() };
/// store.save_entries(id, &mut head, &[LogEntry::RunCompleted { ts: now_ms(), interrupted: false, result }])?;
/// assert!(!store.restore(id)?.last_run_interrupted);
/// # Ok(()) }
/// ```
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct WorkerResult {
    /// The final text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Why the run stopped ("end_turn", "max_tokens", …).
    pub stop_reason: String,
}
