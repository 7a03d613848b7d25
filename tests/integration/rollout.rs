//! SPEC 4.9 (ROL), platform-wide rollouts, against the emulator: a configuration change that
//! rolls pods goes through the Sites under the change budget, checked from the pods as a watcher
//! sees them (ROL-01); a change whose pods never get ready halts after the first wave, and a
//! revert resumes (ROL-02); a paused Site (ROL-03) is left alone through drift, spec edits and
//! configuration changes, and one reconcile catches it up when the annotation is removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sites_emulator::controllers::Behaviour;
use sites_operator::config::{Installation, PlatformConfig, RoutingMode};
use sites_operator::controller::rollout::{RolloutStatus, STATUS_CONFIGMAP, STATUS_KEY};

use crate::live_config::{
    create_config, edit, example_config, two_sites_following_the_configmap, write_config,
};
use crate::support::operator::{
    NS, Operator, WAIT, api, condition, config, counted_client, example_named, merge, prepare,
    sites, start_following, wait_available,
};
use crate::support::{Cluster, argocd, eventually};

/// How long a whole rollout of a few dozen Sites may take on the emulator.
const ROLLOUT: Duration = Duration::from_secs(120);

/// `sites-config` with its rollout settings replaced.
fn config_with_budget(max_rolling: &str, deadline: u32) -> String {
    edit(
        &example_config(),
        "    max_rolling: 25%                    # Sites rolling at once: a number (5) or a percentage of the Sites\n    progress_deadline_seconds: 600 ",
        &format!("    max_rolling: {max_rolling}\n    progress_deadline_seconds: {deadline} "),
    )
}

/// `count` Sites (`site-00`, ...) served by an operator that follows `sites-config` (`text`);
/// returns when every one is Available.
async fn sites_following(text: &str, count: usize) -> (Cluster, Operator, Vec<String>) {
    let c = Cluster::start(false).await;
    prepare(&c).await;
    create_config(&c, text).await;
    let (client, registry) = counted_client(&c).await;
    let (tx, rx) = tokio::sync::watch::channel(true);
    let cfg = config(RoutingMode::Ingress);
    let op = start_following(client, registry, cfg, Some("sites-config"), Some(tx), rx).await;
    let wanted = PlatformConfig::from_yaml(text, "config.yaml", &Installation::default())
        .expect("a valid configuration");
    eventually("the ConfigMap in force", WAIT, || async {
        (op.live.get().sites.rollout == wanted.sites.rollout).then_some(())
    })
    .await;
    let names: Vec<String> = (0..count).map(|i| format!("site-{i:02}")).collect();
    for name in &names {
        sites(&c)
            .create(&PostParams::default(), &example_named(name, name))
            .await
            .unwrap();
    }
    for name in &names {
        wait_available(&c, name).await;
    }
    op.settled().await;
    (c, op, names)
}

/// What a pod watcher sees: per Site, its pods (ready and not terminating), and the most Sites
/// without a ready pod at any one moment since [`PodWatch::reset`].
#[derive(Default)]
struct Seen {
    pods: BTreeMap<String, (String, bool)>,
    most_unavailable: usize,
    unavailable_ever: BTreeSet<String>,
}

impl Seen {
    fn see(&mut self, pod: &Pod, gone: bool, sites: &[String]) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let site = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("sites.ecmwf.int/id"))
            .cloned()
            .unwrap_or_default();
        let ready = pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if gone {
            self.pods.remove(&name);
        } else {
            self.pods.insert(name, (site, ready));
        }
        let serving: BTreeSet<&String> = self
            .pods
            .values()
            .filter(|(_, ready)| *ready)
            .map(|(site, _)| site)
            .collect();
        let unavailable: Vec<&String> = sites.iter().filter(|s| !serving.contains(s)).collect();
        self.most_unavailable = self.most_unavailable.max(unavailable.len());
        self.unavailable_ever
            .extend(unavailable.into_iter().cloned());
    }
}

