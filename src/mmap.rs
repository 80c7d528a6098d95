//! The one module with `unsafe`: read-only memory maps of segment files, the
//! `posix_fallocate` call that reserves their space, and the few other
//! syscalls `std` lacks (holes, writeback, the open-file limit).
//!
//! Writers never write through a map: they `pwrite` into the page cache, which
//! the shared map then shows. Soundness rests on two rules:
//! - Readers get slices only of the record area below the published
//!   `committed` offset, which only grows; no write ever targets bytes below
//!   it (the writer appends above it, and rewrites only the header's mark
//!   slots, which no slice covers).
//! - Views of bytes that are not committed (`with_view`) are taken
//!   only while no writer of this process runs: during open, under the
//!   writer lock, before anything is published.
//!
//! Files are preallocated with `posix_fallocate`, so a full disk is an error
//! at allocation time, and only the locked writer rewrites or zeroes a file,
//! during its own open. Another process that writes the file under us (not
//! this crate's writer) is outside these rules; DESIGN.md lists it in the
//! threat model.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::SEGMENT_HEADER_LEN;

/// A whole-file, read-only memory map with a published committed offset.
pub(crate) struct Map {
    ptr: *const u8,
    len: usize,
    committed: AtomicU64,
    _map: memmap2::Mmap,
}

// SAFETY: the map is read-only; shared slices are handed out only below
// `committed` (never written again) or while no writer runs (see the module
// rules). The raw pointer is never handed out.
unsafe impl Send for Map {}
// SAFETY: as for `Send`.
unsafe impl Sync for Map {}

impl Map {
    /// Maps all `len` bytes of `file`, read-only and shared.
    pub(crate) fn new(file: &File, len: usize) -> io::Result<Map> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "empty segment file",
            ));
        }
        // SAFETY: a shared read-only map of a segment file whose length was
        // fixed by fallocate. This crate's writer never shrinks a file that
        // another handle may map, except during its own locked open, before
        // any reader of this process exists (see DESIGN.md).
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
        Ok(Map {
            ptr: map.as_ptr(),
            len,
            committed: AtomicU64::new(SEGMENT_HEADER_LEN as u64),
            _map: map,
        })
    }

    /// Mapped length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The published committed offset.
    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Raises the committed offset; bytes below it become readable and frozen.
    pub(crate) fn publish(&self, end: u64) {
        assert!(end as usize <= self.len, "publish beyond the map");
        self.committed.fetch_max(end, Ordering::AcqRel);
    }

    /// A slice of committed record bytes.
    ///
    /// Panics if the range is not inside `[SEGMENT_HEADER_LEN, committed)`: that
    /// is a broken internal invariant, never a consequence of file contents
    /// (callers bound-check lengths read from disk first).
    pub(crate) fn committed_slice(&self, start: usize, end: usize) -> &[u8] {
        let committed = self.committed() as usize;
        assert!(
            SEGMENT_HEADER_LEN <= start && start <= end && end <= committed,
            "slice {start}..{end} outside committed area ..{committed}"
        );
        // SAFETY: the range lies inside the mapping and below `committed`,
        // which only grows; no write ever targets bytes below it.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }
    }

    /// Runs `f` on a view of `start..end`, which may lie beyond the committed
    /// offset. Called only while no writer of this process runs, or on
    /// committed bytes (module rules).
    pub(crate) fn with_view<R>(&self, start: usize, end: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            start <= end && end <= self.len,
            "view {start}..{end} outside the map"
        );
        // SAFETY: in bounds of the mapping; by the module rules no write of
        // this process targets the range while the view lives, and the view
        // does not outlive the call.
        f(unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) })
    }
}

/// Reserves `len` bytes of real disk space for `file` (for a log that syncs:
/// its segments are then zero-filled, see `segment::zero_fill`).
pub(crate) fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
    // SAFETY: plain syscall wrapper on a valid open descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// The process's soft limit on open file descriptors (`RLIMIT_NOFILE`);
/// `None` if it cannot be read, `u64::MAX` if it is unlimited.
pub(crate) fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall wrapper writing into a local struct it owns.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    match (rc, limit.rlim_cur) {
        (0, libc::RLIM_INFINITY) => Some(u64::MAX),
        (0, soft) => Some(soft),
        _ => None,
    }
}

/// Where the first hole of `file` at or after `from` starts (`SEEK_HOLE`),
/// if the file system can tell: a sparse file reads as zeros from there to
/// the next data. Reads through a shared map must stop there: on tmpfs,
/// touching a hole page allocates it, and on a full one that is SIGBUS.
pub(crate) fn hole_at_or_after(file: &File, from: u64) -> Option<u64> {
    let offset = libc::off_t::try_from(from).ok()?;
    // SAFETY: plain syscall wrapper on a valid open descriptor; it moves only
    // the descriptor's file offset, which this crate never uses.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), offset, libc::SEEK_HOLE) };
    u64::try_from(hole).ok()
}

/// The parts of `from..to` of `file` that may hold bytes other than zeros:
/// everything but the holes of a sparse file (`SEEK_DATA`, `SEEK_HOLE`).
/// Where the file system cannot tell, the whole range.
pub(crate) fn data_ranges(file: &File, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let Ok(offset) = libc::off_t::try_from(at) else {
            return vec![(from, to)];
        };
        // SAFETY: plain syscall wrapper on a valid open descriptor. It moves
        // the descriptor's file offset, which this crate never uses: every
        // read and write is a `pread`/`pwrite` at an explicit offset.
        let data = unsafe { libc::lseek(file.as_raw_fd(), offset, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data at or after `at`. Anything else: no answer.
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return vec![(from, to)];
        }
        let start = data as u64;
        if start >= to {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(file.as_raw_fd(), data, libc::SEEK_HOLE) };
        let end = if hole < 0 { to } else { (hole as u64).min(to) };
        if end <= start {
            return vec![(from, to)];
        }
        out.push((start, end));
        at = end;
    }
    out
}

/// Asks the kernel to start writing back `from..to` of `file` now, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Only a hint: it makes
/// nothing durable, and its errors surface at the next `fdatasync`.
pub(crate) fn start_writeback(file: &File, from: u64, to: u64) {
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(from),
        libc::off64_t::try_from(to - from),
    ) else {
        return;
    };
    // SAFETY: plain syscall wrapper on a valid open descriptor; no memory is passed.
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}
