//! The read primitives of object storage, in one module: everything that GETs bytes of an
//! opened object. The other read modules build on it, one way: [`super::prefetch`] (read-ahead
//! for sequential readers) uses it, [`super::file`] (the [`ByteSource`](crate::source::bytes::ByteSource))
//! uses both, [`super::store`] opens objects into them.
//!
//! - [`Object`]: an object as opened (size, ETag, time). Every GET carries `If-Match` with that
//!   ETag (or, if the store gave none, `If-Unmodified-Since`), and the answer's ETag and size are
//!   checked too: an object rewritten, replaced or deleted after it was opened gives
//!   [`RemoteError::Changed`], one log line, and every later read of it fails the same way;
//!   bytes of two versions are never mixed.
//! - [`fetch`]: the one function that GETs bytes; [`Pending`]: a GET on the store's runtime,
//!   bounded by a deadline.
//! - [`Reads`]: what every read of a store shares (runtime, client and counters, memory budget,
//!   block cache, `remote_timeout`); [`Handle`]: an opened object with them.
//! - Random reads ([`Handle::read_blocks`]): whole MiB blocks around the bytes asked for, and a
//!   small cache of recently fetched blocks shared by all files of a store. Blocks are aligned to
//!   MiB offsets of the object (the last one ends at its end). A read finds the blocks it needs
//!   in the cache, fetches the missing ones (consecutive blocks in one GET of at most
//!   [`MAX_GET`] bytes, up to [`IN_FLIGHT`] GETs at once, bytes reserved on demand from the
//!   budget), copies what it asked for, and keeps the blocks of small reads in the cache
//!   (`remote_cache` / 4 at most, reserved speculatively: when the budget is taken by
//!   read-ahead, nothing is cached).

use crate::sync::lock;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use lru::LruCache;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};

use crate::source::remote::budget::{Budget, Reservation};
use crate::source::remote::cause::{map_err, status_words};
use crate::source::remote::disk::{self, DiskCache};
use crate::source::remote::runtime::Rt;
use crate::source::remote::stats::Counters;
use crate::source::remote::RemoteError;

/// What every read of one store shares. Owned by the store; held by every opened object.
pub(crate) struct Reads {
    pub(crate) rt: Rt,
    pub(crate) io: Arc<Io>,
    /// The one memory budget every fetched byte is reserved from.
    pub(crate) budget: Arc<Budget>,
    /// Recently fetched blocks of all files of the store (the same as [`Io::mem`]).
    pub(crate) cache: Arc<PartCache>,
    /// `remote_timeout`.
    pub(crate) timeout: Duration,
}

impl Reads {
    pub(crate) fn timeout_err(&self, url: &str) -> RemoteError {
        RemoteError::Timeout {
            url: url.to_string(),
            after: self.timeout,
        }
    }
}

/// An opened object and what its reads share. Dropping the last handle forgets its cached
/// blocks (they can no longer be asked for).
pub struct Handle {
    pub(crate) reads: Arc<Reads>,
    pub(crate) obj: Arc<Object>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.reads.cache.forget(self.obj.id);
    }
}

/// What requests need: the client and the counters. Held by spawned tasks (not the runtime).
#[derive(Debug)]
pub(crate) struct Io {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) counters: Arc<Counters>,
    /// The persistent disk cache (`cache_dir`), if any: every [`fetch`] goes through it.
    pub(crate) disk: Option<Arc<DiskCache>>,
    /// The store's block cache in memory ([`Reads::cache`]): without a disk cache, every
    /// [`fetch`] goes through it instead (see [`Keep`]).
    pub(crate) mem: Arc<PartCache>,
    /// The memory budget (the same as [`Reads::budget`]): the object read-ahead reserves from it.
    pub(crate) budget: Arc<Budget>,
    /// Largest part (one GET) of read-ahead (`remote_part`), and largest window (`remote_parallel`
    /// parts): of one reader ([`super::prefetch`]) and of the object read-ahead.
    pub(crate) part: u64,
    pub(crate) window: u64,
    /// Whether the object read-ahead runs ([`read_ahead`]; `RemoteConfig::object_read_ahead`).
    pub(crate) object_ahead: bool,
    /// `remote_timeout` (for messages).
    pub(crate) timeout: std::time::Duration,
}

/// An object as opened.
#[derive(Debug)]
pub(crate) struct Object {
    pub(crate) key: Key,
    pub(crate) url: String,
    pub(crate) size: u64,
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: DateTime<Utc>,
    pub(crate) changed: AtomicBool,
    /// Why, as first found (said again by every later read).
    why: std::sync::OnceLock<String>,
    /// Its directory in the disk cache, made when first fetched from (`None`: not cached).
    disk: std::sync::OnceLock<Option<Arc<disk::Entry>>>,
    /// How far reads have gone through the object in order ([`NOT_READ`] before the first),
    /// and how far ahead of them it was fetched ([`read_ahead`]).
    ahead: Mutex<(u64, u64)>,
    /// The pieces being fetched now (into the disk cache, or the block cache in memory), each
    /// with the receiver that says when the fetch ended; a fetch that needs one waits for it
    /// instead of fetching it again.
    inflight: Mutex<std::collections::HashMap<u64, tokio::sync::watch::Receiver<bool>>>,
    /// Unique within the store (cache keys).
    pub(crate) id: u64,
}

