//! Guards the reads in place behind the Python package's `get_items()`: the
//! items `with_history_tail` hands out, borrowed from the log's records,
//! and the Responses form written from them into a `JsonSink`, must be
//! exactly `history_tail`'s items and `history_to_json`'s form, for every
//! item type, across removals, compactions and forks, and an item with no
//! Responses form must fail the write naming its place. (A damaged record
//! fails the read before anything is handed out: `history_tail.rs`.)

mod common;

use std::borrow::Cow;

use serde_json::{Map, Value};
use session_store::{
    responses, Error, Form, Item, ItemView, JsonSink, RequestConfig, SessionId, Store,
};

/// Builds `serde_json` values: a sink from outside the crate, as a
/// binding's is.
struct ValueSink;

impl<'a> JsonSink<'a> for ValueSink {
    type Value = Value;
    type Obj = Map<String, Value>;
    type Error = Error;

    fn str(&mut self, s: &'a str) -> Result<Value, Error> {
        Ok(Value::String(s.to_owned()))
    }

    fn tag(&mut self, tag: &'static str) -> Result<Value, Error> {
        Ok(Value::String(tag.to_owned()))
    }

    fn bool(&mut self, b: bool) -> Result<Value, Error> {
        Ok(Value::Bool(b))
    }

    fn json(&mut self, text: Cow<'a, str>) -> Result<Value, Error> {
        Ok(serde_json::from_str(&text).expect("raw JSON from the writer is valid"))
    }

    fn list(&mut self, items: Vec<Value>) -> Result<Value, Error> {
        Ok(Value::Array(items))
    }

    fn obj(&mut self) -> Result<Map<String, Value>, Error> {
        Ok(Map::new())
    }

    fn field(
        &mut self,
        obj: &mut Map<String, Value>,
        key: &'static str,
        value: Value,
    ) -> Result<(), Error> {
        assert!(obj.insert(key.to_owned(), value).is_none(), "{key} twice");
        Ok(())
    }

    fn end(&mut self, obj: Map<String, Value>) -> Result<Value, Error> {
        Ok(Value::Object(obj))
    }
}

/// A tail read in place: its items, owned, and their Responses form
/// written through the sink (or the writer's failure).
type InPlace = (Vec<Item>, Result<Vec<Value>, Error>);

/// The tail read in place.
fn read_in_place(store: &Store, id: SessionId, limit: Option<usize>) -> Result<InPlace, Error> {
    store.with_history_tail(id, limit, |tail| {
        let items = tail.items.iter().map(ItemView::to_item).collect();
        (
            items,
            responses::write_history(tail.items, Form::AsStored, &mut ValueSink),
        )
    })
}

/// What the Responses form of `items` must be: `history_to_json`'s.
fn expected(items: &[Item]) -> Vec<Value> {
    serde_json::from_str(&responses::history_to_json(items, Form::AsStored).unwrap()).unwrap()
}

/// Every item variant and content part that has a Responses form, stored
/// and read back in place, in records of several entries and from a
/// reopened store.
#[test]
fn every_item_type_reads_in_place_as_written() {
    let items: Vec<Item> = common::every_item()
        .into_iter()
        .filter(|item| item.to_responses_json(Form::AsStored).is_ok())
        .collect();
    assert!(items.len() > 10, "{} items", items.len());
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &items)
        .unwrap();
    // As the log keeps them: without the ids and statuses it drops.
    let history = store.restore(id).unwrap().history;
    assert_eq!(history.len(), items.len());
    for reopened in [false, true] {
        for limit in [None, Some(1), Some(3), Some(history.len()), Some(1000)] {
            let (items, values) = read_in_place(&store, id, limit).unwrap();
            let want = &history[limit.map_or(0, |l| history.len().saturating_sub(l))..];
            assert_eq!(items, want, "limit {limit:?}, reopened {reopened}");
            assert_eq!(values.unwrap(), expected(want), "limit {limit:?}");
        }
        store.close().unwrap();
    }
}

/// Removals (the SDK's `pop_item`) and compactions (its `clear_session`)
/// hide in place what they hide from `restore`, and a fork by reference,
/// whose history starts in its parent's log, reads the same.
#[test]
fn removals_compactions_and_forks_read_in_place_as_restore() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("u0")])
        .unwrap();
    let mut n = 0;
    let mut turn = |head, store: &Store| {
        n += 1;
        let items = [
            Item::user_text(format!("u{n}")),
            Item::assistant_text(format!("a{n}")),
        ];
        store.append(id, head, &items).unwrap()
    };
    let check = |store: &Store, id: SessionId, what: &str| {
        let history = store.restore(id).unwrap().history;
        for limit in [None, Some(0), Some(1), Some(2), Some(5)] {
            let (items, values) = read_in_place(store, id, limit).unwrap();
            let want = &history[limit.map_or(0, |l| history.len().saturating_sub(l))..];
            assert_eq!(items, want, "{what}, limit {limit:?}");
            assert_eq!(values.unwrap(), expected(want), "{what}, limit {limit:?}");
        }
        history
    };
    for _ in 0..4 {
        head = turn(head, &store);
    }
    assert_eq!(check(&store, id, "appends").len(), 9);
    head = store.remove_last(id, head, 1).unwrap();
    let history = check(&store, id, "a pop");
    assert_eq!(history.last(), Some(&Item::user_text("u4")));
    head = store.remove_last(id, head, 3).unwrap();
    assert_eq!(check(&store, id, "pops").len(), 5);
    head = store
        .compact(id, head, &[Item::user_text("summary")])
        .unwrap();
    head = turn(head, &store);
    let history = check(&store, id, "a compaction");
    assert_eq!(history[0], Item::user_text("summary"));
    assert_eq!(history.len(), 3);
    head = store.compact(id, head, &[]).unwrap();
    assert!(check(&store, id, "a clear").is_empty());
    head = turn(head, &store);
    let (fork, fork_head) = store.fork_at(id, head).unwrap();
    assert!(store
        .snapshot(fork)
        .unwrap()
        .restore_link()
        .unwrap()
        .is_some());
    assert_eq!(check(&store, fork, "a fork").len(), 2);
    store.remove_last(fork, fork_head, 1).unwrap();
    assert_eq!(check(&store, fork, "a pop in a fork").len(), 1);
}

/// An item the Responses API has no form for fails the write, naming its
/// index in the tail, not the whole history.
#[test]
fn an_item_with_no_responses_form_fails_naming_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let thinking = Item::Thinking {
        extra: Default::default(),
        thinking: "hmm".into(),
        signature: None,
    };
    let history = [Item::user_text("a"), thinking, Item::assistant_text("b")];
    let (id, _) = store
        .create_session(None, RequestConfig::default(), &history)
        .unwrap();
    let (_, values) = read_in_place(&store, id, Some(1)).unwrap();
    assert_eq!(values.unwrap(), expected(&history[2..]));
    for (limit, index) in [(None, 1), (Some(2), 0)] {
        let (_, values) = read_in_place(&store, id, limit).unwrap();
        match values.unwrap_err() {
            Error::ItemForm {
                index: at, field, ..
            } => {
                assert_eq!(
                    (at, field.as_str()),
                    (Some(index), "type"),
                    "limit {limit:?}"
                )
            }
            other => panic!("limit {limit:?}: {other}"),
        }
    }
}
