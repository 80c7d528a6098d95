//! Arbitrary session bytes through the Claude Code parser: the chain walk,
//! the joining of responses, the block conversions, and the import.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::history::claude::{import_of, parse_session_bytes};

fuzz_target!(|data: &[u8]| {
    let session = parse_session_bytes(data);
    let _ = session.main.messages();
    let _ = session.main.compact();
    let _ = import_of(&session.main, None);
    for (agent, t) in &session.sidechains {
        let _ = t.messages();
        let _ = import_of(t, Some(agent));
    }
});
