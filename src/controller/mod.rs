//! The reconcile side of the operator: work queue, Site status, reconcile of one Site, and the
//! controller that wires caches, queue and workers together.

pub mod queue;
pub mod status;
