//! Reconcile of one Site (SPEC 4.1-4.4), as a recipe:
//!
//! 1. **validate** the Site against every rule ([`crate::rules`]);
//! 2. **gather** what rendering needs from the cluster (tokens, session key, host, the stored
//!    claim, a retained volume);
//! 3. **decide** whether the pods roll ([`crate::restart`]);
//! 4. **render** every object ([`crate::render`], pure);
//! 5. **apply** them in the LIFE-01 order, only objects the Site controls, writing only what
//!    differs ([`super::owned`], [`apply`]);
//! 6. **routes** ([`super::routes`]): the active mode's route unless an older Site serves the
//!    path, then **prune** this site's route of the other routing mode (LIFE-13);
//! 7. write the **status** when it changed.
//!
//! Reads come from the caches ([`Context`]); every write goes through [`apply`]; errors are
//! [`crate::Error`]s, whose class decides the status and the retry.

use std::sync::Arc;
use std::time::Duration;

use crate::controller::events::EventType;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::ResourceExt;

use crate::config::PlatformConfig;
use crate::controller::apply::{self, Written};
use crate::controller::cache::kept::{Kept, Pairs};
use crate::controller::context::Context;
use crate::controller::owned::{Writes, controlled, existing, step, write_owned};
use crate::controller::rolling;
use crate::controller::routes::{path_taken_by, routes};
use crate::controller::status::SitePod;
use crate::controller::{status, volumes};
use crate::crd::{Site, SiteStatus};
use crate::ownership::{self, Control};
use crate::render::{self, Inputs, PodTemplateInputs, Rendered, SiteTokens};
use crate::watched::Volume;
use crate::{Error, Result, Retry, reasons, restart};

/// What one reconcile asks of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done until something changes.
    Done,
    /// Retry with the key's exponential backoff (transient error).
    Backoff,
    /// Retry after a fixed delay.
    After(Duration),
    /// A terminal error (the Site or the cluster has to change): not retried with backoff;
    /// retried after the delay when there is one (a forbidden request, RBAC is not watched).
    /// Counted in `controller_runtime_terminal_reconcile_errors_total` and, like every error,
    /// in `controller_runtime_reconcile_errors_total`.
    Terminal(Option<Duration>),
}

impl From<Retry> for Next {
    fn from(retry: Retry) -> Next {
        match retry {
            Retry::Backoff => Next::Backoff,
            Retry::After(delay) => Next::After(delay),
            Retry::Never => Next::Done,
        }
    }
}

/// Reconciles the Site `name`; returns what the queue should do next.
pub async fn reconcile(ctx: &Context, name: &str) -> Next {
    let Some(site) = ctx.caches.sites.get(name) else {
        // Deleted: garbage collection removes the owned objects.
        rolling::forget(ctx, name);
        return Next::Done;
    };
    if site.metadata.deletion_timestamp.is_some() {
        rolling::forget(ctx, name);
        return Next::Done;
    }
    if site.paused() {
        rolling::forget(ctx, name);
        // ROL-03: nothing is written but the condition that says so; removing the annotation
        // queues the Site (an annotation change is an edit) for one reconcile.
        let new = status::paused_status(&site, site.status.as_ref(), &ctx.status_time());
        return match store_status(ctx, &site, new).await {
            Ok(()) => Next::Done,
            Err(e) => {
                tracing::warn!(site = name, error = %e, "cannot write the status");
                Next::Backoff
            }
        };
    }
    // One configuration from start to end, even if a new one comes in meanwhile.
    let config = ctx.config.get();
    let Some(pinned) = pin_images(ctx, &config, &site) else {
        // The pin is what the Site's own StatefulSet runs, and the cache does not show the
        // operator's last write of it yet: its watch event queues the Site again.
        return Next::After(crate::controller::own_writes::PENDING);
    };
    let mut writes = Writes::default();
    let result = converge(ctx, &config, &pinned, &mut writes).await;
    if !writes.created.is_empty() {
        // One Event per reconcile, listing what it created.
        let note = format!("created {}", writes.created.join(", "));
        apply::publish(ctx, &site, EventType::Normal, reasons::CREATED, note).await;
    }
    if let Err(e @ Error::SiteGone { .. }) = &result {
        // Nothing more for a Site on its way out: no status, no Event.
        tracing::info!(site = name, error = %e, "stopped");
        rolling::forget(ctx, name);
        return Next::Done;
    }
    let next = match &result {
        Ok(()) if writes.awaiting => Next::After(crate::controller::own_writes::PENDING),
        Ok(()) => Next::Done,
        Err(e) => {
            tracing::warn!(site = name, error = %e, "reconcile incomplete");
            warn_once(ctx, &site, e).await;
            if e.is_transient() {
                e.retry().into()
            } else {
                match e.retry() {
                    Retry::After(delay) => Next::Terminal(Some(delay)),
                    _ => Next::Terminal(None),
                }
            }
        }
    };
    rolling::judged(ctx, name, &config);
    let images = render::apps::builtin_images(&pinned, &config);
    match write_status(
        ctx,
        &site,
        result.as_ref().err(),
        writes.workload_current,
        images,
    )
    .await
    {
        Ok(()) => {
            rolling::observe(ctx, &site);
            next
        }
        Err(e) => {
            tracing::warn!(site = name, error = %e, "cannot write the status");
            Next::Backoff
        }
    }
}

