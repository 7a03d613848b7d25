use serde_json::{Value, json};

use super::*;
use crate::fixtures::SiteBuilder;
use crate::validation::FieldError;

/// A pod as the cache keeps it ([`SitePod::of`], which resolves its status).
fn pod(name: &str, phase: &str, conditions: Value, containers: Value) -> SitePod {
    SitePod::of(
        &serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": phase, "conditions": conditions, "containerStatuses": containers}
        }))
        .unwrap(),
    )
}

fn cond(type_: &str, status: &str, at: &str) -> Value {
    json!({"type": type_, "status": status, "lastTransitionTime": at})
}

fn running(name: &str, ready: bool) -> Value {
    json!({"name": name, "ready": ready, "restartCount": 0, "image": "x", "imageID": "",
           "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}})
}

fn waiting(name: &str, reason: &str, message: &str) -> Value {
    json!({"name": name, "ready": false, "restartCount": 3, "image": "x", "imageID": "",
           "state": {"waiting": {"reason": reason, "message": message}}})
}

fn terminated(name: &str, reason: &str) -> Value {
    json!({"name": name, "ready": false, "restartCount": 1, "image": "x", "imageID": "",
           "state": {"terminated": {"exitCode": 1, "reason": reason}}})
}

/// A running pod whose one container (`static`) is ready.
fn ready_pod(name: &str) -> SitePod {
    pod(
        name,
        "Running",
        all_good(),
        json!([running("static", true)]),
    )
}

fn all_good() -> Value {
    json!([
        cond("PodScheduled", "True", "2026-01-01T00:00:00Z"),
        cond("Initialized", "True", "2026-01-01T00:00:01Z"),
        cond("ContainersReady", "True", "2026-01-01T00:00:05Z"),
        cond("Ready", "True", "2026-01-01T00:00:05Z")
    ])
}

fn not_ready() -> Value {
    json!([
        cond("PodScheduled", "True", "2026-01-01T00:00:00Z"),
        cond("Initialized", "True", "2026-01-01T00:00:01Z"),
        cond("ContainersReady", "False", "2026-01-01T00:00:02Z"),
        cond("Ready", "False", "2026-01-01T00:00:02Z")
    ])
}

fn problem(name: &str, kind: &str, reason: Option<&str>, message: Option<&str>) -> Problem {
    Problem {
        name: name.into(),
        kind: kind.into(),
        reason: reason.map(Into::into),
        message: message.map(Into::into),
    }
}

#[test]
fn resolve_pod_status_cases() {
    // (case, pod, phase, problems, all_steps_started)
    let cases = vec![
        (
            "running and ready",
            ready_pod("p"),
            Phase::Running,
            vec![],
            true,
        ),
        (
            "crash loop: waiting container",
            pod(
                "p",
                "Running",
                not_ready(),
                json!([
                    running("static", true),
                    waiting("app", "CrashLoopBackOff", "back-off 40s")
                ]),
            ),
            Phase::Pending,
            vec![problem(
                "app",
                "waiting",
                Some("CrashLoopBackOff"),
                Some("back-off 40s"),
            )],
            false,
        ),
        (
            "image pull failure",
            pod(
                "p",
                "Pending",
                not_ready(),
                json!([waiting("app", "ImagePullBackOff", "pull access denied")]),
            ),
            Phase::Pending,
            vec![problem(
                "app",
                "waiting",
                Some("ImagePullBackOff"),
                Some("pull access denied"),
            )],
            false,
        ),
        (
            "terminated container",
            pod(
                "p",
                "Running",
                not_ready(),
                json!([terminated("app", "Error")]),
            ),
            Phase::Pending,
            vec![problem("app", "terminated", Some("Error"), None)],
            false,
        ),
        (
            "started but never ready: running with ready false",
            pod(
                "p",
                "Running",
                not_ready(),
                json!([running("static", true), running("app", false)]),
            ),
            Phase::Pending,
            vec![problem("app", "running", Some("NotReady"), None)],
            false,
        ),
        (
            "failed condition without container problems keeps the pod phase",
            pod(
                "p",
                "Pending",
                json!([cond("PodScheduled", "False", "2026-01-01T00:00:00Z")]),
                json!([]),
            ),
            Phase::Pending,
            vec![],
            false,
        ),
        (
            "the first failed condition by time wins over later successful ones",
            pod(
                "p",
                "Running",
                json!([
                    cond("Ready", "True", "2026-01-01T00:00:09Z"),
                    cond("ContainersReady", "False", "2026-01-01T00:00:03Z"),
                    cond("PodScheduled", "True", "2026-01-01T00:00:00Z")
                ]),
                json!([running("app", false)]),
            ),
            Phase::Pending,
            vec![problem("app", "running", Some("NotReady"), None)],
            false,
        ),
        (
            "successful conditions ignore container states",
            pod("p", "Running", all_good(), json!([running("app", false)])),
            Phase::Running,
            vec![],
            true,
        ),
        (
            "no status yet",
            SitePod::of(&serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap()),
            Phase::Pending,
            vec![],
            false,
        ),
        (
            "pending pod with successful conditions is not all started",
            pod(
                "p",
                "Pending",
                json!([cond("PodScheduled", "True", "2026-01-01T00:00:00Z")]),
                json!([]),
            ),
            Phase::Pending,
            vec![],
            false,
        ),
        (
            "failed pod",
            pod("p", "Failed", all_good(), json!([])),
            Phase::Failed,
            vec![],
            false,
        ),
    ];
    for (case, p, phase, problems, started) in cases {
        let got = &p.status;
        assert_eq!(got.phase, phase, "{case}");
        assert_eq!(got.problems, problems, "{case}");
        assert_eq!(got.all_steps_started, started, "{case}");
    }
}

fn time(s: &str) -> Time {
    serde_json::from_value(json!(s)).unwrap()
}

fn get<'a>(s: &'a SiteStatus, type_: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn disabled_sites_report_disabled_whatever_the_pods_say() {
    let p = pod(
        "p",
        "Running",
        not_ready(),
        json!([waiting("app", "CrashLoopBackOff", "x")]),
    );
    let s = site_status(
        &SiteBuilder::new("docs-handbook")
            .namespace("sites")
            .generation(4)
            .enabled(false)
            .app("static")
            .replicas(3)
            .build(),
        &[&p],
        None,
        false,
        Default::default(),
        None,
        &time("2026-11-29T10:00:00Z"),
    );
    assert_eq!(s.phase, Some(Phase::Disabled));
    assert!(s.problems.is_empty());
    assert_eq!(s.all_steps_started, Some(false));
    let a = get(&s, AVAILABLE);
    assert_eq!(
        (a.status.as_str(), a.reason.as_str()),
        ("False", "Disabled")
    );
    let p = get(&s, PROGRESSING);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("False", "Disabled")
    );
}

#[test]
fn conditions_follow_the_outcome_and_the_pods() {
    let now = time("2026-11-29T10:00:00Z");
    let ready = ready_pod("p-0");
    let starting = pod(
        "p-1",
        "Running",
        not_ready(),
        json!([running("static", false)]),
    );
    // (case, replicas, pods, outcome, Available, reason, Progressing, reason)
    type Expect<'a> = (&'a str, &'a str, &'a str, &'a str);
    type Case<'a> = (&'a str, i32, Vec<&'a SitePod>, Option<Error>, Expect<'a>);
    let cases: Vec<Case> = vec![
        (
            "all ready",
            1,
            vec![&ready],
            None,
            ("True", "Available", "False", "UpToDate"),
        ),
        (
            "one of two ready",
            2,
            vec![&ready, &starting],
            None,
            ("False", "PodsNotReady", "True", "PodsNotReady"),
        ),
        (
            "no pods yet",
            1,
            vec![],
            None,
            ("False", "PodsNotReady", "True", "PodsNotReady"),
        ),
        (
            "transient error",
            1,
            vec![&ready],
            Some(Error::PublicHostRequired),
            ("False", "ObjectsNotReady", "True", "TransientError"),
        ),
        (
            "terminal error",
            1,
            vec![&ready],
            Some(Error::InvalidSite(vec![FieldError::new(
                "spec.configuration.applications[0].paths[0].path_type",
                "\"Regex\" is not supported in ingress mode",
            )])),
            ("False", "ObjectsNotReady", "False", "InvalidConfiguration"),
        ),
        (
            "route conflict",
            1,
            vec![&ready],
            Some(Error::RouteConflict {
                kind: "Ingress".into(),
                name: "docs".into(),
                controller: "controlled by Site other".into(),
            }),
            ("False", "ObjectsNotReady", "True", "RouteConflict"),
        ),
        (
            "scaled to zero",
            0,
            vec![],
            None,
            ("False", "ScaledToZero", "False", "ScaledToZero"),
        ),
    ];
    for (case, replicas, pods, outcome, (a, ar, p, pr)) in cases {
        let s = site_status(
            &SiteBuilder::new("docs-handbook")
                .namespace("sites")
                .generation(4)
                .enabled(true)
                .app("static")
                .replicas(replicas)
                .build(),
            &pods,
            outcome.as_ref(),
            true,
            Default::default(),
            None,
            &now,
        );
        let (ac, pc) = (get(&s, AVAILABLE), get(&s, PROGRESSING));
        assert_eq!((ac.status.as_str(), ac.reason.as_str()), (a, ar), "{case}");
        assert_eq!((pc.status.as_str(), pc.reason.as_str()), (p, pr), "{case}");
        assert_eq!(s.observed_generation, Some(4), "{case}");
        assert_eq!(ac.observed_generation, Some(4), "{case}");
        if let Some(e) = &outcome {
            assert_eq!(
                pc.message,
                e.to_string(),
                "{case}: the message is the error"
            );
        }
    }
}

