//! Statistics of a numeric tensor (`stats/<key>.txt`), computed in two streaming passes over its
//! bytes (tfmount's `.bin` layout, pushed in pieces of any size) in constant memory: the first
//! for counts, range, mean and (floats) the sum of squared deviations, the second for the
//! histogram, whose bins need the range.
//!
//! What is computed, and the numpy expression each figure equals (`a` the tensor as a numpy
//! array, `f = a[np.isfinite(a)]`; tested against numpy on random data):
//! - `count` = `a.size`; `finite` = `f.size`; `nan`, `+inf`, `-inf` counts; `zeros` =
//!   `(a == 0).sum()` (`-0` included).
//! - `min`, `max` = `f.min()`, `f.max()` — over finite values, like `np.nanmin` but also without
//!   infinities; exact, printed in the dtype's precision (integers exactly, int64/uint64 too).
//! - `mean`, `std` = `np.mean(f.astype(np.float64))`, `np.std(...)` (population std), computed in
//!   `f64`. Floats: in the first pass, in blocks of 512 elements at fixed positions (so the
//!   result does not depend on how the bytes are pushed): each block's sum and its squared
//!   deviations from its own mean (two loops over the block while it is in the cache), merged
//!   into the running mean and sum of squares by Chan's formula; the blocks' sums add up in a
//!   compensated sum for the mean. Integers: a compensated (exact) sum in the first pass, the
//!   squared deviations from the mean in the second. They agree with numpy's to within
//!   `1e-12 ×` the root mean square of the values (the tested tolerance; numpy's pairwise sums
//!   differ from ours in the last bits).
//! - the histogram = `np.histogram(f, bins=16, range=(f.min(), f.max()))` exactly: the same 17
//!   edges and 16 counts. numpy computes it in a "bin dtype" — float16 for float16 data, float32
//!   for float32 data, float64 for float64 and integer data — and this module repeats its
//!   arithmetic step by step in that type (`linspace` for the edges, then
//!   `(x - first) / (last - first) * 16` truncated, corrected by one bin where `x` falls on the
//!   other side of an edge; for integers `last - first` is the exact unsigned difference). That
//!   is why there are two passes: the range must be known before any value is binned. Where
//!   numpy refuses (its edges would not increase strictly: all values equal at a magnitude where
//!   `± 0.5` is lost, values a few units-in-the-last-place apart, or `max - min` overflowing the
//!   bin dtype) or there are no finite values, there is no histogram (`histogram: n/a (...)`).
//!
//! Dtypes: float16/32/64 as themselves; bfloat16, the float8 kinds and float4_e2m1fn as the
//! float32 values they stand for (numpy has no such types: `a` is their float32 array); integers
//! including the quantized types, int4/uint4/int2/uint2 (low bits, as ml_dtypes reads them);
//! bool as uint8 0/1 (`a.astype(np.uint8)`; numpy cannot histogram bools). Complex, string,
//! variant and resource tensors have no statistics ([`StatsError::Unsupported`]): complex values
//! have no order, and a magnitude would be a different tensor.
//!
//! Text ([`Stats::to_text`]): a fixed-size record, its size a function of the dtype and the
//! number of elements only ([`text_len`]), so that `stat` needs nothing computed. Each line is a
//! name left-aligned in an 11-byte column (`histogram: ` is the longest), then:
//! - `count`, `finite`, `nan`, `+inf`, `-inf`, `zeros`, `min`, `max`, `mean`, `std`: the value
//!   right-aligned in 24 bytes (float64's widest text). Floats as in `text/` (shortest round
//!   trip; min and max in the dtype's precision; `nan` for min/max/mean/std when there are no
//!   finite values).
//! - `histogram`: 16 block characters `▁▂▃▄▅▆▇█` scaled to the largest bin (a space for an empty
//!   bin, at least `▁` for a non-empty one), or `n/a (why)`, then spaces up to 48 bytes (16
//!   characters of 3 bytes).
//! - `edges`: the 17 edges, `counts`: the 16 counts, each right-aligned in a cell (edges: the
//!   bin type's widest text, 15 for float16/float32 and 24 for float64; counts: the digits of
//!   the element count) and separated by one space; `-` in every cell when there is no
//!   histogram.
//!
//! Where it is done: this module holds the public entry points ([`FirstPass`], [`SecondPass`],
//! [`compute`], [`text_len`]), the element decoding both passes share, and the text layout;
//! `kernels.rs` the loops that sum a block of floats and count a histogram's bins (compiled for
//! the baseline and for AVX2); `numpy.rs` numpy's histogram arithmetic, repeated in its bin
//! dtype (the edges, and the bin of a value).

mod kernels;
mod numpy;

use crate::parse::dtype::DType;
use crate::render::elem::{pad_from, write_f32, write_f64, write_int, Kind, Value, F64_WIDTH};

use kernels::{Acc, Sum, FLOAT_BLOCK};
pub(crate) use numpy::BinType;
use numpy::Plan;

/// Why a tensor's statistics cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    /// A dtype without numbers (strings, resources, variants); its name.
    #[error("dtype {0} has no statistics")]
    Unsupported(String),
    /// The bytes are not a whole number of elements.
    #[error("bytes end inside an element")]
    Truncated,
    /// The two passes over the tensor saw different element counts (its bytes changed).
    #[error("second pass saw {second} elements, first saw {first}")]
    Changed {
        /// Elements of the first pass.
        first: u64,
        /// Elements of the second pass.
        second: u64,
    },
}

