//! Qualifying-change detection (LIFE-02, LIFE-03, LIFE-09): which Site changes roll the pods.
//!
//! Only the restart-triggering properties of the lifecycle design qualify: `spec.name`,
//! `spec.owner`, `spec.type` and, under `spec.configuration`, `applications` (compared
//! order-insensitively by name), `enabled`, `headers`, `quota`, `retention_date`, `share`,
//! `space`, `settings.resource_limits` and `settings.error_handling`. Audit fields
//! (`description`, `created_by`, `updated_by`, `created_at`, `updated_at`) and everything else
//! (replicas, monitored) do not. A new non-empty `sites.ecmwf.int/upgrade-request` annotation
//! qualifies too; removing it does not.
//!
//! A built-in application's `image` is not compared: which image runs is the pod template's
//! container image, which rolls the pods by itself when it changes; recording in the Site the
//! image a built-in application already runs (on CREATE, or with `upgrade --record-images`) is
//! then no change at all (SPEC 4.6).
//!
//! The reconciler keeps a [`Qualifying`] state on the pod template (a hash of the qualifying
//! properties and the last handled upgrade request) and sets `kubectl.kubernetes.io/restartedAt`
//! only when [`decide`] says so, so a reconcile that finds nothing qualifying changed never rolls
//! the pods again, whatever the operator restarts in between.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::PlatformConfig;
use crate::crd::{Site, UPGRADE_REQUEST_ANNOTATION};
use crate::quantity;

/// Pod-template annotation holding [`Qualifying::spec_hash`].
pub const SPEC_HASH_ANNOTATION: &str = "sites.ecmwf.int/spec-hash";
/// Pod-template annotation holding the last handled upgrade request.
pub const HANDLED_UPGRADE_ANNOTATION: &str = "sites.ecmwf.int/upgrade-request-handled";

/// What a rendered StatefulSet records about the Site it was rendered from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qualifying {
    /// Hex SHA-256 of the canonical qualifying properties.
    pub spec_hash: String,
    /// The last non-empty upgrade request seen.
    pub upgrade_request: Option<String>,
}

impl Qualifying {
    /// Reads the state back from pod-template annotations (None when the StatefulSet predates
    /// it or was not rendered by this operator).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<Qualifying> {
        Some(Qualifying {
            spec_hash: annotations.get(SPEC_HASH_ANNOTATION)?.clone(),
            upgrade_request: annotations
                .get(HANDLED_UPGRADE_ANNOTATION)
                .filter(|v| !v.is_empty())
                .cloned(),
        })
    }

    /// The pod-template annotations that record this state.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        a.insert(SPEC_HASH_ANNOTATION.to_string(), self.spec_hash.clone());
        if let Some(u) = &self.upgrade_request {
            a.insert(HANDLED_UPGRADE_ANNOTATION.to_string(), u.clone());
        }
        a
    }
}

/// The outcome of comparing a Site with the state its pods were last rendered for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Roll the pods (set a new `restartedAt`).
    pub restart: bool,
    /// The state to record on the pod template.
    pub state: Qualifying,
}

/// Decides whether `site` rolls the pods, given the state recorded when they were last rendered
/// (`None`: nothing recorded, e.g. a new StatefulSet — new pods need no restart).
pub fn decide(previous: Option<&Qualifying>, site: &Site, cfg: &PlatformConfig) -> Decision {
    let requested = site
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UPGRADE_REQUEST_ANNOTATION))
        .filter(|v| !v.trim().is_empty())
        .cloned();
    let state = Qualifying {
        spec_hash: spec_hash(site, cfg),
        // A removed annotation keeps the last handled request: removal is not a request.
        upgrade_request: requested.or_else(|| previous.and_then(|p| p.upgrade_request.clone())),
    };
    let restart = previous.is_some_and(|p| *p != state);
    Decision { restart, state }
}

