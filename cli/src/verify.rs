//! `verify`: every CRC and chain link; exit 1 on damage.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use session_store::{Error, Log, SessionId, Store, VerifyReport};

use crate::inspect::{count, human_bytes};
use crate::progress;

#[derive(clap::Args)]
pub struct Args {
    /// Session ids, unique id prefixes or names
    #[arg(required_unless_present = "all")]
    ids: Vec<String>,
    /// Verify every session
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    /// An archive to fetch evicted segments back from (s3://…, file:///…),
    /// so that they are checked too; opens the store writable, since
    /// fetched segments are placed again
    #[arg(long)]
    archive: Option<String>,
}

pub fn run(root: &Option<PathBuf>, a: Args) -> Result<ExitCode> {
    let store = crate::open_store_with_archive(root, &a.archive)?;
    let ids: Vec<SessionId> = if a.all {
        store.list()?.into_iter().map(|s| s.id).collect()
    } else if a.ids.is_empty() {
        return Err(crate::out::usage("give session ids, or --all"));
    } else {
        a.ids
            .iter()
            .map(|t| crate::resolve_session(&store, t))
            .collect::<Result<_>>()?
    };
    let bar = progress(ids.len() as u64, "verify");
    let checked = ids.len();
    let mut damaged = 0;
    for id in ids {
        if !store.exists(id) {
            bar.suspend(|| eprintln!("{id}: not found"));
            damaged += 1;
            continue;
        }
        let (line, ok) = verify_session(&store, id, a.archive.is_some())?;
        if !ok {
            damaged += 1;
        }
        bar.suspend(|| outln!("{line}"))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if checked > 1 {
        eprintln!(
            "verified {checked} sessions: {} ok, {damaged} damaged or not checked",
            checked - damaged
        );
    }
    Ok(if damaged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Verifies one session: its line, and whether it checked out. Damage, or
/// records that could not be checked, is a line; another failure ends the
/// command.
fn verify_session(store: &Store, id: SessionId, with_archive: bool) -> Result<(String, bool)> {
    // Read-only: verify never modifies files and works beside a live
    // writer. With an archive, evicted segments are fetched back first.
    let verified = match with_archive {
        true => store.verify(id),
        false => Log::open_read_only(store.session_dir(id)).map(|log| log.verify()),
    };
    Ok(match verified {
        Ok(r) => report_line(store, id, &r),
        Err(Error::Corrupt {
            segment,
            offset,
            seq,
            kind,
        }) => {
            let seq = seq.map(|s| format!(", seq {s}")).unwrap_or_default();
            let line = format!(
                "{id}: DAMAGED: {kind} in {} at offset {offset}{seq}",
                segment.display()
            );
            (line, false)
        }
        Err(e @ (Error::Archive { .. } | Error::Evicted { .. })) => {
            (format!("{id}: NOT CHECKED: {e}"), false)
        }
        Err(e) => return Err(e.into()),
    })
}

/// The line of a session whose log was read, and whether it checked out:
/// whole, with a fork's link to its parent and every payload a record
/// refers to there and hashing right.
fn report_line(store: &Store, id: SessionId, r: &VerifyReport) -> (String, bool) {
    match (&r.damage, &r.torn_tail) {
        (Some(d), _) => (format!("{id}: DAMAGED: {d}"), false),
        (None, Some(t)) => {
            let line = format!(
                "{id}: ok, {}; torn tail not yet recovered at {} offset {} ({})",
                count(r.records, "record"),
                t.segment.display(),
                t.offset,
                t.reason
            );
            (line, true)
        }
        (None, _) if r.evicted.is_some() => {
            let (first, last) = r.evicted.unwrap_or_default();
            let line = format!(
                "{id}: NOT CHECKED: records {first}..={last} are evicted to an archive (pass --archive URL); the local {} check out",
                count(r.records, "record")
            );
            (line, false)
        }
        (None, None) => match (store.verify_fork_link(id), store.verify_payloads(id)) {
            // The log is whole; a fork's link to its parent must hold too,
            // and every payload a record refers to must be there and hash
            // right. A failure is this session's, never a stop for the
            // others.
            (Err(e), _) | (_, Err(e)) => (format!("{id}: DAMAGED: {e}"), false),
            (Ok(_), Ok(d)) if !d.is_empty() => (format!("{id}: DAMAGED: {}", d[0]), false),
            (Ok(link), Ok(_)) => {
                let line = format!(
                    "{id}: ok, {}, {}{}",
                    count(r.records, "record"),
                    human_bytes(r.bytes),
                    link.map(|l| format!("; fork of {} at seq {}, link checked", l.parent, l.seq))
                        .unwrap_or_default()
                );
                (line, true)
            }
        },
    }
}

#[derive(clap::Args)]
pub struct GcArgs {}

/// `gc`: removes the payloads no session refers to.
pub fn gc(root: &Option<PathBuf>, _a: GcArgs) -> Result<ExitCode> {
    let store = crate::open_existing_store(root)?;
    let r = store.collect_payloads()?;
    outln!(
        "payloads: {} kept, {} removed ({}), {} temporary files removed",
        r.kept,
        r.removed,
        human_bytes(r.removed_bytes),
        r.removed_temporary
    )?;
    Ok(ExitCode::SUCCESS)
}
