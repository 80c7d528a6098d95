//! Borrowed mirrors of the logged types, for the save path: they archive
//! straight from the runtime's [`Item`]s, without cloning a string into a
//! [`LoggedItem`](super::LoggedItem) first, into exactly the bytes the owned
//! [`LogEntry`](super::LogEntry) archives to, so the records and their hashes
//! are the same whichever path wrote them.
//!
//! Each mirror archives *as* the owned type's archived form
//! (`#[rkyv(as = …)]`), field for field: a borrowed field goes through
//! `Inline`, which archives the owned value it points to, and a boxed part
//! through `AsBox`. For the structs, rkyv checks every field's archived type
//! by name. For the enums it cannot: it writes each variant as a `repr(C)`
//! struct of the tag and the fields' archived types, so a mirror must keep the
//! owned enum's variants (their tags: positions, or the explicit
//! discriminants of `EntryRef`, which mirrors only the entries a delta makes)
//! and each variant's fields in order, with the same archived types.
//! `borrowed_archives_are_the_owned_archives` compares the bytes of every
//! variant; the schema only ever appends variants (DESIGN.md, "Schema
//! versions"), and a new one must be added here too.

#![allow(missing_docs)]

use rkyv::rancor::Source;
use rkyv::ser::{Allocator, Writer};
use rkyv::with::{AsBox, Inline};

use super::item::{LoggedExtended, LoggedItem, LoggedPayloadRef};
use super::parts::{
    ArchivedLoggedContentPart, ArchivedLoggedInputAudio, ArchivedLoggedInputFile,
    ArchivedLoggedInputImage, ArchivedLoggedOutputText, ArchivedLoggedToolOutput,
};
use super::{Archivable, ArchivedLogEntry, ArchivedLoggedItem, EntryKind, JsonText, LoggedRole};
use crate::error::Result;
use crate::item::{ContentPart, Item, ItemView, ToolOutput};

