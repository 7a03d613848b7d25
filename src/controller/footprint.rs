//! What the operator's caches and bookkeeping hold for one typical Site, in bytes, by kind: a
//! regression guard for the memory per Site (allocation sizes are deterministic).
//!
//! Each figure is measured as the test allocator's net bytes ([`crate::testing::net_bytes`])
//! of filling the structure the operator keeps (table, index, record map) with the objects of
//! [`N`] Sites, as the watches deliver them (JSON decoded, slimmed, applied), divided by `N`:
//! the per-entry share of the hash tables and indexes is included. Each Site is the example
//! Site (manifests/examples/site.yaml) with a name, uid and path of its own, rendered and
//! stored as the API server keeps its objects.
//!
//! Not counted: what the allocator adds to the sizes asked of it (size classes, per-thread
//! heaps, memory freed but not returned to the system); what decoding takes while an event or
//! a list page is handled; the `FailedCreate` Events (kept only for a Site whose pods cannot be
//! created) and the delayed volume labels (kept until the patch is made). A hash table's
//! share depends on how full it is: at `N` = 1,000 a table of one entry per Site has room for
//! 1,792, the fingerprints' (eight per Site) for 14,336.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use kube::Resource;
use kube::runtime::watcher::Event;
use serde_json::json;

use crate::controller::apply::record_event;
use crate::controller::cache::index::{self, Index};
use crate::controller::cache::kept::tests::{example_site, render_site, stored};
use crate::controller::cache::kept::{self, Keep, Kept, Owned};
use crate::controller::cache::table::{Records, Sites, Table, Volumes};
use crate::controller::events::{EventType, Recorder, Reporter};
use crate::controller::own_writes::{Objects, Statuses};
use crate::controller::queue::{Backoff, Queue};
use crate::controller::status::{self, SitePod};
use crate::controller::volumes;
use crate::crd::{Site, SiteStatus};
use crate::labels::LAST_APPLIED_ANNOTATION;
use crate::render::{self, Route, SiteTokens};
use crate::testing::net_bytes;
use crate::watched::{Pod, Volume};
use crate::write::FIELD_MANAGER;

/// Sites measured at once.
const N: usize = 1_000;
/// Sites of the warm-up fill (one-time initialisations of the code measured are not counted).
const WARM: usize = 8;
/// The namespace of the Sites.
const NAMESPACE: &str = "sites";

/// A UUID of its own for object `kind` of Site `i`, as the API server assigns them (lower-case,
/// hyphenated: kept as numbers by the caches).
fn uid(i: usize, kind: u32) -> String {
    let bits = crate::digest::hashed(&(i, kind)) as u128;
    let bits = (bits << 64) | crate::digest::hashed(&(kind, i)) as u128;
    uuid::Builder::from_random_bytes(bits.to_be_bytes())
        .into_uuid()
        .to_string()
}

fn time(at: &str) -> Time {
    Time(at.parse().expect("a timestamp"))
}

fn manager(name: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(name.into()),
        operation: Some(operation.into()),
        api_version: Some("v1".into()),
        fields_type: Some("FieldsV1".into()),
        time: Some(time("2026-12-01T10:00:01Z")),
        subresource: subresource.map(Into::into),
        ..Default::default()
    }
}

/// `obj` stored by the API server (the rendering stamped, with the API server's fields and
/// other components' metadata: [`stored`]), with a uid of its own, as JSON.
fn delivered<K: Resource + Clone + serde::Serialize>(
    obj: &K,
    i: usize,
    kind: u32,
    edit: impl FnOnce(&mut K),
) -> Vec<u8> {
    let (_, mut obj) = stored(obj);
    obj.meta_mut().uid = Some(uid(i, kind));
    obj.meta_mut().creation_timestamp = Some(time("2026-12-01T10:00:01Z"));
    edit(&mut obj);
    serde_json::to_vec(&obj).expect("JSON")
}

