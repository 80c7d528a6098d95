//! `archive push`, `archive pull`, `archive evict`, `archive ls`: sessions to
//! and from object storage (`s3://bucket/prefix`, `file:///path`, `memory://`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use session_store::{archive::RestorePoint, archive::Transfer, Archive, SessionId, Store};

/// `archive`.
#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Upload sessions: sealed segments not archived yet, the synced tail of the active segment, then the manifest
    Push {
        /// Where: s3://bucket/prefix (AWS_* variables: AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, …), file:///path, memory://
        #[arg(long)]
        to: String,
        /// Session ids or names
        ids: Vec<String>,
        /// Every session of the store
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// Restore sessions from an archive into the store (--root); each is checked in full first
    Pull {
        /// Where from (as for push)
        #[arg(long)]
        from: String,
        /// Session ids
        ids: Vec<String>,
        /// Every session of the archive
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Restore up to this seq (one session only)
        #[arg(long, conflicts_with = "hash")]
        seq: Option<u64>,
        /// Restore up to the entry with this hash (one session only)
        #[arg(long)]
        hash: Option<String>,
    },
    /// Remove sealed segments the archive holds (verified byte for byte) from the local disk, up to the segment restore reads
    Evict {
        /// The archive the sessions were pushed to (as for push)
        #[arg(long)]
        to: String,
        /// Session ids or names
        ids: Vec<String>,
        /// Every session of the store
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// List an archive's sessions: segments, bytes, what is archived and what only local
    Ls {
        /// The archive
        #[arg(long)]
        from: String,
    },
}

pub fn run(root: &Option<PathBuf>, args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Push { to, ids, all } => push(root, &to, ids, all),
        Command::Pull {
            from,
            ids,
            all,
            seq,
            hash,
        } => {
            let point = match (seq, hash) {
                (Some(s), _) => RestorePoint::Seq(s),
                (_, Some(h)) => RestorePoint::Hash(h.parse().context("--hash")?),
                _ => RestorePoint::Latest,
            };
            pull(root, &from, ids, all, point)
        }
        Command::Evict { to, ids, all } => evict(root, &to, ids, all),
        Command::Ls { from } => ls(root, &from),
    }
}

/// Opens the archive at `url` to write (a `file://` archive's directory is
/// made if missing).
fn open(url: &str) -> Result<Archive> {
    Archive::open(url).with_context(|| format!("opening archive {url}"))
}

/// Opens the archive at `url` to read from: a `file://` archive that does
/// not exist is "not found" (exit 3), never made.
fn open_existing(url: &str) -> Result<Archive> {
    if let Some(path) = url.strip_prefix("file://") {
        if !std::path::Path::new(path).is_dir() {
            return Err(crate::out::not_found(format!("an archive at {url}")));
        }
    }
    open(url)
}

/// A progress callback drawing a byte bar (on a terminal only).
fn bar(what: &str) -> (indicatif::ProgressBar, impl Fn(Transfer) + Send + Sync) {
    let bar = crate::progress(0, what);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let b = bar.clone();
    (bar, move |t: Transfer| {
        b.set_length(t.total_bytes);
        b.set_position(t.done_bytes);
    })
}

/// The sessions a command names: ids or names, or every one with --all.
fn local_sessions(
    store: &Store,
    ids: Vec<String>,
    all: bool,
    verb: &str,
) -> Result<Vec<SessionId>> {
    if all {
        return Ok(store.list()?.into_iter().map(|i| i.id).collect());
    }
    if ids.is_empty() {
        return Err(crate::out::usage(format!(
            "name sessions to {verb}, or --all"
        )));
    }
    ids.iter()
        .map(|t| crate::resolve_session(store, t))
        .collect()
}

