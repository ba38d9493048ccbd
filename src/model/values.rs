//! `tfmount diff --values`: how much the values of two tensors of the same dtype and shape
//! differ ([`compare`]), streamed over their served bytes with bounded memory, on every core.
//!
//! The bytes are compared in chunks of [`CHUNK`] bytes of each side. The threads (one per core)
//! take chunks in order from a counter; each chunk's figures are merged in chunk order (a
//! thread never runs more than [`WINDOW`] chunks ahead of the merge), so the result does not
//! depend on the number of threads or on timing. A chunk is compared in place, in a read-only
//! mapping of its file, where the format serves the bytes as stored ([`Ckpt::read_served_with`]
//! inside a [`model::mapped_scope`]: no copy); a page lost under the comparison (the file cut
//! short) discards the chunk's figures and the chunk is read again with `pread`, which fails
//! naming the file. Elsewhere (no mapping: object storage, partitioned tensors, decoded formats)
//! each thread reads into two buffers it keeps ([`Ckpt::read_served_into`], from a small pool,
//! never one per read).
//!
//! Every element is compared as [`ValueDiff::add`] compares it (f64 arithmetic, as numpy's on
//! the arrays converted to float64). The common dtypes (float32, float64, float16, bfloat16,
//! the integers, bool, the one-byte floats) go through one branch-free loop over [`LANES`]
//! elements at a time, compiled for the baseline ([`portable`]) and, where the CPU has it, in
//! AVX2 ([`avx2`]) with the same operations in the same order, so both give the same bits: the
//! sum of squares is kept per lane (element `k` of a chunk in lane `k % LANES`) and the lanes
//! added in a fixed order ([`reduce`]). Complex dtypes go element by element through `add`.

use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use crate::model::open::{self as model, Ckpt, TensorInfo};
use crate::render::elem::{Kind, Value, F16};

/// Bytes of each side compared at a time: where they are read into buffers, both sides' stay
/// in the core's cache between the read and the compare.
const CHUNK: usize = 256 << 10;
/// How far ahead of the compare loop its bytes are fetched into the cache (`prefetch`): the
/// hardware's own prefetch stops at each 4 KiB page of a mapping.
const AHEAD: usize = 2048;
/// Elements the compare loop takes at a time; a chunk's sum of squares is kept per lane.
const LANES: usize = 8;
/// The most threads comparing one tensor.
const MAX_THREADS: usize = 8;
/// How many chunks past the last merged one a thread may take (bounds what waits to be
/// merged).
const WINDOW: u64 = 4 * MAX_THREADS as u64;

/// Which of the two checkpoints a failure is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Side {
    A,
    B,
}

/// What `--values` calls equal: `|a - b| <= atol + rtol * |b|` (numpy's `isclose`, B the
/// reference; NaN equals NaN).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tolerance {
    pub(crate) atol: f64,
    pub(crate) rtol: f64,
}

/// How much the values of a tensor changed (`--values`): element by element as numbers (f64;
/// complex by modulus; bool as 0 and 1).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ValueDiff {
    pub(crate) elements: u64,
    /// Elements not equal within the tolerance (a NaN on one side only included).
    pub(crate) differing: u64,
    /// The first of them, as a flat (row-major) index.
    pub(crate) first: Option<u64>,
    /// Largest `|a - b|` over the elements where it is a number.
    pub(crate) max_abs: f64,
    /// Largest `|a - b| / |b|` over those where `b != 0`.
    pub(crate) max_rel: f64,
    sum_sq: f64,
    counted: u64,
}

impl ValueDiff {
    /// Adds element `i`, `(a, b)` as (real, imaginary) parts: the definition every fast loop
    /// follows.
    fn add(&mut self, i: u64, a: (f64, f64), b: (f64, f64), tol: Tolerance) {
        self.elements += 1;
        let nan_a = a.0.is_nan() || a.1.is_nan();
        let nan_b = b.0.is_nan() || b.1.is_nan();
        let d = if nan_a || nan_b {
            if nan_a && nan_b {
                return;
            }
            f64::NAN
        } else if a == b {
            0.0
        } else {
            (a.0 - b.0).hypot(a.1 - b.1)
        };
        let mb = b.0.hypot(b.1);
        if !d.is_nan() {
            self.max_abs = self.max_abs.max(d);
            self.sum_sq += d * d;
            self.counted += 1;
            if mb != 0.0 && d != 0.0 {
                self.max_rel = self.max_rel.max(d / mb);
            }
        }
        if d.is_nan() || d > tol.atol + tol.rtol * mb {
            self.differing += 1;
            self.first.get_or_insert(i);
        }
    }

    /// Adds what `other` found in the elements after this one's (its indices already absolute).
    fn merge(&mut self, other: &ValueDiff) {
        self.elements += other.elements;
        self.differing += other.differing;
        self.first = match (self.first, other.first) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        self.max_abs = self.max_abs.max(other.max_abs);
        self.max_rel = self.max_rel.max(other.max_rel);
        self.sum_sq += other.sum_sq;
        self.counted += other.counted;
    }

    /// Root mean square of `a - b` over the elements where it is a number.
    pub(crate) fn rms(&self) -> f64 {
        if self.counted == 0 {
            0.0
        } else {
            (self.sum_sq / self.counted as f64).sqrt()
        }
    }
}

/// An element as (real, imaginary) parts (strings never get here: [`compare`] skips them).
fn parts(v: Value) -> (f64, f64) {
    match v {
        Value::Bool(b) => (f64::from(u8::from(b)), 0.0),
        Value::Int(i) => (i as f64, 0.0),
        Value::F32(x) => (f64::from(x), 0.0),
        Value::F64(x) => (x, 0.0),
        Value::C64(r, i) => (f64::from(r), f64::from(i)),
        Value::C128(r, i) => (r, i),
    }
}

