//! `sites-operator upgrade` against the emulator (LIFE-06, LIFE-09): built-in images move to the
//! platform version, custom images stay, --force stamps a new request, archived sites stay
//! archived, --dry-run stores nothing; --record-images records what runs. `upgrade` and
//! `retention` run against a real kube-apiserver 1.20 too (`real_apiserver_…`).

use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use sites_operator::crd::{Site, UPGRADE_REQUEST_ANNOTATION};

use crate::support::{Cluster, repo_file};

const NS: &str = "sites";

fn run(c: &Cluster, args: &[&str]) -> Output {
    command(c, "upgrade", args)
}

/// A one-shot subcommand against the emulator, with the namespace and the example configuration.
fn command(c: &Cluster, subcommand: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .arg(subcommand)
        .args(args)
        .args(["--namespace", NS, "--config"])
        .arg(repo_file("manifests/base/config.yaml"))
        .env("KUBECONFIG", c.kubeconfig())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The summary lines (`COMMAND: N/M Sites done, ...`) the command printed on stderr, which is
/// not a terminal here: no live progress, one summary line.
fn stdout_lines(o: &Output) -> usize {
    String::from_utf8_lossy(&o.stdout).lines().count()
}

fn summaries(o: &Output, command: &str) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with(&format!("{command}: ")) && l.contains("Sites done"))
        .map(str::to_string)
        .collect()
}

fn site(name: &str, enabled: bool, apps: serde_json::Value) -> Site {
    serde_json::from_value(json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"name": name, "owner": "jdoe", "type": "static", "configuration": {
            "space": "docs", "enabled": enabled, "applications": apps
        }}
    }))
    .unwrap()
}

async fn cluster_with_namespace() -> Cluster {
    with_namespace(Cluster::start(false).await).await
}

/// A real control plane ([`Cluster::real`]) with the Site CRD as `sites-operator crd` prints
/// it, and the namespace.
async fn real_cluster_with_namespace() -> Cluster {
    let c = Cluster::real().await;
    crate::support::real::install_printed_crds(&c, false);
    with_namespace(c).await
}

async fn with_namespace(c: Cluster) -> Cluster {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(c.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    c
}

/// `sites-operator upgrade --record-images` with the configuration from the cluster's
/// `sites-config` ConfigMap (no `--config`): each built-in application without an image gets
/// the one its StatefulSet runs; recorded and custom images stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_images_writes_what_runs_from_the_configmap_configuration() {
    let c = cluster_with_namespace().await;
    c.kubectl_ok(&[
        "create",
        "configmap",
        "sites-config",
        "-n",
        NS,
        &format!(
            "--from-file=config.yaml={}",
            repo_file("manifests/base/config.yaml").display()
        ),
    ]);
    let api: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let running = "registry.example.org/sites/static:2.3.0";
    let legacy = api
        .create(
            &PostParams::default(),
            &site("legacy", true, json!([{"name": "static"}])),
        )
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &site("fresh", true, json!([{"name": "static"}])),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &site(
            "recorded",
            true,
            json!([{"name": "static", "image": running}, {"name": "app", "image": "ghcr.io/x/app:7"}]),
        ),
    )
    .await
    .unwrap();
    // What the operator rendered for `legacy` when 2.3.0 was the platform version.
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "legacy", "namespace": NS, "ownerReferences": [{
            "apiVersion": "sites.ecmwf.int/v1", "kind": "Site", "name": "legacy",
            "uid": legacy.metadata.uid, "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "legacy"}}, "serviceName": "legacy",
                 "template": {"metadata": {"labels": {"app": "legacy"}},
                              "spec": {"containers": [{"name": "static", "image": running}]}}}
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(c.client.clone(), NS)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["upgrade", "--all", "--record-images", "--namespace", NS])
        .env("KUBECONFIG", c.kubeconfig())
        .env_remove("SITES_OPERATOR_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("legacy: static: (catalogue default) -> {running}")),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("recorded: up to date"),
        "{}",
        text(&out)
    );
    assert_eq!(
        images(&api.get("legacy").await.unwrap()),
        [Some(running.to_string())]
    );
    // No StatefulSet yet: the catalogue image at the configuration's version.
    assert_eq!(
        images(&api.get("fresh").await.unwrap()),
        [Some("registry.example.org/sites/static:2.4.0".to_string())]
    );
    assert_eq!(
        images(&api.get("recorded").await.unwrap()),
        [
            Some(running.to_string()),
            Some("ghcr.io/x/app:7".to_string())
        ]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["upgrade", "legacy", "--record-images", "--force"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--record-images excludes --force"
    );
}

