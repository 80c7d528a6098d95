//! Guards against losing or altering stored data on the way through the log's
//! forms: runtime `Item` ⇄ `LoggedItem` ⇄ JSON wire lines, and `LogEntry` ⇄ rkyv
//! archive; and against panics or non-determinism in either encoding.

mod common;

use common::{archive_at, every_entry, every_item, hash, TS};
use proptest::prelude::*;
use serde_json::Value;
use session_store::{
    group_delta, schema::ArchivedLogEntry, schema::LoggedItem, state::collect_state,
    wire::entry_line, wire::parse_line, ContentPart, Item, ItemStatus, JsonText, Log, LogEntry,
    LogOptions, RequestConfig, RestoredState, Role, SessionOrigin, Store, ToolOutput, WorkerResult,
};

const MIB: usize = 1 << 20;

/// The bytes a provider verifies: they must come back exactly.
fn encrypted(item: &Item) -> Option<&[u8]> {
    match item {
        Item::Reasoning {
            encrypted_content, ..
        }
        | Item::ReasoningParts {
            encrypted_content, ..
        } => encrypted_content.as_deref().map(str::as_bytes),
        Item::Thinking { signature, .. } => signature.as_deref().map(str::as_bytes),
        Item::RedactedThinking { extra: _, data } => Some(data.as_bytes()),
        Item::Opaque { json, .. } => Some(json.as_str().as_bytes()),
        _ => None,
    }
}

/// The seed's round trip for one item, through every JSON path the log has.
fn assert_item_round_trips(item: &Item) {
    let expected = item.clone();

    let logged = LoggedItem::from(item);
    assert_eq!(
        LoggedItem::from(item.clone()),
        logged,
        "owned and borrowed converters agree"
    );

    // The item on its own. serde reads the JSON an item holds (opaque items,
    // annotations) through a buffer, which keeps its value but not its
    // spelling; the wire line below keeps both.
    let json = serde_json::to_string(&logged).unwrap();
    let back: LoggedItem = serde_json::from_str(&json).unwrap();
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&logged).unwrap()
    );

    // Inside a whole wire line.
    let entry = LogEntry::AssistantItems {
        ts: TS,
        items: vec![logged.clone(), logged],
    };
    let line = entry_line(3, &hash(3), Some(&hash(2)), &entry);
    let wire = parse_line(&line, 1).unwrap();
    assert_eq!(wire.entry, entry);
    for logged in wire.entry.items() {
        let restored = logged.clone().into_item();
        assert_eq!(restored, expected);
        assert_eq!(
            encrypted(&restored),
            encrypted(item),
            "encrypted_content, signatures and opaque JSON byte for byte"
        );
    }
}

/// The rkyv round trip and every archived view of one entry.
fn assert_entry_archives(entry: &LogEntry) {
    let bytes = entry.to_archive();
    let archived = LogEntry::access_archive(&bytes).unwrap();
    assert_eq!(&archived.to_entry(), entry);
    assert_eq!(&LogEntry::from_archive(&bytes).unwrap(), entry);

    // Archived items become runtime items directly, equal to the owned path.
    assert_eq!(archived.items().len(), entry.items().len());
    for (archived_item, owned) in archived.items().iter().zip(entry.items()) {
        let item = owned.clone().into_item();
        assert_eq!(archived_item.to_item(), item);
        assert_eq!(archived_item.message_text(), item.text());
    }
}

fn assert_line_round_trips(entry: &LogEntry) {
    let line = entry_line(9, &hash(9), Some(&hash(8)), entry);
    let wire = parse_line(&line, 1).unwrap();
    assert_eq!(&wire.entry, entry, "{line}");
    assert_eq!(
        (wire.seq, wire.hash, wire.prev_hash),
        (Some(9), Some(hash(9)), Some(Some(hash(8))))
    );
    // Lossless import: re-exporting and re-archiving what was read gives the same bytes.
    assert_eq!(entry_line(9, &hash(9), Some(&hash(8)), &wire.entry), line);
    assert_eq!(
        wire.entry.to_archive().as_slice(),
        entry.to_archive().as_slice()
    );
}

