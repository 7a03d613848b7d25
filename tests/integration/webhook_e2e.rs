//! End to end: the real `sites-operator run --self-signed` binary behind the emulator's admission
//! chain, driven by the real kubectl. Bad Sites and bad platform configurations are refused with
//! the field named; `upgrade-request=force` is stamped with a UUID; the operator's certificate is
//! shared through a Secret and its CA patched into the committed webhook configurations.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use sites_operator::certs;
use sites_operator::crd::{Site, UPGRADE_REQUEST_ANNOTATION};

use crate::support::{Cluster, OperatorProcess, repo_file, serve_webhooks};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "sites";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn annotation(c: &Cluster, name: &str) -> String {
    c.kubectl_ok(&[
        "get",
        "site",
        name,
        "-n",
        NS,
        "-o",
        "jsonpath={.metadata.annotations.sites\\.ecmwf\\.int/upgrade-request}",
    ])
}

/// An HTTPS emulator with the namespace and the committed webhook configurations, and the
/// operator serving them.
async fn operator_behind_webhooks() -> (Cluster, OperatorProcess) {
    let c = Cluster::start(true).await;
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    c.kubectl_ok(&[
        "apply",
        "-f",
        repo_file("manifests/base/webhooks.yaml").to_str().unwrap(),
    ]);
    let op = serve_webhooks(&c, NS, &[], WAIT).await;
    (c, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_edits_go_through_the_operator_webhooks() {
    let (c, op) = operator_behind_webhooks().await;

    // Self-signed mode: the certificate is in the Secret and the CA in every webhook.
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), NS);
    let stored = secrets
        .get("sites-operator-webhook-tls")
        .await
        .expect("certificate Secret");
    let ca = stored.data.as_ref().unwrap()["ca.crt"].clone();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(c.client.clone());
    let hooks = configs
        .get("sites-operator")
        .await
        .unwrap()
        .webhooks
        .unwrap();
    assert_eq!(hooks.len(), 2);
    for h in &hooks {
        assert_eq!(h.client_config.ca_bundle.as_ref(), Some(&ca), "{}", h.name);
    }

    // Every invalid example is refused, naming the field its first line names.
    let dir = repo_file("manifests/examples/invalid");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .next()
            .unwrap()[2..]
            .to_string();
        let out = c.kubectl(&["apply", "-n", NS, "-f", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{} was accepted", path.display());
        let err = stderr(&out);
        assert!(
            err.contains("admission webhook \"validate-sites.sites.ecmwf.int\" denied the request"),
            "{}: {err}",
            path.display()
        );
        assert!(
            err.contains(&expected),
            "{}: expected {expected:?} in {err}",
            path.display()
        );
    }

    // Two applications of one name: the list is keyed by name, so the API server's own schema
    // validation refuses it (before the validating webhook, whose rule stays for Sites stored
    // under an older CRD), naming the item.
    let duplicate = "apiVersion: sites.ecmwf.int/v1\nkind: Site\nmetadata: {name: bad-duplicate}\n\
        spec: {name: duplicate, owner: jdoe, type: static, configuration: {space: docs, \
        applications: [{name: static}, {name: static}]}}\n";
    let out = c.kubectl_stdin(&["apply", "-n", NS, "-f", "-"], Some(duplicate));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("spec.configuration.applications[1]: Duplicate value"),
        "{err}"
    );

    // A valid Site is stored; `force` becomes a UUID, every time.
    c.kubectl_ok(&[
        "apply",
        "-n",
        NS,
        "-f",
        repo_file("manifests/examples/site.yaml").to_str().unwrap(),
    ]);
    c.kubectl_ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "-n",
        NS,
        &format!("{UPGRADE_REQUEST_ANNOTATION}=force"),
    ]);
    let first = annotation(&c, "docs-handbook");
    assert!(uuid::Uuid::parse_str(&first).is_ok(), "{first:?}");
    c.kubectl_ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--overwrite",
        &format!("{UPGRADE_REQUEST_ANNOTATION}=force"),
    ]);
    let second = annotation(&c, "docs-handbook");
    assert!(
        uuid::Uuid::parse_str(&second).is_ok() && second != first,
        "{first} then {second}"
    );
    // An unrelated edit keeps the request id; a server-side dry run stores nothing.
    c.kubectl_ok(&["label", "site", "docs-handbook", "-n", NS, "team=docs"]);
    assert_eq!(annotation(&c, "docs-handbook"), second);
    c.kubectl_ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--overwrite",
        "--dry-run=server",
        &format!("{UPGRADE_REQUEST_ANNOTATION}=force"),
    ]);
    assert_eq!(annotation(&c, "docs-handbook"), second);

    // Quota never shrinks.
    let out = c.kubectl(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"quota":"1Gi"}}}"#,
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec.configuration.quota: must not decrease (was 2Gi, now 1Gi)"),
        "{}",
        stderr(&out)
    );

    // The platform configuration ConfigMap is validated; other ConfigMaps are not.
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sites-config\n  namespace: sites\ndata:\n  config.yaml: |\n    routing:\n      mode: mesh\n";
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(bad));
    assert!(
        !out.status.success(),
        "an invalid sites-config was accepted"
    );
    assert!(stderr(&out).contains("routing.mode:"), "{}", stderr(&out));
    let other = bad.replace("name: sites-config", "name: unrelated");
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &other);
    let good = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sites-config\n  namespace: sites\ndata:\n  config.yaml: |\n{}",
        std::fs::read_to_string(repo_file("manifests/base/config.yaml"))
            .unwrap()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    c.kubectl_ok_stdin(&["apply", "-f", "-"], &good);

    // The status subresource never reaches the webhook: an invalid-looking status write is fine.
    let sites: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let status = serde_json::json!({"status": {"phase": "Running"}});
    sites
        .patch_status(
            "docs-handbook",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .expect("status writes bypass the webhooks");

    let (_, metrics) = op.get("/metrics").await.unwrap();
    assert!(
        metrics.contains(
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/validate-sites"}"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/mutate-sites"}"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/validate-config"}"#
        ),
        "{metrics}"
    );

    // SIGTERM: drains and exits 0.
    let (code, log) = op.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("stopped"), "{log}");

    // A second start reuses the stored certificate (replicas share it). It may listen on another
    // port: the Service is mapped again to the address it reports.
    let op = serve_webhooks(&c, NS, &[], WAIT).await;
    let again = secrets.get("sites-operator-webhook-tls").await.unwrap();
    assert_eq!(again.data.unwrap()["ca.crt"], ca, "the CA did not change");
    let out = c.kubectl(&[
        "apply",
        "-n",
        NS,
        "-f",
        repo_file("manifests/examples/invalid/port.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert!(!out.status.success());
    let (code, log) = op.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn refuses_to_start_on_bad_input_with_one_line_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("run-bad-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(repo_file("manifests/base/config.yaml")).unwrap();
    std::fs::write(
        dir.join("bad.yaml"),
        example.replace("  mode: ingress ", "  mode: mesh "),
    )
    .unwrap();
    std::fs::write(dir.join("garbage.pem"), "not a certificate").unwrap();
    let config = repo_file("manifests/base/config.yaml");
    let args = |config: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| {
        [
            ("--config", config),
            ("--tls-cert", cert),
            ("--tls-key", key),
        ]
        .iter()
        .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
        .collect::<Vec<_>>()
    };
    let (missing, garbage) = (dir.join("missing.pem"), dir.join("garbage.pem"));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            args(&dir.join("bad.yaml"), &missing, &missing),
            "bad.yaml: routing.mode:",
        ),
        (args(&config, &missing, &missing), "TLS: cannot read"),
        (args(&config, &garbage, &garbage), "TLS:"),
        (
            vec!["--config".into(), config.display().to_string()],
            "--tls-cert",
        ),
    ];
    let valid = certs::generate(&["localhost".to_string()], 1).unwrap();
    valid.write(&dir).unwrap();
    // A cluster that does not answer (the kubeconfig points at a closed port).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://{closed}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
    );
    std::fs::write(dir.join("kubeconfig"), kubeconfig).unwrap();
    let unreachable = (
        args(&config, &dir.join("tls.crt"), &dir.join("tls.key")),
        "cannot reach the Kubernetes API server".to_string(),
    );
    // A `--cert-dir` others may write to (another user may have created the default, under
    // /tmp): refused before the cluster is contacted.
    let open = dir.join("open-certs");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let open_cert_dir = (
        [
            "--config",
            &config.display().to_string(),
            "--self-signed",
            "--cert-dir",
        ]
        .into_iter()
        .map(String::from)
        .chain([open.display().to_string()])
        .collect(),
        format!(
            "error: --cert-dir {}: the directory may be written by its group or others",
            open.display()
        ),
    );
    let cases = cases
        .into_iter()
        .map(|(args, want)| (args, want.to_string()));
    for (args, want) in cases.chain([open_cert_dir, unreachable]) {
        let out = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
            .arg("run")
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .args(&args)
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let last = err
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect::<Vec<_>>();
        assert_eq!(last.len(), 1, "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: expected {want:?} in {err}");
    }
    // An invalid configuration: one line per problem.
    std::fs::write(
        dir.join("two.yaml"),
        example
            .replace("  mode: ingress ", "  mode: mesh ")
            .replace("sitesConfig:\n", "sitesConfig:\n  colour: blue\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["run", "--tls-cert", "x", "--tls-key", "x", "--config"])
        .arg(dir.join("two.yaml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<_> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("two.yaml: routing.mode:"), "{err}");
    assert!(
        lines[1].contains("two.yaml: sitesConfig.colour: unknown key"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SPEC 4.6 and 5 through kubectl and the operator's webhooks: one path per Site, reserved
/// names, ratcheting of a Site stored before a rule, observedGeneration after an audit edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_path_per_site_reserved_names_and_ratcheting_through_kubectl() {
    let (c, op) = operator_behind_webhooks().await;
    let example = std::fs::read_to_string(repo_file("manifests/examples/site.yaml")).unwrap();
    let named = |name: &str| example.replace("name: docs-handbook", &format!("name: {name}"));
    c.kubectl_ok_stdin(&["apply", "-n", NS, "-f", "-"], &example);
    // Once the operator has processed it, its Site cache holds it.
    c.kubectl_ok(&[
        "wait",
        "-n",
        NS,
        "--for=jsonpath={.status.observedGeneration}=1",
        "--timeout=30s",
        "site/docs-handbook",
    ]);

    // The image of the built-in application was recorded on CREATE (no silent rollouts).
    let image = c.kubectl_ok(&[
        "get",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.configuration.applications[0].image}",
    ]);
    assert_eq!(image, "registry.example.org/sites/static:2.4.0");

    // A second Site with the same /docs/handbook/ is denied, naming the first.
    let out = c.kubectl_stdin(
        &["apply", "-n", NS, "-f", "-"],
        Some(&named("handbook-copy")),
    );
    assert!(!out.status.success(), "a twin path was accepted");
    assert!(
        stderr(&out).contains(
            "spec.configuration.space: the path /docs/handbook/ is already used by Site docs-handbook"
        ),
        "{}",
        stderr(&out)
    );
    // Platform object names are reserved.
    for name in ["sites-session", "sites-config", "sites-operator-webhook"] {
        let out = c.kubectl_stdin(&["apply", "-n", NS, "-f", "-"], Some(&named(name)));
        assert!(!out.status.success(), "{name} was accepted");
        assert!(
            stderr(&out).contains(&format!("metadata.name: \"{name}\" is reserved")),
            "{}",
            stderr(&out)
        );
    }

    // An audit-only edit: observedGeneration follows (kubectl wait and kstatus see it settle).
    c.kubectl_ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"description":"the handbook"}}"#,
    ]);
    c.kubectl_ok(&[
        "wait",
        "-n",
        NS,
        "--for=jsonpath={.status.observedGeneration}=2",
        "--timeout=30s",
        "site/docs-handbook",
    ]);

    // A Site stored before a rule (here: while the validating webhook was not registered).
    let saved = c.kubectl_ok(&[
        "get",
        "validatingwebhookconfiguration",
        "sites-operator",
        "-o",
        "json",
    ]);
    c.kubectl_ok(&["delete", "validatingwebhookconfiguration", "sites-operator"]);
    let legacy = named("legacy")
        .replace("name: handbook", "name: legacy")
        .replace("X-Frame-Options: SAMEORIGIN", "X-Var: \"$host\"");
    c.kubectl_ok_stdin(&["apply", "-n", NS, "-f", "-"], &legacy);
    let mut restored: serde_json::Value = serde_json::from_str(&saved).unwrap();
    for field in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        restored["metadata"].as_object_mut().unwrap().remove(field);
    }
    c.kubectl_ok_stdin(&["create", "-f", "-"], &restored.to_string());
    // Updates that leave the header alone go through: annotate, archive.
    c.kubectl_ok(&["annotate", "site", "legacy", "-n", NS, "team=docs"]);
    c.kubectl_ok(&[
        "patch",
        "site",
        "legacy",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"enabled":false}}}"#,
    ]);
    // Changing it gets every rule.
    let out = c.kubectl(&[
        "patch",
        "site",
        "legacy",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"headers":{"X-Var":"$uri"}}}}"#,
    ]);
    assert!(!out.status.success(), "a changed bad header was accepted");
    assert!(
        stderr(&out).contains(r#"spec.configuration.headers["X-Var"]"#),
        "{}",
        stderr(&out)
    );
    let (code, log) = op.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// SPEC 4.6 through kubectl and the real binary: edits of `sites-config` are checked by the
/// validating webhook; a valid one is in force at once in both webhooks (no restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_config_edits_are_checked_and_in_force_without_a_restart() {
    let (c, op) = operator_behind_webhooks().await;
    let config = std::fs::read_to_string(repo_file("manifests/base/config.yaml")).unwrap();
    let wiki_site = std::fs::read_to_string(repo_file("manifests/examples/site.yaml"))
        .unwrap()
        .replace("name: docs-handbook", "name: docs-wiki")
        .replace("name: handbook", "name: wiki")
        .replace("      - name: static", "      - name: wiki");
    // `wiki` is not in the catalogue: a custom application needs an image.
    let out = c.kubectl_stdin(&["apply", "-n", NS, "-f", "-"], Some(&wiki_site));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec.configuration.applications[0].image"),
        "{}",
        stderr(&out)
    );

    // An invalid configuration is refused by the webhook, naming the key.
    let configmap = |text: &str| {
        let indented: String = text.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sites-config\ndata:\n  config.yaml: |\n{indented}"
        )
    };
    let invalid = config.replace("  mode: ingress ", "  mode: mesh ");
    let out = c.kubectl_stdin(&["apply", "-n", NS, "-f", "-"], Some(&configmap(&invalid)));
    assert!(!out.status.success(), "an invalid configuration is refused");
    assert!(stderr(&out).contains("routing.mode"), "{}", stderr(&out));

    // A valid one (a catalogue application more, a new platform version) is in force without a
    // restart: the Site is accepted, and its image recorded at the new version.
    let valid = config.replace("version: \"2.4.0\"", "version: \"2.5.0\"").replace(
        "  applications:                 # catalogue of built-in applications\n",
        "  applications:                 # catalogue of built-in applications\n    - name: wiki\n      image: registry.example.org/sites/wiki\n      port: 8090\n",
    );
    assert_ne!(valid, config);
    c.kubectl_ok_stdin(&["apply", "-n", NS, "-f", "-"], &configmap(&valid));
    crate::support::eventually("the wiki Site accepted", WAIT, || async {
        c.kubectl_stdin(&["apply", "-n", NS, "-f", "-"], Some(&wiki_site))
            .status
            .success()
            .then_some(())
    })
    .await;
    let image = c.kubectl_ok(&[
        "get",
        "site",
        "docs-wiki",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.configuration.applications[0].image}",
    ]);
    assert_eq!(image, "registry.example.org/sites/wiki:2.5.0");
    let (_, metrics) = op.get("/metrics").await.unwrap();
    assert!(metrics.contains("\nsites_config_valid 1\n"), "{metrics}");
    let (code, log) = op.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Without `--config` the configuration is the ConfigMap: missing or invalid, the operator does
