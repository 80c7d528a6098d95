//! Readers of other agents' session transcripts.
//!
//! An agent manager wants to show what each agent it runs has done (the last
//! assistant message, the last tool result) and to import that history into
//! its own store. Each agent runtime keeps transcripts in its own format and
//! in its own place, so each gets a [`HistoryReader`], registered by source
//! name in a [`HistoryService`]. Discovery always goes through the service.
//!
//! Discovery fails closed: when a reader cannot tie a transcript to the
//! request unambiguously it answers [`Discovery::NotFound`] with a reason,
//! never with a guess. Showing no history is better than showing another
//! workspace's.
//!
//! Readers so far: [`agy`] (Antigravity CLI, source `"agy-jsonl"`),
//! [`claude`] (Claude Code, `"claude-code"`) and [`codex`] (Codex CLI,
//! `"codex-rollout"`). The last two read the provider's own items and share
//! [`ItemTranscript`]; all three share the line reader and [`HistoryImport`].
//!
//! # Example
//!
//! ```
//! use session_store::history::{HistoryService, Locator};
//! use session_store::Store;
//! # fn main() -> session_store::Result<()> {
//! # let home = tempfile::tempdir().unwrap();
//! // A question and its answer, as `~/.claude/projects/-home-ana-shop/<id>.jsonl` holds them.
//! # let project = home.path().join(".claude/projects/-home-ana-shop");
//! # std::fs::create_dir_all(&project).unwrap();
//! let id = "5f0c6a3e-1b2d-4c5e-8f90-0a1b2c3d4e5f";
//! let transcript = r#"{"type":"user","uuid":"u1","parentUuid":null,"cwd":"/home/ana/shop","message":{"role":"user","content":"Why is checkout slow?"}}
//! {"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"An N+1 query in cart.rs."}]}}"#;
//! # std::fs::write(project.join(format!("{id}.jsonl")), transcript).unwrap();
//!
//! let service = HistoryService::with_default_readers();
//! let found = service.discover("claude-code", home.path(), &Locator::SessionId(id.into()));
//! let import = service.read_import("claude-code", found.path().expect("the transcript is there"))?;
//! let store = Store::open(home.path().join("store"))?;
//! let session = import.write_to(&store)?;
//! let texts: Vec<String> = store.restore(session)?.history.iter().filter_map(|i| i.text()).collect();
//! assert_eq!(texts, ["Why is checkout slow?", "An N+1 query in cart.rs."]);
//! # Ok(()) }
//! ```

pub mod agy;
pub mod claude;
pub mod codex;
mod file_uri;
mod import;
mod items;
mod lines;

pub use import::{HistoryCompaction, HistoryImport, Imported, ItemCounts, ItemMeta, TokenUsage};
pub use items::{ItemTranscript, TranscriptItem, TranscriptSegment};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Who produced a [`HistoryMessage`].
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryRole {
    /// The human driving the agent.
    User,
    /// The model's visible text.
    Assistant,
    /// The output of a tool the agent ran.
    ToolResult,
}

/// One message of a foreign transcript, in the reader-neutral form.
///
/// Serialises (and deserialises) as the JSON line form:
///
/// ```text
/// {"role":"user"|"assistant"|"tool_result","text":"…","tool_name":"…"|null,"is_error":true|false,"timestamp":"…"|null,"ref":"…"}
/// ```
///
/// `tool_name` and `is_error` are written for `tool_result` only; for the
/// other roles they are written as `null` and `false` whatever the fields hold.
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryMessage {
    /// Who produced it.
    pub role: HistoryRole,
    /// The full text.
    pub text: String,
    /// When it was written, as the transcript spells it.
    pub timestamp: Option<String>,
    /// The tool's name, for tool results.
    pub tool_name: Option<String>,
    /// Whether the tool failed, for tool results.
    pub is_error: bool,
    /// Where it came from: the transcript path plus `#line=N` or `#step=N`.
    pub source_ref: String,
}

