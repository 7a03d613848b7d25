//! Built-in kinds: unknown-field pruning against the Kubernetes OpenAPI schemas (from
//! k8s-openapi), the defaults the API server fills in, and the update rules clients trip on
//! (immutable fields).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api;
use serde_json::{Map, Value, json};

use crate::registry::ResourceInfo;

/// A kind's schema: the root plus its definitions.
pub struct KindSchema {
    pub root: Value,
    pub defs: Map<String, Value>,
}

pub(crate) fn generate<T: schemars::JsonSchema>() -> KindSchema {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let mut root = schema.to_value();
    let defs = root
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .and_then(|d| d.as_object().cloned())
        .unwrap_or_default();
    KindSchema { root, defs }
}

/// The schema of a built-in kind, generated once.
pub fn kind_schema(group: &str, kind: &str) -> Option<Arc<KindSchema>> {
    type Cache = Mutex<HashMap<(String, String), Arc<KindSchema>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (group.to_string(), kind.to_string());
    if let Some(s) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Some(s.clone());
    }
    use api::core::v1 as core;
    let s = match (group, kind) {
        ("", "Namespace") => generate::<core::Namespace>(),
        ("", "ConfigMap") => generate::<core::ConfigMap>(),
        ("", "Secret") => generate::<core::Secret>(),
        ("", "Pod") => generate::<core::Pod>(),
        ("", "Service") => generate::<core::Service>(),
        ("", "PersistentVolumeClaim") => generate::<core::PersistentVolumeClaim>(),
        ("", "PersistentVolume") => generate::<core::PersistentVolume>(),
        ("", "Event") => generate::<core::Event>(),
        ("", "ServiceAccount") => generate::<core::ServiceAccount>(),
        ("", "Endpoints") => generate::<core::Endpoints>(),
        ("apps", "StatefulSet") => generate::<api::apps::v1::StatefulSet>(),
        ("apps", "Deployment") => generate::<api::apps::v1::Deployment>(),
        ("apps", "ReplicaSet") => generate::<api::apps::v1::ReplicaSet>(),
        ("apps", "ControllerRevision") => generate::<api::apps::v1::ControllerRevision>(),
        ("networking.k8s.io", "Ingress") => generate::<api::networking::v1::Ingress>(),
        ("networking.k8s.io", "IngressClass") => generate::<api::networking::v1::IngressClass>(),
        ("coordination.k8s.io", "Lease") => generate::<api::coordination::v1::Lease>(),
        ("events.k8s.io", "Event") => generate::<api::events::v1::Event>(),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => generate::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            generate::<api::admissionregistration::v1::MutatingWebhookConfiguration>()
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            generate::<api::admissionregistration::v1::ValidatingWebhookConfiguration>()
        }
        ("rbac.authorization.k8s.io", "Role") => generate::<api::rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => generate::<api::rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => generate::<api::rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => generate::<api::rbac::v1::ClusterRoleBinding>(),
        ("scheduling.k8s.io", "PriorityClass") => generate::<api::scheduling::v1::PriorityClass>(),
        ("storage.k8s.io", "StorageClass") => generate::<api::storage::v1::StorageClass>(),
        _ => extra_schema(group, kind)?,
    };
    let s = Arc::new(s);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, s.clone());
    Some(s)
}

/// Removes fields the kind's schema does not define; returns their paths (`spec.foo`).
/// Root `apiVersion`, `kind` and `metadata` are handled by the caller.
pub fn prune_unknown(r: &ResourceInfo, obj: &mut Value) -> Vec<String> {
    let Some(schema) = kind_schema(&r.group, &r.kind) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Some(props) = schema.root.get("properties").and_then(Value::as_object) else {
        return out;
    };
    if let Some(o) = obj.as_object_mut() {
        let keys: Vec<String> = o.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.get(&k) {
                Some(s) => {
                    if let Some(v) = o.get_mut(&k) {
                        prune_node(v, s, &schema.defs, &k, &mut out, 0);
                    }
                }
                None => {
                    o.remove(&k);
                    out.push(k);
                }
            }
        }
    }
    out
}

fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    let mut s = schema;
    for _ in 0..8 {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => match r.strip_prefix("#/$defs/").and_then(|n| defs.get(n)) {
                Some(d) => s = d,
                None => return s,
            },
            None => return s,
        }
    }
    s
}

