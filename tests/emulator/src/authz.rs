//! Who is asking, and what RBAC allows them: the access reviews of `authorization.k8s.io/v1`
//! (SubjectAccessReview, SelfSubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectRulesReview), answered from the stored Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings as kubernetes `plugin/pkg/auth/authorizer/rbac` does.
//!
//! By default the emulator does not authenticate requests: every caller is the default caller
//! ([`UserInfo::default_caller`], user `kubernetes-admin` in group `system:masters`, which is
//! always allowed, as on real clusters), except that a bearer token issued by TokenRequest
//! identifies its service account. `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`
//! and `Impersonate-Extra-*` headers (`kubectl --as`, `--as-group`) change the identity the
//! self reviews evaluate, after checking that the caller may impersonate. RBAC is then evaluated
//! for reviews only.
//!
//! With `Options::authorize` ([`admit`]), the emulator authenticates and authorizes as a
//! kube-apiserver with `--authorization-mode=RBAC`: the kubeconfig's token ([`ADMIN_TOKEN`]) is
//! the administrator, a token the emulator issued is its service account, a request without a
//! token is `system:anonymous`, and any other token is refused with 401. Every request but the
//! emulator's own control paths (`/__emulator/`) is then authorized against the stored RBAC
//! from its URL ([`request_attributes`], the API server's `RequestInfoFactory`), and a denied
//! one answers 403 with the API server's message.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

pub use crate::identity::UserInfo;
use crate::meta::meta_str;
use crate::request::Target;
use crate::request::json_response;
use crate::state::App;
use crate::status::ApiError;
use crate::store::State;

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// The bearer token of the kubeconfig the emulator writes: the cluster administrator.
pub const ADMIN_TOKEN: &str = "emulator";

/// Who sent a request, from its bearer token. Without `Options::authorize` a token the emulator
/// did not issue (or none) is the administrator; with it, the kubeconfig's token is, no token is
/// `system:anonymous`, and a token that is neither is a 401 (as an API server whose
/// authenticators all refuse a presented token).
fn authenticated(app: &App, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let issued = |t: &str| crate::tokens::authenticate(app, t, None).map(|(u, _)| u);
    if !app.authorize {
        return Ok(bearer
            .and_then(|t| issued(t).ok())
            .unwrap_or_else(UserInfo::default_caller));
    }
    match bearer {
        None => Ok(UserInfo::anonymous()),
        Some(ADMIN_TOKEN) => Ok(UserInfo::default_caller()),
        Some(t) => issued(t).map_err(|_| ApiError::new(401, "Unauthorized", "Unauthorized")),
    }
}

/// The identity a request acts as: its bearer token's, then impersonation applied.
pub fn requester(app: &App, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let caller = authenticated(app, headers)?;
    let user = header_values(headers, "impersonate-user");
    let groups: Vec<String> = header_values(headers, "impersonate-group")
        .into_iter()
        .map(str::to_string)
        .collect();
    let uid = header_values(headers, "impersonate-uid");
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = value.to_str()
        {
            let key = form_urlencoded::parse(format!("k={key}").as_bytes())
                .next()
                .map(|(_, v)| v.to_string())
                .unwrap_or_else(|| key.to_string());
            extra.entry(key).or_default().push(v.to_string());
        }
    }
    let Some(username) = user.first() else {
        if !groups.is_empty() || !uid.is_empty() || !extra.is_empty() {
            return Err(ApiError::internal(
                "Internal error occurred: requested impersonation of groups, uid or extra without impersonating a user",
            ));
        }
        return Ok(caller);
    };
    let username = username.to_string();
    let st = app.store.lock();
    let sa = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    let mut checks: Vec<(String, String, String)> = Vec::new();
    match sa {
        Some((ns, name)) => checks.push(("serviceaccounts".into(), ns.into(), name.into())),
        None => checks.push(("users".into(), String::new(), username.clone())),
    }
    for g in &groups {
        checks.push(("groups".into(), String::new(), g.clone()));
    }
    for (resource, ns, name) in checks {
        let attrs = Attributes::Resource {
            verb: "impersonate".into(),
            group: String::new(),
            resource: resource.clone(),
            subresource: String::new(),
            name: name.clone(),
            namespace: ns,
        };
        if !authorize(&st, &caller, &attrs).0 {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{resource} \"{name}\" is forbidden: User \"{}\" cannot impersonate resource \"{resource}\" in API group \"\" at the cluster scope",
                    caller.username
                ),
            )
            .with_details(json!({"name": name, "kind": resource})));
        }
    }
    drop(st);
    let mut info = UserInfo {
        username: username.clone(),
        uid: uid.first().map(|u| u.to_string()).unwrap_or_default(),
        groups: groups.clone(),
        extra,
    };
    if let Some((ns, _)) = sa
        && groups.is_empty()
    {
        info.groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ];
    }
    if username == "system:anonymous" {
        if !info.groups.iter().any(|g| g == "system:unauthenticated") {
            info.groups.push("system:unauthenticated".into());
        }
    } else if !info.groups.iter().any(|g| g == "system:authenticated") {
        info.groups.push("system:authenticated".into());
    }
    Ok(info)
}

