//! One generic, thread-safe LRU bounded by the bytes its values hold (not by their count). It
//! backs every cache of the daemon: decoded index blocks, string-tensor layouts, rendered text.
//! It knows nothing of what it holds: each value is inserted with its weight in bytes.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lru::LruCache;

pub(crate) struct Lru<K: Hash + Eq, V: Clone> {
    inner: Mutex<Inner<K, V>>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner<K: Hash + Eq, V> {
    lru: LruCache<K, (V, usize)>,
    bytes: usize,
}

/// Counters for logs, tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(test)]
pub(crate) struct CacheStats {
    pub(crate) entries: usize,
    pub(crate) bytes: usize,
    pub(crate) capacity: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

impl<K: Hash + Eq, V: Clone> Lru<K, V> {
    /// A cache holding at most `capacity` bytes of values; 0 disables it.
    pub(crate) fn new(capacity: usize) -> Self {
        Lru {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let hit = self.lock().lru.get(key).map(|(v, _)| v.clone());
        let counter = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Keeps `value` (of `weight` bytes), evicting the least recently used values until the
    /// total fits. A value larger than the whole capacity is not kept.
    pub(crate) fn insert(&self, key: K, value: V, weight: usize) {
        if weight > self.capacity {
            return;
        }
        let mut inner = self.lock();
        if let Some((_, old)) = inner.lru.put(key, (value, weight)) {
            inner.bytes -= old;
        }
        inner.bytes += weight;
        while inner.bytes > self.capacity {
            match inner.lru.pop_lru() {
                Some((_, (_, w))) => inner.bytes -= w,
                None => break,
            }
        }
    }

    /// Inserts `value` unless `key` is held already, in one step under the lock: `true` when
    /// this call inserted it (of two threads racing with the same key, exactly one gets `true`).
    pub(crate) fn insert_new(&self, key: K, value: V, weight: usize) -> bool {
        if weight > self.capacity {
            return false;
        }
        let mut inner = self.lock();
        if inner.lru.get(&key).is_some() {
            return false;
        }
        inner.lru.put(key, (value, weight));
        inner.bytes += weight;
        while inner.bytes > self.capacity {
            match inner.lru.pop_lru() {
                Some((_, (_, w))) => inner.bytes -= w,
                None => break,
            }
        }
        true
    }

    /// The value under `key`, or `make()`'s, kept when it succeeds. `make` runs without the
    /// lock held (two threads may both make a value; one is kept).
    pub(crate) fn get_or_insert_with<E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<(V, usize), E>,
    ) -> Result<V, E> {
        if let Some(v) = self.get(&key) {
            return Ok(v);
        }
        let (v, w) = make()?;
        self.insert(key, v.clone(), w);
        Ok(v)
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            entries: inner.lru.len(),
            bytes: inner.bytes,
            capacity: self.capacity,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        // A panic while holding the lock cannot leave the LRU inconsistent in a way that matters
        // (worst case a wrong byte count), so recover from poisoning instead of propagating it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn insert_new_says_yes_once_per_key_even_racing() {
        let c = std::sync::Arc::new(Lru::<u64, ()>::new(1 << 10));
        let wins: usize = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..100u64).filter(|&k| c.insert_new(k, (), 1)).count())
            })
            .map(|t| t.join().expect("thread"))
            .sum();
        assert_eq!(wins, 100);
        assert!(!c.insert_new(5, (), 1));
    }

    use super::*;

    #[test]
    fn bounded_by_bytes_and_evicts_least_recent() {
        let c: Lru<u32, u32> = Lru::new(100);
        c.insert(1, 1, 40);
        c.insert(2, 2, 40);
        assert_eq!(c.get(&1), Some(1)); // 1 is now the most recent
        c.insert(3, 3, 40); // evicts 2
        assert_eq!(c.get(&2), None);
        assert_eq!(c.get(&1), Some(1));
        assert_eq!(c.get(&3), Some(3));
        let s = c.stats();
        assert_eq!((s.entries, s.bytes), (2, 80));
        c.insert(4, 4, 101); // larger than the whole cache: not kept
        assert_eq!(c.get(&4), None);
        c.insert(1, 10, 10); // replacing re-weighs
        assert_eq!(c.stats().bytes, 50);
        let r: Result<u32, ()> = c.get_or_insert_with(5, || Ok((5, 10)));
        assert_eq!((r, c.get(&5)), (Ok(5), Some(5)));
        let e: Result<u32, &str> = c.get_or_insert_with(6, || Err("no"));
        assert_eq!((e, c.get(&6)), (Err("no"), None));
    }
}
