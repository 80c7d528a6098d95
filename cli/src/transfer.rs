//! `export`, `import`, `fork` and `rm`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use session_store::{
    responses, wire::parse_line, wire::LineReader, Deletion, EntryHash, Item, RequestConfig,
    SessionId, Store,
};

use crate::{open_store, progress};

/// The form of the lines `import` reads.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The wire form: one log entry per line, with seq and hashes
    Wire,
    /// OpenAI Responses API items, one per line (the restored history)
    Responses,
    /// Anthropic Messages API messages `{role, content}`, one per line (the restored history)
    Anthropic,
}

/// What `export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// The wire form: one log entry per line, with seq and hashes
    Wire,
    /// OpenAI Responses API items, one per line (the restored history)
    Responses,
    /// Anthropic Messages API messages `{role, content}`, one per line (the restored history)
    Anthropic,
    /// A readable transcript of the whole log, for a code host (not importable)
    Markdown,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Session id, unique id prefix or name (omit with --all)
    #[arg(required_unless_present = "all")]
    id: Option<String>,
    /// What to print: the log's entries (wire), or the history restored from
    /// the last SessionStart as a provider's items or messages (the system
    /// prompt and request settings are not items, and are not printed)
    #[arg(long, value_enum, default_value = "wire")]
    format: ExportFormat,
    /// With --format responses: the items ready for a stateless re-send,
    /// without provider item ids and statuses [default: as they were given]
    #[arg(long)]
    resend: bool,
    /// Export every session, one file each, into the directory given by -o
    #[arg(long, conflicts_with = "id", requires = "output")]
    all: bool,
    /// Output file (a directory with --all) [default: stdout]
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// An archive to fetch evicted segments back from (s3://…, file:///…);
    /// opens the store writable, since fetched segments are placed again
    #[arg(long)]
    archive: Option<String>,
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// A JSONL file, or - for stdin
    file: String,
    /// What the lines are: wire-form entries, Responses items or Messages API
    /// messages (the last two become the history of a new session)
    #[arg(long, value_enum, default_value = "wire")]
    format: Format,
}

#[derive(clap::Args)]
pub struct ForkArgs {
    /// Session id, unique id prefix or name
    id: String,
    /// A seq number or a 64-hex-digit hash
    #[arg(long)]
    at: At,
}

/// Where `fork --at` cuts: a seq, or the hash of an entry.
#[derive(Clone, Copy)]
pub enum At {
    /// The entry with this seq.
    Seq(u64),
    /// The entry with this hash.
    Hash(EntryHash),
}

impl FromStr for At {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<At, String> {
        if s.len() == 64 {
            return s.parse().map(At::Hash).map_err(|e| e.to_string());
        }
        s.parse()
            .map(At::Seq)
            .map_err(|_| format!("{s:?} is neither a seq nor a 64-hex-digit hash"))
    }
}

#[derive(clap::Args)]
pub struct RmArgs {
    /// Session id, unique id prefix or name
    id: String,
}

#[derive(clap::Args)]
pub struct AppendArgs {
    /// Session id, unique id prefix or name
    id: String,
    /// A file of wire-form entries, one per line, or - for stdin. The store
    /// computes seq and hashes, so the lines carry none.
    #[arg(default_value = "-")]
    file: String,
    /// The input is plain text: append it as one user message
    #[arg(long)]
    text: bool,
    /// Append only if this is still the session's head [default: the current head]
    #[arg(long)]
    head: Option<EntryHash>,
}

/// Creates `dir` and any missing parents, 0700: exports hold what the
/// sessions hold, credentials included.
fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("create dir {}", dir.display()))
}