/// A minimum or maximum, exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Int(i128),
    Float(f64),
}

/// 16 counts and their 17 edges (exact values of the bin type, held as `f64`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Histogram {
    pub(crate) counts: [u64; 16],
    pub(crate) edges: [f64; 17],
}

/// The statistics of one tensor; see the module doc.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub(crate) count: u64,
    pub(crate) finite: u64,
    pub(crate) nan: u64,
    pub(crate) pos_inf: u64,
    pub(crate) neg_inf: u64,
    pub(crate) zeros: u64,
    pub(crate) min: Option<Scalar>,
    pub(crate) max: Option<Scalar>,
    pub(crate) mean: Option<f64>,
    pub(crate) std: Option<f64>,
    pub(crate) histogram: Option<Histogram>,
    /// Why there is no histogram, when there is none.
    pub(crate) no_histogram: Option<String>,
    /// `f32`-valued dtypes print floats as `f32`.
    single: bool,
    bin: BinType,
}

/// Element decoding shared by both passes.
#[derive(Debug, Clone)]
struct Reader {
    kind: Kind,
    size: usize,
    partial: [u8; 16],
    plen: usize,
    /// Float elements of the block being filled.
    fbuf: Vec<f64>,
    flen: usize,
}

/// A number of the tensor: an integer (bools as 0/1) or a float (exact in `f64`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Num {
    I(i128),
    F(f64),
}

impl Reader {
    fn new(dtype: DType) -> Result<(Reader, BinType, bool), StatsError> {
        let unsupported = || StatsError::Unsupported(dtype.display_name());
        let kind = Kind::of(dtype).ok_or_else(unsupported)?;
        let (bin, single) = match kind {
            Kind::Complex64 | Kind::Complex128 | Kind::String => return Err(unsupported()),
            Kind::F64 => (BinType::F64, false),
            Kind::Mini { fmt, .. } if fmt == crate::render::elem::F16 => (BinType::F16, true),
            Kind::F32 | Kind::BF16 | Kind::Mini { .. } => (BinType::F32, true),
            Kind::Bool | Kind::Int { .. } | Kind::SubByte { .. } => (BinType::F64, false),
        };
        let r = Reader {
            kind,
            size: kind.size(),
            partial: [0; 16],
            plen: 0,
            fbuf: vec![0.0; FLOAT_BLOCK],
            flen: 0,
        };
        Ok((r, bin, single))
    }

    fn num(&self, el: &[u8]) -> Num {
        match self.kind.decode(el) {
            Value::Bool(b) => Num::I(b as i128),
            Value::Int(i) => Num::I(i),
            Value::F32(x) => Num::F(x as f64),
            Value::F64(x) => Num::F(x),
            // Not constructed: complex kinds are refused in `new`.
            Value::C64(re, _) => Num::F(re as f64),
            Value::C128(re, _) => Num::F(re),
        }
    }

    /// Whether the elements are floats (decoded in blocks by [`Reader::push_floats`]).
    fn is_float(&self) -> bool {
        matches!(
            self.kind,
            Kind::F32 | Kind::F64 | Kind::BF16 | Kind::Mini { .. }
        )
    }

    /// Decodes float elements into `out` (as many as fit; `el` holds whole elements).
    fn decode_floats(&self, el: &[u8], out: &mut [f64]) -> usize {
        let n = (el.len() / self.size).min(out.len());
        match self.kind {
            Kind::F32 => {
                for (o, e) in out.iter_mut().zip(el.chunks_exact(4)) {
                    *o = f32::from_le_bytes([e[0], e[1], e[2], e[3]]) as f64;
                }
            }
            Kind::F64 => {
                for (o, e) in out.iter_mut().zip(el.chunks_exact(8)) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(e);
                    *o = f64::from_le_bytes(w);
                }
            }
            Kind::BF16 => {
                for (o, e) in out.iter_mut().zip(el.chunks_exact(2)) {
                    *o = f32::from_bits((u16::from_le_bytes([e[0], e[1]]) as u32) << 16) as f64;
                }
            }
            _ => {
                for (o, e) in out.iter_mut().zip(el.chunks_exact(self.size)) {
                    *o = match self.num(e) {
                        Num::F(x) => x,
                        Num::I(i) => i as f64,
                    };
                }
            }
        }
        n
    }

    /// [`Reader::push`] for float elements: `f` gets them decoded, a block of
    /// [`FLOAT_BLOCK`] at a time, blocks starting at fixed element positions (whatever the
    /// pieces pushed); the last, shorter block by [`Reader::flush_floats`].
    fn push_floats(&mut self, bytes: &[u8], mut f: impl FnMut(&[f64])) {
        self.whole_elements(bytes, |r, el| r.put_floats(el, &mut f));
    }

    /// The whole elements of the next piece of bytes: `f` gets the element completed from
    /// the bytes carried over from the last piece (alone), then the whole elements that follow;
    /// a trailing partial element is carried over to the next piece.
    fn whole_elements(&mut self, bytes: &[u8], mut f: impl FnMut(&mut Reader, &[u8])) {
        let mut rest = bytes;
        if self.plen > 0 {
            let take = (self.size - self.plen).min(rest.len());
            self.partial[self.plen..self.plen + take].copy_from_slice(&rest[..take]);
            self.plen += take;
            rest = &rest[take..];
            if self.plen < self.size {
                return;
            }
            self.plen = 0;
            let el = self.partial;
            f(self, &el[..self.size]);
        }
        let whole = rest.len() / self.size * self.size;
        f(self, &rest[..whole]);
        let tail = &rest[whole..];
        self.partial[..tail.len()].copy_from_slice(tail);
        self.plen = tail.len();
    }

    /// Decodes whole elements into the block buffer, handing each full block to `f`.
    fn put_floats(&mut self, mut el: &[u8], f: &mut impl FnMut(&[f64])) {
        let mut buf = std::mem::take(&mut self.fbuf);
        while !el.is_empty() {
            let n = self.decode_floats(el, &mut buf[self.flen..]);
            self.flen += n;
            el = el.get(n * self.size..).unwrap_or(&[]);
            if self.flen == FLOAT_BLOCK {
                f(&buf[..]);
                self.flen = 0;
            }
            if n == 0 {
                break;
            }
        }
        self.fbuf = buf;
    }

    /// Hands the last, partial block of float elements to `f`.
    fn flush_floats(&mut self, mut f: impl FnMut(&[f64])) {
        if self.flen > 0 {
            f(&self.fbuf[..self.flen]);
            self.flen = 0;
        }
    }

    fn push(&mut self, bytes: &[u8], mut f: impl FnMut(Num)) {
        self.whole_elements(bytes, |r, el| {
            for e in el.chunks_exact(r.size) {
                f(r.num(e));
            }
        });
    }
}

