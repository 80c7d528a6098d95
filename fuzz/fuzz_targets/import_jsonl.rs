//! Arbitrary wire-form input: parsing and import never panic, and a parsed
//! line re-serializes to a line that parses to the same entry. Each line is
//! also read as a Responses item and as a Messages API message: reading never
//! panics, what is read can be written back in its own API's form, and writing
//! what that reads gives the same text again.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;
use session_store::export::{entry_line, parse_line, LineReader};
use session_store::{EntryHash, Item};

fn provider_forms(line: &str) {
    if let Ok(item) = Item::from_responses_json(line) {
        let out = item
            .to_responses_json()
            .expect("a Responses item has a Responses form");
        let again = Item::from_responses_json(&out).expect("our own item reads");
        assert_eq!(again.to_responses_json().unwrap(), out);
    }
    if let Ok(items) = Item::from_anthropic_message(line) {
        let out = Item::to_anthropic_messages(&items).expect("a message has a Messages form");
        assert_eq!(out.len(), 1, "one message in, one out");
        let again = Item::from_anthropic_message(&out[0]).expect("our own message reads");
        assert_eq!(Item::to_anthropic_messages(&again).unwrap(), out);
    }
}

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
