//! Structural-schema operations on custom resources, modelled on what the real
//! kube-apiserver (v1.32, `k8s.io/apiextensions-apiserver` + `k8s.io/kube-openapi`)
//! does with a CRD version's `openAPIV3Schema`:
//!
//! * [`prune`]: structural pruning of unknown fields (`pkg/apiserver/schema/pruning`),
//!   plus the ObjectMeta coercion of embedded resources (`schema/objectmeta/coerce.go`).
//!   Returns the pruned paths as strict field validation reports them.
//! * [`apply_defaults`]: `PruneNonNullableNullsWithoutDefaults` followed by
//!   `Default` (`pkg/apiserver/schema/defaulting`).
//! * [`validate`]: the kube-openapi schema validator as mapped to `field.Error`s by
//!   `apiserver/validation.ValidateCustomResource`, then the embedded-resource
//!   TypeMeta checks (`schema/objectmeta/validation.go`) and the
//!   `x-kubernetes-list-type` set/map uniqueness checks (`schema/listtype`), in that
//!   order, like the custom resource strategy. Causes are rendered exactly like
//!   `field.Error.ErrorBody()`.
//!
//! Schemas are `serde_json::Value`s holding apiextensions.k8s.io/v1 JSONSchemaProps.
//! Nothing here panics on hostile input: keys with the wrong JSON type are
//! ignored, bad regular expressions become causes, and every recursion is bounded
//! by [`MAX_DEPTH`] (validation reports a cause where the bound is hit; pruning and
//! defaulting leave deeper subtrees untouched).
//!
//! Deliberate choices (upstream behaviour this module follows, sometimes against
//! intuition):
//! * Field paths of schema-validation causes are built like kube-openapi builds
//!   them: `spec.items[2].name`, and map (additionalProperties) keys with a dot:
//!   `spec.headers.X-Foo`. The list-type and embedded-resource causes use
//!   `field.Path`, whose `.Key(k)` prints `spec.headers[X-Foo]`. Pruned paths use
//!   the pruner's own dotted/indexed form (`spec.headers.X-Foo.bar`), sorted.
//! * Go map iteration is random upstream; here every traversal follows the
//!   document (object key) order, so results are stable.
//! * `maxLength`/`minLength` count Unicode code points (`utf8.RuneCount`), even
//!   though the 1.32 `Too long` wording says "bytes":
//!   `Too long: may not be more than 5 bytes`.
//! * `format: int32/int64/float/double` are stripped by apiextensions'
//!   `StripUnsupportedFormatsPostProcess`, so they validate nothing (as upstream).

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Number, Value};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::LazyLock;

/// Maximum nesting depth (object/array levels, plus allOf/anyOf/oneOf/not levels
/// during validation) that is processed. Deeper data gets a `FieldValueInvalid`
/// cause from [`validate`] and is left untouched by [`prune`] and [`apply_defaults`].
pub const MAX_DEPTH: usize = 100;

/// Upper bound on (schema node, value) visits in one [`validate`] call. The work
/// is at most schema size × data size, so this only guards against hostile
/// combinations (e.g. thousands of allOf branches over a huge list); real objects
/// (≤ 1.5 MB) stay far below it.
const MAX_STEPS: usize = 10_000_000;

pub const REASON_REQUIRED: &str = "FieldValueRequired";
pub const REASON_INVALID: &str = "FieldValueInvalid";
pub const REASON_NOT_SUPPORTED: &str = "FieldValueNotSupported";
pub const REASON_TYPE_INVALID: &str = "FieldValueTypeInvalid";
pub const REASON_TOO_LONG: &str = "FieldValueTooLong";
pub const REASON_TOO_MANY: &str = "FieldValueTooMany";
pub const REASON_DUPLICATE: &str = "FieldValueDuplicate";
pub const REASON_FORBIDDEN: &str = "FieldValueForbidden";

/// One validation failure, shaped like a metav1.StatusCause.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// Field path as the API server prints it (see the module docs for the two
    /// upstream path styles).
    pub field: String,
    /// One of the `REASON_*` constants (metav1.CauseType strings).
    pub reason: &'static str,
    /// The detail exactly as `field.Error.ErrorBody()` renders it.
    pub message: String,
}

impl Cause {
    /// `<field>: <message>` as it appears in the Status message.
    pub fn to_string_full(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }

    fn new(field: String, reason: &'static str, message: String) -> Cause {
        Cause {
            field,
            reason,
            message,
        }
    }

    fn required(field: String) -> Cause {
        Cause::new(field, REASON_REQUIRED, "Required value".to_string())
    }

    fn invalid(field: String, value: &str, detail: &str) -> Cause {
        Cause::new(field, REASON_INVALID, body("Invalid value", value, detail))
    }

    fn duplicate(field: String, value: &str) -> Cause {
        Cause::new(field, REASON_DUPLICATE, body("Duplicate value", value, ""))
    }
}

/// `ErrorBody()` of a value-carrying error: `<Type>: <value>[: <detail>]`.
/// `value` must already be rendered with [`go_body`] / [`go_quote`].
fn body(kind: &str, value: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{kind}: {value}")
    } else {
        format!("{kind}: {value}: {detail}")
    }
}

// ---------------------------------------------------------------------------
// Schema access (tolerant of wrong JSON types)
// ---------------------------------------------------------------------------

static EMPTY_SCHEMA: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// A JSONSchemaProps node. A non-object schema value behaves like `{}`.
#[derive(Clone, Copy)]
struct Sch<'a>(&'a Map<String, Value>);

#[derive(Clone, Copy)]
enum Addl<'a> {
    Absent,
    Allows(bool),
    Schema(Sch<'a>),
}

/// Formats kept by apiextensions' `StripUnsupportedFormatsPostProcess`
/// (names normalized by removing `-`, as go-openapi's registry does).
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

impl<'a> Sch<'a> {
    fn of(v: &'a Value) -> Sch<'a> {
        match v {
            Value::Object(m) => Sch(m),
            _ => Sch(&EMPTY_SCHEMA),
        }
    }

    fn get(self, k: &str) -> Option<&'a Value> {
        self.0.get(k)
    }

    fn flag(self, k: &str) -> bool {
        matches!(self.get(k), Some(Value::Bool(true)))
    }

    fn string(self, k: &str) -> Option<&'a str> {
        self.get(k).and_then(Value::as_str)
    }

    /// An integral JSON number (as an int64 field of JSONSchemaProps would hold).
    fn int(self, k: &str) -> Option<i64> {
        match self.get(k)? {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            }),
            _ => None,
        }
    }

    fn num(self, k: &str) -> Option<f64> {
        match self.get(k)? {
            Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    fn nullable(self) -> bool {
        self.flag("nullable")
    }

    fn preserve_unknown(self) -> bool {
        self.flag("x-kubernetes-preserve-unknown-fields")
    }

    fn embedded(self) -> bool {
        self.flag("x-kubernetes-embedded-resource")
    }

    fn property(self, k: &str) -> Option<Sch<'a>> {
        match self.get("properties")? {
            Value::Object(props) => props.get(k).map(Sch::of),
            _ => None,
        }
    }

    fn properties(self) -> impl Iterator<Item = (&'a String, Sch<'a>)> {
        let props = match self.get("properties") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        };
        props
            .into_iter()
            .flat_map(|p| p.iter().map(|(k, v)| (k, Sch::of(v))))
    }

    fn additional(self) -> Addl<'a> {
        match self.get("additionalProperties") {
            Some(Value::Bool(b)) => Addl::Allows(*b),
            Some(Value::Object(m)) => Addl::Schema(Sch(m)),
            _ => Addl::Absent,
        }
    }

    fn additional_schema(self) -> Option<Sch<'a>> {
        match self.additional() {
            Addl::Schema(s) => Some(s),
            _ => None,
        }
    }

    /// Schema of a map field: the property, else the additionalProperties schema.
    fn field_schema(self, k: &str) -> Option<Sch<'a>> {
        self.property(k).or_else(|| self.additional_schema())
    }

    fn items(self) -> Option<Sch<'a>> {
        match self.get("items")? {
            Value::Object(m) => Some(Sch(m)),
            _ => None,
        }
    }

    /// The default value; `default: null` counts as no default (as upstream).
    fn default_value(self) -> Option<&'a Value> {
        self.get("default").filter(|v| !v.is_null())
    }

    fn required(self) -> Vec<&'a str> {
        self.string_list("required")
    }

    fn list_map_keys(self) -> Vec<&'a str> {
        self.string_list("x-kubernetes-list-map-keys")
    }

    fn string_list(self, k: &str) -> Vec<&'a str> {
        match self.get(k) {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// kube-openapi `Type`: `x-kubernetes-int-or-string` becomes `[integer, string]`.
    fn types(self) -> Vec<&'a str> {
        if self.flag("x-kubernetes-int-or-string") {
            return vec!["integer", "string"];
        }
        match self.string("type") {
            Some(t) if !t.is_empty() => vec![t],
            _ => Vec::new(),
        }
    }

    /// The format after `StripUnsupportedFormatsPostProcess` (unsupported → "").
    fn format(self) -> &'a str {
        match self.string("format") {
            Some(f) if SUPPORTED_FORMATS.contains(&f.replace('-', "").as_str()) => f,
            _ => "",
        }
    }
}

fn is_meta_field(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind" | "metadata")
}

// ---------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------

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

fn path_key(path: &mut String, k: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(k);
}

fn path_index(path: &mut String, i: usize) {
    let _ = write!(path, "[{i}]");
}

