//! `sites-operator upgrade`: the Hub's upgrade flow from the command line (LIFE-06, LIFE-09).
//! Built-in application images are rewritten to the catalogue image at the platform version,
//! custom images are kept; `--force` also writes a new upgrade-request UUID, so even an
//! up-to-date site re-renders and restarts once. Archived sites are upgraded too and stay at zero
//! replicas (the command never touches `enabled`).
//!
//! `--record-images` is the step for Sites created before the mutating webhook recorded images:
//! each built-in application without an image gets the one it runs (from the Site's
//! StatefulSet), so that a new platform version moves it only through an upgrade (SPEC 4.6).
//! Nothing rolls: the rendered image is the one that runs.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::config::PlatformConfig;
use crate::crd::{Application, Site, UPGRADE_REQUEST_ANNOTATION};
use crate::ownership::{self, Control};
use crate::render::apps::{pinned, upgraded_applications};
use crate::write::Writer;

/// Which Sites to upgrade.
#[derive(Clone, Debug)]
pub enum Target {
    One(String),
    All,
}

/// What the command does to each Site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Built-in images to the platform version; `force` also requests a forced upgrade.
    Upgrade { force: bool },
    /// Record the running image of each built-in application that records none.
    RecordImages,
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

/// The applications of `site` with an image recorded for each built-in application that has
/// none: its pin ([`pinned`]: the image the status records, else the image of its container in
/// `running` — the Site's StatefulSet, when the Site controls it —, else the catalogue image at
/// the platform version), exactly what the reconciler renders.
pub fn recorded_applications(
    site: &Site,
    cfg: &PlatformConfig,
    running: Option<&StatefulSet>,
) -> Vec<Application> {
    let containers = running
        .filter(|sts| ownership::control(sts.meta(), site) == Control::ThisSite)
        .and_then(|sts| Some(&sts.spec.as_ref()?.template.spec.as_ref()?.containers));
    let running_image = |name: &str| {
        containers?
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.image.as_deref())
    };
    pinned(site, cfg, running_image).unwrap_or_else(|| site.spec.configuration.applications.clone())
}

/// `application: old -> new` for each application whose image `new` changes.
fn changes(site: &Site, new: &[Application]) -> Vec<String> {
    site.spec
        .configuration
        .applications
        .iter()
        .zip(new)
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

/// Applies `action` to the target Sites in `namespace`. A Site that does not exist is an error
/// before anything is written.
pub async fn upgrade(
    client: &kube::Client,
    namespace: &str,
    cfg: &PlatformConfig,
    target: &Target,
    action: Action,
    dry_run: bool,
) -> Result<Vec<Outcome>, kube::Error> {
    upgrade_with_progress(client, namespace, cfg, target, action, dry_run, |_| {}).await
}

/// [`upgrade`], calling `progress` with the outcomes so far after each Site, and once before
/// the first with none (the total is known then).
pub async fn upgrade_with_progress(
    client: &kube::Client,
    namespace: &str,
    cfg: &PlatformConfig,
    target: &Target,
    action: Action,
    dry_run: bool,
    mut progress: impl FnMut(crate::progress::Counts),
) -> Result<Vec<Outcome>, kube::Error> {
    let api: Api<Site> = Api::namespaced(client.clone(), namespace);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let sites = match target {
        Target::One(name) => vec![api.get(name).await?],
        Target::All => api.list(&ListParams::default()).await?.items,
    };
    let mut outcomes: Vec<Outcome> = Vec::new();
    let total = sites.len();
    let counts = |outcomes: &[Outcome]| crate::progress::Counts {
        done: outcomes.len(),
        total,
        changed: outcomes.iter().filter(|o| o.written).count(),
        failed: outcomes.iter().filter(|o| o.error.is_some()).count(),
    };
    let one = One {
        api: &api,
        statefulsets: &statefulsets,
        cfg,
        action,
        dry_run,
    };
    progress(counts(&outcomes));
    for site in sites {
        if !outcomes.is_empty() {
            progress(counts(&outcomes));
        }
        outcomes.push(one.upgrade(site).await);
    }
    if !outcomes.is_empty() {
        progress(counts(&outcomes));
    }
    Ok(outcomes)
}

/// How often a Site that changed between its read and the write (a status the operator wrote
/// meanwhile, say) is read and planned again before it is reported as failed.
pub const CONFLICT_RETRIES: usize = 5;

/// What the upgrade of one Site needs.
struct One<'a> {
    api: &'a Api<Site>,
    statefulsets: &'a Api<StatefulSet>,
    cfg: &'a PlatformConfig,
    action: Action,
    dry_run: bool,
}

