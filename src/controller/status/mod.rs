//! The Site status as a pure function of the Site, its pods, the reconcile outcome, the stored
//! status and the time (SPEC 4.4, LIFE-10).
//!
//! Pod status mapping follows the lifecycle design's `resolve_pod_status`:
//! - conditions are ordered by lastTransitionTime; the first failed one wins, otherwise the last
//!   successful one;
//! - when the winning condition failed, waiting and terminated containers, and running containers
//!   that are not ready (kind `running`, reason `NotReady`), are problems; any problem makes the
//!   phase Pending;
//! - a disabled site is Disabled whatever the pods say;
//! - otherwise the pod phase is used (Pending when absent);
//! - `all_steps_started` only for a Running pod whose deciding condition is successful.
//!
//! Over several pods: Failed if one failed, else Pending if one is pending, else Running;
//! problems are the union; `all_steps_started` when it holds for every pod.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::Error;
use crate::crd::{PAUSED_ANNOTATION, Phase, Problem, Site, SiteStatus};
use crate::reasons::{self, AVAILABLE, PROGRESSING, READY, RECONCILING, STALLED};
use crate::watched::Pod;

/// The status of one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodStatus {
    pub phase: Phase,
    pub problems: Vec<Problem>,
    pub all_steps_started: bool,
}

/// A site pod as the operator's cache keeps it: its name, its site, and what the status
/// mapping reads, resolved when the watch delivers the pod (a few dozen bytes instead of the
/// pod's metadata and status; an event that leaves them equal queues nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct SitePod {
    pub name: Box<str>,
    /// The pod's uid (a UUID's bytes): deletes are conditional on it.
    pub uid: Option<[u8; 16]>,
    /// The site id label (the cache keeps it only for the site's own pods: the operator's,
    /// controlled by the site's StatefulSet, [`crate::controller::cache::kept::pod`]).
    pub site: Option<Box<str>>,
    /// Being deleted.
    pub terminating: bool,
    /// [`pod_ready`].
    pub ready: bool,
    /// [`resolve_pod`].
    pub status: PodStatus,
}

impl SitePod {
    pub fn of(pod: &Pod) -> SitePod {
        SitePod {
            name: pod.metadata.name.as_deref().unwrap_or_default().into(),
            uid: pod
                .metadata
                .uid
                .as_deref()
                .and_then(|u| uuid::Uuid::try_parse(u).ok())
                .map(uuid::Uuid::into_bytes),
            site: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::crd::ID_LABEL))
                .map(|id| id.as_str().into()),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            ready: pod_ready(pod),
            status: resolve_pod(pod),
        }
    }
}

fn phase_of(pod: &Pod) -> Phase {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => Phase::Running,
        Some("Failed") | Some("Succeeded") => Phase::Failed,
        _ => Phase::Pending,
    }
}

/// `resolve_pod_status` of the lifecycle design, for one pod of an enabled site.
pub fn resolve_pod(pod: &Pod) -> PodStatus {
    let status = pod.status.as_ref();
    let mut conditions: Vec<_> = status
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    // Stable sort: conditions without a time keep their order, before the timed ones.
    conditions.sort_by_key(|c| c.last_transition_time.as_ref().map(|t| t.0));
    let failed = conditions.iter().find(|c| c.status != "True");
    let deciding = failed.or(conditions.last());
    let successful = deciding.is_some_and(|c| c.status == "True");
    let mut problems = Vec::new();
    if failed.is_some() {
        for c in status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
        {
            let state = c.state.as_ref();
            if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                problems.push(Problem {
                    name: c.name.clone(),
                    kind: "waiting".into(),
                    reason: w.reason.clone(),
                    message: w.message.clone(),
                });
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                problems.push(Problem {
                    name: c.name.clone(),
                    kind: "terminated".into(),
                    reason: t.reason.clone(),
                    message: t.message.clone(),
                });
            } else if state.and_then(|s| s.running.as_ref()).is_some() && !c.ready {
                problems.push(Problem {
                    name: c.name.clone(),
                    kind: "running".into(),
                    reason: Some("NotReady".into()),
                    message: None,
                });
            }
        }
    }
    let phase = if problems.is_empty() {
        phase_of(pod)
    } else {
        Phase::Pending
    };
    PodStatus {
        all_steps_started: phase == Phase::Running && successful,
        phase,
        problems,
    }
}

