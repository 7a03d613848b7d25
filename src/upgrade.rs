//! `sites-operator upgrade`: the Hub's upgrade flow from the command line (LIFE-06, LIFE-09).
//! Built-in application images are rewritten to the catalogue image at the platform version,
//! custom images are kept; `--force` also writes a new upgrade-request UUID, so even an
//! up-to-date site re-renders and restarts once. Archived sites are upgraded too and stay at zero
//! replicas (the command never touches `enabled`).

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::config::PlatformConfig;
use crate::crd::{Site, UPGRADE_REQUEST_ANNOTATION};
use crate::render::apps::upgraded_applications;

/// Which Sites to upgrade.
#[derive(Clone, Debug)]
pub enum Target {
    One(String),
    All,
}

/// What happened to one Site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub site: String,
    /// `application: old image -> new image` lines.
    pub changes: Vec<String>,
    pub forced: bool,
    /// The patch was (or, in a dry run, would be) written.
    pub written: bool,
    pub error: Option<String>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(e) = &self.error {
            return write!(f, "{}: failed: {e}", self.site);
        }
        if self.changes.is_empty() && !self.forced {
            return write!(f, "{}: up to date", self.site);
        }
        let mut parts = self.changes.clone();
        if self.forced {
            parts.push("forced upgrade requested".into());
        }
        write!(f, "{}: {}", self.site, parts.join("; "))
    }
}

/// The image changes an upgrade makes to `site` (`application: old -> new`).
pub fn image_changes(site: &Site, cfg: &PlatformConfig) -> Vec<String> {
    let upgraded = upgraded_applications(site, cfg);
    site.spec
        .configuration
        .applications
        .iter()
        .zip(&upgraded)
        .filter(|(old, new)| old.image != new.image)
        .map(|(old, new)| {
            format!(
                "{}: {} -> {}",
                old.name,
                old.image.as_deref().unwrap_or("(catalogue default)"),
                new.image.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// Upgrades the target Sites in `namespace`. A Site that does not exist is an error before
/// anything is written.
pub async fn upgrade(
    client: &kube::Client,
    namespace: &str,
    cfg: &PlatformConfig,
    target: &Target,
    force: bool,
    dry_run: bool,
) -> Result<Vec<Outcome>, kube::Error> {
    let api: Api<Site> = Api::namespaced(client.clone(), namespace);
    let sites = match target {
        Target::One(name) => vec![api.get(name).await?],
        Target::All => api.list(&ListParams::default()).await?.items,
    };
    let mut outcomes = Vec::new();
    for site in sites {
        let name = site.name_any();
        let changes = image_changes(&site, cfg);
        let mut outcome = Outcome {
            site: name.clone(),
            changes: changes.clone(),
            forced: force,
            written: false,
            error: None,
        };
        if changes.is_empty() && !force {
            outcomes.push(outcome);
            continue;
        }
        let mut patch = json!({});
        if !changes.is_empty() {
            patch["spec"] =
                json!({"configuration": {"applications": upgraded_applications(&site, cfg)}});
        }
        if force {
            patch["metadata"] = json!({"annotations": {UPGRADE_REQUEST_ANNOTATION: uuid::Uuid::new_v4().to_string()}});
        }
        let params = PatchParams {
            dry_run,
            ..Default::default()
        };
        match api.patch(&name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => outcome.written = true,
            Err(e) => outcome.error = Some(e.to_string()),
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
