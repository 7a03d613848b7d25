//! Subresources and reviews: scale, eviction with PodDisruptionBudgets, service account tokens
//! and TokenReview, access reviews from RBAC (with impersonation), CSR approval — through
//! `kube::Client` and the real kubectl.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::support::{Cluster, api_error, eventually, on_both};

const WAIT: Duration = Duration::from_secs(15);

fn statefulset(name: &str, replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    }))
    .unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

on_both! {
async fn scale_subresource_of_a_statefulset_writes_the_parent(c: Cluster) {
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    let created = sts
        .create(&PostParams::default(), &statefulset("web", 1))
        .await
        .unwrap();
    let scale = sts.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(1));
    // The parent's resourceVersion (the StatefulSet controller may have written its status since).
    let rv_num = |rv: &Option<String>| rv.as_deref().unwrap().parse::<u64>().unwrap();
    assert!(rv_num(&scale.metadata.resource_version) >= rv_num(&created.metadata.resource_version));
    assert_eq!(scale.metadata.uid, created.metadata.uid);
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );

    // An operator watching StatefulSets sees the scale write as a MODIFIED parent.
    let rv = sts
        .get("web")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = sts
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let patched = sts
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().replicas, Some(3));
    let after = sts.get("web").await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(after.metadata.generation, Some(2));
    assert_ne!(after.metadata.resource_version, Some(rv.clone()));
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(ev) = events.try_next().await.unwrap() {
            if let WatchEvent::Modified(s) = ev
                && s.spec.as_ref().and_then(|s| s.replicas) == Some(3)
            {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(seen, "a MODIFIED event of the StatefulSet with 3 replicas");

    // PUT with a stale resourceVersion: 409 on the parent; negative replicas: 422.
    let mut stale = patched_scale(&sts).await;
    stale.metadata.resource_version = Some(rv);
    stale.spec.as_mut().unwrap().replicas = Some(5);
    let err = api_error(
        sts.replace_scale("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409, "{err:?}");
    assert!(
        err.message
            .starts_with("Operation cannot be fulfilled on statefulsets.apps \"web\""),
        "{}",
        err.message
    );
    let mut current = patched_scale(&sts).await;
    current.spec.as_mut().unwrap().replicas = Some(-1);
    let err = api_error(
        sts.replace_scale("web", &PostParams::default(), &current)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("spec.replicas: Invalid value: -1"),
        "{}",
        err.message
    );
    // The StatefulSet controller writes the parent's status as pods come and go: a Scale read
    // before that write is stale (409), so a client reads it again, as `kubectl scale` does.
    let deadline = tokio::time::Instant::now() + WAIT;
    let replaced = loop {
        current.spec.as_mut().unwrap().replicas = Some(2);
        match sts
            .replace_scale("web", &PostParams::default(), &current)
            .await
        {
            Ok(replaced) => break replaced,
            Err(kube::Error::Api(e)) if e.code == 409 && tokio::time::Instant::now() < deadline => {
                current = patched_scale(&sts).await;
            }
            Err(e) => panic!("replacing the scale: {e}"),
        }
    };
    assert_eq!(replaced.spec.unwrap().replicas, Some(2));

    // Discovery lists the subresource as an autoscaling/v1 Scale.
    let list: Value = c
        .client
        .request(
            http::Request::get("/apis/apps/v1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let entry = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "statefulsets/scale")
        .cloned()
        .expect("statefulsets/scale in discovery");
    assert_eq!(entry["group"], "autoscaling");
    assert_eq!(entry["version"], "v1");
    assert_eq!(entry["kind"], "Scale");
}
}

async fn patched_scale(sts: &Api<StatefulSet>) -> k8s_openapi::api::autoscaling::v1::Scale {
    sts.get_scale("web").await.unwrap()
}

on_both! {
async fn kubectl_scale_statefulset(c: Cluster) {
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("web", 1))
        .await
        .unwrap();
    let out = c.kubectl_ok(&["scale", "statefulset", "web", "--replicas=4"]);
    assert_eq!(out.trim(), "statefulset.apps/web scaled");
    assert_eq!(
        sts.get("web").await.unwrap().spec.unwrap().replicas,
        Some(4)
    );
    // With a precondition kubectl GETs the Scale and PUTs it back.
    let out = c.kubectl_ok(&[
        "scale",
        "statefulset",
        "web",
        "--current-replicas=4",
        "--replicas=2",
    ]);
    assert_eq!(out.trim(), "statefulset.apps/web scaled");
    let out = c.kubectl(&[
        "scale",
        "statefulset",
        "web",
        "--current-replicas=7",
        "--replicas=1",
    ]);
    assert!(!out.status.success());
    eventually("two pods", WAIT, || async {
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
        let n = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?
            .items
            .iter()
            .filter(|p| ready(p))
            .count();
        (n == 2).then_some(())
    })
    .await;
}
}

on_both! {
async fn scale_subresource_of_a_custom_resource(c: Cluster) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "pools.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "pools", "singular": "pool", "kind": "Pool"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "ready": {"type": "integer"}, "selector": {"type": "string"}}}
                }}},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.size",
                    "statusReplicasPath": ".status.ready",
                    "labelSelectorPath": ".status.selector"}}
            }]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(c.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    if c.is_real() {
        // The API server serves a CRD's resources once its establishing controller has run,
        // after the create has answered; the emulator establishes it within the create.
        kube::runtime::wait::await_condition(
            Api::<CustomResourceDefinition>::all(c.client.clone()),
            "pools.example.com",
            kube::runtime::wait::conditions::is_crd_established(),
        )
        .await
        .unwrap();
    }
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Pool".into(),
        plural: "pools".into(),
    };
    let pools: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Pool",
        "metadata": {"name": "p"}, "spec": {"size": 2}
    }))
    .unwrap();
    pools.create(&PostParams::default(), &obj).await.unwrap();
    pools
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": 2, "selector": "app=p"}})),
        )
        .await
        .unwrap();
    let scale = pools.get_scale("p").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    let status = scale.status.unwrap();
    assert_eq!(status.replicas, 2);
    assert_eq!(status.selector.as_deref(), Some("app=p"));
    pools
        .patch_scale(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    let stored = pools.get("p").await.unwrap();
    assert_eq!(stored.data["spec"]["size"], 5);
    assert_eq!(stored.metadata.generation, Some(2));
    let discovery = c.kubectl_ok(&["api-resources", "--api-group=example.com", "-o", "name"]);
    assert_eq!(discovery.trim(), "pools.example.com");
    // A kind without the subresource: 404.
    let err = api_error(
        Api::<Pod>::namespaced(c.client.clone(), "default")
            .get_scale("x")
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
}
}