/// A [`LogEntry`](super::LogEntry) of new history items, borrowed. Its tags
/// are `LogEntry`'s (`SessionStart` is 0).
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLogEntry)]
#[repr(u8)]
#[rustfmt::skip]
pub(crate) enum EntryRef<'a> {
    UserInput { ts: u64, item: ItemRef<'a> } = 1,
    AssistantItems { ts: u64, items: Vec<ItemRef<'a>> } = 2,
    ToolResults { ts: u64, items: Vec<ItemRef<'a>> } = 3,
    HookInjectedItems { ts: u64, items: Vec<ItemRef<'a>> } = 4,
    TurnEnd { ts: u64, turn_count: u64 } = 5,
    LlmUsage {
        ts: u64,
        history_len: u64,
        input_total_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        output_tokens: u64,
    } = 9,
}

impl EntryRef<'_> {
    /// The mirror of an entry that ends a turn (`TurnEnd`, `LlmUsage`),
    /// which owns nothing to borrow; `None` for any other.
    pub(crate) fn turn_tail(entry: &super::LogEntry) -> Option<EntryRef<'static>> {
        use super::LogEntry;
        Some(same_variant!(
            *entry,
            LogEntry => EntryRef,
            TurnEnd { ts, turn_count },
            LlmUsage {
                ts,
                history_len,
                input_total_tokens,
                cache_read_tokens,
                cache_write_tokens,
                output_tokens
            };
            _ => return None
        ))
    }
}

impl Archivable for EntryRef<'_> {
    fn kind(&self) -> EntryKind {
        match self {
            EntryRef::UserInput { .. } => EntryKind::UserInput,
            EntryRef::AssistantItems { .. } => EntryKind::AssistantItems,
            EntryRef::ToolResults { .. } => EntryKind::ToolResults,
            EntryRef::HookInjectedItems { .. } => EntryKind::HookInjectedItems,
            EntryRef::TurnEnd { .. } => EntryKind::TurnEnd,
            EntryRef::LlmUsage { .. } => EntryKind::LlmUsage,
        }
    }

    /// A borrowed item is never a reference to the payload area.
    fn external_len(&self) -> usize {
        0
    }

    fn counted_payload_len(&self) -> u64 {
        0
    }

    fn ts(&self) -> u64 {
        match self {
            EntryRef::UserInput { ts, .. }
            | EntryRef::AssistantItems { ts, .. }
            | EntryRef::ToolResults { ts, .. }
            | EntryRef::HookInjectedItems { ts, .. }
            | EntryRef::TurnEnd { ts, .. }
            | EntryRef::LlmUsage { ts, .. } => *ts,
        }
    }

    /// History items and counters hold no float: nothing to refuse.
    fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// A [`LoggedItem`](super::LoggedItem), borrowed from an [`Item`].
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedItem)]
pub(crate) enum ItemRef<'a> {
    Message {
        role: LoggedRole,
        content: Vec<PartRef<'a>>,
    },
    ToolCall {
        #[rkyv(with = Inline)]
        call_id: &'a String,
        #[rkyv(with = Inline)]
        name: &'a String,
        #[rkyv(with = Inline)]
        arguments: &'a String,
    },
    ToolResult {
        #[rkyv(with = Inline)]
        call_id: &'a String,
        #[rkyv(with = Inline)]
        summary: &'a String,
        #[rkyv(with = Inline)]
        content: &'a Option<String>,
    },
    Reasoning {
        #[rkyv(with = Inline)]
        text: &'a String,
        #[rkyv(with = Inline)]
        summary: &'a Vec<String>,
        #[rkyv(with = Inline)]
        encrypted_content: &'a Option<String>,
    },
    CustomToolCall {
        #[rkyv(with = Inline)]
        call_id: &'a String,
        #[rkyv(with = Inline)]
        name: &'a String,
        #[rkyv(with = Inline)]
        input: &'a String,
    },
    ToolOutput {
        #[rkyv(with = Inline)]
        call_id: &'a String,
        output: Option<ToolOutputRef<'a>>,
        is_error: Option<bool>,
        custom: bool,
    },
    ReasoningParts {
        #[rkyv(with = Inline)]
        summary: &'a Vec<String>,
        #[rkyv(with = Inline)]
        content: &'a Vec<String>,
        #[rkyv(with = Inline)]
        encrypted_content: &'a Option<String>,
    },
    Thinking {
        #[rkyv(with = Inline)]
        thinking: &'a String,
        #[rkyv(with = Inline)]
        signature: &'a Option<String>,
    },
    RedactedThinking {
        #[rkyv(with = Inline)]
        data: &'a String,
    },
    Opaque {
        role: Option<LoggedRole>,
        #[rkyv(with = Inline)]
        json: &'a JsonText,
    },
    /// Never made (a borrowed item is never a payload reference); here so
    /// that `Extended` keeps its tag.
    #[allow(dead_code)]
    External(Box<LoggedPayloadRef>),
    /// An item with provider state, owned: rare on the save path (items
    /// as a runtime makes them carry none), so it is cloned rather than
    /// mirrored.
    Extended(Box<LoggedExtended>),
}

