//! What a provider's item carried beyond the fields this crate types: kept
//! beside the typed item so that the item is written back out as it was
//! given, JSON-equal, whatever fields its provider added.
//!
//! A reader types what it understands and renders that back in its wire
//! form (the *canonical* form). Whatever the given item differs in is kept
//! as a [`Extra`]: two shorthand flags of a Responses message, and a *diff*
//! that turns the canonical form into the given one. A writer renders the
//! canonical form and applies the diff. The diff is the crate's own JSON:
//!
//! | node | means |
//! |---|---|
//! | `{"val": V}` | the value is `V` |
//! | `{"set": {K: V}, "del": [K], "sub": {K: node}}` | an object: fields set (added or replaced), removed, or changed within |
//! | `{"at": [[I, node]]}` | a list of the same length: elements changed |
//!
//! Values in a diff are the given item's JSON text, as written (whitespace
//! between tokens removed), so numbers keep their spelling. A diff is only
//! ever applied to the canonical form of the item it was made for; applied
//! to anything else (a diff from a damaged but checksummed record, an item
//! the runtime changed since), whatever does not fit is skipped, never a
//! panic.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::json::JsonText;

/// The wire form an [`Extra`] was taken against.
///
/// Example: [`Extra`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireForm {
    /// The OpenAI Responses API's items.
    Responses,
    /// The Anthropic Messages API's content blocks.
    Anthropic,
}

/// A Responses message given without `"type"` (the easy input message).
pub(crate) const UNTYPED: u8 = 1;
/// A Responses message whose `content` was given as a string.
pub(crate) const TEXT_CONTENT: u8 = 2;

/// What an item carried beyond its typed fields, against one wire form:
/// empty for an item made in Rust or given in its canonical form.
///
/// A reader types what it understands of an item and renders that back in
/// its wire form (the *canonical* form). What the given item differs in is
/// kept here: two shorthand flags of a Responses message (no `type`;
/// `content` as a string), and a *diff* that turns the canonical form into
/// the given one, in the crate's own JSON: `{"val": V}` puts a value in
/// place; `{"set": {K: V}, "del": [K], "sub": {K: node}}` changes an
/// object's fields; `{"at": [[I, node]]}` changes a list's elements. A
/// writer renders the canonical form and applies the diff, so the item
/// comes back JSON-equal to what was given.
///
/// ```
/// use session_store::{Form, Item, WireForm};
/// # fn main() -> session_store::Result<()> {
/// // `namespace` came after this crate was written: kept all the same.
/// let given = r#"{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{}","namespace":"fs"}"#;
/// let item = Item::from_responses_json(given)?;
/// assert_eq!(item.extra().form(), Some(WireForm::Responses));
/// assert!(item.extra().diff().is_some_and(|d| d.as_str().contains("namespace")));
/// assert_eq!(item.to_responses_json(Form::AsStored)?, given);
/// assert!(Item::user_text("hi").extra().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Extra(Option<Box<ExtraFields>>);

/// The fields of a non-empty [`Extra`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct ExtraFields {
    pub form: WireForm,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flags: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<JsonText>,
}

fn is_zero(flags: &u8) -> bool {
    *flags == 0
}

impl Extra {
    /// Nothing beyond the typed fields.
    ///
    /// Example: [`Extra`].
    pub const NONE: Extra = Extra(None);

    /// An extra of `form`; empty when `flags` is 0 and there is no diff.
    pub(crate) fn new(form: WireForm, flags: u8, diff: Option<JsonText>) -> Extra {
        if flags == 0 && diff.is_none() {
            Extra(None)
        } else {
            Extra(Some(Box::new(ExtraFields { form, flags, diff })))
        }
    }

    /// Whether the item carried nothing beyond its typed fields.
    ///
    /// Example: [`Extra`].
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The wire form the extra was taken against; `None` when empty.
    ///
    /// Example: [`Extra`].
    pub fn form(&self) -> Option<WireForm> {
        self.0.as_ref().map(|e| e.form)
    }

    /// The diff from the canonical form to the given one, as JSON text.
    ///
    /// Example: [`Extra`].
    pub fn diff(&self) -> Option<&JsonText> {
        self.0.as_ref().and_then(|e| e.diff.as_ref())
    }

