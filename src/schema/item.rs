//! Logged items: the persistent mirror of the runtime's `Item`, with the
//! converters both ways (its content parts are in `parts.rs`).

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::item::{Extra, Item, ItemStatus, Role, ToolOutput, WireForm};

use super::parts::{logged_parts, runtime_parts, LoggedContentPart, LoggedToolOutput};
use super::{some_json_text, JsonText};

/// Author of a logged message.
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum LoggedRole {
    /// The user.
    User,
    /// The model.
    Assistant,
    /// The runtime or a hook.
    System,
    /// The developer (schema 2).
    Developer,
}

// Schema 2 grows the enums here and in `parts.rs` only by variants added at
// the end whose archived form is no larger than the largest schema 1
// variant, so that a schema 1 archive is a schema 2 archive with the same
// meaning (see DESIGN.md, "Schema versions"); larger payloads are boxed.
// `archived_layout_is_schema_1s` pins it.

/// One history item as the log keeps it: see [`LoggedItem`]. `X` is what
/// its last variant holds: for an item of an entry, what a provider gave
/// beyond the typed fields ([`LoggedExtended`]); inside that, nothing
/// (`()`), so the type is not recursive and an archive of it is checked to
/// a fixed depth, whatever its bytes.
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoggedItemOf<X> {
    /// A message.
    Message {
        /// The author.
        role: LoggedRole,
        /// The content parts, in order.
        content: Vec<LoggedContentPart>,
    },
    /// A tool call.
    ToolCall {
        /// Pairs the call with its result.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments as JSON text, byte for byte as the model produced them.
        arguments: String,
    },
    /// A tool result.
    ToolResult {
        /// The call this answers.
        call_id: String,
        /// The output the model sees.
        summary: String,
        /// The full output, never sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// Reasoning.
    Reasoning {
        /// Visible reasoning text.
        text: String,
        /// Summaries.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// Opaque provider state, byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
    /// A custom tool call (schema 2).
    CustomToolCall {
        /// Pairs the call with its output.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The free-form input, byte for byte.
        input: String,
    },
    /// A tool output with parts, an error flag or for a custom tool (schema 2).
    ToolOutput {
        /// The call this answers.
        call_id: String,
        /// The output the model sees.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<LoggedToolOutput>,
        /// The error flag, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        /// Answers a custom tool call.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        custom: bool,
    },
    /// Reasoning with a list of content texts (schema 2).
    ReasoningParts {
        /// Summaries.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// Reasoning texts.
        content: Vec<String>,
        /// Opaque provider state, byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
    /// Anthropic thinking (schema 2).
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The signature, byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Anthropic redacted thinking (schema 2).
    RedactedThinking {
        /// The encrypted thinking, byte for byte.
        data: String,
    },
    /// An untyped item, kept as its JSON (schema 2).
    Opaque {
        /// The side of an Anthropic block; absent for a Responses item.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<LoggedRole>,
        /// The item's JSON object, byte for byte.
        json: JsonText,
    },
    /// An item stored once in the store's payload area (schema 5): the
    /// BLAKE3 hash and length of its own archive there. It never appears
    /// in the wire form (export writes the item itself), so serde refuses
    /// it both ways. See DESIGN.md, "Payloads".
    #[serde(skip)]
    External(Box<LoggedPayloadRef>),
    /// A typed item with what its provider gave beyond the typed fields
    /// (schema 6): its id and status, and the [`Extra`] that writes it back
    /// JSON-equal. Inside a [`LoggedExtended`] (`X` is `()`), a variant
    /// that is never written and reads as an empty opaque item.
    Extended(X),
}

/// One history item as the log keeps it: only what replay and re-send
/// need, and what its provider gave beyond that.
///
/// Example: [the module](crate::schema#example).
pub type LoggedItem = LoggedItemOf<Box<LoggedExtended>>;
/// The archived [`LoggedItem`], read in place from a checked record.
///
/// Example: [the module](crate::schema#example).
pub type ArchivedLoggedItem = ArchivedLoggedItemOf<Box<LoggedExtended>>;
/// The typed item inside a [`LoggedExtended`]: a [`LoggedItem`] that
/// cannot hold another.
///
/// Example: [the module](crate::schema#example).
pub type LoggedCoreItem = LoggedItemOf<()>;
/// The archived [`LoggedCoreItem`].
///
/// Example: [the module](crate::schema#example).
pub type ArchivedLoggedCoreItem = ArchivedLoggedItemOf<()>;

/// A provider item's lifecycle status (schema 6).
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum LoggedStatus {
    /// `in_progress`.
    InProgress,
    /// `completed`.
    Completed,
    /// `incomplete`.
    Incomplete,
}

/// The wire form an extended item's diff was taken against (schema 6).
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum LoggedForm {
    /// The Responses API's items.
    Responses,
    /// The Messages API's content blocks.
    Anthropic,
}

/// See [`LoggedItem::Extended`].
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct LoggedExtended {
    /// The provider's item id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The provider's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LoggedStatus>,
    /// The wire form `flags` and `diff` are against; absent with neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<LoggedForm>,
    /// Shorthand flags of a Responses message (1: no `type`; 2: `content`
    /// given as a string).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flags: u8,
    /// The diff from the canonical form to the given one (see
    /// [`Extra`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_json_text"
    )]
    pub diff: Option<JsonText>,
    /// The typed item.
    pub item: LoggedCoreItem,
}

/// What the last variant of a [`LoggedItemOf`] holds: a
/// [`LoggedExtended`] in an entry's item, nothing in the item inside one.
///
/// Example: [the module](crate::schema#example).
pub trait ItemExtension: rkyv::Archive + Sized {
    /// The extension an archived item holds, if any.
    fn extended(archived: &Self::Archived) -> Option<&ArchivedLoggedExtended>;
    /// The runtime item an owned one stands for.
    fn into_item(self) -> Item;
    /// The bytes of its strings and JSON texts.
    fn text_len(&self) -> usize;
}

impl ItemExtension for () {
    fn extended(_: &()) -> Option<&ArchivedLoggedExtended> {
        None
    }

    /// Never written: read, it is an empty opaque item.
    fn into_item(self) -> Item {
        Item::Opaque {
            role: None,
            json: JsonText::empty_object(),
        }
    }

    fn text_len(&self) -> usize {
        0
    }
}

impl ItemExtension for Box<LoggedExtended> {
    fn extended(archived: &Self::Archived) -> Option<&ArchivedLoggedExtended> {
        Some(archived.get())
    }

    fn into_item(self) -> Item {
        let e = *self;
        let extra = match e.form {
            Some(form) => Extra::new(form.into(), e.flags, e.diff),
            None => Extra::NONE,
        };
        let mut item = e.item.into_item();
        item.set_provider_state(e.id, e.status.map(Into::into), extra);
        item
    }

    fn text_len(&self) -> usize {
        self.id.as_ref().map_or(0, String::len)
            + self.diff.as_ref().map_or(0, |d| d.as_str().len())
            + self.item.text_len()
    }
}

fn is_zero(flags: &u8) -> bool {
    *flags == 0
}

impl From<ItemStatus> for LoggedStatus {
    fn from(status: ItemStatus) -> Self {
        match status {
            ItemStatus::InProgress => LoggedStatus::InProgress,
            ItemStatus::Completed => LoggedStatus::Completed,
            ItemStatus::Incomplete => LoggedStatus::Incomplete,
        }
    }
}

impl From<LoggedStatus> for ItemStatus {
    fn from(status: LoggedStatus) -> Self {
        match status {
            LoggedStatus::InProgress => ItemStatus::InProgress,
            LoggedStatus::Completed => ItemStatus::Completed,
            LoggedStatus::Incomplete => ItemStatus::Incomplete,
        }
    }
}

impl From<WireForm> for LoggedForm {
    fn from(form: WireForm) -> Self {
        match form {
            WireForm::Responses => LoggedForm::Responses,
            WireForm::Anthropic => LoggedForm::Anthropic,
        }
    }
}

impl From<LoggedForm> for WireForm {
    fn from(form: LoggedForm) -> Self {
        match form {
            LoggedForm::Responses => WireForm::Responses,
            LoggedForm::Anthropic => WireForm::Anthropic,
        }
    }
}

impl ArchivedLoggedForm {
    /// The wire form.
    pub(crate) fn form(&self) -> WireForm {
        match self {
            ArchivedLoggedForm::Responses => WireForm::Responses,
            ArchivedLoggedForm::Anthropic => WireForm::Anthropic,
        }
    }
}

impl ArchivedLoggedStatus {
    /// The runtime status.
    pub(crate) fn status(&self) -> ItemStatus {
        match self {
            ArchivedLoggedStatus::InProgress => ItemStatus::InProgress,
            ArchivedLoggedStatus::Completed => ItemStatus::Completed,
            ArchivedLoggedStatus::Incomplete => ItemStatus::Incomplete,
        }
    }
}

/// Where an [`LoggedItem::External`](LoggedItemOf::External) item is: the BLAKE3 hash of its
/// archive (a `LoggedItem` archived alone) and that archive's length.
///
/// Example: [the module](crate::schema#example).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct LoggedPayloadRef {
    /// BLAKE3 of the payload's bytes.
    pub hash: [u8; 32],
    /// The payload's length in bytes.
    pub len: u64,
}

