//! `export`, `import`, `fork` and `rm`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use session_store::{
    entry_line, parse_line, responses, EntryHash, Item, LineReader, RecordView, RequestConfig,
    SessionId, Store,
};

use crate::{open_reader, open_store, parse_id, progress};

/// The form of the lines `export` prints and `import` reads.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The wire form: one log entry per line, with seq and hashes
    Wire,
    /// OpenAI Responses API items, one per line (the restored history)
    Responses,
    /// Anthropic Messages API messages `{role, content}`, one per line (the restored history)
    Anthropic,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Session id (omit with --all)
    #[arg(required_unless_present = "all")]
    id: Option<String>,
    /// What to print: the log's entries (wire), or the history restored from
    /// the last SessionStart as a provider's items or messages (the system
    /// prompt and request settings are not items, and are not printed)
    #[arg(long, value_enum, default_value = "wire")]
    format: Format,
    /// Export every session, one file each, into the directory given by -o
    #[arg(long, conflicts_with = "id", requires = "output")]
    all: bool,
    /// Output file (a directory with --all) [default: stdout]
    #[arg(short, long)]
    output: Option<PathBuf>,
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
    /// Session id
    id: String,
    /// A seq number or a 64-hex-digit hash
    #[arg(long)]
    at: String,
}

#[derive(clap::Args)]
pub struct RmArgs {
    /// Session id
    id: String,
}

/// One record as a wire line, without the newline.
pub(crate) fn record_line(rec: &RecordView<'_>) -> String {
    let prev = (rec.seq > 0).then_some(&rec.prev_hash);
    entry_line(rec.seq, &rec.hash, prev, &rec.entry.to_entry())
}

/// Writes a session's wire form, or its restored history in a provider's form.
pub(crate) fn write_session(
    store: &Store,
    id: SessionId,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64> {
    let reader = open_reader(store, id)?;
    let lines = match format {
        Format::Wire => {
            let snap = reader.snapshot();
            let mut n = 0;
            for rec in snap.iter() {
                writeln!(out, "{}", record_line(&rec?))?;
                n += 1;
            }
            return Ok(n);
        }
        Format::Responses => responses::history_to_items(&reader.restore()?.history)?,
        Format::Anthropic => Item::to_anthropic_messages(&reader.restore()?.history)?,
    };
    for line in &lines {
        writeln!(out, "{line}")?;
    }
    Ok(lines.len() as u64)
}

pub fn export(root: &Option<PathBuf>, a: ExportArgs) -> Result<ExitCode> {
    let store = open_store(root)?;
    if a.all {
        let Some(dir) = a.output else {
            bail!("export --all needs -o DIR")
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let sessions = store.list()?;
        let bar = progress(sessions.len() as u64, "export");
        for s in sessions {
            let path = dir.join(format!("{}.jsonl", s.id));
            let mut f = BufWriter::new(
                File::create(&path).with_context(|| format!("creating {}", path.display()))?,
            );
            write_session(&store, s.id, a.format, &mut f)
                .with_context(|| format!("session {}", s.id))?;
            f.flush()
                .with_context(|| format!("writing {}", path.display()))?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        return Ok(ExitCode::SUCCESS);
    }
    let Some(id) = a.id else {
        bail!("give a session id, or --all")
    };
    let id = parse_id(&id)?;
    match a.output {
        Some(path) => {
            let mut f = BufWriter::new(
                File::create(&path).with_context(|| format!("creating {}", path.display()))?,
            );
            write_session(&store, id, a.format, &mut f)?;
            f.flush()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        None => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            write_session(&store, id, a.format, &mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn import(root: &Option<PathBuf>, a: ImportArgs) -> Result<ExitCode> {
    let (reader, name, len): (Box<dyn BufRead>, String, u64) = if a.file == "-" {
        (
            Box::new(BufReader::new(std::io::stdin().lock())),
            "<stdin>".into(),
            0,
        )
    } else {
        let f = File::open(&a.file).with_context(|| format!("opening {}", a.file))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (
            Box::new(BufReader::with_capacity(1 << 20, f)),
            a.file.clone(),
            len,
        )
    };
    let bar = progress(len, "import");
    if len < 16 << 20 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut lines = LineReader::new(reader);
    let mut parsed = Vec::new();
    let mut items = Vec::new();
    let mut read = 0u64;
    while let Some((no, text)) = lines.next_line().with_context(|| name.clone())? {
        read += text.len() as u64 + 1;
        bar.set_position(read);
        let line = || format!("{name}: line {no}");
        match a.format {
            Format::Wire => parsed.push((no, parse_line(text, no).with_context(|| name.clone())?)),
            Format::Responses => items.push(Item::from_responses_json(text).with_context(line)?),
            Format::Anthropic => {
                items.extend(Item::from_anthropic_message(text).with_context(line)?)
            }
        }
    }
    bar.finish_and_clear();
    let store = open_store(root)?;
    let id = if a.format == Format::Wire {
        store.import(&parsed).with_context(|| name.clone())?
    } else {
        let (id, mut head) = store.create_session(None, RequestConfig::default(), &[])?;
        store
            .save_delta(id, &mut head, &items)
            .with_context(|| name.clone())?;
        id
    };
    store.close()?;
    println!("{id}");
    Ok(ExitCode::SUCCESS)
}

pub fn fork(root: &Option<PathBuf>, a: ForkArgs) -> Result<ExitCode> {
    let store = open_store(root)?;
    let id = parse_id(&a.id)?;
    let (new_id, _) = if a.at.len() == 64 {
        store.fork_at(id, a.at.parse::<EntryHash>()?)?
    } else {
        let seq: u64 =
            a.at.parse()
                .with_context(|| format!("--at {:?} is neither a seq nor a hash", a.at))?;
        store.fork_at_seq(id, seq)?
    };
    store.close()?;
    println!("{new_id}");
    Ok(ExitCode::SUCCESS)
}

pub fn rm(root: &Option<PathBuf>, a: RmArgs) -> Result<ExitCode> {
    let store = open_store(root)?;
    store.delete(parse_id(&a.id)?)?;
    Ok(ExitCode::SUCCESS)
}
