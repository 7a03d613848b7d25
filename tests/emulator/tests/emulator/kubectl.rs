//! The real kubectl against the emulator, with default (strict) validation: get with printer
//! columns, create, apply (client-side and server-side), annotate, label, wait, delete — over
//! plain HTTP and over HTTPS with the CA in the kubeconfig, with identical results.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::{Cluster, Site, on_both, repo_file};

/// The text of column `col` in line `row` of kubectl's table output, cut at the header's
/// column positions (empty cells stay empty).
fn cell(table: &str, row: usize, col: usize) -> String {
    let header = table.lines().next().unwrap_or_default();
    let mut starts = Vec::new();
    let mut prev_space = true;
    for (i, ch) in header.char_indices() {
        if !ch.is_whitespace() && prev_space {
            starts.push(i);
        }
        prev_space = ch.is_whitespace();
    }
    let line = table.lines().nth(row).unwrap_or_default();
    let start = starts[col];
    let end = starts
        .get(col + 1)
        .copied()
        .unwrap_or(line.len())
        .min(line.len());
    line.get(start.min(line.len())..end)
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn example() -> String {
    repo_file("manifests/examples/site.yaml")
        .to_str()
        .unwrap()
        .to_string()
}

/// Runs the same kubectl session against a cluster and returns a transcript of what matters.
async fn session(c: &Cluster) -> Vec<String> {
    let mut transcript = Vec::new();
    let ex = example();

    // create, then get with the CRD's printer columns.
    let out = c.kubectl_ok(&["create", "-f", &ex]);
    assert_eq!(out.trim(), "site.sites.ecmwf.int/docs-handbook created");
    let table = c.kubectl_ok(&["get", "sites"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
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
    assert_eq!(cell(&table, 1, 0), "docs-handbook", "{table}");
    // PATH is the status' (written by the operator): empty here.
    assert_eq!(cell(&table, 1, 1), "", "{table}");
    assert_eq!(cell(&table, 1, 2), "docs", "{table}");
    transcript.push(header.join(" "));
    // short name from discovery
    let by_short = c.kubectl_ok(&["get", "site", "docs-handbook", "-o", "name"]);
    assert_eq!(by_short.trim(), "site.sites.ecmwf.int/docs-handbook");

    // get -o yaml shows defaults the API server filled in.
    let yaml = c.kubectl_ok(&["get", "site", "docs-handbook", "-o", "yaml"]);
    let v: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(v["spec"]["configuration"]["settings"]["replicas"], 1);
    assert_eq!(v["metadata"]["generation"], 1);

    // client-side apply of an existing object updates it; unchanged apply changes nothing.
    let edited = std::fs::read_to_string(&ex)
        .unwrap()
        .replace("owner: jdoe", "owner: alice");
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(&edited));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "site.sites.ecmwf.int/docs-handbook configured"
    );
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(&edited));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "site.sites.ecmwf.int/docs-handbook unchanged"
    );
    let owner = c.kubectl_ok(&[
        "get",
        "site",
        "docs-handbook",
        "-o",
        "jsonpath={.spec.owner}",
    ]);
    assert_eq!(owner, "alice");

    // server-side apply creates a second Site.
    let second = std::fs::read_to_string(&ex)
        .unwrap()
        .replace("name: docs-handbook", "name: docs-guide");
    let out = c.kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&second));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "site.sites.ecmwf.int/docs-guide serverside-applied"
    );

    // Strict validation: unknown fields are rejected, naming the field.
    let bad = std::fs::read_to_string(&ex)
        .unwrap()
        .replace("  owner: jdoe\n", "  owner: jdoe\n  ownr: typo\n")
        .replace("name: docs-handbook", "name: docs-typo");
    let out = c.kubectl_stdin(&["create", "-f", "-"], Some(&bad));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let unknown = if c.is_real() {
        // Kubernetes 1.20 serves no OpenAPI v3 (1.27) and has no server-side field validation
        // (1.25): kubectl validates against OpenAPI v2 itself.
        "unknown field \"ownr\" in int.ecmwf.sites.v1.Site.spec"
    } else {
        "unknown field \"spec.ownr\""
    };
    assert!(err.contains(unknown), "{err}");
    transcript.push("strict validation rejects spec.ownr".into());

    // annotate and label
    c.kubectl_ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "sites.ecmwf.int/upgrade-request=force",
    ]);
    c.kubectl_ok(&["label", "site", "docs-handbook", "team=docs"]);
    let labelled = c.kubectl_ok(&["get", "sites", "-l", "team=docs", "-o", "name"]);
    assert_eq!(labelled.trim(), "site.sites.ecmwf.int/docs-handbook");
    let ann = c.kubectl_ok(&[
        "get",
        "site",
        "docs-handbook",
        "-o",
        "jsonpath={.metadata.annotations.sites\\.ecmwf\\.int/upgrade-request}",
    ]);
    assert_eq!(ann, "force");

    // wait --for=condition: satisfied once the status carries the condition. kubectl starts
    // first; the condition is set only once kubectl has listed the Site without it and opened
    // its watch (its request log at -v=6 names the watch request), while it is still running:
    // the condition can reach it only through the watch.
    let mut kubectl = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .arg("--cache-dir")
        .arg(c.dir.join("cache"))
        .args([
            "-v=6",
            "wait",
            "--for=condition=Available",
            "site/docs-handbook",
            "--timeout=60s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    // Its log, line by line as it comes, and whole at the end (read to the end, so that a full
    // pipe never blocks kubectl).
    let (lines, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stderr = kubectl.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut log = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = lines.send(line.clone());
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let watching = |line: &str| {
        line.contains("/sites?") && line.contains("watch=true") && line.contains(" 200 OK")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, seen.recv()).await {
            Ok(Some(line)) if watching(&line) => break,
            Ok(Some(_)) => {}
            Ok(None) => panic!(
                "kubectl wait ended before it watched:\n{}",
                log.join().unwrap()
            ),
            Err(_) => {
                let _ = kubectl.kill();
                panic!(
                    "kubectl wait did not watch within 30 s:\n{}",
                    log.join().unwrap()
                )
            }
        }
    }
    assert!(
        kubectl.try_wait().unwrap().is_none(),
        "kubectl wait exited before the condition was set"
    );
    let sites: Api<Site> = Api::namespaced(c.client.clone(), "default");
    let status = json!({"status": {"conditions": [{
        "type": "Available", "status": "True", "reason": "Ready", "message": "all pods ready",
        "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]}});
    sites
        .patch_status(
            "docs-handbook",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    // kubectl's own --timeout bounds the wait.
    let out = tokio::task::spawn_blocking(move || kubectl.wait_with_output().unwrap())
        .await
        .unwrap();
    let log = log.join().unwrap();
    assert!(out.status.success(), "{log}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "site.sites.ecmwf.int/docs-handbook condition met",
        "{log}"
    );
    let table = c.kubectl_ok(&["get", "site", "docs-handbook"]);
    assert_eq!(cell(&table, 1, 4), "True", "Available column: {table}");

    // delete
    let out = c.kubectl_ok(&["delete", "site", "docs-handbook", "docs-guide"]);
    assert!(
        out.contains("site.sites.ecmwf.int \"docs-handbook\" deleted"),
        "{out}"
    );
    let out = c.kubectl(&["get", "site", "docs-handbook"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("NotFound") && err.contains("\"docs-handbook\" not found"),
        "{err}"
    );
    transcript.push("deleted".into());

    // Built-in kinds: client-side apply of a ConfigMap (strategic merge patch), get with columns.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n";
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(cm));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&cm.replace("a: \"1\"", "a: \"2\"\n  b: \"3\"")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = c.kubectl_ok(&["get", "configmap", "settings", "-o", "jsonpath={.data}"]);
    let data: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data, json!({"a": "2", "b": "3"}));
    let table = c.kubectl_ok(&["get", "configmaps"]);
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "DATA", "AGE"]
    );
    transcript
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_session_over_http_and_https_behaves_the_same() {
    let plain = Cluster::start(false).await;
    let tls = Cluster::start(true).await;
    assert!(tls.emulator().url().starts_with("https://"));
    let a = session(&plain).await;
    let b = session(&tls).await;
    assert_eq!(a, b);
}

mod kubectl_session_over_http_and_https_behaves_the_same {
    use super::*;

    /// The same session against a real control plane (over HTTPS).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs the real control plane: make real-apiserver-test"]
    async fn real_apiserver() {
        session(&Cluster::start_real().await).await;
    }
}

on_both! {
async fn kubectl_explain_uses_the_crd_descriptions(c: Cluster) {
    let out = c.kubectl_ok(&["explain", "site.spec.configuration"]);
    assert!(out.contains("What the site serves and how"), "{out}");
    assert!(out.contains("enabled"), "{out}");
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_requests_fail_loudly() {
    let c = Cluster::start(false).await;
    let out = c.kubectl(&["logs", "nonexistent-pod"]);
    assert!(!out.status.success());
    // A subresource the emulator does not emulate: 501 naming it.
    let url = format!(
        "{}/api/v1/namespaces/default/pods/x/log",
        c.emulator().url()
    );
    let body = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&body.stdout).to_string();
    assert!(text.ends_with("501"), "{text}");
    assert!(
        text.contains("does not emulate the pods/log subresource"),
        "{text}"
    );
}

on_both! {
async fn kubectl_get_watch_prints_table_rows(c: Cluster) {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .arg("--cache-dir")
        .arg(c.dir.join("cache"))
        .args(["get", "configmaps", "-w"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let output = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = output.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(c.client.clone(), "default");
    let cm = serde_json::from_value(json!({"metadata": {"name": "watched"}, "data": {"a": "1"}}))
        .unwrap();
    // kubectl may start watching after the create: either way the row must appear.
    cms.create(&kube::api::PostParams::default(), &cm)
        .await
        .unwrap();
    let seen = crate::support::eventually("watch row", Duration::from_secs(15), || {
        let out = output.lock().unwrap().clone();
        async move {
            out.lines()
                .any(|l| {
                    l.split_whitespace()
                        .collect::<Vec<_>>()
                        .starts_with(&["watched", "1"])
                })
                .then_some(out)
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        seen.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "DATA", "AGE"],
        "{seen}"
    );
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_commands_work() {
    // These commands send protobuf bodies.
    for tls in [false, true] {
        kubectl_typed_create_commands_work::body(Cluster::start(tls).await).await;
    }
}

mod kubectl_typed_create_commands_work {
    use super::*;

    pub(super) async fn body(c: Cluster) {
        assert_eq!(
            c.kubectl_ok(&["create", "namespace", "sites"]).trim(),
            "namespace/sites created"
        );
        assert_eq!(
            c.kubectl_ok(&[
                "-n",
                "sites",
                "create",
                "configmap",
                "sites-config",
                "--from-literal=config.yaml=sitesConfig: {}"
            ])
            .trim(),
            "configmap/sites-config created"
        );
        assert_eq!(
            c.kubectl_ok(&[
                "-n",
                "sites",
                "create",
                "secret",
                "generic",
                "sites-session",
                "--from-literal=secret_key=s3cr3t"
            ])
            .trim(),
            "secret/sites-session created"
        );
        assert_eq!(
            c.kubectl_ok(&["-n", "sites", "create", "serviceaccount", "sites-operator"])
                .trim(),
            "serviceaccount/sites-operator created"
        );
        let data = c.kubectl_ok(&[
            "-n",
            "sites",
            "get",
            "configmap",
            "sites-config",
            "-o",
            "jsonpath={.data.config\\.yaml}",
        ]);
        assert_eq!(data, "sitesConfig: {}");
        let secret = c.kubectl_ok(&[
            "-n",
            "sites",
            "get",
            "secret",
            "sites-session",
            "-o",
            "jsonpath={.data.secret_key}",
        ]);
        assert_eq!(secret, "czNjcjN0", "base64 of s3cr3t");
        let labels = c.kubectl_ok(&[
            "get",
            "namespace",
            "sites",
            "-o",
            "jsonpath={.metadata.labels}",
        ]);
        if c.is_real() {
            // The API server labels namespaces with kubernetes.io/metadata.name from 1.21 on
            // (NamespaceDefaultLabelName); 1.20 sets no label.
            assert_eq!(labels, "", "{labels}");
        } else {
            assert!(labels.contains("kubernetes.io/metadata.name"), "{labels}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs the real control plane: make real-apiserver-test"]
    async fn real_apiserver() {
        body(Cluster::start_real().await).await;
    }
}

on_both! {
async fn kubectl_create_job_cronjob_and_quota(c: Cluster) {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
    use kube::api::PostParams;

    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "batch"}})).unwrap();
    Api::<Namespace>::all(c.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    // A Job: stored with the API server's defaults and generated selector; its pods are not run.
    c.kubectl_ok(&["-n", "batch", "create", "job", "pi", "--image=busybox"]);
    let job = Api::<Job>::namespaced(c.client.clone(), "batch")
        .get("pi")
        .await
        .unwrap();
    let uid = job.metadata.uid.clone().unwrap();
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        (spec.completions, spec.parallelism, spec.backoff_limit),
        (Some(1), Some(1), Some(6))
    );
    // Kubernetes 1.20 has no completionMode (1.21) and labels the Job's pods with
    // `controller-uid` and `job-name` only (the batch.kubernetes.io/ labels are 1.27+;
    // pkg/registry/batch/job/strategy.go generateSelector of 1.20.2).
    let real = c.is_real();
    let (mode, uid_label, name_label) = if real {
        (None, "controller-uid", "job-name")
    } else {
        (
            Some("NonIndexed"),
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
        )
    };
    assert_eq!(spec.completion_mode.as_deref(), mode);
    let selector = spec
        .selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap();
    assert_eq!(selector[uid_label], uid);
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(labels[name_label], "pi");
    assert_eq!(labels["controller-uid"], uid);
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers[0].image.as_deref(), Some("busybox"));
    let table = c.kubectl_ok(&["-n", "batch", "get", "jobs"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    if real {
        // Kubernetes 1.20's Job columns have no STATUS (1.28); its Job controller runs the
        // Job, whose pod the kubelet may have completed already.
        assert_eq!(header, ["NAME", "COMPLETIONS", "DURATION", "AGE"]);
        assert_eq!(cell(&table, 1, 0), "pi");
        assert!(["0/1", "1/1"].contains(&cell(&table, 1, 1).as_str()), "{table}");
    } else {
        assert_eq!(header, ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]);
        assert_eq!(
            (cell(&table, 1, 0), cell(&table, 1, 1), cell(&table, 1, 2)),
            ("pi".into(), "Running".into(), "0/1".into())
        );
    }
    let wide = c.kubectl_ok(&["-n", "batch", "get", "job", "pi", "-o", "wide"]);
    assert!(wide.contains(&format!("{uid_label}={uid}")), "{wide}");

    if real {
        // CronJobs are batch/v1 from Kubernetes 1.21 on; 1.20 serves batch/v1beta1 only,
        // and kubectl 1.32 creates batch/v1.
        let out = c.kubectl(&[
            "-n",
            "batch",
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/1 * * * *",
        ]);
        assert!(!out.status.success(), "{out:?}");
    } else {
        // A CronJob.
        c.kubectl_ok(&[
            "-n",
            "batch",
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/1 * * * *",
        ]);
        let cj = Api::<CronJob>::namespaced(c.client.clone(), "batch")
            .get("tick")
            .await
            .unwrap();
        let spec = cj.spec.as_ref().unwrap();
        assert_eq!(spec.schedule, "*/1 * * * *");
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Allow"));
        assert_eq!(
            (
                spec.successful_jobs_history_limit,
                spec.failed_jobs_history_limit,
                spec.suspend
            ),
            (Some(3), Some(1), Some(false))
        );
        let template = spec
            .job_template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        assert_eq!(template.restart_policy.as_deref(), Some("OnFailure"));
        let table = c.kubectl_ok(&["-n", "batch", "get", "cronjobs"]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"
            ]
        );
        // The schedule has spaces and LAST SCHEDULE is one column: split the row after the schedule.
        assert_eq!(cell(&table, 1, 1), "*/1 * * * *");
        let row = table.lines().nth(1).unwrap();
        let rest: Vec<&str> = row
            .split_once("*/1 * * * *")
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        assert_eq!(&rest[..4], ["<none>", "False", "0", "<none>"], "{table}");
        let all = c.kubectl_ok(&["-n", "batch", "get", "all", "-o", "name"]);
        assert!(all.lines().any(|l| l == "job.batch/pi"), "{all}");
        assert!(all.lines().any(|l| l == "cronjob.batch/tick"), "{all}");
        // Bad input: a clear Status naming the field.
        let out = c.kubectl(&[
            "-n",
            "batch",
            "create",
            "cronjob",
            "bad",
            "--image=busybox",
            "--schedule=every minute",
        ]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("spec.schedule: Invalid value"), "{err}");
    }
    let bad: Job = serde_json::from_value(json!({
        "metadata": {"name": "always"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    let status = Api::<Job>::namespaced(c.client.clone(), "batch")
        .create(&PostParams::default(), &bad)
        .await
        .map_err(crate::support::api_error)
        .unwrap_err();
    assert_eq!(status.code, 422);
    // Kubernetes 1.20 calls a restartPolicy of Always (the default) missing
    // (pkg/apis/batch/validation/validation.go:133 of 1.20.2); 1.32 names the value.
    let refused = if real {
        "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
    } else {
        "spec.template.spec.restartPolicy: Unsupported value: \"Always\""
    };
    assert!(status.message.contains(refused), "{}", status.message);

    // A ResourceQuota, with the quota controller's status.
    c.kubectl_ok(&["-n", "batch", "create", "quota", "q", "--hard=pods=10"]);
    let quotas = Api::<ResourceQuota>::namespaced(c.client.clone(), "batch");
    let q = quotas.get("q").await.unwrap();
    assert_eq!(q.spec.unwrap().hard.unwrap()["pods"].0, "10");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(c.client.clone(), "batch")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    // On a real control plane the Job's pods count too while they have not finished: `p`, and
    // at most every unfinished pod. The quota controller counts what its informer holds when it
    // syncs the new quota; a Job pod created after that count is charged at its next full
    // resync (`--resource-quota-sync-period`, 5 minutes), so the exact figure may lag.
    let pods = Api::<Pod>::namespaced(c.client.clone(), "batch");
    // The real quota controller counts once its monitors have synced, which takes longer the
    // busier the machine (control planes of other tests start beside it): a generous guard,
    // and what it last saw when it runs out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let used = loop {
        let unfinished = if real {
            let list = pods.list(&Default::default()).await.unwrap();
            let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
            list.items
                .iter()
                .filter(|p| !matches!(phase(p).as_deref(), Some("Succeeded" | "Failed")))
                .count()
        } else {
            1
        };
        let status = quotas.get("q").await.unwrap().status;
        let seen = status.as_ref().map(|s| {
            let get = |m: &Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
                m.as_ref().and_then(|m| m.get("pods")).map(|q| q.0.clone())
            };
            (get(&s.used), get(&s.hard))
        });
        let fits = |n: &usize| if real { (1..=unfinished).contains(n) } else { *n == 1 };
        let counted = seen
            .as_ref()
            .filter(|(_, hard)| hard.as_deref() == Some("10"))
            .and_then(|(used, _)| used.as_deref()?.parse::<usize>().ok())
            .filter(fits);
        if let Some(n) = counted {
            break n.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "quota usage: pods used and hard {seen:?}, {unfinished} pods not finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let table = c.kubectl_ok(&["-n", "batch", "get", "quota"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"]);
    if real {
        assert!(cell(&table, 1, 2).starts_with("pods: ") && cell(&table, 1, 2).ends_with("/10"), "{table} {used}");
    } else {
        assert_eq!(cell(&table, 1, 2), "pods: 1/10");
    }
    let out = c.kubectl(&["-n", "batch", "create", "quota", "neg", "--hard=pods=-1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.hard[pods]"), "{err}");
}
}
