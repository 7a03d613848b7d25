//! What the fuzz targets share: the platform configurations they validate and render with, and
//! the rendering invariants checked for every Site the admission rules accept.

use std::sync::LazyLock;

use sites_operator::Error;
use sites_operator::config::{Installation, PlatformConfig, RoutingMode};
use sites_operator::crd::Site;
use sites_operator::render::{self, Inputs, PodTemplateInputs, SiteTokens};
use sites_operator::restart;
use sites_operator::rules;

/// The example platform configuration (`manifests/base/config.yaml`).
pub const CONFIG_YAML: &str = include_str!("../../manifests/base/config.yaml");
/// Namespace the operator runs in (and Sites without one are put in).
pub const NAMESPACE: &str = "sites";
/// The upgrade-request value stamped by the mutating handler (fixed: runs are reproducible).
pub const FRESH_UUID: uuid::Uuid = uuid::Uuid::from_u128(0x5f0b3a52_9d57_4c3c_8f8e_1a2b3c4d5e6f);

/// The example configuration in ingress mode, and in gateway mode with the migration container.
pub static CONFIGS: LazyLock<[PlatformConfig; 2]> = LazyLock::new(|| {
    let ingress = PlatformConfig::from_yaml(CONFIG_YAML, "config.yaml", &Installation::default())
        .expect("the example configuration is valid");
    let mut gateway = ingress.clone();
    gateway.routing.mode = RoutingMode::Gateway;
    gateway.sites.migration.enabled = true;
    [ingress, gateway]
});

/// Fills in what the API server sets on every stored Site (namespace, uid, a name for
/// `generateName`), so that rendering gets past the metadata it needs.
pub fn as_stored(mut site: Site) -> Site {
    let meta = &mut site.metadata;
    if meta.name.as_deref().is_none_or(str::is_empty) {
        meta.name = Some(format!(
            "{}abcde",
            meta.generate_name.as_deref().unwrap_or_default()
        ));
    }
    meta.namespace.get_or_insert_with(|| NAMESPACE.to_string());
    meta.uid
        .get_or_insert_with(|| "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10".to_string());
    site
}

/// Renders a Site as the reconciler does, twice: first as a new site, then against the objects of
/// the first rendering as if they were stored.
///
/// A Site the admission rules accept is valid for the reconciler too, and renders, or fails only
/// with an error the reconciler treats as expected (an unsupported route is terminal, a missing
/// host or configuration value is transient). The second rendering decides no restart and gives
/// the same objects (an unchanged Site never rolls its pods or rewrites its objects). Sites the
/// rules refuse cannot be rendered at all; checking them must not panic.
pub fn check_render(site: &Site, cfg: &PlatformConfig) {
    let admitted = rules::violations(site.parts(), None, cfg).is_empty();
    let _ = render::warnings(&site.spec.configuration.settings, cfg);
    let valid = match rules::validate(site, cfg) {
        Ok(valid) => valid,
        Err(violations) => {
            assert!(
                !admitted,
                "the reconciler refuses an admitted Site: {violations:?}"
            );
            return;
        }
    };
    let tokens = SiteTokens {
        api_token: "fuzz-api-token".into(),
        secret_key: "fuzz-secret-key".into(),
    };
    let host = cfg.routing.host.as_deref();
    let first_state = restart::decide(None, site, cfg).state;
    let inputs = Inputs::new(NAMESPACE, host, b"fuzz-session-key", &tokens, &first_state);
    let first = match render::render(valid, cfg, &inputs) {
        Ok(r) => r,
        Err(e) => {
            assert!(
                expected_failure(&e),
                "an admitted Site does not render: {e}\n{site:?}"
            );
            return;
        }
    };
    let values = first.to_values();
    serde_json::to_vec(&values).expect("rendered objects serialize");

    let recorded = render::recorded_state(render::template_annotations(&first.statefulset));
    assert_eq!(recorded.as_ref(), Some(&first_state), "recorded state");
    let decision = restart::decide(recorded.as_ref(), site, cfg);
    assert!(!decision.restart, "an unchanged Site restarts: {site:?}");
    let again = Inputs {
        existing_claim: Some(&first.pvc),
        pod: PodTemplateInputs {
            state: &decision.state,
            restarted_at: None,
        },
        ..inputs.clone()
    };
    let second = render::render(valid, cfg, &again).expect("renders again");
    assert!(second == first, "the second rendering differs: {site:?}");
}

fn expected_failure(e: &Error) -> bool {
    e.is_transient() || matches!(e, Error::UnsupportedRoute { .. })
}