/// The first pass: counts, range and sum. Push every byte of the tensor, then
/// [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub(crate) struct FirstPass {
    reader: Reader,
    bin: BinType,
    single: bool,
    acc: Acc,
}

impl FirstPass {
    /// Errors for dtypes without statistics (see the module doc).
    pub(crate) fn new(dtype: DType) -> Result<FirstPass, StatsError> {
        let (reader, bin, single) = Reader::new(dtype)?;
        Ok(FirstPass {
            reader,
            bin,
            single,
            acc: Acc::new(),
        })
    }

    /// The next piece of the tensor's bytes.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let acc = &mut self.acc;
        if self.reader.is_float() {
            self.reader.push_floats(bytes, |xs| acc.add_block(xs));
        } else {
            self.reader.push(bytes, |n| acc.add(n));
        }
    }

    /// Ends the first pass; an error if the bytes ended inside an element.
    pub(crate) fn finish(mut self) -> Result<SecondPass, StatsError> {
        if self.reader.plen > 0 {
            return Err(StatsError::Truncated);
        }
        let acc = &mut self.acc;
        self.reader.flush_floats(|xs| acc.add_block(xs));
        let a = &self.acc;
        let is_int = matches!(
            self.reader.kind,
            Kind::Bool | Kind::Int { .. } | Kind::SubByte { .. }
        );
        let has = a.finite > 0;
        let mean = has.then(|| {
            if is_int {
                a.isum as f64 / a.finite as f64
            } else {
                a.fsum.value() / a.finite as f64
            }
        });
        let (min, max) = match (has, is_int) {
            (false, _) => (None, None),
            (true, true) => (Some(Scalar::Int(a.imin)), Some(Scalar::Int(a.imax))),
            (true, false) => (Some(Scalar::Float(a.fmin)), Some(Scalar::Float(a.fmax))),
        };
        let plan = match (min, max) {
            (Some(lo), Some(hi)) => Plan::new(self.bin, lo, hi),
            _ => Err("no finite values".to_string()),
        };
        let stats = Stats {
            count: a.count,
            finite: a.finite,
            nan: a.nan,
            pos_inf: a.pos_inf,
            neg_inf: a.neg_inf,
            zeros: a.zeros,
            min,
            max,
            mean,
            // Floats: from the first pass (blocks merged); integers: the second pass.
            std: (has && !is_int).then(|| (a.fm2.max(0.0) / a.finite as f64).sqrt()),
            histogram: None,
            no_histogram: None,
            single: self.single,
            bin: self.bin,
        };
        Ok(SecondPass {
            reader: self.reader,
            stats,
            plan,
            seen: 0,
            m2: Sum::default(),
            counts: [0; 16],
        })
    }
}

/// The second pass: deviations from the mean, and the histogram. Push the same bytes again,
/// then [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub(crate) struct SecondPass {
    reader: Reader,
    stats: Stats,
    plan: Result<Plan, String>,
    seen: u64,
    m2: Sum,
    counts: [u64; 16],
}

