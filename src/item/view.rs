//! Items read in place: an [`ItemView`] borrows the fields of a runtime
//! [`Item`] or of an archived record's item in a mapped log, and the wire
//! form writers walk either through one borrowed shape, so that a history
//! read from the log is written without an owned copy of each item first.

use rkyv::option::ArchivedOption;
use rkyv::string::ArchivedString;

use super::{ContentPart, ExtraView, Item, ItemStatus, Role, ToolOutput};
use crate::schema::{
    ArchivedLoggedContentPart, ArchivedLoggedItem, ArchivedLoggedItemOf, ArchivedLoggedRole,
    ArchivedLoggedToolOutput, ItemExtension,
};

/// One history item, borrowed: from a runtime [`Item`], or from a record of
/// a mapped log, checked (CRC, chain, archive) before it is handed out (see
/// [`Store::with_history_tail`](crate::Store::with_history_tail)).
///
/// Example: [`Store::with_history_tail`](crate::Store::with_history_tail).
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a>(Source<'a>);

#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Runtime(&'a Item),
    Stored(&'a ArchivedLoggedItem),
}

impl<'a> From<&'a Item> for ItemView<'a> {
    fn from(item: &'a Item) -> Self {
        ItemView(Source::Runtime(item))
    }
}

impl<'a> ItemView<'a> {
    /// A view of a stored item. Never of a reference to the store's payload
    /// area: the item it names is read and viewed instead.
    pub(crate) fn stored(item: &'a ArchivedLoggedItem) -> Self {
        debug_assert!(item.payload_ref().is_none());
        ItemView(Source::Stored(item))
    }
}

impl ItemView<'_> {
    /// The item, owned, with its id, status and extra.
    ///
    /// Example: [`Store::with_history_tail`](crate::Store::with_history_tail).
    pub fn to_item(&self) -> Item {
        match self.0 {
            Source::Runtime(item) => item.clone(),
            Source::Stored(item) => item.to_item(),
        }
    }
}

impl<'a> ItemView<'a> {
    /// What the provider gave beyond the typed fields: its id, status and
    /// extra, for a wire form writer.
    pub(crate) fn provider_state(&self) -> ProviderState<'a> {
        match self.0 {
            Source::Runtime(item) => {
                let (id, status) = match item {
                    Item::Message { id, status, .. }
                    | Item::ToolCall { id, status, .. }
                    | Item::Reasoning { id, status, .. }
                    | Item::CustomToolCall { id, status, .. }
                    | Item::ToolOutput { id, status, .. }
                    | Item::ReasoningParts { id, status, .. } => (id.as_deref(), *status),
                    Item::ToolResult { id, .. } => (id.as_deref(), None),
                    _ => (None, None),
                };
                ProviderState {
                    id,
                    status,
                    extra: item.extra().view(),
                }
            }
            Source::Stored(ArchivedLoggedItem::Extended(e)) => ProviderState {
                id: e.id.as_ref().map(|s| s.as_str()),
                status: e.status.as_ref().map(|s| s.status()),
                extra: ExtraView {
                    form: e.form.as_ref().map(|f| f.form()),
                    flags: e.flags,
                    diff: e.diff.as_ref().map(|d| d.as_str()),
                },
            },
            Source::Stored(_) => ProviderState::NONE,
        }
    }

    /// The item's fields, for a wire form writer.
    pub(crate) fn shape(&self) -> Shape<'a> {
        match self.0 {
            Source::Runtime(item) => runtime_shape(item),
            Source::Stored(item) => stored_shape(item),
        }
    }
}

/// An item's id, status and [`Extra`](super::Extra), borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProviderState<'a> {
    pub id: Option<&'a str>,
    pub status: Option<ItemStatus>,
    pub extra: ExtraView<'a>,
}

impl ProviderState<'_> {
    const NONE: ProviderState<'static> = ProviderState {
        id: None,
        status: None,
        extra: ExtraView::NONE,
    };
}

/// An item's fields as the wire forms read them, borrowed; the variants
/// are [`Item`]'s, without the ids and statuses no wire form writes.
pub(crate) enum Shape<'a> {
    Message {
        role: Role,
        content: Parts<'a>,
    },
    ToolCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    ToolResult {
        call_id: &'a str,
        summary: &'a str,
    },
    CustomToolCall {
        call_id: &'a str,
        name: &'a str,
        input: &'a str,
    },
    ToolOutput {
        call_id: &'a str,
        output: Option<Output<'a>>,
        is_error: Option<bool>,
        custom: bool,
    },
    Reasoning {
        text: &'a str,
        summary: Texts<'a>,
        encrypted_content: Option<&'a str>,
    },
    ReasoningParts {
        summary: Texts<'a>,
        content: Texts<'a>,
        encrypted_content: Option<&'a str>,
    },
    Thinking,
    RedactedThinking,
    Opaque {
        role: Option<Role>,
        json: &'a str,
    },
}

