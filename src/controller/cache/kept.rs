//! What the caches keep of each kind: only what the reconciler reads.
//!
//! Objects of the owned kinds (Secrets, ConfigMaps, claims, StatefulSets, Services, routes) are
//! kept as [`Kept`] records, not as Kubernetes objects: their name, the [`Facts`] the reconciler
//! decides from (who controls the object, whether it is up to date with a rendering, the
//! fingerprint of the content the operator manages, SPEC 4.6) as numbers where only equality
//! matters, and the little content a kind reads back ([`Keep::Body`]). At 10,000 Sites the label
//! and annotation maps of whole cached objects were most of the operator's memory.
//!
//! Sites, pods and volumes stay Kubernetes objects, slimmed ([`site`], [`pod`], [`volume`]).

use std::collections::BTreeMap;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, PersistentVolumeClaimSpec, Secret, Service,
    VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::controller::cache::held::{self, Held};
use crate::controller::status::SitePod;
use crate::crd::{OPERATOR_BOUND_ANNOTATION, Site};
use crate::digest::hashed;
use crate::labels::{self, LABEL_KEYS, LAST_APPLIED_ANNOTATION, TEMPLATE_HASH_ANNOTATION};
use crate::ownership::{self, ControllerRef, Ownership};
use crate::watched::{Pod, Volume};

/// Prefix of the annotations the operator reads back from objects it owns.
const OWN_ANNOTATIONS: &str = "sites.ecmwf.int/";

/// A map the operator renders whole ([`Managed::WHOLE`]): every key of it in a stored object
/// that the rendering does not have is someone else's, and is removed (`apply::foreign_keys`);
/// a rendering without the map renders it empty.
pub struct Whole {
    /// Where the map is, by field names.
    pub path: &'static [&'static str],
    /// Which of its keys are the operator's to render (a map of which the operator renders
    /// only some keys, such as annotations).
    pub keys: fn(&str) -> bool,
}

/// Every key of a map.
fn every(_: &str) -> bool {
    true
}

/// The content of an owned kind that the operator manages and an edit by anyone else would
/// change: data, or the spec (status is never part of it; neither are fields other controllers
/// own, such as a claim's bound volume).
pub trait Managed {
    fn managed_content(&self) -> serde_json::Value;
    /// The maps this kind renders whole: what reaches the site's pods or routes from them is
    /// only ever the rendering (SPEC 4.6): a ConfigMap's `data` and `binaryData`, a Secret's
    /// `data`, a Service's selector, the Ingress annotations the ingress controller reads as
    /// its configuration.
    const WHOLE: &'static [Whole] = &[];
    /// The maps of [`Managed::WHOLE`] as this object has them (absent: empty), only the keys
    /// each map's `keys` takes ([`whole_print`]).
    fn whole_content(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The keys of a string map that `keys` takes, the map absent taken as empty.
fn whole_map<V: serde::Serialize>(
    map: Option<&BTreeMap<String, V>>,
    keys: fn(&str) -> bool,
) -> serde_json::Value {
    let kept: BTreeMap<&String, &V> = map.into_iter().flatten().filter(|(k, _)| keys(k)).collect();
    serde_json::to_value(kept).unwrap_or_default()
}

impl Managed for Secret {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::json!({"type": self.type_, "data": self.data})
    }
    const WHOLE: &'static [Whole] = &[Whole {
        path: &["data"],
        keys: every,
    }];
    fn whole_content(&self) -> serde_json::Value {
        serde_json::json!([whole_map(self.data.as_ref(), every)])
    }
}

impl Managed for ConfigMap {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::json!({"data": self.data, "binaryData": self.binary_data})
    }
    const WHOLE: &'static [Whole] = &[
        Whole {
            path: &["data"],
            keys: every,
        },
        Whole {
            path: &["binaryData"],
            keys: every,
        },
    ];
    fn whole_content(&self) -> serde_json::Value {
        serde_json::json!([
            whole_map(self.data.as_ref(), every),
            whole_map(self.binary_data.as_ref(), every)
        ])
    }
}

impl Managed for PersistentVolumeClaim {
    fn managed_content(&self) -> serde_json::Value {
        let spec = self.spec.as_ref();
        serde_json::json!({
            "accessModes": spec.and_then(|s| s.access_modes.as_ref()),
            "requests": spec.and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()),
            "storageClassName": spec.and_then(|s| s.storage_class_name.as_ref()),
        })
    }
}

impl Managed for StatefulSet {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

impl Managed for Service {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
    const WHOLE: &'static [Whole] = &[Whole {
        path: &["spec", "selector"],
        keys: every,
    }];
    fn whole_content(&self) -> serde_json::Value {
        serde_json::json!([whole_map(
            self.spec.as_ref().and_then(|s| s.selector.as_ref()),
            every
        )])
    }
}

impl Managed for Ingress {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::json!({"spec": self.spec, "annotations": self.whole_content()})
    }
    const WHOLE: &'static [Whole] = &[Whole {
        path: &["metadata", "annotations"],
        keys: labels::configures_ingress,
    }];
    fn whole_content(&self) -> serde_json::Value {
        serde_json::json!([whole_map(
            self.metadata.annotations.as_ref(),
            labels::configures_ingress
        )])
    }
}