impl SecondPass {
    /// The next piece of the tensor's bytes (the same bytes as the first pass).
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let mean = self.stats.mean.unwrap_or(0.0);
        let plan = self.plan.as_ref().ok();
        let (seen, m2, counts) = (&mut self.seen, &mut self.m2, &mut self.counts);
        if self.reader.kind == Kind::F32 {
            // The histogram only (the deviations were summed in the first pass), binned
            // straight from the bytes.
            self.reader.whole_elements(bytes, |_, el| {
                *seen += (el.len() / 4) as u64;
                if let Some(p) = plan {
                    p.count_f32_le(el, counts);
                }
            });
            return;
        }
        if self.reader.is_float() {
            // The histogram only: the deviations were summed in the first pass.
            self.reader
                .push_floats(bytes, |xs| bin_floats(plan, seen, counts, xs));
            return;
        }
        self.reader.push(bytes, |n| {
            *seen += 1;
            let x = match n {
                Num::I(i) => i as f64,
                Num::F(x) if x.is_finite() => x,
                Num::F(_) => return,
            };
            let d = x - mean;
            m2.add(d * d);
            if let Some(p) = plan {
                if let Some(c) = counts.get_mut(p.bin_of(x)) {
                    *c += 1;
                }
            }
        });
    }

    /// The statistics; an error if the bytes ended inside an element or held a different
    /// number of elements than in the first pass.
    pub(crate) fn finish(mut self) -> Result<Stats, StatsError> {
        if self.reader.plen > 0 {
            return Err(StatsError::Truncated);
        }
        let plan = self.plan.as_ref().ok();
        let (seen, counts) = (&mut self.seen, &mut self.counts);
        self.reader
            .flush_floats(|xs| bin_floats(plan, seen, counts, xs));
        if self.seen != self.stats.count {
            return Err(StatsError::Changed {
                first: self.stats.count,
                second: self.seen,
            });
        }
        let mut s = self.stats;
        if s.finite > 0 && s.std.is_none() {
            s.std = Some((self.m2.value() / s.finite as f64).sqrt());
        }
        match self.plan {
            Ok(p) => {
                s.histogram = Some(Histogram {
                    counts: self.counts,
                    edges: p.edges,
                })
            }
            Err(why) => s.no_histogram = Some(why),
        }
        Ok(s)
    }
}

/// Counts the finite values of a block of floats into the histogram.
fn bin_floats(plan: Option<&Plan>, seen: &mut u64, counts: &mut [u64; 16], xs: &[f64]) {
    *seen += xs.len() as u64;
    if let Some(p) = plan {
        p.count(xs, counts);
    }
}

/// Both passes over bytes held in memory.
pub fn compute(dtype: DType, bytes: &[u8]) -> Result<Stats, StatsError> {
    let mut p = FirstPass::new(dtype)?;
    p.push(bytes);
    let mut q = p.finish()?;
    q.push(bytes);
    q.finish()
}

const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Bytes of the name column (`histogram: `).
const NAME_COL: usize = 11;
/// Bytes of the value of a figure line (float64's widest text; every figure fits).
const VALUE_COL: usize = F64_WIDTH;
/// Bytes of the histogram field: 16 block characters of 3 bytes, or `n/a (why)`.
const BARS_COL: usize = 48;
/// The figure lines, in order.
const FIGURES: [&str; 10] = [
    "count", "finite", "nan", "+inf", "-inf", "zeros", "min", "max", "mean", "std",
];

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// The record's size for edge cells of `edge` bytes and count cells of `count` bytes.
fn record_len(edge: usize, count: usize) -> usize {
    FIGURES.len() * (NAME_COL + VALUE_COL + 1)
        + (NAME_COL + BARS_COL + 1)
        + (NAME_COL + 17 * (edge + 1))
        + (NAME_COL + 16 * (count + 1))
}

/// The size of the `stats/` text of a tensor of `dtype` with `elements` elements (see the module
/// doc): nothing else changes it. An error for dtypes without statistics.
pub fn text_len(dtype: DType, elements: u64) -> Result<u64, StatsError> {
    let (_, bin, _) = Reader::new(dtype)?;
    Ok(record_len(bin.text_width(), digits(elements)) as u64)
}

/// Appends `name:` left-aligned in the name column.
fn name(o: &mut Vec<u8>, name: &str) {
    let start = o.len();
    o.extend_from_slice(name.as_bytes());
    o.push(b':');
    o.resize(start + NAME_COL.max(name.len() + 2), b' ');
}

impl Stats {
    fn write_float(&self, out: &mut Vec<u8>, x: f64) {
        if self.single {
            write_f32(out, x as f32)
        } else {
            write_f64(out, x)
        }
    }

    fn write_scalar(&self, out: &mut Vec<u8>, s: Option<Scalar>) {
        match s {
            Some(Scalar::Int(i)) => write_int(out, i),
            Some(Scalar::Float(x)) => self.write_float(out, x),
            None => out.extend_from_slice(b"nan"),
        }
    }

    /// The 16 block characters of the histogram.
    pub(crate) fn bars(counts: &[u64; 16]) -> String {
        let top = counts.iter().copied().max().unwrap_or(0) as u128;
        counts
            .iter()
            .map(|&c| {
                if c == 0 || top == 0 {
                    ' '
                } else {
                    let level = (c as u128 * 8).div_ceil(top).clamp(1, 8);
                    BLOCKS[level as usize - 1]
                }
            })
            .collect()
    }

