//! `apiregistration.k8s.io/v1` APIServices, as the kube-aggregator keeps them.
//!
//! Automatic registration keeps one per served group version, named `VERSION.GROUP` (`v1.` for
//! the core group), with no `spec.service` (served locally), labelled
//! `kube-aggregator.kubernetes.io/automanaged`: `onstart` with the built-in priorities of
//! `pkg/controlplane/apiserver/aggregator.go` (and `cmd/kube-apiserver/app/aggregator.go` for
//! the kube-apiserver groups), synced once when the server starts; `true` with
//! `groupPriorityMinimum: 1000`, `versionPriority: 100` for the group versions of
//! CustomResourceDefinitions (the CRD registration controller), synced whenever the served
//! resources or the APIServices change, so that one deleted by hand comes back. APIServices
//! without the label (an aggregated API's registration) are created, changed and deleted by
//! their users and left alone; their `Available` condition is the availability controller's:
//! `Local` without a service, `ServiceNotFound` when the Service is missing, and otherwise
//! `FailedDiscoveryCheck`, since the emulator proxies no aggregated API.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta::meta_str;
use crate::registry::ResourceInfo;
use crate::state::App;

/// The API group.
pub const GROUP: &str = crate::registry::APIREGISTRATION_GROUP;

/// The label autoregistration sets: `onstart` for built-in group versions, `true` for those
/// of CustomResourceDefinitions.
pub const MANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Whether a resource is the APIService resource.
pub fn is_apiservice(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == GROUP && r.plural == "apiservices"
}

/// `(groupPriorityMinimum, versionPriority)` of a built-in group version.
pub fn builtin_priority(group: &str, version: &str) -> Option<(i64, i64)> {
    Some(match (group, version) {
        ("", "v1") => (18000, 1),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v1") => (17500, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("node.k8s.io", "v1") => (16300, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", "v1") => (16100, 21),
        _ => return None,
    })
}

/// The APIService object autoregistration keeps for a group version.
fn desired(group: &str, version: &str, builtin: bool) -> Option<Value> {
    let ((gpm, vp), managed) = if builtin {
        (builtin_priority(group, version)?, "onstart")
    } else {
        ((1000, 100), "true")
    };
    Some(json!({
        "kind": "APIService",
        "apiVersion": format!("{GROUP}/v1"),
        "metadata": {
            "name": format!("{version}.{group}"),
            "labels": {MANAGED_LABEL: managed},
        },
        "spec": {
            "service": null,
            "group": group,
            "version": version,
            "groupPriorityMinimum": gpm,
            "versionPriority": vp,
        },
    }))
}

/// Brings the automanaged APIServices in line with the served group versions: creates the
/// missing ones (the `onstart` ones only when `starting`), replaces those whose spec differs,
/// removes those of group versions no longer served. APIServices without the label are not
/// touched, even under a name registration would use.
pub fn sync(app: &App, starting: bool) {
    let (r, want, have) = {
        let st = app.store.lock();
        let Some(r) = st.registry.get(GROUP, "v1", "apiservices") else {
            return;
        };
        let mut want: BTreeMap<String, Value> = BTreeMap::new();
        for res in st.registry.all() {
            // The aggregator's own group is served by it and has no APIService.
            if res.group == GROUP {
                continue;
            }
            let name = format!("{}.{}", res.version, res.group);
            if want.contains_key(&name) {
                continue;
            }
            if let Some(o) = desired(&res.group, &res.version, res.is_builtin()) {
                want.insert(name, o);
            }
        }
        let have: BTreeMap<String, Arc<Value>> = st
            .objects_of(&r.key(), None)
            .into_iter()
            .filter_map(|o| meta_str(&o, "name").map(|n| (n.to_string(), o.clone())))
            .collect();
        (r, want, have)
    };
    let managed = |o: &Value| o["metadata"]["labels"][MANAGED_LABEL].is_string();
    for (name, old) in &have {
        if !managed(old) {
            continue;
        }
        let keep = want.get(name).is_some_and(|w| w["spec"] == old["spec"]);
        if !keep {
            let _ = app.store.commit_remove(&r, "", name, None, None);
        }
    }
    let now = crate::meta::now();
    for (name, mut obj) in want {
        match have.get(&name) {
            Some(old) if !managed(old) || old["spec"] == obj["spec"] => continue,
            Some(_) => {}
            // Deleted since the start: `onstart` registrations wait for the next start.
            None if !starting && obj["metadata"]["labels"][MANAGED_LABEL] == "onstart" => continue,
            None => {}
        }
        {
            let m = crate::meta::meta_mut(&mut obj);
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("creationTimestamp".into(), json!(now));
        }
        obj["status"] = local_available(&now);
        let _ = app.store.commit_create(&r, obj);
    }
}

fn condition(status: &str, reason: &str, message: String, now: &str) -> Value {
    json!({"conditions": [{
        "type": "Available",
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }]})
}