impl Managed for HttpRoute {
    fn managed_content(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

/// A hash of the maps an object has of those its kind renders whole ([`Managed::WHOLE`]; 0:
/// the kind has none). Compared with the rendering's on every reconcile, after a restart too:
/// a key added or changed in such a map, by anyone, at any time, makes the object differ from
/// its rendering (SPEC 4.6), at the cost of one number per object.
pub fn whole_print<K: Managed>(obj: &K) -> u64 {
    match obj.whole_content() {
        serde_json::Value::Null => 0,
        content => short_hash(&content) | 1,
    }
}

/// A hash of the managed content (drift detection).
pub fn fingerprint<K: Managed>(obj: &K) -> u64 {
    short_hash(&obj.managed_content())
}

/// A hash of a StatefulSet's pod template: whether a write changed the pods' template (and
/// rolls them), not only the replicas.
pub fn template_hash(sts: &StatefulSet) -> u64 {
    short_hash(&serde_json::to_value(sts.spec.as_ref().map(|s| &s.template)).unwrap_or_default())
}

fn short_hash(content: &serde_json::Value) -> u64 {
    crate::digest::json_sha256_u64(content)
}

/// The values of the operator's labels ([`LABEL_KEYS`]) on an object, absent ones included, as
/// one number: a rendering (which carries all of them) and a stored object have the same
/// labels of the operator when these are equal.
fn labels_print(meta: &ObjectMeta) -> u64 {
    let labels = meta.labels.as_ref();
    hashed(&LABEL_KEYS.map(|k| labels.and_then(|l| l.get(k))))
}

/// The owner references as one number, independent of their order.
pub fn owners_print(owners: &[OwnerReference]) -> u64 {
    let mut each: Vec<u64> = owners
        .iter()
        .map(|o| hashed(&(&o.api_version, &o.kind, &o.name, &o.uid, o.controller)))
        .collect();
    each.sort_unstable();
    hashed(&each)
}

/// The kind of a Site, as [`ControlledBy`] leaves it out.
const SITE_KIND: &str = "Site";

/// The controller owner reference as [`Facts`] keep it. The usual controller, the Site the
/// object is labelled for, costs no string: its kind and name are those of the site id label
/// and its uid a UUID's bytes (another kind or name, or a uid that is not a UUID, is kept in
/// [`Rare`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlledBy {
    /// The UUID's bytes (zero when the uid is [`Rare::controller_uid`]).
    uid: [u8; 16],
    site: bool,
}

/// What [`Facts`] keep of an object only when it is unusual, in one allocation: a controller
/// of another kind than `Site`, named otherwise than the site id label or with a uid that is
/// not a UUID, a site id label that does not begin the object's name, another field manager.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rare {
    /// None: `Site`.
    controller_kind: Option<Box<str>>,
    /// None: the site id label.
    controller_name: Option<Box<str>>,
    /// None: [`ControlledBy::uid`].
    controller_uid: Option<Box<str>>,
    /// [`SiteId::Rare`].
    site_id: Option<Box<str>>,
    /// [`ownership::Ownership::other_manager`].
    other_manager: Option<Box<str>>,
    /// The fields of the object other writers hold, with their values ([`held::held_by_others`]).
    held: Box<[Held]>,
}

/// What the reconciler decides from about an existing object of an owned kind: who controls it
/// ([`ownership::control_of`]), whether it already is a rendering ([`Facts::up_to_date`]), and the
/// fingerprint of the content the operator manages as this watch event showed it. Every
/// object of every Site has one: numbers where only equality matters, strings only where an
/// object is unusual ([`Rare`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The object's name.
    name: Box<str>,
    /// The object's own uid (a UUID's bytes: deletes are conditional on it).
    uid: Option<[u8; 16]>,
    managed: bool,
    controller: Option<ControlledBy>,
    site_id: SiteId,
    rare: Option<Box<Rare>>,
    /// The owner references ([`owners_print`]).
    owners: u64,
    /// The values of [`LABEL_KEYS`] ([`labels_print`]).
    labels: u64,
    /// The desired-hash annotation, hashed ([`desired_of`]; 0: none).
    desired: u64,
    /// [`fingerprint`] of the managed content.
    pub fingerprint: u64,
    /// [`whole_print`] of the maps the kind renders whole.
    whole: u64,
}

/// The site id label of an object, as [`Facts`] keep it: the objects of a site are named by
/// its id (`<id>`, `<id>-env`, ...), so the label usually costs no string of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SiteId {
    None,
    /// The first this many bytes of the object's name.
    NamePrefix(u16),
    /// In [`Rare::site_id`].
    Rare,
}

impl SiteId {
    fn of(id: Option<&str>, name: &str) -> SiteId {
        match id {
            None => SiteId::None,
            Some(id) if name.starts_with(id) && id.len() <= usize::from(u16::MAX) => {
                SiteId::NamePrefix(id.len() as u16)
            }
            Some(_) => SiteId::Rare,
        }
    }
}

