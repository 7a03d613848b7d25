//! The fields of an owned object that writers other than the operator hold, read from its
//! `managedFields`: what lets an edit made while no operator ran be seen at start.
//!
//! An `Update` (kubectl edit, a patch, a PUT) that changes a field takes that field from every
//! other manager, the operator's apply included (server-side apply's field ownership). So an
//! edit of a field the operator renders, kept hash annotation or not, leaves a trace that
//! outlives every operator replica: another manager's entry holds a field the rendering has,
//! with another value. [`held_by_others`] keeps those fields (path and value, as numbers) when
//! the object is cached; [`Held::agrees`] compares them with a rendering. A field co-owned with
//! the rendering's value (another applier of the same value) agrees; a field the rendering does
//! not have (a controller's annotation, a claim's bound volume) is not compared. Fields removed
//! by an edit leave every manager and leave no trace: those are seen only while the operator
//! runs (its record of its own writes).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// One step of a field path, as `managedFields` (FieldsV1) name them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// `f:<name>`: a field of an object.
    Field(Box<str>),
    /// `k:{...}`: the item of a map-list with these key fields.
    Key(serde_json::Map<String, Value>),
    /// `v:<value>`: the item of a set with this value.
    Value(Value),
    /// `i:<n>`: the item at this index of an atomic list.
    Index(usize),
}

impl Step {
    fn parse(key: &str) -> Option<Step> {
        let (kind, rest) = key.split_at_checked(2)?;
        match kind {
            "f:" => Some(Step::Field(rest.into())),
            "k:" => match serde_json::from_str(rest).ok()? {
                Value::Object(keys) => Some(Step::Key(keys)),
                _ => None,
            },
            "v:" => serde_json::from_str(rest).ok().map(Step::Value),
            "i:" => rest.parse().ok().map(Step::Index),
            _ => None,
        }
    }

    /// The value this step leads to from `node`.
    fn from<'v>(&self, node: &'v Value) -> Option<&'v Value> {
        match self {
            Step::Field(name) => node.as_object()?.get(&**name),
            Step::Key(keys) => node.as_array()?.iter().find(|item| {
                keys.iter().all(|(k, want)| match item.get(k) {
                    Some(have) => have == want,
                    // The published schemas omit defaults: a port rendered without `protocol`
                    // is the stored one keyed `"protocol": "TCP"`.
                    None => k == "protocol" && want == "TCP",
                })
            }),
            Step::Value(want) => node.as_array()?.iter().find(|item| *item == want),
            Step::Index(i) => node.as_array()?.get(*i),
        }
    }
}

/// A field another writer holds, and its value in the stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    path: Box<[Step]>,
    value: Seen,
}

/// A value as compared: resource quantities by amount (the API server stores `0.5` as `500m`),
/// anything else by a hash of its JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Amount(i128),
    Hash(u64),
}

impl Seen {
    fn of(path: &[Step], value: &Value) -> Seen {
        let quantity = path
            .iter()
            .any(|s| matches!(s, Step::Field(f) if &**f == "resources"));
        match value.as_str().filter(|_| quantity) {
            Some(text) => match sites_quantity::parse(text) {
                Ok(q) => Seen::Amount(q.nanos()),
                Err(_) => Seen::Hash(crate::digest::json_sha256_u64(value)),
            },
            None => Seen::Hash(crate::digest::json_sha256_u64(value)),
        }
    }
}

impl Held {
    /// Whether `rendering` (an object of the same kind, as JSON) agrees with this field: it does
    /// not have the field, or has it with the stored value.
    pub fn agrees(&self, rendering: &Value) -> bool {
        match at(rendering, &self.path) {
            None => true,
            Some(value) => Seen::of(&self.path, value) == self.value,
        }
    }
}

fn at<'v>(node: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(node, |node, step| step.from(node))
}

/// The fields of the object itself (not its status, which the operator never renders) that a
/// `managedFields` entry other than the operator's own apply
/// ([`crate::ownership::other_writers`]) holds, with their values in `object` (the object
/// as JSON; called only when there is such an entry). Fields the object no longer has are left
/// out.
pub fn held_by_others(meta: &ObjectMeta, object: impl FnOnce() -> Value) -> Vec<Held> {
    let mut paths = Vec::new();
    for entry in crate::ownership::other_writers(meta) {
        if let Some(fields) = entry.fields_v1.as_ref().and_then(|f| f.0.as_object()) {
            for (key, node) in fields {
                // Before 1.22 a status update is an entry without a subresource: its fields
                // are under `f:status`.
                if key != "f:status"
                    && let Some(step) = Step::parse(key)
                {
                    leaves(node, &mut vec![step], &mut paths);
                }
            }
        }
    }
    if paths.is_empty() {
        return Vec::new();
    }
    let object = object();
    paths
        .into_iter()
        .filter_map(|path| {
            let value = Seen::of(&path, at(&object, &path)?);
            Some(Held {
                path: path.into(),
                value,
            })
        })
        .collect()
}

