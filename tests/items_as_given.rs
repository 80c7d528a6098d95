//! Guards the promise that the store keeps what it is given: any JSON object
//! handed over as a Responses item, and any Messages block, comes back
//! JSON-equal (ids, statuses, fields added after this code was written,
//! shorthand forms, items with no `type`), from the reader alone, through
//! the log, and through export then import; and that an item carrying extra
//! fields is still typed.

use std::io::Cursor;

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use session_store::{anthropic, responses, Form, Item, RequestConfig, Store};

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e12f64..1.0e12).prop_map(|f| json!(f)),
        "[a-z_ \\u{e9}\\n\"\\\\]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Fields a provider might add, to put beside the ones the store types.
fn extra_fields() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(
        prop_oneof![
            Just("phase".to_string()),
            Just("caller".to_string()),
            Just("namespace".to_string()),
            Just("async".to_string()),
            Just("id".to_string()),
            Just("status".to_string()),
            "x_[a-z]{1,6}",
        ],
        any_json(),
        0..3,
    )
    .prop_map(|m| m.into_iter().collect())
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 .\\n\"\\\\\\u{1F600}]{0,24}"
}

fn with_extra(mut base: Value, extra: Map<String, Value>) -> Value {
    let obj = base.as_object_mut().unwrap();
    for (k, v) in extra {
        obj.insert(k, v);
    }
    base
}

/// A content part of a message of `role`, sometimes with extra fields.
fn part(assistant: bool) -> impl Strategy<Value = Value> {
    let typed = prop_oneof![
        text().prop_map(move |t| if assistant {
            json!({"type": "output_text", "text": t, "annotations": []})
        } else {
            json!({"type": "input_text", "text": t})
        }),
        (text(), any_json()).prop_map(
            |(t, l)| json!({"type": "output_text", "text": t, "annotations": [], "logprobs": l})
        ),
        text().prop_map(|t| json!({"type": "refusal", "refusal": t})),
        text().prop_map(|t| json!({"type": "input_image", "image_url": t, "detail": "low"})),
        text().prop_map(|t| json!({"type": "input_file", "file_id": t})),
        text().prop_map(
            |t| json!({"type": "input_audio", "input_audio": {"data": t, "format": "wav"}})
        ),
        text().prop_map(|t| json!({"type": "some_part_added_later", "x": t})),
    ];
    (typed, extra_fields()).prop_map(|(p, e)| with_extra(p, e))
}

/// A Responses item of a kind the store types, in the shapes providers and
/// the Agents SDK write: with and without ids, statuses and extra fields.
fn typed_item() -> impl Strategy<Value = Value> {
    let message = (
        prop::sample::select(vec!["user", "assistant", "system", "developer"]),
        prop::bool::ANY,
        prop_oneof![
            text().prop_map(Value::String),
            prop::collection::vec(part(false), 0..3).prop_map(Value::Array),
        ],
    )
        .prop_map(|(role, typed, content)| {
            let mut m = json!({"role": role, "content": content});
            if typed {
                m["type"] = json!("message");
            }
            m
        });
    let assistant = prop::collection::vec(part(true), 1..3).prop_map(
        |c| json!({"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": c}),
    );
    let call = (text(), text(), text()).prop_map(
        |(c, n, a)| json!({"type": "function_call", "call_id": c, "name": n, "arguments": a}),
    );
    let output = (
        text(),
        prop_oneof![
            text().prop_map(Value::String),
            prop::collection::vec(part(false), 0..3).prop_map(Value::Array)
        ],
    )
        .prop_map(|(c, o)| json!({"type": "function_call_output", "call_id": c, "output": o}));
    let custom = (text(), text()).prop_map(
        |(c, i)| json!({"type": "custom_tool_call", "call_id": c, "name": "apply_patch", "input": i}),
    );
    let custom_output = (text(), text())
        .prop_map(|(c, o)| json!({"type": "custom_tool_call_output", "call_id": c, "output": o}));
    let reasoning = (
        prop::collection::vec(text(), 0..3),
        prop::option::of(prop::collection::vec(text(), 0..3)),
        prop::option::of(text()),
    )
        .prop_map(|(summary, content, enc)| {
            let mut r = json!({
                "type": "reasoning",
                "summary": summary.iter().map(|t| json!({"type": "summary_text", "text": t})).collect::<Vec<_>>(),
            });
            if let Some(c) = content {
                r["content"] = c
                    .iter()
                    .map(|t| json!({"type": "reasoning_text", "text": t}))
                    .collect();
            }
            if let Some(e) = enc {
                r["encrypted_content"] = json!(e);
            }
            r
        });
    let state = (
        prop::option::of("[a-z]{2}_[0-9a-f]{4}"),
        prop::option::of(prop::sample::select(vec![
            "completed",
            "in_progress",
            "incomplete",
            "searching",
        ])),
    );
    (
        prop_oneof![
            message,
            assistant,
            call,
            output,
            custom,
            custom_output,
            reasoning
        ],
        state,
        extra_fields(),
    )
        .prop_map(|(mut item, (id, status), extra)| {
            if let Some(id) = id {
                item["id"] = json!(id);
            }
            if let Some(status) = status {
                item["status"] = json!(status);
            }
            with_extra(item, extra)
        })
}

