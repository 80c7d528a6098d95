//! How many text bytes an item holds: what decides whether the store keeps
//! it in its payload area (see DESIGN.md, "Payloads"), for the runtime
//! [`Item`] on the save path and for the [`LoggedItem`] of an owned entry.

use super::item::{ItemExtension, LoggedItemOf};
use super::parts::{LoggedContentPart, LoggedToolOutput};
use super::JsonText;
use crate::item::{ContentPart, Item, ToolOutput};

/// The bytes of the strings of a content part: what decides whether an item
/// is stored in the payload area.
fn part_text_len(part: &LoggedContentPart) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let json = |s: &Option<JsonText>| s.as_ref().map_or(0, |j| j.0.len());
    match part {
        LoggedContentPart::Text { text } => text.len(),
        LoggedContentPart::Refusal { refusal } => refusal.len(),
        LoggedContentPart::OutputText(p) => p.text.len() + json(&p.annotations) + json(&p.logprobs),
        LoggedContentPart::InputImage(p) => opt(&p.image_url) + opt(&p.file_id) + opt(&p.detail),
        LoggedContentPart::InputFile(p) => {
            opt(&p.file_id) + opt(&p.file_data) + opt(&p.filename) + opt(&p.file_url)
        }
        LoggedContentPart::InputAudio(p) => p.data.len() + p.format.len(),
        LoggedContentPart::Opaque { json } => json.0.len(),
    }
}

/// At least [`LoggedItem::text_len`] of the item's logged form (ids, which
/// the log drops, count too), without converting it: the save path's test
/// of whether any item may go to the payload area.
pub(crate) fn item_text_len_bound(item: &Item) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let json = |s: &Option<JsonText>| s.as_ref().map_or(0, |j| j.0.len());
    let part_len = |part: &ContentPart| match part {
        ContentPart::Text { text } => text.len(),
        ContentPart::Refusal { refusal } => refusal.len(),
        ContentPart::OutputText {
            text,
            annotations,
            logprobs,
        } => text.len() + json(annotations) + json(logprobs),
        ContentPart::InputImage {
            image_url,
            file_id,
            detail,
        } => opt(image_url) + opt(file_id) + opt(detail),
        ContentPart::InputFile {
            file_id,
            file_data,
            filename,
            file_url,
        } => opt(file_id) + opt(file_data) + opt(filename) + opt(file_url),
        ContentPart::InputAudio { data, format } => data.len() + format.len(),
        ContentPart::Opaque { json } => json.0.len(),
    };
    let parts = |p: &[ContentPart]| p.iter().map(part_len).sum::<usize>();
    let diff = item.extra().diff().map_or(0, |d| d.0.len());
    diff + match item {
        Item::Message { id, content, .. } => opt(id) + parts(content),
        Item::ToolCall {
            id,
            call_id,
            name,
            arguments,
            ..
        } => opt(id) + call_id.len() + name.len() + arguments.len(),
        Item::ToolResult {
            extra: _,
            id,
            call_id,
            summary,
            content,
        } => opt(id) + call_id.len() + summary.len() + opt(content),
        Item::Reasoning {
            id,
            text,
            summary,
            encrypted_content,
            ..
        } => opt(id) + text.len() + strings_len(summary) + opt(encrypted_content),
        Item::CustomToolCall {
            id,
            call_id,
            name,
            input,
            ..
        } => opt(id) + call_id.len() + name.len() + input.len(),
        Item::ToolOutput {
            id,
            call_id,
            output,
            ..
        } => {
            opt(id)
                + call_id.len()
                + match output {
                    Some(ToolOutput::Text(t)) => t.len(),
                    Some(ToolOutput::Parts(p)) => parts(p),
                    None => 0,
                }
        }
        Item::ReasoningParts {
            id,
            summary,
            content,
            encrypted_content,
            ..
        } => opt(id) + strings_len(summary) + strings_len(content) + opt(encrypted_content),
        Item::Thinking {
            extra: _,
            thinking,
            signature,
        } => thinking.len() + opt(signature),
        Item::RedactedThinking { extra: _, data } => data.len(),
        Item::Opaque { json, .. } => json.0.len(),
    }
}

fn strings_len(strings: &[String]) -> usize {
    strings.iter().map(String::len).sum()
}

impl<X: ItemExtension> LoggedItemOf<X> {
    /// The bytes of all the item's strings and JSON texts: an item of at
    /// least the store's `payload_threshold` is stored once in the payload
    /// area ([`LoggedItem::External`](LoggedItemOf::External)). 0 for an external item.
    ///
    /// Example: [the `payload` module](crate::payload#example).
    pub fn text_len(&self) -> usize {
        use LoggedItemOf as LoggedItem;
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let parts = |p: &[LoggedContentPart]| p.iter().map(part_text_len).sum::<usize>();
        match self {
            LoggedItem::Message { content, .. } => parts(content),
            LoggedItem::ToolCall {
                call_id,
                name,
                arguments,
            } => call_id.len() + name.len() + arguments.len(),
            LoggedItem::ToolResult {
                call_id,
                summary,
                content,
            } => call_id.len() + summary.len() + opt(content),
            LoggedItem::Reasoning {
                text,
                summary,
                encrypted_content,
            } => text.len() + strings_len(summary) + opt(encrypted_content),
            LoggedItem::CustomToolCall {
                call_id,
                name,
                input,
            } => call_id.len() + name.len() + input.len(),
            LoggedItem::ToolOutput {
                call_id, output, ..
            } => {
                call_id.len()
                    + match output {
                        Some(LoggedToolOutput::Text(t)) => t.len(),
                        Some(LoggedToolOutput::Parts(p)) => parts(p),
                        None => 0,
                    }
            }
            LoggedItem::ReasoningParts {
                summary,
                content,
                encrypted_content,
            } => strings_len(summary) + strings_len(content) + opt(encrypted_content),
            LoggedItem::Thinking {
                thinking,
                signature,
            } => thinking.len() + opt(signature),
            LoggedItem::RedactedThinking { data } => data.len(),
            LoggedItem::Opaque { json, .. } => json.0.len(),
            LoggedItem::External(_) => 0,
            LoggedItem::Extended(x) => x.text_len(),
        }
    }
}
