//! What a list, watch or deletecollection selects on: the field-selector table of the built-in
//! kinds (the fields each kind's registry strategy serves besides `metadata.name` and
//! `metadata.namespace`), the value an object gives for a field, and a request's label and
//! field selectors ([`Selection`]). The selector languages themselves are [`crate::selector`]'s.

use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::request::{Query, Target};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::Stored;

/// The label and field selectors of a list, watch or deletecollection request.
pub struct Selection {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Selection {
    /// The `labelSelector` and `fieldSelector` of `query` (absent: everything), refused as the
    /// API server refuses them: a field the addressed resource does not serve is a 400.
    pub fn of(t: &Target, query: &Query) -> Result<Selection, ApiError> {
        let labels =
            LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields =
            FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))
                .map_err(ApiError::bad_request)?;
        for f in fields.fields() {
            let supported = if t.view.is_some() {
                matches!(f, "metadata.name" | "metadata.namespace")
            } else {
                supported_field(&t.r, f)
            };
            if !supported {
                return Err(ApiError::bad_request(format!(
                    "\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )));
            }
        }
        Ok(Selection { labels, fields })
    }

    /// Whether the object `o` is selected.
    pub fn matches(&self, o: &Value) -> bool {
        self.labels.matches_object(o) && self.fields.matches(&|f| field_value(o, f))
    }

    /// Whether the stored object `o` is selected: labels from what the store keeps beside the
    /// text, the object parsed only for a field selector.
    pub fn matches_stored(&self, o: &Stored) -> bool {
        if !self.labels.is_empty() && !self.labels.matches(&o.labels()) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let v = o.value();
        self.fields.matches(&|f| field_value(&v, f))
    }
}

/// Whether a field selector on `f` is served for the resource `r`.
pub fn supported_field(r: &ResourceInfo, f: &str) -> bool {
    matches!(f, "metadata.name" | "metadata.namespace")
        || (crate::events::is_core(r) && crate::events::supported_field(f))
        || (r.is_builtin() && kind_fields(&r.group, &r.kind).iter().any(|(k, _)| *k == f))
}

/// The field selectors the API server registers for a built-in kind (`GetAttrs` of its registry
/// strategy) besides `metadata.name` and `metadata.namespace`, each with where its value is
/// read and what it selects on when unset. Events have their own ([`crate::events`]).
fn kind_fields(group: &str, kind: &str) -> &'static [(&'static str, Field)] {
    const POD: &[(&str, Field)] = &[
        ("spec.nodeName", Field::Text("spec.nodeName")),
        ("spec.restartPolicy", Field::Text("spec.restartPolicy")),
        ("spec.schedulerName", Field::Text("spec.schedulerName")),
        (
            "spec.serviceAccountName",
            Field::Text("spec.serviceAccountName"),
        ),
        ("status.phase", Field::Text("status.phase")),
        ("status.podIP", Field::Text("status.podIP")),
        (
            "status.nominatedNodeName",
            Field::Text("status.nominatedNodeName"),
        ),
    ];
    match (group, kind) {
        ("", "Pod") => POD,
        ("", "Node") => &[("spec.unschedulable", Field::Bool("spec.unschedulable"))],
        ("", "Namespace") => &[("status.phase", Field::Text("status.phase"))],
        ("", "Secret") => &[("type", Field::Text("type"))],
        ("batch", "Job") => &[("status.successful", Field::Count("status.succeeded"))],
        ("apps", "ReplicaSet") | ("", "ReplicationController") => {
            &[("status.replicas", Field::Count("status.replicas"))]
        }
        _ => &[],
    }
}

