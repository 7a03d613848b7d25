//! Admission: pure handlers from an AdmissionRequest to an AdmissionResponse (the HTTP layer in
//! [`server`] only decodes, calls and encodes).
//!
//! - [`mutate_site`]: upgrade-request stamping (SPEC section 5, LIFE-09) and image recording on
//!   CREATE (SPEC 4.6).
//! - [`validate_site`]: the Site rules of [`crate::rules`], every violation with its
//!   field path.
//! - [`validate_config`]: the platform configuration validator on the `sites-config` ConfigMap.

pub mod budget;
mod connection;
pub mod review;
pub mod server;

use review::object::check_site_type;
pub use review::object::{Reviewed, SiteObject};

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use kube::Resource;
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use crate::config::{self, PlatformConfig};
use crate::crd::{Application, Site, SiteRef, Str, UPGRADE_REQUEST_ANNOTATION};

use crate::validation::{self, FieldError};

/// Denies with code 403, reason Forbidden, one message naming the violations, and the
/// violations as status causes: at most [`validation::MAX_LISTED`] of them, each part clipped,
/// and the count of the rest, so the answer stays small whatever the object.
pub fn deny<K: Resource>(
    req: &AdmissionRequest<K>,
    violations: &[FieldError],
) -> AdmissionResponse {
    let message = validation::join(violations);
    let (shown, _) = validation::listed(violations);
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(&message, "Forbidden")
        .with_code(403)
        .with_details(StatusDetails {
            causes: shown
                .into_iter()
                .map(|v| StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: v.message,
                    field: v.field,
                })
                .collect(),
            name: validation::clip(&req.name).into_owned(),
            group: validation::clip(&req.kind.group).into_owned(),
            kind: validation::clip(&req.kind.kind).into_owned(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
    response
}

/// An object of a Site review as the Site handlers take it: generic ([`DynamicObject`], decoded
/// as a [`Site`] when asked) or typed ([`SiteObject`], decoded as a Site by the server); the
/// handlers answer the same for both.
pub trait AsSite: Resource {
    /// The Site the rules read.
    type Site: Reviewed + Clone;

    /// The object as a Site, or the violation (at `field`) explaining why it is not one: it
    /// declares another kind, or does not decode.
    fn as_site(&self, field: &str) -> Result<Cow<'_, Self::Site>, FieldError>;

    /// The applications of the Site: (name, the image it records). None when the object is
    /// not a Site.
    fn site_applications(&self) -> Option<Vec<(String, Option<String>)>> {
        let site = self.as_site("object").ok()?;
        Some(applications(&site.parts().configuration.applications))
    }
}

impl AsSite for DynamicObject {
    type Site = Site;

    fn as_site(&self, field: &str) -> Result<Cow<'_, Site>, FieldError> {
        if let Some(types) = &self.types {
            check_site_type(&types.api_version, &types.kind, field)?;
        }
        let value = serde_json::to_value(self).map_err(|e| FieldError {
            field: field.into(),
            message: e.to_string(),
        })?;
        serde_json::from_value::<Site>(value)
            .map(Cow::Owned)
            .map_err(|e| FieldError {
                field: field.into(),
                message: format!("not a valid Site: {e}"),
            })
    }
}

impl<'a> AsSite for SiteObject<'a> {
    type Site = SiteObject<'a>;

    fn as_site(&self, field: &str) -> Result<Cow<'_, SiteObject<'a>>, FieldError> {
        if let (Some(api_version), Some(kind)) = (&self.api_version, &self.kind) {
            check_site_type(api_version, kind, field)?;
        }
        Ok(Cow::Borrowed(self))
    }
}

fn upgrade_request<K: Resource>(object: Option<&K>) -> Option<&str> {
    object?
        .meta()
        .annotations
        .as_ref()?
        .get(UPGRADE_REQUEST_ANNOTATION)
        .map(String::as_str)
}

fn applications<S: Str>(apps: &[Application<S>]) -> Vec<(String, Option<String>)> {
    apps.iter()
        .map(|a| (a.name.to_string(), a.image.as_ref().map(|i| i.to_string())))
        .collect()
}

/// The image the mutating webhook records for the built-in application `name` that a request
/// names without an image (SPEC 5, 4.6, 4.7), or None:
/// - on CREATE, and on UPDATE for an application the stored Site does not have: the catalogue
///   image at the platform version (a new application starts where a new Site would);
/// - on UPDATE of an application the stored Site has: the image the stored Site records for it,
///   so re-applying a manifest without images (kubectl apply, server-side apply, the Hub's merge
///   patches) changes nothing. When the stored Site records none (created while the webhook did
///   not run) nothing is recorded: the reconciler's pin ([`crate::render::apps::pinned`]) keeps
///   what runs, and recording the catalogue image now could move it.
pub fn recorded_image(
    name: &str,
    stored: Option<&[(String, Option<String>)]>,
    cfg: &PlatformConfig,
) -> Option<String> {
    let catalogue = crate::render::apps::builtin_image(name, cfg)?;
    match stored.map(|apps| apps.iter().find(|(n, _)| n == name)) {
        Some(Some((_, image))) => image.clone(),
        None | Some(None) => Some(catalogue),
    }
}

/// The mutating webhook (SPEC section 5):
/// - **upgrade-request stamping**: a value that is not a UUID (`force`, `true`, `now`, ...)
///   becomes a fresh UUIDv4 from `fresh`, so `kubectl annotate site X
///   sites.ecmwf.int/upgrade-request=force --overwrite` always forces exactly one upgrade. A UUID
///   is kept (a new one is the Hub's forced upgrade; an unchanged one is what every unrelated
///   update carries). Removing the annotation stamps nothing.
/// - **image recording** ([`recorded_image`]): on CREATE each built-in application without an
///   image gets the catalogue repository at the platform version; on UPDATE one the request
///   names without an image keeps the stored Site's. A later platform version therefore moves
///   it only through `upgrade` (LIFE-06), never through a restart, a configuration change or a
///   re-apply of the manifest (SPEC 4.6, 4.7). Dry-run requests get the same patch, so `kubectl
///   diff` of the manifest a Site came from is empty.
///
/// The response is a JSONPatch, absent when nothing changes.
pub fn mutate_site<K: AsSite>(
    req: &AdmissionRequest<K>,
    cfg: &PlatformConfig,
    fresh: impl FnOnce() -> uuid::Uuid,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let mut ops = Vec::new();
    // What the stored Site records: nothing on CREATE; on an UPDATE whose stored object is no
    // Site there is nothing to keep, and nothing is recorded.
    let stored = match req.operation {
        Operation::Update => req
            .old_object
            .as_ref()
            .and_then(|o| o.site_applications())
            .map(Some),
        _ => Some(None),
    };
    if let (Some(apps), Some(stored)) = (
        req.object.as_ref().and_then(|o| o.site_applications()),
        stored,
    ) {
        for (i, (name, image)) in apps.iter().enumerate() {
            if image.is_some() {
                continue;
            }
            if let Some(value) = recorded_image(name, stored.as_deref(), cfg) {
                ops.push(serde_json::json!({
                    "op": "add",
                    "path": format!("/spec/configuration/applications/{i}/image"),
                    "value": value,
                }));
            }
        }
    }
    if let Some(value) = upgrade_request(req.object.as_ref()) {
        let is_uuid = value.len() == 36
            && uuid::Uuid::try_parse(value).is_ok_and(|u| !u.is_nil() && u.get_version_num() > 0);
        if !is_uuid {
            ops.push(serde_json::json!({
                "op": "replace",
                "path": format!("/metadata/annotations/{}", UPGRADE_REQUEST_ANNOTATION.replace('~', "~0").replace('/', "~1")),
                "value": fresh().to_string(),
            }));
        }
    }
    if ops.is_empty() {
        return response;
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("JSON patch operations");
    match response.with_patch(patch) {
        Ok(r) => r,
        Err(e) => AdmissionResponse::from(req).deny(e.to_string()),
    }
}

/// What the Site webhook knows besides the configuration: the names of the platform's own
/// objects in the namespace, and, once the operator's Site cache has synced, which Sites use
/// which public path (until then the path rule allows, and the reconciler's backstop applies).
#[derive(Default)]
pub struct Platform {
    /// Names of platform objects no Site object may take that the run options name (the webhook
    /// Service and TLS Secret, the Lease); [`Platform::reserves`] adds the configuration's.
    pub reserved: Vec<String>,
    /// The Sites by public path; set when the cache has synced.
    pub sites: OnceLock<Arc<dyn SiteDirectory>>,
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Platform")
            .field("reserved", &self.reserved)
            .field("synced", &self.sites.get().is_some())
            .finish()
    }
}

/// Who uses a public path.
pub trait SiteDirectory: Send + Sync {
    /// Names of the other Sites (not the Site `name` itself, not being deleted) whose public
    /// path in `namespace` is `site_path` (`/<space>/<name>`).
    fn path_users(&self, namespace: &str, name: &str, site_path: &str) -> Vec<String>;
}

impl Platform {
    /// Whether `name` belongs to a platform object of the namespace: [`Platform::reserved`], the
    /// session-key Secret the configuration `cfg` names, `sites-config`, the metrics Service and
    /// the master Ingress.
    pub fn reserves(&self, name: &str, cfg: &PlatformConfig) -> bool {
        self.reserved.iter().any(|r| r == name)
            || name == cfg.sites.session.secret_key.secret_name
            || [
                config::CONFIGMAP_NAME,
                crate::labels::METRICS_SERVICE,
                crate::labels::MASTER_INGRESS,
            ]
            .contains(&name)
    }

    /// Every rule a Site must satisfy in this platform: [`crate::rules::violations`], the
    /// reserved names, and one path per Site.
    fn violations<S: Str>(
        &self,
        site: SiteRef<'_, S>,
        old: Option<SiteRef<'_, S>>,
        cfg: &PlatformConfig,
    ) -> Vec<FieldError> {
        let mut v = crate::rules::violations(site, old, cfg);
        v.extend(crate::rules::reserved_names(site.metadata, |name| {
            self.reserves(name, cfg)
        }));
        if let Some(directory) = self.sites.get() {
            let path = site.path();
            let meta = site.metadata;
            let users = directory.path_users(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
                &path,
            );
            v.extend(crate::rules::path_in_use(&site.public_path(), &users));
        }
        v
    }
}

/// Site validation: every rule of [`crate::rules::violations`] and the rules of the `platform`
/// (its reserved names, one path per Site; [`Platform::default`] has neither); on UPDATE the
/// rules comparing with the stored object, and ratcheting. Warnings for legal but suspicious
/// input. The same answers for generic objects ([`DynamicObject`]) as for typed ones
/// ([`SiteObject`], the server's path).
pub fn validate_site<K: AsSite>(
    req: &AdmissionRequest<K>,
    cfg: &PlatformConfig,
    platform: &Platform,
) -> AdmissionResponse {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return AdmissionResponse::from(req);
    }
    let site = req.object.as_ref().map(|o| o.as_site("object")).transpose();
    // A stored object that no longer decodes (e.g. written before a schema change) only loses
    // the comparisons with it.
    let old = req
        .old_object
        .as_ref()
        .and_then(|o| o.as_site("oldObject").ok());
    judge(req, site, old.as_deref(), cfg, platform)
}