struct PodWatch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    async fn start(c: &Cluster, sites: &[String]) -> PodWatch {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let (seen, synced, sites) = (seen.clone(), synced.clone(), sites.to_vec());
            let api: Api<Pod> = Api::namespaced(c.client.clone(), NS);
            async move {
                let stream = watcher(api, watcher::Config::default()).default_backoff();
                futures::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    let mut seen = seen.lock().unwrap();
                    match event {
                        Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                            seen.see(&p, false, &sites)
                        }
                        Ok(watcher::Event::Delete(p)) => seen.see(&p, true, &sites),
                        Ok(watcher::Event::InitDone) => {
                            synced.store(true, std::sync::atomic::Ordering::SeqCst)
                        }
                        _ => {}
                    }
                }
            }
        });
        eventually("the pod watch listed", WAIT, || async {
            synced
                .load(std::sync::atomic::Ordering::SeqCst)
                .then_some(())
        })
        .await;
        PodWatch { seen, task }
    }

    /// Starts counting from now: every Site has a ready pod.
    fn reset(&self) {
        let mut seen = self.seen.lock().unwrap();
        seen.most_unavailable = 0;
        seen.unavailable_ever.clear();
    }

    fn most_unavailable(&self) -> usize {
        self.seen.lock().unwrap().most_unavailable
    }

    fn unavailable_ever(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap().unavailable_ever.clone()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The memory request of the first container (the platform's: the example Sites set only
/// limits).
pub(crate) fn memory_request(sts: &StatefulSet) -> Option<String> {
    let spec = sts.spec.as_ref()?.template.spec.as_ref()?;
    let requests = spec.containers[0].resources.as_ref()?.requests.as_ref()?;
    Some(requests.get("memory")?.0.clone())
}

fn has_mirror(sts: &StatefulSet) -> bool {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .is_some_and(|p| p.containers.iter().any(|c| c.name == "site-mirror"))
}

/// The rollout status the leader published.
async fn published(c: &Cluster) -> Option<RolloutStatus> {
    let cm = api::<ConfigMap>(c).get_opt(STATUS_CONFIGMAP).await.ok()??;
    serde_json::from_str(cm.data?.get(STATUS_KEY)?).ok()
}

/// `sites-operator rollout status` against the emulator, started (stdout piped: not a terminal).
fn rollout_status(c: &Cluster, args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_sites-operator"))
        .args(["rollout", "status", "--namespace", NS])
        .args(args)
        .env("KUBECONFIG", c.kubeconfig())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// ROL-01: an operator that starts with a rendering of the pod template other than the one the
/// StatefulSets carry (a new operator version, or a configuration changed while none ran) rolls
/// the Sites under the same budget: at most 2 of 10 without a ready pod at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rendering_at_start_rolls_under_the_budget() {
    let text = config_with_budget("2", 600);
    let (c, op, names) = sites_following(&text, 10).await;
    op.stop().await;
    let pods = PodWatch::start(&c, &names).await;
    // Counted from here: the watch's first list has shown every Site's ready pod.
    pods.reset();
    write_config(&c, &edit(&text, "memory: 32Mi", "memory: 48Mi")).await;
    let (client, registry) = counted_client(&c).await;
    let (tx, rx) = tokio::sync::watch::channel(true);
    let op = start_following(
        client,
        registry,
        config(RoutingMode::Ingress),
        Some("sites-config"),
        Some(tx),
        rx,
    )
    .await;
    rolled_to(&c, "48Mi", names.len(), names.len()).await;
    // The watch may deliver the last pods' events after the lists above showed them.
    eventually("every pod rolled, as the watch saw it", WAIT, || async {
        (pods.unavailable_ever().len() == names.len()).then_some(())
    })
    .await;
    assert!(
        pods.most_unavailable() <= 2,
        "at most the budget's Sites without a ready pod at once: {}",
        pods.most_unavailable()
    );
    op.stop().await;
}

/// A Site paused during the rollout at scale.
const PAUSED_AT_SCALE: &str = "site-500";

/// ROL-01, ROL-04: a configuration change that rolls the pods of 1,000 Sites goes through them
/// with at most the budget's Sites without a ready pod at any moment, as a pod watcher sees
/// them; every Site ends on the new template but a paused one (ROL-03), waiting Sites said so
/// in their status, and `rollout status` followed it to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_rolls_the_sites_in_waves_under_the_budget() {
    // 1,000 Sites, at most 10% of them (100) rolling at once.
    let text = config_with_budget("10%", 600);
    let (c, op, names) = sites_following(&text, 1000).await;
    let budget = names.len() / 10;
    let pods = PodWatch::start(&c, &names).await;
    let waited: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let site_watch = tokio::spawn({
        let (waited, api) = (waited.clone(), sites(&c));
        async move {
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event
                    && condition(&s, "Progressing").is_some_and(|(_, r, _)| r == "RolloutPending")
                {
                    waited.lock().unwrap().insert(s.metadata.name.unwrap());
                }
            }
        }
    });
    // One Site paused: left alone, and no obstacle to the end of the rollout (ROL-03).
    merge(
        &c,
        PAUSED_AT_SCALE,
        json!({"metadata": {"annotations": {"sites.ecmwf.int/paused": "true"}}}),
    )
    .await;
    eventually("the Site paused", WAIT, || async {
        let site = sites(&c).get(PAUSED_AT_SCALE).await.ok()?;
        condition(&site, "Paused").map(drop)
    })
    .await;
    let rolling = names.len() - 1;
    pods.reset();
    // A configuration that rolled nothing (the creation) published no rollout.
    let before = published(&c).await.map(|s| s.version);
    write_config(&c, &edit(&text, "memory: 32Mi", "memory: 48Mi")).await;
    eventually(
        "the new configuration's rollout published",
        WAIT,
        || async {
            published(&c)
                .await
                .filter(|s| Some(&s.version) != before.as_ref())
                .map(drop)
        },
    )
    .await;
    // ROL-04: `rollout status` follows it to the end.
    let follow = rollout_status(&c, &[]);
    rolled_to(&c, "48Mi", rolling, names.len()).await;
    site_watch.abort();
    let out = tokio::task::spawn_blocking(move || follow.wait_with_output().unwrap())
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}");
    let last = printed.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!(
            "{rolling}/{rolling} rolled, 0 rolling, 0 waiting, 0 failed, 1 paused; done"
        )),
        "{printed}"
    );
    assert!(
        printed.lines().any(|l| !l.contains(" 0 waiting")),
        "it showed Sites waiting: {printed}"
    );
    assert!(
        pods.most_unavailable() <= budget,
        "at most the budget's Sites without a ready pod at once: {}",
        pods.most_unavailable()
    );
    eventually(
        "every Site's pod rolled, as the watch saw it",
        WAIT,
        || async { (pods.unavailable_ever().len() >= rolling).then_some(()) },
    )
    .await;
    let rolled_pods = pods.unavailable_ever();
    assert_eq!(
        rolled_pods.len(),
        rolling,
        "every Site's pod rolled, no other"
    );
    assert!(
        !rolled_pods.contains(PAUSED_AT_SCALE),
        "but the paused Site's"
    );
    let paused = api::<StatefulSet>(&c).get(PAUSED_AT_SCALE).await.unwrap();
    assert_eq!(memory_request(&paused).as_deref(), Some("32Mi"));
    // How many waited depends on the pace of the first pass against the rolls; some did.
    let waited = waited.lock().unwrap().len();
    assert!(
        waited > 0,
        "Sites beyond the first wave reported RolloutPending"
    );
    eventually("the rollout gauges", WAIT, || async {
        (op.metric("sites_rollout_sites{state=\"rolled\"}") == rolling as f64
            && op.metric("sites_rollout_sites{state=\"rolling\"}") == 0.0
            && op.metric("sites_rollout_sites{state=\"waiting\"}") == 0.0)
            .then_some(())
    })
    .await;
    assert_eq!(op.metric("sites_rollout_halted"), 0.0);
    op.stop().await;
}

