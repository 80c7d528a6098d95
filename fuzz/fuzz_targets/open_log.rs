//! Arbitrary segment files, with or without a record of an evicted prefix
//! (`evicted.json`): open, iterate and verify must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;
use session_store::format::{SegmentHeader, FOOTER_LEN, SEGMENT_HEADER_LEN};
use session_store::{EntryHash, log::EvictedRecord, log::EvictedSegment, Log, LogOptions, RecoveryMode, log::EVICTED_FILE};

fuzz_target!(|data: &[u8]| {
    // The first byte picks how many segment files the rest is split into.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let segments = usize::from(n % 3) + 1;
    let dir = scratch::dir();
    let chunk = rest.len().div_ceil(segments).max(1);
    let mut first = None;
    for (i, part) in rest.chunks(chunk).enumerate() {
        // Name each file after the first seq its header claims, when it has one,
        // so that valid multi-segment inputs open.
        let header = SegmentHeader::decode(part).ok();
        let first_seq = header.map_or(i as u64 * 4, |h| h.first_seq);
        first = first.or(header);
        let path = dir.path().join(format!("{first_seq:020}.seg"));
        // Bit 4 of the first byte: a file whose header claims more bytes
        // than the part holds is written sparse, as a store writes one: the
        // part's records at the start, its last FOOTER_LEN bytes at the end
        // of the claimed length, a hole between (a read-only open reads a
        // small one into memory up to that hole).
        let claimed = header.map_or(0, |h| h.segment_len);
        let sparse = n & 0x10 != 0
            && part.len() >= SEGMENT_HEADER_LEN + FOOTER_LEN
            && claimed > part.len() as u64
            && claimed <= 4 << 20;
        if sparse {
            use std::os::unix::fs::FileExt;
            let (records, footer) = part.split_at(part.len() - FOOTER_LEN);
            let file = std::fs::File::create(&path).expect("create");
            file.write_all_at(records, 0).expect("write");
            file.set_len(claimed).expect("set_len");
            file.write_all_at(footer, claimed - FOOTER_LEN as u64)
                .expect("write");
        } else {
            std::fs::write(&path, part).expect("write");
        }
    }
    // Bits 2-3 of the first byte: no eviction record, the input's tail as
    // one, or a well-formed one that claims the prefix before the first
    // segment (continuing its start hash, or not).
    match (n >> 2) % 4 {
        0 => {}
        1 => {
            let raw = &rest[rest.len() - rest.len().min(512)..];
            std::fs::write(dir.path().join(EVICTED_FILE), raw).expect("write");
        }
        mode => {
            if let Some(h) = first.filter(|h| h.first_seq > 0) {
                let mut last_hash = h.start_hash;
                if mode == 3 {
                    last_hash.0[0] ^= 1;
                }
                let split = h.first_seq / 2;
                let spans = [(0, split.saturating_sub(1)), (split, h.first_seq - 1)];
                let record = EvictedRecord {
                    version: 1,
                    log_id: h.log_id.iter().map(|b| format!("{b:02x}")).collect(),
                    segments: spans
                        .iter()
                        .filter(|(a, b)| a <= b)
                        .map(|&(first_seq, last_seq)| EvictedSegment {
                            name: format!("{first_seq:020}.seg"),
                            first_seq,
                            last_seq,
                            start_hash: EntryHash([0; 32]),
                            last_hash: if last_seq + 1 == h.first_seq {
                                last_hash
                            } else {
                                EntryHash([first_seq as u8; 32])
                            },
                            len_bytes: 4096,
                            content_hash: "00".repeat(32),
                            object: format!("s/segments/{first_seq:020}-{last_seq:020}.seg"),
                        })
                        .collect(),
                };
                let json = serde_json::to_vec(&record).expect("a record serializes");
                std::fs::write(dir.path().join(EVICTED_FILE), json).expect("write");
            }
        }
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
