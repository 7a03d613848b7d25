//! `x-kubernetes-list-type` set and map uniqueness (`listtype.ValidateListSetsAndMaps`):
//! duplicate elements of set lists and duplicate keys of map lists.

use super::access::Sch;
use super::cause::{Cause, MAX_DEPTH};
use super::embedded::{fchild, fkey};
use super::go_value::{go_body, go_sharp_pairs};
use super::pruning::path_index;
use crate::gofmt::{GoNum, go_json, go_json_pairs, go_num};
use serde_json::{Map, Value};
use std::collections::HashMap;

pub(super) fn list_validate_map(
    m: &Map<String, Value>,
    s: Sch<'_>,
    path: &mut String,
    depth: usize,
    out: &mut Vec<Cause>,
) {
    for (k, v) in m {
        let len = path.len();
        if let Some(p) = s.property(k) {
            fchild(path, k);
            list_validate_value(v, p, path, depth + 1, out);
        } else if let Some(a) = s.additional_schema() {
            fkey(path, k);
            list_validate_value(v, a, path, depth + 1, out);
        }
        path.truncate(len);
    }
}

fn list_validate_value(
    x: &Value,
    s: Sch<'_>,
    path: &mut String,
    depth: usize,
    out: &mut Vec<Cause>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Array(a) => list_validate_array(a, s, path, depth, out),
        Value::Object(m) => list_validate_map(m, s, path, depth, out),
        _ => {}
    }
}

fn list_validate_array(
    arr: &[Value],
    s: Sch<'_>,
    path: &mut String,
    depth: usize,
    out: &mut Vec<Cause>,
) {
    match s.string("x-kubernetes-list-type") {
        Some("set") => {
            let keys: Vec<ListKey> = arr.iter().map(list_key).collect();
            for i in non_unique(&keys) {
                out.push(Cause::duplicate(index_path(path, i), &go_body(&arr[i])));
            }
        }
        Some("map") => validate_list_map(arr, s, path, out),
        _ => {}
    }
    if let Some(items) = s.items() {
        for (i, v) in arr.iter().enumerate() {
            let len = path.len();
            path_index(path, i);
            list_validate_value(v, items, path, depth + 1, out);
            path.truncate(len);
        }
    }
}

fn index_path(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Identity of a list element as upstream compares it: scalars by Go value
/// (int64 and float64 differ), compounds by their JSON encoding.
#[derive(Clone, PartialEq, Eq, Hash)]
enum ListKey {
    Unspecified,
    Null,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(String),
    Compound(String),
}

fn list_key(v: &Value) -> ListKey {
    match v {
        Value::Null => ListKey::Null,
        Value::Bool(b) => ListKey::Bool(*b),
        Value::String(s) => ListKey::Str(s.clone()),
        Value::Number(n) => match go_num(n) {
            GoNum::Int(i) => ListKey::Int(i),
            GoNum::Float(f) => ListKey::Float(if f == 0.0 { 0 } else { f.to_bits() }),
        },
        Value::Array(_) | Value::Object(_) => ListKey::Compound(go_json(v)),
    }
}

/// Indices of the second occurrence of each repeated key (upstream reports a
/// value once, at its first repetition).
fn non_unique(keys: &[ListKey]) -> Vec<usize> {
    if keys.len() <= 1 {
        return Vec::new();
    }
    let mut seen: HashMap<&ListKey, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let n = seen.entry(k).or_insert(0);
        *n += 1;
        if *n == 2 {
            out.push(i);
        }
    }
    out
}

fn validate_list_map(arr: &[Value], s: Sch<'_>, path: &str, out: &mut Vec<Cause>) {
    for (i, x) in arr.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(Cause::invalid(
                index_path(path, i),
                &go_body(x),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if arr.len() <= 1 {
        return;
    }
    let key_fields = s.list_map_keys();
    if key_fields.len() == 1 {
        let kf = key_fields[0];
        let keys: Vec<ListKey> = arr
            .iter()
            .map(|x| match x.as_object().and_then(|m| m.get(kf)) {
                Some(v) => list_key(v),
                None => ListKey::Unspecified,
            })
            .collect();
        for i in non_unique(&keys) {
            let pairs: Vec<(&str, &Value)> = match arr[i].as_object().and_then(|m| m.get(kf)) {
                Some(v) => vec![(kf, v)],
                None => Vec::new(),
            };
            out.push(Cause::duplicate(
                index_path(path, i),
                &go_sharp_pairs(pairs, 0),
            ));
        }
        return;
    }
    let key_pairs: Vec<Vec<(&str, &Value)>> = arr
        .iter()
        .map(|x| {
            let mut pairs = Vec::new();
            if let Some(m) = x.as_object() {
                for kf in &key_fields {
                    if let Some(v) = m.get(*kf) {
                        pairs.push((*kf, v));
                    }
                }
            }
            pairs
        })
        .collect();
    let keys: Vec<ListKey> = key_pairs
        .iter()
        .map(|p| ListKey::Compound(go_json_pairs(p.clone(), 0)))
        .collect();
    for i in non_unique(&keys) {
        out.push(Cause::duplicate(
            index_path(path, i),
            &go_sharp_pairs(key_pairs[i].clone(), 0),
        ));
    }
}