/// What the watches deliver for Sites `0..N + WARM`, as JSON; and what the operator records
/// about each Site.
#[derive(Default)]
struct Delivered {
    names: Vec<String>,
    sites: Vec<Vec<u8>>,
    /// The status the operator wrote (the Site's JSON carries it).
    statuses: Vec<SiteStatus>,
    secrets: Vec<Vec<u8>>,
    oauth2_secrets: Vec<Vec<u8>>,
    env_configmaps: Vec<Vec<u8>>,
    files_configmaps: Vec<Vec<u8>>,
    pvcs: Vec<Vec<u8>>,
    statefulsets: Vec<Vec<u8>>,
    services: Vec<Vec<u8>>,
    ingresses: Vec<Vec<u8>>,
    /// The route in gateway mode (instead of the Ingress).
    httproutes: Vec<Vec<u8>>,
    pods: Vec<Vec<u8>>,
    volumes: Vec<Vec<u8>>,
}

impl Delivered {
    fn new() -> Delivered {
        let cfg = crate::fixtures::config();
        let gateway = crate::fixtures::config_gateway();
        let mut d = Delivered::default();
        for i in 0..N + WARM {
            d.add(i, &cfg, &gateway);
        }
        d
    }

    /// Site `i`: the example Site named `docs-hand<i>` (the example's name length), served at
    /// `/docs/hand<i>/`, as `kubectl apply` created it and the mutating webhook recorded its
    /// image, with the status the operator wrote; its objects, its pod and its bound volume.
    fn add(
        &mut self,
        i: usize,
        cfg: &crate::config::PlatformConfig,
        gateway: &crate::config::PlatformConfig,
    ) {
        let id = format!("docs-hand{i:04}");
        let mut site = example_site();
        let applied = serde_json::to_string(&site).expect("JSON");
        site.metadata.name = Some(id.clone());
        site.spec.name = format!("hand{i:04}");
        site.metadata.uid = Some(uid(i, 0));
        site.metadata.generation = Some(1);
        site.metadata.resource_version = Some(format!("{}", 100_000 + i * 20));
        site.metadata.creation_timestamp = Some(time("2026-12-01T10:00:00Z"));
        site.metadata.annotations = Some(BTreeMap::from([(
            LAST_APPLIED_ANNOTATION.to_string(),
            applied,
        )]));
        site.metadata.managed_fields = Some(vec![
            manager("kubectl-client-side-apply", "Update", None),
            manager(FIELD_MANAGER, "Update", Some("status")),
        ]);
        for app in &mut site.spec.configuration.applications {
            if app.image.is_none() {
                app.image = render::apps::builtin_image(&app.name, cfg);
            }
        }
        // Tokens as the operator generates them: 48 hex digits.
        let token = |n: u32| format!("{:048x}", crate::digest::hashed(&(i, n)));
        let tokens = SiteTokens {
            api_token: token(1),
            secret_key: token(2),
        };
        let r = render_site(&site, cfg, &tokens);
        let volume_name = format!("pvc-{}", uid(i, 30));
        let claim_uid = uid(i, 5);
        self.secrets.push(delivered(&r.secret, i, 1, |_| {}));
        self.oauth2_secrets
            .push(delivered(&r.oauth2_secret, i, 2, |_| {}));
        self.env_configmaps
            .push(delivered(&r.env_configmap, i, 3, |_| {}));
        self.files_configmaps
            .push(delivered(&r.files_configmap, i, 4, |_| {}));
        // Bound by the controller manager, which manages fields of the claim itself.
        let claim_status = serde_json::from_value(json!({
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "2Gi"}
        }))
        .expect("a claim status");
        self.pvcs
            .push(delivered(&r.pvc, i, 5, |c: &mut PersistentVolumeClaim| {
                let spec = c.spec.get_or_insert_default();
                spec.volume_name = Some(volume_name.clone());
                spec.storage_class_name
                    .get_or_insert_with(|| "standard".into());
                spec.volume_mode = Some("Filesystem".into());
                c.metadata.annotations.get_or_insert_default().extend([
                    ("pv.kubernetes.io/bound-by-controller".into(), "yes".into()),
                    (
                        "volume.kubernetes.io/storage-provisioner".into(),
                        "rancher.io/local-path".into(),
                    ),
                ]);
                c.metadata.finalizers = Some(vec!["kubernetes.io/pvc-protection".into()]);
                c.metadata.managed_fields.get_or_insert_default().extend([
                    manager("kube-controller-manager", "Update", None),
                    manager("kube-controller-manager", "Update", Some("status")),
                ]);
                c.status = Some(claim_status);
            }));
        let sts_uid = uid(i, 6);
        self.statefulsets
            .push(delivered(&r.statefulset, i, 6, |s: &mut StatefulSet| {
                s.metadata.generation = Some(1);
                s.metadata
                    .managed_fields
                    .get_or_insert_default()
                    .push(manager("kube-controller-manager", "Update", Some("status")));
                s.status = Some(serde_json::from_value(json!({
                    "replicas": 1, "readyReplicas": 1, "currentReplicas": 1, "updatedReplicas": 1,
                    "availableReplicas": 1, "observedGeneration": 1,
                    "currentRevision": format!("{id}-7d9c8b6f5d"),
                    "updateRevision": format!("{id}-7d9c8b6f5d"), "collisionCount": 0
                })).expect("a StatefulSet status"));
            }));
        self.services
            .push(delivered(&r.service, i, 7, |s: &mut Service| {
                let spec = s.spec.get_or_insert_default();
                spec.cluster_ip = Some(format!("10.96.{}.{}", i / 250, i % 250 + 2));
                spec.cluster_ips = Some(vec![spec.cluster_ip.clone().unwrap_or_default()]);
            }));
        match r.route.as_ref() {
            Some(Route::Ingress(ingress)) => {
                self.ingresses
                    .push(delivered(ingress, i, 8, |g: &mut Ingress| {
                        g.status = Some(
                            serde_json::from_value(json!({
                                "loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}
                            }))
                            .expect("an Ingress status"),
                        );
                    }))
            }
            _ => panic!("the example Site has an Ingress in ingress mode"),
        }
        match render_site(&site, gateway, &tokens).route {
            Some(Route::HttpRoute(route)) => self.httproutes.push(delivered(&route, i, 8, |_| {})),
            _ => panic!("the example Site has an HTTPRoute in gateway mode"),
        }
        let pod = pod_of(&r.statefulset, &sts_uid, i);
        let site_pod = kept::pod(&serde_json::from_slice::<Pod>(&pod).expect("a pod"));
        assert_eq!(
            index::pod_keys(&site_pod),
            [id.as_str()],
            "the site's own pod"
        );
        self.pods.push(pod);
        self.volumes.push(volume_of(
            &volume_name,
            &id,
            r.pvc.metadata.name.as_deref().unwrap_or_default(),
            &claim_uid,
            i,
        ));
        // The status the operator writes for a running site.
        let images = render::apps::builtin_images(&site, cfg);
        let enabled = status::deployed_enabled(&site, None, true);
        let status = status::site_status(
            &site,
            &[&site_pod],
            None,
            enabled,
            images,
            None,
            &time("2026-12-01T10:01:00Z"),
        );
        assert!(
            !status.conditions.is_empty() && status.path.is_some(),
            "{status:?}"
        );
        site.status = Some(status.clone());
        self.statuses.push(status);
        self.sites.push(serde_json::to_vec(&site).expect("JSON"));
        self.names.push(id);
    }

    /// Site `i` as the Site watch keeps it.
    fn site(&self, i: usize) -> Site {
        let mut site: Site = decode(&self.sites[i]);
        kept::site(&mut site);
        site
    }

    /// The pod of Site `i` as the pod watch keeps it.
    fn pod(&self, i: usize) -> SitePod {
        kept::pod(&decode::<Pod>(&self.pods[i]))
    }

    /// The volume of Site `i` as the volume watch keeps it.
    fn volume(&self, i: usize) -> Volume {
        let mut volume: Volume = decode(&self.volumes[i]);
        kept::volume(&mut volume);
        volume
    }
}

