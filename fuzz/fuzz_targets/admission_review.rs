//! Arbitrary bytes as the body of a webhook request: decoding, the three handlers (mutate and
//! validate Sites in both routing modes, validate the platform configuration) and encoding of
//! every answer. Nothing panics, every answer encodes, and a mutation's patch applies to the
//! object it was computed for.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sites_operator::admission::{self, server};
use sites_operator_fuzz::{CONFIGS, FRESH_UUID};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = server::decode(data) else {
        return;
    };

    let mutated = admission::mutate_site(&req, || FRESH_UUID);
    server::encode(&mutated).expect("the mutating answer encodes");
    if let Some(patch) = &mutated.patch {
        let patch: json_patch::Patch =
            serde_json::from_slice(patch).expect("the patch is a JSON patch");
        let mut object = serde_json::to_value(req.object.as_ref().expect("a patched object"))
            .expect("the object serializes");
        json_patch::patch(&mut object, &patch).expect("the patch applies to the object");
    }

    for cfg in CONFIGS.iter() {
        let validated = admission::validate_site(&req, cfg);
        server::encode(&validated).expect("the validating answer encodes");
    }

    let config = admission::validate_config(&req);
    server::encode(&config).expect("the configuration answer encodes");
});
