//! The log's own persistent schema, decoupled from the runtime [`Item`].
//!
//! Every type here derives rkyv (validated with bytecheck) for storage and
//! serde (`tag = "kind"`, snake_case) for the JSON wire form. Provider item ids
//! and statuses of typed items are dropped on the way in; `encrypted_content`,
//! signatures and opaque items are kept byte for byte, since stateless re-send
//! needs them.

// rkyv's derived `Archived*` enums carry fields that cannot take doc comments;
// every item written by hand here is documented.
#![allow(missing_docs)]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::item::{ContentPart, Item, Role, ToolOutput};

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
        }
    }
}

impl ArchivedLoggedItem {
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

    /// Every JSON text the archived item holds: they must be valid JSON so
    /// that what is read can be exported.
    fn json_texts(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let parts = match self {
            ArchivedLoggedItem::Message { content, .. } => content.as_slice(),
            ArchivedLoggedItem::ToolOutput { output, .. } => match output.as_ref() {
                Some(ArchivedLoggedToolOutput::Parts(parts)) => parts.as_slice(),
                _ => &[],
            },
            ArchivedLoggedItem::Opaque { json, .. } => return vec![json.as_str()],
            _ => &[],
        };
        for part in parts {
            match part {
                ArchivedLoggedContentPart::OutputText(p) => out.extend(
                    p.annotations
                        .as_ref()
                        .into_iter()
                        .chain(p.logprobs.as_ref())
                        .map(|j| j.as_str()),
                ),
                ArchivedLoggedContentPart::Opaque { json } => out.push(json.as_str()),
                _ => {}
            }
        }
        out
    }
}

/// Arbitrary JSON, kept as compact JSON text inside the archive and shown as
/// real JSON (never an escaped string) in the wire form.
///
/// The text is canonicalised once, on construction: whitespace outside strings
/// is removed; key order and number spelling are kept exactly, so no value is
/// ever rounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct JsonText(String);

impl JsonText {
    /// Validates `text` as JSON and keeps its compact form.
    pub fn parse(text: &str) -> Result<JsonText> {
        serde_json::from_str::<&serde_json::value::RawValue>(text)
            .map_err(|e| Error::invalid(format!("not valid JSON: {e}")))?;
        Ok(JsonText(minify(text)))
    }

    /// From a JSON value.
    pub fn from_value(value: &serde_json::Value) -> JsonText {
        JsonText(value.to_string())
    }

    /// The empty object `{}`.
    pub fn empty_object() -> JsonText {
        JsonText("{}".to_string())
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parsed into a value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl ArchivedJsonText {
    /// The JSON text as stored.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// Drops whitespace outside string literals. The input is known-valid JSON.
fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

/// Goes through a `serde_json::Value`, because every `JsonText` sits inside an
/// internally tagged enum, which serde buffers, and a buffer cannot hand out a
/// `RawValue`. The buffer keeps the value but not its spelling (key order,
/// number form); [`crate::export::parse_line`] puts the original text back.
impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(|value| JsonText::from_value(&value))
    }
}

/// `Some` even for a JSON `null`, which is what `Some(JsonText("null"))` is
/// written as; an absent field is `None` through `#[serde(default)]`.
fn some_json_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<JsonText>, D::Error> {
    JsonText::deserialize(d).map(Some)
}

/// Model request settings in force for a session.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Default,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct RequestConfig {
    /// Model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Output token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Reasoning effort ("low", "medium", "high", …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Anything else, as a JSON object.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_json_text"
    )]
    pub extra: Option<JsonText>,
}

impl RequestConfig {
    /// A config naming only the model.
    pub fn model(model: impl Into<String>) -> RequestConfig {
        RequestConfig {
            model: Some(model.into()),
            ..RequestConfig::default()
        }
    }
}

impl ArchivedRequestConfig {
    /// The owned config.
    pub fn to_owned_config(&self) -> RequestConfig {
        RequestConfig {
            model: self.model.as_ref().map(|s| s.as_str().to_owned()),
            temperature: self.temperature.as_ref().map(|v| v.to_native()),
            top_p: self.top_p.as_ref().map(|v| v.to_native()),
            max_output_tokens: self.max_output_tokens.as_ref().map(|v| v.to_native()),
            reasoning_effort: self
                .reasoning_effort
                .as_ref()
                .map(|s| s.as_str().to_owned()),
            extra: self.extra.as_ref().map(|j| JsonText(j.as_str().to_owned())),
        }
    }
}

/// A session id: a UUID (v7 for ids this crate makes, so they sort by creation time).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct SessionId(pub [u8; 16]);

impl SessionId {
    /// A fresh UUID v7.
    pub fn new_v7() -> SessionId {
        SessionId(*uuid::Uuid::now_v7().as_bytes())
    }

    /// The UUID.
    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }

    /// Milliseconds since the Unix epoch encoded in a v7 id.
    pub fn created_ms(&self) -> Option<u64> {
        let ts = self.uuid().get_timestamp()?;
        let (secs, nanos) = ts.to_unix();
        Some(secs * 1000 + u64::from(nanos) / 1_000_000)
    }
}

impl ArchivedSessionId {
    /// The owned id.
    pub fn get(&self) -> SessionId {
        SessionId(self.0)
    }
}

impl FromStr for SessionId {
    type Err = Error;

