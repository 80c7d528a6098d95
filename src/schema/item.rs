//! Logged items: the persistent mirror of the runtime's `Item` and its
//! content parts, with the converters both ways.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::item::{ContentPart, Item, Role, ToolOutput};

use super::{some_json_text, JsonText};

/// Author of a logged message.
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

// Schema 2 grows these enums only by variants added at the end whose archived
// form is no larger than the largest schema 1 variant, so that a schema 1
// archive is a schema 2 archive with the same meaning (see DESIGN.md, "Schema
// versions"); larger payloads are boxed. `archived_layout_is_schema_1s` pins it.

/// One content part of a logged message.
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
#[rkyv(derive(Debug))]
pub enum LoggedContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A refusal.
    Refusal {
        /// The refusal text.
        refusal: String,
    },
    /// Output text with annotations or logprobs (schema 2).
    OutputText(Box<LoggedOutputText>),
    /// A Responses `input_image` (schema 2).
    InputImage(Box<LoggedInputImage>),
    /// A Responses `input_file` (schema 2).
    InputFile(Box<LoggedInputFile>),
    /// A Responses `input_audio` (schema 2).
    InputAudio(Box<LoggedInputAudio>),
    /// A part kept as its JSON (schema 2).
    Opaque {
        /// The part's JSON object, byte for byte.
        json: JsonText,
    },
}

/// See [`ContentPart::OutputText`].
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
pub struct LoggedOutputText {
    /// The text.
    pub text: String,
    /// Annotations (or citations), as JSON.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_json_text"
    )]
    pub annotations: Option<JsonText>,
    /// Logprobs, as JSON.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_json_text"
    )]
    pub logprobs: Option<JsonText>,
}

/// See [`ContentPart::InputImage`].
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
pub struct LoggedInputImage {
    /// A URL or a `data:` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// An uploaded file's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    /// `low`, `high` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// See [`ContentPart::InputFile`].
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
pub struct LoggedInputFile {
    /// An uploaded file's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    /// The content, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<String>,
    /// The file name sent with `file_data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// A URL of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_url: Option<String>,
}

/// See [`ContentPart::InputAudio`].
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
pub struct LoggedInputAudio {
    /// The audio, base64.
    pub data: String,
    /// Its format.
    pub format: String,
}

/// What a tool returned (schema 2): text or a list of parts.
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
#[serde(untagged)]
#[rkyv(derive(Debug))]
pub enum LoggedToolOutput {
    /// Text.
    Text(String),
    /// Content parts.
    Parts(Vec<LoggedContentPart>),
}

/// One history item as the log keeps it: only what replay and re-send need.
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
#[rkyv(derive(Debug))]
pub enum LoggedItem {
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
}

/// Where an [`LoggedItem::External`] item is: the BLAKE3 hash of its
/// archive (a `LoggedItem` archived alone) and that archive's length.
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

impl From<ContentPart> for LoggedContentPart {
    fn from(part: ContentPart) -> Self {
        match part {
            ContentPart::Text { text } => LoggedContentPart::Text { text },
            ContentPart::Refusal { refusal } => LoggedContentPart::Refusal { refusal },
            ContentPart::OutputText {
                text,
                annotations,
                logprobs,
            } => LoggedContentPart::OutputText(Box::new(LoggedOutputText {
                text,
                annotations,
                logprobs,
            })),
            ContentPart::InputImage {
                image_url,
                file_id,
                detail,
            } => LoggedContentPart::InputImage(Box::new(LoggedInputImage {
                image_url,
                file_id,
                detail,
            })),
            ContentPart::InputFile {
                file_id,
                file_data,
                filename,
                file_url,
            } => LoggedContentPart::InputFile(Box::new(LoggedInputFile {
                file_id,
                file_data,
                filename,
                file_url,
            })),
            ContentPart::InputAudio { data, format } => {
                LoggedContentPart::InputAudio(Box::new(LoggedInputAudio { data, format }))
            }
            ContentPart::Opaque { json } => LoggedContentPart::Opaque { json },
        }
    }
}

impl LoggedContentPart {
    /// The runtime content part.
    pub fn into_part(self) -> ContentPart {
        match self {
            LoggedContentPart::Text { text } => ContentPart::Text { text },
            LoggedContentPart::Refusal { refusal } => ContentPart::Refusal { refusal },
            LoggedContentPart::OutputText(p) => ContentPart::OutputText {
                text: p.text,
                annotations: p.annotations,
                logprobs: p.logprobs,
            },
            LoggedContentPart::InputImage(p) => ContentPart::InputImage {
                image_url: p.image_url,
                file_id: p.file_id,
                detail: p.detail,
            },
            LoggedContentPart::InputFile(p) => ContentPart::InputFile {
                file_id: p.file_id,
                file_data: p.file_data,
                filename: p.filename,
                file_url: p.file_url,
            },
            LoggedContentPart::InputAudio(p) => ContentPart::InputAudio {
                data: p.data,
                format: p.format,
            },
            LoggedContentPart::Opaque { json } => ContentPart::Opaque { json },
        }
    }
}

fn logged_parts(parts: Vec<ContentPart>) -> Vec<LoggedContentPart> {
    parts.into_iter().map(Into::into).collect()
}

fn runtime_parts(parts: Vec<LoggedContentPart>) -> Vec<ContentPart> {
    parts
        .into_iter()
        .map(LoggedContentPart::into_part)
        .collect()
}

impl From<&Item> for LoggedItem {
    fn from(item: &Item) -> Self {
        LoggedItem::from(item.clone())
    }
}

impl From<Item> for LoggedItem {
    fn from(item: Item) -> Self {
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
                thinking,
                signature,
            } => LoggedItem::Thinking {
                thinking,
                signature,
            },
            Item::RedactedThinking { data } => LoggedItem::RedactedThinking { data },
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

