//! Server-side apply, in the minimal model the project relies on: each field manager owns the
//! leaf fields it applied (recorded in `managedFields` as FieldsV1); re-applying without a field
//! removes it unless another manager owns it; a different value for a field another apply
//! manager owns is a conflict unless forced. Maps merge recursively, except atomic ones
//! (`x-kubernetes-map-type: atomic` on the field or its type), which are one field, replaced
//! whole; lists are atomic unless the schema makes them sets or maps (`x-kubernetes-list-type`
//! with `x-kubernetes-list-map-keys`), in which case items merge by key. Built-in kinds read
//! these from Kubernetes' own schemas ([`crate::merge`]), custom resources from their CRD's.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::merge::{self, Node};
use crate::meta;
use crate::registry::ResourceInfo;
use crate::status::ApiError;

/// One step of a field path: a map field, or a list item identified by its key fields.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seg {
    Field(String),
    /// Serialized key object, e.g. `{"name":"app"}`; for sets, `v:<json value>`.
    Key(String),
}

type FieldPath = Vec<Seg>;

/// How a list is merged.
enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// The CRD schema node at a path of field names (list items left out), if the schema has it.
fn crd_schema<'a>(schema: &'a Value, fields: &[String]) -> Option<&'a Value> {
    let mut s = schema;
    for f in fields {
        s = match s.get("properties").and_then(|p| p.get(f)) {
            Some(child) => child,
            None => s
                .get("items")
                .and_then(|i| i.get("properties"))
                .and_then(|p| p.get(f))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))?,
        };
    }
    Some(s)
}

fn list_kind(r: &ResourceInfo, fields: &[String]) -> ListKind {
    match &r.custom {
        Some(c) => {
            let Some(s) = crd_schema(&c.schema, fields) else {
                return ListKind::Atomic;
            };
            match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => ListKind::Map(
                    s["x-kubernetes-list-map-keys"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                Some("set") => ListKind::Set,
                _ => ListKind::Atomic,
            }
        }
        None => {
            let path: Vec<&str> = fields.iter().map(String::as_str).collect();
            match builtin(r).at(&path).0.list() {
                merge::ListType::Map(keys) => {
                    ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
                }
                merge::ListType::Set => ListKind::Set,
                merge::ListType::Atomic => ListKind::Atomic,
            }
        }
    }
}

fn builtin(r: &ResourceInfo) -> Node {
    Node::root(&r.group, &r.version, &r.kind)
}

/// Whether the map or struct at this path is replaced whole (`x-kubernetes-map-type: atomic`).
fn atomic_map(r: &ResourceInfo, fields: &[String]) -> bool {
    if fields.is_empty() {
        return false;
    }
    match &r.custom {
        Some(c) => crd_schema(&c.schema, fields)
            .and_then(|s| s.get("x-kubernetes-map-type"))
            .is_some_and(|t| t == "atomic"),
        None => {
            let path: Vec<&str> = fields.iter().map(String::as_str).collect();
            let (field, node) = builtin(r).at(&path);
            field.atomic(node)
        }
    }
}

/// Key fields the API server defaults when an applied list item leaves them out (the schemas
/// kubernetes-validate publishes omit `default`): ports' `protocol`.
fn defaulted_key(key: &str) -> Option<Value> {
    (key == "protocol").then(|| json!("TCP"))
}

/// Whether a list item has these key values (a defaulted key field counts with its default).
fn has_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter()
        .all(|(k, want)| item.get(k).cloned().or_else(|| defaulted_key(k)).as_ref() == Some(want))
}

fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        let value = item.get(k).cloned().or_else(|| defaulted_key(k))?;
        m.insert(k.clone(), value);
    }
    Some(Value::Object(m).to_string())
}

/// Collects the leaf paths of an applied configuration.
fn leaves(
    r: &ResourceInfo,
    v: &Value,
    path: &mut FieldPath,
    fields: &mut Vec<String>,
    out: &mut BTreeSet<FieldPath>,
) {
    match v {
        Value::Object(m) if !m.is_empty() && !atomic_map(r, fields) => {
            for (k, child) in m {
                path.push(Seg::Field(k.clone()));
                fields.push(k.clone());
                leaves(r, child, path, fields, out);
                fields.pop();
                path.pop();
            }
        }
        Value::Array(items) => match list_kind(r, fields) {
            ListKind::Map(keys) if !keys.is_empty() => {
                for item in items {
                    match item_key(item, &keys) {
                        Some(key) => {
                            path.push(Seg::Key(key));
                            let mut sub = BTreeSet::new();
                            leaves(r, item, path, fields, &mut sub);
                            out.extend(sub);
                            path.pop();
                        }
                        None => {
                            out.insert(path.clone());
                        }
                    }
                }
            }
            ListKind::Set => {
                for item in items {
                    let mut p = path.clone();
                    p.push(Seg::Key(format!("v:{item}")));
                    out.insert(p);
                }
            }
            _ => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

fn get_at<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = match seg {
            Seg::Field(f) => cur.get(f)?,
            Seg::Key(k) if k.starts_with("v:") => {
                let want: Value = serde_json::from_str(&k[2..]).ok()?;
                cur.as_array()?.iter().find(|i| **i == want)?
            }
            Seg::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).ok()?;
                cur.as_array()?.iter().find(|i| has_key(i, &key))?
            }
        };
    }
    Some(cur)
}

