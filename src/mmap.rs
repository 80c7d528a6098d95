//! The one module with `unsafe`: read-only memory maps of segment files (or,
//! for a read-only view of a small one, its bytes read into aligned memory
//! without zeroing it first, as a small payload file is read too) and of
//! large payload files, the
//! `posix_fallocate` call that reserves their space, and the few other
//! syscalls `std` lacks (holes, writeback, bringing pages into the page
//! cache, the open-file limit).
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
//! A segment is sized in full when made. A log that syncs reserves its
//! space with `posix_fallocate`, so a full disk is an error at allocation
//! time; a sparse segment (a log that never syncs) meets it at a `pwrite`,
//! and nothing reads its holes through the map (scans stop at the first
//! one). Only the locked writer rewrites or zeroes a file, during its own
//! open. Another process that writes the file under us (not
//! this crate's writer) is outside these rules; DESIGN.md lists it in the
//! threat model.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rkyv::util::AlignedVec;

use crate::format::{RECORD_ALIGN, SEGMENT_HEADER_LEN};

/// A segment file's bytes as readers see them, with a published committed
/// offset: a whole-file, read-only memory map, or (for a read-only view of
/// a segment whose data is small, [`Map::read`]) a copy of the file's first
/// bytes, read once, so that opening it costs no map, no unmap and no page
/// faults. Either way `len` is the file's length; only `0..stored` can be
/// viewed.
pub(crate) struct Map {
    ptr: *const u8,
    len: usize,
    committed: AtomicU64,
    backing: Backing,
    /// For a mapped read-only view ([`Map::copy_on_whole_read`]): the
    /// committed records read into memory by the first read that wanted
    /// most of them (`None` inside if that read failed: the map serves).
    copy: Option<OnceLock<Option<AlignedVec<RECORD_ALIGN>>>>,
}

/// What `Map::ptr` points into, kept alive with it; its bytes are read
/// only through `ptr`.
enum Backing {
    Mapped(#[allow(dead_code)] memmap2::Mmap),
    Read(AlignedVec<RECORD_ALIGN>),
}

// SAFETY: the map is read-only; shared slices are handed out only below
// `committed` (never written again) or while no writer runs (see the module
// rules). A `Read` copy is never written after `Map::read` returns. The raw
// pointer is never handed out.
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
        // fixed when it was made (`posix_fallocate` or `ftruncate`). This
        // crate's writer never shrinks a file that another handle may map,
        // except during its own locked open, before any reader of this
        // process exists (see DESIGN.md).
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
        Ok(Map {
            ptr: map.as_ptr(),
            len,
            committed: AtomicU64::new(SEGMENT_HEADER_LEN as u64),
            backing: Backing::Mapped(map),
            copy: None,
        })
    }

    /// A map of a file `len` bytes long whose first bytes were read into
    /// memory ([`read_to`]), aligned as records are: `bytes` holds all that
    /// can be viewed. Only for a read-only view, which sees the file as it
    /// was when opened: bytes written later are not seen (a map would show
    /// them, but a read-only view never looks past what its open scanned).
    pub(crate) fn read(len: usize, bytes: AlignedVec<RECORD_ALIGN>) -> io::Result<Map> {
        let stored = bytes.len();
        if stored > len || stored < SEGMENT_HEADER_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot keep {stored} bytes of a segment file of {len}"),
            ));
        }
        Ok(Map {
            ptr: bytes.as_ptr(),
            len,
            committed: AtomicU64::new(SEGMENT_HEADER_LEN as u64),
            backing: Backing::Read(bytes),
            copy: None,
        })
    }

    /// Lets reads of this map's committed records through
    /// [`Map::committed_slice_in`] be served from a copy, read once, when
    /// the first of them that asks for most of the records comes (a whole
    /// restore): for a read-only view, whose committed records do not grow.
    pub(crate) fn copy_on_whole_read(mut self) -> Map {
        if matches!(self.backing, Backing::Mapped(_)) {
            self.copy = Some(OnceLock::new());
        }
        self
    }

    /// The file's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// How many of the file's first bytes can be viewed: all of them when
    /// mapped, those read when read.
    pub(crate) fn stored(&self) -> usize {
        match &self.backing {
            Backing::Mapped(_) => self.len,
            Backing::Read(bytes) => bytes.len(),
        }
    }

    /// Whether the bytes were read into memory rather than mapped.
    pub(crate) fn is_read(&self) -> bool {
        matches!(self.backing, Backing::Read(_))
    }

    /// The published committed offset.
    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Raises the committed offset; bytes below it become readable and frozen.
    pub(crate) fn publish(&self, end: u64) {
        assert!(end as usize <= self.stored(), "publish beyond the map");
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
        // SAFETY: the range lies inside the stored bytes (`committed` never
        // passes `stored`, see `publish`) and below `committed`, which only
        // grows; no write ever targets bytes below it.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }
    }

    /// As [`Map::committed_slice`], for a reader that can read the file:
    /// from the copy of a read-only view's records when it has one, or
    /// makes one now if this read starts in the first half of the records
    /// and they are at most `COPY_MAX` bytes. A copy costs one `pread` of
    /// bytes the reader is about to touch anyway, where the map would take
    /// a page fault every few pages (which this machine's VM makes dear). A
    /// read near the end (a tail, a fork's seq) is served by the map alone.
    ///
    /// `with_file` runs its argument on the file, only when a copy is made
    /// (once a map), so that the file is not fetched for every record.
    pub(crate) fn committed_slice_in(
        &self,
        with_file: impl FnOnce(&mut dyn FnMut(&File)),
        start: usize,
        end: usize,
    ) -> &[u8] {
        if let Some(copy) = self.copy_for(with_file, start) {
            if end <= copy.len() && SEGMENT_HEADER_LEN <= start && start <= end {
                return &copy[start..end];
            }
        }
        self.committed_slice(start, end)
    }

    fn copy_for(
        &self,
        with_file: impl FnOnce(&mut dyn FnMut(&File)),
        start: usize,
    ) -> Option<&AlignedVec<RECORD_ALIGN>> {
        let cell = self.copy.as_ref()?;
        if let Some(copy) = cell.get() {
            return copy.as_ref();
        }
        let committed = self.committed() as usize;
        let records = committed.saturating_sub(SEGMENT_HEADER_LEN);
        let skipped = start.saturating_sub(SEGMENT_HEADER_LEN);
        if committed > COPY_MAX || records == 0 || skipped * 2 > records {
            return None;
        }
        cell.get_or_init(|| {
            let mut bytes = AlignedVec::new();
            let mut read = false;
            with_file(&mut |file| read = read_to(file, &mut bytes, committed).is_ok());
            read.then_some(bytes)
        })
        .as_ref()
    }

    /// Tells the kernel that `start..end` of a mapped segment is about to be
    /// read in order (a replay), so that it reads the range in now, in large
    /// requests, rather than a page fault at a time
    /// (`madvise(MADV_WILLNEED)`). Only a hint; nothing for a copy.
    pub(crate) fn will_read(&self, start: usize, end: usize) {
        if let Backing::Mapped(map) = &self.backing {
            let end = end.min(self.len);
            if start < end {
                let _ = map.advise_range(memmap2::Advice::WillNeed, start, end - start);
            }
        }
    }

    /// Runs `f` on a view of `start..end`, which may lie beyond the committed
    /// offset. Called only while no writer of this process runs, or on
    /// committed bytes (module rules).
    pub(crate) fn with_view<R>(&self, start: usize, end: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            start <= end && end <= self.stored(),
            "view {start}..{end} outside the map (..{})",
            self.stored()
        );
        // SAFETY: in bounds of the stored bytes; by the module rules no write of
        // this process targets the range while the view lives, and the view
        // does not outlive the call.
        f(unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) })
    }
}

