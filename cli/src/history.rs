//! `history agy|claude|codex`: read another agent's transcript, show it, or
//! import it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use session_store::history::claude::{self, ClaudeReader, ClaudeSession};
use session_store::history::codex::CodexReader;
use session_store::{
    history::CompactHistory, history::Discovery, history::HistoryImport, history::HistoryMessage,
    history::HistoryService, history::ItemCounts, history::Locator, history::ReadStats,
};

use crate::open_store;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    source: Source,
}

#[derive(clap::Subcommand)]
enum Source {
    /// Antigravity CLI transcripts
    Agy(CommonArgs),
    /// Claude Code transcripts (~/.claude/projects, or under $CLAUDE_CONFIG_DIR)
    Claude(ClaudeArgs),
    /// Codex CLI rollouts (~/.codex/sessions, or under $CODEX_HOME)
    Codex(CommonArgs),
}

#[derive(clap::Args)]
#[command(
    group(clap::ArgGroup::new("locator").required(true).args(["cwd", "session", "path"])),
    subcommand_negates_reqs = true
)]
struct CommonArgs {
    #[command(subcommand)]
    action: Option<Action>,
    /// Home directory to look under [default: $HOME, or the tool's own variable]
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    /// Find the newest conversation whose workspace is exactly this directory
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// The conversation id
    #[arg(long)]
    session: Option<String>,
    /// The transcript file itself, wherever it lies
    #[arg(long)]
    path: Option<PathBuf>,
    /// One JSON object per message per line
    #[arg(long)]
    json: bool,
    /// One JSON object with the compact summary
    #[arg(long)]
    compact: bool,
    /// Store the conversation (once per content) and print the id of the session to resume
    #[arg(long)]
    import: bool,
    /// Say why nothing was found, and what reading skipped
    #[arg(long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct ClaudeArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// A subagent's transcript (a sidechain) instead of the main one
    #[arg(long)]
    agent: Option<String>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List the transcripts found: id, workspace, messages, time, first prompt
    Ls {
        /// One JSON object per transcript per line
        #[arg(long)]
        json: bool,
    },
}

/// A tool's own variable for its root, used when `--home` is not given.
fn env_root(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

pub fn run(root: &Option<PathBuf>, a: Args) -> Result<ExitCode> {
    let (service, name, a, agent) = service_for(a.source);
    let home = a
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .context("no --home and no $HOME")?;
    if let Some(Action::Ls { json }) = &a.action {
        return list(&service, name, &home, *json);
    }
    let locator = match (&a.session, &a.cwd) {
        (Some(id), _) => Locator::SessionId(id.clone()),
        (None, cwd) => Locator::Cwd(cwd.clone()),
    };
    let not_found = |reason: &dyn std::fmt::Display| {
        if a.verbose {
            eprintln!("no {name} history: {reason}");
        } else {
            eprintln!("no {name} history found (use --verbose for the reason)");
        }
        Ok(ExitCode::SUCCESS)
    };
    let path = match (&a.path, service.discover(name, &home, &locator)) {
        (Some(path), _) if path.is_file() => path.clone(),
        (Some(path), _) => {
            eprintln!("error: no transcript file at {}", path.display());
            return Ok(ExitCode::from(3));
        }
        (None, Discovery::Found { path, .. }) => path,
        (None, Discovery::NotFound(reason)) => return not_found(&reason),
    };
    let transcript = match name {
        "claude" => match read_claude(&path, agent, a.verbose)? {
            Ok(transcript) => transcript,
            Err(reason) => return not_found(&reason),
        },
        _ => Transcript::Service(&service, name, &path),
    };
    if a.verbose {
        print_stats(&path, &transcript.stats()?);
    }
    write_transcript(root, &a, &transcript)?;
    Ok(ExitCode::SUCCESS)
}

/// The history service, with the tool's reader rooted at the tool's own
/// variable when there is no `--home`; the tool's name, its arguments and
/// the subagent asked for.
fn service_for(source: Source) -> (HistoryService, &'static str, CommonArgs, Option<String>) {
    let mut service = HistoryService::with_default_readers();
    let (name, a, agent) = match source {
        Source::Agy(a) => ("agy", a, None),
        Source::Claude(c) => {
            if c.common.home.is_none() {
                if let Some(dir) = env_root("CLAUDE_CONFIG_DIR") {
                    service.register(Box::new(ClaudeReader::with_root(dir)));
                }
            }
            ("claude", c.common, c.agent)
        }
        Source::Codex(a) => {
            if a.home.is_none() {
                if let Some(dir) = env_root("CODEX_HOME") {
                    service.register(Box::new(CodexReader::with_root(dir)));
                }
            }
            ("codex", a, None)
        }
    };
    (service, name, a, agent)
}

/// Claude Code's main transcript at `path`, or its subagent `agent`'s;
/// `Err` with the reason when there is no such subagent.
fn read_claude(
    path: &Path,
    agent: Option<String>,
    verbose: bool,
) -> Result<std::result::Result<Transcript<'static>, String>> {
    let session = if agent.is_some() || verbose {
        ClaudeSession::read_with_subagents(path)?
    } else {
        ClaudeSession::read(path)?
    };
    if verbose && !session.sidechains.is_empty() {
        let agents: Vec<&str> = session.sidechains.keys().map(String::as_str).collect();
        eprintln!("subagents (--agent): {}", agents.join(", "));
    }
    Ok(match agent {
        None => Ok(Transcript::Claude(Box::new(session.main), None)),
        Some(agent) => match session.sidechains.get(&agent) {
            Some(t) => Ok(Transcript::Claude(Box::new(t.clone()), Some(agent))),
            None => Err(format!("no subagent {agent:?} in {}", path.display())),
        },
    })
}

