//! Reading a transcript file line by line, the part every reader shares:
//! plain or zstd-compressed JSON Lines, hashed as they are read, with lines
//! that do not parse counted rather than fatal.
//!
//! Lines are streamed (a rollout can be gigabytes), split on `\n` only. A
//! line that is not UTF-8 has its bad bytes replaced (U+FFFD) rather than
//! being dropped, and a byte-order mark at the start of any line is removed
//! (files glued together can carry one anywhere). A line of any length is
//! read whole.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::ops::ControlFlow;
use std::path::Path;

use super::ReadStats;
use crate::error::Error;

/// How many malformed line numbers [`ReadStats::first_malformed`] keeps.
const MALFORMED_KEPT: usize = 20;

/// What a reader's callback made of one line.
pub(crate) enum Line {
    /// A JSON object the reader understood (or chose to skip knowingly).
    Read,
    /// Not a JSON object, or not one of the shape the reader needs.
    Malformed,
}

/// What a scan saw besides what the callback kept.
pub(crate) struct Scan {
    /// BLAKE3 of every byte read (decompressed), hex: the content's identity.
    pub(crate) content_hash: String,
    /// The I/O error that ended the scan early, with the line it happened
    /// in; the hash covers what was read before it.
    pub(crate) error: Option<(usize, io::Error)>,
}

/// Scans `reader` line by line, feeding each non-blank line's text (with its
/// 1-based number) to `f` and counting in `stats` the lines `f` calls
/// malformed. `f` may stop the scan early; the hash then covers only what
/// was read.
pub(crate) fn scan<R: BufRead>(
    mut reader: R,
    stats: &mut ReadStats,
    mut f: impl FnMut(usize, &str) -> ControlFlow<(), Line>,
) -> Scan {
    let mut hasher = blake3::Hasher::new();
    let mut buf = Vec::new();
    let mut number = 0;
    let mut error = None;
    loop {
        buf.clear();
        number += 1;
        // `read_until` retries interruptions itself.
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                error = Some((number, e));
                break;
            }
        }
        hasher.update(&buf);
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        stats.lines += 1;
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_start_matches('\u{FEFF}').trim_end();
        match f(number, text) {
            ControlFlow::Continue(Line::Read) => {}
            ControlFlow::Continue(Line::Malformed) => stats.malformed(number),
            ControlFlow::Break(()) => break,
        }
    }
    Scan {
        content_hash: hasher.finalize().to_hex().to_string(),
        error,
    }
}

impl ReadStats {
    /// Adds what `other` counted.
    pub(crate) fn absorb(&mut self, other: ReadStats) {
        self.lines += other.lines;
        self.malformed_lines += other.malformed_lines;
        for line in other.first_malformed {
            if self.first_malformed.len() < MALFORMED_KEPT {
                self.first_malformed.push(line);
            }
        }
        self.first_malformed.sort_unstable();
        for (kind, n) in other.unknown_types {
            *self.unknown_types.entry(kind).or_default() += n;
        }
        for (kind, n) in other.metadata {
            *self.metadata.entry(kind).or_default() += n;
        }
        self.off_path += other.off_path;
        for (kind, n) in other.left_out {
            *self.left_out.entry(kind).or_default() += n;
        }
        self.first_left_out.extend(other.first_left_out);
        self.first_left_out.truncate(MALFORMED_KEPT);
        self.sidechain_lines += other.sidechain_lines;
        self.torn_at_line = self.torn_at_line.or(other.torn_at_line);
    }

    pub(crate) fn malformed(&mut self, line: usize) {
        self.malformed_lines += 1;
        if self.first_malformed.len() < MALFORMED_KEPT {
            self.first_malformed.push(line);
        }
    }
}

/// A transcript that cannot be opened: [`Error::NotFound`] when it is
/// missing (distinct from an empty one), [`Error::Io`] otherwise.
pub(crate) fn open_error(path: &Path, source: io::Error) -> Error {
    if source.kind() == io::ErrorKind::NotFound {
        Error::NotFound {
            what: format!("no transcript at {}", path.display()),
        }
    } else {
        Error::Io {
            op: "read transcript",
            path: path.to_owned(),
            source,
        }
    }
}

/// Whether `path` names a zstd-compressed transcript (`….zst`).
pub(crate) fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "zst")
}

/// Opens a transcript for reading, decompressing a `.zst` file. A missing
/// file is [`Error::NotFound`], distinct from an empty one.
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead>, Error> {
    let file = File::open(path).map_err(|source| open_error(path, source))?;
    if is_zstd(path) {
        let decoder = zstd::stream::read::Decoder::new(file).map_err(|source| Error::Io {
            op: "start decompressing transcript",
            path: path.to_owned(),
            source,
        })?;
        Ok(Box::new(BufReader::new(decoder)))
    } else {
        Ok(Box::new(BufReader::new(file)))
    }
}

/// Opens and scans the transcript at `path` (see [`scan`]).
///
/// A compressed stream that ends early (a writer that crashed, or is still
/// writing) is a torn tail, not an error: what came before it is kept and
/// [`ReadStats::torn_at_line`] says where it broke. Any other failure is an
/// [`Error::Transcript`] naming the file and line.
pub(crate) fn scan_file(
    path: &Path,
    stats: &mut ReadStats,
    f: impl FnMut(usize, &str) -> ControlFlow<(), Line>,
) -> Result<String, Error> {
    let mut scan = scan(open(path)?, stats, f);
    match scan.error.take() {
        None => {}
        Some((line, e)) if is_zstd(path) && e.kind() == io::ErrorKind::UnexpectedEof => {
            stats.torn_at_line = Some(line);
        }
        Some((line, source)) => {
            return Err(Error::Transcript {
                path: path.to_owned(),
                line,
                source,
            })
        }
    }
    Ok(scan.content_hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8]) -> (Vec<(usize, String)>, ReadStats, String) {
        let mut stats = ReadStats::default();
        let mut seen = Vec::new();
        let scan = scan(bytes, &mut stats, |n, text| {
            seen.push((n, text.to_owned()));
            ControlFlow::Continue(if text.starts_with('{') {
                Line::Read
            } else {
                Line::Malformed
            })
        });
        assert!(scan.error.is_none());
        (seen, stats, scan.content_hash)
    }

    #[test]
    fn blank_lines_are_skipped_and_numbers_kept() {
        let (seen, stats, _) = lines(b"{}\n\n  \nnope\n\xEF\xBB\xBF{\"a\":1}\r\n{}");
        assert_eq!(
            seen,
            vec![
                (1, "{}".to_owned()),
                (4, "nope".to_owned()),
                (5, "{\"a\":1}".to_owned()),
                (6, "{}".to_owned()),
            ]
        );
        assert_eq!(stats.lines, 4);
        assert_eq!(stats.malformed_lines, 1);
        assert_eq!(stats.first_malformed, vec![4]);
    }

    #[test]
    fn the_hash_covers_every_byte() {
        let (_, _, a) = lines(b"{}\n");
        let (_, _, b) = lines(b"{}\n\n");
        assert_ne!(a, b);
        assert_eq!(a, blake3::hash(b"{}\n").to_hex().to_string());
    }
}
