//! File-system primitives and the fault seam. Everything the crate writes,
//! syncs, creates, renames or removes goes through this module: segments,
//! catalogs, the list cache, session creation and deletion. Each operation
//! first shows itself to the optional [`IoHook`], so the crash and I/O-error
//! tests reach every write the crate makes.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

mod parkable;
pub(crate) use parkable::{names, same_file, BaseDir, ParkableFile};

/// An I/O operation about to happen, shown to an [`IoHook`].
///
/// Example: [`IoHook`].
#[derive(Debug)]
#[non_exhaustive]
pub enum IoOp<'a> {
    /// A file is created and `len` bytes reserved for it.
    Allocate {
        /// The file.
        path: &'a Path,
        /// Bytes reserved.
        len: u64,
    },
    /// A file that holds no data yet is created (or truncated to empty).
    Create {
        /// The file.
        path: &'a Path,
    },
    /// Bytes are written at an offset (`pwrite`).
    Write {
        /// The file.
        path: &'a Path,
        /// Offset.
        offset: u64,
        /// The bytes, as they will stand in the file.
        data: &'a [u8],
    },
    /// `fdatasync` of a file.
    Sync {
        /// The file.
        path: &'a Path,
    },
    /// A rename.
    Rename {
        /// Old name.
        from: &'a Path,
        /// New name.
        to: &'a Path,
    },
    /// `fsync` of a directory.
    SyncDir {
        /// The directory.
        path: &'a Path,
    },
    /// A file is removed.
    Remove {
        /// The file.
        path: &'a Path,
    },
    /// A directory (and its missing parents) is created.
    CreateDir {
        /// The directory.
        path: &'a Path,
    },
    /// A directory is removed with everything in it.
    RemoveDir {
        /// The directory.
        path: &'a Path,
    },
    /// A second name for a file (`link(2)`), which fails if `to` exists.
    Link {
        /// The existing name.
        from: &'a Path,
        /// The new name.
        to: &'a Path,
    },
}

/// The fault seam: called before each I/O operation of a writer. An error
/// returned here is treated exactly like the operating system's.
///
/// Tests use it to count, record and fail operations; production code leaves
/// it unset.
///
/// ```
/// use std::{io, sync::Arc};
/// use session_store::log::{IoHook, IoOp};
/// use session_store::{Durability, LogOptions, RequestConfig, Store, StoreOptions};
///
/// struct FullDisk; // full by the first `fdatasync`
/// impl IoHook for FullDisk {
///     fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
///         if matches!(op, IoOp::Sync { .. }) { Err(io::ErrorKind::StorageFull.into()) } else { Ok(()) }
///     }
/// }
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let log = LogOptions::default().durability(Durability::Sync).hook(Arc::new(FullDisk));
/// let store = Store::open_with(dir.path(), StoreOptions::default().log(log))?;
/// let created = store.create_session(None, RequestConfig::model("gpt-5"), &[]);
/// assert!(created.is_err_and(|e| e.is_storage_full()));
/// # Ok(()) }
/// ```
pub trait IoHook: Send + Sync {
    /// Called before `op` runs; for writes, after the bytes are prepared and
    /// before they are published.
    fn before(&self, op: &IoOp<'_>) -> io::Result<()>;
}

/// The optional hook, shared by everything one store or log writes.
pub(crate) type Hook = Option<Arc<dyn IoHook>>;

/// Shows `op` to the hook, if there is one.
pub(crate) fn run_hook(hook: &Hook, op: IoOp<'_>) -> io::Result<()> {
    match hook {
        Some(h) => h.before(&op),
        None => Ok(()),
    }
}

/// Turns an OS error of `op` on `path` into the crate's error.
pub(crate) fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |e| Error::io(op, path, e)
}

/// Runs `f` after showing `op` to the hook; either's failure is reported as
/// `name` on `path`.
fn hooked<T>(
    hook: &Hook,
    op: IoOp<'_>,
    name: &'static str,
    path: &Path,
    f: impl FnOnce() -> io::Result<T>,
) -> Result<T> {
    run_hook(hook, op)
        .and_then(|()| f())
        .map_err(io_err(name, path))
}

/// `fsync` of a directory, which makes the names in it durable.
pub(crate) fn sync_dir(dir: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::SyncDir { path: dir }, "fsync dir", dir, || {
        File::open(dir).and_then(|d| d.sync_all())
    })
}

