//! Every write the reconciler makes to the cluster: owned objects (server-side apply, only when
//! they differ from what is stored), deletions, the Site status, PersistentVolume patches, pod
//! deletions of a stalled rollout, and Events (about Sites, and the configuration's about the
//! `sites-config` ConfigMap). The callers decide what and when; this file sends it. Nothing
//! else in the controller writes but the Lease ([`crate::controller::leader`]) and the retention
//! loop, through [`crate::retention`] (shared with the `retention` command): docs/architecture.md
//! ("Where each API write happens") lists every write, and a structure test holds it to the code.
//!
//! A real API server fills in many defaults (and may canonicalise values), so comparing the
//! rendered object with the stored one field by field would see differences that are not there.
//! Instead every written object carries the SHA-256 of its rendered form in the annotation
//! [`DESIRED_HASH_ANNOTATION`]: the object is up to date when that hash, its owner references
//! and its labels match the rendering. Writes are server-side applies with the operator's field
//! manager, so the API server's defaults and other managers' fields are left alone.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::cache::kept::{self, Kept, Managed, Owned};
use crate::controller::context::Context;
use crate::controller::events::{self, Event, EventType, Recorder, Write};
use crate::crd::{Site, SiteStatus};
use crate::error::{Verb, WriteError};
use crate::labels::DESIRED_HASH_ANNOTATION;
use crate::watched::{Pod, Volume};
use crate::write::{Deleted, Judged, Writer};
use crate::{Error, Result, Target};

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
    crate::digest::json_sha256_hex(&value)
}

/// Puts the hash annotation on a rendered object.
pub fn stamp<K: Serialize + Resource>(obj: &mut K) {
    let hash = desired_hash(obj);
    obj.annotations_mut()
        .insert(DESIRED_HASH_ANNOTATION.to_string(), hash);
}

/// What [`apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Nothing: the stored object is up to date.
    Unchanged,
    /// Nothing: the operator's last write was this very object, and the cache has not shown it
    /// yet (the reconcile looks again once it has: [`PENDING`](crate::controller::own_writes::PENDING)).
    Awaiting,
    /// The object did not exist and was created.
    Created,
    /// The object existed and was updated.
    Updated,
}

/// Makes the object match `desired` (stamped here), writing only when the cached copy `stored`
/// differs (None: not in the cache, so probably missing) or its managed content drifted from
/// what the operator wrote. Returns what the API server stored when it wrote.
///
/// What was judged is what is written (SPEC 4.6): an object judged to exist is applied, forced,
/// with its uid, which the API server holds the apply to (one deleted since is not created
/// again: 409; one deleted and created again by someone else is not taken over: 422,
/// `metadata.uid` is immutable); an object judged absent is created by an apply that is not
/// forced, so that one someone else created meanwhile is not taken over either (409 from the
/// API server, or from here when the answer shows another writer). Either answer is
/// an apply's [`Error::Write`] with that code ([`judged_again`]): the caller judges the object
/// again.
pub async fn apply<K>(
    ctx: &Context,
    stored: Option<&Kept<K>>,
    desired: &mut K,
) -> Result<(Written, Option<K>)>
where
    K: Owned,
{
    // The uid is not part of the rendering (nor of its hash): it names the object judged.
    desired.meta_mut().uid = None;
    stamp(desired);
    match ctx.own.objects.pending(desired) {
        Some(true) => return Ok((Written::Awaiting, None)),
        Some(false) => {}
        None => {
            if let Some(s) = stored
                && s.facts.up_to_date(desired)
            {
                if !ctx.own.objects.drifted(s) {
                    return Ok((Written::Unchanged, None));
                }
                tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = %s.name(), "changed by someone else: restoring it");
            }
        }
    }
    let name = desired.name_any();
    let writer = Writer::new(ctx.api::<K>());
    let written = match stored {
        Some(s) => {
            desired.meta_mut().uid = s.facts.uid();
            writer.apply(desired, true).await?
        }
        None => {
            // Created by an apply that takes nothing from anyone (not forced): an object that
            // someone else created meanwhile is not taken over. A field of theirs with another
            // value fails the apply (409); one whose fields agree, or that has others beside
            // them, is found with their entry in what the apply returns. Either is judged again.
            let written = writer.apply(desired, false).await?;
            if let Some(other) = crate::ownership::other_manager(written.meta()) {
                let message = format!("created meanwhile by another writer ({other})");
                let status = kube::core::Status::failure(&message, "Conflict").with_code(409);
                return Err(Error::Write(WriteError {
                    verb: Verb::Apply,
                    target: Target::of::<K>(&name),
                    source: Box::new(kube::Error::Api(Box::new(status))),
                }));
            }
            written
        }
    };
    // Server-side apply keeps owner references other managers set; the Site must be the only
    // owner, so replace the list when it still differs.
    let written = if kept::owners_print(written.owner_references())
        == kept::owners_print(desired.owner_references())
    {
        written
    } else {
        let patch = serde_json::json!({"metadata": {
            "ownerReferences": desired.owner_references(),
        }});
        let version = written.resource_version();
        writer.merge(&name, patch, version.as_deref()).await?
    };
    // Server-side apply leaves the keys other managers own (or no one does) in a map it merges
    // key by key; where the operator renders the whole map ([`Managed::WHOLE`]), such a key
    // would stay and reach the site's pods or route. Remove them, on the version just read.
    let written = match foreign_keys(desired, &written) {
        None => written,
        Some(patch) => {
            tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = %name, "removing keys someone else added");
            let version = written.resource_version();
            writer.merge(&name, patch, version.as_deref()).await?
        }
    };
    // What is written is the rendering in every map rendered whole, or it is not the Site's:
    // nothing it keeps is recorded as the operator's own.
    if kept::whole_print(&written) != kept::whole_print(desired) {
        return Err(Error::ObjectConflict {
            target: Target::of::<K>(&name),
            controller: "not as rendered after the operator's write (a map rendered whole keeps other content)".into(),
        });
    }
    let how = if stored.is_some() {
        Written::Updated
    } else {
        Written::Created
    };
    ctx.own.objects.answered(&written);
    tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = %name, written = ?how, "wrote object");
    Ok((how, Some(written)))
}

