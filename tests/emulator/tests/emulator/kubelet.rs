//! `sites-emulator kubelet` (the simulated kubelet against another API server), run as a
//! process against the emulator over HTTPS. The emulator runs its own kubelet, scheduler and
//! volume controller, so only what they leave alone is checked: the registration and status of
//! a second node, and volumes for claims whose class waits for a consumer (the emulator's volume
//! controller leaves those Pending while no pod uses them).

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{Cluster, eventually};

const WAIT: Duration = Duration::from_secs(20);
const NODE: &str = "remote-node";

/// The kubelet process; killed if the test fails before stopping it.
struct Kubelet(Child);

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_kubelet(kubeconfig: &Path, ready: &Path) -> Kubelet {
    let child = Command::new(env!("CARGO_BIN_EXE_sites-emulator"))
        .arg("kubelet")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node", NODE, "--storage-class", "remote"])
        .args(["--image-behaviour", "busybox=CrashLoop"])
        .arg("--ready-file")
        .arg(ready)
        .spawn()
        .expect("sites-emulator kubelet starts");
    Kubelet(child)
}

async fn create_claim(api: &Api<PersistentVolumeClaim>, name: &str, class: &str) -> String {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "2Gi"}}}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &claim).await.unwrap();
    created.metadata.uid.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_kubelet_registers_a_ready_node_and_provisions_pre_bound_volumes() {
    let c = Cluster::start(true).await;
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    for name in ["remote", "other"] {
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "provisioner": "sites-emulator.test/hostpath",
            "volumeBindingMode": "WaitForFirstConsumer"
        }))
        .unwrap();
        classes.create(&PostParams::default(), &sc).await.unwrap();
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    // The claim of a class it does not serve first: the round that provisions the second saw it.
    let other_uid = create_claim(&claims, "other-data", "other").await;
    let uid = create_claim(&claims, "data", "remote").await;

    let ready = c.dir.join("kubelet.ready");
    let mut kubelet = start_kubelet(&c.kubeconfig(), &ready);
    eventually("the ready file", WAIT, || async {
        ready.exists().then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&ready).unwrap().trim(), NODE);

    // The node: registered with the emulator's labels and capacity, reported Ready.
    let node = Api::<Node>::all(c.client.clone()).get(NODE).await.unwrap();
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    let status = node.status.unwrap();
    let ready_condition = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (
            ready_condition.status.as_str(),
            ready_condition.reason.as_deref()
        ),
        ("True", Some("KubeletReady"))
    );
    let addresses = status.addresses.unwrap();
    assert_eq!(
        (addresses[0].type_.as_str(), addresses[0].address.as_str()),
        ("InternalIP", "127.0.0.1")
    );
    assert_eq!(status.capacity.unwrap()["pods"].0, "110");
    let version = c.client.apiserver_version().await.unwrap();
    assert_eq!(
        status.node_info.unwrap().kubelet_version,
        version.git_version
    );

    // The claim of its class gets `pvc-<uid>`, pre-bound to it.
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let name = format!("pvc-{uid}");
    let pv = eventually("the provisioned volume", WAIT, || async {
        pvs.get_opt(&name).await.unwrap()
    })
    .await;
    assert_eq!(
        pv.metadata.annotations.unwrap()["pv.kubernetes.io/provisioned-by"],
        "sites-emulator"
    );
    let spec = serde_json::to_value(pv.spec.unwrap()).unwrap();
    assert_eq!(
        spec,
        json!({
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "2Gi"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": "default", "name": "data", "uid": uid},
            "hostPath": {"path": format!("/tmp/sites-emulator-volumes/{name}"), "type": "DirectoryOrCreate"},
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "remote",
            "volumeMode": "Filesystem",
        })
    );
    // The other class's claim got nothing.
    assert!(
        pvs.get_opt(&format!("pvc-{other_uid}"))
            .await
            .unwrap()
            .is_none()
    );

    // SIGTERM stops it, successfully.
    let pid = kubelet.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let exit = eventually("the kubelet to stop", WAIT, || {
        let exit = kubelet.0.try_wait().unwrap();
        async move { exit }
    })
    .await;
    assert!(exit.success(), "{exit:?}");
}