/// The Site as it is rendered: every built-in application without an image in the spec runs
/// its pin (SPEC 4.6, [`render::apps::pinned`]): the image the status records, else the one its
/// container runs in the Site's own StatefulSet, else (a new Site) the catalogue's at the
/// platform version. A Site whose spec records every image is used as it is.
///
/// None when the pin is to be read from the StatefulSet and the cache has not shown the
/// StatefulSet the operator last wrote (just recreated, its watch event behind): the catalogue
/// image would be a silent upgrade.
fn pin_images<'s>(
    ctx: &Context,
    config: &PlatformConfig,
    site: &'s Site,
) -> Option<std::borrow::Cow<'s, Site>> {
    let name = site.name_any();
    let cached = ctx.caches.statefulsets.get(&name);
    let unseen = cached.is_none() && ctx.own.objects.awaited::<StatefulSet>(&name);
    let running = cached.filter(|sts| sts.control(site) == Control::ThisSite);
    pinned_site(
        site,
        config,
        running.as_deref().map(|sts| &sts.body.images),
        unseen,
    )
}

/// [`pin_images`] once the StatefulSet is looked up: the images of the Site's own StatefulSet
/// (`running`), and whether the cache has yet to show the operator's last write of it.
fn pinned_site<'s>(
    site: &'s Site,
    config: &PlatformConfig,
    running: Option<&Pairs<String>>,
    unseen: bool,
) -> Option<std::borrow::Cow<'s, Site>> {
    let asked = std::cell::Cell::new(false);
    let image = |name: &str| {
        asked.set(true);
        running
            .and_then(|images| images.get(name))
            .map(String::as_str)
    };
    match render::apps::pinned(site, config, image) {
        _ if unseen && asked.get() => None,
        Some(applications) => {
            let mut pinned = site.clone();
            pinned.spec.configuration.applications = applications;
            Some(std::borrow::Cow::Owned(pinned))
        }
        None => Some(std::borrow::Cow::Borrowed(site)),
    }
}

/// Steps 1 to 6 of the recipe.
async fn converge(
    ctx: &Context,
    config: &PlatformConfig,
    site: &Site,
    writes: &mut Writes,
) -> Result<()> {
    let valid = crate::rules::validate(site, config).map_err(Error::InvalidSite)?;
    let gathered = gather(ctx, config, site).await?;
    let decision = decide(ctx, config, site, gathered.statefulset.clone()).await?;
    // The renderer reads the claim as the API has it; the record keeps what it reads.
    let existing_claim = gathered.claim.as_deref().map(|c| c.body.claim());
    let inputs = Inputs {
        platform_namespace: &ctx.namespace,
        public_host: gathered.host.as_deref(),
        session_key: &gathered.session_key,
        tokens: &gathered.tokens,
        existing_claim: existing_claim.as_ref(),
        retained_volume: gathered
            .retained
            .as_ref()
            .and_then(|pv| pv.metadata.name.as_deref()),
        pod: PodTemplateInputs {
            state: &decision.restart.state,
            restarted_at: decision.restarted_at.as_deref(),
        },
    };
    let rendered = render::render(valid, config, &inputs)?;
    apply_in_order(ctx, config, site, rendered, &gathered, &decision, writes).await
}

