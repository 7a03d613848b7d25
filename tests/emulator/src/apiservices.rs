//! `apiregistration.k8s.io/v1` APIServices, as the kube-aggregator's automatic registration
//! keeps them: one per served group version, named `VERSION.GROUP` (`v1.` for the core group),
//! with no `spec.service` (served locally), the built-in priorities of
//! `pkg/controlplane/apiserver/aggregator.go` (and `cmd/kube-apiserver/app/aggregator.go` for
//! the kube-apiserver groups), `groupPriorityMinimum: 1000`, `versionPriority: 100` for the
//! group versions of CustomResourceDefinitions (the CRD registration controller), and the
//! availability controller's `Available` condition for local services. The set is re-synced
//! whenever the served resources change (a CRD is created, changes or is deleted). The
//! resource is read-only here: writes are 405.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta::meta_str;
use crate::registry::ResourceInfo;
use crate::server::App;

/// The API group.
pub const GROUP: &str = "apiregistration.k8s.io";

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

fn available(now: &str) -> Value {
    json!({"conditions": [{
        "type": "Available",
        "status": "True",
        "lastTransitionTime": now,
        "reason": "Local",
        "message": "Local APIServices are always available",
    }]})
}

/// Brings the stored APIServices in line with the served group versions.
pub fn sync(app: &App) {
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
    for (name, old) in &have {
        let keep = want.get(name).is_some_and(|w| w["spec"] == old["spec"]);
        if !keep {
            let _ = app.store.commit_remove(&r, "", name, None, None);
        }
    }
    let now = crate::meta::now();
    for (name, mut obj) in want {
        if have
            .get(&name)
            .is_some_and(|old| old["spec"] == obj["spec"])
        {
            continue;
        }
        {
            let m = crate::meta::meta_mut(&mut obj);
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("creationTimestamp".into(), json!(now));
        }
        obj["status"] = available(&now);
        let _ = app.store.commit_create(&r, obj);
    }
}
