//! Who controls an existing object ([`control`]): the operator writes only what its Site
//! controls (SPEC 4.6). An object is the Site's by its controller owner reference; the site
//! labels alone never make it so, and the other writers of its fields ([`other_writers`]) tell
//! an edit from the operator's own apply.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::crd::{ID_LABEL, Site};
use crate::labels::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::write::FIELD_MANAGER;

/// Who controls an existing object, as far as one Site is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// Its controller owner reference is this Site (same uid), or it has no controller, carries
    /// the operator's labels for this site and no other manager has fields in it: the Site may
    /// write it.
    ThisSite,
    /// It is controlled by a deleted Site of the same name (another uid): garbage collection
    /// removes it; the Site waits.
    PreviousSite,
    /// Anything else: controlled by another Site or object, or by nothing. It is left alone.
    Other {
        /// `controlled by Site a`, `controlled by Deployment x`, `not controlled by any Site`,
        /// `not controlled by any Site, and kubectl-create manages fields of it`.
        controller: String,
    },
}

/// An object's uid, compared whole: a UUID (what the API server assigns) as its 128 bits,
/// anything else as its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uid {
    /// The UUID's bytes (an array, not a `u128`: no 16-byte alignment in the records).
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Uid {
    pub fn of(uid: &str) -> Uid {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        match uuid::Uuid::try_parse(uid) {
            // Only the form that prints back as the same text: uids are compared as strings.
            Ok(u) if u.hyphenated().encode_lower(&mut buf) == uid => Uid::Uuid(u.into_bytes()),
            _ => Uid::Text(uid.into()),
        }
    }
}

/// What decides who controls an object: its controller owner reference, whether it carries
/// the operator's labels for a site, and who else manages its fields. Cached objects keep this
/// much of their metadata ([`crate::controller::cache::kept::Facts`]).
#[derive(Clone, Debug)]
pub struct Ownership<'a> {
    pub controller: Option<ControllerRef<'a>>,
    /// `app.kubernetes.io/managed-by` is the operator.
    pub managed: bool,
    /// The site id label.
    pub site_id: Option<&'a str>,
    /// A writer other than the operator's server-side apply ([`FIELD_MANAGER`], operation
    /// `Apply`) with fields of the object itself (not of a subresource such as its status), if
    /// any: the first in its `managedFields` ([`other_manager`]).
    pub other_manager: Option<std::borrow::Cow<'a, str>>,
}

/// An object's controller owner reference, as far as [`control_of`] reads it.
#[derive(Clone, Debug)]
pub struct ControllerRef<'a> {
    /// A Site of this API group.
    pub site: bool,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: Uid,
}

impl<'a> ControllerRef<'a> {
    pub fn of(owner: &'a OwnerReference) -> ControllerRef<'a> {
        ControllerRef {
            site: owner.kind == Site::kind(&())
                && owner.api_version.split('/').next() == Some(Site::group(&()).as_ref()),
            kind: &owner.kind,
            name: &owner.name,
            uid: Uid::of(&owner.uid),
        }
    }
}

impl<'a> Ownership<'a> {
    pub fn of(meta: &'a ObjectMeta) -> Ownership<'a> {
        let label = |key: &str| meta.labels.as_ref()?.get(key).map(String::as_str);
        Ownership {
            controller: meta
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(ControllerRef::of),
            managed: label(MANAGED_BY_LABEL) == Some(MANAGED_BY),
            site_id: label(ID_LABEL),
            other_manager: other_manager(meta),
        }
    }
}

/// The first writer of the object itself (no subresource) that is not the operator: any
/// `managedFields` entry but the operator's server-side apply (manager [`FIELD_MANAGER`],
/// operation `Apply`). The operator creates and writes owned objects by server-side apply
/// (`apply::apply`), so an entry of its name with another operation is a client that chose
/// the name (`--field-manager=sites-operator`): it is named with its operation. An entry
/// without a manager is another writer too.
///
/// A writer that keeps only the cluster's own bookkeeping ([`keeps_only_bookkeeping`]: a
/// status before Kubernetes 1.22, a claim's binding) is not one: it put nothing of its own in
/// what the operator renders.
pub fn other_manager(meta: &ObjectMeta) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    other_writers(meta)
        .find(|e| !keeps_only_bookkeeping(e))
        .map(|e| match e.manager.as_deref().filter(|m| !m.is_empty()) {
            Some(FIELD_MANAGER) => Cow::Owned(format!(
                "{FIELD_MANAGER} ({})",
                e.operation.as_deref().unwrap_or("no operation")
            )),
            Some(m) => Cow::Borrowed(m),
            None => Cow::Borrowed("an unnamed field manager"),
        })
}

/// The `managedFields` entries of writers of the object itself (no subresource) other than the
/// operator's server-side apply ([`is_operators_apply`]), in the object's order.
pub fn other_writers(
    meta: &ObjectMeta,
) -> impl Iterator<Item = &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|e| !is_operators_apply(e))
}