/// The site pod as the StatefulSet controller creates it from the template, running and ready.
fn pod_of(sts: &StatefulSet, sts_uid: &str, i: usize) -> Vec<u8> {
    let sts_name = sts.metadata.name.as_deref().unwrap_or_default();
    let name = format!("{sts_name}-0");
    let template = &sts.spec.as_ref().expect("a spec").template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.extend([
        (
            "controller-revision-hash".to_string(),
            format!("{sts_name}-7d9c8b6f5d"),
        ),
        ("statefulset.kubernetes.io/pod-name".into(), name.clone()),
        ("apps.kubernetes.io/pod-index".into(), "0".into()),
    ]);
    let mut spec = serde_json::to_value(&template.spec).expect("JSON");
    spec["nodeName"] = json!("worker-1");
    spec["hostname"] = json!(name);
    let containers: Vec<_> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": "docker.io/library/x@sha256:0f4e",
                   "containerID": "containerd://4f1d", "ready": true, "started": true,
                   "restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T10:00:20Z"}}})
        })
        .collect();
    let condition = |type_: &str, at: &str| json!({"type": type_, "status": "True", "lastProbeTime": null, "lastTransitionTime": at});
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": format!("{sts_name}-"), "namespace": NAMESPACE,
            "uid": uid(i, 20), "resourceVersion": format!("{}", 100_010 + i * 20),
            "creationTimestamp": "2026-12-01T10:00:02Z",
            "labels": labels, "annotations": meta.annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts_name,
                                 "uid": sts_uid, "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [manager("kube-controller-manager", "Update", None),
                              manager("kubelet", "Update", Some("status"))],
        },
        "spec": spec,
        "status": {
            "phase": "Running", "hostIP": "192.0.2.21", "podIP": "10.244.1.17",
            "startTime": "2026-12-01T10:00:02Z", "qosClass": "Burstable",
            "conditions": [
                condition("PodReadyToStartContainers", "2026-12-01T10:00:19Z"),
                condition("Initialized", "2026-12-01T10:00:19Z"),
                condition("Ready", "2026-12-01T10:00:25Z"),
                condition("ContainersReady", "2026-12-01T10:00:25Z"),
                condition("PodScheduled", "2026-12-01T10:00:02Z"),
            ],
            "containerStatuses": containers,
        }
    }))
    .expect("JSON")
}