/// ROL-02, 1,000 Sites: a change whose pods never get ready halts after the first wave: the Sites rolled
/// stay as they are, each written once, no other StatefulSet or owned object is written, the
/// waiting Sites say why, the ConfigMap
/// gets a Warning Event and `sites_rollout_halted` is 1. Reverting the change resumes: every
/// Site ends on the old template, Available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_pods_never_get_ready_halts_after_the_first_wave_and_a_revert_resumes() {
    // 1,000 Sites, 10% (100) at a time, 10 s to be Available again.
    let text = config_with_budget("10%", 10);
    let (c, op, names) = sites_following(&text, 1000).await;
    let budget = names.len() / 10;
    let generations: BTreeMap<String, Option<i64>> = statefulsets(&c)
        .await
        .into_iter()
        .map(|(name, sts)| (name, sts.metadata.generation))
        .collect();
    assert_eq!(generations.len(), names.len());
    c.emulator()
        .kubelet()
        .set_image("ghcr.io/x/broken-mirror:1", Behaviour::NeverReady);
    let broken = edit(
        &text,
        "    enabled: false                      # add a site-mirror container to every site\n    image: registry.example.org/sites/site-mirror:2.4.0",
        "    enabled: true\n    image: ghcr.io/x/broken-mirror:1",
    );
    let before = op.writes_by_resource();
    write_config(&c, &broken).await;
    eventually("the rollout halted", ROLLOUT, || async {
        (op.metric("sites_rollout_halted") == 1.0).then_some(())
    })
    .await;
    let events = api::<Event>(&c).list(&Default::default()).await.unwrap();
    let halt = events
        .items
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("RolloutHalted")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("sites-config")
        })
        .expect("a RolloutHalted Event on sites-config");
    assert_eq!(halt.type_.as_deref(), Some("Warning"));
    let waiting: Vec<String> = eventually("the waiting Sites report the halt", ROLLOUT, || async {
        let rolled: BTreeSet<String> = statefulsets(&c)
            .await
            .into_iter()
            .filter(|(_, sts)| has_mirror(sts))
            .map(|(name, _)| name)
            .collect();
        let listed = sites(&c).list(&Default::default()).await.ok()?;
        let mut waiting = Vec::new();
        for site in listed.items {
            let name = site.metadata.name.clone()?;
            if rolled.contains(&name) {
                continue;
            }
            let (_, reason, _) = condition(&site, "Progressing")?;
            let (stalled, _, _) = condition(&site, "Stalled")?;
            (reason == "RolloutHalted" && stalled == "True").then_some(())?;
            waiting.push(name);
        }
        Some(waiting)
    })
    .await;
    assert_eq!(
        waiting.len(),
        names.len() - budget,
        "only the first wave rolled"
    );
    let out = rollout_status(&c, &["--once"]).wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("HALTED: Site site-") && printed.contains("revert or fix sites-config"),
        "{printed}"
    );
    let now = statefulsets(&c).await;
    for name in &waiting {
        assert_eq!(
            now[name].metadata.generation, generations[name],
            "{name}: its StatefulSet was not written"
        );
    }
    // Nothing else written: each StatefulSet of the first wave once, no other owned object.
    let after = op.writes_by_resource();
    let written =
        |r: &str| after.get(r).copied().unwrap_or(0) - before.get(r).copied().unwrap_or(0);
    assert_eq!(written("statefulsets.apps"), budget as u64, "{after:?}");
    for resource in [
        "secrets",
        "persistentvolumeclaims",
        "services",
        "ingresses.networking.k8s.io",
    ] {
        assert_eq!(written(resource), 0, "{resource}: {after:?}");
    }

    // The revert resumes: the rolled Sites roll back, the others have nothing to do.
    write_config(&c, &text).await;
    eventually("every Site back and Available", ROLLOUT, || async {
        let back = statefulsets(&c)
            .await
            .values()
            .filter(|sts| !has_mirror(sts))
            .count();
        (back == names.len() && up_to_date(&c).await? == names.len()).then_some(())
    })
    .await;
    eventually("the halt ended", WAIT, || async {
        (op.metric("sites_rollout_halted") == 0.0).then_some(())
    })
    .await;
    let now = statefulsets(&c).await;
    for name in &waiting {
        assert_eq!(
            now[name].metadata.generation, generations[name],
            "{name}: never rolled"
        );
    }
    op.stop().await;
}

