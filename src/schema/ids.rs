//! Session identity and settings: `SessionId`, `SessionOrigin`,
//! `RequestConfig`, `WorkerResult`.

#![allow(missing_docs)]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chain::EntryHash;
use crate::error::{Error, Result};

use super::{some_json_text, JsonText};

/// Model request settings in force for a session.
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
    pub fn model(model: impl Into<String>) -> RequestConfig {
        RequestConfig {
            model: Some(model.into()),
            ..RequestConfig::default()
        }
    }
}

impl ArchivedRequestConfig {
    /// The owned config.
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

/// A session id: a UUID (v7 for ids this crate makes, so they sort by creation time).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct SessionId(pub [u8; 16]);

impl SessionId {
    /// A fresh UUID v7.
    pub fn new_v7() -> SessionId {
        SessionId(*uuid::Uuid::now_v7().as_bytes())
    }

    /// The UUID.
    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }

    /// Milliseconds since the Unix epoch encoded in a v7 id.
    pub fn created_ms(&self) -> Option<u64> {
        let ts = self.uuid().get_timestamp()?;
        let (secs, nanos) = ts.to_unix();
        Some(secs * 1000 + u64::from(nanos) / 1_000_000)
    }
}

impl ArchivedSessionId {
    /// The owned id.
    pub fn get(&self) -> SessionId {
        SessionId(self.0)
    }
}

impl FromStr for SessionId {
    type Err = Error;

    /// Accepts only the canonical hyphenated lowercase form, so that an id maps
    /// to exactly one directory name. Anything else (paths, NUL, long strings)
    /// is `InvalidInput`.
    fn from_str(s: &str) -> Result<Self> {
        let shown: String = s.chars().take(48).collect();
        if s.len() != 36 {
            return Err(Error::invalid(format!(
                "session id {shown:?} is not a UUID"
            )));
        }
        let uuid = uuid::Uuid::try_parse(s)
            .map_err(|_| Error::invalid(format!("session id {shown:?} is not a UUID")))?;
        if uuid.hyphenated().to_string() != s {
            return Err(Error::invalid(format!(
                "session id {shown:?} is not in canonical lowercase form"
            )));
        }
        Ok(SessionId(*uuid.as_bytes()))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uuid().hyphenated(), f)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a session came from: a session and the hash of the entry it branched at.
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
    pub fn get(&self) -> SessionOrigin {
        SessionOrigin {
            session_id: self.session_id.get(),
            at_hash: self.at_hash.get(),
        }
    }
}

/// What a finished run returned.
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
