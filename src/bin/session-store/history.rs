//! `history agy`: read an Antigravity CLI transcript, show it, or import it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use session_store::{Discovery, HistoryService, Locator};

use crate::open_store;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    source: Source,
}

#[derive(clap::Subcommand)]
enum Source {
    /// Antigravity CLI transcripts
    Agy(AgyArgs),
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("locator").required(true).args(["cwd", "session"])))]
struct AgyArgs {
    /// Home directory to look under [default: $HOME]
    #[arg(long)]
    home: Option<PathBuf>,
    /// Find the newest conversation whose workspace is exactly this directory
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// The conversation id
    #[arg(long)]
    session: Option<String>,
    /// One JSON object per message per line
    #[arg(long)]
    json: bool,
    /// One JSON object with the compact summary
    #[arg(long)]
    compact: bool,
    /// Store the conversation as a new session and print its id
    #[arg(long)]
    import: bool,
    /// Say why nothing was found
    #[arg(long)]
    verbose: bool,
}

pub fn run(root: &Option<PathBuf>, a: Args) -> Result<ExitCode> {
    let Source::Agy(a) = a.source;
    let home = a
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .context("no --home and no $HOME")?;
    let service = HistoryService::with_default_readers();
    let locator = match (&a.session, &a.cwd) {
        (Some(id), _) => Locator::SessionId(id.clone()),
        (None, cwd) => Locator::Cwd(cwd.clone()),
    };
    let path = match service.discover("agy", &home, &locator) {
        Discovery::Found { path, .. } => path,
        Discovery::NotFound(reason) => {
            if a.verbose {
                eprintln!("no agy history: {reason}");
            } else {
                eprintln!("no agy history found (use --verbose for the reason)");
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let mut out = std::io::stdout().lock();
    if a.import {
        let import = service.read_import("agy", &path)?;
        let store = open_store(root)?;
        let id = import.write_to(&store)?;
        store.close()?;
        writeln!(out, "{id}")?;
    } else if a.compact {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&service.read_compact("agy", &path)?)?
        )?;
    } else {
        for m in service.read_messages("agy", &path)? {
            if a.json {
                writeln!(out, "{}", m.to_json_line())?;
            } else {
                let who = match (&m.tool_name, m.is_error) {
                    (Some(t), true) => format!("tool result ({t}, error)"),
                    (Some(t), false) => format!("tool result ({t})"),
                    _ => format!("{:?}", m.role).to_lowercase(),
                };
                writeln!(out, "{who}: {}", m.text)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
