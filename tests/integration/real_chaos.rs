//! Chaos on the real control plane: etcd, kube-apiserver, kube-controller-manager and the
//! operator's leading replica SIGKILLed one at a time and then all together, each started again
//! after a pause, while Sites are created and a `sites-config` change rolls the existing ones.
//! Afterwards the API server's audit log, not the operator, says what was written.
//! `#[ignore]`d: `make real-apiserver-test`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::PostParams;
use serde_json::Value;
use sites_emulator::faults::Lcg;

use crate::e2e::Target;
use crate::live_config::{deployed_config, edit, write_config};
use crate::support::deployed::{self, Pod};
use crate::support::operator::{condition, example_named, sites};
use crate::support::{Cluster, eventually_every, real};

const NS: &str = "sites";

/// Sites that exist before the change, and Sites created during the chaos.
const BEFORE: usize = 15;
const DURING: usize = 15;

/// How long everything may take to settle after the last restart.
const SETTLE: Duration = Duration::from_secs(300);

/// A new replica of the operator, serving the webhooks.
async fn replica(c: &Cluster, timeout: Duration) -> Pod {
    let pod = deployed::run_deployment(c, NS, "sites-operator", timeout).await;
    real::point_webhooks_at(c, &pod, timeout).await;
    pod
}

/// Every Site Available, its spec observed and up to date (no status stuck), and its
/// StatefulSet on `memory` and rolled out.
async fn converged(c: &Cluster, names: &[String], memory: &str) -> Result<(), String> {
    let list = sites(c)
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut behind = Vec::new();
    for name in names {
        let Some(site) = list
            .items
            .iter()
            .find(|s| s.metadata.name.as_ref() == Some(name))
        else {
            behind.push(format!("{name}: missing"));
            continue;
        };
        let available = condition(site, "Available").is_some_and(|(a, _, _)| a == "True");
        let settled =
            condition(site, "Progressing").is_some_and(|(p, r, _)| p == "False" && r == "UpToDate");
        let observed =
            site.status.as_ref().and_then(|s| s.observed_generation) == site.metadata.generation;
        if !(available && settled && observed) {
            behind.push(format!(
                "{name}: {:?} {:?}",
                condition(site, "Available"),
                condition(site, "Progressing")
            ));
        }
    }
    // On the template and rolled out (pods of the new revision, ready): the status a replica
    // computes afterwards is the one stored.
    let statefulsets = kube::Api::<StatefulSet>::namespaced(c.client.clone(), NS)
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    for name in names {
        let sts = statefulsets
            .items
            .iter()
            .find(|s| s.metadata.name.as_ref() == Some(name));
        let asked = sts.and_then(crate::rollout::memory_request);
        let rolled_out = sts.is_some_and(crate::rollout::rolled_out);
        if asked.as_deref() != Some(memory) || !rolled_out {
            behind.push(format!(
                "{name}: StatefulSet memory {asked:?}, rolled out {rolled_out}"
            ));
        }
    }
    if behind.is_empty() {
        Ok(())
    } else {
        Err(behind.join("\n"))
    }
}

/// Each Site's stored status, by name.
async fn statuses(c: &Cluster) -> BTreeMap<String, Value> {
    let list = sites(c).list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap_or_default(),
                serde_json::to_value(&s.status).unwrap(),
            )
        })
        .collect()
}

/// Objects labelled with a Site id whose controller is not an existing Site's uid.
fn orphans(c: &Cluster) -> Vec<String> {
    let uids: BTreeSet<String> = c
        .kubectl_ok(&[
            "get",
            "sites",
            "-n",
            NS,
            "-o",
            "jsonpath={.items[*].metadata.uid}",
        ])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let objects: Value = serde_json::from_str(&c.kubectl_ok(&[
        "get",
        real::OWNED_KINDS,
        "-n",
        NS,
        "-l",
        "sites.ecmwf.int/id",
        "-o",
        "json",
    ]))
    .unwrap();
    objects["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            !o["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["controller"] == true && uids.contains(r["uid"].as_str().unwrap_or("")))
        })
        .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
        .collect()
}

