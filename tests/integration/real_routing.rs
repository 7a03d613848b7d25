//! Gateway mode on the real control plane: the Gateway API CRDs as `sites-operator crd
//! --with-gateway-api` prints them, installed while the operator runs, and a live switch of
//! `routing.mode` there and back (RTG-01, LIFE-13), the route writes counted by the API
//! server's audit log. `#[ignore]`d: `make real-apiserver-test`.

use crate::e2e::{self, Target};
use crate::live_config::{deployed_config, edit, write_config};
use crate::support::real;

const NS: &str = "sites";

fn exists(t: &Target, object: &str) -> bool {
    t.kubectl(&["get", object, "-n", NS]).status.success()
}

/// The operator's writes to routes since `mark`.
fn route_writes(t: &Target, mark: real::Mark) -> Vec<String> {
    let c = &t.local.as_ref().unwrap().0;
    let mut writes: Vec<String> = real::operator_writes(c, mark)
        .into_iter()
        .filter(|w| w.contains(" ingresses.") || w.contains(" httproutes."))
        .collect();
    writes.sort();
    writes
}

/// One write of the new mode's route and the delete of the old one's, nothing else.
fn assert_moved(writes: &[String], to: &str, from: &str) {
    let object = format!("{NS}/docs-handbook");
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes.contains(&format!("delete {from} {object}")),
        "{writes:?}"
    );
    assert!(
        writes
            .iter()
            .any(|w| !w.starts_with("delete ") && w.ends_with(&format!("{to} {object}"))),
        "{writes:?}"
    );
}

/// RTG-01, LIFE-13 on kube-apiserver 1.20 with the operator deployed from the manifests: the
/// Gateway API CRDs installed while it runs in ingress mode, then `routing.mode: gateway` set
/// in `sites-config`: the Site's HTTPRoute (attached to the configured Gateway, on the platform
/// host) replaces its Ingress with one write each, and the Site stays Available; back to
/// ingress, the Ingress replaces the HTTPRoute the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_a_live_switch_to_gateway_mode_and_back_moves_the_route() {
    let t = Target::real().await;
    t.ok(&[
        "apply",
        "-n",
        NS,
        "-f",
        e2e::path("manifests/examples/site.yaml"),
    ]);
    e2e::wait_available(&t).await;
    assert!(exists(&t, "ingress/docs-handbook"));

    let c = &t.local.as_ref().unwrap().0;
    real::install_printed_crds(c, true);

    let mark = real::mark(c);
    let gateway = edit(&deployed_config(), "  mode: ingress ", "  mode: gateway ");
    write_config(c, &gateway).await;
    t.until("the HTTPRoute in place of the Ingress", || {
        (exists(&t, "httproute/docs-handbook") && !exists(&t, "ingress/docs-handbook"))
            .then(String::new)
    })
    .await;
    let route = t.ok(&[
        "get",
        "httproute/docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.parentRefs[0].name} {.spec.hostnames[0]} {.metadata.ownerReferences[0].kind}",
    ]);
    assert_eq!(route, "sites-gateway sites.example.org Site");
    e2e::wait_available(&t).await;
    assert_moved(
        &route_writes(&t, mark),
        "httproutes.gateway.networking.k8s.io",
        "ingresses.networking.k8s.io",
    );

    let mark = real::mark(c);
    write_config(c, &deployed_config()).await;
    t.until("the Ingress in place of the HTTPRoute", || {
        (exists(&t, "ingress/docs-handbook") && !exists(&t, "httproute/docs-handbook"))
            .then(String::new)
    })
    .await;
    e2e::wait_available(&t).await;
    assert_moved(
        &route_writes(&t, mark),
        "ingresses.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
    );
}
