//! SPEC 4.6 and 4.7 the way GitOps tools drive Sites: the real `sites-operator run` binary
//! behind the emulator's admission chain, and the real kubectl doing what Flux, Argo CD and the
//! Hub do, again and again:
//!
//! - **Flux** (kustomize-controller): server-side apply with field manager
//!   `kustomize-controller`; drift detection by a server-side dry-run apply (`kubectl diff
//!   --server-side`); then the apply again, with `--force-conflicts`.
//! - **Argo CD**: client-side apply (the last-applied annotation), its diff (`kubectl diff`) and
//!   its health check (the shipped Lua script, run in a real Lua interpreter).
//! - **The Hub**: JSON merge patches that omit what the user did not set (images).
//!
//! After the first convergence, ten cycles change nothing: no drift, no stored field, no operator
//! write, no pod restart; a new platform version during the cycles rolls nothing; an image
//! written in a manifest rolls exactly that Site, once; an application removed from a manifest
//! is removed; a Site created while the mutating webhook was not registered keeps its image.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sites_operator::crd::Site;

use crate::support::argocd;
use crate::support::operator::container_image;
use crate::support::{Cluster, OperatorProcess, eventually, repo_file, serve_webhooks};

const NS: &str = "sites";
const WAIT: Duration = Duration::from_secs(60);
const FLUX: [&str; 2] = ["--server-side", "--field-manager=kustomize-controller"];
const OLD: &str = "registry.example.org/sites/static:2.4.0";
const NEW: &str = "registry.example.org/sites/static:2.5.0";

/// A Site manifest as kept in git: no images unless `image` is given.
fn manifest(id: &str, applications: Value) -> String {
    let site = json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": id, "namespace": NS},
        "spec": {
            "name": id, "owner": "jdoe", "type": "static", "description": "kept in git",
            "configuration": {
                "space": "gitops", "enabled": true, "applications": applications,
                "headers": {"X-Frame-Options": "SAMEORIGIN"}, "quota": "1Gi",
                "share": {"administrator_users": ["jdoe"], "groups": ["docs-team"]},
                "settings": {"replicas": 1, "resource_limits": {"cpu": "500m", "memory": "256Mi"}}
            }
        }
    });
    serde_json::to_string_pretty(&site).unwrap()
}

struct GitOps {
    c: Cluster,
    op: OperatorProcess,
}

