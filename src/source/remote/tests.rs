//! Unit tests of the remote read path on `object_store`'s in-memory store: read-ahead windows,
//! random reads, the memory budget with many readers, `If-Match`, timeouts, listing. A
//! recording wrapper counts the GETs and their ranges, and can stop answering.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as Key;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::{RemoteConfig, RemoteError, RemoteStore};
use crate::parse::ReadAt;
use crate::source::bytes::{ByteSource, EntryKind, Store};
use crate::source::remote::budget::OVERDRAFT;
use crate::source::remote::config::{DEFAULT_PARALLEL, DEFAULT_PART as MAX_PART};
use crate::source::remote::prefetch::FIRST_WINDOW;

const MAX_WINDOW: u64 = MAX_PART * DEFAULT_PARALLEL as u64;

const MIB: u64 = 1 << 20;

/// Delegates to an inner store; records the range of every GET; can stop answering GETs.
#[derive(Debug)]
struct Rec {
    inner: Arc<dyn ObjectStore>,
    gets: Mutex<Vec<Range<u64>>>,
    hang: AtomicBool,
}

impl std::fmt::Display for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rec({})", self.inner)
    }
}

impl Rec {
    fn new(inner: Arc<dyn ObjectStore>) -> Arc<Rec> {
        Arc::new(Rec {
            inner,
            gets: Mutex::new(Vec::new()),
            hang: AtomicBool::new(false),
        })
    }

    fn take(&self) -> Vec<Range<u64>> {
        std::mem::take(&mut *self.gets.lock().unwrap())
    }

    /// The GETs sent so far once there are at least `n` (parts are fetched by tasks the read
    /// spawned: they may reach the store after the read returned), or after 5 s.
    fn take_at_least(&self, n: usize) -> Vec<Range<u64>> {
        let t = Instant::now();
        while self.gets.lock().unwrap().len() < n && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.take()
    }
}

#[async_trait]
impl ObjectStore for Rec {
    async fn put_opts(
        &self,
        l: &Key,
        p: PutPayload,
        o: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }

    async fn put_multipart_opts(
        &self,
        l: &Key,
        o: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }

    async fn get_opts(&self, l: &Key, o: GetOptions) -> object_store::Result<GetResult> {
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if !o.head {
            if let Some(GetRange::Bounded(r)) = &o.range {
                self.gets.lock().unwrap().push(r.clone());
            }
        }
        self.inner.get_opts(l, o).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Key>>,
    ) -> BoxStream<'static, object_store::Result<Key>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Key>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Key>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Key, to: &Key, o: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, o).await
    }
}

/// Deterministic bytes.
fn data(len: usize, seed: u64) -> Vec<u8> {
    crate::testkit::rng::bytes(seed, len)
}

fn cfg(cache: u64, timeout: Duration) -> RemoteConfig {
    RemoteConfig {
        cache_bytes: cache,
        timeout,
        ..Default::default()
    }
}

/// A store over `inner` with objects `(key, bytes)` uploaded.
fn store_with(
    inner: Arc<dyn ObjectStore>,
    objects: &[(&str, &[u8])],
    c: &RemoteConfig,
) -> (RemoteStore, Arc<Rec>) {
    let rec = Rec::new(inner);
    let store = RemoteStore::with_object_store(rec.clone(), "mem://b/", c).unwrap();
    put(&store, objects);
    (store, rec)
}

/// A store holding `obj` as `shard` (256 MiB of memory budget, a 10 s timeout), without the
/// object read-ahead: the reads of one reader alone (see
/// `the_object_read_ahead_without_a_disk_cache_fetches_each_byte_once`).
fn one_shard(obj: &[u8]) -> (RemoteStore, Arc<Rec>) {
    store_with(
        Arc::new(InMemory::new()),
        &[("shard", obj)],
        &RemoteConfig {
            object_read_ahead: false,
            ..cfg(256 * MIB, Duration::from_secs(10))
        },
    )
}

fn put(store: &RemoteStore, objects: &[(&str, &[u8])]) {
    let os = store.object_store();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (k, v) in objects {
        rt.block_on(os.put(&Key::from(*k), PutPayload::from(v.to_vec())))
            .unwrap();
    }
}

