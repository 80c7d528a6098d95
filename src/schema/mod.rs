//! The log's own persistent schema, decoupled from the runtime [`Item`].
//!
//! Every type here derives rkyv (validated with bytecheck) for storage and
//! serde (`tag = "kind"`, snake_case) for the JSON wire form. Provider item ids
//! and statuses of typed items are dropped on the way in; `encrypted_content`,
//! signatures and opaque items are kept byte for byte, since stateless re-send
//! needs them.
//!
//! # Example
//!
//! ```
//! use session_store::schema::{group_delta, now_ms, EntryKind, LogEntry};
//! use session_store::Item;
//! # fn main() -> session_store::Result<()> {
//! let call = Item::from_responses_json(r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"ls","arguments":"{}"}"#)?;
//! let output = Item::from_responses_json(r#"{"type":"function_call_output","call_id":"call_1","output":"src tests"}"#)?;
//! let turn = [Item::user_text("What is here?"), call, output, Item::assistant_text("Two directories.")];
//! let entries = group_delta(&turn, now_ms());
//! let kinds: Vec<EntryKind> = entries.iter().map(LogEntry::kind).collect();
//! assert_eq!(kinds, [EntryKind::UserInput, EntryKind::AssistantItems, EntryKind::ToolResults, EntryKind::AssistantItems]);
//!
//! // The items come back as they were given; the bytes are checked on the way in.
//! let back: Vec<Item> = entries.iter().flat_map(LogEntry::items).map(|i| i.clone().into_item()).collect();
//! assert_eq!(back, turn);
//! let bytes = entries[1].to_archive();
//! assert_eq!(LogEntry::access_archive(&bytes).map(|e| e.to_entry()), Ok(entries[1].clone()));
//! # Ok(()) }
//! ```

// rkyv's derived `Archived*` enums carry fields that cannot take doc comments;
// every item written by hand here is documented.
#![allow(missing_docs)]

use rkyv::with::{AsBox, MapNiche};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::item::Item;

/// `$old` (of enum `$from`) as the same variant of enum `$to`, every field
/// moved over by name; `; _ => $else` for the variants not named. The
/// mirrors of `LogEntry` (the frozen old root, the borrowed entries) keep
/// its variants' fields, so a conversion names each field once.
macro_rules! same_variant {
    ($old:expr, $from:ident => $to:ident,
     $($variant:ident { $($field:ident),* }),* $(,)? $(; _ => $else:expr)?) => {
        match $old {
            $($from::$variant { $($field),* } => $to::$variant { $($field),* },)*
            $(_ => $else,)?
        }
    };
}

mod archived;
mod borrowed;
mod ids;
mod item;
mod legacy;
mod line;
mod parts;
mod search;
mod size;

pub use crate::chain::ParseHashError;
pub use crate::id::ParseSessionIdError;
pub(crate) use crate::json::some_json_text;
pub use crate::json::{JsonText, MAX_JSON_DEPTH};
pub(crate) use borrowed::EntryRef;
use borrowed::ItemRef;
pub use ids::{ArchivedSessionOrigin, RequestConfig, SessionId, SessionOrigin, WorkerResult};
pub(crate) use item::ArchivedLoggedRole;
pub use item::{
    ArchivedLoggedCoreItem, ArchivedLoggedExtended, ArchivedLoggedItem, ArchivedLoggedItemOf,
    ItemExtension, LoggedCoreItem, LoggedExtended, LoggedForm, LoggedItem, LoggedItemOf,
    LoggedPayloadRef, LoggedRole, LoggedStatus,
};
pub use legacy::COMPACT_ROOT_VERSION;
pub(crate) use legacy::{converted, read_archive, EntryArchive};
#[cfg(feature = "whitebox")]
pub use line::JSON_GROWTH;
pub use line::MAX_LINE_BYTES;
pub(crate) use line::{bounded_json_len, json_len, MeasureItem};
pub(crate) use parts::{ArchivedLoggedContentPart, ArchivedLoggedToolOutput};
pub use parts::{
    LoggedContentPart, LoggedInputAudio, LoggedInputFile, LoggedInputImage, LoggedOutputText,
    LoggedToolOutput,
};
pub(crate) use size::item_text_len_bound;

