//! The hash chain: the hash type, the genesis value, and how a link is computed.
//!
//! `hash(n) = blake3::keyed_hash(key = hash(n-1), record[LINKED_RANGE])`, where
//! the linked range is the record's seq, ts, kind, length and payload (see
//! [`crate::format`]). Keying with the previous hash folds it in without
//! prefixing it to the input, so BLAKE3 runs at full speed on large payloads.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte BLAKE3 chain hash. Shown as 64 lowercase hex digits.
///
/// ```
/// use session_store::{EntryHash, RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (_id, head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// // A head travels as text: in a URL, a database row, a queue message.
/// let text = head.to_string();
/// assert_eq!(text, head.to_hex());
/// assert_eq!(text.parse::<EntryHash>(), Ok(head));
/// assert!(text.starts_with(&head.short()));
/// assert!("HEAD~1".parse::<EntryHash>().is_err());
/// assert_ne!(head, EntryHash::genesis());
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
    Default,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct EntryHash(pub [u8; 32]);

/// The context string of the genesis value for format version 1.
const GENESIS_CONTEXT_V1: &str = "session-store v1 genesis";

impl EntryHash {
    /// The value that stands before the first record of every log of format v1.
    ///
    /// It is the same everywhere, so identical entries hash identically in any
    /// log, and an exported session re-imports to the same hashes.
    ///
    /// Example: [`EntryHash`].
    pub fn genesis() -> EntryHash {
        EntryHash(blake3::derive_key(GENESIS_CONTEXT_V1, b""))
    }

    /// The link: the hash of a record whose linked bytes are `linked`, following `self`.
    ///
    /// Example: [`EntryHash`].
    pub fn link(&self, linked: &[u8]) -> EntryHash {
        EntryHash(*blake3::keyed_hash(&self.0, linked).as_bytes())
    }

    /// The raw bytes.
    ///
    /// Example: [`EntryHash`].
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex.
    ///
    /// Example: [`EntryHash`].
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// A short prefix for display.
    ///
    /// Example: [`EntryHash`].
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl ArchivedEntryHash {
    /// The owned hash.
    ///
    /// Example: [`EntryHash`].
    pub fn get(&self) -> EntryHash {
        EntryHash(self.0)
    }
}

/// `bytes` as lowercase hex, the one hex form the crate writes.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(hex_digit(b >> 4));
        out.push(hex_digit(b & 0xf));
    }
    out
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
pub(crate) fn from_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = hex_value(pair[0])? << 4 | hex_value(pair[1])?;
    }
    Some(out)
}

fn hex_digit(n: u8) -> char {
    char::from_digit(u32::from(n), 16).unwrap_or('0')
}

/// Why a hex string is not a hash.
///
/// Example: [`EntryHash`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a 64-digit hex hash: {0:?}")]
pub struct ParseHashError(pub String);

impl FromStr for EntryHash {
    type Err = ParseHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 64 {
            return Err(ParseHashError(s.chars().take(80).collect()));
        }
        from_hex(s)
            .map(EntryHash)
            .ok_or_else(|| ParseHashError(s.to_string()))
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for EntryHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for EntryHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryHash({})", self.to_hex())
    }
}

impl Serialize for EntryHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for EntryHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn genesis_is_fixed() {
        assert_eq!(EntryHash::genesis(), EntryHash::genesis());
        assert_ne!(EntryHash::genesis(), EntryHash::default());
    }

    #[test]
    fn link_depends_on_prev_and_bytes() {
        let g = EntryHash::genesis();
        let a = g.link(b"abc");
        assert_ne!(a, g.link(b"abd"));
        assert_ne!(a, a.link(b"abc"));
        assert_eq!(
            a,
            EntryHash(*blake3::keyed_hash(g.as_bytes(), b"abc").as_bytes())
        );
    }

    #[test]
    fn rejects_bad_hex() {
        assert!("zz".parse::<EntryHash>().is_err());
        assert!("A".repeat(64).parse::<EntryHash>().is_err());
        assert!("é".repeat(32).parse::<EntryHash>().is_err());
    }

    #[test]
    fn hex_of_other_lengths_round_trips_and_rejects_a_wrong_length() {
        let id = [0xa5u8; 16];
        assert_eq!(from_hex::<16>(&to_hex(&id)), Some(id));
        assert_eq!(from_hex::<16>(&to_hex(&[1u8; 15])), None);
        assert_eq!(from_hex::<16>(&"A5".repeat(16)), None);
    }

    proptest! {
        #[test]
        fn hex_round_trip(bytes in any::<[u8; 32]>()) {
            let h = EntryHash(bytes);
            prop_assert_eq!(h.to_hex().parse::<EntryHash>().unwrap(), h);
            let json = serde_json::to_string(&h).unwrap();
            prop_assert_eq!(serde_json::from_str::<EntryHash>(&json).unwrap(), h);
        }
    }
}
