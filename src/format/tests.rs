//! The record codec, headers, marks and footers: round trips, and damage
//! that every decoder refuses.

use super::*;
use proptest::prelude::*;

fn header() -> SegmentHeader {
    SegmentHeader {
        version: FORMAT_VERSION,
        log_id: [7; 16],
        first_seq: 42,
        segment_len: 1 << 20,
        start_hash: EntryHash([9; 32]),
    }
}

#[test]
fn segment_header_round_trip_and_every_flip_detected() {
    let h = header();
    let bytes = h.encode();
    assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
    for i in 0..HDR_CRC + 4 {
        let mut b = bytes;
        b[i] ^= 0x01;
        assert!(SegmentHeader::decode(&b).is_err(), "flip at {i} undetected");
    }
    assert!(SegmentHeader::decode(&bytes[..100]).is_err());
}

#[test]
fn marks_pick_newest_valid_slot_in_both_versions() {
    for version in [OLDEST_VERSION, FORMAT_VERSION] {
        let mut hdr = SegmentHeader {
            version,
            ..header()
        }
        .encode();
        assert_eq!(Mark::newest(&hdr), None);
        for g in 1..=3u64 {
            let m = Mark {
                generation: g,
                end: g * 100,
                next_seq: g,
                hash: EntryHash([g as u8; 32]),
                session_start: Some(256 + 16 * g),
            };
            let at = Mark::slot_offset(g);
            hdr[at..at + MARK_SLOT_LEN].copy_from_slice(&m.encode(version));
        }
        let newest = Mark::newest(&hdr).unwrap();
        assert_eq!(newest.end, 300);
        // Version 1 has no field for it.
        let expect = (version >= 2).then_some(256 + 48);
        assert_eq!(newest.session_start, expect, "version {version}");
        // A torn newest slot falls back to the older one, whichever byte
        // the tear hit (the session-start field included).
        for byte in [9, MARK_SESSION_START + 1] {
            let mut torn = hdr;
            torn[Mark::slot_offset(3) + byte] ^= 0xff;
            assert_eq!(Mark::newest(&torn).unwrap().end, 200, "byte {byte}");
        }
    }
}

#[test]
fn a_session_start_offset_the_slot_cannot_hold_is_left_out() {
    let m = |session_start| Mark {
        generation: 1,
        end: 1 << 40,
        next_seq: 1,
        hash: EntryHash([1; 32]),
        session_start,
    };
    let mut hdr = header().encode();
    for (offset, kept) in [
        (SEGMENT_HEADER_LEN as u64, true),
        ((u64::from(u32::MAX)) * 16, true),
        ((u64::from(u32::MAX) + 1) * 16, false),
        (0, false),
        (300, false),
    ] {
        let at = Mark::slot_offset(1);
        hdr[at..at + MARK_SLOT_LEN].copy_from_slice(&m(Some(offset)).encode(FORMAT_VERSION));
        let got = Mark::newest(&hdr).unwrap().session_start;
        assert_eq!(got, kept.then_some(offset), "offset {offset}");
    }
}

#[test]
fn versions_outside_the_read_range_are_refused() {
    for version in [0, FORMAT_VERSION + 1] {
        let b = SegmentHeader {
            version,
            ..header()
        }
        .encode();
        assert_eq!(
            SegmentHeader::decode(&b),
            Err((HDR_VERSION as u64, CorruptKind::Version { found: version }))
        );
    }
}

#[test]
fn footer_round_trip_and_flips() {
    let f = Footer {
        record_count: 10,
        first_seq: 5,
        last_hash: EntryHash([3; 32]),
        last_session_start: Some(7),
        data_end: 4096,
        index_offset: 4096,
        index_count: 2,
        index_crc: 0xdead_beef,
    };
    let b = f.encode();
    assert_eq!(Footer::decode(&b), Ok(Some(f)));
    assert_eq!(f.last_seq(), Some(14));
    for i in 8..FOOTER_LEN {
        let mut c = b;
        c[i] ^= 0x80;
        assert!(Footer::decode(&c).is_err(), "flip at {i} undetected");
    }
    assert_eq!(Footer::decode(&[0u8; FOOTER_LEN]), Ok(None));
}

#[test]
fn no_single_flipped_bit_turns_one_record_magic_into_the_other() {
    for magic in [RECORD_MAGIC, RECORD_MAGIC_BATCH] {
        let h = RecordHeader {
            prev_hash: EntryHash([1; 32]),
            payload_len: 16,
            kind: 1,
            seq: 3,
            ts: 4,
            continues: magic == RECORD_MAGIC_BATCH,
        };
        let mut rec = [0u8; RECORD_HEADER_LEN];
        h.write(&mut rec);
        assert_eq!(rec[..4], magic);
        assert_eq!(RecordHeader::read(&rec), Ok(h));
        for bit in 0..32 {
            let mut b = rec;
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(RecordHeader::read(&b), Err(CorruptKind::Magic), "bit {bit}");
        }
    }
}

#[test]
fn zeros_never_parse_as_a_record() {
    assert!(RecordHeader::read(&[0u8; 64]).is_err());
}

proptest! {
    #[test]
    fn record_round_trip(payload in proptest::collection::vec(any::<u8>(), 1..600), seq: u64, ts: u64, kind: u8, flip in any::<prop::sample::Index>()) {
        let h = RecordHeader { prev_hash: EntryHash([1; 32]), payload_len: payload.len() as u32, kind, seq, ts, continues: seq % 2 == 0 };
        let mut rec = vec![0u8; RECORD_HEADER_LEN + payload.len()];
        h.write(&mut rec);
        rec[RECORD_HEADER_LEN..].copy_from_slice(&payload);
        let hash = seal_record(&mut rec);
        prop_assert_eq!(RecordHeader::read(&rec).unwrap(), h);
        prop_assert!(check_record_crc(&rec).is_ok());
        prop_assert_eq!(record_link(&rec), hash);
        let i = 4 + flip.index(rec.len() - 4);
        rec[i] ^= 0x10;
        prop_assert!(check_record_crc(&rec).is_err() || RecordHeader::read(&rec).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = SegmentHeader::decode(&bytes);
        let _ = RecordHeader::read(&bytes);
        let _ = Mark::newest(&bytes);
        if bytes.len() >= FOOTER_LEN {
            let _ = Footer::decode(&bytes[..FOOTER_LEN]);
        }
    }
}
