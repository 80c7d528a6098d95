//! Files a parked session closes and reopens at its next use
//! ([`ParkableFile`]), beneath a kept directory ([`BaseDir`]), and how a
//! reopen tells the same file from one put in its place (`FileId`).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{io_err, Hook, HookedFile};
use crate::error::{Error, Result};

/// A directory kept open so that the parked files beneath it reopen
/// without walking the path above it (`openat`): the store's `sessions/`.
pub(crate) struct BaseDir {
    path: PathBuf,
    pub(super) dir: File,
}

impl BaseDir {
    /// Opens the directory at `path`.
    pub(crate) fn open(path: &Path) -> Result<BaseDir> {
        let dir = File::open(path).map_err(io_err("open", path))?;
        Ok(BaseDir {
            path: path.to_path_buf(),
            dir,
        })
    }
}

/// A file its owner can close while it keeps its place (a parked
/// session's segment or catalog: see `Store`'s budgets). While parked,
/// each use opens it for that use only, so that a parked session holds no
/// descriptor however it is read; once unparked, the next use opens it to
/// keep. Every reopen checks that the path still names the same file
/// (device and inode, read when it was parked), so that a file replaced
/// meanwhile is an error rather than the target of the next write.
///
/// The state's lock is held only to take the file (an `Arc`), never across
/// the I/O: a write does not wait for another thread's `fdatasync` of the
/// same file, nor a park for either. A descriptor parked while a use still
/// holds it closes when that use ends.
pub(crate) struct ParkableFile {
    path: PathBuf,
    writable: bool,
    hook: Hook,
    state: parking_lot::Mutex<FileState>,
    /// Set by [`ParkableFile::pin`]: a park leaves the file open (it holds
    /// its log's writer lock).
    pinned: std::sync::atomic::AtomicBool,
}

enum FileState {
    /// Open, with its identity once a park or a reopen has read it.
    Open(Arc<HookedFile>, Option<FileId>),
    /// Closed by `park`; each use opens it for that use (beneath the
    /// directory the park named, if any).
    Parked(FileId, Option<Arc<BaseDir>>),
    /// Closed by `park`, then unparked: the next use opens it to keep.
    Unparked(FileId, Option<Arc<BaseDir>>),
}

/// A file's device, inode and, where the file system keeps one, birth
/// time: a file system reuses a removed file's inode number for the next
/// file it makes (ext4 does at once), so device and inode alone would take
/// a file made in a parked one's place for it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    born: Option<std::time::SystemTime>,
}

impl FileId {
    fn of(file: &File) -> io::Result<FileId> {
        Ok(FileId::of_meta(&file.metadata()?))
    }

    fn of_meta(meta: &fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            // `statx`'s birth time, read by the same call: none on a file
            // system that keeps no such time (and then none on both sides).
            born: meta.created().ok(),
        }
    }
}

/// Whether `a` and `b` are open on the same file.
pub(crate) fn same_file(a: &File, b: &File) -> bool {
    matches!((FileId::of(a), FileId::of(b)), (Ok(x), Ok(y)) if x == y)
}

/// Whether `path` names, now, the file that `file` is open on.
pub(crate) fn names(path: &Path, file: &File) -> io::Result<bool> {
    Ok(FileId::of(file)? == FileId::of_meta(&fs::metadata(path)?))
}

