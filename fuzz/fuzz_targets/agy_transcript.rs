//! Arbitrary transcript bytes through the agy parser and its conversions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::history::agy::parse_transcript_bytes;

fuzz_target!(|data: &[u8]| {
    let t = parse_transcript_bytes(data);
    let _ = t.messages();
    let _ = t.compact();
    let _ = t.to_import();
});