on_both! {
async fn eviction_honours_the_disruption_budget(c: Cluster) {
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("web", 2))
        .await
        .unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    if c.is_real() {
        // PodDisruptionBudgets are policy/v1 from Kubernetes 1.21 on; 1.20 serves v1beta1 only.
        let status = pdbs
            .create(&PostParams::default(), &pdb)
            .await
            .map_err(api_error)
            .unwrap_err();
        assert_eq!(status.code, 404, "{status:?}");
        return;
    }
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("budget with 2 healthy pods", WAIT, || async {
        let s = pdbs.get("web").await.ok()?.status?;
        (s.current_healthy == 2 && s.desired_healthy == 2 && s.expected_pods == 2).then_some(())
    })
    .await;
    let s = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(s.disruptions_allowed, 0);

    let err = api_error(
        pods.evict("web-1", &EvictParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 429);
    assert_eq!(err.reason, "TooManyRequests");
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert!(
        pods.get("web-1")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // Relax the budget: one disruption is allowed, the eviction deletes the pod.
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
    )
    .await
    .unwrap();
    eventually("one disruption allowed", WAIT, || async {
        let s = pdbs.get("web").await.ok()?.status?;
        (s.disruptions_allowed == 1 && s.observed_generation == Some(2)).then_some(())
    })
    .await;
    let evicted = pods.get("web-1").await.unwrap().metadata.uid;
    let status = pods.evict("web-1", &EvictParams::default()).await.unwrap();
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    // Terminating, gone, or already replaced by the StatefulSet (a new uid under the same name).
    eventually("web-1 terminating or gone", WAIT, || async {
        match pods.get_opt("web-1").await.ok()? {
            None => Some(()),
            Some(p) if p.metadata.uid != evicted => Some(()),
            Some(p) => p.metadata.deletion_timestamp.map(|_| ()),
        }
    })
    .await;
    // Through kubectl: the budget is readable with its status columns.
    let out = c.kubectl_ok(&[
        "get",
        "pdb",
        "web",
        "-o",
        "jsonpath={.status.desiredHealthy}",
    ]);
    assert_eq!(out, "1");
}
}

