//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds.
//!
//! This follows `k8s.io/apimachinery/pkg/util/strategicpatch` (`StrategicMergePatch`, i.e.
//! `mergeMap` / `mergeSlice` with `MergeParallelList` and `IgnoreUnmatchedNulls`), the code the
//! API server runs for `kubectl apply` (client-side), `kubectl edit`, `kubectl patch` and
//! controllers' strategic patches:
//!
//! * Maps merge recursively; a `null` value deletes the key.
//! * A list field is merged only when its Go struct tag says `patchStrategy:"merge"`: by its
//!   `patchMergeKey` for lists of objects, as a union for lists of primitives. Every other list is
//!   replaced whole; a map whose tag says `patchStrategy:"replace"` is replaced whole. The tags
//!   come from Kubernetes' own schemas, which mirror them as `x-kubernetes-patch-strategy` and
//!   `x-kubernetes-patch-merge-key` ([`crate::merge`]); kinds the schemas do not have get
//!   JSON-merge-patch semantics (maps merged, every list replaced). Maps marked
//!   `x-kubernetes-map-type: atomic` still merge here: that extension is server-side apply's,
//!   and the API server's strategic merge reads only the struct tags.
//! * Directives: `$patch: replace | delete` in a map and as list elements, `$retainKeys`,
//!   `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>`.
//! * Element order follows upstream: the `$setElementOrder` list wins; without it, items named in
//!   the patch keep the patch's order and server-only items are interleaved by their live order.
//!   An item that is new (not in the live list) therefore lands *before* the remaining
//!   server-only items, exactly as the real API server does (`[a, b]` patched with `[c]` gives
//!   `[c, a, b]`); `kubectl apply` sends `$setElementOrder` and gets its own order.
//!
//! Differences from upstream, all about inputs upstream panics on or about what a typed decode
//! would drop anyway:
//! * `$patch: merge` in a map is accepted as the default (upstream rejects it as an unknown
//!   patch type); in a list it is rejected as upstream does.
//! * Directive keys (`$patch`, `$retainKeys`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`)
//!   are stripped from patch values that are copied verbatim into the result. The API server
//!   decodes the merged map into a Go struct, which drops them; this emulator stores JSON.
//! * Inputs that make the Go code panic (null list elements, lists of objects in a primitive
//!   position) return an error instead, and values nested deeper than serde_json's own parse
//!   limit are refused rather than risking the stack. A `$setElementOrder` for a list that is
//!   empty on both sides is a no-op rather than an error. JSON numbers are one element type
//!   (Go tells int64 and float64 apart).
//!
//! Nothing here panics; malformed patches come back as `Err(message)` with upstream's wording.

use serde_json::{Map, Value};

use crate::merge::Node;

type Obj = Map<String, Value>;

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList";

/// Deepest nesting accepted (serde_json refuses to parse deeper documents anyway).
const MAX_DEPTH: usize = 128;

const ERR_BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_SET_ORDER: &str = "invalid patch format of setElementOrder list";
const ERR_LIST_OF_LISTS: &str = "lists of lists are not supported";

/// A list's strategy: `None` replaces it; `Primitive` is a union of primitives, `Key("name")` a
/// merge of objects by that key.
pub use crate::merge::PatchMerge as ListMerge;

/// Where in the patched object a merge is, from the schemas ([`crate::merge`]).
type Ty = Node;

/// Applies a strategic merge patch to `original`, an object of the built-in kind whose schema
/// root is `root` ([`Node::root`]; a kind the schemas do not have merges every map and replaces
/// every list). Returns the merged object or Err(message) for malformed patches (patch not an
/// object, bad directive values).
///
/// A `null` patch is an empty patch, as upstream (it unmarshals to an empty map).
pub fn apply(original: &Value, patch: &Value, root: Node) -> Result<Value, String> {
    let patch = match patch {
        Value::Object(m) => m.clone(),
        Value::Null => Obj::new(),
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_type_word(other)
            ));
        }
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        Value::Null => Obj::new(),
        _ => return Err("invalid JSON document".to_string()),
    };
    if too_deep_map(&original) || too_deep_map(&patch) {
        return Err(format!("document nesting exceeds {MAX_DEPTH} levels"));
    }
    merge_map(original, patch, root).map(Value::Object)
}

/// The type of field `name` at `ty` (for a list: of its items) and its list strategy.
fn field(ty: Ty, name: &str) -> (Ty, Option<ListMerge>) {
    let (field, child) = ty.field(name);
    (child, field.patch_merge())
}

/// Whether the map field `name` at `ty` is replaced whole (`patchStrategy:"replace"`).
fn replaces(ty: Ty, name: &str) -> bool {
    ty.field(name).0.patch_replaces()
}

fn merge_key_of(strategy: Option<ListMerge>) -> &'static str {
    match strategy {
        Some(ListMerge::Key(k)) => k,
        _ => "",
    }
}

// ---------------------------------------------------------------------------------------------
// Maps
// ---------------------------------------------------------------------------------------------

