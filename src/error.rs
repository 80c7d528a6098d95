//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::chain::EntryHash;

/// Shorthand for results in this crate.
///
/// Example: [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, with what a user needs to act on it.
///
/// ```
/// use session_store::{Error, Item, RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (id, start) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// store.append(id, start, &[Item::user_text("From the first tab.")])?;
///
/// // The second tab still holds `start`: nothing was written; retry on
/// // the stored head.
/// let items = [Item::user_text("From the second tab.")];
/// match store.append(id, start, &items) {
///     Err(Error::HeadMismatch { actual: Some(stored), .. }) => store.append(id, stored, &items)?,
///     other => other?,
/// };
/// assert_eq!(store.history_len(id)?, 2);
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes on disk failed validation at or before the durable point.
    #[error("corrupt log: {kind} in {} at offset {offset}{}", segment.display(), fmt_seq(*seq))]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset inside the segment.
        offset: u64,
        /// The sequence number of the damaged record, where known.
        seq: Option<u64>,
        /// What failed.
        kind: CorruptKind,
    },
    /// A record refers to an item in the store's payload area that is
    /// missing or damaged (or the log was read without its store).
    #[error("payload {hash} referred to at seq {seq}: {problem}")]
    Payload {
        /// The record that refers to it.
        seq: u64,
        /// The payload's BLAKE3 hash, hex.
        hash: String,
        /// What is wrong.
        problem: String,
    },
    /// An operating-system I/O error.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("open", "fdatasync", …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Another writer holds the log.
    #[error("locked: {} is held by another writer", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// An earlier write or sync failed; the writer refuses further work. A
    /// [`Log`](crate::Log): reopen it to recover. A [`Store`](crate::Store)
    /// reopens the session itself, through recovery, at the next call once
    /// no handle holds the poisoned writer.
    #[error("the writer is poisoned by an earlier I/O failure; reopen the log to recover")]
    Poisoned,
    /// The task that ran the call was cancelled before it finished (the
    /// async runtime is shutting down): whether the call took effect is not
    /// known; read the session's head to find out.
    #[error("the call was cancelled before it finished (runtime shutting down)")]
    Cancelled,
    /// A session, record or file does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The caller passed something unacceptable.
    #[error("invalid input: {what}")]
    InvalidInput {
        /// What is wrong with it.
        what: String,
    },
    /// A write (`save_delta`, `save_entries`, `append`, `commit_turn`,
    /// `compact`, `remove_last`) was given a head that is not the stored
    /// head; nothing was written.
    #[error(
        "head mismatch on session {session}: caller holds {}, stored head is {}",
        fmt_hash(expected),
        fmt_hash(actual)
    )]
    HeadMismatch {
        /// The session.
        session: crate::id::SessionId,
        /// The head the caller holds.
        expected: Option<EntryHash>,
        /// The head on disk.
        actual: Option<EntryHash>,
    },
    /// [`Log::append_batch`](crate::Log::append_batch) was told to expect a
    /// head that is not the log's; nothing was written. A store reports
    /// this as [`Error::HeadMismatch`] on the session.
    #[error(
        "head conflict in {}: expected {}, the log's head is {}",
        log.display(),
        fmt_hash(expected),
        fmt_hash(actual)
    )]
    HeadConflict {
        /// The log's directory.
        log: PathBuf,
        /// The head expected (`None`: an empty log).
        expected: Option<EntryHash>,
        /// The log's head (`None`: empty).
        actual: Option<EntryHash>,
    },
    /// An item does not fit a provider's wire form (the Responses API's or the
    /// Messages API's), either way: its JSON does not fit the item model, or the
    /// item has no form in that API.
    #[error("{api} item{}, `{field}`: {message}", fmt_index(*index))]
    ItemForm {
        /// `"responses"` or `"anthropic"`.
        api: &'static str,
        /// The item's index in the history (for Anthropic, the message's index
        /// on the way in and the item's on the way out); `None` for an item
        /// (or message) read or written alone.
        index: Option<usize>,
        /// The field, as a path inside the item (`content[1].detail`), or
        /// `type` for the item as a whole.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A line of the JSON wire form is unacceptable.
    #[error("line {line}, column {column}: {message}")]
    Wire {
        /// 1-based line number.
        line: u64,
        /// 1-based column, 0 when not applicable.
        column: u64,
        /// What is wrong.
        message: String,
    },
    /// A fork's link to its parent does not hold: the parent (or an
    /// ancestor) is missing, has no record at the seq the fork names, or
    /// that record's hash is not the one the fork recorded; or the chain of
    /// parents loops or is deeper than a store makes. The fork's history
    /// cannot be read as it was forked: this is damage, never a silently
    /// different history.
    #[error("broken fork link of session {session}: parent {parent} at seq {seq}: {what}")]
    BrokenFork {
        /// The fork whose link was followed.
        session: crate::id::SessionId,
        /// The parent it names.
        parent: crate::id::SessionId,
        /// The parent's seq it names.
        seq: u64,
        /// What does not hold.
        what: String,
    },
    /// Records of a session that only an orphaned journal held (`Sync`
    /// commits acknowledged before a crash) could not be put back into
    /// its log when the store opened: the journal's frames do not continue
    /// the log (another history, or a gap), or the log could not be opened.
    /// The journal file is kept and the session is not written, so that no
    /// later commit buries them; where the frames do not continue the log,
    /// open the store with
    /// [`RecoveryMode::Salvage`](crate::RecoveryMode::Salvage) to go on
    /// without them. Reads show what the log holds. See
    /// [`Store::unapplied_journals`](crate::Store::unapplied_journals).
    #[error(
        "session {session} has acknowledged records in the journal {} that could not be put back into its log: {reason}; the journal is kept and the session is not written (open the store with RecoveryMode::Salvage to go on without them)",
        journal.display()
    )]
    JournalUnapplied {
        /// The session.
        session: crate::id::SessionId,
        /// The journal file that holds them.
        journal: PathBuf,
        /// Why they could not be applied.
        reason: String,
    },
    /// Records of a session lie in segments evicted to an archive (their
    /// local files were removed after the archive was verified to hold
    /// them, see `evicted.json`): attach the archive
    /// (`Store::attach_archive`, or `--archive URL` on the command line) to
    /// fetch them back, or read from the last `SessionStart` on
    /// (`Store::restore`), which is kept local.
    #[error(
        "records {first_seq}..={last_seq} of {session} are evicted to an archive; attach the archive (--archive URL) to read them"
    )]
    Evicted {
        /// The session (its log's directory name).
        session: String,
        /// Seq of the first evicted record.
        first_seq: u64,
        /// Seq of the last evicted record.
        last_seq: u64,
    },
    /// An object of an archive (feature `archive`) is missing, failed its
    /// check, or does not continue the objects before it; or the object
    /// store refused a request. Nothing was written locally by the call
    /// that reports it (a restore checks every object first).
    #[error("archive object {object}: {reason}")]
    Archive {
        /// The object's name in the object store (`prefix/id/segments/…`).
        object: String,
        /// What is wrong with it, or what the object store said.
        reason: String,
    },
    /// A foreign transcript (a history reader's input) could not be read
    /// past a line: an I/O error or a broken compressed stream.
    #[error("reading {} at line {line}: {source}", path.display())]
    Transcript {
        /// The transcript file.
        path: PathBuf,
        /// The 1-based line the read failed in.
        line: usize,
        /// What the OS or the decompressor reported.
        #[source]
        source: io::Error,
    },
}

