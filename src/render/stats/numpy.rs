//! numpy's histogram arithmetic, repeated step by step in its "bin dtype" ([`BinType`]:
//! float16, float32 or float64): `np.histogram(f, bins=16, range=(f.min(), f.max()))`'s edges
//! (`_get_outer_edges`, `_unsigned_subtract`, `linspace`) and the bin of each value (its
//! estimate truncated, corrected by one bin at an edge), in [`Plan`]; where numpy refuses (edges
//! that do not increase strictly) there is no plan. Tested against numpy itself (`matches_numpy`,
//! beside the entry points in `mod.rs`, checks every figure of `compute`).

use super::Scalar;
use crate::render::elem::{F32_WIDTH, F64_WIDTH};

/// The type numpy computes a histogram in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinType {
    F16,
    F32,
    F64,
}

impl BinType {
    /// Rounds an `f64` result of an operation on values of this type to the type: the result
    /// numpy's arithmetic in that type gives (rounding an `f64` result to `f32`, or to float16,
    /// is exact double rounding for +, -, *, / of such operands).
    #[inline]
    fn round(self, x: f64) -> f64 {
        match self {
            BinType::F16 => crate::render::elem::round_to_f16(x as f32) as f64,
            BinType::F32 => x as f32 as f64,
            BinType::F64 => x,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BinType::F16 => "float16",
            BinType::F32 => "float32",
            BinType::F64 => "float64",
        }
    }

    /// The widest text of an edge (float16 edges are written as the `f32` they are).
    pub(super) fn text_width(self) -> usize {
        match self {
            BinType::F16 | BinType::F32 => F32_WIDTH,
            BinType::F64 => F64_WIDTH,
        }
    }
}

/// numpy's uniform-bin histogram, set up from the range: edges, first edge and denominator in
/// the bin type.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) bin: BinType,
    pub(super) first: f64,
    pub(super) denom: f64,
    pub(super) edges: [f64; 17],
}

impl Plan {
    pub(super) fn new(bin: BinType, lo: Scalar, hi: Scalar) -> Result<Plan, String> {
        let r = |x| bin.round(x);
        // numpy's _get_outer_edges: an empty range grows by 0.5 each way, in the range's type
        // (integers become float64).
        let (first, last, denom) = match (lo, hi) {
            (Scalar::Int(a), Scalar::Int(b)) if a == b => {
                let (f, l) = (a as f64 - 0.5, b as f64 + 0.5);
                (f, l, l - f)
            }
            // _unsigned_subtract: the exact difference as an unsigned integer, then float64.
            (Scalar::Int(a), Scalar::Int(b)) => (a as f64, b as f64, (b - a) as u128 as f64),
            (Scalar::Float(a), Scalar::Float(b)) => {
                let (f, l) = if a == b {
                    (r(a - 0.5), r(b + 0.5))
                } else {
                    (a, b)
                };
                (f, l, r(l - f))
            }
            _ => return Err("mixed range".into()),
        };
        // np.linspace(first, last, 17) in the bin type.
        let delta = r(last - first);
        let step = r(delta / 16.0);
        let mut edges = [0f64; 17];
        for (k, e) in edges.iter_mut().enumerate() {
            let y = k as f64;
            let y = if step == 0.0 {
                r(r(y / 16.0) * delta)
            } else {
                r(y * step)
            };
            *e = r(y + first);
        }
        edges[16] = last;
        if edges.windows(2).any(|w| w[0] >= w[1]) || edges.iter().any(|e| e.is_nan()) {
            return Err(format!("16 bins do not fit the range in {}", bin.name()));
        }
        Ok(Plan {
            bin,
            first,
            denom,
            edges,
        })
    }

    /// [`Plan::bin_of`] where the bin type is float32, computed in `f32`.
    #[inline]
    pub(super) fn bin_of_f32(&self, x: f32) -> usize {
        let f = ((x - self.first as f32) / self.denom as f32) * 16.0;
        let mut i = if f.is_nan() {
            0
        } else {
            f.clamp(0.0, 15.0) as usize
        };
        if i > 0 && (x as f64) < self.edges[i] {
            i -= 1;
        }
        if i != 15 && x as f64 >= self.edges[i + 1] {
            i += 1;
        }
        i
    }

    /// The bin of a finite value `x` (already exact in the bin type; for integers, `x as f64`).
    #[inline]
    pub(super) fn bin_of(&self, x: f64) -> usize {
        let r = |v| self.bin.round(v);
        let f = r(r(r(x - self.first) / self.denom) * 16.0);
        // astype(intp) truncates; values are in [first, last], so f is in [0, 16].
        let mut i = if f.is_nan() {
            0
        } else {
            f.clamp(0.0, 16.0) as usize
        };
        if i == 16 {
            i = 15;
        }
        if x < self.edges[i] && i > 0 {
            i -= 1;
        }
        if x >= self.edges[i + 1] && i != 15 {
            i += 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::f32s;
    use super::super::{compute, Scalar};
    use crate::parse::dtype::DType;

    #[test]
    fn narrow_ranges_have_no_histogram() {
        // float16 2048: 2048 ± 0.5 rounds back to 2048, numpy refuses.
        let s = compute(DType(19), &0x6800u16.to_le_bytes()).unwrap();
        assert_eq!(s.min, Some(Scalar::Float(2048.0)));
        assert!(s.histogram.is_none());
        assert!(s.no_histogram.unwrap().contains("float16"));
        // float32 1 and the next float: 16 bins do not fit.
        let s = compute(DType(1), &f32s(&[1.0, f32::from_bits(0x3f80_0001)])).unwrap();
        assert!(s.histogram.is_none());
        // float32 extremes: max - min overflows float32.
        let s = compute(DType(1), &f32s(&[f32::MIN, f32::MAX])).unwrap();
        assert!(s.histogram.is_none());
    }
}
