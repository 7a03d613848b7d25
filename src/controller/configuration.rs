//! Follows the `sites-config` ConfigMap through the API (SPEC 4.6, "Live configuration"): each
//! version the watch delivers goes through [`Follower`]; a valid one becomes the configuration
//! in force (the controller then reconciles every Site, writing only what changed), an invalid one
//! is refused and the last valid one stays. Every replica follows (its webhooks answer with the
//! configuration in force); the leader records the Events on the ConfigMap.

use crate::controller::events::{Event, EventType, Recorder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use prometheus::IntGauge;
use tokio::sync::watch;

use crate::config::live::{Follower, Verdict};
use crate::controller::apply;
use crate::reasons;
use crate::validation::join;

/// What the follower needs besides the [`Follower`] itself.
pub struct Follow {
    pub client: kube::Client,
    pub namespace: String,
    /// The ConfigMap's name (`sites-config`).
    pub name: String,
    pub valid: IntGauge,
    pub recorder: Option<Recorder>,
    /// Events are recorded while this replica leads (one Event per change, not one per replica).
    pub leading: watch::Receiver<bool>,
}

/// Watches the ConfigMap until the task is aborted.
pub async fn follow(follow: Follow, mut follower: Follower) {
    let api: Api<ConfigMap> = Api::namespaced(follow.client.clone(), &follow.namespace);
    let selector = format!("metadata.name={}", follow.name);
    let stream = watcher(api, watcher::Config::default().fields(&selector)).default_backoff();
    futures::pin_mut!(stream);
    // Whether the (re)list that is under way has returned the ConfigMap.
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let (verdict, object) = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)) => {
                listed = true;
                (follower.observe(cm.data.as_ref()), Some(cm))
            }
            Ok(watcher::Event::InitDone) if listed => continue,
            Ok(watcher::Event::InitDone) => (follower.removed(), None),
            Ok(watcher::Event::Delete(cm)) => (follower.removed(), Some(cm)),
            Err(e) => {
                tracing::warn!(configmap = %follow.name, error = %e, "watch error; retrying");
                continue;
            }
        };
        report(&follow, &verdict, object.as_ref()).await;
    }
}

/// Logs, sets the gauge and records the Event of one verdict.
async fn report(follow: &Follow, verdict: &Verdict, object: Option<&ConfigMap>) {
    follow.valid.set(i64::from(verdict.valid()));
    let event = match verdict {
        Verdict::Unchanged | Verdict::Refused { first: false, .. } => return,
        Verdict::Applied { changed } => {
            let changed = changed.join(", ");
            tracing::info!(configmap = %follow.name, changed = %changed, "platform configuration changed; reconciling every Site");
            Event {
                type_: EventType::Normal,
                reason: reasons::CONFIGURATION_APPLIED.into(),
                note: Some(format!("in force; changed: {changed}")),
                action: "Apply".into(),
                secondary: None,
            }
        }
        Verdict::Refused { problems, .. } => {
            for problem in problems {
                tracing::warn!(configmap = %follow.name, field = %problem.field, "configuration refused: {problem}");
            }
            tracing::warn!(configmap = %follow.name, problems = problems.len(), "the platform configuration is invalid; the last valid configuration stays in force");
            Event {
                type_: EventType::Warning,
                reason: reasons::INVALID_CONFIGURATION.into(),
                note: Some(apply::event_note(format!(
                    "refused, the last valid configuration stays in force: {}",
                    join(problems)
                ))),
                action: "Apply".into(),
                secondary: None,
            }
        }
    };
    let Some(recorder) = &follow.recorder else {
        return;
    };
    if !*follow.leading.borrow() {
        return;
    }
    let reference = object
        .map(|cm| cm.object_ref(&()))
        .unwrap_or_else(|| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(follow.name.clone()),
            namespace: Some(follow.namespace.clone()),
            ..Default::default()
        });
    if let Err(e) = apply::record_event(&follow.client, recorder, &event, &reference).await {
        tracing::warn!(error = %e, reason = %event.reason, "cannot record an event");
    }
}