/// What rendering needs from the cluster.
struct Gathered {
    /// The stored Secret `<id>` (its tokens are kept).
    secret: Option<Arc<Kept<Secret>>>,
    tokens: SiteTokens,
    session_key: Vec<u8>,
    host: Option<String>,
    /// The stored claim `<id>`.
    claim: Option<Arc<Kept<PersistentVolumeClaim>>>,
    /// The retained volume a new claim re-binds to.
    retained: Option<Volume>,
    statefulset: Option<Arc<Kept<StatefulSet>>>,
}

async fn gather(ctx: &Context, config: &PlatformConfig, site: &Site) -> Result<Gathered> {
    let id = site.name_any();
    let c = &ctx.caches;
    // Tokens are generated only when the API server confirms there are none: the cache may not
    // have seen a Secret written a moment ago, and keeps the data of the operator's Secrets only.
    // Only a Secret whose controller is this Site gives its tokens: one carrying the Site's
    // labels without a controller is restored with new tokens (it may have been planted).
    let (secret, own_data) = match c.secrets.get(&id) {
        Some(s) if s.facts.managed() => {
            let data = s
                .controlled_by(site)
                .then(|| s.body.as_ref().map(Pairs::to_map))
                .flatten();
            (Some(s), data)
        }
        // The record keeps no data (the managed-by label was removed, or none is cached):
        // read the Secret whole.
        _ => match ctx.read::<Secret>(&id).await? {
            Some(read) => {
                let read = Arc::unwrap_or_clone(read);
                let data =
                    ownership::controlled_by(&ownership::Ownership::of(&read.metadata), site)
                        .then(|| read.data.clone())
                        .flatten();
                (Some(Arc::new(Kept::new(read))), data)
            }
            None => (None, None),
        },
    };
    let tokens = SiteTokens::keep_or_generate(own_data.as_ref(), random_token);
    let session_key = ctx.session_key(&config.sites.session.secret_key).await?;
    let host = ctx.public_host(&config.routing).await?;
    // The claim is judged before a retained volume is chosen for a new one: with its watch
    // down, the cache may not show a claim `<id>` that exists.
    let claim = existing(ctx, c.pvcs.get(&id), c.pvcs.live(), &id).await?;
    let retained = match claim {
        Some(_) => None,
        None => volumes::retained(ctx, site),
    };
    Ok(Gathered {
        secret,
        tokens,
        session_key,
        host,
        claim,
        retained,
        statefulset: c.statefulsets.get(&id),
    })
}

/// Whether the pods roll, and the `restartedAt` value the pod template carries.
struct Decision {
    restart: restart::Decision,
    restarted_at: Option<String>,
}

async fn decide(
    ctx: &Context,
    config: &PlatformConfig,
    site: &Site,
    mut stored: Option<Arc<Kept<StatefulSet>>>,
) -> Result<Decision> {
    let template = |s: &Option<Arc<Kept<StatefulSet>>>| {
        s.as_deref()
            .and_then(|s| s.body.annotations.as_ref())
            .map(Pairs::to_map)
    };
    let mut decision = restart::decide(
        render::recorded_state(template(&stored).as_ref()).as_ref(),
        site,
        config,
    );
    if decision.restart {
        // Confirm with the API server: a StatefulSet written a moment ago may already record
        // this change, and one qualifying change must roll the pods only once (LIFE-03).
        stored = ctx.read_kept::<StatefulSet>(&site.name_any()).await?;
        decision = restart::decide(
            render::recorded_state(template(&stored).as_ref()).as_ref(),
            site,
            config,
        );
    }
    let restarted_at = if decision.restart {
        Some((ctx.now)().0.to_string())
    } else {
        template(&stored).and_then(|mut a| a.remove(render::workload::RESTARTED_AT_ANNOTATION))
    };
    Ok(Decision {
        restart: decision,
        restarted_at,
    })
}