impl ArchivedLoggedPayloadRef {
    /// The owned reference.
    ///
    /// Example: [the `payload` module](crate::payload#example).
    pub fn to_ref(&self) -> LoggedPayloadRef {
        LoggedPayloadRef {
            hash: self.hash,
            len: self.len.to_native(),
        }
    }
}

impl From<Role> for LoggedRole {
    fn from(role: Role) -> Self {
        match role {
            Role::User => LoggedRole::User,
            Role::Assistant => LoggedRole::Assistant,
            Role::System => LoggedRole::System,
            Role::Developer => LoggedRole::Developer,
        }
    }
}

impl From<LoggedRole> for Role {
    fn from(role: LoggedRole) -> Self {
        match role {
            LoggedRole::User => Role::User,
            LoggedRole::Assistant => Role::Assistant,
            LoggedRole::System => Role::System,
            LoggedRole::Developer => Role::Developer,
        }
    }
}

impl From<&Item> for LoggedItem {
    fn from(item: &Item) -> Self {
        LoggedItem::from(item.clone())
    }
}

impl From<Item> for LoggedItem {
    fn from(mut item: Item) -> Self {
        let (id, status, extra) = item.take_provider_state();
        if id.is_none() && status.is_none() && extra.is_empty() {
            return LoggedItem::core_of(item);
        }
        let core = LoggedCoreItem::core_of(item);
        let view = extra.view();
        LoggedItem::Extended(Box::new(LoggedExtended {
            id,
            status: status.map(Into::into),
            form: view.form.map(Into::into),
            flags: view.flags,
            diff: extra.diff().cloned(),
            item: core,
        }))
    }
}

