//! Admission webhooks through the emulator: the webhook rows of checklist B in docs/emulator.md.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Cluster, Phase, Site, api_error, site};

/// A CA that signs webhook serving certificates.
struct TestCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

impl TestCa {
    fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            params,
            key,
        }
    }

    fn bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.pem)
    }

    fn serving(&self, dns: &str) -> rustls::ServerConfig {
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![dns.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap()
    }
}

type Handler = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// Serves AdmissionReview requests over TLS with `handler` deciding the response; records the
/// requests it saw.
struct TestWebhook {
    addr: SocketAddr,
    seen: Arc<std::sync::Mutex<Vec<Value>>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl TestWebhook {
    async fn start(tls: rustls::ServerConfig, handler: Handler) -> TestWebhook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let recorded = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut stopped => return,
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => return },
                };
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let handler = handler.clone();
                            let recorded = recorded.clone();
                            async move {
                                use http_body_util::BodyExt;
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let review: Value = serde_json::from_slice(&body).unwrap();
                                recorded.lock().unwrap().push(review.clone());
                                let response = handler(&review);
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(
                                        serde_json::to_vec(&response).unwrap(),
                                    )),
                                ))
                            }
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
                });
            }
        });
        TestWebhook { addr, seen, stop }
    }

    fn requests(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}

fn respond(review: &Value, allowed: bool, status: Option<Value>, patch: Option<Value>) -> Value {
    let mut response = json!({"uid": review["request"]["uid"], "allowed": allowed});
    if let Some(s) = status {
        response["status"] = s;
    }
    if let Some(p) = patch {
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn webhook(
    name: &str,
    ca: &TestCa,
    path: &str,
    resources: &[&str],
    failure: &str,
    side_effects: &str,
) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": side_effects,
        "failurePolicy": failure,
        "timeoutSeconds": 5,
        "clientConfig": {"caBundle": ca.bundle(), "service": {"namespace": "sites", "name": "hooks", "path": path, "port": 443}},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["sites.ecmwf.int"], "apiVersions": ["v1"], "resources": resources}],
    })
}

async fn install_validating(c: &Cluster, hooks: Vec<Value>) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(c.client.clone());
    let cfg: ValidatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "test-validating"}, "webhooks": hooks}))
            .unwrap();
    api.create(&PostParams::default(), &cfg).await.unwrap();
}

fn deny_owner_root() -> Handler {
    Arc::new(|review: &Value| {
        if review["request"]["object"]["spec"]["owner"] == "root" {
            respond(
                review,
                false,
                Some(
                    json!({"code": 403, "reason": "Forbidden", "message": "spec.owner: root may not own sites"}),
                ),
                None,
            )
        } else {
            respond(review, true, None, None)
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_reaches_the_client_with_the_field_and_kubectl_shows_it() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let hook = TestWebhook::start(ca.serving("hooks.sites.svc"), deny_owner_root()).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    install_validating(
        &c,
        vec![webhook(
            "validate.sites.ecmwf.int",
            &ca,
            "/validate-sites",
            &["sites"],
            "Fail",
            "None",
        )],
    )
    .await;

    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    sites
        .create(&PostParams::default(), &site("ok"))
        .await
        .expect("allowed");
    let mut bad = site("bad");
    bad.spec.owner = "root".into();
    let e = api_error(
        sites
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "admission webhook \"validate.sites.ecmwf.int\" denied the request: spec.owner: root may not own sites"
    );
    // The webhook saw a well-formed v1 AdmissionReview.
    let reqs = hook.requests();
    let req = &reqs.last().unwrap()["request"];
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"})
    );
    assert_eq!(req["resource"]["resource"], "sites");
    assert_eq!(req["namespace"], "default");
    assert!(req["oldObject"].is_null());
    assert_eq!(
        req["object"]["spec"]["configuration"]["enabled"], true,
        "webhooks see defaulted objects"
    );

    // kubectl: exit 1 and the message.
    let yaml = serde_yaml_ng::to_string(&bad).unwrap();
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(&yaml));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("admission webhook \"validate.sites.ecmwf.int\" denied the request: spec.owner: root may not own sites"), "{err}");
    let _ = hook.stop.send(());
}

