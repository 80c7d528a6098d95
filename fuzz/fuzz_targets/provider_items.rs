//! Arbitrary lines as Responses items and Messages API messages, without the
//! store: many more inputs per second through the provider readers than
//! `import_jsonl` gives them.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "provider_forms.rs"]
mod provider_forms;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines() {
            provider_forms::provider_forms(line);
        }
    }
});