/// The wire form shared by `Serialize`, `Deserialize` and
/// [`HistoryMessage::to_json_line`]; field order is the documented key order.
#[derive(Serialize, Deserialize)]
struct HistoryMessageWire {
    role: HistoryRole,
    text: String,
    tool_name: Option<String>,
    is_error: bool,
    timestamp: Option<String>,
    #[serde(rename = "ref")]
    source_ref: String,
}

impl HistoryMessage {
    fn to_wire(&self) -> HistoryMessageWire {
        let is_tool = self.role == HistoryRole::ToolResult;
        HistoryMessageWire {
            role: self.role,
            text: self.text.clone(),
            tool_name: if is_tool {
                self.tool_name.clone()
            } else {
                None
            },
            is_error: is_tool && self.is_error,
            timestamp: self.timestamp.clone(),
            source_ref: self.source_ref.clone(),
        }
    }

    /// The message as one line of JSON, without a trailing newline.
    ///
    /// Example: [the `claude` module](crate::history::claude#example).
    pub fn to_json_line(&self) -> String {
        // Serialising a struct of strings, bools and options into a String
        // cannot fail; fall back to an empty object rather than panic anyway.
        serde_json::to_string(&self.to_wire()).unwrap_or_else(|_| String::from("{}"))
    }
}

impl Serialize for HistoryMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HistoryMessage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = HistoryMessageWire::deserialize(deserializer)?;
        Ok(HistoryMessage {
            role: wire.role,
            text: wire.text,
            timestamp: wire.timestamp,
            tool_name: wire.tool_name,
            is_error: wire.is_error,
            source_ref: wire.source_ref,
        })
    }
}

/// What an agent manager shows for an agent at a glance.
///
/// Example: [the `claude` module](crate::history::claude#example).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactHistory {
    /// How many messages the transcript holds.
    pub message_count: usize,
    /// The last user message.
    pub last_user_message: Option<HistoryMessage>,
    /// The last assistant message.
    pub last_assistant_message: Option<HistoryMessage>,
    /// The last tool result.
    pub last_tool_result: Option<HistoryMessage>,
    /// The timestamp of the last message that carries one.
    ///
    /// Timestamps are kept as the transcript spells them, so this is the last
    /// in transcript order, not the greatest by value.
    pub updated_at: Option<String>,
}

impl CompactHistory {
    /// Summarise messages given in transcript order.
    ///
    /// Example: [the `claude` module](crate::history::claude#example).
    pub fn from_messages(messages: &[HistoryMessage]) -> CompactHistory {
        let last_of = |role: HistoryRole| messages.iter().rev().find(|m| m.role == role).cloned();
        CompactHistory {
            message_count: messages.len(),
            last_user_message: last_of(HistoryRole::User),
            last_assistant_message: last_of(HistoryRole::Assistant),
            last_tool_result: last_of(HistoryRole::ToolResult),
            updated_at: messages.iter().rev().find_map(|m| m.timestamp.clone()),
        }
    }
}

/// What to look for: a session by its id, or the session of a directory.
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// The agent's own session (conversation) id.
    SessionId(String),
    /// The agent's working directory. `None` models an agent whose cwd is
    /// unknown; discovery by cwd then finds nothing.
    Cwd(Option<PathBuf>),
}

