//! The black-box end-to-end suite: the life of a site, driven only through kubectl.
//!
//! By default it runs against an emulator that authorizes like an RBAC cluster, with the
//! operator installed as a user installs it: `manifests/overlays/kind-e2e` applied with kubectl
//! and the real binary run as that Deployment's pod (its args and env, a token of its
//! ServiceAccount: [`support::deployed`](crate::support::deployed)). A grant missing from the
//! shipped RBAC fails the suite with the API server's 403. `SITES_E2E_MANIFESTS` deploys another
//! copy of `manifests/` (the RBAC mutation check, `make rbac-mutation-check`). With
//! `SITES_E2E_KUBECONFIG` pointing at a cluster where the operator is deployed (`make kind-e2e`
//! does this), the same steps run against that cluster instead.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::deployed::{self, Pod};
use crate::support::process::https_get;
use crate::support::{Cluster, eventually_every, real, repo_file};

const NS: &str = "sites";

/// Where the suite runs: a kubeconfig, and when it is the emulator, the emulator and the
/// operator's pod.
pub(crate) struct Target {
    pub(crate) kubeconfig: PathBuf,
    cache: PathBuf,
    pub(crate) timeout: Duration,
    pub(crate) local: Option<(Cluster, Pod)>,
}

impl Target {
    async fn new() -> Target {
        if let Ok(path) = std::env::var("SITES_E2E_KUBECONFIG") {
            let cache = std::env::temp_dir().join(format!("sites-e2e-{}", uuid::Uuid::new_v4()));
            return Target {
                kubeconfig: PathBuf::from(path),
                cache,
                timeout: Duration::from_secs(300),
                local: None,
            };
        }
        Target::deployed(deployed::authorizing_cluster().await).await
    }

    /// A real kube-apiserver 1.20 ([`Cluster::real`]), the operator deployed from
    /// `manifests/overlays/local-1.20`: webhooks by URL to the port its webhook server picked
    /// ([`real::point_webhooks_at`]).
    pub(crate) async fn real() -> Target {
        Target::deployed(Cluster::real().await).await
    }