/// One log entry. Every variant carries `ts`, milliseconds since the Unix epoch.
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[rkyv(derive(Debug))]
pub enum LogEntry {
    /// Starts a session (its first entry; a fork's names its parent), or
    /// restarts its history in place after a compaction (`Store::compact`).
    /// `restore` replays from the last one.
    SessionStart {
        /// Timestamp, ms.
        ts: u64,
        /// The system prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_prompt: Option<String>,
        /// Request settings.
        #[rkyv(with = AsBox)]
        config: RequestConfig,
        /// The history this session starts with (replaces any before).
        history: Vec<LoggedItem>,
        /// Set in a fork (and kept by its compactions): the parent and the
        /// entry it was forked at.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[rkyv(with = MapNiche<AsBox>)]
        forked_from: Option<SessionOrigin>,
        /// Set by a compaction: the session and head it compacted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[rkyv(with = MapNiche<AsBox>)]
        compacted_from: Option<SessionOrigin>,
    },
    /// One user message.
    UserInput {
        /// Timestamp, ms.
        ts: u64,
        /// The message.
        item: LoggedItem,
    },
    /// A run of model output: messages, tool calls, reasoning.
    AssistantItems {
        /// Timestamp, ms.
        ts: u64,
        /// The items, in order.
        items: Vec<LoggedItem>,
    },
    /// A run of tool results.
    ToolResults {
        /// Timestamp, ms.
        ts: u64,
        /// The items, in order.
        items: Vec<LoggedItem>,
    },
    /// Items injected by hooks (system messages and the like).
    HookInjectedItems {
        /// Timestamp, ms.
        ts: u64,
        /// The items, in order.
        items: Vec<LoggedItem>,
    },
    /// A turn ended.
    TurnEnd {
        /// Timestamp, ms.
        ts: u64,
        /// Turns completed so far.
        turn_count: u64,
    },
    /// A run finished.
    RunCompleted {
        /// Timestamp, ms.
        ts: u64,
        /// Whether it was interrupted.
        interrupted: bool,
        /// What it returned.
        result: WorkerResult,
    },
    /// A run failed.
    RunErrored {
        /// Timestamp, ms.
        ts: u64,
        /// Whether it was interrupted.
        interrupted: bool,
        /// The error message.
        message: String,
    },
    /// The request settings changed.
    ConfigChanged {
        /// Timestamp, ms.
        ts: u64,
        /// The new settings.
        #[rkyv(with = AsBox)]
        config: RequestConfig,
    },
    /// Token usage of one model call.
    LlmUsage {
        /// Timestamp, ms.
        ts: u64,
        /// History length sent.
        history_len: u64,
        /// Input tokens in total.
        input_total_tokens: u64,
        /// Input tokens read from cache.
        cache_read_tokens: u64,
        /// Input tokens written to cache.
        cache_write_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
    },
    /// Data of an extension, under its own domain.
    Extension {
        /// Timestamp, ms.
        ts: u64,
        /// Who owns the payload ("history.agy", "my-plugin", …).
        domain: String,
        /// The payload.
        payload: JsonText,
    },
    /// Removes the last `count` items of the live history (all of it when
    /// it holds fewer): an undo that keeps the log append-only, so that
    /// dropping an item costs one small record, not a rewrite. Schema 3.
    ItemsRemoved {
        /// Timestamp, ms.
        ts: u64,
        /// How many items, from the end.
        count: u64,
    },
    /// The first entry of a fork by reference (schema 4): the fork's
    /// history is its parent's, as `restore` finds it after the parent's
    /// record `parent_seq` (whose hash must be `parent_hash`), then the fork's own
    /// entries. Nothing of the parent is copied; `Store::restore` reads the
    /// parent's log, from its last `SessionStart` at or before that seq.
    ForkedFrom {
        /// Timestamp, ms.
        ts: u64,
        /// The parent session.
        parent: SessionId,
        /// The seq of the parent's last entry the fork includes (named
        /// apart from a wire line's own `seq`).
        parent_seq: u64,
        /// That entry's hash, checked at every restore.
        #[rkyv(with = AsBox)]
        parent_hash: crate::chain::EntryHash,
    },
}

