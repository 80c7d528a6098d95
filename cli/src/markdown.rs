//! `export --format markdown`: a session's whole log as a readable
//! transcript for a code host: a heading per turn, tool calls with their
//! arguments in code blocks, long results folded, reasoning summaries, and
//! the fork and compaction points marked.

use std::io::Write;

use anyhow::Result;

use crate::inspect::json_type;
use std::path::PathBuf;

use session_store::{
    ContentPart, EntryHash, Error, Item, LogEntry, Role, SessionId, SessionOrigin, Store,
    ToolOutput,
};

/// A result longer than this many lines (or bytes) is folded.
const FOLD_LINES: usize = 12;
const FOLD_BYTES: usize = 1500;

/// Writes the session's transcript; returns the entries rendered.
///
/// A fork by reference is rendered as its export is written: its first
/// entry carries the history it inherits from its parent.
pub fn write_markdown(store: &Store, id: SessionId, out: &mut dyn Write) -> Result<u64> {
    let title = store.info(id).ok().flatten().and_then(|i| i.title);
    writeln!(out, "# {}", title.as_deref().unwrap_or("Session"))?;
    writeln!(out)?;
    writeln!(out, "Session `{id}`.")?;
    let mut place = Place::default();
    let entries = store.export_entries(id, |e| {
        write_entry(out, &mut place, id, e.seq, e.entry).map_err(|source| Error::Io {
            op: "write markdown",
            path: PathBuf::from(format!("<markdown of session {id}>")),
            source,
        })
    })?;
    Ok(entries)
}

/// Where the transcript is: turns and history starts seen so far.
#[derive(Default)]
struct Place {
    turn: u64,
    starts: u64,
}

/// Renders one entry.
fn write_entry(
    out: &mut dyn Write,
    place: &mut Place,
    id: SessionId,
    seq: u64,
    entry: &LogEntry,
) -> std::io::Result<()> {
    match entry {
        LogEntry::SessionStart { .. } => {
            place.starts += 1;
            write_start(out, place.starts, id, seq, entry)
        }
        LogEntry::UserInput { item, .. } => {
            place.turn += 1;
            writeln!(out)?;
            writeln!(out, "## Turn {}", place.turn)?;
            write_item(out, &item.clone().into_item())
        }
        LogEntry::AssistantItems { items, .. }
        | LogEntry::ToolResults { items, .. }
        | LogEntry::HookInjectedItems { items, .. } => {
            if matches!(entry, LogEntry::HookInjectedItems { .. }) {
                writeln!(out)?;
                writeln!(out, "_Injected by a hook:_")?;
            }
            for item in items {
                write_item(out, &item.clone().into_item())?;
            }
            Ok(())
        }
        LogEntry::TurnEnd { .. } => Ok(()),
        LogEntry::LlmUsage { .. }
        | LogEntry::RunCompleted { .. }
        | LogEntry::RunErrored { .. }
        | LogEntry::ConfigChanged { .. }
        | LogEntry::Extension { .. }
        | LogEntry::ItemsRemoved { .. }
        | LogEntry::ForkedFrom { .. } => write_note(out, entry),
    }
}

/// Renders a `SessionStart`, the `starts`-th of the log: where the history
/// starts or restarts, why, and what it starts with.
fn write_start(
    out: &mut dyn Write,
    starts: u64,
    id: SessionId,
    seq: u64,
    entry: &LogEntry,
) -> std::io::Result<()> {
    let LogEntry::SessionStart {
        system_prompt,
        config,
        history,
        forked_from,
        compacted_from,
        ..
    } = entry
    else {
        unreachable!("write_entry gives write_start only a session_start");
    };
    writeln!(out)?;
    if let Some(origin) = compacted_from {
        writeln!(out, "---")?;
        writeln!(out)?;
        writeln!(out, "## Compacted (entry {seq})")?;
        writeln!(out)?;
        writeln!(
            out,
            "> The history restarts here with a summary{}. The entries above stay in the log.",
            origin_note(origin, id)
        )?;
    } else if starts > 1 {
        writeln!(out, "---")?;
        writeln!(out)?;
        writeln!(out, "## History restarted (entry {seq})")?;
    }
    if let (Some(origin), true) = (forked_from, starts == 1) {
        writeln!(
            out,
            "> Forked from session `{}` at entry `{}`.",
            origin.session_id,
            short(&origin.at_hash)
        )?;
    }
    if starts == 1 || compacted_from.is_none() {
        if let Some(model) = &config.model {
            writeln!(out)?;
            writeln!(out, "Model: `{model}`.")?;
        }
        if let Some(prompt) = system_prompt {
            writeln!(out)?;
            writeln!(out, "**System prompt**")?;
            writeln!(out)?;
            write_fenced(out, prompt, "text")?;
        }
    }
    if !history.is_empty() {
        writeln!(out)?;
        let label = match (compacted_from.is_some(), forked_from.is_some()) {
            (true, _) => "### Summary",
            (false, true) => "### History of the parent",
            _ => "### Starting history",
        };
        writeln!(out, "{label}")?;
        for item in history {
            write_item(out, &item.clone().into_item())?;
        }
    }
    Ok(())
}

