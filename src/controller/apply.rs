//! Every write the reconciler makes to the cluster: owned objects (server-side apply, only when
//! they differ from what is stored), deletions, the Site status, PersistentVolume patches, pod
//! deletions of a stalled rollout, and Events. Nothing else in the controller writes.
//!
//! A real API server fills in many defaults (and may canonicalise values), so comparing the
//! rendered object with the stored one field by field would see differences that are not there.
//! Instead every written object carries the SHA-256 of its rendered form in the annotation
//! [`DESIRED_HASH_ANNOTATION`]: the object is up to date when that hash, its owner references
//! and its labels match the rendering. Writes are server-side applies with the operator's field
//! manager, so the API server's defaults and other managers' fields are left alone.

use std::collections::HashMap;
use std::fmt::Debug;
use std::num::NonZeroU32;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::controller::events::{Event, EventType};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::context::Context;
use crate::controller::slim::{self, Keep, Kept, Managed};
use crate::crd::{ID_LABEL, Site, SiteStatus};
use crate::render::volume;
use crate::watched::{Pod, Volume};
use crate::{Error, Result, Target, reasons};

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

/// What [`apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Nothing: the stored object is up to date.
    Unchanged,
    /// Nothing: the operator's last write was this very object, and the cache has not shown it
    /// yet (the reconcile looks again once it has: [`PENDING`]).
    Awaiting,
    /// The object did not exist and was created.
    Created,
    /// The object existed and was updated.
    Updated,
}

/// The fingerprints ([`slim::fingerprint`]) of the managed content of the owned objects as the
/// API server returned them after the operator's last write (or, after a restart, as first seen):
/// a watch event showing another fingerprint is drift, repaired by the next apply. One short
/// record per object (keyed by its kind and name, hashed), not the objects.
#[derive(Default)]
pub struct Fingerprints(Mutex<HashMap<u64, Print>>);

/// What the operator last wrote of one object, and which version the watch showed last (40
/// bytes: one is kept for every owned object).
struct Print {
    fingerprint: u64,
    /// The desired hash (hashed) of the operator's last write.
    wrote: u64,
    /// The versions ([`short`]) of the last [`SEEN`] watch events, newest first: the event of
    /// the operator's own write may come before the write's response, and other writers' events
    /// (the StatefulSet controller's status) may follow it before that response is read.
    seen: [u32; SEEN],
    /// The version the operator's last write returned, and when ([`tick`]), until the watch
    /// shows it: before that the cache may still hold an older version (events of other writers
    /// queued in between), which is not drift: it was repaired by that write.
    pending: Option<(u32, NonZeroU32)>,
}

/// How many of an object's latest watch events are remembered.
const SEEN: usize = 4;

/// How long the cache may take to show the operator's own write before older versions count
/// as drift again (a watch that lost the event relists within this time).
pub const PENDING: Duration = Duration::from_secs(10);

/// A [`version`] as a [`Print`] keeps it: 32 bits of its hash. Two versions taken for one by
/// chance (one in four billion) cost at most a write.
fn short(version: u64) -> u32 {
    (version ^ (version >> 32)) as u32
}

/// Tenths of a second since the first call (monotonic; never 0, so that `Option` costs nothing).
fn tick() -> NonZeroU32 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let tenths = EPOCH.get_or_init(Instant::now).elapsed().as_millis() / 100;
    u32::try_from(tenths + 1)
        .ok()
        .and_then(NonZeroU32::new)
        .unwrap_or(NonZeroU32::MAX)
}

/// [`PENDING`] in [`tick`]s.
const PENDING_TICKS: u32 = (PENDING.as_millis() / 100) as u32;

/// A resourceVersion, compared for equality only (it is opaque), as a number.
pub(crate) fn version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    crate::labels::hashed(&meta.resource_version)
}

/// The desired hash an object carries (0: none).
fn desired_of<K: Resource>(obj: &K) -> u64 {
    slim::desired_of(obj.meta()).unwrap_or_default()
}

