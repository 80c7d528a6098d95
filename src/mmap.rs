//! The one module with `unsafe`: memory maps of segment files, and the
//! `posix_fallocate` call that reserves their space.
//!
//! Soundness rests on three rules that [`Map`] enforces itself:
//! - Readers get slices only of the record area below the published
//!   `committed` offset, which only grows and is never written again.
//! - Every write goes to the header area (never handed to readers) or at or
//!   above `committed`, under the map's own write lock, so no two writes race
//!   and no write touches bytes a reader can see.
//! - Files are preallocated with `posix_fallocate`, and only the locked writer
//!   shrinks or rewrites a file, during open, before any reader exists. A full
//!   disk is therefore an error at allocation time, never a SIGBUS on a write.
//!
//! Another process that writes the file under us (not this crate's writer)
//! is outside these rules; DESIGN.md lists it in the threat model.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::format::SEGMENT_HEADER_LEN;

/// Keeps a mapping alive.
enum Owner {
    Mut(#[allow(dead_code)] memmap2::MmapMut),
    Ro(#[allow(dead_code)] memmap2::Mmap),
}

/// A whole-file memory map with a published committed offset.
pub(crate) struct Map {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    committed: AtomicU64,
    write_lock: Mutex<()>,
    _owner: Owner,
}

// SAFETY: all access to the mapped bytes goes through methods that follow the
// module rules above: shared slices only below `committed`, writes only under
// `write_lock` and only where no slice can point. The raw pointer is never
// handed out.
unsafe impl Send for Map {}
// SAFETY: as for `Send`.
unsafe impl Sync for Map {}

impl Map {
    /// Maps all of `file`. A writable map needs the file opened read-write.
    pub(crate) fn new(file: &File, len: usize, writable: bool) -> io::Result<Map> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "empty segment file",
            ));
        }
        let (ptr, owner) = if writable {
            // SAFETY: the file is a segment of a log whose advisory lock this
            // process holds, so no other writer of this crate changes it, and
            // its length was fixed by fallocate before mapping.
            let mut m = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file)? };
            (m.as_mut_ptr(), Owner::Mut(m))
        } else {
            // SAFETY: read-only map; the writer only appends beyond what we
            // publish as committed, and never shrinks a file while others may
            // map it (only during its own open, see DESIGN.md).
            let m = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
            (m.as_ptr() as *mut u8, Owner::Ro(m))
        };
        Ok(Map {
            ptr,
            len,
            writable,
            committed: AtomicU64::new(SEGMENT_HEADER_LEN as u64),
            write_lock: Mutex::new(()),
            _owner: owner,
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

    /// A copy of bytes anywhere in the map (headers, footers, scan windows
    /// beyond the committed offset), taken under the write lock.
    pub(crate) fn copy_out(&self, start: usize, end: usize) -> Vec<u8> {
        assert!(
            start <= end && end <= self.len,
            "copy {start}..{end} outside the map"
        );
        let _guard = self.write_lock.lock();
        let mut out = vec![0u8; end - start];
        // SAFETY: in bounds; the write lock excludes in-process writers, and
        // `out` is a fresh allocation that cannot overlap the map.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(start), out.as_mut_ptr(), end - start)
        };
        out
    }

    /// Runs `f` on a read-only view of `start..end` while holding the write
    /// lock, for scanning bytes that are not (yet) committed.
    pub(crate) fn with_view<R>(&self, start: usize, end: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            start <= end && end <= self.len,
            "view {start}..{end} outside the map"
        );
        let _guard = self.write_lock.lock();
        // SAFETY: in bounds; in-process writers are excluded by the lock, and
        // the slice does not outlive it.
        f(unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) })
    }

    /// Runs `f` on a mutable view of `start..end`, which must lie at or above
    /// `committed` or inside the segment header.
    pub(crate) fn with_mut<R>(
        &self,
        start: usize,
        end: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        assert!(self.writable, "write to a read-only map");
        assert!(
            start <= end && end <= self.len,
            "write {start}..{end} outside the map"
        );
        let committed = self.committed() as usize;
        assert!(
            start >= committed || end <= SEGMENT_HEADER_LEN,
            "write {start}..{end} into committed area ..{committed}"
        );
        let _guard = self.write_lock.lock();
        // SAFETY: in bounds and writable; readers only see bytes in
        // `[SEGMENT_HEADER_LEN, committed)`, which this range avoids; the lock
        // makes this the only live view of the range.
        f(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) })
    }

    /// Asks the kernel to fault in the pages writable ahead of use.
    pub(crate) fn prefault(&self) {
        if let Owner::Mut(m) = &self._owner {
            if m.advise(memmap2::Advice::PopulateWrite).is_err() {
                // Older kernels: fall back to read-populating; writes still
                // take a cheaper minor fault.
                let _ = m.advise(memmap2::Advice::WillNeed);
            }
        }
    }
}

/// Reserves `len` bytes of real disk space for `file`, so that writes through
/// a map can never hit a full disk.
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
