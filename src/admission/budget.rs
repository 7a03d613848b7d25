//! The webhook server's memory budget: a request in flight holds the memory it may use (the body
//! bytes read so far, then what decoding and judging that body can take, then the bytes of its
//! answer until they are written) and waits, briefly, when the budget is spent. However many
//! requests arrive at once, and however they are shaped, the memory they hold together stays
//! within the budget.
//!
//! Part of the budget, the reserve, is kept for small requests (those needing at most
//! [`Budget::small`] with their decoding): half of it for their bodies on their way and their
//! decoding, the other half for their decoding alone, once the body came. A client holds memory
//! for as long as it likes only while it sends a body (up to the body deadline) or while it
//! does not read its answer (up to the answer deadline); bodies on their way never hold the
//! second half, and an answer keeps only its own bytes (of the general part first). However
//! slowly or largely other clients send, the API server's ordinary review (a few KiB, decoded
//! in microseconds) finds room.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes (a semaphore's permits are `u32`).
pub const UNIT: usize = 1024;

/// The share of the budget kept for small requests: one part in `RESERVE_PARTS`.
const RESERVE_PARTS: u32 = 8;
/// A request is small when it needs at most one part in `SMALL_PARTS` of the reserve: several
/// fit in it at once.
const SMALL_PARTS: u32 = 4;

/// The parts of a budget, in the order a request takes them and the reverse of the order an
/// answer gives them back.
const GENERAL: usize = 0;
/// The first half of the reserve: small requests, their bodies on the way too.
const SMALL_BODIES: usize = 1;
/// The second half: small requests whose body came.
const SMALL_COMPLETE: usize = 2;

/// What a request may take of a budget, by the parts it may draw on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Draw {
    General = 1,
    SmallBody = 2,
    SmallComplete = 3,
}

/// A memory budget shared by the requests of one server.
#[derive(Clone, Debug)]
pub struct Budget {
    /// The general part, then the two halves of the reserve.
    parts: [Arc<Semaphore>; 3],
    units: u32,
    general_units: u32,
    small_units: u32,
    /// How long a request may wait for memory in all.
    wait: Duration,
    /// Set to the bytes in use whenever they change.
    gauge: Option<prometheus::IntGauge>,
}

/// Why a request could not have the memory it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spent {
    /// Other requests held the budget for longer than the request may wait.
    Busy,
    /// The request alone needs more than the whole budget.
    TooLarge,
}

impl Budget {
    /// A budget of `bytes` (rounded down to whole KiB, at least one), for which a request waits
    /// at most `wait` in all.
    pub fn new(bytes: usize, wait: Duration) -> Budget {
        let units = (bytes / UNIT).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize)) as u32;
        let reserve = units / RESERVE_PARTS;
        let general_units = units - reserve;
        let part = |n: u32| Arc::new(Semaphore::new(n as usize));
        Budget {
            parts: [
                part(general_units),
                part(reserve / 2),
                part(reserve - reserve / 2),
            ],
            units,
            general_units,
            small_units: reserve / SMALL_PARTS,
            wait,
            gauge: None,
        }
    }

    /// The budget, keeping `gauge` at the bytes in use.
    pub fn counted(mut self, gauge: prometheus::IntGauge) -> Budget {
        gauge.set(self.in_use() as i64);
        self.gauge = Some(gauge);
        self
    }

    fn count(&self) {
        if let Some(gauge) = &self.gauge {
            gauge.set(self.in_use() as i64);
        }
    }

    /// The whole budget, in bytes.
    pub fn bytes(&self) -> usize {
        self.units as usize * UNIT
    }

    /// The most one request that is not small may hold, in bytes: the budget less the reserve.
    pub fn general(&self) -> usize {
        self.general_units as usize * UNIT
    }

    /// The most a small request needs with its decoding, in bytes.
    pub fn small(&self) -> usize {
        self.small_units as usize * UNIT
    }

    /// The bytes held by requests in flight.
    pub fn in_use(&self) -> usize {
        let free: usize = self.parts.iter().map(|p| p.available_permits()).sum();
        (self.units as usize - free) * UNIT
    }

    /// A request's share, holding nothing yet; what it holds is given back when it is dropped.
    pub fn share(&self) -> Share {
        Share {
            budget: self.clone(),
            held: [None, None, None],
            waited: Duration::ZERO,
        }
    }
}

/// What one request holds of a [`Budget`], by part.
#[derive(Debug)]
pub struct Share {
    budget: Budget,
    held: [Option<OwnedSemaphorePermit>; 3],
    waited: Duration,
}

fn units_of(permit: &Option<OwnedSemaphorePermit>) -> u32 {
    permit.as_ref().map_or(0, |p| p.num_permits() as u32)
}

impl Share {
    fn units(&self) -> u32 {
        self.held.iter().map(units_of).sum()
    }

    /// Holds at least `bytes` in all, from the general part of the budget, waiting for what is
    /// missing while the request has wait time left. Nothing more is held when it fails.
    pub async fn grow_to(&mut self, bytes: usize) -> Result<(), Spent> {
        self.grow(bytes, Draw::General).await
    }