/// The leaf fields under `node` (a FieldsV1 tree) at `path`: a node whose only children are
/// `.` (the item or map itself) or none is a leaf.
fn leaves(node: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    let children = node
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != ".");
    let mut any = false;
    for (key, child) in children {
        any = true;
        if let Some(step) = Step::parse(key) {
            path.push(step);
            leaves(child, path, out);
            path.pop();
        }
    }
    if !any {
        out.push(path.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: &str,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: (!subresource.is_empty()).then(|| subresource.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn stored() -> Value {
        json!({
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [{
                    "name": "site",
                    "image": "nginx:edited",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "EXTRA", "value": "x"}],
                    "resources": {"limits": {"cpu": "500m"}},
                }]}},
            },
            "status": {"replicas": 1},
        })
    }

    fn rendering() -> Value {
        json!({
            "spec": {
                "replicas": 1,
                "template": {"spec": {"containers": [{
                    "name": "site",
                    "image": "nginx:1",
                    "ports": [{"containerPort": 8080}],
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"cpu": "0.5"}},
                }]}},
            },
        })
    }

    fn agree(fields: Value, rendering: &Value) -> bool {
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                entry(
                    "sites-operator",
                    "Apply",
                    "",
                    json!({"f:spec": {"f:replicas": {}}}),
                ),
                entry("other", "Update", "", fields),
            ]),
            ..ObjectMeta::default()
        };
        held_by_others(&meta, stored)
            .iter()
            .all(|h| h.agrees(rendering))
    }

    #[test]
    fn an_edited_field_the_rendering_has_disagrees_and_one_it_lacks_does_not() {
        let r = rendering();
        let container = |fields: Value| {
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"site\"}": fields
            }}}}})
        };
        let cases: &[(&str, Value, bool)] = &[
            (
                "replicas edited",
                json!({"f:spec": {"f:replicas": {}}}),
                false,
            ),
            (
                "image edited, in a map-list item",
                container(json!({".": {}, "f:image": {}})),
                false,
            ),
            (
                "an item the rendering lacks",
                container(json!({"f:env": {"k:{\"name\":\"EXTRA\"}": {".": {}, "f:value": {}}}})),
                true,
            ),
            (
                "an item the rendering has, same value",
                container(json!({"f:env": {"k:{\"name\":\"A\"}": {"f:value": {}}}})),
                true,
            ),
            (
                "a port keyed with its default protocol",
                container(
                    json!({"f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {"f:containerPort": {}}}}),
                ),
                true,
            ),
            (
                "a quantity stored in another spelling",
                container(json!({"f:resources": {"f:limits": {"f:cpu": {}}}})),
                true,
            ),
            (
                "an annotation the rendering lacks",
                json!({"f:metadata": {"f:annotations": {"f:pv.kubernetes.io/bind-completed": {}}}}),
                true,
            ),
            (
                "status, before 1.22 without a subresource",
                json!({"f:status": {"f:replicas": {}}}),
                true,
            ),
            ("a key that is not FieldsV1", json!({"x:spec": {}}), true),
        ];
        for (case, fields, want) in cases {
            assert_eq!(agree(fields.clone(), &r), *want, "{case}");
        }
    }

    #[test]
    fn only_other_writers_of_the_object_itself_are_read() {
        let fields = json!({"f:spec": {"f:replicas": {}}});
        let held = |e: ManagedFieldsEntry| {
            let meta = ObjectMeta {
                managed_fields: Some(vec![e]),
                ..ObjectMeta::default()
            };
            held_by_others(&meta, stored).len()
        };
        assert_eq!(
            held(entry("sites-operator", "Apply", "", fields.clone())),
            0
        );
        assert_eq!(
            held(entry(
                "kube-controller-manager",
                "Update",
                "status",
                fields.clone()
            )),
            0
        );
        // The operator's name with another operation is another writer.
        assert_eq!(
            held(entry("sites-operator", "Update", "", fields.clone())),
            1
        );
        assert_eq!(held(entry("kubectl-edit", "Update", "", fields)), 1);
        // A field the object no longer has is not kept.
        assert_eq!(
            held(entry(
                "kubectl-edit",
                "Update",
                "",
                json!({"f:spec": {"f:paused": {}}})
            )),
            0
        );
    }
}
