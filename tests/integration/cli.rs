//! The command line: `crd`, `check-config`, global flags, help, exit codes; the allocator the
//! binary runs with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sites-operator"));
    cmd.env_remove("SITES_OPERATOR_LOG_LEVEL")
        .env_remove("SITES_OPERATOR_LOG_FORMAT");
    cmd
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A file in a fresh temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, content: &[u8]) -> TempFile {
        let dir = std::env::temp_dir().join(format!(
            "sites-operator-cli-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        TempFile(path)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn crd_prints_the_committed_manifest() {
    let out = run(&["crd"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let committed = std::fs::read_to_string(root().join("manifests/base/crd.yaml")).unwrap();
    assert!(
        stdout(&out) == committed,
        "`sites-operator crd` differs from manifests/base/crd.yaml: run `make crd`"
    );
    assert!(
        stdout(&out)
            .starts_with("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n")
    );
}

#[test]
fn check_config_accepts_the_example() {
    let example = root().join("manifests/base/config.yaml");
    let out = run(&["check-config", example.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(stdout(&out), "ok\n");
}

#[test]
fn check_config_reports_every_problem_one_per_line_and_exits_2() {
    let f = TempFile::new(
        "config.yaml",
        br#"
routing:
  mode: gateway
  hstsEnabled: true
  scheme: ftp
sitesConfig:
  version: "1.0"
  routing: {}
"#,
    );
    let out = run(&["check-config", f.path()]);
    assert_eq!(out.status.code(), Some(2));
    let lines: Vec<String> = stdout(&out).lines().map(String::from).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "routing.host: required in gateway mode: the public host of all sites",
            "routing.hstsEnabled: moved; use routing.hsts",
            "routing.scheme: must be http or https, found \"ftp\"",
            "sitesConfig.routing: not allowed: routing is platform-wide; use the top-level routing values",
        ],
        "{lines:#?}"
    );
}

#[test]
fn check_config_reads_a_configmap_manifest_and_stdin() {
    let example = std::fs::read_to_string(root().join("manifests/base/config.yaml")).unwrap();
    let indented: String = example.lines().map(|l| format!("    {l}\n")).collect();
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sites-config\ndata:\n  config.yaml: |\n{indented}"
    );
    let f = TempFile::new("cm.yaml", cm.as_bytes());
    let out = run(&["check-config", f.path()]);
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));

    let empty_cm = TempFile::new(
        "cm.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sites-config}\n",
    );
    let out = run(&["check-config", empty_cm.path()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).starts_with("data[\"config.yaml\"]: required"),
        "{}",
        stdout(&out)
    );

    let mut child = bin()
        .args(["check-config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"routing: {mode: mesh}\nsitesConfig: {version: \"1\"}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stdout(&out),
        "routing.mode: unknown routing mode \"mesh\"; use ingress or gateway\n"
    );
}

#[test]
fn check_config_bad_input_is_one_clear_line_and_exit_2() {
    let missing = root().join("no/such/config.yaml");
    let not_yaml = TempFile::new("c.yaml", b"routing: [unclosed\n  - {\n");
    let binary = TempFile::new("c.yaml", &[0xff, 0xfe, 0x00, 0x81, b'\n']);
    let two_docs = TempFile::new("c.yaml", b"a: 1\n---\nb: 2\n");
    let dir = TempFile::new("c.yaml", b"");
    let dir_path = Path::new(dir.path())
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    for (case, path, fragment) in [
        ("missing file", missing.to_str().unwrap(), "cannot read"),
        ("not YAML", not_yaml.path(), "is not valid YAML"),
        ("not UTF-8", binary.path(), "not UTF-8"),
        ("two documents", two_docs.path(), "is not valid YAML"),
        ("a directory", dir_path.as_str(), "cannot read"),
    ] {
        let out = run(&["check-config", path]);
        assert_eq!(out.status.code(), Some(2), "{case}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{case}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(fragment),
            "{case}: {err}"
        );
        assert!(!err.contains("panicked"), "{case}: {err}");
        assert_eq!(stdout(&out), "", "{case}");
    }
}

#[test]
fn help_lists_only_working_commands() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        [
            "crd",
            "check-config",
            "run",
            "upgrade",
            "retention",
            "certs",
            "rollout",
            "help"
        ],
        "{help}"
    );
    assert!(help.contains("--log-format"));
    assert!(help.contains("--log-level"));
    let out = run(&["check-config", "--help"]);
    assert!(stdout(&out).contains("one line per problem"));
}

#[test]
fn global_flags_are_validated() {
    let out = run(&["--log-level", "info,=[", "crd"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid --log-level"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");

    let out = run(&["--log-format", "xml", "crd"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("xml"));

    let out = run(&["--log-format", "json", "--log-level", "debug", "crd"]);
    assert!(out.status.success());

    let out = run(&["run"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "unknown subcommands are usage errors"
    );
}

/// The allocator settings of the shipped binary, as it reports them at start (debug): its
/// allocations go to mimalloc (its `#[global_allocator]`), with the operator's purge delay
/// unless `MIMALLOC_PURGE_DELAY` sets another. Read from the binary, not from this test process,
/// whose allocator is the system's.
#[test]
fn the_binary_allocates_with_mimalloc_with_the_operators_purge_delay() {
    let report = |purge_delay: Option<&str>| -> serde_json::Value {
        let mut cmd = bin();
        cmd.env_remove("MIMALLOC_PURGE_DELAY");
        if let Some(ms) = purge_delay {
            cmd.env("MIMALLOC_PURGE_DELAY", ms);
        }
        let out = cmd
            .args(["--log-format", "json", "--log-level", "debug", "crd"])
            .output()
            .expect("binary runs");
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["message"] == "memory allocator")
            .unwrap_or_else(|| panic!("no allocator report in the log:\n{}", stderr(&out)))
    };
    let default = report(None);
    assert_eq!(default["mimalloc"], true, "{default}");
    assert_eq!(
        default["purge_delay_ms"],
        sites_operator::allocator::PURGE_DELAY_MS,
        "{default}"
    );
    let set = report(Some("250"));
    assert_eq!(set["mimalloc"], true, "{set}");
    assert_eq!(set["purge_delay_ms"], 250, "{set}");
}

/// `crd --with-gateway-api` installs HTTPRoutes and Gateways that kubectl prints with the
/// upstream CRDs' columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_gateway_api_crds_have_the_upstream_columns() {
    let c = crate::support::Cluster::start(false).await;
    let out = run(&["crd", "--with-gateway-api"]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &stdout(&out));
    // Once the CRD is established, an object of it applied and listed: (header, table).
    let listed = |plural: &str, manifest: &str| {
        c.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{plural}.gateway.networking.k8s.io"),
            "--timeout=30s",
        ]);
        c.kubectl_ok_stdin(&["apply", "-n", "default", "-f", "-"], manifest);
        let table = c.kubectl_ok(&["get", plural, "-n", "default"]);
        let header: Vec<String> = table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect();
        (header, table)
    };
    let (header, table) = listed(
        "httproutes",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: web\nspec:\n  hostnames: [sites.example.org]\n",
    );
    assert_eq!(header, ["NAME", "HOSTNAMES", "AGE"], "{table}");
    assert!(table.contains("sites.example.org"), "{table}");
    let (header, table) = listed(
        "gateways",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: sites-gateway\nspec:\n  gatewayClassName: example\n  listeners: [{name: http, port: 80, protocol: HTTP}]\n",
    );
    assert_eq!(
        header,
        ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"],
        "{table}"
    );
    assert!(table.contains("example"), "{table}");
}
