//! Volume retention, in one file: the site volume across Site re-creations (LIFE-01 step 4,
//! LIFE-05, the data-recovery path of the lifecycle design). A Site recreated with the same
//! identity finds the PersistentVolume its data lives on and re-binds it; a new claim waits while
//! the previous claim's volume is still Bound; a bound volume gets its site's labels (later, so
//! that a re-creation can find it).
//!
//! - the volume index keys (by site label and by claim reference) the volume watch fills;
//! - the pure decisions over volumes (which one is retained, which one still waits for its
//!   claim) and the patches that re-bind and label a volume;
//! - the lookups the reconcile makes in the volume cache;
//! - the re-bind and the delayed label, written through [`apply::patch_volume`] (the schedule of
//!   delayed labels is [`crate::controller::labeller`]'s, below the [`Context`] that holds it).

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use crate::controller::apply;
use crate::controller::context::Context;
use crate::controller::events::EventType;
use crate::crd::{ID_LABEL, Site};
use crate::labels;
use crate::render::workload::PINNED_VOLUME_ANNOTATION;
use crate::watched::Volume;
use crate::{Error, Result, Target, reasons};

/// Index keys of a volume: `site_key` of its site label and `claim_key` of its claim
/// reference.
pub fn volume_keys(pv: &Volume) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(id) = pv.labels().get(ID_LABEL) {
        keys.push(site_key(id));
    }
    if let Some(c) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
        keys.push(claim_key(
            c.namespace.as_deref().unwrap_or_default(),
            c.name.as_deref().unwrap_or_default(),
        ));
    }
    keys
}

/// The volume index key of a site label: `id:<site id>`.
fn site_key(id: &str) -> String {
    format!("id:{id}")
}

/// The volume index key of a claim reference: `claim:<namespace>/<name>`.
fn claim_key(namespace: &str, name: &str) -> String {
    format!("claim:{namespace}/{name}")
}

fn phase(pv: &Volume) -> Option<&str> {
    pv.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn claim_ref(pv: &Volume) -> Option<(&str, &str)> {
    let c = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        c.namespace.as_deref().unwrap_or_default(),
        c.name.as_deref().unwrap_or_default(),
    ))
}

fn has_site_label(pv: &Volume, id: &str) -> bool {
    pv.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ID_LABEL))
        .is_some_and(|v| v == id)
}

/// Whether a volume is free for a claim in `namespace`: Released or Available, and its claim
/// reference names a claim of `namespace`. The site label alone does not say which namespace's
/// Site the volume served (Sites of one name in two namespaces carry the same label), so a
/// volume without a claim reference, or one of another namespace, is never reused: one
/// tenant's data never goes to another namespace's Site.
fn reusable(pv: &Volume, namespace: &str) -> bool {
    matches!(phase(pv), Some("Released") | Some("Available"))
        && claim_ref(pv).is_some_and(|(ns, _)| ns == namespace)
}

/// Whether `pv` is the volume of the claim `namespace/claim_name` whose uid is `claim_uid`:
/// its claim reference names that claim by name and uid (what the site label is put on).
fn bound_to(pv: &Volume, namespace: &str, claim_name: &str, claim_uid: &str) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|c| {
            c.namespace.as_deref() == Some(namespace)
                && c.name.as_deref() == Some(claim_name)
                && c.uid.as_deref() == Some(claim_uid)
        })
}

/// Finds a retained volume for the site's claim `<id>`, before the claim is created: first a
/// reusable volume labelled with the site id, then a volume Released from the site's own claim
/// (`namespace/<id>`). Nothing else: a volume released from a claim of another name holds
/// someone else's data (SPEC 4.6). Ties go to the volume that sorts first by name, so the choice
/// is stable.
fn find_retained_volume<'a>(
    volumes: impl IntoIterator<Item = &'a Volume>,
    id: &str,
    namespace: &str,
) -> Option<&'a Volume> {
    let mut candidates: Vec<&Volume> = volumes
        .into_iter()
        .filter(|pv| reusable(pv, namespace))
        .collect();
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates
        .iter()
        .find(|pv| has_site_label(pv, id))
        .or_else(|| {
            candidates
                .iter()
                .find(|pv| phase(pv) == Some("Released") && claim_ref(pv) == Some((namespace, id)))
        })
        .copied()
}