fn joined(path: &str, k: &str) -> String {
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

use crate::gofmt::{GoNum, go_float, go_json, go_json_pairs, go_num};
use crate::meta::OBJECT_META_FIELDS;

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

// ---------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// Validates `obj` against the schema and returns every violation in a stable
/// (document) order: first the kube-openapi schema validation (per node: type,
/// allOf/anyOf/oneOf/not, string length/pattern, format, number, array items and
/// bounds, enum, object properties and required), then embedded-resource
/// apiVersion/kind checks, then `x-kubernetes-list-type` set/map duplicates.
///
/// Besides upstream behaviour, items of a `x-kubernetes-list-type: map` list get
/// `Required value` for each list-map key that is missing, not listed in the item
/// schema's `required` and without default (a valid CRD must make keys required
/// or defaulted, so this is what the server reports for a valid CRD).
pub fn validate(obj: &Value, schema: &Value) -> Vec<Cause> {
    validate_with_limit(obj, schema, MAX_STEPS)
}

fn validate_with_limit(obj: &Value, schema: &Value, max_steps: usize) -> Vec<Cause> {
    let Value::Object(root_schema) = schema else {
        return Vec::new();
    };
    let s = Sch(root_schema);
    let mut v = Validator {
        max_steps,
        ..Validator::default()
    };
    v.validate_node(obj, s, "", 0, &[]);
    let mut causes = std::mem::take(&mut v.causes);
    if v.aborted {
        causes.push(Cause::invalid(
            String::new(),
            &go_quote(go_type_name(obj)),
            &format!("validation aborted after {max_steps} schema evaluations"),
        ));
    }
    let mut fpath = String::new();
    embedded_validate(obj, s, &mut fpath, 0, &mut causes);
    if let Value::Object(m) = obj {
        list_validate_map(m, s, &mut fpath, 0, &mut causes);
    }
    causes
}

#[derive(Default)]
struct Validator {
    causes: Vec<Cause>,
    regexes: HashMap<String, Result<Regex, String>>,
    steps: usize,
    max_steps: usize,
    aborted: bool,
}

/// `Cause.field` of a kube-openapi error: `strings.TrimPrefix(err.Name, ".")`,
/// and no field at all for an empty name or ".".
fn kfield(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        path.strip_prefix('.').unwrap_or(path).to_string()
    }
}

/// kube-openapi property path: `o.Path + "." + name`, or just `name` at the root.
fn kchild(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) => match go_num(n) {
            GoNum::Int(_) => "integer",
            GoNum::Float(_) => "number",
        },
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Validator {
    fn push(&mut self, c: Cause) {
        self.causes.push(c);
    }

    fn invalid(&mut self, path: &str, value: &str, detail: &str) {
        self.push(Cause::invalid(kfield(path), value, detail));
    }

    /// kube-openapi `InvalidType(path, "body", expected, actual)` with a string
    /// value, mapped to `field.TypeInvalid(path, actual, msg)`.
    fn type_invalid(&mut self, path: &str, actual: &str, expected: &str) {
        let q = go_quote(actual);
        let detail = format!("{path} in body must be of type {expected}: {q}");
        self.push(Cause::new(
            kfield(path),
            REASON_TYPE_INVALID,
            body("Invalid value", &q, &detail),
        ));
    }

    /// Errors without a field (kube-openapi composite messages that are not
    /// `*errors.Validation`): `field.Invalid(nil, "", msg)`.
    fn unnamed(&mut self, detail: String) {
        self.push(Cause::invalid(String::new(), "\"\"", &detail));
    }

    fn validate_node(
        &mut self,
        data: &Value,
        s: Sch<'_>,
        path: &str,
        depth: usize,
        extra_required: &[&str],
    ) {
        self.steps += 1;
        if self.steps > self.max_steps {
            self.aborted = true;
            return;
        }
        if depth > MAX_DEPTH {
            let detail = format!(
                "{path} in body exceeds the maximum supported nesting depth of {MAX_DEPTH}"
            );
            self.invalid(path, &go_quote(go_type_name(data)), &detail);
            return;
        }
        let types = s.types();
        let format = s.format();
        if data.is_null() {
            // Only the type and common (enum) validators run on null.
            if !types.is_empty() && !s.nullable() {
                self.type_invalid(path, "null", &types.join(","));
            }
            self.check_enum(data, s, path);
            return;
        }
        if !types.is_empty() || !format.is_empty() {
            self.check_type(data, &types, format, path);
        }
        self.check_composition(data, s, path, depth);
        if let Value::String(st) = data {
            self.check_string(st, s, path);
            if !format.is_empty() {
                self.check_format(st, format, path);
            }
        }
        if let Value::Number(n) = data {
            self.check_number(go_num(n), s, path);
        }
        if let Value::Array(a) = data {
            self.check_array(a, s, path, depth);
        }
        self.check_enum(data, s, path);
        if let Value::Object(m) = data {
            self.check_object(m, s, path, depth, extra_required);
        }
    }

    /// kube-openapi `typeValidator.Validate` for non-null data.
    fn check_type(&mut self, data: &Value, types: &[&str], format: &str, path: &str) {
        let sch_type = go_type_name(data);
        let data_format = match data {
            Value::Number(n) => match go_num(n) {
                GoNum::Int(_) => "int64",
                GoNum::Float(_) => "float64",
            },
            _ => "",
        };
        let has = |t: &str| types.contains(&t);
        let string_or_slice = matches!(data, Value::String(_) | Value::Array(_));
        let is_float_int =
            sch_type == "number" && data.as_f64().is_some_and(is_json_integer) && has("integer");
        let is_int_float = sch_type == "integer" && has("number");
        // Upstream: `kind != String && kind != Slice && Format != "" && !(...)`.
        let format_mismatch = !(string_or_slice
            || format.is_empty()
            || has(sch_type)
            || data_format == format
            || is_float_int
            || is_int_float);
        if format_mismatch {
            self.type_invalid(path, data_format, format);
            return;
        }
        // Upstream: a formatted string/array skips the type check unless the type
        // is numeric.
        if string_or_slice && !(has("number") || has("integer") || format.is_empty()) {
            return;
        }
        if !(has(sch_type) || is_float_int || is_int_float) {
            self.type_invalid(path, sch_type, &types.join(","));
        }
    }

    fn sub_validate(&mut self, data: &Value, s: Sch<'_>, path: &str, depth: usize) -> Vec<Cause> {
        let saved = std::mem::take(&mut self.causes);
        self.validate_node(data, s, path, depth + 1, &[]);
        std::mem::replace(&mut self.causes, saved)
    }

    /// kube-openapi `schemaPropsValidator`: anyOf, oneOf, allOf, not. The "best"
    /// failing branch is the one with the fewest errors (upstream: most passed
    /// checks), first one on ties.
    fn check_composition(&mut self, data: &Value, s: Sch<'_>, path: &str, depth: usize) {
        if let Some(Value::Array(branches)) = s.get("anyOf")
            && !branches.is_empty()
        {
            let mut best: Option<Vec<Cause>> = None;
            let mut ok = false;
            for b in branches {
                let r = self.sub_validate(data, Sch::of(b), path, depth);
                if r.is_empty() {
                    ok = true;
                    break;
                }
                if best.as_ref().is_none_or(|x| r.len() < x.len()) {
                    best = Some(r);
                }
            }
            if !ok {
                self.unnamed(format!("{path} must validate at least one schema (anyOf)"));
                self.causes.extend(best.unwrap_or_default());
            }
        }
        if let Some(Value::Array(branches)) = s.get("oneOf")
            && !branches.is_empty()
        {
            let mut valid = 0usize;
            let mut best: Option<Vec<Cause>> = None;
            for b in branches {
                let r = self.sub_validate(data, Sch::of(b), path, depth);
                if r.is_empty() {
                    valid += 1;
                    best = None;
                    continue;
                }
                if valid == 0 && best.as_ref().is_none_or(|x| r.len() < x.len()) {
                    best = Some(r);
                }
            }
            if valid != 1 {
                let extra = if valid == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {valid} valid alternatives")
                };
                self.unnamed(format!(
                    "{path} must validate one and only one schema (oneOf). {extra}"
                ));
                self.causes.extend(best.unwrap_or_default());
            }
        }
        if let Some(Value::Array(branches)) = s.get("allOf")
            && !branches.is_empty()
        {
            let mut valid = 0usize;
            for b in branches {
                let r = self.sub_validate(data, Sch::of(b), path, depth);
                if r.is_empty() {
                    valid += 1;
                }
                self.causes.extend(r);
            }
            if valid != branches.len() {
                let extra = if valid == 0 { ". None validated" } else { "" };
                self.unnamed(format!(
                    "{path} must validate all the schemas (allOf){extra}"
                ));
            }
        }
        if let Some(not @ Value::Object(_)) = s.get("not")
            && self
                .sub_validate(data, Sch::of(not), path, depth)
                .is_empty()
        {
            self.unnamed(format!("{path} must not validate the schema (not)"));
        }
    }

    /// kube-openapi `stringValidator`: maxLength, minLength, pattern; stops at the
    /// first failure. Lengths count code points.
    fn check_string(&mut self, st: &str, s: Sch<'_>, path: &str) {
        let len = st.chars().count() as i64;
        if let Some(max) = s.int("maxLength")
            && len > max
        {
            // field.TooLong in 1.32 omits the value.
            let msg = if max >= 0 {
                format!("Too long: may not be more than {max} bytes")
            } else {
                "Too long: value is too long".to_string()
            };
            self.push(Cause::new(kfield(path), REASON_TOO_LONG, msg));
            return;
        }
        if let Some(min) = s.int("minLength")
            && len < min
        {
            let detail = format!("{path} in body should be at least {min} chars long");
            self.invalid(path, &go_quote(st), &detail);
            return;
        }
        if let Some(p) = s.string("pattern")
            && !p.is_empty()
        {
            match self.regex(p) {
                Ok(re) => {
                    if !re.is_match(st) {
                        let detail = format!("{path} in body should match '{p}'");
                        self.invalid(path, &go_quote(st), &detail);
                    }
                }
                Err(e) => {
                    let detail =
                        format!("{path} in body should match '{p}, but pattern is invalid: {e}'");
                    self.invalid(path, &go_quote(st), &detail);
                }
            }
        }
    }

    fn regex(&mut self, p: &str) -> Result<Regex, String> {
        if let Some(r) = self.regexes.get(p) {
            return r.clone();
        }
        let r = compile_go_regex(p);
        self.regexes.insert(p.to_string(), r.clone());
        r
    }

    /// kube-openapi `formatValidator` → `InvalidType(path, in, format, value)`.
    fn check_format(&mut self, st: &str, format: &str, path: &str) {
        if !format_ok(&format.replace('-', ""), st) {
            let q = go_quote(st);
            let detail = format!("{path} in body must be of type {format}: {q}");
            self.push(Cause::new(
                kfield(path),
                REASON_TYPE_INVALID,
                body("Invalid value", &q, &detail),
            ));
        }
    }

    /// kube-openapi `numberValidator`: multipleOf, minimum, maximum. Integer data
    /// is compared against the bound truncated to int64 (`MinimumNativeType`).
    fn check_number(&mut self, n: GoNum, s: Sch<'_>, path: &str) {
        if let Some(f) = s.num("multipleOf") {
            match n {
                GoNum::Int(i) => {
                    let factor = f as i64;
                    if factor < 0 {
                        let detail = format!(
                            "factor MultipleOf declared for {path} must be positive: {factor}"
                        );
                        self.invalid(path, &factor.to_string(), &detail);
                    } else if factor != 0 && i.wrapping_div(factor).wrapping_mul(factor) != i {
                        let detail = format!("{path} in body should be a multiple of {factor}");
                        self.invalid(path, &i.to_string(), &detail);
                    }
                }
                GoNum::Float(d) => {
                    if f < 0.0 {
                        let detail = format!(
                            "factor MultipleOf declared for {path} must be positive: {}",
                            go_float(f)
                        );
                        self.invalid(path, &go_float(f), &detail);
                    } else {
                        let mult = if f < 1.0 { 1.0 / f * d } else { d / f };
                        if !is_json_integer(mult) {
                            let detail =
                                format!("{path} in body should be a multiple of {}", go_float(f));
                            self.invalid(path, &go_float(d), &detail);
                        }
                    }
                }
            }
        }
        if let Some(min) = s.num("minimum") {
            let excl = s.flag("exclusiveMinimum");
            let rel = if excl {
                "greater than"
            } else {
                "greater than or equal to"
            };
            match n {
                GoNum::Int(i) => {
                    let m = min as i64;
                    if (!excl && i < m) || (excl && i <= m) {
                        self.invalid(
                            path,
                            &i.to_string(),
                            &format!("{path} in body should be {rel} {m}"),
                        );
                    }
                }
                GoNum::Float(d) => {
                    if (!excl && d < min) || (excl && d <= min) {
                        self.invalid(
                            path,
                            &go_float(d),
                            &format!("{path} in body should be {rel} {}", go_float(min)),
                        );
                    }
                }
            }
        }
        if let Some(max) = s.num("maximum") {
            let excl = s.flag("exclusiveMaximum");
            let rel = if excl {
                "less than"
            } else {
                "less than or equal to"
            };
            match n {
                GoNum::Int(i) => {
                    let m = max as i64;
                    if (!excl && i > m) || (excl && i >= m) {
                        self.invalid(
                            path,
                            &i.to_string(),
                            &format!("{path} in body should be {rel} {m}"),
                        );
                    }
                }
                GoNum::Float(d) => {
                    if (!excl && d > max) || (excl && d >= max) {
                        self.invalid(
                            path,
                            &go_float(d),
                            &format!("{path} in body should be {rel} {}", go_float(max)),
                        );
                    }
                }
            }
        }
    }

    /// kube-openapi `schemaSliceValidator`: items first, then minItems, maxItems,
    /// uniqueItems.
    fn check_array(&mut self, arr: &[Value], s: Sch<'_>, path: &str, depth: usize) {
        if let Some(items) = s.items() {
            let extra: Vec<&str> = if s.string("x-kubernetes-list-type") == Some("map") {
                let req = items.required();
                s.list_map_keys()
                    .into_iter()
                    .filter(|k| {
                        !req.contains(k) && items.property(k).and_then(Sch::default_value).is_none()
                    })
                    .collect()
            } else {
                Vec::new()
            };
            for (i, v) in arr.iter().enumerate() {
                self.validate_node(v, items, &format!("{path}[{i}]"), depth + 1, &extra);
            }
        }
        let size = arr.len() as i64;
        if let Some(min) = s.int("minItems")
            && size < min
        {
            let detail = format!("{path} in body should have at least {min} items");
            self.invalid(path, &size.to_string(), &detail);
        }
        if let Some(max) = s.int("maxItems")
            && size > max
        {
            self.push(too_many(kfield(path), size, max));
        }
        if s.flag("uniqueItems") {
            let dup = arr
                .iter()
                .enumerate()
                .any(|(i, a)| arr[..i].iter().any(|b| go_deep_equal(a, b, 0)));
            if dup {
                let detail = format!("{path} in body shouldn't contain duplicates");
                self.invalid(path, "\"\"", &detail);
            }
        }
    }

    /// kube-openapi `basicCommonValidator` (enum), mapped to `field.NotSupported`.
    fn check_enum(&mut self, data: &Value, s: Sch<'_>, path: &str) {
        let Some(Value::Array(values)) = s.get("enum") else {
            return;
        };
        if values.is_empty() || values.iter().any(|e| enum_matches(data, e)) {
            return;
        }
        let supported: Vec<String> = values
            .iter()
            .map(|e| match e {
                Value::String(st) => go_quote(st),
                other => go_quote(&go_json(other)),
            })
            .collect();
        let detail = format!("supported values: {}", supported.join(", "));
        self.push(Cause::new(
            kfield(path),
            REASON_NOT_SUPPORTED,
            body("Unsupported value", &go_body(data), &detail),
        ));
    }

    /// kube-openapi `objectValidator`. Property-count failures end the object's
    /// validation (as upstream); then properties / additionalProperties values in
    /// document order, then `required`.
    fn check_object(
        &mut self,
        m: &Map<String, Value>,
        s: Sch<'_>,
        path: &str,
        depth: usize,
        extra_required: &[&str],
    ) {
        let n = m.len() as i64;
        if let Some(min) = s.int("minProperties")
            && n < min
        {
            let detail = format!("{path} in body should have at least {min} properties");
            self.invalid(path, &n.to_string(), &detail);
            return;
        }
        if let Some(max) = s.int("maxProperties")
            && n > max
        {
            self.push(too_many(kfield(path), n, max));
            return;
        }
        let addl = s.additional();
        if let Addl::Allows(false) = addl {
            for k in m.keys() {
                if s.property(k).is_none() {
                    let detail = format!("{path}.{k} in body is a forbidden property");
                    self.invalid(path, &go_quote(k), &detail);
                }
            }
        }
        for (k, v) in m {
            if let Some(p) = s.property(k) {
                self.validate_node(v, p, &kchild(path, k), depth + 1, &[]);
            } else if let Addl::Schema(a) = addl {
                self.validate_node(v, a, &format!("{path}.{k}"), depth + 1, &[]);
            }
        }
        for r in s
            .required()
            .into_iter()
            .chain(extra_required.iter().copied())
        {
            if !m.contains_key(r) {
                self.push(Cause::required(kfield(&format!("{path}.{r}"))));
            }
        }
    }
}