/// SPEC 4.2 and 4.9 on kube-apiserver, etcd and kube-controller-manager 1.20: 15 Sites run; a
/// `sites-config` change that rolls their pods (the memory request) is made and 15 more Sites
/// are created one every 700 ms, each retried until stored as GitOps would retry, while etcd, the API server, the controller
/// manager and the operator's replica are each SIGKILLed and started again after a pause, then
/// all four at once. Afterwards:
/// - every Site is Available and up to date, its spec observed, its StatefulSet on the new
///   template (no status stuck);
/// - no object labelled with a Site lacks a living Site as its controller (no orphan);
/// - the audit log shows each old Site's StatefulSet written once (its roll) and nothing else
///   of theirs, and each new Site's objects written at most the times their changes need;
/// - a replica started afterwards finds every owned object equal to its rendering: it writes
///   nothing;
/// - no replica panicked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real control plane: make real-apiserver-test"]
async fn real_apiserver_kills_of_every_component_while_sites_roll_lose_nothing() {
    let mut t = Target::real().await;
    let timeout = t.timeout;
    let (c, first) = t.local.take().expect("the operator runs here");
    let names: Vec<String> = (0..BEFORE + DURING)
        .map(|i| format!("site-{i:02}"))
        .collect();
    for name in &names[..BEFORE] {
        sites(&c)
            .create(&PostParams::default(), &example_named(name, name))
            .await
            .unwrap();
    }
    eventually_every(
        "the first Sites converged",
        SETTLE,
        Duration::from_secs(1),
        || async { converged(&c, &names[..BEFORE], "32Mi").await.ok() },
    )
    .await;
    let mark = real::mark(&c);

    // The change, then the new Sites, created one by one with retries while the chaos runs.
    write_config(
        &c,
        &edit(
            &deployed_config(),
            "        memory: 32Mi",
            "        memory: 48Mi",
        ),
    )
    .await;
    let creator = tokio::spawn({
        let client = c.client.clone();
        let names = names[BEFORE..].to_vec();
        async move {
            let api: kube::Api<sites_operator::crd::Site> = kube::Api::namespaced(client, NS);
            let mut refused = 0;
            for name in names {
                // One Site every 700 ms, as a pipeline would add them: the creations span the
                // first kills.
                tokio::time::sleep(Duration::from_millis(700)).await;
                loop {
                    match api
                        .create(&PostParams::default(), &example_named(&name, &name))
                        .await
                    {
                        Ok(_) => break,
                        // Created by an attempt whose answer was lost.
                        Err(kube::Error::Api(e)) if e.code == 409 => break,
                        Err(_) => {
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                    }
                }
            }
            refused
        }
    });

    let plane = c.real_plane().unwrap();
    let mut pauses = Lcg(55);
    let mut logs = Vec::new();
    let mut operator = Some(first);
    let components = ["etcd", "kube-apiserver", "kube-controller-manager"];
    for component in components {
        tokio::time::sleep(pauses.millis(500, 3000)).await;
        plane.kill(component).await.unwrap();
        tokio::time::sleep(pauses.millis(1000, 5000)).await;
        plane.restart(component).await.unwrap();
    }
    // The replica: killed, and a new one started.
    tokio::time::sleep(pauses.millis(500, 3000)).await;
    let mut killed = operator.take().unwrap();
    killed.process.kill();
    logs.push(killed.process.log());
    tokio::time::sleep(pauses.millis(1000, 5000)).await;
    operator = Some(replica(&c, timeout).await);
    // All together, started again in the order they need each other.
    tokio::time::sleep(pauses.millis(500, 3000)).await;
    let mut killed = operator.take().unwrap();
    killed.process.kill();
    logs.push(killed.process.log());
    for component in components {
        plane.kill(component).await.unwrap();
    }
    tokio::time::sleep(pauses.millis(1000, 5000)).await;
    for component in components {
        plane.restart(component).await.unwrap();
    }
    let last = replica(&c, timeout).await;
    let refused = creator.await.unwrap();

    eventually_every(
        "every Site converged after the chaos",
        SETTLE,
        Duration::from_secs(1),
        || async { converged(&c, &names, "48Mi").await.ok() },
    )
    .await;
    assert_eq!(orphans(&c), Vec::<String>::new(), "no orphaned object");

    // Writes per object since the change, as the audit log has them.
    let writes = real::operator_writes(&c, mark);
    let per_object = sites_emulator::audit::count(
        writes
            .iter()
            // Events, statuses and the rollout's progress report (`sites-rollout`, written as
            // the waves go) are not objects of a Site.
            .filter(|w| {
                !w.contains(" events") && !w.contains("/status ") && !w.ends_with("/sites-rollout")
            })
            .map(|w| w.split_once(' ').unwrap().1.to_string()),
    );
    let old: BTreeSet<&str> = names[..BEFORE].iter().map(String::as_str).collect();
    let mut excess = Vec::new();
    for (object, n) in &per_object {
        let (resource, name) = object.split_once(' ').unwrap();
        let site = name.rsplit('/').next().unwrap();
        // What the changes need: an old Site's roll is one write of its StatefulSet; a new Site's
        // objects are created once, its StatefulSet written again when it was created before the
        // new configuration reached the operator.
        let needed = match (old.contains(site), resource) {
            (true, "statefulsets.apps") => 1,
            (true, _) => 0,
            (false, "statefulsets.apps") => 2,
            (false, _) => 1,
        };
        if *n > needed {
            excess.push(format!("{object}: {n} writes, {needed} needed"));
        }
    }
    // What the replicas logged of an object written too often, to tell which one wrote it again
    // and why.
    let said: Vec<String> = logs
        .iter()
        .chain(std::iter::once(&last.process.log()))
        .flat_map(|log| log.lines())
        .filter(|line| {
            excess.iter().any(|e| {
                let object = e.split(' ').nth(1).unwrap_or_default();
                let name = object.rsplit('/').next().unwrap_or_default();
                line.contains(&format!("\"{name}\"")) || line.contains(&format!("={name} "))
            })
        })
        .map(str::to_string)
        .collect();
    assert_eq!(
        excess,
        Vec::<String>::new(),
        "{writes:#?}\nwhat the replicas logged of them:\n{}",
        said.join("\n")
    );
    // Written too often is told above, with what the replicas logged; here, not at all.
    for name in &names[..BEFORE] {
        assert_eq!(
            per_object.get(&format!("statefulsets.apps {NS}/{name}")),
            Some(&1),
            "{name} rolled once: {writes:#?}"
        );
    }

    // The last replica done with all it was given (a pod event after the Sites converged queues
    // one more status), then stopped.
    let token = crate::e2e::metrics_token(&c);
    crate::real_apiserver::settled(
        &last,
        &token,
        "the last replica to settle",
        names.len(),
        timeout,
    )
    .await;
    let (code, log) = last.process.stop();
    assert_eq!(code, Some(0), "{log}");
    logs.push(log);
    // A replica started now verifies every object and writes nothing: each equals its rendering.
    let stored = statuses(&c).await;
    let mark = real::mark(&c);
    let check = deployed::run_deployment(&c, NS, "sites-operator", timeout).await;
    crate::real_apiserver::settled(
        &check,
        &token,
        "the checking replica to verify every Site",
        names.len(),
        timeout,
    )
    .await;
    let rewritten: Vec<String> = statuses(&c)
        .await
        .into_iter()
        .filter(|(name, status)| stored.get(name) != Some(status))
        .map(|(name, status)| format!("{name}: {:#?}\nnow: {status:#?}", stored.get(&name)))
        .collect();
    assert_eq!(
        real::operator_writes(&c, mark),
        Vec::<String>::new(),
        "statuses the checking replica changed:\n{}\n{}",
        rewritten.join("\n"),
        check.process.log()
    );
    logs.push(check.process.log());
    for log in &logs {
        assert!(!log.contains("panicked"), "{log}");
    }
    eprintln!("creations refused and retried during the chaos: {refused}");
}
