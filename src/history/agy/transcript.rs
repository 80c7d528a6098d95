//! Reading a transcript: steps in order, and the messages, calls and
//! results they become.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{Map, Value};

use super::fields::{as_u64, texts, tool_calls, tool_result};
use super::{EXTENSION_DOMAIN, KNOWN_EXECUTION_STEPS, SOURCE, SUMMARY_MAX_CHARS};
use crate::history::lines::{self, Line};
use crate::history::{
    CompactHistory, Error, HistoryImport, HistoryMessage, HistoryRole, ReadStats,
};
use crate::item::{ContentPart, Item, Role};

/// A parsed agy transcript.
///
/// Example: [the module](crate::history::agy#example).
#[derive(Debug, Clone, PartialEq)]
pub struct AgyTranscript {
    /// The transcript's path as text (empty when parsed from bytes); the
    /// prefix of every `source_ref`.
    pub source: String,
    /// The steps that carry something, in step order.
    pub entries: Vec<AgyEntry>,
    /// How many non-blank lines were skipped as malformed.
    pub malformed_lines: usize,
    /// What reading skipped, the malformed lines among it.
    pub stats: ReadStats,
    /// The BLAKE3 of the transcript's bytes, hex.
    pub content_hash: String,
}

/// One step that carries something.
///
/// Example: [the module](crate::history::agy#example).
#[derive(Debug, Clone, PartialEq)]
pub struct AgyEntry {
    /// The step's `step_index`, when it has one.
    pub step_index: Option<u64>,
    /// The 1-based line of the transcript it came from.
    pub line: usize,
    /// The step's `created_at`, as written.
    pub timestamp: Option<String>,
    /// What the step says.
    pub kind: AgyEntryKind,
}

/// What a step says.
///
/// Example: [the module](crate::history::agy#example).
#[derive(Debug, Clone, PartialEq)]
pub enum AgyEntryKind {
    /// A `USER_INPUT` with text.
    User {
        /// The text.
        text: String,
    },
    /// A `PLANNER_RESPONSE` with text, tool calls, or both.
    Assistant {
        /// The non-blank text parts, in order.
        parts: Vec<String>,
        /// The tool calls, in order.
        tool_calls: Vec<AgyToolCall>,
    },
    /// A known execution step.
    ToolResult(AgyToolResult),
}

/// A tool call from a `PLANNER_RESPONSE`.
///
/// Example: [the module](crate::history::agy#example).
#[derive(Debug, Clone, PartialEq)]
pub struct AgyToolCall {
    /// Deterministic id from the step: `agy-<step_index>-<k>` (see
    /// [`AgyTranscript::parse`]).
    pub call_id: String,
    /// The tool's name, without a `default_api:` prefix.
    pub name: String,
    /// The arguments, with values that were JSON-encoded text decoded once.
    pub args: Value,
}

/// The result of a known execution step.
///
/// Example: [the module](crate::history::agy#example).
#[derive(Debug, Clone, PartialEq)]
pub struct AgyToolResult {
    /// The step type, e.g. `RUN_COMMAND`.
    pub step_type: String,
    /// The paired call's name, or the step type when nothing was pending.
    pub tool_name: String,
    /// The paired call's id, or an id of its own (`agy-<step>-result`) when
    /// nothing was pending.
    pub call_id: String,
    /// Whether a pending call was paired with it.
    pub paired: bool,
    /// The output (content, output fields, error text, exit code); `None`
    /// when the step recorded none.
    pub output: Option<String>,
    /// Whether the step failed.
    pub is_error: bool,
}

impl AgyToolResult {
    /// The output, or a placeholder that says there was none.
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn text(&self) -> String {
        match &self.output {
            Some(output) => output.clone(),
            None => self.placeholder(),
        }
    }

    fn placeholder(&self) -> String {
        format!("({} produced no output)", self.step_type)
    }
}

/// Parse transcript bytes, with no path; never panics.
///
/// Example: [the module](crate::history::agy#example).
pub fn parse_transcript_bytes(bytes: &[u8]) -> AgyTranscript {
    AgyTranscript::parse(bytes, "")
}

/// A line that parsed as a JSON object, before ordering.
struct RawStep {
    line: usize,
    step_index: Option<u64>,
    fields: Map<String, Value>,
}

