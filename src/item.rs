//! The runtime's in-memory conversation model.
//!
//! This stands in for the embedding agent runtime's own `Item` type. The log
//! never stores it directly: [`crate::schema::LoggedItem`] is the persistent
//! form, and converters sit at the edge.

use serde::{Deserialize, Serialize};

/// Who authored a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The human (or the program acting for one).
    User,
    /// The model.
    Assistant,
    /// The runtime itself: system prompts and hook-injected notes.
    System,
}

/// Provider-side lifecycle state of an item. Not persisted.
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
}

/// One item of conversation history, as the runtime holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    /// A message from the user, the assistant or the system.
    Message {
        /// Provider item id; never re-sent, never persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The author.
        role: Role,
        /// The content parts, in order.
        content: Vec<ContentPart>,
        /// Provider status; not persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
    },
    /// A function/tool call made by the model.
    ToolCall {
        /// Provider item id; not persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Pairs the call with its result.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments, as JSON text exactly as the model produced them.
        arguments: String,
        /// Provider status; not persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
    },
    /// The result of running a tool.
    ToolResult {
        /// Provider item id; not persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The `call_id` of the call this answers.
        call_id: String,
        /// A short summary shown to the model.
        summary: String,
        /// The full output, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// A reasoning item, possibly carrying opaque encrypted state.
    Reasoning {
        /// Provider item id; never re-sent, never persisted.
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
        /// Provider status; not persisted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ItemStatus>,
    },
}

impl Item {
    /// A user message with one text part.
    pub fn user_text(text: impl Into<String>) -> Item {
        Item::message(Role::User, text)
    }

    /// An assistant message with one text part.
    pub fn assistant_text(text: impl Into<String>) -> Item {
        Item::message(Role::Assistant, text)
    }

    /// A system message with one text part.
    pub fn system_text(text: impl Into<String>) -> Item {
        Item::message(Role::System, text)
    }

    /// A message with one text part and no id or status.
    pub fn message(role: Role, text: impl Into<String>) -> Item {
        Item::Message {
            id: None,
            role,
            content: vec![ContentPart::Text { text: text.into() }],
            status: None,
        }
    }

    /// The role, for messages.
    pub fn role(&self) -> Option<Role> {
        match self {
            Item::Message { role, .. } => Some(*role),
            _ => None,
        }
    }

    /// A message authored by the user.
    pub fn is_user_message(&self) -> bool {
        self.role() == Some(Role::User)
    }

    /// A message authored by the assistant.
    pub fn is_assistant_message(&self) -> bool {
        self.role() == Some(Role::Assistant)
    }

    /// A message authored by the system (or a hook).
    pub fn is_system_message(&self) -> bool {
        self.role() == Some(Role::System)
    }

    /// A tool call.
    pub fn is_tool_call(&self) -> bool {
        matches!(self, Item::ToolCall { .. })
    }

    /// A tool result.
    pub fn is_tool_result(&self) -> bool {
        matches!(self, Item::ToolResult { .. })
    }

    /// A reasoning item.
    pub fn is_reasoning(&self) -> bool {
        matches!(self, Item::Reasoning { .. })
    }

    /// Produced by the model in its turn: assistant messages, tool calls and reasoning.
    pub fn is_assistant_output(&self) -> bool {
        self.is_assistant_message() || self.is_tool_call() || self.is_reasoning()
    }

    /// The `call_id` of a tool call or result.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Item::ToolCall { call_id, .. } | Item::ToolResult { call_id, .. } => Some(call_id),
            _ => None,
        }
    }

    /// The concatenated text parts of a message (refusals excluded).
    pub fn text(&self) -> Option<String> {
        match self {
            Item::Message { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::Text { text } => Some(text.as_str()),
                        ContentPart::Refusal { .. } => None,
                    })
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        }
    }

    /// The same item with ids and statuses cleared: what the log keeps.
    pub fn without_provider_state(&self) -> Item {
        let mut item = self.clone();
        match &mut item {
            Item::Message { id, status, .. }
            | Item::ToolCall { id, status, .. }
            | Item::Reasoning { id, status, .. } => {
                *id = None;
                *status = None;
            }
            Item::ToolResult { id, .. } => *id = None,
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates() {
        assert!(Item::user_text("x").is_user_message());
        assert!(!Item::user_text("x").is_assistant_output());
        assert!(Item::assistant_text("x").is_assistant_output());
        assert!(Item::system_text("x").is_system_message());
        let call = Item::ToolCall {
            id: None,
            call_id: "c".into(),
            name: "n".into(),
            arguments: "{}".into(),
            status: None,
        };
        assert!(call.is_tool_call() && call.is_assistant_output());
        assert_eq!(call.call_id(), Some("c"));
    }

    #[test]
    fn runtime_json_uses_type_tag() {
        let json = serde_json::to_string(&Item::user_text("hi")).unwrap();
        assert_eq!(
            json,
            r#"{"type":"message","role":"user","content":[{"type":"text","text":"hi"}]}"#
        );
    }
}
