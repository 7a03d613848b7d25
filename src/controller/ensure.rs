//! Writing owned objects only when they differ from what is stored.
//!
//! A real API server fills in many defaults (and may canonicalise values), so comparing the
//! rendered object with the stored one field by field would see differences that are not there.
//! Instead every written object carries the SHA-256 of its rendered form in the annotation
//! [`DESIRED_HASH_ANNOTATION`]: the object is up to date when that hash, its owner references
//! and its labels match the rendering. Writes are server-side applies with the operator's field
//! manager, so the API server's defaults and other managers' fields are left alone.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Annotation holding the hash of the rendered object.
pub const DESIRED_HASH_ANNOTATION: &str = "sites.ecmwf.int/desired-hash";
/// The field manager of every write.
pub const FIELD_MANAGER: &str = "sites-operator";

/// Hex SHA-256 of the object's JSON (with the hash annotation itself left out).
pub fn desired_hash<K: Serialize>(obj: &K) -> String {
    let mut value = serde_json::to_value(obj).unwrap_or_default();
    if let Some(meta) = value
        .pointer_mut("/metadata")
        .and_then(|m| m.as_object_mut())
    {
        let empty = match meta.get_mut("annotations").and_then(|a| a.as_object_mut()) {
            Some(a) => {
                a.remove(DESIRED_HASH_ANNOTATION);
                a.is_empty()
            }
            None => false,
        };
        if empty {
            meta.remove("annotations");
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, value.to_string().as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Puts the hash annotation on a rendered object.
pub fn stamp<K: Serialize + Resource>(obj: &mut K) {
    let hash = desired_hash(obj);
    obj.annotations_mut()
        .insert(DESIRED_HASH_ANNOTATION.to_string(), hash);
}

fn owners_match(stored: &[OwnerReference], desired: &[OwnerReference]) -> bool {
    stored.len() == desired.len()
        && desired.iter().all(|d| {
            stored.iter().any(|s| {
                s.uid == d.uid
                    && s.api_version == d.api_version
                    && s.kind == d.kind
                    && s.name == d.name
                    && s.controller == d.controller
            })
        })
}

/// Whether `stored` already is the stamped `desired`: same hash, exactly the desired owner
/// references (LIFE-12), and the desired labels.
pub fn up_to_date<K: Resource>(stored: &K, desired: &K) -> bool {
    let hash = |o: &K| o.annotations().get(DESIRED_HASH_ANNOTATION).cloned();
    hash(stored).is_some()
        && hash(stored) == hash(desired)
        && owners_match(stored.owner_references(), desired.owner_references())
        && desired
            .labels()
            .iter()
            .all(|(k, v)| stored.labels().get(k) == Some(v))
}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Nothing: the stored object is up to date.
    Unchanged,
    /// The object did not exist and was created.
    Created,
    /// The object existed and was updated.
    Updated,
}

/// Makes the stored object match `desired` (already stamped), writing only when needed.
/// `stored` is the cached copy (None: not in the cache, so probably missing).
pub async fn ensure<K>(
    api: &Api<K>,
    stored: Option<&K>,
    desired: &K,
) -> Result<(Written, Option<K>), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    if let Some(s) = stored
        && up_to_date(s, desired)
    {
        return Ok((Written::Unchanged, None));
    }
    let name = desired.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api.patch(&name, &params, &Patch::Apply(desired)).await?;
    // Server-side apply keeps owner references other managers set; the Site must be the only
    // owner, so replace the list when it still differs.
    let written = if owners_match(written.owner_references(), desired.owner_references()) {
        written
    } else {
        let patch =
            serde_json::json!({"metadata": {"ownerReferences": desired.owner_references()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?
    };
    let how = if stored.is_some() {
        Written::Updated
    } else {
        Written::Created
    };
    Ok((how, Some(written)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn cm(data: &str, owner_uid: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "labels": {"sites.ecmwf.int/id": "a"},
                         "ownerReferences": [{"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "a", "uid": owner_uid, "controller": true}]},
            "data": {"k": data}
        }))
        .unwrap()
    }

    #[test]
    fn hash_ignores_itself_and_changes_with_content() {
        let mut a = cm("1", "u");
        let h = desired_hash(&a);
        stamp(&mut a);
        assert_eq!(
            desired_hash(&a),
            h,
            "the annotation is not part of the hash"
        );
        assert_ne!(desired_hash(&cm("2", "u")), h);
    }

    #[test]
    fn up_to_date_needs_hash_owners_and_labels() {
        let mut desired = cm("1", "u");
        stamp(&mut desired);
        // The stored copy has server-added fields and extra labels: still up to date.
        let mut stored = desired.clone();
        stored.metadata.resource_version = Some("7".into());
        stored.metadata.uid = Some("x".into());
        stored.labels_mut().insert("extra".into(), "yes".into());
        assert!(up_to_date(&stored, &desired));
        // No hash (an object written by someone else): not up to date.
        let mut foreign = stored.clone();
        foreign.annotations_mut().clear();
        assert!(!up_to_date(&foreign, &desired));
        // A second owner, or another Site uid (a restored Site): not up to date (LIFE-12).
        let mut two = stored.clone();
        two.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "b".into(),
                uid: "b".into(),
                ..Default::default()
            });
        assert!(!up_to_date(&two, &desired));
        let mut restored = desired.clone();
        restored.metadata.owner_references.as_mut().unwrap()[0].uid = "old".into();
        assert!(!up_to_date(&restored, &desired));
        // A label removed by hand: not up to date.
        let mut unlabelled = stored.clone();
        unlabelled.labels_mut().remove("sites.ecmwf.int/id");
        assert!(!up_to_date(&unlabelled, &desired));
        // Changed content: new hash.
        let mut newer = cm("2", "u");
        stamp(&mut newer);
        assert!(!up_to_date(&stored, &newer));
    }
}