fn fmt_seq(seq: Option<u64>) -> String {
    seq.map(|s| format!(", seq {s}")).unwrap_or_default()
}

fn fmt_index(index: Option<usize>) -> String {
    index.map(|i| format!(" {i}")).unwrap_or_default()
}

fn fmt_hash(hash: &Option<EntryHash>) -> String {
    hash.map(|h| h.to_string()).unwrap_or_else(|| "none".into())
}

/// Which check failed on a damaged record or segment.
///
/// Example: [`RecoveryMode`](crate::RecoveryMode).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// A magic number did not match.
    Magic,
    /// An unknown format version.
    Version {
        /// The version found.
        found: u32,
    },
    /// A checksum did not match.
    Crc {
        /// What the bytes say.
        expected: u32,
        /// What was computed.
        actual: u32,
    },
    /// The `prev_hash` of a record, or a segment's start hash, does not continue the chain.
    ChainLink {
        /// The hash the chain requires.
        expected: EntryHash,
        /// The hash found.
        actual: EntryHash,
    },
    /// A sequence number is not the successor of the one before.
    SeqGap {
        /// The expected seq.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// A length or offset points outside the file.
    Truncated,
    /// The payload is not a valid archive.
    InvalidArchive(String),
    /// A segment header names another log.
    ForeignLog,
    /// A sealed segment's footer disagrees with its records or is missing.
    Footer(String),
    /// A segment is missing from the sequence.
    MissingSegment,
    /// The active segment's durable mark disagrees with its records.
    Mark(String),
    /// A record past the durable mark refers to an item of the store's
    /// payload area that is missing or damaged: it was not durable when
    /// the power went, so recovery cuts the log there as a torn tail.
    Payload(String),
    /// The last records of the log are the start of a batch whose last
    /// record never reached the disk (a crash during the write): a batch
    /// is appended whole or not at all, so recovery cuts it as a torn tail.
    IncompleteBatch,
}