    /// [`Share::grow_to`] for a body on its way that, with what decoding it takes, needs at most
    /// `needed` bytes: when that is small, the first half of the reserve may give what is
    /// missing.
    pub async fn grow_body_to(&mut self, bytes: usize, needed: usize) -> Result<(), Spent> {
        let draw = if needed <= self.budget.small() {
            Draw::SmallBody
        } else {
            Draw::General
        };
        self.grow(bytes, draw).await
    }

    /// [`Share::grow_to`] for a request whose body is complete: when it needs no more than
    /// [`Budget::small`] in all, the whole reserve may give what is missing.
    pub async fn grow_complete_to(&mut self, bytes: usize) -> Result<(), Spent> {
        let draw = if bytes <= self.budget.small() {
            Draw::SmallComplete
        } else {
            Draw::General
        };
        self.grow(bytes, draw).await
    }

    async fn grow(&mut self, bytes: usize, draw: Draw) -> Result<(), Spent> {
        let limit = match draw {
            Draw::General => self.budget.general_units,
            _ => self.budget.units,
        };
        let needed = bytes.div_ceil(UNIT);
        if needed > limit as usize {
            return Err(Spent::TooLarge);
        }
        let units = self.units();
        if needed as u32 <= units {
            return Ok(());
        }
        let extra = needed as u32 - units;
        let parts = &self.budget.parts[..draw as usize];
        let taken = parts.iter().enumerate().find_map(|(i, part)| {
            part.clone()
                .try_acquire_many_owned(extra)
                .ok()
                .map(|p| (i, p))
        });
        let (i, permit) = match taken {
            Some(taken) => taken,
            None => {
                // Whichever part has room first.
                let [general, bodies, complete] = self.budget.parts.clone();
                let may = |d: Draw| draw as usize >= d as usize;
                let either = async {
                    tokio::select! {
                        p = general.acquire_many_owned(extra) => p.map(|p| (GENERAL, p)),
                        p = bodies.acquire_many_owned(extra), if may(Draw::SmallBody) =>
                            p.map(|p| (SMALL_BODIES, p)),
                        p = complete.acquire_many_owned(extra), if may(Draw::SmallComplete) =>
                            p.map(|p| (SMALL_COMPLETE, p)),
                    }
                };
                self.wait_for(either).await?
            }
        };
        match &mut self.held[i] {
            Some(held) => held.merge(permit),
            None => self.held[i] = Some(permit),
        }
        self.budget.count();
        Ok(())
    }

    /// Gives back all but `bytes`, the reserve first: what an answer keeps while it is written.
    pub fn shrink_to(&mut self, bytes: usize) {
        let mut keep = bytes.div_ceil(UNIT) as u32;
        let before = self.units();
        // The general part is kept first: the reserve is for small requests on their way.
        for held in &mut self.held {
            let units = units_of(held);
            let kept = units.min(keep);
            keep -= kept;
            if kept == 0 {
                *held = None;
            } else if let Some(permit) = held {
                drop(permit.split((units - kept) as usize));
            }
        }
        if self.units() != before {
            self.budget.count();
        }
    }

    /// Waits for `acquire` while the request has wait time left.
    async fn wait_for<T>(
        &mut self,
        acquire: impl std::future::Future<Output = Result<T, tokio::sync::AcquireError>>,
    ) -> Result<T, Spent> {
        let left = self.budget.wait.saturating_sub(self.waited);
        let started = tokio::time::Instant::now();
        let acquired = tokio::time::timeout(left, acquire).await;
        self.waited += started.elapsed();
        match acquired {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out, or the semaphore closed (it never is).
            _ => Err(Spent::Busy),
        }
    }