/// Where a selectable field's value is read, and its value when unset (Go's zero value, as the
/// API server formats it).
#[derive(Clone, Copy)]
enum Field {
    /// A string; unset: empty.
    Text(&'static str),
    /// A boolean; unset: `false`.
    Bool(&'static str),
    /// A number; unset: `0`.
    Count(&'static str),
}

/// The value the stored object `o` gives for the selectable field `field`.
pub fn field_value(o: &Value, field: &str) -> Option<String> {
    if o["kind"] == "Event" && o["apiVersion"] == "v1" {
        return crate::events::field_value(o, field);
    }
    let at = |path: &str| {
        let mut cur = o;
        for part in path.split('.') {
            cur = cur.get(part)?;
        }
        match cur {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let kind = o["kind"].as_str().unwrap_or_default();
    let group = o["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    match kind_fields(group, kind).iter().find(|(k, _)| *k == field) {
        Some((_, Field::Text(path))) => Some(at(path).unwrap_or_default()),
        Some((_, Field::Bool(path))) => Some(at(path).unwrap_or_else(|| "false".into())),
        Some((_, Field::Count(path))) => Some(at(path).unwrap_or_else(|| "0".into())),
        None => at(field),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::registry::{CustomInfo, Registry};

    fn resource(group: &str, version: &str, plural: &str) -> Arc<ResourceInfo> {
        Registry::builtin()
            .get(group, version, plural)
            .unwrap_or_else(|| panic!("{group}/{version} {plural} is built in"))
    }

    /// A custom resource (a CRD's) of group `sites.ecmwf.int`.
    fn site() -> Arc<ResourceInfo> {
        let mut r = (*resource("", "v1", "configmaps")).clone();
        r.group = "sites.ecmwf.int".into();
        r.plural = "sites".into();
        r.kind = "Site".into();
        r.custom = Some(CustomInfo {
            schema: json!({"type": "object"}),
            printer_columns: Vec::new(),
            crd_name: "sites.sites.ecmwf.int".into(),
            scale: None,
        });
        Arc::new(r)
    }

    fn target(r: Arc<ResourceInfo>, view: Option<Arc<ResourceInfo>>) -> Target {
        Target {
            r,
            view,
            namespace: "default".into(),
            namespaced_url: true,
            name: None,
            sub: None,
        }
    }

    fn query(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_kind_serves_the_fields_its_strategy_registers() {
        let cases: &[(&str, &str, &str, &str, bool)] = &[
            ("", "v1", "pods", "metadata.name", true),
            ("", "v1", "pods", "metadata.namespace", true),
            ("", "v1", "pods", "spec.nodeName", true),
            ("", "v1", "pods", "spec.restartPolicy", true),
            ("", "v1", "pods", "spec.schedulerName", true),
            ("", "v1", "pods", "spec.serviceAccountName", true),
            ("", "v1", "pods", "status.phase", true),
            ("", "v1", "pods", "status.podIP", true),
            ("", "v1", "pods", "status.nominatedNodeName", true),
            ("", "v1", "pods", "spec.hostname", false),
            ("", "v1", "pods", "metadata.labels", false),
            ("", "v1", "nodes", "spec.unschedulable", true),
            ("", "v1", "nodes", "spec.podCIDR", false),
            ("", "v1", "namespaces", "status.phase", true),
            ("", "v1", "secrets", "type", true),
            ("", "v1", "secrets", "data", false),
            ("batch", "v1", "jobs", "status.successful", true),
            ("batch", "v1", "jobs", "status.succeeded", false),
            ("batch", "v1", "jobs", "status.active", false),
            ("apps", "v1", "replicasets", "status.replicas", true),
            ("", "v1", "replicationcontrollers", "status.replicas", true),
            ("apps", "v1", "statefulsets", "status.replicas", false),
            ("", "v1", "configmaps", "metadata.name", true),
            ("", "v1", "configmaps", "data", false),
            ("", "v1", "events", "involvedObject.kind", true),
            ("", "v1", "events", "reason", true),
            ("", "v1", "events", "spec.nodeName", false),
        ];
        for &(group, version, plural, field, served) in cases {
            let r = resource(group, version, plural);
            assert_eq!(
                supported_field(&r, field),
                served,
                "{group}/{version} {plural}: {field}"
            );
        }
        // A custom resource serves the metadata fields only, whatever its kind is called.
        for (field, served) in [
            ("metadata.name", true),
            ("metadata.namespace", true),
            ("spec.name", false),
            ("status.phase", false),
        ] {
            assert_eq!(supported_field(&site(), field), served, "Site: {field}");
        }
    }

    #[test]
    fn a_field_unset_selects_on_go_zero_value() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeName": "n1"}, "status": {}});
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        let cordoned = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"unschedulable": true}});
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}});
        let done = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "status": {"succeeded": 3}});
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"},
            "status": {"replicas": 2}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"}});
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Site"}, "source": {"component": "op"}});
        let cases: &[(&Value, &str, Option<&str>)] = &[
            (&pod, "spec.nodeName", Some("n1")),
            (&pod, "status.phase", Some("")),
            (&pod, "spec.schedulerName", Some("")),
            (&pod, "metadata.name", Some("p")),
            (&node, "spec.unschedulable", Some("false")),
            (&cordoned, "spec.unschedulable", Some("true")),
            (&job, "status.successful", Some("0")),
            (&done, "status.successful", Some("3")),
            (&rs, "status.replicas", Some("2")),
            (&cm, "metadata.namespace", Some("default")),
            (&cm, "metadata.uid", None),
            (&event, "involvedObject.kind", Some("Site")),
            (&event, "source", Some("op")),
        ];
        for &(object, field, want) in cases {
            assert_eq!(
                field_value(object, field).as_deref(),
                want,
                "{} {field}",
                object["kind"]
            );
        }
    }

    #[test]
    fn a_request_selects_what_its_resource_serves() {
        let pods = || target(resource("", "v1", "pods"), None);
        let configmaps = || target(resource("", "v1", "configmaps"), None);
        let event_view = || {
            target(
                resource("", "v1", "events"),
                Some(resource("events.k8s.io", "v1", "events")),
            )
        };
        let not_known = |f: &str| {
            format!(
                "\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )
        };
        let cases: Vec<(&str, Target, Query, Result<(), String>)> = vec![
            ("nothing", pods(), query(&[]), Ok(())),
            (
                "a pod field",
                pods(),
                query(&[("fieldSelector", "spec.nodeName=n1,status.phase!=Failed")]),
                Ok(()),
            ),
            (
                "a pod field on ConfigMaps",
                configmaps(),
                query(&[("fieldSelector", "spec.nodeName=n1")]),
                Err(not_known("spec.nodeName")),
            ),
            (
                "a core Event field through events.k8s.io",
                event_view(),
                query(&[("fieldSelector", "reason=Created")]),
                Err(not_known("reason")),
            ),
            (
                "metadata through events.k8s.io",
                event_view(),
                query(&[("fieldSelector", "metadata.name=e")]),
                Ok(()),
            ),
            (
                "a label selector that does not parse",
                pods(),
                query(&[("labelSelector", "a in (")]),
                Err("unable to parse requirement: ".into()),
            ),
        ];
        for (why, t, q, want) in cases {
            match (Selection::of(&t, &q), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(message)) => {
                    assert_eq!(e.code, 400, "{why}");
                    assert!(e.message.starts_with(&message), "{why}: {}", e.message);
                }
                (got, want) => panic!(
                    "{why}: got {:?}, want {want:?}",
                    got.map(|_| ()).map_err(|e| e.message)
                ),
            }
        }
    }

    #[test]
    fn a_selection_matches_labels_and_fields_together() {
        let t = target(resource("", "v1", "pods"), None);
        let selection = Selection::of(
            &t,
            &query(&[
                ("labelSelector", "app=web"),
                ("fieldSelector", "spec.nodeName=n1"),
            ]),
        )
        .expect("parses");
        let pod = |labels: Value, node: Option<&str>| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": labels},
                "spec": node.map_or(json!({}), |n| json!({"nodeName": n}))})
        };
        for (object, selected) in [
            (pod(json!({"app": "web"}), Some("n1")), true),
            (pod(json!({"app": "web", "tier": "x"}), Some("n1")), true),
            (pod(json!({"app": "db"}), Some("n1")), false),
            (pod(json!({"app": "web"}), Some("n2")), false),
            (pod(json!({"app": "web"}), None), false),
            (pod(json!({}), Some("n1")), false),
        ] {
            assert_eq!(selection.matches(&object), selected, "{object}");
        }
    }
}
