//! What a list, watch or deletecollection selects on: the field-selector table of the built-in
//! kinds (the fields each kind's registry strategy serves besides `metadata.name` and
//! `metadata.namespace`), the value an object gives for a field, and a request's label and
//! field selectors ([`Selection`]). The selector languages themselves are [`crate::selector`]'s.

use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::request::{Query, Target};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;

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

    /// Whether the stored object `o` is selected.
    pub fn matches(&self, o: &Value) -> bool {
        self.labels.matches_object(o) && self.fields.matches(&|f| field_value(o, f))
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