    /// The bytes this request holds.
    pub fn bytes(&self) -> usize {
        self.units() as usize * UNIT
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut gave = false;
        for held in &mut self.held {
            gave |= held.take().is_some();
        }
        if gave {
            self.budget.count();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of 80 units: 70 general, a reserve of 10, small requests of at most 2.
    fn budget(gauge: &prometheus::IntGauge) -> Budget {
        let budget = Budget::new(80 * UNIT, Duration::from_secs(1)).counted(gauge.clone());
        assert_eq!((budget.bytes(), budget.small()), (80 * UNIT, 2 * UNIT));
        budget
    }

    #[tokio::test(start_paused = true)]
    async fn requests_hold_what_they_use_wait_briefly_and_give_it_back() {
        let gauge = prometheus::IntGauge::new("in_use", "bytes").unwrap();
        let budget = budget(&gauge);
        let mut a = budget.share();
        a.grow_to(1).await.unwrap();
        assert_eq!(a.bytes(), UNIT, "whole units");
        a.grow_to(42 * UNIT).await.unwrap();
        a.grow_to(2 * UNIT).await.unwrap();
        assert_eq!(
            (a.bytes(), budget.in_use()),
            (42 * UNIT, 42 * UNIT),
            "never shrinks by growing"
        );
        assert_eq!(gauge.get(), 42 * UNIT as i64);

        // A second request gets what is left of the general part at once, then waits for more,
        // and gets it when the first one ends within its wait.
        let mut b = budget.share();
        b.grow_to(28 * UNIT).await.unwrap();
        let waiting = tokio::spawn(async move {
            let got = b.grow_to(56 * UNIT).await;
            (got, b)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished());
        drop(a);
        let (got, b) = waiting.await.unwrap();
        assert_eq!(got, Ok(()));
        assert_eq!(budget.in_use(), 56 * UNIT);

        // A third one waits its second and is refused, holding nothing more; so is a request
        // larger than the budget, at once.
        let mut c = budget.share();
        c.grow_to(14 * UNIT).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(c.grow_to(15 * UNIT).await, Err(Spent::Busy));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(c.bytes(), 14 * UNIT);
        // Its wait is used up: the next shortage is refused without waiting.
        assert_eq!(c.grow_to(15 * UNIT).await, Err(Spent::Busy));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        // Not small, it may not take the reserve: too large past the general part.
        assert_eq!(
            budget.share().grow_to(71 * UNIT).await,
            Err(Spent::TooLarge)
        );
        assert_eq!(
            budget.share().grow_complete_to(71 * UNIT).await,
            Err(Spent::TooLarge)
        );
        drop((b, c));
        assert_eq!((budget.in_use(), gauge.get()), (0, 0));
    }

    /// With the general part held (by bodies on their way), small requests are served from the
    /// reserve, and nothing else is: a large body, a larger request; small bodies on their way
    /// take only its first half.
    #[tokio::test(start_paused = true)]
    async fn the_reserve_serves_small_requests_only() {
        let gauge = prometheus::IntGauge::new("in_use", "bytes").unwrap();
        let budget = budget(&gauge);
        let mut bodies = budget.share();
        bodies.grow_to(70 * UNIT).await.unwrap();
        // A large body on its way does not take the reserve.
        assert_eq!(budget.share().grow_to(UNIT).await, Err(Spent::Busy));
        assert_eq!(
            budget.share().grow_body_to(UNIT, 3 * UNIT).await,
            Err(Spent::Busy)
        );
        // Small ones take its first half, and no more.
        let mut small_bodies: Vec<Share> = Vec::new();
        for _ in 0..5 {
            let mut share = budget.share();
            share.grow_body_to(UNIT, 2 * UNIT).await.unwrap();
            small_bodies.push(share);
        }
        assert_eq!(
            budget.share().grow_body_to(UNIT, 2 * UNIT).await,
            Err(Spent::Busy)
        );
        assert_eq!(budget.in_use(), 75 * UNIT);
        // Complete small requests still have the second half.
        let mut complete = budget.share();
        complete.grow_complete_to(2 * UNIT).await.unwrap();
        drop((small_bodies, complete));
        assert_eq!(budget.in_use(), 70 * UNIT);
        // A larger complete request waits for the general part, then is refused.
        assert_eq!(
            budget.share().grow_complete_to(3 * UNIT).await,
            Err(Spent::Busy)
        );
        // Small ones fit at once, each in one half (four of two units, two of one).
        let mut small: Vec<Share> = Vec::new();
        for units in [2, 2, 2, 2, 1, 1] {
            let mut share = budget.share();
            share.grow_complete_to(units * UNIT).await.unwrap();
            small.push(share);
        }
        assert_eq!(budget.in_use(), 80 * UNIT);
        // A sixth waits for one of them.
        let mut sixth = budget.share();
        let waiting = tokio::spawn(async move { (sixth.grow_complete_to(UNIT).await, sixth) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        // Its answer keeps one unit, and gives the rest back.
        small[0].shrink_to(100);
        assert_eq!(small[0].bytes(), UNIT);
        let (got, sixth) = waiting.await.unwrap();
        assert_eq!(got, Ok(()));
        assert_eq!(budget.in_use(), 80 * UNIT);
        drop((small, sixth));
        // An answer keeps the general part first: the reserve goes back.
        let mut mixed = budget.share();
        drop(bodies);
        mixed.grow_to(UNIT).await.unwrap();
        let mut bodies = budget.share();
        bodies.grow_to(69 * UNIT).await.unwrap();
        mixed.grow_complete_to(2 * UNIT).await.unwrap();
        assert_eq!(budget.in_use(), 71 * UNIT);
        mixed.shrink_to(UNIT);
        assert_eq!(mixed.bytes(), UNIT);
        assert_eq!(
            (
                budget.parts[SMALL_BODIES].available_permits(),
                budget.parts[SMALL_COMPLETE].available_permits()
            ),
            (5, 5)
        );
        mixed.shrink_to(0);
        assert_eq!(mixed.bytes(), 0);
        drop((bodies, mixed));
        assert_eq!((budget.in_use(), gauge.get()), (0, 0));
    }
}