/// The site's volume as the provisioner made it, bound to the claim, with the labels the
/// operator puts on it.
fn volume_of(name: &str, id: &str, claim: &str, claim_uid: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": name, "uid": uid(i, 31), "resourceVersion": format!("{}", 100_005 + i * 20),
            "creationTimestamp": "2026-12-01T10:00:03Z",
            "labels": crate::labels::labels(id),
            "annotations": {"pv.kubernetes.io/provisioned-by": "rancher.io/local-path"},
            "finalizers": ["kubernetes.io/pv-protection"],
            "managedFields": [manager("local-path-provisioner", "Update", None),
                              manager("kube-controller-manager", "Update", Some("status")),
                              manager(FIELD_MANAGER, "Update", None)],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "2Gi"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim,
                         "namespace": NAMESPACE, "resourceVersion": format!("{}", 100_004 + i * 20),
                         "uid": claim_uid},
            "hostPath": {"path": format!("/var/local-path-provisioner/{name}_{NAMESPACE}_{claim}"),
                         "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["worker-1"]}]}]}},
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "standard",
            "volumeMode": "Filesystem"
        },
        "status": {"phase": "Bound", "lastPhaseTransitionTime": "2026-12-01T10:00:03Z"}
    }))
    .expect("JSON")
}

fn decode<K: serde::de::DeserializeOwned>(json: &[u8]) -> K {
    serde_json::from_slice(json).expect("a delivered object")
}

