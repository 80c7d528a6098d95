//! Page cache ahead of the write head: a background thread brings the next
//! pages of active segments into the page cache, so that a save's `pwrite`
//! finds its pages and only copies into them.
//!
//! A write into a page the file does not have yet first allocates one and
//! zeroes what the write does not cover; on a virtual machine whose freed
//! memory goes back to the host, the first touch of that page costs a fault
//! in the host too. `perf` of workload A (200 sessions saving 9 KB turns)
//! put about half of a save in that `pwrite`, and a write into pages
//! brought in beforehand took half as long. One thread for the process does
//! the bringing in (`posix_fadvise(WILLNEED)`: a segment's holes come in as
//! zeroed pages), off the saving thread.
//!
//! Only a hint: a request that finds the queue full, or the file parked or
//! closed by then, is dropped, and the write allocates its pages itself.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{OnceLock, Weak};

use crate::fs::HookedFile;
use crate::mmap;

/// Requests waiting at most: past it, a request is dropped.
const QUEUE: usize = 1024;

/// One range of one file to bring in.
struct Job {
    file: Weak<HookedFile>,
    from: u64,
    to: u64,
}

/// The worker's queue, started at the first request (`None`: no thread
/// could be started; then nothing is brought in).
fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE_TX: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE_TX
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Job>(QUEUE);
            std::thread::Builder::new()
                .name("session-store-ahead".into())
                .spawn(move || {
                    for job in rx {
                        if let Some(file) = job.file.upgrade() {
                            mmap::populate(file.file(), job.from, job.to);
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Asks the worker to bring `from..to` of `file` into the page cache.
pub(crate) fn request(file: Weak<HookedFile>, from: u64, to: u64) {
    if from >= to {
        return;
    }
    if let Some(tx) = queue() {
        // A full queue drops the request: the write allocates its pages.
        let _ = tx.try_send(Job { file, from, to });
    }
}

/// How far ahead of `end` to bring pages in, for a segment whose records
/// start at `start`: as far again as the segment holds, from 64 KiB to
/// 256 KiB, and nothing while it holds less than 32 KiB (a small session's
/// segment is never given pages it will not write).
pub(crate) fn window(start: u64, end: u64) -> u64 {
    const MIN: u64 = 64 << 10;
    const MAX: u64 = 256 << 10;
    let held = end.saturating_sub(start);
    if held < 32 << 10 {
        0
    } else {
        held.clamp(MIN, MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::format::FIRST_RECORD_OFFSET;
    use crate::{schema::LoggedItem, Durability, Item, Log, LogEntry, LogOptions};

    #[test]
    fn the_window_is_nothing_for_a_small_segment_then_as_far_again_as_it_holds() {
        assert_eq!(window(4096, 4096), 0);
        assert_eq!(window(4096, 4096 + (32 << 10) - 1), 0);
        assert_eq!(window(4096, 4096 + (32 << 10)), 64 << 10);
        assert_eq!(window(4096, 4096 + (100 << 10)), 100 << 10);
        assert_eq!(window(4096, 4096 + (10 << 20)), 256 << 10);
    }

    /// Pages of `file` in the `len` bytes past `end` (from the next page
    /// on) that are in the page cache, once `want` are or `wait` has passed.
    fn resident_past(
        file: &std::fs::File,
        end: u64,
        len: u64,
        want: usize,
        wait: Duration,
    ) -> usize {
        let from = end.div_ceil(4096) * 4096;
        let started = Instant::now();
        loop {
            let n = mmap::resident_pages(file, from, from + len);
            if n >= want || started.elapsed() > wait {
                return n;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn entry(i: u64) -> LogEntry {
        let item = LoggedItem::from(&Item::user_text(format!("{i} {}", "x".repeat(4000))));
        LogEntry::UserInput { ts: i, item }
    }

    /// Appends 80 KiB of records to a fresh log; returns the log and its
    /// (only) segment's data end.
    fn written(dir: &std::path::Path, populate_ahead: bool) -> (Log, u64) {
        let opts = LogOptions {
            populate_ahead,
            ..LogOptions::default().durability(Durability::Buffered)
        };
        let log = Log::open(dir, opts).unwrap();
        for i in 0..20 {
            log.append(&entry(i)).unwrap();
        }
        assert_eq!(log.segment_paths().len(), 1);
        let end = FIRST_RECORD_OFFSET + log.bytes();
        (log, end)
    }

    /// A log's appends past 32 KiB have the worker bring the pages after
    /// the end into the page cache, holes of a sparse segment as they are;
    /// with `populate_ahead` off, no page past the end comes in. Skipped
    /// where the filesystem keeps files in memory (tmpfs, ramfs).
    #[test]
    fn appends_bring_the_next_pages_in_only_when_asked() {
        let Some(dir) = disk_tempdir() else { return };
        for populate_ahead in [true, false] {
            let sub = dir.path().join(format!("{populate_ahead}"));
            let (log, end) = written(&sub, populate_ahead);
            let file = std::fs::File::open(&log.segment_paths()[0]).unwrap();
            let len = std::fs::metadata(&log.segment_paths()[0]).unwrap().len();
            assert!(
                len > end + (128 << 10),
                "a sparse segment with room past its records"
            );
            let wait = match populate_ahead {
                true => Duration::from_secs(10),
                false => Duration::from_millis(300),
            };
            // At least half a window (32 KiB) past the end is asked for
            // after every append: the 7 whole pages after the end's page.
            let n = resident_past(&file, end, 28 << 10, 7, wait);
            match populate_ahead {
                true => assert_eq!(n, 7, "pages of the 28 KiB past the end brought in"),
                false => assert_eq!(n, 0, "pages past the end brought in while off"),
            }
            // The bytes are the file's as they were: holes read as zeros.
            use std::os::unix::fs::FileExt;
            let mut past = vec![1u8; 64 << 10];
            file.read_exact_at(&mut past, end.div_ceil(4096) * 4096)
                .unwrap();
            assert!(past.iter().all(|&b| b == 0));
            log.close().unwrap();
        }
    }

    /// After a roll the next segment is asked for afresh, from its own
    /// start: what was asked of the sealed one does not carry over.
    #[test]
    fn a_roll_starts_asking_afresh_in_the_next_segment() {
        let Some(dir) = disk_tempdir() else { return };
        let opts = LogOptions::default()
            .durability(Durability::Buffered)
            .segment_size(192 << 10);
        let log = Log::open(dir.path(), opts).unwrap();
        let mut i = 0;
        let before_roll = loop {
            let before = log.bytes();
            log.append(&entry(i)).unwrap();
            i += 1;
            if log.segment_paths().len() == 2 {
                break before;
            }
        };
        for _ in 0..10 {
            log.append(&entry(i)).unwrap();
            i += 1;
        }
        let paths = log.segment_paths();
        assert_eq!(paths.len(), 2, "40 KiB more stay in the second segment");
        let end = FIRST_RECORD_OFFSET + log.bytes() - before_roll;
        let file = std::fs::File::open(&paths[1]).unwrap();
        let n = resident_past(&file, end, 28 << 10, 7, Duration::from_secs(10));
        assert_eq!(n, 7, "pages of the 28 KiB past the second segment's end");
        log.close().unwrap();
    }

    /// A temporary directory on a filesystem whose files have pages to
    /// bring in, or `None` (and a line saying the test was skipped).
    /// A read-only open of a log of several segments asks for the sealed
    /// ones' bytes at once (`segment::prefetch`): pages of their records
    /// that neither the open (the header, the footer) nor any read touched
    /// come into the page cache. Skipped where dropped pages stay.
    #[cfg(feature = "whitebox")]
    #[test]
    fn a_read_only_open_of_several_segments_asks_for_the_sealed_ones_at_once() {
        let Some(dir) = disk_tempdir() else { return };
        let opts = LogOptions {
            prepare_ahead: false,
            populate_ahead: false,
            ..LogOptions::default()
                .durability(Durability::Buffered)
                .segment_size(256 << 10)
        };
        let log = Log::open(dir.path(), opts).unwrap();
        let mut i = 0;
        while log.segment_paths().len() < 3 {
            log.append(&entry(i)).unwrap();
            i += 1;
        }
        let paths = log.segment_paths();
        log.close().unwrap();
        let files: Vec<std::fs::File> = paths
            .iter()
            .map(|p| std::fs::File::open(p).unwrap())
            .collect();
        let middle = |f: &std::fs::File| mmap::resident_pages(f, 64 << 10, 192 << 10);
        for f in &files {
            f.sync_all().unwrap();
            mmap::drop_cached(f).unwrap();
        }
        if files[..2].iter().any(|f| middle(f) != 0) {
            eprintln!("skipped: dropped pages stay in the page cache here");
            return;
        }
        let view = Log::open_read_only(dir.path()).unwrap();
        for f in &files[..2] {
            let started = Instant::now();
            while middle(f) < 32 && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(
                middle(f),
                32,
                "a sealed segment's records asked for at the open"
            );
        }
        drop(view);
    }

    fn disk_tempdir() -> Option<tempfile::TempDir> {
        let dir = tempfile::tempdir().unwrap();
        if in_memory(dir.path()) {
            eprintln!("skipped: the temporary directory is in memory");
            return None;
        }
        Some(dir)
    }

    /// Whether `path` is on a filesystem that keeps files in memory, where
    /// every page is in the page cache already and the hint does nothing.
    fn in_memory(path: &std::path::Path) -> bool {
        std::fs::read_to_string("/proc/self/mounts").is_ok_and(|mounts| {
            // The longest mount point that holds `path` decides.
            let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
            mounts
                .lines()
                .filter_map(|l| {
                    let mut f = l.split(' ');
                    let (point, kind) = (f.nth(1)?, f.next()?);
                    path.starts_with(point)
                        .then_some((point.len(), kind == "tmpfs"))
                })
                .max()
                .is_some_and(|(_, in_memory)| in_memory)
        })
    }
}