/// The attributes of a request to authorize.
#[derive(Clone, Debug)]
pub enum Attributes {
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
        namespace: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

/// A resource as RBAC rules and messages name it: `resource` or `resource/subresource`.
fn addressed(resource: &str, subresource: &str) -> String {
    if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    }
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|v| v == "*" || v == want))
}

/// `RuleAllows` of the RBAC authorizer.
pub fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    match attrs {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = addressed(resource, subresource);
            let resource_ok = rule["resources"].as_array().is_some_and(|rs| {
                rs.iter().filter_map(Value::as_str).any(|r| {
                    r == "*"
                        || r == combined
                        || (!subresource.is_empty() && r == format!("*/{subresource}"))
                })
            });
            let names = rule["resourceNames"].as_array();
            let name_ok = match names {
                None => true,
                Some(ns) if ns.is_empty() => true,
                Some(ns) => ns.iter().any(|n| n == name.as_str()),
            };
            has(&rule["verbs"], verb) && has(&rule["apiGroups"], group) && resource_ok && name_ok
        }
        Attributes::NonResource { verb, path } => {
            has(&rule["verbs"], verb)
                && rule["nonResourceURLs"].as_array().is_some_and(|us| {
                    us.iter().filter_map(Value::as_str).any(|u| {
                        u == "*"
                            || u == path
                            || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
                    })
                })
        }
    }
}

/// Whether a binding subject is the user (`appliesToUser`); the description for reasons.
fn subject_applies(user: &UserInfo, subject: &Value, binding_ns: &str) -> Option<String> {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str().unwrap_or_default() {
        "User" if user.username == name => Some(format!("User {name:?}")),
        "Group" if user.groups.iter().any(|g| g == name) => Some(format!("Group {name:?}")),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            (user.username == format!("system:serviceaccount:{ns}:{name}"))
                .then(|| format!("ServiceAccount \"{name}/{ns}\""))
        }
        _ => None,
    }
}

/// The rules a binding grants, or the error naming the missing role.
fn role_rules(st: &State, role_ref: &Value, binding_ns: &str) -> Result<Vec<Value>, String> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let (plural, ns) = match role_ref["kind"].as_str() {
        Some("Role") => ("roles", binding_ns),
        _ => ("clusterroles", ""),
    };
    let r = st
        .registry
        .get("rbac.authorization.k8s.io", "v1", plural)
        .ok_or_else(|| format!("{plural} not served"))?;
    let role = st.get(&r, ns, name).ok_or_else(|| {
        format!(
            "{}.rbac.authorization.k8s.io \"{name}\" not found",
            &plural[..plural.len() - 1]
        )
    })?;
    Ok(role["rules"].as_array().cloned().unwrap_or_default())
}

