//! Crash-restart: the real operator binary is killed (SIGKILL) 20 times while 200 Sites are
//! created and then all changed, and started again each time. Each kill comes once the running
//! process has made a random number of API writes of its own, so every kill lands in the middle
//! of its work however slowly it starts; and each phase has more work than all its kills can
//! let through, so the work is unfinished at every kill (checked). Afterwards every Site has its
//! latest spec applied (no lost update) and each qualifying change rolled the pods exactly once:
//! every restartedAt value a StatefulSet ever had is recorded by a watch, which is checked to
//! have seen every version of every StatefulSet, from before the first existed to the end.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sites_emulator::faults::Lcg;
use sites_operator::config::RoutingMode;
use sites_operator::crd::Site;

use crate::support::operator::{NS, config, example_named, prepare, sites};
use crate::support::{Cluster, OperatorProcess, api_requests, eventually, eventually_every};

const SITES: usize = 200;
/// Kills per phase.
const KILLS: usize = 10;
/// The most writes the operator makes before a kill, in the creation phase. A Site takes at
/// least 5 of the operator's writes to be created and settled (StatefulSet, Service, two
/// ConfigMaps, Ingress, status; 11 in all, BENCHMARKS.md), 1,000 for 200 Sites: far more than
/// the 10 kills let through (600, and the few more each kill takes to come).
const MOST_WRITES_CREATING: u64 = 60;
/// The same in the change phase: a change takes at least 3 writes to settle (the ConfigMap of
/// files, the StatefulSet's restart, the status' observedGeneration), 600 for 200 Sites: far
/// more than the 10 kills let through (300, and a few).
const MOST_WRITES_CHANGING: u64 = 30;
/// How long a process may take to make the writes it is killed after (from its start).
const PROGRESS: Duration = Duration::from_secs(120);

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

/// The API writes (create, update, patch, delete) the process has made, from its own metrics;
/// None until it serves them.
async fn own_writes(op: &OperatorProcess) -> Option<u64> {
    let (status, metrics) = op.get("/metrics").await?;
    (status == 200).then_some(())?;
    Some(
        api_requests(&metrics)
            .into_iter()
            .filter(|(verb, _, _)| {
                matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
            })
            .map(|(_, _, n)| n as u64)
            .sum(),
    )
}

/// The writes the emulator has answered that were not the test's own (`test_writes`, counted
/// once answered): the operator's. Read in process, so it can be polled often and cheaply.
fn operator_writes(c: &Cluster, test_writes: &AtomicU64) -> u64 {
    c.emulator()
        .stats()
        .writes()
        .saturating_sub(test_writes.load(Ordering::SeqCst))
}

/// The Sites that have settled: their status reports their latest generation, Available.
async fn settled(c: &Cluster) -> usize {
    let all = sites(c).list(&ListParams::default()).await.unwrap();
    all.items
        .iter()
        .filter(|s| {
            s.status.as_ref().is_some_and(|st| {
                st.observed_generation == s.metadata.generation
                    && st
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
            })
        })
        .count()
}

/// One kill, and the state of the phase's work then.
#[derive(Debug)]
struct Kill {
    /// The operator's writes since the killed process started (or since the phase began).
    writes: u64,
    /// The writes the killed process reported itself.
    own: u64,
    /// The test had made all of the phase's own writes.
    test_done: bool,
    /// Sites settled right after the kill.
    settled: usize,
}