impl Facts {
    pub fn of<K: Resource + Managed + serde::Serialize>(obj: &K) -> Facts {
        let meta = obj.meta();
        let ownership = Ownership::of(meta);
        let controller = ownership.controller.as_ref();
        let rare = Rare {
            controller_kind: controller
                .filter(|c| c.kind != SITE_KIND)
                .map(|c| c.kind.into()),
            controller_name: controller
                .filter(|c| Some(c.name) != ownership.site_id)
                .map(|c| c.name.into()),
            controller_uid: controller.and_then(|c| match &c.uid {
                ownership::Uid::Uuid(_) => None,
                ownership::Uid::Text(text) => Some(text.clone()),
            }),
            site_id: None,
            other_manager: ownership.other_manager.as_deref().map(Into::into),
            held: held::held_by_others(meta, || serde_json::to_value(obj).unwrap_or_default())
                .into(),
        };
        let name: &str = meta.name.as_deref().unwrap_or_default();
        let site_id = SiteId::of(ownership.site_id, name);
        let rare = Rare {
            site_id: (site_id == SiteId::Rare)
                .then(|| ownership.site_id.map(Into::into))
                .flatten(),
            ..rare
        };
        Facts {
            name: name.into(),
            uid: meta
                .uid
                .as_deref()
                .and_then(|u| uuid::Uuid::try_parse(u).ok())
                .map(uuid::Uuid::into_bytes),
            managed: ownership.managed,
            controller: ownership.controller.map(|c| ControlledBy {
                uid: match c.uid {
                    ownership::Uid::Uuid(bytes) => bytes,
                    ownership::Uid::Text(_) => [0; 16],
                },
                site: c.site,
            }),
            site_id,
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
            owners: owners_print(meta.owner_references.as_deref().unwrap_or_default()),
            labels: labels_print(meta),
            desired: desired_of(meta).unwrap_or_default(),
            fingerprint: fingerprint(obj),
            whole: whole_print(obj),
        }
    }

    /// Who controls the object ([`ownership::control_of`]).
    pub fn ownership(&self) -> Ownership<'_> {
        let rare = self.rare.as_deref();
        Ownership {
            controller: self.controller.as_ref().map(|c| ControllerRef {
                site: c.site,
                kind: rare
                    .and_then(|r| r.controller_kind.as_deref())
                    .unwrap_or(SITE_KIND),
                name: rare
                    .and_then(|r| r.controller_name.as_deref())
                    .or(self.site_id())
                    .unwrap_or_default(),
                uid: match rare.and_then(|r| r.controller_uid.as_deref()) {
                    Some(text) => ownership::Uid::Text(text.into()),
                    None => ownership::Uid::Uuid(c.uid),
                },
            }),
            managed: self.managed,
            site_id: self.site_id(),
            other_manager: rare
                .and_then(|r| r.other_manager.as_deref())
                .map(std::borrow::Cow::Borrowed),
        }
    }

    /// The object's uid, for a delete conditional on it (None: not a UUID; the delete is then
    /// unconditional).
    pub fn uid(&self) -> Option<String> {
        self.uid.map(|u| uuid::Uuid::from_bytes(u).to_string())
    }

    /// Carries the operator's `app.kubernetes.io/managed-by` label.
    pub fn managed(&self) -> bool {
        self.managed
    }

    /// The site id label.
    pub fn site_id(&self) -> Option<&str> {
        match &self.site_id {
            SiteId::None => None,
            SiteId::NamePrefix(len) => self.name.get(..usize::from(*len)),
            SiteId::Rare => self.rare.as_deref().and_then(|r| r.site_id.as_deref()),
        }
    }

    /// The desired-hash annotation, hashed.
    pub fn desired(&self) -> Option<u64> {
        (self.desired != 0).then_some(self.desired)
    }

    /// Whether the object already is the stamped rendering `desired`: the same desired hash,
    /// exactly the desired owner references (LIFE-12), the desired labels (the operator's
    /// labels are [`LABEL_KEYS`]; a rendering with another label is never up to date), and
    /// exactly the maps the rendering has of those it renders whole ([`whole_print`]: an edit
    /// of them that kept the hash annotation, made while no operator ran, is seen at start),
    /// and the rendering's value in every field another writer holds ([`held`]: an edit of a
    /// rendered field, made while no operator ran, is seen at start too).
    pub fn up_to_date<K: Resource + Managed + serde::Serialize>(&self, desired: &K) -> bool {
        let meta = desired.meta();
        self.whole == whole_print(desired)
            && self.held_agree(desired)
            && self.desired().is_some()
            && self.desired() == desired_of(meta)
            && self.owners == owners_print(meta.owner_references.as_deref().unwrap_or_default())
            && meta
                .labels
                .iter()
                .flatten()
                .all(|(k, _)| LABEL_KEYS.contains(&k.as_str()))
            && self.labels == labels_print(meta)
    }

    /// Whether `desired` has the stored value in every field another writer holds.
    fn held_agree<K: serde::Serialize>(&self, desired: &K) -> bool {
        match self.rare.as_deref().map(|r| &*r.held) {
            None | Some([]) => true,
            Some(held) => {
                let rendering = serde_json::to_value(desired).unwrap_or_default();
                held.iter().all(|h| h.agrees(&rendering))
            }
        }
    }
}