fn remove_at(v: &mut Value, path: &[Seg]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parent_path {
        let next = match seg {
            Seg::Field(f) => cur.get_mut(f),
            Seg::Key(k) => {
                let key: Option<Map<String, Value>> = serde_json::from_str(k).ok();
                match (key, cur.as_array_mut()) {
                    (Some(key), Some(items)) => items.iter_mut().find(|i| has_key(i, &key)),
                    _ => None,
                }
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Seg::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Seg::Key(k) if k.starts_with("v:") => {
            if let (Ok(want), Some(items)) =
                (serde_json::from_str::<Value>(&k[2..]), cur.as_array_mut())
            {
                items.retain(|i| *i != want);
            }
        }
        Seg::Key(k) => {
            if let (Ok(key), Some(items)) = (
                serde_json::from_str::<Map<String, Value>>(k),
                cur.as_array_mut(),
            ) {
                items.retain(|i| !has_key(i, &key));
            }
        }
    }
}

fn merge(r: &ResourceInfo, target: &mut Value, src: &Value, fields: &mut Vec<String>) {
    match (target.as_object_mut(), src.as_object()) {
        (Some(t), Some(s)) => {
            for (k, v) in s {
                fields.push(k.clone());
                match t.get_mut(k) {
                    Some(existing)
                        if existing.is_object() && v.is_object() && !atomic_map(r, fields) =>
                    {
                        merge(r, existing, v, fields)
                    }
                    Some(existing) if existing.is_array() && v.is_array() => {
                        match list_kind(r, fields) {
                            ListKind::Map(keys) if !keys.is_empty() => {
                                let items = existing.as_array_mut().expect("checked array");
                                for item in v.as_array().expect("checked array") {
                                    let key = item_key(item, &keys);
                                    let found = key.as_ref().and_then(|key| {
                                        items
                                            .iter_mut()
                                            .find(|i| item_key(i, &keys).as_ref() == Some(key))
                                    });
                                    match found {
                                        Some(target_item) => merge(r, target_item, item, fields),
                                        None => items.push(item.clone()),
                                    }
                                }
                            }
                            ListKind::Set => {
                                let items = existing.as_array_mut().expect("checked array");
                                for item in v.as_array().expect("checked array") {
                                    if !items.contains(item) {
                                        items.push(item.clone());
                                    }
                                }
                            }
                            _ => *existing = v.clone(),
                        }
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
                fields.pop();
            }
        }
        _ => *target = src.clone(),
    }
}

fn encode(set: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            let key = match seg {
                Seg::Field(f) => format!("f:{f}"),
                Seg::Key(k) if k.starts_with("v:") => k.clone(),
                Seg::Key(k) => format!("k:{k}"),
            };
            cur = cur
                .entry(key)
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

fn decode(v: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(m) = v.as_object() else { return };
    let children: Vec<_> = m.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path.clone());
        }
        return;
    }
    for (k, child) in children {
        let seg = if let Some(f) = k.strip_prefix("f:") {
            Seg::Field(f.to_string())
        } else if let Some(key) = k.strip_prefix("k:") {
            Seg::Key(key.to_string())
        } else if k.starts_with("v:") {
            Seg::Key(k.clone())
        } else {
            continue;
        };
        path.push(seg);
        decode(child, path, out);
        path.pop();
    }
}

fn path_string(p: &FieldPath) -> String {
    let mut s = String::new();
    for seg in p {
        match seg {
            Seg::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Seg::Key(k) => {
                s.push('[');
                s.push_str(k);
                s.push(']');
            }
        }
    }
    s
}

/// Computes the object after `manager` applies `applied` to `old` (absent: creation).
pub fn apply(
    r: &ResourceInfo,
    old: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    status_path: bool,
) -> Result<Value, ApiError> {
    let name = applied["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !applied.is_object() {
        return Err(ApiError::bad_request("apply patch must be an object"));
    }
    for (field, want) in [("apiVersion", r.api_version()), ("kind", r.kind.clone())] {
        match applied.get(field).and_then(Value::as_str) {
            Some(v) if v == want => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "the {field} in the data ({v}) does not match the expected {field} ({want})"
                )));
            }
            None => {
                return Err(ApiError::bad_request(format!(
                    "{field} must be set in an apply patch"
                )));
            }
        }
    }
    // The configuration this manager owns: everything but identity metadata; on `/status` only
    // the status, on the main path everything but a status served by its own subresource.
    let mut config = applied.clone();
    if let Some(o) = config.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
        if status_path {
            o.retain(|k, _| k == "status");
        } else if r.status_subresource {
            o.remove("status");
        }
    }
    if let Some(m) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| {
            matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            )
        });
        if m.is_empty() {
            config.as_object_mut().map(|o| o.remove("metadata"));
        }
    }
    let mut new_set = BTreeSet::new();
    leaves(r, &config, &mut Vec::new(), &mut Vec::new(), &mut new_set);

    let base = old.cloned().unwrap_or_else(|| json!({}));
    let entries: Vec<Value> = base["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Field sets are kept per subresource: the main resource and /status are separate.
    let subresource = if status_path {
        json!("status")
    } else {
        Value::Null
    };
    let same_subresource =
        |e: &Value| e.get("subresource").cloned().unwrap_or(Value::Null) == subresource;
    let mut owners: BTreeMap<String, BTreeSet<FieldPath>> = BTreeMap::new();
    for e in &entries {
        if e["operation"] == "Apply"
            && same_subresource(e)
            && let Some(m) = e["manager"].as_str()
        {
            let mut set = BTreeSet::new();
            decode(&e["fieldsV1"], &mut Vec::new(), &mut set);
            owners.insert(m.to_string(), set);
        }
    }
    let previous = owners.remove(manager).unwrap_or_default();

    // Conflicts: another apply manager owns a field this one sets to a different value.
    let mut conflicts = Vec::new();
    for (other, set) in owners.iter_mut() {
        let clashing: Vec<FieldPath> = new_set
            .iter()
            .filter(|p| set.contains(*p) && get_at(&base, p) != get_at(&config, p))
            .cloned()
            .collect();
        if clashing.is_empty() {
            continue;
        }
        if force {
            for p in &clashing {
                set.remove(p);
            }
        } else {
            conflicts.extend(
                clashing
                    .iter()
                    .map(|p| format!("conflict with \"{other}\": {}", path_string(p))),
            );
        }
    }
    if !conflicts.is_empty() {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!("Apply failed with {} conflict{}: {}", conflicts.len(), if conflicts.len() == 1 { "" } else { "s" }, conflicts.join("\n")),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural, "causes": conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": c})).collect::<Vec<_>>()})));
    }

    let mut result = base.clone();
    let owned_by_others: BTreeSet<&FieldPath> = owners.values().flatten().collect();
    // A list item of a map list that this manager applied before and no longer does, and that
    // no other manager has fields in, goes whole (its key fields with it); deepest items first.
    let under = |p: &FieldPath, item: &[Seg]| p.len() > item.len() && p.starts_with(item);
    let mut dropped_items: Vec<FieldPath> = previous
        .iter()
        .flat_map(|p| {
            p.iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Seg::Key(k) if !k.starts_with("v:")))
                .map(|(i, _)| p[..=i].to_vec())
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|item| {
            !new_set.iter().any(|p| under(p, item))
                && !owned_by_others.iter().any(|p| under(p, item))
        })
        .collect();
    dropped_items.sort_by_key(|item| std::cmp::Reverse(item.len()));
    for item in &dropped_items {
        remove_at(&mut result, item);
    }
    for p in previous.difference(&new_set) {
        if !owned_by_others.contains(p) {
            remove_at(&mut result, p);
        }
    }
    merge(r, &mut result, &config, &mut Vec::new());
    result["apiVersion"] = json!(r.api_version());
    result["kind"] = json!(r.kind);
    let m = meta::meta_mut(&mut result);
    if !name.is_empty() {
        m.entry("name").or_insert(json!(name));
    }
    let mut new_entries: Vec<Value> = entries
        .into_iter()
        .filter(|e| {
            !(e["operation"] == "Apply" && e["manager"] == json!(manager) && same_subresource(e))
        })
        .map(|mut e| {
            if e["operation"] == "Apply"
                && same_subresource(&e)
                && let Some(set) = e["manager"].as_str().and_then(|m| owners.get(m))
            {
                e["fieldsV1"] = encode(set);
            }
            e
        })
        .collect();
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": r.api_version(),
        "time": meta::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": encode(&new_set),
    });
    if status_path {
        entry["subresource"] = json!("status");
    }
    new_entries.push(entry);
    m.insert("managedFields".into(), Value::Array(new_entries));
    Ok(result)
}
