//! CustomResourceDefinition lifecycle: a stored CRD registers its resources (and reports
//! Established); deleting it removes its custom resources and unregisters them.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceInfo;
use crate::state::App;

pub fn is_crd(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "apiextensions.k8s.io" && r.kind == "CustomResourceDefinition"
}

/// Sets what the API server's CRD controllers report for a new CRD: the defaulted names
/// (`singular` = lower-case kind, `listKind` = kind + "List"), `acceptedNames`,
/// `storedVersions` and the conditions. The naming controller accepts each name unless another
/// CRD of the same group already uses it (NamesAccepted False with `PluralConflict`,
/// `SingularConflict`, `ShortNamesConflict`, `KindConflict` or `ListKindConflict`, and
/// Established False `NotAccepted`); the establishing controller then reports Established True.
pub fn establish(crd: &mut Value, others: &[Arc<Value>]) {
    let now = meta::now();
    let names = &mut crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_ascii_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let names = names.clone();
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let own = crd["metadata"]["name"].as_str().unwrap_or_default();
    let mut resources: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    for other in others {
        if other["spec"]["group"].as_str() != Some(group)
            || other["metadata"]["name"].as_str() == Some(own)
        {
            continue;
        }
        let accepted = &other["status"]["acceptedNames"];
        let s = |k: &str| accepted[k].as_str().unwrap_or_default().to_string();
        resources.extend([s("plural"), s("singular")]);
        if let Some(short) = accepted["shortNames"].as_array() {
            resources.extend(short.iter().filter_map(|n| n.as_str().map(str::to_string)));
        }
        kinds.extend([s("kind"), s("listKind")]);
    }
    let in_use = |name: &str, used: &[String]| !name.is_empty() && used.iter().any(|u| u == name);
    // In the naming controller's order; the last conflict found names the condition.
    let mut accepted = serde_json::Map::new();
    let mut conflict: Option<(&str, String)> = None;
    for (field, reason) in [
        ("plural", "PluralConflict"),
        ("singular", "SingularConflict"),
        ("shortNames", "ShortNamesConflict"),
        ("kind", "KindConflict"),
        ("listKind", "ListKindConflict"),
    ] {
        if field == "shortNames" {
            let Some(short) = names["shortNames"].as_array() else {
                continue;
            };
            let taken: Vec<String> = short
                .iter()
                .filter_map(Value::as_str)
                .filter(|n| in_use(n, &resources))
                .map(|n| format!("{n:?} is already in use"))
                .collect();
            match taken.len() {
                0 => {
                    accepted.insert(field.into(), json!(short));
                }
                1 => conflict = Some((reason, taken[0].clone())),
                _ => conflict = Some((reason, format!("[{}]", taken.join(", ")))),
            }
            continue;
        }
        let used = if field.ends_with("ind") {
            &kinds
        } else {
            &resources
        };
        let name = names[field].as_str().unwrap_or_default();
        if in_use(name, used) {
            conflict = Some((reason, format!("{name:?} is already in use")));
        } else if !name.is_empty() {
            accepted.insert(field.into(), json!(name));
        }
    }
    if let Some(c) = names.get("categories") {
        accepted.insert("categories".into(), c.clone());
    }
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let conditions = match conflict {
        None => json!([
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]),
        Some((reason, message)) => json!([
            {"type": "NamesAccepted", "status": "False", "reason": reason, "message": message, "lastTransitionTime": now},
            {"type": "Established", "status": "False", "reason": "NotAccepted", "message": "not all names are accepted", "lastTransitionTime": now},
        ]),
    };
    // The API approval controller's condition comes first: it is set as soon as the CRD is
    // seen, before the naming controller's.
    let conditions = match approval_condition(crd, &json!(now)) {
        Some(approval) => {
            let mut all = vec![approval];
            all.extend(conditions.as_array().cloned().unwrap_or_default());
            Value::Array(all)
        }
        None => conditions,
    };
    crd["status"] = json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": conditions,
    });
}

/// The annotation a CRD of a protected group must carry (`KubeAPIApprovedAnnotation`).
pub const API_APPROVED: &str = "api-approved.kubernetes.io";