/// Why discovery found no transcript. `Display` gives the one-line reason
/// the CLI prints with `--verbose`.
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotFoundReason {
    /// No reader is registered under this source name.
    UnknownSource {
        /// The name asked for.
        name: String,
    },
    /// The session id is not a plain identifier (path separators, `..`,
    /// NUL, unusual characters, or too long).
    InvalidSessionId {
        /// The id as given.
        id: String,
    },
    /// The session id is well formed but has no transcript.
    TranscriptMissing {
        /// Where the transcript would be.
        path: PathBuf,
    },
    /// Discovery by cwd was asked without a cwd.
    NoCwd,
    /// The cwd cannot be compared exactly (it is not absolute).
    InvalidCwd {
        /// The cwd as given.
        cwd: PathBuf,
    },
    /// The reader's index database does not exist.
    DatabaseMissing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The index database exists but could not be opened or queried.
    DatabaseUnreadable {
        /// The database file.
        path: PathBuf,
        /// What went wrong, as SQLite or the OS reported it.
        detail: String,
    },
    /// The index database lacks the table or a column discovery needs.
    DatabaseSchema {
        /// The database file.
        path: PathBuf,
        /// What is missing.
        detail: String,
    },
    /// No recorded workspace equals the cwd.
    NoMatchingWorkspace {
        /// The cwd, normalised.
        cwd: PathBuf,
    },
    /// The directory the reader's transcripts live in does not exist.
    NoTranscripts {
        /// Where they were looked for.
        path: PathBuf,
    },
    /// More than one transcript claims the session id.
    Ambiguous {
        /// The session id.
        id: String,
        /// The transcripts that claim it.
        paths: Vec<PathBuf>,
    },
    /// Workspaces matched, but none of their transcripts exists.
    NoTranscriptForWorkspace {
        /// The cwd, normalised.
        cwd: PathBuf,
        /// How many conversations matched.
        matches: usize,
    },
}

impl fmt::Display for NotFoundReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFoundReason::UnknownSource { name } => {
                write!(f, "no history reader is registered for source {name:?}")
            }
            NotFoundReason::InvalidSessionId { id } => {
                write!(f, "session id {id:?} is not a plain identifier")
            }
            NotFoundReason::TranscriptMissing { path } => {
                write!(f, "no transcript at {}", path.display())
            }
            NotFoundReason::NoCwd => f.write_str("no working directory to match against"),
            NotFoundReason::InvalidCwd { cwd } => {
                write!(f, "working directory {} is not absolute", cwd.display())
            }
            NotFoundReason::DatabaseMissing { path } => {
                write!(f, "no conversation index at {}", path.display())
            }
            NotFoundReason::DatabaseUnreadable { path, detail } => {
                write!(
                    f,
                    "conversation index {} is unreadable: {detail}",
                    path.display()
                )
            }
            NotFoundReason::DatabaseSchema { path, detail } => {
                write!(
                    f,
                    "conversation index {} is not usable: {detail}",
                    path.display()
                )
            }
            NotFoundReason::NoMatchingWorkspace { cwd } => {
                write!(
                    f,
                    "no conversation is recorded for workspace {}",
                    cwd.display()
                )
            }
            NotFoundReason::NoTranscripts { path } => {
                write!(f, "no transcripts under {}", path.display())
            }
            NotFoundReason::Ambiguous { id, paths } => {
                write!(f, "{} transcripts claim session {id:?}:", paths.len())?;
                for path in paths {
                    write!(f, " {}", path.display())?;
                }
                Ok(())
            }
            NotFoundReason::NoTranscriptForWorkspace { cwd, matches } => write!(
                f,
                "{matches} conversation(s) indexed for workspace {}, but none has a transcript",
                cwd.display()
            ),
        }
    }
}

/// The outcome of discovery.
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// A transcript that belongs to the request.
    Found {
        /// The transcript file.
        path: PathBuf,
        /// The session (conversation) id, where the reader knows it.
        session_id: Option<String>,
    },
    /// Nothing that belongs to the request; never a guess.
    NotFound(NotFoundReason),
}

impl Discovery {
    /// The transcript path, when found.
    ///
    /// Example: [the module](crate::history#example).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Discovery::Found { path, .. } => Some(path),
            Discovery::NotFound(_) => None,
        }
    }

    /// The reason, when nothing was found.
    ///
    /// Example: [the module](crate::history#example).
    pub fn reason(&self) -> Option<&NotFoundReason> {
        match self {
            Discovery::Found { .. } => None,
            Discovery::NotFound(reason) => Some(reason),
        }
    }
}

