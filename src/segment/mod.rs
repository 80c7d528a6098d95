//! One segment file: create (sized in full), map, append (pwrite), seal, scan.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use parking_lot::{Mutex, RwLock};
use rkyv::util::AlignedVec;

use crate::chain::EntryHash;
use crate::error::{CorruptKind, Error, Result};
use crate::format::{
    self, Footer, IndexEntry, Mark, Point, SegmentHeader, FIRST_RECORD_OFFSET, FOOTER_LEN,
    INDEX_ENTRY_LEN, MARK_SLOT_0, MARK_SLOT_LEN, SEGMENT_HEADER_LEN,
};
use crate::fs::{io_err, sync_dir, Hook, HookedFile, ParkableFile};
use crate::mmap::{self, Map};

pub(crate) mod ahead;
mod scan;
#[cfg(feature = "whitebox")]
pub use scan::links_hashed_by_opens;
pub(crate) use scan::{scan_bytes, RecordCheck, Scan, ScanMode};

/// Records are indexed at least this often (bytes) in the sparse index.
pub(crate) const INDEX_STRIDE_BYTES: u64 = 64 << 10;

/// One mapped segment file.
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    /// Closed while the session is parked (`Segment::park`); the map stays.
    file: ParkableFile,
    pub(crate) map: Map,
    pub(crate) header: SegmentHeader,
    /// Set once sealed.
    pub(crate) footer: Mutex<Option<Footer>>,
    /// Sparse seq → offset index.
    pub(crate) index: RwLock<Vec<IndexEntry>>,
    /// A sealed segment's footer whose index is not read yet: a read-only
    /// open leaves it to [`Segment::ensure_index`], so that opening a log
    /// costs the same whatever its number of sealed segments.
    index_pending: Mutex<Option<Footer>>,
    /// Generation of the last mark written, and the durable state it named.
    pub(crate) mark: Mutex<Option<Mark>>,
    /// What the last completed `fdatasync` covered.
    pub(crate) synced: Mutex<Option<Point>>,
}

/// The file name of the segment whose first record is `first_seq`.
pub(crate) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.seg")
}

/// Parses a segment file name back to its first seq.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

/// Writes zeros over all of a freshly allocated file and makes them durable.
///
/// `posix_fallocate` leaves the blocks *unwritten* (ext4, XFS), so every
/// later `fdatasync` that covers records in them must also commit the
/// metadata that marks them written: a journal commit per group commit.
/// Over blocks already written, an `fdatasync` is a data write and a cache
/// flush, several times faster (DESIGN.md, "Durability and fsync points"). The
/// zeros go out when the file is prepared, which for every segment but a
/// log's first happens on a background thread ahead of the roll. Only logs
/// that sync pay for them: they double what a buffered writer sends to disk.
fn zero_fill(file: &File, len: u64) -> io::Result<()> {
    write_zeros(file, len)?;
    file.sync_data()
}

/// Writes zeros over all of a freshly allocated file, in the page cache.
fn write_zeros(file: &File, len: u64) -> io::Result<()> {
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// How a new segment file gets its disk space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// Sized with `ftruncate`: blocks are allocated as records are written,
    /// so a log that never syncs (`Buffered`) takes on disk only what it
    /// holds, and its segments can be large from the start (no rolls for a
    /// small session). A full disk is an error at the write.
    Sparse,
    /// Reserved with `posix_fallocate`, then zero-filled and synced (see
    /// [`zero_fill`]): for a log that syncs, whose `fdatasync`s then write
    /// over initialized blocks.
    Zeroed,
}

/// A freshly allocated file waiting to become the next segment.
pub(crate) struct Prepared {
    file: HookedFile,
    map: Map,
}

impl Prepared {
    /// Creates `path` (0600) of `len` bytes, gives it its disk space as
    /// `space` says, and maps it.
    pub(crate) fn create(path: PathBuf, len: u64, space: Space, hook: &Hook) -> Result<Prepared> {
        Prepared::make(path, len, space, true, hook)
    }