/// Waits until `rolled` StatefulSets ask for `memory` and `sites` Sites are Available and up to
/// date.
async fn rolled_to(c: &Cluster, memory: &str, rolled: usize, sites: usize) {
    eventually("the Sites rolled and Available", ROLLOUT, || async {
        // On the template, and rolled out as `kubectl rollout status` reads it: a Site's status
        // can still say UpToDate from before the write that rolls it.
        let on_it = statefulsets(c)
            .await
            .values()
            .filter(|s| memory_request(s).as_deref() == Some(memory) && rolled_out(s))
            .count();
        (on_it == rolled && up_to_date(c).await? == sites).then_some(())
    })
    .await;
}

/// The StatefulSet's pods all run its current template and are ready.
pub(crate) fn rolled_out(sts: &StatefulSet) -> bool {
    let (Some(spec), Some(status)) = (sts.spec.as_ref(), sts.status.as_ref()) else {
        return false;
    };
    let replicas = spec.replicas.unwrap_or(1);
    status.observed_generation == sts.metadata.generation
        && status.update_revision.is_some()
        && status.current_revision == status.update_revision
        && status.updated_replicas == Some(replicas)
        && status.ready_replicas.unwrap_or(0) == replicas
}

/// How many Sites are Available and up to date (Progressing False, UpToDate).
async fn up_to_date(c: &Cluster) -> Option<usize> {
    let listed = sites(c).list(&Default::default()).await.ok()?;
    let settled = listed.items.iter().filter(|s| {
        condition(s, "Available").is_some_and(|(a, _, _)| a == "True")
            && condition(s, "Progressing").is_some_and(|(p, r, _)| p == "False" && r == "UpToDate")
    });
    Some(settled.count())
}