impl Fingerprints {
    fn key<K: Resource>(name: &str) -> u64
    where
        K::DynamicType: Default,
    {
        crate::labels::hashed(&(K::kind(&K::DynamicType::default()), name))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Print>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the observed content of the cached copy `stored` differs from what the operator
    /// wrote (asked once the cache has caught up with that write: [`Fingerprints::pending`]).
    fn drifted<K: Keep>(&self, stored: &Kept<K>) -> bool {
        let key = Self::key::<K>(stored.name());
        self.lock()
            .get(&key)
            .is_some_and(|print| print.fingerprint != stored.facts.fingerprint)
    }

    /// Whether the operator wrote or saw the object `name` of kind `K` (it has a record).
    pub(crate) fn known<K: Resource>(&self, name: &str) -> bool
    where
        K::DynamicType: Default,
    {
        self.lock().contains_key(&Self::key::<K>(name))
    }

    /// While the cache has not shown the operator's last write of `desired`'s object (at most
    /// [`PENDING`]), the cached copy is older than that write and says nothing: Some(true) when
    /// that write was `desired` itself (nothing to write), Some(false) when the rendering has
    /// changed since (write). None: the cache has caught up; compare with it.
    fn pending<K: Resource>(&self, desired: &K) -> Option<bool>
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(&desired.name_any());
        let mut known = self.lock();
        let print = known.get_mut(&key)?;
        let (_, at) = print.pending?;
        if tick().get().saturating_sub(at.get()) >= PENDING_TICKS {
            print.pending = None;
            return None;
        }
        Some(print.wrote == desired_of(desired))
    }

    /// A watch event: `obj` as the cache keeps it (with its observed fingerprint) and the
    /// [`version`] it had. An object first seen (after a restart, or made by someone else) is
    /// taken as written; once the event shows the operator's last write, the cache has caught up
    /// with it.
    pub fn observe<K: Keep>(&self, obj: &Kept<K>, seen: u64) {
        let seen = short(seen);
        // Only the operator's own objects can drift; others get no record.
        if !obj.facts.managed() {
            return;
        }
        let key = Self::key::<K>(obj.name());
        let mut known = self.lock();
        match known.get_mut(&key) {
            Some(print) => {
                print.seen.copy_within(..SEEN - 1, 1);
                print.seen[0] = seen;
                if print.pending.is_some_and(|(v, _)| v == seen) {
                    print.pending = None;
                }
            }
            None => {
                known.insert(
                    key,
                    Print {
                        fingerprint: obj.facts.fingerprint,
                        wrote: obj.facts.desired().unwrap_or_default(),
                        seen: std::array::from_fn(|i| if i == 0 { seen } else { 0 }),
                        pending: None,
                    },
                );
            }
        }
    }

    fn written<K: Resource + Managed>(&self, obj: &K)
    where
        K::DynamicType: Default,
    {
        let key = Self::key::<K>(&obj.name_any());
        let returned = short(version(obj.meta()));
        let mut known = self.lock();
        let seen = known.get(&key).map(|p| p.seen).unwrap_or_default();
        // The watch may deliver the write (and events after it) before its response is read.
        let pending = (!seen.contains(&returned)).then(|| (returned, tick()));
        known.insert(
            key,
            Print {
                fingerprint: slim::fingerprint(obj),
                wrote: desired_of(obj),
                seen,
                pending,
            },
        );
    }

    /// Forgets a deleted object.
    pub fn forget<K: Resource>(&self, name: &str)
    where
        K::DynamicType: Default,
    {
        self.lock().remove(&Self::key::<K>(name));
    }
}