/// `field.TooMany(path, actual, max)`.
fn too_many(field: String, actual: i64, max: i64) -> Cause {
    let detail = if max >= 0 {
        format!("must have at most {max} items")
    } else {
        "too many items".to_string()
    };
    let msg = if actual >= 0 {
        body("Too many", &actual.to_string(), &detail)
    } else {
        format!("Too many: {detail}")
    };
    Cause::new(field, REASON_TOO_MANY, msg)
}

/// Enum membership as kube-openapi decides it: the data is converted to the enum
/// value's Go type when convertible (int64 ↔ float64, and even int64 → string as
/// a rune, as `reflect.Value.Convert` does), then compared with DeepEqual.
/// A null datum never matches.
fn enum_matches(data: &Value, e: &Value) -> bool {
    match (data, e) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Number(a), Value::String(b)) => match go_num(a) {
            GoNum::Int(i) => go_int_to_string(i) == *b,
            GoNum::Float(_) => false,
        },
        (Value::Number(a), Value::Number(b)) => match go_num(b) {
            GoNum::Int(bi) => {
                let ai = match go_num(a) {
                    GoNum::Int(i) => i,
                    GoNum::Float(f) => f as i64,
                };
                ai == bi
            }
            GoNum::Float(bf) => {
                let af = match go_num(a) {
                    GoNum::Int(i) => i as f64,
                    GoNum::Float(f) => f,
                };
                af == bf
            }
        },
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
            go_deep_equal(data, e, 0)
        }
        _ => false,
    }
}

/// Go `string(rune(i))` via reflect conversion.
fn go_int_to_string(i: i64) -> String {
    u32::try_from(i)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{FFFD}')
        .to_string()
}

/// `reflect.DeepEqual` on unstructured values (int64 and float64 never equal).
/// Beyond MAX_DEPTH levels values are considered different.
fn go_deep_equal(a: &Value, b: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => match (go_num(x), go_num(y)) {
            (GoNum::Int(i), GoNum::Int(j)) => i == j,
            (GoNum::Float(f), GoNum::Float(g)) => f == g,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| go_deep_equal(p, q, depth + 1))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| go_deep_equal(p, q, depth + 1)))
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Embedded resources (objectmeta.Validate, isResourceRoot = false)
// ---------------------------------------------------------------------------

fn fchild(path: &mut String, k: &str) {
    path_key(path, k);
}

fn fkey(path: &mut String, k: &str) {
    path.push('[');
    path.push_str(k);
    path.push(']');
}

