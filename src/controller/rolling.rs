//! Where a reconcile meets the change budget of platform-wide rollouts (ROL-01, ROL-02; the
//! budget itself is [`crate::controller::rollout`]'s): whether the StatefulSet write at hand
//! rolls the Site's pods for a platform change ([`platform_roll`]), whether it may roll now
//! ([`admit`]), when a rolled Site leaves the budget ([`observe`]), and the tick that halts a
//! late rollout, hands freed slots to the waiting Sites and publishes the rollout for
//! `sites-operator rollout status` ([`tick`]).

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::config::PlatformConfig;
use crate::controller::apply;
use crate::controller::cache::kept::Kept;
use crate::controller::context::Context;
use crate::controller::events::{Event, EventType};
use crate::controller::queue::Queue;
use crate::controller::rollout::{
    self, Admission, Budget, Overdue, Progress, RolloutStatus, Rollouts, STATUS_CONFIGMAP,
    STATUS_KEY,
};
use crate::controller::status::available;
use crate::crd::Site;
use crate::digest::hashed;
use crate::labels::{MANAGED_BY, MANAGED_BY_LABEL, TEMPLATE_HASH_ANNOTATION};
use crate::write::Writer;
use crate::{Error, Result, reasons};

/// The budget of `config` among `sites` Sites.
pub fn budget(config: &PlatformConfig, sites: usize) -> Budget {
    let r = &config.sites.rollout;
    Budget {
        slots: r.max_rolling.of(sites),
        deadline: Duration::from_secs(u64::from(r.progress_deadline_seconds)),
    }
}

/// Whether writing `desired`, the rendered StatefulSet, rolls the Site's pods for a platform
/// change, and so waits for the budget: the stored StatefulSet was rendered with another pod
/// template ([`TEMPLATE_HASH_ANNOTATION`]), the Site has pods to roll, and nothing of the Site's
/// own asks for the roll (a spec edit the status has not observed yet, or a qualifying change
/// or upgrade request, `own_restart`). A new StatefulSet, an archived Site, one scaled to zero
/// and the repair of a hand edit (the annotation still names the rendering) do not wait.
pub fn platform_roll(
    site: &Site,
    own_restart: bool,
    stored: Option<&Kept<StatefulSet>>,
    desired: &StatefulSet,
) -> bool {
    let c = &site.spec.configuration;
    let Some(stored) = stored else {
        return false;
    };
    let observed = site.status.as_ref().and_then(|s| s.observed_generation);
    if !c.enabled || c.settings.replicas == 0 || own_restart || observed != site.metadata.generation
    {
        return false;
    }
    let rendered = desired
        .annotations()
        .get(TEMPLATE_HASH_ANNOTATION)
        .map(|h| hashed(h.as_str()));
    stored.body.rendered != rendered
}

fn rollouts(ctx: &Context) -> MutexGuard<'_, Rollouts> {
    ctx.rollouts.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the StatefulSet write of a Site may do: Ok(true) write, newly counted against the
/// budget (the caller gives the slot back with [`unroll`] when the write rolled nothing); Ok(false)
/// write, nothing to count (no platform roll, or counted already); Err([`Error::RolloutPending`]
/// or [`Error::RolloutHalted`]) hold the write back.
pub fn admit(ctx: &Context, config: &PlatformConfig, site: &Site, roll: bool) -> Result<bool> {
    let id = site.name_any();
    if !roll {
        rollouts(ctx).settle(&id);
        return Ok(false);
    }
    let budget = budget(config, ctx.caches.sites.len());
    let pods = ctx
        .caches
        .pods_by_site
        .get(&ctx.caches.pods, &id)
        .iter()
        .filter_map(|p| p.uid)
        .collect();
    let version = rollout::version(config);
    let admission = rollouts(ctx).admit(
        &id,
        available(site.status.as_ref()),
        pods,
        version,
        &budget,
        Instant::now(),
    );
    let r = &config.sites.rollout;
    match admission {
        Admission::Roll => Ok(true),
        Admission::Rolling => Ok(false),
        Admission::Wait { .. } => Err(Error::RolloutPending {
            message: format!(
                "a platform change rolls this Site's pods when the change budget allows \
                 (sitesConfig.rollout.max_rolling {}: {} Sites at a time)",
                r.max_rolling, budget.slots
            ),
        }),
        Admission::Halted(halt) => Err(Error::RolloutHalted {
            message: halted(&halt.site, halt.deadline),
        }),
    }
}

