//! Arbitrary bytes as the body of a webhook request: the server's answers on each path (what
//! the HTTP layer calls: decoding, the handlers, encoding), then decoding, the three handlers
//! (mutate and validate Sites in both routing modes, validate the platform configuration) and
//! encoding of every answer. Nothing panics, no answer is a 5xx, every answer encodes, a
//! mutation's patch applies to the object it was computed for, and the Site handlers answer
//! the same on the server's typed decoding (objects decoded as Sites) as on the generic one,
//! and the review reader decodes a body it reads as serde_json does.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sites_operator::admission::{self, review, server};
use sites_operator_fuzz::{CONFIGS, FRESH_UUID};

fuzz_target!(|data: &[u8]| {
    let platform = admission::Platform::default();
    for answer in [
        server::review_mutation(data, &CONFIGS[0]),
        server::review_validation(data, &CONFIGS[0], &platform),
        server::review_config(data),
    ] {
        assert!(!answer.status().is_server_error(), "{}", answer.status());
    }

    // The Site webhooks try this decoding first.
    let site_body = review::SiteBody::new(data).ok();
    if let Some(body) = &site_body
        && let Some(read) = body.read()
    {
        assert_eq!(
            format!("{read:?}"),
            format!("{:?}", body.decode_with_serde_json()),
            "the review reader and serde_json decode differently"
        );
    }
    let typed = site_body.as_ref().and_then(|b| b.decode().ok());
    let typed_answers = typed.map(|req| {
        let mutated = admission::mutate_site(&req, &CONFIGS[0], || FRESH_UUID);
        review::encode(&mutated).expect("the mutating answer encodes");
        let validated: Vec<_> = CONFIGS
            .iter()
            .map(|cfg| admission::validate_site(&req, cfg, &platform))
            .collect();
        for answer in &validated {
            review::encode(answer).expect("the validating answer encodes");
        }
        (mutated, validated)
    });

    let Ok(req) = review::decode(data) else {
        return;
    };

    let mutated = admission::mutate_site(&req, &CONFIGS[0], || FRESH_UUID);
    review::encode(&mutated).expect("the mutating answer encodes");
    if let Some(patch) = &mutated.patch {
        let patch: json_patch::Patch =
            serde_json::from_slice(patch).expect("the patch is a JSON patch");
        let mut object = serde_json::to_value(req.object.as_ref().expect("a patched object"))
            .expect("the object serializes");
        json_patch::patch(&mut object, &patch).expect("the patch applies to the object");
    }

    let validated: Vec<_> = CONFIGS
        .iter()
        .map(|cfg| admission::validate_site(&req, cfg, &platform))
        .collect();
    for answer in &validated {
        review::encode(answer).expect("the validating answer encodes");
    }

    if let Some((typed_mutated, typed_validated)) = typed_answers {
        assert_eq!(
            typed_mutated, mutated,
            "the typed and generic mutations differ"
        );
        assert_eq!(
            typed_validated, validated,
            "the typed and generic validations differ"
        );
    }

    let config = admission::validate_config(&req);
    review::encode(&config).expect("the configuration answer encodes");
});
