//! The watches of the controller: one per kind it reads, each filling a cache (a
//! [`Table`] or [`Records`]) and, where a reconcile looks objects up by
//! site, an [`Index`]; every event that changes what the cache keeps queues the key of its Site
//! (the Site's name, from the id label of an owned object or pod).
//!
//! Watched in the platform namespace: Sites (queued when [`site_event_matters`]), the objects of
//! the owned kinds (every object, not only the operator's: an object of an owned name that the
//! Site does not control must be seen to be left alone, SPEC 4.6; each one shown to the drift
//! record of [`OwnWrites`]), site pods as [`SitePod`]s (selected by the id label), the
//! StatefulSets' `FailedCreate` Events, HTTPRoutes when the cluster serves them; cluster-wide,
//! the PersistentVolumes. Each kind is a [`Watched`] type that [`run`] drives.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use gateway_api::apis::standard::httproutes::HttpRoute;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use prometheus::IntCounterVec;

use crate::controller::cache::index::{self, Index};
use crate::controller::cache::kept::{self, Keep, Kept, Owned};
use crate::controller::cache::table::{Cache, Hold, Named, Packed, Records, Sites, Table, Volumes};
use crate::controller::caches::{self, Caches, HttpRoutes};
use crate::controller::own_writes::{self, OwnWrites, Statuses};
use crate::controller::queue::Queue;
use crate::controller::status::{self, FailedCreate, SitePod};
use crate::controller::{changes, volumes};
use crate::crd::{ID_LABEL, Site};
use crate::watched::{Pod, Volume};

/// Starts every watch and returns the caches they fill once each has made its first list
/// (synced). `own`, the record of the operator's own writes, is shown every Site status and
/// every object of the owned kinds the watches deliver.
pub(super) async fn start(
    client: &kube::Client,
    ns: &str,
    queue: &Queue<Arc<str>>,
    triggers: IntCounterVec,
    own: &Arc<OwnWrites>,
) -> Caches {
    let feed = Feed {
        queue: queue.clone(),
        triggers,
        lists: Arc::new(tokio::sync::Semaphore::new(LISTS_AT_ONCE)),
    };
    let (sites, sites_by_path) = watch_sites(client, ns, &feed, own.clone());
    let (pods, pods_by_site) = watch_site_pods(client, ns, &feed);
    let (volumes, volumes_by_site) = watch_volumes(client, &feed);
    let failed_creates = watch_failed_creates(client, ns, &feed);
    let owned = Watch {
        client,
        ns,
        feed: &feed,
        own,
    };
    let caches = Caches {
        sites_by_path,
        sites,
        secrets: owned.labelled(),
        configmaps: owned.labelled(),
        pvcs: owned.labelled(),
        statefulsets: owned.labelled(),
        services: owned.labelled(),
        ingresses: owned.routes(),
        httproutes: watch_http_routes(client, ns, &feed, own.clone()).await,
        pods,
        pods_by_site,
        failed_creates,
        volumes,
        volumes_by_site,
    };
    wait_synced(&caches).await;
    tracing::info!(sites = caches.sites.len(), "caches synced");
    caches
}

/// Objects per page of a watch's initial list. A page is decoded whole (with the managed fields
/// and specs the caches then drop) before its objects are slimmed: with ten watches listing at
/// once after a restart, kube's default of 500 made those pages a third of the restarted
/// operator's peak memory at 1,000 Sites.
const LIST_PAGE: u32 = 100;

/// Watches making their first list at once. A restarted operator lists every kind it watches;
/// all at once, the pages in flight (decoded whole) and what the allocator keeps of them made
/// its peak memory at 10,000 Sites about a fifth above the first operator's; one at a time,
/// the restart took twice as long (each list waits for the API server's answer with nothing
/// else to do). Two: most of the memory, little of the time (BENCHMARKS.md).
const LISTS_AT_ONCE: usize = 2;

fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// Where watch events go: the queue, and the count of keys queued per kind of object.
#[derive(Clone)]
struct Feed {
    queue: Queue<Arc<str>>,
    triggers: IntCounterVec,
    /// Turns to list: a watch takes one for its first list (see [`LISTS_AT_ONCE`]).
    lists: Arc<tokio::sync::Semaphore>,
}

/// The key (Site name) an owned object or pod belongs to.
fn key_of<K: Resource>(obj: &K) -> Option<String> {
    obj.labels().get(ID_LABEL).cloned()
}

/// The key of an object of an owned kind: its id label, else its name (an object without the
/// label may be in the way of the Site of that name, or be one of its objects that lost the
/// label: either way that Site looks again).
fn owned_key<K: Keep>(obj: &Kept<K>) -> Option<String> {
    route_key(obj).or_else(|| Some(obj.name().to_string()))
}