/// Every StatefulSet of the namespace, by name.
async fn statefulsets(c: &Cluster) -> BTreeMap<String, StatefulSet> {
    api::<StatefulSet>(c)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
        .collect()
}

const PAUSED: &str = "docs-handbook";
const RUNNING: &str = "docs-other";

/// ROL-03: while `sites.ecmwf.int/paused` is "true" the operator writes nothing for the Site but
/// the `Paused` condition: no drift repair, no spec edit, no configuration change, no
/// retention; the Site counts in `sites_paused` and Argo CD reads it as Suspended. Removing the
/// annotation catches it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_site_is_left_alone_through_drift_edits_and_configuration_changes() {
    let (c, op) = two_sites_following_the_configmap().await;
    let before = sites(&c).get(PAUSED).await.unwrap();
    let observed = before.status.as_ref().unwrap().observed_generation;

    merge(
        &c,
        PAUSED,
        json!({"metadata": {"annotations": {"sites.ecmwf.int/paused": "true"}}}),
    )
    .await;
    let paused = eventually("the Paused condition", WAIT, || async {
        let site = sites(&c).get(PAUSED).await.ok()?;
        let (status, reason, _) = condition(&site, "Paused")?;
        (status == "True" && reason == "Paused").then_some(site)
    })
    .await;
    // One condition more, nothing else recomputed.
    let mut without = paused.status.clone().unwrap();
    without.conditions.retain(|c| c.type_ != "Paused");
    assert_eq!(
        Some(without),
        before.status,
        "only the Paused condition is new"
    );
    eventually("sites_paused counts it", WAIT, || async {
        (op.metric("sites_paused") == 1.0).then_some(())
    })
    .await;

    // Drift, a spec edit and a configuration change that rolls every Site's pods.
    api::<StatefulSet>(&c)
        .patch(
            PAUSED,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let files = format!("{PAUSED}-files");
    api::<ConfigMap>(&c)
        .patch(
            &files,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"nginx.conf": "# edited by hand"}})),
        )
        .await
        .unwrap();
    merge(
        &c,
        PAUSED,
        json!({"spec": {"configuration": {"headers": {"X-Paused": "yes"}}}}),
    )
    .await;
    let reconciles = op.reconciles();
    write_config(&c, &edit(&example_config(), "memory: 32Mi", "memory: 48Mi")).await;
    eventually("the running Site rolled to the new limit", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get(RUNNING).await.ok()?;
        (memory_request(&sts)? == "48Mi").then_some(())
    })
    .await;
    op.settled_after(reconciles + 1.0).await;

    let sts = api::<StatefulSet>(&c).get(PAUSED).await.unwrap();
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(3), "not repaired");
    assert_eq!(memory_request(&sts).as_deref(), Some("32Mi"), "not rolled");
    let cm = api::<ConfigMap>(&c).get(&files).await.unwrap();
    assert_eq!(cm.data.unwrap()["nginx.conf"], "# edited by hand");
    let site = sites(&c).get(PAUSED).await.unwrap();
    let status = site.status.as_ref().unwrap();
    assert_eq!(
        status.observed_generation, observed,
        "the edit is not observed"
    );
    assert!(site.metadata.generation > observed);
    let (health, message) = argocd::health(&serde_json::to_value(&site).unwrap());
    assert_eq!(health, "Suspended", "{message}");
    assert!(message.starts_with("Paused: "), "{message}");

    // Resumed: one reconcile repairs, rolls and observes the edit; the condition is gone.
    let reconciles = op.reconciles();
    merge(
        &c,
        PAUSED,
        json!({"metadata": {"annotations": {"sites.ecmwf.int/paused": null}}}),
    )
    .await;
    eventually("the resumed Site caught up", WAIT, || async {
        let sts = api::<StatefulSet>(&c).get(PAUSED).await.ok()?;
        let cm = api::<ConfigMap>(&c).get(&files).await.ok()?;
        let site = sites(&c).get(PAUSED).await.ok()?;
        (sts.spec.as_ref()?.replicas == Some(1)
            && memory_request(&sts)? == "48Mi"
            && cm.data?["nginx.conf"] != "# edited by hand"
            && site.status.as_ref()?.observed_generation == site.metadata.generation
            && condition(&site, "Paused").is_none())
        .then_some(())
    })
    .await;
    assert!(op.reconciles() > reconciles);
    eventually("sites_paused back to 0", WAIT, || async {
        (op.metric("sites_paused") == 0.0).then_some(())
    })
    .await;
    op.stop().await;
}