/// Whether `path` is a directory: `false` only when nothing is there. A
/// path that cannot be looked at (no search permission on a parent) is an
/// error that says so, not a missing directory to create; a path that is
/// something else is [`Error::InvalidInput`].
pub(crate) fn dir_exists(path: &Path) -> Result<bool> {
    dir_links(path).map(|links| links.is_some())
}

/// Whether a directory's link count (from [`dir_links`]) says it holds no
/// subdirectory.
pub(crate) fn holds_no_subdirectory(links: u64) -> bool {
    links == 2
}

/// The link count of the directory `path`, if it exists (as
/// [`dir_exists`] tells). On file systems that count them (ext4, xfs,
/// tmpfs) it is 2 plus the subdirectories; where they do not (btrfs) it is
/// always one. So exactly 2 says "no subdirectory", and a sweep of a
/// directory that holds only directories can skip listing it
/// ([`holds_no_subdirectory`]).
pub(crate) fn dir_links(path: &Path) -> Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some(m.nlink())),
        Ok(_) => Err(Error::invalid(format!(
            "{} exists and is not a directory",
            path.display()
        ))),
        // A path through a file has nothing there either.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(Error::io("stat", path, e)),
    }
}

/// Creates a directory and its missing parents, 0700 (session logs hold
/// credentials). Not durable until its parent is synced.
pub(crate) fn create_dir(path: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::CreateDir { path }, "create dir", path, || {
        DirBuilder::new().recursive(true).mode(0o700).create(path)
    })
}

/// Creates one directory (0700) in an existing parent, atomically: `false`
/// when something is already there, which then is left as it is. Not
/// durable until its parent is synced.
pub(crate) fn create_dir_new(path: &Path, hook: &Hook) -> Result<bool> {
    let made = hooked(
        hook,
        IoOp::CreateDir { path },
        "create dir",
        path,
        || match DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        },
    )?;
    Ok(made)
}

/// Renames `from` to `to`. Not durable until both directories are synced.
pub(crate) fn rename(from: &Path, to: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::Rename { from, to }, "rename", from, || {
        fs::rename(from, to)
    })
}

/// Gives the file `from` the second name `to`, failing with
/// `AlreadyExists` if `to` exists: the one way to claim a name that another
/// creator may claim at the same moment, since `rename` would replace it.
/// Not durable until the directory is synced.
pub(crate) fn link(from: &Path, to: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::Link { from, to }, "link", to, || {
        fs::hard_link(from, to)
    })
}

/// Replaces `path` with `bytes` durably: written to a temporary name beside
/// it, synced, renamed over it, and the directory synced. A crash leaves the
/// old file or the new one, and perhaps the temporary file; a failure
/// before the rename removes the temporary file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], hook: &Hook) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = HookedFile::create(&tmp, hook).and_then(|file| {
        file.write_at(0, bytes)?;
        file.sync()
    });
    if let Err(e) = written.and_then(|()| rename(&tmp, path, hook)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    sync_dir(dir.unwrap_or(Path::new(".")), hook)
}

/// Removes a file.
pub(crate) fn remove_file(path: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::Remove { path }, "remove", path, || {
        fs::remove_file(path)
    })
}

/// Removes a directory with everything in it.
pub(crate) fn remove_dir_all(path: &Path, hook: &Hook) -> Result<()> {
    hooked(hook, IoOp::RemoveDir { path }, "remove", path, || {
        fs::remove_dir_all(path)
    })
}