/// The key of a route: its id label only (a route of another owner is no Site's business).
fn route_key<K: Keep>(obj: &Kept<K>) -> Option<String> {
    obj.facts.site_id().map(str::to_string)
}

/// One watched kind: what its cache keeps of each object ([`Watched::keep`]), which Site an
/// object queues ([`Watched::key`]), whether an event changes what a reconcile does
/// ([`Watched::changed`]) and what else follows an event once the cache holds it
/// ([`Watched::after`]: indexes, the drift fingerprints, the written statuses). [`run`] drives
/// every kind alike; a new kind is a type and these four methods.
trait Watched: Send + 'static {
    /// The kind as the API server sends it.
    type Source: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static;
    /// What the cache keeps of an object.
    type Kept: Named + Clone + std::fmt::Debug + Send + Sync + 'static;
    /// How the cache holds it ([`Table`]).
    type Hold: Hold<Self::Kept>;
    /// The cache the watch fills.
    fn table(&self) -> &Table<Self::Kept, Self::Hold>;
    /// What the cache keeps of `obj`.
    fn keep(&mut self, obj: Self::Source) -> Self::Kept;
    /// The Site (its name) that an event about `obj` queues, if any.
    fn key(&self, obj: &Self::Kept) -> Option<String>;
    /// Whether `event` can change what a reconcile does, judged before the cache applies it
    /// (the cache still holds the previous version): false keeps its key out of the queue.
    fn changed(&self, event: &watcher::Event<Self::Kept>) -> bool;
    /// Called once the cache applied `event`.
    fn after(&mut self, _event: &watcher::Event<Self::Kept>) {}
}

/// An owned kind, kept as [`Kept`] records: every object the watch delivers is shown to the
/// drift fingerprints once the records hold it (the cache has caught up with the operator's own
/// write once it shows it).
struct OwnedWatch<K: Keep> {
    records: Records<K>,
    key: fn(&Kept<K>) -> Option<String>,
    own: Arc<OwnWrites>,
    /// The version of the object [`Watched::keep`] last kept (the record drops it): shown to the
    /// fingerprints in [`Watched::after`] of the same event, so a reconcile that learns its
    /// write was seen finds that write (or a later version) in the cache. (The objects of a
    /// re-list enter the cache together at its end but are shown as they arrive: a write seen
    /// only through a re-list may be repeated once.)
    version: u64,
}