impl Object {
    pub(crate) fn new(meta: &ObjectMeta, url: String, id: u64) -> Object {
        Object {
            key: meta.location.clone(),
            url,
            size: meta.size,
            etag: meta.e_tag.as_deref().map(quoted_etag),
            last_modified: meta.last_modified,
            changed: AtomicBool::new(false),
            why: std::sync::OnceLock::new(),
            disk: std::sync::OnceLock::new(),
            ahead: Mutex::new((NOT_READ, 0)),
            inflight: Mutex::new(std::collections::HashMap::new()),
            id,
        }
    }

    /// Its directory in disk cache `d` (made the first time); `None` if it cannot be cached
    /// (no version to key it by).
    fn disk_entry(&self, d: &DiskCache) -> Option<&Arc<disk::Entry>> {
        self.disk
            .get_or_init(|| {
                let id = disk::Identity::new(
                    &self.url,
                    self.size,
                    self.etag.as_deref().map(bare_etag),
                    self.last_modified.timestamp(),
                )?;
                d.entry(&id)
            })
            .as_ref()
    }

    /// Marks the object changed (logged the first time) and returns the error to give.
    pub(crate) fn mark_changed(&self, why: &str) -> RemoteError {
        let _ = self.why.set(why.to_string());
        if !self.changed.swap(true, Ordering::Relaxed) {
            log::error!(
                "{}: changed since it was opened ({why}); reads from it fail until it is mounted again",
                self.url
            );
        }
        RemoteError::Changed {
            url: self.url.clone(),
            why: why.to_string(),
        }
    }

    /// Fails if the object is already known to have changed, saying why (a read-ahead may
    /// have found it, which no reader saw fail).
    pub(crate) fn check(&self) -> Result<(), RemoteError> {
        if self.changed.load(Ordering::Relaxed) {
            let why = self
                .why
                .get()
                .map_or("seen by an earlier read", String::as_str);
            return Err(RemoteError::Changed {
                url: self.url.clone(),
                why: why.to_string(),
            });
        }
        Ok(())
    }

    /// Fails unless `len` bytes at `offset` lie within the object.
    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<(), RemoteError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(RemoteError::Range {
                url: self.url.clone(),
                offset,
                len,
                size: self.size,
            }),
        }
    }

    /// Fails (marking the object changed) if an answer describes another version.
    fn check_meta(&self, meta: &ObjectMeta) -> Result<(), RemoteError> {
        if let (Some(a), Some(b)) = (&self.etag, &meta.e_tag) {
            if bare_etag(a) != bare_etag(b) {
                return Err(self.mark_changed(&format!("ETag {a} -> {b}")));
            }
        }
        if meta.size != self.size {
            return Err(self.mark_changed(&format!("size {} -> {}", self.size, meta.size)));
        }
        Ok(())
    }
}

/// An ETag as `If-Match` wants it: quoted (listings of some stores give it bare).
fn quoted_etag(e: &str) -> String {
    if e.starts_with('"') || e.starts_with("W/") {
        e.to_string()
    } else {
        format!("\"{e}\"")
    }
}

/// An ETag without weakness mark and quotes, for comparing.
fn bare_etag(e: &str) -> &str {
    let e = e.strip_prefix("W/").unwrap_or(e);
    e.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(e)
}

/// Where [`fetch`] keeps the whole pieces (MiB blocks of the object) it GETs and finds them
/// again: the object's entry in the disk cache when there is one, else the store's block cache
/// in memory ([`PartCache`], within the budget: the least recently used pieces go first).
/// Either way a piece kept is fetched once: concurrent fetches of it wait for each other
/// ([`claim`]), and the object read-ahead ([`read_ahead`]) fetches the next window of an object
/// read in order into it, whatever tensors the reads belong to.
#[derive(Clone)]
enum Keep {
    Disk(Arc<DiskCache>, Arc<disk::Entry>),
    Mem(Arc<PartCache>, Arc<Budget>),
}

impl Keep {
    /// Where `obj`'s pieces are kept; `None` when they cannot be (an object without a version
    /// to key it by in the disk cache).
    fn of(io: &Io, obj: &Object) -> Option<Keep> {
        match &io.disk {
            Some(d) => Some(Keep::Disk(Arc::clone(d), Arc::clone(obj.disk_entry(d)?))),
            None => Some(Keep::Mem(Arc::clone(&io.mem), Arc::clone(&io.budget))),
        }
    }