/// A tool's output: see [`ToolOutput`].
pub(crate) enum Output<'a> {
    Text(&'a str),
    Parts(Parts<'a>),
}

/// Content parts, borrowed.
#[derive(Clone, Copy)]
pub(crate) enum Parts<'a> {
    Runtime(&'a [ContentPart]),
    Stored(&'a [ArchivedLoggedContentPart]),
}

impl<'a> Parts<'a> {
    /// The text of the one part, when there is exactly one plain text part.
    pub fn only_text(&self) -> Option<&'a str> {
        match (self.len(), self.len().checked_sub(1).map(|i| self.get(i))) {
            (1, Some(Part::Text(text))) => Some(text),
            _ => None,
        }
    }

    /// How many parts.
    pub fn len(&self) -> usize {
        match self {
            Parts::Runtime(p) => p.len(),
            Parts::Stored(p) => p.len(),
        }
    }

    /// The `i`th part, `i` below [`Parts::len`].
    fn get(&self, i: usize) -> Part<'a> {
        match self {
            Parts::Runtime(p) => runtime_part(&p[i]),
            Parts::Stored(p) => stored_part(&p[i]),
        }
    }

    /// The parts, in order.
    pub fn iter(self) -> impl ExactSizeIterator<Item = Part<'a>> {
        (0..self.len()).map(move |i| self.get(i))
    }
}

/// One content part's fields: the variants are [`ContentPart`]'s.
pub(crate) enum Part<'a> {
    Text(&'a str),
    Refusal(&'a str),
    OutputText {
        text: &'a str,
        annotations: Option<&'a str>,
        logprobs: Option<&'a str>,
    },
    InputImage {
        image_url: Option<&'a str>,
        file_id: Option<&'a str>,
        detail: Option<&'a str>,
    },
    InputFile {
        file_id: Option<&'a str>,
        file_data: Option<&'a str>,
        filename: Option<&'a str>,
        file_url: Option<&'a str>,
    },
    InputAudio {
        data: &'a str,
        format: &'a str,
    },
    Opaque(&'a str),
}

/// A list of texts, borrowed.
#[derive(Clone, Copy)]
pub(crate) enum Texts<'a> {
    Runtime(&'a [String]),
    Stored(&'a [ArchivedString]),
    One(&'a str),
}

impl<'a> Texts<'a> {
    /// How many texts.
    pub fn len(&self) -> usize {
        match self {
            Texts::Runtime(t) => t.len(),
            Texts::Stored(t) => t.len(),
            Texts::One(_) => 1,
        }
    }

    /// The texts, in order.
    pub fn iter(self) -> impl ExactSizeIterator<Item = &'a str> {
        (0..self.len()).map(move |i| match self {
            Texts::Runtime(t) => t[i].as_str(),
            Texts::Stored(t) => t[i].as_str(),
            Texts::One(t) => t,
        })
    }
}

fn runtime_shape(item: &Item) -> Shape<'_> {
    match item {
        Item::Message { role, content, .. } => Shape::Message {
            role: *role,
            content: Parts::Runtime(content),
        },
        Item::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => Shape::ToolCall {
            call_id,
            name,
            arguments,
        },
        Item::ToolResult {
            call_id, summary, ..
        } => Shape::ToolResult { call_id, summary },
        Item::CustomToolCall {
            call_id,
            name,
            input,
            ..
        } => Shape::CustomToolCall {
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
        } => Shape::ToolOutput {
            call_id,
            output: output.as_ref().map(|o| match o {
                ToolOutput::Text(text) => Output::Text(text),
                ToolOutput::Parts(parts) => Output::Parts(Parts::Runtime(parts)),
            }),
            is_error: *is_error,
            custom: *custom,
        },
        Item::Reasoning {
            text,
            summary,
            encrypted_content,
            ..
        } => Shape::Reasoning {
            text,
            summary: Texts::Runtime(summary),
            encrypted_content: encrypted_content.as_deref(),
        },
        Item::ReasoningParts {
            summary,
            content,
            encrypted_content,
            ..
        } => Shape::ReasoningParts {
            summary: Texts::Runtime(summary),
            content: Texts::Runtime(content),
            encrypted_content: encrypted_content.as_deref(),
        },
        Item::Thinking { .. } => Shape::Thinking,
        Item::RedactedThinking { .. } => Shape::RedactedThinking,
        Item::Opaque { role, json } => Shape::Opaque {
            role: *role,
            json: json.as_str(),
        },
    }
}

fn stored_role(role: &ArchivedLoggedRole) -> Role {
    match role {
        ArchivedLoggedRole::User => Role::User,
        ArchivedLoggedRole::Assistant => Role::Assistant,
        ArchivedLoggedRole::System => Role::System,
        ArchivedLoggedRole::Developer => Role::Developer,
    }
}

fn stored_shape<X: ItemExtension>(item: &ArchivedLoggedItemOf<X>) -> Shape<'_> {
    use ArchivedLoggedItemOf as ArchivedLoggedItem;
    match item {
        ArchivedLoggedItem::Message { role, content } => Shape::Message {
            role: stored_role(role),
            content: Parts::Stored(content),
        },
        ArchivedLoggedItem::ToolCall {
            call_id,
            name,
            arguments,
        } => Shape::ToolCall {
            call_id,
            name,
            arguments,
        },
        ArchivedLoggedItem::ToolResult {
            call_id, summary, ..
        } => Shape::ToolResult { call_id, summary },
        ArchivedLoggedItem::CustomToolCall {
            call_id,
            name,
            input,
        } => Shape::CustomToolCall {
            call_id,
            name,
            input,
        },
        ArchivedLoggedItem::ToolOutput {
            call_id,
            output,
            is_error,
            custom,
        } => Shape::ToolOutput {
            call_id,
            output: output.as_ref().map(|o| match o {
                ArchivedLoggedToolOutput::Text(text) => Output::Text(text),
                ArchivedLoggedToolOutput::Parts(parts) => Output::Parts(Parts::Stored(parts)),
            }),
            is_error: is_error.as_ref().copied(),
            custom: *custom,
        },
        ArchivedLoggedItem::Reasoning {
            text,
            summary,
            encrypted_content,
        } => Shape::Reasoning {
            text,
            summary: Texts::Stored(summary),
            encrypted_content: opt(encrypted_content),
        },
        ArchivedLoggedItem::ReasoningParts {
            summary,
            content,
            encrypted_content,
        } => Shape::ReasoningParts {
            summary: Texts::Stored(summary),
            content: Texts::Stored(content),
            encrypted_content: opt(encrypted_content),
        },
        ArchivedLoggedItem::Thinking { .. } => Shape::Thinking,
        ArchivedLoggedItem::RedactedThinking { .. } => Shape::RedactedThinking,
        ArchivedLoggedItem::Opaque { role, json } => Shape::Opaque {
            role: role.as_ref().map(stored_role),
            json: json.as_str(),
        },
        // Views are made of the items references name, never of the
        // references (`ItemView::stored`); were one made, it would read as
        // an opaque item, as `ArchivedLoggedItem::to_item` gives it.
        ArchivedLoggedItem::Extended(x) => match X::extended(x) {
            Some(e) => stored_shape(&e.item),
            None => Shape::Opaque {
                role: None,
                json: "{}",
            },
        },
        ArchivedLoggedItem::External(_) => Shape::Opaque {
            role: None,
            json: r#"{"type":"session_store_payload"}"#,
        },
    }
}

fn runtime_part(part: &ContentPart) -> Part<'_> {
    match part {
        ContentPart::Text { text } => Part::Text(text),
        ContentPart::Refusal { refusal } => Part::Refusal(refusal),
        ContentPart::OutputText {
            text,
            annotations,
            logprobs,
        } => Part::OutputText {
            text,
            annotations: annotations.as_ref().map(|j| j.as_str()),
            logprobs: logprobs.as_ref().map(|j| j.as_str()),
        },
        ContentPart::InputImage {
            image_url,
            file_id,
            detail,
        } => Part::InputImage {
            image_url: image_url.as_deref(),
            file_id: file_id.as_deref(),
            detail: detail.as_deref(),
        },
        ContentPart::InputFile {
            file_id,
            file_data,
            filename,
            file_url,
        } => Part::InputFile {
            file_id: file_id.as_deref(),
            file_data: file_data.as_deref(),
            filename: filename.as_deref(),
            file_url: file_url.as_deref(),
        },
        ContentPart::InputAudio { data, format } => Part::InputAudio { data, format },
        ContentPart::Opaque { json } => Part::Opaque(json.as_str()),
    }
}

