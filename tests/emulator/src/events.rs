//! Events: core `v1` Events and `events.k8s.io/v1` Events are two views of the same stored
//! objects, as in the API server (one registry, `pkg/registry/core/event`; the field mapping is
//! `pkg/apis/events/v1/conversion.go` plus the generated conversions). The emulator stores the
//! core form; requests addressed to `events.k8s.io` are converted on the way in and out.
//!
//! | events.k8s.io/v1 | core v1 |
//! |---|---|
//! | regarding | involvedObject |
//! | note | message |
//! | reportingController | reportingComponent |
//! | reportingInstance | reportingInstance |
//! | deprecatedSource | source |
//! | deprecatedFirstTimestamp, deprecatedLastTimestamp | firstTimestamp, lastTimestamp |
//! | deprecatedCount | count |
//! | series, type, reason, action, related, eventTime | the same |

use serde_json::{Map, Value, json};

use crate::registry::ResourceInfo;
use crate::state::App;
use crate::status::ApiError;

/// (events.k8s.io/v1 name, core v1 name) of every Event field but metadata.
const FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("series", "series"),
    ("type", "type"),
    ("reason", "reason"),
    ("action", "action"),
    ("related", "related"),
    ("eventTime", "eventTime"),
];

/// Whether `r` is the `events.k8s.io` view of core Events.
pub fn is_view(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "events.k8s.io" && r.kind == "Event"
}

/// Whether `r` is the core Event resource (the storage of both views).
pub fn is_core(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group.is_empty() && r.kind == "Event"
}

/// Whether `v` is a meaningful value (Go's omitempty: not null, "", 0, {} or []).
fn present(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Bool(_) => true,
    }
}

fn remap(v: &Value, api_version: &str, to_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!(api_version));
    if let Some(m) = v.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    for (view, core) in FIELDS {
        let (from, to) = if to_core { (view, core) } else { (core, view) };
        if let Some(x) = v.get(*from).filter(|x| present(x)) {
            out.insert((*to).into(), x.clone());
        }
    }
    Value::Object(out)
}

/// The `events.k8s.io/v1` form of a stored (core) Event.
pub fn from_core(v: &Value) -> Value {
    remap(v, "events.k8s.io/v1", false)
}

/// The core form of an `events.k8s.io/v1` Event. Its `apiVersion` and `kind` are checked against
/// the view first; fields neither API has are dropped (as decoding drops them).
pub fn to_core(view: &ResourceInfo, mut v: Value) -> Result<Value, ApiError> {
    crate::ops::check_type(view, &mut v)?;
    Ok(remap(&v, "v1", true))
}

/// Records an Event about `object` (of resource `r`) as a controller's event recorder does
/// (client-go `tools/record`): a new core v1 Event named `<object>.<nanoseconds in hex>` in the
/// object's namespace (`default` for cluster-scoped objects), `source.component` the
/// controller, count 1; an Event already recorded so (named after the object) with the same
/// source, involved object, type, reason and message is updated instead (count + 1, lastTimestamp), as the recorder's
/// correlator patches it. Errors are dropped, as the recorder drops them.
pub fn record(
    app: &App,
    r: &ResourceInfo,
    object: &Value,
    event_type: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let Some(events) = app.store.lock().registry.get("", "v1", "events") else {
        return;
    };
    let m = &object["metadata"];
    let namespace = m["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    let mut involved = json!({"kind": r.kind, "name": m["name"], "uid": m["uid"],
        "apiVersion": r.api_version(), "resourceVersion": m["resourceVersion"]});
    if r.namespaced {
        involved["namespace"] = m["namespace"].clone();
    }
    let now = crate::meta::now();
    let same = |e: &Value| {
        let i = &e["involvedObject"];
        e["source"]["component"] == component
            && e["source"]["host"].is_null()
            && e["type"] == event_type
            && e["reason"] == reason
            && e["message"] == message
            && ["kind", "namespace", "name", "uid", "apiVersion"]
                .iter()
                .all(|k| i[*k] == involved[*k])
    };
    // The recorder names its Events `<object name>.<nanoseconds>` and only ever updates its
    // own: the candidates are a range of the store, not every Event of the namespace.
    let name = m["name"].as_str().unwrap_or_default();
    let existing = app
        .store
        .lock()
        .objects_with_prefix(&events.key(), namespace, &format!("{name}."))
        .into_iter()
        .find(|e| same(e));
    if let Some(e) = existing {
        let mut new = (*e).clone();
        new["count"] = json!(e["count"].as_i64().unwrap_or(1) + 1);
        new["lastTimestamp"] = json!(now);
        let _ = app
            .store
            .commit_update(&events, crate::meta::rv_of(&e), new);
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": event_type,
        "eventTime": null,
        "reportingComponent": "",
        "reportingInstance": "",
    });
    if let Ok(p) = crate::ops::prepare_create(
        &events,
        namespace,
        event,
        &crate::ops::WriteOptions::default(),
    ) {
        let _ = app.store.commit_create(&events, p.object);
    }
}

