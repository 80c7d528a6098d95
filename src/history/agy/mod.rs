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
//! error ([`Error::NotFound`]), distinct from an empty one.
//!
//! # Example
//!
//! ```
//! use session_store::history::agy;
//! let steps = br#"{"step_index":0,"source":"USER_EXPLICIT","type":"USER_INPUT","status":"DONE","content":"List the migrations."}
//! {"step_index":1,"source":"MODEL","type":"PLANNER_RESPONSE","status":"DONE","content":"Listing them.","tool_calls":[{"name":"list_dir","args":{"path":"db/migrations"}}]}
//! {"step_index":2,"source":"MODEL","type":"LIST_DIRECTORY","status":"DONE","content":"001_init.sql"}"#;
//! let transcript = agy::parse_transcript_bytes(steps);
//! let shown: Vec<String> = transcript.messages().into_iter().map(|m| m.text).collect();
//! assert_eq!(shown, ["List the migrations.", "Listing them.", "001_init.sql"]);
//! let import = transcript.to_import();
//! assert!(import.items[2].is_tool_call() && import.items[3].is_tool_result());
//! ```

use std::path::{Path, PathBuf};

use super::{Discovery, Error, HistoryImport, HistoryMessage, HistoryReader, Locator, ReadStats};

mod discovery;
mod fields;
mod transcript;

pub use crate::history::is_valid_session_id;
pub use discovery::{
    database_path, discover_by_cwd, discover_by_session, list_transcripts, transcript_path,
};
pub use transcript::{
    parse_transcript_bytes, AgyEntry, AgyEntryKind, AgyToolCall, AgyToolResult, AgyTranscript,
};

/// The source name the agy reader registers under.
///
/// Example: [the module](crate::history::agy#example).
pub const SOURCE: &str = "agy-jsonl";

/// The domain of the `Extension` entry that records an import's provenance.
///
/// Example: [the module](crate::history::agy#example).
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
///
/// Example: [the module](crate::history::agy#example).
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

/// A tool result's summary is its first line, cut to this many characters.
const SUMMARY_MAX_CHARS: usize = 200;

const TOOL_NAME_PREFIX: &str = "default_api:";

/// The [`HistoryReader`] for agy, registered as [`SOURCE`].
///
/// Example: [the module](crate::history::agy#example).
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

    fn list(&self, home: &Path) -> Vec<PathBuf> {
        list_transcripts(home)
    }

    fn read_messages(&self, path: &Path) -> Result<Vec<HistoryMessage>, Error> {
        Ok(AgyTranscript::read(path)?.messages())
    }

    fn read_import(&self, path: &Path) -> Result<HistoryImport, Error> {
        Ok(AgyTranscript::read(path)?.to_import())
    }

    fn read_stats(&self, path: &Path) -> Result<ReadStats, Error> {
        Ok(AgyTranscript::read(path)?.stats)
    }
}
