//! What every cluster has, and the small controllers that keep it so:
//!
//! - the Service `default/kubernetes` (ClusterIP 10.96.0.1, port 443 `https`) with its
//!   Endpoints and EndpointSlice pointing at the emulator's own address;
//! - in every namespace, created with the namespace (and re-created when deleted, as the
//!   root-CA publisher and the service-account controller do): the ConfigMap `kube-root-ca.crt`
//!   (key `ca.crt`: the emulator's CA when serving HTTPS, a generated CA otherwise) and the
//!   ServiceAccount `default`;
//! - the bootstrap RBAC policy (a subset of kubernetes
//!   `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, listed in [`bootstrap_rbac`]), with the
//!   ClusterRole aggregation controller filling the rules of `admin`, `edit`, `view` and any
//!   ClusterRole with an `aggregationRule`;
//! - the Node [`NODE_NAME`] the simulated kubelet runs pods on (Ready, capacity, allocatable);
//!   a cordoned node (`spec.unschedulable`) gets the `node.kubernetes.io/unschedulable` taint
//!   and new pods stay Pending with PodScheduled False, reason Unschedulable;
//! - the system PriorityClasses;
//! - the PodDisruptionBudget status controller ([`crate::disruption`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::meta::{meta_str, rv_of};
use crate::registry::ResourceInfo;
use crate::state::App;
use crate::store::EventType;

/// The node the simulated kubelet runs every pod on.
pub const NODE_NAME: &str = "emulator-node";
/// ClusterIP of the Service `default/kubernetes`.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

fn res(app: &App, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
    app.store.lock().registry.get(group, "v1", plural)
}

/// Creates an object unless it exists; errors (already there, namespace gone) are ignored.
fn ensure(app: &App, group: &str, plural: &str, ns: &str, obj: Value) {
    let Some(r) = res(app, group, plural) else {
        return;
    };
    let name = meta_str(&obj, "name").unwrap_or_default().to_string();
    if app.store.lock().get(&r, ns, &name).is_some() {
        return;
    }
    if let Ok(p) = crate::ops::prepare_create(&r, ns, obj, &crate::ops::WriteOptions::default()) {
        let _ = app.store.commit_create(&r, p.object);
    }
}

fn root_ca(app: &App) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"},
           "data": {"ca.crt": app.ca_pem()}})
}

impl App {
    fn ca_pem(&self) -> String {
        self.cluster.ca_pem()
    }
}

/// The objects a new namespace gets from the controllers.
fn namespace_defaults(app: &App, ns: &str) {
    let namespace = res(app, "", "namespaces").and_then(|r| app.store.lock().get(&r, "", ns));
    let terminating = match namespace {
        Some(n) => n["metadata"]["deletionTimestamp"].is_string(),
        None => true,
    };
    if terminating {
        return;
    }
    ensure(app, "", "configmaps", ns, root_ca(app));
    ensure(
        app,
        "",
        "serviceaccounts",
        ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
    );
}

/// Called after an object was created through the API: a namespace gets its defaults at once
/// (so that a client listing right after creating the namespace sees them).
pub fn after_create(app: &Arc<App>, r: &ResourceInfo, stored: &Value) {
    if r.is_builtin() && r.group.is_empty() && r.kind == "Namespace" {
        namespace_defaults(app, meta_str(stored, "name").unwrap_or_default());
    }
}