#[test]
fn a_read_that_starts_the_range_fetches_all_of_it_in_parallel_parts() {
    let obj = data(48 << 20, 1);
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let r = f.reader(0..f.size());
    let first = r.read(0, 128 << 10).unwrap();
    assert!(first[..] == obj[..128 << 10]);
    // The first read sent every part of the tensor (48 MiB < the 64 MiB window): 6 GETs of
    // 8 MiB, contiguous, each byte once.
    let mut gets = rec.take_at_least(6);
    gets.sort_by_key(|g| g.start);
    let want: Vec<_> = (0..6).map(|i| i * MAX_PART..(i + 1) * MAX_PART).collect();
    assert_eq!(gets, want);
    let mut seen = first;
    for off in ((128 << 10)..obj.len() as u64).step_by(128 << 10) {
        seen.extend(r.read(off, 128 << 10).unwrap());
    }
    assert!(seen == obj, "bytes differ");
    assert!(rec.take().is_empty(), "nothing fetched twice");
    assert_eq!(store.stats().bytes_fetched, obj.len() as u64);
    // The pieces are kept (in memory: no disk cache here), as far as the block cache holds
    // them: a second reader of the range sends no GET.
    let r2 = f.reader(MIB..17 * MIB);
    r2.prefetch();
    assert!(r2.read(MIB, 4096).unwrap() == obj[1 << 20..(1 << 20) + 4096]);
    assert!(rec.take().is_empty());
    // `prefetch` does the same without a read: the first read then waits for no new GET.
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let r2 = f.reader(MIB..17 * MIB);
    r2.prefetch();
    // The GETs start on the store's runtime.
    let mut gets = rec.take_at_least(2);
    gets.sort_by_key(|g| g.start);
    assert_eq!(gets, vec![MIB..9 * MIB, 9 * MIB..17 * MIB]);
    assert!(r2.read(MIB, 4096).unwrap() == obj[1 << 20..(1 << 20) + 4096]);
    assert!(rec.take().is_empty());
}

/// Without a disk cache, a pass through an object's tensors in order (`cat` of every `.bin`,
/// a loader), each through its own reader, fetches each byte once: the object read-ahead
/// fetches ahead of the reads into the block cache in memory, whole MiB pieces, and the
/// tensors' reads (small ones through blocks, mid-sized ones whole, large ones streamed) find
/// them there or in flight. A tensor read again soon after (the kernel asking again for pages
/// of a memory-mapped file) costs no GET. Before, without a disk cache, each tensor fetched
/// its own bytes when first read (the blocks of small ones overlapping their neighbours'), one
/// after another, and a range let go was fetched again.
#[test]
fn the_object_read_ahead_without_a_disk_cache_fetches_each_byte_once() {
    let sizes = [
        100 << 10,
        (3 << 20) + 77,
        (12 << 20) + 5,
        50 << 10,
        50 << 10,
        5 << 20,
        200 << 10,
        (9 << 20) + 3,
        (2 << 20) + 11,
        30 << 10,
        (20 << 20) + 1,
    ];
    let total: u64 = sizes.iter().sum();
    let obj = data(total as usize, 9);
    let (store, rec) = store_with(
        Arc::new(InMemory::new()),
        &[("shard", &obj)],
        &cfg(256 * MIB, Duration::from_secs(10)),
    );
    let f = store.open_file(Path::new("shard")).unwrap();
    let mut at = 0;
    let mut ranges = Vec::new();
    for &n in &sizes {
        let r = f.reader(at..at + n);
        for off in (at..at + n).step_by(128 << 10) {
            let len = (at + n - off).min(128 << 10) as usize;
            let got = r.read(off, len).unwrap();
            assert!(
                got[..] == obj[off as usize..off as usize + len],
                "bytes at {off}"
            );
        }
        ranges.push(at..at + n);
        at += n;
    }
    let mut gets = rec.take();
    gets.sort_by_key(|g| g.start);
    for w in gets.windows(2) {
        assert!(w[0].end <= w[1].start, "bytes fetched twice: {gets:?}");
    }
    assert_eq!(store.stats().bytes_fetched, total, "{gets:?}");
    // The GETs went ahead of the reads: fewer than the tensors' own would be.
    assert!(
        gets.len() < 2 * sizes.len(),
        "{} GETs: {gets:?}",
        gets.len()
    );
    // Read again, whole or in part: kept, no GET.
    for i in [1, 5, 8] {
        let r = f.reader(ranges[i].clone());
        let off = ranges[i].start + 4096;
        assert!(r.read(off, 65536).unwrap()[..] == obj[off as usize..off as usize + 65536]);
    }
    assert!(
        rec.take().is_empty(),
        "a tensor read again was fetched again"
    );
    // Within the budget, and the blocks kept are what it holds once the readers are gone.
    let s = store.stats();
    assert!(s.budget_peak <= 256 * MIB, "{}", s.budget_peak);
    assert_eq!(s.budget_used, store.cached_bytes());
}