/// The canonical JSON of the qualifying properties; `cfg`'s catalogue says which applications
/// are built-in.
pub fn qualifying_properties(site: &Site, cfg: &PlatformConfig) -> Value {
    let spec = &site.spec;
    let c = &spec.configuration;
    let builtin = |name: &str| cfg.sites.applications.iter().any(|e| e.name == name);
    let mut applications: Vec<Value> = c
        .applications
        .iter()
        .map(|a| {
            let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
            if builtin(&a.name)
                && let Some(fields) = v.as_object_mut()
            {
                fields.remove("image");
            }
            v
        })
        .collect();
    applications.sort_by(|a, b| {
        a["name"]
            .as_str()
            .cmp(&b["name"].as_str())
            .then_with(|| a.to_string().cmp(&b.to_string()))
    });
    let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| match q {
        // Equal quantities in other spellings (1Gi, 1024Mi) are the same value.
        Some(q) => match quantity::parse(&q.0) {
            Ok(parsed) => json!(parsed.nanos().to_string()),
            Err(_) => json!(q.0),
        },
        None => Value::Null,
    };
    let limits =
        c.settings.resource_limits.as_ref().map(
            |l| json!({"cpu": quantity(l.cpu.as_ref()), "memory": quantity(l.memory.as_ref())}),
        );
    json!({
        "name": spec.name,
        "owner": spec.owner,
        "type": spec.site_type,
        "configuration": {
            "space": c.space,
            "enabled": c.enabled,
            "applications": applications,
            "headers": c.headers,
            "quota": quantity(c.quota.as_ref()),
            "retention_date": c.retention_date,
            "share": c.share,
            "settings": {
                "resource_limits": limits,
                "error_handling": c.settings.error_handling,
            },
        },
    })
}