/// Whether the pod is Running with its Ready condition True.
pub fn pod_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Phase, problems and `all_steps_started` of the site over its (non-terminating) pods;
/// `enabled`: whether the site runs as deployed ([`deployed_enabled`]).
pub fn aggregate(enabled: bool, pods: &[&SitePod]) -> PodStatus {
    if !enabled {
        return PodStatus {
            phase: Phase::Disabled,
            problems: Vec::new(),
            all_steps_started: false,
        };
    }
    let mut pods: Vec<&&SitePod> = pods.iter().filter(|p| !p.terminating).collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    if pods.is_empty() {
        return PodStatus {
            phase: Phase::Pending,
            problems: Vec::new(),
            all_steps_started: false,
        };
    }
    let resolved: Vec<&PodStatus> = pods.iter().map(|p| &p.status).collect();
    let phase = if resolved.iter().any(|r| r.phase == Phase::Failed) {
        Phase::Failed
    } else if resolved.iter().any(|r| r.phase == Phase::Pending) {
        Phase::Pending
    } else {
        Phase::Running
    };
    let mut problems: Vec<Problem> = Vec::new();
    for r in &resolved {
        for p in &r.problems {
            if !problems.contains(p) {
                problems.push(p.clone());
            }
        }
    }
    PodStatus {
        phase,
        problems,
        all_steps_started: resolved.iter().all(|r| r.all_steps_started),
    }
}

/// Whether the site runs enabled as deployed: the spec's `enabled` once the StatefulSet is as
/// the spec asks (`workload_current`); before that (the reconcile stopped earlier) what the
/// previous status said, so the phase never runs ahead of the objects (no Disabled while the
/// pods still run).
pub fn deployed_enabled(
    site: &Site,
    previous: Option<&SiteStatus>,
    workload_current: bool,
) -> bool {
    match previous.and_then(|p| p.phase) {
        Some(phase) if !workload_current => phase != Phase::Disabled,
        _ => site.spec.configuration.enabled,
    }
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    previous: Option<&SiteStatus>,
    now: &Time,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    let last_transition_time = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The complete status to store for `site`: pod mapping, the conditions and
/// `observedGeneration`. `stopped` is the error that stopped the last reconcile before every
/// object was written (None: every object is as rendered); its class decides Progressing.
/// `enabled` is whether the site runs enabled as deployed ([`deployed_enabled`]); `images` the
/// pinned image of each built-in application (`status.images`). Condition transition times are
/// kept from `previous` while a condition's status does not change, so recomputing an unchanged
/// state gives an equal value (and no write).
///
/// Besides Available and Progressing (SPEC 4.4), the conditions kstatus reads (SPEC 4.7):
/// `Ready` True exactly when the site is Available and not Progressing, or is scaled to zero on
/// purpose (archived: reason Disabled; `settings.replicas` 0: reason ScaledToZero) with nothing
/// left to do; `Reconciling` is Progressing under the name kstatus reads; `Stalled` True on a
/// terminal error, with its reason.
pub fn site_status(
    site: &Site,
    pods: &[&SitePod],
    stopped: Option<&Error>,
    enabled: bool,
    images: BTreeMap<String, String>,
    previous: Option<&SiteStatus>,
    now: &Time,
) -> SiteStatus {
    let generation = site.metadata.generation;
    let c = &site.spec.configuration;
    let pod_status = aggregate(enabled, pods);
    let ready = pods.iter().filter(|p| !p.terminating && p.ready).count();
    let want = usize::try_from(c.settings.replicas).unwrap_or(0);
    // A Site a rollout holds back has every object written but its StatefulSet, whose pods
    // serve as before: its availability is theirs.
    let ensured = stopped.is_none_or(Error::holds_rollout);

    let (available, a_reason, a_message) = if !enabled {
        (
            false,
            reasons::DISABLED,
            "the site is archived: scaled to zero, requests redirect to the Hub's 410 page"
                .to_string(),
        )
    } else if want == 0 {
        (
            false,
            reasons::SCALED_TO_ZERO,
            "settings.replicas is 0".to_string(),
        )
    } else if !ensured {
        (
            false,
            reasons::OBJECTS_NOT_READY,
            "not every object of the site is up to date yet".to_string(),
        )
    } else if ready >= want && pod_status.phase == Phase::Running {
        (
            true,
            reasons::AVAILABLE_REASON,
            format!("{ready} of {want} pods ready"),
        )
    } else {
        (
            false,
            reasons::PODS_NOT_READY,
            format!("{ready} of {want} pods ready"),
        )
    };
    let (progressing, p_reason, p_message) = match stopped {
        Some(e) => (e.is_transient(), e.reason(), e.to_string()),
        None if available => (
            false,
            reasons::UP_TO_DATE,
            "the site is up to date".to_string(),
        ),
        None if !enabled => (false, reasons::DISABLED, "the site is archived".to_string()),
        None if want == 0 => (
            false,
            reasons::SCALED_TO_ZERO,
            "no pods requested".to_string(),
        ),
        None => (
            true,
            reasons::PODS_NOT_READY,
            format!("waiting for {want} ready pods ({ready} now)"),
        ),
    };
    // Scaled to zero on purpose, with every object written: as ready as it is meant to be.
    let idle = ensured && !progressing && (!enabled || want == 0);
    let (ready, r_reason, r_message) = if (available && !progressing && stopped.is_none()) || idle {
        (true, a_reason, a_message.clone())
    } else {
        // Why not: the error, or what the site waits for.
        (false, p_reason, p_message.clone())
    };
    let (stalled, s_reason, s_message) = match stopped {
        Some(_) if !progressing => (true, p_reason, p_message.clone()),
        _ => (
            false,
            reasons::NO_TERMINAL_ERROR,
            "no error stops the reconciles".to_string(),
        ),
    };
    let conditions = [
        (AVAILABLE, available, a_reason, a_message),
        (PROGRESSING, progressing, p_reason, p_message.clone()),
        (READY, ready, r_reason, r_message),
        (RECONCILING, progressing, p_reason, p_message),
        (STALLED, stalled, s_reason, s_message),
    ];
    SiteStatus {
        phase: Some(pod_status.phase),
        path: Some(crate::render::apps::public_path(site)),
        problems: pod_status.problems,
        all_steps_started: Some(pod_status.all_steps_started),
        observed_generation: generation,
        images,
        conditions: conditions
            .into_iter()
            .map(|(type_, status, reason, message)| {
                condition(type_, status, reason, message, generation, previous, now)
            })
            .collect(),
    }
}

/// Whether a status has the Available condition True.
pub fn available(status: Option<&SiteStatus>) -> bool {
    status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == AVAILABLE && c.status == "True")
    })
}

