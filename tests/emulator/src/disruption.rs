//! PodDisruptionBudgets and `pods/eviction` (concepts/workloads/pods/disruptions.md,
//! tasks/administer-cluster/safely-drain-node.md; kubernetes `pkg/controller/disruption` and
//! `pkg/registry/core/pod/storage/eviction.go`):
//!
//! - the disruption controller keeps each budget's status (`expectedPods`, `currentHealthy`
//!   from Ready pods, `desiredHealthy`, `disruptionsAllowed`, `disruptedPods`, the
//!   `DisruptionAllowed` condition, `observedGeneration`) up to date; `minAvailable` as a
//!   number counts the matching pods, `maxUnavailable` and percentages scale from the pods'
//!   controllers (StatefulSet, ReplicaSet, the Deployment owning a ReplicaSet);
//! - an eviction of a pod no budget covers, or of a Pending, finished or deleting pod, deletes
//!   it; otherwise the budget must allow a disruption (429 TooManyRequests "Cannot evict pod as
//!   it would violate the pod's disruption budget." when not), which the eviction consumes
//!   (recorded in `disruptedPods`) before deleting the pod with its grace period.

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::meta::{meta_str, rv_of};
use crate::registry::ResourceInfo;
use crate::request::Target;
use crate::request::json_response;
use crate::selector::LabelSelector;
use crate::state::App;
use crate::status::ApiError;
use crate::store::CommitError;

/// How long an eviction keeps a pod out of `currentHealthy` while it is deleted.
const DISRUPTED_TIMEOUT_SECS: i64 = 120;

/// An int-or-percent value scaled against `total`, rounding up (`GetScaledValueFromIntOrPercent`),
/// or the validation message naming what is wrong. None when unset.
pub fn int_or_percent(v: &Value, total: i64) -> Result<Option<i64>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 0 => Ok(Some(i)),
            _ => Err(format!(
                "Invalid value: {n}: must be greater than or equal to 0"
            )),
        },
        Value::String(s) => {
            let digits = s
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            let Some(p) = digits.and_then(|d| d.parse::<i64>().ok()) else {
                return Err(format!(
                    "Invalid value: {s:?}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
                ));
            };
            if p > 100 {
                return Err(format!("Invalid value: {s:?}: must be no more than 100%"));
            }
            Ok(Some((p * total + 99) / 100))
        }
        other => Err(format!(
            "Invalid value: {other}: must be an integer or a percentage"
        )),
    }
}

fn res(app: &App, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
    app.store.lock().registry.get(group, "v1", plural)
}

/// The pods a budget selects (policy/v1: a null selector selects nothing, `{}` everything).
fn selects(pdb: &Value, pod: &Value) -> bool {
    let sel = &pdb["spec"]["selector"];
    if sel.is_null() {
        return false;
    }
    LabelSelector::from_api(sel).is_ok_and(|s| s.matches_object(pod))
}

