//! A written item before it becomes text or host objects. The provider wire
//! forms are written once, into a [`JsonSink`]: a builder of JSON values of
//! some kind. The crate's own sink builds a [`JsonTree`] that borrows the
//! item's strings, rendered as JSON text here; a binding implements the
//! trait to build its host language's objects as the item is walked (the
//! Python package makes its dicts this way, with no tree and no JSON step
//! between).

use std::borrow::Cow;
use std::marker::PhantomData;

use crate::error::Error;

/// Builds the JSON values of a wire form as a writer walks an item: leaves
/// first, then the lists and objects that hold them, in the order they
/// appear.
///
/// Strings borrowed for `'a` (an item's, or a record's in a mapped log) may
/// be kept in the values, as [`JsonTree`] keeps them.
///
/// Example: [`responses::write_history`](crate::responses::write_history).
pub trait JsonSink<'a> {
    /// A finished value.
    type Value;
    /// An object being filled.
    type Obj;
    /// What building can fail with. It holds the crate's [`Error`] too: an
    /// item with no form in the wire fails midway, naming its field.
    type Error: From<Error>;

    /// A string.
    fn str(&mut self, s: &'a str) -> Result<Self::Value, Self::Error>;
    /// A string from a fixed vocabulary: an object's `type`, a message's
    /// `role`. A sink may make one value for each and share it.
    fn tag(&mut self, tag: &'static str) -> Result<Self::Value, Self::Error>;
    /// A boolean.
    fn bool(&mut self, b: bool) -> Result<Self::Value, Self::Error>;
    /// JSON text kept raw (an item's stored JSON, such as annotations or an
    /// item this crate has no type for): valid JSON on one line.
    fn json(&mut self, text: Cow<'a, str>) -> Result<Self::Value, Self::Error>;
    /// A list of values, in order.
    fn list(&mut self, items: Vec<Self::Value>) -> Result<Self::Value, Self::Error>;
    /// An object with no fields yet.
    fn obj(&mut self) -> Result<Self::Obj, Self::Error>;
    /// Adds a field to `obj`, after those already there.
    fn field(
        &mut self,
        obj: &mut Self::Obj,
        key: &'static str,
        value: Self::Value,
    ) -> Result<(), Self::Error>;
    /// The finished object.
    fn end(&mut self, obj: Self::Obj) -> Result<Self::Value, Self::Error>;
}

/// One JSON value of an item's wire form.
///
/// Example: [`responses::write_history`](crate::responses::write_history).
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
    ///
    /// Example: [`responses::write_history`](crate::responses::write_history).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// Appends the value as JSON text to `out`.
    ///
    /// Example: [`responses::write_history`](crate::responses::write_history).
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

/// The sink that builds a [`JsonTree`]: give it to
/// [`responses::write_history`](crate::responses::write_history) to write
/// items read in place as JSON.
///
/// Example: [`responses::write_history`](crate::responses::write_history).
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeSink;

impl<'a> JsonSink<'a> for TreeSink {
    type Value = JsonTree<'a>;
    type Obj = Vec<(&'static str, JsonTree<'a>)>;
    type Error = Error;

    fn str(&mut self, s: &'a str) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::Str(s))
    }

    fn tag(&mut self, tag: &'static str) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::Tag(tag))
    }

    fn bool(&mut self, b: bool) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::Bool(b))
    }

    fn json(&mut self, text: Cow<'a, str>) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::Json(text))
    }

    fn list(&mut self, items: Vec<JsonTree<'a>>) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::List(items))
    }

    fn obj(&mut self) -> Result<Self::Obj, Error> {
        Ok(Vec::with_capacity(4))
    }

    fn field(
        &mut self,
        obj: &mut Self::Obj,
        key: &'static str,
        value: JsonTree<'a>,
    ) -> Result<(), Error> {
        obj.push((key, value));
        Ok(())
    }

    fn end(&mut self, obj: Self::Obj) -> Result<JsonTree<'a>, Error> {
        Ok(JsonTree::Obj(obj))
    }
}

/// The sink that builds a `serde_json::Value`: what a reader compares
/// with the item it was given.
pub(crate) struct ValueSink;

impl<'a> JsonSink<'a> for ValueSink {
    type Value = serde_json::Value;
    type Obj = serde_json::Map<String, serde_json::Value>;
    type Error = Error;

    fn str(&mut self, s: &'a str) -> Result<serde_json::Value, Error> {
        Ok(serde_json::Value::String(s.to_owned()))
    }

    fn tag(&mut self, tag: &'static str) -> Result<serde_json::Value, Error> {
        Ok(serde_json::Value::String(tag.to_owned()))
    }

    fn bool(&mut self, b: bool) -> Result<serde_json::Value, Error> {
        Ok(serde_json::Value::Bool(b))
    }

    fn json(&mut self, text: Cow<'a, str>) -> Result<serde_json::Value, Error> {
        serde_json::from_str(&text).map_err(|e| Error::invalid(format!("not valid JSON: {e}")))
    }

    fn list(&mut self, items: Vec<serde_json::Value>) -> Result<serde_json::Value, Error> {
        Ok(serde_json::Value::Array(items))
    }

    fn obj(&mut self) -> Result<Self::Obj, Error> {
        Ok(serde_json::Map::new())
    }

    fn field(
        &mut self,
        obj: &mut Self::Obj,
        key: &'static str,
        value: serde_json::Value,
    ) -> Result<(), Error> {
        obj.insert(key.to_owned(), value);
        Ok(())
    }

