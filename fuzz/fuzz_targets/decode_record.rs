//! Arbitrary bytes through every decoder of on-disk structures.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::format::{next_record, Footer, Mark, SegmentHeader, FOOTER_LEN, RECORD_ALIGN};
use session_store::LogEntry;

fuzz_target!(|data: &[u8]| {
    let _ = SegmentHeader::decode(data);
    let _ = Mark::newest(data);
    if data.len() >= FOOTER_LEN {
        let _ = Footer::decode(&data[..FOOTER_LEN]);
    }
    // The record codec's walk, from every offset a record may start at.
    for at in (0..data.len()).step_by(RECORD_ALIGN) {
        match next_record(data, at) {
            Ok(Some(rec)) => {
                assert!(at + rec.len() <= data.len() && rec.body.len() <= rec.len());
                let _ = rec.check_crc();
                let _ = rec.link();
            }
            Ok(None) | Err(_) => {}
        }
    }
    // The payload decoder, on aligned copies of the input.
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(data);
    // What validates re-archives to a stable form (compared as bytes: a NaN
    // is not equal to itself, but its bytes are).
    if let Ok(entry) = LogEntry::from_archive(&aligned) {
        let again = entry.to_archive();
        let back = LogEntry::from_archive(&again).expect("our own archive validates");
        assert_eq!(back.to_archive().as_slice(), again.as_slice());
    }
});