fn merge_map(mut original: Obj, mut patch: Obj, ty: Ty) -> Result<Obj, String> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
        match directive.as_str() {
            Some("replace") => {
                take_key(&mut patch, DIRECTIVE_MARKER);
                return Ok(strip_map(patch));
            }
            Some("delete") => return Ok(Obj::new()),
            Some("merge") => {
                take_key(&mut patch, DIRECTIVE_MARKER);
            }
            _ => return Err(bad_patch_type(directive, &patch)),
        }
    }

    apply_retain_keys(&mut original, &mut patch)?;
    apply_set_element_order(&mut original, &mut patch, ty)?;

    for (patch_key, patch_value) in patch {
        let (key, is_delete_list) = if patch_key.starts_with(DELETE_PRIMITIVE_PREFIX) {
            (extract_key(&patch_key, DELETE_PRIMITIVE_PREFIX)?, true)
        } else {
            (patch_key, false)
        };

        // `null` deletes; unmatched nulls are dropped.
        if patch_value.is_null() {
            take_key(&mut original, &key);
            continue;
        }

        let Some(original_value) = original.get_mut(&key) else {
            if !is_delete_list && let Some(v) = remove_directives(patch_value) {
                original.insert(key, v);
            }
            continue;
        };

        match (original_value, patch_value) {
            (Value::Object(_), Value::Object(p)) if replaces(ty, &key) => {
                original.insert(key, Value::Object(strip_map(p)));
            }
            (Value::Object(o), Value::Object(p)) => {
                let (child, _) = field(ty, &key);
                let o = std::mem::take(o);
                let merged = merge_map(o, p, child)?;
                original.insert(key, Value::Object(merged));
            }
            (Value::Array(o), Value::Array(p)) => {
                let (elem, strategy) = field(ty, &key);
                let o = std::mem::take(o);
                let merged = merge_slice_handler(o, p, elem, strategy, is_delete_list)?;
                original.insert(key, Value::Array(merged));
            }
            (o, p) if same_json_type(o, &p) => *o = p,
            (_, p) => {
                // Type changed: take the patch value as it is.
                if !is_delete_list {
                    match remove_directives(p) {
                        Some(v) => {
                            original.insert(key, v);
                        }
                        None => {
                            take_key(&mut original, &key);
                        }
                    }
                }
            }
        }
    }
    Ok(original)
}

/// `$retainKeys`: drop every key of `original` not listed; the patch may only set listed keys.
fn apply_retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<(), String> {
    let Some(retain) = take_key(patch, RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(ERR_BAD_RETAIN_KEYS.to_string());
    };
    let listed = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_PRIMITIVE_PREFIX) || k.starts_with(SET_ORDER_PREFIX)
        {
            continue;
        }
        if !listed(k) {
            return Err(ERR_BAD_RETAIN_KEYS.to_string());
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merge `<field>` now and order the result by the directive.
fn apply_set_element_order(original: &mut Obj, patch: &mut Obj, ty: Ty) -> Result<(), String> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ORDER_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = take_key(patch, &key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg_type("[]interface {}", &order));
        };
        let name = extract_key(&key, SET_ORDER_PREFIX)?;
        let original_list = list_field(original, &name)?;
        let patch_list = list_field(patch, &name)?;

        let (elem, strategy) = field(ty, &name);
        let merge_key = merge_key_of(strategy);
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or_default(),
            &order,
            merge_key,
        )?;
        let kind = element_kind(&[
            original_list.as_deref().unwrap_or_default(),
            patch_list.as_deref().unwrap_or_default(),
        ])?;

        let live = original_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => remove_directives_list(p),
            (Some(o), Some(p)) => merge_slice_handler(o, p, elem, strategy, false)?,
            (None, None) => continue,
        };
        let ordered = match kind {
            // Nothing to order, or a list of objects without merge key (upstream panics).
            None => merged,
            Some(ElemKind::Map) if merge_key.is_empty() => merged,
            Some(kind) => {
                let (patch_items, server_only) = partition(merged, &order, merge_key)?;
                normalize_element_order(patch_items, server_only, &order, &live, merge_key, kind)?
            }
        };
        original.insert(name.clone(), Value::Array(ordered));
        take_key(patch, &name);
    }
    Ok(())
}

/// The list at `obj[name]`, if any (a `null` counts as absent).
fn list_field(obj: &Obj, name: &str) -> Result<Option<Vec<Value>>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(other) => Err(bad_arg_type("[]interface {}", other)),
    }
}

/// Checks that the patch list's items appear in the `$setElementOrder` list, in that order
/// (deletions and other directive elements are ignored).
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), String> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        let mut kept = Vec::new();
        for v in patch_list {
            let Value::Object(m) = v else {
                return Err(bad_arg_type("map[string]interface {}", v));
            };
            if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some("delete") {
                kept.push(v);
            }
        }
        kept
    };
    let (mut p, mut s) = (0, 0);
    while p < non_delete.len() && s < order.len() {
        if non_delete[p]
            .as_object()
            .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
        {
            p += 1;
            continue;
        }
        if merge_key_value_equal(non_delete[p], &order[s], merge_key)? {
            p += 1;
        }
        s += 1;
    }
    if p < non_delete.len() && s >= order.len() {
        return Err(format!(
            "the order in patch list:\n{}\n doesn't match {SET_ORDER_PREFIX} list:\n{}",
            go_fmt_list(patch_list),
            go_fmt_list(order)
        ));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, String> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = left
        .as_object()
        .ok_or_else(|| bad_arg_type("map[string]interface {}", left))?;
    let r = right
        .as_object()
        .ok_or_else(|| bad_arg_type("map[string]interface {}", right))?;
    let lv = l.get(merge_key).ok_or_else(|| no_merge_key(l, merge_key))?;
    let rv = r.get(merge_key).ok_or_else(|| no_merge_key(r, merge_key))?;
    Ok(lv == rv)
}

// ---------------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ElemKind {
    Map,
    String,
    Number,
    Bool,
    Null,
}