    fn end(&mut self, obj: Self::Obj) -> Result<serde_json::Value, Error> {
        Ok(serde_json::Value::Object(obj))
    }
}

/// A JSON object being written into a sink, its fields in the order given.
/// The first failure is kept and returned by [`Obj::finish`]; the fields
/// after it are not built.
pub(crate) struct Obj<'s, 'a, S: JsonSink<'a>> {
    sink: &'s mut S,
    obj: Result<S::Obj, S::Error>,
    strings: PhantomData<&'a str>,
}

impl<'s, 'a, S: JsonSink<'a>> Obj<'s, 'a, S> {
    /// An object with no fields yet.
    pub fn empty(sink: &'s mut S) -> Self {
        let obj = sink.obj();
        Obj {
            sink,
            obj,
            strings: PhantomData,
        }
    }

    /// An object whose first field is `"type": kind`.
    pub fn typed(sink: &'s mut S, kind: &'static str) -> Self {
        Obj::empty(sink).tag("type", kind)
    }

    /// A field whose value `value` builds.
    pub fn with(
        mut self,
        key: &'static str,
        value: impl FnOnce(&mut S) -> Result<S::Value, S::Error>,
    ) -> Self {
        if let Ok(obj) = &mut self.obj {
            if let Err(e) = value(self.sink).and_then(|v| self.sink.field(obj, key, v)) {
                self.obj = Err(e);
            }
        }
        self
    }

    /// A string field.
    pub fn str(self, key: &'static str, value: &'a str) -> Self {
        self.with(key, |s| s.str(value))
    }

    /// A field whose value comes from a fixed vocabulary (a type, a role).
    pub fn tag(self, key: &'static str, value: &'static str) -> Self {
        self.with(key, |s| s.tag(value))
    }

    /// A string field, if there is a value.
    pub fn opt_str(self, key: &'static str, value: Option<&'a str>) -> Self {
        match value {
            Some(v) => self.str(key, v),
            None => self,
        }
    }

    /// A field whose value is JSON text, embedded as it is.
    pub fn raw(self, key: &'static str, json: impl Into<Cow<'a, str>>) -> Self {
        self.with(key, |s| s.json(json.into()))
    }

    /// A JSON field, if there is a value.
    pub fn opt_json(self, key: &'static str, json: Option<&'a str>) -> Self {
        match json {
            Some(j) => self.raw(key, j),
            None => self,
        }
    }

    /// A boolean field, if there is a value.
    pub fn opt_bool(self, key: &'static str, value: Option<bool>) -> Self {
        match value {
            Some(v) => self.with(key, |s| s.bool(v)),
            None => self,
        }
    }

    /// The object, or the first failure met while building it.
    pub fn finish(self) -> Result<S::Value, S::Error> {
        self.sink.end(self.obj?)
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

    /// A tree sink that refuses one string, and counts the strings it was
    /// asked for.
    struct Refusing {
        refuse: &'static str,
        asked: Vec<String>,
    }

    impl<'a> JsonSink<'a> for Refusing {
        type Value = JsonTree<'a>;
        type Obj = Vec<(&'static str, JsonTree<'a>)>;
        type Error = Error;

        fn str(&mut self, s: &'a str) -> Result<JsonTree<'a>, Error> {
            self.asked.push(s.to_owned());
            if s == self.refuse {
                return Err(Error::invalid(format!("refused {s:?}")));
            }
            TreeSink.str(s)
        }
        fn tag(&mut self, tag: &'static str) -> Result<JsonTree<'a>, Error> {
            TreeSink.tag(tag)
        }
        fn bool(&mut self, b: bool) -> Result<JsonTree<'a>, Error> {
            TreeSink.bool(b)
        }
        fn json(&mut self, text: Cow<'a, str>) -> Result<JsonTree<'a>, Error> {
            TreeSink.json(text)
        }
        fn list(&mut self, items: Vec<JsonTree<'a>>) -> Result<JsonTree<'a>, Error> {
            TreeSink.list(items)
        }
        fn obj(&mut self) -> Result<Self::Obj, Error> {
            TreeSink.obj()
        }
        fn field(
            &mut self,
            obj: &mut Self::Obj,
            key: &'static str,
            value: JsonTree<'a>,
        ) -> Result<(), Error> {
            TreeSink.field(obj, key, value)
        }
        fn end(&mut self, obj: Self::Obj) -> Result<JsonTree<'a>, Error> {
            TreeSink.end(obj)
        }
    }

    /// A sink's failure ends the object: it is what `finish` returns, and
    /// no field after it is built.
    #[test]
    fn a_sink_failure_stops_the_object_and_is_returned() {
        let mut sink = Refusing {
            refuse: "b",
            asked: Vec::new(),
        };
        let got = Obj::typed(&mut sink, "t")
            .str("a", "a")
            .str("b", "b")
            .with("c", |s| s.str("c"))
            .opt_str("d", Some("d"))
            .finish();
        assert!(
            matches!(&got, Err(Error::InvalidInput { what }) if what.contains("\"b\"")),
            "{got:?}"
        );
        assert_eq!(sink.asked, ["a", "b"]);
        let mut sink = Refusing {
            refuse: "none",
            asked: Vec::new(),
        };
        let got = Obj::typed(&mut sink, "t")
            .str("a", "a")
            .with("c", |s| s.str("c"))
            .opt_str("d", None)
            .finish()
            .unwrap();
        assert_eq!(got.to_json(), r#"{"type":"t","a":"a","c":"c"}"#);
    }
}