    /// The operator installed on `c` as a user installs it, and run as its Deployment's pod. On
    /// the emulator, the webhook Service is routed to the pod; a real API server's webhooks name
    /// the pod's port by URL, once it has reported it.
    async fn deployed(c: Cluster) -> Target {
        let real = c.real_plane().is_some();
        let t = Target {
            kubeconfig: c.kubeconfig(),
            cache: c.dir.join("cache"),
            timeout: Duration::from_secs(if real { 120 } else { 60 }),
            local: None,
        };
        let overlay = if real {
            real::local_overlay(&deployed::manifests(), &c.dir, real::NO_REPLICA)
        } else {
            deployed::manifest("overlays/kind-e2e")
        };
        // As scripts/kind-e2e.sh installs it: the storage class, the overlay, the session key.
        t.ok(&[
            "apply",
            "-f",
            &display(deployed::manifest("dev/storageclass-sites-retain.yaml")),
        ]);
        t.ok(&["apply", "-k", &display(overlay)]);
        t.ok(&[
            "create",
            "secret",
            "generic",
            "sites-session",
            "-n",
            NS,
            "--from-literal=secret_key=e2e-session-key",
        ]);
        // Debug logging, set as an administrator would: the suite checks that no secret reaches
        // the log.
        t.ok(&[
            "set",
            "env",
            "deployment/sites-operator",
            "-n",
            NS,
            "SITES_OPERATOR_LOG_LEVEL=debug",
        ]);
        let pod = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
        if real {
            real::point_webhooks_at(&c, &pod, t.timeout).await;
        }
        Target {
            local: Some((c, pod)),
            ..t
        }
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn get(&self, args: &[&str]) -> Option<String> {
        let out = self.kubectl(args);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Polls `check` until it answers; fails at once, with the log line, when the operator
    /// was refused a call (a grant the deployed RBAC lacks), rather than at the deadline.
    pub(crate) async fn until(&self, what: &str, check: impl Fn() -> Option<String>) -> String {
        eventually_every(what, self.timeout, Duration::from_millis(200), || {
            if let Some((_, pod)) = &self.local {
                let log = pod.process.log();
                if let Some(line) = deployed::forbidden_line(&log) {
                    panic!("the operator was refused by the API server while waiting for {what}:\n{line}");
                }
            }
            let v = check();
            async move { v }
        })
        .await
    }
}

fn display(p: PathBuf) -> String {
    p.display().to_string()
}

pub(crate) fn path(p: &str) -> &'static str {
    Box::leak(display(deployed::manifest(p.trim_start_matches("manifests/"))).into_boxed_str())
}

fn restarted_at(t: &Target) -> String {
    t.get(&[
        "get",
        "statefulset",
        "docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}",
    ])
    .unwrap_or_default()
}

/// Waits until the Site's field at `jsonpath` reads `want` (as `kubectl wait --for=jsonpath`,
/// polling, so that a 403 in the operator's log ends the wait at once).
pub(crate) async fn wait_for(t: &Target, what: &str, jsonpath: &str, want: &str) {
    let output = format!("jsonpath={jsonpath}");
    t.until(what, || {
        t.get(&["get", "site/docs-handbook", "-n", NS, "-o", &output])
            .filter(|s| s == want)
    })
    .await;
}

pub(crate) async fn wait_available(t: &Target) {
    let available = "{.status.conditions[?(@.type==\"Available\")].status}";
    wait_for(t, "the site to be Available", available, "True").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_life_of_a_site() {
    lifecycle(Target::new().await).await;
}

/// The same life against a real kube-apiserver 1.20 with its controller manager (`make
/// real-apiserver-test`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_the_life_of_a_site() {
    lifecycle(Target::real().await).await;
}

async fn lifecycle(t: Target) {
    // Create -> Available, with the printer columns.
    t.ok(&[
        "apply",
        "-n",
        NS,
        "-f",
        path("manifests/examples/site.yaml"),
    ]);
    wait_available(&t).await;
    // NAME PATH SPACE PHASE AVAILABLE PROGRESSING AGE; -o wide adds OWNER, REPLICAS, READY and
    // REASON (the Progressing reason: RolloutPending for a Site a platform rollout holds back).
    let table = t.ok(&["get", "site", "docs-handbook", "-n", NS]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PATH",
            "SPACE",
            "PHASE",
            "AVAILABLE",
            "PROGRESSING",
            "AGE"
        ],
        "{table}"
    );
    let row = t.ok(&["get", "site", "docs-handbook", "-n", NS, "--no-headers"]);
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cols[..6],
        [
            "docs-handbook",
            "/docs/handbook/",
            "docs",
            "Running",
            "True",
            "False"
        ],
        "{row}"
    );
    let wide = t.ok(&["get", "site", "docs-handbook", "-n", NS, "-o", "wide"]);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &header[7..],
        ["OWNER", "REPLICAS", "READY", "REASON"],
        "{wide}"
    );
    let cols: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&cols[7..], ["jdoe", "1", "True", "UpToDate"], "{wide}");
    for kind in [
        "secret/docs-handbook",
        "secret/docs-handbook-oauth2",
        "configmap/docs-handbook-files",
        "pvc/docs-handbook",
        "service/docs-handbook",
        "ingress/docs-handbook",
    ] {
        t.ok(&["get", kind, "-n", NS]);
    }
    assert_eq!(restarted_at(&t), "", "fresh pods are not restarted");

    // Invalid edits are refused by the webhook, naming the field.
    let out = t.kubectl(&[
        "patch", "site", "docs-handbook", "-n", NS, "--type=merge", "-p",
        r#"{"spec":{"configuration":{"applications":[{"name":"static"},{"name":"api","image":"ghcr.io/x/api:1","port":70000}]}}}"#,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.configuration.applications[1].port: must be between 1 and 65535"),
        "{err}"
    );
    let out = t.kubectl(&[
        "apply",
        "-n",
        NS,
        "-f",
        path("manifests/examples/invalid/routing.yaml"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("routing is platform-wide; use the top-level routing values")
    );

    // Edit -> restart.
    t.ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"headers":{"X-Frame-Options":"DENY"}}}}"#,
    ]);
    let first = t
        .until("a restart after the edit", || {
            Some(restarted_at(&t)).filter(|v| !v.is_empty())
        })
        .await;
    wait_available(&t).await;

    // Forced upgrade -> another restart, the annotation stamped with a UUID.
    t.ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--overwrite",
        "sites.ecmwf.int/upgrade-request=force",
    ]);
    let stamped = t.ok(&[
        "get",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.annotations.sites\\.ecmwf\\.int/upgrade-request}",
    ]);
    assert!(uuid::Uuid::parse_str(&stamped).is_ok(), "{stamped:?}");
    t.until("a restart after the forced upgrade", || {
        Some(restarted_at(&t)).filter(|v| !v.is_empty() && *v != first)
    })
    .await;
    wait_available(&t).await;

    // Archive -> zero replicas, requests redirected to the Hub's 410 page, data kept.
    t.ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"enabled":false}}}"#,
    ]);
    wait_for(&t, "the site to be Disabled", "{.status.phase}", "Disabled").await;
    assert_eq!(
        t.ok(&[
            "get",
            "statefulset",
            "docs-handbook",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "0"
    );
    let snippets = t.ok(&[
        "get",
        "ingress",
        "docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.annotations.nginx\\.org/location-snippets}",
    ]);
    assert!(
        snippets.contains("return 302 /hub/error/page/410/;"),
        "{snippets}"
    );
    t.ok(&["get", "pvc", "docs-handbook", "-n", NS]);

    // The generated secrets, to look for in the log later.
    let secret_values: Vec<String> = ["docs-handbook", "docs-handbook-oauth2"]
        .iter()
        .flat_map(|name| {
            let data = t.ok(&["get", "secret", name, "-n", NS, "-o", "json"]);
            let v: serde_json::Value = serde_json::from_str(&data).unwrap();
            v["data"]
                .as_object()
                .unwrap()
                .values()
                .map(|b| {
                    use base64::Engine as _;
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(b.as_str().unwrap())
                        .unwrap();
                    String::from_utf8(raw).unwrap()
                })
                .collect::<Vec<_>>()
        })
        .chain(["e2e-session-key".to_string()])
        .collect();
    assert_eq!(
        secret_values.len(),
        4,
        "api_token, secret_key, cookie_secret, session key"
    );

    // Delete -> everything goes with it.
    t.ok(&["delete", "site", "docs-handbook", "-n", NS, "--wait=true"]);
    t.until("owned objects collected", || {
        let left = t.ok(&[
            "get",
            "secret,configmap,pvc,statefulset,service,ingress",
            "-n",
            NS,
            "-l",
            "sites.ecmwf.int/id=docs-handbook",
            "-o",
            "name",
        ]);
        left.trim().is_empty().then_some(left)
    })
    .await;

    if let Some((c, pod)) = &t.local {
        // The replica is the Deployment's pod: its downward-API name holds the leader Lease.
        let holder = t.ok(&[
            "get",
            "lease",
            "sites-operator",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        assert!(
            holder.starts_with(&pod.name),
            "{holder} is not {}",
            pod.name
        );
        // Secrets never appear in the (debug-level) log of the whole lifecycle.
        let log = pod.process.log();
        assert!(log.contains("DEBUG"), "the operator logged at debug level");
        for secret in &secret_values {
            assert!(
                !log.contains(secret.as_str()),
                "a secret value appears in the operator log"
            );
        }
        // Least privilege: every API call the operator made is granted by the shipped RBAC.
        let metrics = scrape(c, pod).await;
        let granted = granted_rules();
        let used: Vec<(String, String)> = crate::support::api_requests(&metrics)
            .into_iter()
            .map(|(verb, resource, _)| (verb, resource))
            .collect();
        assert!(
            used.iter()
                .any(|(v, r)| v == "patch" && r == "sites.sites.ecmwf.int/status"),
            "{used:?}"
        );
        // Non-resource URLs (/version) are open to every authenticated user (system:discovery).
        for (verb, resource) in used.iter().filter(|(_, r)| r != "other") {
            assert!(
                granted.iter().any(|(v, r)| v == verb && r == resource),
                "the operator used {verb} {resource}, which manifests/ do not grant"
            );
        }
        // ... and nothing more: every grant is used by this lifecycle, implied by a use (a
        // server-side apply that creates its object is authorized as `create` too), or used by a
        // path this lifecycle does not take (OTHER_PATHS, each with the test that takes it).
        let mut needed: std::collections::BTreeSet<(String, String)> =
            used.iter().filter(|(_, r)| r != "other").cloned().collect();
        for (verb, resource) in &used {
            if verb == "patch" && APPLIED.contains(&resource.as_str()) {
                needed.insert(("create".into(), resource.clone()));
            }
        }
        for (verb, resource, _test) in OTHER_PATHS {
            needed.insert((verb.to_string(), resource.to_string()));
        }
        let granted: std::collections::BTreeSet<(String, String)> = granted.into_iter().collect();
        let unused: Vec<_> = granted.difference(&needed).collect();
        let missing: Vec<_> = needed.difference(&granted).collect();
        assert!(
            unused.is_empty() && missing.is_empty(),
            "RBAC is not exact: granted but never used {unused:?}; needed but not granted {missing:?}"
        );
    }
}

/// The kinds the operator writes with server-side apply (which creates them when missing).
const APPLIED: &[&str] = &[
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "statefulsets.apps",
    "services",
    "ingresses.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
];

/// API calls of paths the lifecycle above does not take, with the test that takes each
/// (`module::test`, a test of `tests/integration/<module>.rs`), or, for a path no test takes,
/// the function that makes the call (`src/<file> (Type::function)`). Each must exist:
/// [`other_paths_name_places_that_exist`].
const OTHER_PATHS: &[(&str, &str, &str)] = &[
    // Gateway mode, and the route of the other mode removed after a switch.
    (
        "watch",
        "httproutes.gateway.networking.k8s.io",
        "reconcile::switching_the_routing_mode_moves_the_route (the HTTPRoute CRD installed)",
    ),
    (
        "patch",
        "httproutes.gateway.networking.k8s.io",
        "reconcile::switching_the_routing_mode_moves_the_route",
    ),
    // An object the operator neither wrote nor saw, while the watch of its kind is down, is read
    // and judged before it is applied.
    (
        "get",
        "httproutes.gateway.networking.k8s.io",
        "src/controller/owned.rs (existing)",
    ),
    (
        "get",
        "services",
        "ownership::an_object_the_cache_has_not_seen_is_judged_before_it_is_written",
    ),
    (
        "get",
        "persistentvolumeclaims",
        "src/controller/owned.rs (existing)",
    ),
    (
        "create",
        "httproutes.gateway.networking.k8s.io",
        "reconcile::switching_the_routing_mode_moves_the_route",
    ),
    (
        "delete",
        "httproutes.gateway.networking.k8s.io",
        "reconcile::switching_the_routing_mode_moves_the_route",
    ),
    (
        "delete",
        "ingresses.networking.k8s.io",
        "reconcile::switching_the_routing_mode_moves_the_route",
    ),
    // LIFE-15: a not-ready pod is replaced after an update.
    ("delete", "pods", "reconcile::pod_problems_reach_the_status"),
    // LIFE-01 step 4: a retained volume is re-bound; bound volumes are labelled.
    (
        "get",
        "persistentvolumes",
        "reconcile::deleting_a_site_cascades_and_recreating_it_rebinds_its_volume",
    ),
    (
        "patch",
        "persistentvolumes",
        "reconcile::deleting_a_site_cascades_and_recreating_it_rebinds_its_volume",
    ),
    // The public host read from the master Ingress when `routing.host` is unset.
    (
        "get",
        "ingresses.networking.k8s.io",
        "src/controller/context.rs (Context::public_host)",
    ),
    // Retention: archive (merge patch) and delete.
    (
        "patch",
        "sites.sites.ecmwf.int",
        "upgrade::retention_archives_then_deletes_and_touches_nothing_else",
    ),
    (
        "delete",
        "sites.sites.ecmwf.int",
        "upgrade::retention_archives_then_deletes_and_touches_nothing_else",
    ),
    // `--self-signed` replacing its stored certificate (expiring, or missing a name).
    (
        "update",
        "secrets",
        "webhook_e2e::a_self_signed_certificate_missing_a_name_is_replaced_and_both_cas_stay_trusted",
    ),
    // Secure metrics: who may read /metrics.
    (
        "create",
        "tokenreviews.authentication.k8s.io",
        "prometheus::metrics_need_a_token_the_api_server_authenticates_and_authorizes",
    ),
    (
        "create",
        "subjectaccessreviews.authorization.k8s.io",
        "prometheus::metrics_need_a_token_the_api_server_authenticates_and_authorizes",
    ),
    // Leader election taking over an existing Lease.
    (
        "update",
        "leases.coordination.k8s.io",
        "reconcile::only_the_leader_writes_and_a_follower_takes_over",
    ),
];

/// Every place OTHER_PATHS names exists: a test it names is a test function of its module, a
/// source function it names is defined in the file it names. A test renamed or removed, or a
/// function moved to another file, fails here, rather than leaving a grant that nothing
/// justifies any more.
#[test]
fn other_paths_name_places_that_exist() {
    let read = |file: &str| {
        std::fs::read_to_string(repo_file(file))
            .unwrap_or_else(|e| panic!("OTHER_PATHS names {file}, which cannot be read: {e}"))
    };
    for (verb, resource, place) in OTHER_PATHS {
        let (target, note) = match place.split_once(" (") {
            Some((target, note)) => (target, note.strip_suffix(')')),
            None => (*place, None),
        };
        let what = format!("{verb} {resource}: {place}");
        if target.starts_with("src/") {
            let function = note
                .and_then(|n| n.rsplit("::").next())
                .unwrap_or_else(|| panic!("{what}: name the function, `src/<file> (Type::name)`"));
            let text = read(target);
            let defined = text.lines().any(|l| {
                l.contains(&format!("fn {function}(")) || l.contains(&format!("fn {function}<"))
            });
            assert!(defined, "{what}: no function {function} in {target}");
        } else {
            let (module, test) = target
                .split_once("::")
                .unwrap_or_else(|| panic!("{what}: name the test, `module::test`"));
            let file = format!("tests/integration/{module}.rs");
            assert!(
                is_test_function(&read(&file), test),
                "{what}: no test function {test} in {file}"
            );
        }
    }
}

/// Whether `source` defines the top-level function `name` with a test attribute (`#[test]`,
/// `#[tokio::test(...)]`) among the attributes and comments above it.
fn is_test_function(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        let defines = [format!("fn {name}("), format!("async fn {name}(")]
            .iter()
            .any(|start| line.starts_with(start.as_str()));
        defines
            && lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"))
    })
}

/// The operator's metrics, read as Prometheus reads them in a cluster: over HTTPS, verified
/// against the operator's self-signed CA (in its `--cert-dir`, an emptyDir), with the token of
/// a ServiceAccount bound to the shipped `sites-operator-metrics-reader` ClusterRole.
async fn scrape(c: &Cluster, pod: &Pod) -> String {
    scrape_with(pod, &metrics_token(c)).await
}

/// A token of a new ServiceAccount bound to the shipped `sites-operator-metrics-reader`.
pub(crate) fn metrics_token(c: &Cluster) -> String {
    c.kubectl_ok(&["create", "serviceaccount", "e2e-scraper", "-n", NS]);
    c.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "e2e-scraper-metrics",
        "--clusterrole=sites-operator-metrics-reader",
        "--serviceaccount=sites:e2e-scraper",
    ]);
    c.kubectl_ok(&["create", "token", "e2e-scraper", "-n", NS])
        .trim()
        .to_string()
}

