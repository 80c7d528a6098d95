//! `SessionId`: a session's identity, a leaf every layer may name (errors
//! carry it), depending on nothing of the crate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A session id: a UUID (v7 for ids this crate makes, so they sort by creation time).
///
/// ```
/// use session_store::SessionId;
/// # fn main() -> session_store::Result<()> {
/// let id = SessionId::new_v7();
/// let text = id.to_string(); // "0199…-…": 36 characters, lowercase
/// assert_eq!(text.parse::<SessionId>()?, id);
/// assert_eq!(id.uuid().get_version_num(), 7);
/// assert!(id.created_ms().is_some());
/// // Only the canonical form: an id is a directory name.
/// assert!("../../etc".parse::<SessionId>().is_err());
/// assert!(text.to_uppercase().parse::<SessionId>().is_err());
/// # Ok(()) }
/// ```
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
    ///
    /// Example: [`SessionId`].
    pub fn new_v7() -> SessionId {
        SessionId(*uuid::Uuid::now_v7().as_bytes())
    }

    /// The UUID.
    ///
    /// Example: [`SessionId`].
    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }

    /// Milliseconds since the Unix epoch encoded in a v7 id.
    ///
    /// Example: [`SessionId`].
    pub fn created_ms(&self) -> Option<u64> {
        let ts = self.uuid().get_timestamp()?;
        let (secs, nanos) = ts.to_unix();
        Some(secs * 1000 + u64::from(nanos) / 1_000_000)
    }
}

impl ArchivedSessionId {
    /// The owned id.
    ///
    /// Example: [`SessionId`].
    pub fn get(&self) -> SessionId {
        SessionId(self.0)
    }
}

impl FromStr for SessionId {
    type Err = ParseSessionIdError;

    /// Accepts only the canonical hyphenated lowercase form, so that an id maps
    /// to exactly one directory name. Anything else (paths, NUL, long strings)
    /// is refused; as a crate [`Error`](crate::Error) it is `InvalidInput`.
    fn from_str(s: &str) -> Result<Self, ParseSessionIdError> {
        let shown: String = s.chars().take(48).collect();
        let refused = |why: &'static str| ParseSessionIdError {
            shown: shown.clone(),
            why,
        };
        if s.len() != 36 {
            return Err(refused("is not a UUID"));
        }
        let uuid = uuid::Uuid::try_parse(s).map_err(|_| refused("is not a UUID"))?;
        if uuid.hyphenated().to_string() != s {
            return Err(refused("is not in canonical lowercase form"));
        }
        Ok(SessionId(*uuid.as_bytes()))
    }
}

/// Text that is no session id in its canonical form.
///
/// Example: [`SessionId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseSessionIdError {
    shown: String,
    why: &'static str,
}

impl fmt::Display for ParseSessionIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session id {:?} {}", self.shown, self.why)
    }
}

impl std::error::Error for ParseSessionIdError {}

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
