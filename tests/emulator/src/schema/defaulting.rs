//! Defaulting ([`apply_defaults`], `pkg/apiserver/schema/defaulting`):
//! `PruneNonNullableNullsWithoutDefaults`, then the structural `Default` algorithm.

use super::access::Sch;
use super::cause::MAX_DEPTH;
use serde_json::Value;
use std::collections::HashSet;

/// Applies `default`s in place like the API server does on decode:
/// `PruneNonNullableNullsWithoutDefaults` (a `null` whose schema is not nullable
/// and has no default is removed) followed by the structural `Default` algorithm:
/// for each object, every property with a default that is absent — or present as
/// `null` while not nullable — is set to a deep copy of the default; then all
/// present properties are recursed into (so defaults inside a defaulted object
/// apply too), as are additionalProperties values and array items, where a
/// non-nullable `null` value/item is replaced by the value/items default.
/// A `null` of a nullable field stays `null`.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    let s = Sch::of(schema);
    prune_non_nullable_nulls(obj, Some(s), 0);
    default_value(obj, Some(s), 0);
}

fn prune_non_nullable_nulls(x: &mut Value, s: Option<Sch<'_>>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            let mut removed: HashSet<String> = HashSet::new();
            for (k, v) in m.iter_mut() {
                let sub = s.and_then(|s| s.field_schema(k));
                let drop = v.is_null()
                    && sub.is_some_and(|sub| !sub.nullable() && sub.default_value().is_none());
                if drop {
                    removed.insert(k.clone());
                } else {
                    prune_non_nullable_nulls(v, sub, depth + 1);
                }
            }
            if !removed.is_empty() {
                m.retain(|k, _| !removed.contains(k));
            }
        }
        Value::Array(a) => {
            let items = s.and_then(Sch::items);
            for v in a.iter_mut() {
                prune_non_nullable_nulls(v, items, depth + 1);
            }
        }
        _ => {}
    }
}

/// Deep copy of a default, refused (None) when it nests deeper than MAX_DEPTH
/// (a recursive clone of a hostile default could exhaust the stack).
fn copy_default(d: &Value) -> Option<Value> {
    if exceeds_depth(d, MAX_DEPTH) {
        None
    } else {
        Some(d.clone())
    }
}

/// Iterative check whether `v` nests deeper than `limit` levels.
fn exceeds_depth(v: &Value, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((x, d)) = stack.pop() {
        if d > limit {
            return true;
        }
        match x {
            Value::Object(m) => stack.extend(m.values().map(|c| (c, d + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    false
}

fn default_value(x: &mut Value, s: Option<Sch<'_>>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            for (k, p) in s.properties() {
                let Some(d) = p.default_value() else { continue };
                let needs = match m.get(k) {
                    None => true,
                    Some(Value::Null) => !p.nullable(),
                    Some(_) => false,
                };
                if needs && let Some(copy) = copy_default(d) {
                    m.insert(k.clone(), copy);
                }
            }
            let addl = s.additional_schema();
            for (k, v) in m.iter_mut() {
                if let Some(p) = s.property(k) {
                    default_value(v, Some(p), depth + 1);
                } else if let Some(a) = addl {
                    if v.is_null()
                        && !a.nullable()
                        && let Some(copy) = a.default_value().and_then(copy_default)
                    {
                        *v = copy;
                    }
                    default_value(v, Some(a), depth + 1);
                }
            }
        }
        Value::Array(arr) => {
            let items = s.items();
            for v in arr.iter_mut() {
                if let Some(it) = items
                    && v.is_null()
                    && !it.nullable()
                    && let Some(copy) = it.default_value().and_then(copy_default)
                {
                    *v = copy;
                }
                default_value(v, items, depth + 1);
            }
        }
        _ => {}
    }
}