fn stored_part(part: &ArchivedLoggedContentPart) -> Part<'_> {
    match part {
        ArchivedLoggedContentPart::Text { text } => Part::Text(text),
        ArchivedLoggedContentPart::Refusal { refusal } => Part::Refusal(refusal),
        ArchivedLoggedContentPart::OutputText(p) => Part::OutputText {
            text: &p.text,
            annotations: p.annotations.as_ref().map(|j| j.as_str()),
            logprobs: p.logprobs.as_ref().map(|j| j.as_str()),
        },
        ArchivedLoggedContentPart::InputImage(p) => Part::InputImage {
            image_url: opt(&p.image_url),
            file_id: opt(&p.file_id),
            detail: opt(&p.detail),
        },
        ArchivedLoggedContentPart::InputFile(p) => Part::InputFile {
            file_id: opt(&p.file_id),
            file_data: opt(&p.file_data),
            filename: opt(&p.filename),
            file_url: opt(&p.file_url),
        },
        ArchivedLoggedContentPart::InputAudio(p) => Part::InputAudio {
            data: &p.data,
            format: &p.format,
        },
        ArchivedLoggedContentPart::Opaque { json } => Part::Opaque(json.as_str()),
    }
}

fn opt(s: &ArchivedOption<ArchivedString>) -> Option<&str> {
    s.as_ref().map(|s| s.as_str())
}
