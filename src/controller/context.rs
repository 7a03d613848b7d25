//! What every reconcile shares: the client, the platform configuration, the caches the watches
//! keep warm, the Event recorder, and the few values read from the cluster that are not Site
//! objects (the session key, the master Ingress's host), cached for a minute.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::Api;

use crate::config::live::Live;
use crate::config::{Routing, RoutingMode, SecretKeyRef};
use crate::controller::cache::kept::{Kept, Owned};
use crate::controller::caches::Caches;
use crate::controller::events::Recorder;
use crate::controller::labeller::Labeller;
use crate::controller::own_writes::OwnWrites;
use crate::controller::rollout::Rollouts;
use crate::{Error, Result, Target};

/// How long the session key and the master Ingress host are cached.
const LOOKUP_TTL: Duration = Duration::from_secs(60);

/// Tunables of the reconciler (tests shorten the delays).
#[derive(Clone, Debug)]
pub struct Tunables {
    /// Jitter range of the delayed PV label patch.
    pub pv_label_delay: (Duration, Duration),
    /// How often a reconcile in gateway mode may ask a cluster that did not serve HTTPRoutes
    /// whether it does now.
    pub gateway_probe: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            pv_label_delay: (Duration::from_secs(20), Duration::from_secs(40)),
            gateway_probe: Duration::from_secs(10),
        }
    }
}

/// A value read from the cluster, when, and for which reference.
type Cached<R, T> = Mutex<Option<(Instant, R, T)>>;

/// Everything a reconcile needs.
pub struct Context {
    pub client: kube::Client,
    /// The configuration in force; a reconcile takes it once ([`Live::get`]).
    pub config: Live,
    pub namespace: String,
    pub caches: Caches,
    pub recorder: Option<Recorder>,
    pub tunables: Tunables,
    session_key: Cached<SecretKeyRef, Vec<u8>>,
    master_host: Cached<(), Option<String>>,
    /// The schedule of the delayed volume labels.
    pub(crate) labeller: Labeller,
    /// The record of the operator's own writes: what it last wrote of each owned object (drift
    /// detection) and to each Site's status (a status edited by someone else is repaired).
    pub(crate) own: Arc<OwnWrites>,
    /// The change budget of platform-wide rollouts ([`crate::controller::rolling`]).
    pub(crate) rollouts: Mutex<Rollouts>,
    /// Where the clock comes from (tests may pin it).
    pub now: fn() -> Time,
}

fn system_now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// `time` without its fraction of a second.
fn whole_seconds(time: Time) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(time.0.as_second()).unwrap_or(time.0))
}

impl Context {
    /// The time conditions carry, in whole seconds as the API server stores them: a status with
    /// a fraction of a second would never equal its stored copy.
    pub(crate) fn status_time(&self) -> Time {
        whole_seconds((self.now)())
    }

    pub fn new(
        client: kube::Client,
        config: Live,
        namespace: String,
        caches: Caches,
        recorder: Option<Recorder>,
        tunables: Tunables,
    ) -> Context {
        // A new leader's first pass over the Sites is a rollout of its rendering.
        let rollouts = Rollouts::new(
            crate::controller::rollout::version(&config.get()),
            caches.sites.names(),
        );
        Context {
            client,
            config,
            namespace,
            caches,
            recorder,
            tunables,
            session_key: Mutex::new(None),
            master_host: Mutex::new(None),
            labeller: Labeller::default(),
            own: Default::default(),
            rollouts: Mutex::new(rollouts),
            now: system_now,
        }
    }

    /// The API of a namespaced kind in the operator's namespace.
    pub(crate) fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The object `name` from the API server itself (the cache may lag behind a write made a
    /// moment ago).
    pub(crate) async fn read<K>(&self, name: &str) -> Result<Option<Arc<K>>>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>()
            .get_opt(name)
            .await
            .map(|o| o.map(Arc::new))
            .map_err(|source| Error::Read {
                target: Target::of::<K>(name),
                source: Box::new(source),
            })
    }

    /// [`Context::read`], kept as the caches keep it.
    pub(crate) async fn read_kept<K>(&self, name: &str) -> Result<Option<Arc<Kept<K>>>>
    where
        K: Owned,
    {
        Ok(self
            .read::<K>(name)
            .await?
            .map(|obj| Arc::new(Kept::new(Arc::unwrap_or_clone(obj)))))
    }

    /// The platform session key that `reference` (the configuration's) names, cached for a
    /// minute.
    pub(crate) async fn session_key(&self, reference: &SecretKeyRef) -> Result<Vec<u8>> {
        if let Some(key) = fresh(&self.session_key, reference) {
            return Ok(key);
        }
        let secret = self.read::<Secret>(&reference.secret_name).await?;
        let key = secret
            .and_then(|s| s.data.as_ref()?.get(&reference.key).cloned())
            .map(|b| b.0)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| Error::SessionKeyMissing {
                namespace: self.namespace.clone(),
                name: reference.secret_name.clone(),
                key: reference.key.clone(),
            })?;
        remember(&self.session_key, reference.clone(), key.clone());
        Ok(key)
    }

    /// `routing.host`, or in ingress mode the first rule host of the master Ingress.
    pub(crate) async fn public_host(&self, routing: &Routing) -> Result<Option<String>> {
        if let Some(host) = routing.host.clone() {
            return Ok(Some(host));
        }
        if routing.mode != RoutingMode::Ingress {
            return Ok(None);
        }
        if let Some(host) = fresh(&self.master_host, &()) {
            return Ok(host);
        }
        let master = self.read::<Ingress>(crate::labels::MASTER_INGRESS).await?;
        let host = master.and_then(|i| i.spec.as_ref()?.rules.as_ref()?.first()?.host.clone());
        remember(&self.master_host, (), host.clone());
        Ok(host)
    }
}

/// The cached value, if it was read for `reference` less than [`LOOKUP_TTL`] ago.
fn fresh<R: PartialEq, T: Clone>(cell: &Cached<R, T>, reference: &R) -> Option<T> {
    cell.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|(at, r, _)| at.elapsed() < LOOKUP_TTL && r == reference)
        .map(|(_, _, v)| v.clone())
}

fn remember<R, T>(cell: &Cached<R, T>, reference: R, value: T) {
    *cell.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), reference, value));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A condition's time equals its stored copy: the API server keeps whole seconds (RFC 3339
    /// without a fraction), and a status that differs from its stored copy only by a fraction
    /// would be written again by the next reconcile that reads the stored one.
    #[test]
    fn status_times_are_whole_seconds_as_stored() {
        let time = Time("2026-12-08T01:02:03.456789Z".parse().unwrap());
        let whole = whole_seconds(time);
        assert_eq!(whole.0.to_string(), "2026-12-08T01:02:03Z");
        let stored: Time = serde_json::from_value(serde_json::to_value(&whole).unwrap()).unwrap();
        assert_eq!(stored, whole);
        assert_eq!(whole_seconds(whole.clone()), whole);
    }
}
