//! Guards against a log that is not one unbroken chain passing as one: a
//! segment of another log (even with the same entries), a segment that does
//! not continue its predecessor, and a record edited with a fixed-up CRC.

mod engine;

use std::fs;
use std::path::{Path, PathBuf};

use engine::{edit, entry, opts, segment_files, spans};
use session_store::format::{self, SegmentHeader, FOOTER_LEN};
use session_store::{CorruptKind, Durability, EntryHash, Error, Log};

const SEG: u64 = 8 << 10;
const RECORDS: u64 = 60;

/// A closed log of several sealed segments and an active one; the same
/// calls always give the same entries and hashes.
fn build(dir: &Path) -> EntryHash {
    let log = Log::open(dir, opts(SEG)).unwrap();
    for i in 0..RECORDS {
        let d = if i % 7 == 6 {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        log.append_with(&entry(i, 100 + (i as usize * 89) % 600), d)
            .unwrap();
    }
    let head = log.head().unwrap().1;
    assert!(log.segment_paths().len() >= 4);
    log.close().unwrap();
    head
}

fn copy_dir(from: &Path, to: &Path) {
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// A built log in a fresh directory, and the path of its segment `pick(count)`.
fn built_copy(pick: impl FnOnce(usize) -> usize) -> (tempfile::TempDir, PathBuf) {
    let orig = tempfile::tempdir().unwrap();
    build(orig.path());
    let files = segment_files(orig.path());
    let d = tempfile::tempdir().unwrap();
    copy_dir(orig.path(), d.path());
    let path = d.path().join(files[pick(files.len())].file_name().unwrap());
    (d, path)
}

fn corrupt_kind(dir: &Path) -> (PathBuf, u64, CorruptKind) {
    for result in [Log::open(dir, opts(SEG)), Log::open_read_only(dir)] {
        match result {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    match Log::open(dir, opts(SEG)) {
        Err(Error::Corrupt {
            segment,
            offset,
            kind,
            ..
        }) => (segment, offset, kind),
        _ => unreachable!(),
    }
}

#[test]
fn a_segment_of_another_log_is_refused_even_with_the_same_entries() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    // The chain starts from a fixed genesis, so equal entries hash equally:
    // only the log id tells the two logs apart.
    assert_eq!(build(a.path()), build(b.path()));
    let a_files = segment_files(a.path());
    let b_files = segment_files(b.path());
    assert_eq!(a_files.len(), b_files.len());
    for k in 0..a_files.len() {
        let c = tempfile::tempdir().unwrap();
        copy_dir(a.path(), c.path());
        let target = c.path().join(a_files[k].file_name().unwrap());
        fs::copy(&b_files[k], &target).unwrap();
        let (segment, offset, kind) = corrupt_kind(c.path());
        assert_eq!((offset, kind), (0, CorruptKind::ForeignLog), "segment {k}");
        // With the first segment swapped, the rest look foreign to it.
        let blamed = if k == 0 {
            c.path().join(a_files[1].file_name().unwrap())
        } else {
            target
        };
        assert_eq!(segment, blamed, "segment {k}");
    }
}

/// Rewrites a segment header with a valid CRC, keeping its mark slots.
fn rewrite_header(path: &Path, f: impl FnOnce(&mut SegmentHeader)) {
    edit(path, |b| {
        let mut h = SegmentHeader::decode(b).unwrap();
        f(&mut h);
        b[..84].copy_from_slice(&h.encode()[..84]);
    });
}

#[test]
fn a_segment_that_does_not_continue_its_predecessor_is_refused() {
    let orig = tempfile::tempdir().unwrap();
    build(orig.path());
    let files = segment_files(orig.path());
    let n = files.len();
    let fresh = || {
        let d = tempfile::tempdir().unwrap();
        copy_dir(orig.path(), d.path());
        d
    };
    for k in [1, 2, n - 1] {
        let name = files[k].file_name().unwrap();
        // Another start hash (what a segment of a diverged copy would carry).
        let d = fresh();
        let path = d.path().join(name);
        rewrite_header(&path, |h| h.start_hash = EntryHash([7; 32]));
        let (segment, offset, kind) = corrupt_kind(d.path());
        assert_eq!((segment, offset), (path, 0), "segment {k}");
        assert!(matches!(kind, CorruptKind::ChainLink { .. }), "{kind:?}");
        // A first seq one too high, under a matching file name.
        let d = fresh();
        let path = d.path().join(name);
        let mut first = 0;
        rewrite_header(&path, |h| {
            h.first_seq += 1;
            first = h.first_seq;
        });
        let renamed = d.path().join(format!("{first:020}.seg"));
        fs::rename(&path, &renamed).unwrap();
        let (segment, offset, kind) = corrupt_kind(d.path());
        assert_eq!((segment, offset), (renamed, 0), "segment {k}");
        assert!(matches!(kind, CorruptKind::SeqGap { .. }), "{kind:?}");
        // A missing segment.
        let d = fresh();
        fs::remove_file(d.path().join(files[k - 1].file_name().unwrap())).unwrap();
        if k > 1 {
            let (segment, _, kind) = corrupt_kind(d.path());
            assert_eq!(segment, d.path().join(name));
            assert!(matches!(kind, CorruptKind::SeqGap { .. }), "{kind:?}");
        }
    }
    // The first segment must start from the genesis.
    let d = fresh();
    let path = d.path().join(files[0].file_name().unwrap());
    rewrite_header(&path, |h| h.start_hash = EntryHash([7; 32]));
    let (segment, _, kind) = corrupt_kind(d.path());
    assert_eq!(segment, path);
    assert!(matches!(kind, CorruptKind::ChainLink { .. }), "{kind:?}");
}

/// Changes one text byte of record `k` of `path` and recomputes its CRC, as a
/// forger without the chain would. Returns the records' spans.
fn forge(path: &Path, k: usize) -> Vec<engine::Span> {
    let mut sp = Vec::new();
    edit(path, |b| {
        sp = spans(b);
        let s = sp[k];
        let text = b[s.start + 64..s.body_end]
            .windows(4)
            .position(|w| w == b"xxxx")
            .expect("the text is in the payload")
            + s.start
            + 64;
        b[text] = b'y';
        format::seal_record(&mut b[s.start..s.body_end]);
    });
    assert_eq!(spans(&fs::read(path).unwrap()).len(), sp.len(), "CRC fixed");
    sp
}

#[test]
fn an_edited_record_with_a_fixed_crc_breaks_the_next_link() {
    let orig = tempfile::tempdir().unwrap();
    build(orig.path());
    let files = segment_files(orig.path());
    let active = files.len() - 1;
    // (segment, record in it); the last record of each is checked separately.
    for (f, k) in [(0, 0), (1, 3), (active, 0), (active, 1)] {
        let d = tempfile::tempdir().unwrap();
        copy_dir(orig.path(), d.path());
        let path = d.path().join(files[f].file_name().unwrap());
        let sp = forge(&path, k);
        // Open trusts CRCs below the durable mark and in sealed segments.
        let log = Log::open(d.path(), opts(SEG)).unwrap();
        let damage = log.verify().damage.expect("verify catches the forgery");
        assert_eq!(damage.segment, path);
        assert_eq!(
            damage.offset,
            sp[k + 1].start as u64,
            "segment {f}, record {k}"
        );
        assert_eq!(damage.seq, Some(sp[k + 1].seq));
        assert!(
            matches!(damage.kind, CorruptKind::ChainLink { .. }),
            "{:?}",
            damage.kind
        );
    }
}

#[test]
fn an_edited_last_record_of_a_sealed_segment_breaks_the_footer() {
    let (d, path) = built_copy(|_| 1);
    let n = spans(&fs::read(&path).unwrap()).len();
    forge(&path, n - 1);
    let log = Log::open(d.path(), opts(SEG)).unwrap();
    let damage = log.verify().damage.expect("verify catches the forgery");
    let len = fs::metadata(&path).unwrap().len();
    assert_eq!(
        (damage.segment, damage.offset),
        (path, len - FOOTER_LEN as u64)
    );
    assert!(matches!(damage.kind, CorruptKind::Footer(_)));
}

/// The last record of the active segment has no successor and no footer;
/// the durable mark's hash is the witness.
#[test]
fn an_edited_last_record_below_the_mark_is_caught() {
    let (d, path) = built_copy(|n| n - 1);
    let n = spans(&fs::read(&path).unwrap()).len();
    let sp = forge(&path, n - 1);
    match Log::open(d.path(), opts(SEG)) {
        Err(Error::Corrupt {
            segment,
            offset,
            seq,
            kind: CorruptKind::ChainLink { .. },
        }) => {
            assert_eq!((segment, offset), (path, sp[n - 1].start as u64));
            assert_eq!(seq, Some(sp[n - 1].seq));
        }
        Ok(log) => panic!("undetected; verify says {:?}", log.verify().damage),
        Err(e) => panic!("expected a ChainLink error, got {e}"),
    }
}