/// The desired-hash annotation of an object, hashed (never 0).
pub fn desired_of(meta: &ObjectMeta) -> Option<u64> {
    meta.annotations
        .as_ref()?
        .get(crate::labels::DESIRED_HASH_ANNOTATION)
        .map(|v| hashed(v) | 1)
}

/// An owned kind as the caches keep it.
pub trait Keep: Resource<DynamicType = ()> + Managed + serde::Serialize + Sized {
    /// The content the reconciler reads back, if any.
    type Body: Clone + std::fmt::Debug + PartialEq + Default + Send + Sync + 'static;
    /// Takes the body out of the object (`managed`: the object carries the operator's label).
    fn body(self, managed: bool) -> Self::Body;
}

/// An owned kind as the reconciler handles it: namespaced, kept by the caches, read, applied
/// (serialised) and deleted through the API. One name for the bounds every generic step over
/// Secrets, ConfigMaps, claims, StatefulSets, Services, Ingresses and HTTPRoutes needs.
pub trait Owned:
    Keep
    + Resource<Scope = kube::core::NamespaceResourceScope>
    + Clone
    + serde::Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Owned for K where
    K: Keep
        + Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A map's entries in key order, without the map: a `BTreeMap` allocates a node with room for
/// eleven entries, the records keep two or three.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs<V>(Box<[(Box<str>, V)]>);

impl<V: Clone> Pairs<V> {
    pub fn of(map: BTreeMap<String, V>) -> Pairs<V> {
        Pairs(map.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| &**k == key).map(|(_, v)| v)
    }

    /// The entries as a map again (what the renderer reads).
    pub fn to_map(&self) -> BTreeMap<String, V> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

/// The operator's Secrets keep the site tokens of their data (read back from the site Secret:
/// [`crate::render::SiteTokens::keep_or_generate`]); no other value, and nothing of other
/// Secrets of the namespace.
impl Keep for Secret {
    type Body = Option<Pairs<ByteString>>;
    fn body(self, managed: bool) -> Self::Body {
        use crate::render::secret::{API_TOKEN_KEY, SECRET_KEY_KEY};
        let mut data = self.data.filter(|_| managed)?;
        data.retain(|k, _| k == API_TOKEN_KEY || k == SECRET_KEY_KEY);
        Some(Pairs::of(data))
    }
}

impl Keep for ConfigMap {
    type Body = ();
    fn body(self, _: bool) -> Self::Body {}
}

impl Keep for Service {
    type Body = ();
    fn body(self, _: bool) -> Self::Body {}
}

impl Keep for Ingress {
    type Body = ();
    fn body(self, _: bool) -> Self::Body {}
}

impl Keep for HttpRoute {
    type Body = ();
    fn body(self, _: bool) -> Self::Body {}
}

/// What the reconciler reads back of a claim: its storage request, class and bound volume, and
/// the volume the operator pinned it to ([`crate::render::workload::PINNED_VOLUME_ANNOTATION`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    request: Option<Box<str>>,
    class: Option<Box<str>>,
    volume: Option<Box<str>>,
    pinned: Option<Box<str>>,
}

