//! The memory budget shared by all read-ahead and cached parts of one remote store
//! (`remote_cache`), in the manner of mountpoint-s3's memory limiter.
//!
//! Bytes are reserved before a GET is sent and released when the fetched part is dropped
//! ([`Reservation`] is an RAII guard). Two kinds of reservation:
//! - speculative ([`Budget::try_reserve`]: read-ahead, caching): granted only while the total
//!   stays within the budget; a refusal makes the reader shrink its window, or not cache;
//! - demand ([`Budget::reserve`]: bytes a caller is waiting for now): may go past the budget by
//!   at most [`OVERDRAFT`], and waits (bounded by a deadline) when even that is used.
//!
//! So the fetched bytes held at any moment never exceed budget + [`OVERDRAFT`], however many
//! readers there are.

use crate::sync::lock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// How far demand reservations may exceed the budget (room for a few parts in flight).
pub(crate) const OVERDRAFT: u64 = 32 << 20;

#[derive(Debug, Default)]
struct State {
    used: u64,
    peak: u64,
}

/// A byte budget. Shared (`Arc`) by everything that holds fetched bytes of one store.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    state: Mutex<State>,
    freed: Condvar,
}

/// Bytes held against a [`Budget`]; released on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Reservation {
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut s = self.budget.lock();
            s.used = s.used.saturating_sub(self.bytes);
            drop(s);
            self.budget.freed.notify_all();
        }
    }
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding this lock leaves plain counters: still usable.
        lock(&self.state)
    }

    fn grant(self: &Arc<Self>, s: &mut State, bytes: u64) -> Reservation {
        s.used += bytes;
        s.peak = s.peak.max(s.used);
        Reservation {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// Bytes reserved now.
    pub(crate) fn used(&self) -> u64 {
        self.lock().used
    }

    /// The most bytes ever reserved at once.
    pub(crate) fn peak(&self) -> u64 {
        self.lock().peak
    }

    /// A speculative reservation: granted only if the total stays within the budget.
    pub(crate) fn try_reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut s = self.lock();
        let total = s.used.checked_add(bytes)?;
        (total <= self.limit).then(|| self.grant(&mut s, bytes))
    }

    /// A demand reservation if one can be had now (see [`Budget::reserve`]), else `None`.
    pub(crate) fn try_reserve_demand(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let cap = self.limit.saturating_add(OVERDRAFT);
        let mut s = self.lock();
        let fits = s.used.checked_add(bytes).is_some_and(|t| t <= cap) || s.used == 0;
        fits.then(|| self.grant(&mut s, bytes))
    }

    /// A demand reservation: granted while the total stays within budget + [`OVERDRAFT`];
    /// otherwise waits for releases until `deadline` (`None` when it passes). A request larger
    /// than the overdraft is granted only when nothing else is reserved.
    pub(crate) fn reserve(self: &Arc<Self>, bytes: u64, deadline: Instant) -> Option<Reservation> {
        let cap = self.limit.saturating_add(OVERDRAFT);
        let mut s = self.lock();
        loop {
            let fits = s.used.checked_add(bytes).is_some_and(|t| t <= cap) || s.used == 0;
            if fits {
                return Some(self.grant(&mut s, bytes));
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            s = self
                .freed
                .wait_timeout(s, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn speculative_stays_within_budget() {
        let b = Budget::new(10);
        let r1 = b.try_reserve(6).unwrap();
        assert!(b.try_reserve(5).is_none());
        let r2 = b.try_reserve(4).unwrap();
        assert_eq!(b.used(), 10);
        drop(r1);
        assert_eq!(b.used(), 4);
        assert!(b.try_reserve(6).is_some());
        drop(r2);
        assert_eq!(b.used(), 0);
        assert_eq!(b.peak(), 10);
        assert!(b.try_reserve(u64::MAX).is_none());
    }

    #[test]
    fn demand_uses_the_overdraft_then_waits() {
        let b = Budget::new(0);
        let soon = || Instant::now() + Duration::from_millis(50);
        let r = b.reserve(OVERDRAFT, soon()).unwrap();
        let t = Instant::now();
        assert!(b.reserve(1, soon()).is_none());
        assert!(t.elapsed() >= Duration::from_millis(40));
        // A release wakes a waiter.
        let b2 = Arc::clone(&b);
        let h = std::thread::spawn(move || {
            b2.reserve(OVERDRAFT, Instant::now() + Duration::from_secs(10))
                .map(|r| r.bytes())
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(r);
        assert_eq!(h.join().unwrap(), Some(OVERDRAFT));
        assert_eq!(b.used(), 0);
        // An oversized demand goes through alone.
        assert!(b.reserve(OVERDRAFT * 2, soon()).is_some());
    }
}