/// A [`LoggedContentPart`](super::LoggedContentPart), borrowed.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedContentPart)]
pub(crate) enum PartRef<'a> {
    Text {
        #[rkyv(with = Inline)]
        text: &'a String,
    },
    Refusal {
        #[rkyv(with = Inline)]
        refusal: &'a String,
    },
    OutputText(#[rkyv(with = AsBox)] OutputTextRef<'a>),
    InputImage(#[rkyv(with = AsBox)] InputImageRef<'a>),
    InputFile(#[rkyv(with = AsBox)] InputFileRef<'a>),
    InputAudio(#[rkyv(with = AsBox)] InputAudioRef<'a>),
    Opaque {
        #[rkyv(with = Inline)]
        json: &'a JsonText,
    },
}

/// A [`LoggedToolOutput`](super::LoggedToolOutput), borrowed.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedToolOutput)]
pub(crate) enum ToolOutputRef<'a> {
    Text(#[rkyv(with = Inline)] &'a String),
    Parts(Vec<PartRef<'a>>),
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedOutputText, serialize_bounds(__S: Writer + Allocator, __S::Error: Source))]
pub(crate) struct OutputTextRef<'a> {
    #[rkyv(with = Inline, omit_bounds)]
    text: &'a String,
    #[rkyv(with = Inline, omit_bounds)]
    annotations: &'a Option<JsonText>,
    #[rkyv(with = Inline, omit_bounds)]
    logprobs: &'a Option<JsonText>,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedInputImage, serialize_bounds(__S: Writer + Allocator, __S::Error: Source))]
pub(crate) struct InputImageRef<'a> {
    #[rkyv(with = Inline, omit_bounds)]
    image_url: &'a Option<String>,
    #[rkyv(with = Inline, omit_bounds)]
    file_id: &'a Option<String>,
    #[rkyv(with = Inline, omit_bounds)]
    detail: &'a Option<String>,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedInputFile, serialize_bounds(__S: Writer + Allocator, __S::Error: Source))]
pub(crate) struct InputFileRef<'a> {
    #[rkyv(with = Inline, omit_bounds)]
    file_id: &'a Option<String>,
    #[rkyv(with = Inline, omit_bounds)]
    file_data: &'a Option<String>,
    #[rkyv(with = Inline, omit_bounds)]
    filename: &'a Option<String>,
    #[rkyv(with = Inline, omit_bounds)]
    file_url: &'a Option<String>,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedLoggedInputAudio, serialize_bounds(__S: Writer + Allocator, __S::Error: Source))]
pub(crate) struct InputAudioRef<'a> {
    #[rkyv(with = Inline, omit_bounds)]
    data: &'a String,
    #[rkyv(with = Inline, omit_bounds)]
    format: &'a String,
}

impl<'a> From<&'a ContentPart> for PartRef<'a> {
    fn from(part: &'a ContentPart) -> Self {
        match part {
            ContentPart::Text { text } => PartRef::Text { text },
            ContentPart::Refusal { refusal } => PartRef::Refusal { refusal },
            ContentPart::OutputText {
                text,
                annotations,
                logprobs,
            } => PartRef::OutputText(OutputTextRef {
                text,
                annotations,
                logprobs,
            }),
            ContentPart::InputImage {
                image_url,
                file_id,
                detail,
            } => PartRef::InputImage(InputImageRef {
                image_url,
                file_id,
                detail,
            }),
            ContentPart::InputFile {
                file_id,
                file_data,
                filename,
                file_url,
            } => PartRef::InputFile(InputFileRef {
                file_id,
                file_data,
                filename,
                file_url,
            }),
            ContentPart::InputAudio { data, format } => {
                PartRef::InputAudio(InputAudioRef { data, format })
            }
            ContentPart::Opaque { json } => PartRef::Opaque { json },
        }
    }
}

fn part_refs(parts: &[ContentPart]) -> Vec<PartRef<'_>> {
    parts.iter().map(PartRef::from).collect()
}

/// What `From<Item> for LoggedItem` keeps, borrowed: an item with an id,
/// a status or an extra is extended the same way.
impl<'a> From<&'a Item> for ItemRef<'a> {
    fn from(item: &'a Item) -> Self {
        let state = ItemView::from(item).provider_state();
        if state.id.is_none() && state.status.is_none() && state.extra.form.is_none() {
            return ItemRef::core_of(item);
        }
        match LoggedItem::from(item) {
            LoggedItem::Extended(e) => ItemRef::Extended(e),
            // An item with provider state is always extended.
            _ => unreachable!("an item with an id, status or extra converts to Extended"),
        }
    }
}