impl<K> Watched for OwnedWatch<K>
where
    K: Keep + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::Body: Send + Sync,
{
    type Source = K;
    type Kept = Kept<K>;
    type Hold = Arc<Kept<K>>;

    fn table(&self) -> &Records<K> {
        &self.records
    }

    fn keep(&mut self, obj: K) -> Kept<K> {
        self.version = own_writes::version(obj.meta());
        Kept::new(obj)
    }

    fn key(&self, obj: &Kept<K>) -> Option<String> {
        (self.key)(obj)
    }

    fn changed(&self, event: &watcher::Event<Kept<K>>) -> bool {
        changed_by(&self.records, event, |old, new| old != new)
    }

    fn after(&mut self, event: &watcher::Event<Kept<K>>) {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                self.own.objects.observe(obj, self.version);
            }
            // A deleted object is forgotten: one made again by someone else (while the watch
            // was down, say) is not taken for the operator's, and the records do not grow with
            // Site churn.
            watcher::Event::Delete(obj) => self.own.objects.forget::<K>(obj.name()),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

/// Starts the watch of an owned kind (`key`: the Site an object queues) and returns its records.
fn watch_owned<K>(
    api: Api<K>,
    feed: &Feed,
    key: fn(&Kept<K>) -> Option<String>,
    own: Arc<OwnWrites>,
) -> Records<K>
where
    K: Keep + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::Body: Send + Sync,
{
    let records = Records::<K>::default();
    run(
        OwnedWatch {
            records: records.clone(),
            key,
            own,
            version: 0,
        },
        api,
        list_config(),
        feed,
    );
    records
}

/// Whether a watch event changes its object as `differs(cached, new)` judges it (kept copies are
/// slimmed: an update of a status field, an annotation or the resourceVersion that the
/// reconcile never reads leaves them equal): a new object (no cached copy) and a deletion
/// always do.
fn changed_by<K>(
    cache: &impl Cache<K>,
    event: &watcher::Event<K>,
    differs: fn(&K, &K) -> bool,
) -> bool {
    match event {
        watcher::Event::Apply(new) | watcher::Event::InitApply(new) => {
            cache.cached(new).is_none_or(|old| differs(&old, new))
        }
        _ => true,
    }
}

/// Starts the watch `w` of `api`: each object kept as [`Watched::keep`] makes it in its table,
/// and the keys of the events that [`Watched::changed`] fed into the queue.
///
/// An object deleted during a watch gap leaves no Delete event: the re-list that follows just
/// leaves it out. When the re-list is done, every cached object it did not deliver is judged as
/// deleted (`changed` with a Delete event) and its key queued, so what was deleted in the gap is
/// repaired (`after` sees that Delete too). The keys of a re-list are queued once the cache holds
/// it, as client-go's informers replace their store before they notify.
fn run<W: Watched>(mut w: W, api: Api<W::Source>, config: watcher::Config, feed: &Feed)
where
    <W::Source as Resource>::DynamicType: Default,
{
    let kind = W::Source::kind(&Default::default()).into_owned();
    let triggered = feed.triggers.with_label_values(&[&kind]);
    let queue = feed.queue.clone();
    let lists = feed.lists.clone();
    let stream = watcher(api, config).default_backoff();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        // The first list waits for its turn, which ends with the list or with the first error
        // (a kind the operator may not list must not hold the others back). Re-lists after a
        // watch gap take no turn.
        let mut turn = lists.acquire_owned().await.ok();
        // During a re-list (Init .. InitDone): the objects it delivered so far, and the keys to
        // queue once the cache holds the re-listed objects (a reconcile before that would read
        // the copies from before the re-list, and nothing would queue the key again).
        let mut relist: Option<(HashSet<Box<str>>, Vec<String>)> = None;
        while let Some(item) = stream.next().await {
            let event = match item {
                Ok(event) => kept_event(event, |obj| w.keep(obj)),
                Err(e) => {
                    turn.take();
                    w.table().watch_failed();
                    tracing::warn!(%kind, error = %e, "watch error; retrying");
                    continue;
                }
            };
            let relevant = w.changed(&event);
            let mut keys = Vec::new();
            match &event {
                watcher::Event::Init => relist = Some((HashSet::new(), Vec::new())),
                watcher::Event::InitApply(obj) => {
                    let (seen, later) = relist.get_or_insert_default();
                    seen.insert(obj.name().into());
                    if relevant {
                        later.extend(w.key(obj));
                    }
                }
                watcher::Event::InitDone => {
                    turn.take();
                    let (seen, later) = relist.take().unwrap_or_default();
                    keys = later;
                    // One object at a time: a packed cache decodes each one it returns.
                    for id in w.table().ids() {
                        if seen.contains(&id) {
                            continue;
                        }
                        let Some(obj) = w.table().get_id(&id) else {
                            continue;
                        };
                        let gone = watcher::Event::Delete(obj.as_ref().clone());
                        if w.changed(&gone) {
                            keys.extend(w.key(&obj));
                        }
                        w.after(&gone);
                    }
                }
                watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                    if relevant {
                        keys.extend(w.key(obj));
                    }
                }
            }
            w.table().apply(&event);
            w.after(&event);
            for k in keys {
                triggered.inc();
                queue.add(k.into());
            }
        }
    });
}