fn prune_node(
    v: &mut Value,
    schema: &Value,
    defs: &Map<String, Value>,
    path: &str,
    out: &mut Vec<String>,
    depth: usize,
) {
    if depth > 64 {
        return;
    }
    let schema = resolve(schema, defs);
    match v {
        Value::Object(o) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let keys: Vec<String> = o.keys().cloned().collect();
                for k in keys {
                    let child_path = format!("{path}.{k}");
                    match props.get(&k) {
                        Some(s) => {
                            if let Some(child) = o.get_mut(&k) {
                                prune_node(child, s, defs, &child_path, out, depth + 1);
                            }
                        }
                        None => {
                            o.remove(&k);
                            out.push(child_path);
                        }
                    }
                }
            } else if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (k, child) in o.iter_mut() {
                    prune_node(child, extra, defs, &format!("{path}.{k}"), out, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(
                        item,
                        item_schema,
                        defs,
                        &format!("{path}[{i}]"),
                        out,
                        depth + 1,
                    );
                }
            }
        }
        _ => {}
    }
}

/// Fills in the defaults the API server sets on built-in kinds. `old` is the stored object on
/// updates (allocated values such as a Service's clusterIP carry over).
pub fn defaults(r: &ResourceInfo, obj: &mut Value, old: Option<&Value>) {
    match (r.group.as_str(), r.kind.as_str()) {
        ("batch", "Job") => {
            if obj["spec"]["template"]["spec"].is_object() {
                pod_spec_defaults(&mut obj["spec"]["template"]["spec"]);
            }
            crate::batch::job_defaults(obj, old.is_none());
        }
        ("batch", "CronJob") => {
            let pod = &mut obj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
            if pod.is_object() {
                pod_spec_defaults(pod);
            }
            crate::batch::cronjob_defaults(obj);
        }
        ("", "Namespace") => {
            if old.is_none() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            let name = obj["metadata"]["name"].clone();
            let labels = crate::meta::meta_mut(obj)
                .entry("labels")
                .or_insert_with(|| json!({}));
            if labels.is_object() {
                labels["kubernetes.io/metadata.name"] = name;
            }
        }
        ("", "Secret") => {
            set_default(obj, &["type"], json!("Opaque"));
            // stringData folds into data (base64) and is never stored.
            if let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                use base64::Engine;
                for (k, v) in sd {
                    let encoded = base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or_default());
                    if !obj["data"].is_object() {
                        obj["data"] = json!({});
                    }
                    obj["data"][k] = json!(encoded);
                }
            }
        }
        ("", "Service") => service_defaults(obj, old),
        ("", "PersistentVolumeClaim") => {
            set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            if old.is_none() {
                obj["status"] = json!({"phase": "Pending"});
            }
        }
        ("", "PersistentVolume") => {
            set_default(
                obj,
                &["spec", "persistentVolumeReclaimPolicy"],
                json!("Retain"),
            );
            set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            if old.is_none() {
                obj["status"] = json!({"phase": "Pending"});
            }
        }
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                pod_spec_defaults(spec);
            }
            if old.is_none() {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
        }
        ("apps", "StatefulSet") => {
            set_default(obj, &["spec", "replicas"], json!(1));
            set_default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
            set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            set_default(
                obj,
                &["spec", "updateStrategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                obj,
                &["spec", "persistentVolumeClaimRetentionPolicy"],
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
                pod_spec_defaults(spec);
            }
            if old.is_none() {
                obj["status"] = json!({"replicas": 0, "availableReplicas": 0});
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            set_default(obj, &["preemptionPolicy"], json!("PreemptLowerPriority"));
        }
        ("apps", "Deployment") => {
            set_default(obj, &["spec", "replicas"], json!(1));
            if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
                pod_spec_defaults(spec);
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            if let Some(versions) = obj
                .pointer_mut("/spec/versions")
                .and_then(Value::as_array_mut)
            {
                for v in versions {
                    if let Some(cols) = v
                        .get_mut("additionalPrinterColumns")
                        .and_then(Value::as_array_mut)
                    {
                        for c in cols {
                            set_default(c, &["priority"], json!(0));
                        }
                    }
                }
            }
        }
        _ => crate::kinds::defaults(r, obj, old),
    }
}