/// SPEC 4.7: Ready, Reconciling and Stalled as kstatus reads them, beside Available and
/// Progressing, for every kind of outcome.
#[test]
fn kstatus_conditions_follow_available_progressing_and_the_error_class() {
    let now = time("2026-11-29T10:00:00Z");
    let ready = ready_pod("p-0");
    let invalid = || {
        Error::InvalidSite(vec![FieldError::new(
            "spec.configuration.space",
            "must be a DNS label",
        )])
    };
    // (case, enabled, replicas, pods, outcome, Ready, its reason, Reconciling, Stalled, its reason)
    type Case<'a> = (
        &'a str,
        bool,
        i32,
        Vec<&'a SitePod>,
        Option<Error>,
        (&'a str, &'a str, &'a str, &'a str, &'a str),
    );
    let cases: Vec<Case> = vec![
        (
            "available and up to date",
            true,
            1,
            vec![&ready],
            None,
            ("True", "Available", "False", "False", "NoTerminalError"),
        ),
        (
            "waiting for pods",
            true,
            1,
            vec![],
            None,
            ("False", "PodsNotReady", "True", "False", "NoTerminalError"),
        ),
        (
            "transient error",
            true,
            1,
            vec![&ready],
            Some(Error::PublicHostRequired),
            (
                "False",
                "TransientError",
                "True",
                "False",
                "NoTerminalError",
            ),
        ),
        (
            "conflict: retried, not stalled",
            true,
            1,
            vec![&ready],
            Some(Error::RouteConflict {
                kind: "Ingress".into(),
                name: "docs".into(),
                controller: "controlled by Site other".into(),
            }),
            ("False", "RouteConflict", "True", "False", "NoTerminalError"),
        ),
        (
            "terminal error",
            true,
            1,
            vec![&ready],
            Some(invalid()),
            (
                "False",
                "InvalidConfiguration",
                "False",
                "True",
                "InvalidConfiguration",
            ),
        ),
        (
            "archived: ready on purpose",
            false,
            1,
            vec![],
            None,
            ("True", "Disabled", "False", "False", "NoTerminalError"),
        ),
        (
            "archived, stopped before its objects were written",
            false,
            1,
            vec![],
            Some(Error::PublicHostRequired),
            (
                "False",
                "TransientError",
                "True",
                "False",
                "NoTerminalError",
            ),
        ),
        (
            "no replicas asked for",
            true,
            0,
            vec![],
            None,
            ("True", "ScaledToZero", "False", "False", "NoTerminalError"),
        ),
        // ROL-01, ROL-02: held back by a rollout, the Site serves on its pods as before.
        (
            "waiting for a rollout slot",
            true,
            1,
            vec![&ready],
            Some(Error::RolloutPending {
                message: "waiting".into(),
            }),
            (
                "False",
                "RolloutPending",
                "True",
                "False",
                "NoTerminalError",
            ),
        ),
        (
            "held by a halted rollout",
            true,
            1,
            vec![&ready],
            Some(Error::RolloutHalted {
                message: "halted".into(),
            }),
            ("False", "RolloutHalted", "False", "True", "RolloutHalted"),
        ),
    ];
    for (case, enabled, replicas, pods, outcome, (r, rr, rec, st, sr)) in cases {
        let site = SiteBuilder::new("docs-handbook")
            .namespace("sites")
            .generation(7)
            .enabled(enabled)
            .app("static")
            .replicas(replicas)
            .build();
        let s = site_status(
            &site,
            &pods,
            outcome.as_ref(),
            enabled,
            Default::default(),
            None,
            &now,
        );
        let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "Available",
                "Progressing",
                "Ready",
                "Reconciling",
                "Stalled"
            ],
            "{case}"
        );
        let (ready_c, reconciling, stalled, progressing) = (
            get(&s, READY),
            get(&s, RECONCILING),
            get(&s, STALLED),
            get(&s, PROGRESSING),
        );
        assert_eq!(
            (ready_c.status.as_str(), ready_c.reason.as_str()),
            (r, rr),
            "{case}: Ready"
        );
        assert_eq!(reconciling.status, rec, "{case}: Reconciling");
        let available = get(&s, AVAILABLE);
        let serving = !pods.is_empty() && enabled && replicas > 0;
        let stopped_early = outcome.as_ref().is_some_and(|e| !e.holds_rollout());
        assert_eq!(
            available.status == "True",
            serving && !stopped_early,
            "{case}: Available"
        );
        assert_eq!(
            (reconciling.status.as_str(), reconciling.reason.as_str()),
            (progressing.status.as_str(), progressing.reason.as_str()),
            "{case}: Reconciling is Progressing"
        );
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            (st, sr),
            "{case}: Stalled"
        );
        if let Some(e) = outcome.as_ref().filter(|e| !e.is_transient()) {
            assert_eq!(
                stalled.message,
                e.to_string(),
                "{case}: Stalled names the error"
            );
        }
        for c in &s.conditions {
            assert_eq!(c.observed_generation, Some(7), "{case}: {}", c.type_);
        }
    }
}