/// Step 5 and 6: the objects in the LIFE-01 order, each only if this Site controls it, then the
/// route of each mode.
async fn apply_in_order(
    ctx: &Context,
    config: &PlatformConfig,
    site: &Site,
    rendered: Rendered,
    gathered: &Gathered,
    decision: &Decision,
    writes: &mut Writes,
) -> Result<()> {
    let id = site.name_any();
    let c = &ctx.caches;
    // The Secret was read from the API server when the cache had none (`gather`).
    write_owned(
        ctx,
        site,
        writes,
        gathered.secret.clone(),
        true,
        rendered.secret,
    )
    .await?;
    step(ctx, site, writes, &c.secrets, rendered.oauth2_secret).await?;
    step(ctx, site, writes, &c.configmaps, rendered.env_configmap).await?;
    step(ctx, site, writes, &c.configmaps, rendered.files_configmap).await?;
    if let Some(claim) = &gathered.claim {
        controlled(claim.as_ref(), site)?;
    } else if gathered.retained.is_none()
        && let Some(pv) = volumes::still_bound(ctx, &id)
    {
        // The site's previous claim is gone but its volume is not Released yet (or the claim
        // cache lags): wait instead of provisioning a new volume and losing the retained data.
        return Err(Error::Waiting {
            what: format!("volume {pv} to be released by the previous claim"),
        });
    }
    // The claim first (pinned to a retained volume), then the volume bound to it by its uid.
    // The stored claim was judged above (read when the cache is not live).
    let (_, written_claim) = write_owned(
        ctx,
        site,
        writes,
        gathered.claim.clone(),
        true,
        rendered.pvc,
    )
    .await?;
    let claim_uid = written_claim
        .as_ref()
        .and_then(|c| c.metadata.uid.clone())
        .or_else(|| gathered.claim.as_ref().and_then(|c| c.facts.uid()));
    // The claim as written, or else as cached (rebuilt from its record only then).
    let claim = written_claim.or_else(|| c.pvcs.get(&id).map(|c| c.body.claim()));
    if let Some(uid) = claim_uid
        && let Some(pv) =
            volumes::awaiting_rebind(ctx, &id, claim.as_ref(), &uid, gathered.retained.as_ref())
    {
        volumes::rebind(ctx, site, &pv, &uid).await?;
    }
    volumes::label_later(ctx, &id, claim.as_ref());
    // ROL-01, ROL-02: a platform change that rolls the pods waits for the change budget; the
    // objects after the StatefulSet are written meanwhile.
    let stored = c.statefulsets.get(&id);
    let stored_template = stored.as_ref().map(|s| s.body.hash);
    let roll = rolling::platform_roll(
        site,
        decision.restart.restart,
        stored.as_deref(),
        &rendered.statefulset,
    );
    let held = match rolling::admit(ctx, config, site, roll) {
        Ok(counted) => {
            workload(
                ctx,
                site,
                writes,
                rendered.statefulset,
                stored_template,
                decision,
                counted,
            )
            .await?;
            None
        }
        Err(e) => Some(e),
    };
    step(ctx, site, writes, &c.services, rendered.service).await?;
    let taken = path_taken_by(ctx, site);
    // An older Site serves this path: no route for this one (its own is removed).
    let route = rendered.route.filter(|_| taken.is_none());
    routes(ctx, config.routing.mode, site, route, writes).await?;
    match (taken, held) {
        (Some(other), _) => Err(Error::PathConflict {
            path: render::apps::public_path(site),
            site: other,
        }),
        (None, Some(held)) => Err(held),
        (None, None) => Ok(()),
    }
}

