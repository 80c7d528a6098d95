//! The store's side of the shared journal (`log::journal`): attaching it
//! to each session's writer, and recovering the journals other handles
//! left behind when a writable store opens.
//!
//! A journal whose `flock` is free has no live owner. Its frames are
//! applied to their sessions' logs where they continue them (after a power
//! loss, the segments may lack records only the journal made durable),
//! each session is closed (a checkpoint), and the file goes. A journal
//! still locked is left alone, unless its header names another boot than
//! this one: then its owner is gone and another store is recovering it,
//! so the open waits for that (no session may be written before its
//! journal frames are back). A session whose frames cannot be put back
//! keeps the file, and this handle refuses to write it
//! ([`Error::JournalUnapplied`]) unless it recovers with
//! [`RecoveryMode::Salvage`], which goes on without them. DESIGN.md, "The
//! shared journal".

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::Store;
use crate::error::{Error, Result};
use crate::format::journal::{frames, FrameStart, JournalHeader, JOURNAL_HEADER_LEN};
use crate::fs::{self as hooked_fs, io_err, names, HookedFile};
use crate::log::journal::{boot_id, hex, token_of_name, JournalPort, JOURNAL_DIR};
use crate::log::{Log, RecoveryMode};
use crate::schema::SessionId;
use crate::segment::parse_segment_name;

/// A session's records that only an orphaned journal held, which this
/// store's open could not put back into its log ([`Store::unapplied_journals`]).
///
/// Example: [`Store::unapplied_journals`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnappliedJournal {
    /// The session.
    pub session: SessionId,
    /// The journal file that holds them (the one whose frame failed, when
    /// a frame did).
    pub journal: PathBuf,
    /// Why they could not be put back.
    pub reason: String,
    /// Gone: the frames do not continue the log, and the store opened
    /// with [`RecoveryMode::Salvage`], which writes the session on without
    /// them and removes the file once no other session needs it. Otherwise
    /// (or where the log would not open, whatever the mode) the file is
    /// kept for the next open, and this handle refuses to write the
    /// session ([`Error::JournalUnapplied`]).
    pub dropped: bool,
}

/// A journal file taken for recovery: its lock, path and bytes.
struct Orphan {
    path: PathBuf,
    _lock: File,
    bytes: Vec<u8>,
}

/// A frame to apply: where it starts, its records, and the file it is in.
type Frame<'a> = (FrameStart, &'a [u8], &'a Path);

impl Store {
    /// Makes `log`'s `Sync` commits go through this handle's journal.
    pub(super) fn attach_journal(&self, id: SessionId, log: &Log) {
        if let Some(journal) = &self.inner.journal {
            log.attach_journal(JournalPort {
                journal: journal.clone(),
                session: id.0,
            });
        }
    }