    /// Accepts only the canonical hyphenated lowercase form, so that an id maps
    /// to exactly one directory name. Anything else (paths, NUL, long strings)
    /// is `InvalidInput`.
    fn from_str(s: &str) -> Result<Self> {
        let shown: String = s.chars().take(48).collect();
        if s.len() != 36 {
            return Err(Error::invalid(format!(
                "session id {shown:?} is not a UUID"
            )));
        }
        let uuid = uuid::Uuid::try_parse(s)
            .map_err(|_| Error::invalid(format!("session id {shown:?} is not a UUID")))?;
        if uuid.hyphenated().to_string() != s {
            return Err(Error::invalid(format!(
                "session id {shown:?} is not in canonical lowercase form"
            )));
        }
        Ok(SessionId(*uuid.as_bytes()))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uuid().hyphenated(), f)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a session came from: a session and the hash of the entry it branched at.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct SessionOrigin {
    /// The source session.
    pub session_id: SessionId,
    /// The hash of the last source entry the new session includes.
    pub at_hash: EntryHash,
}

impl ArchivedSessionOrigin {
    /// The owned origin.
    pub fn get(&self) -> SessionOrigin {
        SessionOrigin {
            session_id: self.session_id.get(),
            at_hash: self.at_hash.get(),
        }
    }
}

/// What a finished run returned.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct WorkerResult {
    /// The final text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Why the run stopped ("end_turn", "max_tokens", …).
    pub stop_reason: String,
}

/// One log entry. Every variant carries `ts`, milliseconds since the Unix epoch.
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
    /// Starts a session, or restarts its history after a compaction or fork.
    SessionStart {
        /// Timestamp, ms.
        ts: u64,
        /// The system prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_prompt: Option<String>,
        /// Request settings.
        config: RequestConfig,
        /// The history this session starts with (replaces any before).
        history: Vec<LoggedItem>,
        /// Set when this session is a fork.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forked_from: Option<SessionOrigin>,
        /// Set when this session is a compaction.
        #[serde(default, skip_serializing_if = "Option::is_none")]
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
}

/// The kind of an entry, as stored in each record header so that readers can
/// filter without decoding the payload.
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
}

impl EntryKind {
    /// From the header byte.
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
            _ => return None,
        })
    }

    /// The snake_case name used in the wire form.
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
        }
    }
}

impl LogEntry {
    /// The entry's kind.
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
        }
    }

    /// The timestamp, ms since the Unix epoch.
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
            | LogEntry::Extension { ts, .. } => *ts,
        }
    }

    /// The history items this entry carries, in order.
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

    /// Checks what the log cannot keep faithfully: non-finite floats (the
    /// JSON wire form has no spelling for them, so they would not survive an
    /// export).
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
        let items = archived.items().iter().flat_map(|i| i.json_texts());
        for text in json.into_iter().chain(items) {
            serde_json::from_str::<serde::de::IgnoredAny>(text)
                .map_err(|e| format!("JSON payload is not valid JSON: {e}"))?;
        }
        Ok(archived)
    }

    /// Validates and deserializes archived bytes.
    pub fn from_archive(bytes: &[u8]) -> std::result::Result<LogEntry, String> {
        let archived = LogEntry::access_archive(bytes)?;
        rkyv::deserialize::<LogEntry, rkyv::rancor::Error>(archived).map_err(|e| e.to_string())
    }
}

impl ArchivedLogEntry {
    /// The owned entry.
    pub fn to_entry(&self) -> LogEntry {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LogEntry, rkyv::rancor::Error>(self)
            .expect("deserializing a validated archive cannot fail")
    }

    /// The items this entry carries, archived, in order.
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

/// Groups new history items into entries, with the seed's rules:
/// each user message is one `UserInput`; a run of tool results is one
/// `ToolResults`; a run of assistant messages, tool calls and reasoning is one
/// `AssistantItems`; anything else (system messages) is one
/// `HookInjectedItems` each. Order is kept exactly.
pub fn group_delta(items: &[Item], ts: u64) -> Vec<LogEntry> {
    #[derive(PartialEq)]
    enum Run {
        Assistant,
        Tools,
    }
    let mut out = Vec::new();
    let mut run: Option<(Run, Vec<LoggedItem>)> = None;
    let flush = |run: &mut Option<(Run, Vec<LoggedItem>)>, out: &mut Vec<LogEntry>| {
        if let Some((kind, items)) = run.take() {
            out.push(match kind {
                Run::Assistant => LogEntry::AssistantItems { ts, items },
                Run::Tools => LogEntry::ToolResults { ts, items },
            });
        }
    };
    for item in items {
        let wanted = if item.is_assistant_output() {
            Some(Run::Assistant)
        } else if item.is_tool_result() {
            Some(Run::Tools)
        } else {
            None
        };
        match wanted {
            Some(kind) => {
                if run.as_ref().is_some_and(|(k, _)| *k != kind) {
                    flush(&mut run, &mut out);
                }
                run.get_or_insert_with(|| (kind, Vec::new()))
                    .1
                    .push(item.into());
            }
            None => {
                flush(&mut run, &mut out);
                let item = LoggedItem::from(item);
                out.push(
                    if matches!(
                        item,
                        LoggedItem::Message {
                            role: LoggedRole::User,
                            ..
                        }
                    ) {
                        LogEntry::UserInput { ts, item }
                    } else {
                        LogEntry::HookInjectedItems {
                            ts,
                            items: vec![item],
                        }
                    },
                );
            }
        }
    }
    flush(&mut run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Schema 2 reads schema 1 archives as they are only while these sizes and
    /// alignments hold: a `Vec` of items or parts strides by them, and rkyv
    /// finds the root entry at the end of the payload by its size.
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
            (232, 8)
        );
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