/// A list as the watch delivers it: `Init`, an `InitApply` for each of `range`, `InitDone`.
fn list<K>(range: Range<usize>, object: impl Fn(usize) -> K, mut apply: impl FnMut(&Event<K>)) {
    apply(&Event::Init);
    for i in range {
        apply(&Event::InitApply(object(i)));
    }
    apply(&Event::InitDone);
}

/// Net bytes per object that `fill(structure, sites)` leaves in a new `structure` for [`N`]
/// Sites with `per_site` objects each (after a warm-up fill of another structure with other
/// Sites).
fn per_object<C>(per_site: usize, make: impl Fn() -> C, fill: impl Fn(&C, Range<usize>)) -> usize {
    fill(&make(), N..N + WARM);
    let structure = make();
    let ((), bytes) = net_bytes(|| fill(&structure, 0..N));
    drop(structure);
    let bytes = usize::try_from(bytes).expect("a filled structure holds memory");
    (bytes as f64 / (N * per_site) as f64).round() as usize
}

/// The records of an owned kind filled as its watch fills them.
fn records<K: Owned>(delivered: &[Vec<u8>]) -> usize {
    per_object(1, Records::<K>::default, |records, range| {
        list(
            range,
            |i| Kept::new(decode::<K>(&delivered[i])),
            |e| records.apply(e),
        )
    })
}

/// The records of an owned kind as the watch makes them (for the fingerprints).
fn kept<K: Keep + serde::de::DeserializeOwned>(delivered: &[Vec<u8>]) -> Vec<(Kept<K>, u64)> {
    delivered
        .iter()
        .map(|json| {
            let obj = decode::<K>(json);
            let version = crate::controller::own_writes::version(obj.meta());
            (Kept::new(obj), version)
        })
        .collect()
}

/// A row of the table: a kind, how many of it a Site has, the bytes each takes, their bound
/// and what they are.
type Row = (&'static str, usize, usize, usize, &'static str);

/// An API server that answers an Event create with the Event (the recorder reads its name).
fn event_server() -> kube::Client {
    let service = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
        use http_body_util::BodyExt as _;
        let body = req.into_body().collect().await.expect("a body").to_bytes();
        Ok::<_, std::convert::Infallible>(
            http::Response::builder()
                .status(201)
                .body(axum::body::Body::from(body))
                .expect("a response"),
        )
    });
    kube::Client::new(service, NAMESPACE)
}

/// The Sites table, as the Site watch fills it.
fn sites(d: &Delivered) -> usize {
    per_object(1, Sites::default, |sites, range| {
        list(range, |i| d.site(i), |e| sites.apply(e))
    })
}

/// The index of the Sites by public path.
fn sites_by_path(d: &Delivered) -> usize {
    per_object(
        1,
        || Index::<Site, Sites>::new(index::site_path_keys),
        |index, range| list(range, |i| d.site(i), |e| index.observe(e)),
    )
}

/// The site pods' table.
fn pods(d: &Delivered) -> usize {
    per_object(1, Table::<SitePod>::default, |pods, range| {
        list(range, |i| d.pod(i), |e| pods.apply(e))
    })
}

/// The index of the site pods by site.
fn pods_by_site(d: &Delivered) -> usize {
    per_object(
        1,
        || Index::<SitePod, Table<SitePod>>::new(index::pod_keys),
        |index, range| list(range, |i| d.pod(i), |e| index.observe(e)),
    )
}

/// The volumes' table.
fn volumes(d: &Delivered) -> usize {
    per_object(1, Volumes::default, |volumes, range| {
        list(range, |i| d.volume(i), |e| volumes.apply(e))
    })
}