fn push(root: &Option<PathBuf>, url: &str, ids: Vec<String>, all: bool) -> Result<ExitCode> {
    let store = crate::open_existing_store(root)?;
    let ids = local_sessions(&store, ids, all, "push")?;
    let archive = open(url)?;
    for id in ids {
        let (bar, progress) = bar("push");
        let r = archive
            .push_with(&store, id, progress)
            .with_context(|| format!("pushing session {id}"))?;
        bar.finish_and_clear();
        outln!(
            "{id}  {} segment(s) uploaded, {} already archived, tail {}, {} bytes, through seq {}",
            r.uploaded_segments,
            r.skipped_segments,
            if r.uploaded_tail {
                "uploaded"
            } else {
                "unchanged"
            },
            r.uploaded_bytes,
            r.next_seq.saturating_sub(1),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn evict(root: &Option<PathBuf>, url: &str, ids: Vec<String>, all: bool) -> Result<ExitCode> {
    let store = crate::open_existing_store(root)?;
    let ids = local_sessions(&store, ids, all, "evict")?;
    let archive = open_existing(url)?;
    let mut failed = 0;
    for id in ids {
        match archive.evict(&store, id) {
            Ok(r) => outln!(
                "{id}  {} segment(s) evicted, {} bytes{}{}",
                r.evicted_segments,
                r.evicted_bytes,
                r.evicted
                    .map(|(a, b)| format!("; seqs {a}..={b} now only in the archive"))
                    .unwrap_or_default(),
                r.kept.map(|k| format!("; kept {k}")).unwrap_or_default(),
            )?,
            // One session that cannot be evicted does not stop the others.
            Err(e) => {
                failed += 1;
                eprintln!("error: session {id}: {e}");
            }
        }
    }
    store.close()?;
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn pull(
    root: &Option<PathBuf>,
    url: &str,
    ids: Vec<String>,
    all: bool,
    point: RestorePoint,
) -> Result<ExitCode> {
    if point != RestorePoint::Latest && (all || ids.len() != 1) {
        return Err(crate::out::usage(
            "--seq and --hash restore one session, not --all",
        ));
    }
    if !all && ids.is_empty() {
        return Err(crate::out::usage("name sessions to pull, or --all"));
    }
    let archive = open_existing(url)?;
    // A new root is made only once the archive is known to exist.
    let store = crate::open_store(root)?;
    let ids: Vec<SessionId> = if all {
        archive.sessions()?.into_iter().map(|s| s.id).collect()
    } else {
        ids.iter()
            .map(|t| {
                t.to_ascii_lowercase()
                    .parse()
                    .map_err(|_| crate::out::usage(format!("not a session id: {t:?}")))
            })
            .collect::<Result<_>>()?
    };
    for id in ids {
        if all && store.exists(id) {
            // Pulled already, as the parent of a fork pulled before it.
            outln!("{id}  already in the store")?;
            continue;
        }
        let (bar, progress) = bar("pull");
        let r = archive
            .pull_with(&store, id, point, progress)
            .with_context(|| format!("pulling session {id}"))?;
        bar.finish_and_clear();
        outln!(
            "{id}  restored {} object(s), {} bytes, head seq {} {}",
            r.objects,
            r.downloaded_bytes,
            r.head.0,
            r.head.1
        )?;
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

fn ls(root: &Option<PathBuf>, url: &str) -> Result<ExitCode> {
    let archive = open_existing(url)?;
    // The local store, if there is one, to say what is only local.
    let local = root
        .clone()
        .or_else(|| Some(crate::default_root()))
        .and_then(|r| Store::open_read_only(r).ok());
    outln!(
        "{:<36}  {:>8}  {:>5}  {:>12}  {:>10}  {:>10}  {:>7}  TITLE",
        "ID",
        "SEGMENTS",
        "TAIL",
        "BYTES",
        "ARCHIVED",
        "LOCAL",
        "EVICTED"
    )?;
    for s in archive.sessions()? {
        let archived = s.manifest.as_ref().map(|m| m.next_seq());
        let local_entries = local
            .as_ref()
            .and_then(|st| st.info(s.id).ok().flatten())
            .map(|i| i.entries);
        // Segments whose local files were evicted: only in the archive.
        let evicted = local
            .as_ref()
            .filter(|st| st.exists(s.id))
            .and_then(|st| st.evicted_segments(s.id).ok())
            .map(|e| e.len() as u64);
        let show = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
        outln!(
            "{:<36}  {:>8}  {:>5}  {:>12}  {:>10}  {:>10}  {:>7}  {}",
            s.id,
            s.segment_objects,
            s.tail_objects,
            s.bytes,
            show(archived),
            show(local_entries),
            show(evicted),
            s.manifest
                .as_ref()
                .and_then(|m| m.title.clone())
                .unwrap_or_else(|| if s.manifest.is_none() {
                    "(no manifest)".into()
                } else {
                    String::new()
                }),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