/// The kind of an entry, as stored in each record header so that readers can
/// filter without decoding the payload.
///
/// Example: [the module](crate::schema#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// [`LogEntry::SessionStart`].
    SessionStart = 1,
    /// [`LogEntry::UserInput`].
    UserInput = 2,
    /// [`LogEntry::AssistantItems`].
    AssistantItems = 3,
    /// [`LogEntry::ToolResults`].
    ToolResults = 4,
    /// [`LogEntry::HookInjectedItems`].
    HookInjectedItems = 5,
    /// [`LogEntry::TurnEnd`].
    TurnEnd = 6,
    /// [`LogEntry::RunCompleted`].
    RunCompleted = 7,
    /// [`LogEntry::RunErrored`].
    RunErrored = 8,
    /// [`LogEntry::ConfigChanged`].
    ConfigChanged = 9,
    /// [`LogEntry::LlmUsage`].
    LlmUsage = 10,
    /// [`LogEntry::Extension`].
    Extension = 11,
    /// [`LogEntry::ItemsRemoved`].
    ItemsRemoved = 12,
    /// [`LogEntry::ForkedFrom`].
    ForkedFrom = 13,
}

impl EntryKind {
    /// From the header byte.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn from_code(code: u8) -> Option<EntryKind> {
        use EntryKind::*;
        Some(match code {
            1 => SessionStart,
            2 => UserInput,
            3 => AssistantItems,
            4 => ToolResults,
            5 => HookInjectedItems,
            6 => TurnEnd,
            7 => RunCompleted,
            8 => RunErrored,
            9 => ConfigChanged,
            10 => LlmUsage,
            11 => Extension,
            12 => ItemsRemoved,
            13 => ForkedFrom,
            _ => return None,
        })
    }

    /// The snake_case name used in the wire form.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn name(self) -> &'static str {
        use EntryKind::*;
        match self {
            SessionStart => "session_start",
            UserInput => "user_input",
            AssistantItems => "assistant_items",
            ToolResults => "tool_results",
            HookInjectedItems => "hook_injected_items",
            TurnEnd => "turn_end",
            RunCompleted => "run_completed",
            RunErrored => "run_errored",
            ConfigChanged => "config_changed",
            LlmUsage => "llm_usage",
            Extension => "extension",
            ItemsRemoved => "items_removed",
            ForkedFrom => "forked_from",
        }
    }
}