/// The common element type of the lists; `None` when they are all empty.
fn element_kind(lists: &[&[Value]]) -> Result<Option<ElemKind>, String> {
    let mut kind = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = match v {
            Value::Array(_) => return Err(ERR_LIST_OF_LISTS.to_string()),
            Value::Object(_) => ElemKind::Map,
            Value::String(_) => ElemKind::String,
            Value::Number(_) => ElemKind::Number,
            Value::Bool(_) => ElemKind::Bool,
            Value::Null => ElemKind::Null,
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                let all: Vec<String> = lists.iter().map(|l| go_fmt_list(l)).collect();
                return Err(format!(
                    "list element types are not identical: [{}]",
                    all.join(" ")
                ));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    elem: Ty,
    strategy: Option<ListMerge>,
    is_delete_list: bool,
) -> Result<Vec<Value>, String> {
    // Delete lists are handled the same way whatever the field's strategy.
    if strategy.is_some() || is_delete_list {
        merge_slice(
            original,
            patch,
            elem,
            merge_key_of(strategy),
            is_delete_list,
        )
    } else {
        Ok(patch.into_iter().map(strip).collect())
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    elem: Ty,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, String> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let Some(kind) = element_kind(&[&original, &patch])? else {
        return Ok(original);
    };

    let (original, patch, merged) = if kind != ElemKind::Map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err("cannot merge lists without merge key for type map".to_string());
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged =
            merge_slice_without_special_elements(original.clone(), &patch, merge_key, elem)?;
        (original, patch, merged)
    };

    let (patch_items, server_only) = partition(merged, &patch, merge_key)?;
    normalize_element_order(patch_items, server_only, &patch, &original, merge_key, kind)
}

/// Applies `$patch` list elements (`delete` by merge key, `replace` of the whole list) and
/// returns the updated original and the patch without them.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(bad_arg_type("map[string]interface {}", &v));
        };
        let Some(directive) = m.get(DIRECTIVE_MARKER) else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(key_value) = m.get(merge_key) else {
                    return Err(no_merge_key(m, merge_key));
                };
                for (i, o) in original.iter().enumerate() {
                    if !o.is_object() {
                        return Err(format!("value for key {i} is not a map"));
                    }
                }
                original.retain(|o| o.get(merge_key) != Some(key_value));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err("merging lists cannot yet be specified in the patch".to_string());
            }
            _ => return Err(bad_patch_type(directive, m)),
        }
    }
    if replace {
        Ok((plain.into_iter().map(strip).collect(), Vec::new()))
    } else {
        Ok((original, plain))
    }
}

/// Merges each patch element into the original element with the same merge key, or appends it.
fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    elem: Ty,
) -> Result<Vec<Value>, String> {
    for v in patch {
        let Value::Object(m) = v else {
            return Err(bad_arg_type("map[string]interface {}", v));
        };
        let Some(key_value) = m.get(merge_key) else {
            return Err(no_merge_key(m, merge_key));
        };
        match find_map_in_slice(&original, merge_key, key_value)? {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut original[i]) else {
                    return Err(format!("value for key {i} is not a map"));
                };
                original[i] = Value::Object(merge_map(o, m.clone(), elem)?);
            }
            None => original.push(strip(v.clone())),
        }
    }
    Ok(original)
}

fn find_map_in_slice(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>, String> {
    for (i, v) in list.iter().enumerate() {
        let Value::Object(m) = v else {
            return Err(format!("value for key {i} is not a map"));
        };
        if m.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Splits `merged` into the items named in `by` and the rest (server-only items).
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut named = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        let found = if merge_key.is_empty() {
            by.contains(&v)
        } else {
            let Value::Object(m) = &v else {
                return Err(bad_arg_type("map[string]interface {}", &v));
            };
            let Some(key_value) = m.get(merge_key) else {
                return Err(no_merge_key(m, merge_key));
            };
            find_map_in_slice(by, merge_key, key_value)?.is_some()
        };
        if found {
            named.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((named, server_only))
}

/// Sorts the patch items by `patch_order` and the server-only items by `server_order`, then
/// interleaves them (upstream `normalizeElementOrder`).
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, String> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(
        server_only,
        patch_items,
        server_order,
        merge_key,
        kind,
    ))
}

fn normalize_slice_order(
    mut to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, String> {
    let mut to_delete = Vec::new();
    if kind == ElemKind::Map {
        for v in to_sort.iter().chain(order.iter()) {
            let Value::Object(m) = v else {
                return Err(bad_arg_type("map[string]interface {}", v));
            };
            if !m.contains_key(merge_key) {
                return Err(no_merge_key(m, merge_key));
            }
        }
        let (keep, delete): (Vec<Value>, Vec<Value>) = to_sort
            .into_iter()
            .partition(|v| v.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some("delete"));
        to_sort = keep;
        to_delete = delete;
    }
    to_sort.sort_by_key(|v| index_of(order, v, merge_key, kind).unwrap_or(usize::MAX));
    to_sort.extend(to_delete);
    Ok(to_sort)
}

/// Merges two sorted lists by their positions in `server_order`; an item of `left` goes first
/// only when both items are in `server_order` and it comes earlier there.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let li = index_of(server_order, l, merge_key, kind);
        let ri = index_of(server_order, r, merge_key, kind);
        let take_left = matches!((li, ri), (Some(li), Some(ri)) if li < ri);
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out.extend(left);
    out.extend(right);
    out
}

fn index_of(list: &[Value], item: &Value, merge_key: &str, kind: ElemKind) -> Option<usize> {
    if kind == ElemKind::Map {
        let key = |v: &Value| v.as_object().and_then(|m| m.get(merge_key)).cloned();
        let wanted = key(item);
        list.iter().position(|v| key(v) == wanted)
    } else {
        list.iter().position(|v| v == item)
    }
}

// ---------------------------------------------------------------------------------------------
// Directive cleanup
// ---------------------------------------------------------------------------------------------

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE_MARKER
        || k == RETAIN_KEYS
        || k.starts_with(SET_ORDER_PREFIX)
        || k.starts_with(DELETE_PRIMITIVE_PREFIX)
}

/// Removes directive keys everywhere in a value copied verbatim from the patch.
fn strip(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_map(m)),
        Value::Array(a) => Value::Array(a.into_iter().map(strip).collect()),
        other => other,
    }
}

