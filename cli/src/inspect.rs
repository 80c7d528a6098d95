//! `ls`, `show`, `stat` and `tail`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use session_store::{ContentPart, Item, Log, ToolOutput};

use crate::{open_reader, open_store_to_read, resolve_session};

#[derive(clap::Args)]
pub struct LsArgs {
    /// One JSON object per line
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ShowArgs {
    /// Session id, unique id prefix or name
    id: String,
    /// Do not cut long texts
    #[arg(long)]
    full: bool,
}

#[derive(clap::Args)]
pub struct StatArgs {
    /// Session id, unique id prefix or name
    id: String,
    /// JSON output
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct TailArgs {
    /// Session id, unique id prefix or name
    id: String,
    /// Follow new entries as they are committed
    #[arg(short, long)]
    follow: bool,
    /// Start at this seq [default: the last 10 entries]
    #[arg(long)]
    from: Option<u64>,
}

/// A time in ms since the epoch, in the system's time zone (`TZ`, else
/// /etc/localtime), with the zone's abbreviation so that it is never read as UTC.
pub(crate) fn fmt_time(ms: u64) -> String {
    let Ok(t) = jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)) else {
        return format!("{ms} ms");
    };
    t.to_zoned_datetime(jiff::tz::TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// `n` and the noun, plural unless `n` is 1: "1 record", "2 records".
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A size in B, KiB, MiB or GiB.
pub(crate) fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

pub fn ls(root: &Option<PathBuf>, a: LsArgs) -> Result<ExitCode> {
    let store = open_store_to_read(root)?;
    let mut sessions = store.list()?;
    // Newest first by last write: the session one worked in last is on top.
    sessions.sort_by_key(|s| std::cmp::Reverse((s.updated_ms, s.created_ms)));
    let mut out = crate::out::Stdout;
    if !a.json && !sessions.is_empty() {
        writeln!(
            out,
            "{:<36}  {:<23}  {:>7}  {:>10}  {:<16}  TITLE",
            "ID", "UPDATED", "ENTRIES", "SIZE", "NAME"
        )?;
    }
    for s in sessions {
        if a.json {
            // What a writer's recovery last cut, if it ever cut anything:
            // inspection recovers nothing itself, so this is how a crash's
            // aftermath stays visible.
            let mut value = serde_json::to_value(&s)?;
            if let Ok(Some(last)) = Log::last_recovery(store.session_dir(s.id)) {
                value["last_recovery"] = serde_json::to_value(last)?;
            }
            writeln!(out, "{value}")?;
        } else {
            writeln!(
                out,
                "{:<36}  {:<23}  {:>7}  {:>10}  {:<16}  {}",
                s.id.to_string(),
                fmt_time(s.updated_ms),
                s.entries,
                // What the session holds: its records and the large items
                // they keep in the store's payload area.
                human_bytes(s.bytes.saturating_add(s.payload_bytes)),
                s.name.as_deref().unwrap_or("-"),
                match (&s.error, s.forked_from) {
                    // A session that could not be read is listed, marked.
                    (Some(e), _) => format!("DAMAGED: {e}"),
                    (None, Some(parent)) => format!(
                        "[fork of {}] {}",
                        parent.session_id,
                        s.title.as_deref().unwrap_or_default()
                    ),
                    (None, None) => s.title.clone().unwrap_or_default(),
                }
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cut(text: &str, full: bool) -> String {
    const MAX: usize = 400;
    if full || text.chars().count() <= MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(MAX).collect();
    format!("{head}… [{} more chars]", text.chars().count() - MAX)
}

pub fn show(root: &Option<PathBuf>, a: ShowArgs) -> Result<ExitCode> {
    let store = open_store_to_read(root)?;
    let id = resolve_session(&store, &a.id)?;
    open_reader(&store, id)?;
    // Through the store: a fork's history starts in its parent's log.
    let state = store.restore(id)?;
    let how = Show {
        color: std::io::stdout().is_terminal(),
        full: a.full,
    };
    let mut out = crate::out::Stdout;
    if let Some(p) = &state.system_prompt {
        writeln!(out, "{} {}", how.paint("2", "system:"), how.cut(p))?;
    }
    for item in &state.history {
        show_item(&mut out, item, &how)?;
    }
    // Turns as the transcript holds them: a fork or a compaction starts
    // with turns of its origin, which its own turn ends do not count.
    let turns = state
        .history
        .iter()
        .filter(|i| {
            matches!(
                i,
                Item::Message {
                    role: session_store::Role::User,
                    ..
                }
            )
        })
        .count() as u64;
    writeln!(
        out,
        "{} {}, interrupted: {}",
        how.paint("2", "--"),
        count(turns.max(state.turn_count), "turn"),
        state.last_run_interrupted
    )?;
    Ok(ExitCode::SUCCESS)
}

/// How `show` writes: in color on a terminal, long texts cut unless `full`.
struct Show {
    color: bool,
    full: bool,
}

impl Show {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    fn cut(&self, text: &str) -> String {
        cut(text, self.full)
    }
}

/// One item of `show`, as a line (a tool result's content indented below).
fn show_item(out: &mut dyn Write, item: &Item, how: &Show) -> std::io::Result<()> {
    match item {
        Item::Message { role, content, .. } => {
            let (label, code) = match role {
                session_store::Role::User => ("user:", "1;32"),
                session_store::Role::Assistant => ("assistant:", "1;34"),
                session_store::Role::System => ("system:", "2"),
                session_store::Role::Developer => ("developer:", "2"),
            };
            let text: Vec<String> = content.iter().map(part_summary).collect();
            writeln!(
                out,
                "{} {}",
                how.paint(code, label),
                how.cut(&text.join(""))
            )
        }
        Item::ToolCall { .. }
        | Item::CustomToolCall { .. }
        | Item::ToolResult { .. }
        | Item::ToolOutput { .. } => show_tool_item(out, item, how),
        Item::Reasoning { .. }
        | Item::ReasoningParts { .. }
        | Item::Thinking { .. }
        | Item::RedactedThinking { .. } => show_reasoning(out, item, how),
        Item::Opaque { json, .. } => {
            writeln!(out, "{} {}", how.paint("2", "item:"), json_type(json))
        }
    }
}

/// A content part of a message as `show` gives it: its text, or what it is.
fn part_summary(part: &ContentPart) -> String {
    match part {
        ContentPart::Text { text } | ContentPart::OutputText { text, .. } => text.clone(),
        ContentPart::Refusal { refusal } => format!("[refusal] {refusal}"),
        ContentPart::InputImage { .. } => "[image]".into(),
        ContentPart::InputFile { filename, .. } => match filename {
            Some(name) => format!("[file {name}]"),
            None => "[file]".into(),
        },
        ContentPart::InputAudio { .. } => "[audio]".into(),
        ContentPart::Opaque { json } => format!("[{}]", json_type(json)),
    }
}

/// [`show_item`] of a tool call or a tool's result.
fn show_tool_item(out: &mut dyn Write, item: &Item, how: &Show) -> std::io::Result<()> {
    let call = how.paint("1;33", "tool call:");
    let result = how.paint("33", "tool result:");
    match item {
        Item::ToolCall {
            call_id,
            name,
            arguments: input,
            ..
        }
        | Item::CustomToolCall {
            call_id,
            name,
            input,
            ..
        } => writeln!(out, "{call} {name}({}) [{call_id}]", how.cut(input)),
        Item::ToolResult {
            call_id,
            summary,
            content,
            ..
        } => {
            writeln!(out, "{result} [{call_id}] {}", how.cut(summary))?;
            if let Some(c) = content {
                writeln!(out, "  {}", how.cut(c).replace('\n', "\n  "))?;
            }
            Ok(())
        }
        Item::ToolOutput {
            call_id,
            output,
            is_error,
            ..
        } => {
            let text = match output {
                Some(ToolOutput::Text(text)) => text.clone(),
                Some(ToolOutput::Parts(parts)) => format!("[{} parts]", parts.len()),
                None => String::new(),
            };
            let error = if *is_error == Some(true) {
                " [error]"
            } else {
                ""
            };
            writeln!(out, "{result} [{call_id}]{error} {}", how.cut(&text))
        }
        _ => unreachable!("show_item gives show_tool_item only tool calls and results"),
    }
}

/// [`show_item`] of reasoning or thinking.
fn show_reasoning(out: &mut dyn Write, item: &Item, how: &Show) -> std::io::Result<()> {
    let reasoning = how.paint("35", "reasoning:");
    let thinking = how.paint("35", "thinking:");
    match item {
        Item::ReasoningParts { summary, .. } => {
            writeln!(out, "{reasoning} {}", how.cut(&summary.join(" / ")))
        }
        Item::Reasoning {
            summary,
            encrypted_content,
            ..
        } => {
            let enc = encrypted_content
                .as_ref()
                .map(|e| format!(" [encrypted {} B]", e.len()))
                .unwrap_or_default();
            writeln!(out, "{reasoning} {}{enc}", how.cut(&summary.join(" / ")))
        }
        Item::Thinking { thinking: text, .. } => {
            writeln!(out, "{thinking} {}", how.cut(text))
        }
        Item::RedactedThinking { extra: _, data } => {
            writeln!(out, "{thinking} [redacted {} B]", data.len())
        }
        _ => unreachable!("show_item gives show_reasoning only reasoning and thinking"),
    }
}

pub fn stat(root: &Option<PathBuf>, a: StatArgs) -> Result<ExitCode> {
    let store = open_store_to_read(root)?;
    let id = resolve_session(&store, &a.id)?;
    let log = open_reader(&store, id)?;
    let snap = log.snapshot();
    let segments = log.segment_paths();
    let report = log.recovery_report().clone();
    let last = Log::last_recovery(store.session_dir(id))?;
    let head = snap.head();
    let payload_bytes = store.info(id)?.map_or(0, |i| i.payload_bytes);
    let value = serde_json::json!({
        "id": id,
        "segments": segments.len(),
        "records": snap.next_seq() - log_start(&snap),
        "evicted": snap.evicted(),
        "bytes": log.bytes(),
        "payload_bytes": payload_bytes,
        "head_seq": head.map(|h| h.0),
        "head_hash": head.map(|h| h.1),
        "last_session_start": snap.last_session_start(),
        "recovery": report,
        "last_recovery": last,
        "verified": false,
    });
    if a.json {
        outln!("{value}")?;
    } else {
        outln!("session      {id}")?;
        outln!("segments     {}", segments.len())?;
        outln!("records      {}", snap.next_seq() - log_start(&snap))?;
        if let Some((first, last)) = snap.evicted() {
            outln!(
                "evicted      seqs {first}..={last} (in the archive; --archive URL reads them)"
            )?;
        }
        outln!("bytes        {}", human_bytes(log.bytes()))?;
        if payload_bytes > 0 {
            outln!(
                "payloads     {} (large items in the store's payload area)",
                human_bytes(payload_bytes)
            )?;
        }
        match head {
            Some((seq, h)) => outln!("head         seq {seq}, {h}")?,
            None => outln!("head         none")?,
        }
        outln!(
            "last start   {}",
            snap.last_session_start()
                .map_or("none".into(), |s| format!("seq {s}"))
        )?;
        match &report.torn_tail {
            Some(t) => outln!(
                "recovery     torn tail not yet recovered at {} offset {}: {}",
                t.segment.display(),
                t.offset,
                t.reason
            )?,
            None => outln!(
                "recovery     no torn tail; records not verified (run `session-store{} verify {id}`)",
                match root {
                    Some(r) => format!(" --root {}", shell_word(&r.display().to_string())),
                    None => String::new(),
                }
            )?,
        }
        if let Some(last) = &last {
            let what = match &last.report.torn_tail {
                Some(t) => format!(
                    "cut a torn tail at {} offset {}: {}",
                    t.segment.display(),
                    t.offset,
                    t.reason
                ),
                None => format!(
                    "removed {}",
                    count(last.report.removed.len() as u64, "file")
                ),
            };
            outln!("last cut     {}: {what}", fmt_time(last.at_ms))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tail(root: &Option<PathBuf>, a: TailArgs) -> Result<ExitCode> {
    let store = open_store_to_read(root)?;
    let id = resolve_session(&store, &a.id)?;
    let snap = open_reader(&store, id)?.snapshot();
    let from = a
        .from
        .unwrap_or_else(|| snap.next_seq().saturating_sub(10).max(snap.first_seq()));
    // A read-only store's subscription re-reads the log as the writer (in
    // another process) commits, and never takes the writer's lock.
    let mut entries = store.subscribe(id, from)?;
    let mut out = crate::out::Stdout;
    while let Some(entry) = entries.try_next() {
        writeln!(out, "{}", entry?.wire_line())?;
    }
    out.flush()?;
    if a.follow {
        for entry in entries {
            writeln!(out, "{}", entry?.wire_line())?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `type` of an opaque item or part, for display.
pub(crate) fn json_type(json: &session_store::JsonText) -> String {
    match json.to_value().get("type") {
        Some(serde_json::Value::String(t)) => t.clone(),
        _ => "untyped".into(),
    }
}

/// Seq of the log's first record, local or evicted to an archive.
fn log_start(snap: &session_store::Snapshot) -> u64 {
    snap.evicted().map_or(snap.first_seq(), |(first, _)| first)
}

/// `text` as one shell word: as it is when it needs no quoting, else in
/// single quotes.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
