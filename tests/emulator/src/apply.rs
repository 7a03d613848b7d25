//! Server-side apply and field ownership (`managedFields`), as the API server's
//! structured-merge-diff does it in the model the project relies on: a field manager owns leaf
//! fields, recorded per (manager, operation, apiVersion, subresource) as FieldsV1.
//!
//! - A write other than an apply (create, update, patch: operation `Update`) takes the fields it
//!   added or changed from every other manager; fields it removed leave every manager's set
//!   ([`record_update`]).
//! - An apply owns what it applied; re-applying without a field removes it unless another
//!   manager (apply or update) owns it; a different value for a field another manager owns is
//!   a conflict unless forced, and a forced apply takes the field ([`apply`]).
//!
//! Maps merge recursively, except atomic ones (`x-kubernetes-map-type: atomic` on the field or
//! its type), which are one field, replaced whole; lists are atomic unless the schema makes them
//! sets or maps (`x-kubernetes-list-type` with `x-kubernetes-list-map-keys`), in which case
//! items merge by key. Built-in kinds read these from Kubernetes' own schemas
//! ([`crate::merge`]), custom resources from their CRD's.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

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

/// The metadata fields a manager can own; the rest (name, namespace, uid, resourceVersion,
/// generation, timestamps, managedFields) is the server's.
const OWNED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// Collects the leaf fields of a value at `path`, with their values.
fn leaves<'a>(
    r: &ResourceInfo,
    v: &'a Value,
    path: &mut FieldPath,
    fields: &mut Vec<String>,
    out: &mut BTreeMap<FieldPath, &'a Value>,
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
                            leaves(r, item, path, fields, out);
                            path.pop();
                        }
                        None => {
                            out.insert(path.clone(), v);
                        }
                    }
                }
            }
            ListKind::Set => {
                for item in items {
                    let mut p = path.clone();
                    p.push(Seg::Key(format!("v:{item}")));
                    out.insert(p, item);
                }
            }
            _ => {
                out.insert(path.clone(), v);
            }
        },
        _ => {
            out.insert(path.clone(), v);
        }
    }
}

/// The leaf fields of an object that field managers own, with their values: everything but
/// `apiVersion`, `kind` and the server's metadata; on `/status` only the status, on the main
/// path everything but a status served by its own subresource.
fn owned_leaves<'a>(
    r: &ResourceInfo,
    obj: &'a Value,
    status_path: bool,
) -> BTreeMap<FieldPath, &'a Value> {
    let mut out = BTreeMap::new();
    let Some(o) = obj.as_object() else {
        return out;
    };
    let mut walk = |names: &[&str], v: &'a Value| {
        let mut path: FieldPath = names.iter().map(|n| Seg::Field(n.to_string())).collect();
        let mut fields: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        leaves(r, v, &mut path, &mut fields, &mut out);
    };
    for (k, v) in o {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if !status_path {
                    for (field, value) in v.as_object().into_iter().flatten() {
                        if OWNED_METADATA.contains(&field.as_str()) {
                            walk(&["metadata", field], value);
                        }
                    }
                }
            }
            "status" => {
                if status_path || !r.status_subresource {
                    walk(&["status"], v);
                }
            }
            _ => {
                if !status_path {
                    walk(&[k], v);
                }
            }
        }
    }
    out
}

/// Whether `p` is in the object these leaves are of: a leaf or a map or list above one.
fn exists(leaves: &BTreeMap<FieldPath, &Value>, p: &FieldPath) -> bool {
    leaves
        .range::<[Seg], _>((Bound::Included(p.as_slice()), Bound::Unbounded))
        .next()
        .is_some_and(|(k, _)| k.starts_with(p))
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

/// A field path as the API server prints it in a conflict: `.spec.ports[port=53,protocol="TCP"]`,
/// `[=value]` for a set item.
fn path_string(p: &FieldPath) -> String {
    fn scalar(v: &Value) -> String {
        match v {
            Value::String(s) => Value::String(s.clone()).to_string(),
            other => other.to_string(),
        }
    }
    let mut s = String::new();
    for seg in p {
        match seg {
            Seg::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Seg::Key(k) => {
                s.push('[');
                if let Some(v) = k.strip_prefix("v:") {
                    s.push('=');
                    match serde_json::from_str::<Value>(v) {
                        Ok(v) => s.push_str(&scalar(&v)),
                        Err(_) => s.push_str(v),
                    }
                } else {
                    match serde_json::from_str::<Map<String, Value>>(k) {
                        Ok(key) => {
                            let parts: Vec<String> = key
                                .iter()
                                .map(|(name, v)| format!("{name}={}", scalar(v)))
                                .collect();
                            s.push_str(&parts.join(","));
                        }
                        Err(_) => s.push_str(k),
                    }
                }
                s.push(']');
            }
        }
    }
    s
}

/// Who owns a set of fields: a managedFields entry's manager, operation and apiVersion (entries
/// are kept apart by subresource too; each computation reads one subresource's entries).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Manager {
    name: String,
    operation: String,
    api_version: String,
}