/// Renders an entry that is a note between the items: usage, a run's
/// end, a change of settings, extension data, a removal, a fork's link.
fn write_note(out: &mut dyn Write, entry: &LogEntry) -> std::io::Result<()> {
    writeln!(out)?;
    match entry {
        LogEntry::LlmUsage {
            input_total_tokens,
            cache_read_tokens,
            output_tokens,
            ..
        } => writeln!(
            out,
            "<sub>tokens: {input_total_tokens} in ({cache_read_tokens} cached), {output_tokens} out</sub>"
        ),
        LogEntry::RunCompleted { interrupted, .. } => {
            let how = if *interrupted { " (interrupted)" } else { "" };
            writeln!(out, "_Run completed{how}._")
        }
        LogEntry::RunErrored { message, .. } => {
            writeln!(out, "**Run failed:** {}", one_line(message))
        }
        LogEntry::ConfigChanged { config, .. } => match &config.model {
            Some(model) => writeln!(out, "_Settings changed: model `{model}`._"),
            None => writeln!(out, "_Settings changed._"),
        },
        LogEntry::Extension { domain, .. } => writeln!(out, "_Extension data: `{domain}`._"),
        LogEntry::ItemsRemoved { count, .. } => writeln!(
            out,
            "_The last {count} item(s) were removed from the history._"
        ),
        // Exports carry a fork's inherited history in its first
        // `session_start` instead; a log that still shows the link says so.
        LogEntry::ForkedFrom {
            parent,
            parent_seq: seq,
            parent_hash: hash,
            ..
        } => writeln!(
            out,
            "> Forked from session `{parent}` at entry {seq} (`{}`).",
            short(hash)
        ),
        _ => unreachable!("write_entry gives write_note only notes"),
    }
}

fn origin_note(origin: &SessionOrigin, id: SessionId) -> String {
    if origin.session_id == id {
        format!(" (compacted at entry `{}`)", short(&origin.at_hash))
    } else {
        format!(
            " (compacted from session `{}` at entry `{}`)",
            origin.session_id,
            short(&origin.at_hash)
        )
    }
}

fn short(hash: &EntryHash) -> String {
    hash.to_string()[..12].to_string()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Writes `text` in a fenced block whose fence no backtick run inside can close.
fn write_fenced(out: &mut dyn Write, text: &str, lang: &str) -> std::io::Result<()> {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    writeln!(out, "{fence}{lang}")?;
    writeln!(out, "{}", text.trim_end_matches('\n'))?;
    writeln!(out, "{fence}")
}

/// Writes a tool's output, folded in a `<details>` block when long.
/// `label` is Markdown; `html_label` the same in HTML, for the fold's
/// summary, where Markdown does not render.
fn write_result(
    out: &mut dyn Write,
    (label, html_label): (String, String),
    text: &str,
) -> std::io::Result<()> {
    let lines = text.lines().count();
    writeln!(out)?;
    if lines > FOLD_LINES || text.len() > FOLD_BYTES {
        writeln!(
            out,
            "<details><summary>{html_label} ({lines} lines, {} bytes)</summary>",
            text.len()
        )?;
        writeln!(out)?;
        write_fenced(out, text, "text")?;
        writeln!(out)?;
        writeln!(out, "</details>")
    } else {
        writeln!(out, "{label}")?;
        writeln!(out)?;
        write_fenced(out, text, "text")
    }
}

/// `text` safe inside HTML.
fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A result's label in Markdown and in HTML.
fn result_labels(what: &str, call_id: &str) -> (String, String) {
    let call_id = html(call_id);
    (
        format!("**{what}** <sub>{call_id}</sub>"),
        format!("<b>{what}</b> <sub>{call_id}</sub>"),
    )
}

/// Pretty JSON when `text` is JSON, as given otherwise.
fn pretty_json(text: &str) -> (String, &'static str) {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => (
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_string()),
            "json",
        ),
        Err(_) => (text.to_string(), "text"),
    }
}