impl LogEntry {
    /// The entry's kind.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn kind(&self) -> EntryKind {
        match self {
            LogEntry::SessionStart { .. } => EntryKind::SessionStart,
            LogEntry::UserInput { .. } => EntryKind::UserInput,
            LogEntry::AssistantItems { .. } => EntryKind::AssistantItems,
            LogEntry::ToolResults { .. } => EntryKind::ToolResults,
            LogEntry::HookInjectedItems { .. } => EntryKind::HookInjectedItems,
            LogEntry::TurnEnd { .. } => EntryKind::TurnEnd,
            LogEntry::RunCompleted { .. } => EntryKind::RunCompleted,
            LogEntry::RunErrored { .. } => EntryKind::RunErrored,
            LogEntry::ConfigChanged { .. } => EntryKind::ConfigChanged,
            LogEntry::LlmUsage { .. } => EntryKind::LlmUsage,
            LogEntry::Extension { .. } => EntryKind::Extension,
            LogEntry::ItemsRemoved { .. } => EntryKind::ItemsRemoved,
            LogEntry::ForkedFrom { .. } => EntryKind::ForkedFrom,
        }
    }

    /// The timestamp, ms since the Unix epoch.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn ts(&self) -> u64 {
        match self {
            LogEntry::SessionStart { ts, .. }
            | LogEntry::UserInput { ts, .. }
            | LogEntry::AssistantItems { ts, .. }
            | LogEntry::ToolResults { ts, .. }
            | LogEntry::HookInjectedItems { ts, .. }
            | LogEntry::TurnEnd { ts, .. }
            | LogEntry::RunCompleted { ts, .. }
            | LogEntry::RunErrored { ts, .. }
            | LogEntry::ConfigChanged { ts, .. }
            | LogEntry::LlmUsage { ts, .. }
            | LogEntry::Extension { ts, .. }
            | LogEntry::ItemsRemoved { ts, .. }
            | LogEntry::ForkedFrom { ts, .. } => *ts,
        }
    }

    /// The history items this entry carries, in order.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn items(&self) -> &[LoggedItem] {
        match self {
            LogEntry::SessionStart { history, .. } => history,
            LogEntry::UserInput { item, .. } => std::slice::from_ref(item),
            LogEntry::AssistantItems { items, .. }
            | LogEntry::ToolResults { items, .. }
            | LogEntry::HookInjectedItems { items, .. } => items,
            _ => &[],
        }
    }

    /// The history items this entry carries, in order, to change in place.
    pub(crate) fn items_mut(&mut self) -> &mut [LoggedItem] {
        match self {
            LogEntry::SessionStart { history, .. } => history,
            LogEntry::UserInput { item, .. } => std::slice::from_mut(item),
            LogEntry::AssistantItems { items, .. }
            | LogEntry::ToolResults { items, .. }
            | LogEntry::HookInjectedItems { items, .. } => items,
            _ => &mut [],
        }
    }

    /// Checks what the log cannot keep faithfully: non-finite floats (the
    /// JSON wire form has no spelling for them, so they would not survive an
    /// export).
    ///
    /// Example: [the module](crate::schema#example).
    pub fn check(&self) -> Result<()> {
        let config = match self {
            LogEntry::SessionStart { config, .. } | LogEntry::ConfigChanged { config, .. } => {
                config
            }
            _ => return Ok(()),
        };
        for (name, v) in [("temperature", config.temperature), ("top_p", config.top_p)] {
            if v.is_some_and(|v| !v.is_finite()) {
                return Err(Error::invalid(format!(
                    "{} entry: config.{name} is not a finite number",
                    self.kind().name()
                )));
            }
        }
        Ok(())
    }

    /// Archives the entry. The same entry always yields the same bytes.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn to_archive(&self) -> rkyv::util::AlignedVec {
        // Archiving into memory fails only on allocation failure, which aborts anyway.
        rkyv::to_bytes::<rkyv::rancor::Error>(self)
            .expect("archiving a LogEntry into memory cannot fail")
    }

    /// Validates archived bytes (bytecheck) and returns a view of them.
    ///
    /// `bytes` must start at a 16-byte aligned address; misalignment is reported
    /// as an error, never undefined behaviour.
    ///
    /// Beyond bytecheck, the JSON text of an extension payload, a config's
    /// `extra` and every item's JSON (opaque items and parts, annotations,
    /// logprobs) must be valid JSON, so that everything read can be exported.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn access_archive(bytes: &[u8]) -> std::result::Result<&ArchivedLogEntry, String> {
        let archived = rkyv::access::<ArchivedLogEntry, rkyv::rancor::Error>(bytes)
            .map_err(|e| e.to_string())?;
        let json = match archived {
            ArchivedLogEntry::Extension { payload, .. } => Some(payload.as_str()),
            ArchivedLogEntry::SessionStart { config, .. }
            | ArchivedLogEntry::ConfigChanged { config, .. } => {
                config.extra.as_ref().map(|e| e.as_str())
            }
            _ => None,
        };
        if let Some(text) = json {
            check_json(text)?;
        }
        for item in archived.items().iter() {
            item.check_json_texts(check_json)?;
        }
        Ok(archived)
    }

    /// Validates and deserializes archived bytes.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn from_archive(bytes: &[u8]) -> std::result::Result<LogEntry, String> {
        let archived = LogEntry::access_archive(bytes)?;
        rkyv::deserialize::<LogEntry, rkyv::rancor::Error>(archived).map_err(|e| e.to_string())
    }
}

