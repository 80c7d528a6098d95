//! `JsonText`: arbitrary JSON kept as compact text in the archive; a leaf
//! that the item model and the schema both use.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// Arbitrary JSON, kept as compact JSON text inside the archive and shown as
/// real JSON (never an escaped string) in the wire form.
///
/// The text is canonicalised once, on construction: whitespace outside strings
/// is removed; key order and number spelling are kept exactly, so no value is
/// ever rounded.
///
/// ```
/// use session_store::schema::JsonText;
/// # fn main() -> session_store::Result<()> {
/// // Request settings `RequestConfig` has no field for, for its `extra`.
/// let extra = JsonText::parse(r#"{ "tool_choice": "auto", "seed": 7 }"#)?;
/// assert_eq!(extra.as_str(), r#"{"tool_choice":"auto","seed":7}"#);
/// assert_eq!(extra.to_value()["seed"], 7);
/// assert!(JsonText::parse("{\"seed\": 1e400}").is_err());
/// assert_eq!(JsonText::from_value(&serde_json::json!({}))?, JsonText::empty_object());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct JsonText(pub(crate) String);

/// The deepest nesting of arrays and objects a [`JsonText`] may have. A
/// wire line holds a JSON text a few levels down (an item's part sits in a
/// history inside a `session_start`), and a line is read with serde_json's
/// limit of 128 levels: this leaves room, so that whatever is stored also
/// exports and imports back.
///
/// Example: [`JsonText`].
pub const MAX_JSON_DEPTH: usize = 100;

impl JsonText {
    /// Validates `text` as JSON that will also read back from the wire form,
    /// and keeps its compact form. Refused: invalid JSON, numbers outside
    /// the range of a JSON number as read back (`1e400`), and nesting deeper
    /// than [`MAX_JSON_DEPTH`].
    ///
    /// Example: [`JsonText`].
    pub fn parse(text: &str) -> Result<JsonText> {
        // A value, not a raw slice: that is what import reads, so a number
        // it would refuse is refused here.
        serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| Error::invalid(format!("not valid JSON: {e}")))?;
        JsonText::checked(minify(text))
    }

    /// From a JSON value; refused when nested deeper than
    /// [`MAX_JSON_DEPTH`] (a value built in memory has no depth limit, and
    /// its numbers are always finite, so depth is the one check left).
    ///
    /// Example: [`JsonText`].
    pub fn from_value(value: &serde_json::Value) -> Result<JsonText> {
        JsonText::checked(value.to_string())
    }

    fn checked(compact: String) -> Result<JsonText> {
        let depth = nesting_depth(&compact);
        if depth > MAX_JSON_DEPTH {
            return Err(Error::invalid(format!(
                "JSON nested {depth} levels deep; at most {MAX_JSON_DEPTH} can be exported and imported back"
            )));
        }
        Ok(JsonText(compact))
    }

    /// Compact JSON text this crate wrote itself, checked for depth only.
    pub(crate) fn compact(compact: String) -> Result<JsonText> {
        JsonText::checked(compact)
    }

    /// The empty object `{}`.
    ///
    /// Example: [`JsonText`].
    pub fn empty_object() -> JsonText {
        JsonText("{}".to_string())
    }

    /// The compact JSON text.
    ///
    /// Example: [`JsonText`].
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parsed into a value.
    ///
    /// Example: [`JsonText`].
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl ArchivedJsonText {
    /// The JSON text as stored.
    ///
    /// Example: [`JsonText`].
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// The deepest nesting of arrays and objects in valid JSON text.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut most) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                most = most.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

/// Drops whitespace outside string literals. The input is known-valid JSON.
fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

/// Goes through a `serde_json::Value`, because every `JsonText` sits inside an
/// internally tagged enum, which serde buffers, and a buffer cannot hand out a
/// `RawValue`. The buffer keeps the value but not its spelling (key order,
/// number form); [`crate::export::parse_line`] puts the original text back.
impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        JsonText::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// `Some` even for a JSON `null`, which is what `Some(JsonText("null"))` is
/// written as; an absent field is `None` through `#[serde(default)]`.
pub(crate) fn some_json_text<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<JsonText>, D::Error> {
    JsonText::deserialize(d).map(Some)
}