fn service_defaults(obj: &mut Value, old: Option<&Value>) {
    set_default(obj, &["spec", "type"], json!("ClusterIP"));
    set_default(obj, &["spec", "sessionAffinity"], json!("None"));
    set_default(obj, &["spec", "internalTrafficPolicy"], json!("Cluster"));
    set_default(obj, &["spec", "ipFamilies"], json!(["IPv4"]));
    set_default(obj, &["spec", "ipFamilyPolicy"], json!("SingleStack"));
    if obj["spec"]["sessionAffinity"] == "ClientIP" {
        set_default(
            obj,
            &["spec", "sessionAffinityConfig"],
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
    // An update that omits the allocated clusterIP keeps it (a PUT need not repeat it).
    let old_ip = old.and_then(|o| o["spec"]["clusterIP"].as_str().map(str::to_string));
    let headless = obj["spec"]["clusterIP"] == "None";
    if obj["spec"]["clusterIP"].as_str().is_none_or(str::is_empty) {
        let ip = old_ip.unwrap_or_else(allocate_cluster_ip);
        obj["spec"]["clusterIP"] = json!(ip);
    }
    if !headless || obj["spec"]["clusterIPs"].is_null() {
        let ip = obj["spec"]["clusterIP"].clone();
        set_default(obj, &["spec", "clusterIPs"], json!([ip]));
    }
    if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, &["protocol"], json!("TCP"));
            if p.get("targetPort").is_none() {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    if obj["status"].is_null() {
        obj["status"] = json!({"loadBalancer": {}});
    }
}

fn allocate_cluster_ip() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(10);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

fn pod_spec_defaults(spec: &mut Value) {
    set_default(spec, &["restartPolicy"], json!("Always"));
    set_default(spec, &["terminationGracePeriodSeconds"], json!(30));
    set_default(spec, &["dnsPolicy"], json!("ClusterFirst"));
    set_default(spec, &["schedulerName"], json!("default-scheduler"));
    set_default(spec, &["securityContext"], json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                set_default(
                    c,
                    &["terminationMessagePath"],
                    json!("/dev/termination-log"),
                );
                set_default(c, &["terminationMessagePolicy"], json!("File"));
                let latest = c["image"].as_str().is_some_and(|i| {
                    let last = i.rsplit('/').next().unwrap_or(i);
                    !last.contains(':') && !i.contains('@') || last.ends_with(":latest")
                });
                set_default(
                    c,
                    &["imagePullPolicy"],
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        set_default(p, &["protocol"], json!("TCP"));
                    }
                }
            }
        }
    }
}

fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, key) in path.iter().enumerate() {
        if !cur.is_object() {
            return;
        }
        if i == path.len() - 1 {
            if cur.get(*key).is_none_or(Value::is_null) {
                cur[*key] = value;
            }
            return;
        }
        if cur.get(*key).is_none_or(Value::is_null) {
            cur[*key] = json!({});
        }
        cur = &mut cur[*key];
    }
}