#[test]
fn transition_times_are_stable_and_recomputing_is_a_fixed_point() {
    let t0 = time("2026-11-29T10:00:00Z");
    let t1 = time("2026-11-29T11:00:00Z");
    let ready = ready_pod("p-0");
    let s = SiteBuilder::new("docs-handbook")
        .namespace("sites")
        .generation(4)
        .enabled(true)
        .app("static")
        .replicas(1)
        .build();
    let first = site_status(&s, &[&ready], None, true, Default::default(), None, &t0);
    let again = site_status(
        &s,
        &[&ready],
        None,
        true,
        Default::default(),
        Some(&first),
        &t1,
    );
    assert_eq!(first, again, "same state later: equal status, so no write");
    let broken = pod(
        "p-0",
        "Running",
        not_ready(),
        json!([running("static", false)]),
    );
    let changed = site_status(
        &s,
        &[&broken],
        None,
        true,
        Default::default(),
        Some(&first),
        &t1,
    );
    assert_eq!(get(&changed, AVAILABLE).last_transition_time, t1);
    assert_eq!(get(&changed, AVAILABLE).status, "False");
    // A reason change without a status change keeps the time.
    let failing = site_status(
        &s,
        &[&broken],
        Some(&Error::PublicHostRequired),
        true,
        Default::default(),
        Some(&changed),
        &time("2026-11-29T12:00:00Z"),
    );
    assert_eq!(get(&failing, PROGRESSING).last_transition_time, t1);
    assert_eq!(get(&failing, PROGRESSING).reason, "TransientError");
}

