//! A work queue with the semantics of client-go's workqueue:
//! - a key is queued at most once (adds of a queued key are merged);
//! - a key is never handed to two workers at once: an add while it is being processed marks it
//!   dirty, and it is queued again when the worker calls [`Queue::done`];
//! - delayed adds ([`Queue::add_after`]) and per-key exponential backoff
//!   ([`Queue::add_rate_limited`], reset by [`Queue::forget`]);
//! - [`Queue::shutdown`] stops handing out keys; workers finish what they hold.
//!
//! Metrics use the controller-runtime names (`workqueue_*`, label `name`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Per-key exponential backoff: `base * 2^failures`, capped at `max`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        // client-go's default controller rate limiter: 5 ms doubling to 1000 s.
        Backoff {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (the first failure waits `base`).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(30));
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Gives back the room of collections that emptied after a burst (100,000 Sites queued at once
/// leave some 16 MiB of it): one holding less than a quarter of its capacity is shrunk to twice
/// what it holds, so a shrink follows at least as many removals as it frees room for.
macro_rules! give_back {
    ($($c:expr),*) => {$(
        let (len, capacity) = ($c.len(), $c.capacity());
        if capacity > 64 && len < capacity / 4 {
            $c.shrink_to(len * 2);
        }
    )*};
}

struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    dirty: HashSet<K>,
    processing: HashMap<K, Instant>,
    added_at: HashMap<K, Instant>,
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_for: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
    seq: u64,
    shutting_down: bool,
}

/// The queue. Cheap to clone (shared).
pub struct Queue<K> {
    state: Arc<Mutex<State<K>>>,
    notify: Arc<Notify>,
    metrics: Option<crate::metrics::QueueMetrics>,
    backoff: Backoff,
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Queue {
            state: self.state.clone(),
            notify: self.notify.clone(),
            metrics: self.metrics.clone(),
            backoff: self.backoff,
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    /// A new queue; `metrics` are updated when given.
    pub fn new(backoff: Backoff, metrics: Option<crate::metrics::QueueMetrics>) -> Queue<K> {
        Queue {
            state: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                dirty: HashSet::new(),
                processing: HashMap::new(),
                added_at: HashMap::new(),
                waiting: BTreeMap::new(),
                waiting_for: HashMap::new(),
                failures: HashMap::new(),
                seq: 0,
                shutting_down: false,
            })),
            notify: Arc::new(Notify::new()),
            metrics,
            backoff,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add_locked(&self, s: &mut State<K>, key: K) {
        if s.shutting_down {
            return;
        }
        if let Some(m) = &self.metrics {
            m.adds.inc();
        }
        if s.processing.contains_key(&key) {
            s.dirty.insert(key);
            return;
        }
        if s.queued.insert(key.clone()) {
            s.added_at.insert(key.clone(), Instant::now());
            s.queue.push_back(key);
            if let Some(m) = &self.metrics {
                m.depth.set(s.queue.len() as i64);
            }
            self.notify.notify_one();
        }
    }

