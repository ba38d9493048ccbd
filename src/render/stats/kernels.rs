//! The loops over a tensor's values that the statistics spend their time in: a block of floats
//! summed (counts, range, sum, and the block's squared deviations merged into the running
//! ones: [`Acc`]), a compensated sum ([`Sum`]), and the histogram's bins counted
//! ([`Plan::count`], [`Plan::count_f32`]: float32 by eight lanes without a branch). Each is
//! written so that it vectorizes, and compiled twice, for the build's baseline and for AVX2
//! (see [`avx2`]); numpy's arithmetic they apply is in [`super::numpy`].

use super::numpy::{BinType, Plan};
use super::Num;

/// Neumaier's compensated sum.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sum {
    s: f64,
    c: f64,
}

impl Sum {
    #[inline]
    pub(super) fn add(&mut self, x: f64) {
        let t = self.s + x;
        if self.s.abs() >= x.abs() {
            self.c += (self.s - t) + x;
        } else {
            self.c += (x - t) + self.s;
        }
        self.s = t;
    }

    #[inline]
    pub(super) fn value(&self) -> f64 {
        if self.s.is_finite() {
            self.s + self.c
        } else {
            self.s
        }
    }
}

/// Whether the CPU has AVX2. The arithmetic kernels ([`Acc::add_block`], [`Plan::count_f32`])
/// are compiled twice, for the build's baseline (SSE2 on x86-64) and for AVX2, and the AVX2 copy
/// runs where it can: the same code, so the same results (each operation is the IEEE one, vector
/// or not, in the same order; Rust never contracts `a * b + c` into a fused multiply-add).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Float32 values binned at a time by [`Plan::count_f32`].
const F32_BLOCK: usize = 4096;

/// Float elements decoded and summed at a time (a block's values stay in the L1 cache for
/// its second loop).
pub(super) const FLOAT_BLOCK: usize = 512;

/// What the first pass gathers.
#[derive(Debug, Clone)]
pub(super) struct Acc {
    pub(super) count: u64,
    pub(super) nan: u64,
    pub(super) pos_inf: u64,
    pub(super) neg_inf: u64,
    pub(super) zeros: u64,
    pub(super) fmin: f64,
    pub(super) fmax: f64,
    pub(super) imin: i128,
    pub(super) imax: i128,
    pub(super) finite: u64,
    pub(super) fsum: Sum,
    pub(super) isum: i128,
    /// Float elements: the mean and sum of squared deviations of the finite values so far,
    /// merged block by block (Chan et al.: each block's own two passes, in the cache).
    pub(super) fmean: f64,
    pub(super) fm2: f64,
}

impl Acc {
    /// Nothing gathered yet.
    pub(super) fn new() -> Acc {
        Acc {
            count: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            zeros: 0,
            fmin: f64::INFINITY,
            fmax: f64::NEG_INFINITY,
            imin: i128::MAX,
            imax: i128::MIN,
            finite: 0,
            fsum: Sum::default(),
            isum: 0,
            fmean: 0.0,
            fm2: 0.0,
        }
    }