/// Whether [`apply`] failed because the object is not the one judged: the API server's 409
/// (created meanwhile; deleted, or changed, since it was judged) or 422 (deleted and created
/// again: the uid the apply carries is not the object's). The object is judged again.
pub fn judged_again(e: &Error) -> bool {
    matches!(e, Error::Write(w) if matches!(w.verb, Verb::Apply | Verb::Patch))
        && matches!(e.status_code(), Some(409 | 422))
}

/// A merge patch removing the keys of the maps `K` renders whole ([`Managed::WHOLE`]) that
/// `written` has and `desired` does not (None: there are none). A map the rendering does not
/// have is rendered empty: every key of it is someone else's (a ConfigMap's `binaryData`).
pub fn foreign_keys<K: Managed + Serialize>(desired: &K, written: &K) -> Option<serde_json::Value> {
    let desired = serde_json::to_value(desired).ok()?;
    let written = serde_json::to_value(written).ok()?;
    let mut patch = serde_json::Map::new();
    for whole in K::WHOLE {
        let at = |v: &serde_json::Value| {
            whole
                .path
                .iter()
                .try_fold(v, |v, key| v.get(key))
                .and_then(serde_json::Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (want, have) = (at(&desired), at(&written));
        let extra: serde_json::Map<String, serde_json::Value> = have
            .keys()
            .filter(|k| (whole.keys)(k) && !want.contains_key(*k))
            .map(|k| (k.clone(), serde_json::Value::Null))
            .collect();
        if extra.is_empty() {
            continue;
        }
        let (last, parents) = whole.path.split_last()?;
        let mut node = &mut patch;
        for key in parents {
            node = node
                .entry(key.to_string())
                .or_insert_with(|| serde_json::json!({}))
                .as_object_mut()?;
        }
        node.insert(last.to_string(), extra.into());
    }
    (!patch.is_empty()).then_some(serde_json::Value::Object(patch))
}

/// Deletes the object `name` whose uid is `uid` (already gone: done): an object replaced under
/// the same name since it was judged (by someone else, possibly not the Site's) is not deleted;
/// the API server answers 409 and the next reconcile judges the new one.
pub async fn delete<K>(ctx: &Context, name: &str, uid: Option<String>) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
    K::DynamicType: Default,
{
    let deleted = Writer::new(ctx.api::<K>())
        .delete_object(name, Judged::uid(uid))
        .await?;
    if deleted == Deleted::Now {
        tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = name, "deleted");
    }
    ctx.own.objects.forget::<K>(name);
    Ok(())
}

/// Stores `new` as the Site's status: a merge patch of the status subresource that clears what
/// `new` does not have (`status_patch`).
pub async fn patch_status(ctx: &Context, site: &Site, new: &SiteStatus) -> Result<()> {
    Writer::new(ctx.api::<Site>())
        .merge_status(&site.name_any(), &status_patch(new, site.status.as_ref()))
        .await?;
    Ok(())
}

/// The merge patch that makes the status `new` where it was `previous`. A merge patch leaves
/// absent fields alone, so every field of [`SiteStatus`] that `new` does not have is cleared
/// ([`status_fields`]); a map is merged key by key, so the images of applications the Site no
/// longer has are cleared too.
fn status_patch(new: &SiteStatus, previous: Option<&SiteStatus>) -> serde_json::Value {
    let mut body = serde_json::to_value(new).unwrap_or_default();
    if let Some(obj) = body.as_object_mut() {
        for key in status_fields() {
            obj.entry(key.as_str()).or_insert(serde_json::Value::Null);
        }
        if let (Some(images), Some(previous)) = (
            obj.get_mut("images")
                .and_then(serde_json::Value::as_object_mut),
            previous,
        ) {
            for name in previous.images.keys() {
                images
                    .entry(name.clone())
                    .or_insert(serde_json::Value::Null);
            }
        }
    }
    serde_json::json!({"status": body})
}

/// The fields of [`SiteStatus`] by their names on the wire, read once from its schema (the one
/// the CRD publishes): a field added to the status is cleared with the others, with no list of
/// names to keep.
fn status_fields() -> &'static [String] {
    static FIELDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FIELDS.get_or_init(|| {
        schemars::schema_for!(SiteStatus)
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|fields| fields.keys().cloned().collect())
            .unwrap_or_default()
    })
}