#[test]
fn sequential_reads_from_inside_the_range_double_the_window_in_parts_of_at_most_8_mib() {
    let obj = data(48 << 20, 1);
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let r = f.reader(0..f.size());
    // A read not at the start of the range: random (its blocks), then its continuation is a
    // sequential stream that starts with a small window.
    let start = MIB;
    let mut seen = Vec::new();
    let mut windows = vec![];
    for off in (start..obj.len() as u64).step_by(128 << 10) {
        seen.extend(r.read(off, 128 << 10).unwrap());
        windows.push(r.window());
    }
    assert!(seen[..] == obj[start as usize..], "bytes differ");
    let mut gets = rec.take();
    gets.sort_by_key(|g| g.start);
    // From the first block to the end without a gap; each byte fetched once but for the rest
    // of the first (random) read's block, which the stream that continues it fetches again.
    let mut at = start;
    for g in &gets {
        assert!(g.start <= at, "{gets:?}");
        assert!(g.end - g.start <= MAX_PART, "{gets:?}");
        at = at.max(g.end);
    }
    assert_eq!(at, obj.len() as u64);
    let fetched = store.stats().bytes_fetched;
    assert!(fetched <= obj.len() as u64 - start + MIB, "{fetched}");
    assert!(gets.len() <= 14, "{} GETs: {gets:?}", gets.len());
    // The window doubled from 1 MiB, never past 64 MiB.
    assert_eq!(windows[1], FIRST_WINDOW);
    let mut prev = FIRST_WINDOW;
    for &w in &windows[1..] {
        assert!(w == prev || w == prev * 2, "{windows:?}");
        prev = w;
    }
    assert!((16 * MIB..=MAX_WINDOW).contains(&prev), "{prev}");
}

#[test]
fn a_small_range_is_one_get() {
    let obj = data(20 << 20, 2);
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let range = 3 * MIB + 17..8 * MIB + 5;
    let r = f.reader(range.clone());
    for off in range.clone().step_by(128 << 10) {
        let n = (range.end - off).min(128 << 10) as usize;
        let got = r.read(off, n).unwrap();
        assert!(got[..] == obj[off as usize..off as usize + n]);
    }
    // One GET of the whole MiB blocks it lies in, kept in the block cache (no disk cache
    // here): neighbours read next cost none.
    assert_eq!(rec.take(), vec![3 * MIB..9 * MIB]);
    // Served whole once: its memory is released but for the blocks kept.
    assert_eq!(store.stats().budget_used, store.cached_bytes());
    assert_eq!(store.cached_bytes(), 6 * MIB);
    // A 16 KiB tensor costs one GET of the MiB block it lies in (its neighbours come with it:
    // see small_tensors_next_to_each_other_cost_one_get_per_block).
    let r = f.reader(100..100 + 16384);
    assert_eq!(r.read(100, 16384).unwrap(), obj[100..100 + 16384]);
    assert_eq!(rec.take(), vec![0..MIB]);
}