fn halted(site: &str, deadline: Duration) -> String {
    format!(
        "the rollout of the platform configuration in force is halted: Site {site} was not \
         Available again within {}s after its pods rolled; nothing more rolls until sites-config \
         changes (revert or fix the change)",
        deadline.as_secs()
    )
}

/// The write [`admit`] counted rolled nothing (it failed, or left the pod template as it was):
/// the slot is free again.
pub fn unroll(ctx: &Context, id: &str) {
    rollouts(ctx).unroll(id);
}

/// The Site is paused or gone: it leaves the line and the budget.
pub fn forget(ctx: &Context, id: &str) {
    rollouts(ctx).forget(id);
}

/// The Site's pods as the cache shows them now: a rolling Site with as many ready new pods as
/// it wants leaves the budget.
pub fn observe(ctx: &Context, site: &Site) {
    let id = site.name_any();
    if !rollouts(ctx).is_rolling(&id) {
        return;
    }
    let pods: Vec<([u8; 16], bool)> = ctx
        .caches
        .pods_by_site
        .get(&ctx.caches.pods, &id)
        .iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| Some((p.uid?, p.ready)))
        .collect();
    let c = &site.spec.configuration;
    let want = if c.enabled {
        usize::try_from(c.settings.replicas).unwrap_or(0)
    } else {
        0
    };
    rollouts(ctx).observe(&id, &pods, want);
}

/// Once a second, on the leader: rolled Sites past the deadline halt the rollout (one Warning
/// Event on the ConfigMap; every waiting Site is queued to report it) or count as failed; the
/// waiting Sites first in line get the free slots. Returns where the rollout stands.
pub async fn tick(
    ctx: &Arc<Context>,
    queue: &Queue<Arc<str>>,
    paused: usize,
    published: &mut Option<(RolloutStatus, Instant)>,
) -> Progress {
    let config = ctx.config.get();
    let sites = ctx.caches.sites.len();
    let budget = budget(&config, sites);
    let (late, next, waiting, progress, status) = {
        let mut r = rollouts(ctx);
        let late = r.overdue(&budget, Instant::now());
        let status = r.status(sites, paused, &budget);
        // Every waiting Site learns of a halt: listed only when one comes.
        let waiting = if late.iter().any(|o| o.halts) {
            r.waiting()
        } else {
            Vec::new()
        };
        (late, r.next(&budget), waiting, r.progress(), status)
    };
    publish(ctx, status, published).await;
    for id in next {
        queue.add(id.into());
    }
    for Overdue { site, halts } in &late {
        if *halts {
            tracing::warn!(%site, deadline = ?budget.deadline, "a rolled Site is not Available again within the progress deadline: the rollout is halted");
        } else {
            tracing::warn!(%site, deadline = ?budget.deadline, "a rolled Site that was not Available before is not after the progress deadline either");
        }
    }
    if let Some(Overdue { site, .. }) = late.iter().find(|o| o.halts) {
        for id in waiting {
            queue.add(id.into());
        }
        report_halt(ctx, &halted(site, budget.deadline)).await;
    }
    progress
}

/// How often the rollout status is published at most while it changes (a halt at once).
const PUBLISH_EVERY: Duration = Duration::from_secs(2);

/// Publishes `status` in the ConfigMap [`STATUS_CONFIGMAP`] (server-side apply) when it changed
/// since `published`, at most every [`PUBLISH_EVERY`] unless the halt changed, once the
/// configuration in force rolls a Site.
async fn publish(
    ctx: &Context,
    status: RolloutStatus,
    published: &mut Option<(RolloutStatus, Instant)>,
) {
    // A configuration that rolls no Site publishes nothing (a restart over converged Sites
    // writes nothing): the last rollout stays shown.
    let involved = status.rolled > 0 || status.waiting > 0 || status.halted.is_some();
    let same_version = published
        .as_ref()
        .is_some_and(|(last, _)| last.version == status.version);
    if !involved && !same_version {
        return;
    }
    let due = match published {
        None => true,
        Some((last, _)) if *last == status => false,
        Some((last, _)) if last.halted != status.halted => true,
        Some((_, at)) => at.elapsed() >= PUBLISH_EVERY,
    };
    if !due {
        return;
    }
    let Ok(json) = serde_json::to_string(&status) else {
        return;
    };
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATUS_CONFIGMAP.into()),
            namespace: Some(ctx.namespace.clone()),
            labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())].into()),
            ..Default::default()
        },
        data: Some([(STATUS_KEY.to_string(), json)].into()),
        ..Default::default()
    };
    match Writer::new(ctx.api::<ConfigMap>()).apply(&cm, true).await {
        Ok(_) => *published = Some((status, Instant::now())),
        Err(e) => tracing::warn!(error = %e, "cannot publish the rollout status"),
    }
}