    /// The shorthand flags of a Responses message.
    pub(crate) fn flags(&self) -> u8 {
        self.0.as_ref().map_or(0, |e| e.flags)
    }

    /// The borrowed view of this extra.
    pub(crate) fn view(&self) -> ExtraView<'_> {
        match &self.0 {
            None => ExtraView::NONE,
            Some(e) => ExtraView {
                form: Some(e.form),
                flags: e.flags,
                diff: e.diff.as_ref().map(JsonText::as_str),
            },
        }
    }
}

/// An [`Extra`] borrowed from a runtime item or a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExtraView<'a> {
    pub form: Option<WireForm>,
    pub flags: u8,
    pub diff: Option<&'a str>,
}

impl<'a> ExtraView<'a> {
    pub const NONE: ExtraView<'static> = ExtraView {
        form: None,
        flags: 0,
        diff: None,
    };

    /// The flags, if the extra was taken against `form`.
    pub fn flags_for(&self, form: WireForm) -> u8 {
        if self.form == Some(form) {
            self.flags
        } else {
            0
        }
    }

    /// The diff, if the extra was taken against `form`.
    pub fn diff_for(&self, form: WireForm) -> Option<&'a str> {
        self.diff.filter(|_| self.form == Some(form))
    }
}

/// The diff that turns `canonical` into `given` (JSON text): `Ok(None)`
/// when they are JSON-equal. Fails when either is not JSON (which a caller
/// has ruled out) or when the diff would nest deeper than a [`JsonText`]
/// may; the caller then keeps the item as given instead.
pub(crate) fn diff(canonical: &Value, given: &str) -> crate::Result<Option<JsonText>> {
    let not_json = |e: serde_json::Error| crate::Error::invalid(format!("not valid JSON: {e}"));
    let given_value: Value = serde_json::from_str(given).map_err(not_json)?;
    if *canonical == given_value {
        return Ok(None);
    }
    let raw: &RawValue = serde_json::from_str(given).map_err(not_json)?;
    let mut out = String::new();
    let Some(node) = node(canonical, &given_value, raw) else {
        return Ok(None);
    };
    match node {
        Node::Val(raw) => {
            out.push_str("{\"val\":");
            push_compact(raw, &mut out);
            out.push('}');
        }
        Node::Text(text) => out.push_str(&text),
    }
    JsonText::compact(out).map(Some)
}

/// A diff node as text, or a whole value to put in place.
enum Node<'a> {
    Val(&'a RawValue),
    Text(String),
}

fn node<'a>(canonical: &Value, given: &Value, raw: &'a RawValue) -> Option<Node<'a>> {
    if canonical == given {
        return None;
    }
    match (canonical, given) {
        (Value::Object(c), Value::Object(g)) => {
            let fields: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get()).ok()?;
            let mut set = String::new();
            let mut sub = String::new();
            for (key, raw) in &fields {
                let given = &g[key.as_str()];
                let (out, value) = match c.get(key) {
                    None => (&mut set, Node::Val(raw)),
                    Some(canonical) => match node(canonical, given, raw) {
                        None => continue,
                        Some(Node::Val(raw)) => (&mut set, Node::Val(raw)),
                        Some(text) => (&mut sub, text),
                    },
                };
                out.push(if out.is_empty() { '{' } else { ',' });
                push_key(key, out);
                match value {
                    Node::Val(raw) => push_compact(raw, out),
                    Node::Text(text) => out.push_str(&text),
                }
            }
            let del: Vec<&String> = c.keys().filter(|k| !g.contains_key(*k)).collect();
            let mut out = String::from("{");
            for (name, body) in [("set", set), ("sub", sub)] {
                if !body.is_empty() {
                    if out.len() > 1 {
                        out.push(',');
                    }
                    out.push_str(&format!("\"{name}\":{body}}}"));
                }
            }
            if !del.is_empty() {
                if out.len() > 1 {
                    out.push(',');
                }
                out.push_str("\"del\":");
                out.push_str(&serde_json::to_string(&del).ok()?);
            }
            out.push('}');
            Some(Node::Text(out))
        }
        (Value::Array(c), Value::Array(g)) if c.len() == g.len() => {
            let elements: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
            let mut out = String::from("{\"at\":[");
            let mut first = true;
            for (i, ((c, g), raw)) in c.iter().zip(g).zip(elements).enumerate() {
                let Some(n) = node(c, g, raw) else { continue };
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&format!("[{i},"));
                match n {
                    Node::Val(raw) => {
                        out.push_str("{\"val\":");
                        push_compact(raw, &mut out);
                        out.push('}');
                    }
                    Node::Text(text) => out.push_str(&text),
                }
                out.push(']');
            }
            out.push_str("]}");
            Some(Node::Text(out))
        }
        _ => Some(Node::Val(raw)),
    }
}