/// The API server's create validation of Events (`pkg/apis/core/validation/events.go`):
/// legacy rules for every Event, the strict ones for Events created through events.k8s.io/v1.
/// Field paths are named as the API server names them (core field names).
pub fn validate_create(
    r: &ResourceInfo,
    name: &str,
    event: &Value,
    through_view: bool,
) -> Result<(), ApiError> {
    let s = |k: &str| event[k].as_str().unwrap_or_default();
    let ns = event["metadata"]["namespace"].as_str().unwrap_or_default();
    let involved_ns = event["involvedObject"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let mut causes: Vec<(String, &str, String)> = Vec::new();
    let mismatch = || {
        (
            "involvedObject.namespace".to_string(),
            "FieldValueInvalid",
            format!("Invalid value: {involved_ns:?}: does not match event.namespace"),
        )
    };
    let required = |f: &str| {
        (
            f.to_string(),
            "FieldValueRequired",
            "Required value".to_string(),
        )
    };
    if !present(&event["eventTime"]) {
        let agrees = if involved_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved_ns
        };
        if !agrees {
            causes.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            causes.push(mismatch());
        }
        let controller_field = if through_view {
            "reportingController"
        } else {
            "reportingComponent"
        };
        if s("reportingComponent").is_empty() {
            causes.push(required(controller_field));
        }
        if s("reportingInstance").is_empty() {
            causes.push(required("reportingInstance"));
        } else if s("reportingInstance").len() > 128 {
            causes.push((
                "reportingInstance".into(),
                "FieldValueInvalid",
                "Invalid value: \"\": can have at most 128 characters".into(),
            ));
        }
        if s("action").is_empty() {
            causes.push(required("action"));
        }
        if s("reason").is_empty() {
            causes.push(required("reason"));
        }
        if s("message").len() > 1024 {
            causes.push((
                "message".into(),
                "FieldValueInvalid",
                "Invalid value: \"\": can have at most 1024 characters".into(),
            ));
        }
    }
    if through_view {
        // `ValidateObjectMeta(..., NameIsDNSSubdomain)` for requests of events.k8s.io/v1; core
        // v1 requests keep the legacy rules, which have no name rule.
        if let Err(e) = crate::meta::check_name(crate::registry::NameRule::Subdomain, name) {
            causes.push((
                "metadata.name".into(),
                "FieldValueInvalid",
                format!("Invalid value: {name:?}: {e}"),
            ));
        }
        if !present(&event["eventTime"]) {
            causes.push(required("eventTime"));
        }
        let t = s("type");
        if t != "Normal" && t != "Warning" {
            causes.push((
                "type".into(),
                "FieldValueInvalid",
                format!("Invalid value: \"\": has invalid value: {t}"),
            ));
        }
        for (field, v) in [
            ("firstTimestamp", &event["firstTimestamp"]),
            ("lastTimestamp", &event["lastTimestamp"]),
            ("count", &event["count"]),
            ("source", &event["source"]),
        ] {
            if present(v) {
                causes.push((
                    field.into(),
                    "FieldValueInvalid",
                    "Invalid value: \"\": needs to be unset".into(),
                ));
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(r, name, &causes))
    }
}

/// Field selectors the API server accepts on core Events (`AddFieldLabelConversionsForEvent`);
/// events.k8s.io registers none of its own, so only the metadata ones apply there.
pub fn supported_field(field: &str) -> bool {
    matches!(
        field,
        "involvedObject.kind"
            | "involvedObject.namespace"
            | "involvedObject.name"
            | "involvedObject.uid"
            | "involvedObject.apiVersion"
            | "involvedObject.resourceVersion"
            | "involvedObject.fieldPath"
            | "reason"
            | "reportingComponent"
            | "source"
            | "type"
            | "metadata.namespace"
            | "metadata.name"
    )
}

/// The value of a field selector's field on a stored Event (`source` is the component).
pub fn field_value(event: &Value, field: &str) -> Option<String> {
    let v = match field {
        "source" => &event["source"]["component"],
        _ => {
            let mut cur = event;
            for part in field.split('.') {
                cur = cur.get(part)?;
            }
            cur
        }
    };
    match v {
        Value::String(s) => Some(s.clone()),
        // An unset field selects as the empty string.
        Value::Null => Some(String::new()),
        other => Some(other.to_string()),
    }
}

/// Cells of the API server's Event printer (`printEvent`, always generated wide): Last Seen,
/// Type, Reason, Object, Subobject, Source, Message, First Seen, Count, Name.
pub fn printer_cells(o: &Value, since: &dyn Fn(&Value) -> String) -> Vec<Value> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut first = since(&o["firstTimestamp"]);
    if !present(&o["firstTimestamp"]) {
        first = since(&o["eventTime"]);
    }
    let mut last = if present(&o["lastTimestamp"]) {
        since(&o["lastTimestamp"])
    } else {
        first.clone()
    };
    let mut count = o["count"].as_i64().unwrap_or(0);
    if o["series"].is_object() {
        last = since(&o["series"]["lastObservedTime"]);
        count = o["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &o["involvedObject"];
    let kind = s(&involved["kind"]).to_lowercase();
    let target = match involved["name"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => format!("{kind}/{n}"),
        None => kind,
    };
    let first_non_empty = |a: String, b: String| if a.is_empty() { b } else { a };
    let component = first_non_empty(s(&o["source"]["component"]), s(&o["reportingComponent"]));
    let instance = first_non_empty(s(&o["source"]["host"]), s(&o["reportingInstance"]));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        o["type"].clone(),
        o["reason"].clone(),
        json!(target),
        json!(s(&involved["fieldPath"])),
        json!(source),
        json!(s(&o["message"]).trim()),
        json!(first),
        json!(count),
        o["metadata"]["name"].clone(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_map_fields_both_ways() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Site", "name": "a"},
            "message": "hello", "count": 3, "reportingComponent": "op",
            "source": {"component": "op"}, "reason": "Done", "type": "Normal",
        });
        let view = from_core(&core);
        assert_eq!(view["apiVersion"], "events.k8s.io/v1");
        assert_eq!(view["regarding"]["kind"], "Site");
        assert_eq!(view["note"], "hello");
        assert_eq!(view["deprecatedCount"], 3);
        assert_eq!(view["reportingController"], "op");
        assert_eq!(view["deprecatedSource"]["component"], "op");
        let r = crate::registry::Registry::builtin()
            .get("events.k8s.io", "v1", "events")
            .unwrap();
        assert_eq!(to_core(&r, view).unwrap(), core);
    }
}