impl<X> LoggedItemOf<X> {
    /// The typed fields of `item`, whose id, status and extra are taken.
    fn core_of(item: Item) -> LoggedItemOf<X> {
        use LoggedItemOf as LoggedItem;
        match item {
            Item::Message { role, content, .. } => LoggedItem::Message {
                role: role.into(),
                content: logged_parts(content),
            },
            Item::ToolCall {
                call_id,
                name,
                arguments,
                ..
            } => LoggedItem::ToolCall {
                call_id,
                name,
                arguments,
            },
            Item::ToolResult {
                call_id,
                summary,
                content,
                ..
            } => LoggedItem::ToolResult {
                call_id,
                summary,
                content,
            },
            Item::Reasoning {
                text,
                summary,
                encrypted_content,
                ..
            } => LoggedItem::Reasoning {
                text,
                summary,
                encrypted_content,
            },
            Item::CustomToolCall {
                call_id,
                name,
                input,
                ..
            } => LoggedItem::CustomToolCall {
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
            } => LoggedItem::ToolOutput {
                call_id,
                output: output.map(|o| match o {
                    ToolOutput::Text(text) => LoggedToolOutput::Text(text),
                    ToolOutput::Parts(parts) => LoggedToolOutput::Parts(logged_parts(parts)),
                }),
                is_error,
                custom,
            },
            Item::ReasoningParts {
                summary,
                content,
                encrypted_content,
                ..
            } => LoggedItem::ReasoningParts {
                summary,
                content,
                encrypted_content,
            },
            Item::Thinking {
                extra: _,
                thinking,
                signature,
            } => LoggedItem::Thinking {
                thinking,
                signature,
            },
            Item::RedactedThinking { extra: _, data } => LoggedItem::RedactedThinking { data },
            Item::Opaque { role, json } => LoggedItem::Opaque {
                role: role.map(Into::into),
                json,
            },
        }
    }
}