impl<'a> ItemRef<'a> {
    /// The typed fields of `item`, borrowed.
    fn core_of(item: &'a Item) -> Self {
        match item {
            Item::Message { role, content, .. } => ItemRef::Message {
                role: (*role).into(),
                content: part_refs(content),
            },
            Item::ToolCall {
                call_id,
                name,
                arguments,
                ..
            } => ItemRef::ToolCall {
                call_id,
                name,
                arguments,
            },
            Item::ToolResult {
                call_id,
                summary,
                content,
                ..
            } => ItemRef::ToolResult {
                call_id,
                summary,
                content,
            },
            Item::Reasoning {
                text,
                summary,
                encrypted_content,
                ..
            } => ItemRef::Reasoning {
                text,
                summary,
                encrypted_content,
            },
            Item::CustomToolCall {
                call_id,
                name,
                input,
                ..
            } => ItemRef::CustomToolCall {
                call_id,
                name,
                input,
            },
            Item::ToolOutput {
                call_id,
                output,
                is_error,
                custom,
                ..
            } => ItemRef::ToolOutput {
                call_id,
                output: output.as_ref().map(|o| match o {
                    ToolOutput::Text(text) => ToolOutputRef::Text(text),
                    ToolOutput::Parts(parts) => ToolOutputRef::Parts(part_refs(parts)),
                }),
                is_error: *is_error,
                custom: *custom,
            },
            Item::ReasoningParts {
                summary,
                content,
                encrypted_content,
                ..
            } => ItemRef::ReasoningParts {
                summary,
                content,
                encrypted_content,
            },
            Item::Thinking {
                extra: _,
                thinking,
                signature,
            } => ItemRef::Thinking {
                thinking,
                signature,
            },
            Item::RedactedThinking { extra: _, data } => ItemRef::RedactedThinking { data },
            Item::Opaque { role, json } => ItemRef::Opaque {
                role: role.map(Into::into),
                json,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{group_delta, group_delta_borrowed};
    use super::EntryRef;
    use crate::item::{ContentPart, Item, Role, ToolOutput};
    use crate::schema::{JsonText, LogEntry};

    fn s(text: &str) -> String {
        text.to_owned()
    }

    fn json(text: &str) -> JsonText {
        JsonText::parse(text).expect("valid JSON")
    }

    /// Every content part, each field that can be absent given once present
    /// and once absent.
    fn every_part() -> Vec<ContentPart> {
        vec![
            ContentPart::Text { text: s("plain") },
            ContentPart::Text { text: s("") },
            ContentPart::Refusal { refusal: s("no") },
            ContentPart::OutputText {
                text: s("cited"),
                annotations: Some(json(r#"[{"type":"url_citation"}]"#)),
                logprobs: Some(json("[]")),
            },
            ContentPart::OutputText {
                text: s("bare"),
                annotations: None,
                logprobs: None,
            },
            ContentPart::InputImage {
                image_url: Some(s("data:image/png;base64,AAAA")),
                file_id: Some(s("file-1")),
                detail: Some(s("low")),
            },
            ContentPart::InputImage {
                image_url: None,
                file_id: None,
                detail: None,
            },
            ContentPart::InputFile {
                file_id: Some(s("file-2")),
                file_data: Some(s("aGk=")),
                filename: Some(s("a.txt")),
                file_url: Some(s("https://example.com/a.txt")),
            },
            ContentPart::InputFile {
                file_id: None,
                file_data: None,
                filename: None,
                file_url: None,
            },
            ContentPart::InputAudio {
                data: s("UklGRg=="),
                format: s("wav"),
            },
            ContentPart::Opaque {
                json: json(r#"{"type":"image","source":{"type":"url"}}"#),
            },
        ]
    }

    /// Every item, with ids and statuses (which neither path keeps), in an
    /// order that makes runs of every kind and breaks them.
    fn every_item() -> Vec<Item> {
        let long = "a string longer than rkyv keeps inline, ".repeat(4);
        vec![
            Item::user_text("first"),
            Item::Message {
                extra: Default::default(),
                id: Some(s("msg_1")),
                role: Role::Assistant,
                content: every_part(),
                status: Some(crate::item::ItemStatus::Completed),
            },
            Item::ToolCall {
                extra: Default::default(),
                id: Some(s("fc_1")),
                call_id: s("call_1"),
                name: s("shell"),
                arguments: s(r#"{ "cmd" : "ls" }"#),
                status: None,
            },
            Item::Reasoning {
                extra: Default::default(),
                id: Some(s("rs_1")),
                text: long.clone(),
                summary: vec![s("one"), long.clone()],
                encrypted_content: Some(s("gAAAAB\u{0}\"\\")),
                status: None,
            },
            Item::Reasoning {
                extra: Default::default(),
                id: None,
                text: s(""),
                summary: vec![],
                encrypted_content: None,
                status: None,
            },
            Item::CustomToolCall {
                extra: Default::default(),
                id: None,
                call_id: s("call_2"),
                name: s("apply_patch"),
                input: long.clone(),
                status: None,
            },
            Item::ToolResult {
                extra: Default::default(),
                id: Some(s("fco_1")),
                call_id: s("call_1"),
                summary: s("listed"),
                content: Some(long.clone()),
            },
            Item::ToolResult {
                extra: Default::default(),
                id: None,
                call_id: s("call_3"),
                summary: s(""),
                content: None,
            },
            Item::ToolOutput {
                extra: Default::default(),
                id: None,
                call_id: s("call_2"),
                output: Some(ToolOutput::Text(s("done"))),
                is_error: Some(true),
                custom: true,
                status: None,
            },
            Item::ToolOutput {
                extra: Default::default(),
                id: None,
                call_id: s("call_4"),
                output: Some(ToolOutput::Parts(every_part())),
                is_error: None,
                custom: false,
                status: None,
            },
            Item::ToolOutput {
                extra: Default::default(),
                id: None,
                call_id: s("call_5"),
                output: None,
                is_error: Some(false),
                custom: false,
                status: None,
            },
            Item::system_text("a hook's note"),
            Item::ReasoningParts {
                extra: Default::default(),
                id: None,
                summary: vec![s("s")],
                content: vec![s("c1"), long.clone()],
                encrypted_content: Some(s("enc")),
                status: None,
            },
            Item::Thinking {
                extra: Default::default(),
                thinking: s("hmm"),
                signature: Some(s("sig")),
            },
            Item::Thinking {
                extra: Default::default(),
                thinking: s(""),
                signature: None,
            },
            Item::RedactedThinking {
                extra: Default::default(),
                data: long,
            },
            Item::Opaque {
                role: None,
                json: json(r#"{"type":"web_search_call","id":"ws_1"}"#),
            },
            Item::Opaque {
                role: Some(Role::Assistant),
                json: json(r#"{"type":"server_tool_use"}"#),
            },
            Item::Message {
                extra: Default::default(),
                id: None,
                role: Role::Developer,
                content: vec![],
                status: None,
            },
            Item::user_text("last"),
        ]
    }

    /// Which variant an item is: exhaustive, so that a new variant fails to
    /// compile here until `every_item` (and the mirrors) know it.
    fn variant(item: &Item) -> usize {
        match item {
            Item::Message { .. } => 0,
            Item::ToolCall { .. } => 1,
            Item::ToolResult { .. } => 2,
            Item::Reasoning { .. } => 3,
            Item::CustomToolCall { .. } => 4,
            Item::ToolOutput { .. } => 5,
            Item::ReasoningParts { .. } => 6,
            Item::Thinking { .. } => 7,
            Item::RedactedThinking { .. } => 8,
            Item::Opaque { .. } => 9,
        }
    }

    fn part_variant(part: &ContentPart) -> usize {
        match part {
            ContentPart::Text { .. } => 0,
            ContentPart::Refusal { .. } => 1,
            ContentPart::OutputText { .. } => 2,
            ContentPart::InputImage { .. } => 3,
            ContentPart::InputFile { .. } => 4,
            ContentPart::InputAudio { .. } => 5,
            ContentPart::Opaque { .. } => 6,
        }
    }

    fn assert_same_archives(items: &[Item], ts: u64) {
        let owned = group_delta(items, ts);
        let borrowed = group_delta_borrowed(items, ts);
        assert_eq!(owned.len(), borrowed.len());
        for (o, b) in owned.iter().zip(&borrowed) {
            let b_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(b).expect("archives");
            assert_eq!(o.to_archive().as_slice(), b_bytes.as_slice(), "{o:?}");
            assert_eq!(
                (o.kind(), o.ts()),
                (super::Archivable::kind(b), super::Archivable::ts(b))
            );
        }
    }

    #[test]
    fn borrowed_archives_are_the_owned_archives() {
        let items = every_item();
        let variants: std::collections::BTreeSet<usize> = items.iter().map(variant).collect();
        assert_eq!(variants.len(), 10, "every item variant is covered");
        let parts: std::collections::BTreeSet<usize> =
            every_part().iter().map(part_variant).collect();
        assert_eq!(parts.len(), 7, "every content part is covered");
        // The whole delta, and each item alone (every entry kind on its own).
        assert_same_archives(&items, 1_700_000_000_000);
        for item in &items {
            assert_same_archives(std::slice::from_ref(item), u64::MAX);
        }
        assert_same_archives(&[], 0);
        // The entries that end a turn.
        let tails = [
            LogEntry::TurnEnd {
                ts: 7,
                turn_count: u64::MAX,
            },
            LogEntry::LlmUsage {
                ts: 1,
                history_len: 2,
                input_total_tokens: 3,
                cache_read_tokens: 4,
                cache_write_tokens: 5,
                output_tokens: u64::MAX,
            },
        ];
        for o in &tails {
            let b = EntryRef::turn_tail(o).expect("a turn's tail");
            let b_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&b).expect("archives");
            assert_eq!(o.to_archive().as_slice(), b_bytes.as_slice(), "{o:?}");
            assert_eq!(
                (o.kind(), o.ts()),
                (super::Archivable::kind(&b), super::Archivable::ts(&b))
            );
        }
        let other = LogEntry::RunErrored {
            ts: 0,
            interrupted: false,
            message: "no".into(),
        };
        assert!(EntryRef::turn_tail(&other).is_none());
    }
}
