//! A bounded, thread-safe LRU of decoded index blocks, shared by every table of a mount.
//! Bounded by the bytes the blocks hold, not by their count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;

use crate::format::table::Block;

type Key = (u64, u32);

pub struct BlockCache {
    inner: Mutex<Inner>,
    capacity: usize,
    next_table_id: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner {
    lru: LruCache<Key, Arc<Block>>,
    bytes: usize,
}

/// Counters for `--stats`, logs and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub blocks: usize,
    pub bytes: usize,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
}

impl BlockCache {
    /// `capacity` is in bytes of decoded block data; 0 disables caching.
    pub fn new(capacity: usize) -> Self {
        BlockCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            capacity,
            next_table_id: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// A fresh id for one table's blocks.
    pub fn register_table(&self) -> u64 {
        self.next_table_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn get(&self, table: u64, block: u32) -> Option<Arc<Block>> {
        let mut inner = self.lock();
        let hit = inner.lru.get(&(table, block)).cloned();
        drop(inner);
        if hit.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    pub fn insert(&self, table: u64, block: u32, value: Arc<Block>) {
        let size = value.mem_size();
        if size > self.capacity {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.lru.put((table, block), value) {
            inner.bytes -= old.mem_size();
        }
        inner.bytes += size;
        while inner.bytes > self.capacity {
            match inner.lru.pop_lru() {
                Some((_, old)) => inner.bytes -= old.mem_size(),
                None => break,
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            blocks: inner.lru.len(),
            bytes: inner.bytes,
            capacity: self.capacity,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the LRU inconsistent in a way that matters
        // (worst case a wrong byte count), so recover from poisoning instead of propagating it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
