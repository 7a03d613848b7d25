//! Metrics as a cluster serves them: HTTPS, only for callers whose bearer token the API server
//! authenticates (TokenReview) and authorizes for `get` on `/metrics` (SubjectAccessReview); a
//! real Prometheus scrapes them with a ServiceAccount token bound to the shipped
//! `sites-operator-metrics-reader` ClusterRole, `promtool check metrics` finds no problems in
//! the exposition, and Prometheus's query API returns the work-queue depth. Prometheus and
//! promtool come from the Debian package `prometheus`, which `make tools` installs.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::process::{http_get, https_get};
use crate::support::{Cluster, OperatorProcess, eventually, eventually_every, repo_file};

/// A name of the metrics Service that the serving certificate covers (`--self-signed` adds the
/// metrics Service's names), as Prometheus's `server_name` names it in a cluster.
const METRICS_HOST: &str = "sites-operator-metrics.sites.svc";

/// Applies the shipped `sites-operator-metrics-reader` ClusterRole (manifests/base/rbac.yaml).
fn install_metrics_reader(c: &Cluster) {
    let text = std::fs::read_to_string(repo_file("manifests/base/rbac.yaml")).unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|v| {
            v["kind"] == "ClusterRole" && v["metadata"]["name"] == "sites-operator-metrics-reader"
        })
        .expect("rbac.yaml ships the sites-operator-metrics-reader ClusterRole");
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &role.to_string());
}

/// A token of a new ServiceAccount `monitoring/<name>`, bound to the metrics reader when `read`.
fn service_account_token(c: &Cluster, name: &str, read: bool) -> String {
    c.kubectl_ok(&["create", "serviceaccount", name, "-n", "monitoring"]);
    if read {
        bind_metrics_reader(c, name);
    }
    c.kubectl_ok(&["create", "token", name, "-n", "monitoring"])
        .trim()
        .to_string()
}

fn bind_metrics_reader(c: &Cluster, name: &str) {
    c.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{name}-metrics"),
        "--clusterrole=sites-operator-metrics-reader",
        &format!("--serviceaccount=monitoring:{name}"),
    ]);
}

/// A cluster with the namespaces `sites` and `monitoring` and the metrics reader ClusterRole,
/// and the operator serving secure metrics; returns them with the CA of its certificate.
async fn secure_operator() -> (Cluster, OperatorProcess, String) {
    let c = Cluster::start(true).await;
    c.kubectl_ok(&["create", "namespace", "sites"]);
    c.kubectl_ok(&["create", "namespace", "monitoring"]);
    install_metrics_reader(&c);
    let op = OperatorProcess::start_secure(&c.kubeconfig(), "sites", &c.dir.join("certs"));
    op.ready(Duration::from_secs(60)).await;
    let ca = std::fs::read_to_string(c.dir.join("certs").join("ca.crt")).unwrap();
    (c, op, ca)
}