/// [`validate_site`] on a request the server decoded typed, taken by value: the call
/// `server.rs` still makes, kept until it calls [`validate_site`] itself.
pub fn validate_site_object_in(
    req: AdmissionRequest<SiteObject<'_>>,
    cfg: &PlatformConfig,
    platform: &Platform,
) -> AdmissionResponse {
    validate_site(&req, cfg, platform)
}

fn judge<K: Resource, T: Reviewed + Clone>(
    req: &AdmissionRequest<K>,
    site: Result<Option<Cow<'_, T>>, FieldError>,
    old: Option<&T>,
    cfg: &PlatformConfig,
    platform: &Platform,
) -> AdmissionResponse {
    let site = match site {
        Ok(Some(site)) => site,
        Ok(None) => {
            return deny(
                req,
                &[FieldError {
                    field: "object".into(),
                    message: "required".into(),
                }],
            );
        }
        Err(v) => return deny(req, &[v]),
    };
    let mut violations = platform.violations(site.parts(), old.map(T::parts), cfg);
    if let Some(old) = old
        && !violations.is_empty()
    {
        // Ratcheting: a field the update leaves as it was is not denied for a rule the stored
        // object already broke (a rule that tightened after it was stored).
        let before = platform.violations(old.parts(), None, cfg);
        violations = crate::rules::ratchet(violations, &before, old, &*site);
    }
    if !violations.is_empty() {
        return deny(req, &violations);
    }
    let mut response = AdmissionResponse::from(req);
    let warnings = crate::render::warnings(&site.parts().configuration.settings, cfg);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Platform configuration validation, for the `sites-config` ConfigMap (other ConfigMaps pass:
/// the webhook configuration's matchConditions should not send them).
pub fn validate_config(req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let object = req.object.as_ref();
    let text = object
        .and_then(|o| o.data.get("data"))
        .and_then(|d| d.get(config::CONFIGMAP_KEY))
        .and_then(Value::as_str);
    validate_config_text(req, object.and_then(|o| o.metadata.name.as_deref()), text)
}

/// [`validate_config`] on what it reads of the ConfigMap: its name and `data["config.yaml"]`
/// when that is a string.
pub fn validate_config_text<K: Resource>(
    req: &AdmissionRequest<K>,
    object_name: Option<&str>,
    text: Option<&str>,
) -> AdmissionResponse {
    if !matches!(req.operation, Operation::Create | Operation::Update)
        || req.name != config::CONFIGMAP_NAME && object_name != Some(config::CONFIGMAP_NAME)
    {
        return AdmissionResponse::from(req);
    }
    let ctx = config::Installation {
        namespace: req.namespace.as_deref(),
    };
    match config::validate_configmap_text(text, &ctx) {
        Ok(_) => AdmissionResponse::from(req),
        Err(e) => deny(req, &e.into_problems(&config::data_field())),
    }
}

#[cfg(test)]
mod tests;