/// Creates the objects every cluster has. `addr` is where the emulator serves.
pub fn seed(app: &Arc<App>, addr: std::net::SocketAddr) {
    crate::apiservices::sync(app, true);
    // The components `kubectl get componentstatuses` lists (`serversToValidate`), healthy.
    for (name, message) in [
        ("scheduler", "ok"),
        ("controller-manager", "ok"),
        ("etcd-0", r#"{"health":"true","reason":""}"#),
    ] {
        ensure(
            app,
            "",
            "componentstatuses",
            "",
            json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": name},
                   "conditions": [{"type": "Healthy", "status": "True", "message": message}]}),
        );
    }
    let namespaces: Vec<String> = app
        .store
        .lock()
        .objects_of("namespaces", None)
        .iter()
        .filter_map(|n| meta_str(n, "name").map(str::to_string))
        .collect();
    for ns in &namespaces {
        namespace_defaults(app, ns);
    }
    let ip = addr.ip().to_string();
    let port = addr.port();
    ensure(
        app,
        "",
        "services",
        "default",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP, "clusterIPs": [KUBERNETES_SERVICE_IP],
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                        "sessionAffinity": "None"}}),
    );
    ensure(
        app,
        "",
        "endpoints",
        "default",
        json!({"apiVersion": "v1", "kind": "Endpoints",
               "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
               "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}),
    );
    ensure(
        app,
        "discovery.k8s.io",
        "endpointslices",
        "default",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
               "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    );
    ensure(app, "", "nodes", "", node());
    // The kubelet reports the node's status (create drops it: `nodes/status`).
    if let Some(r) = res(app, "", "nodes") {
        let created = app.store.lock().get(&r, "", NODE_NAME);
        if let Some(n) = created.filter(|n| n["status"]["conditions"].is_null()) {
            let mut new = (*n).clone();
            new["status"] = node()["status"].clone();
            let _ = app.store.commit_update(&r, rv_of(&n), new);
        }
    }
    for (name, value, description) in [
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
        (
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
    ] {
        ensure(
            app,
            "scheduling.k8s.io",
            "priorityclasses",
            "",
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": name}, "value": value, "globalDefault": false,
                   "description": description, "preemptionPolicy": "PreemptLowerPriority"}),
        );
    }
    let (roles, bindings) = bootstrap_rbac();
    for role in roles {
        ensure(app, "rbac.authorization.k8s.io", "clusterroles", "", role);
    }
    for binding in bindings {
        ensure(
            app,
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "",
            binding,
        );
    }
    aggregate_cluster_roles(app);
}

fn node() -> Value {
    node_object(NODE_NAME, "10.0.0.1", "v1.32.0", &crate::meta::now())
}

/// A Node as its kubelet registers and reports it: `name`, its labels, pod CIDR, capacity and
/// allocatable, the conditions of a healthy kubelet (Ready) heartbeating at `now`, the
/// InternalIP `ip` and `kubelet_version` in nodeInfo.
pub fn node_object(name: &str, ip: &str, kubelet_version: &str, now: &str) -> Value {
    let resources =
        json!({"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}},
        "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "emulated", "systemUUID": "emulated", "bootID": "emulated",
                         "kernelVersion": "6.1.0", "osImage": "sites-emulator", "containerRuntimeVersion": "containerd://1.7.0",
                         "kubeletVersion": kubelet_version, "kubeProxyVersion": kubelet_version, "operatingSystem": "linux", "architecture": "amd64"},
        },
    })
}

// ---------------------------------------------------------------- scheduling

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

fn tolerates_unschedulable(pod: &Value) -> bool {
    pod["spec"]["tolerations"].as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            let key_ok = t["key"] == json!(UNSCHEDULABLE_TAINT)
                || (t["key"].as_str().is_none_or(str::is_empty) && t["operator"] == "Exists");
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            key_ok && effect_ok
        })
    })
}

/// Where the scheduler puts a pod: the node's name, or the PodScheduled message why not.
pub fn schedule(app: &App, pod: &Value) -> Result<&'static str, String> {
    let node = res(app, "", "nodes").and_then(|r| app.store.lock().get(&r, "", NODE_NAME));
    fits(node.as_deref(), pod).map(|()| NODE_NAME)
}

/// Whether the scheduler may put `pod` on the cluster's only node (None: there is none), or
/// the PodScheduled message why not: a cordoned node takes only pods tolerating
/// `node.kubernetes.io/unschedulable`.
pub fn fits(node: Option<&Value>, pod: &Value) -> Result<(), String> {
    let Some(node) = node else {
        return Err("no nodes available to schedule pods".into());
    };
    if node["spec"]["unschedulable"] == json!(true) && !tolerates_unschedulable(pod) {
        return Err("0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.".into());
    }
    Ok(())
}

/// The status of a pod the scheduler could not place.
pub fn unschedulable_status(pod: &Value, message: &str) -> Value {
    let old = pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"))
        .cloned();
    let ltt = match &old {
        Some(c) if c["status"] == "False" => c["lastTransitionTime"].clone(),
        _ => json!(crate::meta::now()),
    };
    json!({
        "phase": "Pending",
        "qosClass": pod["status"]["qosClass"].as_str().unwrap_or("BestEffort"),
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": message, "lastProbeTime": null, "lastTransitionTime": ltt}],
    })
}

