//! A written item before it becomes text: the provider wire forms are built
//! once, as a tree that borrows the item's strings, and then rendered, as
//! JSON text here or as a host language's objects by a binding (the Python
//! package builds its dicts from it, with no JSON step between).

use std::borrow::Cow;

/// One JSON value of an item's wire form.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonTree<'a> {
    /// A string.
    Str(&'a str),
    /// A string from a fixed vocabulary: an object's `type` or a message's
    /// `role`. It renders as `Str` does; a binding may make one host object
    /// for each and share it.
    Tag(&'static str),
    /// A boolean.
    Bool(bool),
    /// A list.
    List(Vec<JsonTree<'a>>),
    /// An object, its fields in the order written.
    Obj(Vec<(&'static str, JsonTree<'a>)>),
    /// JSON text kept raw (an item's stored JSON, such as annotations or a
    /// block this crate has no type for): valid JSON on one line, embedded
    /// as it is.
    Json(Cow<'a, str>),
}

impl JsonTree<'_> {
    /// The value as JSON text, on one line.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// Appends the value as JSON text to `out`.
    pub fn write_json(&self, out: &mut String) {
        match self {
            JsonTree::Str(s) | JsonTree::Tag(s) => write_quoted(s, out),
            JsonTree::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            JsonTree::Json(text) => out.push_str(text),
            JsonTree::List(items) => write_list(items, out),
            JsonTree::Obj(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_quoted(key, out);
                    out.push(':');
                    value.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON list of values, as text.
pub(crate) fn list_json(items: &[JsonTree<'_>]) -> String {
    let mut out = String::new();
    write_list(items, &mut out);
    out
}

fn write_list(items: &[JsonTree<'_>], out: &mut String) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        item.write_json(out);
    }
    out.push(']');
}

fn write_quoted(s: &str, out: &mut String) {
    // Serializing a `str` into memory has no failure path.
    out.push_str(&serde_json::to_string(s).expect("a string serializes to JSON"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_kind_of_value() {
        let tree = JsonTree::Obj(vec![
            ("type", JsonTree::Str("a \"b\"\n")),
            ("ok", JsonTree::Bool(false)),
            ("role", JsonTree::Tag("user")),
            (
                "list",
                JsonTree::List(vec![JsonTree::Bool(true), JsonTree::List(vec![])]),
            ),
            ("raw", JsonTree::Json(Cow::Borrowed(r#"{"x":[1,2]}"#))),
            ("empty", JsonTree::Obj(vec![])),
        ]);
        assert_eq!(
            tree.to_json(),
            r#"{"type":"a \"b\"\n","ok":false,"role":"user","list":[true,[]],"raw":{"x":[1,2]},"empty":{}}"#
        );
    }
}