impl fmt::Display for CorruptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptKind::Magic => write!(f, "bad magic"),
            CorruptKind::Version { found } => write!(f, "unknown format version {found}"),
            CorruptKind::Crc { expected, actual } => {
                write!(
                    f,
                    "CRC mismatch (stored {expected:08x}, computed {actual:08x})"
                )
            }
            CorruptKind::ChainLink { expected, actual } => {
                write!(f, "broken chain link (expected {expected}, found {actual})")
            }
            CorruptKind::SeqGap { expected, found } => {
                write!(f, "sequence gap (expected seq {expected}, found {found})")
            }
            CorruptKind::Truncated => write!(f, "truncated frame"),
            CorruptKind::InvalidArchive(why) => write!(f, "invalid archive ({why})"),
            CorruptKind::ForeignLog => write!(f, "segment belongs to another log"),
            CorruptKind::Footer(why) => write!(f, "bad footer ({why})"),
            CorruptKind::MissingSegment => write!(f, "missing segment"),
            CorruptKind::Mark(why) => write!(f, "durable mark: {why}"),
            CorruptKind::Payload(why) => write!(f, "payload not durable: {why}"),
            CorruptKind::IncompleteBatch => write!(
                f,
                "a batch of records written together ends before its last record"
            ),
        }
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Error {
        Error::InvalidInput { what: what.into() }
    }

    pub(crate) fn not_found(what: impl Into<String>) -> Error {
        Error::NotFound { what: what.into() }
    }

    /// Whether this is an I/O error for too many open files: this
    /// process's limit (`EMFILE`) or the system's (`ENFILE`). A store that
    /// meets it in its own opens closes its idle sessions and tries once
    /// more before returning it.
    ///
    /// Example: [`Error`].
    pub fn is_out_of_descriptors(&self) -> bool {
        match self {
            Error::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
            }
            _ => false,
        }
    }

    /// Whether this is an I/O error for a full disk (`ENOSPC`) or an
    /// exceeded quota (`EDQUOT`): freeing space and reopening goes on.
    ///
    /// Example: [`IoHook`](crate::log::IoHook).
    pub fn is_storage_full(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            ),
            _ => false,
        }
    }
}

impl From<crate::id::ParseSessionIdError> for Error {
    fn from(e: crate::id::ParseSessionIdError) -> Error {
        Error::invalid(e.to_string())
    }
}