    /// Piece `n` if it is held in memory (cheap enough to ask under a lock).
    fn peek(&self, obj: &Object, n: u64) -> Option<Bytes> {
        match self {
            Keep::Disk(d, e) => d.peek(e, n),
            Keep::Mem(c, _) => c.piece(obj, n),
        }
    }

    /// Piece `n`, read from disk if need be (blocking).
    fn get(&self, obj: &Object, n: u64) -> Option<Bytes> {
        match self {
            Keep::Disk(d, e) => d.get(e, n),
            Keep::Mem(c, _) => c.piece(obj, n),
        }
    }

    /// Whether piece `n` is kept (blocking: a file's size is looked at).
    fn has(&self, obj: &Object, n: u64) -> bool {
        match self {
            Keep::Disk(d, e) => d.has(e, n),
            Keep::Mem(c, _) => c.piece(obj, n).is_some(),
        }
    }

    /// Keeps piece `n`, just fetched (written behind to disk: this waits, off the runtime's
    /// workers, only when the writer's queue is full).
    async fn put(&self, obj: &Object, n: u64, p: Bytes) {
        match self {
            Keep::Disk(d, e) => {
                if let Err(item) = d.put_behind(e, n, p) {
                    let dc = Arc::clone(d);
                    let _ = tokio::task::spawn_blocking(move || dc.queue(item)).await;
                }
            }
            Keep::Mem(c, budget) => c.insert(budget, obj.id, n, n * disk::PIECE, p),
        }
    }

    /// `f` over these pieces: on the blocking pool when they are on disk (the runtime's two
    /// workers keep streaming other GETs), in place when they are in memory; `failed` if it
    /// could not run.
    async fn off_runtime<T: Send + 'static>(
        &self,
        obj: &Arc<Object>,
        failed: T,
        f: impl FnOnce(&Keep, &Object) -> T + Send + 'static,
    ) -> T {
        match self {
            Keep::Mem(..) => f(self, obj),
            Keep::Disk(..) => {
                let (k, o) = (self.clone(), Arc::clone(obj));
                tokio::task::spawn_blocking(move || f(&k, &o))
                    .await
                    .unwrap_or(failed)
            }
        }
    }

    /// Counts `n` bytes served from kept pieces (the disk cache's figures).
    fn served(&self, n: u64) {
        if let Keep::Disk(d, _) = self {
            d.served(n);
        }
    }
}

/// The bytes `range` of `obj`, as pieces of `piece` bytes from `range.start` (the last may be
/// shorter): from the pieces kept ([`Keep`]: the disk cache, else the block cache in memory)
/// where they hold them, the rest with [`get`] (whole pieces, kept). No timeout here: callers
/// bound it.
pub(crate) async fn fetch(
    io: &Arc<Io>,
    obj: &Arc<Object>,
    range: Range<u64>,
    piece: Piece,
) -> Result<Vec<Bytes>, RemoteError> {
    obj.check()?;
    let len = range.end.saturating_sub(range.start);
    if len == 0 {
        return Ok(Vec::new());
    }
    obj.check_range(range.start, len)?;
    let Some(keep) = Keep::of(io, obj) else {
        return get(io, obj, range, piece).await;
    };
    let first = range.start / disk::PIECE;
    let last = (range.end - 1) / disk::PIECE;
    let mut got: Vec<Option<Bytes>> = keep
        .off_runtime(obj, vec![None; (last - first + 1) as usize], move |k, o| {
            (first..=last).map(|n| k.get(o, n)).collect()
        })
        .await;
    let overlap = |k: usize, len: u64| {
        let ps = (first + k as u64) * disk::PIECE;
        range.end.min(ps + len).saturating_sub(range.start.max(ps))
    };
    keep.served(
        got.iter()
            .enumerate()
            .filter_map(|(k, p)| Some(overlap(k, p.as_ref()?.len() as u64)))
            .sum(),
    );
    read_ahead(io, &keep, obj, &range);
    // Pieces another fetch is getting: waited for, then taken from where they are kept (or
    // fetched, if that fetch failed). The rest: claimed and fetched here, in runs of
    // consecutive pieces (their bytes were reserved by the caller, but for the pieces' ends
    // outside `range`: at most two more).
    let mut missing: Vec<u64> = (0..got.len())
        .filter(|&k| got[k].is_none())
        .map(|k| first + k as u64)
        .collect();
    // A few rounds: pieces whose fetch failed elsewhere are claimed again here.
    for _ in 0..3 {
        if missing.is_empty() {
            break;
        }
        let (mut mine, theirs) = claim(&keep, obj, missing.drain(..));
        for (n, b) in std::mem::take(&mut mine.kept) {
            got[(n - first) as usize] = Some(b);
        }
        get_runs(io, &keep, obj, &mine.ns, &mut got, first).await?;
        drop(mine);
        for (n, mut rx) in theirs {
            let _ = rx.wait_for(|done| *done).await;
            match keep.get(obj, n) {
                Some(p) => got[(n - first) as usize] = Some(p),
                None => missing.push(n),
            }
        }
    }
    let mut out = Vec::with_capacity(got.len());
    for (k, p) in got.into_iter().enumerate() {
        let ps = (first + k as u64) * disk::PIECE;
        let p = p.ok_or_else(|| RemoteError::Request {
            url: obj.url.clone(),
            msg: format!("bytes from {ps} neither cached nor fetched"),
        })?;
        let from = range.start.max(ps) - ps;
        let to = (range.end.min(ps + p.len() as u64) - ps).max(from);
        out.push(p.slice(from as usize..to as usize));
    }
    Ok(match piece {
        Piece::Of(p) if p != disk::PIECE || range.start % p != 0 => recut(out, p),
        _ => out,
    })
}

