//! Deleting a Site with each propagation policy on the real control plane, whose garbage
//! collector does the cascading (LIFE-05, SPEC 4.6), counted by the API server's audit log.
//! `#[ignore]`d: `make real-apiserver-test`.

use std::time::Duration;

use crate::e2e::{self, Target};
use crate::support::{Cluster, eventually_every, real};

const NS: &str = "sites";

/// The objects labelled with Site `id`, as `kind/name`, sorted.
fn labelled(c: &Cluster, id: &str) -> Vec<String> {
    let out = c.kubectl_ok(&[
        "get",
        real::OWNED_KINDS,
        "-n",
        NS,
        "-l",
        &format!("sites.ecmwf.int/id={id}"),
        "-o",
        "name",
    ]);
    let mut names: Vec<String> = out.lines().map(str::to_string).collect();
    names.sort();
    names
}

fn jsonpath(c: &Cluster, object: &str, path: &str) -> String {
    c.kubectl_ok(&["get", object, "-n", NS, "-o", &format!("jsonpath={path}")])
}

async fn until(c: &Cluster, what: &str, check: impl Fn(&Cluster) -> bool) {
    eventually_every(
        what,
        Duration::from_secs(120),
        Duration::from_millis(250),
        || {
            let done = check(c);
            async move { done.then_some(()) }
        },
    )
    .await;
}

/// LIFE-05 on kube-apiserver and kube-controller-manager 1.20: `--cascade=foreground` removes
/// every owned object before the Site, and the operator re-creates none of them while the Site
/// waits for them; `--cascade=orphan` leaves them in place without their owner, untouched by the
/// operator. A Site created again under that name takes every orphan over (they carry its
/// labels and no writer's fields but the operator's and the cluster's bookkeeping: SPEC 4.6's
/// restored objects), one write each, its pod running on. The audit log counts the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_foreground_and_orphan_deletion_of_a_site() {
    let mut t = Target::real().await;
    let site = e2e::path("manifests/examples/site.yaml");
    let other = real::example_site_file(t.kubeconfig.parent().unwrap(), "other");
    t.ok(&["apply", "-n", NS, "-f", site]);
    t.ok(&["apply", "-n", NS, "-f", &other]);
    let (c, operator) = t.local.take().expect("the operator runs here");
    let available = "{.status.conditions[?(@.type==\"Available\")].status}";
    for id in ["docs-handbook", "docs-other"] {
        until(&c, &format!("{id} Available"), |c| {
            jsonpath(c, &format!("site/{id}"), available) == "True"
        })
        .await;
    }
    let handbook = labelled(&c, "docs-handbook");
    for kind in [
        "statefulset.apps/",
        "service/",
        "ingress.networking.k8s.io/",
        "persistentvolumeclaim/",
    ] {
        assert!(
            handbook.iter().any(|o| o.starts_with(kind)),
            "{kind}: {handbook:?}"
        );
    }
    let mark = real::mark(&c);

    // Foreground: the garbage collector deletes the dependents (those with blockOwnerDeletion
    // first), then the Site.
    c.kubectl_ok(&[
        "delete",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--cascade=foreground",
        "--wait=false",
    ]);
    until(&c, "the Site and every owned object gone", |c| {
        let site = c.kubectl(&["get", "site", "docs-handbook", "-n", NS]);
        !site.status.success() && labelled(c, "docs-handbook").is_empty()
    })
    .await;

    // The second Site's volume labelled for it (LIFE-05, 20 to 40 s after its claim bound), so
    // that nothing of it is due when its Site goes and comes back.
    let volume = jsonpath(&c, "pvc/docs-other", "{.spec.volumeName}");
    assert!(!volume.is_empty());
    until(&c, "the volume labelled for its Site", |c| {
        let out = c.kubectl_ok(&[
            "get",
            "pv",
            &volume,
            "-o",
            "jsonpath={.metadata.labels.sites\\.ecmwf\\.int/id}",
        ]);
        out == "docs-other"
    })
    .await;

    // Orphan: the owner references go, the objects stay.
    let orphans = labelled(&c, "docs-other");
    let versions = |c: &Cluster| -> Vec<String> {
        orphans
            .iter()
            .map(|o| jsonpath(c, o, "{.metadata.resourceVersion}"))
            .collect()
    };
    c.kubectl_ok(&["delete", "site", "docs-other", "-n", NS, "--cascade=orphan"]);
    until(&c, "the orphans without their owner", |c| {
        orphans
            .iter()
            .all(|o| jsonpath(c, o, "{.metadata.ownerReferences}").is_empty())
    })
    .await;
    assert_eq!(labelled(&c, "docs-other"), orphans, "every orphan kept");
    let released = versions(&c);
    // The operator has had the owner references' removal: its queue empties.
    let token = e2e::metrics_token(&c);
    eventually_every(
        "the operator's queue empty",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let m = e2e::scrape_with(&operator, &token).await;
            (crate::real_apiserver::metric(&m, "workqueue_depth", &[]) == 0.0).then_some(())
        },
    )
    .await;
    assert_eq!(
        versions(&c),
        released,
        "the operator left the orphans alone"
    );
    let pod_uid = |c: &Cluster| jsonpath(c, "pod/docs-other-0", "{.metadata.uid}");
    let running = pod_uid(&c);
    assert!(!running.is_empty());
    // Nothing written while the Sites went: the operator re-created nothing of the first (its
    // Site waited for its dependents) and touched no orphan; it labelled the first Site's
    // released volume for a Site of that name to come (LIFE-05).
    let quiet: Vec<String> = real::operator_writes(&c, mark)
        .into_iter()
        .filter(|w| !w.contains(" events") && !w.starts_with("patch persistentvolumes "))
        .collect();
    assert_eq!(quiet, Vec::<String>::new());

    // The same name again: the new Site (a new uid) takes the orphans over, each with one write
    // of its owner reference, and its pod runs on.
    let mark = real::mark(&c);
    c.kubectl_ok(&["apply", "-n", NS, "-f", &other]);
    let uid = jsonpath(&c, "site/docs-other", "{.metadata.uid}");
    until(&c, "the orphans taken over and the Site Available", |c| {
        orphans.iter().all(|o| {
            jsonpath(
                c,
                o,
                "{.metadata.ownerReferences[?(@.controller==true)].uid}",
            ) == uid
        }) && jsonpath(c, "site/docs-other", available) == "True"
    })
    .await;
    let progressing = jsonpath(
        &c,
        "site/docs-other",
        "{.status.conditions[?(@.type==\"Progressing\")].reason}",
    );
    assert_eq!(progressing, "UpToDate");
    assert_eq!(pod_uid(&c), running, "the pod was not replaced");
    assert_eq!(labelled(&c, "docs-other"), orphans);
    let mut written: Vec<String> = real::operator_writes(&c, mark)
        .into_iter()
        .filter(|w| !w.contains("sites.sites.ecmwf.int/status ") && !w.contains(" events"))
        .map(|w| w.split_once(' ').unwrap().1.to_string())
        .collect();
    written.sort();
    let mut expected: Vec<String> = orphans
        .iter()
        .map(|o| {
            let (kind, name) = o.split_once('/').unwrap();
            let resource = match kind.split_once('.') {
                Some((kind, group)) => format!("{kind}s.{group}"),
                None => format!("{kind}s"),
            };
            let resource = resource.replace("ingresss", "ingresses");
            format!("{resource} {NS}/{name}")
        })
        .collect();
    expected.sort();
    assert_eq!(written, expected, "one write of each orphan, nothing else");
}
