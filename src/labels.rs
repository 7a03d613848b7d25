//! Names, labels and owner references shared by every object the operator renders for a Site.
//! Who controls an existing object is [`crate::ownership`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::Error;
use crate::crd::{ID_LABEL, Site};

/// `app.kubernetes.io/managed-by` of every owned object.
pub const MANAGED_BY: &str = "sites-operator";

/// Name of the Secret holding the OAuth2 proxy cookie secret.
pub fn oauth2_secret_name(id: &str) -> String {
    [id, "-oauth2"].concat()
}

/// Name of the ConfigMap holding the nginx configuration and error pages.
pub fn files_configmap_name(id: &str) -> String {
    [id, "-files"].concat()
}

/// The keys of [`labels`], the only labels the operator puts on the objects it owns (the caches
/// keep the values of these keys only).
pub const LABEL_KEYS: [&str; 5] = [
    ID_LABEL,
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/part-of",
    MANAGED_BY_LABEL,
];

/// The label naming the operator as the manager of an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Annotation holding the hash of the rendered object (controller/apply.rs: an object is up to
/// date when it carries the hash of its rendering).
pub const DESIRED_HASH_ANNOTATION: &str = "sites.ecmwf.int/desired-hash";

/// StatefulSet annotation holding a hash of the pod template as rendered: whether a new
/// rendering rolls the pods is read from it (the stored template carries the API server's
/// defaults, so it is not compared itself).
pub const TEMPLATE_HASH_ANNOTATION: &str = "sites.ecmwf.int/template-hash";

/// The metrics Service of the manifests.
pub const METRICS_SERVICE: &str = "sites-operator-metrics";

/// Name of the master Ingress whose host serves sites when `routing.host` is not set.
pub const MASTER_INGRESS: &str = "sites-ingress-master";

/// The prefixes of the Ingress annotations that ingress controllers read as configuration
/// (NGINX Inc's `nginx.org/` and `nginx.com/`, ingress-nginx's
/// `nginx.ingress.kubernetes.io/`, the older `ingress.kubernetes.io/`): on a site's Ingress,
/// only the operator's rendering has keys of these.
pub const INGRESS_CONFIGURATION_PREFIXES: [&str; 4] = [
    "nginx.org/",
    "nginx.com/",
    "nginx.ingress.kubernetes.io/",
    "ingress.kubernetes.io/",
];

/// Whether an Ingress annotation configures the ingress controller
/// ([`INGRESS_CONFIGURATION_PREFIXES`]).
pub fn configures_ingress(key: &str) -> bool {
    INGRESS_CONFIGURATION_PREFIXES
        .iter()
        .any(|p| key.starts_with(p))
}

/// The annotation `kubectl apply` keeps a copy of the whole object in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Labels of every owned object and of the pod template.
pub fn labels(id: &str) -> BTreeMap<String, String> {
    let values = [id, "site", id, "sites", MANAGED_BY];
    LABEL_KEYS
        .iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The selector of the site's pods: the id label only (selectors are immutable, so they hold
/// nothing that could ever change).
pub fn selector(id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(ID_LABEL.to_string(), id.to_string())])
}

/// The site id (object name) and namespace, or the error naming what is missing.
pub fn id_and_namespace(site: &Site) -> Result<(&str, &str), Error> {
    let id = site
        .metadata
        .name
        .as_deref()
        .ok_or(Error::MissingMetadata {
            field: "metadata.name",
        })?;
    let ns = site
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::MissingMetadata {
            field: "metadata.namespace",
        })?;
    Ok((id, ns))
}

/// The controller owner reference to the Site (LIFE-05, LIFE-12): garbage collection removes
/// every owned object with the Site.
pub fn owner_reference(site: &Site) -> Result<OwnerReference, Error> {
    let uid = site.metadata.uid.clone().ok_or(Error::MissingMetadata {
        field: "metadata.uid",
    })?;
    let (id, _) = id_and_namespace(site)?;
    Ok(OwnerReference {
        api_version: Site::api_version(&()).to_string(),
        kind: Site::kind(&()).to_string(),
        name: id.to_string(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Metadata of an owned object called `name`: the Site's namespace, the site labels, and
/// exactly one owner reference, the Site.
pub fn object_meta(site: &Site, name: &str) -> Result<ObjectMeta, Error> {
    let (id, ns) = id_and_namespace(site)?;
    Ok(ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ns.to_string()),
        labels: Some(labels(id)),
        owner_references: Some(vec![owner_reference(site)?]),
        ..Default::default()
    })
}

/// Names of the objects a Site owns: `<id>` (Secret, ConfigMap, claim, StatefulSet, Service,
/// route), `<id>-oauth2` (Secret) and `<id>-files` (ConfigMap).
pub fn owned_names(id: &str) -> [String; 3] {
    [
        id.to_string(),
        oauth2_secret_name(id),
        files_configmap_name(id),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;
    use serde_json::json;

    #[test]
    fn owned_object_metadata() {
        let s = SiteBuilder::new("docs-handbook")
            .namespace("sites")
            .uid("u-1")
            .build();
        let meta = object_meta(&s, &files_configmap_name("docs-handbook")).unwrap();
        assert_eq!(meta.name.as_deref(), Some("docs-handbook-files"));
        assert_eq!(meta.namespace.as_deref(), Some("sites"));
        assert_eq!(meta.labels.as_ref().unwrap()[ID_LABEL], "docs-handbook");
        assert_eq!(
            meta.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "sites-operator"
        );
        let owners = meta.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        let o = &owners[0];
        assert_eq!(
            (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str()
            ),
            ("sites.ecmwf.int/v1", "Site", "docs-handbook", "u-1")
        );
        assert_eq!(
            (o.controller, o.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert_eq!(selector("docs-handbook").len(), 1);
        assert_eq!(oauth2_secret_name("a"), "a-oauth2");
    }

    #[test]
    fn missing_metadata_is_an_error_naming_the_field() {
        for (meta, field) in [
            (json!({"namespace": "sites", "uid": "u"}), "metadata.name"),
            (json!({"name": "a", "uid": "u"}), "metadata.namespace"),
            (json!({"name": "a", "namespace": "sites"}), "metadata.uid"),
        ] {
            let err = object_meta(&SiteBuilder::new("a").metadata(meta).build(), "a").unwrap_err();
            assert!(
                matches!(err, Error::MissingMetadata { field: f } if f == field),
                "{err:?}"
            );
            assert!(err.to_string().contains(field));
        }
    }
}