/// Visits every rule that applies to `user` in `namespace` ("" = cluster scope): ClusterRoleBindings,
/// then the RoleBindings of the namespace. The visitor returns true to stop.
fn visit_rules(
    st: &State,
    user: &UserInfo,
    namespace: &str,
    visit: &mut dyn FnMut(&str, Result<&Value, &str>) -> bool,
) {
    let bindings = |plural: &str, ns: Option<&str>| -> Vec<Arc<Value>> {
        st.registry
            .get("rbac.authorization.k8s.io", "v1", plural)
            .map(|r| st.objects_of(&r.key(), ns))
            .unwrap_or_default()
    };
    for b in bindings("clusterrolebindings", None) {
        let bname = meta_str(&b, "name").unwrap_or_default();
        for s in b["subjects"].as_array().cloned().unwrap_or_default() {
            let Some(who) = subject_applies(user, &s, "") else {
                continue;
            };
            let source = format!(
                "ClusterRoleBinding {bname:?} of {} {:?} to {who}",
                b["roleRef"]["kind"].as_str().unwrap_or_default(),
                b["roleRef"]["name"].as_str().unwrap_or_default()
            );
            match role_rules(st, &b["roleRef"], "") {
                Ok(rules) => {
                    for rule in &rules {
                        if visit(&source, Ok(rule)) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if visit(&source, Err(&e)) {
                        return;
                    }
                }
            }
        }
    }
    if namespace.is_empty() {
        return;
    }
    for b in bindings("rolebindings", Some(namespace)) {
        let bname = meta_str(&b, "name").unwrap_or_default();
        for s in b["subjects"].as_array().cloned().unwrap_or_default() {
            let Some(who) = subject_applies(user, &s, namespace) else {
                continue;
            };
            let source = format!(
                "RoleBinding \"{bname}/{namespace}\" of {} {:?} to {who}",
                b["roleRef"]["kind"].as_str().unwrap_or_default(),
                b["roleRef"]["name"].as_str().unwrap_or_default()
            );
            match role_rules(st, &b["roleRef"], namespace) {
                Ok(rules) => {
                    for rule in &rules {
                        if visit(&source, Ok(rule)) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if visit(&source, Err(&e)) {
                        return;
                    }
                }
            }
        }
    }
}

/// The authorizer chain of a default kube-apiserver: `system:masters` is always allowed; then
/// RBAC. Returns (allowed, reason).
pub fn authorize(st: &State, user: &UserInfo, attrs: &Attributes) -> (bool, String) {
    if user.groups.iter().any(|g| g == "system:masters") {
        return (true, String::new());
    }
    let namespace = match attrs {
        Attributes::Resource { namespace, .. } => namespace.as_str(),
        Attributes::NonResource { .. } => "",
    };
    let mut allowed = None;
    let mut errors: Vec<String> = Vec::new();
    visit_rules(st, user, namespace, &mut |source, rule| match rule {
        Ok(rule) if rule_allows(rule, attrs) => {
            allowed = Some(format!("RBAC: allowed by {source}"));
            true
        }
        Ok(_) => false,
        Err(e) => {
            errors.push(e.to_string());
            false
        }
    });
    match allowed {
        Some(reason) => (true, reason),
        None if errors.is_empty() => (false, String::new()),
        None if errors.len() == 1 => (false, format!("RBAC: {}", errors[0])),
        None => (false, format!("RBAC: [{}]", errors.join(", "))),
    }
}

/// The attributes the API server authorizes a request by, from its method, path and query
/// alone (`RequestInfoFactory.NewRequestInfo` of k8s.io/apiserver): `/api/v1/...` and
/// `/apis/<group>/<version>/...` are resource requests, everything else a non-resource path.
pub fn request_attributes(
    method: &str,
    path: &str,
    query: &std::collections::HashMap<String, String>,
) -> Attributes {
    let non_resource = || Attributes::NonResource {
        verb: method.to_ascii_lowercase(),
        path: path.to_string(),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, mut rest) = match parts.as_slice() {
        ["api", _, _, ..] => ("", &parts[2..]),
        ["apis", group, _, _, ..] => (*group, &parts[3..]),
        _ => return non_resource(),
    };
    let mut verb = match rest[0] {
        special @ ("watch" | "proxy") => {
            if rest.len() < 2 {
                // "unable to determine kind and namespace": the API server refuses such a URL.
                return non_resource();
            }
            rest = &rest[1..];
            special
        }
        _ => match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        },
    }
    .to_string();
    let mut namespace = String::new();
    if rest[0] == "namespaces" && rest.len() > 1 {
        namespace = rest[1].to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let resource = rest[0].to_string();
    let mut name = rest.get(1).map(|n| n.to_string()).unwrap_or_default();
    let subresource = match rest.get(2) {
        Some(sub) if verb != "proxy" => sub.to_string(),
        _ => String::new(),
    };
    if name.is_empty() && verb == "get" {
        let watch = query
            .get("watch")
            .is_some_and(|w| matches!(w.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
        verb = if watch { "watch" } else { "list" }.into();
        // A list or watch of one object by `metadata.name` is authorized as that object's.
        let exact = query.get("fieldSelector").and_then(|s| {
            s.split(',').find_map(|term| {
                let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
                (field.trim() == "metadata.name").then(|| value.trim().to_string())
            })
        });
        if let Some(n) = exact.filter(|n| {
            !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('%')
        }) {
            name = n;
        }
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".into();
    }
    Attributes::Resource {
        verb,
        group: group.to_string(),
        resource,
        subresource,
        name,
        namespace,
    }
}

/// The API server's 403 for a request RBAC denies (`responsewriters.Forbidden`).
pub fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> ApiError {
    // The API server escapes these in the message (`sanitizer`).
    let sanitize = |s: String| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let who = &user.username;
    let (message, details) = match attrs {
        Attributes::NonResource { verb, path } => (
            format!("forbidden: User {who:?} cannot {verb} path {path:?}"),
            json!({}),
        ),
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            namespace,
        } => {
            let addressed = addressed(resource, subresource);
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {namespace:?}")
            };
            let why = format!(
                "User {who:?} cannot {verb} resource {addressed:?} in API group {group:?} {scope}"
            );
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let message = if name.is_empty() {
                format!("{qualified} is forbidden: {why}")
            } else {
                format!("{qualified} {name:?} is forbidden: {why}")
            };
            let mut details = serde_json::Map::new();
            for (key, value) in [("name", name), ("group", group), ("kind", resource)] {
                if !value.is_empty() {
                    details.insert(key.into(), json!(value));
                }
            }
            (message, Value::Object(details))
        }
    };
    let message = sanitize(message);
    let message = if reason.is_empty() {
        message
    } else {
        format!("{message}: {reason}")
    };
    ApiError::new(403, "Forbidden", message).with_details(details)
}

/// Authentication and authorization of one request under `Options::authorize` (a no-op
/// without it): 401 for a token nobody issued, 403 for what RBAC does not allow.
pub fn admit(
    app: &App,
    method: &str,
    path: &str,
    query: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if !app.authorize {
        return Ok(());
    }
    let user = requester(app, headers)?;
    let attrs = request_attributes(method, path, query);
    let (allowed, reason) = authorize(&app.store.lock(), &user, &attrs);
    if allowed {
        Ok(())
    } else {
        Err(forbidden(&user, &attrs, &reason))
    }
}

fn invalid(t: &Target, causes: Vec<(String, &'static str, String)>) -> ApiError {
    ApiError::invalid(&t.r, "", &causes)
}

fn attributes(spec: &Value) -> Result<Attributes, (String, &'static str, String)> {
    let ra = &spec["resourceAttributes"];
    let nra = &spec["nonResourceAttributes"];
    let s = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_string();
    match (ra.is_object(), nra.is_object()) {
        (true, true) => Err((
            "spec.nonResourceAttributes".into(),
            "FieldValueInvalid",
            "Invalid value: \"\": cannot be specified in combination with resourceAttributes".into(),
        )),
        (false, false) => Err((
            "spec.resourceAttributes".into(),
            "FieldValueInvalid",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
        )),
        (true, false) => Ok(Attributes::Resource {
            verb: s(ra, "verb"),
            group: s(ra, "group"),
            resource: s(ra, "resource"),
            subresource: s(ra, "subresource"),
            name: s(ra, "name"),
            namespace: s(ra, "namespace"),
        }),
        (false, true) => Ok(Attributes::NonResource {
            verb: s(nra, "verb"),
            path: s(nra, "path"),
        }),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// POST of an access review: the request's object with `status` filled in, 201.
pub fn review(
    app: &Arc<App>,
    t: &Target,
    headers: &HeaderMap,
    mut obj: Value,
) -> Result<Response, ApiError> {
    crate::ops::check_type(&t.r, &mut obj)?;
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let kind = t.r.kind.clone();
    if kind == "SelfSubjectRulesReview" {
        let ns = obj["spec"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let user = requester(app, headers)?;
        obj["status"] = rules_review(&app.store.lock(), &user, &ns);
        return Ok(json_response(StatusCode::CREATED, &obj));
    }
    let spec = obj["spec"].clone();
    let mut attrs = attributes(&spec).map_err(|c| invalid(t, vec![c]))?;
    let user = match kind.as_str() {
        "SelfSubjectAccessReview" => requester(app, headers)?,
        _ => {
            let user = UserInfo {
                username: spec["user"].as_str().unwrap_or_default().to_string(),
                uid: spec["uid"].as_str().unwrap_or_default().to_string(),
                groups: strings(&spec["groups"]),
                extra: spec["extra"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                    .unwrap_or_default(),
            };
            if user.username.is_empty() && user.groups.is_empty() {
                return Err(invalid(
                    t,
                    vec![(
                        "spec.user".into(),
                        "FieldValueInvalid",
                        "Invalid value: \"\": at least one of user or group must be specified"
                            .into(),
                    )],
                ));
            }
            user
        }
    };
    if kind == "LocalSubjectAccessReview" {
        let ns = t.namespace.clone();
        if let Some(m) = meta_str(&obj, "namespace").filter(|n| !n.is_empty() && *n != ns) {
            return Err(ApiError::bad_request(format!(
                "namespace of the object ({m}) does not match the namespace on the request ({ns})"
            )));
        }
        obj["metadata"]["namespace"] = json!(ns);
        match &mut attrs {
            Attributes::NonResource { .. } => {
                return Err(invalid(
                    t,
                    vec![(
                        "spec.nonResourceAttributes".into(),
                        "FieldValueInvalid",
                        "Invalid value: \"\": disallowed on this kind of request".into(),
                    )],
                ));
            }
            Attributes::Resource { namespace, .. } if *namespace != ns => {
                return Err(invalid(
                    t,
                    vec![(
                        "spec.resourceAttributes.namespace".into(),
                        "FieldValueInvalid",
                        format!("Invalid value: {namespace:?}: must match metadata.namespace"),
                    )],
                ));
            }
            _ => {}
        }
    }
    let (allowed, reason) = authorize(&app.store.lock(), &user, &attrs);
    let mut status = json!({"allowed": allowed});
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    obj["status"] = status;
    Ok(json_response(StatusCode::CREATED, &obj))
}

/// SelfSubjectRulesReview status: the rules that apply to `user` in `namespace`.
fn rules_review(st: &State, user: &UserInfo, namespace: &str) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let mut errors = Vec::new();
    if user.groups.iter().any(|g| g == "system:masters") {
        resource_rules.push(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        non_resource_rules.push(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    }
    visit_rules(st, user, namespace, &mut |_, rule| {
        match rule {
            Ok(rule) if rule["nonResourceURLs"].is_array() => {
                non_resource_rules.push(
                    json!({"verbs": rule["verbs"], "nonResourceURLs": rule["nonResourceURLs"]}),
                );
            }
            Ok(rule) => {
                let mut r = json!({"verbs": rule["verbs"], "apiGroups": rule["apiGroups"], "resources": rule["resources"]});
                if rule["resourceNames"].is_array() {
                    r["resourceNames"] = rule["resourceNames"].clone();
                }
                resource_rules.push(r);
            }
            Err(e) => errors.push(e.to_string()),
        }
        false
    });
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": !errors.is_empty()});
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

/// POST of a TokenReview or SelfSubjectReview.
pub fn token_review(
    app: &Arc<App>,
    t: &Target,
    headers: &HeaderMap,
    mut obj: Value,
) -> Result<Response, ApiError> {
    crate::ops::check_type(&t.r, &mut obj)?;
    if t.r.kind == "SelfSubjectReview" {
        let user = requester(app, headers)?;
        obj["status"] = json!({"userInfo": user.to_json()});
        return Ok(json_response(StatusCode::CREATED, &obj));
    }
    let token = obj["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if token.is_empty() {
        return Err(ApiError::invalid(
            &t.r,
            "",
            &[(
                "spec.token".into(),
                "FieldValueRequired",
                "Required value: token must be specified".into(),
            )],
        ));
    }
    let audiences: Option<Vec<String>> = obj["spec"]["audiences"]
        .as_array()
        .filter(|a| !a.is_empty())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        });
    obj["status"] = match crate::tokens::authenticate(app, &token, audiences.as_deref()) {
        Ok((user, auds)) => {
            json!({"authenticated": true, "user": user.to_json(), "audiences": auds})
        }
        Err(e) => json!({"user": {}, "error": e}),
    };
    Ok(json_response(StatusCode::CREATED, &obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        name: &str,
        ns: &str,
    ) -> String {
        format!("{verb} {group}/{resource}/{sub} {name:?} in {ns:?}")
    }

    fn show(a: &Attributes) -> String {
        match a {
            Attributes::Resource {
                verb,
                group,
                resource: r,
                subresource,
                name,
                namespace,
            } => resource(verb, group, r, subresource, name, namespace),
            Attributes::NonResource { verb, path } => format!("{verb} path {path}"),
        }
    }

    /// The request attributes of `RequestInfoFactory`, row by row.
    #[test]
    fn request_attributes_are_the_api_servers() {
        let rows: &[(&str, &str, &str, String)] = &[
            ("GET", "/version", "", "get path /version".into()),
            ("GET", "/apis", "", "get path /apis".into()),
            ("GET", "/apis/apps", "", "get path /apis/apps".into()),
            ("GET", "/api/v1", "", "get path /api/v1".into()),
            ("GET", "/apis/apps/v1", "", "get path /apis/apps/v1".into()),
            ("POST", "/metrics", "", "post path /metrics".into()),
            (
                "GET",
                "/api/v1/namespaces/apps/pods",
                "",
                resource("list", "", "pods", "", "", "apps"),
            ),
            (
                "GET",
                "/api/v1/pods",
                "watch=true",
                resource("watch", "", "pods", "", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/apps/pods",
                "watch=1&fieldSelector=metadata.name%3Dweb",
                resource("watch", "", "pods", "", "web", "apps"),
            ),
            (
                "GET",
                "/api/v1/namespaces/apps/pods",
                "fieldSelector=status.phase%3DRunning,metadata.name%3D%3Dweb",
                resource("list", "", "pods", "", "web", "apps"),
            ),
            (
                "GET",
                "/api/v1/namespaces/apps/pods",
                "fieldSelector=metadata.name!%3Dweb",
                resource("list", "", "pods", "", "", "apps"),
            ),
            (
                "GET",
                "/api/v1/namespaces/apps/pods/web",
                "watch=true",
                resource("get", "", "pods", "", "web", "apps"),
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/apps/pods/web",
                "",
                resource("watch", "", "pods", "", "web", "apps"),
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/apps/deployments/web/scale",
                "",
                resource("patch", "apps", "deployments", "scale", "web", "apps"),
            ),
            (
                "POST",
                "/apis/apps/v1/namespaces/apps/deployments",
                "",
                resource("create", "apps", "deployments", "", "", "apps"),
            ),
            (
                "PUT",
                "/apis/sites.ecmwf.int/v1/namespaces/apps/sites/a/status",
                "",
                resource("update", "sites.ecmwf.int", "sites", "status", "a", "apps"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/apps/configmaps",
                "",
                resource("deletecollection", "", "configmaps", "", "", "apps"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/apps/configmaps/c",
                "",
                resource("delete", "", "configmaps", "", "c", "apps"),
            ),
            // A namespace is its own namespace; its status and finalize are its subresources.
            (
                "GET",
                "/api/v1/namespaces/apps",
                "",
                resource("get", "", "namespaces", "", "apps", "apps"),
            ),
            (
                "PUT",
                "/api/v1/namespaces/apps/finalize",
                "",
                resource("update", "", "namespaces", "finalize", "apps", "apps"),
            ),
            (
                "GET",
                "/api/v1/namespaces",
                "",
                resource("list", "", "namespaces", "", "", ""),
            ),
            (
                "GET",
                "/api/v1/nodes/n1/proxy/metrics",
                "",
                resource("get", "", "nodes", "proxy", "n1", ""),
            ),
            (
                "GET",
                "/api/v1/proxy/nodes/n1/metrics",
                "",
                resource("proxy", "", "nodes", "", "n1", ""),
            ),
        ];
        for (method, path, query, want) in rows {
            let query = form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect();
            assert_eq!(
                &show(&request_attributes(method, path, &query)),
                want,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn forbidden_messages_are_the_api_servers() {
        let robot = UserInfo::service_account("apps", "robot", "u1");
        let attrs = |verb: &str, group: &str, res: &str, sub: &str, name: &str, ns: &str| {
            Attributes::Resource {
                verb: verb.into(),
                group: group.into(),
                resource: res.into(),
                subresource: sub.into(),
                name: name.into(),
                namespace: ns.into(),
            }
        };
        let rows: &[(Attributes, &str, &str, Value)] = &[
            (
                attrs("list", "", "pods", "", "", "apps"),
                "",
                r#"pods is forbidden: User "system:serviceaccount:apps:robot" cannot list resource "pods" in API group "" in the namespace "apps""#,
                json!({"kind": "pods"}),
            ),
            (
                attrs("patch", "apps", "deployments", "scale", "web", "apps"),
                "",
                r#"deployments.apps "web" is forbidden: User "system:serviceaccount:apps:robot" cannot patch resource "deployments/scale" in API group "apps" in the namespace "apps""#,
                json!({"name": "web", "group": "apps", "kind": "deployments"}),
            ),
            (
                attrs("get", "", "nodes", "", "n1", ""),
                r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#,
                r#"nodes "n1" is forbidden: User "system:serviceaccount:apps:robot" cannot get resource "nodes" in API group "" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#,
                json!({"name": "n1", "kind": "nodes"}),
            ),
            (
                Attributes::NonResource {
                    verb: "get".into(),
                    path: "/metrics".into(),
                },
                "",
                r#"forbidden: User "system:serviceaccount:apps:robot" cannot get path "/metrics""#,
                json!({}),
            ),
        ];
        for (attrs, reason, message, details) in rows {
            let e = forbidden(&robot, attrs, reason);
            assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
            assert_eq!(e.message, *message);
            assert_eq!(e.details.as_ref(), Some(details));
        }
    }
}