/// Whether `text` is valid JSON, as every JSON text an archive holds must
/// be. An empty list (annotations, mostly) is answered without the parser.
pub(crate) fn check_json(text: &str) -> std::result::Result<(), String> {
    if text == "[]" {
        return Ok(());
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(drop)
        .map_err(|e| format!("JSON payload is not valid JSON: {e}"))
}

/// What the log appends: a [`LogEntry`], or a borrowed [`EntryRef`] that
/// archives to the same bytes (so the log cannot tell them apart).
pub(crate) trait Archivable:
    rkyv::Archive<Archived = ArchivedLogEntry>
    + for<'b> rkyv::Serialize<
        rkyv::api::high::HighSerializer<
            rkyv::util::AlignedVec,
            rkyv::ser::allocator::ArenaHandle<'b>,
            rkyv::rancor::Error,
        >,
    >
{
    /// The entry's kind.
    fn kind(&self) -> EntryKind;
    /// [`LogEntry::external_len`]: what its items in the payload area
    /// archive to, in all.
    fn external_len(&self) -> usize;
    /// The bytes of the payload-area items the entry refers to, as a
    /// session's `payload_bytes` counts them: 0 for a `SessionStart` that
    /// compacts in place (its history repeats what the session holds).
    fn counted_payload_len(&self) -> u64;
    /// The timestamp, ms.
    fn ts(&self) -> u64;
    /// See [`LogEntry::check`].
    fn check(&self) -> Result<()>;
}

impl Archivable for LogEntry {
    fn kind(&self) -> EntryKind {
        LogEntry::kind(self)
    }

    fn external_len(&self) -> usize {
        LogEntry::external_len(self)
    }

    fn counted_payload_len(&self) -> u64 {
        match self {
            LogEntry::SessionStart {
                compacted_from: Some(_),
                ..
            } => 0,
            e => e.payload_refs().iter().map(|r| r.len).sum(),
        }
    }

    fn ts(&self) -> u64 {
        LogEntry::ts(self)
    }

    fn check(&self) -> Result<()> {
        LogEntry::check(self)
    }
}

impl ArchivedLogEntry {
    /// The owned entry.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn to_entry(&self) -> LogEntry {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LogEntry, rkyv::rancor::Error>(self)
            .expect("deserializing a validated archive cannot fail")
    }

    /// The items this entry carries, archived, in order.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn items(&self) -> &[ArchivedLoggedItem] {
        match self {
            ArchivedLogEntry::SessionStart { history, .. } => history.as_slice(),
            ArchivedLogEntry::UserInput { item, .. } => std::slice::from_ref(item),
            ArchivedLogEntry::AssistantItems { items, .. }
            | ArchivedLogEntry::ToolResults { items, .. }
            | ArchivedLogEntry::HookInjectedItems { items, .. } => items.as_slice(),
            _ => &[],
        }
    }
}

