//! Against a real kube-apiserver 1.20.2 with its controller manager ([`Cluster::real`]), what
//! the emulator alone could hide: the CRDs the operator prints as a real API server takes them,
//! GitOps re-applies and `kubectl diff` of the manifest a Site came from, drift repair where
//! server-side apply merges key by key (a Service selector, a key added to the Site's
//! ConfigMap), a labelled ConfigMap of kubectl's never adopted, a pod the StatefulSet cannot
//! create, and a retained volume re-bound by the real PersistentVolume controller. The life of a
//! site itself is `e2e::real_apiserver_the_life_of_a_site`. All `#[ignore]`d: `make real-apiserver-test`.

use std::process::Command;
use std::time::Duration;

use crate::e2e::{self, Target};
use crate::support::{Cluster, deployed, eventually_every, real};

const NS: &str = "sites";

/// `sites-operator crd --with-gateway-api` is accepted whole by the API server, and the Site
/// CRD's schema gives it the models server-side apply needs (a schema it cannot model makes
/// 1.20 log "error building openapi models" and treat every list of a Site as atomic). A CRD
/// with `x-kubernetes-int-or-string` shows that the check sees that error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_printed_crds_are_accepted_and_modelled() {
    let c = Cluster::real().await;
    let printed = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["crd", "--with-gateway-api"])
        .output()
        .expect("the binary runs");
    assert!(printed.status.success());
    let crds = String::from_utf8(printed.stdout).unwrap();
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &crds);
    for crd in [
        "sites.sites.ecmwf.int",
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
    ] {
        c.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}"),
        ]);
    }
    // The protected group's approval is recorded as conformant.
    let approved = c.kubectl_ok(&[
        "get",
        "crd",
        "httproutes.gateway.networking.k8s.io",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"KubernetesAPIApprovalPolicyConformant\")].status}",
    ]);
    assert_eq!(approved, "True");

    // A CRD with the int-or-string that 1.20 cannot model, to show the log check sees it.
    let probe = crds
        .split("\n---\n")
        .next()
        .unwrap()
        .replace("sites.ecmwf.int", "probe.example.org")
        .replace(
            "x-kubernetes-preserve-unknown-fields: true\n                  retention_date",
            "x-kubernetes-int-or-string: true\n                  retention_date",
        );
    assert!(probe.contains("x-kubernetes-int-or-string"), "{probe}");
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &probe);
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/sites.probe.example.org",
    ]);
    // Serving a custom resource builds its models: ask for each.
    for resource in [
        "sites.sites.ecmwf.int",
        "sites.probe.example.org",
        "httproutes",
    ] {
        c.kubectl_ok(&["get", resource, "-A"]);
    }
    let plane = c.real_plane().unwrap();
    let log = eventually_every(
        "the API server to build the probe CRD's models",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let log = plane.log("kube-apiserver");
            async move {
                log.contains("error building openapi models for sites.probe.example.org")
                    .then_some(log)
            }
        },
    )
    .await;
    for crd in [
        "sites.sites.ecmwf.int",
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
    ] {
        assert!(
            !log.contains(&format!("error building openapi models for {crd}")),
            "{crd} has no apply models:\n{}",
            log.lines()
                .filter(|l| l.contains("openapi models"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // And the published OpenAPI has the Site.
    let v2 = c.kubectl_ok(&["get", "--raw", "/openapi/v2"]);
    assert!(v2.contains("\"int.ecmwf.sites.v1.Site\""));
    let explained = c.kubectl_ok(&[
        "explain",
        "--api-version=sites.ecmwf.int/v1",
        "site.spec.configuration.applications",
    ]);
    assert!(
        explained.contains("Applications that make up the site"),
        "{explained}"
    );
}

/// What GitOps tools and administrators do to a Site and its objects, on a real API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_gitops_drift_volumes_and_pods_that_cannot_be_created() {
    let t = Target::real().await;
    let site = e2e::path("manifests/examples/site.yaml");
    t.ok(&["apply", "-n", NS, "-f", site]);
    e2e::wait_available(&t).await;
    let image = "{.spec.configuration.applications[0].image}";
    let recorded = t.ok(&[
        "get",
        "site/docs-handbook",
        "-n",
        NS,
        "-o",
        &format!("jsonpath={image}"),
    ]);
    assert!(
        !recorded.is_empty(),
        "the mutating webhook records the image"
    );

    // `kubectl diff` of the manifest the Site came from: client-side nothing; server-side no
    // conflict with the webhook's recorded image (applications are keyed by name), and nothing
    // but kubectl's own last-applied annotation.
    let out = t.kubectl(&["diff", "-n", NS, "-f", site]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "kubectl diff:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = t.kubectl(&["diff", "--server-side", "-n", NS, "-f", site]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && !stderr.contains("onflict"),
        "kubectl diff --server-side:\n{stdout}{stderr}"
    );
    let changed: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .filter(|l| {
            !l.contains("last-applied-configuration") && !l[1..].trim_start().starts_with('{')
        })
        .collect();
    assert!(changed.is_empty(), "kubectl diff --server-side:\n{stdout}");

    // Argo CD / Flux: a server-side apply of the same manifest, then again: no conflict, the
    // webhook's image stays.
    for _ in 0..2 {
        t.ok(&[
            "apply",
            "--server-side",
            "--field-manager=gitops",
            "-n",
            NS,
            "-f",
            site,
        ]);
    }
    assert_eq!(
        t.ok(&[
            "get",
            "site/docs-handbook",
            "-n",
            NS,
            "-o",
            &format!("jsonpath={image}")
        ]),
        recorded
    );

    // Drift: a selector key added by hand is removed (on 1.20 the Service selector is merged
    // key by key, so server-side apply alone would keep it).
    t.ok(&[
        "patch",
        "service",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"tier":"hand-made"}}}"#,
    ]);
    t.until("the hand-added selector key to be removed", || {
        t.get(&[
            "get",
            "service",
            "docs-handbook",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.selector}",
        ])
        .filter(|s| !s.contains("tier") && s.contains("sites.ecmwf.int/id"))
    })
    .await;

    // A key added by hand to the Site's ConfigMap (read whole by its containers) is removed:
    // server-side apply alone keeps a key another manager owns.
    t.ok(&[
        "patch",
        "configmap",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"data":{"HTTPS_PROXY":"http://proxy.example:3128"}}"#,
    ]);
    t.until("the hand-added ConfigMap key to be removed", || {
        t.get(&[
            "get",
            "configmap",
            "docs-handbook",
            "-n",
            NS,
            "-o",
            "jsonpath={.data}",
        ])
        .filter(|d| !d.contains("HTTPS_PROXY"))
    })
    .await;

    // A ConfigMap planted under a new Site's name with the operator's labels and no controller
    // is not taken: the API server records kubectl as a manager of its fields, and the Site
    // reports the conflict naming it.
    t.ok(&[
        "create",
        "configmap",
        "docs-planted",
        "-n",
        NS,
        "--from-literal=LD_PRELOAD=/tmp/evil.so",
    ]);
    t.ok(&[
        "label",
        "configmap",
        "docs-planted",
        "-n",
        NS,
        "sites.ecmwf.int/id=docs-planted",
        "app.kubernetes.io/managed-by=sites-operator",
    ]);
    let dir = t.kubeconfig.parent().unwrap().join("sites");
    std::fs::create_dir_all(&dir).unwrap();
    let planted_site = dir.join("planted.yaml");
    std::fs::write(
        &planted_site,
        std::fs::read_to_string(site)
            .unwrap()
            .replace("name: docs-handbook", "name: docs-planted")
            .replace("name: handbook", "name: planted"),
    )
    .unwrap();
    let planted_site = planted_site.display().to_string();
    t.ok(&["apply", "-n", NS, "-f", &planted_site]);
    let conflict = t
        .until("the planted ConfigMap reported as a conflict", || {
            t.get(&[
                "get",
                "site/docs-planted",
                "-n",
                NS,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason} {.status.conditions[?(@.type==\"Progressing\")].message}",
            ])
            .filter(|s| s.starts_with("ObjectConflict "))
        })
        .await;
    assert!(
        conflict.contains(
            "ConfigMap docs-planted exists and is not controlled by any Site, and kubectl-"
        ) && conflict.contains(" manages fields of it"),
        "{conflict}"
    );
    let owners = t.ok(&[
        "get",
        "configmap",
        "docs-planted",
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.ownerReferences}{.data.LD_PRELOAD}",
    ]);
    assert_eq!(owners, "/tmp/evil.so", "left as it was");
    t.ok(&["delete", "-n", NS, "-f", &planted_site, "--wait=true"]);

    // A pod the StatefulSet cannot create: the Site says why.
    t.ok(&["delete", "priorityclass", "low-priority"]);
    let other = dir.join("other.yaml");
    std::fs::write(
        &other,
        std::fs::read_to_string(site)
            .unwrap()
            .replace("name: docs-handbook", "name: docs-other")
            .replace("name: handbook", "name: other"),
    )
    .unwrap();
    let other = other.display().to_string();
    t.ok(&["apply", "-n", NS, "-f", &other]);
    let reason = "{.status.conditions[?(@.type==\"Available\")].reason}";
    let message = "{.status.conditions[?(@.type==\"Available\")].message}";
    t.until(
        "Available False with the StatefulSet's FailedCreate",
        || {
            t.get(&[
                "get",
                "site/docs-other",
                "-n",
                NS,
                "-o",
                &format!("jsonpath={reason} {message}"),
            ])
            .filter(|s| s.starts_with("FailedCreate "))
        },
    )
    .await;
    let message = t.ok(&[
        "get",
        "site/docs-other",
        "-n",
        NS,
        "-o",
        &format!("jsonpath={message}"),
    ]);
    assert!(
        message.contains("no PriorityClass with name low-priority was found"),
        "{message}"
    );
    let progressing = t.ok(&[
        "get",
        "site/docs-other",
        "-n",
        NS,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Progressing\")].status} {.status.conditions[?(@.type==\"Progressing\")].reason}",
    ]);
    assert_eq!(progressing, "True FailedCreate");
    t.ok(&["delete", "-n", NS, "-f", &other, "--wait=true"]);

    // Delete and re-create: the retained volume is bound to the new claim (by the real
    // PersistentVolume controller, after the operator re-bound it).
    let volume = t.ok(&[
        "get",
        "pvc",
        "docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.volumeName}",
    ]);
    assert!(!volume.is_empty());
    t.ok(&["delete", "-n", NS, "-f", site, "--wait=true"]);
    t.until("the volume to be Released", || {
        t.get(&["get", "pv", &volume, "-o", "jsonpath={.status.phase}"])
            .filter(|p| p == "Released")
    })
    .await;
    t.ok(&[
        "apply",
        "-f",
        e2e::path("manifests/base/priorityclasses.yaml"),
    ]);
    t.ok(&["apply", "-n", NS, "-f", site]);
    t.until("the new claim bound to the retained volume", || {
        t.get(&[
            "get",
            "pvc",
            "docs-handbook",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.volumeName} {.status.phase}",
        ])
        .filter(|s| *s == format!("{volume} Bound"))
    })
    .await;
    e2e::wait_available(&t).await;
}