#[test]
fn pods_aggregate_to_the_worst_phase_and_the_union_of_problems() {
    let ready = ready_pod("p-0");
    let crash = pod(
        "p-1",
        "Running",
        not_ready(),
        json!([waiting("app", "CrashLoopBackOff", "x")]),
    );
    let crash2 = pod(
        "p-2",
        "Running",
        not_ready(),
        json!([waiting("app", "CrashLoopBackOff", "x")]),
    );
    let agg = aggregate(true, &[&ready, &crash, &crash2]);
    assert_eq!(agg.phase, Phase::Pending);
    assert_eq!(
        agg.problems.len(),
        1,
        "identical problems are reported once"
    );
    assert!(!agg.all_steps_started);
    let failed = pod("p-3", "Failed", json!([]), json!([]));
    assert_eq!(aggregate(true, &[&ready, &failed]).phase, Phase::Failed);
    let mut going = crash.clone();
    going.terminating = true;
    let agg = aggregate(true, &[&ready, &going]);
    assert_eq!(
        (agg.phase, agg.all_steps_started),
        (Phase::Running, true),
        "terminating pods do not count"
    );
}

#[test]
fn the_phase_follows_what_is_deployed_not_the_spec() {
    let status = |phase: Phase| SiteStatus {
        phase: Some(phase),
        ..Default::default()
    };
    let site = |enabled: bool| SiteBuilder::new("docs-handbook").enabled(enabled).build();
    // (case, spec enabled, previous phase, StatefulSet as the spec asks, enabled as deployed)
    let cases = [
        (
            "archived and scaled down",
            false,
            Some(Phase::Running),
            true,
            false,
        ),
        (
            "archived, stopped before the StatefulSet",
            false,
            Some(Phase::Running),
            false,
            true,
        ),
        (
            "re-enabled, stopped before the StatefulSet",
            true,
            Some(Phase::Disabled),
            false,
            false,
        ),
        (
            "re-enabled and scaled up",
            true,
            Some(Phase::Disabled),
            true,
            true,
        ),
        ("new, stopped early", false, None, false, false),
        ("running", true, Some(Phase::Running), false, true),
    ];
    for (case, enabled, previous, current, want) in cases {
        let previous = previous.map(status);
        assert_eq!(
            deployed_enabled(&site(enabled), previous.as_ref(), current),
            want,
            "{case}"
        );
    }
    // Archived in the spec while the pods still run: the phase is not Disabled.
    let running = ready_pod("p-0");
    let s = site_status(
        &site(false),
        &[&running],
        Some(&Error::PublicHostRequired),
        deployed_enabled(&site(false), Some(&status(Phase::Running)), false),
        Default::default(),
        Some(&status(Phase::Running)),
        &time("2026-11-29T10:00:00Z"),
    );
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!(get(&s, PROGRESSING).status, "True");
}

