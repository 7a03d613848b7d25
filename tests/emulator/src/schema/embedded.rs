//! Embedded resources (`objectmeta.Validate` with `isResourceRoot = false`): the
//! apiVersion/kind checks of nodes marked `x-kubernetes-embedded-resource`, with causes in
//! `field.Path` form (`spec.headers[X-Foo]`).

use super::access::Sch;
use super::cause::{Cause, MAX_DEPTH};
use super::go_value::{go_body, go_quote};
use super::pruning::{joined, path_index, path_key};
use serde_json::{Map, Value};

pub(super) fn fchild(path: &mut String, k: &str) {
    path_key(path, k);
}

pub(super) fn fkey(path: &mut String, k: &str) {
    path.push('[');
    path.push_str(k);
    path.push(']');
}

pub(super) fn embedded_validate(
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
