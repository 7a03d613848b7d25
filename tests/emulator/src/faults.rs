//! Fault injection a test switches on and off: error rates per verb and resource (5xx, 429,
//! 409, 403), latency, and dropped watch streams. Decisions come from a seeded PRNG, so a run
//! with the same seed and request order injects the same faults.

use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

use crate::registry::ResourceInfo;
use crate::status::ApiError;

/// One rule: requests matching `verb` and `resource` (None = any) fail with probability `rate`
/// using one of `codes` (chosen at random), after `latency_ms`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    #[serde(default)]
    pub verb: Option<String>,
    /// Storage key: `pods`, `statefulsets.apps`, `sites.sites.ecmwf.int`.
    #[serde(default)]
    pub resource: Option<String>,
    /// Probability of failing a matching request, 0.0 to 1.0.
    #[serde(default)]
    pub rate: f64,
    /// HTTP codes to fail with: 500, 503, 504, 429, 409, 403.
    #[serde(default)]
    pub codes: Vec<u16>,
    /// Added delay for matching requests (failing or not).
    #[serde(default)]
    pub latency_ms: u64,
}

/// The fault configuration of an emulator.
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    rng: Mutex<u64>,
    watch_drop: Mutex<Option<Duration>>,
    /// Extra latency for every request (a latency spike while set).
    spike: Mutex<Duration>,
    /// Injected errors so far, by HTTP code.
    injected: Mutex<std::collections::BTreeMap<u16, u64>>,
    /// Storage keys whose next watch from a resourceVersion gets 410 Expired.
    expire: Mutex<Vec<String>>,
    /// Storage keys whose watches deliver nothing until released ([`Faults::hold_watches`]).
    held: tokio::sync::watch::Sender<Vec<String>>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            rng: Mutex::new(0x9E37_79B9_7F4A_7C15),
            watch_drop: Mutex::new(None),
            spike: Mutex::new(Duration::ZERO),
            injected: Mutex::new(Default::default()),
            expire: Mutex::new(Vec::new()),
            held: tokio::sync::watch::Sender::new(Vec::new()),
        }
    }
}

