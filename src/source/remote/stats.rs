//! Request and byte counters of one remote store, for benchmarks, tests and the lead's logs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Request counters of one store (for benchmarks and tests).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) gets: AtomicU64,
    pub(crate) heads: AtomicU64,
    pub(crate) lists: AtomicU64,
    pub(crate) bytes: AtomicU64,
}

/// A snapshot of a store's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// GET requests sent (ranged reads).
    pub gets: u64,
    /// HEAD requests sent (opening files, probing paths).
    pub heads: u64,
    /// LIST requests sent (one per page).
    pub(crate) lists: u64,
    /// Body bytes received by GETs.
    pub bytes_fetched: u64,
    /// Bytes of read-ahead and cached parts held now, and the most ever held at once.
    pub(crate) budget_used: u64,
    pub(crate) budget_peak: u64,
    /// The disk cache (`cache_dir`): bytes served from it, bytes written to it, damaged pieces
    /// found (and fetched again), pieces evicted; all 0 without one.
    pub(crate) disk_hit_bytes: u64,
    pub(crate) disk_write_bytes: u64,
    pub(crate) disk_damaged: u64,
    pub(crate) disk_evicted: u64,
}

impl Stats {}

/// Body bytes received by every GET of every store of the process (`tfmount warm`'s "fetched":
/// what the server sent this run, index and metadata included).
pub(crate) static FETCHED: AtomicU64 = AtomicU64::new(0);

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` body bytes received (this store's, and the process's [`FETCHED`]).
    pub(crate) fn received(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        FETCHED.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.heads.load(Ordering::Relaxed),
            self.lists.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}