fn pod_ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn controller_of(o: &Value) -> Option<(String, String)> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find_map(|r| {
            (r["controller"] == json!(true)).then(|| {
                (
                    r["kind"].as_str().unwrap_or_default().to_string(),
                    r["name"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
}

/// The replicas the pods' controllers want (`getExpectedScale`).
fn expected_scale(app: &App, ns: &str, pods: &[Arc<Value>]) -> Result<i64, String> {
    let mut seen = HashSet::new();
    let mut total = 0;
    for p in pods {
        let Some((kind, name)) = controller_of(p) else {
            return Err(format!(
                "found no controllers for pod {:?}",
                meta_str(p, "name").unwrap_or_default()
            ));
        };
        let (kind, name) = if kind == "ReplicaSet" {
            let rs =
                res(app, "apps", "replicasets").and_then(|r| app.store.lock().get(&r, ns, &name));
            match rs.as_deref().and_then(controller_of) {
                Some((k, n)) if k == "Deployment" => (k, n),
                _ => (kind, name),
            }
        } else {
            (kind, name)
        };
        if !seen.insert((kind.clone(), name.clone())) {
            continue;
        }
        let plural = match kind.as_str() {
            "StatefulSet" => "statefulsets",
            "ReplicaSet" => "replicasets",
            "Deployment" => "deployments",
            _ => {
                return Err(format!(
                    "found no controllers for pod {:?}",
                    meta_str(p, "name").unwrap_or_default()
                ));
            }
        };
        let obj = res(app, "apps", plural).and_then(|r| app.store.lock().get(&r, ns, &name));
        let Some(obj) = obj else {
            return Err(format!("{plural}.apps {name:?} not found"));
        };
        total += obj["spec"]["replicas"].as_i64().unwrap_or(1);
    }
    Ok(total)
}

fn condition(old: &Value, allowed: bool, reason: &str, message: &str, generation: &Value) -> Value {
    let status = if allowed { "True" } else { "False" };
    let prev = old["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"));
    let ltt = match prev {
        Some(c) if c["status"] == status && c["reason"] == reason => {
            c["lastTransitionTime"].clone()
        }
        _ => json!(crate::meta::now()),
    };
    json!({"type": "DisruptionAllowed", "status": status, "reason": reason, "message": message,
           "observedGeneration": generation, "lastTransitionTime": ltt})
}

/// The status a budget should have now.
fn compute_status(app: &App, ns: &str, pdb: &Value, pods: &[Arc<Value>]) -> Value {
    let old = &pdb["status"];
    let generation = pdb["metadata"]["generation"].clone();
    let matching: Vec<Arc<Value>> = pods.iter().filter(|p| selects(pdb, p)).cloned().collect();
    let now = jiff::Timestamp::now();
    // Evicted pods stay out of currentHealthy until deleted or timed out.
    let mut disrupted = serde_json::Map::new();
    if let Some(m) = old["disruptedPods"].as_object() {
        for (name, at) in m {
            let live = matching.iter().any(|p| {
                meta_str(p, "name") == Some(name.as_str())
                    && p["metadata"]["deletionTimestamp"].is_null()
            });
            let fresh = at
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| now.as_second() - t.as_second() < DISRUPTED_TIMEOUT_SECS);
            if live && fresh {
                disrupted.insert(name.clone(), at.clone());
            }
        }
    }
    let healthy = matching
        .iter()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && !disrupted.contains_key(meta_str(p, "name").unwrap_or_default())
                && pod_ready(p)
        })
        .count() as i64;
    let spec = &pdb["spec"];
    let counts = if !spec["maxUnavailable"].is_null() {
        expected_scale(app, ns, &matching).and_then(|expected| {
            let max = int_or_percent(&spec["maxUnavailable"], expected)?.unwrap_or(0);
            Ok((expected, (expected - max).max(0)))
        })
    } else {
        match &spec["minAvailable"] {
            Value::Number(n) => Ok((matching.len() as i64, n.as_i64().unwrap_or(0))),
            Value::String(_) => expected_scale(app, ns, &matching).and_then(|expected| {
                Ok((
                    expected,
                    int_or_percent(&spec["minAvailable"], expected)?.unwrap_or(0),
                ))
            }),
            _ => Ok((matching.len() as i64, 0)),
        }
    };
    let mut status = match counts {
        Ok((expected, desired)) => {
            let allowed = (healthy - desired).max(0);
            let (reason, ok) = if allowed > 0 {
                ("SufficientPods", true)
            } else {
                ("InsufficientPods", false)
            };
            json!({
                "observedGeneration": generation,
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "expectedPods": expected,
                "conditions": [condition(old, ok, reason, "", &generation)],
            })
        }
        Err(e) => json!({
            "observedGeneration": generation,
            "disruptionsAllowed": 0,
            "currentHealthy": healthy,
            "desiredHealthy": old["desiredHealthy"].as_i64().unwrap_or(0),
            "expectedPods": old["expectedPods"].as_i64().unwrap_or(0),
            "conditions": [condition(old, false, "SyncFailed", &e, &generation)],
        }),
    };
    if !disrupted.is_empty() {
        status["disruptedPods"] = Value::Object(disrupted);
    }
    status
}

/// One pass of the disruption controller over the budgets of a namespace.
pub fn sync_namespace(app: &App, ns: &str) {
    let Some(pdb_r) = res(app, "policy", "poddisruptionbudgets") else {
        return;
    };
    let (budgets, pods) = {
        let st = app.store.lock();
        let budgets = st.objects_of(&pdb_r.key(), Some(ns));
        if budgets.is_empty() {
            // Most namespaces have no budget: their pods are not collected at each pod event.
            return;
        }
        (budgets, st.objects_of("pods", Some(ns)))
    };
    for pdb in budgets {
        if pdb["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let status = compute_status(app, ns, &pdb, &pods);
        if pdb["status"] != status {
            let mut new = (*pdb).clone();
            new["status"] = status;
            let _ = app.store.commit_update(&pdb_r, rv_of(&pdb), new);
        }
    }
}

fn too_many_requests(cause: String) -> ApiError {
    ApiError::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}))
}

