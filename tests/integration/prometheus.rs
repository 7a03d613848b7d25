//! A real Prometheus scrapes the operator: `promtool check metrics` finds no problems in the
//! exposition, and Prometheus's query API returns the work-queue depth. Prometheus and promtool
//! come from the Debian package `prometheus`, which `make tools` installs.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{Cluster, OperatorProcess, eventually_every};

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
    let c = Cluster::start(true).await;
    c.kubectl_ok(&["create", "namespace", "sites"]);
    let op = OperatorProcess::start(&c.kubeconfig(), "sites", &c.dir.join("certs"));
    op.ready(Duration::from_secs(60)).await;
    // Once this replica (the only one) leads.
    let body = eventually_every(
        "the replica to lead",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let (_, response) = op.get("/metrics").await?;
            let body = response.split("\r\n\r\n").nth(1)?.to_string();
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

    // A real Prometheus scraping the metrics port. It listens on a port of its own choosing and
    // logs the address it got ("Listening on", address=...), which is read back from its log.
    let config = c.dir.join("prometheus.yml");
    let log = c.dir.join("prometheus.log");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sites-operator\n    static_configs:\n      - targets: ['{}']\n",
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