/// A reconcile of the Site under `config` ended, whatever its outcome: the rollout knows it.
pub fn judged(ctx: &Context, id: &str, config: &Arc<PlatformConfig>) {
    let mut r = rollouts(ctx);
    let version = r.version_of(config);
    r.judged(id, version);
}

/// The halt, as a Warning Event on the `sites-config` ConfigMap.
async fn report_halt(ctx: &Context, note: &str) {
    let Some(recorder) = &ctx.recorder else {
        return;
    };
    let event = Event {
        type_: EventType::Warning,
        reason: reasons::ROLLOUT_HALTED.into(),
        note: Some(apply::event_note(note.to_string())),
        action: "Rollout".into(),
        secondary: None,
    };
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(crate::config::CONFIGMAP_NAME.into()),
        namespace: Some(ctx.namespace.clone()),
        ..Default::default()
    };
    if let Err(e) = apply::record_event(&ctx.client, recorder, &event, &regarding).await {
        tracing::warn!(error = %e, "cannot record the halt of the rollout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;

    fn statefulset(template_hash: Option<&str>) -> StatefulSet {
        let mut sts = StatefulSet::default();
        if let Some(h) = template_hash {
            sts.annotations_mut()
                .insert(TEMPLATE_HASH_ANNOTATION.into(), h.into());
        }
        sts
    }

    /// ROL-01: which StatefulSet writes wait for the budget.
    #[test]
    fn only_a_platform_change_of_the_pod_template_waits_for_the_budget() {
        let observed = |generation: i64, seen: i64| {
            let mut s = SiteBuilder::new("s").generation(generation).build();
            s.status = Some(crate::crd::SiteStatus {
                observed_generation: Some(seen),
                ..Default::default()
            });
            s
        };
        let archived = {
            let mut s = observed(3, 3);
            s.spec.configuration.enabled = false;
            s
        };
        let scaled_to_zero = {
            let mut s = observed(3, 3);
            s.spec.configuration.settings.replicas = 0;
            s
        };
        let stored = |h: Option<&str>| Kept::new(statefulset(h));
        let (old, new) = (Some("aaaa"), Some("bbbb"));
        // (case, site, own restart, stored, rendered, waits)
        let cases = [
            (
                "a new template from the platform",
                observed(3, 3),
                false,
                Some(stored(old)),
                new,
                true,
            ),
            (
                "the same template (a hand edit repaired)",
                observed(3, 3),
                false,
                Some(stored(new)),
                new,
                false,
            ),
            (
                "stored before template hashes",
                observed(3, 3),
                false,
                Some(stored(None)),
                new,
                true,
            ),
            ("a new StatefulSet", observed(3, 3), false, None, new, false),
            (
                "the Site's own edit",
                observed(4, 3),
                false,
                Some(stored(old)),
                new,
                false,
            ),
            (
                "a qualifying change or upgrade request",
                observed(3, 3),
                true,
                Some(stored(old)),
                new,
                false,
            ),
            (
                "archived: no pods",
                archived,
                false,
                Some(stored(old)),
                new,
                false,
            ),
            (
                "scaled to zero: no pods",
                scaled_to_zero,
                false,
                Some(stored(old)),
                new,
                false,
            ),
        ];
        for (case, site, own, stored, rendered, waits) in cases {
            assert_eq!(
                platform_roll(&site, own, stored.as_ref(), &statefulset(rendered)),
                waits,
                "{case}"
            );
        }
    }
}