    /// Recovers every journal left by a handle that is gone (see the
    /// module). A session whose frames cannot be applied keeps its journal
    /// file for the next open; the others go on.
    pub(super) fn recover_journals(&self) -> Result<()> {
        let Some(own) = &self.inner.journal else {
            return Ok(());
        };
        let dir = self.inner.root.join(JOURNAL_DIR);
        let listing = match fs::read_dir(&dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("read_dir", &dir, e)),
        };
        let own = hex(own.token());
        let boot = boot_id();
        let mut orphans = Vec::new();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let token = name.to_str().and_then(token_of_name);
            if token.is_none_or(|t| t == own) {
                continue;
            }
            if let Some(orphan) = take_orphan(&entry.path(), &boot)? {
                orphans.push(orphan);
            }
        }
        let mut sessions: BTreeMap<[u8; 16], Vec<Frame<'_>>> = BTreeMap::new();
        let mut kept: HashSet<&Path> = HashSet::new();
        for o in &orphans {
            if JournalHeader::other_version(&o.bytes).is_some() {
                kept.insert(o.path.as_path());
            }
            let Some(header) = JournalHeader::decode(&o.bytes) else {
                continue;
            };
            if header.clean {
                continue;
            }
            for (start, records) in frames(&o.bytes[JOURNAL_HEADER_LEN..], header.generation) {
                let frame = (start, records, o.path.as_path());
                sessions.entry(start.session).or_default().push(frame);
            }
        }
        let salvage = self.inner.opts.log.recovery == RecoveryMode::Salvage;
        let mut unapplied = Vec::new();
        for (id, mut frames) in sessions {
            frames.sort_by_key(|(start, _, _)| start.seq);
            let Err(e) = self.replay_session(SessionId(id), &frames) else {
                continue;
            };
            // The frames' own fault (they do not continue the log) names
            // their file; anything else (the log would not open) names
            // another, and salvage drops only the former.
            let at_fault = match &e {
                Error::Corrupt { segment, .. } => frames
                    .iter()
                    .find(|(_, _, path)| *path == segment.as_path()),
                _ => None,
            };
            let dropped = salvage && at_fault.is_some();
            if !dropped {
                kept.extend(frames.iter().map(|(_, _, path)| *path));
            }
            let journal = at_fault.unwrap_or(&frames[0]).2.to_path_buf();
            unapplied.push(UnappliedJournal {
                session: SessionId(id),
                journal,
                reason: e.to_string(),
                dropped,
            });
        }
        *self.inner.unapplied.lock() = unapplied;
        for o in &orphans {
            if !kept.contains(o.path.as_path()) {
                hooked_fs::remove_file(&o.path, self.hook())?;
            }
        }
        Ok(())
    }

    /// The sessions whose acknowledged records in journals left by handles
    /// that are gone this store's open could not put back into their logs:
    /// their frames do not continue the log (another history, a gap), or
    /// the log would not open. Empty after a normal open. Unless the store
    /// opened with [`RecoveryMode::Salvage`], each journal file is kept and
    /// this handle refuses to write the session
    /// ([`Error::JournalUnapplied`]); its reads show what its log holds.
    ///
    /// ```
    /// use session_store::{RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// assert!(store.unapplied_journals().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn unapplied_journals(&self) -> Vec<UnappliedJournal> {
        self.inner.unapplied.lock().clone()
    }

    /// [`Error::JournalUnapplied`] for a session this handle must not
    /// write (see [`Store::unapplied_journals`]).
    pub(super) fn refuse_unapplied(&self, id: SessionId) -> Result<()> {
        let unapplied = self.inner.unapplied.lock();
        match unapplied.iter().find(|u| u.session == id && !u.dropped) {
            None => Ok(()),
            Some(u) => Err(Error::JournalUnapplied {
                session: id,
                journal: u.journal.clone(),
                reason: u.reason.clone(),
            }),
        }
    }

    /// Applies a session's journal frames (sorted by seq) to its log, and
    /// closes it, which makes them durable in its segment.
    fn replay_session(&self, id: SessionId, frames: &[Frame<'_>]) -> Result<()> {
        let dir = self.session_dir(id);
        // Deleted since: nothing to keep.
        if !hooked_fs::dir_exists(&dir)? {
            return Ok(());
        }
        let log = match self.open_writer(id, &dir, None) {
            Ok(log) => log,
            // A writer of this boot holds it: the records it read are in
            // the page cache; made durable here before the journal goes.
            Err(Error::Locked { .. }) => return self.sync_segments(&dir),
            // A creation that never finished holds nothing to keep.
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        for (start, records, path) in frames {
            log.replay_frame(start, records, path)?;
        }
        log.close()
    }

    /// `fdatasync` of every segment file of the session in `dir`.
    fn sync_segments(&self, dir: &Path) -> Result<()> {
        let listing = fs::read_dir(dir).map_err(io_err("read_dir", dir))?;
        for entry in listing.flatten() {
            let name = entry.file_name();
            if name.to_str().and_then(parse_segment_name).is_some() {
                HookedFile::open(&entry.path(), false, self.hook())?.sync()?;
            }
        }
        Ok(())
    }
}

/// The journal file at `path` if no live handle owns it, locked and read.
/// A file still locked is another handle's, or being recovered: when its
/// header names another boot than `boot`, its owner is gone and the wait
/// is for its recovery, after which the file is taken if it is still there.
fn take_orphan(path: &Path, boot: &[u8; 16]) -> Result<Option<Orphan>> {
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut head = [0u8; JOURNAL_HEADER_LEN];
            let read = (&file).read_exact(&mut head);
            let header = read.ok().and_then(|()| JournalHeader::decode(&head));
            let earlier_boot =
                header.is_some_and(|h| !h.clean && h.boot != *boot && *boot != [0; 16]);
            if !earlier_boot {
                return Ok(None);
            }
            file.lock().map_err(io_err("lock", path))?;
        }
        Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
    }
    // A recovery that ran meanwhile removed it.
    if !names(path, &file).map_err(io_err("stat", path))? {
        return Ok(None);
    }
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    Ok(Some(Orphan {
        path: path.to_path_buf(),
        _lock: file,
        bytes,
    }))
}