/// Writes `path` (0600) whole or not at all: `write` fills a temporary file
/// in the same directory, which is synced and renamed into place only when
/// `write` succeeded, and the directory is synced after. On any error the
/// temporary file is removed and `path` is untouched, so a failed export
/// never leaves a shorter file that imports cleanly.
///
/// A path that exists and is not a regular file (`/dev/stdout`, a pipe) is
/// written in place: renaming over it would replace the device.
pub(crate) fn write_file_atomically<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<T>,
) -> Result<T> {
    let named = || format!("writing {}", path.display());
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(named)?;
        let mut out = BufWriter::new(file);
        let value = write(&mut out).with_context(named)?;
        out.flush().with_context(named)?;
        return Ok(value);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.as_deref().unwrap_or("export")))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .with_context(named)?;
    let mut out = BufWriter::new(tmp);
    let value = write(&mut out).with_context(named)?;
    let tmp = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(named)?;
    tmp.as_file().sync_all().with_context(named)?;
    tmp.persist(path).map_err(|e| e.error).with_context(named)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("sync dir {}", dir.display()))?;
    Ok(value)
}

/// Writes a session's wire form, or its restored history in a provider's form.
pub(crate) fn write_session(
    store: &Store,
    id: SessionId,
    format: ExportFormat,
    form: session_store::Form,
    out: &mut dyn Write,
) -> Result<u64> {
    if !store.exists(id) {
        return Err(crate::out::not_found(format!("session {id}")));
    }
    let lines = match format {
        ExportFormat::Wire => return Ok(store.export(id, out)?),
        ExportFormat::Markdown => return crate::markdown::write_markdown(store, id, out),
        ExportFormat::Responses => responses::history_to_items(&store.restore(id)?.history, form)?,
        ExportFormat::Anthropic => Item::to_anthropic_messages(&store.restore(id)?.history)?,
    };
    for line in &lines {
        writeln!(out, "{line}")?;
    }
    Ok(lines.len() as u64)
}