/// Milliseconds since the Unix epoch, now: the `ts` of an entry written
/// at this moment.
///
/// ```
/// use session_store::schema::{now_ms, LogEntry};
/// let entry = LogEntry::TurnEnd { ts: now_ms(), turn_count: 1 };
/// # let _ = entry;
/// ```
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Groups new history items into entries, with the seed's rules:
/// each user message is one `UserInput`; a run of tool results is one
/// `ToolResults`; a run of assistant messages, tool calls and reasoning is one
/// `AssistantItems`; anything else (system messages) is one
/// `HookInjectedItems` each. Order is kept exactly.
///
/// Example: [the module](crate::schema#example).
pub fn group_delta(items: &[Item], ts: u64) -> Vec<LogEntry> {
    group_items(items, LoggedItem::from)
        .into_iter()
        .map(|group| match group {
            Group::User(item) => LogEntry::UserInput { ts, item },
            Group::Hook(item) => LogEntry::HookInjectedItems {
                ts,
                items: vec![item],
            },
            Group::Assistant(items) => LogEntry::AssistantItems { ts, items },
            Group::Tools(items) => LogEntry::ToolResults { ts, items },
        })
        .collect()
}

/// [`group_delta`], borrowed: the entries archive to the same bytes, with no
/// string of `items` copied before rkyv writes it.
pub(crate) fn group_delta_borrowed(items: &[Item], ts: u64) -> Vec<EntryRef<'_>> {
    group_items(items, ItemRef::from)
        .into_iter()
        .map(|group| match group {
            Group::User(item) => EntryRef::UserInput { ts, item },
            Group::Hook(item) => EntryRef::HookInjectedItems {
                ts,
                items: vec![item],
            },
            Group::Assistant(items) => EntryRef::AssistantItems { ts, items },
            Group::Tools(items) => EntryRef::ToolResults { ts, items },
        })
        .collect()
}

/// One entry's worth of items, as [`group_delta`] groups them, in whatever
/// form `group_items` converted them to.
enum Group<T> {
    User(T),
    Hook(T),
    Assistant(Vec<T>),
    Tools(Vec<T>),
}