impl Claim {
    /// The claim with what the record keeps (the renderer's and the volume labeller's input).
    pub fn claim(&self) -> PersistentVolumeClaim {
        let text = |v: &Option<Box<str>>| v.as_deref().map(str::to_string);
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                annotations: self.pinned.as_deref().map(|v| {
                    BTreeMap::from([(
                        crate::render::workload::PINNED_VOLUME_ANNOTATION.to_string(),
                        v.to_string(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: text(&self.class),
                volume_name: text(&self.volume),
                resources: self.request.as_deref().map(|r| VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(r.to_string()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }
}

impl Keep for PersistentVolumeClaim {
    type Body = Claim;
    fn body(self, _: bool) -> Self::Body {
        let text = |v: Option<String>| v.map(String::into_boxed_str);
        let spec = self.spec.unwrap_or_default();
        Claim {
            request: spec
                .resources
                .and_then(|r| r.requests)
                .and_then(|mut r| r.remove("storage"))
                .map(|q| q.0.into()),
            class: text(spec.storage_class_name),
            volume: text(spec.volume_name),
            pinned: self
                .metadata
                .annotations
                .and_then(|mut a| a.remove(crate::render::workload::PINNED_VOLUME_ANNOTATION))
                .map(Into::into),
        }
    }
}

/// What a StatefulSet keeps of its pod template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Template {
    /// The template's annotations: the qualifying-change state and `restartedAt` are read back.
    pub annotations: Option<Pairs<String>>,
    /// [`template_hash`]: whether a write changed the template.
    pub hash: u64,
    /// The image of each container, by container name: what the site runs, the last resort of a
    /// built-in application's pin ([`crate::render::apps::pinned`]).
    pub images: Pairs<String>,
    /// The StatefulSet's [`TEMPLATE_HASH_ANNOTATION`], hashed: the template it was last rendered
    /// with (None: it has none, as written by an operator version before it).
    pub rendered: Option<u64>,
}

impl Keep for StatefulSet {
    type Body = Template;
    fn body(self, _: bool) -> Self::Body {
        let hash = template_hash(&self);
        let rendered = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
            .map(|h| hashed(h.as_str()));
        let Some(spec) = self.spec else {
            return Template {
                hash,
                rendered,
                ..Template::default()
            };
        };
        let images = spec
            .template
            .spec
            .into_iter()
            .flat_map(|p| p.containers)
            .filter_map(|c| Some((c.name, c.image?)))
            .collect();
        Template {
            annotations: spec
                .template
                .metadata
                .and_then(|m| m.annotations)
                .map(Pairs::of),
            hash,
            images: Pairs::of(images),
            rendered,
        }
    }
}

/// An object of an owned kind in the caches ([`crate::controller::cache::table::Records`]): its
/// [`Facts`] (with its name: owned objects all live in the operator's namespace) and its
/// [`Keep::Body`].
pub struct Kept<K: Keep> {
    pub facts: Facts,
    pub body: K::Body,
}

// By hand: derived impls would ask the same of `K`, which is never stored.
impl<K: Keep> Clone for Kept<K> {
    fn clone(&self) -> Self {
        Kept {
            facts: self.facts.clone(),
            body: self.body.clone(),
        }
    }
}

impl<K: Keep> PartialEq for Kept<K> {
    fn eq(&self, other: &Self) -> bool {
        self.facts == other.facts && self.body == other.body
    }
}

impl<K: Keep> std::fmt::Debug for Kept<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("kind", &K::kind(&()))
            .field("name", &self.facts.name)
            .field("facts", &self.facts)
            .finish_non_exhaustive()
    }
}

impl<K: Keep> Kept<K> {
    pub fn new(obj: K) -> Kept<K> {
        let facts = Facts::of(&obj);
        let body = obj.body(facts.managed);
        Kept { facts, body }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// Who controls the object, for `site`.
    pub fn control(&self, site: &Site) -> ownership::Control {
        ownership::control_of(&self.facts.ownership(), site)
    }

    /// Its controller owner reference is `site` ([`ownership::controlled_by`]).
    pub fn controlled_by(&self, site: &Site) -> bool {
        ownership::controlled_by(&self.facts.ownership(), site)
    }
}

/// Metadata of objects the operator watches for a site: name, namespace, labels, owner
/// references, deletion timestamp and this operator's annotations. Identity and bookkeeping
/// fields (uid, resourceVersion, timestamps, finalizers, managed fields) and other components'
/// annotations are never read.
fn metadata<K: Resource>(obj: &mut K) {
    let m = obj.meta_mut();
    m.managed_fields = None;
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    m.generation = None;
    m.generate_name = None;
    m.finalizers = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| k.starts_with(OWN_ANNOTATIONS));
        if a.is_empty() {
            m.annotations = None;
        }
    }
}

/// Sites: everything but managed fields and the `kubectl apply` copy of the object (the uid
/// goes into owner references, the generation into the status).
pub fn site(s: &mut Site) {
    s.metadata.managed_fields = None;
    if let Some(a) = s.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// Pods (decoded with only what the status mapping reads, [`crate::watched`]) are kept as
/// [`SitePod`]s, with their site id label only for the site's own pods: the operator's
/// (operator_bound annotation) and controlled by the site's StatefulSet (named by the site id).
/// That is what [`crate::controller::cache::index::pod_keys`] reads, so a pod someone else made with
/// a site's label and annotation counts in no status and is never deleted for the site (LIFE-15).
pub fn pod(p: &Pod) -> SitePod {
    let bound = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(OPERATOR_BOUND_ANNOTATION));
    let controlled_by = |id: &str| {
        p.metadata.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true)
                && o.kind == "StatefulSet"
                && o.api_version == "apps/v1"
                && o.name == id
        })
    };
    let mut kept = SitePod::of(p);
    if !bound || !kept.site.as_deref().is_some_and(controlled_by) {
        kept.site = None;
    }
    kept
}

/// Volumes (decoded with only their claim reference and status, [`crate::watched`]) keep the
/// metadata the retained-volume lookup reads.
pub fn volume(v: &mut Volume) {
    metadata(v);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::controller::apply;
    use crate::crd::ID_LABEL;
    use crate::fixtures;
    use crate::render::{self, Inputs, SiteTokens};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::ResourceExt;
    use serde_json::json;

    /// The example Site (manifests/examples/site.yaml) in namespace `sites`.
    pub(crate) fn example_site() -> Site {
        let mut site: Site =
            serde_yaml_ng::from_str(include_str!("../../../manifests/examples/site.yaml")).unwrap();
        site.metadata.namespace = Some("sites".into());
        site.metadata.uid = Some("uid-1".into());
        site
    }

    pub(crate) fn rendered_for(cfg: &crate::config::PlatformConfig) -> (Site, render::Rendered) {
        let site = example_site();
        let tokens = SiteTokens {
            api_token: "a".into(),
            secret_key: "b".into(),
        };
        let rendered = render_site(&site, cfg, &tokens);
        (site, rendered)
    }

    /// Every object of `site`, rendered with the site tokens `tokens`.
    pub(crate) fn render_site(
        site: &Site,
        cfg: &crate::config::PlatformConfig,
        tokens: &SiteTokens,
    ) -> render::Rendered {
        let state = crate::restart::decide(None, site, cfg).state;
        let inputs = Inputs::new("sites", Some("example.org"), b"key", tokens, &state);
        let valid = crate::rules::validate(site, cfg).unwrap();
        render::render(valid, cfg, &inputs).unwrap()
    }

    fn rendered() -> (Site, render::Rendered) {
        rendered_for(&fixtures::config())
    }

    /// `desired` stamped, and as the API server stores it (with its own fields and other
    /// components' metadata).
    pub(crate) fn stored<K: Resource + Clone + serde::Serialize>(desired: &K) -> (K, K) {
        let mut desired = desired.clone();
        apply::stamp(&mut desired);
        let mut stored = desired.clone();
        let m = stored.meta_mut();
        m.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(crate::write::FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            ..Default::default()
        }]);
        m.uid = Some("0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10".into());
        m.resource_version = Some("12345".into());
        m.annotations
            .get_or_insert_default()
            .insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
        m.labels
            .get_or_insert_default()
            .insert("example.org/team".into(), "web".into());
        (desired, stored)
    }

    /// The record of a stored rendering answers the reconciler's questions as the object did:
    /// up to date with that rendering and not with another, controlled by its Site.
    fn same_decision<K: Keep + Clone + serde::Serialize>(site: &Site, rendering: &K) -> Kept<K> {
        let (desired, stored) = stored(rendering);
        let kept = Kept::new(stored.clone());
        assert!(kept.facts.up_to_date(&desired), "{kept:?}");
        assert_eq!(
            kept.control(site),
            crate::ownership::control(stored.meta(), site)
        );
        assert_eq!(kept.control(site), ownership::Control::ThisSite);
        assert_eq!(Some(kept.name()), desired.meta().name.as_deref());
        assert!(kept.facts.managed());
        assert_eq!(kept.facts.site_id(), Some("docs-handbook"));
        let mut other = desired.clone();
        other.meta_mut().annotations.get_or_insert_default().insert(
            crate::labels::DESIRED_HASH_ANNOTATION.into(),
            "other".into(),
        );
        assert!(!kept.facts.up_to_date(&other));
        kept
    }

    #[test]
    fn kept_records_give_the_reconciler_the_same_answers() {
        let (site, r) = rendered();
        let sts = same_decision(&site, &r.statefulset);
        let annotations = sts.body.annotations.as_ref().map(Pairs::to_map);
        assert_eq!(
            annotations.as_ref(),
            render::template_annotations(&r.statefulset)
        );
        assert!(render::recorded_state(annotations.as_ref()).is_some());
        assert_eq!(sts.body.hash, template_hash(&r.statefulset));

        let secret = same_decision(&site, &r.secret);
        let tokens = |data: Option<BTreeMap<String, ByteString>>| {
            use crate::render::secret::{API_TOKEN_KEY, SECRET_KEY_KEY};
            data.map(|mut d| {
                d.retain(|k, _| k == API_TOKEN_KEY || k == SECRET_KEY_KEY);
                d
            })
        };
        assert_eq!(
            secret.body.as_ref().map(Pairs::to_map),
            tokens(r.secret.data.clone()),
            "tokens are read back from the Secret, and nothing else"
        );
        assert_eq!(secret.body.as_ref().map(|p| p.to_map().len()), Some(2));
        same_decision(&site, &r.oauth2_secret);
        same_decision(&site, &r.env_configmap);
        same_decision(&site, &r.files_configmap);
        same_decision(&site, &r.service);
        let mut pinned = r.pvc.clone();
        pinned.annotations_mut().insert(
            crate::render::workload::PINNED_VOLUME_ANNOTATION.into(),
            "pv-1".into(),
        );
        pinned.spec.get_or_insert_default().volume_name = Some("pv-1".into());
        pinned.spec.get_or_insert_default().storage_class_name = Some("standard".into());
        let claim = same_decision(&site, &pinned);
        // The renderer and the volume labeller read the same from the record as from the object:
        // class, size, bound volume and the pinned volume.
        let read = claim.body.claim();
        let cfg = fixtures::config();
        assert_eq!(
            crate::render::workload::pvc(&site, &cfg, None, Some(&read)).unwrap(),
            crate::render::workload::pvc(&site, &cfg, None, Some(&pinned)).unwrap(),
        );
        let spec = read.spec.as_ref().unwrap();
        assert_eq!(spec.volume_name.as_deref(), Some("pv-1"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        assert_eq!(spec.resources, r.pvc.spec.as_ref().unwrap().resources);
        assert_eq!(
            read.metadata.annotations,
            Some(BTreeMap::from([(
                crate::render::workload::PINNED_VOLUME_ANNOTATION.to_string(),
                "pv-1".to_string()
            )]))
        );
        match r.route.clone() {
            Some(render::Route::Ingress(i)) => {
                same_decision(&site, &i);
            }
            _ => panic!("the example site has an Ingress in ingress mode"),
        }
        let (site, r) = rendered_for(&fixtures::config_gateway());
        match r.route {
            Some(render::Route::HttpRoute(h)) => {
                same_decision(&site, &h);
            }
            _ => panic!("the example site has an HTTPRoute in gateway mode"),
        }
        // A StatefulSet record is a fraction of the object even before the maps and strings
        // the object points to (which the records do not have: one small allocation or two).
        assert!(std::mem::size_of::<Kept<StatefulSet>>() * 3 < std::mem::size_of::<StatefulSet>());
    }

    #[test]
    fn who_controls_a_kept_object_is_who_controls_the_object() {
        let (site, r) = rendered();
        let (_, stored) = stored(&r.env_configmap);
        type Edit = Box<dyn Fn(&mut ConfigMap)>;
        let variants: Vec<(&str, Edit)> = vec![
            ("as rendered", Box::new(|_| {})),
            (
                "owner removed, labels kept",
                Box::new(|c| c.metadata.owner_references = None),
            ),
            (
                "owner removed, labels kept, and another manager",
                Box::new(|c| {
                    c.metadata.owner_references = None;
                    c.metadata
                        .managed_fields
                        .get_or_insert_default()
                        .push(ManagedFieldsEntry {
                            manager: Some("kubectl-create".into()),
                            operation: Some("Update".into()),
                            ..Default::default()
                        });
                }),
            ),
            (
                "owner and labels removed",
                Box::new(|c| {
                    c.metadata.owner_references = None;
                    c.metadata.labels = None;
                }),
            ),
            (
                "a previous Site",
                Box::new(|c| c.owner_references_mut()[0].uid = "uid-0".into()),
            ),
            (
                "another Site",
                Box::new(|c| {
                    let o = &mut c.owner_references_mut()[0];
                    o.name = "other".into();
                    o.uid = "uid-2".into();
                }),
            ),
            (
                "another kind",
                Box::new(|c| {
                    let o = &mut c.owner_references_mut()[0];
                    o.kind = "Deployment".into();
                    o.api_version = "apps/v1".into();
                }),
            ),
        ];
        let mut seen = std::collections::HashSet::new();
        for (case, edit) in variants {
            let mut obj = stored.clone();
            edit(&mut obj);
            let expected = crate::ownership::control(obj.meta(), &site);
            let view = format!("{:?}", Ownership::of(obj.meta()));
            let kept = Kept::new(obj);
            // The record's view is the object's, strings included (the record leaves out the
            // controller's kind and name when they are the Site's and its site id label).
            assert_eq!(format!("{:?}", kept.facts.ownership()), view, "{case}");
            assert_eq!(kept.control(&site), expected, "{case}");
            seen.insert(format!("{expected:?}"));
        }
        assert_eq!(seen.len(), 6, "every answer was tried: {seen:?}");
        assert_eq!(SITE_KIND, Site::kind(&()));
    }

    #[test]
    fn renderings_carry_only_the_label_keys_the_caches_keep() {
        for cfg in [fixtures::config(), fixtures::config_gateway()] {
            let (_, r) = rendered_for(&cfg);
            let mut metas = vec![
                r.secret.meta().clone(),
                r.oauth2_secret.meta().clone(),
                r.env_configmap.meta().clone(),
                r.files_configmap.meta().clone(),
                r.pvc.meta().clone(),
                r.statefulset.meta().clone(),
                r.service.meta().clone(),
            ];
            metas.push(match r.route.as_ref().unwrap() {
                render::Route::Ingress(i) => i.meta().clone(),
                render::Route::HttpRoute(h) => h.meta().clone(),
            });
            for meta in metas {
                for key in meta.labels.iter().flatten().map(|(k, _)| k) {
                    assert!(
                        LABEL_KEYS.contains(&key.as_str()),
                        "{:?} has label {key}",
                        meta.name
                    );
                }
            }
        }
    }

    #[test]
    fn sites_drop_only_managed_fields_and_the_kubectl_copy() {
        let (site, _) = rendered();
        let mut full = site.clone();
        full.metadata.annotations.get_or_insert_default().extend([
            (
                LAST_APPLIED_ANNOTATION.to_string(),
                "{\"big\": true}".to_string(),
            ),
            (
                "sites.ecmwf.int/upgrade-request".to_string(),
                "x".to_string(),
            ),
        ]);
        let mut slimmed = full.clone();
        super::site(&mut slimmed);
        let mut expected = full.clone();
        expected
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(LAST_APPLIED_ANNOTATION);
        assert_eq!(slimmed, expected);
    }

    #[test]
    fn pods_and_volumes_keep_what_status_and_volume_lookups_read() {
        // Every pod state the status mapping tells apart resolves the same from the slim pod.
        let container = |state: serde_json::Value, ready: bool| {
            json!({"name": "nginx", "ready": ready, "state": state, "image": "nginx:1",
                   "imageID": "sha256:x", "containerID": "containerd://y", "restartCount": 3,
                   "volumeMounts": [{"name": "data", "mountPath": "/data"}]})
        };
        let statuses = [
            json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z", "lastProbeTime": null},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T09:00:00Z"}],
                "containerStatuses": [container(json!({"running": {"startedAt": "2026-11-29T10:00:00Z"}}), true)]}),
            json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "not ready"}],
                "containerStatuses": [container(json!({"running": {}}), false)]}),
            json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [container(json!({"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}}), false)]}),
            json!({"phase": "Running", "conditions": [{"type": "ContainersReady", "status": "False"}],
                "containerStatuses": [container(json!({"terminated": {"reason": "Error", "exitCode": 1, "message": "boom"}}), false)]}),
            json!({"phase": "Failed"}),
        ];
        for status in statuses {
            let mut p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "s-0", "namespace": "sites", "uid": "u",
                             "labels": {ID_LABEL: "s", "controller-revision-hash": "s-1"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                  "name": "s", "uid": "u-s", "controller": true}],
                             "annotations": {"sites.ecmwf.int/operator_bound": "true", "other": "x"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]},
                "status": status,
            }))
            .unwrap();
            let kept = pod(&p);
            assert_eq!(kept.status, crate::controller::status::resolve_pod(&p));
            assert_eq!(kept.ready, crate::controller::status::pod_ready(&p));
            assert_eq!(&*kept.name, "s-0");
            assert!(!kept.terminating);
            assert_eq!(crate::controller::cache::index::pod_keys(&kept), ["s"]);
            // A pod not controlled by the site's StatefulSet, or that the operator did not
            // create (no operator_bound annotation), is not indexed.
            for (case, edit) in [
                ("no owner", json!({"metadata": {"ownerReferences": null}})),
                (
                    "another StatefulSet",
                    json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                        "kind": "StatefulSet", "name": "t", "uid": "u-t", "controller": true}]}}),
                ),
                (
                    "an owner, not the controller",
                    json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                        "kind": "StatefulSet", "name": "s", "uid": "u-s"}]}}),
                ),
                (
                    "another kind",
                    json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1",
                        "kind": "Job", "name": "s", "uid": "u-s", "controller": true}]}}),
                ),
                ("no annotation", json!({"metadata": {"annotations": null}})),
            ] {
                let mut other = serde_json::to_value(&p).unwrap();
                json_patch::merge(&mut other, &edit);
                let other: Pod = serde_json::from_value(other).unwrap();
                assert!(
                    crate::controller::cache::index::pod_keys(&pod(&other)).is_empty(),
                    "{case}"
                );
            }
            p.metadata.annotations = None;
            // Being deleted.
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-29T10:00:00Z".parse().unwrap(),
                ));
            assert!(pod(&p).terminating);
        }

        let mut v: Volume = serde_json::from_value(json!({
            "metadata": {"name": "pv", "labels": {"a": "b"}, "uid": "u",
                         "annotations": {"pv.kubernetes.io/provisioned-by": "x"}},
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
                     "claimRef": {"namespace": "sites", "name": "s"}},
            "status": {"phase": "Released"}
        }))
        .unwrap();
        let before = v.clone();
        volume(&mut v);
        assert_eq!(v.metadata.labels, before.metadata.labels);
        assert_eq!(v.status, before.status);
        assert_eq!(
            v.spec.as_ref().unwrap().claim_ref,
            before.spec.as_ref().unwrap().claim_ref
        );
        assert_eq!(v.metadata.uid, None);
        assert_eq!(v.metadata.annotations, None);
    }

    #[test]
    fn fingerprints_cover_the_managed_content_only() {
        let (_, r) = rendered();
        let print = |s: &StatefulSet| Kept::new(s.clone()).facts.fingerprint;
        let base = print(&r.statefulset);
        assert_eq!(base, fingerprint(&r.statefulset));
        // Status, resourceVersion and other components' annotations: the same fingerprint.
        let mut status_only = r.statefulset.clone();
        status_only.status = Some(Default::default());
        status_only.metadata.resource_version = Some("99".into());
        status_only
            .annotations_mut()
            .insert("example.org/x".into(), "y".into());
        assert_eq!(print(&status_only), base);
        // Replicas scaled by hand: another one.
        let mut scaled = r.statefulset.clone();
        scaled.spec.as_mut().unwrap().replicas = Some(4);
        assert_ne!(print(&scaled), base);
        // A claim's bound volume (the binder's) is not the operator's content; its size is.
        let mut bound = r.pvc.clone();
        bound.spec.as_mut().unwrap().volume_name = Some("pv-1".into());
        assert_eq!(fingerprint(&bound), fingerprint(&r.pvc));
        let mut resized = r.pvc.clone();
        resized
            .spec
            .as_mut()
            .unwrap()
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("9Gi".into()),
            );
        assert_ne!(fingerprint(&resized), fingerprint(&r.pvc));
        // Data of another component's Secret is not kept, its fingerprint is.
        let mut foreign = r.secret.clone();
        foreign.labels_mut().clear();
        let foreign = Kept::new(foreign);
        assert!(foreign.body.is_none());
        assert!(!foreign.facts.managed());
        assert_eq!(foreign.facts.fingerprint, fingerprint(&r.secret));
        // Nor is it in the record's debug output.
        let mine = Kept::new(r.secret.clone());
        assert!(!format!("{mine:?}").contains("api_token"), "{mine:?}");
    }
}
