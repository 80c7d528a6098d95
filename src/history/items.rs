//! A transcript read into the crate's items: what the Claude Code and Codex
//! readers both produce, and the messages and import both derive from it.
//!
//! Both tools record the provider's own items (Messages API blocks, Responses
//! items), so their transcripts map onto [`Item`]s without loss, and the
//! reader-neutral messages are then a view of those items: user and
//! assistant text, and tool outputs named after the call they answer.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::ReadStats;
use super::{
    CompactHistory, HistoryCompaction, HistoryImport, HistoryMessage, HistoryRole, ItemMeta,
    TokenUsage,
};
use crate::item::{CallLink, ContentPart, Item, Role, ToolOutput};

/// One item of a transcript, with where it came from.
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptItem {
    /// The item.
    pub item: Item,
    /// The 1-based line of the transcript it came from.
    pub line: usize,
    /// The line's timestamp, as written.
    pub timestamp: Option<String>,
    /// Whether [`ItemTranscript::messages`] shows it. Items the tool sent to
    /// the model but hides from its user (Claude Code's `isMeta` lines) are
    /// imported and not shown.
    pub shown: bool,
    /// The model that wrote it, on the first item of a model response.
    pub model: Option<String>,
    /// The tokens that response used, on its first item.
    pub usage: Option<TokenUsage>,
}

impl TranscriptItem {
    /// An item of `line`, written at `timestamp`, with no model or usage.
    pub(crate) fn new(item: Item, line: usize, timestamp: Option<String>, shown: bool) -> Self {
        TranscriptItem {
            item,
            line,
            timestamp,
            shown,
            model: None,
            usage: None,
        }
    }

    /// What an import keeps of it beside the item.
    fn meta(&self) -> ItemMeta {
        ItemMeta {
            ts_ms: self.timestamp.as_deref().and_then(parse_ts),
            model: self.model.clone(),
            usage: self.usage,
        }
    }
}

/// An ISO 8601 time, as transcripts write them, in ms since the Unix epoch.
pub(crate) fn parse_ts(text: &str) -> Option<u64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

/// The part of a transcript between two compactions.
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TranscriptSegment {
    /// The line of the compaction that starts this segment; `None` for the
    /// first.
    pub compaction_line: Option<usize>,
    /// That line's timestamp, as written.
    pub compaction_timestamp: Option<String>,
    /// The history the agent carried on with after that compaction, when the
    /// transcript restates it (Codex's `replacement_history`). It is a copy
    /// of earlier history or a summary, so it is imported but not shown.
    pub carried: Vec<Item>,
    /// What the transcript records in this segment, in order.
    pub items: Vec<TranscriptItem>,
}

/// A transcript read into items, cut into segments at its compactions.
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemTranscript {
    /// The transcript's path as text (empty when parsed from bytes); the
    /// prefix of every `source_ref`.
    pub source: String,
    /// The tool's session id, when the transcript says.
    pub session_id: Option<String>,
    /// The working directory the session started in, as written.
    pub cwd: Option<String>,
    /// The segments, oldest first; never empty.
    pub segments: Vec<TranscriptSegment>,
    /// What reading skipped.
    pub stats: ReadStats,
    /// The identity of the content the items were read from (BLAKE3, hex).
    pub content_hash: String,
    /// The title the transcript gives itself (Claude Code's `summary`
    /// lines); `None` when it gives none.
    pub title: Option<String>,
}

impl ItemTranscript {
    /// An empty transcript of `source`, with one empty segment.
    pub(crate) fn new(source: String) -> ItemTranscript {
        ItemTranscript {
            source,
            segments: vec![TranscriptSegment::default()],
            ..ItemTranscript::default()
        }
    }

    /// The segment items go to now.
    pub(crate) fn current(&mut self) -> &mut TranscriptSegment {
        if self.segments.is_empty() {
            self.segments.push(TranscriptSegment::default());
        }
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    /// Starts a new segment at a compaction on `line`, written at
    /// `timestamp`.
    pub(crate) fn compaction(
        &mut self,
        line: usize,
        timestamp: Option<String>,
        carried: Vec<Item>,
    ) {
        self.segments.push(TranscriptSegment {
            compaction_line: Some(line),
            compaction_timestamp: timestamp,
            carried,
            items: Vec::new(),
        });
    }

    /// Every item the transcript records, in order, without the carried
    /// copies.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn items(&self) -> impl Iterator<Item = &TranscriptItem> {
        self.segments.iter().flat_map(|s| s.items.iter())
    }