/// A volume still Bound to the claim `namespace/claim_name` when that claim does not exist (as
/// far as the caller knows): the claim was deleted a moment ago and the volume is not Released
/// yet, or the caller's view of claims lags. Either way a new claim must wait: provisioning now
/// would lose the retained data.
fn still_bound_to<'a>(
    volumes: impl IntoIterator<Item = &'a Volume>,
    namespace: &str,
    claim_name: &str,
) -> Option<&'a Volume> {
    volumes.into_iter().find(|pv| {
        pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            && claim_ref(pv).is_some_and(|(ns, name)| ns == namespace && name == claim_name)
    })
}

/// Whether the volume a claim was pinned to still waits to be bound to that claim (uid
/// `claim_uid`): it is reusable ([`reusable`]) and its claim reference does not name that claim
/// by uid yet. The re-bind ([`rebind_patch`]) follows the claim, so a re-bind cut short (the
/// operator stopped between the two writes) is finished by the next reconcile.
fn awaits_rebind(pv: &Volume, namespace: &str, claim_name: &str, claim_uid: &str) -> bool {
    reusable(pv, namespace) && !bound_to(pv, namespace, claim_name, claim_uid)
}

/// The merge patch that labels a retained volume for the site and binds it to the site's new
/// claim: the claim reference names the claim with its uid, so the volume binds to that claim
/// and to no other claim of the same name (one created by someone else between the two writes
/// stays unbound). It is written conditional on the volume as it was judged, read from the API
/// server just before (the cached volumes keep no resourceVersion): one changed since is a
/// 409, retried and judged again.
fn rebind_patch(id: &str, namespace: &str, claim_name: &str, claim_uid: &str) -> Value {
    json!({
        "metadata": {"labels": labels::labels(id)},
        "spec": {"claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim_name,
            "uid": claim_uid,
            "resourceVersion": null,
        }},
    })
}

/// The merge patch that puts the site labels on its bound volume (so a later recreation finds
/// it), written conditional on the version it was judged at.
fn label_patch(id: &str) -> Value {
    json!({"metadata": {"labels": labels::labels(id)}})
}

/// Whether the volume read when its label is due is the site's: bound (its claim reference
/// naming the claim `namespace/id` by uid) to `claim`, the site's claim as read then, which
/// the Site `id` controls. A volume bound to another claim, of another namespace, or to a claim
/// of that name that is not the Site's, is not labelled (a later re-creation would take it).
fn labels_for_site(
    pv: &Volume,
    claim: Option<&PersistentVolumeClaim>,
    namespace: &str,
    id: &str,
) -> bool {
    let Some(claim) = claim else {
        return false;
    };
    let site_controls = claim
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "Site" && o.name == id);
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    site_controls && !uid.is_empty() && bound_to(pv, namespace, id, uid)
}

/// The retained volume a new claim re-binds to: among the volumes labelled for the site or
/// claimed by its claim (the cache's index), the one `find_retained_volume` picks.
pub fn retained(ctx: &Context, site: &Site) -> Option<Volume> {
    let id = site.name_any();
    let (index, store) = (&ctx.caches.volumes_by_site, &ctx.caches.volumes);
    let mut candidates = index.get(store, &site_key(&id));
    candidates.extend(index.get(store, &claim_key(&ctx.namespace, &id)));
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    find_retained_volume(candidates.iter().map(AsRef::as_ref), &id, &ctx.namespace).cloned()
}

/// The volume to bind to the site's claim `claim` (uid `claim_uid`): the retained volume the
/// claim was just created pinned to, or else the volume a stored claim is pinned to (its
/// [`PINNED_VOLUME_ANNOTATION`]) while that volume still awaits the claim
/// (`awaits_rebind`: a re-bind cut short is finished).
pub fn awaiting_rebind(
    ctx: &Context,
    id: &str,
    claim: Option<&PersistentVolumeClaim>,
    claim_uid: &str,
    retained: Option<&Volume>,
) -> Option<Volume> {
    if let Some(pv) = retained {
        return Some(pv.clone());
    }
    let claim = claim?;
    let pinned = claim.annotations().get(PINNED_VOLUME_ANNOTATION)?;
    let volume_name = claim.spec.as_ref()?.volume_name.as_deref()?;
    if volume_name != pinned {
        return None;
    }
    let pv = ctx.caches.volumes.get(pinned)?;
    awaits_rebind(&pv, &ctx.namespace, id, claim_uid).then(|| pv.as_ref().clone())
}

