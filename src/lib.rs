//! sites-operator: a Kubernetes operator and admission webhook server for `Site` resources
//! (`sites.ecmwf.int/v1`).
//!
//! The library holds everything but process start-up (docs/architecture.md draws the map):
//! - pure logic: the Site types and CRD ([`crd`]), the platform configuration and its validator
//!   ([`config`]), the field-error type every validator speaks ([`validation`]), the Site rules
//!   ([`rules`]), the restart decision ([`restart`]), names, labels and owner references of
//!   owned objects ([`labels`]), who controls an existing object ([`ownership`]), rendering of every owned object ([`render`]), the one error type
//!   ([`error`]) and the condition and Event reasons ([`reasons`]);
//! - the admission handlers and the HTTPS server ([`admission`], [`tls`], [`certs`]);
//! - the reconciler: caches, queue, reconcile recipe and every write to the cluster
//!   ([`controller`]);
//! - the one-shot commands ([`upgrade`], [`retention`]) and process wiring ([`app`], [`metrics`],
//!   [`telemetry`], [`allocator`]).

pub mod admission;
pub mod allocator;
pub mod app;
pub mod certs;
pub mod config;
pub mod controller;
pub mod crd;
pub mod definitions;
pub mod digest;
pub mod error;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod labels;
pub mod metrics;
pub mod ownership;
pub mod policy;
pub mod progress;
pub mod reasons;
pub mod render;
pub mod restart;
pub mod retention;
pub mod rules;
pub mod selfsigned;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testing;
pub mod tls;
pub mod upgrade;
pub mod validation;
pub mod watched;
pub mod write;

pub use error::{Error, Result, Retry, Target};
/// Kubernetes resource quantities: a crate of their own because the API emulator parses them too.
pub use sites_quantity as quantity;
