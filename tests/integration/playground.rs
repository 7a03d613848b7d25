//! The README's first command, non-interactively: `scripts/playground.sh` brings up the emulator,
//! the operator and the example Sites; the kubectl commands it prints work as described; SIGTERM
//! (what Ctrl-C triggers) stops everything.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{eventually_every, repo_file};

/// The directory of the operator binary, with an up-to-date `sites-emulator` beside it (an older
/// build may lack the hook the script maps the webhook Service with). The build is the one
/// `cargo test --workspace` makes, so cargo does nothing when the tests run from the workspace; a
/// narrower selection (`-p sites-emulator`) would compile every dependency again with other features.
fn bin_dir() -> PathBuf {
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_sites-operator"));
    let dir = operator.parent().unwrap().to_path_buf();
    let mut cargo = Command::new(env!("CARGO"));
    // Without the variables cargo sets for a test process (the package's name, version and
    // directory, and what build.rs gives rustc): build scripts that watch them (ring's, ours)
    // would run again and what depends on them be rebuilt, relinking the test binary while
    // other tests start from it.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
                "SITES_OPERATOR_COMMIT",
            ]
            .contains(&name.as_ref())
        {
            cargo.env_remove(name.as_ref());
        }
    }
    let built = cargo
        .args(["test", "--no-run", "--locked", "--workspace"])
        .status()
        .unwrap();
    assert!(built.success(), "building sites-emulator");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_comes_up_and_its_commands_work() {
    let dir = std::env::temp_dir().join(format!("playground-{}", uuid::Uuid::new_v4()));
    let out_file = dir.with_extension("out");
    let mut script = Command::new(repo_file("scripts/playground.sh"))
        .env("PLAYGROUND_DIR", &dir)
        .env("PLAYGROUND_BIN", bin_dir())
        // No ports given: the operator picks free ones and the script reads its report.
        .env_remove("WEBHOOK_PORT")
        .env_remove("METRICS_PORT")
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let printed = eventually_every(
        "the playground to come up",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            let text = std::fs::read_to_string(&out_file).unwrap_or_default();
            let exited = text.contains("error:");
            assert!(!exited, "{text}");
            let ready = text.contains("Ctrl-C stops everything");
            async move { ready.then_some(text) }
        },
    )
    .await;
    let kubeconfig = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("export KUBECONFIG="))
        .expect("the kubeconfig is printed")
        .to_string();
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .current_dir(repo_file("."))
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let o = kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    // The printed commands, in order.
    let sites = ok(&["get", "sites", "-n", "sites"]);
    for name in ["docs-handbook", "research-dashboard", "legacy-wiki"] {
        assert!(sites.contains(name), "{sites}");
    }
    ok(&[
        "wait",
        "--for=condition=Available",
        "site/research-dashboard",
        "-n",
        "sites",
        "--timeout=60s",
    ]);
    ok(&["get", "statefulsets,services,ingresses,pods", "-n", "sites"]);
    let refused = kubectl(&[
        "apply",
        "-n",
        "sites",
        "-f",
        "manifests/examples/invalid/port.yaml",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("spec.configuration.applications[1].port: must be between 1 and 65535")
    );
    ok(&[
        "annotate",
        "site",
        "docs-handbook",
        "-n",
        "sites",
        "--overwrite",
        "sites.ecmwf.int/upgrade-request=force",
    ]);
    ok(&[
        "patch",
        "site",
        "docs-handbook",
        "-n",
        "sites",
        "--type=merge",
        "-p",
        r#"{"spec":{"configuration":{"enabled":false}}}"#,
    ]);
    ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Disabled",
        "site/docs-handbook",
        "-n",
        "sites",
        "--timeout=60s",
    ]);
    let described = ok(&["describe", "site", "docs-handbook", "-n", "sites"]);
    assert!(described.contains("Disabled"), "{described}");
    let metrics_line = printed
        .lines()
        .find(|l| l.contains("curl -s http://"))
        .unwrap();
    let url = metrics_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    let metrics = Command::new("curl").args(["-fs", url]).output().unwrap();
    assert!(String::from_utf8_lossy(&metrics.stdout).contains("workqueue_depth"));

    // Ctrl-C (SIGTERM here: a background job ignores SIGINT) stops everything.
    let _ = Command::new("kill")
        .args(["-TERM", &script.id().to_string()])
        .status();
    let status = script.wait().unwrap();
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.contains("stopped"), "{text}");
    assert!(status.success() || status.code() == Some(143), "{status:?}");
    let operator_log = std::fs::read_to_string(dir.join("operator.log")).unwrap();
    assert!(
        operator_log.contains("released the leader Lease"),
        "{operator_log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&out_file);
}
