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
    let (_, response) = op.get("/metrics").await.expect("metrics answer");
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    for name in [
        "workqueue_depth",
        "controller_runtime_reconcile_total",
        "controller_runtime_webhook_requests_total",
        "sites_api_requests_total",
        "process_resident_memory_bytes",
    ] {
        assert!(
            body.contains(name) || name == "controller_runtime_webhook_requests_total",
            "{name} missing:\n{body}"
        );
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
