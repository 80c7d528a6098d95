//! Finding agy transcripts: their paths, and agy's SQLite index of
//! workspaces by session.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use crate::history::file_uri::file_uri_to_path;
use crate::history::{is_valid_session_id, normalized_cwd, Discovery, NotFoundReason};

fn agy_root(home: &Path) -> PathBuf {
    home.join(".gemini").join("antigravity-cli")
}

/// Where agy's conversation index lives under `home`.
///
/// Example: [the module](crate::history::agy#example).
pub fn database_path(home: &Path) -> PathBuf {
    agy_root(home).join("conversation_summaries.db")
}

/// The transcript path for session `id` under `home`, or `None` when the id
/// is not valid ([`is_valid_session_id`]). Does not touch the filesystem.
///
/// Example: [the module](crate::history::agy#example).
pub fn transcript_path(home: &Path, id: &str) -> Option<PathBuf> {
    if !is_valid_session_id(id) {
        return None;
    }
    Some(
        agy_root(home)
            .join("brain")
            .join(id)
            .join(".system_generated")
            .join("logs")
            .join("transcript.jsonl"),
    )
}

/// Every transcript under `home`'s `brain/`, sorted.
///
/// Example: [the module](crate::history::agy#example).
pub fn list_transcripts(home: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(agy_root(home).join("brain")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| transcript_path(home, e.file_name().to_str()?))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// Find the transcript of session `id`.
///
/// Example: [the module](crate::history::agy#example).
pub fn discover_by_session(home: &Path, id: &str) -> Discovery {
    let Some(path) = transcript_path(home, id) else {
        return Discovery::NotFound(NotFoundReason::InvalidSessionId { id: id.to_owned() });
    };
    if path.is_file() {
        Discovery::Found {
            path,
            session_id: Some(id.to_owned()),
        }
    } else {
        Discovery::NotFound(NotFoundReason::TranscriptMissing { path })
    }
}

/// Find the newest transcript of the workspace that is exactly `cwd`.
///
/// Reads `conversation_summaries.db` read-only and compares each recorded
/// workspace URI with `cwd` after lexical normalisation (separators, `.`
/// and `..`; symlinks are not resolved); only equal paths match. Among matching
/// conversations whose transcript exists, the newest wins: greatest
/// `last_modified_time` (when the column exists; SQLite's ordering of
/// types), then greatest transcript mtime, then greatest id.
///
/// Fails closed: a missing, unreadable or corrupt database, a missing table
/// or column, no cwd, or no match all give [`Discovery::NotFound`]. It never
/// falls back to scanning `brain/`: transcripts do not record their
/// workspace, so any such guess could be another workspace's history.
///
/// Example: [the module](crate::history::agy#example).
pub fn discover_by_cwd(home: &Path, cwd: Option<&Path>) -> Discovery {
    let cwd = match normalized_cwd(cwd) {
        Ok(cwd) => cwd,
        Err(reason) => return Discovery::NotFound(reason),
    };
    let db = database_path(home);
    let rows = match read_index(&db) {
        Ok(rows) => rows,
        Err(reason) => return Discovery::NotFound(reason),
    };
    let matching: Vec<&IndexRow> = rows
        .iter()
        .filter(|r| r.workspaces.contains(&cwd))
        .collect();
    if matching.is_empty() {
        return Discovery::NotFound(NotFoundReason::NoMatchingWorkspace { cwd });
    }
    let newest = matching
        .iter()
        .filter_map(|row| {
            let path = transcript_path(home, &row.conversation_id)?;
            let meta = fs::metadata(&path).ok().filter(|m| m.is_file())?;
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            Some((*row, mtime, path))
        })
        .max_by(|(a, a_mtime, _), (b, b_mtime, _)| {
            a.last_modified
                .order(&b.last_modified)
                .then(a_mtime.cmp(b_mtime))
                .then(a.conversation_id.cmp(&b.conversation_id))
        });
    match newest {
        Some((row, _, path)) => Discovery::Found {
            path,
            session_id: Some(row.conversation_id.clone()),
        },
        None => Discovery::NotFound(NotFoundReason::NoTranscriptForWorkspace {
            cwd,
            matches: matching.len(),
        }),
    }
}

/// One conversation of the index, reduced to what discovery needs.
struct IndexRow {
    conversation_id: String,
    workspaces: Vec<PathBuf>,
    last_modified: Stamp,
}

/// A `last_modified_time` value, ordered as SQLite orders values of mixed
/// types: NULL, then numbers, then text, then blobs.
#[derive(Debug, Clone, PartialEq)]
enum Stamp {
    Null,
    Number(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Stamp {
    fn rank(&self) -> u8 {
        match self {
            Stamp::Null => 0,
            Stamp::Number(_) => 1,
            Stamp::Text(_) => 2,
            Stamp::Blob(_) => 3,
        }
    }

    fn order(&self, other: &Stamp) -> std::cmp::Ordering {
        match (self, other) {
            (Stamp::Number(a), Stamp::Number(b)) => a.total_cmp(b),
            (Stamp::Text(a), Stamp::Text(b)) => a.cmp(b),
            (Stamp::Blob(a), Stamp::Blob(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    fn from_value(value: ValueRef<'_>) -> Stamp {
        match value {
            ValueRef::Null => Stamp::Null,
            // Timestamps in milliseconds stay exact in an f64 for 285,000 years.
            ValueRef::Integer(i) => Stamp::Number(i as f64),
            ValueRef::Real(r) => Stamp::Number(r),
            ValueRef::Text(t) => Stamp::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Stamp::Blob(b.to_vec()),
        }
    }
}

fn unreadable(db: &Path, detail: impl ToString) -> NotFoundReason {
    NotFoundReason::DatabaseUnreadable {
        path: db.to_owned(),
        detail: detail.to_string(),
    }
}

fn schema_problem(db: &Path, detail: impl ToString) -> NotFoundReason {
    NotFoundReason::DatabaseSchema {
        path: db.to_owned(),
        detail: detail.to_string(),
    }
}

/// Open the index without any chance of writing to it.
///
/// `SQLITE_OPEN_READ_ONLY` alone keeps the database file intact, but SQLite
/// may still create `-wal`/`-shm` side files for a WAL database. When no
/// `-wal` file exists there is nothing outside the main file to read, so the
/// connection is also `immutable`: no locks, no side files at all. When one
/// exists agy is (or was) writing, and the newest conversations may live
/// only in it, so the connection reads it (the side files exist already).
fn open_index(db: &Path) -> Result<Connection, NotFoundReason> {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let immutable = !Path::new(&wal).exists();
    let mut uri = String::from("file:");
    uri.push_str(&uri_encode_path(db));
    uri.push_str(if immutable {
        "?mode=ro&immutable=1"
    } else {
        "?mode=ro"
    });
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&uri, flags).map_err(|e| unreadable(db, e))?;
    conn.busy_timeout(Duration::from_millis(250))
        .map_err(|e| unreadable(db, e))?;
    Ok(conn)
}

/// Percent-encode a path for an SQLite `file:` URI, byte by byte, so that
/// `?`, `#`, `%` and non-UTF-8 names survive.
fn uri_encode_path(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().into_owned().into_bytes();
    let mut out = String::with_capacity(bytes.len());
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn read_index(db: &Path) -> Result<Vec<IndexRow>, NotFoundReason> {
    match fs::metadata(db) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(NotFoundReason::DatabaseMissing {
                path: db.to_owned(),
            })
        }
        Err(e) => return Err(unreadable(db, e)),
        Ok(meta) if !meta.is_file() => return Err(unreadable(db, "not a regular file")),
        Ok(_) => {}
    }
    // The read-only flag alone would refuse a missing file too; the check
    // above is there to tell "missing" from "unreadable".
    let conn = open_index(db)?;

    let columns: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info('conversation_summaries')")
            .map_err(|e| unreadable(db, e))?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| unreadable(db, e))?;
        names
            .collect::<Result<_, _>>()
            .map_err(|e| unreadable(db, e))?
    };
    if columns.is_empty() {
        return Err(schema_problem(db, "no table conversation_summaries"));
    }
    for needed in ["conversation_id", "workspace_uris"] {
        if !columns.iter().any(|c| c == needed) {
            return Err(schema_problem(
                db,
                format!("table conversation_summaries lacks {needed}"),
            ));
        }
    }
    let stamp_column = if columns.iter().any(|c| c == "last_modified_time") {
        "last_modified_time"
    } else {
        "NULL"
    };
    let sql = format!(
        "SELECT conversation_id, workspace_uris, {stamp_column} FROM conversation_summaries"
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| unreadable(db, e))?;
    let mut rows = stmt.query([]).map_err(|e| unreadable(db, e))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| unreadable(db, e))? {
        let read = |i: usize| row.get_ref(i).map_err(|e| unreadable(db, e));
        // A row whose id is not text cannot name a transcript; skip it.
        let ValueRef::Text(id) = read(0)? else {
            continue;
        };
        let Ok(conversation_id) = std::str::from_utf8(id) else {
            continue;
        };
        let workspaces = match read(1)? {
            ValueRef::Text(json) => parse_workspace_uris(json),
            _ => Vec::new(),
        };
        out.push(IndexRow {
            conversation_id: conversation_id.to_owned(),
            workspaces,
            last_modified: Stamp::from_value(read(2)?),
        });
    }
    Ok(out)
}

/// The normalised paths of a `workspace_uris` JSON array. Entries that are
/// not local `file://` URIs are dropped: they match nothing.
fn parse_workspace_uris(json: &[u8]) -> Vec<PathBuf> {
    match serde_json::from_slice::<Vec<Value>>(json) {
        Ok(values) => values
            .iter()
            .filter_map(Value::as_str)
            .filter_map(file_uri_to_path)
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::history::MAX_SESSION_ID_LEN;

    #[test]
    fn session_ids_are_plain_identifiers() {
        assert!(is_valid_session_id("7f3c2a1e-0000-4000-8000-123456789abc"));
        assert!(is_valid_session_id("abc_DEF-1"));
        for bad in [
            "", ".", "..", "../x", "a/b", "a\\b", "a\0b", "a.b", " a", "日本",
        ] {
            assert!(!is_valid_session_id(bad), "{bad:?}");
        }
        assert!(!is_valid_session_id(&"a".repeat(MAX_SESSION_ID_LEN + 1)));
        assert!(is_valid_session_id(&"a".repeat(MAX_SESSION_ID_LEN)));
    }

    #[test]
    fn stamps_order_like_sqlite() {
        let order = [
            Stamp::Null,
            Stamp::Number(-1.0),
            Stamp::Number(5.0),
            Stamp::Text("2024".into()),
            Stamp::Text("2025".into()),
            Stamp::Blob(vec![0]),
        ];
        for pair in order.windows(2) {
            assert_eq!(
                pair[0].order(&pair[1]),
                std::cmp::Ordering::Less,
                "{pair:?}"
            );
        }
    }

    #[test]
    fn uri_encoding_escapes_uri_syntax() {
        assert_eq!(
            uri_encode_path(Path::new("/a b/c?d#e%f")),
            "/a%20b/c%3Fd%23e%25f"
        );
    }
}