/// The index of the volumes by site label and by claim.
fn volumes_by_site(d: &Delivered) -> usize {
    per_object(
        1,
        || Index::<Volume, Volumes>::new(volumes::volume_keys),
        |index, range| list(range, |i| d.volume(i), |e| index.observe(e)),
    )
}

/// The drift fingerprints: every record of a Site, shown as the watches show them.
fn fingerprints(d: &Delivered) -> usize {
    let secrets = kept::<Secret>(&d.secrets);
    let oauth2 = kept::<Secret>(&d.oauth2_secrets);
    let env = kept::<ConfigMap>(&d.env_configmaps);
    let files = kept::<ConfigMap>(&d.files_configmaps);
    let pvcs = kept::<PersistentVolumeClaim>(&d.pvcs);
    let statefulsets = kept::<StatefulSet>(&d.statefulsets);
    let services = kept::<Service>(&d.services);
    let ingresses = kept::<Ingress>(&d.ingresses);
    per_object(8, Objects::default, |prints, range| {
        fn observe<K: Keep>(prints: &Objects, (record, version): &(Kept<K>, u64)) {
            prints.observe(record, *version);
        }
        for i in range {
            observe(prints, &secrets[i]);
            observe(prints, &oauth2[i]);
            observe(prints, &env[i]);
            observe(prints, &files[i]);
            observe(prints, &pvcs[i]);
            observe(prints, &statefulsets[i]);
            observe(prints, &services[i]);
            observe(prints, &ingresses[i]);
        }
    })
}

/// The statuses the operator wrote (one per Site, as [`Statuses::sending`] keeps it).
fn written_statuses(d: &Delivered) -> usize {
    per_object(1, Statuses::default, |written, range| {
        for i in range {
            written.sending(&d.names[i], &d.statuses[i]);
        }
    })
}

/// The Event recorder's memory after the Created Event of every Site, as the reconcile that
/// created a Site's objects records it (through a stub API server).
fn events(d: &Delivered, runtime: &tokio::runtime::Runtime) -> usize {
    let client = runtime.block_on(async { event_server() });
    let reporter = Reporter {
        controller: "sites-operator".into(),
        instance: Some("sites-operator-7c9d8f6b5-x2k4q".into()),
    };
    let created = crate::controller::events::Event {
        type_: EventType::Normal,
        reason: crate::reasons::CREATED.into(),
        note: Some(
            "created Secret x, Secret x-oauth2, ConfigMap x, ConfigMap x-files, \
             PersistentVolumeClaim x, StatefulSet x, Service x, Ingress x"
                .into(),
        ),
        action: "Reconcile".into(),
        secondary: None,
    };
    let references: Vec<_> = (0..N + WARM).map(|i| d.site(i).object_ref(&())).collect();
    per_object(
        1,
        || Recorder::new(reporter.clone()),
        |recorder, range| {
            runtime.block_on(async {
                for i in range {
                    record_event(&client, recorder, &created, &references[i])
                        .await
                        .expect("the Event is recorded");
                }
            })
        },
    )
}

/// The work queue after every Site was queued at once (a restarted operator lists them all)
/// and reconciled: the capacity its sets and maps grew to stays.
fn queue(d: &Delivered, runtime: &tokio::runtime::Runtime) -> usize {
    per_object(
        1,
        || Queue::<Arc<str>>::new(Backoff::default(), None),
        |queue, range| {
            runtime.block_on(async {
                for i in range.clone() {
                    queue.add(d.names[i].as_str().into());
                }
                for _ in range {
                    let key = queue.get().await.expect("a key");
                    queue.done(&key);
                    queue.forget(&key);
                }
            })
        },
    )
}

