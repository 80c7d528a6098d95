//! Antigravity CLI (`agy`) transcripts.
//!
//! A transcript is JSON Lines, one step per line (ENGINE-NOTES §6; there is
//! no official schema):
//!
//! ```text
//! {"step_index":N,"source":"USER_EXPLICIT"|"MODEL"|"SYSTEM"|…,"type":"USER_INPUT"|"PLANNER_RESPONSE"|…,
//!  "status":"DONE"|"ERROR"|…,"created_at":"…","content":…,"tool_calls":[{"name":"…","args":{…}}]}
//! ```
//!
//! # Parsing rules
//!
//! Steps are first put in `step_index` order. The sort is stable, and a line
//! without a `step_index` sorts with the nearest indexed line above it (lines
//! before any indexed line come first), so it keeps its place in file order
//! relative to its neighbours. Then, in that order:
//!
//! - `USER_INPUT` becomes a user message and clears the pending tool calls
//!   (a new turn: whatever the model asked for before went unanswered).
//! - `PLANNER_RESPONSE` text (`content`, a string or an array of parts) becomes
//!   an assistant message; blank parts are dropped. The names in its
//!   `tool_calls` join a FIFO of pending calls. Their `args` are the call's
//!   *inputs* and never become a result.
//! - A known execution step ([`KNOWN_EXECUTION_STEPS`]) becomes a tool result,
//!   named after the next pending call, or after its own step type when none
//!   is pending.
//! - `GENERIC` and any other type are omitted, and leave the queue alone.
//! - Steps whose `source` is `SYSTEM` are internal and skipped, except
//!   `ERROR_MESSAGE`, which the user needs to see.
//! - Malformed lines (not JSON, not an object) are skipped and counted.
//!
//! # Reading
//!
//! Bytes that are not UTF-8 are replaced (U+FFFD) rather than dropping the
//! line; parsing never panics on any input. A missing transcript file is an
//! error ([`Error::NotFound`]), distinct from an empty one,
//! which reads as no messages.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

use super::file_uri::{file_uri_to_path, normalize_path};
use super::{
    CompactHistory, Discovery, Error, HistoryImport, HistoryMessage, HistoryReader, HistoryRole,
    Locator, NotFoundReason,
};
use crate::item::{ContentPart, Item, Role};

/// The source name the agy reader registers under.
pub const SOURCE: &str = "agy-jsonl";

/// The domain of the `Extension` entry that records an import's provenance.
pub const EXTENSION_DOMAIN: &str = "history.agy";

/// Step types that record the execution of a tool, and so become tool
/// results.
///
/// The first four are the ones the seed reader saw. The others are named
/// after agy's other built-in tools (`write_to_file`, `replace_file_content`
/// recorded as `CODE_ACTION`, `grep_search`, `find_by_name`, `view_code_item`,
/// `view_file_outline`, `read_url_content`, `search_web`, `command_status`,
/// `send_command_input`), inferred from public transcripts rather than a
/// schema. Each runs exactly one call, and leaving one out would not just
/// hide its output: its call's name would go to the next result and shift
/// every pairing after it.
pub const KNOWN_EXECUTION_STEPS: &[&str] = &[
    "RUN_COMMAND",
    "VIEW_FILE",
    "LIST_DIRECTORY",
    "ERROR_MESSAGE",
    "WRITE_TO_FILE",
    "CODE_ACTION",
    "GREP_SEARCH",
    "FIND",
    "VIEW_CODE_ITEM",
    "VIEW_FILE_OUTLINE",
    "READ_URL_CONTENT",
    "SEARCH_WEB",
    "COMMAND_STATUS",
    "SEND_COMMAND_INPUT",
];

/// Session ids are identifiers (agy uses UUIDs); anything longer is not one.
const MAX_SESSION_ID_LEN: usize = 128;

/// A tool result's summary is its first line, cut to this many characters.
const SUMMARY_MAX_CHARS: usize = 200;

const TOOL_NAME_PREFIX: &str = "default_api:";

fn agy_root(home: &Path) -> PathBuf {
    home.join(".gemini").join("antigravity-cli")
}

/// Where agy's conversation index lives under `home`.
pub fn database_path(home: &Path) -> PathBuf {
    agy_root(home).join("conversation_summaries.db")
}

/// Whether `id` may name a session: 1 to 128 ASCII letters, digits, `-` or
/// `_`. That rules out separators, `.`/`..`, NUL and anything else that
/// could make the id reach outside its own directory.
pub fn is_valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The transcript path for session `id` under `home`, or `None` when the id
/// is not valid ([`is_valid_session_id`]). Does not touch the filesystem.
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