/// The volume still Bound to the site's deleted claim, if any: a new claim must wait for it to
/// be Released instead of provisioning a new volume and losing the retained data.
pub fn still_bound(ctx: &Context, id: &str) -> Option<String> {
    let c = &ctx.caches;
    still_bound_to(
        c.volumes_by_site
            .get(&c.volumes, &claim_key(&ctx.namespace, id))
            .iter()
            .map(AsRef::as_ref),
        &ctx.namespace,
        id,
    )
    .map(|pv| pv.name_any())
}

/// Binds the retained volume `pv` to the site's new claim, whose uid is `claim_uid` (LIFE-01
/// step 4); the claim was created pinned to the volume.
pub async fn rebind(ctx: &Context, site: &Site, pv: &Volume, claim_uid: &str) -> Result<()> {
    let id = site.name_any();
    let name = pv.name_any();
    // Judged again as the API server has it, and re-bound only at that version.
    let api: Api<Volume> = Api::all(ctx.client.clone());
    let fresh = api.get_opt(&name).await.map_err(|source| Error::Read {
        target: Target::of::<Volume>(&name),
        source: Box::new(source),
    })?;
    let Some(fresh) = fresh.filter(|v| awaits_rebind(v, &ctx.namespace, &id, claim_uid)) else {
        return Err(Error::Waiting {
            what: format!("volume {name} to be free for the site's claim"),
        });
    };
    let patch = rebind_patch(&id, &ctx.namespace, &id, claim_uid);
    let version = fresh.metadata.resource_version.as_deref();
    apply::patch_volume(&ctx.client, &name, patch, version).await?;
    tracing::info!(site = %id, volume = %name, "re-binding a retained volume");
    apply::publish(
        ctx,
        site,
        EventType::Normal,
        reasons::VOLUME_REATTACHED,
        format!("re-binding retained volume {name}"),
    )
    .await;
    Ok(())
}

/// Labels the claim's bound volume with the site labels, after a jittered delay, unless the
/// cached volume already carries them or a patch is already scheduled. A label removed by hand
/// comes back on the reconcile its removal queues; a patch that failed is tried again on the
/// next reconcile.
pub fn label_later(ctx: &Context, id: &str, claim: Option<&PersistentVolumeClaim>) {
    let Some(volume) = claim
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty())
    else {
        return;
    };
    // Already labelled (the usual case after a restart): nothing to do, no API call.
    let cached = ctx.caches.volumes.get(&volume);
    if cached
        .as_deref()
        .is_some_and(|pv| pv.labels().get(ID_LABEL).map(String::as_str) == Some(id))
    {
        return;
    }
    let (low, high) = ctx.tunables.pv_label_delay;
    let spread = high.saturating_sub(low).as_millis() as u64;
    let jitter = if spread == 0 {
        0
    } else {
        crate::digest::random_bytes().map_or(0, u64::from_le_bytes) % spread
    };
    let due = tokio::time::Instant::now() + low + Duration::from_millis(jitter);
    let client = ctx.client.clone();
    let namespace = ctx.namespace.clone();
    ctx.labeller.schedule(due, volume, id, move |volume, id| {
        label_volume(client.clone(), namespace.clone(), volume, id)
    });
}