/// What the operator holds per Site, by kind, in bytes: printed, and each figure held under
/// its bound (about 15 % above the measured value; allocation sizes are deterministic, so a
/// figure over its bound is a change in what the operator keeps, or in the layout of a
/// dependency's types).
#[test]
fn cache_bytes_per_kind() {
    let d = Delivered::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    #[rustfmt::skip]
    let rows: [Row; 18] = [
        ("Site", 1, sites(&d), 270, "Sites table: name, packed JSON (metadata, spec, status)"),
        ("Site path index", 1, sites_by_path(&d), 95, "path key hashed -> [Site name]"),
        ("Secret (site)", 1, records::<Secret>(&d.secrets), 460, "Kept: name, Facts, 2 tokens"),
        ("Secret (oauth2)", 1, records::<Secret>(&d.oauth2_secrets), 245, "Kept: name, Facts, no token"),
        ("ConfigMap (env)", 1, records::<ConfigMap>(&d.env_configmaps), 216, "Kept: name, Facts"),
        ("ConfigMap (files)", 1, records::<ConfigMap>(&d.files_configmaps), 223, "Kept: name, Facts"),
        ("PVC", 1, records::<PersistentVolumeClaim>(&d.pvcs), 435, "Kept: name, Facts, Claim (size, class, volume)"),
        ("StatefulSet", 1, records::<StatefulSet>(&d.statefulsets), 595, "Kept: name, Facts, Template (annotations, images)"),
        ("Service", 1, records::<Service>(&d.services), 216, "Kept: name, Facts"),
        ("Ingress", 1, records::<Ingress>(&d.ingresses), 216, "Kept: name, Facts"),
        ("Pod", 1, pods(&d), 175, "SitePod: name, uid, site id, resolved status"),
        ("Pod site index", 1, pods_by_site(&d), 95, "site id hashed -> [pod name]"),
        ("PersistentVolume", 1, volumes(&d), 325, "Volumes table: name, packed JSON (labels, claimRef, status)"),
        ("Volume index", 1, volumes_by_site(&d), 250, "id:<site>, claim:<ns>/<claim> hashed -> [volume name]"),
        ("Fingerprint", 8, fingerprints(&d), 115, "an ObjectRecord per owned object, by (kind, name) hashed"),
        ("Written status", 1, written_statuses(&d), 80, "Site name hashed -> its last two status digests, whether the last is shown"),
        ("Event memory", 1, events(&d, &runtime), 165, "the Created Event: key hashed -> name, count, time"),
        ("Queue", 1, queue(&d, &runtime), 10, "capacity kept once every Site queued at once was taken (given back)"),
    ];
    // In gateway mode, instead of the Ingress.
    #[rustfmt::skip]
    let httproute: Row = ("HTTPRoute", 1, records::<HttpRoute>(&d.httproutes), 216, "Kept: name, Facts (gateway mode, instead of the Ingress)");
    // About 15 % above the measured total.
    const TOTAL_BOUND: usize = 4_700;

    let total: usize = rows.iter().map(|r| r.1 * r.2).sum();
    println!(
        "{:<18} | {:>5} | {:>6} | what it holds",
        "kind", "bytes", "×Site"
    );
    println!("{:-<18}-|-{:->5}-|-{:->6}-|-{:-<50}", "", "", "", "");
    for (kind, per_site, bytes, _, holds) in &rows {
        println!("{kind:<18} | {bytes:>5} | {per_site:>6} | {holds}");
    }
    println!(
        "{:<18} | {:>5} | {:>6} | per Site (N = {N} Sites)",
        "total", total, ""
    );
    let (kind, _, bytes, _, holds) = httproute;
    println!("{kind:<18} | {bytes:>5} | {:>6} | {holds}", "-");
    let over: Vec<String> = rows
        .iter()
        .chain([&httproute])
        .filter(|r| r.2 > r.3)
        .map(|(kind, _, bytes, bound, _)| format!("{kind}: {bytes} bytes, bound {bound}"))
        .collect();
    assert!(over.is_empty(), "over their bounds: {over:#?}");
    assert!(
        total <= TOTAL_BOUND,
        "{total} bytes per Site, bound {TOTAL_BOUND}"
    );
}