/// Find the transcript of session `id`.
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
pub fn discover_by_cwd(home: &Path, cwd: Option<&Path>) -> Discovery {
    let Some(cwd) = cwd else {
        return Discovery::NotFound(NotFoundReason::NoCwd);
    };
    let Some(cwd) = normalize_path(cwd) else {
        return Discovery::NotFound(NotFoundReason::InvalidCwd {
            cwd: cwd.to_owned(),
        });
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

/// A parsed agy transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct AgyTranscript {
    /// The transcript's path as text (empty when parsed from bytes); the
    /// prefix of every `source_ref`.
    pub source: String,
    /// The steps that carry something, in step order.
    pub entries: Vec<AgyEntry>,
    /// How many non-blank lines were skipped as malformed.
    pub malformed_lines: usize,
}

/// One step that carries something.
#[derive(Debug, Clone, PartialEq)]
pub struct AgyEntry {
    /// The step's `step_index`, when it has one.
    pub step_index: Option<u64>,
    /// The 1-based line of the transcript it came from.
    pub line: usize,
    /// The step's `created_at`, as written.
    pub timestamp: Option<String>,
    /// What the step says.
    pub kind: AgyEntryKind,
}

/// What a step says.
#[derive(Debug, Clone, PartialEq)]
pub enum AgyEntryKind {
    /// A `USER_INPUT` with text.
    User {
        /// The text.
        text: String,
    },
    /// A `PLANNER_RESPONSE` with text, tool calls, or both.
    Assistant {
        /// The non-blank text parts, in order.
        parts: Vec<String>,
        /// The tool calls, in order.
        tool_calls: Vec<AgyToolCall>,
    },
    /// A known execution step.
    ToolResult(AgyToolResult),
}

/// A tool call from a `PLANNER_RESPONSE`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgyToolCall {
    /// Deterministic id from the step: `agy-<step_index>-<k>` (see
    /// [`AgyTranscript::parse`]).
    pub call_id: String,
    /// The tool's name, without a `default_api:` prefix.
    pub name: String,
    /// The arguments, with values that were JSON-encoded text decoded once.
    pub args: Value,
}

/// The result of a known execution step.
#[derive(Debug, Clone, PartialEq)]
pub struct AgyToolResult {
    /// The step type, e.g. `RUN_COMMAND`.
    pub step_type: String,
    /// The paired call's name, or the step type when nothing was pending.
    pub tool_name: String,
    /// The paired call's id, or an id of its own (`agy-<step>-result`) when
    /// nothing was pending.
    pub call_id: String,
    /// Whether a pending call was paired with it.
    pub paired: bool,
    /// The output (content, output fields, error text, exit code); `None`
    /// when the step recorded none.
    pub output: Option<String>,
    /// Whether the step failed.
    pub is_error: bool,
}

impl AgyToolResult {
    /// The output, or a placeholder that says there was none.
    pub fn text(&self) -> String {
        match &self.output {
            Some(output) => output.clone(),
            None => self.placeholder(),
        }
    }

    fn placeholder(&self) -> String {
        format!("({} produced no output)", self.step_type)
    }
}

/// Parse transcript bytes, with no path; never panics.
pub fn parse_transcript_bytes(bytes: &[u8]) -> AgyTranscript {
    AgyTranscript::parse(bytes, "")
}

/// A line that parsed as a JSON object, before ordering.
struct RawStep {
    line: usize,
    step_index: Option<u64>,
    fields: Map<String, Value>,
}