fn images(s: &Site) -> Vec<Option<String>> {
    s.spec
        .configuration
        .applications
        .iter()
        .map(|a| a.image.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_rewrites_builtin_images_and_force_requests_a_restart() {
    upgrades(cluster_with_namespace().await).await;
}

/// The same against a real kube-apiserver 1.20 and the CRD as printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_upgrade_rewrites_builtin_images_and_force_requests_a_restart() {
    upgrades(real_cluster_with_namespace().await).await;
}

async fn upgrades(c: Cluster) {
    let api: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let old = "registry.example.org/sites/static:2.3.0";
    let new = "registry.example.org/sites/static:2.4.0";
    for s in [
        site("pinned", true, json!([{"name": "static", "image": old}])),
        site(
            "custom",
            true,
            json!([{"name": "static", "image": old}, {"name": "app", "image": "ghcr.io/x/app:7"}]),
        ),
        site("archived", false, json!([{"name": "static", "image": old}])),
        site("current", true, json!([{"name": "static", "image": new}])),
    ] {
        api.create(&PostParams::default(), &s).await.unwrap();
    }

    // Dry run: reports, stores nothing.
    let out = run(&c, &["--all", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("pinned: static: {old} -> {new} (dry run)")),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("current: up to date"), "{}", text(&out));
    assert_eq!(
        summaries(&out, "upgrade"),
        ["upgrade: 4/4 Sites done, 3 to change, 0 failed"],
        "{}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains('\r'),
        "no live progress off a terminal"
    );
    assert_eq!(
        images(&api.get("pinned").await.unwrap()),
        [Some(old.to_string())]
    );

    // One site.
    let out = run(&c, &["pinned"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        summaries(&out, "upgrade").is_empty(),
        "one Site: no summary"
    );
    assert_eq!(
        images(&api.get("pinned").await.unwrap()),
        [Some(new.to_string())]
    );
    assert_eq!(
        images(&api.get("custom").await.unwrap())[0],
        Some(old.to_string()),
        "only the named site"
    );
    let out = run(&c, &["pinned"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "pinned: up to date"
    );

    // All, forced: built-in images current, custom kept, archived stays archived, new requests.
    let out = run(&c, &["--all", "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        summaries(&out, "upgrade"),
        ["upgrade: 4/4 Sites done, 4 changed, 0 failed"],
        "{}",
        text(&out)
    );
    let custom = api.get("custom").await.unwrap();
    assert_eq!(
        images(&custom),
        [Some(new.to_string()), Some("ghcr.io/x/app:7".to_string())]
    );
    let archived = api.get("archived").await.unwrap();
    assert!(!archived.spec.configuration.enabled);
    assert_eq!(images(&archived), [Some(new.to_string())]);
    let mut requests = Vec::new();
    for name in ["pinned", "custom", "archived", "current"] {
        let s = api.get(name).await.unwrap();
        let r = s.metadata.annotations.unwrap()[UPGRADE_REQUEST_ANNOTATION].clone();
        assert!(uuid::Uuid::parse_str(&r).is_ok(), "{name}: {r}");
        requests.push(r);
    }
    requests.sort();
    requests.dedup();
    assert_eq!(requests.len(), 4, "a new request per site");

    // Bad input.
    let out = run(&c, &["missing"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("no such Site"), "{}", text(&out));
    let out = run(&c, &[]);
    assert_eq!(out.status.code(), Some(2), "neither a site nor --all");
}

fn retention(c: &Cluster, args: &[&str]) -> Output {
    command(c, "retention", args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_archives_then_deletes_and_touches_nothing_else() {
    retains(cluster_with_namespace().await).await;
}

/// The same against a real kube-apiserver 1.20 and the CRD as printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_retention_archives_then_deletes_and_touches_nothing_else() {
    retains(real_cluster_with_namespace().await).await;
}

async fn retains(c: Cluster) {
    let api: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let with = |name: &str, enabled: bool, date: Option<&str>, archived_at: Option<&str>| {
        let mut s = site(name, enabled, json!([{"name": "static"}]));
        s.spec.configuration.retention_date = date.map(str::to_string);
        if let Some(a) = archived_at {
            s.metadata.annotations =
                Some([("sites.ecmwf.int/archived-at".to_string(), a.to_string())].into());
        }
        s
    };
    for s in [
        with("expired", true, Some("2027-06-30"), None),
        with(
            "long-archived",
            false,
            Some("2027-01-01"),
            Some("2027-01-02"),
        ),
        with("no-date", true, None, None),
        with("future", true, Some("2030-01-01"), None),
        with("hand-archived", false, Some("2027-06-30"), None),
    ] {
        api.create(&PostParams::default(), &s).await.unwrap();
    }
    let versions = |names: &[&str]| {
        let api = api.clone();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        async move {
            let mut v = Vec::new();
            for n in names {
                v.push(api.get(&n).await.unwrap().metadata.resource_version);
            }
            v
        }
    };
    let untouched = ["no-date", "future", "hand-archived"];
    let before = versions(&untouched).await;

    let out = retention(&c, &["--today", "2027-07-01", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        printed.contains("expired: archived (dry run)")
            && printed.contains("long-archived: deleted (dry run)"),
        "{printed}"
    );
    assert_eq!(
        summaries(&out, "retention"),
        ["retention: 5/5 Sites done, 2 to act on, 0 failed"],
        "{}",
        text(&out)
    );
    assert!(
        api.get("expired").await.unwrap().spec.configuration.enabled,
        "dry run wrote"
    );
    assert!(api.get_opt("long-archived").await.unwrap().is_some());

    let out = retention(&c, &["--today", "2027-07-01"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        summaries(&out, "retention"),
        ["retention: 5/5 Sites done, 2 acted on, 0 failed"],
        "{}",
        text(&out)
    );
    // Off a terminal that summary is all of standard error: the Sites acted on are the lines
    // of standard output, not log lines besides.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out)
    );
    assert_eq!(stdout_lines(&out), 2, "{}", text(&out));
    let expired = api.get("expired").await.unwrap();
    assert!(!expired.spec.configuration.enabled);
    assert_eq!(
        expired.metadata.annotations.unwrap()["sites.ecmwf.int/archived-at"],
        "2027-07-01"
    );
    assert!(api.get_opt("long-archived").await.unwrap().is_none());
    assert_eq!(versions(&untouched).await, before, "nothing else touched");

    // The same day again: nothing to do.
    let out = retention(&c, &["--today", "2027-07-01"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");

    // 91 days after archiving: the archived sites go; the others stay.
    let out = retention(&c, &["--today", "2027-09-30"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(api.get_opt("expired").await.unwrap().is_none());
    assert!(api.get_opt("hand-archived").await.unwrap().is_none());
    assert_eq!(versions(&["no-date", "future"]).await, before[..2].to_vec());

    let out = retention(&c, &["--today", "30/09/2027"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The operator applies the policy to its cached Sites: a Site changed since it was cached (its
/// retention date moved, it was archived meanwhile) is not archived or deleted from the old copy;
/// the next run decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_leaves_a_site_changed_since_it_was_read() {
    let c = cluster_with_namespace().await;
    let api: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let retention = sites_operator::config::Retention {
        archive_after_days: 0,
        delete_after_days: 90,
    };
    let mut expired = site("expired", true, json!([{"name": "static"}]));
    expired.spec.configuration.retention_date = Some("2027-06-30".into());
    let mut gone = site("gone", false, json!([{"name": "static"}]));
    gone.spec.configuration.retention_date = Some("2027-01-01".into());
    let cached = [
        api.create(&PostParams::default(), &expired).await.unwrap(),
        api.create(&PostParams::default(), &gone).await.unwrap(),
    ];
    // Both change after the copies were taken: the date moved, the archived Site re-enabled.
    for name in ["expired", "gone"] {
        let patch =
            json!({"spec": {"configuration": {"retention_date": "2030-01-01", "enabled": true}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let today: k8s_openapi::jiff::civil::Date = "2027-09-30".parse().unwrap();
    for (name, action) in cached.iter().map(|s| {
        (
            s.metadata.name.clone().unwrap(),
            sites_operator::retention::decide(s, today, &retention),
        )
    }) {
        assert_ne!(action, sites_operator::retention::Action::Keep, "{name}");
    }
    let acted =
        sites_operator::retention::apply_to(&api, &cached, &retention, today, false, |_| {})
            .await
            .unwrap();
    assert!(acted.is_empty(), "{acted:?}");
    assert!(api.get("expired").await.unwrap().spec.configuration.enabled);
    assert!(api.get_opt("gone").await.unwrap().is_some());
    // Read again, nothing is left to do: the new dates are in the future.
    let fresh = [
        api.get("expired").await.unwrap(),
        api.get("gone").await.unwrap(),
    ];
    let acted = sites_operator::retention::apply_to(&api, &fresh, &retention, today, false, |_| {})
        .await
        .unwrap();
    assert!(acted.is_empty());
}

/// A Site changed between the command's read and its write (the operator writes its status all
/// the time) gets a 409: it is read again and upgraded from what it is then, at most
/// `CONFLICT_RETRIES` times; a Site that keeps changing is reported as failed, untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_changed_meanwhile_is_read_again_and_upgraded() {
    use sites_emulator::faults::FaultRule;
    use sites_operator::upgrade::CONFLICT_RETRIES;

    let c = cluster_with_namespace().await;
    let api: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let old = "registry.example.org/sites/static:2.3.0";
    let new = "registry.example.org/sites/static:2.4.0";
    api.create(
        &PostParams::default(),
        &site("pinned", true, json!([{"name": "static", "image": old}])),
    )
    .await
    .unwrap();
    let faults = c.emulator().faults();
    let conflicts = |rate: f64| FaultRule {
        verb: Some("patch".into()),
        resource: Some("sites.sites.ecmwf.int".into()),
        rate,
        codes: vec![409],
        latency_ms: 0,
    };

    // Every write conflicts: reported, exit 1, nothing stored.
    faults.add(conflicts(1.0));
    let out = run(&c, &["pinned"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("modified"), "{}", text(&out));
    assert_eq!(faults.injected(409), CONFLICT_RETRIES as u64 + 1);
    assert_eq!(
        images(&api.get("pinned").await.unwrap()),
        [Some(old.into())]
    );

    // Half of them do: with this seed the first two writes conflict and the third is stored.
    faults.clear();
    faults.seed(4);
    faults.add(conflicts(0.5));
    let out = run(&c, &["pinned"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(faults.injected(409), CONFLICT_RETRIES as u64 + 3);
    assert_eq!(
        images(&api.get("pinned").await.unwrap()),
        [Some(new.into())]
    );
}
