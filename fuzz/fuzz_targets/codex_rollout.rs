//! Arbitrary rollout bytes through the Codex parser (both line shapes,
//! compactions, rollbacks), its messages and its import.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::history::codex::{import_of, parse_rollout_bytes};

fuzz_target!(|data: &[u8]| {
    let t = parse_rollout_bytes(data);
    let _ = t.messages();
    let _ = t.compact();
    let _ = import_of(&t);
});