    /// As [`Prepared::create`], but the zeros of a `Zeroed` file are left
    /// in the page cache: for the first segment of a log that
    /// [`Prepared::activate_in_place`] makes, whose first sync covers them
    /// together with the header and the first records.
    pub(crate) fn create_unsynced(
        path: PathBuf,
        len: u64,
        space: Space,
        hook: &Hook,
    ) -> Result<Prepared> {
        Prepared::make(path, len, space, false, hook)
    }

    fn make(path: PathBuf, len: u64, space: Space, sync: bool, hook: &Hook) -> Result<Prepared> {
        let zero = space == Space::Zeroed;
        let file = HookedFile::allocate(&path, len, zero, hook)?;
        let result = match (zero, sync) {
            (true, true) => zero_fill(file.file(), len),
            (true, false) => write_zeros(file.file(), len),
            (false, _) => Ok(()),
        }
        .map_err(io_err("fallocate", &path))
        .and_then(|()| Map::new(file.file(), len as usize).map_err(io_err("mmap", &path)));
        match result {
            Ok(map) => Ok(Prepared { file, map }),
            Err(e) => {
                let _ = fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Allocated length.
    pub(crate) fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Writes the header and gives the file its final name.
    ///
    /// With `sync_header`, the header is synced before the rename; with
    /// `sync_name`, the directory after it. A roll out of a segment with
    /// records leaves both to `Settle`, off the append lock and the saving
    /// thread: until the settle has synced the successor (its header and
    /// first mark together), nothing in it is vouched for, and recovery
    /// takes a last segment whose header does not read for a roll that
    /// never settled (see `last_roll`). A roll out of an empty segment,
    /// whose rename replaces the log's only segment, syncs the header.
    pub(crate) fn activate(
        self,
        dir: &Path,
        header: SegmentHeader,
        (sync_header, sync_name): (bool, bool),
        hook: &Hook,
    ) -> Result<Segment> {
        let Prepared { file, map } = self;
        file.write_at(0, &header.encode())?;
        if sync_header {
            file.sync()?;
        }
        let final_path = dir.join(segment_name(header.first_seq));
        crate::fs::rename(file.path(), &final_path, hook)?;
        if sync_name {
            sync_dir(dir, hook)?;
        }
        let file = ParkableFile::new(file.renamed(&final_path), true);
        Ok(Segment::new(final_path, file, map, header, None))
    }

    /// Writes the header and makes the file a segment under the name it
    /// was created with, syncing nothing: for the first segment of a log
    /// being created (`Log::create_unsynced`), which nothing reads as a log
    /// until its creation is durable, so neither the header nor the name
    /// needs its own sync. The log's first sync covers both.
    pub(crate) fn activate_in_place(self, header: SegmentHeader) -> Result<Segment> {
        let Prepared { file, map } = self;
        file.write_at(0, &header.encode())?;
        let path = file.path().to_path_buf();
        Ok(Segment::new(
            path,
            ParkableFile::new(file, true),
            map,
            header,
            None,
        ))
    }

    /// Removes the file (an unused preparation).
    pub(crate) fn discard(self) {
        let _ = fs::remove_file(self.file.path());
    }
}

/// The data of a read-only view's segment is read into memory, rather
/// than mapped, when it ends (at the first hole of a sparse file) within
/// this many bytes: a small session's restore then costs one `pread`
/// instead of a map, page faults and an unmap. Larger data, and files
/// with no hole (zero-filled, sealed full), are mapped, since the open
/// does not know how much of it its reader will touch: a tail read of a
/// large segment maps a few pages where a read would copy all of it. At
/// this size the copy costs about what a map and unmap of the file do
/// here, so a tail read pays little more than it did.
pub(crate) const READ_WHOLE_MAX: u64 = 128 << 10;

/// How many bytes a read-only open reads first, before it asks where the
/// data ends: the header, and all of a small session's records.
const FIRST_READ: u64 = 16 << 10;

/// How many of a segment file's first bytes a read-only open reads into
/// memory (`Map::read`), or `None` to map it.
fn read_whole_up_to(file: &HookedFile, len: u64) -> Option<u64> {
    mmap::hole_at_or_after(file.file(), 0)
        .filter(|&hole| hole < len && (SEGMENT_HEADER_LEN as u64..=READ_WHOLE_MAX).contains(&hole))
}

/// A read-only open's map of `file` and the header bytes it read.
///
/// The header, and with it the durable mark, is read before the question
/// of where the data ends (the first hole), never after: a mark then names
/// only bytes that were written before that answer, though a writer may
/// append and sync meanwhile. (Asked first, the answer could fall short of
/// a mark written between the two, and the scan, stopping at the hole
/// below the mark, reported damage on a healthy log.) The first
/// [`FIRST_READ`] bytes are read with the header, so a small session costs
/// one `pread` and one `lseek`.
fn read_view(file: &HookedFile, len: u64) -> std::io::Result<(Map, Vec<u8>)> {
    let mut bytes = AlignedVec::new();
    mmap::read_to(file.file(), &mut bytes, len.min(FIRST_READ) as usize)?;
    let header = bytes[..SEGMENT_HEADER_LEN].to_vec();
    let map = match read_whole_up_to(file, len) {
        Some(stored) => {
            // Bytes past the hole were read as zeros: not the file's data.
            bytes.resize((stored as usize).min(bytes.len()), 0);
            mmap::read_to(file.file(), &mut bytes, stored as usize)?;
            Map::read(len as usize, bytes)?
        }
        None => Map::new(file.file(), len as usize)?.copy_on_whole_read(),
    };
    Ok((map, header))
}

/// Asks the kernel for the bytes a read-only open of a log reads first,
/// for all its segments at once (`posix_fadvise(WILLNEED)`): each sealed
/// segment's first [`mmap::COPY_MAX`] bytes and its last page, where its
/// footer is (when the first request does not cover it); the last
/// segment's bytes up to its first hole (where what was written of it
/// ends), at most [`mmap::COPY_MAX`], or its [`FIRST_READ`] bytes when it
/// has no hole (a zero-filled segment). From a cold page cache the
/// reads of one segment's header, footer and records then overlap the
/// next one's, and the records' the header's, rather than waiting for each
/// in turn. Only a hint: a file that does not open is left to the open
/// that follows, which reports it.
pub(crate) fn prefetch(paths: &[(u64, PathBuf)]) {
    let Some((_, sealed)) = paths.split_last() else {
        return;
    };
    for (i, (_, path)) in paths.iter().enumerate() {
        let Ok(file) = fs::File::open(path) else {
            continue;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            continue;
        };
        if i == sealed.len() {
            let end = mmap::hole_at_or_after(&file, 0)
                .filter(|&hole| hole < len)
                .map_or(FIRST_READ, |hole| hole.min(mmap::COPY_MAX as u64));
            mmap::populate(&file, 0, end);
            continue;
        }
        mmap::populate(&file, 0, len.min(mmap::COPY_MAX as u64));
        if len > mmap::COPY_MAX as u64 {
            mmap::populate(&file, len - 4096, len);
        }
    }
}

impl Segment {
    /// Opens and maps an existing segment, checking its header.
    pub(crate) fn open(path: &Path, writable: bool, hook: &Hook) -> Result<Segment> {
        let file = HookedFile::open(path, writable, hook)?;
        let len = file.file().metadata().map_err(io_err("stat", path))?.len();
        let corrupt = |offset: u64, kind| Error::Corrupt {
            segment: path.to_path_buf(),
            offset,
            seq: None,
            kind,
        };
        if len < (SEGMENT_HEADER_LEN + FOOTER_LEN) as u64 || len > isize::MAX as u64 {
            return Err(corrupt(len, CorruptKind::Truncated));
        }
        let (map, header_bytes) = match writable {
            true => (
                Map::new(file.file(), len as usize).map_err(io_err("mmap", path))?,
                file.read_exact_at(0, SEGMENT_HEADER_LEN)?,
            ),
            false => read_view(&file, len).map_err(io_err("read", path))?,
        };
        let header = SegmentHeader::decode(&header_bytes).map_err(|(o, k)| corrupt(o, k))?;
        if header.segment_len > len {
            // Segments are sized in full when made, so a shorter file lost its end.
            return Err(corrupt(len, CorruptKind::Truncated));
        }
        if header.segment_len != len {
            return Err(corrupt(
                0,
                CorruptKind::Footer(format!(
                    "header says {} bytes, file has {len}",
                    header.segment_len
                )),
            ));
        }
        // Continue the generations on disk: restarting at 1 would let an
        // older mark in the other slot outrank the next one written.
        let mark = Mark::newest(&header_bytes);
        let file = ParkableFile::new(file, writable);
        Ok(Segment::new(path.to_path_buf(), file, map, header, mark))
    }

    /// A segment with no footer, index or sync yet, whose last mark written
    /// is `mark`.
    fn new(
        path: PathBuf,
        file: ParkableFile,
        map: Map,
        header: SegmentHeader,
        mark: Option<Mark>,
    ) -> Segment {
        Segment {
            path,
            file,
            map,
            header,
            footer: Mutex::new(None),
            index: RwLock::new(Vec::new()),
            index_pending: Mutex::new(None),
            mark: Mutex::new(mark),
            synced: Mutex::new(None),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Committed record bytes `start..end`, for a reader: a read-only view
    /// serves a read of most of its records from a copy (see
    /// `Map::committed_slice_in`).
    pub(crate) fn records(&self, start: usize, end: usize) -> &[u8] {
        // Only a read view, which is never parked, reads through the file.
        let with_file = |read: &mut dyn FnMut(&File)| {
            self.file.if_open(read);
        };
        self.map.committed_slice_in(with_file, start, end)
    }

    /// The file, for the store to park and unpark (the map stays): see
    /// `Log::park`.
    pub(crate) fn parkable(&self) -> &ParkableFile {
        &self.file
    }

    pub(crate) fn corrupt(&self, offset: u64, seq: Option<u64>, kind: CorruptKind) -> Error {
        Error::Corrupt {
            segment: self.path.clone(),
            offset,
            seq,
            kind,
        }
    }

    /// The newest valid durable mark in the header.
    pub(crate) fn read_mark(&self) -> Option<Mark> {
        // A read failure here is one of the header's, which open just read.
        self.file
            .with(|f| f.read_exact_at(0, SEGMENT_HEADER_LEN))
            .ok()
            .and_then(|b| Mark::newest(&b))
    }

    /// Reads and checks the footer: `Ok(None)` when the segment is not sealed.
    /// With `load_index`, also reads and checks its index now; otherwise
    /// that waits for [`Segment::ensure_index`].
    pub(crate) fn read_footer(&self, load_index: bool) -> Result<Option<Footer>> {
        let at = self.len() as usize - FOOTER_LEN;
        let bytes = self.file.with(|f| f.read_exact_at(at as u64, FOOTER_LEN))?;
        let footer = match Footer::decode(&bytes).map_err(|k| self.corrupt(at as u64, None, k))? {
            None => return Ok(None),
            Some(f) => f,
        };
        let bad = |why: String| Err(self.corrupt(at as u64, None, CorruptKind::Footer(why)));
        let index_end = footer
            .index_count
            .checked_mul(INDEX_ENTRY_LEN as u64)
            .and_then(|n| n.checked_add(footer.index_offset));
        match index_end {
            Some(end)
                if footer.data_end >= FIRST_RECORD_OFFSET
                    && footer.index_offset >= footer.data_end
                    && end <= at as u64 => {}
            _ => return bad("index or data bounds outside the file".into()),
        }
        if footer.first_seq != self.header.first_seq {
            return bad(format!(
                "first seq {} disagrees with header {}",
                footer.first_seq, self.header.first_seq
            ));
        }
        if footer.data_end > self.map.stored() as u64 {
            // Only a read view can have fewer: it read up to the first hole.
            return bad(format!(
                "data end {} past the data the file holds (a hole at {})",
                footer.data_end,
                self.map.stored()
            ));
        }
        if load_index {
            self.load_index(&footer)?;
        } else {
            *self.index_pending.lock() = Some(footer);
        }
        Ok(Some(footer))
    }

    /// Reads the index of a sealed segment whose read was deferred, if it was.
    pub(crate) fn ensure_index(&self) -> Result<()> {
        let mut pending = self.index_pending.lock();
        if let Some(footer) = *pending {
            self.load_index(&footer)?;
            *pending = None;
        }
        Ok(())
    }

    /// Reads and checks the index that `footer` (already checked) describes.
    fn load_index(&self, footer: &Footer) -> Result<()> {
        let len = (footer.index_count * INDEX_ENTRY_LEN as u64) as usize;
        let ib = self
            .file
            .with(|f| f.read_exact_at(footer.index_offset, len))?;
        let index = format::decode_index(&ib, footer.index_crc)
            .map_err(|k| self.corrupt(footer.index_offset, None, k))?;
        if index
            .iter()
            .any(|e| e.offset < FIRST_RECORD_OFFSET || e.offset >= footer.data_end)
        {
            let at = self.len() - FOOTER_LEN as u64;
            let why = "index entry outside the data".to_string();
            return Err(self.corrupt(at, None, CorruptKind::Footer(why)));
        }
        *self.index.write() = index;
        Ok(())
    }

    /// Scans records from `from` (with `next_seq` and `hash` before it) up to
    /// `limit`, stopping at the first record that fails a check. `limit` is
    /// one that [`Segment::data_limit`] gave: reads stop before a hole.
    pub(crate) fn scan(
        &self,
        from: u64,
        limit: u64,
        next_seq: u64,
        hash: EntryHash,
        mode: ScanMode<'_>,
    ) -> Scan {
        self.map.with_view(0, limit as usize, |bytes| {
            scan_bytes(bytes, from, next_seq, hash, mode)
        })
    }

    /// How far past `from` (up to `limit`) reads through the map may go.
    /// Records are contiguous from the header on, so a hole after them (a
    /// sparse segment's unwritten rest) ends them: reads stop there rather
    /// than fault in pages that read as zeros anyway (see
    /// `mmap::hole_at_or_after`).
    pub(crate) fn data_limit(&self, from: u64, limit: u64) -> u64 {
        if self.map.is_read() {
            // What was read ends at the hole the open found.
            return (self.map.stored() as u64).clamp(from, limit);
        }
        // A parked file that cannot be opened again tells no hole: reads
        // then go to `limit`, the pages past the data reading as zeros.
        let hole = self
            .file
            .with(|f| Ok(mmap::hole_at_or_after(f.file(), from)));
        hole.ok()
            .flatten()
            .map_or(limit, |hole| hole.clamp(from, limit))
    }

    /// Writes bytes at `offset` (header area, or at or above committed).
    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset + data.len() as u64;
        assert!(
            end <= FIRST_RECORD_OFFSET || offset >= self.map.committed(),
            "write {offset}..{end} into the committed area"
        );
        assert!(
            end <= self.len(),
            "write {offset}..{end} beyond the segment"
        );
        self.file.with(|f| f.write_at(offset, data))
    }

    /// Starts writeback of `from..to` without waiting for it (a hint; errors
    /// surface at the next `fdatasync`).
    pub(crate) fn start_writeback(&self, from: u64, to: u64) {
        let _ = self.file.with(|f| {
            mmap::start_writeback(f.file(), from, to);
            Ok(())
        });
    }

    /// Asks for `from..to` to be brought into the page cache by the
    /// background worker (see [`ahead`]); nothing while the file is parked.
    pub(crate) fn populate_ahead(&self, from: u64, to: u64) {
        if let Some(file) = self.file.weak_if_open() {
            ahead::request(file, from, to.min(self.len()));
        }
    }

    /// `fdatasync`: makes every write to this file durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.with(HookedFile::sync)
    }

    /// Writes the next durable mark (alternating slots), in this segment's
    /// format version. Not synced here.
    pub(crate) fn write_mark(&self, at: Point) -> Result<()> {
        let mut last = self.mark.lock();
        let generation = last.map_or(1, |m| m.generation + 1);
        let mark = Mark::at(generation, at);
        let bytes = mark.encode(self.header.version);
        self.write_at(Mark::slot_offset(generation) as u64, &bytes)?;
        *last = Some(mark);
        Ok(())
    }

    /// Zeroes `from..to` if any byte there is not zero, so that stale bytes
    /// can never validate later. Returns whether anything was written.
    pub(crate) fn zero_range(&self, from: u64, to: u64) -> Result<bool> {
        // Only the parts that hold data are read, and only the chunks that
        // are not all zeros are written: the holes of a sparse segment read
        // as zeros, and writing them would allocate the whole file.
        const CHUNK: u64 = 64 << 10;
        let mut dirty: Vec<(u64, u64)> = Vec::new();
        let ranges = self
            .file
            .with(|f| Ok(mmap::data_ranges(f.file(), from, to)))?;
        for (start, end) in ranges {
            let mut at = start;
            while at < end {
                let n = (end - at).min(CHUNK - at % CHUNK);
                let nonzero = self.map.with_view(at as usize, (at + n) as usize, |b| {
                    b.iter().any(|&x| x != 0)
                });
                if nonzero {
                    match dirty.last_mut() {
                        Some(last) if last.1 == at => last.1 = at + n,
                        _ => dirty.push((at, at + n)),
                    }
                }
                at += n;
            }
        }
        if !dirty.is_empty() {
            // A mark must never name records that are gone, even after a
            // crash in the middle of this: below one, clear both slots
            // durably first (the caller writes the new mark).
            if self.read_mark().is_some_and(|m| m.end > from) {
                self.write_at(MARK_SLOT_0 as u64, &[0u8; 2 * MARK_SLOT_LEN])?;
                self.sync()?;
            }
            // Write in bounded chunks so a hook sees reasonably sized writes.
            let zeros = vec![0u8; 1 << 20];
            for (start, end) in dirty {
                let mut at = start;
                while at < end {
                    let n = (end - at).min(zeros.len() as u64);
                    self.write_at(at, &zeros[..n as usize])?;
                    at += n;
                }
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Writes the index and footer; the caller syncs.
    pub(crate) fn seal(&self, footer_in: Footer) -> Result<Footer> {
        let index = self.index.read().clone();
        let bytes = format::encode_index(&index);
        let footer = Footer {
            index_offset: footer_in.data_end,
            index_count: index.len() as u64,
            index_crc: format::index_crc(&bytes),
            ..footer_in
        };
        let footer_at = self.len() - FOOTER_LEN as u64;
        assert!(
            footer.index_offset + bytes.len() as u64 <= footer_at,
            "no room reserved for the index"
        );
        self.write_at(footer.index_offset, &bytes)?;
        self.write_at(footer_at, &footer.encode())?;
        Ok(footer)
    }

    /// Room left for records, keeping space for the index (one more entry) and footer.
    pub(crate) fn fits(&self, end: u64, record_len: u64) -> bool {
        let index_len = (self.index.read().len() as u64 + 1) * INDEX_ENTRY_LEN as u64;
        end + record_len + index_len + FOOTER_LEN as u64 <= self.len()
    }
}
