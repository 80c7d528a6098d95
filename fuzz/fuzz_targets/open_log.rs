//! Arbitrary segment files: open, iterate and verify must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;
use session_store::format::SegmentHeader;
use session_store::{Log, LogOptions, RecoveryMode};

fuzz_target!(|data: &[u8]| {
    // The first byte picks how many segment files the rest is split into.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 3) + 1;
    let dir = scratch::dir();
    let chunk = rest.len().div_ceil(n).max(1);
    for (i, part) in rest.chunks(chunk).enumerate() {
        // Name each file after the first seq its header claims, when it has one,
        // so that valid multi-segment inputs open.
        let first_seq = SegmentHeader::decode(part).map_or(i as u64 * 4, |h| h.first_seq);
        std::fs::write(dir.path().join(format!("{first_seq:020}.seg")), part).expect("write");
    }
    if let Ok(log) = Log::open_read_only(dir.path()) {
        for r in log.snapshot().iter() {
            if r.is_err() {
                break;
            }
        }
        let _ = log.verify();
        let _ = log.restore();
    }
    for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
        let opts = LogOptions {
            prepare_ahead: false,
            ..LogOptions::default().segment_size(8192).recovery(mode)
        };
        if let Ok(log) = Log::open(dir.path(), opts) {
            // Sealed records are only checked by verify; it must not panic either.
            let _ = log.verify();
            let _ = log.restore();
        }
    }
});
