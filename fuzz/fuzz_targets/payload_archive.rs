//! Arbitrary bytes as a payload file's content: what a read of the store's
//! payload area, or a pull from an archive, checks before it trusts them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_store::{check_payload_bytes, schema::LoggedItem};

fuzz_target!(|data: &[u8]| {
    if let Ok(item) = check_payload_bytes(data) {
        // What validates converts back to the logged form and archives
        // again to bytes that validate.
        let again = rkyv::to_bytes::<rkyv::rancor::Error>(&LoggedItem::from(item))
            .expect("archiving into memory");
        let back = check_payload_bytes(&again).expect("our own archive validates");
        assert_eq!(back, check_payload_bytes(data).expect("validated once"));
    }
});
