//! The JSON objects of the provider wire forms: strict reading, where every
//! field is taken by name and whatever is left over is an error that names it,
//! and writing, where JSON kept raw is embedded exactly as stored.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::json::JsonText;

/// Which item of which API is being read or written, for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub api: &'static str,
    /// The item's index in a history; `None` for an item read or written alone.
    pub index: Option<usize>,
}

impl Place {
    /// An error about `field` of this item.
    pub fn error(&self, field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::ItemForm {
            api: self.api,
            index: self.index,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One JSON object being read: its fields, raw, by name.
pub(crate) struct Fields<'a> {
    place: Place,
    /// Where the object sits inside the item (`""`, `"content[2]."`).
    path: String,
    map: BTreeMap<String, &'a RawValue>,
}

impl<'a> Fields<'a> {
    /// Reads `raw`, which must be a JSON object, found at `path` in the item.
    pub fn new(raw: &'a str, place: Place, path: String) -> Result<Fields<'a>> {
        let at = if path.is_empty() {
            "type".to_string()
        } else {
            path.trim_end_matches('.').to_string()
        };
        let map = serde_json::from_str(raw)
            .map_err(|e| place.error(at, format!("not a JSON object: {e}")))?;
        Ok(Fields { place, path, map })
    }

    /// The object found in field `name` of this one, or at `name[i]`.
    pub fn nested(&self, raw: &'a RawValue, name: &str) -> Result<Fields<'a>> {
        Fields::new(raw.get(), self.place, format!("{}{name}.", self.path))
    }

    /// An error about field `name` of this object.
    pub fn error(&self, name: &str, message: impl Into<String>) -> Error {
        self.place.error(format!("{}{name}", self.path), message)
    }

    /// Whether field `name` is there (and not yet taken).
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Takes field `name`, raw; a JSON `null` counts as absent.
    pub fn raw(&mut self, name: &str) -> Option<&'a RawValue> {
        self.map.remove(name).filter(|raw| raw.get() != "null")
    }

    /// Takes field `name`, raw, which must be there and not `null`.
    pub fn required(&mut self, name: &str) -> Result<&'a RawValue> {
        self.raw(name).ok_or_else(|| self.error(name, "missing"))
    }

    /// Takes field `name` as a `T`, if present and not `null`.
    pub fn optional<T: Deserialize<'a>>(&mut self, name: &str, what: &str) -> Result<Option<T>> {
        self.raw(name)
            .map(|raw| {
                serde_json::from_str(raw.get())
                    .map_err(|_| self.error(name, format!("expected {what}")))
            })
            .transpose()
    }

    /// Takes field `name`, which must be a string.
    pub fn string(&mut self, name: &str) -> Result<String> {
        self.optional(name, "a string")?
            .ok_or_else(|| self.error(name, "missing"))
    }

    /// Takes field `name` if present, which must then be a string.
    pub fn opt_string(&mut self, name: &str) -> Result<Option<String>> {
        self.optional(name, "a string")
    }

    /// Takes field `name` if present, which must then be a list.
    pub fn list(&mut self, name: &str) -> Result<Option<Vec<&'a RawValue>>> {
        self.optional(name, "a list")
    }

    /// Takes field `name` if present as JSON kept for re-sending.
    pub fn json(&mut self, name: &str) -> Result<Option<JsonText>> {
        self.raw(name)
            .map(|raw| JsonText::parse(raw.get()).map_err(|e| self.error(name, e.to_string())))
            .transpose()
    }

    /// The elements of `raw`, the value of field `name`, which holds either a
    /// string (handled by the caller) or a list.
    pub fn elements(&self, raw: &'a RawValue, name: &str) -> Result<Vec<&'a RawValue>> {
        serde_json::from_str(raw.get()).map_err(|_| self.error(name, "expected a string or a list"))
    }

    /// Fails on the first field nobody took: keeping the item without it
    /// would lose it.
    pub fn finish(self) -> Result<()> {
        match self.map.keys().next() {
            Some(name) => Err(self.error(name, "unknown field; it would be lost")),
            None => Ok(()),
        }
    }
}

/// The elements of a history given as a JSON list, raw, each with its place.
pub(crate) fn history_list<'a>(
    json: &'a str,
    api: &'static str,
) -> Result<Vec<(&'a RawValue, Place)>> {
    let items: Vec<&RawValue> = serde_json::from_str(json).map_err(|e| {
        Place { api, index: None }.error(String::new(), format!("not a JSON list: {e}"))
    })?;
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            let index = Some(index);
            (raw, Place { api, index })
        })
        .collect())
}

/// The value of `raw`, if it is a JSON string.
pub(crate) fn as_string(raw: &RawValue) -> Option<String> {
    serde_json::from_str(raw.get()).ok()
}

/// JSON text to embed on one line: kept byte for byte unless it spans lines,
/// when the whitespace between its tokens (which is all a raw newline can be)
/// is removed. Fails if it is not JSON.
pub(crate) fn one_line(json: &str) -> std::result::Result<String, String> {
    if json.contains(['\n', '\r']) {
        JsonText::parse(json)
            .map(|j| j.as_str().to_owned())
            .map_err(|e| e.to_string())
    } else {
        serde_json::from_str::<&RawValue>(json)
            .map(|_| json.to_owned())
            .map_err(|e| format!("not valid JSON: {e}"))
    }
}
