//! The reconcile workers and the controller's periodic tasks: a pool of `worker_limit` workers
//! taking keys from the [`Queue`] (reconciling only while this replica leads, a panic caught and
//! retried), the pool resized and every Site queued when a new configuration comes in force, the
//! retention policy run by the leader ([`crate::retention`]), and the gauges of in-progress work
//! and Sites by phase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::watch;
use tracing::Instrument;

use crate::config::PlatformConfig;
use crate::controller::context::Context;
use crate::controller::queue::Queue;
use crate::controller::reconcile::{self, Next};
use crate::controller::rolling;
use crate::controller::rollout::{self, Rollouts};
use crate::crd::{Phase, Site};
use crate::metrics::ReconcileMetrics;

/// How many workers reconcile: `--workers`, else the configuration's worker limit.
pub(super) fn worker_limit(
    fixed: Option<usize>,
) -> impl Fn(&PlatformConfig) -> usize + Send + Sync + 'static {
    move |c: &PlatformConfig| fixed.unwrap_or(c.sites.operator.worker_limit as usize)
}

/// The worker pool, staffed for the configuration in force; it reconciles only while
/// `leading` is true.
pub(super) fn start(
    context: &Arc<Context>,
    queue: &Queue<Arc<str>>,
    metrics: &ReconcileMetrics,
    leading: &watch::Receiver<bool>,
    fixed: Option<usize>,
) -> Arc<Workers> {
    let workers = Workers {
        slots: Default::default(),
        ctx: context.clone(),
        queue: queue.clone(),
        metrics: metrics.clone(),
        leading: leading.clone(),
        limit: watch::channel(0).0,
    };
    workers.staff(worker_limit(fixed)(&context.config.get()));
    Arc::new(workers)
}

/// The reconcile workers: `limit` of them run. A smaller limit stops the surplus workers once
/// they finish the reconcile at hand; a larger one starts the missing ones.
pub(super) struct Workers {
    /// Worker `i` runs in slot `i` (None or finished: not running).
    slots: std::sync::Mutex<Vec<Option<tokio::task::JoinHandle<()>>>>,
    ctx: Arc<Context>,
    queue: Queue<Arc<str>>,
    metrics: ReconcileMetrics,
    leading: watch::Receiver<bool>,
    limit: watch::Sender<usize>,
}

impl Workers {
    /// Sets the limit and starts the workers below it that do not run.
    fn staff(&self, limit: usize) {
        let limit = limit.max(1);
        self.limit.send_replace(limit);
        self.metrics.max_concurrent.set(limit as i64);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots.len() < limit {
            slots.resize_with(limit, || None);
        }
        for (i, slot) in slots.iter_mut().enumerate().take(limit) {
            if slot.as_ref().is_none_or(|h| h.is_finished()) {
                *slot = Some(tokio::spawn(worker(
                    i,
                    self.limit.subscribe(),
                    self.ctx.clone(),
                    self.queue.clone(),
                    self.metrics.clone(),
                    self.leading.clone(),
                )));
            }
        }
    }

    /// Waits (up to `drain`) for the running workers to finish the reconcile at hand (the
    /// queue, shut down, hands out no more keys).
    pub(super) async fn finish(&self, drain: Duration) {
        let handles = std::mem::take(&mut *self.slots.lock().unwrap_or_else(|e| e.into_inner()));
        let running = futures::future::join_all(handles.into_iter().flatten());
        if tokio::time::timeout(drain, running).await.is_err() {
            tracing::warn!(?drain, "reconciles still running after the drain period");
        }
    }
}

/// On every new configuration in force: the worker limit follows it, and every Site is
/// reconciled (only objects whose rendering changed are written; pods roll only where the pod
/// template changed), at the workers' pace.
pub(super) async fn on_config_change(
    ctx: Arc<Context>,
    queue: Queue<Arc<str>>,
    workers: Arc<Workers>,
    limit: impl Fn(&PlatformConfig) -> usize,
) {
    let mut changes = ctx.config.changes();
    changes.mark_unchanged();
    while changes.changed().await.is_ok() {
        let config = changes.borrow_and_update().clone();
        workers.staff(limit(&config));
        // In the order a rollout takes them (ROL-01): Sites that are not Available first.
        let sites = ctx.caches.sites.names_by_availability();
        ctx.rollouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .new_version(rollout::version(&config), sites.clone());
        for site in sites {
            queue.add(site.into());
        }
    }
}

async fn worker(
    id: usize,
    limit: watch::Receiver<usize>,
    ctx: Arc<Context>,
    queue: Queue<Arc<str>>,
    metrics: ReconcileMetrics,
    mut leading: watch::Receiver<bool>,
) {
    while id < *limit.borrow() {
        let Some(key) = queue.get().await else { break };
        if !*leading.borrow() {
            // Not the leader: hand the key back once leadership comes.
            queue.done(&key);
            queue.add_after(key, Duration::from_secs(1));
            let _ = tokio::time::timeout(Duration::from_secs(1), leading.changed()).await;
            continue;
        }
        metrics.active_workers.inc();
        let started = Instant::now();
        // A panicking reconcile is caught, counted and retried with backoff; the worker lives on.
        let next = guarded(
            &key,
            &metrics,
            reconcile::reconcile(&ctx, &key)
                .instrument(tracing::info_span!("reconcile", site = %key)),
        )
        .await;
        metrics.time.observe(started.elapsed().as_secs_f64());
        metrics.active_workers.dec();
        let result = match next {
            Next::Terminal(after) => {
                // Counted in both totals, as controller-runtime counts a TerminalError.
                metrics
                    .terminal_errors
                    .with_label_values(&[] as &[&str])
                    .inc();
                metrics.errors.with_label_values(&[] as &[&str]).inc();
                queue.forget(&key);
                if let Some(delay) = after {
                    queue.add_after(key.clone(), delay);
                }
                "error"
            }
            Next::Done => {
                queue.forget(&key);
                "success"
            }
            Next::After(delay) => {
                queue.forget(&key);
                queue.add_after(key.clone(), delay);
                "requeue_after"
            }
            Next::Backoff => {
                metrics.errors.with_label_values(&[] as &[&str]).inc();
                queue.add_rate_limited(key.clone());
                "error"
            }
        };
        metrics.total.with_label_values(&[result]).inc();
        queue.done(&key);
    }
}

