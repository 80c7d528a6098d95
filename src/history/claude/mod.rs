//! Claude Code transcripts.
//!
//! A session is `<root>/projects/<encoded cwd>/<session uuid>.jsonl`, where
//! the root is `~/.claude` (or `$CLAUDE_CONFIG_DIR`), one JSON object per
//! line. There is no official schema; what follows is read from public
//! descriptions and is tolerant of what it does not know.
//!
//! # Parsing rules
//!
//! - Chained lines carry `uuid` and `parentUuid`. The transcript is the path
//!   from the last leaf (the last chained line of the file that belongs to
//!   the session) back to the root, with what belongs to it off the path:
//!   the other lines of its responses and the results of their tool calls
//!   (parallel calls write each result as a sibling node), and the progress
//!   lines that hang off a kept line. The branches an edit or retry
//!   abandoned are left out, counted by kind. Lines that carry no history
//!   (`progress`, `attachment`, `system` lines other than compact
//!   boundaries) still link the chain. A file whose lines name no parent is
//!   read in file order.
//! - Lines with `isSidechain: true` belong to a subagent: they are kept out
//!   of the main transcript and read per `agentId`, each along its own chain
//!   ([`ClaudeSession::sidechains`]), with those of the subagent files
//!   ([`ClaudeSession::read_with_subagents`]).
//! - `user` and `assistant` lines are Messages API messages: their blocks
//!   go through the crate's Messages reader ([`Item::from_anthropic_message`]):
//!   `thinking` with its signature, `redacted_thinking`, `tool_use` with its
//!   `input` JSON text as written, `tool_result` with `is_error` and string
//!   or block content, images and documents. A block that reader refuses is
//!   kept whole as an opaque block. Assistant lines that share a
//!   `message.id` are one response: their blocks are joined at the first
//!   one's place (a block repeated verbatim is kept once).
//! - A `system` line with `subtype: "compact_boundary"` starts a compaction;
//!   the walk goes on through its `logicalParentUuid` (or, when that names
//!   no line of the file, through the line before the boundary), so the
//!   history before it is kept, as the segment before the compaction. The `isCompactSummary`
//!   user line after it is the first item of the compacted history (a summary
//!   without a boundary, as older versions write, starts one too). `isMeta`
//!   lines are imported but not shown as messages.
//! - `summary` lines title the conversation whose leaf they name; assistant
//!   lines give the model and usage of their response. Other metadata lines
//!   (`file-history-snapshot`, …) are counted and skipped; lines of an unknown type are skipped and counted by type;
//!   lines that are not JSON objects of a usable shape are skipped and
//!   counted as malformed. None of these is ever fatal.
//!
//! # Example
//!
//! ```
//! use session_store::history::claude;
//! use session_store::Store;
//! # fn main() -> session_store::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let bytes = br#"{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"Add a --dry-run flag."}}
//! {"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Added, with a test."}]}}"#;
//! let session = claude::parse_session_bytes(bytes);
//! let glance = session.main.compact();
//! assert_eq!(glance.last_assistant_message.map(|m| m.text).as_deref(), Some("Added, with a test."));
//! assert!(session.main.messages()[0].to_json_line().starts_with(r#"{"role":"user","text":"Add a --dry-run flag.""#));
//!
//! // Imported once, however often an agent manager asks.
//! let store = Store::open(dir.path())?;
//! let first = claude::import_of(&session.main, None).write_once_to(&store)?;
//! let again = claude::import_of(&session.main, None).write_once_to(&store)?;
//! assert_eq!((first.created, again.created, again.session), (true, false, first.session));
//! # Ok(()) }
//! ```
//!
//! [`Item::from_anthropic_message`]: crate::Item::from_anthropic_message

use std::path::{Path, PathBuf};

use super::{
    Discovery, Error, HistoryImport, HistoryMessage, HistoryReader, ItemTranscript, Locator,
    ReadStats,
};

mod discovery;
mod path;
mod transcript;

pub use discovery::{
    discover_by_cwd, discover_by_session, encode_project_dir, list_sessions, projects_dir,
};
pub use transcript::{parse_session_bytes, ClaudeSession};

/// The source name the Claude Code reader registers under.
///
/// Example: [the module](crate::history::claude#example).
pub const SOURCE: &str = "claude-code";

/// The domain of the `Extension` entry that records an import's provenance.
///
/// Example: [the module](crate::history::claude#example).
pub const EXTENSION_DOMAIN: &str = "history.claude";

/// Line types that are chained (they have a `uuid`) but carry no history.
const CHAINED_NOT_HISTORY: &[&str] = &["progress", "attachment"];

/// Line types that are metadata, outside the chain.
const METADATA_TYPES: &[&str] = &[
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "custom-title",
    "ai-title",
    "tag",
    "mode",
    "last-prompt",
];

/// The [`HistoryReader`] for Claude Code, registered as [`SOURCE`].
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, Default)]
pub struct ClaudeReader {
    root: Option<PathBuf>,
}

impl ClaudeReader {
    /// A reader that looks under `root` (what `$CLAUDE_CONFIG_DIR` names)
    /// instead of `<home>/.claude`.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn with_root(root: PathBuf) -> ClaudeReader {
        ClaudeReader { root: Some(root) }
    }

    /// Where this reader looks under `home`.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn root(&self, home: &Path) -> PathBuf {
        self.root.clone().unwrap_or_else(|| home.join(".claude"))
    }
}

/// A transcript of a Claude Code session, its main one or a subagent's
/// (`agent_id`, recorded in the provenance), as an import.
///
/// Example: [the module](crate::history::claude#example).
pub fn import_of(transcript: &ItemTranscript, agent_id: Option<&str>) -> HistoryImport {
    let mut extra = serde_json::Map::new();
    if let Some(agent) = agent_id {
        extra.insert("agent_id".into(), agent.into());
    }
    transcript.to_import(SOURCE, EXTENSION_DOMAIN, extra)
}

impl HistoryReader for ClaudeReader {
    fn source(&self) -> &'static str {
        SOURCE
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["claude", "claude-code"]
    }

    fn discover(&self, home: &Path, locator: &Locator) -> Discovery {
        let root = self.root(home);
        match locator {
            Locator::SessionId(id) => discover_by_session(&root, id),
            Locator::Cwd(cwd) => discover_by_cwd(&root, cwd.as_deref()),
        }
    }

    fn read_messages(&self, path: &Path) -> Result<Vec<HistoryMessage>, Error> {
        Ok(ClaudeSession::read(path)?.main.messages())
    }

    fn list(&self, home: &Path) -> Vec<PathBuf> {
        list_sessions(&self.root(home))
    }

    fn read_import(&self, path: &Path) -> Result<HistoryImport, Error> {
        Ok(import_of(&ClaudeSession::read(path)?.main, None))
    }

    fn read_stats(&self, path: &Path) -> Result<ReadStats, Error> {
        Ok(ClaudeSession::read(path)?.main.stats)
    }
}