fn token_review(token: &str, audiences: Option<Vec<&str>>) -> TokenReview {
    let mut spec = json!({"token": token});
    if let Some(a) = audiences {
        spec["audiences"] = json!(a);
    }
    serde_json::from_value(json!({"spec": spec})).unwrap()
}

on_both! {
async fn kubectl_create_token_then_token_review(c: Cluster) {
    c.kubectl_ok(&["create", "namespace", "apps"]);
    c.kubectl_ok(&["create", "serviceaccount", "robot", "-n", "apps"]);
    let token = c.kubectl_ok(&["create", "token", "robot", "-n", "apps"]);
    let token = token.trim();
    assert!(!token.is_empty());
    let reviews: Api<TokenReview> = Api::all(c.client.clone());
    let r = reviews
        .create(&PostParams::default(), &token_review(token, None))
        .await
        .unwrap();
    let status = r.status.unwrap();
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:apps:robot")
    );
    let sa = Api::<ServiceAccount>::namespaced(c.client.clone(), "apps")
        .get("robot")
        .await
        .unwrap();
    assert_eq!(user.uid, sa.metadata.uid);
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:apps",
            "system:authenticated"
        ]
    );

    // Audiences: a token for "vault" is not valid for the API server, and the reverse.
    let vault = c.kubectl_ok(&["create", "token", "robot", "-n", "apps", "--audience=vault"]);
    let r = reviews
        .create(&PostParams::default(), &token_review(vault.trim(), None))
        .await
        .unwrap();
    let s = r.status.unwrap();
    assert_ne!(s.authenticated, Some(true));
    assert!(
        s.error
            .unwrap()
            .contains("is invalid for the target audiences")
    );
    let r = reviews
        .create(
            &PostParams::default(),
            &token_review(vault.trim(), Some(vec!["vault"])),
        )
        .await
        .unwrap();
    let s = r.status.unwrap();
    assert_eq!(s.authenticated, Some(true));
    assert_eq!(s.audiences.unwrap(), ["vault"]);

    // Unknown tokens and tokens of deleted service accounts are not authenticated.
    let r = reviews
        .create(&PostParams::default(), &token_review("not-a-token", None))
        .await
        .unwrap();
    assert_ne!(r.status.unwrap().authenticated, Some(true));
    Api::<ServiceAccount>::namespaced(c.client.clone(), "apps")
        .delete("robot", &DeleteParams::default())
        .await
        .unwrap();
    let review = || {
        let reviews = reviews.clone();
        async move {
            let r = reviews
                .create(&PostParams::default(), &token_review(token, None))
                .await
                .unwrap();
            r.status.unwrap()
        }
    };
    let s = if c.is_real() {
        // The API server caches a token's successful authentication for 10 s
        // (pkg/kubeapiserver/options/authentication.go TokenSuccessCacheTTL of 1.20.2, as in
        // 1.32); the emulator refuses it at once.
        eventually("the deleted account's token refused", Duration::from_secs(30), || {
            let review = review();
            async move {
                let s = review.await;
                (s.authenticated != Some(true)).then_some(s)
            }
        })
        .await
    } else {
        review().await
    };
    assert_ne!(s.authenticated, Some(true));
    assert!(s.error.is_some());

    // Bad input names the field.
    let out = c.kubectl(&["create", "token", "default", "-n", "apps", "--duration=1m"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"),
        "{err}"
    );
}
}

fn sar(user: &str, groups: &[&str], attrs: Value) -> SubjectAccessReview {
    let mut spec = json!({"user": user, "groups": groups});
    if attrs.get("path").is_some() {
        spec["nonResourceAttributes"] = attrs;
    } else {
        spec["resourceAttributes"] = attrs;
    }
    serde_json::from_value(json!({"spec": spec})).unwrap()
}