fn apply_archived_all(entries: &[LogEntry]) -> RestoredState {
    let archives: Vec<_> = entries.iter().map(LogEntry::to_archive).collect();
    let mut state = RestoredState::default();
    for bytes in &archives {
        state
            .apply_archived(LogEntry::access_archive(bytes).unwrap())
            .unwrap();
    }
    state
}

// ---- the seed's round trip ----

#[test]
fn every_item_variant_round_trips_through_json() {
    for item in every_item() {
        assert_item_round_trips(&item);
    }
}

#[test]
fn ids_and_statuses_are_kept_and_left_out_only_for_resend() {
    for item in every_item()
        .into_iter()
        .filter(|i| !matches!(i, Item::Opaque { .. }))
    {
        // The log keeps the item whole: its runtime JSON comes back equal.
        let restored = LoggedItem::from(&item).into_item();
        assert_eq!(restored, item);
        // The re-send form is the item less its provider state.
        let resend = item.without_provider_state();
        let mut runtime: Value = serde_json::to_value(&item).unwrap();
        let obj = runtime.as_object_mut().unwrap();
        obj.remove("id");
        obj.remove("status");
        assert_eq!(serde_json::to_value(&resend).unwrap(), runtime);
    }
}

#[test]
fn one_mebibyte_strings_round_trip() {
    let big = |c: char| {
        let mut s: String = std::iter::repeat_n(c, MIB / c.len_utf8()).collect();
        s.push_str("\"\\\n\u{0}end");
        s
    };
    let items = [
        Item::Message {
            extra: Default::default(),
            id: None,
            role: Role::Assistant,
            content: vec![
                ContentPart::Text { text: big('a') },
                ContentPart::Refusal { refusal: big('é') },
            ],
            status: None,
        },
        Item::ToolCall {
            extra: Default::default(),
            id: Some(big('x')),
            call_id: big('c'),
            name: "n".into(),
            arguments: big('{'),
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "c".into(),
            summary: big('s'),
            content: Some(big('😀')),
        },
        Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: big('r'),
            summary: vec![big('\u{7f}')],
            encrypted_content: Some(big('=')),
            status: Some(ItemStatus::Completed),
        },
    ];
    for item in &items {
        assert_item_round_trips(item);
    }
    let entry = LogEntry::AssistantItems {
        ts: TS,
        items: items.iter().map(LoggedItem::from).collect(),
    };
    assert_entry_archives(&entry);
}

// ---- rkyv ----

#[test]
fn every_entry_kind_round_trips_through_the_archive() {
    let entries = every_entry();
    let kinds: std::collections::HashSet<_> = entries.iter().map(LogEntry::kind).collect();
    assert_eq!(kinds.len(), 12, "the fixture covers every kind");
    for entry in &entries {
        assert_entry_archives(entry);
    }
}

#[test]
fn every_entry_kind_round_trips_through_a_wire_line() {
    for entry in &every_entry() {
        assert_line_round_trips(entry);
    }
}

#[test]
fn apply_archived_equals_collect_state() {
    let entries = every_entry();
    // Every prefix, so that each kind is checked as the last one folded in too.
    for end in 0..=entries.len() {
        let owned = collect_state(&entries[..end]);
        assert_eq!(
            apply_archived_all(&entries[..end]),
            owned,
            "prefix of {end}"
        );
    }
}