impl Manager {
    fn of(entry: &Value) -> Manager {
        let text = |f: &str| entry[f].as_str().unwrap_or_default().to_string();
        Manager {
            name: text("manager"),
            operation: text("operation"),
            api_version: text("apiVersion"),
        }
    }

    /// As a conflict names it: an update's manager with the version it wrote.
    fn printed(&self, subresource: Option<&str>) -> String {
        let mut s = Value::String(self.name.clone()).to_string();
        if let Some(sub) = subresource {
            s.push_str(&format!(" with subresource \"{sub}\""));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// A new entry of this manager (its `fieldsV1` and `time` are set when it is written).
    fn entry(&self, subresource: Option<&str>) -> Value {
        let mut e = Map::new();
        if !self.name.is_empty() {
            e.insert("manager".into(), json!(self.name));
        }
        e.insert("operation".into(), json!(self.operation));
        e.insert("apiVersion".into(), json!(self.api_version));
        e.insert("time".into(), json!(meta::now()));
        e.insert("fieldsType".into(), json!("FieldsV1"));
        e.insert("fieldsV1".into(), json!({}));
        if let Some(sub) = subresource {
            e.insert("subresource".into(), json!(sub));
        }
        Value::Object(e)
    }
}

/// One managedFields entry of the subresource being written, with its field set decoded.
struct Owner {
    id: Manager,
    entry: Value,
    set: BTreeSet<FieldPath>,
    /// The set changed: `fieldsV1` is encoded again, and the entry goes when the set is empty.
    changed: bool,
}

impl Owner {
    fn new(id: Manager, subresource: Option<&str>) -> Owner {
        Owner {
            entry: id.entry(subresource),
            id,
            set: BTreeSet::new(),
            changed: true,
        }
    }

    /// Removes the paths that are no longer in the object.
    fn keep_existing(&mut self, leaves: &BTreeMap<FieldPath, &Value>) {
        let before = self.set.len();
        self.set.retain(|p| exists(leaves, p));
        self.changed |= self.set.len() != before;
    }
}

/// The managedFields entries of an object: those of `subresource` decoded, the others as they
/// are.
fn read_entries(obj: &Value, subresource: Option<&str>) -> (Vec<Owner>, Vec<Value>) {
    let mut owners = Vec::new();
    let mut others = Vec::new();
    let entries = obj["metadata"]["managedFields"].as_array();
    for e in entries.into_iter().flatten() {
        let sub = e
            .get("subresource")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if sub == subresource {
            let mut set = BTreeSet::new();
            decode(&e["fieldsV1"], &mut Vec::new(), &mut set);
            owners.push(Owner {
                id: Manager::of(e),
                entry: e.clone(),
                set,
                changed: false,
            });
        } else {
            others.push(e.clone());
        }
    }
    (owners, others)
}

/// Stores the entries in `metadata.managedFields`: an entry whose set changed is encoded again,
/// or left out when empty; in the API server's order (operation, time, manager, apiVersion,
/// subresource).
fn write_entries(obj: &mut Value, owners: Vec<Owner>, mut entries: Vec<Value>) {
    for o in owners {
        let mut e = o.entry;
        if o.changed {
            if o.set.is_empty() {
                continue;
            }
            e["fieldsV1"] = encode(&o.set);
        }
        entries.push(e);
    }
    entries.sort_by_cached_key(|e| {
        ["operation", "time", "manager", "apiVersion", "subresource"]
            .map(|f| e[f].as_str().unwrap_or_default().to_string())
    });
    let m = meta::meta_mut(obj);
    if entries.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(entries));
    }
}