    /// The runtime item. Ids and statuses come back as `None`.
    pub fn into_item(self) -> Item {
        match self {
            LoggedItem::Message { role, content } => Item::Message {
                id: None,
                role: role.into(),
                content: runtime_parts(content),
                status: None,
            },
            LoggedItem::ToolCall {
                call_id,
                name,
                arguments,
            } => Item::ToolCall {
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
                id: None,
                call_id,
                summary,
                content,
            },
            LoggedItem::Reasoning {
                text,
                summary,
                encrypted_content,
            } => Item::Reasoning {
                id: None,
                text,
                summary,
                encrypted_content,
                status: None,
            },
            LoggedItem::CustomToolCall {
                call_id,
                name,
                input,
            } => Item::CustomToolCall {
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
            LoggedItem::ReasoningParts {
                summary,
                content,
                encrypted_content,
            } => Item::ReasoningParts {
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
                thinking,
                signature,
            },
            LoggedItem::RedactedThinking { data } => Item::RedactedThinking { data },
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
}

impl ArchivedLoggedItem {
    /// The payload this item refers to, if it is stored in the payload area.
    pub fn payload_ref(&self) -> Option<LoggedPayloadRef> {
        match self {
            ArchivedLoggedItem::External(r) => Some(r.get().to_ref()),
            _ => None,
        }
    }

    /// The runtime item, from the archived bytes.
    pub fn to_item(&self) -> Item {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LoggedItem, rkyv::rancor::Error>(self)
            .expect("deserializing a validated archive cannot fail")
            .into_item()
    }

    /// The concatenated text of a message, borrowed parts joined.
    pub fn message_text(&self) -> Option<String> {
        match self {
            ArchivedLoggedItem::Message { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|p| match p {
                        ArchivedLoggedContentPart::Text { text } => Some(text.as_str()),
                        ArchivedLoggedContentPart::OutputText(p) => Some(p.text.as_str()),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Hands `check` every JSON text the archived item holds, in order, up
    /// to its first failure: they must be valid JSON so that what is read
    /// can be exported. (A read checks every item it reads, so this
    /// allocates nothing.)
    pub(crate) fn check_json_texts<E>(
        &self,
        mut check: impl FnMut(&str) -> Result<(), E>,
    ) -> Result<(), E> {
        let parts = match self {
            ArchivedLoggedItem::Message { content, .. } => content.as_slice(),
            ArchivedLoggedItem::ToolOutput { output, .. } => match output.as_ref() {
                Some(ArchivedLoggedToolOutput::Parts(parts)) => parts.as_slice(),
                _ => &[],
            },
            ArchivedLoggedItem::Opaque { json, .. } => return check(json.as_str()),
            _ => &[],
        };
        for part in parts {
            match part {
                ArchivedLoggedContentPart::OutputText(p) => {
                    for json in p
                        .annotations
                        .as_ref()
                        .into_iter()
                        .chain(p.logprobs.as_ref())
                    {
                        check(json.as_str())?;
                    }
                }
                ArchivedLoggedContentPart::Opaque { json } => check(json.as_str())?,
                _ => {}
            }
        }
        Ok(())
    }
}