/// [`scrape`] with a token of [`metrics_token`].
pub(crate) async fn scrape_with(pod: &Pod, token: &str) -> String {
    let (status, response) = get_metrics(pod, Some(token)).await;
    assert_eq!(status, 200, "{response}");
    response
}

/// The status and response of a GET of `/metrics` from `pod` with `token`, or none.
pub(crate) async fn get_metrics(pod: &Pod, token: Option<&str>) -> (u16, String) {
    let ca_file = pod
        .host_path("/tmp/sites-operator-certs/ca.crt")
        .expect("the certificate directory is on an emptyDir");
    let ca = std::fs::read_to_string(&ca_file).expect("the self-signed CA");
    let metrics = pod.process.reported().unwrap().metrics;
    https_get(
        metrics,
        &ca,
        "sites-operator-metrics.sites.svc",
        "/metrics",
        token,
    )
    .await
    .expect("a TLS session with the metrics port")
}

/// (verb, resource) pairs the shipped Roles and ClusterRoles grant, with the resource spelled as
/// the request accounting spells it (`<plural>[.<group>][/<subresource>]`).
fn granted_rules() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in [
        "manifests/base/rbac.yaml",
        "manifests/overlays/self-signed/rbac.yaml",
    ] {
        let text =
            std::fs::read_to_string(deployed::manifest(file.trim_start_matches("manifests/")))
                .unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            // Rules of non-resource URLs (the metrics reader's `get /metrics`) grant no API call.
            for rule in v["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["nonResourceURLs"].is_null())
            {
                for group in rule["apiGroups"].as_array().unwrap() {
                    for resource in rule["resources"].as_array().unwrap() {
                        let (plural, sub) = match resource.as_str().unwrap().split_once('/') {
                            Some((p, s)) => (p.to_string(), Some(s.to_string())),
                            None => (resource.as_str().unwrap().to_string(), None),
                        };
                        let group = group.as_str().unwrap();
                        let mut name = if group.is_empty() {
                            plural
                        } else {
                            format!("{plural}.{group}")
                        };
                        if let Some(sub) = sub {
                            name = format!("{name}/{sub}");
                        }
                        for verb in rule["verbs"].as_array().unwrap() {
                            out.push((verb.as_str().unwrap().to_string(), name.clone()));
                        }
                    }
                }
            }
        }
    }
    out
}
