//! What every cluster has: the `kubernetes` Service, per-namespace `kube-root-ca.crt` and
//! `default` ServiceAccount, the bootstrap RBAC policy, the node (cordon), the system
//! PriorityClasses.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::support::{Cluster, eventually};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_has_the_default_objects() {
    let c = Cluster::start(true).await;
    let svc = Api::<Service>::namespaced(c.client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    let port = &spec.ports.unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("https"), 443));
    let ep = Api::<Endpoints>::namespaced(c.client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let subset = &ep.subsets.unwrap()[0];
    assert_eq!(
        subset.ports.as_ref().unwrap()[0].port,
        c.emulator().addr.port() as i32
    );
    let slice = Api::<EndpointSlice>::namespaced(c.client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    assert_eq!(
        slice.metadata.labels.unwrap()["kubernetes.io/service-name"],
        "kubernetes"
    );

    // Every namespace, including new ones, has the root CA and the default service account.
    let ca = c.emulator().ca_pem().unwrap().to_string();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let cm = Api::<ConfigMap>::namespaced(c.client.clone(), ns)
            .get("kube-root-ca.crt")
            .await
            .unwrap();
        assert_eq!(cm.data.unwrap()["ca.crt"], ca);
        Api::<ServiceAccount>::namespaced(c.client.clone(), ns)
            .get("default")
            .await
            .unwrap();
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap();
    Api::<Namespace>::all(c.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    // Present as soon as the namespace create returned.
    let cms = Api::<ConfigMap>::namespaced(c.client.clone(), "fresh")
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(cms.items.len(), 1);
    c.kubectl_ok(&["create", "namespace", "new-ns"]);
    let out = c.kubectl_ok(&[
        "get",
        "cm",
        "kube-root-ca.crt",
        "-n",
        "new-ns",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    assert_eq!(out, ca);
    let out = c.kubectl_ok(&["get", "serviceaccounts", "-n", "new-ns", "-o", "name"]);
    assert_eq!(out.trim(), "serviceaccount/default");
    // Deleted, they come back (root-CA publisher, service-account controller).
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "new-ns");
    cms.delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    eventually("kube-root-ca.crt re-created", WAIT, || async {
        cms.get_opt("kube-root-ca.crt").await.ok().flatten()
    })
    .await;

    // Bootstrap RBAC.
    let out = c.kubectl_ok(&["get", "clusterroles", "cluster-admin", "-o", "name"]);
    assert_eq!(
        out.trim(),
        "clusterrole.rbac.authorization.k8s.io/cluster-admin"
    );
    let binding = Api::<ClusterRoleBinding>::all(c.client.clone())
        .get("cluster-admin")
        .await
        .unwrap();
    assert_eq!(binding.subjects.unwrap()[0].name, "system:masters");
    let view = Api::<ClusterRole>::all(c.client.clone())
        .get("view")
        .await
        .unwrap();
    assert!(
        view.rules.unwrap().iter().any(|r| r
            .resources
            .as_ref()
            .is_some_and(|rs| rs.contains(&"pods".to_string()))),
        "view aggregates system:aggregate-to-view"
    );
    let edit = Api::<ClusterRole>::all(c.client.clone())
        .get("edit")
        .await
        .unwrap();
    assert_eq!(
        edit.metadata.labels.unwrap()["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );

    // System priority classes.
    let pcs: Api<PriorityClass> = Api::all(c.client.clone());
    assert_eq!(
        pcs.get("system-cluster-critical").await.unwrap().value,
        2_000_000_000
    );
    assert_eq!(
        pcs.get("system-node-critical").await.unwrap().value,
        2_000_001_000
    );
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_cordon_keeps_new_pods_pending() {
    let c = Cluster::start(false).await;
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node = nodes.get("emulator-node").await.unwrap();
    let status = node.status.unwrap();
    assert!(
        status
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert!(status.allocatable.unwrap().contains_key("cpu"));
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("before"))
        .await
        .unwrap();
    eventually("pod scheduled on the node", WAIT, || async {
        let p = pods.get("before").await.ok()?;
        (p.spec?.node_name.as_deref() == Some("emulator-node")).then_some(())
    })
    .await;

    let out = c.kubectl_ok(&["cordon", "emulator-node"]);
    assert_eq!(out.trim(), "node/emulator-node cordoned");
    let node = nodes.get("emulator-node").await.unwrap();
    assert_eq!(node.spec.as_ref().unwrap().unschedulable, Some(true));
    eventually("unschedulable taint", WAIT, || async {
        let n = nodes.get("emulator-node").await.ok()?;
        n.spec?
            .taints?
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unschedulable" && t.effect == "NoSchedule")
            .then_some(())
    })
    .await;
    pods.create(&PostParams::default(), &pod("after"))
        .await
        .unwrap();
    let cond = eventually("PodScheduled False", WAIT, || async {
        let p = pods.get("after").await.ok()?;
        p.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert!(cond.message.unwrap().contains("node(s) were unschedulable"));
    let p = pods.get("after").await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(p.spec.unwrap().node_name.is_none());
    // The pod already running stays.
    assert_eq!(
        pods.get("before")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Running")
    );

    let out = c.kubectl_ok(&["uncordon", "emulator-node"]);
    assert_eq!(out.trim(), "node/emulator-node uncordoned");
    eventually("pod runs after uncordon", WAIT, || async {
        let p = pods.get("after").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let out = c.kubectl_ok(&["get", "nodes", "-o", "name"]);
    assert_eq!(out.trim(), "node/emulator-node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiservices_follow_the_served_group_versions() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::{ListParams, WatchEvent, WatchParams};

    // The Site CRD is created by Cluster::start.
    let c = Cluster::start(false).await;
    let table = c.kubectl_ok(&["get", "apiservices"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"]);
    for name in ["v1.", "v1.apps", "v1.batch", "v1.sites.ecmwf.int"] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} listed:\n{table}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[1..3], ["Local", "True"], "{line}");
    }
    let out = c.kubectl_ok(&[
        "get",
        "apiservice",
        "v1.sites.ecmwf.int",
        "-o",
        "jsonpath={.spec.group} {.spec.version} {.spec.groupPriorityMinimum} {.spec.versionPriority} {.status.conditions[0].reason}",
    ]);
    assert_eq!(out, "sites.ecmwf.int v1 1000 100 Local");

    // The api-extensions category, as the API server declares it.
    let names = c.kubectl_ok(&["get", "api-extensions", "-o", "name"]);
    for want in [
        "apiservice.apiregistration.k8s.io/v1.apps",
        "customresourcedefinition.apiextensions.k8s.io/sites.sites.ecmwf.int",
    ] {
        assert!(names.lines().any(|l| l == want), "{want} in:\n{names}");
    }

    let api: Api<APIService> = Api::all(c.client.clone());
    let core = api.get("v1.").await.unwrap();
    let spec = core.spec.as_ref().unwrap();
    assert_eq!(spec.group.as_deref().unwrap_or(""), "");
    assert_eq!(spec.service, None);
    assert_eq!(
        (spec.group_priority_minimum, spec.version_priority),
        (18000, 1)
    );
    let apps = api.get("v1.apps").await.unwrap().spec.unwrap();
    assert_eq!(
        (apps.group_priority_minimum, apps.version_priority),
        (17800, 15)
    );
    let cond = &core.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (
            cond.type_.as_str(),
            cond.status.as_str(),
            cond.message.as_deref()
        ),
        (
            "Available",
            "True",
            Some("Local APIServices are always available")
        )
    );
    // Registrations can be deleted: a built-in one (`onstart`) stays deleted until the next
    // start; one of a CRD (`true`) is restored by its registration controller.
    api.delete("v1.apps", &Default::default()).await.unwrap();
    assert!(api.get_opt("v1.apps").await.unwrap().is_none());
    api.delete("v1.sites.ecmwf.int", &Default::default())
        .await
        .unwrap();
    let restored = api.get("v1.sites.ecmwf.int").await.unwrap();
    assert_eq!(
        restored.metadata.labels.unwrap()["kube-aggregator.kubernetes.io/automanaged"],
        "true"
    );

    // An aggregated API's registration is created and deleted by its user, and left alone.
    let metrics = r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {namespace: kube-system, name: metrics-server}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#;
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(metrics));
    assert!(out.status.success(), "{out:?}");
    let row = c.kubectl_ok(&[
        "get",
        "apiservice",
        "v1beta1.metrics.k8s.io",
        "--no-headers",
    ]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        [
            "v1beta1.metrics.k8s.io",
            "kube-system/metrics-server",
            "False",
            "(ServiceNotFound)"
        ],
        "{row}"
    );
    let registered = api.get("v1beta1.metrics.k8s.io").await.unwrap();
    assert_eq!(
        registered.spec.unwrap().service.unwrap().port,
        Some(443),
        "the Service port defaults to 443"
    );
    // A registration named otherwise than VERSION.GROUP is refused, naming the field.
    let out = c.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&metrics.replace("name: v1beta1.metrics.k8s.io", "name: metrics")),
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            r#"metadata.name: Invalid value: "metrics": must be `spec.version+"."+spec.group`: "v1beta1.metrics.k8s.io""#
        ),
        "{out:?}"
    );
    c.kubectl_ok(&["delete", "apiservice", "v1beta1.metrics.k8s.io"]);
    assert!(
        api.get_opt("v1beta1.metrics.k8s.io")
            .await
            .unwrap()
            .is_none()
    );

    // Deleting the CRD removes its APIService (seen by a watch, kubectl and get).
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    Api::<CustomResourceDefinition>::all(c.client.clone())
        .delete("sites.sites.ecmwf.int", &Default::default())
        .await
        .unwrap();
    let deleted = loop {
        match events.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(o)) => break o.metadata.name.unwrap(),
            Some(_) => continue,
            None => panic!("watch ended before the APIService was deleted"),
        }
    };
    assert_eq!(deleted, "v1.sites.ecmwf.int");
    let out = c.kubectl(&["get", "apiservice", "v1.sites.ecmwf.int"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    assert_eq!(
        api.get("v1.sites.ecmwf.int")
            .await
            .map_err(crate::support::api_error)
            .unwrap_err()
            .code,
        404
    );
    // The built-in ones stay.
    assert!(api.get("v1.batch").await.is_ok());
}
