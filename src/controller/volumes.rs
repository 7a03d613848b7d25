//! The site volume across Site re-creations (LIFE-01 step 4, LIFE-05): which retained volume a
//! new claim re-binds to, when a new claim must wait for the previous volume to be released,
//! and the delayed labelling of a bound volume with its site (so a later re-creation can find it).
//!
//! Decisions here read the caches only; the writes they lead to are in
//! [`crate::controller::apply`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use tokio::sync::mpsc;

use crate::controller::apply;
use crate::controller::context::Context;
use crate::controller::index::{claim_key, site_key};
use crate::crd::{ID_LABEL, Site};
use crate::render::volume;
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

/// The delayed volume label patches: the volumes with a patch scheduled and not yet made, and
/// the queue of one background task serving every site.
#[derive(Default)]
pub(crate) struct Labeller {
    pending: Arc<Mutex<HashSet<String>>>,
    queue: Mutex<Option<mpsc::UnboundedSender<Labelling>>>,
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
    let labeller = &ctx.labeller;
    if !labeller
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(volume.clone())
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
    let mut queue = labeller.queue.lock().unwrap_or_else(|e| e.into_inner());
    let tx = queue.get_or_insert_with(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(label_when_due(
            ctx.client.clone(),
            labeller.pending.clone(),
            rx,
        ));
        tx
    });
    let _ = tx.send(Labelling {
        due,
        volume,
        id: id.to_string(),
    });
}

/// A volume label patch due at `due`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Labelling {
    due: tokio::time::Instant,
    volume: String,
    id: String,
}

/// Applies volume label patches when they are due, one at a time, until the context is gone.
/// One task and a heap of small entries, not a sleeping task per site: at 10,000 new Sites the
/// tasks alone took tens of MiB.
async fn label_when_due(
    client: kube::Client,
    pending: Arc<Mutex<HashSet<String>>>,
    mut rx: mpsc::UnboundedReceiver<Labelling>,
) {
    let mut waiting: BinaryHeap<Reverse<Labelling>> = BinaryHeap::new();
    loop {
        let next = waiting.peek().map(|Reverse(l)| l.due);
        tokio::select! {
            item = rx.recv() => match item {
                Some(l) => waiting.push(Reverse(l)),
                None => return,
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if next.is_some() => {
                if let Some(Reverse(l)) = waiting.pop() {
                    apply::label_volume(&client, &l.volume, &l.id).await;
                    pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&l.volume);
                }
            }
        }
    }
}
