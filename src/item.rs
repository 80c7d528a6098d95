//! The runtime's in-memory conversation model.
//!
//! This stands in for the embedding agent runtime's own `Item` type. The log
//! never stores it directly: [`crate::schema::LoggedItem`] is the persistent
//! form, and converters sit at the edge.
//!
//! The model covers every item and content part of the OpenAI Responses API
//! and of the Anthropic Messages API: the ones the crate needs to understand
//! (messages, calls and their outputs, reasoning and thinking) are typed, and
//! everything else is kept as its JSON, byte for byte ([`Item::Opaque`],
//! [`ContentPart::Opaque`]). The two wire forms sit in [`responses`] and
//! [`anthropic`].

pub mod anthropic;
mod extra;
mod fields;
pub mod responses;
mod tree;
mod view;

pub(crate) use extra::ExtraView;
pub use extra::{Extra, WireForm};
pub use tree::{JsonSink, JsonTree, TreeSink};
pub use view::ItemView;

use serde::{Deserialize, Serialize};

use crate::json::JsonText;

/// The form a writer gives items in: a read-time choice, since the log
/// keeps every item as it was given.
///
/// ```
/// use session_store::{Form, Item};
/// # fn main() -> session_store::Result<()> {
/// let given = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB+/=="}"#;
/// let item = Item::from_responses_json(given)?;
/// assert_eq!(item.to_responses_json(Form::AsStored)?, given);
/// // The provider dropped `rs_1` after the response: re-send without it.
/// let resend = r#"{"type":"reasoning","summary":[],"encrypted_content":"gAAAAB+/=="}"#;
/// assert_eq!(item.to_responses_json(Form::Resend)?, resend);
/// assert_eq!(item.without_provider_state().to_responses_json(Form::AsStored)?, resend);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// As the runtime gave them: ids, statuses and every field the provider
    /// added, JSON-equal to what was saved.
    AsStored,
    /// Ready for a stateless re-send: as stored, less provider item ids and
    /// statuses, which a provider that no longer keeps the item refuses
    /// ("Item with id 'rs_…' not found"). Fields the provider added stay.
    Resend,
}

/// Who authored a message.
///
/// Example: [`Item`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The human (or the program acting for one).
    User,
    /// The model.
    Assistant,
    /// The runtime itself: system prompts and hook-injected notes.
    System,
    /// Instructions from the developer (the Responses API's `developer` role).
    Developer,
}

/// Provider-side lifecycle state of an item: kept, and left out of the
/// re-send form ([`Form::Resend`]).
///
/// Example: [`Item`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Still streaming.
    InProgress,
    /// Finished normally.
    Completed,
    /// Cut short (token limit, interruption).
    Incomplete,
}

/// One part of a message's content.
///
/// Example: [`Item`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A refusal by the model.
    Refusal {
        /// The refusal text.
        refusal: String,
    },
    /// Model output text with what plain [`ContentPart::Text`] cannot hold:
    /// a Responses `output_text` with annotations other than `[]` or with
    /// logprobs, or an Anthropic `text` block with `citations`.
    OutputText {
        /// The text.
        text: String,
        /// Responses `annotations`, or Anthropic `citations`, as JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<JsonText>,
        /// Responses `logprobs`, as JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logprobs: Option<JsonText>,
    },
    /// A Responses `input_image`.
    InputImage {
        /// `image_url`: a URL, or the image itself as a `data:` URL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image_url: Option<String>,
        /// `file_id` of an uploaded file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_id: Option<String>,
        /// `detail`: `low`, `high` or `auto`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A Responses `input_file`.
    InputFile {
        /// `file_id` of an uploaded file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_id: Option<String>,
        /// `file_data`: the content, base64, usually as a `data:` URL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_data: Option<String>,
        /// `filename`, sent with `file_data`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
        /// `file_url`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_url: Option<String>,
    },
    /// A Responses `input_audio`.
    InputAudio {
        /// The audio, base64.
        data: String,
        /// Its format (`mp3`, `wav`).
        format: String,
    },
    /// A content part this model does not type (an Anthropic `image` or
    /// `document` block, a part type added after this crate), kept as its
    /// JSON object, byte for byte.
    Opaque {
        /// The part's JSON object, `type` included.
        json: JsonText,
    },
}

/// What a tool returned, as the model sees it.
///
/// Example: [`Item`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolOutput {
    /// Text.
    Text(String),
    /// A list of content parts (text, images, files).
    Parts(Vec<ContentPart>),
}