async fn allowed(c: &Cluster, review: SubjectAccessReview) -> (bool, String) {
    let s = Api::<SubjectAccessReview>::all(c.client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    (s.allowed, s.reason.unwrap_or_default())
}

on_both! {
async fn access_reviews_follow_rbac_and_impersonation(c: Cluster) {
    c.kubectl_ok(&["create", "namespace", "team"]);
    // The default caller is in system:masters.
    assert_eq!(
        c.kubectl_ok(&["auth", "can-i", "create", "pods"]).trim(),
        "yes"
    );
    if c.is_real() {
        // SelfSubjectReview (`kubectl auth whoami`) is Kubernetes 1.26+ (GA 1.28).
        let out = c.kubectl(&["auth", "whoami"]);
        assert!(!out.status.success(), "{out:?}");
    } else {
        let whoami =
            c.kubectl_ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"]);
        assert!(whoami.contains("system:masters"), "{whoami}");
    }

    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-reader", "namespace": "team"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["update"], "resourceNames": ["web"]}
        ]
    }))
    .unwrap();
    Api::<Role>::namespaced(c.client.clone(), "team")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-reads", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
            {"kind": "ServiceAccount", "name": "ci"}
        ]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.client.clone(), "team")
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // kubectl auth can-i --as: a SelfSubjectAccessReview under impersonation.
    let yes = c.kubectl(&["auth", "can-i", "get", "pods", "-n", "team", "--as=alice"]);
    assert!(yes.status.success());
    assert_eq!(String::from_utf8_lossy(&yes.stdout).trim(), "yes");
    let no = c.kubectl(&[
        "auth",
        "can-i",
        "delete",
        "pods",
        "-n",
        "team",
        "--as=alice",
    ]);
    assert!(!no.status.success());
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
    let no = c.kubectl(&[
        "auth",
        "can-i",
        "get",
        "pods",
        "-n",
        "default",
        "--as=alice",
    ]);
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
    let sa = c.kubectl(&[
        "auth",
        "can-i",
        "list",
        "pods",
        "-n",
        "team",
        "--as=system:serviceaccount:team:ci",
    ]);
    assert_eq!(String::from_utf8_lossy(&sa.stdout).trim(), "yes");

    // SubjectAccessReview: subresources, resource names, reasons.
    let (ok, reason) = allowed(
        &c,
        sar(
            "alice",
            &[],
            json!({"namespace": "team", "verb": "get", "resource": "pods", "subresource": "log"}),
        ),
    )
    .await;
    assert!(ok);
    assert_eq!(
        reason,
        "RBAC: allowed by RoleBinding \"alice-reads/team\" of Role \"pod-reader\" to User \"alice\""
    );
    let scale = |name: &str| json!({"namespace": "team", "verb": "update", "group": "apps", "resource": "statefulsets", "subresource": "scale", "name": name});
    assert!(allowed(&c, sar("alice", &[], scale("web"))).await.0);
    assert!(!allowed(&c, sar("alice", &[], scale("db"))).await.0);
    // Bootstrap policy: system:authenticated may read /healthz and discovery; nobody else may
    // write nodes.
    assert!(
        allowed(
            &c,
            sar(
                "bob",
                &["system:authenticated"],
                json!({"path": "/apis/apps/v1", "verb": "get"})
            )
        )
        .await
        .0
    );
    assert!(
        !allowed(
            &c,
            sar(
                "bob",
                &["system:authenticated"],
                json!({"verb": "create", "resource": "nodes"})
            )
        )
        .await
        .0
    );
    assert!(
        allowed(
            &c,
            sar(
                "root",
                &["system:masters"],
                json!({"verb": "delete", "resource": "nodes"})
            )
        )
        .await
        .0
    );
    // Missing user and group: 422 naming the field.
    let err = api_error(
        Api::<SubjectAccessReview>::all(c.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"spec": {"resourceAttributes": {"verb": "get"}}}))
                    .unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(err.message.contains("spec.user"), "{}", err.message);

    // Aggregation: a ClusterRole labelled aggregate-to-view extends `view`.
    let extra: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "sites-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["sites.ecmwf.int"], "resources": ["sites"], "verbs": ["get"]}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(c.client.clone())
        .create(&PostParams::default(), &extra)
        .await
        .unwrap();
    let viewer: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "carol-views", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "viewers"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.client.clone(), "team")
        .create(&PostParams::default(), &viewer)
        .await
        .unwrap();
    eventually("view aggregates sites", WAIT, || async {
        let out = c.kubectl(&[
            "auth",
            "can-i",
            "get",
            "sites.sites.ecmwf.int",
            "-n",
            "team",
            "--as=carol",
            "--as-group=viewers",
        ]);
        (String::from_utf8_lossy(&out.stdout).trim() == "yes").then_some(())
    })
    .await;
    let out = c.kubectl(&[
        "auth",
        "can-i",
        "get",
        "secrets",
        "-n",
        "team",
        "--as=carol",
        "--as-group=viewers",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
}
}