impl LoggedItem {
    /// The item archived alone, into `buf` (emptied first): the bytes the
    /// payload area keeps of it.
    pub(crate) fn to_payload_in(&self, mut buf: rkyv::util::AlignedVec) -> rkyv::util::AlignedVec {
        buf.clear();
        // Room for the text and the item's fields, so that a large item is
        // archived without growing (and copying) the buffer on the way.
        buf.reserve(self.text_len() + 1024);
        // Archiving into memory fails only on allocation failure, which aborts anyway.
        rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(self, buf)
            .expect("archiving a LoggedItem into memory cannot fail")
    }
}

impl<X: ItemExtension> LoggedItemOf<X> {
    /// The runtime item, with the id, status and extra it was given.
    ///
    /// Example: [the module](crate::schema#example).
    pub fn into_item(self) -> Item {
        use LoggedItemOf as LoggedItem;
        match self {
            LoggedItem::Extended(e) => e.into_item(),
            LoggedItem::Message { role, content } => Item::Message {
                extra: Default::default(),
                id: None,
                role: role.into(),
                content: runtime_parts(content),
                status: None,
            },
            call @ (LoggedItem::ToolCall { .. }
            | LoggedItem::ToolResult { .. }
            | LoggedItem::CustomToolCall { .. }
            | LoggedItem::ToolOutput { .. }) => call.into_call_item(),
            reasoning @ (LoggedItem::Reasoning { .. }
            | LoggedItem::ReasoningParts { .. }
            | LoggedItem::Thinking { .. }
            | LoggedItem::RedactedThinking { .. }) => reasoning.into_reasoning_item(),
            LoggedItem::Opaque { role, json } => Item::Opaque {
                role: role.map(Into::into),
                json,
            },
            // Only a reader without the store's payload area sees one: the
            // store resolves every reference before it converts an item.
            LoggedItem::External(r) => Item::Opaque {
                role: None,
                json: JsonText(format!(
                    r#"{{"type":"session_store_payload","blake3":"{}","len":{}}}"#,
                    crate::chain::EntryHash(r.hash),
                    r.len
                )),
            },
        }
    }

    /// [`LoggedItemOf::into_item`] of a tool call or a tool's output.
    fn into_call_item(self) -> Item {
        use LoggedItemOf as LoggedItem;
        match self {
            LoggedItem::ToolCall {
                call_id,
                name,
                arguments,
            } => Item::ToolCall {
                extra: Default::default(),
                id: None,
                call_id,
                name,
                arguments,
                status: None,
            },
            LoggedItem::ToolResult {
                call_id,
                summary,
                content,
            } => Item::ToolResult {
                extra: Default::default(),
                id: None,
                call_id,
                summary,
                content,
            },
            LoggedItem::CustomToolCall {
                call_id,
                name,
                input,
            } => Item::CustomToolCall {
                extra: Default::default(),
                id: None,
                call_id,
                name,
                input,
                status: None,
            },
            LoggedItem::ToolOutput {
                call_id,
                output,
                is_error,
                custom,
            } => Item::ToolOutput {
                extra: Default::default(),
                id: None,
                call_id,
                output: output.map(|o| match o {
                    LoggedToolOutput::Text(text) => ToolOutput::Text(text),
                    LoggedToolOutput::Parts(parts) => ToolOutput::Parts(runtime_parts(parts)),
                }),
                is_error,
                custom,
                status: None,
            },
            _ => unreachable!("into_item gives into_call_item only calls and outputs"),
        }
    }

    /// [`LoggedItemOf::into_item`] of reasoning or thinking.
    fn into_reasoning_item(self) -> Item {
        use LoggedItemOf as LoggedItem;
        match self {
            LoggedItem::Reasoning {
                text,
                summary,
                encrypted_content,
            } => Item::Reasoning {
                extra: Default::default(),
                id: None,
                text,
                summary,
                encrypted_content,
                status: None,
            },
            LoggedItem::ReasoningParts {
                summary,
                content,
                encrypted_content,
            } => Item::ReasoningParts {
                extra: Default::default(),
                id: None,
                summary,
                content,
                encrypted_content,
                status: None,
            },
            LoggedItem::Thinking {
                thinking,
                signature,
            } => Item::Thinking {
                extra: Default::default(),
                thinking,
                signature,
            },
            LoggedItem::RedactedThinking { data } => Item::RedactedThinking {
                extra: Default::default(),
                data,
            },
            _ => unreachable!("into_item gives into_reasoning_item only reasoning and thinking"),
        }
    }
}