fn strip_map(m: Obj) -> Obj {
    m.into_iter()
        .filter(|(k, v)| !is_directive_key(k) && !v.is_null())
        .map(|(k, v)| (k, strip(v)))
        .collect()
}

/// Upstream `removeDirectives` for a value with nothing to merge into: a map carrying `$patch`
/// disappears (`None`), as does a list element that is one; other directive keys are stripped.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter(|(k, v)| !is_directive_key(k) && !v.is_null())
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(remove_directives_list(a))),
        other => Some(other),
    }
}

fn remove_directives_list(a: Vec<Value>) -> Vec<Value> {
    a.into_iter().filter_map(remove_directives).collect()
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `$setElementOrder/<key>` → `<key>` (the prefix must be exact and followed by `/`).
fn extract_key(s: &str, prefix: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((head, rest)) if head == prefix => Ok(rest.to_string()),
        _ if prefix == SET_ORDER_PREFIX => Err(ERR_BAD_SET_ORDER.to_string()),
        _ => Err(ERR_BAD_PRIMITIVE_LIST.to_string()),
    }
}

/// Removes `key` from `m`, keeping the order of the other keys whether or not serde_json's
/// `preserve_order` feature is on (`Map::remove` swap-removes with it).
fn take_key(m: &mut Obj, key: &str) -> Option<Value> {
    let v = m.get_mut(key).map(std::mem::take)?;
    m.retain(|k, _| k != key);
    Some(v)
}

fn same_json_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Whether a value nested in `m` (depth 1) goes deeper than [`MAX_DEPTH`]; iterative, so
/// it cannot overflow the stack itself.
fn too_deep_map(m: &Obj) -> bool {
    let mut stack: Vec<(&Value, usize)> = m.values().map(|v| (v, 1)).collect();
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return true;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, depth + 1))),
            Value::Object(m) => stack.extend(m.values().map(|x| (x, depth + 1))),
            _ => {}
        }
    }
    false
}

/// The word Go's encoding/json uses for a JSON value's type.
fn json_type_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The Go type name of a decoded JSON value, as `reflect.TypeOf` prints it.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// A value the way Go's `%v` prints a decoded JSON value (`map[k:v ...]`, `[a b]`).
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => go_fmt_list(a),
        Value::Object(m) => go_fmt_map(m),
    }
}

fn go_fmt_list(a: &[Value]) -> String {
    let items: Vec<String> = a.iter().map(go_fmt).collect();
    format!("[{}]", items.join(" "))
}

fn go_fmt_map(m: &Obj) -> String {
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let items: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
        .collect();
    format!("map[{}]", items.join(" "))
}

fn bad_arg_type(expected: &str, actual: &Value) -> String {
    format!(
        "expected a {expected}, but received a {}",
        go_type_name(actual)
    )
}

fn no_merge_key(m: &Obj, key: &str) -> String {
    format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt_map(m)
    )
}