/// Pods waiting for a node.
pub fn unscheduled_pods(st: &crate::store::State) -> HashSet<(String, String)> {
    st.stored_of("pods", None)
        .into_iter()
        .filter(|(_, p)| p.value()["spec"]["nodeName"].is_null())
        .map(|(key, _)| key)
        .collect()
}

/// The node lifecycle controller: the unschedulable taint follows `spec.unschedulable`.
fn sync_node_taint(app: &App, name: &str) {
    let Some(r) = res(app, "", "nodes") else {
        return;
    };
    let Some(node) = app.store.lock().get(&r, "", name) else {
        return;
    };
    let cordoned = node["spec"]["unschedulable"] == json!(true);
    let mut taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = taints
        .iter()
        .any(|t| t["key"] == json!(UNSCHEDULABLE_TAINT));
    if cordoned == has {
        return;
    }
    if cordoned {
        taints.push(json!({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": crate::meta::now()}));
    } else {
        taints.retain(|t| t["key"] != json!(UNSCHEDULABLE_TAINT));
    }
    let mut new = (*node).clone();
    if taints.is_empty() {
        if let Some(s) = new["spec"].as_object_mut() {
            s.remove("taints");
        }
    } else {
        new["spec"]["taints"] = json!(taints);
    }
    let _ = app.store.commit_update(&r, rv_of(&node), new);
}

// ---------------------------------------------------------------- RBAC

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn url_rule(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The bootstrap ClusterRoles and ClusterRoleBindings the emulator creates: `cluster-admin`,
/// `admin`, `edit`, `view` (aggregated from `system:aggregate-to-admin|edit|view`),
/// `system:discovery`, `system:basic-user`, `system:public-info-viewer`,
/// `system:auth-delegator`, `system:service-account-issuer-discovery`; bindings `cluster-admin`
/// (group `system:masters`), `system:discovery`, `system:basic-user` (group
/// `system:authenticated`), `system:public-info-viewer` (`system:authenticated`,
/// `system:unauthenticated`), `system:service-account-issuer-discovery`
/// (`system:serviceaccounts`).
pub fn bootstrap_rbac() -> (Vec<Value>, Vec<Value>) {
    let meta = |name: &str, extra_labels: &[(&str, &str)]| {
        let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
        for (k, v) in extra_labels {
            labels[*k] = json!(v);
        }
        json!({"name": name, "labels": labels,
               "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
    };
    let role = |name: &str, labels: &[(&str, &str)], rules: Vec<Value>| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(name, labels), "rules": rules})
    };
    let aggregated = |name: &str, labels: &[(&str, &str)], selector: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(name, labels),
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector: "true"}}]},
               "rules": []})
    };
    const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
    const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
    const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";
    let roles = vec![
        role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
        ),
        aggregated("admin", &[], TO_ADMIN),
        aggregated("edit", &[(TO_ADMIN, "true")], TO_EDIT),
        aggregated("view", &[(TO_EDIT, "true")], TO_VIEW),
        role(
            "system:aggregate-to-admin",
            &[(TO_ADMIN, "true")],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
                rule(
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                    crate::registry::VERBS,
                ),
            ],
        ),
        role(
            "system:aggregate-to-edit",
            &[(TO_EDIT, "true")],
            vec![
                rule(
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                    READ,
                ),
                rule(&[""], &["serviceaccounts"], &["impersonate"]),
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                    WRITE,
                ),
                rule(&[""], &["pods/eviction"], &["create"]),
                rule(
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                    WRITE,
                ),
                rule(&[""], &["serviceaccounts/token"], &["create"]),
                rule(
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                    WRITE,
                ),
                rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
                rule(&["batch"], &["cronjobs", "jobs"], WRITE),
                rule(&["policy"], &["poddisruptionbudgets"], WRITE),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                    WRITE,
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    crate::registry::VERBS,
                ),
            ],
        ),
        role(
            "system:aggregate-to-view",
            &[(TO_VIEW, "true")],
            vec![
                rule(
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                    READ,
                ),
                rule(
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                    READ,
                ),
                rule(&[""], &["namespaces"], READ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
                rule(
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                    READ,
                ),
                rule(
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                    READ,
                ),
                rule(
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                    READ,
                ),
                rule(
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    READ,
                ),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    READ,
                ),
            ],
        ),
        role(
            "system:discovery",
            &[],
            vec![url_rule(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        role(
            "system:public-info-viewer",
            &[],
            vec![url_rule(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        role(
            "system:auth-delegator",
            &[],
            vec![
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        role(
            "system:service-account-issuer-discovery",
            &[],
            vec![url_rule(
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
                &["get"],
            )],
        ),
    ];
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": meta(name, &[]),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let bindings = vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        binding(
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
    ];
    (roles, bindings)
}

/// The ClusterRole aggregation controller: every ClusterRole with an aggregationRule gets the
/// rules of the ClusterRoles its selectors match (in name order, without duplicates).
fn aggregate_cluster_roles(app: &App) {
    let Some(r) = res(app, "rbac.authorization.k8s.io", "clusterroles") else {
        return;
    };
    let roles = app.store.lock().objects_of(&r.key(), None);
    for role in roles.iter().filter(|c| c["aggregationRule"].is_object()) {
        let selectors: Vec<crate::selector::LabelSelector> =
            role["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| crate::selector::LabelSelector::from_api(s).ok())
                        .collect()
                })
                .unwrap_or_default();
        let mut rules: Vec<Value> = Vec::new();
        for other in &roles {
            if meta_str(other, "name") == meta_str(role, "name") {
                continue;
            }
            if !selectors
                .iter()
                .any(|s| !s.is_empty() && s.matches_object(other))
            {
                continue;
            }
            for rule in other["rules"].as_array().cloned().unwrap_or_default() {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        if role["rules"] != json!(rules) {
            let mut new = (**role).clone();
            new["rules"] = json!(rules);
            let _ = app.store.commit_update(&r, rv_of(role), new);
        }
    }
}

// ---------------------------------------------------------------- the controller loop

#[derive(Default)]
struct Dirty {
    namespaces: HashSet<String>,
    nodes: HashSet<String>,
    aggregate: bool,
    /// Namespaces whose PodDisruptionBudgets need a status pass.
    budgets: HashSet<String>,
}

/// Runs the controllers of this module until the process ends.
pub async fn run(app: Arc<App>) {
    let mut rx = app.store.subscribe();
    let mut dirty = Dirty::default();
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    let name = || ev.name.clone();
                    match ev.resource.as_str() {
                        "namespaces" if ev.kind == EventType::Added => { dirty.namespaces.insert(name()); }
                        "configmaps" if ev.kind != EventType::Added && name() == "kube-root-ca.crt" => {
                            dirty.namespaces.insert(ev.namespace.clone());
                        }
                        "serviceaccounts" if ev.kind == EventType::Deleted && name() == "default" => {
                            dirty.namespaces.insert(ev.namespace.clone());
                        }
                        "clusterroles.rbac.authorization.k8s.io" => dirty.aggregate = true,
                        "nodes" => { dirty.nodes.insert(name()); }
                        "pods" | "poddisruptionbudgets.policy" | "statefulsets.apps" | "replicasets.apps"
                        | "deployments.apps" => { dirty.budgets.insert(ev.namespace.clone()); }
                        _ => {}
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    dirty.aggregate = true;
                    let st = app.store.lock();
                    for n in st.objects_of("namespaces", None) {
                        let n = meta_str(&n, "name").unwrap_or_default().to_string();
                        dirty.namespaces.insert(n.clone());
                        dirty.budgets.insert(n);
                    }
                    dirty.nodes.insert(NODE_NAME.to_string());
                }
                Err(_) => return,
            },
            _ = tick.tick() => {
                let d = std::mem::take(&mut dirty);
                for ns in d.namespaces {
                    republish_root_ca(&app, &ns);
                    namespace_defaults(&app, &ns);
                }
                for n in d.nodes {
                    sync_node_taint(&app, &n);
                }
                if d.aggregate {
                    aggregate_cluster_roles(&app);
                }
                for ns in d.budgets {
                    crate::disruption::sync_namespace(&app, &ns);
                }
            }
        }
    }
}

/// The root-CA publisher puts back an edited `kube-root-ca.crt`.
fn republish_root_ca(app: &App, ns: &str) {
    let Some(r) = res(app, "", "configmaps") else {
        return;
    };
    let Some(cm) = app.store.lock().get(&r, ns, "kube-root-ca.crt") else {
        return;
    };
    let want = json!({"ca.crt": app.ca_pem()});
    if cm["data"] != want {
        let mut new = (*cm).clone();
        new["data"] = want;
        let _ = app.store.commit_update(&r, rv_of(&cm), new);
    }
}