fn push_key(key: &str, out: &mut String) {
    // A string always serializes.
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
}

/// Appends JSON text with the whitespace between its tokens removed.
fn push_compact(raw: &RawValue, out: &mut String) {
    match JsonText::parse(raw.get()) {
        Ok(text) => out.push_str(text.as_str()),
        Err(_) => out.push_str(raw.get()),
    }
}

/// `canonical` (JSON text) with `diff` applied, and the top-level fields
/// `drop` removed when it is an object. Parts of the diff that do not fit
/// the value are skipped.
pub(crate) fn apply(canonical: &str, diff: Option<&str>, drop: &[&str]) -> String {
    let mut tree = Tree::Raw(canonical.to_owned());
    if let Some(diff) = diff.and_then(|d| serde_json::from_str::<&RawValue>(d).ok()) {
        tree = apply_node(tree, diff);
    }
    if !drop.is_empty() {
        tree = match tree.into_fields() {
            Ok(mut fields) => {
                fields.retain(|(k, _)| !drop.contains(&k.as_str()));
                Tree::Obj(fields)
            }
            Err(tree) => tree,
        };
    }
    let mut out = String::with_capacity(canonical.len() + 32);
    tree.write(&mut out);
    out
}

/// A JSON value being patched: raw text, or a container opened up because
/// the diff reaches into it.
enum Tree {
    Raw(String),
    Obj(Vec<(String, Tree)>),
    List(Vec<Tree>),
}

impl Tree {
    /// The fields of an object, or the value back if it is not one.
    fn into_fields(self) -> Result<Vec<(String, Tree)>, Tree> {
        match self {
            Tree::Raw(text) => match serde_json::from_str::<Ordered<'_>>(&text) {
                Ok(Ordered(fields)) => Ok(fields
                    .into_iter()
                    .map(|(k, v)| (k, Tree::Raw(v.get().to_owned())))
                    .collect()),
                Err(_) => Err(Tree::Raw(text)),
            },
            Tree::Obj(fields) => Ok(fields),
            list @ Tree::List(_) => Err(list),
        }
    }

    /// The elements of a list, or the value back if it is not one.
    fn into_elements(self) -> Result<Vec<Tree>, Tree> {
        match self {
            Tree::Raw(text) => match serde_json::from_str::<Vec<&RawValue>>(&text) {
                Ok(elements) => Ok(elements
                    .into_iter()
                    .map(|v| Tree::Raw(v.get().to_owned()))
                    .collect()),
                Err(_) => Err(Tree::Raw(text)),
            },
            Tree::List(items) => Ok(items),
            obj @ Tree::Obj(_) => Err(obj),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Tree::Raw(text) => out.push_str(text),
            Tree::Obj(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push_key(key, out);
                    value.write(out);
                }
                out.push('}');
            }
            Tree::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
        }
    }
}

/// The fields of one diff node, raw.
#[derive(Deserialize)]
struct DiffNode<'a> {
    #[serde(borrow, default)]
    val: Option<&'a RawValue>,
    #[serde(borrow, default)]
    set: Option<Ordered<'a>>,
    #[serde(default)]
    del: Option<Vec<String>>,
    #[serde(borrow, default)]
    sub: Option<Ordered<'a>>,
    #[serde(borrow, default)]
    at: Option<Vec<(usize, &'a RawValue)>>,
}