impl AgyTranscript {
    /// Read and parse the transcript at `path`.
    ///
    /// A missing file is [`Error::NotFound`]; an empty file
    /// is a transcript with no entries.
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn read(path: &Path) -> Result<AgyTranscript, Error> {
        let bytes = fs::read(path).map_err(|source| lines::open_error(path, source))?;
        Ok(AgyTranscript::parse(&bytes, &path.display().to_string()))
    }

    /// Parse transcript bytes; `source` prefixes every `source_ref`.
    ///
    /// Call ids are derived from the step: `agy-<step_index>-<k>` for the
    /// `k`-th call (from 0), `agy-line<N>-<k>` for a step without an index,
    /// and `agy-<step_index>-line<N>-<k>` when an index repeats.
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn parse(bytes: &[u8], source: &str) -> AgyTranscript {
        let mut stats = ReadStats::default();
        let mut steps = Vec::new();
        let scan = lines::scan(bytes, &mut stats, |line, text| {
            ControlFlow::Continue(match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(fields)) => {
                    let step_index = fields.get("step_index").and_then(as_u64);
                    steps.push(RawStep {
                        line,
                        step_index,
                        fields,
                    });
                    Line::Read
                }
                _ => Line::Malformed,
            })
        });
        // A line without an index sorts with the last indexed line above it.
        let mut last_index = None;
        let mut keyed: Vec<(Option<u64>, RawStep)> = steps
            .into_iter()
            .map(|step| {
                if step.step_index.is_some() {
                    last_index = step.step_index;
                }
                (last_index, step)
            })
            .collect();
        keyed.sort_by_key(|(key, _)| *key);

        let mut builder = Builder::default();
        for (_, step) in keyed {
            builder.step(step);
        }
        AgyTranscript {
            source: source.to_owned(),
            entries: builder.entries,
            malformed_lines: stats.malformed_lines,
            stats,
            content_hash: scan.content_hash,
        }
    }

    fn source_ref(&self, entry: &AgyEntry) -> String {
        match entry.step_index {
            Some(n) => format!("{}#step={n}", self.source),
            None => format!("{}#line={}", self.source, entry.line),
        }
    }

    /// The transcript as reader-neutral messages. An assistant step with
    /// only tool calls yields no message; a result without output yields
    /// its placeholder text.
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn messages(&self) -> Vec<HistoryMessage> {
        let mut out = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let (role, text, tool_name, is_error) = match &entry.kind {
                AgyEntryKind::User { text } => (HistoryRole::User, text.clone(), None, false),
                AgyEntryKind::Assistant { parts, .. } => {
                    if parts.is_empty() {
                        continue;
                    }
                    (HistoryRole::Assistant, parts.join("\n"), None, false)
                }
                AgyEntryKind::ToolResult(result) => (
                    HistoryRole::ToolResult,
                    result.text(),
                    Some(result.tool_name.clone()),
                    result.is_error,
                ),
            };
            out.push(HistoryMessage {
                role,
                text,
                timestamp: entry.timestamp.clone(),
                tool_name,
                is_error,
                source_ref: self.source_ref(entry),
            });
        }
        out
    }

    /// The compact summary of [`AgyTranscript::messages`].
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn compact(&self) -> CompactHistory {
        CompactHistory::from_messages(&self.messages())
    }

    /// Convert to runtime items, with provenance for an `Extension` entry of
    /// domain [`EXTENSION_DOMAIN`].
    ///
    /// Each call becomes an [`Item::ToolCall`] right after its step's
    /// message; each result an [`Item::ToolResult`] with its call's id. A
    /// call with no result and a result with no call stay that way: the
    /// store's ready-to-send check is what reports them. A result without
    /// output gets the placeholder as summary and no content.
    ///
    /// Provenance: `{"reader", "transcript", "steps": [step indexes that
    /// produced items, in item order], "unindexed_lines": [lines of steps
    /// without an index], "malformed_lines": n, "error_call_ids": [results
    /// that failed]}`. `ToolResult` has no error flag, so the last list is
    /// where failures are kept.
    ///
    /// Example: [the module](crate::history::agy#example).
    pub fn to_import(&self) -> HistoryImport {
        let mut items = Vec::new();
        let mut steps = Vec::new();
        let mut unindexed_lines = Vec::new();
        let mut error_call_ids = Vec::new();
        for entry in &self.entries {
            let before = items.len();
            match &entry.kind {
                AgyEntryKind::User { text } => items.push(Item::message(Role::User, text.clone())),
                AgyEntryKind::Assistant { parts, tool_calls } => {
                    if !parts.is_empty() {
                        items.push(Item::Message {
                            extra: Default::default(),
                            id: None,
                            role: Role::Assistant,
                            content: parts
                                .iter()
                                .map(|text| ContentPart::Text { text: text.clone() })
                                .collect(),
                            status: None,
                        });
                    }
                    for call in tool_calls {
                        items.push(Item::ToolCall {
                            extra: Default::default(),
                            id: None,
                            call_id: call.call_id.clone(),
                            name: call.name.clone(),
                            arguments: call.args.to_string(),
                            status: None,
                        });
                    }
                }
                AgyEntryKind::ToolResult(result) => {
                    if result.is_error {
                        error_call_ids.push(Value::from(result.call_id.clone()));
                    }
                    let summary = match &result.output {
                        Some(output) => summarize(output),
                        None => result.placeholder(),
                    };
                    items.push(Item::ToolResult {
                        extra: Default::default(),
                        id: None,
                        call_id: result.call_id.clone(),
                        summary,
                        content: result.output.clone(),
                    });
                }
            }
            if items.len() > before {
                match entry.step_index {
                    Some(n) => steps.push(Value::from(n)),
                    None => unindexed_lines.push(Value::from(entry.line)),
                }
            }
        }
        let provenance = serde_json::json!({
            "reader": SOURCE,
            "transcript": self.source,
            "steps": steps,
            "unindexed_lines": unindexed_lines,
            "malformed_lines": self.malformed_lines,
            "error_call_ids": error_call_ids,
        });
        HistoryImport {
            items,
            meta: Vec::new(),
            title: None,
            compactions: Vec::new(),
            extension_domain: EXTENSION_DOMAIN,
            provenance,
            content_hash: self.content_hash.clone(),
        }
    }
}

