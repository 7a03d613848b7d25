//! `batch/v1` Jobs and CronJobs and core ResourceQuotas: the API server's defaulting and the
//! essentials of its validation (`pkg/apis/batch/v1/defaults.go`,
//! `pkg/registry/batch/job/strategy.go`, `pkg/apis/batch/validation`,
//! `pkg/apis/core/validation` for quotas), and the resource quota controller's status
//! (`status.hard` from `spec.hard`, `status.used` for object counts). No Job or CronJob
//! controller runs: a Job's pods are not created and a CronJob never fires.

use serde_json::{Map, Value, json};

type Cause = (String, &'static str, String);

/// Label keys the API server adds to a Job's pod template (and selects on).
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const CONTROLLER_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(o) = obj.as_object_mut()
        && o.get(key).is_none_or(Value::is_null)
    {
        o.insert(key.into(), value);
    }
}

/// Defaults of a Job (`SetDefaults_Job`) and, on create, the generated selector and template
/// labels (`generateSelector`, unless `spec.manualSelector`).
pub fn job_defaults(obj: &mut Value, creating: bool) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    let backoff = if spec["backoffLimitPerIndex"].is_null() {
        6
    } else {
        i32::MAX as i64
    };
    set_default(spec, "backoffLimit", json!(backoff));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let replacement = if spec["podFailurePolicy"].is_null() {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    if creating && spec["manualSelector"] != json!(true) {
        let name = obj["metadata"]["name"].clone();
        let uid = obj["metadata"]["uid"].clone();
        let spec = &mut obj["spec"];
        if !spec["template"].is_object() {
            spec["template"] = json!({});
        }
        if !spec["template"]["metadata"].is_object() {
            spec["template"]["metadata"] = json!({});
        }
        let labels = &mut spec["template"]["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        for l in JOB_NAME_LABELS {
            set_default(labels, l, name.clone());
        }
        for l in CONTROLLER_UID_LABELS {
            set_default(labels, l, uid.clone());
        }
        if !spec["selector"].is_object() {
            spec["selector"] = json!({});
        }
        if !spec["selector"]["matchLabels"].is_object() {
            spec["selector"]["matchLabels"] = json!({});
        }
        set_default(
            &mut spec["selector"]["matchLabels"],
            "batch.kubernetes.io/controller-uid",
            uid,
        );
    }
    // Defaulting (which the API server also applies to what it reads back) gives a Job
    // without labels its template's labels.
    let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    let empty = obj["metadata"]["labels"]
        .as_object()
        .is_none_or(Map::is_empty);
    if empty && template_labels.as_object().is_some_and(|l| !l.is_empty()) {
        obj["metadata"]["labels"] = template_labels;
    }
}