/// The status of a paused Site (ROL-03): the status it had, with one condition more, `Paused`
/// True; nothing else is recomputed, so a paused Site's status shows what it was when it was
/// paused. Resuming drops the condition: [`site_status`] has no such condition.
pub fn paused_status(site: &Site, previous: Option<&SiteStatus>, now: &Time) -> SiteStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.conditions.retain(|c| c.type_ != reasons::PAUSED);
    status.conditions.push(condition(
        reasons::PAUSED,
        true,
        reasons::PAUSED,
        format!(
            "{PAUSED_ANNOTATION} is \"true\": the operator writes nothing for this Site until the annotation is removed"
        ),
        site.metadata.generation,
        previous,
        now,
    ));
    status
}

/// Why the StatefulSet could not create a pod: the controller manager's `FailedCreate` Event
/// on it, as the operator's cache keeps it (the Event's name; the StatefulSet, which is the
/// site id; the message, e.g. `create Pod docs-0 in StatefulSet docs failed error: pods
/// "docs-0" is forbidden: no PriorityClass with name low-priority was found`).
#[derive(Clone, Debug, PartialEq)]
pub struct FailedCreate {
    pub event: Box<str>,
    pub statefulset: Box<str>,
    pub message: Box<str>,
}

/// The Event's field selector: only these Events are watched.
pub const FAILED_CREATE_EVENTS: &str = "involvedObject.kind=StatefulSet,reason=FailedCreate";

impl FailedCreate {
    pub fn of(event: &k8s_openapi::api::core::v1::Event) -> FailedCreate {
        FailedCreate {
            event: event.metadata.name.as_deref().unwrap_or_default().into(),
            statefulset: event
                .involved_object
                .name
                .as_deref()
                .unwrap_or_default()
                .into(),
            message: event.message.as_deref().unwrap_or_default().into(),
        }
    }
}

/// Says in `status` why the site waits for pods that do not exist: while fewer pods exist than
/// the site wants and the StatefulSet reported a `FailedCreate`, the conditions that wait for
/// pods (reason PodsNotReady) carry reason FailedCreate and the API server's message instead of
/// "0 of 1 pods ready", which would leave a user looking at pods that are not there.
pub fn explain_missing_pods(
    status: &mut SiteStatus,
    site: &Site,
    pods: &[&SitePod],
    failed: Option<&FailedCreate>,
) {
    let Some(failed) = failed else {
        return;
    };
    let want = usize::try_from(site.spec.configuration.settings.replicas).unwrap_or(0);
    let exist = pods.iter().filter(|p| !p.terminating).count();
    if exist >= want {
        return;
    }
    let message = format!("{exist} of {want} pods exist: {}", failed.message);
    for c in &mut status.conditions {
        if c.reason == reasons::PODS_NOT_READY {
            c.reason = reasons::FAILED_CREATE.into();
            c.message = message.clone();
        }
    }
}

#[cfg(test)]
mod tests;