#[tokio::test]
async fn status_writes_skip_a_webhook_that_matches_only_sites() {
    let c = Cluster::start(false).await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();
    let ca = TestCa::new();
    // Registered, but nothing listens: every matching call fails, and the policy is Fail.
    c.emulator()
        .map_service("sites", "hooks", 443, "127.0.0.1:9".parse().unwrap());
    install_validating(
        &c,
        vec![webhook(
            "down.sites.ecmwf.int",
            &ca,
            "/validate-sites",
            &["sites"],
            "Fail",
            "None",
        )],
    )
    .await;
    let status = json!({"status": {"phase": "Running"}});
    sites
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status write does not call the webhook");
    let spec = json!({"spec": {"owner": "alice"}});
    let e = api_error(
        sites
            .patch("a", &PatchParams::default(), &Patch::Merge(&spec))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert!(
        e.message.starts_with(
            "Internal error occurred: failed calling webhook \"down.sites.ecmwf.int\""
        ),
        "{}",
        e.message
    );
}

/// failurePolicy Ignore lets a request through when its webhook call fails, and a rule for
/// `sites/*` matches the status subresource. The webhook is reachable and records what it is
/// sent, but answers with something that is not an AdmissionReview, so every call fails: what it
/// saw shows both writes were sent to it (the create, and the status update through `sites/*`),
/// and the same webhook with failurePolicy Fail refuses the same writes, so the calls did fail
/// and Ignore is what let them through.
#[tokio::test]
async fn failure_policy_ignore_lets_requests_through_and_sites_star_matches_status() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let broken: Handler =
        Arc::new(|_: &Value| json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}));
    let hook = TestWebhook::start(ca.serving("hooks.sites.svc"), broken).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    install_validating(
        &c,
        vec![webhook(
            "ignored.sites.ecmwf.int",
            &ca,
            "/x",
            &["sites", "sites/*"],
            "Ignore",
            "None",
        )],
    )
    .await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    sites
        .create(&PostParams::default(), &site("a"))
        .await
        .expect("Ignore skips the failed call");
    let status = json!({"status": {"phase": "Running"}});
    let written = sites
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("Ignore skips the failed call on the status too");
    assert_eq!(written.status.and_then(|s| s.phase), Some(Phase::Running));
    let seen: Vec<(String, String)> = hook
        .requests()
        .iter()
        .map(|r| {
            let field = |name: &str| r["request"][name].as_str().unwrap_or_default().to_string();
            (field("operation"), field("subResource"))
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("CREATE".to_string(), String::new()),
            ("UPDATE".to_string(), "status".to_string())
        ],
        "both writes were sent to the webhook"
    );

    // The same webhook, failing closed: the same answer refuses the same writes.
    let api: Api<ValidatingWebhookConfiguration> = Api::all(c.client.clone());
    api.delete("test-validating", &DeleteParams::default())
        .await
        .unwrap();
    install_validating(
        &c,
        vec![webhook(
            "refused.sites.ecmwf.int",
            &ca,
            "/x",
            &["sites", "sites/*"],
            "Fail",
            "None",
        )],
    )
    .await;
    let failed = |e: kube::Error| {
        let e = api_error(e);
        assert_eq!(e.code, 500, "{}", e.message);
        assert_eq!(
            e.message,
            "Internal error occurred: failed calling webhook \"refused.sites.ecmwf.int\": \
             expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview"
        );
    };
    failed(
        sites
            .create(&PostParams::default(), &site("b"))
            .await
            .unwrap_err(),
    );
    let status = json!({"status": {"phase": "Failed"}});
    failed(
        sites
            .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        hook.requests().len(),
        4,
        "both refused writes were sent too"
    );
    let _ = hook.stop.send(());
}