fn embedded_validate(x: &Value, s: Sch<'_>, path: &mut String, depth: usize, out: &mut Vec<Cause>) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(m) => {
            if s.embedded() {
                validate_embedded_resource(m, path, out);
            }
            for (k, v) in m {
                let len = path.len();
                if let Some(p) = s.property(k) {
                    fchild(path, k);
                    embedded_validate(v, p, path, depth + 1, out);
                } else if let Some(a) = s.additional_schema() {
                    fkey(path, k);
                    embedded_validate(v, a, path, depth + 1, out);
                }
                path.truncate(len);
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items() {
                for (i, v) in a.iter().enumerate() {
                    let len = path.len();
                    path_index(path, i);
                    embedded_validate(v, items, path, depth + 1, out);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// apiVersion/kind checks of `validateEmbeddedResource` (the metadata part,
/// `ValidateObjectMeta`, is not emulated).
fn validate_embedded_resource(m: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    if !m.contains_key("apiVersion") {
        out.push(Cause::required(joined(path, "apiVersion")));
    }
    if !m.contains_key("kind") {
        out.push(Cause::required(joined(path, "kind")));
    }
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" => match v {
                Value::String(av) if av.is_empty() => {
                    out.push(Cause::required(joined(path, k)));
                }
                Value::String(av) => {
                    if av.matches('/').count() > 1 {
                        out.push(Cause::invalid(
                            joined(path, k),
                            &go_quote(av),
                            &format!("unexpected GroupVersion string: {av}"),
                        ));
                    }
                }
                other => out.push(Cause::invalid(
                    joined(path, k),
                    &go_body(other),
                    "must be a string",
                )),
            },
            "kind" => match v {
                Value::String(kind) if kind.is_empty() => {
                    out.push(Cause::required(joined(path, k)));
                }
                Value::String(kind) => {
                    let errs = dns1035_label_errors(&kind.to_lowercase());
                    if !errs.is_empty() {
                        out.push(Cause::invalid(
                            joined(path, k),
                            &go_quote(kind),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        ));
                    }
                }
                other => out.push(Cause::invalid(
                    joined(path, k),
                    &go_body(other),
                    "must be a string",
                )),
            },
            _ => {}
        }
    }
}

/// `utilvalidation.IsDNS1035Label`.
fn dns1035_label_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = v.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !ok {
        errs.push(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
             start with an alphabetic character, and end with an alphanumeric character \
             (e.g. 'my-name',  or 'abc-123', regex used for validation is \
             '[a-z]([-a-z0-9]*[a-z0-9])?')"
                .to_string(),
        );
    }
    errs
}

// ---------------------------------------------------------------------------
// x-kubernetes-list-type set/map (listtype.ValidateListSetsAndMaps)
// ---------------------------------------------------------------------------

fn list_validate_map(
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

// ---------------------------------------------------------------------------
// Formats (go-openapi strfmt registry, the subset CRDs keep)
// ---------------------------------------------------------------------------

fn lazy_rx(p: &str) -> Option<Regex> {
    Regex::new(p).ok()
}

static RX_UUID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static RX_UUID3: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static RX_UUID4: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static RX_UUID5: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static RX_BASE64: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
});
static RX_TIME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});
static RX_HEXCOLOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| lazy_rx(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RX_HOSTNAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    lazy_rx(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z0-9\p{S}\p{L}])(-?[a-zA-Z0-9\p{S}\p{L}]){1,62})$",
    )
});

fn rx_match(rx: &LazyLock<Option<Regex>>, s: &str) -> bool {
    rx.as_ref().is_some_and(|r| r.is_match(s))
}

/// Validates `s` against a (normalized, supported) format. Formats this
/// emulator does not check (uri, email, mac, isbn*, creditcard, ssn, rgbcolor,
/// bsonobjectid, duration, password) accept everything.
fn format_ok(normalized: &str, s: &str) -> bool {
    match normalized {
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        "uuid" => rx_match(&RX_UUID, s),
        "uuid3" => rx_match(&RX_UUID3, s),
        "uuid4" => rx_match(&RX_UUID4, s),
        "uuid5" => rx_match(&RX_UUID5, s),
        "byte" => rx_match(&RX_BASE64, s),
        "hexcolor" => rx_match(&RX_HEXCOLOR, s),
        "hostname" => {
            rx_match(&RX_HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
        }
        "ipv4" => s.parse::<std::net::IpAddr>().is_ok() && s.contains('.'),
        "ipv6" => s.parse::<std::net::IpAddr>().is_ok() && s.contains(':'),
        "cidr" => is_cidr(s),
        _ => true,
    }
}

/// `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &b[r];
        if part.iter().all(u8::is_ascii_digit) {
            Some(
                part.iter()
                    .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0')),
            )
        } else {
            None
        }
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    if !(1..=12).contains(&m) {
        return false;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(rx) = RX_TIME.as_ref() else {
        return false;
    };
    let Some(c) = rx.captures(parts[1]) else {
        return false;
    };
    let g = |i: usize| c.get(i).map_or("", |m| m.as_str());
    g(1) <= "23" && g(2) <= "59" && g(3) <= "59"
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|c| c.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|n| n <= max)
}

// ---------------------------------------------------------------------------
// Go regular expressions
// ---------------------------------------------------------------------------

/// Compiles a Go (RE2) pattern with the regex crate. Perl classes and word
/// boundaries are made ASCII-only (as in Go), and characters that are class-set
/// operators only in Rust are escaped inside brackets.
fn compile_go_regex(p: &str) -> Result<Regex, String> {
    RegexBuilder::new(&translate_go_regex(p))
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid pattern")
                .trim();
            let reason = last.strip_prefix("error: ").unwrap_or(last);
            format!("error parsing regexp: {reason}: `{p}`")
        })
}

fn translate_go_regex(p: &str) -> String {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut class_start = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let Some(&n) = chars.get(i + 1) else {
                out.push('\\');
                break;
            };
            let rep = if in_class {
                match n {
                    'd' => Some("0-9"),
                    'D' => Some("[:^digit:]"),
                    'w' => Some("0-9A-Za-z_"),
                    'W' => Some("[:^word:]"),
                    's' => Some("\\t\\n\\f\\r "),
                    'S' => Some("[:^space:]"),
                    _ => None,
                }
            } else {
                match n {
                    'd' => Some("[0-9]"),
                    'D' => Some("[^0-9]"),
                    'w' => Some("[0-9A-Za-z_]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    's' => Some("[\\t\\n\\f\\r ]"),
                    'S' => Some("[^\\t\\n\\f\\r ]"),
                    'b' => Some("(?-u:\\b)"),
                    'B' => Some("(?-u:\\B)"),
                    _ => None,
                }
            };
            match rep {
                Some(r) => out.push_str(r),
                None => {
                    out.push('\\');
                    out.push(n);
                }
            }
            class_start = false;
            i += 2;
            continue;
        }
        if in_class {
            if c == ']' && !class_start {
                in_class = false;
                out.push(']');
            } else if c == '[' && chars.get(i + 1) == Some(&':') {
                // POSIX class [:name:] — copy through ":]".
                let close = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == ':' && chars[j + 1] == ']');
                match close {
                    Some(j) => {
                        out.extend(&chars[i..j + 2]);
                        i = j + 2;
                        class_start = false;
                        continue;
                    }
                    None => out.push_str("\\["),
                }
            } else if c == '[' || c == '&' || c == '~' || (c == '-' && i > 0 && chars[i - 1] == '-')
            {
                out.push('\\');
                out.push(c);
            } else {
                out.push(c);
            }
            class_start = false;
        } else if c == '[' {
            in_class = true;
            class_start = true;
            out.push('[');
            if chars.get(i + 1) == Some(&'^') {
                out.push('^');
                i += 1;
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------
// Go value rendering
// ---------------------------------------------------------------------------

/// `swag.IsFloat64AJSONInteger`.
fn is_json_integer(f: f64) -> bool {
    f.is_finite() && f.abs() <= 9_007_199_254_740_991.0 && f.fract() == 0.0
}

/// The `BadValue` part of `field.Error.ErrorBody()`: strings `%q`, numbers and
/// bools `%v`, null as `"null"`, objects/arrays `%#v`
/// (`map[string]interface {}{"a":1}`, `[]interface {}{"x"}`).
fn go_body(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_num_v(n),
        Value::String(s) => go_quote(s),
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            go_sharp(v, 0, &mut out);
            out
        }
    }
}

fn go_num_v(n: &Number) -> String {
    match go_num(n) {
        GoNum::Int(i) => i.to_string(),
        GoNum::Float(f) => go_float(f),
    }
}

/// `%#v` of an unstructured value, bounded in depth.
fn go_sharp(v: &Value, depth: usize, out: &mut String) {
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    match v {
        Value::Null => out.push_str("interface {}(nil)"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_num_v(n)),
        Value::String(s) => out.push_str(&go_quote(s)),
        Value::Array(a) => {
            out.push_str("[]interface {}{");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                go_sharp(x, depth + 1, out);
            }
            out.push('}');
        }
        Value::Object(m) => {
            out.push_str(&go_sharp_pairs(
                m.iter().map(|(k, x)| (k.as_str(), x)).collect(),
                depth,
            ));
        }
    }
}

/// `%#v` of a `map[string]interface{}` (keys sorted, as fmt prints maps).
fn go_sharp_pairs(mut pairs: Vec<(&str, &Value)>, depth: usize) -> String {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("map[string]interface {}{");
    for (i, (k, x)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&go_quote(k));
        out.push(':');
        go_sharp(x, depth + 1, &mut out);
    }
    out.push('}');
    out
}