on_both! {
async fn kubectl_certificate_approve(c: Cluster) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    use base64::Engine;
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "alice"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"]
        }
    }))
    .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    let created = csrs.create(&PostParams::default(), &csr).await.unwrap();
    // The administrator of the test control plane is `admin` (its token file).
    let admin = if c.is_real() {
        "admin"
    } else {
        "kubernetes-admin"
    };
    assert_eq!(created.spec.username.as_deref(), Some(admin));
    let out = c.kubectl_ok(&["certificate", "approve", "alice"]);
    assert_eq!(
        out.trim(),
        "certificatesigningrequest.certificates.k8s.io/alice approved"
    );
    let approved = csrs.get("alice").await.unwrap();
    let conds = approved.status.unwrap().conditions.unwrap();
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].type_, "Approved");
    assert_eq!(conds[0].status, "True");
    assert!(conds[0].last_update_time.is_some());
    // Approved and Denied exclude each other; an approval cannot be taken back.
    let err = api_error(
        csrs.patch_approval(
            "alice",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "add", "path": "/status/conditions/-",
                    "value": {"type": "Denied", "status": "True", "reason": "No"}}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains(
            "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"
        ),
        "{}",
        err.message
    );
    let err = api_error(
        csrs.patch_approval(
            "alice",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("updates may not remove a condition of type \"Approved\""),
        "{}",
        err.message
    );
    // A CSR without a PEM request is refused naming the field.
    let bad: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "bad"},
        "spec": {"request": "", "signerName": "example.com/x", "usages": ["digital signature"]}
    }))
    .unwrap();
    let err = api_error(csrs.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(err.code, 422);
    assert!(err.message.contains("spec.request"), "{}", err.message);
}
}

on_both! {
async fn subresource_answers_are_negotiated(c: Cluster) {
    use crate::fidelity::curl;
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    sts.create(&PostParams::default(), &statefulset("web", 2))
        .await
        .unwrap();
    let path = "/apis/apps/v1/namespaces/default/statefulsets/web/scale";
    let (code, ct, body) = curl(&c, "GET", path, &["Accept: application/yaml"], None).await;
    assert_eq!((code, ct.as_str()), (200, "application/yaml"), "{body}");
    let scale: Value = serde_yaml_ng::from_str(&body).unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 2);
    // Not served: 406 before anything is done. (The API server writes protobuf for built-in
    // kinds; the emulator never does, docs/emulator.md known differences.)
    let (code, ct, body) = curl(
        &c,
        "GET",
        path,
        &["Accept: application/vnd.kubernetes.protobuf"],
        None,
    )
    .await;
    if c.is_real() {
        assert_eq!((code, ct.as_str()), (200, "application/vnd.kubernetes.protobuf"));
    } else {
        assert_eq!(code, 406, "{body}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["reason"], "NotAcceptable");
    }
    let (code, _, _) = curl(
        &c,
        "PUT",
        path,
        &[
            "Accept: application/json;as=Table;g=meta.k8s.io;v=v1",
            "Content-Type: application/json",
        ],
        Some(r#"{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":5}}"#),
    )
    .await;
    assert_eq!(code, 406);
    assert_eq!(
        sts.get("web").await.unwrap().spec.unwrap().replicas,
        Some(2)
    );
    // Reviews and tokens too (SelfSubjectReview is Kubernetes 1.26+).
    let (code, ct, body) = curl(
        &c,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &["Accept: application/yaml", "Content-Type: application/json"],
        Some(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#),
    )
    .await;
    if c.is_real() {
        assert_eq!(code, 404, "{body}");
    } else {
        assert_eq!((code, ct.as_str()), (201, "application/yaml"), "{body}");
        assert!(body.contains("username: kubernetes-admin"), "{body}");
    }
    let (code, _, _) = curl(
        &c,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        &["Accept: text/plain", "Content-Type: application/json"],
        Some(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#),
    )
    .await;
    assert_eq!(code, 406);
}
}