/// What reading a transcript skipped or could not read, for `--verbose`.
/// None of it is fatal.
///
/// Example: [the module](crate::history#example).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    /// Non-blank lines read.
    pub lines: usize,
    /// Lines that were not a JSON object of a usable shape.
    pub malformed_lines: usize,
    /// The first of them (up to 20), 1-based.
    pub first_malformed: Vec<usize>,
    /// Lines of a type the reader does not know, by type: skipped.
    pub unknown_types: BTreeMap<String, usize>,
    /// Lines of a known type that are not history (metadata, UI events,
    /// progress), by type.
    pub metadata: BTreeMap<String, usize>,
    /// Lines of the conversation left out because they are not on the path
    /// the transcript followed: abandoned branches, turns rolled back.
    pub off_path: usize,
    /// Those lines by kind (`user`, `assistant`, `tool_result`, or the line
    /// type of a line that carries no history, such as `progress`).
    pub left_out: BTreeMap<String, usize>,
    /// The first of them (up to 20), 1-based.
    pub first_left_out: Vec<usize>,
    /// Lines of subagents (sidechains), kept out of the main transcript.
    pub sidechain_lines: usize,
    /// Where a compressed transcript's stream broke off (a torn tail); what
    /// came before it was read.
    pub torn_at_line: Option<usize>,
}

impl ReadStats {
    pub(crate) fn unknown(&mut self, kind: &str) {
        *self.unknown_types.entry(kind.to_owned()).or_default() += 1;
    }

    pub(crate) fn metadata(&mut self, kind: &str) {
        *self.metadata.entry(kind.to_owned()).or_default() += 1;
    }

    /// Counts `line`, of `kind`, as left out of the transcript.
    pub(crate) fn left_out(&mut self, kind: &str, line: usize) {
        self.off_path += 1;
        *self.left_out.entry(kind.to_owned()).or_default() += 1;
        if self.first_left_out.len() < 20 {
            self.first_left_out.push(line);
        }
    }
}

/// The newest of `paths`: the greatest modification time, then the greatest
/// path. Files whose metadata cannot be read are passed over.
pub(crate) fn newest(paths: impl Iterator<Item = PathBuf>) -> Option<PathBuf> {
    paths
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
            let mtime = meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
            Some((mtime, path))
        })
        .max()
        .map(|(_, path)| path)
}

/// The cwd of a discovery by cwd, normalised, or why there is none to
/// compare.
pub(crate) fn normalized_cwd(cwd: Option<&Path>) -> Result<PathBuf, NotFoundReason> {
    let cwd = cwd.ok_or(NotFoundReason::NoCwd)?;
    file_uri::normalize_path(cwd).ok_or_else(|| NotFoundReason::InvalidCwd {
        cwd: cwd.to_owned(),
    })
}

/// The outcome of a discovery by session id that found `found`: one file
/// is the transcript; none, or more than one, is not found.
pub(crate) fn one_transcript(mut found: Vec<PathBuf>, id: &str, missing: PathBuf) -> Discovery {
    found.sort();
    match found.len() {
        0 => Discovery::NotFound(NotFoundReason::TranscriptMissing { path: missing }),
        1 => Discovery::Found {
            path: found.remove(0),
            session_id: Some(id.to_owned()),
        },
        _ => Discovery::NotFound(NotFoundReason::Ambiguous {
            id: id.to_owned(),
            paths: found,
        }),
    }
}

/// Session ids are identifiers (UUIDs, in practice); anything longer is not
/// one.
const MAX_SESSION_ID_LEN: usize = 128;