/// Writes the StatefulSet; `counted`: the write was counted against the change budget, and gives
/// its slot back when it rolls nothing.
async fn workload(
    ctx: &Context,
    site: &Site,
    writes: &mut Writes,
    desired: StatefulSet,
    stored_template: Option<u64>,
    decision: &Decision,
    counted: bool,
) -> Result<()> {
    let id = site.name_any();
    let written = step(ctx, site, writes, &ctx.caches.statefulsets, desired).await;
    // LIFE-15: a new pod template rolls the pods; a pod that never becomes ready would stop the
    // rollout. (A repaired replica count rolls nothing: its pods are left to the controller.)
    let rolled = matches!(&written, Ok((Written::Updated, Some(w)))
        if stored_template != Some(crate::controller::cache::kept::template_hash(w)));
    if counted && !rolled {
        rolling::unroll(ctx, &id);
    }
    written?;
    writes.workload_current = true;
    if decision.restart.restart {
        let note = "a qualifying change or upgrade request rolls the site pods";
        apply::publish(
            ctx,
            site,
            EventType::Normal,
            reasons::RESTARTED,
            note.into(),
        )
        .await;
    }
    if rolled && site.spec.configuration.enabled {
        apply::delete_not_ready_pods(ctx, &id).await;
    }
    Ok(())
}

/// Records a Warning Event for a problem a user must act on, once per distinct problem: pod
/// events keep reconciling a site whose spec is invalid or whose route is taken, and the status
/// already shows the problem once it was written.
async fn warn_once(ctx: &Context, site: &Site, e: &Error) {
    if !e.warns() {
        return;
    }
    let (reason, message) = (e.reason(), e.to_string());
    let known = site
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == reasons::PROGRESSING)
        })
        .is_some_and(|c| c.reason == reason && c.message == message);
    if !known {
        apply::publish(ctx, site, EventType::Warning, reason, message).await;
    }
}

/// Step 7: the status, written only when it changed (a new generation is a change: every
/// processed edit reaches `observedGeneration`, audit-only ones included).
async fn write_status(
    ctx: &Context,
    site: &Site,
    stopped: Option<&Error>,
    workload_current: bool,
    images: std::collections::BTreeMap<String, String>,
) -> Result<()> {
    let pods = ctx
        .caches
        .pods_by_site
        .get(&ctx.caches.pods, &site.name_any());
    let pods: Vec<&SitePod> = pods.iter().map(AsRef::as_ref).collect();
    let previous = site.status.as_ref();
    let enabled = status::deployed_enabled(site, previous, workload_current);
    let mut new = status::site_status(
        site,
        &pods,
        stopped,
        enabled,
        images,
        previous,
        &ctx.status_time(),
    );
    let failed = ctx
        .caches
        .failed_creates
        .state()
        .into_iter()
        .filter(|f| *f.statefulset == *site.name_any())
        .max_by(|a, b| a.event.cmp(&b.event));
    status::explain_missing_pods(&mut new, site, &pods, failed.as_deref());
    store_status(ctx, site, new).await
}

/// Stores `new` as the Site's status unless it already shows it.
async fn store_status(ctx: &Context, site: &Site, new: SiteStatus) -> Result<()> {
    let previous = site.status.as_ref();
    let name = site.name_any();
    let last_written = ctx.own.statuses.last_is(&name, &new);
    if status_up_to_date(previous, &new, last_written, || {
        // Stored and not shown yet, or shown since this reconcile read the Site.
        ctx.own.statuses.awaited(&name, &new)
            || ctx
                .caches
                .sites
                .get(&name)
                .is_some_and(|now| now.status.as_ref() == Some(&new))
    }) {
        return Ok(());
    }
    ctx.own.statuses.sending(&name, &new);
    let written = apply::patch_status(ctx, site, &new).await;
    ctx.own.statuses.answered(&name, written.is_ok());
    written?;
    if previous.and_then(|s| s.phase) != new.phase {
        tracing::info!(site = %site.name_any(), phase = ?new.phase, problems = new.problems.len(), "status changed");
    }
    Ok(())
}