/// The sum of the samples of metric `name` whose labels contain every `label="value"` pair.
pub(crate) fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|pair| l.contains(pair)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The metrics of `pod` once it leads, has reconciled at least `reconciles` times (successfully)
/// and its queue is empty.
pub(crate) async fn settled(
    pod: &deployed::Pod,
    token: &str,
    what: &str,
    reconciles: usize,
    timeout: Duration,
) -> String {
    eventually_every(what, timeout, Duration::from_millis(250), || async {
        let m = e2e::scrape_with(pod, token).await;
        let done = metric(
            &m,
            "controller_runtime_reconcile_total",
            &["result=\"success\""],
        );
        let queued = metric(&m, "workqueue_depth", &[]);
        let leads = metric(&m, "leader_election_master_status", &[]);
        (done >= reconciles as f64 && queued == 0.0 && leads == 1.0).then_some(m)
    })
    .await
}

/// Writes the operator made, by `verb resource`, but for its Lease, its Events and the reviews
/// of who reads its metrics.
fn writes(metrics: &str) -> Vec<String> {
    crate::support::api_requests(metrics)
        .into_iter()
        .filter(|(verb, resource, n)| {
            *n > 0.0
                && matches!(verb.as_str(), "create" | "patch" | "update" | "delete")
                && !resource.starts_with("leases.")
                && !resource.starts_with("events")
                && !resource.starts_with("tokenreviews.")
                && !resource.starts_with("subjectaccessreviews.")
        })
        .map(|(verb, resource, n)| format!("{verb} {resource}: {n}"))
        .collect()
}

