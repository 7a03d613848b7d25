//! Who is asking, and what RBAC allows them: the access reviews of `authorization.k8s.io/v1`
//! (SubjectAccessReview, SelfSubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectRulesReview), answered from the stored Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings as kubernetes `plugin/pkg/auth/authorizer/rbac` does.
//!
//! The emulator does not authenticate requests: every caller is the default caller
//! ([`UserInfo::default_caller`], user `kubernetes-admin` in group `system:masters`, which is
//! always allowed, as on real clusters), except that a bearer token issued by TokenRequest
//! identifies its service account. `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`
//! and `Impersonate-Extra-*` headers (`kubectl --as`, `--as-group`) change the identity the
//! self reviews evaluate, after checking that the caller may impersonate. RBAC is evaluated
//! for reviews only; other requests are not authorized.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::meta::meta_str;
use crate::server::{App, Target};
use crate::status::ApiError;
use crate::store::State;
use crate::subresources::json_response;

/// An authenticated identity (`user.Info`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// Whoever calls the emulator without a token it issued: a cluster administrator.
    pub fn default_caller() -> UserInfo {
        UserInfo {
            username: "kubernetes-admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    /// A service account's identity.
    pub fn service_account(ns: &str, name: &str, uid: &str) -> UserInfo {
        UserInfo {
            username: format!("system:serviceaccount:{ns}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// `authentication.k8s.io/v1` UserInfo JSON.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// The identity a request acts as: its bearer token's, then impersonation applied.
pub fn requester(app: &App, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let caller = bearer
        .and_then(|t| crate::tokens::authenticate(app, t, None).ok())
        .map(|(u, _)| u)
        .unwrap_or_else(UserInfo::default_caller);
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
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
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