fn group_items<'a, T>(items: &'a [Item], convert: impl Fn(&'a Item) -> T) -> Vec<Group<T>> {
    let mut out = Vec::new();
    for item in items {
        let converted = convert(item);
        if item.is_assistant_output() {
            match out.last_mut() {
                Some(Group::Assistant(run)) => run.push(converted),
                _ => out.push(Group::Assistant(vec![converted])),
            }
        } else if item.is_tool_result() {
            match out.last_mut() {
                Some(Group::Tools(run)) => run.push(converted),
                _ => out.push(Group::Tools(vec![converted])),
            }
        } else if item.is_user_message() {
            out.push(Group::User(converted));
        } else {
            out.push(Group::Hook(converted));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::item::ArchivedLoggedRole;
    use super::parts::ArchivedLoggedContentPart;
    use super::*;

    /// Schema 2 reads schema 1 archives as they are only while these sizes and
    /// alignments hold: a `Vec` of items or parts strides by them, and rkyv
    /// finds the root entry at the end of the payload by its size: 232
    /// bytes up to format 8 (read as [`legacy::LegacyLogEntry`]), 56 from
    /// format 9 on.
    #[test]
    fn archived_layout_is_schema_1s() {
        use std::mem::{align_of, size_of};
        assert_eq!(size_of::<ArchivedLoggedRole>(), 1);
        assert_eq!(
            (
                size_of::<ArchivedLoggedContentPart>(),
                align_of::<ArchivedLoggedContentPart>()
            ),
            (12, 4)
        );
        assert_eq!(
            (
                size_of::<ArchivedLoggedItem>(),
                align_of::<ArchivedLoggedItem>()
            ),
            (32, 4)
        );
        assert_eq!(
            (
                size_of::<ArchivedLogEntry>(),
                align_of::<ArchivedLogEntry>()
            ),
            (56, 8)
        );
        assert_eq!(
            (
                size_of::<legacy::ArchivedLegacyLogEntry>(),
                align_of::<legacy::ArchivedLegacyLogEntry>()
            ),
            (232, 8)
        );
    }

    /// An entry that names large items is measured with them: their
    /// length counts toward the bound, a measure too long refuses it, and
    /// without the store their bound stands in for them.
    #[test]
    fn the_line_of_an_entry_counts_the_large_items_it_names() {
        let r = LoggedPayloadRef {
            hash: [7; 32],
            len: 40 << 20,
        };
        let entry = LogEntry::ToolResults {
            ts: 1,
            items: vec![LoggedItem::External(Box::new(r))],
        };
        let archived = entry.to_archive().len();
        let mut asked = Vec::new();
        let mut huge = |r: &LoggedPayloadRef| {
            asked.push(r.hash);
            Ok(MAX_LINE_BYTES)
        };
        let err = entry.check_line_len_with(archived, &mut huge).unwrap_err();
        assert!(err.to_string().contains("would export as a"), "{err}");
        assert_eq!(asked, [[7; 32]], "the large item was measured");
        entry
            .check_line_len_with(archived, &mut |_| Ok(50 << 20))
            .unwrap();
        // Unmeasured, 40 MiB bounds at 640 MiB of JSON: refused.
        assert!(entry.check_line_len(archived).is_err());
        // The writer's check sees the same from the archive and its length.
        assert!(
            LogEntry::check_archived_line_len(&entry.to_archive(), 40 << 20, &mut |_| Ok(
                MAX_LINE_BYTES
            ))
            .is_err()
        );
        LogEntry::check_archived_line_len(&entry.to_archive(), 40 << 20, &mut |_| Ok(1 << 20))
            .unwrap();
        // A small reference never reaches the measure.
        let small = LogEntry::ToolResults {
            ts: 1,
            items: vec![LoggedItem::External(Box::new(LoggedPayloadRef {
                hash: [1; 32],
                len: 1 << 20,
            }))],
        };
        small
            .check_line_len_with(archived, &mut |_| panic!("measured a small entry"))
            .unwrap();
    }

    #[test]
    fn an_archive_whose_json_payload_is_not_json_is_rejected() {
        // Only a forger (who re-computes the CRC) can store such bytes; reading
        // them must still fail cleanly rather than panic at export.
        let entry = LogEntry::Extension {
            ts: 1,
            domain: "x".into(),
            payload: JsonText("{not json".into()),
        };
        let bytes = entry.to_archive();
        let err = LogEntry::access_archive(&bytes).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        let ok = LogEntry::Extension {
            ts: 1,
            domain: "x".into(),
            payload: JsonText::parse(r#"{"a": [1, 2]}"#).unwrap(),
        };
        assert!(LogEntry::access_archive(&ok.to_archive()).is_ok());
    }

    #[test]
    fn an_archive_whose_item_json_is_not_json_is_rejected() {
        let forged = |json: &str| JsonText(json.to_string());
        let parts = |json: JsonText| {
            vec![LoggedContentPart::OutputText(Box::new(LoggedOutputText {
                text: String::new(),
                annotations: None,
                logprobs: Some(json),
            }))]
        };
        for bad in ["{not json", ""] {
            for item in [
                LoggedItem::Opaque {
                    role: None,
                    json: forged(bad),
                },
                LoggedItem::Message {
                    role: LoggedRole::User,
                    content: vec![LoggedContentPart::Opaque { json: forged(bad) }],
                },
                LoggedItem::Message {
                    role: LoggedRole::Assistant,
                    content: parts(forged(bad)),
                },
                LoggedItem::ToolOutput {
                    call_id: "c".into(),
                    output: Some(LoggedToolOutput::Parts(parts(forged(bad)))),
                    is_error: None,
                    custom: false,
                },
            ] {
                let entry = LogEntry::ToolResults {
                    ts: 1,
                    items: vec![item],
                };
                let err = LogEntry::access_archive(&entry.to_archive()).unwrap_err();
                assert!(err.contains("not valid JSON"), "{err}");
            }
        }
    }
}