/// Webhook registration through the API server (dry runs, `kubectl edit` refused at once,
/// validation failing closed and mutation failing open when no replica serves), the Lease
/// handed over between replicas of the Deployment, and a restarted leader that writes nothing
/// for a Site that is as it should be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_webhooks_leases_and_restarts() {
    let mut t = Target::real().await;
    let site = e2e::path("manifests/examples/site.yaml");
    let invalid = e2e::path("manifests/examples/invalid/port.yaml");

    // Server-side dry runs go through the webhooks and store nothing.
    let out = t.kubectl(&["apply", "--dry-run=server", "-n", NS, "-f", invalid]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("admission webhook \"validate-sites.sites.ecmwf.int\" denied the request")
            && err.contains("must be between 1 and 65535"),
        "{err}"
    );
    let dry = t.ok(&[
        "apply",
        "--dry-run=server",
        "-n",
        NS,
        "-f",
        site,
        "-o",
        "json",
    ]);
    assert!(dry.contains("\"image\""), "the mutating webhook ran: {dry}");
    assert!(t.get(&["get", "site/docs-handbook", "-n", NS]).is_none());

    t.ok(&["apply", "-n", NS, "-f", site]);
    e2e::wait_available(&t).await;

    // `kubectl edit` of an invalid value: refused by the API server at once, naming the field.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&t.kubeconfig)
        .args(["edit", "site/docs-handbook", "-n", NS])
        .env(
            "KUBE_EDITOR",
            "sed -i s/space:\\ docs/space:\\ Not_A_Label/",
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("spec.configuration.space"),
        "kubectl edit:\n{}{err}",
        String::from_utf8_lossy(&out.stdout)
    );

    let (c, a) = t.local.take().expect("the operator runs here");
    let token = e2e::metrics_token(&c);
    // The metrics are refused without a token the API server authenticates (401) and to a
    // ServiceAccount without the reader's grant (403, naming it), through the real API server's
    // TokenReview and SubjectAccessReview.
    for bad in [None, Some("not-a-token")] {
        let (status, response) = e2e::get_metrics(&a, bad).await;
        assert_eq!(status, 401, "{bad:?}: {response}");
        assert!(!response.contains("workqueue_depth"), "{response}");
    }
    c.kubectl_ok(&["create", "serviceaccount", "unbound", "-n", NS]);
    let unbound = c.kubectl_ok(&["create", "token", "unbound", "-n", NS]);
    let (status, response) = e2e::get_metrics(&a, Some(unbound.trim())).await;
    assert_eq!(status, 403, "{response}");
    assert!(
        response.contains("system:serviceaccount:sites:unbound"),
        "{response}"
    );
    assert!(
        e2e::scrape_with(&a, &token)
            .await
            .contains("workqueue_depth")
    );
    let holder = || {
        c.kubectl(&[
            "get",
            "lease",
            "sites-operator",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    };
    let holder_is = |pod: &str| {
        let out = holder();
        let h = String::from_utf8_lossy(&out.stdout).into_owned();
        h.starts_with(pod).then_some(h)
    };
    assert!(holder_is(&a.name).is_some());

    // A second replica waits; the first crashes: no replica serves the webhooks.
    let b = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
    let mut a = a;
    a.process.kill();
    let other = real::example_site_file(t.kubeconfig.parent().unwrap(), "other");
    let out = c.kubectl(&["apply", "-n", NS, "-f", &other]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("failed calling webhook \"validate-sites.sites.ecmwf.int\""),
        "validation fails closed: {err}"
    );
    // The configuration webhook fails open: other ConfigMaps of the namespace are written.
    c.kubectl_ok(&[
        "create",
        "configmap",
        "unrelated",
        "-n",
        NS,
        "--from-literal=a=b",
    ]);
    eventually_every(
        "the second replica to take the Lease",
        t.timeout,
        Duration::from_millis(250),
        || {
            let h = holder_is(&b.name);
            async move { h }
        },
    )
    .await;

    // A replica serving the webhooks again (a follower); the leader reconciles an edit.
    let a2 = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
    real::point_webhooks_at(&c, &a2, t.timeout).await;
    c.kubectl_ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"headers":{"X-Frame-Options":"DENY"}}}}"#,
    ]);
    let restarted =
        "jsonpath={.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}";
    eventually_every(
        "the leader to roll the pods after the edit",
        t.timeout,
        Duration::from_millis(250),
        || {
            let out = c.kubectl(&[
                "get",
                "statefulset",
                "docs-handbook",
                "-n",
                NS,
                "-o",
                restarted,
            ]);
            async move { (!out.stdout.is_empty()).then_some(()) }
        },
    )
    .await;
    let available = "{.status.conditions[?(@.type==\"Available\")].status}";
    eventually_every(
        "Available again",
        t.timeout,
        Duration::from_millis(250),
        || {
            let out = c.kubectl(&[
                "get",
                "site/docs-handbook",
                "-n",
                NS,
                "-o",
                &format!("jsonpath={available}"),
            ]);
            async move { (out.stdout == b"True").then_some(()) }
        },
    )
    .await;

    // The leader stops (and releases the Lease); the restarted replica takes over and, with the
    // Site as it should be, writes nothing.
    let (code, _) = b.process.stop();
    assert_eq!(code, Some(0));
    let mark = real::mark(&c);
    eventually_every(
        "the restarted replica to lead",
        t.timeout,
        Duration::from_millis(250),
        || {
            let h = holder_is(&a2.name);
            async move { h }
        },
    )
    .await;
    let metrics = settled(
        &a2,
        &token,
        "the new leader to reconcile the Site",
        1,
        t.timeout,
    )
    .await;
    let log = a2.process.log();
    let written: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("wrote object") || l.contains("someone else"))
        .collect();
    assert_eq!(
        writes(&metrics),
        Vec::<String>::new(),
        "{}",
        written.join("\n")
    );
    // The API server's audit log agrees: no write of the operator's ServiceAccount (Events
    // included) since the old leader stopped, but the Lease.
    assert_eq!(
        real::operator_writes(&c, mark),
        Vec::<String>::new(),
        "{}",
        written.join("\n")
    );

    // An edit made while no replica runs, the hash annotation kept: the replicas and the site
    // container's image of the StatefulSet. The next leader repairs it at first sight, with
    // exactly one write.
    let (code, _) = a2.process.stop();
    assert_eq!(code, Some(0));
    let mark = real::mark(&c);
    let spec = "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}";
    let get_spec = || {
        c.kubectl(&["get", "statefulset", "docs-handbook", "-n", NS, "-o", spec])
            .stdout
    };
    let rendered = get_spec();
    c.kubectl_ok(&[
        "patch",
        "statefulset",
        "docs-handbook",
        "-n",
        NS,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":3},
            {"op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.invalid/planted:1"}]"#,
    ]);
    assert_ne!(get_spec(), rendered);
    let a3 = deployed::run_deployment(&c, NS, "sites-operator", t.timeout).await;
    eventually_every(
        "the offline edit repaired",
        t.timeout,
        Duration::from_millis(250),
        || {
            let now = get_spec();
            let rendered = rendered.clone();
            async move { (now == rendered).then_some(()) }
        },
    )
    .await;
    let metrics = settled(&a3, &token, "the third leader to settle", 1, t.timeout).await;
    // Of the owned objects, only the StatefulSet is written, once (the Site's status and its
    // pods may follow the pods the edit rolled).
    let owned: Vec<String> = writes(&metrics)
        .into_iter()
        .filter(|w| !w.contains("/status") && !w.contains(" pods:"))
        .collect();
    assert_eq!(
        owned,
        vec!["patch statefulsets.apps: 1".to_string()],
        "{}",
        a3.process.log()
    );
    // So does the audit log, naming the object.
    let audited: Vec<String> = real::operator_writes(&c, mark)
        .into_iter()
        .filter(|w| !w.contains("/status ") && !w.contains(" events") && !w.contains(" pods "))
        .collect();
    assert_eq!(
        audited,
        vec![format!("patch statefulsets.apps {NS}/docs-handbook")],
        "{}",
        a3.process.log()
    );
}