/// The sum of the series of `name` whose line contains every one of `labels`.
fn series(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_the_api_server_authenticates_and_authorizes() {
    let (c, op, ca) = secure_operator().await;
    let listening = op.reported().unwrap();
    let get = |token: Option<String>| {
        let ca = ca.clone();
        async move {
            https_get(
                listening.metrics,
                &ca,
                METRICS_HOST,
                "/metrics",
                token.as_deref(),
            )
            .await
        }
    };
    // Health stays open, on its own plain-HTTP port.
    for path in ["/healthz", "/readyz"] {
        let (status, _) = op.get(path).await.unwrap();
        assert_eq!(status, 200, "{path}");
    }
    // No token, or a token the API server does not know: 401 with a Bearer challenge.
    let (status, response) = get(None).await.unwrap();
    assert_eq!(status, 401, "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{response}"
    );
    assert!(!response.contains("workqueue_depth"), "{response}");
    let (status, response) = get(Some("not-a-token".into())).await.unwrap();
    assert_eq!(status, 401, "{response}");
    // Authenticated, without the grant: 403 naming the user, never echoing the token.
    let token = service_account_token(&c, "scraper", false);
    let (status, response) = get(Some(token.clone())).await.unwrap();
    assert_eq!(status, 403, "{response}");
    assert!(
        response.contains("system:serviceaccount:monitoring:scraper"),
        "{response}"
    );
    assert!(!response.contains(&token), "{response}");
    // Granted: allowed once the refusal's short cache lifetime is over.
    bind_metrics_reader(&c, "scraper");
    let (_, body) = eventually(
        "the bound token to read /metrics",
        Duration::from_secs(60),
        || {
            let get = get(Some(token.clone()));
            async move { get.await.ok().filter(|(s, _)| *s == 200) }
        },
    )
    .await;
    assert!(body.contains("workqueue_depth"), "{body}");
    // An allowed caller is not reviewed again on every scrape.
    let reviews = |body: &str| {
        (
            series(
                body,
                "sites_api_requests_total",
                &[
                    "verb=\"create\"",
                    "resource=\"tokenreviews.authentication.k8s.io\"",
                ],
            ),
            series(
                body,
                "sites_api_requests_total",
                &[
                    "verb=\"create\"",
                    "resource=\"subjectaccessreviews.authorization.k8s.io\"",
                ],
            ),
        )
    };
    let first = reviews(&body);
    assert!(first.0 >= 3.0 && first.1 >= 2.0, "{first:?}");
    let mut last = String::new();
    for _ in 0..5 {
        let (status, body) = get(Some(token.clone())).await.unwrap();
        assert_eq!(status, 200);
        last = body;
    }
    assert_eq!(reviews(&last), first);
    // Plain HTTP on the metrics port serves nothing.
    let plain = http_get(listening.metrics, "/metrics", &[]).await;
    assert!(plain.as_ref().is_none_or(|(s, _)| *s != 200), "{plain:?}");
    // The token never reaches the log.
    let (_, log) = op.stop();
    assert!(!log.contains(&token), "the token is in the log");
}

fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "{name} is not installed: run `make tools` (installs the Debian package prometheus)"
    );
    String::from_utf8_lossy(&found.stdout).trim().to_string()
}