/// Runs one reconcile; a panic is caught, logged, counted in
/// `controller_runtime_reconcile_panics_total` and turned into a retry with backoff, so the
/// worker lives on.
async fn guarded(
    key: &str,
    metrics: &ReconcileMetrics,
    reconcile: impl std::future::Future<Output = Next>,
) -> Next {
    std::panic::AssertUnwindSafe(reconcile)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let message = panic_message(panic.as_ref());
            tracing::error!(site = %key, panic = %message, "reconcile panicked; retrying with backoff");
            metrics.panics.with_label_values(&[] as &[&str]).inc();
            Next::Backoff
        })
}

/// The text of a caught panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Runs the retention policy every `every` while leading.
pub(super) async fn retention_loop(
    ctx: Arc<Context>,
    every: Duration,
    leading: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !*leading.borrow() {
            continue;
        }
        let config = ctx.config.get();
        let retention = &config.sites.retention;
        let today = crate::retention::today();
        // The cached Sites, a page at a time (the cache holds them packed): listing every Site
        // from the API server each time would hold them all at once, decoded whole.
        let api = ctx.api::<Site>();
        let names = ctx.caches.sites.names();
        for page in names.chunks(RETENTION_PAGE) {
            let sites: Vec<_> = page
                .iter()
                .filter_map(|name| ctx.caches.sites.get(name))
                .collect();
            match crate::retention::apply_to(&api, &sites, retention, today, false, |_| {}).await {
                Ok(acted) => {
                    for (site, action) in &acted {
                        tracing::info!(%site, ?action, "retention policy applied");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention policy run failed; next run in {every:?}");
                    break;
                }
            }
        }
    }
}

/// Sites decoded at once by a run of the retention policy.
const RETENTION_PAGE: usize = 100;

/// Once a second: the rollout's tick on the leader ([`rolling::tick`]), and the gauges of
/// in-progress work, Sites by phase, paused Sites and the rollout.
pub(super) async fn observe(
    ctx: Arc<Context>,
    queue: Queue<Arc<str>>,
    metrics: ReconcileMetrics,
    leading: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // The rollout status last published, and when; whether this replica led at the last tick.
    let mut published = None;
    let mut led = false;
    loop {
        tick.tick().await;
        queue.observe_in_progress();
        let mut counts = [0i64; 4];
        let mut paused = 0;
        for summary in ctx.caches.sites.summaries() {
            paused += i64::from(summary.paused);
            let i = match summary.phase {
                Some(Phase::Running) => 1,
                Some(Phase::Disabled) => 2,
                Some(Phase::Failed) => 3,
                _ => 0,
            };
            counts[i] += 1;
        }
        let leads = *leading.borrow();
        let progress = if leads {
            rolling::tick(&ctx, &queue, paused as usize, &mut published).await
        } else {
            let mut rollouts = ctx.rollouts.lock().unwrap_or_else(|e| e.into_inner());
            if led {
                // Leadership lost: a new leader starts with no rollout state, and so does this
                // one when it leads again.
                let version = rollout::version(&ctx.config.get());
                *rollouts = Rollouts::new(version, ctx.caches.sites.names());
                published = None;
            }
            rollouts.progress()
        };
        led = leads;
        for (state, n) in [
            ("rolled", progress.rolled),
            ("rolling", progress.rolling),
            ("waiting", progress.waiting),
            ("failed", progress.failed),
        ] {
            metrics
                .rollout_sites
                .with_label_values(&[state])
                .set(n as i64);
        }
        metrics
            .rollout_halted
            .set(i64::from(progress.halted.is_some()));
        for (phase, n) in ["Pending", "Running", "Disabled", "Failed"]
            .iter()
            .zip(counts)
        {
            metrics.by_phase.with_label_values(&[phase]).set(n);
        }
        metrics.paused.set(paused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Registry;

    #[tokio::test]
    async fn a_panicking_reconcile_is_caught_counted_and_retried_with_backoff() {
        let registry = Registry::new();
        let metrics = ReconcileMetrics::register(&registry).unwrap();
        let text = crate::metrics::encode(&registry);
        for series in [
            "controller_runtime_reconcile_panics_total{controller=\"site\"} 0",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"site\"} 0",
        ] {
            assert!(
                text.contains(series),
                "{series} exists from the start:\n{text}"
            );
        }
        let next = guarded("docs-handbook", &metrics, async {
            panic!("a bug");
        })
        .await;
        assert_eq!(next, Next::Backoff);
        let next = guarded("docs-handbook", &metrics, async { Next::Done }).await;
        assert_eq!(next, Next::Done);
        assert_eq!(metrics.panics.with_label_values(&[] as &[&str]).get(), 1);
        assert_eq!(
            panic_message(&String::from("formatted") as &(dyn std::any::Any + Send)),
            "formatted"
        );
    }
}