    /// Queues `key` now.
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        self.add_locked(&mut s, key);
    }

    /// Queues `key` after `delay` (an earlier pending delay for the key wins).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut s = self.lock();
        if s.shutting_down {
            return;
        }
        if let Some(existing) = s.waiting_for.get(&key)
            && *existing <= at
        {
            return;
        }
        if let Some(old) = s.waiting_for.insert(key.clone(), at) {
            s.waiting.retain(|(t, _), k| !(*t == old && *k == key));
        }
        s.seq += 1;
        let seq = s.seq;
        s.waiting.insert((at, seq), key);
        self.notify.notify_one();
    }

    /// Queues `key` after its backoff delay, counting a retry.
    pub fn add_rate_limited(&self, key: K) {
        let delay = {
            let mut s = self.lock();
            let failures = s.failures.entry(key.clone()).or_insert(0);
            *failures += 1;
            self.backoff.delay(*failures)
        };
        if let Some(m) = &self.metrics {
            m.retries.inc();
        }
        self.add_after(key, delay);
    }

    /// Resets the backoff of `key` (after a success).
    pub fn forget(&self, key: &K) {
        let mut s = self.lock();
        s.failures.remove(key);
        give_back!(s.failures);
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Moves due delayed keys into the queue; returns the next due time.
    fn promote(&self, s: &mut State<K>) -> Option<Instant> {
        let now = Instant::now();
        while let Some(((at, seq), _)) = s.waiting.first_key_value() {
            if *at > now {
                return Some(*at);
            }
            let (at, seq) = (*at, *seq);
            let key = s.waiting.remove(&(at, seq)).expect("first key exists");
            s.waiting_for.remove(&key);
            self.add_locked(s, key);
        }
        None
    }

    /// The next key to process, waiting for one; None once the queue is shut down.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            let next_due = {
                let mut s = self.lock();
                let next_due = self.promote(&mut s);
                if s.shutting_down {
                    return None;
                }
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    let now = Instant::now();
                    let added = s.added_at.remove(&key);
                    give_back!(s.queue, s.queued, s.added_at);
                    if let (Some(m), Some(added)) = (&self.metrics, added) {
                        m.queue_duration.observe((now - added).as_secs_f64());
                        m.depth.set(s.queue.len() as i64);
                    }
                    s.processing.insert(key.clone(), now);
                    // Another waiter may take the next key.
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                next_due
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as processed; a key added meanwhile is queued again.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        if let Some(started) = s.processing.remove(key)
            && let Some(m) = &self.metrics
        {
            m.work_duration.observe(started.elapsed().as_secs_f64());
        }
        if s.dirty.remove(key) {
            self.add_locked(&mut s, key.clone());
        }
        give_back!(s.processing, s.dirty);
    }

    /// Updates the in-progress gauges (call periodically).
    pub fn observe_in_progress(&self) {
        let Some(m) = &self.metrics else { return };
        let s = self.lock();
        let now = Instant::now();
        let durations = s.processing.values().map(|t| (now - *t).as_secs_f64());
        let (sum, max) = durations.fold((0.0, 0.0f64), |(sum, max), d| (sum + d, max.max(d)));
        m.unfinished_work.set(sum);
        m.longest_running.set(max);
    }

    /// Keys queued now (not delayed, not processing).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether nothing is queued, delayed or being processed.
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        s.queue.is_empty() && s.waiting.is_empty() && s.processing.is_empty()
    }

    /// Whether nothing is queued or being processed and no delayed key comes due within
    /// `horizon` from now (delayed keys due later do not count).
    pub fn is_idle_within(&self, horizon: Duration) -> bool {
        let s = self.lock();
        let limit = Instant::now() + horizon;
        s.queue.is_empty()
            && s.processing.is_empty()
            && s.waiting.keys().next().is_none_or(|(at, _)| *at > limit)
    }

    /// Whether nothing is queued (delayed keys do not count).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops handing out keys; [`Queue::get`] returns None from now on.
    pub fn shutdown(&self) {
        self.lock().shutting_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Queue<&'static str> {
        Queue::new(Backoff::default(), None)
    }

    #[tokio::test]
    async fn adds_of_a_queued_key_merge() {
        let q = queue();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_key_being_processed_is_requeued_once_when_done() {
        let q = queue();
        q.add("a");
        let key = q.get().await.unwrap();
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 0, "not handed out while processing");
        q.done(&key);
        assert_eq!(q.len(), 1, "dirty key queued again, once");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert!(q.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_come_due_and_the_earliest_delay_wins() {
        let q = queue();
        q.add_after("a", Duration::from_secs(60));
        q.add_after("a", Duration::from_secs(30));
        q.add_after("a", Duration::from_secs(90));
        assert_eq!(q.len(), 0);
        assert!(
            !q.is_idle_within(Duration::from_secs(30)),
            "due within 30 s"
        );
        assert!(
            q.is_idle_within(Duration::from_secs(29)),
            "not due within 29 s"
        );
        let start = Instant::now();
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        q.done(&"a");
        assert!(
            q.is_idle(),
            "the 60 s and 90 s delays were merged into the 30 s one"
        );
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u128> = (1..=9).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_and_forget_resets() {
        let registry = prometheus::Registry::new();
        let m = crate::metrics::QueueMetrics::register(&registry, "site").unwrap();
        let q: Queue<&str> = Queue::new(
            Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            Some(m.clone()),
        );
        for expected in [1, 2, 4] {
            q.add_rate_limited("a");
            let start = Instant::now();
            assert_eq!(q.get().await, Some("a"));
            assert_eq!(start.elapsed(), Duration::from_secs(expected));
            q.done(&"a");
        }
        assert_eq!(q.failures(&"a"), 3);
        assert_eq!(m.retries.get(), 3);
        q.forget(&"a");
        q.add_rate_limited("a");
        let start = Instant::now();
        q.get().await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "reset after forget"
        );
        assert_eq!(m.depth.get(), 0);
        assert_eq!(m.adds.get(), 4);
    }

    #[tokio::test]
    async fn shutdown_releases_waiting_workers() {
        let q = queue();
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("late");
        assert_eq!(q.len(), 0, "no adds after shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_workers_never_hold_the_same_key() {
        let q: Queue<u32> = Queue::new(Backoff::default(), None);
        let holding = Arc::new(Mutex::new(HashSet::new()));
        let processed = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, holding, processed) = (q.clone(), holding.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert!(holding.lock().unwrap().insert(k), "key {k} held twice");
                    tokio::task::yield_now().await;
                    holding.lock().unwrap().remove(&k);
                    processed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    q.done(&k);
                }
            }));
        }
        for round in 0..200u32 {
            q.add(round % 7);
            if round % 13 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !q.is_idle() {
            assert!(Instant::now() < deadline, "queue did not drain");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        for w in workers {
            w.await.unwrap();
        }
        assert!(processed.load(std::sync::atomic::Ordering::SeqCst) >= 7);
    }
}