/// Whether a group is a protected community group: `k8s.io`, `kubernetes.io` and their
/// subdomains (apiextensions-apiserver `apihelpers.IsProtectedCommunityGroup`).
pub fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// The approval state of a CRD of a protected group (`apihelpers.GetAPIApprovalState`): the
/// condition `KubernetesAPIApprovalPolicyConformant`'s status and reason, and the reason text.
fn approval_state(crd: &Value) -> (&'static str, &'static str, String) {
    let annotation = crd["metadata"]["annotations"][API_APPROVED]
        .as_str()
        .unwrap_or_default();
    let see = "see https://github.com/kubernetes/enhancements/pull/1111";
    if annotation.is_empty() {
        (
            "False",
            "MissingAnnotation",
            format!("protected groups must have approval annotation {API_APPROVED:?}, {see}"),
        )
    } else if annotation.starts_with("unapproved") {
        (
            "False",
            "UnapprovedAnnotation",
            format!("not approved: {annotation:?}"),
        )
    } else if is_url(annotation) {
        (
            "True",
            "ApprovedAnnotation",
            format!("approved in {annotation}"),
        )
    } else {
        (
            "False",
            "InvalidAnnotation",
            format!(
                "protected groups must have approval annotation {API_APPROVED:?} with either a URL or a reason starting with \"unapproved\", {see}"
            ),
        )
    }
}

/// A URL with a scheme and a host, as `url.ParseRequestURI` parses it.
fn is_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    let valid_scheme = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    valid_scheme && !host.is_empty() && !s.contains(char::is_whitespace)
}

/// The approval rule for CRDs of protected groups (apiextensions validation
/// `validateAPIApproval`, served only through apiextensions.k8s.io/v1): the annotation
/// `api-approved.kubernetes.io` must be a URL or start with `unapproved`, unless an update
/// leaves the approval state as it was. The error is `field: message` as
/// [`crate::registry::crd_resources`] reports its errors.
pub fn approval_error(crd: &Value, old: Option<&Value>) -> Option<String> {
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    if !is_protected_group(group) {
        return None;
    }
    let (_, reason, message) = approval_state(crd);
    if old.is_some_and(|old| approval_state(old).1 == reason) {
        return None;
    }
    let field = format!("metadata.annotations[{API_APPROVED}]");
    match reason {
        "MissingAnnotation" => Some(format!("{field}: Required value: {message}")),
        "InvalidAnnotation" => {
            let value = crd["metadata"]["annotations"][API_APPROVED]
                .as_str()
                .unwrap_or_default();
            Some(format!("{field}: Invalid value: {value:?}: {message}"))
        }
        _ => None,
    }
}

/// What the API server's CRD validation refuses beyond names and versions
/// ([`crate::registry::crd_resources`]): the approval rule of protected groups
/// ([`approval_error`]) and, in each version's `openAPIV3Schema`, a `type` that is not an
/// OpenAPI v3 type and the structural schema invariants (a type at the root, `object`, and for
/// every property and array item unless `x-kubernetes-int-or-string` or
/// `x-kubernetes-preserve-unknown-fields`; `items` for arrays). As the API server's internal
/// version, a schema shared by every version is reported under `spec.validation`. Causes are
/// `(field, reason, message)`.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<(String, &'static str, String)> {
    let mut causes = Vec::new();
    if let Some(e) = approval_error(crd, old) {
        let (field, message) = e.split_once(": ").unwrap_or(("", e.as_str()));
        let reason = if message.starts_with("Required value") {
            "FieldValueRequired"
        } else {
            "FieldValueInvalid"
        };
        causes.push((field.to_string(), reason, message.to_string()));
    }
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let schemas: Vec<&Value> = versions
        .iter()
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .collect();
    let hoisted = !schemas.is_empty() && schemas.iter().all(|s| *s == schemas[0]);
    for (i, schema) in schemas.iter().enumerate() {
        if !schema.is_object() || (hoisted && i > 0) {
            continue;
        }
        let path = if hoisted {
            "spec.validation.openAPIV3Schema".to_string()
        } else {
            format!("spec.versions[{i}].schema.openAPIV3Schema")
        };
        let mut types = Vec::new();
        schema_types(schema, &path, &mut types);
        causes.extend(types);
        structural(schema, Level::Root, &path, &mut causes);
    }
    causes
}

const OPENAPI_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// `type: Unsupported value` wherever a schema names a type OpenAPI v3 does not have.
fn schema_types(schema: &Value, path: &str, out: &mut Vec<(String, &'static str, String)>) {
    if let Some(t) = schema["type"].as_str()
        && !t.is_empty()
        && !OPENAPI_TYPES.contains(&t)
    {
        let supported: Vec<String> = OPENAPI_TYPES.iter().map(|t| format!("{t:?}")).collect();
        out.push((
            format!("{path}.type"),
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {t:?}: supported values: {}",
                supported.join(", ")
            ),
        ));
    }
    for (key, child) in children(schema) {
        schema_types(child, &format!("{path}.{key}"), out);
    }
}

