//! Codex CLI rollouts.
//!
//! A session is `<root>/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`
//! (or `.jsonl.zst`, zstd-compressed; the plain file wins when both exist),
//! where the root is `~/.codex` (or `$CODEX_HOME`); archived sessions are in
//! `<root>/archived_sessions/`. There is no official schema; what follows is
//! read from public descriptions and is tolerant of what it does not know.
//!
//! # Parsing rules
//!
//! Each line is `{timestamp, type, payload}`; the oldest versions wrote the
//! session's metadata bare on the first line and each Responses item bare
//! after it, and both shapes are read.
//!
//! - `session_meta` gives the session id (`id`, or `session_id`) and the cwd;
//!   the first one counts.
//! - `response_item` payloads are Responses items and go through the
//!   crate's Responses reader ([`Item::from_responses_json`]): messages,
//!   reasoning with `encrypted_content`, `function_call` with its arguments
//!   as the JSON text written, `function_call_output`, custom tool calls and
//!   their output. Every other item (`local_shell_call`, `web_search_call`,
//!   `compaction`, later kinds), and any the reader refuses for a field it
//!   does not know, is kept whole as an opaque item.
//! - `compacted` starts a compaction: the history carried on with is its
//!   `replacement_history`, or else its summary `message` as one user
//!   message (older versions rebuilt more around it; only the summary is
//!   kept).
//! - `event_msg` and `turn_context` lines are metadata, not history, and are
//!   counted; except `thread_rolled_back`, which drops the last `num_turns`
//!   user turns, as Codex does when it rebuilds the history.
//! - User messages that are context Codex injects (`<environment_context>`,
//!   `<user_instructions>`, AGENTS.md instructions) are imported but not
//!   shown as messages, and do not count as turns.
//! - Lines of an unknown type are skipped and counted by type; lines that
//!   are not JSON objects of a usable shape are skipped and counted as
//!   malformed; a `.zst` stream that breaks off is a torn tail. None of
//!   these is fatal.
//!
//! # Example
//!
//! ```
//! use session_store::history::codex;
//! let rollout = br#"{"timestamp":"2026-02-01T00:00:00.000Z","type":"session_meta","payload":{"id":"0199ffff-0000-7000-8000-000000000001","cwd":"/work/api"}}
//! {"timestamp":"2026-02-01T00:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Bump serde."}]}}
//! {"timestamp":"2026-02-01T00:00:02.000Z","type":"response_item","payload":{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"cargo\",\"update\",\"-p\",\"serde\"]}"}}
//! {"timestamp":"2026-02-01T00:00:03.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"Updating serde v1.0.210 -> v1.0.219"}}"#;
//! let transcript = codex::parse_rollout_bytes(rollout);
//! assert_eq!(transcript.cwd.as_deref(), Some("/work/api"));
//! assert_eq!(transcript.first_prompt().as_deref(), Some("Bump serde."));
//! let import = codex::import_of(&transcript);
//! assert!(import.items[1].is_tool_call() && import.items[2].is_tool_result());
//! assert_eq!(import.counts().tool_calls, 1);
//! ```
//!
//! [`Item::from_responses_json`]: crate::Item::from_responses_json

use std::path::{Path, PathBuf};

use super::{
    Discovery, Error, HistoryImport, HistoryMessage, HistoryReader, ItemTranscript, Locator,
    ReadStats,
};

mod discovery;
mod rollout;

pub use discovery::{archived_dir, discover_by_cwd, discover_by_session, rollouts, sessions_dir};
pub use rollout::{parse_rollout_bytes, read_rollout};

/// The source name the Codex reader registers under.
///
/// Example: [the module](crate::history::codex#example).
pub const SOURCE: &str = "codex-rollout";

/// The domain of the `Extension` entry that records an import's provenance.
///
/// Example: [the module](crate::history::codex#example).
pub const EXTENSION_DOMAIN: &str = "history.codex";

/// How the context Codex injects as user messages begins.
const CONTEXT_PREFIXES: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
];

/// The [`HistoryReader`] for Codex, registered as [`SOURCE`].
///
/// Example: [the module](crate::history::codex#example).
#[derive(Debug, Clone, Default)]
pub struct CodexReader {
    root: Option<PathBuf>,
}

impl CodexReader {
    /// A reader that looks under `root` (what `$CODEX_HOME` names) instead
    /// of `<home>/.codex`.
    ///
    /// Example: [the module](crate::history::codex#example).
    pub fn with_root(root: PathBuf) -> CodexReader {
        CodexReader { root: Some(root) }
    }

    /// Where this reader looks under `home`.
    ///
    /// Example: [the module](crate::history::codex#example).
    pub fn root(&self, home: &Path) -> PathBuf {
        self.root.clone().unwrap_or_else(|| home.join(".codex"))
    }
}

/// A rollout as an import.
///
/// Example: [the module](crate::history::codex#example).
pub fn import_of(transcript: &ItemTranscript) -> HistoryImport {
    transcript.to_import(SOURCE, EXTENSION_DOMAIN, serde_json::Map::new())
}

impl HistoryReader for CodexReader {
    fn source(&self) -> &'static str {
        SOURCE
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["codex"]
    }

    fn discover(&self, home: &Path, locator: &Locator) -> Discovery {
        let root = self.root(home);
        match locator {
            Locator::SessionId(id) => discover_by_session(&root, id),
            Locator::Cwd(cwd) => discover_by_cwd(&root, cwd.as_deref()),
        }
    }

    fn read_messages(&self, path: &Path) -> Result<Vec<HistoryMessage>, Error> {
        Ok(read_rollout(path)?.messages())
    }

    fn list(&self, home: &Path) -> Vec<PathBuf> {
        let root = self.root(home);
        let mut all = rollouts(&sessions_dir(&root));
        all.extend(rollouts(&archived_dir(&root)));
        all
    }

    fn read_import(&self, path: &Path) -> Result<HistoryImport, Error> {
        Ok(import_of(&read_rollout(path)?))
    }

    fn read_stats(&self, path: &Path) -> Result<ReadStats, Error> {
        Ok(read_rollout(path)?.stats)
    }
}