/// Whether `id` may name a session: 1 to 128 ASCII letters, digits, `-` or
/// `_`. That rules out separators, `.`/`..`, NUL and anything else that
/// could make the id reach outside its own directory.
///
/// Example: [the module](crate::history#example).
pub fn is_valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A reader of one agent runtime's transcripts.
///
/// Example: [the module](crate::history#example).
pub trait HistoryReader: Send + Sync {
    /// The source name this reader registers under, e.g. `"agy-jsonl"`.
    fn source(&self) -> &'static str;

    /// Other names that select this reader, e.g. the agent's command name.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// Find the transcript for `locator`, looking only under `home`.
    fn discover(&self, home: &Path, locator: &Locator) -> Discovery;

    /// Read a transcript as reader-neutral messages, in order.
    fn read_messages(&self, path: &Path) -> Result<Vec<HistoryMessage>, Error>;

    /// Read a transcript as runtime items for import.
    fn read_import(&self, path: &Path) -> Result<HistoryImport, Error>;

    /// Read a transcript and summarise it.
    fn read_compact(&self, path: &Path) -> Result<CompactHistory, Error> {
        Ok(CompactHistory::from_messages(&self.read_messages(path)?))
    }

    /// Read a transcript for what reading it skips (malformed lines, unknown
    /// line types, abandoned branches).
    fn read_stats(&self, path: &Path) -> Result<ReadStats, Error>;

    /// Every transcript found under `home`, sorted; none where the reader
    /// cannot list.
    fn list(&self, home: &Path) -> Vec<PathBuf> {
        let _ = home;
        Vec::new()
    }
}

/// The registry of [`HistoryReader`]s, keyed by source name.
///
/// Example: [the module](crate::history#example).
pub struct HistoryService {
    readers: BTreeMap<&'static str, Box<dyn HistoryReader>>,
}

