//! The caches: what the watches keep of the cluster for the reconciler to read, and the words
//! the code uses for it. At 10,000 Sites whole Kubernetes objects in reflector stores took
//! 538 MiB; what is kept here takes under 5 KB per Site (`controller/footprint.rs` measures it by
//! kind).
//!
//! # How a watch event becomes a cached fact and a queued key
//!
//! ```text
//!  API server ──watch──▶ K (a StatefulSet, decoded)           controller/watches.rs
//!                         │ Kept::new: Facts::of + Keep::body  kept.rs
//!                         ▼
//!                      Kept<StatefulSet> { facts, body }
//!                         │ changed? (equal to the cached one: cached, key not queued)
//!                         ▼
//!                      Table::apply ──▶ Records<StatefulSet>   table.rs
//!                         │ Index::observe (pods, volumes, Sites) index.rs
//!                         │ Objects::observe (drift)             ../own_writes.rs
//!                         ▼
//!                      the id label (`facts.site_id()`) ──▶ Queue ──▶ a worker reconciles
//!                      that Site and reads Records::get(name).facts / .body
//! ```
//!
//! Sites and volumes take the same path as Kubernetes objects trimmed of what the reconciler
//! never reads ([`kept::site`], [`kept::volume`]) and are held [`table::Packed`]; pods become
//! [`SitePod`](crate::controller::status::SitePod)s ([`kept::pod`]).
//!
//! # Glossary
//!
//! Where values are kept ([`table`]):
//! - [`table::Table`]: values of one kind by name, filled from a watch as kube's reflector store
//!   is (a re-list replaces the table when complete); the one cache type the reconciler reads.
//! - [`table::Records<K>`]: the `Table` of an owned kind `K`, holding [`kept::Kept<K>`] records.
//! - [`table::Sites`], [`table::Volumes`]: the `Table`s of Sites and PersistentVolumes, packed.
//! - [`table::Cache`]: what watches and indexes need of a cache: a `Table`, or (in tests, to show
//!   that a table answers alike) kube's reflector `Store`.
//! - [`table::Named`]: a value a `Table` can key by name.
//! - [`table::Hold`] / [`table::Held`]: how a `Table` holds a value: shared as it came
//!   (`Arc<V>`), or packed; `Held` is the part the table's hash set needs (the name).
//! - [`table::Packed`]: a value held as its JSON text, LZ4-compressed against a dictionary of a
//!   typical Site and volume (`packed.dict`), decoded on every read; [`table::Pack`] is a kind
//!   that can be packed, with a summary counted without decoding (a Site's phase).
//!
//! What is kept of an object ([`kept`]):
//! - [`kept::Kept<K>`]: an object of an owned kind (Secret, ConfigMap, claim, StatefulSet,
//!   Service, Ingress, HTTPRoute) as the caches keep it: its [`kept::Facts`] and its body.
//! - [`kept::Facts`]: what the reconciler decides from: name, uid, who controls the object
//!   ([`kept::ControlledBy`]), its site id label, whether it already is a rendering (label values,
//!   owner references and desired hash as numbers), the fingerprint of its managed content.
//! - [`kept::Keep`]: an owned kind that can be kept; its `Body` is the little content the
//!   reconciler reads back ([`kept::Claim`] of a claim, [`kept::Template`] of a StatefulSet, the
//!   site tokens of a Secret, nothing for the other kinds).
//! - [`kept::Managed`]: the content of an owned kind that the operator manages (what drift
//!   detection fingerprints).
//! - [`kept::Owned`]: the bounds every generic reconcile step over an owned kind needs, named
//!   once.
//! - [`kept::Pairs`]: a small map kept as a boxed slice of entries.
//!
//! Lookups ([`index`]):
//! - [`index::Index`]: index key → names, fed the cache's watch events, so "the pods of this
//!   site" costs the matches, not a scan.
//!
//! Beside the caches, [`crate::controller::own_writes::Objects`] keeps a 40-byte record
//! per owned object of what the operator last wrote and the watch last showed (drift).

pub mod held;
pub mod index;
pub mod kept;
pub mod table;
