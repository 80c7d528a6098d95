//! Arbitrary bytes through every decoder of on-disk structures.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::format::{
    Footer, Mark, RecordHeader, SegmentHeader, FOOTER_LEN, RECORD_HEADER_LEN,
};
use session_store::LogEntry;

fuzz_target!(|data: &[u8]| {
    let _ = SegmentHeader::decode(data);
    let _ = Mark::newest(data);
    if data.len() >= FOOTER_LEN {
        let _ = Footer::decode(&data[..FOOTER_LEN]);
    }
    if let Ok(h) = RecordHeader::read(data) {
        let end = RECORD_HEADER_LEN + h.payload_len as usize;
        if end <= data.len() {
            let _ = session_store::format::check_record_crc(&data[..end]);
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