#[test]
fn random_reads_fetch_whole_aligned_mib_and_hit_the_cache() {
    let obj = data(20 << 20, 3);
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let r = f.reader(0..f.size());
    let offsets = [
        15 * MIB + 4096,
        2 * MIB + 77,
        19 * MIB + 12345,
        7 * MIB,
        15 * MIB + 999_000,
        2 * MIB + 500_000,
    ];
    for &o in &offsets {
        assert_eq!(r.read(o, 4096).unwrap(), obj[o as usize..o as usize + 4096]);
        assert_eq!(r.window(), FIRST_WINDOW);
    }
    let gets = rec.take();
    for g in &gets {
        assert_eq!(g.start % MIB, 0, "{gets:?}");
        assert!(
            g.end - g.start == MIB || g.end == obj.len() as u64,
            "{gets:?}"
        );
    }
    // The last two reads fell in blocks already fetched.
    assert_eq!(gets.len(), 4, "{gets:?}");
    // A read across a block boundary: one GET of both blocks.
    let o = 10 * MIB - 100;
    assert_eq!(r.read(o, 200).unwrap(), obj[o as usize..o as usize + 200]);
    assert_eq!(rec.take(), vec![9 * MIB..11 * MIB]);
}

#[test]
fn read_exact_at_reads_blocks_once() {
    let obj = data(3 * MIB as usize + 1000, 4);
    let (store, rec) = store_with(
        Arc::new(InMemory::new()),
        &[("a.index", &obj)],
        &cfg(256 * MIB, Duration::from_secs(10)),
    );
    let f = store.open_file(Path::new("a.index")).unwrap();
    assert_eq!(f.len(), obj.len() as u64);
    // The footer: the last (short) block.
    let mut b = vec![0u8; 48];
    let end = obj.len() as u64;
    f.read_exact_at(&mut b, end - 48).unwrap();
    assert!(b[..] == obj[obj.len() - 48..]);
    assert_eq!(rec.take(), vec![3 * MIB..end]);
    f.read_exact_at(&mut b, end - 100).unwrap();
    assert!(rec.take().is_empty());
    // Past the end: an error, no request.
    assert!(f.read_exact_at(&mut b, end - 10).is_err());
    assert!(rec.take().is_empty());
    // open_tail: one GET, and the bytes it brought are cached.
    let before = store.stats();
    let f = store.open_tail(Path::new("a.index"), 64 << 10).unwrap();
    f.read_exact_at(&mut b, end - 48).unwrap();
    assert!(b[..] == obj[obj.len() - 48..]);
    let after = store.stats();
    assert_eq!(
        (after.gets - before.gets, after.heads - before.heads),
        (1, 0)
    );
}