/// Built-in validation the operator can trip on: immutable fields, CRD definitions.
pub fn validate(
    r: &ResourceInfo,
    old: Option<&Value>,
    obj: &Value,
) -> Vec<(String, &'static str, String)> {
    let mut causes = Vec::new();
    match (r.group.as_str(), r.kind.as_str()) {
        ("batch", "Job") => causes.extend(crate::batch::validate_job(old, obj)),
        ("batch", "CronJob") => causes.extend(crate::batch::validate_cronjob(obj)),
        ("", "ResourceQuota") => causes.extend(crate::batch::validate_quota(obj)),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            // The schema and approval rules, each cause with the API server's reason; then
            // what serving the resources needs.
            let rules = crate::crds::validate(obj, old);
            if !rules.is_empty() {
                causes.extend(rules);
            } else if let Err(e) = crate::registry::crd_resources(obj) {
                let (field, msg) = e.split_once(": ").unwrap_or(("spec", e.as_str()));
                causes.push((field.to_string(), "FieldValueInvalid", msg.to_string()));
            }
        }
        ("apps", "StatefulSet") => {
            if let Some(old) = old {
                let mutable = [
                    "replicas",
                    "ordinals",
                    "template",
                    "updateStrategy",
                    "revisionHistoryLimit",
                    "persistentVolumeClaimRetentionPolicy",
                    "minReadySeconds",
                ];
                let strip = |v: &Value| {
                    let mut s = v["spec"].as_object().cloned().unwrap_or_default();
                    for m in mutable {
                        s.remove(m);
                    }
                    s
                };
                if strip(old) != strip(obj) {
                    causes.push(("spec".into(), "FieldValueForbidden", "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into()));
                }
            }
        }
        ("", "Service") => {
            if let Some(old) = old {
                let old_ip = old["spec"]["clusterIP"].as_str().unwrap_or_default();
                let new_ip = obj["spec"]["clusterIP"].as_str().unwrap_or_default();
                if !old_ip.is_empty() && old_ip != new_ip {
                    causes.push((
                        "spec.clusterIPs[0]".into(),
                        "FieldValueInvalid",
                        format!("Invalid value: {new_ip:?}: may not change once set"),
                    ));
                }
            }
        }
        ("", "PersistentVolumeClaim") => {
            if let Some(old) = old {
                let strip = |v: &Value| {
                    let mut s = v["spec"].as_object().cloned().unwrap_or_default();
                    if let Some(Value::Object(res)) = s.get_mut("resources") {
                        res.remove("requests");
                    }
                    s.remove("volumeAttributesClassName");
                    s
                };
                let mut old_spec = strip(old);
                let new_spec = strip(obj);
                // volumeName may be set once while empty.
                if old_spec
                    .get("volumeName")
                    .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
                {
                    old_spec.remove("volumeName");
                    let mut n = new_spec.clone();
                    n.remove("volumeName");
                    if old_spec != n {
                        causes.push(pvc_immutable());
                    }
                } else if old_spec != new_spec {
                    causes.push(pvc_immutable());
                }
                let old_storage = old
                    .pointer("/spec/resources/requests/storage")
                    .and_then(quantity);
                let new_storage = obj
                    .pointer("/spec/resources/requests/storage")
                    .and_then(quantity);
                if let (Some(o), Some(n)) = (old_storage, new_storage)
                    && n < o
                {
                    causes.push((
                        "spec.resources.requests.storage".into(),
                        "FieldValueForbidden",
                        "Forbidden: field can not be less than previous value".into(),
                    ));
                }
            }
        }
        ("", "ConfigMap") | ("", "Secret") => {
            if let Some(old) = old
                && old["immutable"] == json!(true)
            {
                for field in ["data", "binaryData"] {
                    if old.get(field) != obj.get(field) {
                        causes.push((
                            field.into(),
                            "FieldValueForbidden",
                            "Forbidden: field is immutable when `immutable` is set".into(),
                        ));
                    }
                }
                if obj["immutable"] != json!(true) {
                    causes.push((
                        "immutable".into(),
                        "FieldValueForbidden",
                        "Forbidden: field is immutable when `immutable` is set".into(),
                    ));
                }
            }
        }
        _ => causes.extend(crate::kinds::validate(r, old, obj)),
    }
    causes
}

fn pvc_immutable() -> (String, &'static str, String) {
    (
        "spec".into(),
        "FieldValueForbidden",
        "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into(),
    )
}

fn quantity(v: &Value) -> Option<i128> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    sites_quantity::parse(&s).ok().map(|q| q.nanos())
}

/// Schemas of the additional kinds (pruning, OpenAPI, `kubectl explain`).
fn extra_schema(group: &str, kind: &str) -> Option<KindSchema> {
    use k8s_openapi::api;
    Some(match (group, kind) {
        ("", "Node") => generate::<api::core::v1::Node>(),
        ("", "ResourceQuota") => generate::<api::core::v1::ResourceQuota>(),
        ("batch", "Job") => generate::<api::batch::v1::Job>(),
        ("batch", "CronJob") => generate::<api::batch::v1::CronJob>(),
        ("apps", "DaemonSet") => generate::<api::apps::v1::DaemonSet>(),
        ("", "ComponentStatus") => generate::<api::core::v1::ComponentStatus>(),
        ("networking.k8s.io", "NetworkPolicy") => generate::<api::networking::v1::NetworkPolicy>(),
        ("", "ReplicationController") => generate::<api::core::v1::ReplicationController>(),
        ("apiregistration.k8s.io", "APIService") => {
            generate::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>()
        }
        ("discovery.k8s.io", "EndpointSlice") => generate::<api::discovery::v1::EndpointSlice>(),
        ("policy", "PodDisruptionBudget") => generate::<api::policy::v1::PodDisruptionBudget>(),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            generate::<api::certificates::v1::CertificateSigningRequest>()
        }
        ("authentication.k8s.io", "TokenReview") => {
            generate::<api::authentication::v1::TokenReview>()
        }
        ("authentication.k8s.io", "SelfSubjectReview") => {
            generate::<api::authentication::v1::SelfSubjectReview>()
        }
        ("authorization.k8s.io", "SubjectAccessReview") => {
            generate::<api::authorization::v1::SubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            generate::<api::authorization::v1::SelfSubjectAccessReview>()
        }
        ("authorization.k8s.io", "LocalSubjectAccessReview") => {
            generate::<api::authorization::v1::LocalSubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectRulesReview") => {
            generate::<api::authorization::v1::SelfSubjectRulesReview>()
        }
        _ => return None,
    })
}