/// Merge-patches the PersistentVolume `name`, conditional on `version` when given: the two
/// writes of volume retention, the re-bind and the site labels (`volumes.rs` builds both
/// patches and decides when).
pub async fn patch_volume(
    client: &kube::Client,
    name: &str,
    patch: serde_json::Value,
    version: Option<&str>,
) -> Result<()> {
    Writer::<Volume>::new(Api::all(client.clone()))
        .merge(name, patch, version)
        .await?;
    Ok(())
}

/// LIFE-15: after a StatefulSet update, pods that are not Running and Ready and not terminating
/// are deleted so the controller recreates them from the new template. Errors are logged only.
pub async fn delete_not_ready_pods(ctx: &Context, id: &str) {
    let pods = ctx.caches.pods_by_site.get(&ctx.caches.pods, id);
    for pod in pods {
        if pod.ready || pod.terminating {
            continue;
        }
        let name = &pod.name;
        // Only the pod judged not ready: one replaced since (by the StatefulSet controller) is
        // a 409 and left alone.
        let uid = pod.uid.map(|u| uuid::Uuid::from_bytes(u).to_string());
        match delete::<Pod>(ctx, name, uid).await {
            Ok(()) => {
                tracing::info!(site = id, pod = %name, "deleted a not-ready pod so the rollout can go on")
            }
            Err(e) if e.status_code() == Some(409) => {}
            Err(e) if e.status_code() == Some(403) => {
                tracing::error!(site = id, pod = %name, "not allowed to delete pods (403): the Role must grant pods/delete")
            }
            Err(e) => {
                tracing::warn!(site = id, pod = %name, error = %e, "cannot delete a not-ready pod")
            }
        }
    }
}