impl One<'_> {
    /// Plans the Site's new applications from `site` and writes them, conditional on the
    /// version read: a Site changed since is read again and planned again from what it is now
    /// (so no edit is lost and none is overwritten), at most [`CONFLICT_RETRIES`] times.
    async fn upgrade(&self, mut site: Site) -> Outcome {
        let name = site.name_any();
        let force = self.action == Action::Upgrade { force: true };
        let mut conflicts = 0;
        loop {
            let applications = match self.action {
                Action::Upgrade { .. } => upgraded_applications(&site, self.cfg),
                Action::RecordImages => match self.statefulsets.get_opt(&name).await {
                    Ok(running) => recorded_applications(&site, self.cfg, running.as_ref()),
                    Err(e) => {
                        return Outcome {
                            site: name,
                            changes: Vec::new(),
                            forced: false,
                            written: false,
                            error: Some(format!("cannot read its StatefulSet: {e}")),
                        };
                    }
                },
            };
            let changes = changes(&site, &applications);
            let mut outcome = Outcome {
                site: name.clone(),
                changes: changes.clone(),
                forced: force,
                written: false,
                error: None,
            };
            if changes.is_empty() && !force {
                return outcome;
            }
            // Conditional on the version read: an edit since the read is not overwritten.
            let mut patch = json!({});
            if !changes.is_empty() {
                patch["spec"] = json!({"configuration": {"applications": applications}});
            }
            if force {
                patch["metadata"] = json!({"annotations": {
                    UPGRADE_REQUEST_ANNOTATION: uuid::Uuid::new_v4().to_string()
                }});
            }
            let writer = Writer::new(self.api.clone()).dry_run(self.dry_run);
            let version = site.resource_version();
            match writer.merge(&name, patch, version.as_deref()).await {
                Ok(_) => outcome.written = true,
                Err(e) if e.code() == Some(409) && conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    match self.api.get(&name).await {
                        Ok(now) => {
                            site = now;
                            continue;
                        }
                        Err(e) => {
                            outcome.error =
                                Some(format!("changed meanwhile, and cannot read it again: {e}"))
                        }
                    }
                }
                Err(e) => outcome.error = Some(e.to_string()),
            }
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{SiteBuilder, config};
    use crate::render::apps::catalogue_image;
    use serde_json::json;

    fn statefulset(owner_uid: &str, images: &[(&str, &str)]) -> StatefulSet {
        let containers: Vec<_> = images
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "docs-handbook", "ownerReferences": [{
                "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "docs-handbook",
                "uid": owner_uid, "controller": true}]},
            "spec": {"selector": {}, "serviceName": "docs-handbook",
                     "template": {"spec": {"containers": containers}}}
        }))
        .unwrap()
    }

    #[test]
    fn recording_keeps_what_runs_and_every_recorded_or_custom_image() {
        let cfg = config();
        let catalogue = catalogue_image(&cfg.sites.applications[0], &cfg.sites.version);
        let builtin = cfg.sites.applications[0].name.clone();
        let site = |image: Option<&str>| {
            let mut s = SiteBuilder::new("docs-handbook")
                .namespace("sites")
                .app(&builtin)
                .build();
            s.metadata.uid = Some("uid-1".into());
            s.spec.configuration.applications[0].image = image.map(String::from);
            s
        };
        let running = statefulset("uid-1", &[(&builtin, "registry/static:2.3.0")]);
        let foreign = statefulset("uid-other", &[(&builtin, "registry/static:0.1")]);
        // (recorded image, StatefulSet, image after recording)
        let table: Vec<(Option<&str>, Option<&StatefulSet>, &str)> = vec![
            (None, Some(&running), "registry/static:2.3.0"),
            (None, None, catalogue.as_str()),
            (None, Some(&foreign), catalogue.as_str()),
            (Some("mine:1"), Some(&running), "mine:1"),
        ];
        for (i, (recorded, sts, want)) in table.into_iter().enumerate() {
            let s = site(recorded);
            let apps = recorded_applications(&s, &cfg, sts);
            assert_eq!(apps[0].image.as_deref(), Some(want), "row {i}");
            assert_eq!(changes(&s, &apps).is_empty(), recorded.is_some(), "row {i}");
        }
    }
}