fn part_text(part: &ContentPart) -> String {
    match part {
        ContentPart::Text { text } | ContentPart::OutputText { text, .. } => text.clone(),
        ContentPart::Refusal { refusal } => format!("_(refused)_ {refusal}"),
        ContentPart::InputImage { image_url, .. } => match image_url {
            Some(url) if !url.starts_with("data:") => format!("_(image: {url})_"),
            _ => "_(image)_".into(),
        },
        ContentPart::InputFile { filename, .. } => match filename {
            Some(name) => format!("_(file `{name}`)_"),
            None => "_(file)_".into(),
        },
        ContentPart::InputAudio { .. } => "_(audio)_".into(),
        ContentPart::Opaque { json } => format!("_({})_", json_type(json)),
    }
}

/// Renders one item.
fn write_item(out: &mut dyn Write, item: &Item) -> std::io::Result<()> {
    match item {
        Item::Message { role, content, .. } => {
            let who = match role {
                Role::User => "User",
                Role::Assistant => "Assistant",
                Role::System => "System",
                Role::Developer => "Developer",
            };
            let text: Vec<String> = content.iter().map(part_text).collect();
            writeln!(out)?;
            writeln!(out, "**{who}**")?;
            writeln!(out)?;
            writeln!(out, "{}", text.join("\n\n").trim_end())
        }
        Item::ToolCall { .. }
        | Item::CustomToolCall { .. }
        | Item::ToolResult { .. }
        | Item::ToolOutput { .. } => write_tool_item(out, item),
        Item::Reasoning { .. }
        | Item::ReasoningParts { .. }
        | Item::Thinking { .. }
        | Item::RedactedThinking { .. } => write_reasoning(out, item),
        Item::Opaque { json, .. } => {
            writeln!(out)?;
            writeln!(out, "_Provider item `{}`:_", json_type(json))?;
            writeln!(out)?;
            let (pretty, lang) = pretty_json(json.as_str());
            write_fenced(out, &pretty, lang)
        }
    }
}

/// [`write_item`] of a tool call, with its arguments, or a tool's result.
fn write_tool_item(out: &mut dyn Write, item: &Item) -> std::io::Result<()> {
    match item {
        Item::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            writeln!(out)?;
            writeln!(out, "**Tool call** `{name}` <sub>{}</sub>", html(call_id))?;
            writeln!(out)?;
            let (args, lang) = pretty_json(arguments);
            write_fenced(out, &args, lang)
        }
        Item::CustomToolCall {
            call_id,
            name,
            input,
            ..
        } => {
            writeln!(out)?;
            writeln!(out, "**Tool call** `{name}` <sub>{}</sub>", html(call_id))?;
            writeln!(out)?;
            write_fenced(out, input, "text")
        }
        Item::ToolResult {
            call_id,
            summary,
            content,
            ..
        } => {
            let text = content.as_deref().unwrap_or(summary);
            write_result(out, result_labels("Result", call_id), text)
        }
        Item::ToolOutput {
            call_id,
            output,
            is_error,
            ..
        } => {
            let text = match output {
                Some(ToolOutput::Text(text)) => text.clone(),
                Some(ToolOutput::Parts(parts)) => {
                    parts.iter().map(part_text).collect::<Vec<_>>().join("\n")
                }
                None => String::new(),
            };
            let what = if *is_error == Some(true) {
                "Result (error)"
            } else {
                "Result"
            };
            write_result(out, result_labels(what, call_id), &text)
        }
        _ => unreachable!("write_item gives write_tool_item only tool calls and results"),
    }
}

/// [`write_item`] of reasoning (its summary) or thinking (folded).
fn write_reasoning(out: &mut dyn Write, item: &Item) -> std::io::Result<()> {
    writeln!(out)?;
    match item {
        Item::Reasoning {
            summary,
            encrypted_content,
            ..
        }
        | Item::ReasoningParts {
            summary,
            encrypted_content,
            ..
        } => {
            let encrypted = encrypted_content
                .as_ref()
                .map(|e| format!(" (encrypted reasoning kept, {} bytes)", e.len()))
                .unwrap_or_default();
            if summary.is_empty() {
                writeln!(out, "_Reasoning{encrypted}._")
            } else {
                writeln!(out, "> _Reasoning{encrypted}:_")?;
                for s in summary {
                    writeln!(out, ">")?;
                    for line in s.lines() {
                        writeln!(out, "> {line}")?;
                    }
                }
                Ok(())
            }
        }
        Item::Thinking { thinking, .. } => {
            writeln!(out, "<details><summary>Thinking</summary>")?;
            writeln!(out)?;
            write_fenced(out, thinking, "text")?;
            writeln!(out)?;
            writeln!(out, "</details>")
        }
        Item::RedactedThinking { extra: _, data } => {
            writeln!(out, "_Redacted thinking ({} bytes, kept)._", data.len())
        }
        _ => unreachable!("write_item gives write_reasoning only reasoning and thinking"),
    }
}