impl AgyTranscript {
    /// Read and parse the transcript at `path`.
    ///
    /// A missing file is [`Error::NotFound`]; an empty file
    /// is a transcript with no entries.
    pub fn read(path: &Path) -> Result<AgyTranscript, Error> {
        let bytes = fs::read(path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                Error::NotFound {
                    what: format!("no transcript at {}", path.display()),
                }
            } else {
                Error::Io {
                    op: "read transcript",
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
        Ok(AgyTranscript::parse(&bytes, &path.display().to_string()))
    }

    /// Parse transcript bytes; `source` prefixes every `source_ref`.
    ///
    /// Call ids are derived from the step: `agy-<step_index>-<k>` for the
    /// `k`-th call (from 0), `agy-line<N>-<k>` for a step without an index,
    /// and `agy-<step_index>-line<N>-<k>` when an index repeats.
    pub fn parse(bytes: &[u8], source: &str) -> AgyTranscript {
        let mut malformed_lines = 0;
        let mut steps = Vec::new();
        for (i, raw_line) in bytes.split(|b| *b == b'\n').enumerate() {
            if raw_line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let text = String::from_utf8_lossy(raw_line);
            // A byte-order mark is never JSON; files glued together can carry
            // one at the start of any line.
            let text = text.trim_start_matches('\u{FEFF}');
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(fields)) => {
                    let step_index = fields.get("step_index").and_then(as_u64);
                    steps.push(RawStep {
                        line: i + 1,
                        step_index,
                        fields,
                    });
                }
                _ => malformed_lines += 1,
            }
        }
        // A line without an index sorts with the last indexed line above it.
        let mut last_index = None;
        let mut keyed: Vec<(Option<u64>, RawStep)> = steps
            .into_iter()
            .map(|step| {
                if step.step_index.is_some() {
                    last_index = step.step_index;
                }
                (last_index, step)
            })
            .collect();
        keyed.sort_by_key(|(key, _)| *key);

        let mut builder = Builder::default();
        for (_, step) in keyed {
            builder.step(step);
        }
        AgyTranscript {
            source: source.to_owned(),
            entries: builder.entries,
            malformed_lines,
        }
    }

    fn source_ref(&self, entry: &AgyEntry) -> String {
        match entry.step_index {
            Some(n) => format!("{}#step={n}", self.source),
            None => format!("{}#line={}", self.source, entry.line),
        }
    }

    /// The transcript as reader-neutral messages. An assistant step with
    /// only tool calls yields no message; a result without output yields
    /// its placeholder text.
    pub fn messages(&self) -> Vec<HistoryMessage> {
        let mut out = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let (role, text, tool_name, is_error) = match &entry.kind {
                AgyEntryKind::User { text } => (HistoryRole::User, text.clone(), None, false),
                AgyEntryKind::Assistant { parts, .. } => {
                    if parts.is_empty() {
                        continue;
                    }
                    (HistoryRole::Assistant, parts.join("\n"), None, false)
                }
                AgyEntryKind::ToolResult(result) => (
                    HistoryRole::ToolResult,
                    result.text(),
                    Some(result.tool_name.clone()),
                    result.is_error,
                ),
            };
            out.push(HistoryMessage {
                role,
                text,
                timestamp: entry.timestamp.clone(),
                tool_name,
                is_error,
                source_ref: self.source_ref(entry),
            });
        }
        out
    }

    /// The compact summary of [`AgyTranscript::messages`].
    pub fn compact(&self) -> CompactHistory {
        CompactHistory::from_messages(&self.messages())
    }

    /// Convert to runtime items, with provenance for an `Extension` entry of
    /// domain [`EXTENSION_DOMAIN`].
    ///
    /// Each call becomes an [`Item::ToolCall`] right after its step's
    /// message; each result an [`Item::ToolResult`] with its call's id. A
    /// call with no result and a result with no call stay that way: the
    /// store's ready-to-send check is what reports them. A result without
    /// output gets the placeholder as summary and no content.
    ///
    /// Provenance: `{"reader", "transcript", "steps": [step indexes that
    /// produced items, in item order], "unindexed_lines": [lines of steps
    /// without an index], "malformed_lines": n, "error_call_ids": [results
    /// that failed]}`. `ToolResult` has no error flag, so the last list is
    /// where failures are kept.
    pub fn to_import(&self) -> HistoryImport {
        let mut items = Vec::new();
        let mut steps = Vec::new();
        let mut unindexed_lines = Vec::new();
        let mut error_call_ids = Vec::new();
        for entry in &self.entries {
            let before = items.len();
            match &entry.kind {
                AgyEntryKind::User { text } => items.push(Item::message(Role::User, text.clone())),
                AgyEntryKind::Assistant { parts, tool_calls } => {
                    if !parts.is_empty() {
                        items.push(Item::Message {
                            id: None,
                            role: Role::Assistant,
                            content: parts
                                .iter()
                                .map(|text| ContentPart::Text { text: text.clone() })
                                .collect(),
                            status: None,
                        });
                    }
                    for call in tool_calls {
                        items.push(Item::ToolCall {
                            id: None,
                            call_id: call.call_id.clone(),
                            name: call.name.clone(),
                            arguments: call.args.to_string(),
                            status: None,
                        });
                    }
                }
                AgyEntryKind::ToolResult(result) => {
                    if result.is_error {
                        error_call_ids.push(Value::from(result.call_id.clone()));
                    }
                    let summary = match &result.output {
                        Some(output) => summarize(output),
                        None => result.placeholder(),
                    };
                    items.push(Item::ToolResult {
                        id: None,
                        call_id: result.call_id.clone(),
                        summary,
                        content: result.output.clone(),
                    });
                }
            }
            if items.len() > before {
                match entry.step_index {
                    Some(n) => steps.push(Value::from(n)),
                    None => unindexed_lines.push(Value::from(entry.line)),
                }
            }
        }
        let provenance = serde_json::json!({
            "reader": SOURCE,
            "transcript": self.source,
            "steps": steps,
            "unindexed_lines": unindexed_lines,
            "malformed_lines": self.malformed_lines,
            "error_call_ids": error_call_ids,
        });
        HistoryImport {
            items,
            extension_domain: EXTENSION_DOMAIN,
            provenance,
        }
    }
}

