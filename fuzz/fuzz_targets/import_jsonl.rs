//! Arbitrary wire-form input: parsing and import never panic, and a parsed
//! line re-serializes to a line that parses to the same entry. Each line is
//! also read as a Responses item and as a Messages API message: reading never
//! panics, what is read can be written back in its own API's form, and writing
//! what that reads gives the same text again.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "provider_forms.rs"]
mod provider_forms;
#[path = "scratch.rs"]
mod scratch;
use provider_forms::provider_forms;
use session_store::{wire::entry_line, wire::parse_line, EntryHash, wire::LineReader};

fuzz_target!(|data: &[u8]| {
    let mut reader = LineReader::new(data);
    let mut parsed = Vec::new();
    while let Ok(Some((no, text))) = reader.next_line() {
        provider_forms(text);
        match parse_line(text, no) {
            Ok(w) => {
                let line = entry_line(0, &EntryHash::genesis(), None, &w.entry);
                let back = parse_line(&line, 1).expect("our own line parses");
                assert_eq!(back.entry, w.entry);
                parsed.push((no, w));
            }
            Err(_) => break,
        }
        if parsed.len() > 64 {
            break;
        }
    }
    if !parsed.is_empty() {
        let dir = scratch::dir();
        if let Ok(store) = session_store::Store::open(dir.path()) {
            let _ = store.import(&parsed);
        }
    }
});