/// A truncated payload is rejected by the record's `payload_len` and CRC
/// (see `corruption.rs`); the archive alone cannot always tell: rkyv reads the
/// root at the end, and a prefix can end in bytes that form a smaller valid
/// entry (an item of a later variant begins with a tag byte that is also a
/// pointer-free entry's). What the archive promises is that no truncation
/// panics or reads back as the entry it was cut from.
#[test]
fn every_truncation_of_an_archive_is_an_error_or_another_entry() {
    for entry in &every_entry() {
        let bytes = entry.to_archive();
        for len in 0..bytes.len() {
            let mut cut = rkyv::util::AlignedVec::<16>::new();
            cut.extend_from_slice(&bytes[..len]);
            if let Ok(other) = LogEntry::from_archive(&cut) {
                assert_ne!(&other, entry, "cut to {len} of {} bytes", bytes.len());
            }
        }
    }
}

#[test]
fn garbage_is_an_error() {
    let size = std::mem::size_of::<ArchivedLogEntry>();
    for garbage in [
        vec![],
        vec![0u8],
        vec![0xff; 7],
        // Zeroed, as preallocated space is.
        vec![0; size],
        vec![0; size * 2 + 8],
        vec![0xff; size],
        vec![0xff; size * 4],
        vec![0xab; 4096],
        b"{\"kind\":\"turn_end\",\"ts\":1,\"turn_count\":1}".to_vec(),
    ] {
        let mut buf = rkyv::util::AlignedVec::<16>::new();
        buf.extend_from_slice(&garbage);
        assert!(
            LogEntry::access_archive(&buf).is_err(),
            "{} bytes",
            garbage.len()
        );
        assert!(LogEntry::from_archive(&buf).is_err());
    }
}

#[test]
fn misaligned_input_is_an_error() {
    let align = std::mem::align_of::<ArchivedLogEntry>();
    assert!(
        align > 1,
        "the test means nothing for byte-aligned archives"
    );
    for entry in &every_entry() {
        for offset in 1..=32 {
            let buf = archive_at(entry, offset);
            let at = &buf[offset..];
            if offset % align == 0 {
                assert_eq!(&LogEntry::from_archive(at).unwrap(), entry);
            } else {
                assert!(
                    LogEntry::access_archive(at).is_err(),
                    "{:?} validated at offset {offset}",
                    entry.kind()
                );
            }
        }
    }
}

#[test]
fn single_byte_flips_never_panic() {
    // Validation may accept a flipped byte (a changed number, say); it must never panic,
    // and whatever it accepts must deserialize.
    for entry in &every_entry()[..3] {
        let bytes = entry.to_archive();
        for at in 0..bytes.len() {
            let mut flipped = rkyv::util::AlignedVec::<16>::new();
            flipped.extend_from_slice(&bytes);
            flipped[at] ^= 0x5a;
            if let Ok(archived) = LogEntry::access_archive(&flipped) {
                let _ = archived.to_entry();
                for item in archived.items() {
                    let _ = item.to_item();
                }
            }
        }
    }
}

// ---- determinism ----

#[test]
fn archives_are_deterministic() {
    for entry in &every_entry() {
        let first = entry.to_archive();
        // A clone lives at other addresses; unrelated allocations in between
        // would show up in any uninitialised padding.
        let noise: Vec<Vec<u8>> = (0..64).map(|i| vec![0xa5; 16 + i * 7]).collect();
        let clone = entry.clone();
        let second = clone.to_archive();
        drop(noise);
        assert_eq!(first.as_slice(), second.as_slice(), "{:?}", entry.kind());
        assert_eq!(first.as_slice(), entry.to_archive().as_slice());
    }
}

#[test]
fn wire_lines_are_deterministic() {
    for entry in &every_entry() {
        let line = entry_line(1, &hash(1), None, entry);
        assert_eq!(line, entry_line(1, &hash(1), None, &entry.clone()));
    }
}

