//! Finding Claude Code session files: by session id, or by the working
//! directory the session ran in.

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::history::file_uri::normalize_path;
use crate::history::lines::{self, Line};
use crate::history::{
    is_valid_session_id, newest, normalized_cwd, one_transcript, Discovery, NotFoundReason,
    ReadStats,
};

/// Claude Code cuts a directory name this long and adds a hash of the path.
const MAX_DIR_NAME: usize = 200;

/// Where the sessions live under a Claude Code root (`~/.claude`).
///
/// Example: [the `history` module](crate::history#example).
pub fn projects_dir(root: &Path) -> PathBuf {
    root.join("projects")
}

/// The directory name Claude Code gives a working directory: every UTF-16
/// unit outside `[A-Za-z0-9]` becomes `-`. Lossy (`/a/b-c` and `/a/b/c`
/// share a name), so it only narrows a search. Past 200 characters Claude
/// Code cuts the name and appends a hash this function does not compute.
///
/// Example: [the `history` module](crate::history#example).
pub fn encode_project_dir(cwd: &Path) -> String {
    let text = cwd.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('-', c.len_utf16()));
        }
    }
    out
}

/// The project directories that may hold sessions of `cwd`: the one named
/// by its encoding, or, for a long path, those whose name starts with the
/// encoding's first 200 characters.
fn candidate_dirs(projects: &Path, cwd: &Path) -> Vec<PathBuf> {
    let encoded = encode_project_dir(cwd);
    let Ok(entries) = fs::read_dir(projects) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                return false;
            };
            name == encoded
                || (encoded.len() > MAX_DIR_NAME && name.starts_with(&encoded[..MAX_DIR_NAME]))
        })
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// The session files of a project directory: `<uuid>.jsonl`.
fn session_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| uuid::Uuid::try_parse(s).is_ok())
                && p.is_file()
        })
        .collect();
    out.sort();
    out
}

/// Every session file under `root`'s project directories: each `.jsonl`
/// file but the older subagent files (`agent-*.jsonl`), whatever its name,
/// sorted.
///
/// Example: [the `history` module](crate::history#example).
pub fn list_sessions(root: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = fs::read_dir(projects_dir(root)) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = dirs
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter_map(|dir| fs::read_dir(dir).ok())
        .flat_map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("agent-"))
                && p.is_file()
        })
        .collect();
    out.sort();
    out
}

/// Find the session file of session `id`, in any project directory.
/// Two files claiming one id is [`NotFoundReason::Ambiguous`].
///
/// Example: [the `history` module](crate::history#example).
pub fn discover_by_session(root: &Path, id: &str) -> Discovery {
    if !is_valid_session_id(id) {
        return Discovery::NotFound(NotFoundReason::InvalidSessionId { id: id.to_owned() });
    }
    let projects = projects_dir(root);
    let Ok(entries) = fs::read_dir(&projects) else {
        return Discovery::NotFound(NotFoundReason::NoTranscripts { path: projects });
    };
    let file = format!("{id}.jsonl");
    let found = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(&file))
        .filter(|p| p.is_file())
        .collect();
    one_transcript(found, id, projects.join("*").join(file))
}

/// Find the newest session whose working directory is exactly `cwd`.
///
/// The directory name narrows the search; the `cwd` field of a session's
/// first line that has one decides, compared after lexical normalisation
/// (symlinks are not resolved). A session that records no cwd matches
/// nothing. Among matches the newest file (modification time, then name)
/// wins.
///
/// Example: [the `history` module](crate::history#example).
pub fn discover_by_cwd(root: &Path, cwd: Option<&Path>) -> Discovery {
    let cwd = match normalized_cwd(cwd) {
        Ok(cwd) => cwd,
        Err(reason) => return Discovery::NotFound(reason),
    };
    let projects = projects_dir(root);
    if !projects.is_dir() {
        return Discovery::NotFound(NotFoundReason::NoTranscripts { path: projects });
    }
    let matching = candidate_dirs(&projects, &cwd)
        .into_iter()
        .flat_map(|dir| session_files(&dir))
        .filter(|path| {
            first_cwd(path)
                .and_then(|c| normalize_path(Path::new(&c)))
                .is_some_and(|c| c == cwd)
        });
    match newest(matching) {
        Some(path) => Discovery::Found {
            session_id: path.file_stem().and_then(|s| s.to_str()).map(str::to_owned),
            path,
        },
        None => Discovery::NotFound(NotFoundReason::NoMatchingWorkspace { cwd }),
    }
}

/// The `cwd` of a session's first line that has one (sidechain lines
/// aside), reading no further than that line.
fn first_cwd(path: &Path) -> Option<String> {
    #[derive(Deserialize)]
    struct Cwd {
        #[serde(default)]
        cwd: Option<String>,
        #[serde(rename = "isSidechain", default)]
        is_sidechain: Option<bool>,
    }
    let mut found = None;
    let mut stats = ReadStats::default();
    let _ = lines::scan_file(path, &mut stats, |_, text| {
        match serde_json::from_str::<Cwd>(text) {
            Ok(Cwd {
                cwd: Some(cwd),
                is_sidechain,
            }) if is_sidechain != Some(true) => {
                found = Some(cwd);
                ControlFlow::Break(())
            }
            Ok(_) => ControlFlow::Continue(Line::Read),
            Err(_) => ControlFlow::Continue(Line::Malformed),
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_replaces_every_non_alphanumeric_unit() {
        assert_eq!(
            encode_project_dir(Path::new("/home/a/my_proj.v2")),
            "-home-a-my-proj-v2"
        );
        // One dash per UTF-16 unit: é is one, 😀 is two.
        assert_eq!(encode_project_dir(Path::new("/é/😀")), "-----");
    }
}