/// Compares two tensors of the same dtype and shape value by value (their served bytes, the
/// shorter's length); `Ok(None)` for a dtype without numbers (strings, variants). An error
/// says on which side, naming the file.
pub(crate) fn compare(
    a: &Ckpt,
    ta: &TensorInfo,
    b: &Ckpt,
    tb: &TensorInfo,
    tol: Tolerance,
) -> Result<Option<ValueDiff>, (Side, String)> {
    let Some(kind) = crate::parse::dtype::DType::from_name(&ta.dtype).and_then(Kind::of) else {
        return Ok(None);
    };
    let es = kind.size();
    if es == 0 {
        return Ok(None);
    }
    let na = a.served_size(ta).map_err(|e| (Side::A, e))?;
    let nb = b.served_size(tb).map_err(|e| (Side::B, e))?;
    let n = na.min(nb) / es as u64 * es as u64;
    let job = Job {
        a,
        ta,
        b,
        tb,
        tol,
        loop_: Loop::of(kind),
        es: es as u64,
        mapped: model::mapped_reads(),
        n,
        chunk: (CHUNK / es * es) as u64,
    };
    job.run().map(Some)
}

/// The compare loop of one chunk over two slices of `dtype` (what [`compare`] runs per chunk,
/// on one thread), for the in-process benchmark (`benches/kernels.rs`, through
/// `testkit::kernels`); `None` for a dtype without numbers.
#[cfg(feature = "testkit")]
pub(crate) fn compare_slices(
    dtype: crate::parse::dtype::DType,
    a: &[u8],
    b: &[u8],
    tol: Tolerance,
) -> Option<ValueDiff> {
    let kind = Kind::of(dtype)?;
    (kind.size() > 0).then(|| Loop::of(kind).compare(a, b, 0, tol))
}

/// One comparison: what to read, in chunks of `chunk` bytes, and how to compare them.
struct Job<'c> {
    a: &'c Ckpt,
    ta: &'c TensorInfo,
    b: &'c Ckpt,
    tb: &'c TensorInfo,
    tol: Tolerance,
    loop_: Loop,
    es: u64,
    /// Whether reads may come from mappings ([`model::mapped_reads`]).
    mapped: bool,
    /// Bytes compared (of each side).
    n: u64,
    chunk: u64,
}

/// What the threads of a job share.
struct Shared {
    /// The next chunk to take.
    next: AtomicU64,
    /// Set when a chunk failed (or a thread panicked): no more chunks are taken.
    stop: AtomicBool,
    merge: Mutex<Merged>,
    /// Signalled when a chunk is merged or `stop` is set.
    moved: Condvar,
}

#[derive(Default)]
struct Merged {
    /// Chunks merged into `total` (chunks `0..done`).
    done: u64,
    total: ValueDiff,
    /// Figures of chunks done but not merged yet (those after a chunk still being compared).
    waiting: BTreeMap<u64, ValueDiff>,
    /// The failure of the first chunk that failed.
    failed: Option<(u64, Side, String)>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Merged> {
        lock(&self.merge)
    }

    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        let _held = self.lock();
        self.moved.notify_all();
    }
}

/// Stops the job if its thread unwinds (a panic), so no other thread waits for its chunk.
struct HaltOnPanic<'s>(&'s Shared);

impl Drop for HaltOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt();
        }
    }
}

/// Threads to compare with: the cores this process may use, at most [`MAX_THREADS`].
fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_THREADS)
    })
}

impl Job<'_> {
    fn run(&self) -> Result<ValueDiff, (Side, String)> {
        let chunks = self.n.div_ceil(self.chunk);
        let shared = Shared {
            next: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            merge: Mutex::new(Merged::default()),
            moved: Condvar::new(),
        };
        let helpers = (threads() as u64).min(chunks).saturating_sub(1) as usize;
        let panicked = if helpers == 0 {
            self.work(&shared, chunks);
            false
        } else {
            std::thread::scope(|sc| {
                let hs: Vec<_> = (0..helpers)
                    .map(|_| sc.spawn(|| self.work(&shared, chunks)))
                    .collect();
                self.work(&shared, chunks);
                // Every thread joined (one that panicked and was not would panic the scope).
                let mut panicked = false;
                for h in hs {
                    panicked |= h.join().is_err();
                }
                panicked
            })
        };
        let m = std::mem::take(&mut *shared.lock());
        if let Some((_, side, e)) = m.failed {
            return Err((side, e));
        }
        if panicked || m.done != chunks {
            return Err((Side::A, "a comparing thread failed".into()));
        }
        Ok(m.total)
    }

    /// One thread's part: takes chunks until none is left, compares each, merges in order.
    fn work(&self, shared: &Shared, chunks: u64) {
        let _halt = HaltOnPanic(shared);
        let mut bufs = Buffers::take();
        loop {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            let k = shared.next.fetch_add(1, Ordering::AcqRel);
            if k >= chunks {
                return;
            }
            {
                let mut m = shared.lock();
                while k >= m.done + WINDOW && !shared.stop.load(Ordering::Acquire) {
                    m = shared.moved.wait(m).unwrap_or_else(|e| e.into_inner());
                }
            }
            let r = self.chunk(k, &mut bufs);
            let mut m = shared.lock();
            match r {
                Ok(v) => {
                    m.waiting.insert(k, v);
                    loop {
                        let next = m.done;
                        let Some(v) = m.waiting.remove(&next) else {
                            break;
                        };
                        m.total.merge(&v);
                        m.done += 1;
                    }
                    shared.moved.notify_all();
                }
                Err((side, e)) => {
                    if m.failed.as_ref().is_none_or(|f| (k, side) < (f.0, f.1)) {
                        m.failed = Some((k, side, e));
                    }
                    drop(m);
                    shared.halt();
                    return;
                }
            }
        }
    }

    /// Compares chunk `k` of both sides: from the files' mappings where they can be mapped
    /// (no copy), else read into `bufs`. A mapped page lost under the comparison (a file cut
    /// short) discards its figures, and the chunk is read again into `bufs`, which fails
    /// naming the file.
    fn chunk(&self, k: u64, bufs: &mut Buffers) -> Result<ValueDiff, (Side, String)> {
        let off = k * self.chunk;
        let len = (self.n - off).min(self.chunk) as usize;
        if self.mapped {
            if let (r, false) = model::mapped_scope(|| self.in_place(off, len)) {
                return r;
            }
        }
        self.read(off, len, bufs)
    }

    /// Chunk `[off, off + len)` compared where the reads leave it (inside a mapped scope).
    fn in_place(&self, off: u64, len: usize) -> Result<ValueDiff, (Side, String)> {
        let r = self.a.read_served_with(self.ta, off, len, |x| {
            self.b.read_served_with(self.tb, off, len, |y| {
                for (side, ck, got) in [(Side::A, self.a, x.len()), (Side::B, self.b, y.len())] {
                    if got != len {
                        return Err(short(side, ck, got, off, len));
                    }
                }
                Ok(self.loop_.compare(x, y, off / self.es, self.tol))
            })
        });
        match r {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err((Side::B, e)),
            Err(e) => Err((Side::A, e)),
        }
    }

    /// Chunk `[off, off + len)` read into `bufs` and compared.
    fn read(&self, off: u64, len: usize, bufs: &mut Buffers) -> Result<ValueDiff, (Side, String)> {
        let x = &mut bufs.a[..len];
        let y = &mut bufs.b[..len];
        for (side, ck, t, buf) in [(Side::A, self.a, self.ta, x), (Side::B, self.b, self.tb, y)] {
            let got = ck.read_served_into(t, off, buf).map_err(|e| (side, e))?;
            if got != len {
                return Err(short(side, ck, got, off, len));
            }
        }
        Ok(self
            .loop_
            .compare(&bufs.a[..len], &bufs.b[..len], off / self.es, self.tol))
    }
}