/// Labels `volume` with the site labels of `id` unless it already has them, only while it is
/// bound to the site's claim (`labels_for_site`; the volume and the claim read from the API
/// server when the label is due), at the version read: a volume changed meanwhile (its status
/// written by the volume controller) is read and judged again, a few times. Errors are logged:
/// the label only helps a later re-creation find the volume.
async fn label_volume(client: kube::Client, namespace: String, volume: String, id: String) {
    const TRIES: usize = 4;
    let api: Api<Volume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    for _ in 0..TRIES {
        let pv = match api.get_opt(&volume).await {
            Ok(Some(pv)) if pv.labels().get(ID_LABEL) == Some(&id) => return,
            Ok(Some(pv)) => pv,
            Ok(None) => {
                tracing::info!(site = %id, volume = %volume, "volume not found; not labelled");
                return;
            }
            Err(e) => {
                tracing::warn!(site = %id, volume = %volume, error = %e, "cannot read the site volume");
                return;
            }
        };
        let claim = match claims.get_opt(&id).await {
            Ok(claim) => claim,
            Err(e) => {
                tracing::warn!(site = %id, error = %e, "cannot read the site claim");
                return;
            }
        };
        if !labels_for_site(&pv, claim.as_ref(), &namespace, &id) {
            tracing::info!(site = %id, volume = %volume, "the volume is not bound to the site's claim; not labelled");
            return;
        }
        let version = pv.metadata.resource_version.as_deref();
        match apply::patch_volume(&client, &volume, label_patch(&id), version).await {
            Ok(()) => return,
            Err(e) if e.status_code() == Some(409) => continue,
            Err(e) => {
                tracing::warn!(site = %id, volume = %volume, error = %e, "cannot label the site volume");
                return;
            }
        }
    }
    tracing::warn!(site = %id, volume = %volume, "the volume kept changing; not labelled");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, phase: &str, labels: Option<&str>, claim: Option<(&str, &str)>) -> Volume {
        let mut v = json!({"metadata": {"name": name}, "spec": {}, "status": {"phase": phase}});
        if let Some(id) = labels {
            v["metadata"]["labels"] = json!({ID_LABEL: id});
        }
        if let Some((ns, n)) = claim {
            v["spec"]["claimRef"] = json!({"namespace": ns, "name": n, "uid": "old-uid"});
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(found: Option<&Volume>) -> Option<&str> {
        found.and_then(|p| p.metadata.name.as_deref())
    }

    #[test]
    fn a_volume_still_bound_to_the_deleted_claim_makes_the_new_claim_wait() {
        let site = "docs-handbook";
        // (case, volumes, expected volume)
        let cases = [
            ("no volume", vec![], None),
            (
                "bound to the claim",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "released already (the retained lookup takes it)",
                vec![pv("pv-a", "Released", Some(site), Some(("sites", site)))],
                None,
            ),
            (
                "bound to another claim",
                vec![pv("pv-a", "Bound", None, Some(("sites", "other")))],
                None,
            ),
            (
                "bound to the same name in another namespace",
                vec![pv("pv-a", "Bound", None, Some(("team", site)))],
                None,
            ),
        ];
        for (case, volumes, want) in cases {
            assert_eq!(
                names(still_bound_to(&volumes, "sites", site)),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn retained_volume_lookup() {
        let site = "docs-handbook";
        // (case, volumes, expected volume)
        type Case<'a> = (&'a str, Vec<Volume>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "nothing retained",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", site)))],
                None,
            ),
            (
                "by site label",
                vec![pv("pv-a", "Released", Some(site), Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "label wins over the claim reference",
                vec![
                    pv("pv-a", "Released", None, Some(("sites", site))),
                    pv("pv-b", "Released", Some(site), Some(("sites", "other"))),
                ],
                Some("pv-b"),
            ),
            (
                "released from the site's own claim",
                vec![pv("pv-a", "Released", None, Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "available, unlabelled, naming the site's claim: not released from it",
                vec![pv("pv-a", "Available", None, Some(("sites", site)))],
                None,
            ),
            (
                "released from a claim of another name (the owner's)",
                vec![pv("pv-a", "Released", None, Some(("sites", "jdoe")))],
                None,
            ),
            (
                "the site's claim name in another namespace",
                vec![pv("pv-a", "Released", None, Some(("other", site)))],
                None,
            ),
            (
                "labelled but bound elsewhere",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", "x")))],
                None,
            ),
            (
                "available, labelled, pre-bound to nobody: which namespace it served is unknown",
                vec![pv("pv-a", "Available", Some(site), None)],
                None,
            ),
            (
                "available, labelled, pre-bound to a claim of the namespace",
                vec![pv("pv-a", "Available", Some(site), Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "labelled, released from the same site name of another namespace",
                vec![pv("pv-a", "Released", Some(site), Some(("team", site)))],
                None,
            ),
            (
                "labelled, available, pre-bound to a claim of another namespace",
                vec![pv("pv-a", "Available", Some(site), Some(("team", site)))],
                None,
            ),
            (
                "another site's volume",
                vec![pv(
                    "pv-a",
                    "Released",
                    Some("other-site"),
                    Some(("sites", "other-site")),
                )],
                None,
            ),
            (
                "stable choice",
                vec![
                    pv("pv-z", "Released", Some(site), Some(("sites", site))),
                    pv("pv-a", "Released", Some(site), Some(("sites", site))),
                ],
                Some("pv-a"),
            ),
        ];
        for (case, volumes, want) in cases {
            assert_eq!(
                names(find_retained_volume(&volumes, site, "sites")),
                want,
                "{case}"
            );
        }
    }

    /// A volume is labelled for a site only while it is bound, by uid, to the site's claim of
    /// the operator's namespace, which the Site controls.
    #[test]
    fn only_a_volume_bound_to_the_sites_claim_is_labelled() {
        let claim = |uid: &str, controller: Option<(&str, &str)>| -> PersistentVolumeClaim {
            let mut c = json!({"metadata": {"name": "s", "namespace": "sites", "uid": uid}});
            if let Some((kind, name)) = controller {
                c["metadata"]["ownerReferences"] = json!([{"apiVersion": "sites.ecmwf.int/v1",
                    "kind": kind, "name": name, "uid": "site-uid", "controller": true}]);
            }
            serde_json::from_value(c).unwrap()
        };
        let bound = |claim: Option<(&str, &str)>, uid: &str| {
            let mut v = pv("pv-a", "Bound", None, claim);
            if let Some(r) = v.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
                r.uid = Some(uid.into());
            }
            v
        };
        let site_claim = claim("c-1", Some(("Site", "s")));
        let cases = [
            (
                "bound to the site's claim",
                bound(Some(("sites", "s")), "c-1"),
                Some(site_claim.clone()),
                true,
            ),
            (
                "bound to an older claim of that name",
                bound(Some(("sites", "s")), "c-0"),
                Some(site_claim.clone()),
                false,
            ),
            (
                "bound to a claim of another namespace",
                bound(Some(("team", "s")), "c-1"),
                Some(site_claim.clone()),
                false,
            ),
            (
                "bound to another claim",
                bound(Some(("sites", "x")), "c-1"),
                Some(site_claim.clone()),
                false,
            ),
            (
                "not bound",
                pv("pv-a", "Available", None, None),
                Some(site_claim.clone()),
                false,
            ),
            (
                "the claim is gone",
                bound(Some(("sites", "s")), "c-1"),
                None,
                false,
            ),
            (
                "the claim is not the Site's",
                bound(Some(("sites", "s")), "c-1"),
                Some(claim("c-1", None)),
                false,
            ),
            (
                "the claim is another Site's",
                bound(Some(("sites", "s")), "c-1"),
                Some(claim("c-1", Some(("Site", "t")))),
                false,
            ),
        ];
        for (case, volume, claim, want) in cases {
            assert_eq!(
                labels_for_site(&volume, claim.as_ref(), "sites", "s"),
                want,
                "{case}"
            );
        }
        let p = label_patch("s");
        assert_eq!(p["metadata"]["labels"][ID_LABEL], "s");
    }

    #[test]
    fn rebind_patch_binds_by_the_claims_uid() {
        let p = rebind_patch("docs-handbook", "sites", "docs-handbook", "u-new");
        assert_eq!(p["metadata"]["labels"][ID_LABEL], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["name"], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["namespace"], "sites");
        assert_eq!(
            p["spec"]["claimRef"]["uid"], "u-new",
            "the old uid replaced"
        );
        assert!(p["spec"]["claimRef"]["resourceVersion"].is_null());
    }

    /// A pinned claim's volume waits for its re-bind until its claim reference names the claim
    /// by uid; a volume someone else's claim bound is not taken.
    #[test]
    fn a_pinned_claims_volume_awaits_its_rebind_by_uid() {
        let with_uid = |phase: &str, claim: Option<(&str, &str)>, uid: &str| {
            let mut v = pv("pv-a", phase, Some("s"), claim);
            if let Some(r) = v.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
                r.uid = Some(uid.into());
            }
            v
        };
        let cases = [
            (
                "released from the old claim",
                with_uid("Released", Some(("sites", "s")), "old"),
                true,
            ),
            (
                "available, no claim: not known to be this namespace's",
                pv("pv-a", "Available", Some("s"), None),
                false,
            ),
            (
                "available, pre-bound to the claim's name",
                with_uid("Available", Some(("sites", "s")), ""),
                true,
            ),
            (
                "named without uid",
                with_uid("Released", Some(("sites", "s")), ""),
                true,
            ),
            (
                "re-bound to the claim",
                with_uid("Released", Some(("sites", "s")), "new"),
                false,
            ),
            (
                "bound to the claim",
                with_uid("Bound", Some(("sites", "s")), "new"),
                false,
            ),
            (
                "bound to another claim",
                with_uid("Bound", Some(("sites", "x")), "x"),
                false,
            ),
            (
                "held for another namespace",
                with_uid("Released", Some(("other", "s")), "old"),
                false,
            ),
        ];
        for (case, volume, want) in cases {
            assert_eq!(awaits_rebind(&volume, "sites", "s", "new"), want, "{case}");
        }
    }
}
