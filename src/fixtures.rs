//! Fixtures shared by the unit tests: a chained builder for `Site` resources and the standard
//! platform configuration.
//!
//! Every test module used to carry its own `site(..)` / `config(..)` helpers, each a slightly
//! different JSON literal; one builder keeps the fixtures readable and lets a test name only what
//! it cares about. The builder edits a JSON document rather than the typed `Site` so that tests
//! of admission (which see raw JSON, including explicit `null`s and wrong types) and tests of the
//! typed code can share it: [`SiteBuilder::json`] gives the document, [`SiteBuilder::build`]
//! the decoded `Site`.

use serde_json::{Value, json};

use crate::config::{Installation, PlatformConfig, RoutingMode};
use crate::crd::Site;

/// The committed example configuration (`manifests/base/config.yaml`), ingress mode.
pub(crate) const CONFIG_YAML: &str = include_str!("../manifests/base/config.yaml");

/// The standard test configuration: the committed example (ingress mode).
pub(crate) fn config() -> PlatformConfig {
    config_for(RoutingMode::Ingress)
}

/// The standard test configuration in gateway mode.
pub(crate) fn config_gateway() -> PlatformConfig {
    config_for(RoutingMode::Gateway)
}

/// The standard test configuration with the given routing mode.
pub(crate) fn config_for(mode: RoutingMode) -> PlatformConfig {
    let mut cfg = PlatformConfig::from_yaml(
        CONFIG_YAML,
        "manifests/base/config.yaml",
        &Installation::default(),
    )
    .expect("the example configuration is valid");
    cfg.routing.mode = mode;
    cfg
}

/// The representative Site most tests start from: `docs-handbook` in namespace `sites`, enabled,
/// one static application, a 2Gi quota and one replica.
pub(crate) fn handbook() -> SiteBuilder {
    SiteBuilder::new("docs-handbook")
        .namespace("sites")
        .enabled(true)
        .app("static")
        .quota("2Gi")
        .replicas(1)
}

/// A `Site` document under construction. [`SiteBuilder::new`] starts from the smallest valid
/// Site; each method sets one field and returns the builder.
#[derive(Clone, Debug)]
pub(crate) struct SiteBuilder {
    doc: Value,
}

impl SiteBuilder {
    /// The smallest valid Site named `id`: site `handbook` of owner `jdoe`, type `static`, in
    /// space `docs`; everything else defaulted.
    pub(crate) fn new(id: &str) -> Self {
        Self {
            doc: json!({
                "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
                "metadata": {"name": id},
                "spec": {"name": "handbook", "owner": "jdoe", "type": "static",
                         "configuration": {"space": "docs"}}
            }),
        }
    }

    // metadata

    /// Replaces the whole `metadata`.
    pub(crate) fn metadata(mut self, metadata: Value) -> Self {
        self.doc["metadata"] = metadata;
        self
    }

    pub(crate) fn namespace(mut self, namespace: &str) -> Self {
        self.doc["metadata"]["namespace"] = json!(namespace);
        self
    }

    pub(crate) fn uid(mut self, uid: &str) -> Self {
        self.doc["metadata"]["uid"] = json!(uid);
        self
    }

    pub(crate) fn generation(mut self, generation: i64) -> Self {
        self.doc["metadata"]["generation"] = json!(generation);
        self
    }

    pub(crate) fn annotation(mut self, key: &str, value: &str) -> Self {
        self.doc["metadata"]["annotations"][key] = json!(value);
        self
    }

    // spec

    /// Replaces the whole `spec`.
    pub(crate) fn spec(mut self, spec: Value) -> Self {
        self.doc["spec"] = spec;
        self
    }

    pub(crate) fn owner(mut self, owner: &str) -> Self {
        self.doc["spec"]["owner"] = json!(owner);
        self
    }

    pub(crate) fn description(mut self, description: &str) -> Self {
        self.doc["spec"]["description"] = json!(description);
        self
    }

    // spec.configuration

    /// Sets `spec.configuration.<key>` to any value, `null` and wrong types included.
    pub(crate) fn configuration(mut self, key: &str, value: Value) -> Self {
        self.doc["spec"]["configuration"][key] = value;
        self
    }

    pub(crate) fn enabled(self, enabled: bool) -> Self {
        self.configuration("enabled", json!(enabled))
    }

    /// Appends a catalogue application (`{"name": name}`).
    pub(crate) fn app(self, name: &str) -> Self {
        self.app_json(json!({"name": name}))
    }

    /// Appends an application given in full.
    pub(crate) fn app_json(mut self, app: Value) -> Self {
        let apps = &mut self.doc["spec"]["configuration"]["applications"];
        if !apps.is_array() {
            *apps = json!([]);
        }
        apps.as_array_mut().expect("an array").push(app);
        self
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.doc["spec"]["configuration"]["headers"][name] = json!(value);
        self
    }

    pub(crate) fn quota(self, quota: &str) -> Self {
        self.configuration("quota", json!(quota))
    }

    /// `retention_date`; `None` writes an explicit `null`.
    pub(crate) fn retention(self, date: Option<&str>) -> Self {
        self.configuration("retention_date", json!(date))
    }

    pub(crate) fn share(self, share: Value) -> Self {
        self.configuration("share", share)
    }

    /// Sets `spec.configuration.settings.<key>`.
    pub(crate) fn setting(mut self, key: &str, value: Value) -> Self {
        self.doc["spec"]["configuration"]["settings"][key] = value;
        self
    }

    pub(crate) fn replicas(self, replicas: i32) -> Self {
        self.setting("replicas", json!(replicas))
    }

    pub(crate) fn limits(self, cpu: &str, memory: &str) -> Self {
        self.setting("resource_limits", json!({"cpu": cpu, "memory": memory}))
    }

    pub(crate) fn error_handling(self, handling: &str) -> Self {
        self.setting("error_handling", json!(handling))
    }

    /// Any other edit of the document (for fields and shapes the methods above do not name).
    pub(crate) fn edit(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        edit(&mut self.doc);
        self
    }

    /// The document as JSON (what an admission request carries).
    pub(crate) fn json(self) -> Value {
        self.doc
    }

    /// The decoded `Site`; panics when the document is not a valid Site.
    pub(crate) fn build(self) -> Site {
        serde_json::from_value(self.doc).expect("fixture is a valid Site")
    }
}