/// not start (exit 2, one line per problem).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_to_start_without_a_valid_config_map() {
    let c = Cluster::start(false).await;
    c.kubectl_ok(&["create", "namespace", NS]);
    let dir = c.dir.join("run-config-map");
    certs::generate(&["localhost".to_string()], 1)
        .unwrap()
        .write(&dir)
        .unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_sites-operator"))
            .args(["run", "--namespace", NS, "--leader-elect=false"])
            .arg("--tls-cert")
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .env("KUBECONFIG", c.kubeconfig())
            .output()
            .unwrap()
    };
    let errors = |out: &std::process::Output| -> Vec<String> {
        stderr(out)
            .lines()
            .filter(|l| l.starts_with("error:"))
            .map(String::from)
            .collect()
    };
    let out = run();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        errors(&out),
        [
            "error: invalid configuration in ConfigMap sites/sites-config: metadata.name: not found in namespace sites: create it (manifests/base/config.yaml shows every key) or run with --config FILE"
        ]
    );
    c.kubectl_ok_stdin(
        &["apply", "-n", NS, "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sites-config\ndata:\n  config.yaml: |\n    routing:\n      mode: mesh\n    sitesConfig:\n      versoin: x\n",
    );
    let out = run();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let errors = errors(&out);
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "error: invalid configuration in ConfigMap sites/sites-config: routing.mode:"
        ),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("sitesConfig.version: required"),
        "{errors:?}"
    );
    assert!(
        errors[2].contains("sitesConfig.versoin: unknown key (did you mean sitesConfig.version?)"),
        "{errors:?}"
    );
}