/// The address in Prometheus's `msg="Listening on" address=IP:PORT` log line (the bound one, unlike
/// the configured address of its "Start listening" line).
fn listening_address(log: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.contains("msg=\"Listening on\""))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
        })
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_operator() {
    let promtool = tool("promtool");
    let prometheus = tool("prometheus");
    let (c, op, ca) = secure_operator().await;
    let token = service_account_token(&c, "prometheus", true);
    // Once this replica (the only one) leads.
    let body = eventually_every(
        "the replica to lead",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let (status, response) =
                https_get(op.metrics(), &ca, METRICS_HOST, "/metrics", Some(&token))
                    .await
                    .ok()?;
            let body = response.split("\r\n\r\n").nth(1)?.to_string();
            if status != 200 {
                return None;
            }
            body.contains("leader_election_master_status{name=\"sites-operator\"} 1")
                .then_some(body)
        },
    )
    .await;
    let families = families(&body);
    for name in [
        "workqueue_depth",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_terminal_reconcile_errors_total",
        "controller_runtime_reconcile_panics_total",
        "controller_runtime_webhook_requests_total",
        "controller_runtime_webhook_latency_seconds",
        "sites_api_requests_total",
        "sites_by_phase",
        "sites_config_valid",
        "sites_webhook_open_connections",
        "sites_webhook_connections_refused_total",
        "sites_webhook_certificate_expiry_timestamp_seconds",
        "leader_election_master_status",
        "sites_operator_build_info",
        "process_resident_memory_bytes",
    ] {
        assert!(families.contains(name), "{name} missing:\n{body}");
    }
    // It says which binary it is.
    let build = body
        .lines()
        .find(|l| l.starts_with("sites_operator_build_info{"))
        .unwrap_or_else(|| panic!("no build info:\n{body}"));
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && build.contains("commit=\"")
            && build.ends_with(" 1"),
        "{build}"
    );

    // The serving certificate's expiry is set from the start, and in the future.
    let expiry: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("sites_webhook_certificate_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no certificate expiry:\n{body}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(expiry > now, "expiry {expiry} is not after now {now}");

    // Every metric the shipped dashboard and alerting rules query is exported.
    let monitoring = crate::support::repo_file("manifests/overlays/monitoring");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring.join("dashboard.json")).unwrap())
            .unwrap();
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    let rules = std::fs::read_to_string(monitoring.join("prometheusrule.yaml")).unwrap();
    let rules: serde_json::Value = serde_yaml_ng::from_str(&rules).unwrap();
    collect_exprs(&rules, &mut exprs);
    assert!(exprs.len() > 20, "{} queries found", exprs.len());
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for name in names {
            assert!(
                families.contains(&name),
                "{name} (in {expr}) is not exported by the operator"
            );
        }
    }

    // promtool's lint of the exposition format and naming conventions.
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), body.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}"
    );

    // A real Prometheus scraping the metrics port as the monitoring overlay's ServiceMonitor
    // does: HTTPS verified against the CA, a bearer token. It listens on a port of its own
    // choosing and logs the address it got ("Listening on", address=...), read back from its log.
    let config = c.dir.join("prometheus.yml");
    let log = c.dir.join("prometheus.log");
    let token_file = c.dir.join("prometheus.token");
    std::fs::write(&token_file, &token).unwrap();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sites-operator\n    scheme: https\n    authorization:\n      credentials_file: {}\n    tls_config:\n      ca_file: {}\n      server_name: {METRICS_HOST}\n    static_configs:\n      - targets: ['{}']\n",
            token_file.display(),
            c.dir.join("certs").join("ca.crt").display(),
            op.metrics()
        ),
    )
    .unwrap();
    let mut server = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            c.dir.join("tsdb").display()
        ))
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = eventually_every(
        "Prometheus to listen",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { listening_address(&std::fs::read_to_string(&log).unwrap_or_default()) },
    )
    .await;
    let result = eventually_every(
        "Prometheus returns workqueue_depth",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let out = Command::new("curl")
                .args([
                    "-fs",
                    &format!("http://{addr}/api/v1/query?query=workqueue_depth"),
                ])
                .output()
                .ok()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let results = v["data"]["result"].as_array()?;
            (!results.is_empty()).then(|| results[0].clone())
        },
    )
    .await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(result["metric"]["name"], "site", "{result}");
    assert_eq!(result["metric"]["job"], "sites-operator", "{result}");
}

/// The metric families of an exposition: every series name, with a histogram's or summary's
/// `_bucket`, `_sum` and `_count` series also counted under the family name.
fn families(body: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        names.insert(name.to_string());
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix) {
                names.insert(family.to_string());
            }
        }
    }
    names
}

/// Every `expr` string in a JSON document (Grafana targets, PrometheusRule rules).
fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The metric names a PromQL expression selects: identifiers that are not functions (followed
/// by `(`), keywords, label names (inside `{}` or the label lists of `by`, `on`, ...), strings,
/// durations (`[5m]`) or numbers.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
        // Aggregation operators, which may be followed by `by (...)` instead of `(`.
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut last_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c == '(' && LABEL_LISTS.contains(&last_word.as_str()) {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            i += 1;
            last_word.clear();
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:$".contains(chars[i]))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let is_call = j < chars.len() && chars[j] == '(';
            if !is_call
                && !word.starts_with('$')
                && !KEYWORDS.contains(&word.to_lowercase().as_str())
            {
                names.push(word.clone());
            }
            last_word = word;
        } else if c.is_ascii_digit() || c == '.' {
            // A number (possibly 1e3 or a duration such as 5m after offset).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            if !c.is_whitespace() {
                last_word.clear();
            }
            i += 1;
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn metric_names_of_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le, webhook) (rate(controller_runtime_webhook_latency_seconds_bucket{job="x",code!~"2.."}[5m]))) > 0.5"#
        ),
        ["controller_runtime_webhook_latency_seconds_bucket"]
    );
    assert_eq!(
        metric_names(
            "workqueue_depth{name=\"site\"} and on (instance) (leader_election_master_status == 1) or absent(up)"
        ),
        ["leader_election_master_status", "up", "workqueue_depth"]
    );
    assert_eq!(
        metric_names("sum(rate(a_total[$__rate_interval])) / sum without(pod) (b)"),
        ["a_total", "b"]
    );
}