pub fn export(root: &Option<PathBuf>, a: ExportArgs) -> Result<ExitCode> {
    let store = crate::open_store_with_archive(root, &a.archive)?;
    if a.resend && a.format != ExportFormat::Responses {
        return Err(crate::out::usage("--resend is for --format responses"));
    }
    let form = if a.resend {
        session_store::Form::Resend
    } else {
        session_store::Form::AsStored
    };
    if a.all {
        let Some(dir) = a.output else {
            return Err(crate::out::usage("export --all needs -o DIR"));
        };
        create_private_dir(&dir)?;
        let sessions = store.list()?;
        let total = sessions.len();
        let bar = progress(sessions.len() as u64, "export");
        let mut failed = 0;
        for s in sessions {
            let ext = match a.format {
                ExportFormat::Markdown => "md",
                _ => "jsonl",
            };
            let path = dir.join(format!("{}.{ext}", s.id));
            // One session that cannot be read does not stop the others.
            if let Err(e) = write_file_atomically(&path, |out| {
                write_session(&store, s.id, a.format, form, out)
            }) {
                failed += 1;
                bar.suspend(|| eprintln!("error: session {}: {}", s.id, crate::error_line(&e)));
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        eprintln!(
            "exported {} of {total} sessions to {}{}",
            total - failed,
            dir.display(),
            if failed > 0 {
                format!("; {failed} failed (above)")
            } else {
                String::new()
            }
        );
        return Ok(if failed > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let Some(id) = a.id else {
        return Err(crate::out::usage("give a session id, or --all"));
    };
    let id = crate::resolve_session(&store, &id)?;
    match a.output {
        Some(path) => {
            write_file_atomically(&path, |out| write_session(&store, id, a.format, form, out))?;
        }
        None => {
            let mut out = BufWriter::new(crate::out::Stdout);
            write_session(&store, id, a.format, form, &mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The input `import` and `append` read: a file, or stdin for `-`; with
/// the name to put in errors and the length, when known, for progress.
fn open_input(file: &str) -> Result<(Box<dyn BufRead>, String, u64)> {
    if file == "-" {
        return Ok((
            Box::new(BufReader::new(std::io::stdin().lock())),
            "<stdin>".into(),
            0,
        ));
    }
    let f = File::open(file).with_context(|| format!("opening {file}"))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((
        Box::new(BufReader::with_capacity(1 << 20, f)),
        file.to_string(),
        len,
    ))
}

pub fn import(root: &Option<PathBuf>, a: ImportArgs) -> Result<ExitCode> {
    let (reader, name, len) = open_input(&a.file)?;
    let bar = progress(len, "import");
    if len < 16 << 20 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let reader = bar.wrap_read(reader);
    let id = if a.format == Format::Wire {
        let store = open_store(root)?;
        let id = store.import_from(reader).with_context(|| name.clone())?;
        store.close()?;
        id
    } else {
        let mut lines = LineReader::new(reader);
        let mut items = Vec::new();
        while let Some((no, text)) = lines.next_line().with_context(|| name.clone())? {
            let line = || format!("{name}: line {no}");
            match a.format {
                Format::Anthropic => {
                    items.extend(Item::from_anthropic_message(text).with_context(line)?)
                }
                _ => items.push(Item::from_responses_json(text).with_context(line)?),
            }
        }
        let store = open_store(root)?;
        let (id, mut head) = store.create_session(None, RequestConfig::default(), &[])?;
        store
            .save_delta(id, &mut head, &items)
            .with_context(|| name.clone())?;
        store.close()?;
        id
    };
    bar.finish_and_clear();
    outln!("{id}")?;
    Ok(ExitCode::SUCCESS)
}

pub fn fork(root: &Option<PathBuf>, a: ForkArgs) -> Result<ExitCode> {
    let store = crate::open_existing_store(root)?;
    let id = crate::resolve_session(&store, &a.id)?;
    let (new_id, _) = match a.at {
        At::Hash(hash) => store.fork_at(id, hash)?,
        At::Seq(seq) => store.fork_at_seq(id, seq)?,
    };
    store.close()?;
    outln!("{new_id}")?;
    Ok(ExitCode::SUCCESS)
}

pub fn rm(root: &Option<PathBuf>, a: RmArgs) -> Result<ExitCode> {
    let store = crate::open_existing_store(root)?;
    let id = crate::resolve_session(&store, &a.id)?;
    match store.delete(id)? {
        Deletion::Removed => {}
        // Said on stderr: stdout stays empty for scripts, as for a removal.
        Deletion::Retired { forks } => {
            let n = forks.len();
            let list: Vec<String> = forks.iter().map(|f| f.to_string()).collect();
            eprintln!(
                "{}: removed from the listing; {n} fork{} still read{} its history ({}), so its log is kept, hidden, until the last of them is removed",
                id,
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" },
                list.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `append` writes.
enum Appended {
    /// Wire-form entries, as read.
    Entries(Vec<session_store::LogEntry>),
    /// The one user message of `--text`.
    Message(Item),
}

pub fn append(root: &Option<PathBuf>, a: AppendArgs) -> Result<ExitCode> {
    // The session first: a wrong id or name is said before any input is read.
    let store = crate::open_existing_store(root)?;
    let id = crate::resolve_session(&store, &a.id)?;
    let (mut reader, name, _) = open_input(&a.file)?;
    let input = if a.text {
        let mut text = String::new();
        reader
            .read_to_string(&mut text)
            .with_context(|| name.clone())?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        if text.trim().is_empty() {
            bail!("{name}: no text to append");
        }
        Appended::Message(Item::user_text(text))
    } else {
        let mut lines = LineReader::new(reader);
        let mut entries = Vec::new();
        while let Some((no, text)) = lines.next_line().with_context(|| name.clone())? {
            let wire = parse_line(text, no).with_context(|| name.clone())?;
            if wire.seq.is_some() || wire.hash.is_some() || wire.prev_hash.is_some() {
                bail!(
                    "{name}: line {no}: append takes entries without seq, hash or prev_hash: \
                     the store computes them (check the head with --head)"
                );
            }
            entries.push(wire.entry);
        }
        if entries.is_empty() {
            bail!("{name}: no entries to append");
        }
        Appended::Entries(entries)
    };
    let mut head = match a.head {
        Some(h) => h,
        None => store
            .head(id)?
            .with_context(|| format!("session {id} has no entries"))?,
    };
    match &input {
        Appended::Entries(entries) => store.save_entries(id, &mut head, entries)?,
        Appended::Message(message) => {
            store.save_delta(id, &mut head, std::slice::from_ref(message))?
        }
    }
    store.close()?;
    outln!("{head}")?;
    Ok(ExitCode::SUCCESS)
}