/// A read that gave fewer bytes than the served size promised.
fn short(side: Side, ck: &Ckpt, got: usize, off: u64, len: usize) -> (Side, String) {
    let at = ck.prefix().display();
    (
        side,
        format!("{at}: {got} of {len} bytes read at byte {off}"),
    )
}

/// A thread's two chunk buffers, from a pool that keeps them for the next tensor.
struct Buffers {
    a: Vec<u8>,
    b: Vec<u8>,
}

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

impl Buffers {
    fn take() -> Buffers {
        let mut pool = lock(&POOL);
        let mut one = || pool.pop().unwrap_or_else(|| vec![0u8; CHUNK]);
        Buffers { a: one(), b: one() }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        let mut pool = lock(&POOL);
        for v in [std::mem::take(&mut self.a), std::mem::take(&mut self.b)] {
            if v.len() == CHUNK && pool.len() < 2 * MAX_THREADS {
                pool.push(v);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The compare loops
// ---------------------------------------------------------------------------------------------

/// How a dtype's chunks are compared.
#[derive(Clone, Copy)]
enum Loop {
    F32,
    F64,
    F16,
    BF16,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    /// One-byte elements (bool, int8, uint8, the sub-byte integers, float8, float4): their
    /// values by byte.
    Byte(&'static [f64; 256]),
    /// Element by element through [`ValueDiff::add`] (complex).
    Each(Kind),
}

impl Loop {
    fn of(kind: Kind) -> Loop {
        match kind {
            Kind::F32 => Loop::F32,
            Kind::F64 => Loop::F64,
            Kind::BF16 => Loop::BF16,
            Kind::Mini { fmt, size: 2 } if fmt == F16 => Loop::F16,
            Kind::Int { size: 2, signed } => [Loop::U16, Loop::I16][usize::from(signed)],
            Kind::Int { size: 4, signed } => [Loop::U32, Loop::I32][usize::from(signed)],
            Kind::Int { size: 8, signed } => [Loop::U64, Loop::I64][usize::from(signed)],
            k if k.size() == 1 && !matches!(k, Kind::String) => Loop::Byte(byte_table(k)),
            k => Loop::Each(k),
        }
    }

    /// The figures of the elements of `a` and `b` (as served), the first at index `base`.
    fn compare(self, a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
        match self {
            Loop::F32 => fast(F32s, a, b, base, tol),
            Loop::F64 => fast(F64s, a, b, base, tol),
            Loop::F16 => fast(Le2(|h| f64::from(f16_to_f32(h))), a, b, base, tol),
            Loop::BF16 => fast(
                Le2(|h| f64::from(f32::from_bits(u32::from(h) << 16))),
                a,
                b,
                base,
                tol,
            ),
            Loop::I16 => fast(Le2(|h| f64::from(h as i16)), a, b, base, tol),
            Loop::U16 => fast(Le2(f64::from), a, b, base, tol),
            Loop::I32 => fast(Le4(|w| f64::from(w as i32)), a, b, base, tol),
            Loop::U32 => fast(Le4(f64::from), a, b, base, tol),
            Loop::I64 => fast(Le8(|w| w as i64 as f64), a, b, base, tol),
            Loop::U64 => fast(Le8(|w| w as f64), a, b, base, tol),
            Loop::Byte(t) => fast(Byte(t), a, b, base, tol),
            Loop::Each(kind) => each(kind, a, b, base, tol),
        }
    }
}

/// The value of every byte as an element of a one-byte `kind`, as [`Kind::decode`] gives it.
fn byte_table(kind: Kind) -> &'static [f64; 256] {
    static TABLES: Mutex<Vec<(Kind, &'static [f64; 256])>> = Mutex::new(Vec::new());
    let mut t = lock(&TABLES);
    if let Some((_, tab)) = t.iter().find(|(k, _)| *k == kind) {
        return tab;
    }
    // One table per one-byte dtype, made once: a few kilobytes in all.
    let tab: &'static [f64; 256] = Box::leak(Box::new(std::array::from_fn(|v| {
        parts(kind.decode(&[v as u8])).0
    })));
    t.push((kind, tab));
    tab
}

/// IEEE half-precision bits as the `f32` they stand for (exact), as
/// [`crate::render::elem::Mini::to_f32`] decodes them (checked on every encoding in the tests).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let e = u32::from(h >> 10) & 0x1f;
    let m = u32::from(h & 0x3ff);
    let mag = if e == 0x1f {
        0x7f80_0000 | (m << 13)
    } else if e == 0 {
        // Subnormal: m * 2^-24, exact in f32.
        return f32::from_bits(sign | (m as f32 * f32::from_bits(0x3380_0000)).to_bits());
    } else {
        ((e + 112) << 23) | (m << 13)
    };
    f32::from_bits(sign | mag)
}