/// The monitoring overlay's scrape path fits together: ServiceMonitor (HTTPS, token, CA of the
/// serving certificate, a server name the certificate covers) → metrics Service → the
/// Deployment's `metrics` port, the binary's default secure metrics port; probes on the open
/// health port; Prometheus's ServiceAccount bound to the metrics reader and allowed to discover
/// the targets.
#[test]
fn the_shipped_scrape_path_fits_together() {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo_file("manifests/overlays/monitoring"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} is not in the monitoring overlay"))
    };
    let help = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("[default: 0.0.0.0:8443]"), "{help}");
    assert!(help.contains("[default: 0.0.0.0:8081]"), "{help}");

    let monitor = find("ServiceMonitor", "sites-operator");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https", "{endpoint}");
    assert_eq!(endpoint["path"], "/metrics");
    assert!(endpoint["bearerTokenFile"].is_string(), "{endpoint}");
    let ca = &endpoint["tlsConfig"]["ca"]["secret"];
    assert_eq!(ca["name"], "sites-operator-webhook-tls", "{endpoint}");
    assert_eq!(ca["key"], "ca.crt", "{endpoint}");
    let service = find("Service", sites_operator::labels::METRICS_SERVICE);
    let names =
        sites_operator::certs::service_dns_names(sites_operator::labels::METRICS_SERVICE, "sites");
    assert!(
        names
            .iter()
            .any(|n| *n == endpoint["tlsConfig"]["serverName"]),
        "{endpoint}"
    );
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .unwrap_or_else(|| panic!("the Service has no port {}", endpoint["port"]));
    let deployment = find("Deployment", "sites-operator");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let container_port = |name: &serde_json::Value| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == *name)
            .unwrap_or_else(|| panic!("the container has no port {name}"))["containerPort"]
            .clone()
    };
    assert_eq!(container_port(&port["targetPort"]), 8443);
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            container_port(&container[probe]["httpGet"]["port"]),
            8081,
            "{probe}"
        );
    }
    let args = container["args"].to_string();
    assert!(!args.contains("--metrics-insecure"), "{args}");
    // The self-signed certificate covers the metrics Service (the default of --metrics-service).
    assert!(args.contains("--self-signed"), "{args}");
    assert!(help.contains("[default: sites-operator-metrics]"), "{help}");

    let binding = find("ClusterRoleBinding", "sites-operator-metrics-reader");
    assert_eq!(binding["roleRef"]["name"], "sites-operator-metrics-reader");
    let reader = find("ClusterRole", "sites-operator-metrics-reader");
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    // Prometheus's ServiceAccount may also discover the targets in the operator's namespace
    // (kube-prometheus lets it list endpoints only in its own, default and kube-system).
    let discovery = find("RoleBinding", "sites-operator-prometheus-discovery");
    assert_eq!(discovery["subjects"], binding["subjects"], "{discovery}");
    assert_eq!(discovery["metadata"]["namespace"], "sites", "{discovery}");
    let role = find("Role", discovery["roleRef"]["name"].as_str().unwrap());
    let grants = |group: &str, resource: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            r["apiGroups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == group)
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
                && ["list", "watch"]
                    .iter()
                    .all(|v| r["verbs"].as_array().unwrap().iter().any(|x| x == v))
        })
    };
    for (group, resource) in [
        ("", "services"),
        ("", "endpoints"),
        ("", "pods"),
        ("discovery.k8s.io", "endpointslices"),
    ] {
        assert!(grants(group, resource), "{resource}: {role}");
    }
    let policy = find("NetworkPolicy", "sites-operator");
    assert!(
        policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| rule["ports"][0]["port"] == endpoint["port"] && rule["from"].is_array()),
        "{policy}"
    );
}