/// Go `strconv.Quote` (also what `%q` and `%#v` print for strings).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_is_print(c) => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Approximation of Go's `unicode.IsPrint` (no general-category tables here):
/// controls, non-ASCII spaces/separators, common format characters, private-use
/// and noncharacters are not printable.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0xFFFE | 0xFFFF | 0xE000..=0xF8FF | 0xE0001
        | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gofmt::go_json_float;
    use serde_json::json;

    fn full(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(Cause::to_string_full).collect()
    }

    /// Root schema with `spec` holding the given properties.
    fn spec_schema(props: Value) -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": props}
            }
        })
    }

    fn with_spec(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Site", "metadata": {"name": "n"}, "spec": spec})
    }

    /// Object nested `depth` levels deep under key "n", built iteratively.
    fn deep_object(depth: usize) -> Value {
        let mut v = json!({});
        for _ in 0..depth {
            let mut m = Map::new();
            m.insert("n".to_string(), v);
            v = Value::Object(m);
        }
        v
    }

    /// Schema mirroring `deep_object`.
    fn deep_schema(depth: usize) -> Value {
        let mut s = json!({"type": "object"});
        for _ in 0..depth {
            s = json!({"type": "object", "properties": {"n": s}});
        }
        s
    }

    fn site_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["name", "owner", "type", "configuration"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                        "owner": {"type": "string"},
                        "type": {"type": "string", "enum": ["static", "dynamic"]},
                        "configuration": {
                            "type": "object",
                            "required": ["space"],
                            "properties": {
                                "space": {"type": "string"},
                                "enabled": {"type": "boolean", "default": true},
                                "settings": {
                                    "type": "object",
                                    "default": {"replicas": 1},
                                    "properties": {
                                        "replicas": {"type": "integer", "minimum": 0, "default": 1}
                                    }
                                },
                                "quota": {"x-kubernetes-int-or-string": true},
                                "routing": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                            }
                        }
                    }
                },
                "status": {
                    "type": "object",
                    "properties": {
                        "observedGeneration": {"type": "integer", "format": "int64"},
                        "conditions": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["type"],
                            "items": {
                                "type": "object",
                                "required": ["type", "status"],
                                "properties": {
                                    "type": {"type": "string"},
                                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                                    "reason": {"type": "string"},
                                    "message": {"type": "string"},
                                    "lastTransitionTime": {"type": "string", "format": "date-time"}
                                }
                            }
                        }
                    }
                }
            }
        })
    }

    #[test]
    fn cause_to_string_full() {
        let c = Cause::required("spec.name".to_string());
        assert_eq!(c.to_string_full(), "spec.name: Required value");
        assert_eq!(c.reason, REASON_REQUIRED);
    }

    #[test]
    fn prune_table() {
        struct Case {
            name: &'static str,
            schema: Value,
            input: Value,
            want: Value,
            paths: &'static [&'static str],
        }
        let cases = vec![
            Case {
                name: "unknown top-level and spec fields; root apiVersion/kind/metadata kept untouched",
                schema: spec_schema(json!({"a": {"type": "string"}})),
                input: json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "foo": 1},
                              "spec": {"a": "x", "b": 1}, "extra": true}),
                want: json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "foo": 1},
                             "spec": {"a": "x"}}),
                paths: &["extra", "spec.b"],
            },
            Case {
                name: "nested",
                schema: spec_schema(
                    json!({"c": {"type": "object", "properties": {"d": {"type": "string"}}}}),
                ),
                input: with_spec(json!({"c": {"d": "x", "e": {"f": 1}}})),
                want: with_spec(json!({"c": {"d": "x"}})),
                paths: &["spec.c.e"],
            },
            Case {
                name: "inside arrays",
                schema: spec_schema(json!({"items": {"type": "array", "items": {
                    "type": "object", "properties": {"name": {"type": "string"}}}}})),
                input: with_spec(
                    json!({"items": [{"name": "a", "x": 1}, {"name": "b"}, {"y": 2}]}),
                ),
                want: with_spec(json!({"items": [{"name": "a"}, {"name": "b"}, {}]})),
                paths: &["spec.items[0].x", "spec.items[2].y"],
            },
            Case {
                name: "preserve-unknown-fields subtree kept, specified nested node still pruned",
                schema: spec_schema(
                    json!({"routing": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"tls": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}}}}),
                ),
                input: with_spec(json!({"routing": {"anything": {"deep": [1, {"x": 1}]},
                                                    "tls": {"bogus": 1, "enabled": true}}})),
                want: with_spec(json!({"routing": {"anything": {"deep": [1, {"x": 1}]},
                                                   "tls": {"enabled": true}}})),
                paths: &["spec.routing.tls.bogus"],
            },
            Case {
                name: "preserve-unknown-fields array items are skip-pruned",
                schema: spec_schema(
                    json!({"list": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                    "items": {"type": "object", "properties": {"a": {"type": "object",
                        "properties": {"b": {"type": "string"}}}}}}}),
                ),
                input: with_spec(json!({"list": [{"a": {"b": "x", "c": 1}, "z": 2}]})),
                want: with_spec(json!({"list": [{"a": {"b": "x"}, "z": 2}]})),
                paths: &["spec.list[0].a.c"],
            },
            Case {
                name: "additionalProperties schema applies to every map value",
                schema: spec_schema(
                    json!({"headers": {"type": "object", "additionalProperties": {
                    "type": "object", "properties": {"value": {"type": "string"}}}}}),
                ),
                input: with_spec(
                    json!({"headers": {"X-Bar": {"value": "b"}, "X-Foo": {"junk": 1, "value": "a"}}}),
                ),
                want: with_spec(
                    json!({"headers": {"X-Bar": {"value": "b"}, "X-Foo": {"value": "a"}}}),
                ),
                paths: &["spec.headers.X-Foo.junk"],
            },
            Case {
                name: "additionalProperties false prunes unknown keys",
                schema: spec_schema(
                    json!({"s": {"type": "object", "properties": {"a": {"type": "string"}},
                    "additionalProperties": false}}),
                ),
                input: with_spec(json!({"s": {"a": "x", "b": 1}})),
                want: with_spec(json!({"s": {"a": "x"}})),
                paths: &["spec.s.b"],
            },
            Case {
                name: "object without specified fields loses its content",
                schema: spec_schema(json!({"cfg": {"type": "object"}})),
                input: with_spec(json!({"cfg": {"a": 1, "b": {"c": 2}}})),
                want: with_spec(json!({"cfg": {}})),
                paths: &["spec.cfg.a", "spec.cfg.b"],
            },
            Case {
                name: "int-or-string keeps its value",
                schema: spec_schema(json!({"q1": {"x-kubernetes-int-or-string": true},
                                           "q2": {"x-kubernetes-int-or-string": true}})),
                input: with_spec(json!({"q1": "10Gi", "q2": 5})),
                want: with_spec(json!({"q1": "10Gi", "q2": 5})),
                paths: &[],
            },
            Case {
                name: "embedded resource: apiVersion/kind kept, metadata coerced like ObjectMeta",
                schema: spec_schema(
                    json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}),
                ),
                input: with_spec(json!({"template": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"annotations": {}, "bogus": 1, "creationTimestamp": null,
                                 "labels": {"a": "b"}, "name": "p", "namespace": "ns"},
                    "spec": {"other": 2, "replicas": 1},
                    "status": {}}})),
                want: with_spec(json!({"template": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"labels": {"a": "b"}, "name": "p", "namespace": "ns"},
                    "spec": {"replicas": 1}}})),
                paths: &[
                    "spec.template.metadata.bogus",
                    "spec.template.spec.other",
                    "spec.template.status",
                ],
            },
            Case {
                name: "empty root schema keeps only apiVersion/kind/metadata",
                schema: json!({}),
                input: json!({"apiVersion": "v1", "kind": "K", "metadata": {"x": 1}, "spec": {"a": 1}}),
                want: json!({"apiVersion": "v1", "kind": "K", "metadata": {"x": 1}}),
                paths: &["spec"],
            },
        ];
        for c in cases {
            let mut obj = c.input.clone();
            let paths = prune(&mut obj, &c.schema);
            assert_eq!(obj, c.want, "{}: object", c.name);
            assert_eq!(paths, c.paths, "{}: paths", c.name);
        }
    }

    #[test]
    fn defaults_table() {
        let cases: Vec<(&str, Value, Value, Value)> = vec![
            (
                "absent property gets its default",
                json!({"name": {"type": "string"}, "replicas": {"type": "integer", "default": 1}}),
                json!({"name": "a"}),
                json!({"name": "a", "replicas": 1}),
            ),
            (
                "defaults nested under a defaulted {} parent apply",
                json!({"settings": {"type": "object", "default": {}, "properties": {
                    "mode": {"type": "string", "default": "auto"},
                    "replicas": {"type": "integer", "default": 3}}}}),
                json!({}),
                json!({"settings": {"mode": "auto", "replicas": 3}}),
            ),
            (
                "null of a non-nullable field with default is defaulted",
                json!({"replicas": {"type": "integer", "default": 1}}),
                json!({"replicas": null}),
                json!({"replicas": 1}),
            ),
            (
                "null of a nullable field with default stays null",
                json!({"replicas": {"type": "integer", "nullable": true, "default": 1}}),
                json!({"replicas": null}),
                json!({"replicas": null}),
            ),
            (
                "null of a non-nullable field without default is pruned",
                json!({"name": {"type": "string"}}),
                json!({"name": null}),
                json!({}),
            ),
            (
                "null of a nullable field without default stays",
                json!({"name": {"type": "string", "nullable": true}}),
                json!({"name": null}),
                json!({"name": null}),
            ),
            (
                "default: null is no default",
                json!({"name": {"type": "string", "default": null}}),
                json!({}),
                json!({}),
            ),
            (
                "defaults inside array items",
                json!({"ports": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer", "default": 80},
                    "protocol": {"type": "string", "default": "TCP"}}}}}),
                json!({"ports": [{"port": 8080}, {}]}),
                json!({"ports": [{"port": 8080, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}),
            ),
            (
                "non-nullable null array item takes the items default",
                json!({"l": {"type": "array", "items": {"type": "string", "default": "x"}}}),
                json!({"l": ["a", null]}),
                json!({"l": ["a", "x"]}),
            ),
            (
                "defaults inside map values",
                json!({"m": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "weight": {"type": "integer", "default": 1}}}}}),
                json!({"m": {"a": {}, "b": {"weight": 5}}}),
                json!({"m": {"a": {"weight": 1}, "b": {"weight": 5}}}),
            ),
            (
                "non-nullable null map value takes the additionalProperties default, then nested defaults",
                json!({"m": {"type": "object", "additionalProperties": {"type": "object", "default": {"w": 1},
                    "properties": {"w": {"type": "integer"}, "z": {"type": "integer", "default": 2}}}}}),
                json!({"m": {"a": null}}),
                json!({"m": {"a": {"w": 1, "z": 2}}}),
            ),
        ];
        for (name, props, spec, want) in cases {
            let schema = spec_schema(props);
            let mut obj = with_spec(spec);
            apply_defaults(&mut obj, &schema);
            assert_eq!(obj, with_spec(want), "{name}");
        }
    }

    #[test]
    fn defaults_are_deep_copies() {
        let schema = spec_schema(json!({"a": {"type": "object", "default": {"x": [1]},
                                               "properties": {"x": {"type": "array", "items": {"type": "integer"}}}},
                                        "b": {"type": "object", "default": {"x": [1]},
                                               "properties": {"x": {"type": "array", "items": {"type": "integer"}}}}}));
        let mut obj = with_spec(json!({}));
        apply_defaults(&mut obj, &schema);
        obj["spec"]["a"]["x"][0] = json!(2);
        assert_eq!(obj["spec"]["b"], json!({"x": [1]}));
        assert_eq!(
            schema["properties"]["spec"]["properties"]["a"]["default"],
            json!({"x": [1]})
        );
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
            (
                "type boolean",
                json!({"enabled": {"type": "boolean"}}),
                json!({"enabled": "string"}),
                vec![
                    r#"spec.enabled: Invalid value: "string": spec.enabled in body must be of type boolean: "string""#,
                ],
            ),
            (
                "integer accepts 1.0",
                json!({"r": {"type": "integer"}}),
                json!({"r": 1.0}),
                vec![],
            ),
            (
                "integer rejects 1.5",
                json!({"r": {"type": "integer"}}),
                json!({"r": 1.5}),
                vec![
                    r#"spec.r: Invalid value: "number": spec.r in body must be of type integer: "number""#,
                ],
            ),
            (
                "number accepts integer",
                json!({"r": {"type": "number"}}),
                json!({"r": 3}),
                vec![],
            ),
            (
                "object type mismatch",
                json!({"o": {"type": "object"}}),
                json!({"o": [1]}),
                vec![
                    r#"spec.o: Invalid value: "array": spec.o in body must be of type object: "array""#,
                ],
            ),
            (
                "enum",
                json!({"type": {"type": "string", "enum": ["a", "b"]}}),
                json!({"type": "x"}),
                vec![r#"spec.type: Unsupported value: "x": supported values: "a", "b""#],
            ),
            (
                "numeric enum",
                json!({"level": {"type": "integer", "enum": [1, 2]}}),
                json!({"level": 3}),
                vec![r#"spec.level: Unsupported value: 3: supported values: "1", "2""#],
            ),
            (
                "numeric enum matches across int/float",
                json!({"level": {"type": "number", "enum": [1.5, 2]}}),
                json!({"level": 2.0}),
                vec![],
            ),
            (
                "object enum",
                json!({"o": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                         "enum": [{"a": 1}]}}),
                json!({"o": {"a": 2}}),
                vec![
                    r#"spec.o: Unsupported value: map[string]interface {}{"a":2}: supported values: "{\"a\":1}""#,
                ],
            ),
            (
                "enum never matches null",
                json!({"x": {"type": "string", "nullable": true, "enum": ["a"]}}),
                json!({"x": null}),
                vec![r#"spec.x: Unsupported value: "null": supported values: "a""#],
            ),
            (
                "pattern",
                json!({"x": {"type": "string", "pattern": "^[0-9]+$"}}),
                json!({"x": "abc"}),
                vec![r#"spec.x: Invalid value: "abc": spec.x in body should match '^[0-9]+$'"#],
            ),
            (
                "pattern \\d is ASCII-only as in Go",
                json!({"x": {"type": "string", "pattern": "^\\d+$"}}),
                json!({"x": "\u{661}\u{662}"}),
                vec![
                    "spec.x: Invalid value: \"\u{661}\u{662}\": spec.x in body should match '^\\d+$'",
                ],
            ),
            (
                "pattern \\d accepts ASCII digits",
                json!({"x": {"type": "string", "pattern": "^\\d+$"}}),
                json!({"x": "123"}),
                vec![],
            ),
            (
                "minimum",
                json!({"replicas": {"type": "integer", "minimum": 0}}),
                json!({"replicas": -1}),
                vec![
                    "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
                ],
            ),
            (
                "exclusiveMinimum",
                json!({"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": true}}),
                json!({"n": 0}),
                vec!["spec.n: Invalid value: 0: spec.n in body should be greater than 0"],
            ),
            (
                "maximum on a float",
                json!({"ratio": {"type": "number", "maximum": 10}}),
                json!({"ratio": 10.5}),
                vec![
                    "spec.ratio: Invalid value: 10.5: spec.ratio in body should be less than or equal to 10",
                ],
            ),
            (
                "exclusiveMaximum",
                json!({"n": {"type": "integer", "maximum": 10, "exclusiveMaximum": true}}),
                json!({"n": 10}),
                vec!["spec.n: Invalid value: 10: spec.n in body should be less than 10"],
            ),
            (
                "multipleOf",
                json!({"n": {"type": "integer", "multipleOf": 3}}),
                json!({"n": 7}),
                vec!["spec.n: Invalid value: 7: spec.n in body should be a multiple of 3"],
            ),
            (
                "minLength",
                json!({"x": {"type": "string", "minLength": 3}}),
                json!({"x": "ab"}),
                vec![
                    r#"spec.x: Invalid value: "ab": spec.x in body should be at least 3 chars long"#,
                ],
            ),
            (
                "maxLength",
                json!({"x": {"type": "string", "maxLength": 5}}),
                json!({"x": "abcdef"}),
                vec!["spec.x: Too long: may not be more than 5 bytes"],
            ),
            (
                "maxLength counts characters",
                json!({"x": {"type": "string", "maxLength": 5}}),
                json!({"x": "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"}),
                vec![],
            ),
            (
                "string checks stop at the first failure",
                json!({"x": {"type": "string", "maxLength": 2, "pattern": "^[0-9]+$"}}),
                json!({"x": "abc"}),
                vec!["spec.x: Too long: may not be more than 2 bytes"],
            ),
            (
                "minItems",
                json!({"l": {"type": "array", "minItems": 2, "items": {"type": "string"}}}),
                json!({"l": ["a"]}),
                vec!["spec.l: Invalid value: 1: spec.l in body should have at least 2 items"],
            ),
            (
                "maxItems",
                json!({"l": {"type": "array", "maxItems": 2}}),
                json!({"l": [1, 2, 3]}),
                vec!["spec.l: Too many: 3: must have at most 2 items"],
            ),
            (
                "minProperties",
                json!({"m": {"type": "object", "minProperties": 2,
                                           "additionalProperties": {"type": "string"}}}),
                json!({"m": {"a": "x"}}),
                vec!["spec.m: Invalid value: 1: spec.m in body should have at least 2 properties"],
            ),
            (
                "maxProperties stops the object's validation",
                json!({"m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "integer"}}}),
                json!({"m": {"a": "x", "b": "y"}}),
                vec!["spec.m: Too many: 2: must have at most 1 items"],
            ),
            (
                "uniqueItems",
                json!({"l": {"type": "array", "uniqueItems": true}}),
                json!({"l": [1, 2, 1]}),
                vec![r#"spec.l: Invalid value: "": spec.l in body shouldn't contain duplicates"#],
            ),
            (
                "uniqueItems: 1 and 1.0 differ as in Go",
                json!({"l": {"type": "array", "uniqueItems": true}}),
                json!({"l": [1, 1.0]}),
                vec![],
            ),
            (
                "format date",
                json!({"d": {"type": "string", "format": "date"}}),
                json!({"d": "2024-02-30"}),
                vec![
                    r#"spec.d: Invalid value: "2024-02-30": spec.d in body must be of type date: "2024-02-30""#,
                ],
            ),
            (
                "format date leap day",
                json!({"d": {"type": "string", "format": "date"}}),
                json!({"d": "2024-02-29"}),
                vec![],
            ),
            (
                "format date-time",
                json!({"t": {"type": "string", "format": "date-time"}}),
                json!({"t": "2024-01-01 10:00"}),
                vec![
                    r#"spec.t: Invalid value: "2024-01-01 10:00": spec.t in body must be of type date-time: "2024-01-01 10:00""#,
                ],
            ),
            (
                "format date-time valid",
                json!({"a": {"type": "string", "format": "date-time"},
                                              "b": {"type": "string", "format": "date-time"}}),
                json!({"a": "2024-01-01T10:00:00Z", "b": "2024-01-01T23:59:59.123+02:00"}),
                vec![],
            ),
            (
                "format uuid",
                json!({"u": {"type": "string", "format": "uuid"}}),
                json!({"u": "not-a-uuid"}),
                vec![
                    r#"spec.u: Invalid value: "not-a-uuid": spec.u in body must be of type uuid: "not-a-uuid""#,
                ],
            ),
            (
                "format uuid valid",
                json!({"u": {"type": "string", "format": "uuid"}}),
                json!({"u": "123e4567-E89B-12d3-a456-426614174000"}),
                vec![],
            ),
            (
                "format byte",
                json!({"b": {"type": "string", "format": "byte"}}),
                json!({"b": "not base64!"}),
                vec![
                    r#"spec.b: Invalid value: "not base64!": spec.b in body must be of type byte: "not base64!""#,
                ],
            ),
            (
                "format byte valid",
                json!({"b": {"type": "string", "format": "byte"}}),
                json!({"b": "aGVsbG8="}),
                vec![],
            ),
            (
                "format int32/int64 are stripped by the server",
                json!({"a": {"type": "integer", "format": "int32"}, "b": {"type": "integer", "format": "int64"}}),
                json!({"a": 99_999_999_999_i64, "b": 1}),
                vec![],
            ),
            (
                "int-or-string accepts integers and strings",
                json!({"a": {"x-kubernetes-int-or-string": true}, "b": {"x-kubernetes-int-or-string": true}}),
                json!({"a": 1, "b": "1Gi"}),
                vec![],
            ),
            (
                "int-or-string rejects booleans",
                json!({"q": {"x-kubernetes-int-or-string": true}}),
                json!({"q": true}),
                vec![
                    r#"spec.q: Invalid value: "boolean": spec.q in body must be of type integer,string: "boolean""#,
                ],
            ),
            (
                "int-or-string with kubebuilder anyOf",
                json!({"q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}}),
                json!({"q": 1.5}),
                vec![
                    r#"spec.q: Invalid value: "number": spec.q in body must be of type integer,string: "number""#,
                    r#": Invalid value: "": spec.q must validate at least one schema (anyOf)"#,
                    r#"spec.q: Invalid value: "number": spec.q in body must be of type integer: "number""#,
                ],
            ),
            (
                "nullable accepts null",
                json!({"x": {"type": "string", "nullable": true}}),
                json!({"x": null}),
                vec![],
            ),
            (
                "non-nullable rejects null",
                json!({"x": {"type": "string"}}),
                json!({"x": null}),
                vec![
                    r#"spec.x: Invalid value: "null": spec.x in body must be of type string: "null""#,
                ],
            ),
            (
                "preserve-unknown-fields without type accepts anything",
                json!({"free": {"x-kubernetes-preserve-unknown-fields": true}}),
                json!({"free": [1, "a", {"b": true}]}),
                vec![],
            ),
            (
                "map values use kube-openapi dotted paths",
                json!({"headers": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}),
                json!({"headers": {"X-Foo": "toolong"}}),
                vec!["spec.headers.X-Foo: Too long: may not be more than 3 bytes"],
            ),
            (
                "array items and required children",
                json!({"items": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                          "properties": {"name": {"type": "string"}}}}}),
                json!({"items": [{"name": "a"}, {}, {"name": 1}]}),
                vec![
                    "spec.items[1].name: Required value",
                    r#"spec.items[2].name: Invalid value: "integer": spec.items[2].name in body must be of type string: "integer""#,
                ],
            ),
            (
                "forbidden property under additionalProperties: false",
                json!({"s": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}),
                json!({"s": {"a": "x", "b": 1}}),
                vec![r#"spec.s: Invalid value: "b": spec.s.b in body is a forbidden property"#],
            ),
            (
                "several errors in document order, required last",
                json!({"alpha": {"type": "integer", "minimum": 0}, "beta": {"type": "string", "enum": ["x"]},
                    "gamma": {"type": "array", "maxItems": 1}, "name": {"type": "string"}}),
                json!({"alpha": -5, "beta": "y", "gamma": [1, 2]}),
                vec![
                    "spec.alpha: Invalid value: -5: spec.alpha in body should be greater than or equal to 0",
                    r#"spec.beta: Unsupported value: "y": supported values: "x""#,
                    "spec.gamma: Too many: 2: must have at most 1 items",
                ],
            ),
            (
                "embedded resource needs apiVersion and kind",
                json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                 "x-kubernetes-preserve-unknown-fields": true}}),
                json!({"template": {"metadata": {}}}),
                vec![
                    "spec.template.apiVersion: Required value",
                    "spec.template.kind: Required value",
                ],
            ),
            (
                "list-type set duplicates",
                json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
                json!({"tags": ["a", "b", "a", "a", "b"]}),
                vec![
                    r#"spec.tags[2]: Duplicate value: "a""#,
                    r#"spec.tags[4]: Duplicate value: "b""#,
                ],
            ),
            (
                "list-type set under a map uses field.Path keys",
                json!({"groups": {"type": "object", "additionalProperties": {"type": "array",
                 "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}),
                json!({"groups": {"admins": ["a", "a"]}}),
                vec![r#"spec.groups[admins][1]: Duplicate value: "a""#],
            ),
            (
                "list-type map duplicate key and missing key",
                json!({"conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                              "items": {"type": "object", "properties": {"type": {"type": "string"},
                                                                         "status": {"type": "string"}}}}}),
                json!({"conds": [{"status": "True", "type": "Ready"}, {"status": "False", "type": "Ready"},
                              {"status": "x"}]}),
                vec![
                    "spec.conds[2].type: Required value",
                    r#"spec.conds[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#,
                ],
            ),
            (
                "list-type map with two keys",
                json!({"ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"],
                              "items": {"type": "object", "required": ["port", "protocol"],
                                        "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}}}}}),
                json!({"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"},
                              {"port": 80, "protocol": "TCP"}]}),
                vec![
                    r#"spec.ports[2]: Duplicate value: map[string]interface {}{"port":80, "protocol":"TCP"}"#,
                ],
            ),
            (
                "list-type map with a non-object item",
                json!({"conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                              "items": {"type": "object", "properties": {"type": {"type": "string"}}}}}),
                json!({"conds": [{"type": "a"}, "x"]}),
                vec![
                    r#"spec.conds[1]: Invalid value: "string": spec.conds[1] in body must be of type object: "string""#,
                    r#"spec.conds[1]: Invalid value: "x": must be an object for an array of list-type map"#,
                ],
            ),
        ];
        for (name, props, spec, want) in cases {
            let causes = validate(&with_spec(spec), &spec_schema(props));
            assert_eq!(full(&causes), want, "{name}");
        }
    }

    #[test]
    fn validation_reasons() {
        let schema = spec_schema(json!({
            "a": {"type": "boolean"}, "b": {"type": "string", "maxLength": 1},
            "c": {"type": "array", "maxItems": 0}, "d": {"type": "string", "enum": ["x"]},
            "e": {"type": "integer", "minimum": 5},
            "f": {"type": "array", "x-kubernetes-list-type": "set"}}));
        let causes = validate(
            &with_spec(json!({"a": 1, "b": "xx", "c": [1], "d": "y", "e": 1, "f": [1, 1]})),
            &schema,
        );
        let reasons: Vec<&str> = causes.iter().map(|c| c.reason).collect();
        assert_eq!(
            reasons,
            vec![
                REASON_TYPE_INVALID,
                REASON_TOO_LONG,
                REASON_TOO_MANY,
                REASON_NOT_SUPPORTED,
                REASON_INVALID,
                REASON_DUPLICATE
            ]
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.a",
                "spec.b",
                "spec.c",
                "spec.d",
                "spec.e",
                "spec.f[1]"
            ]
        );
    }

    #[test]
    fn required_at_root() {
        let schema = json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}});
        let causes = validate(&json!({"apiVersion": "v1", "kind": "K"}), &schema);
        assert_eq!(full(&causes), vec!["spec: Required value"]);
        assert_eq!(causes[0].reason, REASON_REQUIRED);
    }

    #[test]
    fn bad_regex_is_a_cause_not_a_panic() {
        for pattern in ["(abc", "[", "a{2,1}", "\\", "a)"] {
            let schema = spec_schema(json!({"x": {"type": "string", "pattern": pattern}}));
            let causes = validate(&with_spec(json!({"x": "abc"})), &schema);
            assert_eq!(causes.len(), 1, "{pattern}");
            assert_eq!(causes[0].reason, REASON_INVALID);
            let prefix = format!(
                "Invalid value: \"abc\": spec.x in body should match '{pattern}, but pattern is invalid: error parsing regexp: "
            );
            assert!(
                causes[0].message.starts_with(&prefix),
                "{}",
                causes[0].message
            );
            assert!(causes[0].message.ends_with('\''));
        }
    }

    #[test]
    fn go_regex_dialect() {
        let cases = [
            ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-site", true),
            ("^[\\w.-]+$", "a_b.c-d", true),
            ("^[\\w.-]+$", "\u{e9}", false),
            ("^[^\\s]+$", "a b", false),
            ("[[:alpha:]]+", "abc", true),
            ("^[]a]+$", "]a", true),
            ("^[a&&b]$", "&", true),
            ("^https?:\\/\\/", "https://x", true),
            ("\\bfoo\\b", "a foo b", true),
            (
                "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                "10Gi",
                true,
            ),
        ];
        for (p, s, want) in cases {
            let re = compile_go_regex(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert_eq!(re.is_match(s), want, "{p} on {s}");
        }
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let depth = 150;
        let schema = deep_schema(depth);
        let obj = deep_object(depth);
        let causes = validate(&obj, &schema);
        assert_eq!(causes.len(), 1);
        let field = vec!["n"; MAX_DEPTH + 1].join(".");
        assert_eq!(causes[0].field, field);
        assert_eq!(causes[0].reason, REASON_INVALID);
        assert!(
            causes[0]
                .message
                .contains("exceeds the maximum supported nesting depth of 100")
        );

        let mut pruned = obj.clone();
        assert!(prune(&mut pruned, &schema).is_empty());
        let mut defaulted = obj.clone();
        apply_defaults(&mut defaulted, &schema);
        assert_eq!(defaulted, obj);
    }

    /// Drops a value without recursion (serde_json's own Drop and Clone are
    /// recursive and overflow on such fixtures).
    fn dismantle(v: Value) {
        let mut stack = vec![v];
        while let Some(mut v) = stack.pop() {
            match &mut v {
                Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, c)| c)),
                Value::Array(a) => stack.append(a),
                _ => {}
            }
        }
    }

    #[test]
    fn very_deep_values_do_not_overflow() {
        const DEPTH: usize = 100_000;
        let preserve = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});

        // enum failure renders the (deep) value with %#v, bounded.
        // Assertions come after `dismantle`: a failing assert would unwind and
        // drop the deep values recursively.
        let deep = deep_object(DEPTH);
        let schema =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "enum": [{}]});
        let enum_causes = validate(&deep, &schema);

        // null pruning walks schema-less data, bounded; pruning too.
        let mut deep = deep;
        apply_defaults(&mut deep, &preserve);
        let pruned = prune(&mut deep, &preserve);
        dismantle(deep);

        // uniqueItems / list-type set compare deep values, bounded; validation of
        // the items stops at MAX_DEPTH. (Built by hand: json! would serialize the
        // interpolated values recursively.)
        let mut spec = Map::new();
        spec.insert(
            "l".to_string(),
            Value::Array(vec![deep_object(DEPTH), deep_object(DEPTH)]),
        );
        let mut root = Map::new();
        root.insert("spec".to_string(), Value::Object(spec));
        let mut obj = Value::Object(root);
        let schema = spec_schema(json!({"l": {"type": "array", "uniqueItems": true,
            "x-kubernetes-list-type": "set", "items": {"type": "object", "properties": {"n": deep_schema(120)}}}}));
        let list_causes = validate(&obj, &schema);
        let _ = prune(&mut obj, &schema);
        apply_defaults(&mut obj, &schema);
        dismantle(obj);

        assert_eq!(enum_causes.len(), 1);
        assert_eq!(enum_causes[0].reason, REASON_NOT_SUPPORTED);
        assert!(enum_causes[0].message.contains("..."));
        assert!(pruned.is_empty());
        let reasons: Vec<&str> = list_causes.iter().map(|c| c.reason).collect();
        assert_eq!(
            reasons,
            vec![REASON_INVALID, REASON_INVALID, REASON_DUPLICATE]
        );
        assert!(
            list_causes[0]
                .message
                .contains("maximum supported nesting depth of 100")
        );
        assert!(list_causes[0].field.starts_with("spec.l[0].n.n."));
        assert_eq!(list_causes[2].field, "spec.l[1]");
    }

    #[test]
    fn deep_default_is_refused() {
        let schema = spec_schema(json!({"a": {"type": "object", "default": deep_object(500)}}));
        let mut obj = with_spec(json!({}));
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj, with_spec(json!({})));
    }

    #[test]
    fn hostile_schemas_do_not_panic() {
        let obj = json!({
            "apiVersion": "v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"a": "x", "b": [1, 2, 2, null], "c": {"d": null, "e": 1.5},
                     "n": i64::MIN, "f": 18_446_744_073_709_551_615_u64}
        });
        let schemas = vec![
            json!(true),
            json!(null),
            json!("x"),
            json!([1, 2]),
            json!({"type": 5, "properties": "x", "required": "spec", "enum": "a", "items": true,
                   "additionalProperties": 3, "nullable": "yes"}),
            json!({"properties": {"spec": 7}}),
            json!({"properties": {"spec": {"properties": {"a": {"type": "string", "pattern": "[",
                   "minLength": "3", "maxLength": -1, "format": 7, "enum": []}}}}}),
            json!({"properties": {"spec": {"properties": {"n": {"type": "integer", "multipleOf": -1,
                   "minimum": 1e300, "maximum": -1e300}, "f": {"type": "number", "multipleOf": 0}}}}}),
            json!({"properties": {"spec": {"properties": {"n": {"type": "integer", "multipleOf": 0.5}}}}}),
            json!({"properties": {"spec": {"properties": {"b": {"type": "array",
                   "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": 5, "items": [1]}}}}}),
            json!({"properties": {"spec": {"properties": {"b": {"type": "array",
                   "x-kubernetes-list-type": "map", "items": {"type": "object"}}}}}}),
            json!({"properties": {"spec": {"anyOf": "x", "allOf": [1, 2], "oneOf": [], "not": [],
                   "properties": {"c": {"additionalProperties": {"default": {"z": 1}}}}}}}),
            json!({"properties": {"spec": {"x-kubernetes-embedded-resource": true,
                   "properties": {"metadata": {"default": 5}}, "x-kubernetes-preserve-unknown-fields": 1}}}),
            json!({"properties": {"spec": {"type": "object", "format": "date", "minProperties": 1e30,
                   "maxProperties": -3, "required": [1, null, "zz"]}}}),
        ];
        for schema in schemas {
            let mut o = obj.clone();
            let _ = prune(&mut o, &schema);
            apply_defaults(&mut o, &schema);
            let _ = validate(&o, &schema);
            let _ = validate(&obj, &schema);
        }
    }

    #[test]
    fn validation_work_is_bounded() {
        let branches: Vec<Value> = (0..50)
            .map(|_| json!({"items": {"type": "string"}}))
            .collect();
        let schema = json!({"allOf": branches});
        let data = Value::Array((0..100).map(Value::from).collect());
        let causes = validate_with_limit(&data, &schema, 1000);
        let last = causes.last().expect("abort cause");
        assert_eq!(
            last.to_string_full(),
            r#": Invalid value: "array": validation aborted after 1000 schema evaluations"#
        );
        // Under the default limit the same input is fully validated.
        let causes = validate(&data, &schema);
        assert_eq!(causes.len(), 50 * 100 + 1);
    }

    #[test]
    fn go_rendering() {
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-1.5), "-1.5");
        assert_eq!(go_float(10.0), "10");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(1e20), "100000000000000000000");
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_json_float(0.5), "0.5");
        assert_eq!(
            go_quote("a\"b\\\n\u{1}\u{7f}\u{e9}\u{200b}"),
            "\"a\\\"b\\\\\\n\\x01\\x7f\u{e9}\\u200b\""
        );
        assert_eq!(
            go_json(&json!({"b": [1, 2.5, "<x>"], "a": null})),
            r#"{"a":null,"b":[1,2.5,"\u003cx\u003e"]}"#
        );
        assert_eq!(
            go_body(&json!({"b": [1, null, true], "a": {"c": "d"}})),
            r#"map[string]interface {}{"a":map[string]interface {}{"c":"d"}, "b":[]interface {}{1, interface {}(nil), true}}"#
        );
        assert_eq!(go_body(&json!(null)), "\"null\"");
        assert_eq!(go_body(&json!(2.0)), "2");
    }

    #[test]
    fn site_pipeline_valid() {
        let schema = site_schema();
        let mut obj = json!({
            "apiVersion": "example.com/v1",
            "kind": "Site",
            "metadata": {"name": "s1", "namespace": "default"},
            "spec": {
                "bogus": 1,
                "configuration": {
                    "extra": true,
                    "quota": "10Gi",
                    "routing": {"anything": {"goes": [1, 2]}},
                    "space": "main"
                },
                "name": "my-site",
                "owner": "team-a",
                "type": "static"
            },
            "status": {"conditions": [{"junk": 1, "status": "True", "type": "Ready"}]}
        });
        let pruned = prune(&mut obj, &schema);
        assert_eq!(
            pruned,
            vec![
                "spec.bogus",
                "spec.configuration.extra",
                "status.conditions[0].junk"
            ]
        );
        apply_defaults(&mut obj, &schema);
        assert_eq!(
            obj["spec"]["configuration"],
            json!({
                "enabled": true,
                "quota": "10Gi",
                "routing": {"anything": {"goes": [1, 2]}},
                "settings": {"replicas": 1},
                "space": "main"
            })
        );
        assert_eq!(validate(&obj, &schema), vec![]);
    }

    #[test]
    fn site_pipeline_invalid() {
        let schema = site_schema();
        let mut obj = json!({
            "apiVersion": "example.com/v1",
            "kind": "Site",
            "metadata": {"name": "s1"},
            "spec": {
                "configuration": {
                    "enabled": "yes",
                    "quota": true,
                    "settings": {"replicas": -1, "unknown": 2}
                },
                "name": "My_Site",
                "type": "bogus"
            },
            "status": {"conditions": [
                {"status": "True", "type": "Ready"},
                {"status": "Maybe", "type": "Ready"}
            ]}
        });
        assert_eq!(
            prune(&mut obj, &schema),
            vec!["spec.configuration.settings.unknown"]
        );
        apply_defaults(&mut obj, &schema);
        assert_eq!(
            obj["spec"]["configuration"]["settings"],
            json!({"replicas": -1})
        );
        let causes = validate(&obj, &schema);
        assert_eq!(
            full(&causes),
            vec![
                r#"spec.configuration.enabled: Invalid value: "string": spec.configuration.enabled in body must be of type boolean: "string""#,
                r#"spec.configuration.quota: Invalid value: "boolean": spec.configuration.quota in body must be of type integer,string: "boolean""#,
                "spec.configuration.settings.replicas: Invalid value: -1: spec.configuration.settings.replicas in body should be greater than or equal to 0",
                "spec.configuration.space: Required value",
                r#"spec.name: Invalid value: "My_Site": spec.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#,
                r#"spec.type: Unsupported value: "bogus": supported values: "static", "dynamic""#,
                "spec.owner: Required value",
                r#"status.conditions[1].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown""#,
                r#"status.conditions[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#,
            ]
        );
    }

    #[test]
    fn site_defaults_null_settings() {
        let schema = site_schema();
        let mut obj = with_spec(
            json!({"configuration": {"enabled": null, "settings": null, "space": "s",
                                                          "quota": null}}),
        );
        apply_defaults(&mut obj, &schema);
        // non-nullable nulls: with default → defaulted; without default → removed.
        assert_eq!(
            obj["spec"]["configuration"],
            json!({"enabled": true, "settings": {"replicas": 1}, "space": "s"})
        );
    }
}
