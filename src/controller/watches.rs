//! The watches of the controller: one per kind it reads, each filling a cache (a
//! [`Table`] or [`Records`]) and, where a reconcile looks objects up by
//! site, an [`Index`]; every event that changes what the cache keeps queues the key of its Site
//! (the Site's name, from the id label of an owned object or pod).
//!
//! Watched in the platform namespace: Sites (queued when [`site_event_matters`]), the objects of
//! the owned kinds (every object, not only the operator's: an object of an owned name that the
//! Site does not control must be seen to be left alone, SPEC 4.6; each one shown to the drift
//! [`Fingerprints`]), site pods as [`SitePod`]s (selected by the id label), the StatefulSets'
//! `FailedCreate` Events, HTTPRoutes when the cluster serves them; cluster-wide, the
//! PersistentVolumes.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use gateway_api::apis::standard::httproutes::HttpRoute;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use prometheus::IntCounterVec;

use crate::controller::cache::index::{self, Index};
use crate::controller::cache::kept::{self, Keep, Kept, Owned};
use crate::controller::cache::table::{Cache, Records, Sites, Table, Volumes};
use crate::controller::context::{self, Caches, HttpRoutes, WrittenStatuses};
use crate::controller::fingerprints::{self, Fingerprints};
use crate::controller::queue::Queue;
use crate::controller::status::{self, FailedCreate, SitePod};
use crate::controller::{changes, volumes};
use crate::crd::{ID_LABEL, Site};
use crate::watched::{Pod, Volume};

/// Starts every watch and returns the caches they fill once each has made its first list
/// (synced). `statuses` tells the Site watch which statuses the operator wrote; `prints` is
/// shown every object of the owned kinds the watches deliver.
pub(super) async fn start(
    client: &kube::Client,
    ns: &str,
    queue: &Queue<Arc<str>>,
    triggers: IntCounterVec,
    statuses: Arc<WrittenStatuses>,
    prints: &Arc<Fingerprints>,
) -> Caches {
    let feed = Feed {
        queue: queue.clone(),
        triggers,
        lists: Arc::new(tokio::sync::Semaphore::new(LISTS_AT_ONCE)),
    };
    let (sites, sites_by_path) = watch_sites(client, ns, &feed, statuses);
    let (pods, pods_by_site) = watch_site_pods(client, ns, &feed);
    let (volumes, volumes_by_site) = watch_volumes(client, &feed);
    let failed_creates = watch_failed_creates(client, ns, &feed);
    let owned = Watch {
        client,
        ns,
        feed: &feed,
        prints,
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
        httproutes: watch_http_routes(client, ns, &feed, prints.clone()).await,
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

/// [`watch_kind_observed`] for an owned kind, kept as [`Kept`] records: every object the watch
/// delivers is shown to the drift fingerprints (the cache has caught up with the operator's own
/// write once it shows it).
fn watch_owned<K>(
    api: Api<K>,
    feed: &Feed,
    key: impl Fn(&Kept<K>) -> Option<String> + Send + Sync + 'static,
    prints: Arc<Fingerprints>,
) -> Records<K>
where
    K: Keep + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::Body: Send + Sync,
{
    // The version is taken before the record is made, which drops it, and shown to the
    // fingerprints only once the records hold the object: a reconcile that learns its write
    // was seen must find that write (or a later version) in the cache. The stream passes one
    // event through every stage before it pulls the next, so one slot carries the version
    // between the stages. (The objects of a re-list enter the cache together at its end but are
    // shown as they arrive: a write seen only through a re-list may be repeated once.)
    let version = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let taken = version.clone();
    let records = Records::<K>::default();
    let writer = records.clone();
    watch_kind_observed(
        api,
        list_config(),
        feed,
        move |obj: K| {
            taken.store(
                fingerprints::version(obj.meta()),
                std::sync::atomic::Ordering::Relaxed,
            );
            Kept::new(obj)
        },
        records.clone(),
        move |event| writer.apply(event),
        key,
        changed,
        move |event: &watcher::Event<Kept<K>>| match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                prints.observe(obj, version.load(std::sync::atomic::Ordering::Relaxed));
            }
            // A deleted object is forgotten: one made again by someone else (while the watch
            // was down, say) is not taken for the operator's, and the records do not grow with
            // Site churn.
            watcher::Event::Delete(obj) => prints.forget::<K>(obj.name()),
            watcher::Event::Init | watcher::Event::InitDone => {}
        },
    );
    records
}

/// Whether a watch event changes what the cache keeps of its object (kept copies are slimmed:
/// an update of a status field, an annotation or the resourceVersion that the reconcile never
/// reads leaves them equal). Events that change nothing are not queued.
fn changed<K: PartialEq>(cache: &impl Cache<K>, event: &watcher::Event<K>) -> bool {
    changed_by(cache, event, |old, new| old != new)
}

