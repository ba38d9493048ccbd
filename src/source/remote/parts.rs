//! Random reads: whole MiB blocks around the bytes asked for, and a small cache of recently
//! fetched blocks shared by all files of a store.
//!
//! Blocks are aligned to MiB offsets of the object (the last one ends at its end). A read finds
//! the blocks it needs in the cache, fetches the missing ones (consecutive blocks in one GET of
//! at most [`MAX_GET`] bytes, up to [`IN_FLIGHT`] GETs at once, bytes reserved on demand from
//! the budget), copies what it asked for, and keeps the blocks of small reads in the cache
//! (`remote_cache` / 4 at most, reserved speculatively: when the budget is taken by read-ahead,
//! nothing is cached).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use lru::LruCache;

use super::budget::{Budget, Reservation};
use super::file::{Object, Pending};
use super::store::Ctx;
use super::RemoteError;

/// Block size of random reads and of the cache.
pub const BLOCK: u64 = 1 << 20;
/// Largest single GET.
pub const MAX_GET: u64 = 8 << 20;
/// GETs one random read keeps in flight.
pub const IN_FLIGHT: usize = 4;
/// Reads up to this size leave their blocks in the cache; larger ones are streaming.
const CACHE_READS_UP_TO: u64 = 4 << 20;

/// A cached piece of block `key.1` of object `key.0`: bytes from `start`.
struct Entry {
    start: u64,
    data: Bytes,
    _res: Reservation,
}

struct Inner {
    lru: LruCache<(u64, u64), Entry>,
    bytes: u64,
}

/// Recently fetched blocks of all files of one store.
pub(crate) struct PartCache {
    cap: u64,
    inner: Mutex<Inner>,
}

impl PartCache {
    pub fn new(cap: u64) -> PartCache {
        PartCache {
            cap,
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The cached piece of block `block` of object `id`, if it holds `[from, to)`.
    fn get(&self, id: u64, block: u64, from: u64, to: u64) -> Option<(u64, Bytes)> {
        let mut g = self.lock();
        let e = g.lru.get(&(id, block))?;
        (e.start <= from && e.start + e.data.len() as u64 >= to).then(|| (e.start, e.data.clone()))
    }

    /// Keeps `data` (bytes of block `block` of object `id` from `start`) if the cache and the
    /// budget have room, evicting the least recently used blocks for it.
    pub fn insert(&self, budget: &Arc<Budget>, id: u64, block: u64, start: u64, data: Bytes) {
        let n = data.len() as u64;
        if n == 0 || n > self.cap {
            return;
        }
        let mut g = self.lock();
        let Inner { lru, bytes } = &mut *g;
        if let Some(old) = lru.pop(&(id, block)) {
            *bytes -= old.data.len() as u64;
        }
        while *bytes + n > self.cap {
            match lru.pop_lru() {
                Some((_, old)) => *bytes -= old.data.len() as u64,
                None => break,
            }
        }
        let res = loop {
            if let Some(r) = budget.try_reserve(n) {
                break r;
            }
            // The budget is full: make room from the cache's own blocks, else do not cache.
            match lru.pop_lru() {
                Some((_, old)) => *bytes -= old.data.len() as u64,
                None => return,
            }
        };
        *bytes += n;
        lru.put(
            (id, block),
            Entry {
                start,
                data,
                _res: res,
            },
        );
    }

    /// Drops every cached block of object `id`.
    pub fn forget(&self, id: u64) {
        let mut g = self.lock();
        let Inner { lru, bytes } = &mut *g;
        let mut freed = 0;
        lru.retain(|k, e| {
            let keep = k.0 != id;
            if !keep {
                freed += e.data.len() as u64;
            }
            keep
        });
        *bytes -= freed;
    }
}

/// Copies the part of `data` (object bytes from `data_start`) that overlaps `buf` (object
/// bytes from `offset`) into `buf`; returns how many bytes that was.
pub(crate) fn copy_overlap(buf: &mut [u8], offset: u64, data_start: u64, data: &[u8]) -> u64 {
    let end = offset + buf.len() as u64;
    let data_end = data_start + data.len() as u64;
    let (from, to) = (offset.max(data_start), end.min(data_end));
    if from >= to {
        return 0;
    }
    let d = &data[(from - data_start) as usize..(to - data_start) as usize];
    buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(d);
    to - from
}

/// One GET of consecutive blocks in flight.
struct InFlight {
    first_block: u64,
    pending: Pending,
    _res: Reservation,
}

/// Fills `buf` (already checked to lie within `obj`) from `offset` with whole blocks.
pub(crate) fn read_blocks(
    ctx: &Ctx,
    obj: &Arc<Object>,
    buf: &mut [u8],
    offset: u64,
    deadline: Instant,
) -> Result<(), RemoteError> {
    if buf.is_empty() {
        return Ok(());
    }
    let end = offset + buf.len() as u64;
    let block_range = |b: u64| (b * BLOCK, ((b + 1) * BLOCK).min(obj.size));
    let mut missing = Vec::new();
    for b in offset / BLOCK..=(end - 1) / BLOCK {
        let (bs, be) = block_range(b);
        let (from, to) = (bs.max(offset), be.min(end));
        match ctx.cache.get(obj.id, b, from, to) {
            Some((start, data)) => {
                copy_overlap(buf, offset, start, &data);
            }
            None => missing.push(b),
        }
    }
    // Runs of consecutive missing blocks, cut into GETs of at most MAX_GET.
    let per_get = MAX_GET / BLOCK;
    let mut gets: Vec<(u64, u64)> = Vec::new();
    for b in missing {
        match gets.last_mut() {
            Some((first, n)) if *first + *n == b && *n < per_get => *n += 1,
            _ => gets.push((b, 1)),
        }
    }
    let cache_it = buf.len() as u64 <= CACHE_READS_UP_TO;
    let mut flying: VecDeque<InFlight> = VecDeque::new();
    let land = |mut f: InFlight, buf: &mut [u8]| -> Result<(), RemoteError> {
        let pieces = f.pending.wait(ctx, deadline)?;
        for (i, data) in pieces.into_iter().enumerate() {
            let b = f.first_block + i as u64;
            let (bs, _) = block_range(b);
            copy_overlap(buf, offset, bs, &data);
            if cache_it {
                ctx.cache.insert(&ctx.budget, obj.id, b, bs, data);
            }
        }
        Ok(())
    };
    for (first, n) in gets {
        let (start, _) = block_range(first);
        let (_, stop) = block_range(first + n - 1);
        let len = stop - start;
        let res = loop {
            if let Some(r) = ctx.budget.try_reserve_demand(len) {
                break r;
            }
            // Over budget: land our own GETs first; wait for others' only with none left.
            match flying.pop_front() {
                Some(f) => land(f, buf)?,
                None => {
                    break ctx
                        .budget
                        .reserve(len, deadline)
                        .ok_or_else(|| ctx.timeout_err(&obj.url))?
                }
            }
        };
        flying.push_back(InFlight {
            first_block: first,
            pending: Pending::spawn(ctx, obj, start..stop, BLOCK, deadline),
            _res: res,
        });
        if flying.len() >= IN_FLIGHT {
            if let Some(f) = flying.pop_front() {
                land(f, buf)?;
            }
        }
    }
    while let Some(f) = flying.pop_front() {
        land(f, buf)?;
    }
    Ok(())
}