    /// `stats/<key>.txt` (see the module doc): [`text_len`] bytes for this tensor's dtype and
    /// element count.
    pub fn to_text(&self) -> Vec<u8> {
        use std::io::Write;
        let edge_w = self.bin.text_width();
        let count_w = digits(self.count);
        let mut o = Vec::with_capacity(record_len(edge_w, count_w));
        for (i, fig) in FIGURES.iter().enumerate() {
            name(&mut o, fig);
            let start = o.len();
            match i {
                0..=5 => {
                    let c = [
                        self.count,
                        self.finite,
                        self.nan,
                        self.pos_inf,
                        self.neg_inf,
                        self.zeros,
                    ];
                    let _ = write!(o, "{}", c[i]);
                }
                6 => self.write_scalar(&mut o, self.min),
                7 => self.write_scalar(&mut o, self.max),
                8 => write_f64(&mut o, self.mean.unwrap_or(f64::NAN)),
                _ => write_f64(&mut o, self.std.unwrap_or(f64::NAN)),
            }
            pad_from(&mut o, start, VALUE_COL);
            o.push(b'\n');
        }
        name(&mut o, "histogram");
        let start = o.len();
        match &self.histogram {
            Some(h) => o.extend_from_slice(Stats::bars(&h.counts).as_bytes()),
            None => {
                let why = self.no_histogram.as_deref().unwrap_or("none");
                let text = format!("n/a ({why})");
                // Cut (at a character) to the field; every reason given here fits.
                let mut cut = text.len().min(BARS_COL);
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                o.extend_from_slice(&text.as_bytes()[..cut]);
            }
        }
        o.resize(start + BARS_COL, b' ');
        o.push(b'\n');
        let h = self.histogram.as_ref();
        name(&mut o, "edges");
        for i in 0..17 {
            let start = o.len();
            match h.and_then(|h| h.edges.get(i)) {
                Some(&e) => match self.bin {
                    BinType::F64 => write_f64(&mut o, e),
                    BinType::F32 | BinType::F16 => write_f32(&mut o, e as f32),
                },
                None => o.push(b'-'),
            }
            pad_from(&mut o, start, edge_w);
            o.push(if i == 16 { b'\n' } else { b' ' });
        }
        name(&mut o, "counts");
        for i in 0..16 {
            let start = o.len();
            match h.and_then(|h| h.counts.get(i)) {
                Some(c) => {
                    let _ = write!(o, "{c}");
                }
                None => o.push(b'-'),
            }
            pad_from(&mut o, start, count_w);
            o.push(if i == 15 { b'\n' } else { b' ' });
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn small_float32_by_hand() {
        // Values 0..=16 plus NaN, +inf, -inf, -0: range [-0, 16] (min is the first zero seen),
        // edges k (exact), every integer k < 16 in bin k, 16 in the last bin with 15.
        let mut v: Vec<f32> = (0..=16).map(|i| i as f32).collect();
        v.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0]);
        let s = compute(DType(1), &f32s(&v)).unwrap();
        assert_eq!(s.count, 21);
        assert_eq!(s.finite, 18);
        assert_eq!((s.nan, s.pos_inf, s.neg_inf, s.zeros), (1, 1, 1, 2));
        assert_eq!(s.min, Some(Scalar::Float(0.0)));
        assert_eq!(s.max, Some(Scalar::Float(16.0)));
        // mean = 136 / 18; std by hand: sum of squares 1496, E[x^2] = 1496/18.
        let mean = 136.0 / 18.0;
        assert!((s.mean.unwrap() - mean).abs() < 1e-15);
        let var = 1496.0 / 18.0 - mean * mean;
        assert!((s.std.unwrap() - var.sqrt()).abs() < 1e-13);
        let h = s.histogram.as_ref().unwrap();
        let mut want = [1u64; 16];
        want[0] = 2; // 0 and -0
        want[15] = 2; // 15 and 16
        assert_eq!(h.counts, want);
        let edges: Vec<f64> = (0..=16).map(|i| i as f64).collect();
        assert_eq!(h.edges.to_vec(), edges);
        let text = String::from_utf8(s.to_text()).unwrap();
        let v = |x: &str| format!("{x:>24}");
        let cells = |w: usize, xs: &[String]| {
            xs.iter()
                .map(|x| format!("{x:>w$}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let edges: Vec<String> = (0..=16).map(|i| i.to_string()).collect();
        let counts: Vec<String> = want.iter().map(|c| c.to_string()).collect();
        let want_text = format!(
            "count:     {}\nfinite:    {}\nnan:       {}\n+inf:      {}\n-inf:      {}\n\
             zeros:     {}\nmin:       {}\nmax:       {}\nmean:      {}\nstd:       {}\n\
             histogram: █▄▄▄▄▄▄▄▄▄▄▄▄▄▄█\n\
             edges:     {}\ncounts:    {}\n",
            v("21"),
            v("18"),
            v("1"),
            v("1"),
            v("1"),
            v("2"),
            v("0"),
            v("16"),
            v(&s.mean.unwrap().to_string()),
            v(&s.std.unwrap().to_string()),
            cells(15, &edges),
            cells(2, &counts),
        );
        assert_eq!(text, want_text);
        assert_eq!(text.len() as u64, text_len(DType(1), 21).unwrap());
    }

    /// `name: value` of every line of a stats text, the value without its padding.
    pub(super) fn fields(text: &str) -> std::collections::BTreeMap<String, String> {
        text.lines()
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.to_string(), v.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn integers_by_hand() {
        // int8 [-128, 127, 0, 0]: min/max exact, denominator 255, edges -128 + k * 255/16.
        let s = compute(DType(6), &[0x80, 0x7f, 0, 0]).unwrap();
        assert_eq!(s.min, Some(Scalar::Int(-128)));
        assert_eq!(s.max, Some(Scalar::Int(127)));
        assert_eq!(s.zeros, 2);
        assert_eq!(s.mean, Some(-0.25));
        let h = s.histogram.unwrap();
        assert_eq!(h.edges[1], -128.0 + 255.0 / 16.0);
        // 0 is at (128/255)*16 = 8.03: bin 8.
        assert_eq!(h.counts, [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1]);
        // A single value: range v ± 0.5, all in the middle bin (numpy: index 8).
        let s = compute(DType(9), &7i64.to_le_bytes()).unwrap();
        let h = s.histogram.unwrap();
        assert_eq!(h.edges[0], 6.5);
        assert_eq!(h.edges[16], 7.5);
        assert_eq!(h.counts[8], 1);
        assert_eq!(s.std, Some(0.0));
        // uint64 extremes: exact min/max.
        let mut b = u64::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(&0u64.to_le_bytes());
        let s = compute(DType(23), &b).unwrap();
        assert_eq!(s.max, Some(Scalar::Int(u64::MAX as i128)));
        let t = String::from_utf8(s.to_text()).unwrap();
        assert!(t.contains("\nmax:           18446744073709551615\n"), "{t}");
        // bool as 0/1.
        let s = compute(DType(10), &[1, 0, 1, 1]).unwrap();
        assert_eq!(s.mean, Some(0.75));
        assert_eq!(s.histogram.unwrap().counts[15], 3);
    }

    #[test]
    fn no_finite_values() {
        let s = compute(DType(1), &f32s(&[f32::NAN, f32::INFINITY])).unwrap();
        assert_eq!(s.finite, 0);
        assert_eq!(s.histogram, None);
        let t = String::from_utf8(s.to_text()).unwrap();
        let f = fields(&t);
        for (k, v) in [
            ("count", "2"),
            ("finite", "0"),
            ("nan", "1"),
            ("+inf", "1"),
            ("-inf", "0"),
            ("zeros", "0"),
            ("min", "nan"),
            ("max", "nan"),
            ("mean", "nan"),
            ("std", "nan"),
            ("histogram", "n/a (no finite values)"),
            ("edges", &["-"; 17].join(&" ".repeat(15))),
            ("counts", &["-"; 16].join(" ")),
        ] {
            assert_eq!(f[k], v, "{k}");
        }
        assert_eq!(t.len() as u64, text_len(DType(1), 2).unwrap());
        assert!(t.contains(&format!(
            "\nhistogram: n/a (no finite values){}\n",
            " ".repeat(26)
        )));
        let s = compute(DType(3), &[]).unwrap();
        assert_eq!((s.count, s.min, s.mean), (0, None, None));
    }

    #[test]
    fn chunking_does_not_matter_and_errors() {
        let v: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let b = f32s(&v);
        let whole = compute(DType(1), &b).unwrap();
        for step in [1, 3, 5, 7, 64] {
            let mut p = FirstPass::new(DType(1)).unwrap();
            b.chunks(step).for_each(|c| p.push(c));
            let mut q = p.finish().unwrap();
            b.chunks(step + 2).for_each(|c| q.push(c));
            assert_eq!(q.finish().unwrap(), whole);
        }
        assert_eq!(compute(DType(1), &b[..7]), Err(StatsError::Truncated));
        let mut p = FirstPass::new(DType(1)).unwrap();
        p.push(&b);
        let mut q = p.finish().unwrap();
        q.push(&b[..8]);
        assert!(matches!(q.finish(), Err(StatsError::Changed { .. })));
        for dt in [7, 8, 18, 20, 21, 0, 99] {
            assert!(matches!(
                FirstPass::new(DType(dt)),
                Err(StatsError::Unsupported(_))
            ));
        }
    }

    use crate::testkit::rng::Rng;

    /// Element bytes of `v` (a value exact or rounded in the dtype) for the float dtypes tested.
    fn float_bytes(dtype: i32, v: f64) -> Vec<u8> {
        match dtype {
            1 => (v as f32).to_le_bytes().to_vec(),
            2 => v.to_le_bytes().to_vec(),
            // float16 / bfloat16: the nearest value by search over the patterns (test-only).
            19 => {
                // The nearest float16, then its bits from the f32 holding it exactly.
                let r = crate::render::elem::round_to_f16(v as f32);
                let sign = if r.is_sign_negative() { 0x8000u16 } else { 0 };
                let a = r.abs();
                let bits = if a.is_nan() {
                    0x7e00
                } else if a.is_infinite() {
                    0x7c00
                } else if a < 2f32.powi(-14) {
                    (a * 2f32.powi(24)) as u16
                } else {
                    let b = a.to_bits();
                    ((((b >> 23) + 15 - 127) << 10) | ((b >> 13) & 0x3ff)) as u16
                };
                assert_eq!(
                    crate::render::elem::f16_to_f32(bits | sign).to_bits(),
                    r.to_bits()
                );
                (bits | sign).to_le_bytes().to_vec()
            }
            14 => (((v as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
            _ => unreachable!(),
        }
    }

    /// Test tensors: (dtype, bytes) for every supported kind and several value patterns.
    fn cases() -> Vec<(i32, Vec<u8>)> {
        let mut r = Rng::new(0xdead_beef_cafe_f00d);
        let n = 3000;
        let mut out = Vec::new();
        for dt in [1, 2, 19, 14] {
            let size = if dt == 2 {
                8
            } else if dt == 1 {
                4
            } else {
                2
            };
            // Raw bit patterns: every kind of value, NaN and infinities included.
            out.push((dt, (0..n * size).map(|_| r.next() as u8).collect()));
            // Ordinary values with NaN, ±inf, zeros and -0 sprinkled in.
            let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];
            let mut b = Vec::new();
            for i in 0..n {
                let v = if i % 37 == 0 {
                    special[(i / 37) % special.len()]
                } else {
                    (r.unit() * 2.0 - 1.0) * (r.unit() * 6.0).exp()
                };
                b.extend(float_bytes(dt, v));
            }
            out.push((dt, b));
            // A grid: many values exactly on bin edges.
            let b = (0..n)
                .flat_map(|_| float_bytes(dt, (r.next() % 129) as f64 / 8.0 - 8.0))
                .collect();
            out.push((dt, b));
            // Positive values only, a range not starting at zero.
            let b = (0..n)
                .flat_map(|_| float_bytes(dt, 100.0 + r.unit() * 3.0))
                .collect();
            out.push((dt, b));
            // One value repeated; one value at 2048 (float16: numpy refuses); two neighbours.
            out.push((dt, (0..50).flat_map(|_| float_bytes(dt, 3.0)).collect()));
            out.push((dt, (0..5).flat_map(|_| float_bytes(dt, 2048.0)).collect()));
            let mut b = float_bytes(dt, 1.0);
            let mut next = b.clone();
            next[0] = next[0].wrapping_add(1);
            b.extend(next);
            out.push((dt, b));
            // All NaN; empty.
            out.push((dt, (0..4).flat_map(|_| float_bytes(dt, f64::NAN)).collect()));
            out.push((dt, Vec::new()));
        }
        // Integers (size, dtype): full range, a small range, one value, extremes only.
        for (dt, size) in [
            (6, 1),
            (5, 2),
            (3, 4),
            (9, 8),
            (4, 1),
            (17, 2),
            (22, 4),
            (23, 8),
            (10, 1),
            (29, 1),
            (30, 1),
        ] {
            out.push((dt, (0..n * size).map(|_| r.next() as u8).collect()));
            let b = (0..n)
                .flat_map(|_| {
                    let v = r.next() % 16 + 3;
                    v.to_le_bytes()[..size].to_vec()
                })
                .collect();
            out.push((dt, b));
            out.push((
                dt,
                (0..7)
                    .flat_map(|_| 5u64.to_le_bytes()[..size].to_vec())
                    .collect(),
            ));
            let mut lo = vec![0u8; size];
            let mut hi = vec![0xffu8; size];
            if matches!(dt, 6 | 5 | 3 | 9) {
                lo[size - 1] = 0x80;
                hi[size - 1] = 0x7f;
            }
            out.push((dt, [lo.clone(), hi, lo, vec![0; size]].concat()));
            out.push((dt, Vec::new()));
        }
        out
    }

    const NUMPY_STATS: &str = r#"
import sys, json, warnings
import numpy as np
warnings.simplefilter("ignore")
names = {1: "<f4", 2: "<f8", 19: "<f2", 6: "i1", 5: "<i2", 3: "<i4", 9: "<i8",
         4: "u1", 17: "<u2", 22: "<u4", 23: "<u8"}
def load(code, raw):
    if code == 14:  # bfloat16: its float32 values
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    if code == 10:  # bool as uint8 0/1
        return (np.frombuffer(raw, np.uint8) != 0).astype(np.uint8)
    if code == 29:  # int4: low 4 bits, signed
        return ((np.frombuffer(raw, np.uint8) & 15) ^ 8).astype(np.int8) - 8
    if code == 30:
        return np.frombuffer(raw, np.uint8) & 15
    return np.frombuffer(raw, names[code])
out = []
for path, code in json.load(open(sys.argv[1])):
    a = load(code, open(path, "rb").read())
    isf = a.dtype.kind == "f"
    f = a[np.isfinite(a)] if isf else a
    num = (lambda x: repr(float(x))) if isf else (lambda x: int(x))
    res = {"count": int(a.size), "finite": int(f.size),
           "nan": int(np.isnan(a).sum()) if isf else 0,
           "pinf": int((a == np.inf).sum()) if isf else 0,
           "ninf": int((a == -np.inf).sum()) if isf else 0,
           "zeros": int((a == 0).sum()), "hist": None}
    if f.size:
        g = f.astype(np.float64)
        res.update(min=num(f.min()), max=num(f.max()), mean=repr(float(np.mean(g))),
                   std=repr(float(np.std(g))), rms=repr(float(np.sqrt(np.mean(g * g)))))
        try:
            n, e = np.histogram(f, bins=16, range=(f.min(), f.max()))
            res["hist"] = {"counts": [int(c) for c in n], "edges": [repr(float(x)) for x in e],
                           "dtype": str(e.dtype)}
        except ValueError:
            pass
    out.append(res)
print(json.dumps(out))
"#;

    /// Every figure against numpy.
    #[test]
    fn matches_numpy() {
        let Some(py) = crate::testkit::requires::python("numpy", "matches_numpy") else {
            return;
        };
        let cases = cases();
        let dir = tempfile::tempdir().unwrap();
        let mut manifest = Vec::new();
        for (i, (dt, bytes)) in cases.iter().enumerate() {
            let p = dir.path().join(format!("{i}.bin"));
            std::fs::write(&p, bytes).unwrap();
            manifest.push(serde_json::json!([p, dt]));
        }
        let m = dir.path().join("cases.json");
        std::fs::write(&m, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let out = std::process::Command::new(&py)
            .arg("-c")
            .arg(NUMPY_STATS)
            .arg(&m)
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "the numpy check failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let f = |v: &serde_json::Value| v.as_str().unwrap().parse::<f64>().unwrap();
        let int = |v: &serde_json::Value| {
            v.as_i64()
                .map(|x| x as i128)
                .or(v.as_u64().map(|x| x as i128))
                .unwrap()
        };
        let (mut histograms, mut refused) = (0, 0);
        for (i, ((dt, bytes), w)) in cases.iter().zip(&want).enumerate() {
            let s = compute(DType(*dt), bytes).unwrap();
            let ctx = format!("case {i} dtype {dt}");
            assert_eq!(s.count, w["count"].as_u64().unwrap(), "{ctx}");
            assert_eq!(s.finite, w["finite"].as_u64().unwrap(), "{ctx}");
            assert_eq!(s.nan, w["nan"].as_u64().unwrap(), "{ctx}");
            assert_eq!(s.pos_inf, w["pinf"].as_u64().unwrap(), "{ctx}");
            assert_eq!(s.neg_inf, w["ninf"].as_u64().unwrap(), "{ctx}");
            assert_eq!(s.zeros, w["zeros"].as_u64().unwrap(), "{ctx}");
            if s.finite == 0 {
                assert!(s.min.is_none() && s.mean.is_none() && s.histogram.is_none());
                continue;
            }
            for (ours, theirs) in [(s.min, &w["min"]), (s.max, &w["max"])] {
                match ours.unwrap() {
                    Scalar::Int(v) => assert_eq!(v, int(theirs), "{ctx}"),
                    Scalar::Float(v) => assert_eq!(v, f(theirs), "{ctx}"),
                }
            }
            let rms = f(&w["rms"]);
            if rms.is_finite() {
                let tol = 1e-12 * rms;
                let (m, sd) = (s.mean.unwrap(), s.std.unwrap());
                assert!(
                    (m - f(&w["mean"])).abs() <= tol,
                    "{ctx}: mean {m} vs {}",
                    w["mean"]
                );
                assert!(
                    (sd - f(&w["std"])).abs() <= tol,
                    "{ctx}: std {sd} vs {}",
                    w["std"]
                );
            }
            match (&s.histogram, w["hist"].is_null()) {
                (None, true) => refused += 1,
                (Some(h), false) => {
                    histograms += 1;
                    let wc: Vec<u64> = w["hist"]["counts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_u64().unwrap())
                        .collect();
                    assert_eq!(h.counts.to_vec(), wc, "{ctx}");
                    let we: Vec<f64> = w["hist"]["edges"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(f)
                        .collect();
                    assert_eq!(h.edges.to_vec(), we, "{ctx}");
                    let bin = match s.bin {
                        BinType::F16 => "float16",
                        BinType::F32 => "float32",
                        BinType::F64 => "float64",
                    };
                    assert_eq!(w["hist"]["dtype"], bin, "{ctx}");
                }
                (h, _) => panic!("{ctx}: ours {h:?}, numpy {}", w["hist"]),
            }
            // The text says the same: every figure parses back to the value.
            let text = String::from_utf8(s.to_text()).unwrap();
            assert_eq!(
                text.len() as u64,
                text_len(DType(*dt), s.count).unwrap(),
                "{ctx}: size"
            );
            let all = fields(&text);
            let field = |name: &str| all[name].clone();
            let back = |x: String| x.parse::<f64>().unwrap();
            match s.min.unwrap() {
                Scalar::Int(v) => assert_eq!(field("min").parse::<i128>().unwrap(), v),
                Scalar::Float(v) if s.single => {
                    assert_eq!(back(field("min")) as f32, v as f32, "{ctx}")
                }
                Scalar::Float(v) => assert_eq!(back(field("min")), v, "{ctx}"),
            }
            assert_eq!(back(field("mean")).to_bits(), s.mean.unwrap().to_bits());
            if let Some(h) = &s.histogram {
                let edges: Vec<f64> = field("edges")
                    .split_whitespace()
                    .map(|e| match s.bin {
                        BinType::F64 => back(e.into()),
                        _ => back(e.into()) as f32 as f64,
                    })
                    .collect();
                assert_eq!(edges, h.edges.to_vec(), "{ctx}");
            }
        }
        // The cases exercise both outcomes.
        assert!(histograms > 40 && refused > 5, "{histograms} {refused}");
    }

    /// Every test tensor's record has the size [`text_len`] gives before anything is computed,
    /// whatever its values (with or without a histogram).
    #[test]
    fn record_size_depends_on_dtype_and_count_only() {
        let mut with_histogram = 0;
        for (dt, bytes) in cases() {
            let s = compute(DType(dt), &bytes).unwrap();
            with_histogram += s.histogram.is_some() as u32;
            let t = s.to_text();
            assert_eq!(
                t.len() as u64,
                text_len(DType(dt), s.count).unwrap(),
                "{dt}"
            );
            assert_eq!(t.iter().filter(|&&b| b == b'\n').count(), 13);
        }
        assert!(with_histogram > 40);
        for n in [0, 9, 10, 99, 100, u64::MAX] {
            assert_eq!(
                text_len(DType(1), n).unwrap() - text_len(DType(1), 0).unwrap(),
                16 * (digits(n) as u64 - 1)
            );
        }
        assert_eq!(digits(u64::MAX), 20);
        assert!(text_len(DType(7), 3).is_err());
        assert!(text_len(DType(8), 3).is_err());
    }

    #[test]
    fn bars_scale_to_the_largest_bin() {
        let mut c = [0u64; 16];
        c[0] = 8;
        c[1] = 1;
        c[2] = 4;
        c[3] = 7;
        c[15] = 1000;
        assert_eq!(Stats::bars(&c), format!("▁▁▁▁{}█", " ".repeat(11)));
        let c = [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 8];
        assert_eq!(Stats::bars(&c), format!("▁▂▃▄▅▆▇█{}█", " ".repeat(7)));
    }
}