#[test]
fn budget_holds_with_16_concurrent_readers() {
    let budget = 24 * MIB;
    let objs: Vec<Vec<u8>> = (0..4).map(|i| data(24 << 20, 10 + i)).collect();
    // Slow answers, so that readers overlap.
    let slow = ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig {
            wait_get_per_call: Duration::from_millis(2),
            ..Default::default()
        },
    );
    let names: Vec<String> = (0..4).map(|i| format!("d/shard-{i}")).collect();
    let list: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| n.as_str())
        .zip(objs.iter().map(|o| &o[..]))
        .collect();
    let (store, _rec) = store_with(Arc::new(slow), &list, &cfg(budget, Duration::from_secs(30)));
    let store = Arc::new(store);
    let objs = Arc::new(objs);
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let store = Arc::clone(&store);
            let objs = Arc::clone(&objs);
            std::thread::spawn(move || {
                let i = t % 4;
                let f = store.open_file(Path::new(&format!("d/shard-{i}"))).unwrap();
                let r = f.reader(0..f.size());
                let step = 256 << 10;
                for off in (0..f.size()).step_by(step) {
                    let got = r.read(off, step).unwrap();
                    assert!(got[..] == objs[i][off as usize..off as usize + got.len()]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = store.stats();
    assert!(
        s.budget_peak <= budget + OVERDRAFT,
        "peak {} > {}",
        s.budget_peak,
        budget + OVERDRAFT
    );
    // The budget was what limited them (16 readers want up to 16 x 64 MiB).
    assert!(s.budget_peak >= budget, "peak {}", s.budget_peak);
    assert_eq!(s.budget_used, store.cached_bytes());
    assert!(s.gets >= 16);
}

#[test]
fn a_rewritten_object_fails_and_never_mixes() {
    let v1 = data(4 << 20, 5);
    let v2 = data(4 << 20, 6);
    let (store, rec) = store_with(
        Arc::new(InMemory::new()),
        &[("ckpt.data-00000-of-00001", &v1)],
        &cfg(256 * MIB, Duration::from_secs(10)),
    );
    let f = store
        .open_file(Path::new("ckpt.data-00000-of-00001"))
        .unwrap();
    let mut b = vec![0u8; 100];
    f.read_exact_at(&mut b, 0).unwrap();
    assert!(b[..] == v1[..100]);
    put(&store, &[("ckpt.data-00000-of-00001", &v2)]);
    // Cached block: still the old bytes (the version that was opened).
    f.read_exact_at(&mut b, 50).unwrap();
    assert!(b[..] == v1[50..150]);
    // A new GET carries If-Match and fails.
    let e = f.read_at(&mut b, 3 * MIB).unwrap_err();
    assert!(matches!(e, RemoteError::Changed { .. }), "{e}");
    assert!(f.changed());
    // Every later read fails, cached or not, through read_exact_at or a reader.
    assert!(f.read_exact_at(&mut b, 0).is_err());
    let r = f.reader(0..f.size());
    assert!(matches!(r.read(0, 10), Err(RemoteError::Changed { .. })));
    // ... saying why, as first found.
    assert_eq!(r.read(0, 10).unwrap_err().to_string(), e.to_string());
    assert_eq!(rec.take().len(), 2);
    // A file opened now reads the new version.
    let f2 = store
        .open_file(Path::new("ckpt.data-00000-of-00001"))
        .unwrap();
    f2.read_exact_at(&mut b, 3 * MIB).unwrap();
    assert!(b[..] == v2[3 * MIB as usize..3 * MIB as usize + 100]);
}

#[test]
fn a_get_that_never_answers_fails_within_the_timeout_then_reads_resume() {
    let obj = data(20 << 20, 7);
    let timeout = Duration::from_millis(400);
    // A window of 1 MiB: the first read does not fetch the object whole.
    let c = RemoteConfig {
        parallel: 1,
        part: MIB,
        ..cfg(256 * MIB, timeout)
    };
    let (store, rec) = store_with(Arc::new(InMemory::new()), &[("shard", &obj)], &c);
    let f = store.open_file(Path::new("shard")).unwrap();
    let r = f.reader(0..f.size());
    assert_eq!(r.read(0, 4096).unwrap(), obj[..4096]);
    rec.hang.store(true, Ordering::SeqCst);
    // Read past what was fetched ahead.
    let t = Instant::now();
    let e = r.read(12 * MIB, 4096).unwrap_err();
    assert!(matches!(e, RemoteError::Timeout { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "mem://b/shard: timed out after 400ms (remote_timeout)"
    );
    let e2 = f.read_at(&mut [0u8; 10], 15 * MIB).unwrap_err();
    assert!(matches!(e2, RemoteError::Timeout { .. }), "{e2}");
    assert!(
        t.elapsed() < timeout * 2 + Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert!(store.open_file(Path::new("shard")).is_err());
    assert!(!f.changed());
    // The store answers again: so do reads.
    rec.hang.store(false, Ordering::SeqCst);
    assert_eq!(
        r.read(12 * MIB, 4096).unwrap(),
        obj[12 << 20..(12 << 20) + 4096]
    );
    let mut b = [0u8; 10];
    f.read_at(&mut b, 15 * MIB).unwrap();
    assert_eq!(b[..], obj[15 << 20..(15 << 20) + 10]);
}

#[test]
fn slow_answers_within_the_timeout_succeed() {
    let obj = data(2 << 20, 8);
    let slow = ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig {
            wait_get_per_call: Duration::from_millis(100),
            ..Default::default()
        },
    );
    let (store, _) = store_with(
        Arc::new(slow),
        &[("x", &obj)],
        &cfg(256 * MIB, Duration::from_secs(5)),
    );
    let f = store.open_file(Path::new("x")).unwrap();
    let r = f.reader(0..f.size());
    assert!(r.read(0, obj.len()).unwrap() == obj);
    // Slower than the timeout: fails in time.
    let slower = ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig {
            wait_get_per_call: Duration::from_secs(3600),
            ..Default::default()
        },
    );
    let c = cfg(256 * MIB, Duration::from_millis(300));
    let store = RemoteStore::with_object_store(Arc::new(slower), "mem://s/", &c).unwrap();
    let t = Instant::now();
    assert!(store.open_file(Path::new("x")).is_err());
    assert!(store.kind(Path::new("x")).is_none());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn kinds_listing_and_whole_reads() {
    let (store, _) = store_with(
        Arc::new(InMemory::new()),
        &[
            ("run/checkpoint", b"model_checkpoint_path: \"ckpt-2\"\n"),
            ("run/ckpt-2.index", b"i"),
            ("run/ckpt-2.data-00000-of-00001", b"d"),
            ("run/sub/x", b"x"),
            ("runaway", b"r"),
        ],
        &cfg(256 * MIB, Duration::from_secs(10)),
    );
    assert_eq!(store.kind(Path::new("run")), Some(EntryKind::Dir));
    assert_eq!(store.kind(Path::new("run/")), Some(EntryKind::Dir));
    assert_eq!(
        store.kind(Path::new("run/ckpt-2.index")),
        Some(EntryKind::File)
    );
    assert_eq!(
        store.kind(Path::new("./run/sub/../ckpt-2.index")),
        Some(EntryKind::File)
    );
    assert_eq!(store.kind(Path::new("ru")), None);
    assert_eq!(store.kind(Path::new("")), Some(EntryKind::Dir));
    let mut l = store.list(Path::new("run")).unwrap();
    l.sort_by(|a, b| a.0.cmp(&b.0));
    let want: Vec<(std::ffi::OsString, EntryKind)> = [
        ("checkpoint", EntryKind::File),
        ("ckpt-2.data-00000-of-00001", EntryKind::File),
        ("ckpt-2.index", EntryKind::File),
        ("sub", EntryKind::Dir),
    ]
    .iter()
    .map(|(n, k)| (n.into(), *k))
    .collect();
    assert_eq!(l, want);
    // Listed objects open without a HEAD, once; a second open asks again.
    let heads = store.stats().heads;
    let f = store.open_file(Path::new("run/ckpt-2.index")).unwrap();
    assert_eq!(store.stats().heads, heads);
    let mut b = [0u8; 1];
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"i");
    store.open_file(Path::new("run/ckpt-2.index")).unwrap();
    assert_eq!(store.stats().heads, heads + 1);
    let s = store.read_whole(Path::new("run/checkpoint"), 100).unwrap();
    assert_eq!(s, b"model_checkpoint_path: \"ckpt-2\"\n");
    let e = store
        .read_whole(Path::new("run/checkpoint"), 10)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    let Err(e) = store.open(Path::new("run/nope")) else {
        panic!("opened a missing object")
    };
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    let m = store.meta(Path::new("run")).unwrap();
    assert_eq!(m.mode & libc::S_IFMT, libc::S_IFDIR);
    let f = store.open(Path::new("run/ckpt-2.index")).unwrap();
    assert_eq!(f.name(), Path::new("mem://b/run/ckpt-2.index"));
    assert_eq!(f.meta().mode & libc::S_IFMT, libc::S_IFREG);
}

#[test]
fn timeouts_are_said_in_seconds_or_milliseconds() {
    let t = |ms: u64| {
        RemoteError::Timeout {
            url: "s3://b/k".into(),
            after: Duration::from_millis(ms),
        }
        .to_string()
    };
    assert_eq!(t(60_000), "s3://b/k: timed out after 60s (remote_timeout)");
    assert_eq!(t(1_500), "s3://b/k: timed out after 1.5s (remote_timeout)");
    assert_eq!(t(250), "s3://b/k: timed out after 250ms (remote_timeout)");
}

/// A store over `inner` (already holding the objects) with the disk cache in `dir`.
fn cached_store(inner: Arc<dyn ObjectStore>, dir: &Path) -> (RemoteStore, Arc<Rec>) {
    let c = RemoteConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..cfg(256 * MIB, Duration::from_secs(10))
    };
    store_with(inner, &[], &c)
}

/// Calls `f` on every piece file of the disk cache in `dir`; how many there were.
fn each_piece(dir: &Path, mut f: impl FnMut(&Path, Range<u64>)) -> usize {
    let held = crate::source::remote::disk::held_pieces(dir);
    for (p, r) in &held {
        f(p, r.clone());
    }
    held.len()
}

/// Reads all of `key` through a tensor reader (sequential, 128 KiB at a time) and a few random
/// reads through `read_exact_at`.
fn read_all_ways(store: &RemoteStore, key: &str, want: &[u8]) {
    let f = store.open_file(Path::new(key)).unwrap();
    let r = f.reader(0..f.size());
    let mut seen = Vec::with_capacity(want.len());
    for off in (0..want.len() as u64).step_by(128 << 10) {
        seen.extend(r.read(off, 128 << 10).unwrap());
    }
    assert!(seen == want, "{key}: bytes differ");
    for (off, len) in [(5, 100), (3 * MIB - 7, 20), (want.len() as u64 - 9, 9)] {
        let mut b = vec![0u8; len];
        f.read_exact_at(&mut b, off).unwrap();
        assert_eq!(b, want[off as usize..off as usize + len], "{key} at {off}");
    }
}

#[test]
fn a_second_store_on_the_disk_cache_sends_no_get_and_a_replaced_object_is_fetched_anew() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let v1 = data((20 << 20) + 12345, 40);
    let (first, rec1) = cached_store(inner.clone(), dir.path());
    put(&first, &[("shard", &v1)]);
    read_all_ways(&first, "shard", &v1);
    first.disk_cache().unwrap().flush(Duration::from_secs(10));
    let fetched = first.stats().bytes_fetched;
    assert!(!rec1.take().is_empty());
    // Whole pieces are fetched (a piece at each end of a range at most), each byte once.
    assert!(
        fetched >= v1.len() as u64 && fetched <= v1.len() as u64 + 2 * MIB,
        "{fetched}"
    );
    assert_eq!(first.stats().disk_write_bytes, v1.len() as u64);

    // A later mount: no GET at all, every byte from disk.
    let (second, rec2) = cached_store(inner.clone(), dir.path());
    read_all_ways(&second, "shard", &v1);
    second.disk_cache().unwrap().flush(Duration::from_secs(10));
    assert_eq!(rec2.take(), Vec::<Range<u64>>::new());
    assert_eq!(second.stats().gets, 0);
    assert!(second.stats().disk_hit_bytes >= v1.len() as u64);

    // The object replaced (same size, other bytes): the next mount reads the new bytes, and the
    // old version's pieces are gone from the cache.
    let v2 = data(v1.len(), 41);
    put(&second, &[("shard", &v2)]);
    let (third, rec3) = cached_store(inner, dir.path());
    read_all_ways(&third, "shard", &v2);
    third.disk_cache().unwrap().flush(Duration::from_secs(10));
    assert!(!rec3.take().is_empty());
    let listed = super::disk::list(dir.path()).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].bytes, v2.len() as u64);
}