/// The first non-blank line, cut to [`SUMMARY_MAX_CHARS`] characters.
fn summarize(output: &str) -> String {
    let line = output
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_end();
    match line.char_indices().nth(SUMMARY_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The state machine that turns ordered steps into entries.
#[derive(Default)]
struct Builder {
    entries: Vec<AgyEntry>,
    /// Calls waiting for a result: (call_id, name).
    pending: VecDeque<(String, String)>,
    seen_indexes: HashSet<u64>,
}

impl Builder {
    fn step(&mut self, step: RawStep) {
        let RawStep {
            line,
            step_index,
            fields,
        } = step;
        let step_type = fields.get("type").and_then(Value::as_str).unwrap_or("");
        let source = fields.get("source").and_then(Value::as_str).unwrap_or("");
        if source.eq_ignore_ascii_case("SYSTEM") && step_type != "ERROR_MESSAGE" {
            return;
        }
        let id_base = self.id_base(step_index, line);
        let kind = match step_type {
            "USER_INPUT" => {
                self.pending.clear();
                let text = texts(fields.get("content")).join("\n");
                if text.is_empty() {
                    return;
                }
                AgyEntryKind::User { text }
            }
            "PLANNER_RESPONSE" => {
                let parts = texts(fields.get("content"));
                let tool_calls = tool_calls(fields.get("tool_calls"), &id_base);
                for call in &tool_calls {
                    self.pending
                        .push_back((call.call_id.clone(), call.name.clone()));
                }
                if parts.is_empty() && tool_calls.is_empty() {
                    return;
                }
                AgyEntryKind::Assistant { parts, tool_calls }
            }
            t if KNOWN_EXECUTION_STEPS.contains(&t) => {
                let (call_id, tool_name, paired) = match self.pending.pop_front() {
                    Some((call_id, name)) => (call_id, name, true),
                    None => (format!("{id_base}-result"), t.to_owned(), false),
                };
                AgyEntryKind::ToolResult(tool_result(&fields, t, tool_name, call_id, paired))
            }
            _ => return,
        };
        let timestamp = fields
            .get("created_at")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.entries.push(AgyEntry {
            step_index,
            line,
            timestamp,
            kind,
        });
    }

    fn id_base(&mut self, step_index: Option<u64>, line: usize) -> String {
        match step_index {
            Some(n) if self.seen_indexes.insert(n) => format!("agy-{n}"),
            Some(n) => format!("agy-{n}-line{line}"),
            None => format!("agy-line{line}"),
        }
    }
}

fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The non-blank texts of a `content`-like value: a string, or an array of
/// strings and `{"text": …}` parts.
fn texts(value: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(value) = value {
        collect_texts(value, &mut out);
    }
    out
}

fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if !s.trim().is_empty() => out.push(s.clone()),
        Value::Array(parts) => parts.iter().for_each(|part| collect_texts(part, out)),
        Value::Object(part) => {
            if let Some(text) = part.get("text") {
                collect_texts(text, out);
            }
        }
        _ => {}
    }
}

fn tool_calls(value: Option<&Value>, id_base: &str) -> Vec<AgyToolCall> {
    let Some(Value::Array(calls)) = value else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(Value::as_object)
        .enumerate()
        .map(|(k, call)| {
            let raw_name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let name = raw_name.strip_prefix(TOOL_NAME_PREFIX).unwrap_or(raw_name);
            // A call without a name still answers to a result; keep it in
            // line so the pairings after it stay right.
            let name = if name.is_empty() { "unknown" } else { name };
            AgyToolCall {
                call_id: format!("{id_base}-{k}"),
                name: name.to_owned(),
                args: decode_args(call.get("args")),
            }
        })
        .collect()
}