/// Pieces a fetch marked in flight (see [`claim`]): released (unmarked, and whoever waits for
/// them told) when dropped: fetched, failed or abandoned.
struct Claimed {
    obj: Arc<Object>,
    /// The pieces claimed, sorted.
    ns: Vec<u64>,
    /// Pieces found among those the cache keeps in memory when claiming.
    kept: Vec<(u64, Bytes)>,
    tx: tokio::sync::watch::Sender<bool>,
    rx: tokio::sync::watch::Receiver<bool>,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        {
            let mut fl = lock(&self.obj.inflight);
            for n in &self.ns {
                if fl.get(n).is_some_and(|r| r.same_channel(&self.rx)) {
                    fl.remove(n);
                }
            }
        }
        let _ = self.tx.send(true);
    }
}

/// Claims pieces `ns` of `obj` (sorted) for one fetch, under the in-flight lock: one another
/// fetch is getting is returned with what to wait on; one the cache keeps in memory is taken
/// from there (a fetch that just finished put it there before unmarking it, so no piece is
/// fetched twice); the rest are marked in flight by this fetch.
fn claim(
    keep: &Keep,
    obj: &Arc<Object>,
    ns: impl Iterator<Item = u64>,
) -> (Claimed, Vec<(u64, tokio::sync::watch::Receiver<bool>)>) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut c = Claimed {
        obj: Arc::clone(obj),
        ns: Vec::new(),
        kept: Vec::new(),
        tx,
        rx,
    };
    let mut theirs = Vec::new();
    let mut fl = lock(&obj.inflight);
    for n in ns {
        if let Some(r) = fl.get(&n) {
            theirs.push((n, r.clone()));
        } else if let Some(b) = keep.peek(obj, n) {
            c.kept.push((n, b));
        } else {
            fl.insert(n, c.rx.clone());
            c.ns.push(n);
        }
    }
    (c, theirs)
}

/// GETs pieces `ns` (sorted, claimed) of `obj`, runs of consecutive ones in one GET each, into
/// where they are kept and into `got` (slot `n - first`, where there is one).
async fn get_runs(
    io: &Arc<Io>,
    keep: &Keep,
    obj: &Arc<Object>,
    ns: &[u64],
    got: &mut [Option<Bytes>],
    first: u64,
) -> Result<(), RemoteError> {
    let mut i = 0;
    while i < ns.len() {
        let mut j = i + 1;
        while j < ns.len() && ns[j] == ns[j - 1] + 1 {
            j += 1;
        }
        let start = ns[i] * disk::PIECE;
        let end = ((ns[j - 1] + 1) * disk::PIECE).min(obj.size);
        let pieces = get(io, obj, start..end, Piece::Of(disk::PIECE)).await?;
        for (k, p) in pieces.into_iter().enumerate() {
            let n = ns[i] + k as u64;
            keep.put(obj, n, p.clone()).await;
            if let Some(slot) = n.checked_sub(first).and_then(|k| got.get_mut(k as usize)) {
                *slot = Some(p);
            }
        }
        i = j;
    }
    Ok(())
}

