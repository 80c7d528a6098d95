//! The `session-store` command: inspect, move and check session logs.
//!
//! Exit codes: 0 success; 1 an error, or damage found by `verify`; 2 a usage
//! error; 3 not found (a session, store, archive or file); 141 standard
//! output closed by its reader (`… | head`).

#[macro_use]
mod out;
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

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use session_store::{Log, SessionId, Store};

#[derive(Parser)]
#[command(
    name = "session-store",
    version,
    about = "Inspect, export, import, verify and follow agent session logs",
    after_help = "Exit codes: 0 success; 1 error, or damage found by verify; 2 usage error; \
                  3 not found (a session, store, archive or file); 141 standard output \
                  closed by its reader."
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
    /// Print a readable transcript of a session's live history: from its last compaction on (`export --format markdown` prints the whole log)
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

/// Opens the store to write, creating it: only for the commands that make
/// sessions (`demo`, `import`, `history … --import`), and only where the
/// path is missing or an empty directory: a typo, or a directory that holds
/// something else, is not turned into a store.
pub(crate) fn open_store(root: &Option<PathBuf>) -> Result<Store> {
    let root = root.clone().unwrap_or_else(default_root);
    if !is_store(&root) && !is_missing_or_empty(&root) {
        return Err(out::usage(format!(
            "{} holds files but no store: give --root a store, a new path or an empty directory",
            root.display()
        )));
    }
    opened(&root)
}

/// Opens the store at `root` to write, and warns of the sessions whose
/// records in a crashed handle's journal its recovery could not put back
/// (the store refuses to write them).
fn opened(root: &std::path::Path) -> Result<Store> {
    let store = Store::open(root).with_context(|| format!("opening store {}", root.display()))?;
    for u in store.unapplied_journals() {
        eprintln!(
            "warning: session {}: acknowledged records in {} were not put back ({}); the session is not written until the store is opened with salvage recovery",
            u.session,
            u.journal.display(),
            u.reason
        );
    }
    Ok(store)
}

/// Opens an existing store to write: a path that holds no store is "not
/// found" (exit 3), and nothing is created.
pub(crate) fn open_existing_store(root: &Option<PathBuf>) -> Result<Store> {
    let root = root.clone().unwrap_or_else(default_root);
    if !is_store(&root) {
        return Err(out::not_found(format!("no store at {}", root.display())));
    }
    opened(&root)
}

/// Whether `root` holds a store (its `sessions/` directory). A path that
/// cannot be looked at (a permission) counts as one, so that opening it
/// reports the operating system's reason.
fn is_store(root: &std::path::Path) -> bool {
    match std::fs::metadata(root.join("sessions")) {
        Ok(m) => m.is_dir(),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
        ),
    }
}

/// Whether `root` is missing or an empty directory: where a store may be
/// made. One that cannot be read counts as such, so that making the store
/// there reports the operating system's reason.
fn is_missing_or_empty(root: &std::path::Path) -> bool {
    match std::fs::read_dir(root) {
        Ok(mut entries) => entries.next().is_none(),
        Err(_) => true,
    }
}

/// Opens the store for a command that only reads: nothing is created or
/// changed (a read-only medium works), and a path that holds no store is an
/// error naming it.
pub(crate) fn open_store_to_read(root: &Option<PathBuf>) -> Result<Store> {
    let root = root.clone().unwrap_or_else(default_root);
    if !is_store(&root) {
        return Err(out::not_found(format!("no store at {}", root.display())));
    }
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
    let store = open_existing_store(root)?;
    let archive =
        session_store::Archive::open(url).with_context(|| format!("opening archive {url}"))?;
    store.attach_archive(&archive);
    Ok(store)
}

/// The session `text` names, found the same way by every command: its id
/// (in any letter case), a name given to it (`Store::create_named`), or a
/// prefix of one id alone (at least 4 characters). An id is taken as an
/// id, never as a name; a prefix two ids share is a usage error naming
/// them; nothing found is "not found" (exit 3).
pub(crate) fn resolve_session(store: &Store, text: &str) -> Result<SessionId> {
    let lower = text.to_ascii_lowercase();
    if let Ok(id) = lower.parse::<SessionId>() {
        if !store.exists(id) {
            return Err(out::not_found(format!("session {id}")));
        }
        return Ok(id);
    }
    if let Ok(Some(id)) = store.find_name(text) {
        return Ok(id);
    }
    let hexish = lower.len() >= 4 && lower.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if hexish {
        let matching: Vec<SessionId> = store
            .list()?
            .into_iter()
            .map(|s| s.id)
            .filter(|id| id.to_string().starts_with(&lower))
            .collect();
        match matching.as_slice() {
            [one] => return Ok(*one),
            [] => {}
            many => {
                let shown: Vec<String> = many.iter().take(5).map(|id| id.to_string()).collect();
                return Err(out::usage(format!(
                    "{text:?} is the start of {} session ids ({}{}): give more of it",
                    many.len(),
                    shown.join(", "),
                    if many.len() > 5 { ", …" } else { "" }
                )));
            }
        }
    }
    Err(out::not_found(format!(
        "no session id, id prefix or name {text:?}"
    )))
}

/// Opens a session's log read-only. Reading never takes the writer lock, so it
/// works beside a live writer (an agent runtime) and never locks one out.
pub(crate) fn open_reader(store: &Store, id: SessionId) -> Result<Log> {
    if !store.exists(id) {
        return Err(out::not_found(format!("session {id}")));
    }
    Ok(store.read_log(id)?)
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Only a --root on the command line sends the demo to a store.
    let root_given =
        subcommand_value_source(&matches, "root") == Some(clap::parser::ValueSource::CommandLine);
    let result = match cli.command {
        Command::Demo(a) => demo::run(&if root_given { cli.root.clone() } else { None }, a),
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
        // `session-store ls | head`: the reader left, which is not an error.
        _ if out::closed() => ExitCode::from(out::CLOSED_PIPE),
        Ok(code) => code,
        Err(e) => match out::code_of(&e) {
            out::CLOSED_PIPE => ExitCode::from(out::CLOSED_PIPE),
            // A usage error's message is the user's to read, lines and all
            // (a regex error points at the pattern on a line of its own).
            out::USAGE => {
                eprintln!("error: {e}");
                ExitCode::from(out::USAGE)
            }
            code => {
                eprintln!("error: {}", error_line(&e));
                ExitCode::from(code)
            }
        },
    }
}

/// Where the value of global argument `id` came from, looked up where it
/// was given: on the top level or on the subcommand.
fn subcommand_value_source(
    matches: &clap::ArgMatches,
    id: &str,
) -> Option<clap::parser::ValueSource> {
    let mut m = matches;
    let mut source = m.value_source(id);
    while let Some((_, sub)) = m.subcommand() {
        if let Some(s) = sub.value_source(id) {
            source = Some(s);
        }
        m = sub;
    }
    source
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
