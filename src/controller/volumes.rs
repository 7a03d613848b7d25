//! The site volume across Site re-creations (LIFE-01 step 4, LIFE-05): which retained volume a
//! new claim re-binds to, when a new claim must wait for the previous volume to be released,
//! and the delayed labelling of a bound volume with its site (so a later re-creation can find it).
//!
//! Decisions here read the caches only; the writes they lead to are in
//! [`crate::controller::apply`].

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use crate::controller::context::Context;
use crate::controller::index::{claim_key, site_key};
use crate::crd::{ID_LABEL, Site};
use crate::render::volume;
use crate::render::workload::PINNED_VOLUME_ANNOTATION;
use crate::watched::Volume;

/// The retained volume a new claim re-binds to: among the volumes labelled for the site or
/// claimed by its claim (the cache's index), the one [`volume::find_retained_volume`] picks.
pub fn retained(ctx: &Context, site: &Site) -> Option<Volume> {
    let id = site.name_any();
    let (index, store) = (&ctx.caches.volumes_by_site, &ctx.caches.volumes);
    let mut candidates = index.get(store, &site_key(&id));
    candidates.extend(index.get(store, &claim_key(&ctx.namespace, &id)));
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    volume::find_retained_volume(candidates.iter().map(AsRef::as_ref), &id, &ctx.namespace).cloned()
}

/// The volume to bind to the site's claim `claim` (uid `claim_uid`): the retained volume the
/// claim was just created pinned to, or else the volume a stored claim is pinned to (its
/// [`PINNED_VOLUME_ANNOTATION`]) while that volume still awaits the claim
/// ([`volume::awaits_rebind`]: a re-bind cut short is finished).
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
    volume::awaits_rebind(&pv, &ctx.namespace, id, claim_uid).then(|| pv.as_ref().clone())
}

/// The volume still Bound to the site's deleted claim, if any: a new claim must wait for it to
/// be Released instead of provisioning a new volume and losing the retained data.
pub fn still_bound(ctx: &Context, id: &str) -> Option<String> {
    let c = &ctx.caches;
    volume::still_bound_to(
        c.volumes_by_site
            .get(&c.volumes, &claim_key(&ctx.namespace, id))
            .iter()
            .map(AsRef::as_ref),
        &ctx.namespace,
        id,
    )
    .map(|pv| pv.name_any())
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
        let mut b = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
        u64::from_le_bytes(b) % spread
    };
    let due = tokio::time::Instant::now() + low + Duration::from_millis(jitter);
    ctx.labeller.schedule(&ctx.client, due, volume, id);
}