/// Kills and restarts the operator `KILLS` times while `work` runs (`test_writes` counts its
/// writes), each time once the operator has made between 1 and `most` writes since the
/// process started (or since the phase began) and the process reports writes of its own, so
/// that it was killed at work, not while starting. Polled every millisecond: a kill comes
/// within a few writes of its number.
async fn chaos<F: std::future::Future<Output = ()>>(
    c: &Cluster,
    op: &mut OperatorProcess,
    rng: &mut Lcg,
    most: u64,
    test_writes: &AtomicU64,
    work: F,
) -> Vec<Kill> {
    tokio::pin!(work);
    let mut done = false;
    let mut kills = Vec::new();
    // The process running when the phase begins may have written before.
    let mut own_before = eventually("the operator's metrics", PROGRESS, || own_writes(op)).await;
    while kills.len() < KILLS {
        let target = rng.between(1, most);
        let before = operator_writes(c, test_writes);
        let deadline = tokio::time::Instant::now() + PROGRESS;
        let mut scraped: Option<tokio::time::Instant> = None;
        let (writes, own) = loop {
            // (One less while a write of the test's is answered but not yet counted.)
            let writes = operator_writes(c, test_writes).saturating_sub(before);
            // The process's own count (an HTTP request) once the number is reached, at most
            // every 20 ms.
            if writes >= target && scraped.is_none_or(|t| t.elapsed() >= Duration::from_millis(20))
            {
                scraped = Some(tokio::time::Instant::now());
                if let Some(own) = own_writes(op).await
                    && own > own_before
                {
                    break (writes, own - own_before);
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kill {}: the operator made {writes} of {target} writes within {PROGRESS:?}:\n{}",
                kills.len(),
                op.log()
            );
            let pause = tokio::time::sleep(Duration::from_millis(1));
            if done {
                pause.await;
            } else {
                tokio::select! {
                    _ = &mut work => done = true,
                    _ = pause => {}
                }
            }
        };
        op.kill();
        kills.push(Kill {
            writes,
            own,
            test_done: done,
            settled: settled(c).await,
        });
        *op = start(c);
        own_before = 0;
    }
    if !done {
        work.await;
    }
    kills
}

/// Every kill came in the middle of the phase's work: after the killed process had written
/// something itself, and while the test was still writing or some Site had not settled.
fn assert_mid_work(phase: &str, kills: &[Kill]) {
    assert_eq!(kills.len(), KILLS, "{phase}");
    for (i, kill) in kills.iter().enumerate() {
        assert!(
            kill.own >= 1 && kill.writes >= 1,
            "{phase}, kill {i} came before the process wrote anything: {kill:?}"
        );
        assert!(
            !kill.test_done || kill.settled < SITES,
            "{phase}, kill {i} came after the work was over: {kill:?}"
        );
    }
}

/// What the recorder's watch of the StatefulSets saw.
#[derive(Clone, Default, Debug)]
struct Recorded {
    /// Every restartedAt value each StatefulSet ever had.
    restarts: HashMap<String, HashSet<String>>,
    /// The resourceVersion of the latest version of each StatefulSet seen.
    versions: HashMap<String, String>,
    /// Initial lists: one, unless the watch lost its place (410 Gone) and had to list again,
    /// when versions between its watches may have gone unseen.
    lists: usize,
    /// StatefulSets in the first list.
    first_listed: usize,
    /// The first list was complete.
    synced: bool,
    /// Watch errors; after each the watcher resumes from the last version seen, missing none.
    errors: Vec<String>,
}

impl Recorded {
    fn see(&mut self, sts: &StatefulSet) {
        let name = sts.name_any();
        if let Some(at) = crate::support::operator::restarted_at(sts) {
            self.restarts.entry(name.clone()).or_default().insert(at);
        }
        self.versions
            .insert(name, sts.resource_version().unwrap_or_default());
    }
}

/// A watch of the StatefulSets recording every version of each.
struct Recorder {
    seen: Arc<Mutex<Recorded>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts the watch; returns once its first list is complete.
    async fn start(c: &Cluster) -> Recorder {
        let seen: Arc<Mutex<Recorded>> = Arc::default();
        let task = tokio::spawn({
            let seen = seen.clone();
            let api: Api<StatefulSet> = Api::namespaced(c.client.clone(), NS);
            async move {
                let stream = watcher(api, watcher::Config::default()).default_backoff();
                futures::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    let mut seen = seen.lock().unwrap();
                    match event {
                        Ok(watcher::Event::Init) => seen.lists += 1,
                        Ok(watcher::Event::InitApply(sts)) => {
                            if seen.lists == 1 {
                                seen.first_listed += 1;
                            }
                            seen.see(&sts);
                        }
                        Ok(watcher::Event::InitDone) => seen.synced = true,
                        Ok(watcher::Event::Apply(sts) | watcher::Event::Delete(sts)) => {
                            seen.see(&sts)
                        }
                        Err(e) => seen.errors.push(e.to_string()),
                    }
                }
            }
        });
        let recorder = Recorder { seen, task };
        eventually("the recorder's first list", PROGRESS, || async {
            recorder.seen.lock().unwrap().synced.then_some(())
        })
        .await;
        recorder
    }

    /// Waits until the recorder has seen the current version of each of the `count`
    /// StatefulSets; checks that it is still watching and never lost its place, so it saw every
    /// version since its first list. Returns what it saw.
    async fn caught_up(&self, c: &Cluster, count: usize) -> Recorded {
        let api: Api<StatefulSet> = Api::namespaced(c.client.clone(), NS);
        eventually_every(
            "the recorder to see the current version of every StatefulSet",
            Duration::from_secs(60),
            Duration::from_millis(200),
            || async {
                let all = api.list(&ListParams::default()).await.ok()?;
                let seen = self.seen.lock().unwrap();
                (all.items.len() == count
                    && all.items.iter().all(|sts| {
                        seen.versions.get(&sts.name_any()) == sts.resource_version().as_ref()
                    }))
                .then_some(())
            },
        )
        .await;
        assert!(!self.task.is_finished(), "the recorder stopped");
        let seen = self.seen.lock().unwrap().clone();
        assert_eq!(
            seen.lists, 1,
            "the recorder lost its place and listed again, so it may have missed versions \
             (watch errors: {:?})",
            seen.errors
        );
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_the_operator_converges_exactly_once() {
    let c = Cluster::start(false).await;
    prepare(&c).await;

    // The recording starts before the first StatefulSet exists.
    let recorder = Recorder::start(&c).await;
    assert_eq!(recorder.seen.lock().unwrap().first_listed, 0);

    let mut rng = Lcg(0x5eed);
    let mut op = start(&c);
    let names: Vec<String> = (0..SITES).map(|i| format!("site-{i}")).collect();

    // Phase 1: creation, with 10 kills.
    let test_writes = AtomicU64::new(0);
    let create = async {
        for name in &names {
            let s = example_named(name, name);
            sites(&c).create(&PostParams::default(), &s).await.unwrap();
            test_writes.fetch_add(1, Ordering::SeqCst);
        }
    };
    let kills = chaos(
        &c,
        &mut op,
        &mut rng,
        MOST_WRITES_CREATING,
        &test_writes,
        create,
    )
    .await;
    assert_mid_work("creation", &kills);
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
    let seen = recorder.caught_up(&c, SITES).await;
    assert_eq!(seen.versions.len(), SITES, "{seen:?}");
    assert!(
        seen.restarts.is_empty(),
        "creation restarted pods: {:?}",
        seen.restarts
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
            test_writes.fetch_add(1, Ordering::SeqCst);
        }
    };
    let kills = chaos(
        &c,
        &mut op,
        &mut rng,
        MOST_WRITES_CHANGING,
        &test_writes,
        update,
    )
    .await;
    assert_mid_work("change", &kills);
    let configmaps: Api<ConfigMap> = Api::namespaced(c.client.clone(), NS);
    eventually_every(
        "every change applied",
        Duration::from_secs(240),
        Duration::from_millis(500),
        || async {
            let seen = recorder.seen.lock().unwrap();
            (names
                .iter()
                .all(|n| seen.restarts.get(n).is_some_and(|s| !s.is_empty())))
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
    // Exactly one restart per site for its one qualifying change, in a recording that saw
    // every version of every StatefulSet up to now.
    let seen = recorder.caught_up(&c, SITES).await;
    let doubled: Vec<_> = seen.restarts.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(
        doubled.is_empty(),
        "sites restarted more than once: {doubled:?}"
    );
    assert_eq!(seen.restarts.len(), SITES);
    recorder.task.abort();
    let (_, log) = op.stop();
    assert!(!log.contains("panicked"), "a panic in the operator log");
}
