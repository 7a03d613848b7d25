//! Request accounting: counts per (verb, resource, HTTP code), readable and resettable by tests
//! (the benchmarks count the operator's API writes with it).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

/// Request counters.
#[derive(Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// Requests being handled: a write is visible to other clients before it is counted (the
    /// count needs its answer), so a count taken from an instant on starts with none in flight.
    in_flight: AtomicUsize,
}

/// A request being handled, from its arrival until it is counted ([`Stats::begin`]).
pub struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Stats {
    /// Marks a request as being handled until the guard is dropped (after [`Stats::record`]; a
    /// watch counts until its stream is returned, not while it streams).
    pub fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// How many requests are being handled (none: every write made so far is counted).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub fn record(&self, verb: &str, resource: &str, code: u16) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry((verb.to_string(), resource.to_string(), code))
            .or_default() += 1;
    }

    /// Count of requests matching a verb and resource (any code).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .filter(|((v, r, _), _)| v == verb && r == resource)
            .map(|(_, n)| n)
            .sum()
    }

    /// Count of write requests (create, update, patch, delete, deletecollection) to any resource.
    pub fn writes(&self) -> u64 {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .filter(|((v, _, _), _)| {
                matches!(
                    v.as_str(),
                    "create" | "update" | "patch" | "delete" | "deletecollection"
                )
            })
            .map(|(_, n)| n)
            .sum()
    }

    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// All counters as JSON: `[{"verb", "resource", "code", "count"}]`.
    pub fn to_json(&self) -> Value {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        Value::Array(
            c.iter()
                .map(
                    |((v, r, code), n)| json!({"verb": v, "resource": r, "code": code, "count": n}),
                )
                .collect(),
        )
    }
}
