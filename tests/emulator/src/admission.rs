//! Admission webhooks: the emulator reads MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration objects and calls the webhooks over TLS, verified against
//! `caBundle`, as the API server does (extensible-admission-controllers.md, Kubernetes 1.32):
//! mutating webhooks in order (configuration name, then list position), each JSONPatch applied
//! before the next; then validation; then validating webhooks in parallel, first denial wins.
//!
//! Matching: `rules` (operations, apiGroups, apiVersions, resources with subresources, scope),
//! `namespaceSelector`, `objectSelector`, and `matchConditions` in a documented CEL subset:
//! `has(<path>)`, `<path> == <literal>`, `<path> != <literal>`, `&&`, `||`, `!`, parentheses, and
//! `true`/`false`, where paths start at `object`, `oldObject` or `request` and literals are
//! single- or double-quoted strings, numbers, booleans or null. Anything else is an evaluation
//! error, which follows the webhook's failurePolicy as on a real API server.
//!
//! Service references resolve through [`ServiceMap`]: a test maps `<name>.<namespace>.svc:<port>`
//! to a local address; the TLS server name stays `<name>.<namespace>.svc`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::meta::meta_str;
use crate::registry::ResourceInfo;
use crate::selector::LabelSelector;
use crate::state::App;
use crate::status::ApiError;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One admission attempt.
pub struct Attempt<'a> {
    pub r: &'a ResourceInfo,
    pub op: Operation,
    pub namespace: &'a str,
    pub name: &'a str,
    pub subresource: Option<&'a str>,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub field_manager: Option<&'a str>,
}

struct Hook {
    config: String,
    webhook: Value,
    mutating: bool,
}

fn hooks(app: &App, mutating: bool) -> Vec<Hook> {
    let key = if mutating {
        "mutatingwebhookconfigurations.admissionregistration.k8s.io"
    } else {
        "validatingwebhookconfigurations.admissionregistration.k8s.io"
    };
    let configs = app.store.lock().objects_of(key, None);
    let mut out = Vec::new();
    for c in configs {
        let config = meta_str(&c, "name").unwrap_or_default().to_string();
        for w in c["webhooks"].as_array().cloned().unwrap_or_default() {
            out.push(Hook {
                config: config.clone(),
                webhook: w,
                mutating,
            });
        }
    }
    out
}

fn matches_list(list: &Value, value: &str) -> bool {
    list.as_array()
        .is_some_and(|l| l.iter().any(|v| v == "*" || v.as_str() == Some(value)))
}

fn rule_matches(rule: &Value, a: &Attempt<'_>) -> bool {
    let resource = match a.subresource {
        Some(sub) => format!("{}/{sub}", a.r.plural),
        None => a.r.plural.clone(),
    };
    let resources_ok = rule["resources"].as_array().is_some_and(|rs| {
        rs.iter().filter_map(Value::as_str).any(|pattern| {
            pattern == resource
                || pattern == "*/*"
                || (pattern == "*" && a.subresource.is_none())
                || pattern
                    .strip_suffix("/*")
                    .is_some_and(|p| p == a.r.plural && a.subresource.is_some())
                || pattern
                    .strip_prefix("*/")
                    .is_some_and(|s| Some(s) == a.subresource)
        })
    });
    let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
        "Namespaced" => a.r.namespaced,
        "Cluster" => !a.r.namespaced,
        _ => true,
    };
    matches_list(&rule["operations"], a.op.as_str())
        && matches_list(&rule["apiGroups"], &a.r.group)
        && matches_list(&rule["apiVersions"], &a.r.version)
        && resources_ok
        && scope_ok
}

fn selector_matches(sel: &Value, labels_of: &[&Value]) -> Result<bool, String> {
    if sel.is_null() {
        return Ok(true);
    }
    let s = LabelSelector::from_api(sel)?;
    if s.is_empty() {
        return Ok(true);
    }
    Ok(labels_of.iter().any(|o| s.matches_object(o)))
}

