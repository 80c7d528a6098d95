//! The `session-store` command: inspect, move and check session logs.
//!
//! Exit codes: 0 success; 1 an error, or damage found by `verify`; 2 a usage error.

mod archive;
mod demo;
mod grep;
mod history;
mod inspect;
mod markdown;
mod transfer;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use session_store::{Log, SessionId, Store};

#[derive(Parser)]
#[command(
    name = "session-store",
    version,
    about = "Inspect, export, import, verify and follow agent session logs",
    after_help = "Exit codes: 0 success; 1 error, or damage found by verify; 2 usage error."
)]
struct Cli {
    /// The store directory [default: $XDG_DATA_HOME/session-store or ~/.local/share/session-store]
    #[arg(long, global = true, env = "SESSION_STORE_DIR")]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write realistic agent sessions, restore, check, verify and export them
    Demo(demo::Args),
    /// List sessions, newest first
    Ls(inspect::LsArgs),
    /// Print a readable transcript of a session
    Show(inspect::ShowArgs),
    /// Export sessions: the wire form (JSONL), a history as Responses items or Messages API messages, or a Markdown transcript
    Export(transfer::ExportArgs),
    /// Import a JSONL file (wire form, Responses items or Messages API messages) as a new session; prints its id
    Import(transfer::ImportArgs),
    /// Check every CRC and chain link (exit 1 on damage)
    Verify(verify::Args),
    /// Show a session's segments, records, head and recovery report
    Stat(inspect::StatArgs),
    /// Print entries; -f follows new ones
    Tail(inspect::TailArgs),
    /// Fork a session at a seq or hash; prints the new id
    Fork(transfer::ForkArgs),
    /// Delete a session
    Rm(transfer::RmArgs),
    /// Append wire-form entries, or a plain-text user message, to a session; prints the new head
    Append(transfer::AppendArgs),
    /// Print a shell completion script
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// Search every session's entries with a regular expression
    Grep(grep::Args),
    /// Remove the large payloads no session refers to any more
    Gc(verify::GcArgs),
    /// Read other agents' transcripts
    History(history::Args),
    /// Push sessions to object storage, pull them back, list an archive
    Archive(archive::Args),
}

pub(crate) fn default_root() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("session-store");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/session-store")
}

pub(crate) fn open_store(root: &Option<PathBuf>) -> Result<Store> {
    let root = root.clone().unwrap_or_else(default_root);
    Store::open(&root).with_context(|| format!("opening store {}", root.display()))
}

/// Opens the store for a command that only reads: nothing is created or
/// changed (a read-only medium works), and a path that holds no store is an
/// error naming it.
pub(crate) fn open_store_to_read(root: &Option<PathBuf>) -> Result<Store> {
    let root = root.clone().unwrap_or_else(default_root);
    Store::open_read_only(&root).with_context(|| format!("opening store {}", root.display()))
}

/// Opens the store to read, or, with an archive URL (`--archive`), writable
/// with the archive attached, so that reads of evicted segments fetch them
/// back and place them (a read-only store never writes, so never fetches).
pub(crate) fn open_store_with_archive(
    root: &Option<PathBuf>,
    archive: &Option<String>,
) -> Result<Store> {
    let Some(url) = archive else {
        return open_store_to_read(root);
    };
    let store = open_store(root)?;
    let archive =
        session_store::Archive::open(url).with_context(|| format!("opening archive {url}"))?;
    store.attach_archive(&archive);
    Ok(store)
}

/// The session `text` names: its id, or a name given to it
/// (`Store::create_named`). An id is taken as an id, never as a name.
pub(crate) fn resolve_session(store: &Store, text: &str) -> Result<SessionId> {
    if let Ok(id) = text.parse::<SessionId>() {
        return Ok(id);
    }
    store
        .find_name(text)?
        .ok_or_else(|| anyhow::anyhow!("not found: no session id or name {text:?}"))
}

/// Opens a session's log read-only. Reading never takes the writer lock, so it
/// works beside a live writer (an agent runtime) and never locks one out.
pub(crate) fn open_reader(store: &Store, id: SessionId) -> Result<Log> {
    if !store.exists(id) {
        bail!("not found: session {id}");
    }
    Ok(store.read_log(id)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => demo::run(&cli.root, a),
        Command::Ls(a) => inspect::ls(&cli.root, a),
        Command::Show(a) => inspect::show(&cli.root, a),
        Command::Export(a) => transfer::export(&cli.root, a),
        Command::Import(a) => transfer::import(&cli.root, a),
        Command::Verify(a) => verify::run(&cli.root, a),
        Command::Gc(a) => verify::gc(&cli.root, a),
        Command::Stat(a) => inspect::stat(&cli.root, a),
        Command::Tail(a) => inspect::tail(&cli.root, a),
        Command::Fork(a) => transfer::fork(&cli.root, a),
        Command::Rm(a) => transfer::rm(&cli.root, a),
        Command::Append(a) => transfer::append(&cli.root, a),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "session-store",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Grep(a) => grep::run(&cli.root, a),
        Command::History(a) => history::run(&cli.root, a),
        Command::Archive(a) => archive::run(&cli.root, a),
    };
    match result {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            // `session-store ls | head`: the reader left; that is not an error.
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            ExitCode::from(1)
        }
    }
}

/// One line: the chain of causes, outermost first. A cause whose text the
/// message before it already ends with is left out: the library's errors
/// print their source and also return it from `source()`, and saying the OS
/// reason twice reads like two failures.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub(crate) fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