fn bad_patch_type(directive: &Value, m: &Obj) -> String {
    format!(
        "unknown patch type: {} in map: {}",
        go_fmt(directive),
        go_fmt_map(m)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema root of a kind by its name alone (the tests name kinds, not groups).
    fn root(kind: &str) -> Node {
        let group = match kind {
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "ControllerRevision" => {
                "apps"
            }
            "Job" | "CronJob" => "batch",
            "Ingress" | "IngressClass" | "NetworkPolicy" => "networking.k8s.io",
            "PodDisruptionBudget" => "policy",
            "HorizontalPodAutoscaler" => "autoscaling",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
                "admissionregistration.k8s.io"
            }
            "CSINode" | "StorageClass" => "storage.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => {
                "rbac.authorization.k8s.io"
            }
            "Lease" => "coordination.k8s.io",
            "Site" => "sites.ecmwf.int",
            _ => "",
        };
        Node::root(group, "v1", kind)
    }

    struct Case {
        name: &'static str,
        kind: &'static str,
        original: Value,
        patch: Value,
        want: Value,
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "map merge and null delete",
                kind: "ConfigMap",
                original: json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
                                  "data": {"x": "1", "y": "2"}}),
                patch: json!({"metadata": {"labels": {"a": null, "c": "3"}},
                               "data": {"y": "20", "z": "3"}, "binaryData": null}),
                want: json!({"metadata": {"name": "c", "labels": {"b": "2", "c": "3"}},
                              "data": {"x": "1", "y": "20", "z": "3"}}),
            },
            Case {
                name: "unmatched nested nulls are dropped from new values",
                kind: "ConfigMap",
                original: json!({"metadata": {"name": "c"}}),
                patch: json!({"metadata": {"annotations": {"a": "1", "gone": null}}}),
                want: json!({"metadata": {"name": "c", "annotations": {"a": "1"}}}),
            },
            Case {
                name: "containers merged by name: change one image, add one, keep others",
                kind: "Pod",
                original: json!({"spec": {"containers": [
                    {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "proxy:1"}]}}),
                patch: json!({"spec": {"containers": [
                    {"name": "sidecar", "image": "proxy:2"},
                    {"name": "extra", "image": "busybox"}]}}),
                // Upstream order: patch items in patch order, server-only `app` stays before
                // `sidecar` (their live order), the new `extra` follows the patch order.
                want: json!({"spec": {"containers": [
                    {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "proxy:2"},
                    {"name": "extra", "image": "busybox"}]}}),
            },
            Case {
                name: "a new element alone goes before server-only elements (upstream order)",
                kind: "Deployment",
                original: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}}}}),
                patch: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "c"}]}}}}),
                want: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "c"}, {"name": "a", "image": "a"},
                    {"name": "b", "image": "b"}]}}}}),
            },
            Case {
                name: "env merged by name inside a container",
                kind: "Deployment",
                original: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "app", "image": "app:1", "env": [
                        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}}),
                patch: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "app", "env": [{"name": "A", "value": "10"},
                                            {"name": "B", "value": "2"},
                                            {"name": "C", "value": "3"}]}]}}}}),
                want: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "app", "image": "app:1", "env": [
                        {"name": "A", "value": "10"}, {"name": "B", "value": "2"},
                        {"name": "C", "value": "3"}]}]}}}}),
            },
            Case {
                name: "env valueFrom replaced by value via null",
                kind: "Pod",
                original: json!({"spec": {"containers": [{"name": "app", "env": [
                    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}),
                patch: json!({"spec": {"containers": [{"name": "app", "env": [
                    {"name": "A", "value": "x", "valueFrom": null}]}]}}),
                want: json!({"spec": {"containers": [{"name": "app", "env": [
                    {"name": "A", "value": "x"}]}]}}),
            },
            Case {
                name: "container ports merged by containerPort",
                kind: "Pod",
                original: json!({"spec": {"containers": [{"name": "app", "ports": [
                    {"containerPort": 80, "name": "http"},
                    {"containerPort": 443, "name": "https"}]}]}}),
                patch: json!({"spec": {"containers": [{"name": "app", "ports": [
                    {"containerPort": 80, "name": "web"},
                    {"containerPort": 443, "name": "https"},
                    {"containerPort": 9090, "name": "metrics"}]}]}}),
                want: json!({"spec": {"containers": [{"name": "app", "ports": [
                    {"containerPort": 80, "name": "web"},
                    {"containerPort": 443, "name": "https"},
                    {"containerPort": 9090, "name": "metrics"}]}]}}),
            },
            Case {
                name: "Service ports merged by port, externalIPs replaced",
                kind: "Service",
                original: json!({"spec": {"ports": [
                    {"port": 80, "targetPort": 8080, "name": "http"},
                    {"port": 443, "targetPort": 8443, "name": "https"}],
                    "externalIPs": ["1.1.1.1", "2.2.2.2"]}}),
                patch: json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}],
                               "externalIPs": ["3.3.3.3"]}}),
                want: json!({"spec": {"ports": [
                    {"port": 80, "targetPort": 9090, "name": "http"},
                    {"port": 443, "targetPort": 8443, "name": "https"}],
                    "externalIPs": ["3.3.3.3"]}}),
            },
            Case {
                name: "volumes merged by name, tolerations replaced",
                kind: "Pod",
                original: json!({"spec": {
                    "volumes": [{"name": "data", "emptyDir": {}},
                                {"name": "cfg", "configMap": {"name": "a"}}],
                    "tolerations": [{"key": "a", "operator": "Exists"}]}}),
                patch: json!({"spec": {
                    "volumes": [{"name": "cfg", "configMap": {"name": "b"}}],
                    "tolerations": [{"key": "b", "operator": "Exists"}]}}),
                want: json!({"spec": {
                    "volumes": [{"name": "data", "emptyDir": {}},
                                {"name": "cfg", "configMap": {"name": "b"}}],
                    "tolerations": [{"key": "b", "operator": "Exists"}]}}),
            },
            Case {
                name: "$patch delete of a list element",
                kind: "Pod",
                original: json!({"spec": {"containers": [
                    {"name": "app", "image": "a"}, {"name": "old", "image": "o"}]}}),
                patch: json!({"spec": {"containers": [{"name": "old", "$patch": "delete"}]}}),
                want: json!({"spec": {"containers": [{"name": "app", "image": "a"}]}}),
            },
            Case {
                name: "$patch replace of a merging list",
                kind: "Pod",
                original: json!({"spec": {"containers": [
                    {"name": "app", "image": "a"}, {"name": "old", "image": "o"}]}}),
                patch: json!({"spec": {"containers": [
                    {"$patch": "replace"}, {"name": "new", "image": "n"}]}}),
                want: json!({"spec": {"containers": [{"name": "new", "image": "n"}]}}),
            },
            Case {
                name: "$patch replace of a map",
                kind: "Deployment",
                original: json!({"spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}}}),
                patch: json!({"spec": {"selector": {"matchLabels": {
                    "$patch": "replace", "c": "3"}}}}),
                want: json!({"spec": {"selector": {"matchLabels": {"c": "3"}}}}),
            },
            Case {
                name: "$patch delete of a map leaves it empty",
                kind: "Pod",
                original: json!({"spec": {"affinity": {"nodeAffinity": {}}, "x": 1}}),
                patch: json!({"spec": {"affinity": {"$patch": "delete"}}}),
                want: json!({"spec": {"affinity": {}, "x": 1}}),
            },
            Case {
                name: "$patch merge in a map is the default",
                kind: "ConfigMap",
                original: json!({"data": {"a": "1"}}),
                patch: json!({"data": {"$patch": "merge", "b": "2"}}),
                want: json!({"data": {"a": "1", "b": "2"}}),
            },
            Case {
                name: "$retainKeys keeps only listed keys after merging",
                kind: "Deployment",
                original: json!({"spec": {"strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1}}}}),
                patch: json!({"spec": {"strategy": {"$retainKeys": ["type"],
                    "type": "Recreate"}}}),
                want: json!({"spec": {"strategy": {"type": "Recreate"}}}),
            },
            Case {
                name: "$retainKeys with a volume source switch",
                kind: "Pod",
                original: json!({"spec": {"volumes": [
                    {"name": "v", "emptyDir": {"medium": "Memory"}}]}}),
                patch: json!({"spec": {"volumes": [
                    {"$retainKeys": ["hostPath", "name"], "name": "v",
                     "hostPath": {"path": "/tmp"}}]}}),
                want: json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/tmp"}}]}}),
            },
            Case {
                name: "$setElementOrder orders the merged list",
                kind: "Pod",
                original: json!({"spec": {"containers": [
                    {"name": "a", "image": "a"}, {"name": "b", "image": "b"},
                    {"name": "c", "image": "c"}]}}),
                patch: json!({"spec": {
                    "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "d"}],
                    "containers": [{"name": "a", "image": "a2"}, {"name": "d", "image": "d"}]}}),
                want: json!({"spec": {"containers": [
                    {"name": "b", "image": "b"}, {"name": "c", "image": "c"},
                    {"name": "a", "image": "a2"}, {"name": "d", "image": "d"}]}}),
            },
            Case {
                name: "$setElementOrder alone reorders",
                kind: "Pod",
                original: json!({"spec": {"containers": [
                    {"name": "b", "image": "b"}, {"name": "a", "image": "a"}]}}),
                patch: json!({"spec": {"$setElementOrder/containers": [
                    {"name": "a"}, {"name": "b"}]}}),
                want: json!({"spec": {"containers": [
                    {"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}}),
            },
            Case {
                name: "$setElementOrder on a primitive list",
                kind: "Pod",
                original: json!({"metadata": {"finalizers": ["b", "a"]}}),
                patch: json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"],
                                            "finalizers": ["c"]}}),
                want: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            },
            Case {
                name: "$deleteFromPrimitiveList for finalizers",
                kind: "Pod",
                original: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}}),
                want: json!({"metadata": {"finalizers": ["a", "c"]}}),
            },
            Case {
                name: "$deleteFromPrimitiveList with a missing list is a no-op",
                kind: "Pod",
                original: json!({"metadata": {"name": "p"}}),
                patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
                want: json!({"metadata": {"name": "p"}}),
            },
            Case {
                name: "finalizers union keeps the patch's order for named items",
                kind: "ConfigMap",
                original: json!({"metadata": {"finalizers": ["a", "b"]}}),
                patch: json!({"metadata": {"finalizers": ["a", "b", "c", "b"]}}),
                want: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            },
            Case {
                name: "finalizers union: a new item alone goes first (upstream order)",
                kind: "Secret",
                original: json!({"metadata": {"finalizers": ["a", "b"]}}),
                patch: json!({"metadata": {"finalizers": ["c"]}}),
                want: json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
            },
            Case {
                name: "ownerReferences merged by uid",
                kind: "ConfigMap",
                original: json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "name": "a", "kind": "Site"}]}}),
                patch: json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "controller": true}]}}),
                want: json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "name": "a", "kind": "Site", "controller": true}]}}),
            },
            Case {
                name: "unknown kind replaces lists (even finalizers) and merges maps",
                kind: "Site",
                original: json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
                                  "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
                patch: json!({"metadata": {"finalizers": ["b"], "labels": {"y": "2"}},
                               "spec": {"containers": [{"name": "a", "image": "i"}]}}),
                want: json!({"metadata": {"finalizers": ["b"], "labels": {"x": "1", "y": "2"}},
                              "spec": {"containers": [{"name": "a", "image": "i"}]}}),
            },
            Case {
                name: "kubectl rollout restart on a StatefulSet",
                kind: "StatefulSet",
                original: json!({"metadata": {"name": "db"}, "spec": {"replicas": 1,
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [{"name": "db", "image": "pg"}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
                patch: json!({"spec": {"template": {"metadata": {"annotations": {
                    "kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}}}}}),
                want: json!({"metadata": {"name": "db"}, "spec": {"replicas": 1,
                    "template": {"metadata": {"labels": {"app": "db"}, "annotations": {
                        "kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}},
                                 "spec": {"containers": [{"name": "db", "image": "pg"}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
            },
            Case {
                name: "StatefulSet volumeClaimTemplates replaced, status conditions by type",
                kind: "StatefulSet",
                original: json!({"spec": {"volumeClaimTemplates": [
                    {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]},
                    "status": {"conditions": [{"type": "X", "status": "True"},
                                              {"type": "Y", "status": "True"}]}}),
                patch: json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "c"}}]},
                               "status": {"conditions": [{"type": "Y", "status": "False"}]}}),
                want: json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "c"}}]},
                    "status": {"conditions": [{"type": "X", "status": "True"},
                                              {"type": "Y", "status": "False"}]}}),
            },
            Case {
                name: "kubectl apply patch with last-applied-configuration",
                kind: "Deployment",
                original: json!({
                    "metadata": {"name": "web", "annotations": {
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"old\":true}\n",
                        "deployment.kubernetes.io/revision": "1"}},
                    "spec": {"replicas": 1, "template": {"spec": {"containers": [
                        {"name": "web", "image": "nginx:1",
                         "env": [{"name": "A", "value": "1"}, {"name": "OLD", "value": "x"}]},
                        {"name": "gone", "image": "busybox"}]}}}}),
                patch: json!({
                    "metadata": {"annotations": {
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}\n"}},
                    "spec": {"replicas": 2, "template": {"spec": {
                        "$setElementOrder/containers": [{"name": "web"}, {"name": "log"}],
                        "containers": [
                            {"$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                             "name": "web", "image": "nginx:2",
                             "env": [{"name": "B", "value": "2"},
                                     {"$patch": "delete", "name": "OLD"}]},
                            {"name": "log", "image": "fluent"},
                            {"$patch": "delete", "name": "gone"}]}}}}),
                want: json!({
                    "metadata": {"name": "web", "annotations": {
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}\n",
                        "deployment.kubernetes.io/revision": "1"}},
                    "spec": {"replicas": 2, "template": {"spec": {"containers": [
                        {"name": "web", "image": "nginx:2",
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                        {"name": "log", "image": "fluent"}]}}}}),
            },
            Case {
                name: "CronJob pod template path",
                kind: "CronJob",
                original: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}}}}}),
                patch: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "b", "image": "2"}]}}}}}}),
                want: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}}}}}),
            },
            Case {
                name: "directives vanish from values with nothing to merge into",
                kind: "Pod",
                original: json!({"spec": {}}),
                patch: json!({"spec": {"containers": [
                    {"name": "a", "image": "a", "$setElementOrder/env": [{"name": "X"}],
                     "env": [{"name": "X", "value": "1"}]},
                    {"name": "gone", "$patch": "delete"}],
                    "affinity": {"$patch": "delete"}}}),
                want: json!({"spec": {"containers": [
                    {"name": "a", "image": "a", "env": [{"name": "X", "value": "1"}]}]}}),
            },
            Case {
                name: "type change takes the patch value",
                kind: "ConfigMap",
                original: json!({"data": {"a": "1"}, "x": [1]}),
                patch: json!({"data": "oops", "x": {"y": 1}}),
                want: json!({"data": "oops", "x": {"y": 1}}),
            },
            Case {
                name: "null patch is an empty patch",
                kind: "Pod",
                original: json!({"a": 1}),
                patch: Value::Null,
                want: json!({"a": 1}),
            },
        ]
    }

    #[test]
    fn apply_cases() {
        for c in cases() {
            let got = apply(&c.original, &c.patch, root(c.kind))
                .unwrap_or_else(|e| panic!("{}: unexpected error {e}", c.name));
            assert_eq!(got, c.want, "{}", c.name);
            // Key-by-key equality ignores map order; check list order explicitly too.
            assert_eq!(got.to_string(), c.want.to_string(), "{} (order)", c.name);
        }
    }

    #[test]
    fn apply_errors() {
        let pod = json!({"metadata": {"finalizers": ["a"]},
                         "spec": {"containers": [{"name": "a"}]}});
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "patch is an array",
                json!([1]),
                "json: cannot unmarshal array into Go value of type map[string]interface {}",
            ),
            (
                "patch is a string",
                json!("x"),
                "json: cannot unmarshal string into Go value",
            ),
            (
                "unknown $patch in a map",
                json!({"spec": {"$patch": "x"}}),
                "unknown patch type: x in map: map[$patch:x]",
            ),
            (
                "unknown $patch in a list",
                json!({"spec": {"containers": [{"name": "a", "$patch": "frob"}]}}),
                "unknown patch type: frob in map: map[$patch:frob name:a]",
            ),
            (
                "$patch merge in a list",
                json!({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}),
                "merging lists cannot yet be specified in the patch",
            ),
            (
                "non-string $patch",
                json!({"$patch": 1}),
                "unknown patch type: 1",
            ),
            (
                "delete without merge key",
                json!({"spec": {"containers": [{"$patch": "delete"}]}}),
                "does not contain declared merge key: name",
            ),
            (
                "merge element without merge key",
                json!({"spec": {"containers": [{"image": "x"}]}}),
                "map: map[image:x] does not contain declared merge key: name",
            ),
            (
                "$retainKeys not a list",
                json!({"spec": {"$retainKeys": "x"}}),
                "invalid patch format of retainKeys",
            ),
            (
                "$retainKeys missing a patched key",
                json!({"spec": {"$retainKeys": ["a"], "b": 1}}),
                "invalid patch format of retainKeys",
            ),
            (
                "$setElementOrder not a list",
                json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
                "expected a []interface {}, but received a map[string]interface {}",
            ),
            (
                "$setElementOrder without field",
                json!({"spec": {"$setElementOrder": []}}),
                "invalid patch format of setElementOrder list",
            ),
            (
                "$setElementOrder disagreeing with the patch",
                json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
                                "containers": [{"name": "b"}]}}),
                "doesn't match $setElementOrder list",
            ),
            (
                "$deleteFromPrimitiveList without field",
                json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
                "invalid patch format of primitive list",
            ),
            (
                "mixed element types",
                json!({"metadata": {"finalizers": [1]}}),
                "list element types are not identical",
            ),
            (
                "list of lists",
                json!({"metadata": {"finalizers": [["a"]]}}),
                "lists of lists are not supported",
            ),
            (
                "objects in a primitive merge list",
                json!({"metadata": {"finalizers": [{"a": 1}]}}),
                "list element types are not identical",
            ),
        ];
        for (name, patch, want) in cases {
            match apply(&pod, &patch, root("Pod")) {
                Ok(v) => panic!("{name}: expected error, got {v}"),
                Err(e) => assert!(e.contains(want), "{name}: error {e:?} lacks {want:?}"),
            }
        }
        assert_eq!(
            apply(&json!([1]), &json!({}), root("Pod")),
            Err("invalid JSON document".to_string())
        );
    }

    #[test]
    fn list_strategies() {
        use ListMerge::{Key, Primitive};
        let cases: Vec<(&str, &[&str], Option<ListMerge>)> = vec![
            ("Pod", &["metadata", "finalizers"], Some(Primitive)),
            ("Pod", &["metadata", "ownerReferences"], Some(Key("uid"))),
            ("ConfigMap", &["metadata", "finalizers"], Some(Primitive)),
            ("Lease", &["metadata", "ownerReferences"], Some(Key("uid"))),
            ("Pod", &["spec", "containers"], Some(Key("name"))),
            ("Pod", &["spec", "initContainers"], Some(Key("name"))),
            ("Pod", &["spec", "ephemeralContainers"], Some(Key("name"))),
            ("Pod", &["spec", "volumes"], Some(Key("name"))),
            ("Pod", &["spec", "imagePullSecrets"], Some(Key("name"))),
            ("Pod", &["spec", "hostAliases"], Some(Key("ip"))),
            ("Pod", &["spec", "tolerations"], None),
            (
                "Pod",
                &["spec", "topologySpreadConstraints"],
                Some(Key("topologyKey")),
            ),
            ("Pod", &["spec", "readinessGates"], None),
            ("Pod", &["spec", "resourceClaims"], Some(Key("name"))),
            ("Pod", &["spec", "schedulingGates"], Some(Key("name"))),
            ("Pod", &["spec", "containers", "env"], Some(Key("name"))),
            ("Pod", &["spec", "containers", "envFrom"], None),
            (
                "Pod",
                &["spec", "containers", "ports"],
                Some(Key("containerPort")),
            ),
            (
                "Pod",
                &["spec", "initContainers", "volumeMounts"],
                Some(Key("mountPath")),
            ),
            (
                "Pod",
                &["spec", "containers", "volumeDevices"],
                Some(Key("devicePath")),
            ),
            ("Pod", &["spec", "containers", "resizePolicy"], None),
            ("Pod", &["spec", "containers", "args"], None),
            ("Pod", &["status", "conditions"], Some(Key("type"))),
            ("Pod", &["status", "containerStatuses"], None),
            ("Pod", &["status", "podIPs"], Some(Key("ip"))),
            (
                "Deployment",
                &["spec", "template", "spec", "containers"],
                Some(Key("name")),
            ),
            (
                "StatefulSet",
                &["spec", "template", "spec", "containers", "env"],
                Some(Key("name")),
            ),
            (
                "DaemonSet",
                &["spec", "template", "metadata", "finalizers"],
                Some(Primitive),
            ),
            (
                "ReplicaSet",
                &["spec", "template", "spec", "volumes"],
                Some(Key("name")),
            ),
            (
                "Job",
                &["spec", "template", "spec", "containers"],
                Some(Key("name")),
            ),
            (
                "CronJob",
                &[
                    "spec",
                    "jobTemplate",
                    "spec",
                    "template",
                    "spec",
                    "containers",
                ],
                Some(Key("name")),
            ),
            ("StatefulSet", &["spec", "volumeClaimTemplates"], None),
            ("StatefulSet", &["status", "conditions"], Some(Key("type"))),
            ("Deployment", &["status", "conditions"], Some(Key("type"))),
            ("Job", &["status", "conditions"], Some(Key("type"))),
            ("Service", &["spec", "ports"], Some(Key("port"))),
            ("Service", &["spec", "externalIPs"], None),
            ("Node", &["status", "conditions"], Some(Key("type"))),
            ("Node", &["status", "addresses"], Some(Key("type"))),
            ("Node", &["spec", "podCIDRs"], Some(Primitive)),
            ("Node", &["spec", "taints"], None),
            ("Namespace", &["status", "conditions"], Some(Key("type"))),
            ("Namespace", &["spec", "finalizers"], None),
            (
                "PersistentVolumeClaim",
                &["status", "conditions"],
                Some(Key("type")),
            ),
            ("ServiceAccount", &["secrets"], Some(Key("name"))),
            ("ServiceAccount", &["imagePullSecrets"], None),
            ("Endpoints", &["subsets"], None),
            ("Ingress", &["spec", "rules"], None),
            (
                "ValidatingWebhookConfiguration",
                &["webhooks"],
                Some(Key("name")),
            ),
            ("Site", &["metadata", "finalizers"], None),
            ("Pod", &[], None),
            ("Pod", &["spec"], None),
        ];
        for (kind, path, want) in cases {
            assert_eq!(root(kind).at(path).0.patch_merge(), want, "{kind} {path:?}");
        }
    }

    #[test]
    fn inputs_are_not_modified_and_results_are_stable() {
        let original = json!({"metadata": {"finalizers": ["a"]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}});
        let once = apply(&original, &patch, root("Pod")).unwrap();
        assert_eq!(original, json!({"metadata": {"finalizers": ["a"]}}));
        assert_eq!(patch, json!({"metadata": {"finalizers": ["b"]}}));
        // Applying the same patch again changes nothing more.
        assert_eq!(apply(&once, &patch, root("Pod")).unwrap(), once);
    }

    #[test]
    fn deep_and_odd_inputs_do_not_panic() {
        let mut deep = json!("x");
        for _ in 0..MAX_DEPTH {
            deep = json!({"a": deep});
        }
        let result = apply(&deep, &deep, root("Pod"));
        assert!(result.is_ok(), "{result:?}");

        let mut too_deep_value = json!(1);
        for _ in 0..=MAX_DEPTH + 1 {
            too_deep_value = json!([too_deep_value]);
        }
        assert!(apply(&json!({}), &json!({ "a": too_deep_value }), root("Pod")).is_err());

        let odd = [
            json!({"metadata": {"finalizers": [null, null]}}),
            json!({"metadata": {"finalizers": null}}),
            json!({"metadata": {"ownerReferences": [1, 2]}}),
            json!({"metadata": {"ownerReferences": [{"uid": {"x": 1}}]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": null}]}}),
            json!({"spec": {"$setElementOrder/containers": [1, 2]}}),
            json!({"spec": {"$setElementOrder/containers": [], "containers": []}}),
            json!({"spec": {"$setElementOrder/tolerations": [{"key": "x"}],
                            "tolerations": [{"key": "x"}]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": null}}),
            json!({"metadata": {"$retainKeys": [1, null]}}),
        ];
        let originals = [
            json!({}),
            json!({"metadata": {"finalizers": ["a"], "ownerReferences": [{"name": "x"}]},
                   "spec": {"containers": [{"image": "no-name"}], "tolerations": [1]}}),
            json!({"metadata": {"finalizers": "not-a-list"}, "spec": []}),
        ];
        for o in &originals {
            for p in &odd {
                let _ = apply(o, p, root("Pod"));
                let _ = apply(o, p, root("Site"));
            }
        }
    }
}