/// Defaults of a CronJob (`SetDefaults_CronJob`).
pub fn cronjob_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    set_default(spec, "concurrencyPolicy", json!("Allow"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
}

fn non_negative(causes: &mut Vec<Cause>, v: &Value, path: &str) {
    if let Some(n) = v.as_i64()
        && n < 0
    {
        causes.push((
            path.into(),
            "FieldValueInvalid",
            format!("Invalid value: {n}: must be greater than or equal to 0"),
        ));
    }
}

/// The pod template rules a Job's template obeys.
fn job_template(causes: &mut Vec<Cause>, template: &Value, path: &str) {
    let containers = template["spec"]["containers"]
        .as_array()
        .map_or(0, Vec::len);
    if containers == 0 {
        causes.push((
            format!("{path}.spec.containers"),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let policy = template["spec"]["restartPolicy"].as_str().unwrap_or("");
    if policy != "OnFailure" && policy != "Never" {
        causes.push((
            format!("{path}.spec.restartPolicy"),
            "FieldValueNotSupported",
            format!("Unsupported value: {policy:?}: supported values: \"OnFailure\", \"Never\""),
        ));
    }
}

fn job_spec(causes: &mut Vec<Cause>, spec: &Value, path: &str, generated_selector: bool) {
    for f in ["parallelism", "completions", "backoffLimit"] {
        non_negative(causes, &spec[f], &format!("{path}.{f}"));
    }
    if let Some(n) = spec["activeDeadlineSeconds"].as_i64()
        && n <= 0
    {
        causes.push((
            format!("{path}.activeDeadlineSeconds"),
            "FieldValueInvalid",
            format!("Invalid value: {n}: must be greater than 0"),
        ));
    }
    let mode = spec["completionMode"].as_str().unwrap_or("NonIndexed");
    if mode != "NonIndexed" && mode != "Indexed" {
        causes.push((
            format!("{path}.completionMode"),
            "FieldValueNotSupported",
            format!("Unsupported value: {mode:?}: supported values: \"NonIndexed\", \"Indexed\""),
        ));
    }
    if mode == "Indexed" && spec["completions"].is_null() {
        causes.push((
            format!("{path}.completions"),
            "FieldValueRequired",
            "Required value: when completion mode is Indexed".into(),
        ));
    }
    job_template(causes, &spec["template"], &format!("{path}.template"));
    if generated_selector {
        if spec["selector"].is_null() {
            causes.push((
                format!("{path}.selector"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        } else if !selector_matches(&spec["selector"], &spec["template"]["metadata"]["labels"]) {
            causes.push((
                format!("{path}.template.metadata.labels"),
                "FieldValueInvalid",
                "Invalid value: selector does not match template `labels`".into(),
            ));
        }
    }
}

/// Whether a label selector's `matchLabels` (and simple `matchExpressions`) match labels.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels[k].as_str();
    let labels_ok = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| label(k).is_some_and(|l| Some(l) == v.as_str()))
    });
    let exprs_ok = selector["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|l| values.contains(&l)),
                Some("NotIn") => label(key).is_none_or(|l| !values.contains(&l)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

/// Validation of a Job (create and update).
pub fn validate_job(old: Option<&Value>, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    job_spec(&mut causes, spec, "spec", true);
    if let Some(old) = old {
        for f in ["selector", "completionMode"] {
            if old["spec"][f] != spec[f] {
                causes.push((
                    format!("spec.{f}"),
                    "FieldValueInvalid",
                    format!("Invalid value: {}: field is immutable", brief(&spec[f])),
                ));
            }
        }
        if old["spec"]["template"] != spec["template"] && spec["suspend"] != json!(true) {
            causes.push((
                "spec.template".into(),
                "FieldValueInvalid",
                "Invalid value: field is immutable".into(),
            ));
        }
    }
    causes
}

fn brief(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Validation of a CronJob.
pub fn validate_cronjob(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if name.len() > 52 {
        causes.push((
            "metadata.name".into(),
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: must be no more than 52 characters"),
        ));
    }
    let spec = &obj["spec"];
    match spec["schedule"].as_str().filter(|s| !s.is_empty()) {
        None => causes.push((
            "spec.schedule".into(),
            "FieldValueRequired",
            "Required value".into(),
        )),
        Some(s) => {
            if let Err(e) = check_schedule(s) {
                causes.push((
                    "spec.schedule".into(),
                    "FieldValueInvalid",
                    format!("Invalid value: {s:?}: {e}"),
                ));
            }
        }
    }
    let policy = spec["concurrencyPolicy"].as_str().unwrap_or("");
    if !matches!(policy, "Allow" | "Forbid" | "Replace") {
        causes.push((
            "spec.concurrencyPolicy".into(),
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {policy:?}: supported values: \"Allow\", \"Forbid\", \"Replace\""
            ),
        ));
    }
    for f in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        non_negative(&mut causes, &spec[f], &format!("spec.{f}"));
    }
    job_spec(
        &mut causes,
        &spec["jobTemplate"]["spec"],
        "spec.jobTemplate.spec",
        false,
    );
    causes
}

/// A standard cron schedule (five fields, or one of the `@` descriptors), as robfig/cron's
/// standard parser accepts it.
pub fn check_schedule(s: &str) -> Result<(), String> {
    let s = s.trim();
    let s = match s.split_once(' ') {
        Some((tz, rest)) if tz.starts_with("TZ=") || tz.starts_with("CRON_TZ=") => rest.trim(),
        _ => s,
    };
    if let Some(d) = s.strip_prefix('@') {
        return match d {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            _ if d.starts_with("every ") => Ok(()),
            _ => Err(format!("unrecognized descriptor: {s}")),
        };
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
    for (field, (lo, hi)) in fields.iter().zip(ranges) {
        for part in field.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, st)) => (r, Some(st)),
                None => (part, None),
            };
            if let Some(st) = step
                && st.parse::<u32>().map_or(true, |n| n == 0)
            {
                return Err(format!("failed to parse int from {st}"));
            }
            if range == "*" || range == "?" {
                continue;
            }
            let bound = |v: &str| -> Result<u32, String> {
                let n = match v.parse::<u32>() {
                    Ok(n) => n,
                    Err(_) => {
                        name_value(v).ok_or_else(|| format!("failed to parse int from {v}"))?
                    }
                };
                if n < lo || n > hi {
                    return Err(format!("end of range ({n}) above maximum ({hi}): {v}"));
                }
                Ok(n)
            };
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (bound(a)?, bound(b)?),
                None => {
                    let a = bound(range)?;
                    (a, a)
                }
            };
            if a > b {
                return Err(format!(
                    "beginning of range ({a}) beyond end of range ({b}): {range}"
                ));
            }
        }
    }
    Ok(())
}

fn name_value(v: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let v = v.to_ascii_lowercase();
    MONTHS
        .iter()
        .position(|m| *m == v)
        .map(|i| i as u32 + 1)
        .or_else(|| DAYS.iter().position(|d| *d == v).map(|i| i as u32))
}

/// Validation of a ResourceQuota: every `spec.hard` value a non-negative quantity.
pub fn validate_quota(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(hard) = obj["spec"]["hard"].as_object() else {
        return causes;
    };
    for (k, v) in hard {
        let path = format!("spec.hard[{k}]");
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                causes.push((
                    path,
                    "FieldValueInvalid",
                    format!("Invalid value: {other}: must be a quantity"),
                ));
                continue;
            }
        };
        match sites_quantity::parse(&text) {
            Err(_) => causes.push((
                path,
                "FieldValueInvalid",
                format!(
                    "Invalid value: {text:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                ),
            )),
            Ok(q) if q.nanos() < 0 => causes.push((
                path,
                "FieldValueInvalid",
                format!("Invalid value: {text:?}: must be greater than or equal to 0"),
            )),
            Ok(_) => {}
        }
        if k.is_empty() || k.contains(' ') {
            causes.push((
                format!("spec.hard[{k}]"),
                "FieldValueInvalid",
                format!("Invalid value: {k:?}: must be a standard resource for quota"),
            ));
        }
    }
    causes
}