/// agy writes each argument value as JSON text (`"\"/tmp\""`); decode each
/// once. A value that is not valid JSON text is kept as it is. A whole
/// `args` given as JSON text is decoded first.
fn decode_args(args: Option<&Value>) -> Value {
    let args = match args {
        None | Some(Value::Null) => return Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(decoded @ Value::Object(_)) => decoded,
            _ => return Value::String(s.clone()),
        },
        Some(other) => other.clone(),
    };
    match args {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let value = match &value {
                        Value::String(s) => serde_json::from_str(s).unwrap_or(value),
                        _ => value,
                    };
                    (key, value)
                })
                .collect(),
        ),
        other => other,
    }
}

/// Output fields besides `content`, in the order they are appended.
const OUTPUT_FIELDS: &[&str] = &["output", "combined_output", "stdout", "stderr"];

fn tool_result(
    fields: &Map<String, Value>,
    step_type: &str,
    tool_name: String,
    call_id: String,
    paired: bool,
) -> AgyToolResult {
    let mut segments: Vec<String> = Vec::new();
    let mut add = |texts: Vec<String>| {
        for text in texts {
            if !segments.contains(&text) {
                segments.push(text);
            }
        }
    };
    add(texts(fields.get("content")));
    for field in OUTPUT_FIELDS {
        add(texts(fields.get(*field)));
    }
    let error = fields.get("error").filter(|e| match e {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.trim().is_empty(),
        _ => true,
    });
    match error {
        Some(Value::String(s)) => add(vec![s.clone()]),
        Some(Value::Object(obj)) => match obj.get("message").and_then(Value::as_str) {
            Some(message) => add(vec![message.to_owned()]),
            None => add(vec![Value::Object(obj.clone()).to_string()]),
        },
        _ => {}
    }
    let exit_code = fields
        .get("exit_code")
        .or_else(|| fields.get("exitCode"))
        .and_then(as_i64);
    if let Some(code) = exit_code {
        add(vec![format!("exit code: {code}")]);
    }
    let status_error = fields
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case("ERROR"));
    let is_error = step_type == "ERROR_MESSAGE"
        || status_error
        || exit_code.is_some_and(|code| code != 0)
        || error.is_some();
    AgyToolResult {
        step_type: step_type.to_owned(),
        tool_name,
        call_id,
        paired,
        output: if segments.is_empty() {
            None
        } else {
            Some(segments.join("\n"))
        },
        is_error,
    }
}

/// The [`HistoryReader`] for agy, registered as [`SOURCE`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AgyReader;

impl HistoryReader for AgyReader {
    fn source(&self) -> &'static str {
        SOURCE
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["agy", "antigravity"]
    }

    fn discover(&self, home: &Path, locator: &Locator) -> Discovery {
        match locator {
            Locator::SessionId(id) => discover_by_session(home, id),
            Locator::Cwd(cwd) => discover_by_cwd(home, cwd.as_deref()),
        }
    }

    fn read_messages(&self, path: &Path) -> Result<Vec<HistoryMessage>, Error> {
        Ok(AgyTranscript::read(path)?.messages())
    }

    fn read_import(&self, path: &Path) -> Result<HistoryImport, Error> {
        Ok(AgyTranscript::read(path)?.to_import())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn summary_is_first_nonblank_line_cut_on_a_char_boundary() {
        assert_eq!(summarize("\n  \nfirst\nsecond"), "first");
        let long = "é".repeat(SUMMARY_MAX_CHARS + 5);
        let s = summarize(&long);
        assert_eq!(s.chars().count(), SUMMARY_MAX_CHARS + 1);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn args_values_are_decoded_once() {
        let args = serde_json::json!({"Path": "\"/tmp\"", "N": "3", "Raw": "ls -la", "Twice": "\"\\\"x\\\"\""});
        let decoded = decode_args(Some(&args));
        assert_eq!(
            decoded,
            serde_json::json!({"Path": "/tmp", "N": 3, "Raw": "ls -la", "Twice": "\"x\""})
        );
        assert_eq!(decode_args(None), serde_json::json!({}));
        assert_eq!(
            decode_args(Some(&Value::String("{\"A\":\"1\"}".into()))),
            serde_json::json!({"A": 1})
        );
    }
}