/// Whether a watch event changes its object as `differs(cached, new)` judges it: a new object
/// (no cached copy) and a deletion always do.
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

/// Starts a watch of `api` that keeps each object as `keep` makes it in `cache` (`store` applies
/// an event to it) and feeds the keys of touched objects into the queue. Calls `before(cache,
/// event)` with every watch event before the cache applies it (the cache still holds the
/// previous version): false keeps the event's key out of the queue (the event cannot change what
/// a reconcile does); and `after(event)` once the cache applied it.
///
/// An object deleted during a watch gap leaves no Delete event: the re-list that follows just
/// leaves it out. When the re-list is done, every cached object it did not deliver is judged as
/// deleted (`before` with a Delete event) and its key queued, so what was deleted in the gap is
/// repaired (`after` sees that Delete too). The keys of a re-list are queued once the cache holds
/// it, as client-go's informers replace their store before they notify.
#[allow(clippy::too_many_arguments)]
fn watch_kind_observed<S, K, C>(
    api: Api<S>,
    config: watcher::Config,
    feed: &Feed,
    mut keep: impl FnMut(S) -> K + Send + 'static,
    cache: C,
    mut store: impl FnMut(&watcher::Event<K>) + Send + 'static,
    key: impl Fn(&K) -> Option<String> + Send + Sync + 'static,
    before: impl Fn(&C, &watcher::Event<K>) -> bool + Send + 'static,
    after: impl Fn(&watcher::Event<K>) + Send + 'static,
) where
    S: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    S::DynamicType: Default,
    K: Clone + std::fmt::Debug + Send + Sync + 'static,
    C: Cache<K>,
{
    let kind = S::kind(&S::DynamicType::default()).into_owned();
    let triggered = feed.triggers.with_label_values(&[&kind]);
    let queue = feed.queue.clone();
    let lists = feed.lists.clone();
    let stream = watcher(api, config)
        .default_backoff()
        .map_ok(move |event| kept_event(event, &mut keep));
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        // The first list waits for its turn, which ends with the list or with the first error
        // (a kind the operator may not list must not hold the others back). Re-lists after a
        // watch gap take no turn.
        let mut turn = lists.acquire_owned().await.ok();
        // During a re-list (Init .. InitDone): the objects it delivered so far, and the keys to
        // queue once the cache holds the re-listed objects (a reconcile before that would read
        // the copies from before the re-list, and nothing would queue the key again).
        let mut relist: Option<(HashSet<C::Id>, Vec<String>)> = None;
        while let Some(item) = stream.next().await {
            let event = match item {
                Ok(event) => event,
                Err(e) => {
                    turn.take();
                    cache.watch_failed();
                    tracing::warn!(%kind, error = %e, "watch error; retrying");
                    continue;
                }
            };
            let relevant = before(&cache, &event);
            let mut keys = Vec::new();
            match &event {
                watcher::Event::Init => relist = Some((HashSet::new(), Vec::new())),
                watcher::Event::InitApply(obj) => {
                    let (seen, later) = relist.get_or_insert_default();
                    seen.insert(C::id(obj));
                    if relevant {
                        later.extend(key(obj));
                    }
                }
                watcher::Event::InitDone => {
                    turn.take();
                    let (seen, later) = relist.take().unwrap_or_default();
                    keys = later;
                    // One object at a time: a packed cache decodes each one it returns.
                    for id in cache.ids() {
                        if seen.contains(&id) {
                            continue;
                        }
                        let Some(obj) = cache.get_id(&id) else {
                            continue;
                        };
                        let gone = watcher::Event::Delete(obj.as_ref().clone());
                        if before(&cache, &gone) {
                            keys.extend(key(&obj));
                        }
                        after(&gone);
                    }
                }
                watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                    if relevant {
                        keys.extend(key(obj));
                    }
                }
            }
            store(&event);
            after(&event);
            for k in keys {
                triggered.inc();
                queue.add(k.into());
            }
        }
    });
}

/// A watch event with its objects as the cache keeps them.
fn kept_event<S, K>(event: watcher::Event<S>, keep: &mut impl FnMut(S) -> K) -> watcher::Event<K> {
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
    written: Arc<WrittenStatuses>,
) -> (Sites, Index<Site, Sites>) {
    let sites_by_path = Index::new(index::site_path_keys);
    let path_index = sites_by_path.clone();
    let sharers = (sites_by_path.clone(), feed.queue.clone());
    let sites = Sites::default();
    let writer = sites.clone();
    watch_kind_observed(
        Api::<Site>::namespaced(client.clone(), ns),
        list_config(),
        feed,
        |mut s: Site| {
            kept::site(&mut s);
            s
        },
        sites.clone(),
        move |event| writer.apply(event),
        |s: &Site| s.metadata.name.clone(),
        {
            let written = written.clone();
            move |before: &Sites, event: &watcher::Event<Site>| {
                site_event_matters(before, event, &written, &sharers)
            }
        },
        move |event: &watcher::Event<Site>| {
            path_index.observe(event);
            // Once the cache holds it: a reconcile that finds its status write shown finds it
            // in the cache.
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = event {
                let relisted = matches!(event, watcher::Event::InitApply(_));
                written.observe(&s.name_any(), s.status.as_ref(), relisted);
            }
        },
    );
    (sites, sites_by_path)
}