/// Makes the object match `desired` (stamped here), writing only when the cached copy `stored`
/// differs (None: not in the cache, so probably missing) or its managed content drifted from
/// what the operator wrote. Returns what the API server stored when it wrote.
pub async fn apply<K>(
    ctx: &Context,
    stored: Option<&Kept<K>>,
    mut desired: K,
) -> Result<(Written, Option<K>)>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Keep
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug,
    K::DynamicType: Default,
{
    stamp(&mut desired);
    match ctx.fingerprints.pending(&desired) {
        Some(true) => return Ok((Written::Awaiting, None)),
        Some(false) => {}
        None => {
            if let Some(s) = stored
                && s.facts.up_to_date(&desired)
            {
                if !ctx.fingerprints.drifted(s) {
                    return Ok((Written::Unchanged, None));
                }
                tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = %s.name(), "changed by someone else: restoring it");
            }
        }
    }
    let name = desired.name_any();
    let api = ctx.api::<K>();
    let failed = |source| Error::Apply {
        target: Target::of::<K>(&name),
        source: Box::new(source),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&name, &params, &Patch::Apply(&desired))
        .await
        .map_err(failed)?;
    // Server-side apply keeps owner references other managers set; the Site must be the only
    // owner, so replace the list when it still differs.
    let written = if slim::owners_print(written.owner_references())
        == slim::owners_print(desired.owner_references())
    {
        written
    } else {
        let patch =
            serde_json::json!({"metadata": {"ownerReferences": desired.owner_references()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(failed)?
    };
    let how = if stored.is_some() {
        Written::Updated
    } else {
        Written::Created
    };
    ctx.fingerprints.written(&written);
    tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = %name, written = ?how, "wrote object");
    Ok((how, Some(written)))
}

/// Delete parameters that make the delete conditional on the object's `uid`: an object replaced
/// under the same name since it was judged (by someone else, possibly not the Site's) is not
/// deleted; the API server answers 409 and the next reconcile judges the new one.
pub fn delete_params(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Deletes the object `name` whose uid is `uid` (already gone: done).
pub async fn delete<K>(ctx: &Context, name: &str, uid: Option<String>) -> Result<(), kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    match ctx.api::<K>().delete(name, &delete_params(uid)).await {
        Ok(_) => {
            tracing::info!(kind = %K::kind(&K::DynamicType::default()), object = name, "deleted");
            ctx.fingerprints.forget::<K>(name);
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            ctx.fingerprints.forget::<K>(name);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Stores `new` as the Site's status (a merge patch of the status subresource that clears what
/// `new` does not have).
pub async fn patch_status(ctx: &Context, site: &Site, new: &SiteStatus) -> Result<()> {
    let name = site.name_any();
    let mut body = serde_json::to_value(new).unwrap_or_default();
    if let Some(obj) = body.as_object_mut() {
        // A merge patch leaves absent fields alone: clear what the new status does not have.
        for key in [
            "phase",
            "problems",
            "all_steps_started",
            "observedGeneration",
            "conditions",
            "images",
        ] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
        // A map is merged key by key: clear the images of applications the Site no longer has.
        if let (Some(images), Some(previous)) = (
            obj.get_mut("images")
                .and_then(serde_json::Value::as_object_mut),
            site.status.as_ref(),
        ) {
            for name in previous.images.keys() {
                images
                    .entry(name.clone())
                    .or_insert(serde_json::Value::Null);
            }
        }
    }
    ctx.api::<Site>()
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": body})),
        )
        .await
        .map_err(|source| Error::PatchStatus {
            name,
            source: Box::new(source),
        })?;
    Ok(())
}

/// Pre-binds the retained volume `pv` to the site's new claim (LIFE-01 step 4).
pub async fn rebind_volume(ctx: &Context, site: &Site, pv: &Volume) -> Result<()> {
    let id = site.name_any();
    let name = pv.name_any();
    let api: Api<Volume> = Api::all(ctx.client.clone());
    let patch = volume::rebind_patch(
        &id,
        &ctx.namespace,
        &id,
        pv.metadata.resource_version.as_deref(),
    );
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::PatchVolume {
            target: Target::of::<Volume>(&name),
            source: Box::new(source),
        })?;
    tracing::info!(site = %id, volume = %name, "re-binding a retained volume");
    publish(
        ctx,
        site,
        EventType::Normal,
        reasons::VOLUME_REATTACHED,
        format!("re-binding retained volume {name}"),
    )
    .await;
    Ok(())
}

/// Labels `volume` with the site labels of `id` unless it already has them. Errors are logged:
/// the label only helps a later re-creation find the volume.
pub async fn label_volume(client: &kube::Client, volume: &str, id: &str) {
    let api: Api<Volume> = Api::all(client.clone());
    match api.get_opt(volume).await {
        Ok(Some(pv)) if pv.labels().get(ID_LABEL).map(String::as_str) == Some(id) => {}
        Ok(Some(_)) => {
            if let Err(e) = api
                .patch(
                    volume,
                    &PatchParams::default(),
                    &Patch::Merge(&volume::label_patch(id)),
                )
                .await
            {
                tracing::warn!(site = %id, volume = %volume, error = %e, "cannot label the site volume");
            }
        }
        Ok(None) => {
            tracing::info!(site = %id, volume = %volume, "volume not found; not labelled")
        }
        Err(e) => {
            tracing::warn!(site = %id, volume = %volume, error = %e, "cannot read the site volume")
        }
    }
}

/// LIFE-15: after a StatefulSet update, pods that are not Running and Ready and not terminating
/// are deleted so the controller recreates them from the new template. Errors are logged only.
pub async fn delete_not_ready_pods(ctx: &Context, id: &str) {
    let api: Api<Pod> = ctx.api();
    let pods = ctx.caches.pods_by_site.get(&ctx.caches.pods, id);
    for pod in pods {
        if pod.ready || pod.terminating {
            continue;
        }
        let name = &pod.name;
        // Only the pod judged not ready: one replaced since (by the StatefulSet controller) is
        // a 409 and left alone.
        let uid = pod.uid.map(|u| uuid::Uuid::from_u128(u).to_string());
        match api.delete(name, &delete_params(uid)).await {
            Ok(_) => {
                tracing::info!(site = id, pod = %name, "deleted a not-ready pod so the rollout can go on")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(kube::Error::Api(s)) if s.code == 403 => {
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
    if let Err(e) = recorder.publish(&event, &site.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Deletes are conditional on the uid of the object that was judged (SPEC 4.6): an object
    /// replaced under the same name is not deleted. A uid the cache could not keep (not a UUID)
    /// leaves the delete unconditional rather than refused.
    #[test]
    fn deletes_are_conditional_on_the_judged_uid() {
        let uid = "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10";
        let params = delete_params(Some(uid.into()));
        let preconditions = params.preconditions.expect("a precondition");
        assert_eq!(preconditions.uid.as_deref(), Some(uid));
        assert_eq!(preconditions.resource_version, None);
        assert!(delete_params(None).preconditions.is_none());
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

    fn cm(data: &str, owner_uid: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "labels": {"sites.ecmwf.int/id": "a", "app.kubernetes.io/managed-by": "sites-operator"},
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
        let up_to_date =
            |stored: &ConfigMap, desired: &ConfigMap| slim::Facts::of(stored).up_to_date(desired);
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
        // carry only the operator's label keys: slim::tests).
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

    #[test]
    fn event_notes_fit_the_limit_on_a_character_boundary() {
        assert_eq!(event_note("short".into()), "short");
        let n = event_note("é".repeat(600));
        assert!(n.len() <= 1024, "{}", n.len());
        assert!(n.ends_with("..."));
    }

    #[test]
    fn a_print_stays_small() {
        // One for every owned object: 80,000 at 10,000 Sites.
        assert_eq!(std::mem::size_of::<Print>(), 40);
        assert!(tick() <= tick(), "monotonic");
    }

    #[test]
    fn drift_is_a_fingerprint_other_than_the_written_one() {
        let prints = Fingerprints::default();
        // A watch event: the object as cached (slimmed, with its fingerprint) and its version.
        let event = |data: &str, rv: &str| {
            let mut c = cm(data, "u");
            c.metadata.resource_version = Some(rv.into());
            let v = version(&c.metadata);
            let kept = Kept::new(c);
            prints.observe(&kept, v);
            kept
        };
        // What the operator renders (and writes, with the version the API server returns).
        let rendered = |data: &str| {
            let mut c = cm(data, "u");
            stamp(&mut c);
            c
        };
        let write = |data: &str, rv: &str| {
            let mut c = rendered(data);
            c.metadata.resource_version = Some(rv.into());
            prints.written(&c);
        };
        // First seen (a restart): taken as written.
        let first = event("1", "1");
        assert_eq!(prints.pending(&rendered("1")), None);
        assert!(!prints.drifted(&first));
        assert!(prints.drifted(&event("edited", "2")), "an edit after that");
        // The operator's write repairs it; until the watch shows the write, the cache may still
        // hold versions in between (another writer's status update): they say nothing, and the
        // same rendering is not written again; another rendering is.
        write("1", "4");
        event("edited", "3");
        assert_eq!(
            prints.pending(&rendered("1")),
            Some(true),
            "older than the write"
        );
        assert_eq!(
            prints.pending(&rendered("9")),
            Some(false),
            "a new rendering"
        );
        let mine = event("1", "4");
        assert_eq!(prints.pending(&rendered("1")), None, "the write itself");
        assert!(!prints.drifted(&mine));
        assert!(
            prints.drifted(&event("edited again", "5")),
            "after the write"
        );
        // The watch may show the write before its response is read.
        let shown = event("2", "6");
        write("2", "6");
        assert_eq!(prints.pending(&rendered("2")), None);
        assert!(!prints.drifted(&shown));
        // Status and metadata other than the managed content are not drift.
        let mut relabelled = cm("2", "u");
        relabelled.labels_mut().insert("extra".into(), "x".into());
        relabelled.metadata.resource_version = Some("8".into());
        let v = version(&relabelled.metadata);
        let relabelled = Kept::new(relabelled);
        prints.observe(&relabelled, v);
        assert!(!prints.drifted(&relabelled));
        // A deleted object is forgotten: its successor is taken as written on first sight.
        prints.forget::<ConfigMap>("a");
        assert!(!prints.drifted(&event("3", "9")));
        // An object of another manager gets no record, so it never drifts.
        let mut foreign = cm("4", "u");
        foreign.labels_mut().clear();
        foreign.metadata.name = Some("foreign".into());
        let foreign = Kept::new(foreign);
        prints.observe(&foreign, 1);
        assert!(
            prints
                .lock()
                .get(&Fingerprints::key::<ConfigMap>("foreign"))
                .is_none()
        );
        // The watch may show the write and other writers' events after it (the StatefulSet
        // controller's status) before the write's response is read.
        event("5", "61");
        event("5", "62");
        let shown = event("5", "63");
        write("5", "61");
        assert_eq!(
            prints.pending(&rendered("5")),
            None,
            "shown before the response"
        );
        assert!(!prints.drifted(&shown));
        write("5", "65");
        assert_eq!(prints.pending(&rendered("5")), Some(true), "not shown yet");
        event("5", "65");
        assert_eq!(prints.pending(&rendered("5")), None, "shown");
    }
}