/// A pod the StatefulSet could not create: the conditions waiting for pods carry reason
/// FailedCreate and the API server's message while fewer pods exist than wanted; once they
/// exist (ready or not), or with nothing reported, the status is the plain one.
#[test]
fn a_failed_create_explains_missing_pods() {
    let now = time("2026-11-29T10:00:00Z");
    let failed = FailedCreate {
        event: "docs-handbook.18a0".into(),
        statefulset: "docs-handbook".into(),
        message: "create Pod docs-handbook-0 in StatefulSet docs-handbook failed error: pods \"docs-handbook-0\" is forbidden: no PriorityClass with name low-priority was found".into(),
    };
    let site = |replicas| {
        SiteBuilder::new("docs-handbook")
            .namespace("sites")
            .generation(2)
            .enabled(true)
            .app("static")
            .replicas(replicas)
            .build()
    };
    let starting = pod("docs-handbook-0", "Pending", not_ready(), json!([]));
    let ready = ready_pod("docs-handbook-0");
    // (case, replicas, pods, reported, Available reason, Progressing reason, message starts)
    type Case<'a> = (
        &'a str,
        i32,
        Vec<&'a SitePod>,
        bool,
        &'a str,
        &'a str,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "no pod, reported",
            1,
            vec![],
            true,
            "FailedCreate",
            "FailedCreate",
            "0 of 1 pods exist: create Pod",
        ),
        (
            "no pod, nothing reported",
            1,
            vec![],
            false,
            "PodsNotReady",
            "PodsNotReady",
            "0 of 1 pods ready",
        ),
        (
            "one of two pods",
            2,
            vec![&ready],
            true,
            "FailedCreate",
            "FailedCreate",
            "1 of 2 pods exist: create Pod",
        ),
        (
            "the pod exists, not ready",
            1,
            vec![&starting],
            true,
            "PodsNotReady",
            "PodsNotReady",
            "0 of 1 pods ready",
        ),
        (
            "the pod exists and is ready",
            1,
            vec![&ready],
            true,
            "Available",
            "UpToDate",
            "1 of 1 pods ready",
        ),
        (
            "scaled to zero",
            0,
            vec![],
            true,
            "ScaledToZero",
            "ScaledToZero",
            "settings.replicas is 0",
        ),
    ];
    for (case, replicas, pods, reported, available, progressing, message) in cases {
        let site = site(replicas);
        let mut s = site_status(&site, &pods, None, true, Default::default(), None, &now);
        explain_missing_pods(&mut s, &site, &pods, reported.then_some(&failed));
        let (a, p) = (get(&s, AVAILABLE), get(&s, PROGRESSING));
        assert_eq!(a.reason, available, "{case}");
        assert_eq!(p.reason, progressing, "{case}");
        assert!(a.message.starts_with(message), "{case}: {}", a.message);
        if available == "FailedCreate" {
            assert_eq!(
                (a.status.as_str(), p.status.as_str()),
                ("False", "True"),
                "{case}"
            );
            assert!(
                a.message
                    .ends_with("no PriorityClass with name low-priority was found"),
                "{case}"
            );
            assert_eq!(get(&s, READY).reason, "FailedCreate", "{case}");
        }
    }
}

