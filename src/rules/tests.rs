//! Table tests of the Site rules that are not easier to show through the admission handler
//! (`src/admission/tests.rs` covers every rule end to end), and of [`validate`]'s contract with
//! the reconciler.

use serde_json::json;

use super::*;
use crate::fixtures::{config, handbook};

#[test]
fn headers_that_could_leave_their_directive_are_rejected() {
    // (name, value, accepted)
    let cases = [
        ("X-Frame-Options", "SAMEORIGIN", true),
        (
            "Content-Security-Policy",
            "default-src 'self'; img-src *",
            true,
        ),
        ("X_Custom", "", true),
        ("X-Bad Name", "v", false),
        ("X-Bad;", "v", false),
        ("X-Inject", "v\" always; return 200 \"x", false),
        ("X-Newline", "a\r\nSet-Cookie: x", false),
        ("X-Var", "$host", false),
        ("X-Backslash", "a\\", false),
        ("", "v", false),
        // Beyond ASCII: letters are text, C1 controls and DEL are not.
        ("X-Accent", "café", true),
        ("X-C1", "a\u{85}b", false),
        ("X-Del", "a\u{7f}", false),
        ("X-Tab", "a\tb", false),
    ];
    for (name, value, ok) in cases {
        let got = header(name, value);
        assert_eq!(got.is_ok(), ok, "{name:?}: {value:?} -> {got:?}");
    }
}

#[test]
fn unsafe_route_paths_are_rejected() {
    let too_long = format!("/{}", "a".repeat(MAX_PATH_LEN));
    // (path, accepted in ingress mode, accepted in gateway mode)
    let cases = [
        ("/docs/handbook", true, true),
        ("/docs/handbook/", true, true),
        ("/a%20b", true, true),
        ("/x; return 200", false, false),
        ("/x{", false, false),
        ("/x\ny", false, false),
        ("relative", false, false),
        ("/a b", false, false),
        ("/$host", false, false),
        ("/a//b", false, false),
        ("/a/../b", false, false),
        ("/a%2Fb", false, false),
        ("/a/..", false, false),
        ("/a/.", false, false),
        ("/a/./b", false, false),
        ("/a%2fb", false, false),
        ("/.well-known/x", true, true),
        ("/a/b.c/", true, true),
        ("/a\u{a0}b", false, false),
        ("/a\u{2028}b", false, false),
        ("/a\u{7f}", false, false),
        ("/a'b", false, false),
        ("/café", true, false),
        ("/a%zz", true, false),
        (too_long.as_str(), false, false),
    ];
    for (path, ingress, gateway) in cases {
        assert_eq!(route_path(path).is_ok(), ingress, "{path:?}");
        assert_eq!(
            route_path(path).is_ok() && gateway_route_path(path).is_ok(),
            gateway,
            "{path:?} (gateway)"
        );
    }
}

#[test]
fn validate_returns_every_violation_or_a_valid_site() {
    let cfg = config();
    let good = handbook().build();
    let valid = validate(&good, &cfg).expect("valid");
    assert_eq!(valid.site().metadata.name.as_deref(), Some("docs-handbook"));

    // Several problems at once, as the webhook would report them, in the same words.
    let bad = handbook()
        .edit(|s| s["spec"]["name"] = json!("Handbook"))
        .header("X-Bad;", "v")
        .configuration(
            "applications",
            json!([{"name": "web", "image": "x:1"}, {"name": "web", "image": "x:1"}]),
        )
        .build();
    let errors = validate(&bad, &cfg).unwrap_err();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.name",
            "spec.configuration.applications[1].name",
            "spec.configuration.headers[\"X-Bad;\"]",
        ]
    );
    assert_eq!(errors, violations(bad.parts(), None, &cfg));
    assert!(
        errors[1]
            .message
            .contains("is already used by applications[0]"),
        "{}",
        errors[1]
    );
}

#[test]
fn rules_about_the_previous_version_are_admissions_only() {
    let cfg = config();
    let with_quota = |q: &str| handbook().quota(q).build();
    let (old, new) = (with_quota("2Gi"), with_quota("1Gi"));
    assert_eq!(
        violations(new.parts(), Some(old.parts()), &cfg)
            .iter()
            .map(|e| e.field.as_str())
            .collect::<Vec<_>>(),
        ["spec.configuration.quota"]
    );
    // The reconciler has no previous version: the stored Site is valid.
    assert!(validate(&new, &cfg).is_ok());
}
