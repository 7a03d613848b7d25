//! sites-operator: a Kubernetes operator and admission webhook server for `Site` resources
//! (`sites.ecmwf.int/v1`).
//!
//! The library holds everything but process start-up: the Site types and CRD ([`crd`]), the
//! platform configuration and its validator ([`config`]), qualifying-change detection
//! ([`diff`]), names, labels and owner references of owned objects ([`labels`]), rendering of
//! every owned object ([`render`]), the admission handlers ([`admission`]), and the pure checks
//! they share.

pub mod admission;
pub mod app;
pub mod certs;
pub mod config;
pub mod controller;
pub mod crd;
pub mod diff;
mod error;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod labels;
pub mod metrics;
pub mod policy;
pub mod quantity;
pub mod render;
pub mod retention;
pub mod telemetry;
pub mod tls;
pub mod upgrade;
pub mod validation;

pub use error::{Error, Result};