/// ROL-03: a paused Site's status is the one it had, with the `Paused` condition added (once:
/// computing it again changes nothing); the status of a resumed Site has no such condition.
#[test]
fn a_paused_status_adds_one_condition_to_the_last_one() {
    let t0 = time("2026-11-29T10:00:00Z");
    let t1 = time("2026-11-29T11:00:00Z");
    let ready = ready_pod("p-0");
    let site = SiteBuilder::new("docs-handbook")
        .namespace("sites")
        .generation(4)
        .enabled(true)
        .app("static")
        .build();
    let before = site_status(&site, &[&ready], None, true, Default::default(), None, &t0);
    let paused = paused_status(&site, Some(&before), &t0);
    let mut without = paused.clone();
    without.conditions.retain(|c| c.type_ != reasons::PAUSED);
    assert_eq!(without, before, "nothing else is recomputed");
    let condition = get(&paused, reasons::PAUSED);
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "Paused")
    );
    assert!(condition.message.contains("sites.ecmwf.int/paused"));
    assert_eq!(
        paused_status(&site, Some(&paused), &t1),
        paused,
        "a fixed point"
    );
    let never_reconciled = paused_status(&site, None, &t0);
    assert_eq!(never_reconciled.conditions.len(), 1);
    let resumed = site_status(
        &site,
        &[&ready],
        None,
        true,
        Default::default(),
        Some(&paused),
        &t1,
    );
    assert!(
        resumed
            .conditions
            .iter()
            .all(|c| c.type_ != reasons::PAUSED)
    );
}
