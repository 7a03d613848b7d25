//! The reconcile side of the operator: [`Controller::start`] starts the watches, waits until
//! every cache has synced, then starts the workers and the background tasks;
//! [`Controller::shutdown`] stops them. Its files, one job each:
//!
//! - `mod.rs` (this file): [`Options`], [`Controller`]: start and shutdown;
//! - `watches.rs`: every watch, the caches and indexes it fills, and which Site key an event
//!   queues;
//! - `workers.rs`: the reconcile workers, the worker limit following the configuration, the
//!   retention loop (which writes through [`crate::retention`], shared with the `retention`
//!   command) and the periodic gauges;
//! - `footprint.rs` (tests only): the bytes the caches and bookkeeping hold per Site, by kind;
//! - [`context`]: what every reconcile shares (client, configuration, caches, recorder, cached
//!   lookups of the session key and the master Ingress host);
//! - [`caches`]: the set of caches a reconcile reads, and the HTTPRoute records watched once the
//!   cluster serves them;
//! - [`reconcile`]: the reconcile of one Site, as a recipe;
//! - [`routes`]: its routes step: the active mode's route, the other mode's removed;
//! - [`owned`]: writing one owned object for a Site: looked up, judged (only what the Site
//!   controls), applied where it differs;
//! - [`configuration`]: follows the `sites-config` ConfigMap (live configuration);
//! - [`apply`]: every write the reconciler makes to the cluster (docs/architecture.md lists
//!   them, and the few writers outside it);
//! - [`volumes`]: volume retention, in one file: retained volumes, claims of a previous Site,
//!   re-binds, when a bound volume gets its labels;
//! - [`labeller`]: the schedule of delayed volume labels (one task, a heap of due labels);
//! - [`own_writes`]: the one record of the operator's own writes, per owned object and per
//!   Site status: drift versus its own late writes;
//! - [`cache`]: the caches the watches fill and the reconciler reads (tables of what is kept of
//!   each object, indexes); its module doc is the glossary of their words;
//! - [`status`]: the Site status as a pure function;
//! - [`events`]: the Event recorder's memory (repeats counted as a series) and Event bodies;
//! - [`queue`]: the work queue (client-go semantics);
//! - [`leader`]: leader election with a Lease (which it writes itself: not a reconcile write);
//! - [`accounting`]: `sites_api_requests_total`, a tower layer on the client;
//! - [`changes`]: what a Site edit changed (logs) and which changes matter;
//! - [`rollout`]: the change budget of platform-wide rollouts (who rolls, who waits, the halt),
//!   and [`rolling`], where a reconcile and the periodic tick meet it.
//!
//! The path of an event: a watch (`watches.rs`) updates its cache ([`cache::table`]) and index
//! ([`cache::index`]), and queues the key of the Site the object belongs to (its id label) in the
//! [`queue::Queue`]; a worker (`workers.rs`) takes the key and runs [`reconcile::reconcile`],
//! which reads the caches and writes through [`apply`].

pub mod accounting;
pub mod apply;
pub mod cache;
pub mod caches;
pub mod changes;
pub mod configuration;
pub mod context;
pub mod events;
#[cfg(test)]
mod footprint;
pub mod labeller;
pub mod leader;
pub mod own_writes;
pub mod owned;
pub mod queue;
pub mod reconcile;
pub mod rolling;
pub mod rollout;
pub mod routes;
pub mod status;
pub mod volumes;
mod watches;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
use tokio::sync::watch;

use crate::config::live::{Follower, Live};
use crate::controller::context::{Context, Tunables};
use crate::controller::events::Reporter;
use crate::controller::own_writes::OwnWrites;
use crate::controller::queue::{Backoff, Queue};
use crate::metrics::{QueueMetrics, RECONCILER, ReconcileMetrics};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub namespace: String,
    /// Reconcile workers; None: `sitesConfig.operator.worker_limit`, followed when it changes.
    pub workers: Option<usize>,
    /// The ConfigMap to follow (`sites-config`); None: the configuration never changes (a file
    /// given with `run --config`).
    pub config_map: Option<String>,
    pub tunables: Tunables,
    /// Name of this replica (Events' reporting instance).
    pub instance: Option<String>,
    /// How long workers may take to finish on shutdown.
    pub drain: Duration,
    /// How often the retention policy runs (leader only); None: never.
    pub retention_interval: Option<Duration>,
}

/// The running controller.
pub struct Controller {
    pub context: Arc<Context>,
    pub queue: Queue<Arc<str>>,
    workers: Arc<workers::Workers>,
    background: Vec<tokio::task::JoinHandle<()>>,
    drain: Duration,
}

impl Controller {
    /// Starts the watches, waits until every cache has synced, then starts the workers, which
    /// reconcile only while `leading` is true.
    pub async fn start(
        client: kube::Client,
        config: Live,
        registry: &Registry,
        options: Options,
        leading: watch::Receiver<bool>,
    ) -> Result<Controller, prometheus::Error> {
        let ns = options.namespace.clone();
        let queue: Queue<Arc<str>> = Queue::new(
            Backoff::default(),
            Some(QueueMetrics::register(registry, RECONCILER)?),
        );
        let metrics = ReconcileMetrics::register(registry)?;
        let own = Arc::new(OwnWrites::default());
        let caches = watches::start(
            &client,
            &ns,
            &queue,
            crate::metrics::register_triggers(registry)?,
            &own,
        )
        .await;

        let recorder = events::Recorder::new(Reporter {
            controller: "sites-operator".into(),
            instance: options.instance.clone(),
        });
        let mut background = Vec::new();
        if let Some(name) = &options.config_map {
            let follow = configuration::Follow {
                client: client.clone(),
                namespace: ns.clone(),
                name: name.clone(),
                valid: crate::metrics::register_config_valid(registry)?,
                recorder: Some(recorder.clone()),
                leading: leading.clone(),
            };
            let follower = Follower::new(config.clone(), ns.clone());
            background.push(tokio::spawn(configuration::follow(follow, follower)));
        }
        let mut context = Context::new(
            client,
            config,
            ns,
            caches,
            Some(recorder),
            options.tunables.clone(),
        );
        context.own = own;
        let context = Arc::new(context);

        let pool = workers::start(&context, &queue, &metrics, &leading, options.workers);
        background.push(tokio::spawn(workers::on_config_change(
            context.clone(),
            queue.clone(),
            pool.clone(),
            workers::worker_limit(options.workers),
        )));
        background.push(tokio::spawn(workers::observe(
            context.clone(),
            queue.clone(),
            metrics,
            leading.clone(),
        )));
        if let Some(every) = options.retention_interval {
            background.push(tokio::spawn(workers::retention_loop(
                context.clone(),
                every,
                leading.clone(),
            )));
        }
        Ok(Controller {
            context,
            queue,
            workers: pool,
            background,
            drain: options.drain,
        })
    }

    /// Stops handing out keys and waits (up to the drain period) for running reconciles.
    pub async fn shutdown(self) {
        self.queue.shutdown();
        for b in &self.background {
            b.abort();
        }
        self.workers.finish(self.drain).await;
    }
}