/// Hex SHA-256 of the canonical qualifying properties (serde_json maps are ordered by key, so
/// the serialisation is stable).
pub fn spec_hash(site: &Site, cfg: &PlatformConfig) -> String {
    crate::digest::json_sha256_hex(&qualifying_properties(site, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{SiteBuilder, config};

    /// A Site with every qualifying property set.
    fn base() -> SiteBuilder {
        SiteBuilder::new("docs-handbook")
            .annotation("unrelated", "x")
            .description("Team handbook")
            .app("static")
            .app_json(json!({"name": "api", "image": "ghcr.io/x/api:1", "port": 8050}))
            .header("X-Frame-Options", "SAMEORIGIN")
            .quota("1Gi")
            .retention(Some("2027-12-31"))
            .share(json!({"users": ["a"]}))
            .replicas(1)
            .limits("500m", "256Mi")
            .error_handling("platform")
    }

    /// `base()` with an RFC 7386 merge patch applied.
    fn with(patch: Value) -> Site {
        base().edit(|v| json_patch::merge(v, &patch)).build()
    }

    fn rendered(site: &Site) -> Qualifying {
        decide(None, site, &config()).state
    }

    #[test]
    fn new_statefulsets_need_no_restart() {
        let d = decide(None, &base().build(), &config());
        assert!(!d.restart);
        assert_eq!(d.state.spec_hash.len(), 64);
        assert_eq!(d.state.upgrade_request, None);
    }

    #[test]
    fn qualifying_changes_restart_and_others_do_not() {
        let before = rendered(&base().build());
        // (case, merge patch, restart?)
        let cases: &[(&str, Value, bool)] = &[
            ("nothing", json!({}), false),
            (
                "applications reordered",
                json!({"spec": {"configuration": {"applications": [{"name": "api", "image": "ghcr.io/x/api:1", "port": 8050}, {"name": "static"}]}}}),
                false,
            ),
            (
                "description",
                json!({"spec": {"description": "new text"}}),
                false,
            ),
            (
                "created_by",
                json!({"spec": {"created_by": "admin"}}),
                false,
            ),
            (
                "updated_by",
                json!({"spec": {"updated_by": "admin"}}),
                false,
            ),
            (
                "created_at",
                json!({"spec": {"created_at": "2026-01-01"}}),
                false,
            ),
            (
                "updated_at",
                json!({"spec": {"updated_at": "2026-01-02"}}),
                false,
            ),
            (
                "replicas",
                json!({"spec": {"configuration": {"settings": {"replicas": 3}}}}),
                false,
            ),
            (
                "monitored",
                json!({"spec": {"configuration": {"settings": {"monitored": true}}}}),
                false,
            ),
            (
                "unrelated annotation",
                json!({"metadata": {"annotations": {"unrelated": "y"}}}),
                false,
            ),
            (
                "quota respelled",
                json!({"spec": {"configuration": {"quota": "1024Mi"}}}),
                false,
            ),
            (
                "application image",
                json!({"spec": {"configuration": {"applications": [{"name": "static"}, {"name": "api", "image": "ghcr.io/x/api:2", "port": 8050}]}}}),
                true,
            ),
            (
                // Recording the image a built-in application runs changes nothing (SPEC 4.6);
                // another image of it rolls the pods through the pod template's container image.
                "built-in image recorded",
                json!({"spec": {"configuration": {"applications": [{"name": "static", "image": "registry.example.org/sites/static:2.4.0"}, {"name": "api", "image": "ghcr.io/x/api:1", "port": 8050}]}}}),
                false,
            ),
            (
                "application added",
                json!({"spec": {"configuration": {"applications": [{"name": "static"}, {"name": "api", "image": "ghcr.io/x/api:1", "port": 8050}, {"name": "more", "image": "m:1"}]}}}),
                true,
            ),
            (
                "enabled",
                json!({"spec": {"configuration": {"enabled": false}}}),
                true,
            ),
            (
                "headers",
                json!({"spec": {"configuration": {"headers": {"X-Frame-Options": "DENY"}}}}),
                true,
            ),
            (
                "quota",
                json!({"spec": {"configuration": {"quota": "2Gi"}}}),
                true,
            ),
            (
                "retention_date",
                json!({"spec": {"configuration": {"retention_date": "2028-01-01"}}}),
                true,
            ),
            (
                "share (deeper field)",
                json!({"spec": {"configuration": {"share": {"administrator_users": ["b"]}}}}),
                true,
            ),
            (
                "resource_limits",
                json!({"spec": {"configuration": {"settings": {"resource_limits": {"cpu": "1"}}}}}),
                true,
            ),
            (
                "error_handling",
                json!({"spec": {"configuration": {"settings": {"error_handling": "site"}}}}),
                true,
            ),
            (
                "space",
                json!({"spec": {"configuration": {"space": "other"}}}),
                true,
            ),
            ("name", json!({"spec": {"name": "guide"}}), true),
            ("owner", json!({"spec": {"owner": "alice"}}), true),
            ("type", json!({"spec": {"type": "dynamic"}}), true),
            (
                "upgrade request added",
                json!({"metadata": {"annotations": {"sites.ecmwf.int/upgrade-request": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}}),
                true,
            ),
            (
                "empty upgrade request",
                json!({"metadata": {"annotations": {"sites.ecmwf.int/upgrade-request": ""}}}),
                false,
            ),
        ];
        for (case, patch, restart) in cases {
            let d = decide(Some(&before), &with(patch.clone()), &config());
            assert_eq!(d.restart, *restart, "{case}");
        }
    }

    #[test]
    fn upgrade_requests_restart_once_and_removal_does_not() {
        let first = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        let second = "6fa459ea-ee8a-3ca4-894e-db77e160355e";
        let req =
            |u: &str| with(json!({"metadata": {"annotations": {UPGRADE_REQUEST_ANNOTATION: u}}}));
        let start = rendered(&base().build());
        let d1 = decide(Some(&start), &req(first), &config());
        assert!(d1.restart);
        assert_eq!(d1.state.upgrade_request.as_deref(), Some(first));
        // The same request seen again (another reconcile, an operator restart): no restart.
        let d2 = decide(Some(&d1.state), &req(first), &config());
        assert!(!d2.restart);
        // Removing the annotation keeps the handled request: no restart.
        let d3 = decide(Some(&d2.state), &base().build(), &config());
        assert!(!d3.restart);
        assert_eq!(d3.state.upgrade_request.as_deref(), Some(first));
        // A new request restarts again.
        let d4 = decide(Some(&d3.state), &req(second), &config());
        assert!(d4.restart);
    }

    #[test]
    fn state_round_trips_through_annotations_and_hash_is_stable() {
        let d = decide(
            None,
            &with(json!({"metadata": {"annotations": {UPGRADE_REQUEST_ANNOTATION: "u-1"}}})),
            &config(),
        );
        assert_eq!(
            Qualifying::from_annotations(&d.state.annotations()),
            Some(d.state.clone())
        );
        assert_eq!(Qualifying::from_annotations(&BTreeMap::new()), None);
        assert_eq!(
            spec_hash(&base().build(), &config()),
            spec_hash(&base().build(), &config())
        );
        // Serialising the same Site twice gives the same canonical form.
        assert_eq!(
            qualifying_properties(&base().build(), &config()).to_string(),
            qualifying_properties(&base().build(), &config()).to_string()
        );
    }
}