/// An Event note as the API server accepts it: at most 1 KiB, cut on a character boundary
/// (a Site with many violations, a configuration with many problems).
pub fn event_note(mut text: String) -> String {
    const MAX: usize = 1024;
    if text.len() > MAX {
        let mut end = MAX - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// Records an Event about the Site (failures are logged: an Event is never worth a retry).
pub async fn publish(ctx: &Context, site: &Site, type_: EventType, reason: &str, note: String) {
    let Some(recorder) = &ctx.recorder else {
        return;
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(event_note(note)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = record_event(&ctx.client, recorder, &event, &site.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}

/// Records `ev` about `regarding` (in its namespace): a new Event, or, when `recorder` recorded
/// the same Event in the last six minutes, the first one's series counted up (a new Event when
/// that one is gone: deleted by hand, or expired).
pub async fn record_event(
    client: &kube::Client,
    recorder: &Recorder,
    ev: &Event,
    regarding: &ObjectReference,
) -> Result<(), WriteError> {
    let planned = recorder.plan(ev, regarding);
    let now = Timestamp::now();
    let writer = Writer::<K8sEvent>::new(Api::namespaced(
        client.clone(),
        regarding.namespace.as_deref().unwrap_or("default"),
    ));
    let create = || async {
        let created = writer
            .create_object(&recorder.event(ev, regarding, now))
            .await?;
        Ok::<_, WriteError>((created.metadata.name.unwrap_or_default().into(), 1))
    };
    let (name, count) = match &planned.write {
        // A repeat counts up the series of the Event recorded first, whatever else it holds.
        Write::Repeat { name, count } => {
            match writer.merge(name, events::series(*count, now), None).await {
                Ok(_) => (name.clone(), *count),
                Err(e) if e.code() == Some(404) => create().await?,
                Err(e) => return Err(e),
            }
        }
        Write::Create => create().await?,
    };
    recorder.written(planned, name, count);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Deletes are conditional on the uid of the object that was judged (SPEC 4.6; the
    /// precondition is `write::Judged::uid`'s): the uid the caches keep is the one the API server
    /// wrote. A uid the cache could not keep (not a UUID) leaves the delete unconditional
    /// rather than refused.
    #[test]
    fn deletes_are_conditional_on_the_judged_uid() {
        let uid = "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10";
        // The caches keep the uid as a number and give it back as the API server wrote it.
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "a", "uid": uid}})).unwrap();
        assert_eq!(Kept::new(cm).facts.uid().as_deref(), Some(uid));
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "a", "uid": "not-a-uuid"}}))
                .unwrap();
        assert_eq!(Kept::new(cm).facts.uid(), None);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    pub(crate) fn cm(data: &str, owner_uid: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "labels": {"sites.ecmwf.int/id": "a", "app.kubernetes.io/managed-by": "sites-operator"},
                         "ownerReferences": [{"apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "a", "uid": owner_uid, "controller": true}]},
            "data": {"k": data}
        }))
        .unwrap()
    }

    /// Keys someone else added to a map the operator renders whole are removed (the Service
    /// selector of Kubernetes before 1.27, ConfigMap and Secret data); everything else is left
    /// to server-side apply.
    #[test]
    fn foreign_keys_of_whole_maps_are_removed() {
        use k8s_openapi::api::apps::v1::StatefulSet;
        use k8s_openapi::api::core::v1::{Secret, Service};
        let svc = |selector: serde_json::Value| -> Service {
            serde_json::from_value(
                json!({"metadata": {"name": "a"}, "spec": {"selector": selector}}),
            )
            .unwrap()
        };
        let want = svc(json!({"app": "a"}));
        let cases = [
            (svc(json!({"app": "a"})), None),
            (
                svc(json!({"app": "a", "tier": "x"})),
                Some(json!({"spec": {"selector": {"tier": null}}})),
            ),
            // A changed value is server-side apply's to repair: only extra keys are removed.
            (svc(json!({"app": "b"})), None),
        ];
        for (written, patch) in cases {
            assert_eq!(foreign_keys(&want, &written), patch, "{written:?}");
        }
        let mut extra = cm("1", "u");
        extra
            .data
            .as_mut()
            .unwrap()
            .insert("LD_PRELOAD".into(), "x".into());
        assert_eq!(
            foreign_keys(&cm("1", "u"), &extra),
            Some(json!({"data": {"LD_PRELOAD": null}}))
        );
        let secret = |keys: &[&str]| -> Secret {
            let data: serde_json::Map<_, _> = keys
                .iter()
                .map(|k| (k.to_string(), json!("eA==")))
                .collect();
            serde_json::from_value(json!({"metadata": {"name": "a"}, "data": data})).unwrap()
        };
        assert_eq!(
            foreign_keys(&secret(&["a"]), &secret(&["a", "b"])),
            Some(json!({"data": {"b": null}}))
        );
        // A map of the kind's rendered whole that the rendering does not have is rendered
        // empty: a ConfigMap's `binaryData` (a file in the site pod) is the operator's too.
        let no_data: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(
            foreign_keys(&no_data, &extra),
            Some(json!({"data": {"k": null, "LD_PRELOAD": null}}))
        );
        let mut binary = cm("1", "u");
        binary.binary_data = Some(
            [(
                "evil.conf".to_string(),
                k8s_openapi::ByteString(b"x".to_vec()),
            )]
            .into(),
        );
        assert_eq!(
            foreign_keys(&cm("1", "u"), &binary),
            Some(json!({"binaryData": {"evil.conf": null}}))
        );
        // Of an Ingress's annotations, those that configure the ingress controller are rendered
        // whole; others (another tool's) are left alone.
        use k8s_openapi::api::networking::v1::Ingress;
        let ingress = |annotations: serde_json::Value| -> Ingress {
            serde_json::from_value(json!({"metadata": {"name": "a", "annotations": annotations}}))
                .unwrap()
        };
        assert_eq!(
            foreign_keys(
                &ingress(json!({"nginx.org/mergeable-ingress-type": "minion"})),
                &ingress(json!({"nginx.org/mergeable-ingress-type": "minion",
                    "nginx.org/location-snippets": "proxy_pass http://evil;",
                    "example.org/owner": "team"}))
            ),
            Some(json!({"metadata": {"annotations": {"nginx.org/location-snippets": null}}}))
        );
        // A label selector object is not a string map.
        let sts = |labels: serde_json::Value| -> StatefulSet {
            serde_json::from_value(json!({"metadata": {"name": "a"},
                "spec": {"selector": {"matchLabels": labels}, "serviceName": "a", "template": {}}}))
            .unwrap()
        };
        assert_eq!(
            foreign_keys(&sts(json!({"a": "1"})), &sts(json!({"a": "1", "b": "2"}))),
            None
        );
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
        let up_to_date =
            |stored: &ConfigMap, desired: &ConfigMap| kept::Facts::of(stored).up_to_date(desired);
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
        // A label value changed by hand: not up to date.
        let mut relabelled = stored.clone();
        relabelled
            .labels_mut()
            .insert("sites.ecmwf.int/id".into(), "b".into());
        assert!(!up_to_date(&relabelled, &desired));
        // A rendering with a label the caches do not keep is never up to date (the renderings
        // carry only the operator's label keys: kept::tests).
        let mut other_label = desired.clone();
        other_label
            .labels_mut()
            .insert("extra".into(), "yes".into());
        assert!(!up_to_date(&stored, &other_label));
        // Changed content: new hash.
        let mut newer = cm("2", "u");
        stamp(&mut newer);
        assert!(!up_to_date(&stored, &newer));
    }

    /// The status patch clears every field of `SiteStatus` the new status does not have. The
    /// status below sets every field (a field added to `SiteStatus` does not compile here until
    /// it is set), so its keys are every field's name on the wire.
    #[test]
    fn a_status_patch_clears_every_field_the_new_status_leaves_out() {
        use crate::crd::{Phase, Problem};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let every = SiteStatus {
            phase: Some(Phase::Running),
            path: Some("/docs/handbook/".into()),
            problems: vec![Problem {
                name: "nginx".into(),
                kind: "waiting".into(),
                reason: None,
                message: None,
            }],
            all_steps_started: Some(true),
            observed_generation: Some(2),
            images: [("jupyter".to_string(), "jupyter:1".to_string())].into(),
            conditions: vec![
                serde_json::from_value::<Condition>(json!({
                    "type": "Ready", "status": "True", "reason": "Available", "message": "",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"
                }))
                .unwrap(),
            ],
        };
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        assert_eq!(
            status_fields(),
            keys(&serde_json::to_value(&every).unwrap())
        );
        // An empty status clears every field, the images of the previous status included.
        let mut patch = status_patch(&SiteStatus::default(), Some(&every));
        assert_eq!(
            patch,
            json!({"status": {
                "all_steps_started": null,
                "conditions": null,
                "images": null,
                "observedGeneration": null,
                "path": null,
                "phase": null,
                "problems": null,
            }})
        );
        // A status with images clears only the images the Site no longer has.
        let mut images = SiteStatus {
            images: [("python".to_string(), "python:3".to_string())].into(),
            ..Default::default()
        };
        patch = status_patch(&images, Some(&every));
        assert_eq!(
            patch["status"]["images"],
            json!({"jupyter": null, "python": "python:3"})
        );
        // What the new status has is written as it is.
        images.phase = Some(Phase::Pending);
        patch = status_patch(&images, None);
        assert_eq!(patch["status"]["phase"], "Pending");
        assert_eq!(patch["status"]["images"], json!({"python": "python:3"}));
    }

    #[test]
    fn event_notes_fit_the_limit_on_a_character_boundary() {
        assert_eq!(event_note("short".into()), "short");
        let n = event_note("é".repeat(600));
        assert!(n.len() <= 1024, "{}", n.len());
        assert!(n.ends_with("..."));
    }
}