    /// A block of float elements: counts, range, sum, and the block's squared deviations from
    /// its own mean, merged into the running ones. Compiled for AVX2 too, used where the CPU
    /// has it (see [`avx2`]).
    pub(super) fn add_block(&mut self, xs: &[f64]) {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { self.add_block_avx2(xs) };
            return;
        }
        self.add_block_any(xs)
    }

    /// [`Acc::add_block`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn add_block_avx2(&mut self, xs: &[f64]) {
        self.add_block_any(xs)
    }

    #[inline(always)]
    fn add_block_any(&mut self, xs: &[f64]) {
        // Eight lanes, branch-free, so that the loops vectorize; the lanes are summed in a
        // fixed order (the result depends on the values only, not on how they were pushed).
        // Lane counters of 32 bits: a block has at most FLOAT_BLOCK elements.
        const L: usize = 8;
        let (mut zeros, mut n) = ([0u32; L], [0u32; L]);
        let (mut lo, mut hi, mut sum) = ([f64::INFINITY; L], [f64::NEG_INFINITY; L], [0f64; L]);
        let lanes = xs.chunks_exact(L);
        // The last, partial row of lanes padded with NaN, which changes no lane.
        let mut last = [f64::NAN; L];
        last[..lanes.remainder().len()].copy_from_slice(lanes.remainder());
        for c in lanes.chain(std::iter::once(&last[..])) {
            for j in 0..L {
                let x = c[j];
                let fin = x.abs() < f64::INFINITY;
                n[j] += fin as u32;
                sum[j] += if fin { x } else { 0.0 };
                zeros[j] += (x == 0.0) as u32;
                let (l, h) = (lo[j], hi[j]);
                lo[j] = if fin & (x < l) { x } else { l };
                hi[j] = if fin & (x > h) { x } else { h };
            }
        }
        let n: u64 = n.iter().map(|&c| c as u64).sum();
        self.count += xs.len() as u64;
        self.zeros += zeros.iter().map(|&c| c as u64).sum::<u64>();
        if n < xs.len() as u64 {
            // Values that are not finite: which ones.
            for &x in xs {
                self.nan += x.is_nan() as u64;
                self.pos_inf += (x == f64::INFINITY) as u64;
                self.neg_inf += (x == f64::NEG_INFINITY) as u64;
            }
        }
        if n == 0 {
            return;
        }
        self.fmin = lo.iter().fold(self.fmin, |a, &b| a.min(b));
        self.fmax = hi.iter().fold(self.fmax, |a, &b| a.max(b));
        let sum: f64 = sum.iter().sum();
        let mean = sum / n as f64;
        let mut m2 = [0f64; L];
        let lanes = xs.chunks_exact(L);
        let rest = lanes.remainder();
        for c in lanes {
            for (j, &x) in c.iter().enumerate() {
                let d = if x.is_finite() { x - mean } else { 0.0 };
                m2[j] += d * d;
            }
        }
        for (j, &x) in rest.iter().enumerate() {
            let d = if x.is_finite() { x - mean } else { 0.0 };
            m2[j] += d * d;
        }
        let m2: f64 = m2.iter().sum();
        let (na, nb) = (self.finite as f64, n as f64);
        let total = na + nb;
        let delta = mean - self.fmean;
        self.fmean += delta * nb / total;
        self.fm2 += m2 + delta * delta * (na * nb / total);
        self.finite += n;
        self.fsum.add(sum);
    }

    #[inline]
    pub(super) fn add(&mut self, n: Num) {
        self.count += 1;
        match n {
            Num::I(i) => {
                self.finite += 1;
                self.zeros += (i == 0) as u64;
                self.imin = self.imin.min(i);
                self.imax = self.imax.max(i);
                // |i| < 2^64 and fewer than 2^61 elements: no overflow; saturate regardless.
                self.isum = self.isum.saturating_add(i);
            }
            Num::F(x) => {
                if x.is_nan() {
                    self.nan += 1;
                } else if x == f64::INFINITY {
                    self.pos_inf += 1;
                } else if x == f64::NEG_INFINITY {
                    self.neg_inf += 1;
                } else {
                    self.finite += 1;
                    self.zeros += (x == 0.0) as u64;
                    if x < self.fmin {
                        self.fmin = x;
                    }
                    if x > self.fmax {
                        self.fmax = x;
                    }
                    self.fsum.add(x);
                }
            }
        }
    }
}

impl Plan {
    /// Counts the finite values of `xs` into `counts`: [`Plan::bin_of`] each; where the bin
    /// type is float32, in `f32` by [`Plan::count_f32`] (the same results: an `f32` operation
    /// is the `f64` one rounded), else with four sets of counters so that equal bins in a row
    /// do not wait on each other.
    pub(super) fn count(&self, xs: &[f64], counts: &mut [u64; 16]) {
        if self.bin == BinType::F32 {
            let mut v = [0f32; F32_BLOCK];
            for block in xs.chunks(F32_BLOCK) {
                for (d, &x) in v.iter_mut().zip(block) {
                    *d = x as f32;
                }
                self.count_f32(&v[..block.len()], counts);
            }
            return;
        }
        let mut c = [[0u64; 16]; 4];
        for (k, &x) in xs.iter().enumerate() {
            if x.is_finite() {
                c[k & 3][self.bin_of(x)] += 1;
            }
        }
        for (i, n) in counts.iter_mut().enumerate() {
            *n += c[0][i] + c[1][i] + c[2][i] + c[3][i];
        }
    }

    /// Counts the finite values of `xs` (float32 values, the bin type float32) into `counts`,
    /// the same counts as [`Plan::bin_of_f32`] of each (see [`Plan::count_f32_lanes`]).
    fn count_f32(&self, xs: &[f32], counts: &mut [u64; 16]) {
        for block in xs.chunks(F32_BLOCK) {
            #[cfg(target_arch = "x86_64")]
            let done = if avx2() {
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { self.count_f32_avx2(block, counts) }
            } else {
                self.count_f32_lanes(block, counts)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let done = self.count_f32_lanes(block, counts);
            if !done {
                for &x in block.iter().filter(|x| x.is_finite()) {
                    counts[self.bin_of_f32(x)] += 1;
                }
            }
        }
    }

    /// [`Plan::count_f32`] of whole little-endian float32 elements.
    pub(super) fn count_f32_le(&self, el: &[u8], counts: &mut [u64; 16]) {
        let mut v = [0f32; F32_BLOCK];
        for block in el.chunks(F32_BLOCK * 4) {
            let n = block.len() / 4;
            for (d, e) in v.iter_mut().zip(block.chunks_exact(4)) {
                *d = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            }
            self.count_f32(&v[..n], counts);
        }
    }

    /// [`Plan::count_f32_lanes`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn count_f32_avx2(&self, xs: &[f32], counts: &mut [u64; 16]) -> bool {
        self.count_f32_lanes(xs, counts)
    }