/// Whether the Site already shows `new`: its cached status is `new`, and the last status the
/// operator wrote to it, if any since the start, is `new` too (`last_written`: whether it is).
/// The cached Site may not show the operator's last write yet: a pod that turns ready just after
/// a "not ready" status was written maps back to the status the cache still shows, and that
/// status must be written again. Nothing else would queue the Site: the watch event of the
/// operator's own write queues nothing. The other way round, when the last write is `new` and
/// it was stored and the watch has not shown it yet, or the watch showed it after the reconcile
/// read the Site (`awaited`), the cached status is merely older.
fn status_up_to_date(
    cached: Option<&SiteStatus>,
    new: &SiteStatus,
    last_written: Option<bool>,
    awaited: impl FnOnce() -> bool,
) -> bool {
    match last_written {
        Some(false) => false,
        Some(true) if cached != Some(new) => awaited(),
        _ => cached == Some(new),
    }
}

/// 48 hex digits from the system's random source (site tokens).
fn random_token() -> String {
    match crate::digest::random_bytes::<24>() {
        Some(bytes) => crate::digest::hex(&bytes),
        // The system random source failing is not recoverable by waiting; fall back to UUIDs,
        // which come from the same source through another path.
        None => uuid::Uuid::new_v4().simple().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Phase;

    /// The pin of a built-in application without an image in the spec: the status's record,
    /// else the running StatefulSet's image, else the catalogue's; unknown (None) while the
    /// StatefulSet it would be read from is the operator's unseen write.
    #[test]
    fn the_pin_waits_for_a_statefulset_the_cache_has_not_shown() {
        let config = crate::fixtures::config();
        let builtin = config.sites.applications[0].name.clone();
        let (recorded, running, catalogue) = ("r.example/app:1", "r.example/app:2", {
            render::apps::catalogue_image(&config.sites.applications[0], &config.sites.version)
        });
        let site = |status: bool, spec: Option<&str>| {
            let mut s = crate::fixtures::SiteBuilder::new("docs-handbook")
                .app(&builtin)
                .build();
            s.spec.configuration.applications[0].image = spec.map(str::to_owned);
            if status {
                s.status = Some(SiteStatus {
                    images: [(builtin.clone(), recorded.to_string())].into(),
                    ..Default::default()
                });
            }
            s
        };
        let images = Pairs::of([(builtin.clone(), running.to_string())].into());
        let cases = [
            // (status records, spec image, StatefulSet cached, unseen write, pin)
            (true, None, true, false, Some(recorded)),
            (true, None, false, true, Some(recorded)),
            (false, None, true, false, Some(running)),
            (false, None, false, false, Some(catalogue.as_str())),
            (false, None, false, true, None),
            (
                false,
                Some("r.example/app:3"),
                false,
                true,
                Some("r.example/app:3"),
            ),
        ];
        for (status, spec, cached, unseen, want) in cases {
            let site = site(status, spec);
            let pinned = pinned_site(&site, &config, cached.then_some(&images), unseen);
            let pin = pinned.as_ref().map(|s| {
                s.spec.configuration.applications[0]
                    .image
                    .clone()
                    .unwrap_or_default()
            });
            assert_eq!(
                pin.as_deref(),
                want,
                "status {status}, spec {spec:?}, cached {cached}, unseen {unseen}"
            );
        }
    }

    #[test]
    fn a_status_is_up_to_date_only_when_the_cache_and_the_last_write_both_show_it() {
        let status = |phase| SiteStatus {
            phase: Some(phase),
            ..Default::default()
        };
        let (running, pending) = (status(Phase::Running), status(Phase::Pending));
        let cases = [
            // (cached, last written is `new`, that write awaited, up to date)
            (Some(&running), None, false, true), // after a restart: nothing written yet
            (Some(&running), Some(true), false, true),
            // The cache still shows the status before the last write ("pending"): write again.
            (Some(&running), Some(false), false, false),
            (Some(&running), Some(false), true, false),
            // The last write is `new`: the cache is behind while it is awaited, else edited.
            (Some(&pending), Some(true), false, false),
            (Some(&pending), Some(true), true, true),
            (None, Some(true), true, true),
            (None, Some(true), false, false),
            (None, None, false, false),
        ];
        for (cached, last_written, awaited, want) in cases {
            assert_eq!(
                status_up_to_date(cached, &running, last_written, || awaited),
                want,
                "cached {cached:?}, last written {last_written:?}, awaited {awaited}"
            );
        }
    }
}