/// Takes the one-writer lock at `path` (an exclusive `flock`, the file made
/// 0600 if missing), or fails with [`Error::Locked`] while another writer
/// holds it. A probe for a live writer (the trash sweep, a test) may hold
/// the lock for a moment, so only a lock still held after a few tries is a
/// writer's. The lock lasts as long as the returned file.
///
/// A log's writer gives `path` to each new active segment ([`relink`]),
/// so the file opened may have lost the name by the time its lock is
/// taken (its writer let it go once the name had moved on): a lock is
/// kept only while `path` still names the locked file, and taken again
/// through the name otherwise.
pub(crate) fn lock_writer(path: &Path, hook: &Hook) -> Result<File> {
    let locked = || Error::Locked {
        path: path.to_path_buf(),
    };
    let mut tries = 0;
    loop {
        let lock = HookedFile::open_or_create(path, hook)?.into_file();
        match lock.try_lock() {
            Ok(()) => {
                if names(path, &lock).map_err(io_err("stat", path))? {
                    return Ok(lock);
                }
            }
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        }
        if tries == 5 {
            return Err(locked());
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Gives the file at `target` the name `name` too, replacing what `name`
/// named: a second name made beside it (`<name>.next`, left over from a
/// crash if it is there, and replaced) and renamed over `name`, so that
/// `name` always names one file or the other. Not durable until the
/// directory is synced.
pub(crate) fn relink(target: &Path, name: &Path, hook: &Hook) -> Result<()> {
    let mut next = name.as_os_str().to_owned();
    next.push(".next");
    let next = PathBuf::from(next);
    match link(target, &next, hook) {
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            remove_file(&next, hook)?;
            link(target, &next, hook)?;
        }
        linked => linked?,
    }
    rename(&next, name, hook).inspect_err(|_| {
        let _ = fs::remove_file(&next);
    })
}

/// An open file whose writes and syncs go through the hook, named by its
/// path in every error.
pub(crate) struct HookedFile {
    path: PathBuf,
    file: File,
    hook: Hook,
}

impl HookedFile {
    /// Opens an existing file, for writing too with `writable`.
    pub(crate) fn open(path: &Path, writable: bool, hook: &Hook) -> Result<HookedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(io_err("open", path))?;
        Ok(HookedFile::wrap(path, file, hook))
    }

    /// [`HookedFile::open`] of `path`, which is `rel` beneath `base`: only
    /// `rel` is walked (`openat`).
    fn open_beneath(
        base: &BaseDir,
        rel: &Path,
        path: &Path,
        writable: bool,
        hook: &Hook,
    ) -> Result<HookedFile> {
        let file = crate::mmap::open_at(&base.dir, rel, writable).map_err(io_err("open", path))?;
        Ok(HookedFile::wrap(path, file, hook))
    }

    /// Opens a file for reading and writing, creating it (0600, empty) if it
    /// does not exist; an existing file keeps its bytes.
    pub(crate) fn open_or_create(path: &Path, hook: &Hook) -> Result<HookedFile> {
        let open = |create: bool| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(0o600)
                .open(path)
        };
        // The file is there nearly always: one `open` then, and the
        // creation (which the fault seam sees) only where it is not.
        let file = match open(false) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                hooked(hook, IoOp::Create { path }, "create", path, || open(true))?
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        Ok(HookedFile::wrap(path, file, hook))
    }

    /// Creates a file (0600), empty: an existing one is truncated.
    pub(crate) fn create(path: &Path, hook: &Hook) -> Result<HookedFile> {
        let file = hooked(hook, IoOp::Create { path }, "create", path, || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
        })?;
        Ok(HookedFile::wrap(path, file, hook))
    }

    /// Creates a new file (0600; it must not exist) of `len` bytes. With
    /// `reserve`, its disk space is reserved (`posix_fallocate`), so that a
    /// full disk fails here rather than at a write; otherwise it is sparse,
    /// and takes blocks as it is written. The file is removed again if this
    /// fails.
    pub(crate) fn allocate(
        path: &Path,
        len: u64,
        reserve: bool,
        hook: &Hook,
    ) -> Result<HookedFile> {
        run_hook(hook, IoOp::Allocate { path, len }).map_err(io_err("fallocate", path))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err("create", path))?;
        let sized = match reserve {
            true => crate::mmap::fallocate(&file, len).map_err(io_err("fallocate", path)),
            false => file.set_len(len).map_err(io_err("ftruncate", path)),
        };
        if let Err(e) = sized {
            let _ = fs::remove_file(path);
            return Err(e);
        }
        Ok(HookedFile::wrap(path, file, hook))
    }

    fn wrap(path: &Path, file: File, hook: &Hook) -> HookedFile {
        HookedFile {
            path: path.to_path_buf(),
            file,
            hook: hook.clone(),
        }
    }

    /// The same open file, known from now on by `path` (after a rename).
    pub(crate) fn renamed(self, path: &Path) -> HookedFile {
        HookedFile {
            path: path.to_path_buf(),
            ..self
        }
    }

    /// The open file, for a caller that keeps it without the hook (a lock).
    pub(crate) fn into_file(self) -> File {
        self.file
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, for reads, maps and locks.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Writes all of `data` at `offset` (`pwrite`).
    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let op = IoOp::Write {
            path: &self.path,
            offset,
            data,
        };
        hooked(&self.hook, op, "write", &self.path, || {
            self.file.write_all_at(data, offset)
        })
    }

    /// `fdatasync`: makes every write to this file durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let op = IoOp::Sync { path: &self.path };
        hooked(&self.hook, op, "fdatasync", &self.path, || {
            self.file.sync_data()
        })
    }

    /// Reads exactly `len` bytes at `offset` (`pread`).
    pub(crate) fn read_exact_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(io_err("read", &self.path))?;
        Ok(buf)
    }
}