#[test]
fn json_spelling_variants_give_identical_bytes() {
    // Whitespace is not part of a JSON payload: these are one payload.
    let spellings = [
        r#"{"b":[1,2.50,1e2],"a":{"k":"v w"}}"#,
        "{ \"b\" : [ 1 , 2.50 , 1e2 ] , \"a\" : { \"k\" : \"v w\" } }",
        "{\n\t\"b\": [1,\r\n2.50, 1e2],\n\"a\": {\"k\": \"v w\"}\n}\n",
    ];
    let entries: Vec<LogEntry> = spellings
        .iter()
        .map(|text| LogEntry::Extension {
            ts: TS,
            domain: "d".into(),
            payload: JsonText::parse(text).unwrap(),
        })
        .collect();
    for entry in &entries[1..] {
        assert_eq!(entry, &entries[0]);
        assert_eq!(
            entry.to_archive().as_slice(),
            entries[0].to_archive().as_slice()
        );
        assert_eq!(
            entry_line(0, &hash(0), None, entry),
            entry_line(0, &hash(0), None, &entries[0])
        );
    }
}

#[test]
fn json_payload_spelling_survives_export_and_import() {
    // Key order, number spelling, big integers and escapes are the payload's
    // own: an import must archive exactly what was exported, or hashes change.
    let payload = r#"{"z":1,"a":[1.50,1e2,-0.0,123456789012345678901234567890,"\u00e9\n"],"m":{"y":null,"b":true}}"#;
    let config = RequestConfig {
        extra: Some(JsonText::parse(payload).unwrap()),
        ..RequestConfig::model("m")
    };
    for entry in [
        LogEntry::Extension {
            ts: TS,
            domain: "d".into(),
            payload: JsonText::parse(payload).unwrap(),
        },
        LogEntry::ConfigChanged {
            ts: TS,
            config: config.clone(),
        },
        LogEntry::SessionStart {
            ts: TS,
            system_prompt: None,
            config,
            history: vec![],
            forked_from: None,
            compacted_from: None,
        },
    ] {
        let line = entry_line(0, &hash(0), None, &entry);
        assert!(line.contains(payload), "{line}");
        assert_line_round_trips(&entry);
    }
}

#[test]
fn floats_keep_their_value_and_spelling() {
    // 1.8362117598964632e-243 came back one ulp off before `float_roundtrip`.
    for temperature in [
        0.1 + 0.2,
        0.7,
        1.0 / 3.0,
        5e-324,
        f64::MAX,
        -0.0,
        1e21,
        1.836_211_759_896_463_2e-243,
    ] {
        let entry = LogEntry::ConfigChanged {
            ts: TS,
            config: RequestConfig {
                temperature: Some(temperature),
                top_p: Some(temperature),
                ..RequestConfig::default()
            },
        };
        let line = entry_line(0, &hash(0), None, &entry);
        assert_eq!(line, entry_line(0, &hash(0), None, &entry));
        let back = parse_line(&line, 1).unwrap().entry;
        let LogEntry::ConfigChanged { config, .. } = &back else {
            panic!("{back:?}")
        };
        assert_eq!(
            config.temperature.map(f64::to_bits),
            Some(temperature.to_bits()),
            "{line}"
        );
        assert_eq!(back.to_archive().as_slice(), entry.to_archive().as_slice());
    }
}

// ---- properties ----

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        16 => any::<String>(),
        4 => "[\u{0}-\u{1f}\"\\\\/\u{7f}\u{2028}\u{fffd}😀é]{0,12}",
        2 => Just(String::new()),
        // Rare, so the suite stays fast in debug builds; `one_mebibyte_strings_round_trip` always covers them.
        1 => (any::<char>(), any::<String>()).prop_map(|(c, tail)| {
            let mut s: String = std::iter::repeat_n(c, MIB / c.len_utf8()).collect();
            s.push_str(&tail);
            s
        }),
    ]
    .boxed()
}

fn small_text() -> BoxedStrategy<String> {
    prop_oneof![3 => any::<String>(), 1 => "[\u{0}-\u{1f}\"\\\\é]{0,6}"].boxed()
}