/// Imports the transcript and prints the session to resume, or prints its
/// compact summary, or its messages (as JSON lines or as text).
fn write_transcript(root: &Option<PathBuf>, a: &CommonArgs, transcript: &Transcript) -> Result<()> {
    let mut out = crate::out::Stdout;
    if a.import {
        let import = transcript.import()?;
        let store = open_store(root)?;
        let imported = import.write_once_to(&store)?;
        let stored = HistoryImport::stored_counts(&store, imported.session)?;
        store.close()?;
        let live = imported.session;
        if !imported.created {
            eprintln!("already imported: {live}");
        }
        report(&import.counts(), &stored, &transcript.stats()?);
        writeln!(out, "{live}")?;
    } else if a.compact {
        writeln!(out, "{}", serde_json::to_string(&transcript.compact()?)?)?;
    } else {
        for m in transcript.messages()? {
            if a.json {
                writeln!(out, "{}", m.to_json_line())?;
            } else {
                let who = match (&m.tool_name, m.is_error, m.role) {
                    (Some(t), true, _) => format!("tool result ({t}, error)"),
                    (Some(t), false, _) => format!("tool result ({t})"),
                    (None, true, _) => "tool result (error)".to_owned(),
                    (None, false, role) => format!("{role:?}").to_lowercase(),
                };
                writeln!(out, "{who}: {}", m.text)?;
            }
        }
    }
    Ok(())
}

/// A discovered transcript, read through the service or, for Claude Code's
/// main transcript or a subagent's, read already.
enum Transcript<'a> {
    Service(&'a HistoryService, &'a str, &'a Path),
    Claude(Box<session_store::history::ItemTranscript>, Option<String>),
}

impl Transcript<'_> {
    fn messages(&self) -> Result<Vec<HistoryMessage>> {
        Ok(match self {
            Transcript::Service(s, name, path) => s.read_messages(name, path)?,
            Transcript::Claude(t, _) => t.messages(),
        })
    }

    fn compact(&self) -> Result<CompactHistory> {
        Ok(match self {
            Transcript::Service(s, name, path) => s.read_compact(name, path)?,
            Transcript::Claude(t, _) => t.compact(),
        })
    }

    fn import(&self) -> Result<HistoryImport> {
        Ok(match self {
            Transcript::Service(s, name, path) => s.read_import(name, path)?,
            Transcript::Claude(t, agent) => claude::import_of(t, agent.as_deref()),
        })
    }

    fn stats(&self) -> Result<ReadStats> {
        Ok(match self {
            Transcript::Service(s, name, path) => s.read_stats(name, path)?,
            Transcript::Claude(t, _) => t.stats.clone(),
        })
    }
}

