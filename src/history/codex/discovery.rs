//! Finding Codex rollouts: by session id, or by the working directory the
//! session started in.

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;

use super::rollout::{Kind, Meta, RawLine};
use crate::history::file_uri::normalize_path;
use crate::history::lines::{self, Line};
use crate::history::{
    is_valid_session_id, newest, normalized_cwd, one_transcript, Discovery, NotFoundReason,
    ReadStats,
};

/// How deep rollouts sit under `sessions/`: `YYYY/MM/DD/rollout-….jsonl`.
const MAX_DEPTH: usize = 4;

/// How many lines discovery reads looking for `session_meta`.
const META_LINES: usize = 8;

/// Where live rollouts are under a Codex root (`~/.codex`).
///
/// Example: [the module](crate::history::codex#example).
pub fn sessions_dir(root: &Path) -> PathBuf {
    root.join("sessions")
}

/// Where archived rollouts are under a Codex root.
///
/// Example: [the module](crate::history::codex#example).
pub fn archived_dir(root: &Path) -> PathBuf {
    root.join("archived_sessions")
}

/// The rollouts under `dir`, sorted: `rollout-*.jsonl`, and
/// `rollout-*.jsonl.zst` where no plain file of that name exists (the
/// plain one wins).
///
/// Example: [the module](crate::history::codex#example).
pub fn rollouts(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, MAX_DEPTH, &mut out);
    out.sort();
    let plain: std::collections::HashSet<PathBuf> =
        out.iter().filter(|p| !lines::is_zstd(p)).cloned().collect();
    out.retain(|p| !lines::is_zstd(p) || !plain.contains(&p.with_extension("")));
    out
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && depth > 1 {
            walk(&path, depth - 1, out);
        } else if kind.is_file() && rollout_stem(&path).is_some() {
            out.push(path);
        }
    }
}

/// `rollout-…` without `.jsonl` or `.jsonl.zst`, for a rollout's name.
fn rollout_stem(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".jsonl.zst")
        .or_else(|| name.strip_suffix(".jsonl"))?;
    stem.starts_with("rollout-").then_some(stem)
}

/// The `session_meta` of a rollout, from its first lines.
fn read_meta(path: &Path) -> Option<Meta> {
    let mut meta = None;
    let mut first = true;
    let mut stats = ReadStats::default();
    let _ = lines::scan_file(path, &mut stats, |n, text| {
        let whole = serde_json::from_str::<&RawValue>(text).ok();
        let raw = serde_json::from_str::<RawLine<'_>>(text).ok();
        if let (Some(whole), Some(raw)) = (whole, raw) {
            if let Kind::SessionMeta(payload) = raw.kind(whole, first) {
                meta = Some(Meta::parse(payload));
                return ControlFlow::Break(());
            }
            first = false;
        }
        if n >= META_LINES {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(Line::Read)
    });
    meta
}

/// Find the rollout of session `id`, live or archived. The file name
/// narrows the search (it ends in the id); the `session_meta` inside
/// decides. Two rollouts of one id is [`NotFoundReason::Ambiguous`].
///
/// Example: [the module](crate::history::codex#example).
pub fn discover_by_session(root: &Path, id: &str) -> Discovery {
    if !is_valid_session_id(id) {
        return Discovery::NotFound(NotFoundReason::InvalidSessionId { id: id.to_owned() });
    }
    let sessions = sessions_dir(root);
    if !sessions.is_dir() && !archived_dir(root).is_dir() {
        return Discovery::NotFound(NotFoundReason::NoTranscripts { path: sessions });
    }
    let suffix = format!("-{id}");
    let found = rollouts(&sessions)
        .into_iter()
        .chain(rollouts(&archived_dir(root)))
        .filter(|p| rollout_stem(p).is_some_and(|s| s.ends_with(&suffix)))
        .filter(|p| read_meta(p).is_some_and(|m| m.session() == Some(id)))
        .collect();
    let missing = sessions.join(format!("YYYY/MM/DD/rollout-*-{id}.jsonl"));
    one_transcript(found, id, missing)
}

/// Find the newest live rollout whose `session_meta` `cwd` is exactly
/// `cwd` after lexical normalisation (symlinks are not resolved). Archived
/// rollouts are not searched. The newest file (modification time, then
/// path) wins.
///
/// Example: [the module](crate::history::codex#example).
pub fn discover_by_cwd(root: &Path, cwd: Option<&Path>) -> Discovery {
    let cwd = match normalized_cwd(cwd) {
        Ok(cwd) => cwd,
        Err(reason) => return Discovery::NotFound(reason),
    };
    let sessions = sessions_dir(root);
    if !sessions.is_dir() {
        return Discovery::NotFound(NotFoundReason::NoTranscripts { path: sessions });
    }
    let mut ids = std::collections::HashMap::new();
    let matching = rollouts(&sessions).into_iter().filter(|p| {
        let Some(meta) = read_meta(p) else {
            return false;
        };
        let matches = meta
            .cwd
            .as_deref()
            .and_then(|c| normalize_path(Path::new(c)))
            .is_some_and(|c| c == cwd);
        if matches {
            ids.insert(p.clone(), meta.session().map(str::to_owned));
        }
        matches
    });
    let newest = newest(matching.collect::<Vec<_>>().into_iter());
    match newest {
        Some(path) => Discovery::Found {
            session_id: ids.remove(&path).flatten(),
            path,
        },
        None => Discovery::NotFound(NotFoundReason::NoMatchingWorkspace { cwd }),
    }
}