impl Faults {
    pub fn add(&self, rule: FaultRule) {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rule);
    }

    /// Removes every rule, stops dropping watches and ends a latency spike (the counts of
    /// injected errors stay).
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *self.watch_drop.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.spike(Duration::ZERO);
    }

    /// Delays every request by `latency` until called again (zero ends the spike).
    pub fn spike(&self, latency: Duration) {
        *self.spike.lock().unwrap_or_else(|p| p.into_inner()) = latency;
    }

    /// How many errors with `code` were injected so far.
    pub fn injected(&self, code: u16) -> u64 {
        self.injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&code)
            .copied()
            .unwrap_or(0)
    }

    /// Seeds the PRNG (non-zero).
    pub fn seed(&self, seed: u64) {
        *self.rng.lock().unwrap_or_else(|p| p.into_inner()) = seed.max(1);
    }

    /// Ends every watch stream after `every` (None: watches run to their timeout).
    pub fn drop_watches_every(&self, every: Option<Duration>) {
        *self.watch_drop.lock().unwrap_or_else(|p| p.into_inner()) = every;
    }

    /// The next watch of `resource` (storage key) that resumes from a resourceVersion gets an
    /// ERROR event with 410 Expired, as after a compaction of the API server's history: the
    /// client has to list again. Counted in [`Faults::injected`] as 410.
    pub fn expire_next_watch(&self, resource: &str) {
        self.expire
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(resource.to_string());
    }

    /// Whether this watch of `resource` is to expire (consumes the request).
    pub fn take_expiry(&self, resource: &str) -> bool {
        let mut expire = self.expire.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = expire.iter().position(|r| r == resource) else {
            return false;
        };
        expire.remove(i);
        *self
            .injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(410)
            .or_default() += 1;
        true
    }

    /// Every watch of `resource` (storage key), open or to come, delivers nothing (no event, no
    /// bookmark) until [`Faults::release_watches`]: the watch cache of one resource behind the
    /// others', as an API server under load has it. The streams stay open; what happened
    /// meanwhile is delivered in order on release.
    pub fn hold_watches(&self, resource: &str) {
        self.held
            .send_modify(|held| held.push(resource.to_string()));
    }

    /// Ends [`Faults::hold_watches`] for `resource`.
    pub fn release_watches(&self, resource: &str) {
        self.held.send_modify(|held| held.retain(|r| r != resource));
    }

    /// Whether the watches of `resource` are held.
    pub fn watches_held(&self, resource: &str) -> bool {
        self.held.borrow().iter().any(|r| r == resource)
    }

    /// Returns once the watches of `resource` are not held.
    pub async fn watches_released(&self, resource: &str) {
        let mut held = self.held.subscribe();
        // The sender lives as long as `self`: the wait ends only by the release.
        let _ = held
            .wait_for(|held| !held.iter().any(|r| r == resource))
            .await;
    }

    pub fn watch_drop(&self) -> Option<Duration> {
        *self.watch_drop.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next(&self) -> u64 {
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        // xorshift64*
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&self, rate: f64) -> bool {
        rate > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= rate
    }

    /// The delay and the injected error (if any) for a request.
    pub fn decide(&self, verb: &str, r: &ResourceInfo, name: &str) -> (Duration, Option<ApiError>) {
        let rules: Vec<FaultRule> = self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut delay = *self.spike.lock().unwrap_or_else(|p| p.into_inner());
        for rule in rules {
            if rule.verb.as_deref().is_some_and(|v| v != verb)
                || rule.resource.as_deref().is_some_and(|k| k != r.key())
            {
                continue;
            }
            delay += Duration::from_millis(rule.latency_ms);
            if rule.codes.is_empty() || !self.chance(rule.rate) {
                continue;
            }
            let code = rule.codes[(self.next() % rule.codes.len() as u64) as usize];
            *self
                .injected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(code)
                .or_default() += 1;
            return (delay, Some(error_for(code, verb, r, name)));
        }
        (delay, None)
    }
}

fn error_for(code: u16, verb: &str, r: &ResourceInfo, name: &str) -> ApiError {
    match code {
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later (emulated fault)",
        ),
        409 => ApiError::conflict(
            r,
            name,
            "the object has been modified; please apply your changes to the latest version and try again (emulated fault)",
        ),
        403 => ApiError::forbidden(
            r,
            name,
            &format!(
                "User \"system:serviceaccount:sites:sites-operator\" cannot {verb} resource \"{}\" in API group \"{}\" (emulated fault)",
                r.plural, r.group
            ),
        ),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (emulated fault)",
        ),
        504 => ApiError::new(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted (emulated fault)",
        ),
        other => ApiError::new(
            other,
            "InternalError",
            "Internal error occurred: emulated fault",
        ),
    }
}

/// A deterministic pseudo-random sequence for the chaos of tests and benchmarks (which
/// component is killed when, after how many writes): the same seed, the same run.
pub struct Lcg(pub u64);

impl Lcg {
    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        low + (self.0 >> 33) % (high - low + 1)
    }

    /// A pause of `low..=high` milliseconds.
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.between(low, high))
    }
}

#[cfg(test)]
mod lcg_tests {
    use super::Lcg;

    #[test]
    fn the_sequence_stays_in_range_and_repeats_for_a_seed() {
        let draw = |seed| {
            let mut rng = Lcg(seed);
            (0..100).map(|_| rng.between(3, 7)).collect::<Vec<_>>()
        };
        let a = draw(55);
        assert!(a.iter().all(|x| (3..=7).contains(x)));
        assert!((3..=7).all(|x| a.contains(&x)), "every value comes: {a:?}");
        assert_eq!(a, draw(55));
        assert_ne!(a, draw(56));
    }
}
