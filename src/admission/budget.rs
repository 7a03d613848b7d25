//! The webhook server's memory budget: a request in flight holds the memory it may use (the body
//! bytes read so far, then what decoding and judging that body can take) and waits, briefly,
//! when the budget is spent. However many requests arrive at once, and however they are shaped,
//! the memory they hold together stays within the budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes (a semaphore's permits are `u32`).
const UNIT: usize = 1024;

/// A memory budget shared by the requests of one server.
#[derive(Clone, Debug)]
pub struct Budget {
    permits: Arc<Semaphore>,
    units: u32,
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
        Budget {
            permits: Arc::new(Semaphore::new(units as usize)),
            units,
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

    /// The bytes held by requests in flight.
    pub fn in_use(&self) -> usize {
        (self.units as usize - self.permits.available_permits()) * UNIT
    }

    /// A request's share, holding nothing yet; what it holds is given back when it is dropped.
    pub fn share(&self) -> Share {
        Share {
            budget: self.clone(),
            permit: None,
            units: 0,
            waited: Duration::ZERO,
        }
    }
}

/// What one request holds of a [`Budget`].
#[derive(Debug)]
pub struct Share {
    budget: Budget,
    permit: Option<OwnedSemaphorePermit>,
    units: u32,
    waited: Duration,
}

impl Share {
    /// Holds at least `bytes` in all, waiting for what is missing while the request has wait
    /// time left. Nothing more is held when it fails.
    pub async fn grow_to(&mut self, bytes: usize) -> Result<(), Spent> {
        let needed = bytes.div_ceil(UNIT);
        if needed > self.budget.units as usize {
            return Err(Spent::TooLarge);
        }
        let needed = needed as u32;
        if needed <= self.units {
            return Ok(());
        }
        let extra = needed - self.units;
        let permits = self.budget.permits.clone();
        let permit = match permits.clone().try_acquire_many_owned(extra) {
            Ok(permit) => permit,
            Err(_) => {
                let left = self.budget.wait.saturating_sub(self.waited);
                let started = tokio::time::Instant::now();
                let acquired = tokio::time::timeout(left, permits.acquire_many_owned(extra)).await;
                self.waited += started.elapsed();
                match acquired {
                    Ok(Ok(permit)) => permit,
                    // Timed out, or the semaphore closed (it never is).
                    _ => return Err(Spent::Busy),
                }
            }
        };
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.units = needed;
        self.budget.count();
        Ok(())
    }

    /// The bytes this request holds.
    pub fn bytes(&self) -> usize {
        self.units as usize * UNIT
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.permit.take().is_some() {
            self.budget.count();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_hold_what_they_use_wait_briefly_and_give_it_back() {
        let gauge = prometheus::IntGauge::new("in_use", "bytes").unwrap();
        let budget = Budget::new(10 * UNIT, Duration::from_secs(1)).counted(gauge.clone());
        assert_eq!(budget.bytes(), 10 * UNIT);
        let mut a = budget.share();
        a.grow_to(1).await.unwrap();
        assert_eq!(a.bytes(), UNIT, "whole units");
        a.grow_to(6 * UNIT).await.unwrap();
        a.grow_to(2 * UNIT).await.unwrap();
        assert_eq!(
            (a.bytes(), budget.in_use()),
            (6 * UNIT, 6 * UNIT),
            "never shrinks"
        );
        assert_eq!(gauge.get(), 6 * UNIT as i64);

        // A second request gets what is left at once, then waits for more, and gets it when
        // the first one ends within its wait.
        let mut b = budget.share();
        b.grow_to(4 * UNIT).await.unwrap();
        let waiting = tokio::spawn(async move {
            let got = b.grow_to(8 * UNIT).await;
            (got, b)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished());
        drop(a);
        let (got, b) = waiting.await.unwrap();
        assert_eq!(got, Ok(()));
        assert_eq!(budget.in_use(), 8 * UNIT);

        // A third one waits its second and is refused, holding nothing more; so is a request
        // larger than the budget, at once.
        let mut c = budget.share();
        c.grow_to(2 * UNIT).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(c.grow_to(3 * UNIT).await, Err(Spent::Busy));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(c.bytes(), 2 * UNIT);
        // Its wait is used up: the next shortage is refused without waiting.
        assert_eq!(c.grow_to(3 * UNIT).await, Err(Spent::Busy));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(
            budget.share().grow_to(11 * UNIT).await,
            Err(Spent::TooLarge)
        );
        drop((b, c));
        assert_eq!((budget.in_use(), gauge.get()), (0, 0));
    }
}