    /// The transcript as reader-neutral messages: user and assistant text
    /// (system and developer messages, reasoning and calls are not shown),
    /// and every tool output, named after its call.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn messages(&self) -> Vec<HistoryMessage> {
        let names = call_names(self.items().map(|t| &t.item));
        let mut out = Vec::new();
        for t in self.items().filter(|t| t.shown) {
            let Some((role, text, tool, is_error)) = view(&t.item, &names) else {
                continue;
            };
            out.push(HistoryMessage {
                role,
                text,
                timestamp: t.timestamp.clone(),
                tool_name: tool,
                is_error,
                source_ref: format!("{}#line={}", self.source, t.line),
            });
        }
        out
    }

    /// The first prompt the user typed, cut to a title's length: the text
    /// of the first shown user message that is not a tool's markup (context
    /// the tool injects is not shown; Claude Code writes slash commands and
    /// editor notices as `<command-name>…`, `<ide_opened_file>…`).
    ///
    /// Example: [the module](crate::history::codex#example).
    pub fn first_prompt(&self) -> Option<String> {
        self.items()
            .filter(|t| t.shown && t.item.is_user_message())
            .filter_map(|t| t.item.text())
            .find(|text| !text.trim().is_empty() && !is_tool_markup(text))
            .map(|text| crate::catalog::excerpt(&text))
    }

    /// The compact summary of [`ItemTranscript::messages`].
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn compact(&self) -> CompactHistory {
        CompactHistory::from_messages(&self.messages())
    }

    /// Converts to an import: the first segment's items as the session, each
    /// later segment as a compaction of the one before.
    ///
    /// Provenance: `{"reader", "transcript", "session_id", "cwd", "lines":
    /// [the line of each item, in item order, per segment], "compaction_lines",
    /// "malformed_lines", "unknown_types": {type: count}}` and whatever
    /// `extra` adds.
    pub(crate) fn to_import(
        &self,
        reader: &str,
        domain: &'static str,
        extra: Map<String, Value>,
    ) -> HistoryImport {
        let lines =
            |s: &TranscriptSegment| -> Vec<usize> { s.items.iter().map(|t| t.line).collect() };
        let items_of = |s: &TranscriptSegment| -> Vec<Item> {
            s.items.iter().map(|t| t.item.clone()).collect()
        };
        let meta_of = |s: &TranscriptSegment| -> Vec<ItemMeta> {
            s.items.iter().map(TranscriptItem::meta).collect()
        };
        let mut segments = self.segments.iter();
        let first = segments.next();
        let mut items: Vec<Item> = first.map(|s| s.carried.clone()).unwrap_or_default();
        let mut meta = vec![ItemMeta::default(); items.len()];
        items.extend(first.map(items_of).unwrap_or_default());
        meta.extend(first.map(meta_of).unwrap_or_default());
        let compactions = segments
            .map(|s| HistoryCompaction {
                history: s.carried.clone(),
                items: items_of(s),
                meta: meta_of(s),
                ts_ms: s.compaction_timestamp.as_deref().and_then(parse_ts),
            })
            .collect();
        let mut provenance = serde_json::json!({
            "reader": reader,
            "transcript": self.source,
            "session_id": self.session_id,
            "cwd": self.cwd,
            "lines": self.segments.iter().map(lines).collect::<Vec<_>>(),
            "compaction_lines": self.segments.iter().filter_map(|s| s.compaction_line).collect::<Vec<_>>(),
            "malformed_lines": self.stats.malformed_lines,
            "unknown_types": self.stats.unknown_types,
        });
        if let Value::Object(map) = &mut provenance {
            map.extend(extra);
        }
        HistoryImport {
            items,
            meta,
            title: self.title.clone().or_else(|| self.first_prompt()),
            compactions,
            extension_domain: domain,
            provenance,
            content_hash: self.content_hash.clone(),
        }
    }
}