fn status() -> impl Strategy<Value = Option<ItemStatus>> {
    prop::option::of(prop_oneof![
        Just(ItemStatus::InProgress),
        Just(ItemStatus::Completed),
        Just(ItemStatus::Incomplete),
    ])
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::System),
        Just(Role::Developer)
    ]
}

/// Arbitrary JSON, and JSON spelled as a provider may spell it (key order,
/// number forms, escapes), which must survive as written.
fn json_text() -> BoxedStrategy<JsonText> {
    prop_oneof![
        3 => json_value().prop_map(|v| JsonText::from_value(&v).unwrap()),
        1 => Just(JsonText::parse(r#"{"z": 1, "a": [1.0e3, 2.50], "s": "caf\u00e9\/"}"#).unwrap()),
    ]
    .boxed()
}

fn part(text: BoxedStrategy<String>) -> BoxedStrategy<ContentPart> {
    let t = || text.clone();
    let opt = || prop::option::of(text.clone());
    prop_oneof![
        t().prop_map(|text| ContentPart::Text { text }),
        t().prop_map(|refusal| ContentPart::Refusal { refusal }),
        (
            t(),
            prop::option::of(json_text()),
            prop::option::of(json_text())
        )
            .prop_map(|(text, annotations, logprobs)| ContentPart::OutputText {
                text,
                annotations,
                logprobs
            }),
        (opt(), opt(), opt()).prop_map(|(image_url, file_id, detail)| {
            ContentPart::InputImage {
                image_url,
                file_id,
                detail,
            }
        }),
        (opt(), opt(), opt(), opt()).prop_map(|(file_id, file_data, filename, file_url)| {
            ContentPart::InputFile {
                file_id,
                file_data,
                filename,
                file_url,
            }
        }),
        (t(), t()).prop_map(|(data, format)| ContentPart::InputAudio { data, format }),
        json_text().prop_map(|json| ContentPart::Opaque { json }),
    ]
    .boxed()
}

fn item(text: BoxedStrategy<String>) -> BoxedStrategy<Item> {
    let t = || text.clone();
    let parts = || prop::collection::vec(part(text.clone()), 0..4);
    let output = prop::option::of(prop_oneof![
        t().prop_map(ToolOutput::Text),
        parts().prop_map(ToolOutput::Parts),
    ]);
    prop_oneof![
        (prop::option::of(t()), role(), parts(), status()).prop_map(
            |(id, role, content, status)| Item::Message {
                extra: Default::default(),
                id,
                role,
                content,
                status
            }
        ),
        (prop::option::of(t()), t(), t(), t(), status()).prop_map(
            |(id, call_id, name, arguments, status)| Item::ToolCall {
                extra: Default::default(),
                id,
                call_id,
                name,
                arguments,
                status
            }
        ),
        (prop::option::of(t()), t(), t(), prop::option::of(t())).prop_map(
            |(id, call_id, summary, content)| Item::ToolResult {
                extra: Default::default(),
                id,
                call_id,
                summary,
                content
            }
        ),
        (
            prop::option::of(t()),
            t(),
            prop::collection::vec(t(), 0..3),
            prop::option::of(t()),
            status()
        )
            .prop_map(|(id, text, summary, encrypted_content, status)| {
                Item::Reasoning {
                    extra: Default::default(),
                    id,
                    text,
                    summary,
                    encrypted_content,
                    status,
                }
            }),
        (prop::option::of(t()), t(), t(), t(), status()).prop_map(
            |(id, call_id, name, input, status)| Item::CustomToolCall {
                extra: Default::default(),
                id,
                call_id,
                name,
                input,
                status
            }
        ),
        (
            prop::option::of(t()),
            t(),
            output,
            prop::option::of(any::<bool>()),
            any::<bool>(),
            status()
        )
            .prop_map(|(id, call_id, output, is_error, custom, status)| {
                Item::ToolOutput {
                    extra: Default::default(),
                    id,
                    call_id,
                    output,
                    is_error,
                    custom,
                    status,
                }
            }),
        (
            prop::option::of(t()),
            prop::collection::vec(t(), 0..3),
            prop::collection::vec(t(), 0..3),
            prop::option::of(t()),
            status()
        )
            .prop_map(|(id, summary, content, encrypted_content, status)| {
                Item::ReasoningParts {
                    extra: Default::default(),
                    id,
                    summary,
                    content,
                    encrypted_content,
                    status,
                }
            }),
        (t(), prop::option::of(t())).prop_map(|(thinking, signature)| Item::Thinking {
            extra: Default::default(),
            thinking,
            signature
        }),
        t().prop_map(|data| Item::RedactedThinking {
            extra: Default::default(),
            data
        }),
        (prop::option::of(role()), json_text())
            .prop_map(|(role, json)| Item::Opaque { role, json }),
    ]
    .boxed()
}

fn finite_f64() -> impl Strategy<Value = f64> {
    use prop::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite_f64().prop_map(Value::from),
        small_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((small_text(), inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

fn config() -> impl Strategy<Value = RequestConfig> {
    (
        prop::option::of(small_text()),
        prop::option::of(finite_f64()),
        prop::option::of(finite_f64()),
        prop::option::of(any::<u64>()),
        prop::option::of(small_text()),
        prop::option::of(json_value()),
    )
        .prop_map(
            |(model, temperature, top_p, max_output_tokens, reasoning_effort, extra)| {
                RequestConfig {
                    model,
                    temperature,
                    top_p,
                    max_output_tokens,
                    reasoning_effort,
                    extra: extra.as_ref().map(|v| JsonText::from_value(v).unwrap()),
                }
            },
        )
}

fn origin() -> impl Strategy<Value = SessionOrigin> {
    (any::<[u8; 16]>(), any::<[u8; 32]>()).prop_map(|(id, at)| SessionOrigin {
        session_id: session_store::SessionId(id),
        at_hash: session_store::EntryHash(at),
    })
}

fn entry() -> impl Strategy<Value = LogEntry> {
    let logged = || item(small_text()).prop_map(LoggedItem::from);
    let items = || prop::collection::vec(logged(), 0..4);
    let ts = any::<u64>;
    prop_oneof![
        (
            ts(),
            prop::option::of(small_text()),
            config(),
            items(),
            prop::option::of(origin()),
            prop::option::of(origin())
        )
            .prop_map(
                |(ts, system_prompt, config, history, forked_from, compacted_from)| {
                    LogEntry::SessionStart {
                        ts,
                        system_prompt,
                        config,
                        history,
                        forked_from,
                        compacted_from,
                    }
                }
            ),
        (ts(), logged()).prop_map(|(ts, item)| LogEntry::UserInput { ts, item }),
        (ts(), items()).prop_map(|(ts, items)| LogEntry::AssistantItems { ts, items }),
        (ts(), items()).prop_map(|(ts, items)| LogEntry::ToolResults { ts, items }),
        (ts(), items()).prop_map(|(ts, items)| LogEntry::HookInjectedItems { ts, items }),
        (ts(), any::<u64>()).prop_map(|(ts, turn_count)| LogEntry::TurnEnd { ts, turn_count }),
        (
            ts(),
            any::<bool>(),
            prop::option::of(small_text()),
            small_text()
        )
            .prop_map(
                |(ts, interrupted, text, stop_reason)| LogEntry::RunCompleted {
                    ts,
                    interrupted,
                    result: WorkerResult { text, stop_reason },
                }
            ),
        (ts(), any::<bool>(), small_text()).prop_map(|(ts, interrupted, message)| {
            LogEntry::RunErrored {
                ts,
                interrupted,
                message,
            }
        }),
        (ts(), config()).prop_map(|(ts, config)| LogEntry::ConfigChanged { ts, config }),
        (ts(), any::<[u64; 5]>()).prop_map(|(ts, n)| LogEntry::LlmUsage {
            ts,
            history_len: n[0],
            input_total_tokens: n[1],
            cache_read_tokens: n[2],
            cache_write_tokens: n[3],
            output_tokens: n[4],
        }),
        (ts(), small_text(), json_value()).prop_map(|(ts, domain, payload)| LogEntry::Extension {
            ts,
            domain,
            payload: JsonText::from_value(&payload).unwrap(),
        }),
    ]
}

/// `Store::save_delta` archives the caller's items as they are, borrowed;
/// `group_delta` makes owned entries first. Both must write the same records,
/// byte for byte: a second log given `group_delta`'s entries, at the times the
/// store stamped, must chain to the same hashes (which cover every byte of
/// the records but their CRCs).
fn assert_save_delta_writes_what_group_delta_does(turns: &[Vec<Item>]) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    let (id, mut head) = store
        .create_session(Some("prompt"), RequestConfig::default(), &[])
        .unwrap();
    for turn in turns {
        store.save_delta(id, &mut head, turn).unwrap();
    }
    let snap = store.snapshot(id).unwrap();
    let records: Vec<_> = snap.iter().map(|r| r.unwrap()).collect();
    let owned = Log::open(dir.path().join("owned"), LogOptions::default()).unwrap();
    owned.append(&records[0].entry().to_entry()).unwrap();
    let mut next = 1;
    for turn in turns {
        let ts = records.get(next).map_or(0, |r| r.ts);
        for entry in group_delta(turn, ts) {
            let (seq, hash) = owned.append(&entry).unwrap();
            assert_eq!(
                (seq, hash),
                (records[next].seq, records[next].hash),
                "{entry:?}"
            );
            next += 1;
        }
    }
    assert_eq!(next, records.len());
    assert_eq!(owned.head().map(|(_, h)| h), Some(head));
}

#[test]
fn save_delta_writes_exactly_what_group_delta_does() {
    let items = every_item();
    let mut turns: Vec<Vec<Item>> = items.iter().map(|i| vec![i.clone()]).collect();
    turns.push(items);
    turns.push(Vec::new());
    assert_save_delta_writes_what_group_delta_does(&turns);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_items_round_trip(items in prop::collection::vec(item(text()), 1..4)) {
        for item in &items {
            assert_item_round_trips(item);
        }
    }

    #[test]
    fn arbitrary_entries_round_trip(entries in prop::collection::vec(entry(), 0..6)) {
        for entry in &entries {
            assert_entry_archives(entry);
            assert_line_round_trips(entry);
            // The bound that spares the log from measuring most entries'
            // JSON before it accepts them (`LogEntry::check_line_len`).
            let (json, archive) = (serde_json::to_string(entry).unwrap(), entry.to_archive());
            prop_assert!(json.len() <= session_store::JSON_GROWTH * archive.len(), "{} > {} × {}", json.len(), session_store::JSON_GROWTH, archive.len());
            let (once, twice) = (entry.to_archive(), entry.clone().to_archive());
            prop_assert_eq!(once.as_slice(), twice.as_slice());
        }
        prop_assert_eq!(apply_archived_all(&entries), collect_state(&entries));
    }

    #[test]
    fn arbitrary_deltas_are_saved_as_group_delta_makes_them(
        turns in prop::collection::vec(prop::collection::vec(item(small_text()), 0..5), 1..4)
    ) {
        assert_save_delta_writes_what_group_delta_does(&turns);
    }

    #[test]
    fn pretty_and_compact_json_are_one_payload(value in json_value()) {
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        prop_assert_eq!(JsonText::parse(&pretty).unwrap(), JsonText::from_value(&value).unwrap());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024), offset in 0usize..16) {
        let mut buf = rkyv::util::AlignedVec::<16>::new();
        buf.extend_from_slice(&vec![0; offset]);
        buf.extend_from_slice(&bytes);
        if let Ok(archived) = LogEntry::access_archive(&buf[offset..]) {
            let _ = archived.to_entry();
        }
    }
}