impl GitOps {
    /// An installation as manifests/ makes it: namespace, storage class, session key, the
    /// committed webhook configurations, the operator serving them and reconciling.
    async fn start() -> GitOps {
        let c = Cluster::start(true).await;
        let namespaces: Api<Namespace> = Api::all(c.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let storage_class = repo_file("manifests/dev/storageclass-sites-retain.yaml");
        c.kubectl_ok(&["apply", "-f", storage_class.to_str().unwrap()]);
        c.kubectl_ok(&[
            "create",
            "secret",
            "generic",
            "sites-session",
            "-n",
            NS,
            "--from-literal=secret_key=gitops-session-key",
        ]);
        let webhooks = repo_file("manifests/base/webhooks.yaml");
        c.kubectl_ok(&["apply", "-f", webhooks.to_str().unwrap()]);
        let op = serve_webhooks(&c, NS, &[], WAIT).await;
        GitOps { c, op }
    }

    fn apply(&self, extra: &[&str], manifest: &str) -> String {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.c.kubectl_ok_stdin(&args, manifest)
    }

    /// `kubectl diff` of `manifest`: None when there is no difference, else the difference.
    fn diff(&self, extra: &[&str], manifest: &str) -> Option<String> {
        let mut args = vec!["diff", "-f", "-"];
        args.extend_from_slice(extra);
        let out = self.c.kubectl_stdin(&args, Some(manifest));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        match out.status.code() {
            Some(0) => None,
            Some(1) => Some(text),
            _ => panic!(
                "kubectl diff {extra:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    fn wait_ready(&self, id: &str) {
        let timeout = format!("--timeout={}s", WAIT.as_secs());
        let site = format!("site/{id}");
        self.c
            .kubectl_ok(&["wait", "--for=condition=Ready", &site, "-n", NS, &timeout]);
    }

    async fn site(&self, id: &str) -> Site {
        Api::<Site>::namespaced(self.c.client.clone(), NS)
            .get(id)
            .await
            .unwrap()
    }

    /// The Site as Argo CD reads it, and its health by the shipped script.
    async fn health(&self, id: &str) -> (String, String) {
        let site = self.site(id).await;
        argocd::health(&serde_json::to_value(&site).unwrap())
    }

    /// The StatefulSets' generations: each moves with a change of the pod template or replicas.
    async fn generations(&self, ids: &[&str]) -> Vec<Option<i64>> {
        let mut out = Vec::new();
        for id in ids {
            out.push(self.statefulset(id).await.metadata.generation);
        }
        out
    }

    async fn statefulset(&self, id: &str) -> StatefulSet {
        Api::<StatefulSet>::namespaced(self.c.client.clone(), NS)
            .get(id)
            .await
            .unwrap()
    }

    /// The operator's writes so far, by verb and resource (Lease renewals aside: they go on
    /// whatever happens to the Sites).
    async fn writes(&self) -> BTreeMap<String, f64> {
        let (_, metrics) = self.op.get("/metrics").await.expect("metrics");
        let mut writes = BTreeMap::new();
        for (verb, resource, value) in crate::support::api_requests(&metrics) {
            if !["create", "update", "patch", "delete"].contains(&verb.as_str())
                || resource.starts_with("leases")
            {
                continue;
            }
            *writes.entry(format!("{verb} {resource}")).or_default() += value;
        }
        writes
    }

    /// Waits until the operator has no Site queued or in progress (its own metrics).
    async fn idle(&self) {
        eventually("the operator idle", WAIT, || async {
            let (_, metrics) = self.op.get("/metrics").await?;
            let value = |prefix: &str| {
                metrics
                    .lines()
                    .find(|l| l.starts_with(prefix))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            };
            (value("workqueue_depth{name=\"site\"}")? == 0.0
                && value("workqueue_unfinished_work_seconds{name=\"site\"}")? == 0.0)
                .then_some(())
        })
        .await;
    }

    /// Every site pod: name, uid and container restarts.
    async fn pods(&self) -> Vec<(String, String, i32)> {
        let pods = Api::<Pod>::namespaced(self.c.client.clone(), NS)
            .list(&ListParams::default().labels("sites.ecmwf.int/id"))
            .await
            .unwrap();
        let mut out: Vec<_> = pods
            .items
            .iter()
            .map(|p| {
                let restarts = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
                (
                    p.metadata.name.clone().unwrap(),
                    p.metadata.uid.clone().unwrap(),
                    restarts,
                )
            })
            .collect();
        out.sort();
        out
    }

    async fn set_version(&self, version: &str) {
        let text = std::fs::read_to_string(repo_file("manifests/base/config.yaml"))
            .unwrap()
            .replace("version: \"2.4.0\"", &format!("version: \"{version}\""));
        Api::<ConfigMap>::namespaced(self.c.client.clone(), NS)
            .patch(
                "sites-config",
                &PatchParams::default(),
                &Patch::Merge(&json!({"data": {"config.yaml": text}})),
            )
            .await
            .unwrap();
    }
}

fn spec_images(site: &Site) -> Vec<(String, Option<String>)> {
    site.spec
        .configuration
        .applications
        .iter()
        .map(|a| (a.name.clone(), a.image.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_argo_cd_and_the_hub_reapply_sites_and_change_nothing() {
    let g = GitOps::start().await;
    let static_app = json!([{"name": "static"}]);
    let flux = manifest("flux", static_app.clone());
    let argo = manifest(
        "argo",
        json!([{"name": "static"}, {"name": "oauth2-proxy"}]),
    );
    let hub = manifest("hub", static_app.clone());
    let unhooked = manifest("unhooked", static_app.clone());

    // Created as each tool creates it.
    g.apply(&FLUX, &flux);
    g.apply(&[], &argo);
    // The Hub creates its Sites with a POST.
    g.c.kubectl_ok_stdin(&["create", "-f", "-"], &hub);
    // One Site created while the mutating webhook is not registered (it fails open): no image
    // is recorded in its spec.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(g.c.client.clone());
    let mut saved = mutating.get("sites-operator").await.unwrap();
    mutating
        .delete("sites-operator", &DeleteParams::default())
        .await
        .unwrap();
    g.apply(&FLUX, &unhooked);
    saved.metadata.resource_version = None;
    saved.metadata.uid = None;
    saved.metadata.creation_timestamp = None;
    saved.metadata.managed_fields = None;
    mutating
        .create(&PostParams::default(), &saved)
        .await
        .unwrap();
    assert_eq!(
        spec_images(&g.site("unhooked").await),
        [("static".to_string(), None)]
    );
    for id in ["flux", "argo", "hub"] {
        let site = g.site(id).await;
        assert!(
            spec_images(&site).iter().all(|(_, i)| i.is_some()),
            "{id}: the webhook records every built-in image on CREATE: {:?}",
            spec_images(&site)
        );
    }
    for id in ["flux", "argo", "hub", "unhooked"] {
        g.wait_ready(id);
        assert_eq!(
            container_image(&g.statefulset(id).await, "static"),
            OLD,
            "{id}"
        );
    }
    let (status, message) = g.health("argo").await;
    assert_eq!(status, "Healthy", "{message}");
    assert_eq!(
        g.site("unhooked")
            .await
            .status
            .unwrap()
            .images
            .get("static")
            .map(String::as_str),
        Some(OLD),
        "the reconciler pins what it rendered"
    );
    // The unhooked Site's own manifest, re-applied with the webhook back, is no change either.
    g.idle().await;

    // What a re-apply must leave as it is: everything stored but the managed fields (the Hub's
    // patch makes `kubectl-patch` an owner of the applications once, as in a cluster) and,
    // for the Sites only Flux or Argo CD write, the resourceVersion too (not written at all).
    let stored = |ids: &'static [&'static str]| {
        let g = &g;
        async move {
            let mut out = Vec::new();
            for id in ids {
                let mut site = serde_json::to_value(g.site(id).await).unwrap();
                let meta = site["metadata"].as_object_mut().unwrap();
                meta.remove("managedFields");
                if *id == "hub" {
                    meta.remove("resourceVersion");
                }
                out.push(site);
            }
            out
        }
    };
    const ALL: &[&str] = &["flux", "argo", "hub", "unhooked"];
    let sites_before = stored(ALL).await;
    let sts_before = g.generations(ALL).await;
    let pods_before = g.pods().await;
    assert_eq!(pods_before.len(), 4, "{pods_before:?}");
    // The volumes' site labels come some seconds after their claims bind (a delayed write of
    // its own): counted before the cycles, not as a write of theirs.
    eventually("every site volume labelled", WAIT, || async {
        let volumes = Api::<PersistentVolume>::all(g.c.client.clone())
            .list(&ListParams::default())
            .await
            .ok()?;
        let labelled = volumes
            .items
            .iter()
            .filter(|v| v.labels().contains_key("sites.ecmwf.int/id"))
            .count();
        let patched = g
            .writes()
            .await
            .get("patch persistentvolumes")
            .copied()
            .unwrap_or_default();
        (labelled >= ALL.len() && patched >= ALL.len() as f64).then_some(())
    })
    .await;
    g.idle().await;
    let writes_before = g.writes().await;

    let cycle = |round: usize| {
        let g = &g;
        let (flux, argo, unhooked) = (&flux, &argo, &unhooked);
        let (stored, sites_before) = (&stored, &sites_before);
        async move {
            // Flux: drift detection by a server-side dry-run apply, then the apply.
            for m in [flux, unhooked] {
                assert_eq!(g.diff(&FLUX, m), None, "round {round}: Flux sees drift");
                g.apply(&[FLUX[0], FLUX[1], "--force-conflicts"], m);
            }
            // Argo CD: its diff, the client-side apply, its health check.
            assert_eq!(g.diff(&[], argo), None, "round {round}: Argo CD sees drift");
            g.apply(&[], argo);
            let (status, message) = g.health("argo").await;
            assert_eq!(status, "Healthy", "round {round}: {message}");
            // The Hub: a merge patch without images.
            g.c.kubectl_ok(&[
                "patch",
                "site",
                "hub",
                "-n",
                NS,
                "--type=merge",
                "-p",
                r#"{"spec":{"configuration":{"applications":[{"name":"static"}]}}}"#,
            ]);
            assert_eq!(
                stored(ALL).await,
                *sites_before,
                "round {round}: a stored field changed"
            );
        }
    };
    for round in 1..=5 {
        cycle(round).await;
    }
    g.idle().await;
    assert_eq!(g.writes().await, writes_before, "the operator wrote");

    // A new platform version during the cycles: the environment ConfigMaps say so, no pod rolls.
    g.set_version("2.5.0").await;
    eventually("the new version in force", WAIT, || async {
        for id in ALL {
            let env = Api::<ConfigMap>::namespaced(g.c.client.clone(), NS)
                .get(id)
                .await
                .ok()?;
            (env.data?.get("PLATFORM_VERSION")? == "2.5.0").then_some(())?;
        }
        Some(())
    })
    .await;
    g.idle().await;
    let writes_after_version = g.writes().await;
    for round in 6..=10 {
        cycle(round).await;
    }
    g.idle().await;
    assert_eq!(g.writes().await, writes_after_version, "the operator wrote");
    assert_eq!(
        g.generations(ALL).await,
        sts_before,
        "a StatefulSet changed"
    );
    for id in ALL {
        assert_eq!(
            container_image(&g.statefulset(id).await, "static"),
            OLD,
            "{id}"
        );
    }
    assert_eq!(
        g.pods().await,
        pods_before,
        "a pod was replaced or restarted"
    );

    // An image written in the manifest wins, and rolls exactly that Site, once.
    let pinned = manifest("flux", json!([{"name": "static", "image": NEW}]));
    assert!(
        g.diff(&FLUX, &pinned).is_some(),
        "the new image is a difference"
    );
    g.apply(&FLUX, &pinned);
    let rolled = eventually("flux rolled to the new image", WAIT, || async {
        let sts = g.statefulset("flux").await;
        (container_image(&sts, "static") == NEW).then_some(sts)
    })
    .await;
    g.wait_ready("flux");
    g.idle().await;
    for _ in 0..3 {
        assert_eq!(
            g.diff(&FLUX, &pinned),
            None,
            "Flux sees drift after the upgrade"
        );
        g.apply(&[FLUX[0], FLUX[1], "--force-conflicts"], &pinned);
    }
    g.idle().await;
    let after = g.generations(ALL).await;
    assert_eq!(after[0], rolled.metadata.generation, "flux rolled once");
    assert_eq!(after[0], sts_before[0].map(|g| g + 1), "flux rolled once");
    assert_eq!(&after[1..], &sts_before[1..], "only flux rolled");

    // An application removed from the manifest is removed.
    let argo_static_only = manifest("argo", json!([{"name": "static"}]));
    g.apply(&[], &argo_static_only);
    let site = g.site("argo").await;
    let pins = eventually("the removed application's pin dropped", WAIT, || async {
        let images = g.site("argo").await.status?.images;
        (!images.contains_key("oauth2-proxy")).then_some(images)
    })
    .await;
    assert_eq!(pins.keys().collect::<Vec<_>>(), ["static"]);
    assert_eq!(
        spec_images(&site),
        [("static".to_string(), Some(OLD.to_string()))]
    );
    assert_eq!(g.diff(&[], &argo_static_only), None);
    eventually("the oauth2-proxy container removed", WAIT, || async {
        let sts = g.statefulset("argo").await;
        let containers = &sts.spec?.template.spec?.containers;
        containers
            .iter()
            .all(|c| c.name != "oauth2-proxy")
            .then_some(())
    })
    .await;
    g.wait_ready("argo");
    let (status, message) = g.health("argo").await;
    assert_eq!(status, "Healthy", "{message}");
}

/// SPEC 4.7: the shipped Argo CD health check, run in a real Lua interpreter over statuses the
/// operator wrote: Healthy, Progressing (pods not ready yet), Degraded (a crash loop, a terminal
/// error, a conflict someone has to resolve, pods that cannot be created), Suspended
/// (archived); and kubectl's own
/// `wait --for=condition=Ready` on the same Sites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_argo_cd_health_check_reads_what_the_operator_writes() {
    use crate::support::operator::{config, example_named, operator, prepare, sites};
    use k8s_openapi::api::core::v1::Secret;
    use sites_emulator::controllers::Behaviour;
    use sites_operator::config::RoutingMode;

    let c = Cluster::start(false).await;
    prepare(&c).await;
    let kubelet = c.emulator().kubelet();
    kubelet.set_image("ghcr.io/x/slow:1", Behaviour::NeverReady);
    kubelet.set_image("ghcr.io/x/crash:1", Behaviour::CrashLoop);
    let op = operator(&c, config(RoutingMode::Ingress)).await;
    let health = |id: &'static str, want: &'static str| {
        let c = &c;
        async move {
            eventually(&format!("{id} {want}"), WAIT, || async {
                let site = sites(c).get(id).await.ok()?;
                let observed = site.status.as_ref()?.observed_generation;
                (observed == site.metadata.generation).then_some(())?;
                let (status, message) = argocd::health(&serde_json::to_value(&site).unwrap());
                (status == want).then_some((site, message))
            })
            .await
        }
    };
    let create = |id: &'static str, edit: &dyn Fn(&mut Site)| {
        let mut site = example_named(id, id);
        site.spec.configuration.applications[0].image =
            Some("registry.example.org/sites/static:2.4.0".into());
        edit(&mut site);
        let c = &c;
        async move {
            sites(c)
                .create(&PostParams::default(), &site)
                .await
                .unwrap()
        }
    };
    let custom = |image: &'static str| {
        move |s: &mut Site| {
            s.spec.configuration.applications.push(
                serde_json::from_value(json!({"name": "app", "image": image, "port": 8000}))
                    .unwrap(),
            )
        }
    };

    create("healthy", &|_| {}).await;
    create("starting", &custom("ghcr.io/x/slow:1")).await;
    create("crashing", &custom("ghcr.io/x/crash:1")).await;
    create("archived", &|s| s.spec.configuration.enabled = false).await;
    // Stored past the webhook (there is none here): a custom application without an image.
    create("invalid", &|s| {
        s.spec
            .configuration
            .applications
            .push(serde_json::from_value(json!({"name": "app", "port": 8000})).unwrap())
    })
    .await;
    // A Secret of the Site's name that it does not control.
    let planted: Secret = serde_json::from_value(json!({
        "metadata": {"name": "conflicted", "namespace": NS}, "data": {}
    }))
    .unwrap();
    Api::<Secret>::namespaced(c.client.clone(), NS)
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
    create("conflicted", &|_| {}).await;
    // Pods the StatefulSet cannot create: monitored sites run with a class that is gone.
    c.kubectl_ok(&["delete", "priorityclass", "medium-priority"]);
    create("uncreatable", &|s| {
        s.spec.configuration.settings.monitored = true
    })
    .await;

    let (site, message) = health("healthy", "Healthy").await;
    assert!(message.starts_with("Available: "), "{message}");
    let ready = site.status.as_ref().unwrap();
    assert!(
        ready
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    let (_, message) = health("starting", "Progressing").await;
    assert!(message.contains("PodsNotReady"), "{message}");
    let (_, message) = health("crashing", "Degraded").await;
    assert!(message.contains("CrashLoopBackOff"), "{message}");
    let (_, message) = health("archived", "Suspended").await;
    assert!(message.starts_with("Disabled: "), "{message}");
    let (site, message) = health("invalid", "Degraded").await;
    assert!(message.starts_with("InvalidConfiguration: "), "{message}");
    let stalled = site
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled");
    assert_eq!(stalled.map(|c| c.status.as_str()), Some("True"));
    let (_, message) = health("conflicted", "Degraded").await;
    assert!(message.starts_with("ObjectConflict: "), "{message}");
    let (_, message) = health("uncreatable", "Degraded").await;
    assert!(
        message.starts_with("FailedCreate: ")
            && message.contains("no PriorityClass with name medium-priority was found"),
        "{message}"
    );

    // kubectl waits on the same conditions: Ready for the healthy and the archived Site,
    // Stalled for the invalid one; a Site that never gets ready times out.
    for (site, condition) in [
        ("healthy", "Ready"),
        ("archived", "Ready"),
        ("invalid", "Stalled"),
        ("starting", "Reconciling"),
    ] {
        c.kubectl_ok(&[
            "wait",
            &format!("--for=condition={condition}"),
            &format!("site/{site}"),
            "-n",
            NS,
            "--timeout=30s",
        ]);
    }
    let out = c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "site/starting",
        "-n",
        NS,
        "--timeout=1s",
    ]);
    assert!(
        !out.status.success(),
        "a Site whose pods never get ready is not Ready"
    );

    // A new generation not observed yet is Progressing, whatever the old conditions say.
    let mut unobserved = serde_json::to_value(sites(&c).get("healthy").await.unwrap()).unwrap();
    unobserved["metadata"]["generation"] = json!(99);
    let (status, message) = argocd::health(&unobserved);
    assert_eq!(status, "Progressing", "{message}");
    assert!(message.contains("generation 99"), "{message}");
    op.stop().await;
}
