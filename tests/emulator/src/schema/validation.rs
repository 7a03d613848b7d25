//! Schema validation ([`validate`]): the kube-openapi validator as
//! `apiserver/validation.ValidateCustomResource` maps it to `field.Error`s, then the
//! embedded-resource and list-type checks of the sibling modules, with the step bound
//! that guards against hostile schema × data combinations.

use super::access::{Addl, Sch};
use super::cause::{
    Cause, MAX_DEPTH, MAX_STEPS, REASON_NOT_SUPPORTED, REASON_TOO_LONG, REASON_TOO_MANY,
    REASON_TYPE_INVALID, body,
};
use super::embedded::embedded_validate;
use super::formats::format_ok;
use super::go_regex::compile_go_regex;
use super::go_value::{go_body, go_quote, is_json_integer};
use super::list_type::list_validate_map;
use crate::gofmt::{GoNum, go_float, go_json, go_num};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;

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

pub(super) fn validate_with_limit(obj: &Value, schema: &Value, max_steps: usize) -> Vec<Cause> {
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