/// Whether a Site watch event queues its Site (a change the reconcile acts on, or a status the
/// operator did not write); logs what an edit changed; queues the other Sites of a public path
/// the Site leaves.
fn site_event_matters(
    before: &Sites,
    event: &watcher::Event<Site>,
    written: &WrittenStatuses,
    (index, queue): &(Index<Site, Sites>, Queue<Arc<str>>),
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
    prints: &'a Arc<Fingerprints>,
}

impl Watch<'_> {
    /// The watch of an owned kind the operator labels: an event queues the Site of the label.
    fn labelled<K: Owned>(&self) -> Records<K> {
        let api = Api::namespaced(self.client.clone(), self.ns);
        watch_owned(api, self.feed, owned_key, self.prints.clone())
    }

    /// The watch of a route kind, unfiltered: a same-named route of another owner must be seen
    /// to be left alone (RTG-03).
    fn routes<K: Owned>(&self) -> Records<K> {
        let api = Api::namespaced(self.client.clone(), self.ns);
        watch_owned(api, self.feed, route_key, self.prints.clone())
    }
}

/// The HTTPRoutes, watched (unfiltered, as Ingresses) from the start when the cluster serves
/// the Gateway API, else from the first reconcile that needs them.
async fn watch_http_routes(
    client: &kube::Client,
    ns: &str,
    feed: &Feed,
    prints: Arc<Fingerprints>,
) -> HttpRoutes {
    let httproutes = HttpRoutes::new(Arc::new({
        let (client, ns, feed) = (client.clone(), ns.to_string(), feed.clone());
        move || {
            watch_owned(
                Api::<HttpRoute>::namespaced(client.clone(), &ns),
                &feed,
                route_key,
                prints.clone(),
            )
        }
    }));
    if context::serves_http_routes(client, ns).await {
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
    let pods_by_site = Index::new(index::pod_keys);
    let index = pods_by_site.clone();
    let pods = Table::<SitePod>::default();
    let writer = pods.clone();
    watch_kind_observed(
        Api::<Pod>::namespaced(client.clone(), ns),
        list_config().labels(ID_LABEL),
        feed,
        |p: Pod| kept::pod(&p),
        pods.clone(),
        move |event| writer.apply(event),
        |p: &SitePod| index::pod_keys(p).pop(),
        changed,
        move |event: &watcher::Event<SitePod>| index.observe(event),
    );
    (pods, pods_by_site)
}

/// The watch of the StatefulSets' `FailedCreate` Events (the controller manager's, on a pod it
/// could not create): an Event queues the site whose StatefulSet it names, so that its status
/// says why its pods do not exist.
fn watch_failed_creates(client: &kube::Client, ns: &str, feed: &Feed) -> Table<FailedCreate> {
    let failed = Table::<FailedCreate>::default();
    let writer = failed.clone();
    watch_kind_observed(
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns),
        list_config().fields(status::FAILED_CREATE_EVENTS),
        feed,
        |e| FailedCreate::of(&e),
        failed.clone(),
        move |event| writer.apply(event),
        |f: &FailedCreate| Some(f.statefulset.to_string()),
        changed,
        |_: &watcher::Event<FailedCreate>| {},
    );
    failed
}

/// The watch of the volumes (cluster-wide) and their index by site: an event matters to the
/// site a volume is labelled or claimed for.
fn watch_volumes(client: &kube::Client, feed: &Feed) -> (Volumes, Index<Volume, Volumes>) {
    let volumes_by_site = Index::new(volumes::volume_keys);
    let index = volumes_by_site.clone();
    let volumes = Volumes::default();
    let writer = volumes.clone();
    watch_kind_observed(
        Api::<Volume>::all(client.clone()),
        list_config(),
        feed,
        |mut v: Volume| {
            kept::volume(&mut v);
            v
        },
        volumes.clone(),
        move |event| writer.apply(event),
        |pv: &Volume| {
            key_of(pv).or_else(|| {
                let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
                claim.name.clone()
            })
        },
        |store: &Volumes, event: &watcher::Event<Volume>| {
            changed_by(store, event, changes::volume_changed)
        },
        move |event: &watcher::Event<Volume>| index.observe(event),
    );
    (volumes, volumes_by_site)
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