/// Whether a webhook applies to the attempt (before matchConditions).
fn webhook_matches(app: &App, w: &Value, a: &Attempt<'_>) -> Result<bool, String> {
    let rules_ok = w["rules"]
        .as_array()
        .is_some_and(|rules| rules.iter().any(|r| rule_matches(r, a)));
    if !rules_ok {
        return Ok(false);
    }
    // namespaceSelector: the namespace's labels; a Namespace uses its own; other cluster-scoped
    // objects always pass.
    let ns_sel = &w["namespaceSelector"];
    if !ns_sel.is_null() {
        if a.r.is_builtin() && a.r.kind == "Namespace" {
            let own = a.object.or(a.old).cloned().unwrap_or(Value::Null);
            if !selector_matches(ns_sel, &[&own])? {
                return Ok(false);
            }
        } else if a.r.namespaced {
            let ns_obj = {
                let st = app.store.lock();
                st.registry
                    .get("", "v1", "namespaces")
                    .and_then(|nr| st.get(&nr, "", a.namespace))
            };
            let ns_obj = ns_obj.map(|o| (*o).clone()).unwrap_or(Value::Null);
            if !selector_matches(ns_sel, &[&ns_obj])? {
                return Ok(false);
            }
        }
    }
    let mut subjects: Vec<&Value> = Vec::new();
    if let Some(o) = a.object {
        subjects.push(o);
    }
    if let Some(o) = a.old {
        subjects.push(o);
    }
    selector_matches(&w["objectSelector"], &subjects)
}

/// A webhook call failure (as opposed to a denial).
fn call_failure(name: &str, why: &str) -> ApiError {
    ApiError::internal(format!(
        "Internal error occurred: failed calling webhook \"{name}\": {why}"
    ))
}

fn request_review(a: &Attempt<'_>, object: Option<&Value>, uid: &str) -> Value {
    let gvk = json!({"group": a.r.group, "version": a.r.version, "kind": a.r.kind});
    let gvr = json!({"group": a.r.group, "version": a.r.version, "resource": a.r.plural});
    let options = match a.op {
        Operation::Create => {
            json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": a.field_manager})
        }
        Operation::Update => {
            json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": a.field_manager})
        }
        Operation::Delete => json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}),
    };
    let mut request = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": a.name,
        "operation": a.op.as_str(),
        "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": a.old.cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": options,
    });
    if a.r.namespaced {
        request["namespace"] = json!(a.namespace);
    }
    if let Some(sub) = a.subresource {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Outcome of one webhook call.
enum Called {
    /// Allowed, with an optional JSONPatch and warnings.
    Allowed(Option<Value>, Vec<String>),
    Denied(ApiError),
}

async fn call(
    app: &App,
    hook: &Hook,
    a: &Attempt<'_>,
    object: Option<&Value>,
) -> Result<Called, ApiError> {
    let w = &hook.webhook;
    let name = w["name"].as_str().unwrap_or_default().to_string();
    let versions_ok = w["admissionReviewVersions"]
        .as_array()
        .is_some_and(|v| v.iter().any(|x| x == "v1"));
    if !versions_ok {
        return Err(call_failure(
            &name,
            "admissionReviewVersions must include v1 (the emulator speaks admission.k8s.io/v1 only)",
        ));
    }
    let timeout = Duration::from_secs(w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30));
    let uid = uuid::Uuid::new_v4().to_string();
    let review = request_review(a, object, &uid);
    let body = serde_json::to_vec(&review).map_err(|e| call_failure(&name, &e.to_string()))?;

    let cc = &w["clientConfig"];
    let ca = cc["caBundle"]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let (addr, server_name, path) = if let Some(url) = cc["url"].as_str() {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| call_failure(&name, "webhook url must use https"))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().unwrap_or(443)),
            None => (hostport.to_string(), 443),
        };
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                call_failure(&name, &format!("dial tcp: lookup {host}: no such host"))
            })?;
        (addr, host, path)
    } else {
        let svc = &cc["service"];
        let ns = svc["namespace"].as_str().unwrap_or_default();
        let svc_name = svc["name"].as_str().unwrap_or_default();
        let port = svc["port"].as_u64().unwrap_or(443) as u16;
        let path = svc["path"].as_str().unwrap_or("/").to_string();
        let addr = app.services.get(ns, svc_name, port).ok_or_else(|| {
            call_failure(
                &name,
                &format!(
                    "service \"{svc_name}\" not found (map it with the emulator's service map)"
                ),
            )
        })?;
        (addr, format!("{svc_name}.{ns}.svc"), path)
    };
    let query = format!("{path}?timeout={}s", timeout.as_secs());
    let exchange = post_tls(addr, &server_name, &ca, &query, body);
    let (status, resp_body) = match tokio::time::timeout(timeout, exchange).await {
        Err(_) => return Err(call_failure(&name, "context deadline exceeded")),
        Ok(Err(e)) => return Err(call_failure(&name, &e)),
        Ok(Ok(r)) => r,
    };
    if status != 200 {
        return Err(call_failure(
            &name,
            &format!("expected response code 200, got {status}"),
        ));
    }
    let review: Value = serde_json::from_slice(&resp_body)
        .map_err(|e| call_failure(&name, &format!("failed to decode response: {e}")))?;
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(call_failure(
            &name,
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview",
        ));
    }
    let response = &review["response"];
    if response["uid"] != json!(uid) {
        return Err(call_failure(
            &name,
            &format!(
                "expected response.uid=\"{uid}\", got \"{}\"",
                response["uid"].as_str().unwrap_or_default()
            ),
        ));
    }
    let warnings: Vec<String> = response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let allowed = response["allowed"]
        .as_bool()
        .ok_or_else(|| call_failure(&name, "response.allowed is required"))?;
    if !allowed {
        let st = &response["status"];
        let code = st["code"]
            .as_u64()
            .map(|c| c as u16)
            .filter(|c| *c >= 400)
            .unwrap_or(400);
        let reason = st["reason"].as_str().unwrap_or_default();
        let detail = st["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .or_else(|| (!reason.is_empty()).then(|| reason.to_string()))
            .unwrap_or_else(|| "without explanation".to_string());
        let mut e = ApiError::new(
            code,
            reason,
            format!("admission webhook \"{name}\" denied the request: {detail}"),
        );
        e.details = None;
        return Ok(Called::Denied(e));
    }
    let patch = match (response.get("patch"), response.get("patchType")) {
        (None | Some(Value::Null), None | Some(Value::Null)) => None,
        (Some(p @ (Value::String(_) | Value::Array(_))), Some(Value::String(t)))
            if t == "JSONPatch" =>
        {
            if !hook.mutating {
                return Err(call_failure(
                    &name,
                    "validating webhook may not return a patch",
                ));
            }
            // `patch` is a Go []byte: canonically a base64 string, but Go's JSON decoder also
            // accepts an array of byte values (what some webhook libraries send).
            let raw = patch_bytes(p)
                .map_err(|e| call_failure(&name, &format!("undecodable patch: {e}")))?;
            Some(
                serde_json::from_slice(&raw)
                    .map_err(|e| call_failure(&name, &format!("undecodable patch: {e}")))?,
            )
        }
        (Some(_), Some(Value::String(t))) => {
            return Err(call_failure(
                &name,
                &format!("unsupported patch type \"{t}\""),
            ));
        }
        _ => {
            return Err(call_failure(
                &name,
                "patch and patchType must be set together",
            ));
        }
    };
    Ok(Called::Allowed(patch, warnings))
}