#[tokio::test]
async fn mutating_webhook_patch_is_applied_and_stored() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let handler: Handler = Arc::new(|review: &Value| {
        let patch =
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"stamped": "yes"}}]);
        let mut answer = respond(review, true, None, Some(patch.clone()));
        if review["request"]["name"] == "bytes" {
            // Go decodes a []byte from an array of numbers too; some webhook libraries send that.
            answer["response"]["patch"] = json!(patch.to_string().into_bytes());
        }
        answer
    });
    let hook = TestWebhook::start(ca.serving("hooks.sites.svc"), handler).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.client.clone());
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "test-mutating"},
        "webhooks": [webhook("mutate.sites.ecmwf.int", &ca, "/mutate-sites", &["sites"], "Fail", "None")]
    }))
    .unwrap();
    api.create(&PostParams::default(), &cfg).await.unwrap();
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let created = sites
        .create(&PostParams::default(), &site("a"))
        .await
        .unwrap();
    assert_eq!(created.metadata.annotations.unwrap()["stamped"], "yes");
    let stored = sites.get("a").await.unwrap();
    assert_eq!(stored.metadata.annotations.unwrap()["stamped"], "yes");
    let created = sites
        .create(&PostParams::default(), &site("bytes"))
        .await
        .unwrap();
    assert_eq!(created.metadata.annotations.unwrap()["stamped"], "yes");
    let _ = hook.stop.send(());
}

#[tokio::test]
async fn dry_run_needs_side_effect_free_webhooks() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let hook = TestWebhook::start(ca.serving("hooks.sites.svc"), deny_owner_root()).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    install_validating(
        &c,
        vec![webhook(
            "effects.sites.ecmwf.int",
            &ca,
            "/v",
            &["sites"],
            "Fail",
            "Some",
        )],
    )
    .await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let e = api_error(sites.create(&dry, &site("a")).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "admission webhook \"effects.sites.ecmwf.int\" does not support dry run"
    );
    assert!(hook.requests().is_empty(), "the webhook is not called");
    let _ = hook.stop.send(());
}

#[tokio::test]
async fn certificate_for_another_name_fails_the_call() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let hook = TestWebhook::start(ca.serving("other.sites.svc"), deny_owner_root()).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    install_validating(
        &c,
        vec![webhook(
            "tls.sites.ecmwf.int",
            &ca,
            "/v",
            &["sites"],
            "Fail",
            "None",
        )],
    )
    .await;
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let e = api_error(
        sites
            .create(&PostParams::default(), &site("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert!(
        e.message
            .contains("failed calling webhook \"tls.sites.ecmwf.int\""),
        "{}",
        e.message
    );
    assert!(hook.requests().is_empty());
    // A CA that did not sign the certificate fails too.
    let other_ca = TestCa::new();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(c.client.clone());
    api.delete("test-validating", &DeleteParams::default())
        .await
        .unwrap();
    let hook2 = TestWebhook::start(ca.serving("hooks.sites.svc"), deny_owner_root()).await;
    c.emulator().map_service("sites", "hooks", 443, hook2.addr);
    install_validating(
        &c,
        vec![webhook(
            "tls.sites.ecmwf.int",
            &other_ca,
            "/v",
            &["sites"],
            "Fail",
            "None",
        )],
    )
    .await;
    assert!(
        sites
            .create(&PostParams::default(), &site("b"))
            .await
            .is_err()
    );
    let _ = hook.stop.send(());
    let _ = hook2.stop.send(());
}

#[tokio::test]
async fn match_conditions_select_the_config_map() {
    let c = Cluster::start(false).await;
    let ca = TestCa::new();
    let handler: Handler = Arc::new(|review: &Value| {
        respond(
            review,
            false,
            Some(json!({"code": 403, "reason": "Forbidden", "message": "no"})),
            None,
        )
    });
    let hook = TestWebhook::start(ca.serving("hooks.sites.svc"), handler).await;
    c.emulator().map_service("sites", "hooks", 443, hook.addr);
    let mut w = webhook(
        "config.sites.ecmwf.int",
        &ca,
        "/validate-config",
        &["configmaps"],
        "Fail",
        "None",
    );
    w["rules"][0]["apiGroups"] = json!([""]);
    w["matchConditions"] = json!([{"name": "sites-config-only", "expression": "object.metadata.name == 'sites-config'"}]);
    install_validating(&c, vec![w]).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(c.client.clone(), "default");
    let other: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    cms.create(&PostParams::default(), &other)
        .await
        .expect("other ConfigMaps are not sent to the webhook");
    let cfg: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "sites-config"}})).unwrap();
    assert!(cms.create(&PostParams::default(), &cfg).await.is_err());
    assert_eq!(hook.requests().len(), 1);
    let _ = hook.stop.send(());
}
