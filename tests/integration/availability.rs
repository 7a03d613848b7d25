//! The availability of the fail-closed webhook (manifests/base/pdb.yaml) against the emulator's
//! eviction subresource: a node drain evicts at most one of the two operator replicas.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, PostParams};
use serde_json::json;

use crate::support::{Cluster, eventually, repo_file};

const NS: &str = "sites";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_at_most_one_operator_replica() {
    let c = Cluster::start(false).await;
    c.kubectl_ok(&["create", "namespace", NS]);
    c.kubectl_ok(&[
        "apply",
        "-n",
        NS,
        "-f",
        repo_file("manifests/base/pdb.yaml").to_str().unwrap(),
    ]);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
    for name in ["sites-operator-a", "sites-operator-b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "sites-operator"}},
            "spec": {"containers": [{"name": "operator", "image": "sites-operator:dev"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    eventually(
        "the budget allows one disruption",
        crate::support::operator::WAIT,
        || async {
            let allowed = c.kubectl_ok(&[
                "get",
                "pdb",
                "sites-operator",
                "-n",
                NS,
                "-o",
                "jsonpath={.status.disruptionsAllowed}",
            ]);
            (allowed == "1").then_some(())
        },
    )
    .await;

    // kubectl drain evicts one replica, then keeps being refused for the other until it gives up.
    let out = c.kubectl(&[
        "drain",
        "emulator-node",
        "--pod-selector=app.kubernetes.io/name=sites-operator",
        // These pods have no ReplicaSet (the emulator runs no Deployment controller).
        "--force",
        "--timeout=5s",
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("disruption budget"), "{text}");
    let left = eventually(
        "one replica evicted",
        crate::support::operator::WAIT,
        || async {
            let left: Vec<String> = pods
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            (left.len() == 1).then_some(left)
        },
    )
    .await;
    // The last one stays: the API refuses its eviction.
    match pods.evict(&left[0], &EvictParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
        other => panic!("the last replica was evicted: {other:?}"),
    }
}
