//! Arbitrary text through the review reader (`admission::reader`), against serde_json: what the
//! reader reads as a JSON value, serde_json reads as the same value; what it skips, serde_json
//! skips. The reader refusing is always allowed (serde_json then decodes).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::Value;
use sites_operator::admission::review::reader;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = reader::from_str::<Value>(text) {
        let expected = serde_json::from_str::<Value>(text);
        assert_eq!(expected.ok(), Some(value), "serde_json reads otherwise");
    }
    if reader::from_str::<IgnoredAny>(text).is_ok() {
        assert!(
            serde_json::from_str::<IgnoredAny>(text).is_ok(),
            "serde_json refuses what the reader skips"
        );
    }
});