    /// Counts a block of float32 values (at most [`F32_BLOCK`]) without a branch or an indexed
    /// store per value, so that the loop vectorizes: a value's bin is `t`, the number of inner
    /// edges `edges[1..16]` it reaches (`x >= edge`), and the histogram is kept as those
    /// cumulative counts (how many values reach each edge). That is the bin
    /// [`Plan::bin_of_f32`] gives whenever numpy's estimate `i0` (before its one-bin
    /// corrections) is within one bin of `t`, which is checked for every value: returns false,
    /// with `counts` untouched, if any value of the block is not so (the caller then bins the
    /// block value by value).
    #[inline(always)]
    fn count_f32_lanes(&self, xs: &[f32], counts: &mut [u64; 16]) -> bool {
        const W: usize = 8;
        let (first, denom) = (self.first as f32, self.denom as f32);
        let mut e = [0f32; 16];
        for (d, &s) in e.iter_mut().zip(&self.edges) {
            *d = s as f32;
        }
        // reach[0]: finite values; reach[k]: values >= edges[k].
        let mut reach = [[0u32; W]; 16];
        let mut bad = [0u32; W];
        let mut lanes = xs.chunks_exact(W);
        for c in &mut lanes {
            let mut x = [0f32; W];
            let mut t = [0i32; W];
            for j in 0..W {
                let fin = c[j].abs() < f32::INFINITY;
                x[j] = if fin { c[j] } else { f32::NAN };
                reach[0][j] += fin as u32;
            }
            for k in 1..16 {
                for j in 0..W {
                    let m = (x[j] >= e[k]) as u32;
                    reach[k][j] += m;
                    t[j] += m as i32;
                }
            }
            for j in 0..W {
                // i0 = fc truncated, fc the estimate clamped to [0, 15] (NaN: 0, as in
                // `bin_of_f32`); |i0 - t| <= 1 is t - 1 <= fc < t + 2, compared as floats
                // (exact: small integers) so that no conversion per value is needed.
                let f = ((x[j] - first) / denom) * 16.0;
                let fc = if f >= 0.0 { f.min(15.0) } else { 0.0 };
                let t = t[j] as f32;
                bad[j] |= !(fc >= t - 1.0 && fc < t + 2.0) as u32;
            }
        }
        if bad.iter().any(|&b| b != 0) {
            return false;
        }
        let mut total = [0u64; 17];
        for (k, r) in reach.iter().enumerate() {
            total[k] = r.iter().map(|&n| n as u64).sum();
        }
        for &x in lanes.remainder() {
            if x.is_finite() {
                let t = self.bin_of_f32(x);
                for n in &mut total[..=t] {
                    *n += 1;
                }
            }
        }
        for (i, c) in counts.iter_mut().enumerate() {
            *c += total[i] - total[i + 1];
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::Scalar;
    use super::*;
    use crate::testkit::rng::Rng;

    /// The float32 histogram by lanes ([`Plan::count_f32`], and its baseline build
    /// [`Plan::count_f32_lanes`] where it gave an answer) counts every value where
    /// [`Plan::bin_of_f32`] (numpy's arithmetic, value by value) puts it: on values at, just
    /// below and just above every edge (a few units in the last place), random ones, and values
    /// that are not finite, for ranges narrow and wide, small and large.
    #[test]
    fn float32_histogram_by_lanes_is_numpys() {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let ranges: [(f32, f32); 7] = [
            (-1.0, 0.9999999),
            (0.0, 16.0),
            (-3.0e38, 3.0e38),
            (1.0, 1.0000153),
            (-7.5e-39, 1.0e-38),
            (123456.79, 123459.0),
            (-0.5, -0.5),
        ];
        for (lo, hi) in ranges {
            let Ok(plan) = Plan::new(
                BinType::F32,
                Scalar::Float(lo as f64),
                Scalar::Float(hi as f64),
            ) else {
                continue;
            };
            let mut xs: Vec<f32> = Vec::new();
            for &e in &plan.edges {
                let b = (e as f32).to_bits() as i64;
                for d in -3i64..=3 {
                    let x = if e == 0.0 {
                        f32::from_bits(d.unsigned_abs() as u32)
                    } else {
                        f32::from_bits((b + d) as u32)
                    };
                    if x >= plan.edges[0] as f32 && x <= plan.edges[16] as f32 {
                        xs.push(x);
                    }
                }
            }
            for _ in 0..3000 {
                let u = rng.unit() as f32;
                xs.push(
                    (plan.edges[0] as f32 + u * (plan.edges[16] as f32 - plan.edges[0] as f32))
                        .clamp(plan.edges[0] as f32, plan.edges[16] as f32),
                );
            }
            xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            let mut want = [0u64; 16];
            for &x in xs.iter().filter(|x| x.is_finite()) {
                want[plan.bin_of_f32(x)] += 1;
            }
            let mut got = [0u64; 16];
            plan.count_f32(&xs, &mut got);
            assert_eq!(got, want, "range {lo} .. {hi}");
            let mut lanes = [0u64; 16];
            for block in xs.chunks(F32_BLOCK) {
                if !plan.count_f32_lanes(block, &mut lanes) {
                    for &x in block.iter().filter(|x| x.is_finite()) {
                        lanes[plan.bin_of_f32(x)] += 1;
                    }
                }
            }
            assert_eq!(lanes, want, "range {lo} .. {hi}, baseline build");
        }
    }
}