#[test]
fn a_damaged_cache_file_is_fetched_again_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let v = data(5 << 20, 42);
    let (first, _) = cached_store(inner.clone(), dir.path());
    put(&first, &[("shard", &v)]);
    read_all_ways(&first, "shard", &v);
    first.disk_cache().unwrap().flush(Duration::from_secs(10));
    // Flip one byte of every piece on disk.
    let flipped = each_piece(dir.path(), |p, r| {
        let mut b = std::fs::read(p).unwrap();
        let mid = ((r.start + r.end) / 2) as usize;
        b[mid] ^= 0x10;
        std::fs::write(p, b).unwrap();
    });
    assert_eq!(flipped, 5);
    let (second, rec) = cached_store(inner, dir.path());
    read_all_ways(&second, "shard", &v);
    assert!(!rec.take().is_empty(), "fetched again");
    assert_eq!(second.stats().disk_damaged, 5);
}

#[test]
fn cached_pieces_cut_short_under_an_open_reader_are_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let v = data((6 << 20) + 999, 43);
    let (first, _) = cached_store(inner.clone(), dir.path());
    put(&first, &[("shard", &v)]);
    read_all_ways(&first, "shard", &v);
    first.disk_cache().unwrap().flush(Duration::from_secs(10));
    // A second store reads every piece in place (no GET), then the segment file is cut in the
    // middle of its first piece while it is open: the same reads give the same bytes, from
    // the store.
    let (second, rec) = cached_store(inner, dir.path());
    read_all_ways(&second, "shard", &v);
    assert!(rec.take().is_empty(), "read in place");
    let mut cut_at = std::collections::BTreeMap::new();
    let held = each_piece(dir.path(), |p, r| {
        let mid = (r.start + r.end) / 2;
        let at = cut_at.entry(p.to_path_buf()).or_insert(mid);
        *at = mid.min(*at);
    });
    assert_eq!((held, cut_at.len()), (7, 1), "7 pieces in one segment");
    for (p, at) in cut_at {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(at).unwrap();
    }
    read_all_ways(&second, "shard", &v);
    assert!(!rec.take().is_empty(), "fetched again");
}

