//! Crash-restart: the real operator binary is killed (SIGKILL) at 20 random points while 200
//! Sites are created and then all changed; each time it is started again. Afterwards every Site
//! has its latest spec applied (no lost update) and each qualifying change rolled the pods exactly
//! once (every restartedAt value a StatefulSet ever had is recorded by a watch).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sites_operator::config::RoutingMode;
use sites_operator::crd::Site;

use crate::support::operator::{NS, config, example_named, prepare, sites};
use crate::support::{Cluster, OperatorProcess, eventually_every};

const SITES: usize = 200;

/// A deterministic pseudo-random sequence (the test is reproducible).
struct Lcg(u64);

impl Lcg {
    fn next_ms(&mut self, low: u64, high: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        low + (self.0 >> 33) % (high - low)
    }
}

/// Starts the operator on ports of its own choosing: this cluster has no webhook configurations,
/// so nobody needs to know them, and each restart may get new ones.
fn start(c: &Cluster) -> OperatorProcess {
    OperatorProcess::start_with(
        &c.kubeconfig(),
        NS,
        &c.dir.join("certs"),
        &["--leader-elect=false"],
    )
}

/// Kills and restarts the operator `times` times at random moments while `work` runs.
async fn chaos<F: std::future::Future<Output = ()>>(
    c: &Cluster,
    op: &mut OperatorProcess,
    rng: &mut Lcg,
    times: usize,
    work: F,
) {
    tokio::pin!(work);
    let mut kills = 0;
    let mut done = false;
    while kills < times {
        let pause = Duration::from_millis(rng.next_ms(50, 600));
        if !done {
            tokio::select! {
                _ = &mut work => done = true,
                _ = tokio::time::sleep(pause) => {}
            }
        } else {
            tokio::time::sleep(pause).await;
        }
        op.kill();
        kills += 1;
        *op = start(c);
    }
    if !done {
        work.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_the_operator_converges_exactly_once() {
    let c = Cluster::start(false).await;
    prepare(&c).await;

    // Every restartedAt value each StatefulSet ever had.
    let seen: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    let recorder = tokio::spawn({
        let seen = seen.clone();
        let api: Api<StatefulSet> = Api::namespaced(c.client.clone(), NS);
        async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(Ok(sts)) = stream.next().await {
                let at = sts
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.annotations.as_ref())
                    .and_then(|a| a.get("kubectl.kubernetes.io/restartedAt").cloned());
                if let (Some(name), Some(at)) = (sts.metadata.name, at) {
                    seen.lock().unwrap().entry(name).or_default().insert(at);
                }
            }
        }
    });

    let mut rng = Lcg(0x5eed);
    let mut op = start(&c);
    let names: Vec<String> = (0..SITES).map(|i| format!("site-{i}")).collect();

    // Phase 1: creation, with 10 kills.
    let create = async {
        for name in &names {
            let s = example_named(name, name);
            sites(&c).create(&PostParams::default(), &s).await.unwrap();
        }
    };
    chaos(&c, &mut op, &mut rng, 10, create).await;
    let all_available = || async {
        let all = sites(&c).list(&ListParams::default()).await.ok()?;
        (all.items.len() == SITES
            && all.items.iter().all(|s| {
                s.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
                })
            }))
        .then_some(())
    };
    eventually_every(
        "every site available",
        Duration::from_secs(240),
        Duration::from_millis(500),
        all_available,
    )
    .await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "creation restarted pods: {:?}",
        seen.lock().unwrap()
    );

    // Phase 2: one qualifying change per site, with 10 more kills.
    let update = async {
        for name in &names {
            let patch =
                json!({"spec": {"configuration": {"headers": {"X-Frame-Options": "DENY"}}}});
            sites(&c)
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    chaos(&c, &mut op, &mut rng, 10, update).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(c.client.clone(), NS);
    eventually_every(
        "every change applied",
        Duration::from_secs(240),
        Duration::from_millis(500),
        || async {
            let seen = seen.lock().unwrap().clone();
            (names
                .iter()
                .all(|n| seen.get(n).is_some_and(|s| !s.is_empty())))
            .then_some(())
        },
    )
    .await;
    eventually_every(
        "every site available again",
        Duration::from_secs(240),
        Duration::from_millis(500),
        all_available,
    )
    .await;

    // No lost update: every site's nginx configuration has the new header, and its StatefulSet
    // records the spec it was rendered from.
    for name in &names {
        let files = configmaps.get(&format!("{name}-files")).await.unwrap();
        assert!(
            files.data.unwrap()["nginx.conf"]
                .contains("add_header X-Frame-Options \"DENY\" always;"),
            "{name}: the change was lost"
        );
        let site: Site = sites(&c).get(name).await.unwrap();
        let sts = Api::<StatefulSet>::namespaced(c.client.clone(), NS)
            .get(name)
            .await
            .unwrap();
        let hash = sts
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()["sites.ecmwf.int/spec-hash"]
            .clone();
        assert_eq!(
            hash,
            sites_operator::restart::spec_hash(&site, &config(RoutingMode::Ingress)),
            "{name}"
        );
    }
    // Exactly one restart per site for its one qualifying change.
    let seen = seen.lock().unwrap().clone();
    let doubled: Vec<_> = seen.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(
        doubled.is_empty(),
        "sites restarted more than once: {doubled:?}"
    );
    assert_eq!(seen.len(), SITES);
    recorder.abort();
    let (_, log) = op.stop();
    assert!(!log.contains("panicked"), "a panic in the operator log");
}