/// A watch event with its objects as the cache keeps them.
fn kept_event<S, K>(event: watcher::Event<S>, mut keep: impl FnMut(S) -> K) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(keep(obj)),
        watcher::Event::Delete(obj) => watcher::Event::Delete(keep(obj)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(keep(obj)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The watch of the Sites: the Site table and its index by public path. An event queues its
/// Site when [`site_event_matters`]; a Site leaving a public path queues the others of that path.
fn watch_sites(
    client: &kube::Client,
    ns: &str,
    feed: &Feed,
    own: Arc<OwnWrites>,
) -> (Sites, Index<Site, Sites>) {
    let w = SiteWatch {
        sites: Sites::default(),
        by_path: Index::new(index::site_path_keys),
        own,
        queue: feed.queue.clone(),
    };
    let caches = (w.sites.clone(), w.by_path.clone());
    run(w, Api::namespaced(client.clone(), ns), list_config(), feed);
    caches
}

struct SiteWatch {
    sites: Sites,
    by_path: Index<Site, Sites>,
    own: Arc<OwnWrites>,
    queue: Queue<Arc<str>>,
}

impl Watched for SiteWatch {
    type Source = Site;
    type Kept = Site;
    type Hold = Packed<Site>;

    fn table(&self) -> &Sites {
        &self.sites
    }

    fn keep(&mut self, mut s: Site) -> Site {
        kept::site(&mut s);
        s
    }

    fn key(&self, s: &Site) -> Option<String> {
        s.metadata.name.clone()
    }

    fn changed(&self, event: &watcher::Event<Site>) -> bool {
        site_event_matters(
            &self.sites,
            event,
            &self.own.statuses,
            (&self.by_path, &self.queue),
        )
    }

    fn after(&mut self, event: &watcher::Event<Site>) {
        self.by_path.observe(event);
        // Once the cache holds it: a reconcile that finds its status write shown finds it in
        // the cache.
        if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = event {
            let relisted = matches!(event, watcher::Event::InitApply(_));
            self.own
                .statuses
                .observe(&s.name_any(), s.status.as_ref(), relisted);
        }
    }
}

/// Whether a Site watch event queues its Site (a change the reconcile acts on, or a status the
/// operator did not write); logs what an edit changed; queues the other Sites of a public path
/// the Site leaves.
fn site_event_matters(
    before: &Sites,
    event: &watcher::Event<Site>,
    written: &Statuses,
    (index, queue): (&Index<Site, Sites>, &Queue<Arc<str>>),
) -> bool {
    // A re-list (after a watch gap) delivers every Site again as InitApply while the store
    // still holds the previous copies: judged like an update, so only what changed in the gap
    // is queued.
    let old = match event {
        watcher::Event::Apply(new) | watcher::Event::InitApply(new) => before.cached(new),
        watcher::Event::Delete(gone) => Some(Arc::new(gone.clone())),
        _ => None,
    };
    if let watcher::Event::Apply(new) = event
        && let Some(old) = &old
        && changes::site_edited(old, new)
    {
        let view = |s: &Site| serde_json::json!({"metadata": {"annotations": s.metadata.annotations, "labels": s.metadata.labels}, "spec": s.spec});
        changes::log_site_changes(&new.name_any(), &view(old), &view(new));
    }
    let relevant = match (event, &old) {
        (watcher::Event::Apply(new) | watcher::Event::InitApply(new), Some(old)) => {
            changes::site_changed(old, new)
                || (old.status != new.status
                    && !written.is_ours(&new.name_any(), new.status.as_ref()))
        }
        (watcher::Event::Delete(gone), _) => {
            written.forget(&gone.name_any());
            true
        }
        _ => true,
    };
    // A Site leaving a public path (deleted, moved, being deleted) frees it: the other Sites of
    // that path are reconciled, so the next one gets the route now.
    if let Some(old) = old {
        let left = match event {
            watcher::Event::Apply(new) | watcher::Event::InitApply(new) => {
                new.metadata.deletion_timestamp.is_some()
                    || index::path_key(new) != index::path_key(&old)
            }
            _ => true,
        };
        if left {
            for other in index.get(before, &index::path_key(&old)) {
                if other.metadata.name != old.metadata.name {
                    queue.add(other.name_any().into());
                }
            }
        }
    }
    relevant
}

/// What the watches of the owned kinds share.
struct Watch<'a> {
    client: &'a kube::Client,
    ns: &'a str,
    feed: &'a Feed,
    own: &'a Arc<OwnWrites>,
}

impl Watch<'_> {
    /// The watch of an owned kind the operator labels: an event queues the Site of the label.
    fn labelled<K: Owned>(&self) -> Records<K> {
        let api = Api::namespaced(self.client.clone(), self.ns);
        watch_owned(api, self.feed, owned_key, self.own.clone())
    }

    /// The watch of a route kind, unfiltered: a same-named route of another owner must be seen
    /// to be left alone (RTG-03).
    fn routes<K: Owned>(&self) -> Records<K> {
        let api = Api::namespaced(self.client.clone(), self.ns);
        watch_owned(api, self.feed, route_key, self.own.clone())
    }
}

/// The HTTPRoutes, watched (unfiltered, as Ingresses) from the start when the cluster serves
/// the Gateway API, else from the first reconcile that needs them.
async fn watch_http_routes(
    client: &kube::Client,
    ns: &str,
    feed: &Feed,
    own: Arc<OwnWrites>,
) -> HttpRoutes {
    let httproutes = HttpRoutes::new(Arc::new({
        let (client, ns, feed) = (client.clone(), ns.to_string(), feed.clone());
        move || {
            watch_owned(
                Api::<HttpRoute>::namespaced(client.clone(), &ns),
                &feed,
                route_key,
                own.clone(),
            )
        }
    }));
    if caches::serves_http_routes(client, ns).await {
        httproutes.start();
    } else {
        tracing::info!("the cluster does not serve gateway.networking.k8s.io/v1 HTTPRoutes");
    }
    httproutes
}