/// How the fast loop reads one element from its bytes.
trait Load: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Whether the elements are float32 or float64 bits, which the AVX2 loop loads itself.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the AVX2 loop only
    const WIDE: Wide = Wide::No;
    /// The element whose bytes start `b` (at least `SIZE` of them).
    fn load(self, b: &[u8]) -> f64;
}

/// Elements the AVX2 loop loads as they are stored (see [`Load::WIDE`]).
#[allow(dead_code)] // not on every target
enum Wide {
    No,
    F32,
    F64,
}

/// float32 elements.
#[derive(Clone, Copy)]
struct F32s;
/// float64 elements.
#[derive(Clone, Copy)]
struct F64s;

impl Load for F32s {
    const SIZE: usize = 4;
    const WIDE: Wide = Wide::F32;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

impl Load for F64s {
    const SIZE: usize = 8;
    const WIDE: Wide = Wide::F64;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

#[derive(Clone, Copy)]
struct Le2<F>(F);
#[derive(Clone, Copy)]
struct Le4<F>(F);
#[derive(Clone, Copy)]
struct Le8<F>(F);
#[derive(Clone, Copy)]
struct Byte(&'static [f64; 256]);

impl<F: Fn(u16) -> f64 + Copy> Load for Le2<F> {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        (self.0)(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl<F: Fn(u32) -> f64 + Copy> Load for Le4<F> {
    const SIZE: usize = 4;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        (self.0)(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

impl<F: Fn(u64) -> f64 + Copy> Load for Le8<F> {
    const SIZE: usize = 8;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        (self.0)(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }
}

impl Load for Byte {
    const SIZE: usize = 1;
    #[inline(always)]
    fn load(self, b: &[u8]) -> f64 {
        self.0[usize::from(b[0])]
    }
}

/// The per-lane figures of the fast loop over one chunk.
struct Lanes {
    max_abs: [f64; LANES],
    max_rel: [f64; LANES],
    sum_sq: [f64; LANES],
    counted: u64,
    differing: u64,
    first: Option<u64>,
}

impl Lanes {
    fn new() -> Lanes {
        Lanes {
            max_abs: [0.0; LANES],
            max_rel: [0.0; LANES],
            sum_sq: [0.0; LANES],
            counted: 0,
            differing: 0,
            first: None,
        }
    }

    /// Counts the elements of a group flagged in `bad` (bit `j`: lane `j`), the first at
    /// index `at`.
    #[inline(always)]
    fn flag(&mut self, bad: u32, at: u64) {
        if bad != 0 {
            self.differing += u64::from(bad.count_ones());
            if self.first.is_none() {
                self.first = Some(at + u64::from(bad.trailing_zeros()));
            }
        }
    }

    /// The chunk's figures over its `elements` elements.
    fn finish(&self, elements: u64) -> ValueDiff {
        let max = |v: &[f64; LANES]| v.iter().fold(0.0f64, |m, &x| m.max(x));
        ValueDiff {
            elements,
            differing: self.differing,
            first: self.first,
            max_abs: max(&self.max_abs),
            max_rel: max(&self.max_rel),
            sum_sq: reduce(&self.sum_sq),
            counted: self.counted,
        }
    }
}

/// The lanes' sums added in the one order every loop uses: lane `j` with lane `j + 4`, then
/// those pairwise.
#[inline(always)]
fn reduce(s: &[f64; LANES]) -> f64 {
    let h = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The elements of `a` and `b` in groups of [`LANES`] (the last padded with NaN against NaN,
/// which counts nowhere), each group through `group`.
#[inline(always)]
fn groups<L: Load>(
    l: L,
    a: &[u8],
    b: &[u8],
    base: u64,
    mut group: impl FnMut(&[f64; LANES], &[f64; LANES], u64),
) -> u64 {
    let n = a.len().min(b.len()) / L::SIZE;
    let g = LANES * L::SIZE;
    let whole = n / LANES * g;
    let mut at = base;
    let (mut x, mut y) = ([0f64; LANES], [0f64; LANES]);
    for (p, q) in a[..whole].chunks_exact(g).zip(b[..whole].chunks_exact(g)) {
        prefetch(
            p.as_ptr().wrapping_add(AHEAD),
            q.as_ptr().wrapping_add(AHEAD),
        );
        for (j, (p, q)) in p
            .chunks_exact(L::SIZE)
            .zip(q.chunks_exact(L::SIZE))
            .enumerate()
        {
            x[j] = l.load(p);
            y[j] = l.load(q);
        }
        group(&x, &y, at);
        at += LANES as u64;
    }
    let rest = n % LANES;
    if rest > 0 {
        let (p, q) = (&a[whole..], &b[whole..]);
        for j in 0..LANES {
            (x[j], y[j]) = if j < rest {
                (l.load(&p[j * L::SIZE..]), l.load(&q[j * L::SIZE..]))
            } else {
                (f64::NAN, f64::NAN)
            };
        }
        group(&x, &y, at);
    }
    n as u64
}

/// Asks for the cache lines at `a` and `b` (which may lie past the data: a prefetch never
/// faults).
#[inline(always)]
fn prefetch(a: *const u8, b: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint: it reads nothing into a register, changes no flag or
    // memory, and never faults, whatever the address.
    unsafe {
        std::arch::asm!(
            "prefetcht0 [{a}]",
            "prefetcht0 [{b}]",
            a = in(reg) a,
            b = in(reg) b,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (a, b);
}

/// The fast loop, with AVX2 where the CPU has it.
#[inline(always)]
fn fast<L: Load>(l: L, a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { avx2::fast(l, a, b, base, tol) };
    }
    portable(l, a, b, base, tol)
}

/// The fast loop for any CPU: [`ValueDiff::add`] per lane, without branches.
#[inline(always)]
fn portable<L: Load>(l: L, a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
    let mut s = Lanes::new();
    let n = groups(l, a, b, base, |x, y, at| {
        let mut bad = 0u32;
        for j in 0..LANES {
            let (x, y) = (x[j], y[j]);
            let (na, nb) = (x.is_nan(), y.is_nan());
            let num = !(na | nb);
            let d = if x == y { 0.0 } else { (x - y).abs() };
            let mb = y.abs();
            let dn = if num { d } else { 0.0 };
            s.max_abs[j] = if dn > s.max_abs[j] { dn } else { s.max_abs[j] };
            s.sum_sq[j] += dn * dn;
            s.counted += u64::from(num);
            let r = d / mb;
            let r = if num & (mb != 0.0) & (d != 0.0) {
                r
            } else {
                0.0
            };
            s.max_rel[j] = if r > s.max_rel[j] { r } else { s.max_rel[j] };
            bad |= u32::from((na != nb) | (d > tol.atol + tol.rtol * mb)) << j;
        }
        s.flag(bad, at);
    });
    s.finish(n)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The fast loop in AVX2: [`super::portable`]'s operations, four lanes at a time, float32
    //! and float64 loaded straight from the bytes; `|a - b| / |b|` divided only where it may
    //! raise the lane's largest (the result is the same: see [`Kernel::step`]).
    use super::{groups, prefetch, Lanes, Load, Tolerance, ValueDiff, Wide, AHEAD, LANES};
    use std::arch::x86_64::*;

    /// The figures of the loop, as vectors of four lanes (lanes 0-3, 4-7).
    struct Kernel {
        atol: __m256d,
        rtol: __m256d,
        max_abs: [__m256d; 2],
        max_rel: [__m256d; 2],
        sum_sq: [__m256d; 2],
        s: Lanes,
    }

    impl Kernel {
        /// One group of eight elements (lanes 0-3 in `x[0]`, `y[0]`), the first at index `at`.
        ///
        /// `max_rel` is `max(max_rel, r)` where `r = d / mb` is a number, as in the portable
        /// loop, but the division is skipped for a half of the group none of whose lanes can
        /// raise its lane's largest `m`: `fl(d / mb) > m` needs `d / mb > m` exactly (rounding
        /// is monotonic and `m` a double), so `d > m * mb` (`mb > 0`), so `d >= t = fl(m * mb)`
        /// (`d` is a double above `m * mb`, `t` the double nearest it); a lane with `d < t` has
        /// `fl(d / mb) <= m`, which leaves `m` as it is (an infinite or NaN `t` keeps the lane:
        /// `!(d < t)`).
        ///
        /// # Safety
        /// The CPU must have AVX2.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn step(&mut self, x: [__m256d; 2], y: [__m256d; 2], at: u64) {
            let zero = _mm256_setzero_pd();
            let sign = _mm256_set1_pd(-0.0);
            let mut bad = 0u32;
            for h in 0..2 {
                let (x, y) = (x[h], y[h]);
                let na = _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x);
                let nb = _mm256_cmp_pd::<_CMP_UNORD_Q>(y, y);
                let num = _mm256_cmp_pd::<_CMP_ORD_Q>(x, y);
                let eq = _mm256_cmp_pd::<_CMP_EQ_OQ>(x, y);
                // |x - y|, 0 where x == y (inf against inf).
                let d = _mm256_andnot_pd(eq, _mm256_andnot_pd(sign, _mm256_sub_pd(x, y)));
                let mb = _mm256_andnot_pd(sign, y);
                let dn = _mm256_and_pd(num, d);
                // max_pd(p, q) is `p > q ? p : q` (q when either is NaN), as the portable
                // loop's select.
                self.max_abs[h] = _mm256_max_pd(dn, self.max_abs[h]);
                self.sum_sq[h] = _mm256_add_pd(self.sum_sq[h], _mm256_mul_pd(dn, dn));
                let rel_ok = _mm256_and_pd(
                    num,
                    _mm256_and_pd(
                        _mm256_cmp_pd::<_CMP_NEQ_UQ>(mb, zero),
                        _mm256_cmp_pd::<_CMP_NEQ_UQ>(d, zero),
                    ),
                );
                let m = self.max_rel[h];
                let t = _mm256_mul_pd(m, mb);
                let may = _mm256_and_pd(rel_ok, _mm256_cmp_pd::<_CMP_NLT_UQ>(d, t));
                if _mm256_movemask_pd(may) != 0 {
                    let r = _mm256_div_pd(d, mb);
                    self.max_rel[h] = _mm256_max_pd(_mm256_and_pd(rel_ok, r), m);
                }
                let thr = _mm256_add_pd(self.atol, _mm256_mul_pd(self.rtol, mb));
                let over = _mm256_cmp_pd::<_CMP_GT_OQ>(d, thr);
                let flagged = _mm256_or_pd(_mm256_xor_pd(na, nb), over);
                bad |= (_mm256_movemask_pd(flagged) as u32) << (4 * h);
                self.s.counted += u64::from((_mm256_movemask_pd(num) as u32).count_ones());
            }
            self.s.flag(bad, at);
        }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn fast<L: Load>(
        l: L,
        a: &[u8],
        b: &[u8],
        base: u64,
        tol: Tolerance,
    ) -> ValueDiff {
        const _: () = assert!(LANES == 8);
        let zero = _mm256_setzero_pd();
        let mut k = Kernel {
            atol: _mm256_set1_pd(tol.atol),
            rtol: _mm256_set1_pd(tol.rtol),
            max_abs: [zero; 2],
            max_rel: [zero; 2],
            sum_sq: [zero; 2],
            s: Lanes::new(),
        };
        let n = a.len().min(b.len()) / L::SIZE;
        let whole = n / LANES * LANES;
        // SAFETY (the loads): elements `i..i + 8` with `i + 8 <= whole <= n` lie in `a` and
        // `b`, `n` elements of `L::SIZE` bytes each; unaligned loads.
        let n = match L::WIDE {
            Wide::F32 => {
                let (pa, pb) = (a.as_ptr().cast::<f32>(), b.as_ptr().cast::<f32>());
                for i in (0..whole).step_by(LANES) {
                    prefetch(
                        pa.wrapping_add(i + AHEAD / 4).cast(),
                        pb.wrapping_add(i + AHEAD / 4).cast(),
                    );
                    let (xa, ya) = (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
                    let x = [
                        _mm256_cvtps_pd(_mm256_castps256_ps128(xa)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(xa)),
                    ];
                    let y = [
                        _mm256_cvtps_pd(_mm256_castps256_ps128(ya)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(ya)),
                    ];
                    k.step(x, y, base + i as u64);
                }
                tail(&mut k, l, a, b, whole, n, base)
            }
            Wide::F64 => {
                let (pa, pb) = (a.as_ptr().cast::<f64>(), b.as_ptr().cast::<f64>());
                for i in (0..whole).step_by(LANES) {
                    prefetch(
                        pa.wrapping_add(i + AHEAD / 8).cast(),
                        pb.wrapping_add(i + AHEAD / 8).cast(),
                    );
                    let x = [_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pa.add(i + 4))];
                    let y = [_mm256_loadu_pd(pb.add(i)), _mm256_loadu_pd(pb.add(i + 4))];
                    k.step(x, y, base + i as u64);
                }
                tail(&mut k, l, a, b, whole, n, base)
            }
            Wide::No => groups(l, a, b, base, |x, y, at| {
                // SAFETY: the CPU has AVX2 (this function's contract); lanes 0-3 and 4-7 of
                // arrays of 8.
                unsafe {
                    let (px, py) = (x.as_ptr(), y.as_ptr());
                    let x = [_mm256_loadu_pd(px), _mm256_loadu_pd(px.add(4))];
                    let y = [_mm256_loadu_pd(py), _mm256_loadu_pd(py.add(4))];
                    k.step(x, y, at);
                }
            }),
        };
        for h in 0..2 {
            _mm256_storeu_pd(k.s.max_abs.as_mut_ptr().add(4 * h), k.max_abs[h]);
            _mm256_storeu_pd(k.s.max_rel.as_mut_ptr().add(4 * h), k.max_rel[h]);
            _mm256_storeu_pd(k.s.sum_sq.as_mut_ptr().add(4 * h), k.sum_sq[h]);
        }
        k.s.finish(n)
    }

    /// The elements from `whole` (a multiple of 8) to `n` (fewer than 8 more) as one group
    /// padded with NaN against NaN; returns `n`.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn tail<L: Load>(
        k: &mut Kernel,
        l: L,
        a: &[u8],
        b: &[u8],
        whole: usize,
        n: usize,
        base: u64,
    ) -> u64 {
        if n > whole {
            let (mut x, mut y) = ([f64::NAN; LANES], [f64::NAN; LANES]);
            for j in 0..n - whole {
                x[j] = l.load(&a[(whole + j) * L::SIZE..]);
                y[j] = l.load(&b[(whole + j) * L::SIZE..]);
            }
            let (px, py) = (x.as_ptr(), y.as_ptr());
            let x = [_mm256_loadu_pd(px), _mm256_loadu_pd(px.add(4))];
            let y = [_mm256_loadu_pd(py), _mm256_loadu_pd(py.add(4))];
            k.step(x, y, base + whole as u64);
        }
        n as u64
    }
}

/// Element by element through [`ValueDiff::add`] (complex dtypes).
fn each(kind: Kind, a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
    let mut v = ValueDiff::default();
    let es = kind.size();
    for (i, (p, q)) in a.chunks_exact(es).zip(b.chunks_exact(es)).enumerate() {
        v.add(
            base + i as u64,
            parts(kind.decode(p)),
            parts(kind.decode(q)),
            tol,
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::dtype::DType;
    use crate::testkit::rng::Rng;

    const TOLERANCES: [Tolerance; 6] = [
        Tolerance {
            atol: 0.0,
            rtol: 0.0,
        },
        Tolerance {
            atol: 1.5,
            rtol: 0.25,
        },
        Tolerance {
            atol: 0.5,
            rtol: 0.0,
        },
        Tolerance {
            atol: 0.0,
            rtol: 0.5,
        },
        Tolerance {
            atol: 1e-6,
            rtol: 1e-6,
        },
        Tolerance {
            atol: f64::INFINITY,
            rtol: 0.0,
        },
    ];

    /// What [`ValueDiff::add`] gives element by element, its sum of squares kept per lane as
    /// the fast loop keeps it ([`reduce`]'s order; sequential for the element-by-element loop).
    fn reference(kind: Kind, a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
        let es = kind.size();
        let lanes = if matches!(Loop::of(kind), Loop::Each(_)) {
            1
        } else {
            LANES
        };
        let mut l = vec![ValueDiff::default(); lanes];
        for (k, (p, q)) in a.chunks_exact(es).zip(b.chunks_exact(es)).enumerate() {
            let (x, y) = (parts(kind.decode(p)), parts(kind.decode(q)));
            l[k % lanes].add(base + k as u64, x, y, tol);
        }
        if lanes == 1 {
            return l.swap_remove(0);
        }
        let pair = |i: usize, j: usize| {
            let mut v = l[i].clone();
            v.merge(&l[j]);
            v
        };
        let (mut h0, h1, mut h2, h3) = (pair(0, 4), pair(1, 5), pair(2, 6), pair(3, 7));
        h0.merge(&h2);
        let mut h13 = h1;
        h13.merge(&h3);
        h2 = ValueDiff::default();
        h2.merge(&h0);
        h2.merge(&h13);
        h2
    }

    /// Values that test the rules: NaNs (both signs, payloads), infinities, zeros of both signs,
    /// subnormals, the extremes, and neighbours.
    fn specials_f64() -> Vec<f64> {
        vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            1.5,
            2.0,
            0.5,
            1.0 + f64::EPSILON,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            -f64::from_bits(3),
            f64::MAX,
            f64::MIN,
            1e-6,
            1.000001,
            f64::from(f32::from_bits(1)),
            f64::from(f32::MAX),
        ]
    }

    /// Bytes of `a` and `b` for a dtype of `es` bytes: every pair of `specials` (as encoded by
    /// `enc`, when given), equal pairs, nearby pairs and random bit patterns.
    fn inputs(es: usize, specials: &[Vec<u8>], seed: u64) -> (Vec<u8>, Vec<u8>) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for x in specials {
            for y in specials {
                a.extend_from_slice(x);
                b.extend_from_slice(y);
            }
        }
        let mut rng = Rng::new(seed);
        for i in 0..3001 {
            let x = rng.bytes(es);
            let mut y = match i % 3 {
                0 => x.clone(),
                1 => rng.bytes(es),
                _ => {
                    // The same but for the lowest bits.
                    let mut y = x.clone();
                    y[0] ^= (rng.next() & 7) as u8;
                    y
                }
            };
            if i % 5 == 0 {
                // The same high byte (the same sign and scale).
                y[es - 1] = x[es - 1];
            }
            a.extend_from_slice(&x);
            b.extend_from_slice(&y);
        }
        (a, b)
    }

    fn kinds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
        let s = specials_f64();
        let f32s: Vec<Vec<u8>> = s
            .iter()
            .map(|&x| (x as f32).to_le_bytes().to_vec())
            .collect();
        let f64s: Vec<Vec<u8>> = s.iter().map(|&x| x.to_le_bytes().to_vec()).collect();
        let w16: Vec<Vec<u8>> = [
            0u16, 0x8000, 0x3c00, 0xbc00, 0x3e00, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x0001,
            0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0x0080,
            0x007f, 0x7fff, 0xffff,
        ]
        .iter()
        .map(|w| w.to_le_bytes().to_vec())
        .collect();
        let ints = |es: usize| -> Vec<Vec<u8>> {
            let mut v: Vec<Vec<u8>> = [
                0i64,
                1,
                -1,
                2,
                3,
                i64::MAX,
                i64::MIN,
                1 << 53,
                (1 << 53) + 1,
            ]
            .iter()
            .map(|x| x.to_le_bytes()[..es].to_vec())
            .collect();
            let mut top = vec![0u8; es];
            top[es - 1] = 0x80;
            v.push(top);
            v.push(vec![0xff; es]);
            v
        };
        let bytes: Vec<Vec<u8>> = (0..=255u8).step_by(7).map(|b| vec![b]).collect();
        let mut k = vec![
            ("float32", f32s.clone()),
            ("float64", f64s),
            ("float16", w16.clone()),
            ("bfloat16", w16.clone()),
            ("int16", w16.clone()),
            ("uint16", w16),
            ("int32", ints(4)),
            ("uint32", ints(4)),
            ("qint32", ints(4)),
            ("int64", ints(8)),
            ("uint64", ints(8)),
            ("complex64", {
                let mut v = Vec::new();
                for x in f32s.iter().step_by(3) {
                    for y in f32s.iter().step_by(4) {
                        v.push([x.clone(), y.clone()].concat());
                    }
                }
                v
            }),
        ];
        for name in [
            "bool",
            "int8",
            "uint8",
            "qint8",
            "quint8",
            "int4",
            "uint4",
            "float8_e5m2",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e4m3b11fnuz",
            "float8_e5m2fnuz",
            "float4_e2m1fn",
        ] {
            k.push((name, bytes.clone()));
        }
        k
    }

    /// Every loop, on every dtype with numbers, gives what `add` gives element by element:
    /// NaNs on one side differ and stay out of the figures, NaNs on both sides are equal,
    /// infinities count as numbers, a difference just at the tolerance is equal; and the AVX2
    /// loop gives the portable loop's bits.
    #[test]
    fn every_loop_is_add_element_by_element() {
        let mut checked = 0;
        for (seed, (name, specials)) in kinds().into_iter().enumerate() {
            let kind = DType::from_name(name)
                .and_then(Kind::of)
                .unwrap_or_else(|| panic!("{name}: no kind"));
            let es = kind.size();
            let (a, b) = inputs(es, &specials, seed as u64);
            for tol in TOLERANCES {
                // Whole, and cut so that the last group of lanes is short, from index 3.
                for cut in [a.len(), a.len() - 5 * es] {
                    let (a, b) = (&a[..cut], &b[..cut]);
                    let want = reference(kind, a, b, 3, tol);
                    let got = Loop::of(kind).compare(a, b, 3, tol);
                    assert_eq!(got, want, "{name} {tol:?}");
                    assert_eq!(got.sum_sq.to_bits(), want.sum_sq.to_bits(), "{name}");
                    assert!(got.elements as usize == a.len() / es);
                    checked += 1;
                }
            }
        }
        assert!(checked > 100);
    }

    /// The portable and AVX2 loops agree bit for bit (each also against `add` above, where the
    /// CPU has AVX2, through `fast`).
    #[test]
    fn the_portable_loop_is_the_avx2_loop() {
        let specials: Vec<Vec<u8>> = specials_f64()
            .iter()
            .map(|x| x.to_le_bytes().to_vec())
            .collect();
        let (a, b) = inputs(8, &specials, 99);
        let kind = Kind::F64;
        for tol in TOLERANCES {
            let p = portable(F64s, &a, &b, 0, tol);
            assert_eq!(p, reference(kind, &a, &b, 0, tol));
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked).
                let v = unsafe { avx2::fast(F64s, &a, &b, 0, tol) };
                assert_eq!(v, p);
                assert_eq!(v.sum_sq.to_bits(), p.sum_sq.to_bits());
            }
        }
    }

    /// The cases the rules name, by hand: NaN against a number differs, NaN against NaN does
    /// not, inf against inf is equal, a difference of exactly `atol + rtol * |b|` is equal.
    #[test]
    fn the_rules_by_hand() {
        let a = [
            1.0f32,
            f32::NAN,
            f32::NAN,
            4.0,
            f32::INFINITY,
            0.0,
            -3.0,
            1.5,
            1.75,
        ];
        let b = [
            1.0f32,
            2.0,
            f32::NAN,
            2.0,
            f32::INFINITY,
            1.0,
            0.0,
            1.0,
            1.0,
        ];
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let v = Loop::F32.compare(&bytes(&a), &bytes(&b), 0, Tolerance::default());
        assert_eq!((v.elements, v.differing, v.first), (9, 6, Some(1)));
        assert_eq!((v.max_abs, v.max_rel), (3.0, 1.0));
        assert_eq!(v.counted, 7);
        let tol = Tolerance {
            atol: 0.25,
            rtol: 0.25,
        };
        // 1.5 against 1.0: 0.5 <= 0.25 + 0.25 * 1.0, equal; 1.75: not.
        let v = Loop::F32.compare(&bytes(&a[7..]), &bytes(&b[7..]), 7, tol);
        assert_eq!((v.differing, v.first), (1, Some(8)));
    }

    /// The float16 conversion is the renderer's on every encoding.
    #[test]
    fn float16_is_decoded_as_everywhere() {
        for h in 0..=u16::MAX {
            let (x, y) = (f16_to_f32(h), crate::render::elem::f16_to_f32(h));
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "{h:#06x}: {x} against {y}"
            );
        }
    }

    /// Writes a V2 checkpoint of one tensor.
    fn write(prefix: &std::path::Path, dtype: &str, n: u64, data: &[u8]) {
        let mut w = crate::testkit::writer::CheckpointWriter::new(prefix, 1).expect("writer");
        let d = DType::from_name(dtype).expect("dtype");
        w.add(b"t", d, &[n], data, 0).expect("add");
        w.finish().expect("finish");
    }

    fn tensor(ck: &Ckpt) -> TensorInfo {
        ck.walk()
            .find_map(|i| match i {
                crate::model::open::Item::Tensor(t) => Some(t),
                _ => None,
            })
            .expect("a tensor")
    }

    /// Whole tensors of several chunks, compared on every thread: the chunks' figures merged
    /// in order, as one thread would; a data file cut short is an error naming it.
    #[test]
    fn compare_streams_chunks_in_order_and_a_cut_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng::new(7);
        for (dtype, es) in [
            ("float32", 4usize),
            ("float16", 2),
            ("int8", 1),
            ("complex64", 8),
        ] {
            let n = (3 * CHUNK + 100) / es + 3;
            let mut va = rng.bytes(n * es);
            let mut vb = va.clone();
            for i in (0..vb.len()).step_by(13) {
                vb[i] ^= (rng.next() & 3) as u8;
            }
            va[es] = 0xff;
            let (pa, pb) = (
                dir.path().join(format!("a-{dtype}")),
                dir.path().join(format!("b-{dtype}")),
            );
            write(&pa, dtype, n as u64, &va);
            write(&pb, dtype, n as u64, &vb);
            let (a, b) = (Ckpt::open(&pa).expect("a"), Ckpt::open(&pb).expect("b"));
            let (ta, tb) = (tensor(&a), tensor(&b));
            let kind = DType::from_name(dtype).and_then(Kind::of).expect("kind");
            for tol in [TOLERANCES[0], TOLERANCES[1]] {
                let got = compare(&a, &ta, &b, &tb, tol)
                    .expect("compare")
                    .expect("numbers");
                let chunk = CHUNK / es * es;
                let mut want = ValueDiff::default();
                for (k, (x, y)) in va.chunks(chunk).zip(vb.chunks(chunk)).enumerate() {
                    want.merge(&reference(kind, x, y, (k * chunk / es) as u64, tol));
                }
                assert_eq!(got, want, "{dtype}");
                assert_eq!(got.elements, n as u64);
                assert!(got.differing > 0, "{dtype}");
            }
            // B's data file cut short after it was opened.
            let data = dir.path().join(format!("b-{dtype}.data-00000-of-00001"));
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&data)
                .expect("open");
            f.set_len((CHUNK + 10) as u64).expect("truncate");
            match compare(&a, &ta, &b, &tb, TOLERANCES[0]) {
                Err((Side::B, e)) => assert!(e.contains(&format!("b-{dtype}")), "{e}"),
                other => panic!("{dtype}: {other:?}"),
            }
        }
    }
}