/// `--self-signed` on an upgrade that adds a DNS name (the metrics Service): the stored
/// certificate is replaced, and the CA bundle to trust keeps the replaced CA too, so a replica
/// still serving the old certificate stays trusted until it restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_missing_a_name_is_replaced_and_both_cas_stay_trusted() {
    use sites_operator::certs::service_dns_names;
    use sites_operator::selfsigned::ensure_certificate;
    let c = Cluster::start(false).await;
    c.kubectl_ok(&["create", "namespace", NS]);
    let webhook = service_dns_names("sites-operator-webhook", NS);
    let both = [
        webhook.clone(),
        service_dns_names("sites-operator-metrics", NS),
    ]
    .concat();
    let old = ensure_certificate(&c.client, NS, "tls", &webhook)
        .await
        .unwrap();
    assert_eq!(old.trust_pem, old.bundle.ca_pem, "a new Secret: one CA");
    // Usable as stored: the same certificate, one CA.
    let again = ensure_certificate(&c.client, NS, "tls", &webhook)
        .await
        .unwrap();
    assert_eq!(again.bundle, old.bundle);
    assert_eq!(again.trust_pem, old.bundle.ca_pem);
    // A name more: replaced, both CAs trusted.
    let new = ensure_certificate(&c.client, NS, "tls", &both)
        .await
        .unwrap();
    assert_ne!(new.bundle.ca_pem, old.bundle.ca_pem);
    assert!(
        new.trust_pem.starts_with(&new.bundle.ca_pem) && new.trust_pem.contains(&old.bundle.ca_pem),
        "{}",
        new.trust_pem
    );
    let stored = c.kubectl_ok(&[
        "get",
        "secret",
        "tls",
        "-n",
        NS,
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    use base64::Engine as _;
    let stored = base64::engine::general_purpose::STANDARD
        .decode(stored.trim())
        .unwrap();
    assert_eq!(String::from_utf8(stored).unwrap(), new.bundle.ca_pem);
    // The next replica to start finds it usable: the bundle shrinks to the new CA.
    let next = ensure_certificate(&c.client, NS, "tls", &both)
        .await
        .unwrap();
    assert_eq!(next.bundle, new.bundle);
    assert_eq!(next.trust_pem, new.bundle.ca_pem);
}