/// Any JSON object, or a typed item with one field made odd (removed, set
/// to `null` or to another type): whatever it is, it must come back.
fn any_item() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => typed_item(),
        1 => prop::collection::btree_map("[a-z_]{1,8}", any_json(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => (typed_item(), any::<prop::sample::Index>(), any_json()).prop_map(|(mut item, i, v)| {
            let obj = item.as_object_mut().unwrap();
            let keys: Vec<String> = obj.keys().cloned().collect();
            let key = i.get(&keys).clone();
            obj.insert(key, v);
            item
        }),
    ]
}

fn as_given(item: &Value) -> String {
    serde_json::to_string(item).unwrap()
}

fn values(texts: &[String]) -> Vec<Value> {
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The reader and writer alone: an item written as stored is the item
    /// given; for re-send, the same less a typed item's `id` and `status`.
    #[test]
    fn any_object_comes_back_from_the_reader(given in any_item()) {
        let item = Item::from_responses_json(&as_given(&given)).unwrap();
        let back: Value = serde_json::from_str(&item.to_responses_json(Form::AsStored).unwrap()).unwrap();
        prop_assert_eq!(&back, &given);
        let resend: Value = serde_json::from_str(&item.to_responses_json(Form::Resend).unwrap()).unwrap();
        let mut want = given.clone();
        if !matches!(item, Item::Opaque { .. }) {
            want.as_object_mut().unwrap().remove("id");
            want.as_object_mut().unwrap().remove("status");
        }
        prop_assert_eq!(resend, want);
    }

    /// A typed item keeps its type whatever fields a provider adds beside
    /// the typed ones.
    #[test]
    fn extra_fields_do_not_make_an_item_opaque(given in typed_item()) {
        let item = Item::from_responses_json(&as_given(&given)).unwrap();
        let opaque_part = given["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|p| p["type"] == "some_part_added_later"));
        prop_assert!(
            !matches!(item, Item::Opaque { .. }) || opaque_part,
            "{} read as {:?}", given, item
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Through the log (the save path that archives straight from the
    /// items, restore, and the read in place), and through export then
    /// import: every item comes back JSON-equal.
    #[test]
    fn any_history_comes_back_through_the_log_and_export(history in prop::collection::vec(any_item(), 1..8)) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let items: Vec<Item> = history
            .iter()
            .map(|v| Item::from_responses_json(&as_given(v)).unwrap())
            .collect();
        let (id, mut head) = store.create_session(None, RequestConfig::default(), &[]).unwrap();
        store.save_delta(id, &mut head, &items).unwrap();

        let restored = store.restore(id).unwrap().history;
        prop_assert_eq!(&restored, &items);
        let back = values(&responses::history_to_items(&restored, Form::AsStored).unwrap());
        prop_assert_eq!(&back, &history);

        let in_place = store
            .with_history_tail(id, None, |tail| {
                responses::write_history(tail.items, Form::AsStored, &mut session_store::TreeSink)
                    .map(|trees| trees.iter().map(|t| t.to_json()).collect::<Vec<_>>())
            })
            .unwrap();
        prop_assert_eq!(values(&in_place.unwrap()), history.clone());

        let mut exported = Vec::new();
        store.export(id, &mut exported).unwrap();
        let other = tempfile::tempdir().unwrap();
        let other = Store::open(other.path()).unwrap();
        let imported = other.import_from(Cursor::new(exported)).unwrap();
        prop_assert_eq!(other.head(imported).unwrap(), Some(head));
        let again = other.restore(imported).unwrap().history;
        prop_assert_eq!(values(&responses::history_to_items(&again, Form::AsStored).unwrap()), history);
    }
}

/// The Agents SDK's shapes and today's provider fields, one of each: typed,
/// and back as given.
#[test]
fn current_provider_fields_are_kept_and_typed() {
    let cases = [
        json!({"role": "user", "content": "Hello"}),
        json!({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "phase": "final_answer",
               "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]}),
        json!({"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"ttl": "5m"}},
                           {"type": "input_file", "file_id": "f", "detail": "high"}]}),
        json!({"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}", "namespace": "fs", "async": true}),
        json!({"type": "custom_tool_call", "call_id": "c", "name": "p", "input": "x", "async": false}),
        json!({"type": "function_call_output", "call_id": "c", "output": "ok", "caller": {"type": "direct"}}),
    ];
    for given in cases {
        let item = Item::from_responses_json(&as_given(&given)).unwrap();
        assert!(!matches!(item, Item::Opaque { .. }), "{given}");
        let back: Value =
            serde_json::from_str(&item.to_responses_json(Form::AsStored).unwrap()).unwrap();
        assert_eq!(back, given);
    }
    // An envelope with no `type` (the SDK's EncryptedSession) is kept too.
    let envelope = json!({"__enc__": 1, "v": 1, "kid": "k", "payload": "Zm9v"});
    let item = Item::from_responses_json(&as_given(&envelope)).unwrap();
    let back: Value =
        serde_json::from_str(&item.to_responses_json(Form::AsStored).unwrap()).unwrap();
    assert_eq!(back, envelope);
}

/// A typed item with an extra field is still a call for the ready-to-send
/// check, and its text is still its text.
#[test]
fn typed_views_see_items_with_extra_fields() {
    let call = Item::from_responses_json(
        r#"{"type":"function_call","call_id":"c1","name":"ls","arguments":"{}","namespace":"fs"}"#,
    )
    .unwrap();
    assert!(call.is_tool_call());
    let msg = Item::from_responses_json(
        r#"{"type":"message","role":"assistant","phase":"commentary","content":[{"type":"output_text","text":"hi","annotations":[]}]}"#,
    )
    .unwrap();
    assert_eq!(msg.text().as_deref(), Some("hi"));
}

/// Messages blocks with fields the store does not type (`caller` on
/// `tool_use`, `cache_control`, citations) come back as given and typed.
#[test]
fn messages_blocks_keep_their_fields() {
    let messages = [
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "b", "citations": [{"type": "char_location", "cited_text": "x"}]},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"p": 1}, "caller": {"type": "direct"}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false, "cache_control": {"type": "ephemeral"}}
        ]}),
        json!({"role": "user", "content": "plain"}),
    ];
    let mut items = Vec::new();
    for m in &messages {
        items.extend(Item::from_anthropic_message(&m.to_string()).unwrap());
    }
    assert!(items.iter().any(|i| i.is_tool_call()));
    assert!(items.iter().any(|i| i.is_tool_result()));
    assert!(items.iter().all(|i| !matches!(i, Item::Opaque { .. })));
    let back: Vec<Value> = Item::to_anthropic_messages(&items)
        .unwrap()
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect();
    assert_eq!(back, messages);
    // A Responses export of the same history does not refuse the result
    // that says it is no error.
    let output = items.iter().find(|i| i.is_tool_result()).unwrap();
    output.to_responses_json(Form::Resend).unwrap();
    let _ = anthropic::history_to_json(&items).unwrap();
}

/// A session whose first prompt was given in the shorthand form (and so is
/// stored extended) is titled by it, as any other.
#[test]
fn a_shorthand_first_prompt_titles_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .unwrap();
    let item = Item::from_responses_json(r#"{"role":"user","content":"hi there"}"#).unwrap();
    store.save_delta(id, &mut head, &[item]).unwrap();
    let listed = store.list().unwrap();
    assert_eq!(listed[0].title.as_deref(), Some("hi there"));
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.info(id).unwrap().unwrap().title.as_deref(),
        Some("hi there")
    );
}