/// Whether `text` opens with a tag the tool writes (`<command-name>`,
/// `<local-command-stdout>`, `<ide_opened_file>`, `<system-reminder>`): a
/// lowercase name of letters, `-` and `_`.
fn is_tool_markup(text: &str) -> bool {
    let Some(rest) = text.trim_start().strip_prefix('<') else {
        return false;
    };
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || *c == '-' || *c == '_')
        .collect();
    !name.is_empty() && rest[name.len()..].starts_with('>')
}

/// The tool name of every call, by call id.
fn call_names<'a>(items: impl Iterator<Item = &'a Item>) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for item in items {
        match item {
            Item::ToolCall { call_id, name, .. } | Item::CustomToolCall { call_id, name, .. } => {
                names.insert(call_id.clone(), name.clone());
            }
            Item::Opaque { json, .. } => {
                if let Some(CallLink::Call(call_id)) = item.call_link() {
                    // A hosted or local call: its name, or its type.
                    let value: Value = serde_json::from_str(json.as_str()).unwrap_or(Value::Null);
                    let name = ["name", "type"]
                        .iter()
                        .find_map(|k| value.get(*k).and_then(Value::as_str))
                        .unwrap_or("unknown");
                    names.insert(call_id, name.to_owned());
                }
            }
            _ => {}
        }
    }
    names
}

/// How an item shows as a message: role, text, tool name, error flag.
fn view(
    item: &Item,
    names: &HashMap<String, String>,
) -> Option<(HistoryRole, String, Option<String>, bool)> {
    let tool = |call_id: &str| names.get(call_id).cloned();
    match item {
        Item::Message { role, content, .. } => {
            let role = shown_role(*role)?;
            let text = join_texts(content.iter().filter_map(part_text));
            (!text.is_empty()).then_some((role, text, None, false))
        }
        Item::ToolResult {
            call_id,
            summary,
            content,
            ..
        } => Some((
            HistoryRole::ToolResult,
            content.clone().unwrap_or_else(|| summary.clone()),
            tool(call_id),
            false,
        )),
        Item::ToolOutput {
            call_id,
            output,
            is_error,
            ..
        } => {
            let text = match output {
                Some(ToolOutput::Text(text)) => text.clone(),
                Some(ToolOutput::Parts(parts)) => join_texts(parts.iter().filter_map(part_text)),
                None => String::new(),
            };
            Some((
                HistoryRole::ToolResult,
                text,
                tool(call_id),
                is_error.unwrap_or(false),
            ))
        }
        Item::Opaque { role, json } => {
            let value: Value = serde_json::from_str(json.as_str()).ok()?;
            if let Some(CallLink::Output(call_id)) = item.call_link() {
                let text = value
                    .get("output")
                    .or_else(|| value.get("content"))
                    .map(json_texts)
                    .unwrap_or_default();
                let is_error = value.get("is_error").and_then(Value::as_bool) == Some(true);
                return Some((HistoryRole::ToolResult, text, tool(&call_id), is_error));
            }
            // A Responses message with fields the typed model lacks.
            if role.is_none() && value.get("type").and_then(Value::as_str) == Some("message") {
                let role = match value.get("role").and_then(Value::as_str)? {
                    "user" => HistoryRole::User,
                    "assistant" => HistoryRole::Assistant,
                    _ => return None,
                };
                let text = value.get("content").map(json_texts).unwrap_or_default();
                return (!text.is_empty()).then_some((role, text, None, false));
            }
            None
        }
        _ => None,
    }
}

fn shown_role(role: Role) -> Option<HistoryRole> {
    match role {
        Role::User => Some(HistoryRole::User),
        Role::Assistant => Some(HistoryRole::Assistant),
        Role::System | Role::Developer => None,
    }
}

fn part_text(part: &ContentPart) -> Option<&str> {
    match part {
        ContentPart::Text { text } | ContentPart::OutputText { text, .. } => Some(text),
        ContentPart::Refusal { refusal } => Some(refusal),
        _ => None,
    }
}

/// The non-blank texts, one per line.
fn join_texts<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    texts
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The texts of a JSON content value: a string, or a list of parts with
/// `text`.
fn json_texts(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(parts) => join_texts(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str)),
        ),
        // Older Codex outputs: `{"content": "…", "success": …}`.
        Value::Object(map) => map.get("content").map(json_texts).unwrap_or_default(),
        _ => String::new(),
    }
}