/// The first non-blank line, cut to [`SUMMARY_MAX_CHARS`] characters.
fn summarize(output: &str) -> String {
    let line = output
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_end();
    match line.char_indices().nth(SUMMARY_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The state machine that turns ordered steps into entries.
#[derive(Default)]
struct Builder {
    entries: Vec<AgyEntry>,
    /// Calls waiting for a result: (call_id, name).
    pending: VecDeque<(String, String)>,
    seen_indexes: HashSet<u64>,
}

impl Builder {
    fn step(&mut self, step: RawStep) {
        let RawStep {
            line,
            step_index,
            fields,
        } = step;
        let step_type = fields.get("type").and_then(Value::as_str).unwrap_or("");
        let source = fields.get("source").and_then(Value::as_str).unwrap_or("");
        if source.eq_ignore_ascii_case("SYSTEM") && step_type != "ERROR_MESSAGE" {
            return;
        }
        let id_base = self.id_base(step_index, line);
        let kind = match step_type {
            "USER_INPUT" => {
                self.pending.clear();
                let text = texts(fields.get("content")).join("\n");
                if text.is_empty() {
                    return;
                }
                AgyEntryKind::User { text }
            }
            "PLANNER_RESPONSE" => {
                let parts = texts(fields.get("content"));
                let tool_calls = tool_calls(fields.get("tool_calls"), &id_base);
                for call in &tool_calls {
                    self.pending
                        .push_back((call.call_id.clone(), call.name.clone()));
                }
                if parts.is_empty() && tool_calls.is_empty() {
                    return;
                }
                AgyEntryKind::Assistant { parts, tool_calls }
            }
            t if KNOWN_EXECUTION_STEPS.contains(&t) => {
                let (call_id, tool_name, paired) = match self.pending.pop_front() {
                    Some((call_id, name)) => (call_id, name, true),
                    None => (format!("{id_base}-result"), t.to_owned(), false),
                };
                AgyEntryKind::ToolResult(tool_result(&fields, t, tool_name, call_id, paired))
            }
            _ => return,
        };
        let timestamp = fields
            .get("created_at")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.entries.push(AgyEntry {
            step_index,
            line,
            timestamp,
            kind,
        });
    }

    fn id_base(&mut self, step_index: Option<u64>, line: usize) -> String {
        match step_index {
            Some(n) if self.seen_indexes.insert(n) => format!("agy-{n}"),
            Some(n) => format!("agy-{n}-line{line}"),
            None => format!("agy-line{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_first_nonblank_line_cut_on_a_char_boundary() {
        assert_eq!(summarize("\n  \nfirst\nsecond"), "first");
        let long = "é".repeat(SUMMARY_MAX_CHARS + 5);
        let s = summarize(&long);
        assert_eq!(s.chars().count(), SUMMARY_MAX_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