/// Object read-ahead into where pieces are kept ([`Keep`]: the disk cache, else the block
/// cache in memory): while the reads of an object go through it in order (each starting
/// within two pieces of where the last one ended), whatever tensor they belong to (`cat` of
/// every `.bin`, a loader reading tensor after tensor), the next window of the object
/// (`remote_parallel` parts of `remote_part`) is fetched in the background, within the memory
/// budget (speculatively: nothing when it is taken); a reader then finds its tensor kept, or in
/// flight. Anything else starts over.
fn read_ahead(io: &Arc<Io>, keep: &Keep, obj: &Arc<Object>, range: &Range<u64>) {
    if !io.object_ahead {
        return;
    }
    let slack = 2 * disk::PIECE;
    let (from, to) = {
        let mut a = lock(&obj.ahead);
        let (seq_end, ahead_end) = *a;
        // The first read of an object says nothing of the next: it starts no read-ahead.
        if seq_end == NOT_READ
            || range.start.saturating_add(slack) < seq_end
            || range.start > seq_end.saturating_add(slack)
        {
            *a = (range.end, range.end);
            return;
        }
        let seq = seq_end.max(range.end);
        let target = (seq + io.window).min(obj.size);
        let from = ahead_end.max(range.end.div_ceil(disk::PIECE) * disk::PIECE);
        // Topped up when less than half a window is left ahead.
        if from >= target || from > seq + io.window / 2 {
            *a = (seq, ahead_end);
            return;
        }
        *a = (seq, target);
        (from, target)
    };
    let mut at = from;
    while at < to {
        let end = (at + io.part).min(to);
        let Some(res) = io.budget.try_reserve(end - at) else {
            let mut a = lock(&obj.ahead);
            a.1 = a.1.min(at);
            return;
        };
        let (io2, k2, o2) = (Arc::clone(io), keep.clone(), Arc::clone(obj));
        let range = at..end;
        tokio::spawn(async move {
            let _res = res;
            let (first, last) = (range.start / disk::PIECE, (range.end - 1) / disk::PIECE);
            // Only what is neither in flight nor kept yet.
            let want: Vec<u64> = {
                let fl = lock(&o2.inflight);
                (first..=last).filter(|n| !fl.contains_key(n)).collect()
            };
            let ns: Vec<u64> = k2
                .off_runtime(&o2, Vec::new(), move |k, o| {
                    want.into_iter().filter(|&n| !k.has(o, n)).collect()
                })
                .await;
            let (mine, _) = claim(&k2, &o2, ns.into_iter());
            let deadline = tokio::time::Instant::now() + io2.timeout;
            let r =
                tokio::time::timeout_at(deadline, get_runs(&io2, &k2, &o2, &mine.ns, &mut [], 0))
                    .await;
            drop(mine);
            if !matches!(r, Ok(Ok(()))) {
                log::debug!("{}: read-ahead of bytes {range:?} failed", o2.url);
            }
        });
        at = end;
    }
}

/// [`Object::ahead`] before the object's first read.
const NOT_READ: u64 = u64::MAX;

/// `data` (consecutive bytes) cut again into pieces of `p` bytes (the last may be shorter).
fn recut(data: Vec<Bytes>, p: u64) -> Vec<Bytes> {
    let p = p.max(1) as usize;
    if data.iter().rev().skip(1).all(|b| b.len() == p) && data.last().is_none_or(|b| b.len() <= p) {
        return data;
    }
    let mut out = Vec::new();
    let mut cur = BytesMut::new();
    for b in data {
        let mut b = &b[..];
        while !b.is_empty() {
            let n = (p - cur.len()).min(b.len());
            cur.extend_from_slice(&b[..n]);
            b = &b[n..];
            if cur.len() == p {
                out.push(cur.split().freeze());
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    out
}

/// GETs `range` of `obj` (with `If-Match`), as pieces of `piece` bytes from `range.start` (the
/// last may be shorter). Exactly `range.len()` bytes are accepted: a body longer or shorter
/// than asked is an error, and no more than that is ever buffered. No timeout here: callers
/// bound it.
async fn get(
    io: &Io,
    obj: &Object,
    range: Range<u64>,
    piece: Piece,
) -> Result<Vec<Bytes>, RemoteError> {
    obj.check()?;
    let len = range.end.saturating_sub(range.start);
    if len == 0 {
        return Ok(Vec::new());
    }
    obj.check_range(range.start, len)?;
    // A weak ETag never matches strongly: such objects are pinned by time (and the answer's
    // ETag is compared below in both cases).
    let strong = obj.etag.clone().filter(|e| !e.starts_with("W/"));
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        if_unmodified_since: strong.is_none().then_some(obj.last_modified),
        if_match: strong,
        ..Default::default()
    };
    Counters::add(&io.counters.gets, 1);
    log::debug!("GET {} bytes {range:?}", obj.url);
    let res = match io.store.get_opts(&obj.key, opts).await {
        Ok(r) => r,
        Err(object_store::Error::Precondition { .. }) => {
            return Err(obj.mark_changed("If-Match failed: rewritten"))
        }
        // Said with what the store answered (a read's log line and `verify` show the kind).
        Err(object_store::Error::NotFound { .. }) => {
            return Err(obj.mark_changed(&format!("deleted: {}", status_words(404))))
        }
        Err(e) => return Err(map_err(&obj.url, io.timeout, e)),
    };
    obj.check_meta(&res.meta)?;
    if res.range != range {
        return Err(RemoteError::Request {
            url: obj.url.clone(),
            msg: format!("asked for bytes {range:?}, got {:?}", res.range),
        });
    }
    let piece = match piece {
        Piece::Of(p) => p.clamp(1, len),
        Piece::AsReceived => 0,
    };
    let pieces = if piece == 0 { 64 } else { len.div_ceil(piece) };
    let mut out = Vec::with_capacity(usize::try_from(pieces).unwrap_or(0).min(1024));
    let mut cur = BytesMut::with_capacity(piece as usize);
    let mut got = 0u64;
    let mut stream = res.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| map_err(&obj.url, io.timeout, e))?;
        io.counters.received(chunk.len() as u64);
        if got + chunk.len() as u64 > len {
            return Err(RemoteError::Request {
                url: obj.url.clone(),
                msg: format!("the server sent more than the {len} bytes asked for"),
            });
        }
        got += chunk.len() as u64;
        if piece == 0 {
            // Kept as the client received it: no copy.
            if !chunk.is_empty() {
                out.push(chunk);
            }
            continue;
        }
        let mut c = &chunk[..];
        while !c.is_empty() {
            let room = piece as usize - cur.len();
            let (now, rest) = c.split_at(room.min(c.len()));
            cur.extend_from_slice(now);
            c = rest;
            if cur.len() == piece as usize {
                out.push(cur.split().freeze());
                let left = len - got + c.len() as u64;
                cur = BytesMut::with_capacity(piece.min(left) as usize);
            }
        }
    }
    if got != len {
        return Err(RemoteError::Request {
            url: obj.url.clone(),
            msg: format!("the answer ended after {got} of {len} bytes"),
        });
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    Ok(out)
}

/// How a GET's answer is cut ([`fetch`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Piece {
    /// Pieces of this many bytes (the last may be shorter): blocks of the block cache.
    Of(u64),
    /// The chunks the HTTP client received, as they are (no copy): read-ahead parts, which
    /// [`copy_from_chunks`] serves from.
    AsReceived,
}