fn local_available(now: &str) -> Value {
    condition(
        "True",
        "Local",
        "Local APIServices are always available".into(),
        now,
    )
}

/// The availability controller's verdict on an APIService.
fn availability(app: &App, obj: &Value, now: &str) -> Value {
    let service = &obj["spec"]["service"];
    if !service.is_object() {
        return local_available(now);
    }
    let ns = service["namespace"].as_str().unwrap_or_default();
    let name = service["name"].as_str().unwrap_or_default();
    let exists = {
        let st = app.store.lock();
        st.registry
            .get("", "v1", "services")
            .and_then(|r| st.get(&r, ns, name))
            .is_some()
    };
    if !exists {
        return condition(
            "False",
            "ServiceNotFound",
            format!("service/{name} in \"{ns}\" is not present"),
            now,
        );
    }
    let port = service["port"].as_i64().unwrap_or(443);
    let group = obj["spec"]["group"].as_str().unwrap_or_default();
    let version = obj["spec"]["version"].as_str().unwrap_or_default();
    condition(
        "False",
        "FailedDiscoveryCheck",
        format!(
            "failing or missing response from https://{name}.{ns}.svc:{port}/apis/{group}/{version}: the emulator does not proxy aggregated APIs"
        ),
        now,
    )
}

/// Called after every committed write of an APIService (`stored` is None for a delete):
/// registration restores what it manages, and the availability controller sets the
/// `Available` condition of a created or changed one when it differs.
pub fn after_write(app: &Arc<App>, r: &ResourceInfo, stored: Option<&Arc<Value>>) {
    if !is_apiservice(r) {
        return;
    }
    let Some(stored) = stored else {
        sync(app, false);
        return;
    };
    let now = crate::meta::now();
    let mut status = availability(app, stored, &now);
    let old = &stored["status"]["conditions"][0];
    let new = &status["conditions"][0];
    if old["status"] == new["status"]
        && old["reason"] == new["reason"]
        && old["message"] == new["message"]
    {
        return;
    }
    if old["status"] == new["status"] {
        status["conditions"][0]["lastTransitionTime"] = old["lastTransitionTime"].clone();
    }
    let mut updated = Value::clone(stored);
    updated["status"] = status;
    let _ = app
        .store
        .commit_update(r, crate::meta::rv_of(stored), updated);
}

/// The API server's validation of an APIService (kube-aggregator `ValidateAPIService`).
pub fn validate(obj: &Value) -> Vec<(String, &'static str, String)> {
    let mut causes = Vec::new();
    let invalid = |field: &str, value: &Value, detail: &str| {
        (
            field.to_string(),
            "FieldValueInvalid",
            format!("Invalid value: {value}: {detail}"),
        )
    };
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let version = spec["version"].as_str().unwrap_or_default();
    let name = meta_str(obj, "name").unwrap_or_default();
    let required = format!("{version}.{group}");
    if name != required {
        causes.push(invalid(
            "metadata.name",
            &json!(name),
            &format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
        ));
    }
    if group.is_empty() && version != "v1" {
        causes.push((
            "spec.group".into(),
            "FieldValueRequired",
            "Required value: only v1 may have an empty group and it better be legacy kube".into(),
        ));
    }
    if version.is_empty() {
        causes.push((
            "spec.version".into(),
            "FieldValueInvalid",
            "Invalid value: \"\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into(),
        ));
    }
    let priority = |field: &str, max: i64| {
        let v = spec[field].as_i64().unwrap_or(0);
        (v <= 0 || v > max).then(|| {
            invalid(
                &format!("spec.{field}"),
                &json!(v),
                &format!("must be positive and less than {max}"),
            )
        })
    };
    causes.extend(priority("groupPriorityMinimum", 20000));
    causes.extend(priority("versionPriority", 1000));
    let service = &spec["service"];
    let ca = spec["caBundle"].as_str().unwrap_or_default();
    let insecure = spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false);
    if !service.is_object() {
        if !ca.is_empty() {
            causes.push(invalid(
                "spec.caBundle",
                &json!(format!("{} bytes", ca.len() / 4 * 3)),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            causes.push(invalid(
                "spec.insecureSkipTLSVerify",
                &json!(true),
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return causes;
    }
    for field in ["namespace", "name"] {
        if service[field].as_str().unwrap_or_default().is_empty() {
            causes.push((
                format!("spec.service.{field}"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        }
    }
    if let Some(port) = service["port"].as_i64()
        && !(1..=65535).contains(&port)
    {
        causes.push(invalid(
            "spec.service.port",
            &json!(port),
            "must be between 1 and 65535, inclusive",
        ));
    }
    if insecure && !ca.is_empty() {
        causes.push(invalid(
            "spec.insecureSkipTLSVerify",
            &json!(true),
            "may not be true if caBundle is present",
        ));
    }
    causes
}