/// Records the fields a write other than an apply (create, update, patch; operation `Update`)
/// takes, as the API server's field manager does: the fields it adds or changes become
/// `manager`'s, taken from every other manager; fields it removes leave every manager. `new`
/// carries the entries to start from (the stored ones, unless the request set its own);
/// `old` is absent for a creation.
pub fn record_update(
    r: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    status_path: bool,
) {
    let old_leaves = old
        .map(|o| owned_leaves(r, o, status_path))
        .unwrap_or_default();
    let new_leaves = owned_leaves(r, new, status_path);
    let changed: BTreeSet<FieldPath> = new_leaves
        .iter()
        .filter(|(p, v)| old_leaves.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    let removed = old_leaves.keys().any(|p| !new_leaves.contains_key(p));
    if changed.is_empty() && !removed {
        return;
    }
    let subresource = status_path.then_some("status");
    let id = Manager {
        name: manager.to_string(),
        operation: "Update".into(),
        api_version: r.api_version(),
    };
    let (mut owners, others) = read_entries(new, subresource);
    for o in owners.iter_mut().filter(|o| o.id != id) {
        let before = o.set.len();
        if changed.len() < o.set.len() {
            for p in &changed {
                o.set.remove(p);
            }
        } else {
            o.set.retain(|p| !changed.contains(p));
        }
        o.changed |= o.set.len() != before;
        if removed {
            o.keep_existing(&new_leaves);
        }
    }
    if !changed.is_empty() && !owners.iter().any(|o| o.id == id) {
        owners.push(Owner::new(id.clone(), subresource));
    }
    if let Some(o) = owners.iter_mut().find(|o| o.id == id) {
        if removed {
            o.keep_existing(&new_leaves);
        }
        if !changed.is_empty() {
            o.set.extend(changed);
            o.changed = true;
            o.entry["time"] = json!(meta::now());
        }
    }
    write_entries(new, owners, others);
}

/// The field manager of `kubectl apply --server-side`, which the API server lets take over from
/// client-side apply.
const KUBECTL: &str = "kubectl";

/// The annotation client-side `kubectl apply` records its configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object's last-applied configuration, when it has a non-empty one.
fn last_applied(obj: &Value) -> Option<&str> {
    obj["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// A value as Go's JSON encoder writes it: members sorted, `<`, `>`, `&`, U+2028 and U+2029
/// escaped, a newline at the end.
fn go_json(v: &Value) -> String {
    let mut out = String::new();
    for c in v.to_string().chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// The 409 of an apply that conflicts, worded as the API server's: one conflict on one line,
/// several grouped by manager.
fn conflict_error(
    subresource: Option<&str>,
    mut conflicts: Vec<(&Manager, Vec<&FieldPath>)>,
) -> ApiError {
    conflicts.sort_by(|a, b| a.0.cmp(b.0));
    let count: usize = conflicts.iter().map(|(_, paths)| paths.len()).sum();
    let message = match conflicts.as_slice() {
        [(m, paths)] if paths.len() == 1 => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            m.printed(subresource),
            path_string(paths[0])
        ),
        _ => {
            let mut lines = Vec::new();
            for (m, paths) in &conflicts {
                lines.push(format!("conflicts with {}:", m.printed(subresource)));
                lines.extend(paths.iter().map(|p| format!("- {}", path_string(p))));
            }
            format!("Apply failed with {count} conflicts: {}", lines.join("\n"))
        }
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .flat_map(|(m, paths)| {
            paths.iter().map(move |p| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", m.printed(subresource)),
                    "field": path_string(p),
                })
            })
        })
        .collect();
    ApiError::new(409, "Conflict", message).with_details(json!({ "causes": causes }))
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
        m.retain(|k, _| OWNED_METADATA.contains(&k.as_str()));
        if m.is_empty() {
            config.as_object_mut().map(|o| o.remove("metadata"));
        }
    }
    let new_leaves = owned_leaves(r, applied, status_path);
    let new_set: BTreeSet<FieldPath> = new_leaves.keys().cloned().collect();

    let base = old.cloned().unwrap_or_else(|| json!({}));
    // Field sets are kept per subresource: the main resource and /status are separate.
    let subresource = status_path.then_some("status");
    let id = Manager {
        name: manager.to_string(),
        operation: "Apply".into(),
        api_version: r.api_version(),
    };
    let (mut owners, others) = read_entries(&base, subresource);
    let (mut entry, previous) = match owners.iter().position(|o| o.id == id) {
        Some(i) => {
            let o = owners.remove(i);
            (o.entry, o.set)
        }
        None => (id.entry(subresource), BTreeSet::new()),
    };

    // Conflicts: another manager (apply or update) owns a field this one sets to a different
    // value.
    let clashes: Vec<(usize, Vec<FieldPath>)> = owners
        .iter()
        .enumerate()
        .filter_map(|(i, o)| {
            let clashing: Vec<FieldPath> = new_leaves
                .iter()
                .filter(|(p, v)| o.set.contains(*p) && get_at(&base, p) != Some(**v))
                .map(|(p, _)| p.clone())
                .collect();
            (!clashing.is_empty()).then_some((i, clashing))
        })
        .collect();
    if !force && !clashes.is_empty() {
        // Upgrading from client-side apply: `kubectl`'s apply may take the fields whose stored
        // value is still the one the last-applied annotation records (the API server's
        // lastAppliedManager).
        let last_applied: Option<Value> = (manager == KUBECTL)
            .then(|| last_applied(&base).and_then(|s| serde_json::from_str(s).ok()))
            .flatten();
        let recorded = last_applied
            .as_ref()
            .map(|l| owned_leaves(r, l, status_path))
            .unwrap_or_default();
        let remaining: Vec<(&Manager, Vec<&FieldPath>)> = clashes
            .iter()
            .map(|(i, paths)| {
                let left = paths
                    .iter()
                    .filter(|p| {
                        !recorded
                            .get(*p)
                            .is_some_and(|v| get_at(&base, p) == Some(*v))
                    })
                    .collect::<Vec<_>>();
                (&owners[*i].id, left)
            })
            .filter(|(_, left)| !left.is_empty())
            .collect();
        if !remaining.is_empty() {
            return Err(conflict_error(subresource, remaining));
        }
    }
    for (i, paths) in clashes {
        let o = &mut owners[i];
        for p in &paths {
            o.set.remove(p);
        }
        o.changed = true;
    }

    let mut result = base.clone();
    let owned_by_others: BTreeSet<FieldPath> =
        owners.iter().flat_map(|o| o.set.iter().cloned()).collect();
    // A list item of a map list that this manager applied before and no longer does, and that
    // no other manager has fields in, goes whole (its key fields with it); deepest items first.
    let has_under = |set: &BTreeSet<FieldPath>, item: &[Seg]| {
        set.range::<[Seg], _>((Bound::Excluded(item), Bound::Unbounded))
            .next()
            .is_some_and(|p| p.starts_with(item))
    };
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
        .filter(|item| !has_under(&new_set, item) && !has_under(&owned_by_others, item))
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
    if !name.is_empty() {
        meta::meta_mut(&mut result)
            .entry("name")
            .or_insert(json!(name));
    }
    // Fields the merge replaced (an atomic value, a change of type) leave their owners.
    if !owners.is_empty() {
        let result_leaves = owned_leaves(r, &result, status_path);
        for o in owners.iter_mut() {
            o.keep_existing(&result_leaves);
        }
    }
    // `kubectl`'s apply keeps a client-side apply annotation in step with what it applies (the
    // API server's lastAppliedUpdater); its owners stay as they are.
    if manager == KUBECTL && !status_path && last_applied(&result).is_some() {
        let mut config = applied.clone();
        if let Some(a) = config["metadata"]
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(LAST_APPLIED);
        }
        meta::meta_mut(&mut result)
            .entry("annotations")
            .or_insert_with(|| json!({}))[LAST_APPLIED] = json!(go_json(&config));
    }
    // The applier's entry stays even when it owns nothing.
    entry["time"] = json!(meta::now());
    entry["fieldsV1"] = encode(&new_set);
    let mut entries = others;
    entries.push(entry);
    write_entries(&mut result, owners, entries);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::ops::{self, WriteOptions};
    use crate::registry::{self, Registry, ResourceInfo};

    /// One request, as the server runs it.
    enum Write {
        /// POST by a manager.
        Create(&'static str, Value),
        /// PUT (or a patch, whose result is the same) by a manager.
        Update(&'static str, Value),
        /// A JSON merge patch by a manager.
        Patch(&'static str, Value),
        /// PUT to `/status`.
        Status(&'static str, Value),
        /// Server-side apply, forced or not.
        Apply(&'static str, Value, bool),
    }

    fn opts(manager: &str) -> WriteOptions {
        WriteOptions {
            field_manager: Some(manager.to_string()),
            user_agent: Some(String::new()),
            ..Default::default()
        }
    }

    fn write(r: &ResourceInfo, old: Option<&Value>, w: &Write) -> Result<Value, String> {
        let object = match (w, old) {
            (Write::Create(m, obj), _) => ops::prepare_create(r, "default", obj.clone(), &opts(m)),
            (Write::Update(m, obj), Some(old)) => {
                ops::prepare_update(r, old, obj.clone(), false, &opts(m))
            }
            (Write::Patch(m, patch), Some(old)) => {
                let mut obj = old.clone();
                json_patch::merge(&mut obj, patch);
                ops::prepare_update(r, old, obj, false, &opts(m))
            }
            (Write::Status(m, obj), Some(old)) => {
                ops::prepare_update(r, old, obj.clone(), true, &opts(m))
            }
            (Write::Apply(m, obj, force), old) => {
                let merged = super::apply(r, old, obj, m, *force, false).map_err(|e| e.message)?;
                let quiet = opts(m).recording_nothing();
                match old {
                    Some(old) => ops::prepare_update(r, old, merged, false, &quiet),
                    None => ops::prepare_create(r, "default", merged, &quiet),
                }
            }
            (_, None) => panic!("an update needs an object"),
        };
        Ok(object.map_err(|e| e.message)?.object)
    }

    /// The fieldsV1 of every entry, by `manager/operation[/subresource]`.
    fn owners(obj: &Value) -> BTreeMap<String, Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let mut id = format!(
                    "{}/{}",
                    e["manager"].as_str().unwrap_or("<none>"),
                    e["operation"].as_str().unwrap()
                );
                if let Some(sub) = e["subresource"].as_str() {
                    id = format!("{id}/{sub}");
                }
                (id, e["fieldsV1"].clone())
            })
            .collect()
    }

    /// Runs the writes in order; the last one's outcome.
    fn run(r: &ResourceInfo, writes: &[Write]) -> Result<Value, String> {
        let mut current: Option<Value> = None;
        for (i, w) in writes.iter().enumerate() {
            match write(r, current.as_ref(), w) {
                Ok(obj) => current = Some(obj),
                Err(e) if i + 1 == writes.len() => return Err(e),
                Err(e) => panic!("write {i} failed: {e}"),
            }
        }
        Ok(current.expect("at least one write"))
    }

    fn config_map(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": data})
    }

    fn builtin(group: &str, kind: &str) -> ResourceInfo {
        ResourceInfo::clone(&Registry::builtin().by_kind(group, kind).unwrap())
    }

    /// A custom resource with a status subresource and a set.
    fn widgets() -> ResourceInfo {
        let crd = json!({
            "metadata": {"name": "widgets.example.org"},
            "spec": {
                "group": "example.org",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"},
                            "tags": {"type": "array", "items": {"type": "string"},
                                     "x-kubernetes-list-type": "set"},
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                        }},
                    }}},
                }],
            },
        });
        registry::crd_resources(&crd).unwrap().remove(0)
    }

    fn widget(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w"},
               "spec": spec, "status": status})
    }

    /// Each case: writes, then every manager's fields.
    #[test]
    fn writes_record_who_owns_what() {
        let cm = builtin("", "ConfigMap");
        let svc = builtin("", "Service");
        let w = widgets();
        let cases: Vec<(&str, &ResourceInfo, Vec<Write>, Value)> = vec![
            (
                "a create owns every field it sets, labels key by key",
                &cm,
                vec![Write::Create(
                    "kubectl-create",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "a", "labels": {"app": "web"}},
                           "data": {"a": "1", "b": "2"}}),
                )],
                json!({"kubectl-create/Update": {
                    "f:data": {"f:a": {}, "f:b": {}},
                    "f:metadata": {"f:labels": {"f:app": {}}},
                }}),
            ),
            (
                "an update takes over the field it changes from an applier",
                &cm,
                vec![
                    Write::Apply("op", config_map(json!({"a": "1", "b": "2"})), false),
                    Write::Update("kubectl-edit", config_map(json!({"a": "x", "b": "2"}))),
                ],
                json!({
                    "op/Apply": {"f:data": {"f:b": {}}},
                    "kubectl-edit/Update": {"f:data": {"f:a": {}}},
                }),
            ),
            (
                "an update keeps what it took before",
                &cm,
                vec![
                    Write::Create("creator", config_map(json!({"a": "1", "b": "2"}))),
                    Write::Update("edit", config_map(json!({"a": "x", "b": "2"}))),
                    Write::Update("edit", config_map(json!({"a": "x", "b": "y"}))),
                ],
                json!({"edit/Update": {"f:data": {"f:a": {}, "f:b": {}}}}),
            ),
            (
                "a removed field leaves every manager; one left with nothing goes",
                &cm,
                vec![
                    Write::Apply("op", config_map(json!({"a": "1", "b": "2"})), false),
                    Write::Apply("other", config_map(json!({"a": "1"})), false),
                    Write::Update("edit", config_map(json!({"b": "2"}))),
                ],
                json!({"op/Apply": {"f:data": {"f:b": {}}}}),
            ),
            (
                "an update that changes nothing records nothing",
                &cm,
                vec![
                    Write::Create("creator", config_map(json!({"a": "1"}))),
                    Write::Update("edit", config_map(json!({"a": "1"}))),
                ],
                json!({"creator/Update": {"f:data": {"f:a": {}}}}),
            ),
            (
                "an apply of the value an update manager set shares the field",
                &cm,
                vec![
                    Write::Create("kubectl-client-side-apply", config_map(json!({"a": "1"}))),
                    Write::Apply("kubectl", config_map(json!({"a": "1"})), false),
                ],
                json!({
                    "kubectl/Apply": {"f:data": {"f:a": {}}},
                    "kubectl-client-side-apply/Update": {"f:data": {"f:a": {}}},
                }),
            ),
            (
                "a forced apply takes the field from an update manager",
                &cm,
                vec![
                    Write::Create(
                        "kubectl-client-side-apply",
                        config_map(json!({"a": "1", "b": "1"})),
                    ),
                    Write::Apply("kubectl", config_map(json!({"a": "2"})), true),
                ],
                json!({
                    "kubectl/Apply": {"f:data": {"f:a": {}}},
                    "kubectl-client-side-apply/Update": {"f:data": {"f:b": {}}},
                }),
            ),
            (
                "an applier dropping a field an update manager took leaves it",
                &cm,
                vec![
                    Write::Apply("op", config_map(json!({"a": "1", "b": "2"})), false),
                    Write::Update("edit", config_map(json!({"a": "1", "b": "y"}))),
                    Write::Apply("op", config_map(json!({"a": "1"})), false),
                ],
                json!({
                    "op/Apply": {"f:data": {"f:a": {}}},
                    "edit/Update": {"f:data": {"f:b": {}}},
                }),
            ),
            (
                "a patch of one key of an atomic selector takes the whole selector; map-list items stay",
                &svc,
                vec![
                    Write::Apply(
                        "op",
                        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
                        false,
                    ),
                    Write::Patch(
                        "kubectl-patch",
                        json!({"spec": {"selector": {"tier": "x"}}}),
                    ),
                ],
                json!({
                    "op/Apply": {"f:spec": {"f:ports": {r#"k:{"port":80,"protocol":"TCP"}"#: {"f:port": {}}}}},
                    "kubectl-patch/Update": {"f:spec": {"f:selector": {}}},
                }),
            ),
            (
                "a patch removing a label drops it from its owner",
                &cm,
                vec![
                    Write::Apply(
                        "op",
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "a", "labels": {"app": "web", "tier": "x"}}}),
                        false,
                    ),
                    Write::Patch(
                        "kubectl-label",
                        json!({"metadata": {"labels": {"tier": null}}}),
                    ),
                ],
                json!({"op/Apply": {"f:metadata": {"f:labels": {"f:app": {}}}}}),
            ),
            (
                "a finalizer is a set item; taking one keeps the others' items",
                &cm,
                vec![
                    Write::Apply(
                        "op",
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "a", "finalizers": ["example.org/a"]}}),
                        false,
                    ),
                    Write::Update(
                        "ctrl",
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "a",
                                            "finalizers": ["example.org/a", "example.org/b"]}}),
                    ),
                ],
                json!({
                    "op/Apply": {"f:metadata": {"f:finalizers": {"v:\"example.org/a\"": {}}}},
                    "ctrl/Update": {"f:metadata": {"f:finalizers": {"v:\"example.org/b\"": {}}}},
                }),
            ),
            (
                "a request's managedFields [{}] clear them; the writer owns what it changed",
                &cm,
                vec![
                    Write::Create("creator", config_map(json!({"a": "1"}))),
                    Write::Update(
                        "edit",
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "a", "managedFields": [{}]},
                               "data": {"a": "1", "b": "2"}}),
                    ),
                ],
                json!({"edit/Update": {"f:data": {"f:b": {}}}}),
            ),
            (
                "a create leaves a status with its own subresource to /status writers",
                &w,
                vec![
                    Write::Create(
                        "kubectl-create",
                        widget(json!({"size": 1, "tags": ["x"]}), json!({"phase": "New"})),
                    ),
                    Write::Status(
                        "ctrl",
                        widget(json!({"size": 5}), json!({"phase": "Ready"})),
                    ),
                    Write::Update(
                        "edit",
                        widget(
                            json!({"size": 1, "tags": ["x", "y"]}),
                            json!({"phase": "Gone"}),
                        ),
                    ),
                ],
                json!({
                    "kubectl-create/Update": {"f:spec": {"f:size": {}, "f:tags": {"v:\"x\"": {}}}},
                    "ctrl/Update/status": {"f:status": {"f:phase": {}}},
                    "edit/Update": {"f:spec": {"f:tags": {"v:\"y\"": {}}}},
                }),
            ),
        ];
        for (name, r, writes, want) in cases {
            let obj = run(r, &writes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let want: BTreeMap<String, Value> = serde_json::from_value(want).unwrap();
            assert_eq!(owners(&obj), want, "{name}: {obj:#}");
        }
    }

    /// An apply conflicts with any manager that owns a field it sets to another value, an
    /// update manager named with the version it wrote, as the API server words it.
    #[test]
    fn applies_conflict_with_update_and_apply_managers() {
        let cm = builtin("", "ConfigMap");
        let csa = || {
            Write::Create(
                "kubectl-client-side-apply",
                config_map(json!({"a": "1", "b": "1"})),
            )
        };
        let cases: Vec<(&str, Vec<Write>, &str)> = vec![
            (
                "one field of an update manager",
                vec![
                    csa(),
                    Write::Apply("kubectl", config_map(json!({"a": "2"})), false),
                ],
                r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a"#,
            ),
            (
                "one field of an apply manager",
                vec![
                    Write::Apply("op", config_map(json!({"a": "1"})), false),
                    Write::Apply("kubectl", config_map(json!({"a": "2"})), false),
                ],
                r#"Apply failed with 1 conflict: conflict with "op": .data.a"#,
            ),
            (
                "several, grouped by manager",
                vec![
                    csa(),
                    Write::Apply(
                        "other",
                        config_map(json!({"a": "1", "b": "1", "c": "1"})),
                        false,
                    ),
                    Write::Apply(
                        "kubectl",
                        config_map(json!({"a": "2", "b": "2", "c": "2"})),
                        false,
                    ),
                ],
                "Apply failed with 5 conflicts: conflicts with \"kubectl-client-side-apply\" using v1:\n- .data.a\n- .data.b\nconflicts with \"other\":\n- .data.a\n- .data.b\n- .data.c",
            ),
            (
                "the applier's own update entry is another manager",
                vec![
                    Write::Create("kubectl", config_map(json!({"a": "1"}))),
                    Write::Apply("kubectl", config_map(json!({"a": "2"})), false),
                ],
                r#"Apply failed with 1 conflict: conflict with "kubectl" using v1: .data.a"#,
            ),
        ];
        for (name, writes, want) in cases {
            assert_eq!(run(&cm, &writes).err().as_deref(), Some(want), "{name}");
        }
    }

    /// The conflict's causes name the manager and the field apart; paths of list items read as
    /// the API server prints them.
    #[test]
    fn conflict_causes_and_paths() {
        let svc = builtin("", "Service");
        let service = |port_name: &str| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"port": 53, "protocol": "UDP", "name": port_name}]}})
        };
        let created = write(&svc, None, &Write::Create("kubectl-create", service("dns"))).unwrap();
        let e = super::apply(
            &svc,
            Some(&created),
            &service("other"),
            "kubectl",
            false,
            false,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .spec.ports[port=53,protocol="UDP"].name"#
        );
        assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
        assert_eq!(
            e.details,
            Some(json!({"causes": [{
                "reason": "FieldManagerConflict",
                "message": "conflict with \"kubectl-create\" using v1",
                "field": ".spec.ports[port=53,protocol=\"UDP\"].name",
            }]}))
        );
    }

    /// Without `fieldManager`, a write is recorded under the User-Agent up to its first `/`
    /// (printable characters, at most 128 bytes), `unknown` when that is empty, as the API
    /// server does.
    #[test]
    fn the_manager_defaults_to_the_user_agent() {
        let long = "a".repeat(140);
        let cases = [
            (
                Some("x"),
                Some("kubectl/v1.32.0 (linux/amd64) kubernetes/abc"),
                Some("x"),
            ),
            (
                None,
                Some("kubectl-client-side-apply/v1.32.0 (linux/amd64) kubernetes/abc"),
                Some("kubectl-client-side-apply"),
            ),
            (None, Some("curl/8.5.0"), Some("curl")),
            (None, Some("no-slash"), Some("no-slash")),
            (None, Some("tab\there/1"), Some("tabhere")),
            (None, Some(long.as_str()), Some(&long[..128])),
            (None, Some("/x"), Some("unknown")),
            (None, Some(""), Some("unknown")),
            (None, None, None),
        ];
        for (field_manager, user_agent, want) in cases {
            let o = WriteOptions {
                field_manager: field_manager.map(str::to_string),
                user_agent: user_agent.map(str::to_string),
                ..Default::default()
            };
            assert_eq!(
                o.manager().as_deref(),
                want,
                "{field_manager:?} {user_agent:?}"
            );
        }
        // The emulator's own writes record nothing.
        let cm = builtin("", "ConfigMap");
        let internal = ops::prepare_create(
            &cm,
            "default",
            config_map(json!({"a": "1"})),
            &WriteOptions::default(),
        )
        .unwrap()
        .object;
        assert!(internal["metadata"].get("managedFields").is_none());
    }

    /// `kubectl`'s server-side apply takes over from client-side apply where the stored value
    /// is still the annotation's, and keeps the annotation in step; other managers conflict.
    #[test]
    fn kubectl_upgrades_from_client_side_apply() {
        let cm = builtin("", "ConfigMap");
        let annotated = |a: &str, b: &str| {
            let last = format!(
                "{{\"apiVersion\":\"v1\",\"data\":{{\"a\":\"{a}\",\"b\":\"{b}\"}},\"kind\":\"ConfigMap\",\"metadata\":{{\"annotations\":{{}},\"name\":\"a\",\"namespace\":\"default\"}}}}\n"
            );
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "annotations": {super::LAST_APPLIED: last}},
                   "data": {"a": a, "b": b}})
        };
        let csa = || Write::Create("kubectl-client-side-apply", annotated("1", "1"));
        let hand_edit = || Write::Patch("kubectl-edit", json!({"data": {"b": "5"}}));
        let cases: Vec<(&str, Vec<Write>, Result<Value, &str>)> = vec![
            (
                "kubectl takes the fields still as last applied",
                vec![
                    csa(),
                    Write::Apply("kubectl", config_map(json!({"a": "2", "b": "<&>"})), false),
                ],
                Ok(json!({
                    "kubectl/Apply": {"f:data": {"f:a": {}, "f:b": {}}},
                    "kubectl-client-side-apply/Update": {"f:metadata": {"f:annotations": {
                        format!("f:{}", super::LAST_APPLIED): {}
                    }}},
                })),
            ),
            (
                "another manager conflicts",
                vec![
                    csa(),
                    Write::Apply("op", config_map(json!({"a": "2"})), false),
                ],
                Err(
                    r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a"#,
                ),
            ),
            (
                "a field changed since conflicts, and only it",
                vec![
                    csa(),
                    hand_edit(),
                    Write::Apply("kubectl", config_map(json!({"a": "2", "b": "2"})), false),
                ],
                Err(
                    r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.b"#,
                ),
            ),
        ];
        for (name, writes, want) in cases {
            let got = run(&cm, &writes);
            match (got, want) {
                (Ok(obj), Ok(want)) => {
                    let want: BTreeMap<String, Value> = serde_json::from_value(want).unwrap();
                    assert_eq!(owners(&obj), want, "{name}: {obj:#}");
                    assert_eq!(
                        obj["metadata"]["annotations"][super::LAST_APPLIED],
                        "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"2\",\"b\":\"\\u003c\\u0026\\u003e\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}\n",
                        "{name}"
                    );
                }
                (Err(e), Err(want)) => assert_eq!(e, want, "{name}"),
                (got, want) => panic!("{name}: {got:?}, want {want:?}"),
            }
        }
    }

    /// Entries come in the API server's order: by operation (applies first), time, manager.
    #[test]
    fn entries_are_ordered_as_the_api_server_orders_them() {
        let entry = |manager: &str, operation: &str, time: &str| {
            json!({"manager": manager, "operation": operation, "apiVersion": "v1", "time": time,
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}})
        };
        let mut obj = json!({"metadata": {}});
        super::write_entries(
            &mut obj,
            Vec::new(),
            vec![
                entry("zeta", "Update", "2025-01-01T00:00:01Z"),
                entry("beta", "Update", "2025-01-01T00:00:02Z"),
                entry("alpha", "Update", "2025-01-01T00:00:02Z"),
                entry("op", "Apply", "2025-01-01T00:00:03Z"),
            ],
        );
        let order: Vec<&str> = obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["op", "zeta", "alpha", "beta"]);
    }
}