/// A GET running on the store's runtime; aborted if dropped before it is waited for.
pub(crate) struct Pending {
    handle: tokio::task::JoinHandle<Result<Vec<Bytes>, RemoteError>>,
    url: String,
    after: std::time::Duration,
}

impl Pending {
    /// Starts fetching `range` of `obj` (cut as `piece` says); the request gives up at
    /// `deadline`.
    pub(crate) fn spawn(
        ctx: &Reads,
        obj: &Arc<Object>,
        range: Range<u64>,
        piece: Piece,
        deadline: Instant,
    ) -> Pending {
        let io = Arc::clone(&ctx.io);
        let o = Arc::clone(obj);
        let after = ctx.timeout;
        let dl = tokio::time::Instant::from_std(deadline);
        let handle = ctx.rt.handle().spawn(async move {
            match tokio::time::timeout_at(dl, fetch(&io, &o, range, piece)).await {
                Ok(r) => r,
                Err(_) => Err(RemoteError::Timeout {
                    url: o.url.clone(),
                    after,
                }),
            }
        });
        Pending {
            handle,
            url: obj.url.clone(),
            after,
        }
    }

    /// Waits for the answer until `deadline`.
    pub(crate) fn wait(
        &mut self,
        ctx: &Reads,
        deadline: Instant,
    ) -> Result<Vec<Bytes>, RemoteError> {
        let dl = tokio::time::Instant::from_std(deadline);
        let h = &mut self.handle;
        match ctx
            .rt
            .block_on(async move { tokio::time::timeout_at(dl, h).await })
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(RemoteError::Request {
                url: self.url.clone(),
                msg: format!("the request task failed: {e}"),
            }),
            Err(_) => {
                self.handle.abort();
                Err(RemoteError::Timeout {
                    url: self.url.clone(),
                    after: self.after,
                })
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Block size of random reads and of the cache: a piece of the disk cache.
pub(crate) const BLOCK: u64 = disk::PIECE;
/// Largest single GET.
pub(crate) const MAX_GET: u64 = 8 << 20;
/// GETs one random read keeps in flight.
pub(crate) const IN_FLIGHT: usize = 4;
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

impl std::fmt::Debug for PartCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartCache")
            .field("cap", &self.cap)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PartCache {
    pub(crate) fn new(cap: u64) -> PartCache {
        PartCache {
            cap,
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The cached piece of block `block` of object `id`, if it holds `[from, to)`.
    fn get(&self, id: u64, block: u64, from: u64, to: u64) -> Option<(u64, Bytes)> {
        let mut g = self.lock();
        let e = g.lru.get(&(id, block))?;
        (e.start <= from && e.start + e.data.len() as u64 >= to).then(|| (e.start, e.data.clone()))
    }

    /// Block `n` of `obj` whole (every byte of it the object has), if it is cached.
    fn piece(&self, obj: &Object, n: u64) -> Option<Bytes> {
        let (from, to) = (n * BLOCK, ((n + 1) * BLOCK).min(obj.size));
        let (start, data) = self.get(obj.id, n, from, to)?;
        (start == from).then(|| data.slice(..(to - from) as usize))
    }

    /// Keeps `data` (bytes of block `block` of object `id` from `start`) if the cache and the
    /// budget have room, evicting the least recently used blocks for it.
    pub(crate) fn insert(
        &self,
        budget: &Arc<Budget>,
        id: u64,
        block: u64,
        start: u64,
        data: Bytes,
    ) {
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
    pub(crate) fn forget(&self, id: u64) {
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

/// [`copy_overlap`] of consecutive chunks (object bytes from `data_start`); returns how many
/// bytes were copied.
pub(crate) fn copy_from_chunks(
    buf: &mut [u8],
    offset: u64,
    data_start: u64,
    data: &[Bytes],
) -> u64 {
    let end = offset + buf.len() as u64;
    let (mut at, mut n) = (data_start, 0);
    for c in data {
        if at >= end {
            break;
        }
        let c_end = at + c.len() as u64;
        if c_end > offset {
            n += copy_overlap(buf, offset, at, c);
        }
        at = c_end;
    }
    n
}

/// The `len` bytes at `offset` of consecutive chunks (object bytes from `data_start`), as far
/// as the chunks hold them: a slice of one chunk where they lie in one (no copy), else copied
/// out of them.
pub(crate) fn bytes_from_chunks(offset: u64, len: usize, data_start: u64, data: &[Bytes]) -> Bytes {
    let end = offset + len as u64;
    let mut at = data_start;
    let mut v: Option<Vec<u8>> = None;
    for c in data {
        let c_end = at + c.len() as u64;
        let (from, to) = (offset.max(at), end.min(c_end));
        if from < to {
            let part = c.slice((from - at) as usize..(to - at) as usize);
            if v.is_none() && from == offset && to == end {
                return part;
            }
            v.get_or_insert_with(|| Vec::with_capacity(len))
                .extend_from_slice(&part);
        }
        if c_end >= end {
            break;
        }
        at = c_end;
    }
    v.map(Bytes::from).unwrap_or_default()
}

/// One GET of consecutive blocks in flight.
struct InFlight {
    first_block: u64,
    pending: Pending,
    _res: Reservation,
}

impl Handle {
    /// Fills `buf` (already checked to lie within the object) from `offset` with pieces the
    /// disk cache holds, read in place ([`disk::OnDisk`]: checked when opened, then copied once,
    /// from the kernel's page cache, as a local file is read); `false` when one of them is not
    /// on disk (or cannot be read), and the caller reads the usual way. Keeps the object
    /// read-ahead going, as a fetch does.
    pub(crate) fn read_on_disk(&self, buf: &mut [u8], offset: u64) -> bool {
        self.on_disk(offset, buf.len(), |p, at, from, n| {
            let dst = &mut buf[from..from + n];
            p.read_at(dst, at)
        })
    }

    /// Keeps piece `n` of the object (all of it), fetched some other way than [`fetch`] (an
    /// index's tail), in the disk cache if there is one (written behind).
    pub(crate) fn keep_on_disk(&self, n: u64, piece: &Bytes) {
        let Some(d) = self.reads.io.disk.as_ref() else {
            return;
        };
        let Some(entry) = self.obj.disk_entry(d) else {
            return;
        };
        if let Err(item) = d.put_behind(entry, n, piece.clone()) {
            d.queue(item);
        }
    }

    /// Bytes `range` of the object read from the disk cache's pieces **unchecked**, if it holds
    /// all of them (see [`DiskCache::read_unchecked`]): the caller checks them as a whole.
    pub(crate) fn read_disk_unchecked(&self, range: Range<u64>) -> Option<Vec<Bytes>> {
        let d = self.reads.io.disk.as_ref()?;
        let entry = self.obj.disk_entry(d)?;
        if range.is_empty() || range.end > self.obj.size {
            return None;
        }
        // In a FUSE reply's read: a slice of the pieces' mapping (replies written from it).
        if let Some(m) = d.map_unchecked(entry, range.clone()) {
            d.served(range.end - range.start);
            return Some(vec![m]);
        }
        let mut v = Vec::with_capacity((range.end - range.start) as usize);
        for n in range.start / disk::PIECE..=(range.end - 1) / disk::PIECE {
            let ps = n * disk::PIECE;
            let (from, to) = (range.start.max(ps), range.end.min(ps + disk::PIECE));
            if !d.read_unchecked(entry, n, from - ps, (to - from) as usize, &mut v) {
                return None;
            }
        }
        d.served(v.len() as u64);
        Some(vec![v.into()])
    }

    /// Whether the disk cache holds every piece of bytes `range` (on disk or in memory).
    pub(crate) fn all_cached(&self, range: Range<u64>) -> bool {
        let Some(d) = self.reads.io.disk.as_ref() else {
            return false;
        };
        let Some(entry) = self.obj.disk_entry(d) else {
            return false;
        };
        !range.is_empty()
            && (range.start / disk::PIECE..=(range.end - 1) / disk::PIECE)
                .all(|n| d.is_open(entry, n) || d.has(entry, n))
    }

    /// After bytes `range` read from the disk cache failed a check as a whole: each piece is
    /// checked (a damaged one is removed, logged); if none is damaged, the cached bytes
    /// themselves are wrong (fetched damaged), and all of them are removed. Either way the
    /// next read fetches them again.
    pub(crate) fn drop_on_disk(&self, range: Range<u64>, what: &str) {
        let Some(d) = self.reads.io.disk.as_ref() else {
            return;
        };
        let Some(entry) = self.obj.disk_entry(d) else {
            return;
        };
        if range.is_empty() {
            return;
        }
        // Blocks of the object kept in memory may hold the same bytes.
        self.reads.cache.forget(self.obj.id);
        let ns = range.start / disk::PIECE..=(range.end - 1) / disk::PIECE;
        let damaged = ns
            .clone()
            .filter(|&n| d.open_checked(entry, n).is_none())
            .count();
        if damaged == 0 {
            log::warn!(
                "{}: cached bytes {range:?} do not match {what}: removed, fetched again",
                self.obj.url
            );
            for n in ns {
                d.remove(entry, n);
            }
        }
    }

    /// [`Handle::read_on_disk`] into a new buffer (not zeroed first).
    pub(crate) fn read_on_disk_vec(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = Vec::with_capacity(len);
        self.on_disk(offset, len, |p, at, _, n| p.append_to(&mut v, at, n))
            .then_some(v)
    }

    /// The pieces holding `len` bytes at `offset`, each given to `read` (the piece, where in it,
    /// where in the read, how many bytes), in order.
    fn on_disk(
        &self,
        offset: u64,
        len: usize,
        mut read: impl FnMut(&disk::OnDisk, u64, usize, usize) -> std::io::Result<()>,
    ) -> bool {
        let io = &self.reads.io;
        let (Some(d), false) = (&io.disk, len == 0) else {
            return false;
        };
        let Some(entry) = self.obj.disk_entry(d) else {
            return false;
        };
        let end = offset + len as u64;
        let (first, last) = (offset / disk::PIECE, (end - 1) / disk::PIECE);
        let mut pieces = Vec::with_capacity((last - first + 1) as usize);
        for n in first..=last {
            match d.open_checked(entry, n) {
                Some(p) => pieces.push(p),
                None => return false,
            }
        }
        for (k, p) in pieces.iter().enumerate() {
            let ps = (first + k as u64) * disk::PIECE;
            let (from, to) = (offset.max(ps), end.min(ps + p.size() as u64));
            if from >= to {
                return false;
            }
            let r = read(p, from - ps, (from - offset) as usize, (to - from) as usize);
            if let Err(e) = r {
                log::warn!(
                    "{}: cached piece {} unreadable: {e}",
                    self.obj.url,
                    first + k as u64
                );
                d.close(entry, first + k as u64);
                return false;
            }
        }
        d.served(len as u64);
        // The object read-ahead goes on while the piece half a window ahead is not cached yet
        // (a cold read through the cache, which it tops up from there); a warm read does not
        // ask it about pieces that are all there.
        let probe = (end + io.window / 2).min(self.obj.size - 1) / disk::PIECE;
        if !d.is_open(entry, probe) && !d.has(entry, probe) {
            let _rt = self.reads.rt.handle().enter();
            let keep = Keep::Disk(Arc::clone(d), Arc::clone(entry));
            read_ahead(io, &keep, &self.obj, &(offset..end));
        }
        true
    }

    /// Fills `buf` from `offset`: whole MiB blocks around it through the store's block cache,
    /// no read-ahead. Fails at `deadline`.
    pub(crate) fn read_blocks(
        &self,
        buf: &mut [u8],
        offset: u64,
        deadline: Instant,
    ) -> Result<(), RemoteError> {
        let (ctx, obj) = (&*self.reads, &self.obj);
        obj.check()?;
        obj.check_range(offset, buf.len() as u64)?;
        read_blocks(ctx, obj, buf, offset, deadline)
    }
}

/// Fills `buf` (already checked to lie within `obj`) from `offset` with whole blocks.
fn read_blocks(
    ctx: &Reads,
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
    if missing.is_empty() && ctx.io.disk.is_none() {
        // All kept in memory: the object read-ahead still learns how far the reads went (a
        // fetch would have told it), or the next fetch would look like a jump and start over.
        if let Some(keep) = Keep::of(&ctx.io, obj) {
            let _rt = ctx.rt.handle().enter();
            read_ahead(&ctx.io, &keep, obj, &(offset..end));
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
            pending: Pending::spawn(ctx, obj, start..stop, Piece::Of(BLOCK), deadline),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_compare_without_quotes() {
        assert_eq!(quoted_etag("abc"), "\"abc\"");
        assert_eq!(quoted_etag("\"abc\""), "\"abc\"");
        assert_eq!(quoted_etag("W/\"abc\""), "W/\"abc\"");
        assert_eq!(bare_etag("\"abc\""), "abc");
        assert_eq!(bare_etag("W/\"abc\""), "abc");
        assert_eq!(bare_etag("abc"), "abc");
        assert_eq!(bare_etag("\""), "\"");
    }
}