/// The watch of the site pods (by the id label), kept as resolved `SitePod`s, and their index
/// by site: a pod event queues its Site when the resolved pod changed.
fn watch_site_pods(
    client: &kube::Client,
    ns: &str,
    feed: &Feed,
) -> (Table<SitePod>, Index<SitePod, Table<SitePod>>) {
    let w = PodWatch {
        pods: Table::default(),
        by_site: Index::new(index::pod_keys),
    };
    let caches = (w.pods.clone(), w.by_site.clone());
    let api = Api::namespaced(client.clone(), ns);
    run(w, api, list_config().labels(ID_LABEL), feed);
    caches
}

struct PodWatch {
    pods: Table<SitePod>,
    by_site: Index<SitePod, Table<SitePod>>,
}

impl Watched for PodWatch {
    type Source = Pod;
    type Kept = SitePod;
    type Hold = Arc<SitePod>;

    fn table(&self) -> &Table<SitePod> {
        &self.pods
    }

    fn keep(&mut self, p: Pod) -> SitePod {
        kept::pod(&p)
    }

    fn key(&self, p: &SitePod) -> Option<String> {
        index::pod_keys(p).pop()
    }

    fn changed(&self, event: &watcher::Event<SitePod>) -> bool {
        changed_by(&self.pods, event, |old, new| old != new)
    }

    fn after(&mut self, event: &watcher::Event<SitePod>) {
        self.by_site.observe(event);
    }
}

/// The watch of the StatefulSets' `FailedCreate` Events (the controller manager's, on a pod it
/// could not create): an Event queues the site whose StatefulSet it names, so that its status
/// says why its pods do not exist.
fn watch_failed_creates(client: &kube::Client, ns: &str, feed: &Feed) -> Table<FailedCreate> {
    let failed = Table::<FailedCreate>::default();
    let api = Api::namespaced(client.clone(), ns);
    let config = list_config().fields(status::FAILED_CREATE_EVENTS);
    run(FailedCreateWatch(failed.clone()), api, config, feed);
    failed
}

struct FailedCreateWatch(Table<FailedCreate>);

impl Watched for FailedCreateWatch {
    type Source = k8s_openapi::api::core::v1::Event;
    type Kept = FailedCreate;
    type Hold = Arc<FailedCreate>;

    fn table(&self) -> &Table<FailedCreate> {
        &self.0
    }

    fn keep(&mut self, e: Self::Source) -> FailedCreate {
        FailedCreate::of(&e)
    }

    fn key(&self, f: &FailedCreate) -> Option<String> {
        Some(f.statefulset.to_string())
    }

    fn changed(&self, event: &watcher::Event<FailedCreate>) -> bool {
        changed_by(&self.0, event, |old, new| old != new)
    }
}

/// The watch of the volumes (cluster-wide) and their index by site: an event matters to the
/// site a volume is labelled or claimed for.
fn watch_volumes(client: &kube::Client, feed: &Feed) -> (Volumes, Index<Volume, Volumes>) {
    let w = VolumeWatch {
        volumes: Volumes::default(),
        by_site: Index::new(volumes::volume_keys),
    };
    let caches = (w.volumes.clone(), w.by_site.clone());
    run(w, Api::all(client.clone()), list_config(), feed);
    caches
}

struct VolumeWatch {
    volumes: Volumes,
    by_site: Index<Volume, Volumes>,
}

impl Watched for VolumeWatch {
    type Source = Volume;
    type Kept = Volume;
    type Hold = Packed<Volume>;

    fn table(&self) -> &Volumes {
        &self.volumes
    }

    fn keep(&mut self, mut v: Volume) -> Volume {
        kept::volume(&mut v);
        v
    }

    fn key(&self, pv: &Volume) -> Option<String> {
        key_of(pv).or_else(|| {
            let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
            claim.name.clone()
        })
    }

    fn changed(&self, event: &watcher::Event<Volume>) -> bool {
        changed_by(&self.volumes, event, changes::volume_changed)
    }

    fn after(&mut self, event: &watcher::Event<Volume>) {
        self.by_site.observe(event);
    }
}

async fn wait_synced(c: &Caches) {
    let _ = c.sites.wait_until_ready().await;
    let _ = c.secrets.wait_until_ready().await;
    let _ = c.configmaps.wait_until_ready().await;
    let _ = c.pvcs.wait_until_ready().await;
    let _ = c.statefulsets.wait_until_ready().await;
    let _ = c.services.wait_until_ready().await;
    let _ = c.ingresses.wait_until_ready().await;
    c.httproutes.synced().await;
    let _ = c.pods.wait_until_ready().await;
    let _ = c.volumes.wait_until_ready().await;
}