/// The most committed record bytes a read-only view copies into memory on a
/// whole read ([`Map::committed_slice_in`]): a segment sealed at close holds
/// 8 MiB or more, so a long log's replay copies its last segment at most,
/// and a full 64 MiB one stays mapped.
pub(crate) const COPY_MAX: usize = 8 << 20;

/// A whole file mapped read-only: a large payload, read in place rather
/// than copied into fresh memory whose pages the kernel zeroes first.
pub(crate) struct FileMap(memmap2::Mmap);

impl FileMap {
    /// Maps all `len` bytes of `file` (at least one), read-only.
    pub(crate) fn new(file: &File, len: usize) -> io::Result<FileMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty file"));
        }
        // SAFETY: a shared read-only map of a payload file, which is never
        // written once it has its name (it is written under a temporary
        // one and renamed) and never shrunk: collection removes payload
        // files whole, which leaves a map valid. Another process writing
        // or truncating it is outside the model (DESIGN.md, "Threat
        // model"). The bytes are checked (length, BLAKE3, archive) before
        // anything trusts them.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
        Ok(FileMap(map))
    }
}

impl std::ops::Deref for FileMap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Reads `file` on from `bytes.len()` to its byte `n` into `bytes` (a
/// segment's records, or a payload file whole),
/// without zeroing the room first; `bytes` is left as it was on an error.
/// The end of the file before `n` is [`io::ErrorKind::UnexpectedEof`].
pub(crate) fn read_to(
    file: &File,
    bytes: &mut AlignedVec<RECORD_ALIGN>,
    n: usize,
) -> io::Result<()> {
    let from = bytes.len();
    if n <= from {
        return Ok(());
    }
    bytes.reserve_exact(n - from);
    let mut done = from;
    while done < n {
        // SAFETY: the destination is the vector's spare capacity, which
        // holds `n` bytes from its start (`reserve_exact`), and `done < n`;
        // `pread` writes at most the count it is given.
        let got = unsafe {
            libc::pread(
                file.as_raw_fd(),
                bytes.as_mut_ptr().add(done).cast(),
                n - done,
                done as libc::off_t,
            )
        };
        match got {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            got if got < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            got => done += got as usize,
        }
    }
    // SAFETY: `pread` has written every byte of `from..n`, which lies within
    // the capacity, and the bytes below `from` were initialized before.
    unsafe { bytes.set_len(n) };
    Ok(())
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

/// Opens `rel`, a path relative to the directory `dir` is open on
/// (`openat(2)`), for reading and, with `writable`, for writing too; the
/// descriptor is close-on-exec. Only `rel`'s components are walked, not the
/// ones above `dir`.
pub(crate) fn open_at(dir: &File, rel: &std::path::Path, writable: bool) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    let access = match writable {
        true => libc::O_RDWR,
        false => libc::O_RDONLY,
    };
    // SAFETY: `name` is NUL-terminated and outlives the call, which only
    // reads it; `dir` is an open descriptor borrowed for the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), access | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by `openat`, is open, and nothing else
    // owns it: the `File` becomes its only owner and closes it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Asks the kernel to start writing back `from..to` of `file` now, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Only a hint: it makes
/// nothing durable, and its errors surface at the next `fdatasync`.
pub(crate) fn start_writeback(file: &File, from: u64, to: u64) {
    let Some((offset, len)) = offset_and_len(from, to) else {
        return;
    };
    // SAFETY: plain syscall wrapper on a valid open descriptor; no memory is passed.
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}

/// `from..to` as the offset and length the range syscalls take; `None` for
/// an empty range (to both `sync_file_range` and `posix_fadvise` a length
/// of 0 means "to the end of the file") or one past `off64_t`.
fn offset_and_len(from: u64, to: u64) -> Option<(libc::off64_t, libc::off64_t)> {
    if to <= from {
        return None;
    }
    let offset = libc::off64_t::try_from(from).ok()?;
    let len = libc::off64_t::try_from(to - from).ok()?;
    Some((offset, len))
}

/// Asks the kernel to drop `file`'s clean pages from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`): the benchmarks' cold reads.
/// Dirty pages stay; sync the file first.
#[cfg(feature = "whitebox")]
pub(crate) fn drop_cached(file: &File) -> io::Result<()> {
    // SAFETY: plain syscall wrapper on a valid open descriptor; no memory is passed.
    match unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Asks the kernel to bring `from..to` of `file` into the page cache now
/// (`posix_fadvise(POSIX_FADV_WILLNEED)`): a hole comes in as zeroed pages,
/// so that a later write there finds its pages and only copies. Only a
/// hint: it changes no byte of the file, and an error is ignored.
pub(crate) fn populate(file: &File, from: u64, to: u64) {
    let Some((offset, len)) = offset_and_len(from, to) else {
        return;
    };
    // SAFETY: plain syscall wrapper on a valid open descriptor; no memory is passed.
    let _ =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

/// How many pages of `from..to` (page-aligned `from`) of `file` are in the
/// page cache (`mincore` over a map of that range). For tests.
#[cfg(test)]
pub(crate) fn resident_pages(file: &File, from: u64, to: u64) -> usize {
    const PAGE: u64 = 4096;
    assert_eq!(from % PAGE, 0, "from is page-aligned");
    let len = to.saturating_sub(from) as usize;
    if len == 0 {
        return 0;
    }
    // A raw map: no slice of the file's bytes is ever made, only its
    // address handed to `mincore`.
    let map = memmap2::MmapOptions::new()
        .offset(from)
        .len(len)
        .map_raw_read_only(file)
        .unwrap();
    let mut vec = vec![0u8; len.div_ceil(PAGE as usize)];
    // SAFETY: `map` covers `len` bytes from its page-aligned address, and
    // `vec` has one byte for each of its pages, as `mincore` writes.
    let rc = unsafe { libc::mincore(map.as_mut_ptr().cast(), len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_file_map_shows_the_whole_file_and_refuses_an_empty_one() {
        let mut file = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        file.write_all(&bytes).unwrap();
        let map = FileMap::new(&file, bytes.len()).unwrap();
        assert_eq!(&map[..], &bytes[..]);
        assert_eq!(map.as_ptr() as usize % 16, 0, "aligned as an archive needs");
        let empty = tempfile::tempfile().unwrap();
        assert!(FileMap::new(&empty, 0).is_err());
    }

    #[test]
    fn read_to_reads_on_from_the_length_held_and_refuses_a_short_file() {
        let mut file = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        file.write_all(&bytes).unwrap();

        let mut buf = AlignedVec::<RECORD_ALIGN>::new();
        read_to(&file, &mut buf, 0).unwrap();
        assert!(buf.is_empty());
        read_to(&file, &mut buf, 4_000).unwrap();
        assert_eq!(&buf[..], &bytes[..4_000]);
        // On from what the vector holds, to `n`; a smaller `n` reads nothing.
        read_to(&file, &mut buf, 10_000).unwrap();
        assert_eq!(&buf[..], &bytes[..]);
        read_to(&file, &mut buf, 5).unwrap();
        assert_eq!(buf.len(), 10_000);

        // A file shorter than `n`: an error, and the vector as it was.
        let mut short = AlignedVec::<RECORD_ALIGN>::new();
        read_to(&file, &mut short, 100).unwrap();
        let e = read_to(&file, &mut short, 10_001).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(&short[..], &bytes[..100]);
    }
}