/// ROL-01, ROL-02 on a real kube-apiserver 1.20 with the operator deployed from the manifests:
/// a change whose pods never get ready (a mirror container of an image the kubelet never
/// reports ready) rolls one Site under a budget of one, halts at the deadline with a Warning
/// Event on `sites-config`, leaves the other Sites as they were with `RolloutHalted` in their
/// status; the revert rolls the first Site back and every Site ends Available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_a_change_that_never_gets_ready_halts_and_a_revert_resumes() {
    use crate::e2e::{Target, path};
    let t = Target::real().await;
    let dir = t.local.as_ref().unwrap().0.dir.clone();
    let names = ["docs-a", "docs-b", "docs-c"];
    for name in names {
        let manifest = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &manifest,
            std::fs::read_to_string(path("manifests/examples/site.yaml"))
                .unwrap()
                .replace("name: docs-handbook", &format!("name: {name}"))
                .replace("name: handbook", &format!("name: {}", &name[5..])),
        )
        .unwrap();
        t.ok(&["apply", "-n", NS, "-f", &manifest.display().to_string()]);
    }
    let state = |name: &str| {
        t.get(&[
            "get",
            &format!("site/{name}"),
            "-n",
            NS,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.conditions[?(@.type==\"Progressing\")].status} {.status.conditions[?(@.type==\"Progressing\")].reason}",
        ])
        .unwrap_or_default()
    };
    let mirrored = |name: &str| {
        t.get(&[
            "get",
            &format!("statefulset/{name}"),
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.template.spec.containers[*].name}",
        ])
        .is_some_and(|names| names.split(' ').any(|n| n == "site-mirror"))
    };
    t.until("every Site Available", || {
        names
            .iter()
            .all(|n| state(n).starts_with("True False"))
            .then(String::new)
    })
    .await;

    let original = example_config();
    let broken = edit(
        &config_with_budget("1", 10),
        "    enabled: false                      # add a site-mirror container to every site\n    image: registry.example.org/sites/site-mirror:2.4.0",
        &format!(
            "    enabled: true\n    image: {}",
            sites_emulator::control_plane::NEVER_READY_IMAGE
        ),
    );
    write_config(&t.local.as_ref().unwrap().0, &broken).await;
    t.until("a RolloutHalted Event on sites-config", || {
        t.get(&[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "reason=RolloutHalted,involvedObject.name=sites-config",
            "-o",
            "name",
        ])
        .filter(|out| !out.trim().is_empty())
    })
    .await;
    let held = t
        .until("the Sites not rolled report the halt", || {
            let held: Vec<&str> = names.iter().copied().filter(|n| !mirrored(n)).collect();
            held.iter()
                .all(|n| state(n) == "True False RolloutHalted")
                .then(|| held.join(" "))
        })
        .await;
    assert_eq!(
        held.split(' ').count(),
        names.len() - 1,
        "one Site rolled under a budget of one: {held}"
    );

    write_config(&t.local.as_ref().unwrap().0, &original).await;
    t.until("every Site back on its old pods, Available", || {
        names
            .iter()
            .all(|n| !mirrored(n) && state(n) == "True False UpToDate")
            .then(String::new)
    })
    .await;
}