/// Annotations the PersistentVolume controller keeps on a claim it binds or provisions for.
const BINDING_ANNOTATIONS: [&str; 3] = [
    "pv.kubernetes.io/",
    "volume.beta.kubernetes.io/",
    "volume.kubernetes.io/",
];

/// Whether a `managedFields` entry holds nothing but what the cluster's controllers keep on
/// any object of the kind and the operator never renders: its status (before Kubernetes 1.22 a
/// status update is an entry without a subresource, its fields under `f:status`) and a
/// claim's binding (`spec.volumeName` and the PersistentVolume controller's annotations). On
/// a 1.20 cluster every StatefulSet and bound claim has such an entry of
/// kube-controller-manager. An entry without fields is not: nothing says what it wrote.
pub fn keeps_only_bookkeeping(
    entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> bool {
    let Some(fields) = entry.fields_v1.as_ref().and_then(|f| f.0.as_object()) else {
        return false;
    };
    let only = |node: &serde_json::Value, allowed: &dyn Fn(&str, &serde_json::Value) -> bool| {
        node.as_object()
            .is_some_and(|m| m.iter().all(|(k, v)| allowed(k, v)))
    };
    let binding_annotation = |key: &str, _: &serde_json::Value| {
        key == "."
            || key
                .strip_prefix("f:")
                .is_some_and(|k| BINDING_ANNOTATIONS.iter().any(|p| k.starts_with(p)))
    };
    !fields.is_empty()
        && fields.iter().all(|(key, node)| match key.as_str() {
            "f:status" => true,
            "f:spec" => only(node, &|k, _| k == "f:volumeName"),
            "f:metadata" => only(node, &|k, v| {
                k == "f:annotations" && only(v, &binding_annotation)
            }),
            _ => false,
        })
}

/// Whether a `managedFields` entry is the operator's server-side apply.
pub fn is_operators_apply(
    entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> bool {
    entry.manager.as_deref() == Some(FIELD_MANAGER) && entry.operation.as_deref() == Some("Apply")
}

/// Who controls the object with this metadata, for `site` ([`control_of`]).
pub fn control(meta: &ObjectMeta, site: &Site) -> Control {
    control_of(&Ownership::of(meta), site)
}

/// Whether `controller` is `site` itself: a Site of this group with its uid.
fn is_site(controller: &ControllerRef<'_>, site: &Site) -> bool {
    controller.site
        && site
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| Uid::of(uid) == controller.uid)
}

/// Who controls an object, for `site`. An object without a controller that carries the
/// operator's labels for this site, and whose fields no one but the operator manages (but for
/// the cluster's bookkeeping, [`keeps_only_bookkeeping`]), is the Site's own, its owner
/// reference removed by hand or orphaned by deleting an earlier Site of the name with
/// `--cascade=orphan`: it is the Site's to restore. Never by the
/// labels alone: anyone who may create the kind can put them on an object of their own (a
/// ConfigMap `<id>` with `LD_PRELOAD` for the site's containers), and whoever wrote it
/// manages its fields.
pub fn control_of(ownership: &Ownership<'_>, site: &Site) -> Control {
    let Some(controller) = &ownership.controller else {
        let labelled = ownership.managed
            && ownership.site_id.is_some()
            && ownership.site_id == site.metadata.name.as_deref();
        return match (labelled, ownership.other_manager.as_deref()) {
            (true, None) => Control::ThisSite,
            (true, Some(manager)) => Control::Other {
                controller: format!(
                    "not controlled by any Site, and {manager} manages fields of it"
                ),
            },
            (false, _) => Control::Other {
                controller: "not controlled by any Site".into(),
            },
        };
    };
    if is_site(controller, site) {
        Control::ThisSite
    } else if controller.site && site.metadata.name.as_deref() == Some(controller.name) {
        Control::PreviousSite
    } else {
        Control::Other {
            controller: format!("controlled by {} {}", controller.kind, controller.name),
        }
    }
}

/// Whether the object's controller owner reference is `site` itself (by uid). Secret material is
/// only ever kept from such an object: one that [`control_of`] takes as the Site's because it
/// carries the operator's labels but has no controller may have been planted (anyone with
/// `create` on Secrets could choose a new Site's tokens), so it is restored with new tokens.
pub fn controlled_by(ownership: &Ownership<'_>, site: &Site) -> bool {
    ownership
        .controller
        .as_ref()
        .is_some_and(|c| is_site(c, site))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;
    use crate::labels::{labels, owned_names};
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn who_controls_an_object() {
        let site = SiteBuilder::new("a").uid("uid-a").build();
        let owner = |kind: &str, api: &str, name: &str, uid: &str, controller: Option<bool>| {
            OwnerReference {
                api_version: api.into(),
                kind: kind.into(),
                name: name.into(),
                uid: uid.into(),
                controller,
                block_owner_deletion: None,
            }
        };
        let other = |c: &str| Control::Other {
            controller: c.into(),
        };
        let site_ref =
            |name: &str, uid: &str| owner("Site", "sites.ecmwf.int/v1", name, uid, Some(true));
        let cases = vec![
            ("this Site", vec![site_ref("a", "uid-a")], Control::ThisSite),
            (
                "a deleted Site of the same name",
                vec![site_ref("a", "uid-old")],
                Control::PreviousSite,
            ),
            (
                "another Site",
                vec![site_ref("a-files", "uid-b")],
                other("controlled by Site a-files"),
            ),
            ("no owner", vec![], other("not controlled by any Site")),
            (
                "this Site, but not as controller",
                vec![owner("Site", "sites.ecmwf.int/v1", "a", "uid-a", None)],
                other("not controlled by any Site"),
            ),
            (
                "another kind",
                vec![owner("Deployment", "apps/v1", "x", "uid-x", Some(true))],
                other("controlled by Deployment x"),
            ),
            (
                "a Site of another group",
                vec![owner("Site", "example.org/v1", "a", "uid-a", Some(true))],
                other("controlled by Site a"),
            ),
            (
                "a second, non-controller owner",
                vec![
                    owner("ConfigMap", "v1", "c", "uid-c", None),
                    site_ref("a", "uid-a"),
                ],
                Control::ThisSite,
            ),
        ];
        for (case, owners, want) in cases {
            let meta = ObjectMeta {
                owner_references: Some(owners),
                ..Default::default()
            };
            assert_eq!(control(&meta, &site), want, "{case}");
        }
        // No controller, but the operator's labels for this site: its owner reference was
        // removed by hand; with another site's id label, or without the managed-by label, it is
        // not this Site's.
        let labelled = |labels: BTreeMap<String, String>| ObjectMeta {
            labels: Some(labels),
            ..Default::default()
        };
        assert_eq!(control(&labelled(labels("a")), &site), Control::ThisSite);
        assert_eq!(
            control(&labelled(labels("b")), &site),
            other("not controlled by any Site")
        );
        let mut unmanaged = labels("a");
        unmanaged.remove("app.kubernetes.io/managed-by");
        assert_eq!(
            control(&labelled(unmanaged), &site),
            other("not controlled by any Site")
        );
        assert_eq!(owned_names("a"), ["a", "a-oauth2", "a-files"]);
    }

    /// Without a controller, the operator's labels make an object the Site's only when no one
    /// but the operator's server-side apply manages its fields (a status written by a
    /// controller, or a claim's binding, does not count): whatever name a writer gives itself,
    /// only the operation the operator never uses tells it apart, and an entry without a name
    /// is a writer too.
    #[test]
    fn labels_alone_never_make_an_object_the_sites() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let site = SiteBuilder::new("a").uid("uid-a").build();
        let entry = |manager: Option<&str>, operation: &str, subresource: Option<&str>| {
            ManagedFieldsEntry {
                manager: manager.map(Into::into),
                operation: Some(operation.into()),
                subresource: subresource.map(Into::into),
                ..Default::default()
            }
        };
        let with_fields = |mut e: ManagedFieldsEntry, fields: serde_json::Value| {
            e.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                fields,
            ));
            e
        };
        let op = Some(FIELD_MANAGER);
        // (case, managedFields, the other manager named)
        let cases = vec![
            (
                "written by the operator's apply only",
                vec![entry(op, "Apply", None)],
                None,
            ),
            ("no managed fields", vec![], None),
            (
                "a status by a controller",
                vec![
                    entry(op, "Apply", None),
                    entry(Some("kube-controller-manager"), "Update", Some("status")),
                ],
                None,
            ),
            (
                "created by kubectl",
                vec![entry(Some("kubectl-create"), "Update", None)],
                Some("kubectl-create"),
            ),
            (
                "a key added by someone else",
                vec![
                    entry(op, "Apply", None),
                    entry(Some("kubectl-edit"), "Update", None),
                ],
                Some("kubectl-edit"),
            ),
            (
                "created with --field-manager=sites-operator",
                vec![entry(op, "Update", None)],
                Some("sites-operator (Update)"),
            ),
            (
                "applied by the operator, then updated under its name",
                vec![entry(op, "Apply", None), entry(op, "Update", None)],
                Some("sites-operator (Update)"),
            ),
            (
                "applied by another manager",
                vec![entry(Some("kubectl"), "Apply", None)],
                Some("kubectl"),
            ),
            (
                "a writer without a name",
                vec![entry(None, "Update", None)],
                Some("an unnamed field manager"),
            ),
            // Kubernetes before 1.22: a status update is an entry without a subresource.
            (
                "a status by a controller, before 1.22",
                vec![
                    entry(op, "Apply", None),
                    with_fields(
                        entry(Some("kube-controller-manager"), "Update", None),
                        json!({"f:status": {"f:replicas": {}, "f:readyReplicas": {}}}),
                    ),
                ],
                None,
            ),
            (
                "a claim bound by the PersistentVolume controller",
                vec![
                    entry(op, "Apply", None),
                    with_fields(
                        entry(Some("kube-controller-manager"), "Update", None),
                        json!({
                            "f:metadata": {"f:annotations": {
                                ".": {},
                                "f:pv.kubernetes.io/bind-completed": {},
                                "f:pv.kubernetes.io/bound-by-controller": {},
                                "f:volume.beta.kubernetes.io/storage-provisioner": {},
                            }},
                            "f:spec": {"f:volumeName": {}},
                            "f:status": {"f:phase": {}},
                        }),
                    ),
                ],
                None,
            ),
            (
                "a controller's entry with a label of its own",
                vec![with_fields(
                    entry(Some("kube-controller-manager"), "Update", None),
                    json!({"f:metadata": {"f:labels": {"f:x": {}}}, "f:status": {}}),
                )],
                Some("kube-controller-manager"),
            ),
            (
                "an annotation of another prefix",
                vec![with_fields(
                    entry(Some("kubectl-annotate"), "Update", None),
                    json!({"f:metadata": {"f:annotations": {"f:example.org/x": {}}}}),
                )],
                Some("kubectl-annotate"),
            ),
            (
                "a spec field beside the volume",
                vec![with_fields(
                    entry(Some("kubectl-edit"), "Update", None),
                    json!({"f:spec": {"f:volumeName": {}, "f:resources": {}}}),
                )],
                Some("kubectl-edit"),
            ),
            (
                "an entry with no fields",
                vec![with_fields(entry(Some("x"), "Update", None), json!({}))],
                Some("x"),
            ),
        ];
        for (case, entries, other) in cases {
            let meta = ObjectMeta {
                labels: Some(labels("a")),
                managed_fields: Some(entries),
                ..Default::default()
            };
            let want = match other {
                None => Control::ThisSite,
                Some(m) => Control::Other {
                    controller: format!("not controlled by any Site, and {m} manages fields of it"),
                },
            };
            assert_eq!(control(&meta, &site), want, "{case}");
        }
    }

    /// Uids are compared whole: a UUID as its 128 bits, any other text as text; a UUID in
    /// another spelling is another uid, as the API server compares them.
    #[test]
    fn uids_are_compared_whole() {
        let u = "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10";
        assert_eq!(Uid::of(u), Uid::of(u));
        assert!(matches!(Uid::of(u), Uid::Uuid(_)));
        for other in [
            "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f11",
            "0B4D6F2E-1C1A-4F55-9A52-7D4C2A8E9F10",
            "0b4d6f2e1c1a4f559a527d4c2a8e9f10",
            "uid-a",
        ] {
            assert_ne!(Uid::of(u), Uid::of(other), "{other}");
        }
        assert_eq!(Uid::of("uid-a"), Uid::Text("uid-a".into()));
        let site = SiteBuilder::new("a").uid(u).build();
        let meta = |uid: &str| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: "sites.ecmwf.int/v1".into(),
                kind: "Site".into(),
                name: "a".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        };
        assert_eq!(control(&meta(u), &site), Control::ThisSite);
        assert_eq!(
            control(&meta(&u.to_uppercase()), &site),
            Control::PreviousSite
        );
    }
}