impl fmt::Debug for HistoryService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryService")
            .field("sources", &self.readers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for HistoryService {
    fn default() -> Self {
        HistoryService::with_default_readers()
    }
}

impl HistoryService {
    /// A registry with no readers.
    ///
    /// Example: [the module](crate::history#example).
    pub fn empty() -> HistoryService {
        HistoryService {
            readers: BTreeMap::new(),
        }
    }

    /// A registry with every reader this crate ships.
    ///
    /// Example: [the module](crate::history#example).
    pub fn with_default_readers() -> HistoryService {
        let mut service = HistoryService::empty();
        service.register(Box::new(agy::AgyReader));
        service.register(Box::new(claude::ClaudeReader::default()));
        service.register(Box::new(codex::CodexReader::default()));
        service
    }

    /// Register `reader` under its source name, returning the reader it
    /// replaces, if any.
    ///
    /// Example: [the module](crate::history#example).
    pub fn register(&mut self, reader: Box<dyn HistoryReader>) -> Option<Box<dyn HistoryReader>> {
        self.readers.insert(reader.source(), reader)
    }

    /// The registered source names, sorted.
    ///
    /// Example: [the module](crate::history#example).
    pub fn sources(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.readers.keys().copied()
    }

    /// The reader for a source name or one of its aliases.
    ///
    /// Example: [the module](crate::history#example).
    pub fn reader(&self, name: &str) -> Option<&dyn HistoryReader> {
        if let Some(reader) = self.readers.get(name) {
            return Some(reader.as_ref());
        }
        self.readers
            .values()
            .find(|r| r.aliases().contains(&name))
            .map(|r| r.as_ref())
    }

    /// Discover a transcript through the reader named `name`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn discover(&self, name: &str, home: &Path, locator: &Locator) -> Discovery {
        match self.reader(name) {
            Some(reader) => reader.discover(home, locator),
            None => Discovery::NotFound(NotFoundReason::UnknownSource {
                name: name.to_owned(),
            }),
        }
    }

    fn require(&self, name: &str) -> Result<&dyn HistoryReader, Error> {
        self.reader(name).ok_or_else(|| {
            Error::invalid(format!(
                "no history reader is registered for source {name:?}"
            ))
        })
    }

    /// Every transcript the reader named `name` finds under `home`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn list(&self, name: &str, home: &Path) -> Result<Vec<PathBuf>, Error> {
        Ok(self.require(name)?.list(home))
    }

    /// Read messages through the reader named `name`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn read_messages(&self, name: &str, path: &Path) -> Result<Vec<HistoryMessage>, Error> {
        self.require(name)?.read_messages(path)
    }

    /// Read the compact summary through the reader named `name`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn read_compact(&self, name: &str, path: &Path) -> Result<CompactHistory, Error> {
        self.require(name)?.read_compact(path)
    }

    /// Read items for import through the reader named `name`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn read_import(&self, name: &str, path: &Path) -> Result<HistoryImport, Error> {
        self.require(name)?.read_import(path)
    }

    /// Read what a transcript's reading skips, through the reader named
    /// `name`.
    ///
    /// Example: [the module](crate::history#example).
    pub fn read_stats(&self, name: &str, path: &Path) -> Result<ReadStats, Error> {
        self.require(name)?.read_stats(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: HistoryRole, text: &str, ts: Option<&str>) -> HistoryMessage {
        HistoryMessage {
            role,
            text: text.into(),
            timestamp: ts.map(Into::into),
            tool_name: Some("leaked".into()),
            is_error: true,
            source_ref: "t.jsonl#step=1".into(),
        }
    }

    #[test]
    fn json_line_has_documented_keys_in_order() {
        let mut m = msg(HistoryRole::ToolResult, "out", Some("2025-01-01T00:00:00Z"));
        m.tool_name = Some("run_command".into());
        assert_eq!(
            m.to_json_line(),
            r#"{"role":"tool_result","text":"out","tool_name":"run_command","is_error":true,"timestamp":"2025-01-01T00:00:00Z","ref":"t.jsonl#step=1"}"#
        );
    }

    #[test]
    fn tool_fields_are_null_and_false_outside_tool_results() {
        let m = msg(HistoryRole::Assistant, "hi", None);
        assert_eq!(
            m.to_json_line(),
            r#"{"role":"assistant","text":"hi","tool_name":null,"is_error":false,"timestamp":null,"ref":"t.jsonl#step=1"}"#
        );
    }

    #[test]
    fn json_line_round_trips() {
        let m = msg(HistoryRole::ToolResult, "a\nb", None);
        let back: HistoryMessage = serde_json::from_str(&m.to_json_line()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn compact_takes_the_last_of_each_role() {
        let messages = vec![
            msg(HistoryRole::User, "u1", Some("t1")),
            msg(HistoryRole::Assistant, "a1", Some("t2")),
            msg(HistoryRole::ToolResult, "r1", Some("t3")),
            msg(HistoryRole::User, "u2", Some("t4")),
            msg(HistoryRole::Assistant, "a2", None),
        ];
        let c = CompactHistory::from_messages(&messages);
        assert_eq!(c.message_count, 5);
        assert_eq!(c.last_user_message.unwrap().text, "u2");
        assert_eq!(c.last_assistant_message.unwrap().text, "a2");
        assert_eq!(c.last_tool_result.unwrap().text, "r1");
        assert_eq!(c.updated_at.as_deref(), Some("t4"));
        assert_eq!(
            CompactHistory::from_messages(&[]),
            CompactHistory::default()
        );
    }

    #[test]
    fn unknown_source_is_not_found() {
        let service = HistoryService::with_default_readers();
        let d = service.discover("nope", Path::new("/nonexistent"), &Locator::Cwd(None));
        assert!(matches!(
            d,
            Discovery::NotFound(NotFoundReason::UnknownSource { .. })
        ));
        assert!(service.reader("agy-jsonl").is_some());
        assert!(service.reader("agy").is_some());
        assert!(service.reader("antigravity").is_some());
        assert!(service.reader("claude").is_some());
        assert!(service.reader("codex").is_some());
    }
}