#[test]
fn small_tensors_next_to_each_other_cost_one_get_per_block() {
    // 40 ranges of 20 KiB, one after another (biases and norms in a shard): 800 KiB, inside
    // the first MiB block, then 3 more blocks' worth.
    let obj = data(4 << 20, 3);
    let (store, rec) = one_shard(&obj);
    let f = store.open_file(Path::new("shard")).unwrap();
    let small = 20 << 10;
    for i in 0..40u64 {
        let r = f.reader(i * small..(i + 1) * small);
        let got = r.read(i * small, small as usize).unwrap();
        assert!(
            got[..] == obj[(i * small) as usize..((i + 1) * small) as usize],
            "range {i}"
        );
    }
    assert_eq!(
        rec.take(),
        vec![0..MIB],
        "one GET of the block the 40 lie in"
    );
    // A larger range is still fetched whole, in one GET of the blocks it lies in.
    let r = f.reader(MIB + 5..2 * MIB + 7);
    assert!(
        r.read(MIB + 5, 4096).unwrap()[..] == obj[(MIB + 5) as usize..(MIB + 5 + 4096) as usize]
    );
    assert_eq!(rec.take(), vec![MIB..3 * MIB]);
}

#[test]
fn a_small_range_checked_from_the_disk_cache_is_served_from_memory_and_released() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let v = data(4 << 20, 44);
    let (first, _) = cached_store(inner.clone(), dir.path());
    put(&first, &[("shard", &v)]);
    read_all_ways(&first, "shard", &v);
    first.disk_cache().unwrap().flush(Duration::from_secs(10));
    let (second, rec) = cached_store(inner, dir.path());
    let f = second.open_file(Path::new("shard")).unwrap();
    // A 100 KiB range (a small tensor) across a piece boundary.
    let range = MIB - 50_000..MIB + 52_400;
    let want = &v[range.start as usize..range.end as usize];
    let r = f.reader(range.clone());
    assert!(r.check_cached(crc32c::crc32c(want)));
    let held = second.stats().budget_used;
    assert_eq!(held, range.end - range.start);
    let mut seen = Vec::new();
    for off in range.clone().step_by(32 << 10) {
        let n = (range.end - off).min(32 << 10) as usize;
        seen.extend_from_slice(&r.read_bytes(off, n).unwrap());
    }
    assert!(seen == want, "bytes differ");
    assert_eq!(second.stats().budget_used, 0, "served whole once: released");
    assert!(rec.take().is_empty());
    // A CRC that does not match: not held.
    let r = f.reader(range.clone());
    assert!(!r.check_cached(crc32c::crc32c(want) ^ 1));
    assert_eq!(second.stats().budget_used, 0);
}
