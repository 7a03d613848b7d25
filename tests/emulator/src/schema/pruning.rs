//! Structural pruning ([`prune`], `pkg/apiserver/schema/pruning`): unknown fields are
//! removed and reported, and the ObjectMeta of embedded resources is coerced like a round
//! trip through `metav1.ObjectMeta` (`schema/objectmeta/coerce.go`).

use super::access::{Addl, Sch, is_meta_field};
use super::cause::MAX_DEPTH;
use crate::meta::OBJECT_META_FIELDS;
use serde_json::Value;
use std::collections::HashSet;
use std::fmt::Write as _;

/// Removes every field the schema does not specify (structural pruning), in place,
/// and returns the removed paths sorted (`spec.foo`, `spec.items[0].bar`,
/// `spec.map.key.bar`), the form strict field validation puts in
/// `unknown field "<path>"`.
///
/// Follows upstream `pruning.PruneWithOptions(obj, s, isResourceRoot=true)`:
/// * the root and `x-kubernetes-embedded-resource` nodes never prune
///   `apiVersion`, `kind`, `metadata`; root `metadata` is not touched at all (the
///   server handles ObjectMeta); embedded `metadata` is coerced like a round trip
///   through `metav1.ObjectMeta` (unknown fields dropped and reported, empty
///   omitempty fields dropped);
/// * a node with `x-kubernetes-preserve-unknown-fields: true` keeps unknown fields
///   but its specified properties (and additionalProperties values) are still
///   pruned by their own schemas; array items below it are "skip-pruned" too;
/// * `additionalProperties: <schema>` prunes every map value with that schema;
///   `additionalProperties: true` keeps the keys but (as upstream, with no schema)
///   empties nested objects; `additionalProperties: false` or absent drops
///   unspecified keys;
/// * an object node without any specified field loses all its keys (upstream
///   behaviour for e.g. a bare `type: object`).
pub fn prune(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = String::new();
    prune_value(obj, Some(Sch::of(schema)), true, &mut path, 0, &mut out);
    out.sort();
    out
}

pub(super) fn path_key(path: &mut String, k: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(k);
}

pub(super) fn path_index(path: &mut String, i: usize) {
    let _ = write!(path, "[{i}]");
}

pub(super) fn joined(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn prune_value(
    x: &mut Value,
    s: Option<Sch<'_>>,
    root: bool,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(s) = s
        && s.preserve_unknown()
    {
        skip_prune(x, s, root, path, depth, out);
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    out.push(joined(path, k));
                }
                m.clear();
                return;
            };
            let embedded = root || s.embedded();
            let mut removed: HashSet<String> = HashSet::new();
            for (k, v) in m.iter_mut() {
                if embedded && is_meta_field(k) {
                    if !root && k == "metadata" {
                        coerce_embedded_metadata(v, &joined(path, k), out);
                    }
                    continue;
                }
                let len = path.len();
                if let Some(p) = s.property(k) {
                    path_key(path, k);
                    prune_value(v, Some(p), false, path, depth + 1, out);
                } else {
                    match s.additional() {
                        Addl::Schema(a) => {
                            path_key(path, k);
                            prune_value(v, Some(a), false, path, depth + 1, out);
                        }
                        Addl::Allows(true) => {
                            path_key(path, k);
                            prune_value(v, None, false, path, depth + 1, out);
                        }
                        Addl::Allows(false) | Addl::Absent => {
                            out.push(joined(path, k));
                            removed.insert(k.clone());
                        }
                    }
                }
                path.truncate(len);
            }
            if !removed.is_empty() {
                m.retain(|k, _| !removed.contains(k));
            }
        }
        Value::Array(a) => {
            let items = s.and_then(Sch::items);
            for (i, v) in a.iter_mut().enumerate() {
                let len = path.len();
                path_index(path, i);
                prune_value(v, items, false, path, depth + 1, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Upstream `skipPrune`: under `x-kubernetes-preserve-unknown-fields`.
fn skip_prune(
    x: &mut Value,
    s: Sch<'_>,
    root: bool,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            let embedded = root || s.embedded();
            for (k, v) in m.iter_mut() {
                if embedded && is_meta_field(k) {
                    if !root && k == "metadata" {
                        coerce_embedded_metadata(v, &joined(path, k), out);
                    }
                    continue;
                }
                let len = path.len();
                if let Some(p) = s.property(k) {
                    path_key(path, k);
                    prune_value(v, Some(p), false, path, depth + 1, out);
                } else {
                    match s.additional() {
                        Addl::Schema(a) => {
                            path_key(path, k);
                            prune_value(v, Some(a), false, path, depth + 1, out);
                        }
                        Addl::Allows(true) => {
                            path_key(path, k);
                            prune_value(v, None, false, path, depth + 1, out);
                        }
                        _ => {}
                    }
                }
                path.truncate(len);
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items() {
                for (i, v) in a.iter_mut().enumerate() {
                    let len = path.len();
                    path_index(path, i);
                    skip_prune(v, items, false, path, depth + 1, out);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// Whether a known ObjectMeta field has a JSON type ObjectMeta can decode.
fn meta_field_type_ok(k: &str, v: &Value) -> bool {
    if v.is_null() {
        return true;
    }
    match k {
        "generation" | "deletionGracePeriodSeconds" => v.as_i64().is_some(),
        "labels" | "annotations" => v
            .as_object()
            .is_some_and(|m| m.values().all(|x| x.is_string() || x.is_null())),
        "finalizers" => v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_string())),
        "ownerReferences" | "managedFields" => v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_object())),
        _ => v.is_string(),
    }
}

/// Fields `json.Marshal(metav1.ObjectMeta)` omits (omitempty / zero timestamps).
fn meta_field_omitted(k: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Number(n) => k == "generation" && n.as_i64() == Some(0),
        Value::Bool(_) => false,
    }
}

/// Embedded-resource `metadata`: emulates the ObjectMeta round trip of
/// `objectmeta.Coerce` (unknown fields dropped and reported, empty fields and a
/// zero creationTimestamp removed). Malformed metadata (upstream: an error) is
/// left untouched.
fn coerce_embedded_metadata(v: &mut Value, meta_path: &str, out: &mut Vec<String>) {
    let Value::Object(m) = v else { return };
    if m.iter()
        .any(|(k, x)| OBJECT_META_FIELDS.contains(&k.as_str()) && !meta_field_type_ok(k, x))
    {
        return;
    }
    let mut unknown = Vec::new();
    m.retain(|k, x| {
        if !OBJECT_META_FIELDS.contains(&k.as_str()) {
            unknown.push(format!("{meta_path}.{k}"));
            return false;
        }
        !meta_field_omitted(k, x)
    });
    out.extend(unknown);
}
