//! A cold restart on the real control plane, counted by the API server's audit log: 200 Sites
//! converge, every replica stops, one starts and verifies every Site with no write; an edit made
//! while nothing ran is then repaired with exactly its one write. `#[ignore]`d:
//! `make real-apiserver-test`.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::PostParams;

use crate::e2e::Target;
use crate::real_apiserver::settled;
use crate::support::operator::{condition, example_named, sites};
use crate::support::{Cluster, deployed, eventually_every, real};

const NS: &str = "sites";

/// How many Sites converge before the restart.
const SITES: usize = 200;

/// How long 200 Sites may take to become Available: the controller manager creates their pods
/// at its client's 20 requests per second.
const CONVERGE: Duration = Duration::from_secs(300);

async fn available(c: &Cluster) -> usize {
    let Ok(list) = sites(c).list(&Default::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|s| condition(s, "Available").is_some_and(|(a, _, _)| a == "True"))
        .count()
}

/// The operator's writes by `verb resource` as its own request counter has them and as the
/// audit log has them, Events, its Lease and the reviews of who reads its metrics left out of
/// both.
fn both_counts(c: &Cluster, mark: real::Mark, metrics: &str) -> (Vec<String>, Vec<String>) {
    let own = crate::support::api_requests(metrics)
        .into_iter()
        .filter(|(verb, resource, n)| {
            *n > 0.0
                && matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
                && ![
                    "leases.",
                    "events",
                    "tokenreviews.",
                    "subjectaccessreviews.",
                ]
                .iter()
                .any(|p| resource.starts_with(p))
        })
        .fold(
            BTreeMap::<String, f64>::new(),
            |mut m, (verb, resource, n)| {
                *m.entry(format!("{verb} {resource}")).or_default() += n;
                m
            },
        )
        .into_iter()
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    let audited = real::operator_writes_by_kind(c, mark)
        .into_iter()
        .filter(|(kind, _)| !kind.contains(" events"))
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    (own, audited)
}

/// LIFE-05, on a real kube-apiserver and etcd: a replica started over 200 converged Sites,
/// none of the operator's replicas having run meanwhile, verifies every one and writes nothing
/// (the audit log shows no write of the operator's ServiceAccount but its Lease), and an edit
/// made while none ran is repaired at first sight with exactly one write. The operator's own
/// request counter agrees with the audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_a_cold_restart_over_200_sites_writes_nothing() {
    let mut t = Target::real().await;
    let (c, a) = t.local.take().expect("the operator runs here");
    let token = crate::e2e::metrics_token(&c);

    let names: Vec<String> = (0..SITES).map(|i| format!("site-{i:03}")).collect();
    let cluster = &c;
    for chunk in names.chunks(20) {
        futures::future::join_all(chunk.iter().map(|name| async move {
            sites(cluster)
                .create(&PostParams::default(), &example_named(name, name))
                .await
                .unwrap_or_else(|e| panic!("create {name}: {e}"))
        }))
        .await;
    }
    eventually_every(
        &format!("{SITES} Sites Available"),
        CONVERGE,
        Duration::from_secs(1),
        || async { (available(&c).await == SITES).then_some(()) },
    )
    .await;
    settled(&a, &token, "the Sites reconciled", SITES, t.timeout).await;

    // Every replica stops; one starts over the converged Sites.
    let (code, _) = a.process.stop();
    assert_eq!(code, Some(0));
    let mark = real::mark(&c);
    let b = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
    let metrics = settled(
        &b,
        &token,
        "the new replica to verify every Site",
        SITES,
        t.timeout,
    )
    .await;
    assert_eq!(
        real::operator_writes(&c, mark),
        Vec::<String>::new(),
        "the audit log: the restarted operator wrote\n{}",
        b.process.log()
    );
    let (own, audited) = both_counts(&c, mark, &metrics);
    assert_eq!(own, audited, "its own count agrees with the audit log");
    assert_eq!(available(&c).await, SITES);

    // An edit made while nothing runs: a Service's selector pointed elsewhere. The next replica
    // repairs it at first sight with one write, and writes nothing else.
    let (code, _) = b.process.stop();
    assert_eq!(code, Some(0));
    let edited = &names[7];
    let selector = |c: &Cluster| {
        c.kubectl_ok(&[
            "get",
            "service",
            edited,
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.selector.sites\\.ecmwf\\.int/id}",
        ])
    };
    let rendered = selector(&c);
    c.kubectl_ok(&[
        "patch",
        "service",
        edited,
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"sites.ecmwf.int/id":"hand-made"}}}"#,
    ]);
    assert_eq!(selector(&c), "hand-made");
    let mark = real::mark(&c);
    let d = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
    eventually_every(
        "the offline edit repaired",
        t.timeout,
        Duration::from_millis(250),
        || {
            let now = selector(&c);
            let rendered = rendered.clone();
            async move { (now == rendered).then_some(()) }
        },
    )
    .await;
    let metrics = settled(
        &d,
        &token,
        "the next replica to verify every Site",
        SITES,
        t.timeout,
    )
    .await;
    assert_eq!(
        real::operator_writes(&c, mark),
        vec![format!("patch services {NS}/{edited}")],
        "the audit log: exactly the repair\n{}",
        d.process.log()
    );
    let (own, audited) = both_counts(&c, mark, &metrics);
    assert_eq!(own, audited, "its own count agrees with the audit log");
    assert_eq!(own, vec!["patch services: 1".to_string()]);
    // It names itself to the API server.
    let agents: Vec<String> = c
        .real_plane()
        .unwrap()
        .audit()
        .stored_by(real::OPERATOR_USER, mark)
        .into_iter()
        .map(|w| w.user_agent)
        .filter(|a| !a.starts_with("sites-operator/") || !a.ends_with(" (run)"))
        .collect();
    assert_eq!(agents, Vec::<String>::new());
}