/// The storage key of what an object-count quota resource counts (`pods`, `count/pods`,
/// `count/deployments.apps`), or `None` for resources that are not object counts.
pub fn counted(resource: &str) -> Option<String> {
    match resource {
        "pods"
        | "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas"
        | "services.loadbalancers"
        | "services.nodeports" => Some(resource.to_string()),
        r => r.strip_prefix("count/").map(str::to_string),
    }
}

/// The status the resource quota controller reports for a quota, given a way to count stored
/// objects of a storage key in the quota's namespace.
pub fn quota_status(quota: &Value, count: &dyn Fn(&str) -> i64) -> Value {
    let hard = quota["spec"]["hard"].clone();
    let mut used = Map::new();
    if let Some(h) = hard.as_object() {
        for k in h.keys() {
            let n = counted(k).map_or(0, |key| count(&key));
            used.insert(k.clone(), json!(n.to_string()));
        }
    }
    json!({"hard": hard, "used": used})
}

/// `names, images` of a pod template's containers, comma-separated (`layoutContainerCells`).
pub fn container_cells(pod_spec: &Value) -> (String, String) {
    let containers = pod_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let images: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    (names.join(","), images.join(","))
}

/// A label selector as `metav1.FormatLabelSelector` writes it (`<none>` when empty).
pub fn format_selector(sel: &Value) -> String {
    if sel.is_null() {
        return "<none>".into();
    }
    let s = crate::selector::selector_string(sel);
    if s.is_empty() { "<none>".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        assert!(check_schedule("*/1 * * * *").is_ok());
        assert!(check_schedule("0 3 * * MON-FRI").is_ok());
        assert!(check_schedule("@hourly").is_ok());
        assert!(check_schedule("* * * *").is_err());
        assert!(check_schedule("61 * * * *").is_err());
        assert!(check_schedule("*/0 * * * *").is_err());
        assert!(check_schedule("@sometimes").is_err());
    }

    #[test]
    fn job_selector_is_generated_from_the_uid() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}});
        job_defaults(&mut job, true);
        assert_eq!(
            job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u1"
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "pi"
        );
        assert_eq!(
            job["metadata"]["labels"]["batch.kubernetes.io/job-name"],
            "pi"
        );
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert!(validate_job(None, &job).is_empty());
    }
}
