//! Where a writable log holds its one-writer lock: an exclusive `flock` on
//! the file its directory's `LOCK` names, which the writer makes a second
//! name of its active segment, so that the segment's own descriptor holds
//! the lock and a parked session keeps one descriptor, the one it writes
//! through (DESIGN.md, "The writer lock").

use std::fs::File;
use std::sync::Arc;

use super::{Inner, LOCK_FILE};
use crate::error::{Error, Result};
use crate::fs as hooked_fs;
use crate::segment::Segment;

/// The descriptor a writable log holds its lock through.
pub(super) enum WriterLock {
    /// `LOCK`, opened on its own: a file no segment shares (a new
    /// directory's, or one a crash left naming an older segment), until
    /// the lock moves to the active segment.
    File(File),
    /// The active segment, which `LOCK` names too. Its file is pinned
    /// open (`ParkableFile::pin`): a park leaves it.
    Segment(Arc<Segment>),
}

impl Inner {
    /// Moves the writer lock to `seg`, the active segment: taken on its
    /// descriptor, then `LOCK` renamed to it, then let go where it was.
    /// Through the move some file `LOCK` names is locked (`lock_writer`
    /// takes a lock only while the name still names the locked file). The
    /// open of a log whose `LOCK` names its active segment already keeps
    /// that descriptor as the segment's. Where the move cannot be made (no
    /// hard links, a failed rename, out of descriptors), the lock stays
    /// where it is, which costs a descriptor more while the session is
    /// open and nothing else.
    ///
    /// The one failure: the segment is locked already, by a writer that
    /// holds it while `LOCK` names another file (an operator removed or
    /// replaced `LOCK` under it): [`Error::Locked`], so that the open
    /// that asked is refused rather than made a second writer.
    pub(super) fn hold_lock_in(&self, seg: &Arc<Segment>) -> Result<()> {
        let mut held = self.lock.lock();
        let same = match &*held {
            None => return Ok(()),
            Some(WriterLock::Segment(s)) if Arc::ptr_eq(s, seg) => return Ok(()),
            Some(WriterLock::Segment(_)) => false,
            Some(WriterLock::File(f)) => seg
                .parkable()
                .if_open(|s| hooked_fs::same_file(f, s))
                .unwrap_or(false),
        };
        if same {
            if let Some(WriterLock::File(f)) = held.take() {
                seg.parkable().adopt(f);
            }
            // Pinned before anything can park it: the adopted descriptor
            // is open, so this opens nothing and cannot fail.
            let _ = seg.parkable().pin();
            *held = Some(WriterLock::Segment(seg.clone()));
            return Ok(());
        }
        let Ok(file) = seg.parkable().pin() else {
            return Ok(());
        };
        let lock_path = self.dir.join(LOCK_FILE);
        match file.file().try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                seg.parkable().unpin();
                return Err(Error::Locked { path: lock_path });
            }
            Err(std::fs::TryLockError::Error(_)) => {
                seg.parkable().unpin();
                return Ok(());
            }
        }
        if hooked_fs::relink(&seg.path, &lock_path, &self.opts.hook).is_err() {
            let _ = file.file().unlock();
            seg.parkable().unpin();
            return Ok(());
        }
        let_go(held.replace(WriterLock::Segment(seg.clone())));
        Ok(())
    }

    /// Lets go of the lock, as the writer goes: unlocked and unpinned
    /// where a segment holds it (whoever still holds the segment keeps an
    /// unlocked descriptor), closed where `LOCK`'s own file does.
    pub(super) fn let_go_of_lock(&self) {
        let_go(self.lock.lock().take());
    }

    /// Whether the lock is held through the active segment's descriptor.
    #[cfg(test)]
    pub(super) fn lock_in_segment(&self) -> bool {
        matches!(&*self.lock.lock(), Some(WriterLock::Segment(_)))
    }
}

/// Lets go of a lock held through `held`: a segment's descriptor is
/// unlocked (it may stay open for reads, or for whoever holds the segment)
/// and unpinned; `LOCK`'s own file is closed, which lets its lock go.
fn let_go(held: Option<WriterLock>) {
    match held {
        Some(WriterLock::Segment(seg)) => {
            seg.parkable().if_open(|f| {
                let _ = f.unlock();
            });
            seg.parkable().unpin();
        }
        Some(WriterLock::File(f)) => drop(f),
        None => {}
    }
}

/// Refuses the open of a writer that has taken `lock` (the file `LOCK`
/// names) when the log's last segment, `last`, is another file that
/// another writer holds locked: `LOCK` was removed or replaced under a
/// live writer. Checked before recovery writes anything, so that the
/// refused open changes nothing in a log another writer is appending to.
/// The common case, `LOCK` naming the last segment, costs a `statx`.
pub(super) fn refuse_if_held_elsewhere(
    lock: &File,
    last: &std::path::Path,
    lock_path: &std::path::Path,
) -> Result<()> {
    let Ok(segment) = File::open(last) else {
        // Recovery meets what is wrong with it and says so.
        return Ok(());
    };
    if hooked_fs::same_file(lock, &segment) {
        return Ok(());
    }
    match segment.try_lock() {
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: lock_path.to_path_buf(),
        }),
        // Free: closing the probe lets it go.
        _ => Ok(()),
    }
}