fn apply_node(tree: Tree, node: &RawValue) -> Tree {
    let Ok(node) = serde_json::from_str::<DiffNode<'_>>(node.get()) else {
        return tree;
    };
    if let Some(val) = node.val {
        return Tree::Raw(val.get().to_owned());
    }
    if let Some(at) = node.at {
        let mut items = match tree.into_elements() {
            Ok(items) => items,
            Err(tree) => return tree,
        };
        for (i, sub) in at {
            if let Some(slot) = items.get_mut(i) {
                let old = std::mem::replace(slot, Tree::Raw(String::new()));
                *slot = apply_node(old, sub);
            }
        }
        return Tree::List(items);
    }
    if node.set.is_none() && node.sub.is_none() && node.del.is_none() {
        return tree;
    }
    let mut fields = match tree.into_fields() {
        Ok(fields) => fields,
        Err(tree) => return tree,
    };
    if let Some(del) = node.del {
        fields.retain(|(k, _)| !del.contains(k));
    }
    for (key, sub) in node.sub.map(|o| o.0).unwrap_or_default() {
        if let Some((_, slot)) = fields.iter_mut().find(|(k, _)| *k == key) {
            let old = std::mem::replace(slot, Tree::Raw(String::new()));
            *slot = apply_node(old, sub);
        }
    }
    for (key, value) in node.set.map(|o| o.0).unwrap_or_default() {
        let value = Tree::Raw(value.get().to_owned());
        match fields.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot = value,
            None => fields.push((key, value)),
        }
    }
    Tree::Obj(fields)
}

/// A JSON object's fields, raw, in the order written (a later duplicate
/// key replaces the earlier, as JSON readers do).
struct Ordered<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Ordered<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Ordered<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Ordered<'a>, M::Error> {
                let mut fields: Vec<(String, &'a RawValue)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, &'a RawValue>()? {
                    match fields.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, slot)) => *slot = value,
                        None => fields.push((key, value)),
                    }
                }
                Ok(Ordered(fields))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn equal(a: &str, b: &str) -> bool {
        serde_json::from_str::<Value>(a).unwrap() == serde_json::from_str::<Value>(b).unwrap()
    }

    #[test]
    fn a_diff_applied_gives_the_given_value() {
        let cases = [
            (r#"{"a":1}"#, r#"{"a":1}"#),
            (r#"{"a":1}"#, r#"{"b":1}"#),
            (
                r#"{"a":1,"b":[1,2]}"#,
                r#"{"a":2,"b":[1,3],"c":{"d":null}}"#,
            ),
            (
                r#"{"content":[{"type":"input_text","text":"x"}]}"#,
                r#"{"content":[{"type":"input_text","text":"x","prompt_cache_breakpoint":{}}]}"#,
            ),
            (r#"{"a":[1,2]}"#, r#"{"a":[1]}"#),
            (r#"[{"t":1},{"t":2}]"#, r#"[{"t":1},{"t":2,"u":3}]"#),
            (r#"{"a":{"b":{"c":1}}}"#, r#"{"a":{"b":{"c":1.0}}}"#),
            (r#"{"a":1}"#, r#"{"a":123456789012345678901234567890}"#),
            (r#"{"a":"x"}"#, r#"{"a":"x","a":"y"}"#),
        ];
        for (canonical, given) in cases {
            let d = diff(&serde_json::from_str(canonical).unwrap(), given).unwrap();
            let out = apply(canonical, d.as_ref().map(JsonText::as_str), &[]);
            assert!(
                equal(&out, given),
                "{canonical} -> {given}: {d:?} gave {out}"
            );
            if given.contains("1234567890123") {
                assert!(out.contains("123456789012345678901234567890"), "{out}");
            }
        }
        assert_eq!(diff(&json!({"a": 1}), r#"{ "a" : 1 }"#).unwrap(), None);
    }

    #[test]
    fn a_diff_that_does_not_fit_is_skipped() {
        for diff in [
            r#"{"at":[[5,{"val":1}]]}"#,
            r#"{"sub":{"missing":{"val":1}}}"#,
            r#"{"set":7}"#,
            r#"[]"#,
            r#"{"at":[[0,{"set":{"x":1}}]]}"#,
        ] {
            let out = apply(r#"{"a":[1]}"#, Some(diff), &[]);
            serde_json::from_str::<Value>(&out).unwrap();
        }
    }

    #[test]
    fn drop_removes_top_level_fields() {
        let out = apply(
            r#"{"id":"x","type":"m","status":"s"}"#,
            None,
            &["id", "status"],
        );
        assert_eq!(out, r#"{"type":"m"}"#);
    }
}