/// The import report, on stderr: what the transcript holds, what the
/// store now holds, and what reading left out.
fn report(file: &ItemCounts, store: &ItemCounts, stats: &ReadStats) {
    eprintln!("transcript: {file}");
    eprintln!("store:      {store}");
    if file != store {
        eprintln!("the counts differ: the store holds what it was given; see --verbose");
    }
    if stats.off_path > 0 {
        let kinds: Vec<String> = stats
            .left_out
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        eprintln!(
            "left out {} lines off the conversation (abandoned edits, rewinds): {}",
            stats.off_path,
            kinds.join(", ")
        );
    }
}

/// Lists the transcripts the reader finds, one a line (or one JSON object
/// a line), oldest file first.
fn list(service: &HistoryService, name: &str, home: &Path, json: bool) -> Result<ExitCode> {
    let mut out = crate::out::Stdout;
    let paths = service.list(name, home)?;
    if !json {
        writeln!(
            out,
            "{:<36}  {:<30}  {:>8}  {:<24}  FIRST PROMPT",
            "ID", "WORKSPACE", "MESSAGES", "TIME"
        )?;
    }
    for path in paths {
        let (import, messages) = match (
            service.read_import(name, &path),
            service.read_messages(name, &path),
        ) {
            (Ok(import), Ok(messages)) => (import, messages),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("{}: {e}", path.display());
                continue;
            }
        };
        let text = |k: &str| {
            import.provenance[k]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_default()
        };
        let time = messages
            .iter()
            .find_map(|m| m.timestamp.clone())
            .unwrap_or_default();
        let prompt = import.title.clone().unwrap_or_default();
        if json {
            let line = serde_json::json!({
                "id": text("session_id"),
                "workspace": text("cwd"),
                "messages": messages.len(),
                "time": time,
                "first_prompt": prompt,
                "path": path,
            });
            writeln!(out, "{line}")?;
        } else {
            writeln!(
                out,
                "{:<36}  {:<30}  {:>8}  {:<24}  {}",
                text("session_id"),
                text("cwd"),
                messages.len(),
                time,
                prompt.replace('\n', " ")
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What reading skipped, on stderr, one line.
fn print_stats(path: &Path, stats: &ReadStats) {
    let mut parts = vec![format!("read {} lines of {}", stats.lines, path.display())];
    if stats.malformed_lines > 0 {
        let lines: Vec<String> = stats
            .first_malformed
            .iter()
            .map(|n| n.to_string())
            .collect();
        parts.push(format!(
            "skipped {} malformed (line {})",
            stats.malformed_lines,
            lines.join(", ")
        ));
    }
    if !stats.unknown_types.is_empty() {
        let kinds: Vec<String> = stats
            .unknown_types
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        parts.push(format!("skipped unknown types: {}", kinds.join(", ")));
    }
    if stats.off_path > 0 {
        let lines: Vec<String> = stats.first_left_out.iter().map(|n| n.to_string()).collect();
        let kinds: Vec<String> = stats
            .left_out
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        parts.push(format!(
            "left out {} off the followed path (abandoned branches, rolled-back turns: {}; line {})",
            stats.off_path,
            kinds.join(", "),
            lines.join(", ")
        ));
    }
    if stats.sidechain_lines > 0 {
        parts.push(format!(
            "kept {} subagent lines apart",
            stats.sidechain_lines
        ));
    }
    if !stats.metadata.is_empty() {
        let n: usize = stats.metadata.values().sum();
        parts.push(format!("{n} metadata lines"));
    }
    if let Some(line) = stats.torn_at_line {
        parts.push(format!("the compressed stream breaks off at line {line}"));
    }
    eprintln!("{}", parts.join("; "));
}