impl ParkableFile {
    /// Takes over an open file, reopened with the same access (`writable`).
    pub(crate) fn new(file: HookedFile, writable: bool) -> ParkableFile {
        ParkableFile {
            path: file.path.clone(),
            writable,
            hook: file.hook.clone(),
            state: parking_lot::Mutex::new(FileState::Open(Arc::new(file), None)),
            pinned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Keeps the file open through parks until [`ParkableFile::unpin`]
    /// (opened now if it was parked); returns it. The file of a log's
    /// active segment holds the log's writer lock, and a lock closed is a
    /// lock lost.
    pub(crate) fn pin(&self) -> Result<Arc<HookedFile>> {
        // Pinned first: a park from now on leaves the file as it is.
        self.pinned
            .store(true, std::sync::atomic::Ordering::Release);
        self.unpark();
        self.take().inspect_err(|_| self.unpin())
    }

    /// Lets parks close the file again.
    pub(crate) fn unpin(&self) {
        self.pinned
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Uses `file`, open on the same file with the same access, in place
    /// of the descriptor this holds, which closes (once no use holds it).
    pub(crate) fn adopt(&self, file: File) {
        let file = HookedFile::wrap(&self.path, file, &self.hook);
        *self.state.lock() = FileState::Open(Arc::new(file), None);
    }

    /// Runs `f` on the open file, opening it again first if it was parked.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&HookedFile) -> Result<R>) -> Result<R> {
        let file = self.take()?;
        f(&file)
    }

    /// The open file, opened again if it was parked (and kept open if it
    /// was unparked since).
    fn take(&self) -> Result<Arc<HookedFile>> {
        let (id, keep, base) = match &*self.state.lock() {
            FileState::Open(file, _) => return Ok(file.clone()),
            FileState::Parked(id, base) => (*id, false, base.clone()),
            FileState::Unparked(id, base) => (*id, true, base.clone()),
        };
        // Opened outside the lock: a park or another reopen meanwhile is
        // settled below, under it.
        let beneath = base
            .as_deref()
            .and_then(|b| Some((b, self.path.strip_prefix(&b.path).ok()?)));
        let file = match beneath {
            Some((base, rel)) => {
                HookedFile::open_beneath(base, rel, &self.path, self.writable, &self.hook)?
            }
            None => HookedFile::open(&self.path, self.writable, &self.hook)?,
        };
        if FileId::of(&file.file).map_err(io_err("stat", &self.path))? != id {
            let e = io::Error::other("the file was replaced while its session was parked");
            return Err(Error::io("reopen", &self.path, e));
        }
        let file = Arc::new(file);
        let mut state = self.state.lock();
        match &*state {
            FileState::Open(open, _) => return Ok(open.clone()),
            FileState::Unparked(..) if keep => *state = FileState::Open(file.clone(), Some(id)),
            _ => {}
        }
        Ok(file)
    }

    /// Opens the file now if it is not open (after an unpark: see
    /// `Log::unpark`).
    pub(crate) fn open_now(&self) -> Result<()> {
        self.take().map(drop)
    }

    /// Runs `f` on the file if it is open now (never reopening it).
    pub(crate) fn if_open<R>(&self, f: impl FnOnce(&File) -> R) -> Option<R> {
        let file = match &*self.state.lock() {
            FileState::Open(file, _) => file.clone(),
            _ => return None,
        };
        Some(f(&file.file))
    }

    /// The file if it is open now, held weakly: a park meanwhile closes it
    /// as if this were not held.
    pub(crate) fn weak_if_open(&self) -> Option<std::sync::Weak<HookedFile>> {
        match &*self.state.lock() {
            FileState::Open(file, _) => Some(Arc::downgrade(file)),
            _ => None,
        }
    }

    /// Closes the file (once no use holds it); until
    /// [`ParkableFile::unpark`], each use opens it for that use only, through
    /// `base` when the file lies beneath it (and by its path otherwise). A
    /// file whose identity cannot be read stays open.
    pub(crate) fn park(&self, base: Option<&Arc<BaseDir>>) {
        let mut state = self.state.lock();
        if self.pinned.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let id = match &*state {
            FileState::Open(_, Some(id)) => *id,
            FileState::Open(file, None) => match FileId::of(&file.file) {
                Ok(id) => id,
                Err(_) => return,
            },
            FileState::Parked(..) => return,
            FileState::Unparked(id, _) => *id,
        };
        *state = FileState::Parked(id, base.cloned());
    }

    /// Lets the next use open a parked file to keep.
    pub(crate) fn unpark(&self) {
        let mut state = self.state.lock();
        if let FileState::Parked(id, base) = &mut *state {
            let unparked = FileState::Unparked(*id, base.take());
            *state = unparked;
        }
    }

    /// Whether the file is parked (closed, each use opening it for itself).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        matches!(&*self.state.lock(), FileState::Parked(..))
    }

    /// Whether the file is pinned open ([`ParkableFile::pin`]).
    #[cfg(test)]
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the file is parked with a directory to reopen it beneath.
    #[cfg(test)]
    pub(crate) fn is_parked_beneath(&self) -> bool {
        matches!(&*self.state.lock(), FileState::Parked(_, Some(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file parked beneath a kept directory reopens through it: with the
    /// directory moved away, so that the file's path names nothing, a use
    /// still reaches the same file, and a file put in its place is refused
    /// as replaced. Parked without one, the reopen goes by the path.
    #[test]
    fn a_file_parked_beneath_a_kept_directory_reopens_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (base_path, moved) = (tmp.path().join("base"), tmp.path().join("moved"));
        fs::create_dir_all(base_path.join("s")).unwrap();
        let path = base_path.join("s").join("f");
        let file = ParkableFile::new(HookedFile::create(&path, &None).unwrap(), true);
        let base = Arc::new(BaseDir::open(&base_path).unwrap());
        file.park(Some(&base));
        fs::rename(&base_path, &moved).unwrap();
        assert!(!path.exists());
        file.with(|f| f.write_at(0, b"kept")).unwrap();
        assert_eq!(fs::read(moved.join("s").join("f")).unwrap(), b"kept");

        // Another file in its place, beneath the same directory (the old
        // one kept, so that its inode number cannot be reused for it).
        fs::rename(moved.join("s").join("f"), moved.join("old")).unwrap();
        fs::write(moved.join("s").join("f"), b"other").unwrap();
        let err = file.with(|f| f.write_at(0, b"x")).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(fs::read(moved.join("s").join("f")).unwrap(), b"other");

        // A file removed and made again in its place, where the file
        // system may give the new one the old one's inode number: refused
        // all the same (its birth time differs).
        let reused = moved.join("s").join("r");
        fs::write(&reused, b"first").unwrap();
        let first = ParkableFile::new(HookedFile::open(&reused, true, &None).unwrap(), true);
        first.park(None);
        fs::remove_file(&reused).unwrap();
        // Birth times are kept in nanoseconds, but a coarse clock can give
        // two files the same one: let it tick.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&reused, b"second").unwrap();
        let err = first.with(|f| f.write_at(0, b"x")).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(fs::read(&reused).unwrap(), b"second");

        // Parked by its path alone: the path names nothing now.
        let path2 = moved.join("s").join("g");
        let by_path = ParkableFile::new(HookedFile::create(&path2, &None).unwrap(), true);
        by_path.park(None);
        fs::rename(&moved, &base_path).unwrap();
        let err = by_path.with(|f| f.write_at(0, b"x")).unwrap_err();
        assert!(err.to_string().contains("open"), "{err}");
        // Unparked, the next use reopens it beneath the directory to keep.
        let h = base_path.join("s").join("h");
        let kept = ParkableFile::new(HookedFile::create(&h, &None).unwrap(), true);
        kept.park(Some(&Arc::new(BaseDir::open(&base_path).unwrap())));
        kept.unpark();
        fs::rename(&base_path, &moved).unwrap();
        kept.open_now().unwrap();
        assert!(kept.weak_if_open().is_some(), "kept open after the unpark");
    }

    /// The page-cache worker holds a file weakly: it gets the file only
    /// while it is open, and a park closes the descriptor even while the
    /// worker still holds its weak reference.
    #[test]
    fn a_weak_file_is_had_only_while_open_and_a_park_closes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = ParkableFile::new(HookedFile::create(&path, &None).unwrap(), true);
        let weak = file.weak_if_open().expect("open after create");
        assert!(weak.upgrade().is_some());
        file.park(None);
        assert!(file.weak_if_open().is_none(), "parked: nothing to hand out");
        assert!(weak.upgrade().is_none(), "the park closed the descriptor");
        // A use while parked opens for itself and keeps nothing.
        file.with(|f| f.write_at(0, b"x")).unwrap();
        assert!(file.weak_if_open().is_none());
        file.unpark();
        file.open_now().unwrap();
        let weak = file.weak_if_open().expect("open after unpark");
        assert!(weak.upgrade().is_some());
    }
}
