//! The entry root of segment versions 1 to 8, read and never written.
//!
//! Up to version 8 a record archived [`LogEntry`] with every field in
//! place, so the root was sized to its largest variant, `SessionStart`:
//! 232 bytes at the end of every record, whatever its kind. Version 9 boxes
//! the fields that made it so (a `RequestConfig`, the two origins, a fork's
//! parent hash), and the root is 56 bytes. A record keeps the layout of the
//! segment that holds it, so the records of an older segment are read
//! through this copy of the old root and converted (DESIGN.md, "Format
//! version history").

use rkyv::util::AlignedVec;

use super::{
    ArchivedLogEntry, JsonText, LogEntry, LoggedItem, RequestConfig, SessionId, SessionOrigin,
    WorkerResult,
};
use crate::chain::EntryHash;

/// The first segment version whose records hold the compact root.
///
/// Example: [the module](crate::schema#example).
pub const COMPACT_ROOT_VERSION: u32 = 9;

/// [`LogEntry`] as versions 1 to 8 archived it: the same variants, in the
/// same order, with the same fields, none boxed. Only ever read.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) enum LegacyLogEntry {
    SessionStart {
        ts: u64,
        system_prompt: Option<String>,
        config: RequestConfig,
        history: Vec<LoggedItem>,
        forked_from: Option<SessionOrigin>,
        compacted_from: Option<SessionOrigin>,
    },
    UserInput {
        ts: u64,
        item: LoggedItem,
    },
    AssistantItems {
        ts: u64,
        items: Vec<LoggedItem>,
    },
    ToolResults {
        ts: u64,
        items: Vec<LoggedItem>,
    },
    HookInjectedItems {
        ts: u64,
        items: Vec<LoggedItem>,
    },
    TurnEnd {
        ts: u64,
        turn_count: u64,
    },
    RunCompleted {
        ts: u64,
        interrupted: bool,
        result: WorkerResult,
    },
    RunErrored {
        ts: u64,
        interrupted: bool,
        message: String,
    },
    ConfigChanged {
        ts: u64,
        config: RequestConfig,
    },
    LlmUsage {
        ts: u64,
        history_len: u64,
        input_total_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        output_tokens: u64,
    },
    Extension {
        ts: u64,
        domain: String,
        payload: JsonText,
    },
    ItemsRemoved {
        ts: u64,
        count: u64,
    },
    ForkedFrom {
        ts: u64,
        parent: SessionId,
        parent_seq: u64,
        parent_hash: EntryHash,
    },
}

impl From<LegacyLogEntry> for LogEntry {
    fn from(old: LegacyLogEntry) -> LogEntry {
        same_variant!(
            old,
            LegacyLogEntry => LogEntry,
            SessionStart {
                ts,
                system_prompt,
                config,
                history,
                forked_from,
                compacted_from
            },
            UserInput { ts, item },
            AssistantItems { ts, items },
            ToolResults { ts, items },
            HookInjectedItems { ts, items },
            TurnEnd { ts, turn_count },
            RunCompleted {
                ts,
                interrupted,
                result
            },
            RunErrored {
                ts,
                interrupted,
                message
            },
            ConfigChanged { ts, config },
            LlmUsage {
                ts,
                history_len,
                input_total_tokens,
                cache_read_tokens,
                cache_write_tokens,
                output_tokens
            },
            Extension {
                ts,
                domain,
                payload
            },
            ItemsRemoved { ts, count },
            ForkedFrom {
                ts,
                parent,
                parent_seq,
                parent_hash
            },
        )
    }
}

/// A record's entry, checked: in place in the record (version 9 on), or
/// converted from an older segment's root into an archive of its own.
#[derive(Clone)]
pub(crate) enum EntryArchive<'a> {
    InPlace(&'a ArchivedLogEntry),
    Converted(AlignedVec),
}

impl std::fmt::Debug for EntryArchive<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl EntryArchive<'_> {
    /// The archived entry.
    pub(crate) fn get(&self) -> &ArchivedLogEntry {
        match self {
            EntryArchive::InPlace(entry) => entry,
            EntryArchive::Converted(bytes) => converted(bytes),
        }
    }
}

/// The entry of an archive [`read_archive`] converted, which it checked
/// whole already.
pub(crate) fn converted(bytes: &AlignedVec) -> &ArchivedLogEntry {
    rkyv::access::<ArchivedLogEntry, rkyv::rancor::Error>(bytes)
        .expect("an archive this crate wrote and checked after converting it")
}

/// Checks a record's payload, archived by a segment of `version`, as
/// [`LogEntry::access_archive`] does, and gives its entry: in place from
/// version 9 on, otherwise converted ([`convert_legacy`]).
pub(crate) fn read_archive(bytes: &[u8], version: u32) -> Result<EntryArchive<'_>, String> {
    if version >= COMPACT_ROOT_VERSION {
        return LogEntry::access_archive(bytes).map(EntryArchive::InPlace);
    }
    convert_legacy(bytes).map(EntryArchive::Converted)
}

/// A record payload of a segment before version 9, checked as the old root
/// (bytecheck), converted and archived anew, its JSON texts checked as
/// [`LogEntry::access_archive`] checks them. The record's bytes and hash
/// stay what they are; only what is read of them is converted.
pub(crate) fn convert_legacy(bytes: &[u8]) -> Result<AlignedVec, String> {
    let old = rkyv::access::<ArchivedLegacyLogEntry, rkyv::rancor::Error>(bytes)
        .map_err(|e| e.to_string())?;
    let old: LegacyLogEntry =
        rkyv::deserialize::<LegacyLogEntry, rkyv::rancor::Error>(old).map_err(|e| e.to_string())?;
    let archive = LogEntry::from(old).to_archive();
    LogEntry::access_archive(&archive)?;
    Ok(archive)
}