/// The bytes of a `[]byte` JSON field: a base64 string or an array of numbers 0-255.
fn patch_bytes(value: &Value) -> Result<Vec<u8>, String> {
    match value {
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| e.to_string()),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| format!("{v} is not a byte value"))
            })
            .collect(),
        other => Err(format!("expected a base64 string, got {other}")),
    }
}

/// One HTTPS POST over a fresh connection; returns (status, body).
async fn post_tls(
    addr: SocketAddr,
    server_name: &str,
    ca_pem: &[u8],
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), String> {
    use http_body_util::BodyExt;
    let mut roots = rustls::RootCertStore::empty();
    let mut reader = std::io::BufReader::new(ca_pem);
    for cert in rustls_pemfile_certs(&mut reader) {
        let _ = roots.add(cert);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let sni = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("Post \"https://{server_name}{path}\": dial tcp {addr}: {e}"))?;
    let tls = connector
        .connect(sni, tcp)
        .await
        .map_err(|e| format!("Post \"https://{server_name}{path}\": tls: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::post(path)
        .header("host", server_name)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes()
        .to_vec();
    Ok((status, body))
}

/// Certificates from PEM text (no other PEM blocks are needed).
fn rustls_pemfile_certs(
    reader: &mut dyn std::io::BufRead,
) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    let mut text = Vec::new();
    let _ = reader.read_to_end(&mut text);
    rustls::pki_types::CertificateDer::pem_slice_iter(&text)
        .filter_map(Result::ok)
        .collect()
}

fn fails_closed(w: &Value) -> bool {
    w["failurePolicy"].as_str() != Some("Ignore")
}

fn supports_dry_run(w: &Value) -> bool {
    matches!(
        w["sideEffects"].as_str(),
        Some("None") | Some("NoneOnDryRun")
    )
}

/// Evaluates matchConditions; Err is an evaluation error.
fn conditions_match(w: &Value, a: &Attempt<'_>, object: Option<&Value>) -> Result<bool, String> {
    let Some(conds) = w["matchConditions"].as_array() else {
        return Ok(true);
    };
    let request = json!({
        "name": a.name,
        "namespace": a.namespace,
        "operation": a.op.as_str(),
        "dryRun": a.dry_run,
        "subResource": a.subresource.unwrap_or(""),
        "resource": {"group": a.r.group, "version": a.r.version, "resource": a.r.plural},
        "kind": {"group": a.r.group, "version": a.r.version, "kind": a.r.kind},
        "userInfo": {"username": "system:admin"},
    });
    let vars = json!({
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": a.old.cloned().unwrap_or(Value::Null),
        "request": request,
    });
    for c in conds {
        let expr = c["expression"].as_str().unwrap_or_default();
        if !crate::cel::eval(expr, &vars)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether a webhook is called for the attempt: rules, selectors and matchConditions (an
/// evaluation error follows the failurePolicy), and dryRun only for side-effect-free webhooks.
fn selected(app: &App, w: &Value, a: &Attempt<'_>, name: &str) -> Result<bool, ApiError> {
    match webhook_matches(app, w, a).and_then(|m| Ok(m && conditions_match(w, a, a.object)?)) {
        Ok(false) => return Ok(false),
        Ok(true) => {}
        Err(e) if fails_closed(w) => {
            return Err(call_failure(name, &format!("matchConditions: {e}")));
        }
        Err(_) => return Ok(false),
    }
    if a.dry_run && !supports_dry_run(w) {
        return Err(ApiError::bad_request(format!(
            "admission webhook \"{name}\" does not support dry run"
        )));
    }
    Ok(true)
}

/// Runs mutating webhooks on `object` (the attempt's own `object` is not read); returns the
/// (possibly patched) object and warnings.
pub async fn mutate(
    app: &App,
    a: &Attempt<'_>,
    object: Option<Value>,
) -> Result<(Option<Value>, bool, Vec<String>), ApiError> {
    let mut object = object;
    let mut changed = false;
    let mut warnings = Vec::new();
    let mut list = hooks(app, true);
    list.sort_by(|x, y| x.config.cmp(&y.config));
    for hook in list {
        let w = &hook.webhook;
        let name = w["name"].as_str().unwrap_or_default().to_string();
        let called = {
            // Each webhook sees the object as the ones before it left it.
            let current = Attempt {
                object: object.as_ref(),
                ..*a
            };
            if !selected(app, w, &current, &name)? {
                continue;
            }
            call(app, &hook, &current, object.as_ref()).await
        };
        match called {
            Ok(Called::Allowed(patch, w_warnings)) => {
                warnings.extend(w_warnings);
                if let (Some(patch), Some(obj)) = (patch, object.as_mut()) {
                    let p: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                        ApiError::internal(format!("Internal error occurred: admission webhook \"{name}\" returned an invalid patch: {e}"))
                    })?;
                    json_patch::patch(obj, &p).map_err(|e| {
                        ApiError::internal(format!("Internal error occurred: admission webhook \"{name}\" returned a patch that failed to apply: {e}"))
                    })?;
                    changed = true;
                }
            }
            Ok(Called::Denied(e)) => return Err(e),
            Err(e) if fails_closed(w) => return Err(e),
            Err(_) => {}
        }
    }
    Ok((object, changed, warnings))
}

/// Runs validating webhooks in parallel; the first denial or failure (in order) wins.
pub async fn validate(app: &App, a: &Attempt<'_>) -> Result<Vec<String>, ApiError> {
    let mut chosen = Vec::new();
    for hook in hooks(app, false) {
        let w = &hook.webhook;
        let name = w["name"].as_str().unwrap_or_default().to_string();
        if selected(app, w, a, &name)? {
            chosen.push(hook);
        }
    }
    let calls = chosen.iter().map(|h| call(app, h, a, a.object));
    let results = futures::future::join_all(calls).await;
    let mut warnings = Vec::new();
    for (hook, result) in chosen.iter().zip(results) {
        match result {
            Ok(Called::Allowed(_, w)) => warnings.extend(w),
            Ok(Called::Denied(e)) => return Err(e),
            Err(e) if fails_closed(&hook.webhook) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(warnings)
}
