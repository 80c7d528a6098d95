//! The content parts of a logged message and what a tool returned: the
//! persistent mirror of the runtime's `ContentPart` and `ToolOutput`, with
//! the converters both ways.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::item::ContentPart;

use super::{some_json_text, JsonText};

// Schema 2 grows these enums (and `LoggedItemOf`) only by variants added at the end whose archived
// form is no larger than the largest schema 1 variant, so that a schema 1
// archive is a schema 2 archive with the same meaning (see DESIGN.md, "Schema
// versions"); larger payloads are boxed. `archived_layout_is_schema_1s` pins it.

/// One content part of a logged message.
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
pub struct LoggedInputAudio {
    /// The audio, base64.
    pub data: String,
    /// Its format.
    pub format: String,
}

/// What a tool returned (schema 2): text or a list of parts.
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
#[serde(untagged)]
#[rkyv(derive(Debug))]
pub enum LoggedToolOutput {
    /// Text.
    Text(String),
    /// Content parts.
    Parts(Vec<LoggedContentPart>),
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
    ///
    /// Example: [the module](crate::schema#example).
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

pub(super) fn logged_parts(parts: Vec<ContentPart>) -> Vec<LoggedContentPart> {
    parts.into_iter().map(Into::into).collect()
}

pub(super) fn runtime_parts(parts: Vec<LoggedContentPart>) -> Vec<ContentPart> {
    parts
        .into_iter()
        .map(LoggedContentPart::into_part)
        .collect()
}
