//! Arbitrary bytes as a Site (JSON): every Site the admission rules accept renders in both
//! routing modes (or fails with an error the reconciler expects), renders the same objects again
//! when they are stored, and never restarts its pods unchanged. Refused Sites must not panic
//! the renderer either.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sites_operator::crd::Site;
use sites_operator_fuzz::{CONFIGS, as_stored, check_render};

fuzz_target!(|data: &[u8]| {
    let Ok(site) = serde_json::from_slice::<Site>(data) else {
        return;
    };
    let site = as_stored(site);
    for cfg in CONFIGS.iter() {
        check_render(&site, cfg);
    }
});