/// One item of conversation history, as the runtime holds it.
///
/// ```
/// use session_store::{CallLink, Item, Role};
/// # fn main() -> session_store::Result<()> {
/// let question = Item::user_text("Is port 8080 free?");
/// let call = Item::from_responses_json(r#"{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"cmd\":\"lsof -i :8080\"}"}"#)?;
/// let answer = Item::assistant_text("Yes: nothing listens on it.");
///
/// assert_eq!(question.role(), Some(Role::User));
/// assert!(question.is_user_message() && answer.is_assistant_message());
/// assert!(call.is_tool_call() && call.is_assistant_output() && !call.is_reasoning());
/// assert_eq!(call.call_link(), Some(CallLink::Call("call_1".into())));
/// assert_eq!(call.call_id(), Some("call_1"));
/// assert_eq!(answer.text().as_deref(), Some("Yes: nothing listens on it."));
/// assert!(call.extra().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    /// A message from the user, the assistant or the system.
    Message {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The author.
        role: Role,
        /// The content parts, in order.
        content: Vec<ContentPart>,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// A function/tool call made by the model.
    ToolCall {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Pairs the call with its result.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments, as JSON text exactly as the model produced them.
        arguments: String,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// The text result of running a function tool.
    ///
    /// `summary` is what the model sees: it is the Responses
    /// `function_call_output`'s `output` and the Anthropic `tool_result`'s
    /// `content`. `content` is the runtime's own copy of the full output (for
    /// display, or to expand later); it is stored, but never sent, so the wire
    /// forms leave it out. Outputs with parts, `is_error` or for a custom tool
    /// are [`Item::ToolOutput`].
    ToolResult {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The `call_id` of the call this answers.
        call_id: String,
        /// The output the model sees.
        summary: String,
        /// The full output, kept for the runtime and never sent to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// A reasoning item, possibly carrying opaque encrypted state.
    Reasoning {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Visible reasoning text.
        text: String,
        /// Reasoning summaries.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// Opaque provider state for stateless re-send; must round-trip byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// A Responses `custom_tool_call`: a call with free-form text input.
    CustomToolCall {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Pairs the call with its output.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The input, byte for byte as the model produced it.
        input: String,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// A tool's output in full: a list of parts, an error flag, or the output
    /// of a custom tool call. The whole `output` is what the model sees.
    ToolOutput {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The `call_id` of the call this answers.
        call_id: String,
        /// The output; `None` for an Anthropic `tool_result` without content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<ToolOutput>,
        /// Anthropic `is_error`, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        /// Answers a custom tool call (a Responses `custom_tool_call_output`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        custom: bool,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// A Responses `reasoning` item that [`Item::Reasoning`] cannot hold: a
    /// `content` list that is present but not exactly one non-empty part.
    ReasoningParts {
        /// Provider item id: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Summary texts, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// Reasoning texts, in order.
        content: Vec<String>,
        /// Opaque provider state, byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        /// Provider status: kept, and left out of the re-send form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// An Anthropic `thinking` block.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The signature that lets the provider verify it, byte for byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// An Anthropic `redacted_thinking` block.
    RedactedThinking {
        /// The encrypted thinking, byte for byte.
        data: String,
        /// What the provider's item carried beyond these fields, kept so
        /// that it is written back as given (see [`Extra`]).
        #[serde(default, skip_serializing_if = "Extra::is_empty")]
        extra: Extra,
    },
    /// An item this model does not type, kept as its JSON, byte for byte, ids
    /// and statuses included: a Responses item (hosted tool calls, MCP items,
    /// types added later) when `role` is `None`, or an Anthropic content block
    /// (server tool use and results, …) of a message of `role`.
    Opaque {
        /// The side of an Anthropic block; `None` for a Responses item.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<Role>,
        /// The item's JSON object, `type` included.
        json: JsonText,
    },
}

impl Item {
    /// A user message with one text part.
    ///
    /// ```
    /// use session_store::{ContentPart, Item, Role};
    /// let item = Item::user_text("Rename `foo` to `bar`.");
    /// assert_eq!(item, Item::message(Role::User, "Rename `foo` to `bar`."));
    /// let Item::Message { content, .. } = &item else { unreachable!() };
    /// assert_eq!(content, &[ContentPart::Text { text: "Rename `foo` to `bar`.".into() }]);
    /// ```
    pub fn user_text(text: impl Into<String>) -> Item {
        Item::message(Role::User, text)
    }

    /// An assistant message with one text part.
    ///
    /// Example: [`Item`].
    pub fn assistant_text(text: impl Into<String>) -> Item {
        Item::message(Role::Assistant, text)
    }

    /// A system message with one text part.
    ///
    /// Example: [`Item`].
    pub fn system_text(text: impl Into<String>) -> Item {
        Item::message(Role::System, text)
    }

    /// A message with one text part and no id or status.
    ///
    /// Example: [`Item`].
    pub fn message(role: Role, text: impl Into<String>) -> Item {
        Item::Message {
            extra: Default::default(),
            id: None,
            role,
            content: vec![ContentPart::Text { text: text.into() }],
            status: None,
        }
    }

    /// A function tool call with no id or status: `arguments` is the JSON
    /// text exactly as the model produced it.
    ///
    /// ```
    /// use session_store::Item;
    /// let call = Item::tool_call("call_1", "read_file", r#"{"path":"src/lib.rs"}"#);
    /// let output = Item::tool_output("call_1", "pub mod store;");
    /// assert_eq!(call.call_id(), output.call_id());
    /// ```
    pub fn tool_call(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Item {
        Item::ToolCall {
            id: None,
            call_id: call_id.into(),
            name: name.into(),
            arguments: arguments.into(),
            status: None,
            extra: Default::default(),
        }
    }

    /// The text output of a function tool call (a Responses
    /// `function_call_output`), with no id or status.
    ///
    /// Example: [`Item::tool_call`].
    pub fn tool_output(call_id: impl Into<String>, text: impl Into<String>) -> Item {
        Item::ToolOutput {
            id: None,
            call_id: call_id.into(),
            output: Some(ToolOutput::Text(text.into())),
            is_error: None,
            custom: false,
            status: None,
            extra: Default::default(),
        }
    }

    /// The role, for messages.
    ///
    /// Example: [`Item`].
    pub fn role(&self) -> Option<Role> {
        match self {
            Item::Message { role, .. } => Some(*role),
            _ => None,
        }
    }

    /// A message authored by the user.
    ///
    /// Example: [`Item`].
    pub fn is_user_message(&self) -> bool {
        self.role() == Some(Role::User)
    }

    /// A message authored by the assistant.
    ///
    /// Example: [`Item`].
    pub fn is_assistant_message(&self) -> bool {
        self.role() == Some(Role::Assistant)
    }

    /// A message authored by the system (or a hook).
    ///
    /// Example: [`Item`].
    pub fn is_system_message(&self) -> bool {
        self.role() == Some(Role::System)
    }

    /// A call the model made: a function or custom tool call, or an opaque
    /// item that carries a call id and is not an output.
    ///
    /// Example: [`Item`].
    pub fn is_tool_call(&self) -> bool {
        self.links_as(true)
    }

    /// The output of a call: a tool result or output, or an opaque item that
    /// answers a call id.
    ///
    /// Example: [`Item`].
    pub fn is_tool_result(&self) -> bool {
        self.links_as(false)
    }

    /// Whether [`Item::call_link`] is a call (`call`) or an output (not
    /// `call`), without copying a typed item's call id.
    fn links_as(&self, call: bool) -> bool {
        match self {
            Item::ToolCall { .. } | Item::CustomToolCall { .. } => call,
            Item::ToolResult { .. } | Item::ToolOutput { .. } => !call,
            Item::Opaque { .. } => match self.call_link() {
                Some(CallLink::Call(_)) => call,
                Some(CallLink::Output(_)) => !call,
                None => false,
            },
            _ => false,
        }
    }

    /// Reasoning or thinking, in any of its forms.
    ///
    /// Example: [`Item`].
    pub fn is_reasoning(&self) -> bool {
        matches!(
            self,
            Item::Reasoning { .. }
                | Item::ReasoningParts { .. }
                | Item::Thinking { .. }
                | Item::RedactedThinking { .. }
        )
    }

    /// Produced by the model in its turn: assistant messages, calls,
    /// reasoning, and opaque items that are not on the user's side and are not
    /// outputs (hosted tool calls, server tool blocks).
    ///
    /// Example: [`Item`].
    pub fn is_assistant_output(&self) -> bool {
        match self {
            Item::Opaque { role, .. } => *role != Some(Role::User) && !self.links_as(false),
            _ => self.is_assistant_message() || self.is_tool_call() || self.is_reasoning(),
        }
    }

    /// The `call_id` of a typed call or output.
    ///
    /// Example: [`Item`].
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Item::ToolCall { call_id, .. }
            | Item::ToolResult { call_id, .. }
            | Item::CustomToolCall { call_id, .. }
            | Item::ToolOutput { call_id, .. } => Some(call_id),
            _ => None,
        }
    }

    /// Which side of a call/output pair this item is, and its call id.
    ///
    /// Opaque items are read by the conventions of their API: a Responses item
    /// with a string `call_id` is an output when its `type` ends in `_output`
    /// and a call otherwise; an Anthropic block with a `tool_use_id` is an
    /// output, and one whose `type` ends in `tool_use` is a call under its
    /// `id`.
    ///
    /// Example: [`Item`].
    pub fn call_link(&self) -> Option<CallLink> {
        match self {
            Item::ToolCall { call_id, .. } | Item::CustomToolCall { call_id, .. } => {
                Some(CallLink::Call(call_id.clone()))
            }
            Item::ToolResult { call_id, .. } | Item::ToolOutput { call_id, .. } => {
                Some(CallLink::Output(call_id.clone()))
            }
            Item::Opaque { role, json } => opaque_call_link(role.is_some(), json),
            _ => None,
        }
    }

    /// The concatenated text parts of a message (refusals excluded).
    ///
    /// Example: [`Item`].
    pub fn text(&self) -> Option<String> {
        match self {
            Item::Message { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::Text { text } | ContentPart::OutputText { text, .. } => {
                            Some(text.as_str())
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        }
    }

    /// The item's id, status and extra, where its variant has them.
    #[allow(clippy::type_complexity)]
    fn provider_slots(
        &mut self,
    ) -> (
        Option<&mut Option<String>>,
        Option<&mut Option<ItemStatus>>,
        Option<&mut Extra>,
    ) {
        match self {
            Item::Message {
                id, status, extra, ..
            }
            | Item::ToolCall {
                id, status, extra, ..
            }
            | Item::Reasoning {
                id, status, extra, ..
            }
            | Item::CustomToolCall {
                id, status, extra, ..
            }
            | Item::ToolOutput {
                id, status, extra, ..
            }
            | Item::ReasoningParts {
                id, status, extra, ..
            } => (Some(id), Some(status), Some(extra)),
            Item::ToolResult { id, extra, .. } => (Some(id), None, Some(extra)),
            Item::Thinking { extra, .. } | Item::RedactedThinking { extra, .. } => {
                (None, None, Some(extra))
            }
            Item::Opaque { .. } => (None, None, None),
        }
    }

    /// Takes the item's id, status and extra, leaving `None` and empty.
    pub(crate) fn take_provider_state(&mut self) -> (Option<String>, Option<ItemStatus>, Extra) {
        let (id, status, extra) = self.provider_slots();
        (
            id.and_then(Option::take),
            status.and_then(Option::take),
            extra.map(std::mem::take).unwrap_or_default(),
        )
    }

    /// Sets the item's id, status and extra where its variant has them (a
    /// tool result has no status; thinking has neither id nor status).
    pub(crate) fn set_provider_state(
        &mut self,
        new_id: Option<String>,
        new_status: Option<ItemStatus>,
        new_extra: Extra,
    ) {
        let (id, status, extra) = self.provider_slots();
        if let Some(id) = id {
            *id = new_id;
        }
        if let Some(status) = status {
            *status = new_status;
        }
        if let Some(extra) = extra {
            *extra = new_extra;
        }
    }

    /// The same item in its form for a stateless re-send: ids and statuses
    /// cleared (a provider refuses an id it no longer keeps); what else the
    /// provider gave stays. Opaque items are kept as given.
    ///
    /// Example: [`Form`].
    pub fn without_provider_state(&self) -> Item {
        let mut item = self.clone();
        let (id, status, _) = item.provider_slots();
        if let Some(id) = id {
            *id = None;
        }
        if let Some(status) = status {
            *status = None;
        }
        item
    }

    /// What the item carried beyond its typed fields.
    ///
    /// Example: [`Item`].
    pub fn extra(&self) -> &Extra {
        match self {
            Item::Message { extra, .. }
            | Item::ToolCall { extra, .. }
            | Item::ToolResult { extra, .. }
            | Item::Reasoning { extra, .. }
            | Item::CustomToolCall { extra, .. }
            | Item::ToolOutput { extra, .. }
            | Item::ReasoningParts { extra, .. }
            | Item::Thinking { extra, .. }
            | Item::RedactedThinking { extra, .. } => extra,
            Item::Opaque { .. } => &NO_EXTRA,
        }
    }
}

static NO_EXTRA: Extra = Extra::NONE;

/// One side of a call/output pair, with its call id.
///
/// Example: [`Item`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallLink {
    /// A call, under this id.
    Call(String),
    /// The output of the call with this id.
    Output(String),
}

fn opaque_call_link(anthropic: bool, json: &JsonText) -> Option<CallLink> {
    #[derive(Deserialize)]
    struct Ids<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        call_id: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        id: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        tool_use_id: Option<std::borrow::Cow<'a, str>>,
    }
    // Fields of another JSON type (a numeric `id`) make this not a call at all.
    let ids: Ids = serde_json::from_str(json.as_str()).ok()?;
    let kind = ids.kind.unwrap_or_default();
    if anthropic {
        match (ids.tool_use_id, ids.id) {
            (Some(answers), _) => Some(CallLink::Output(answers.into_owned())),
            (None, Some(id)) if kind.ends_with("tool_use") => Some(CallLink::Call(id.into_owned())),
            _ => None,
        }
    } else {
        let call_id = ids.call_id?.into_owned();
        Some(if kind.ends_with("_output") {
            CallLink::Output(call_id)
        } else {
            CallLink::Call(call_id)
        })
    }
}

#[cfg(test)]
mod tests;