/// The sub-schemas of a schema, with their path segments.
fn children(schema: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            out.push((format!("properties[{k}]"), v));
        }
    }
    if schema["items"].is_object() {
        out.push(("items".to_string(), &schema["items"]));
    }
    if schema["additionalProperties"].is_object() {
        out.push((
            "additionalProperties".to_string(),
            &schema["additionalProperties"],
        ));
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = schema[combinator].as_array() {
            for (i, v) in list.iter().enumerate() {
                out.push((format!("{combinator}[{i}]"), v));
            }
        }
    }
    if schema["not"].is_object() {
        out.push(("not".to_string(), &schema["not"]));
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

/// The structural schema invariants the API server checks on types and items
/// (apiextensions-apiserver `schema.validateStructuralInvariants`), through properties and
/// items.
fn structural(
    schema: &Value,
    level: Level,
    path: &str,
    out: &mut Vec<(String, &'static str, String)>,
) {
    let t = schema["type"].as_str().unwrap_or_default();
    if t == "array" && !schema["items"].is_object() {
        out.push((
            format!("{path}.items"),
            "FieldValueRequired",
            "Required value: must be specified".to_string(),
        ));
    }
    if schema["items"].is_object() {
        structural(&schema["items"], Level::Item, &format!("{path}.items"), out);
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            structural(v, Level::Field, &format!("{path}.properties[{k}]"), out);
        }
    }
    let flag = |k: &str| schema[k] == Value::Bool(true);
    if t.is_empty()
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
        && !flag("x-kubernetes-embedded-resource")
    {
        let what = match level {
            Level::Root => "at the root",
            Level::Item => "for specified array items",
            Level::Field => "for specified object fields",
        };
        out.push((
            format!("{path}.type"),
            "FieldValueRequired",
            format!("Required value: must not be empty {what}"),
        ));
    }
    if level == Level::Root && !t.is_empty() && t != "object" {
        out.push((
            format!("{path}.type"),
            "FieldValueInvalid",
            format!("Invalid value: {t:?}: must be object at the root"),
        ));
    }
}

/// The condition the API approval controller sets on a CRD of a protected group.
fn approval_condition(crd: &Value, now: &Value) -> Option<Value> {
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    if !is_protected_group(group) {
        return None;
    }
    let (status, reason, message) = approval_state(crd);
    Some(
        json!({"type": "KubernetesAPIApprovalPolicyConformant", "status": status,
        "reason": reason, "message": message, "lastTransitionTime": now}),
    )
}

/// Whether a stored CRD's names were accepted (only then are its resources served).
fn names_accepted(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_none_or(|cs| {
        cs.iter()
            .filter(|c| c["type"] == "NamesAccepted")
            .all(|c| c["status"] == "True")
    })
}

/// Called after every committed write: keeps the registry in step with stored CRDs.
pub fn after_write(app: &Arc<App>, r: &ResourceInfo, stored: Option<&Arc<Value>>) {
    if !is_crd(r) {
        return;
    }
    if let Some(crd) = stored.filter(|crd| names_accepted(crd)) {
        let mut st = app.store.lock();
        // Validated before storing; a failure here leaves the old registration.
        let _ = st.registry.register_crd(crd);
        drop(st);
        crate::apiservices::sync(app, false);
    }
}

/// Removes every custom resource of a deleted CRD and unregisters its resources.
pub fn removed(app: &Arc<App>, crd_name: &str) {
    let resources: Vec<Arc<ResourceInfo>> = {
        let st = app.store.lock();
        st.registry
            .all()
            .filter(|r| r.custom.as_ref().is_some_and(|c| c.crd_name == crd_name))
            .cloned()
            .collect()
    };
    if let Some(r) = resources.first() {
        let objects = app.store.lock().objects_of(&r.key(), None);
        for o in objects {
            let ns = meta::meta_str(&o, "namespace")
                .unwrap_or_default()
                .to_string();
            let name = meta::meta_str(&o, "name").unwrap_or_default().to_string();
            let _ = app.store.commit_remove(r, &ns, &name, None, None);
        }
    }
    app.store.lock().registry.unregister_crd(crd_name);
    crate::apiservices::sync(app, false);
}