/// `POST .../pods/NAME/eviction`.
pub async fn evict(
    app: &Arc<App>,
    t: &Target,
    name: &str,
    eviction: Value,
) -> Result<Response, ApiError> {
    match eviction["apiVersion"].as_str() {
        None | Some("policy/v1") | Some("policy/v1beta1") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({other}) does not match the expected API version (policy/v1)"
            )));
        }
    }
    if let Some(k) = eviction["kind"]
        .as_str()
        .filter(|k| !k.is_empty() && *k != "Eviction")
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (Eviction)"
        )));
    }
    if meta_str(&eviction, "name").is_some_and(|n| !n.is_empty() && n != name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let delete_body = match &eviction["deleteOptions"] {
        Value::Null => Vec::new(),
        v if v.is_object() => serde_json::to_vec(v).unwrap_or_default(),
        _ => {
            return Err(ApiError::bad_request(
                "deleteOptions: Invalid value: must be an object",
            ));
        }
    };
    let opts = crate::deletion::delete_options(&Default::default(), &delete_body.into())?;
    let success =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    let Some(pdb_r) = res(app, "policy", "poddisruptionbudgets") else {
        return Err(ApiError::no_route());
    };
    for _ in 0..16 {
        let pod = app
            .store
            .lock()
            .get(&t.r, &t.namespace, name)
            .ok_or_else(|| ApiError::not_found(&t.r, name))?;
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        let ignore_budget = matches!(phase, "Succeeded" | "Failed" | "Pending")
            || pod["metadata"]["deletionTimestamp"].is_string();
        let budgets: Vec<Arc<Value>> = if ignore_budget {
            Vec::new()
        } else {
            app.store
                .lock()
                .objects_of(&pdb_r.key(), Some(&t.namespace))
                .into_iter()
                .filter(|b| selects(b, &pod))
                .collect()
        };
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = budgets.first() {
            let pdb_name = meta_str(pdb, "name").unwrap_or_default().to_string();
            let status = &pdb["status"];
            let observed = status["observedGeneration"].as_i64().unwrap_or(0);
            if observed < pdb["metadata"]["generation"].as_i64().unwrap_or(0) {
                return Err(too_many_requests(format!(
                    "The disruption budget {pdb_name} is still being processed by the server."
                )));
            }
            let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
            let current = status["currentHealthy"].as_i64().unwrap_or(0);
            let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
            if allowed < 0 {
                return Err(ApiError::forbidden(
                    &t.r,
                    name,
                    "pdb disruptions allowed is negative",
                ));
            }
            let unhealthy_ok = !pod_ready(&pod)
                && match pdb["spec"]["unhealthyPodEvictionPolicy"].as_str() {
                    Some("AlwaysAllow") => true,
                    _ => current >= desired && desired > 0,
                };
            if !unhealthy_ok {
                if allowed == 0 {
                    return Err(too_many_requests(format!(
                        "The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
                    )));
                }
                if !opts.dry_run {
                    let mut new = (**pdb).clone();
                    new["status"]["disruptionsAllowed"] = json!(allowed - 1);
                    if !new["status"]["disruptedPods"].is_object() {
                        new["status"]["disruptedPods"] = json!({});
                    }
                    new["status"]["disruptedPods"][name] = json!(crate::meta::now());
                    match app.store.commit_update(&pdb_r, rv_of(pdb), new) {
                        Ok(_) => {}
                        Err(CommitError::Stale) => continue,
                        Err(CommitError::Api(e)) => return Err(e),
                    }
                }
            }
        }
        if opts.dry_run {
            return Ok(json_response(StatusCode::CREATED, &success));
        }
        return match crate::deletion::delete_one(
            app,
            &t.r,
            &t.namespace,
            name,
            &opts,
            opts.precondition_uid.as_deref(),
            opts.precondition_rv.as_deref(),
        )
        .await
        {
            Ok(_) => Ok(json_response(StatusCode::CREATED, &success)),
            Err(e) => Err(e),
        };
    }
    Err(ApiError::modified(&pdb_r, name))
}
