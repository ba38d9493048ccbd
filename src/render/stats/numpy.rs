//! numpy's histogram arithmetic, repeated step by step in its "bin dtype" ([`BinType`]:
//! float16, float32 or float64): `np.histogram(f, bins=16, range=(f.min(), f.max()))`'s edges
//! (`_get_outer_edges`, `_unsigned_subtract`, `linspace`) and the bin of each value (its
//! estimate truncated, corrected by one bin at an edge), in [`Plan`]; where numpy refuses (edges
//! that do not increase strictly) there is no plan. Tested against numpy itself.

use super::Scalar;
use crate::render::elem::{F32_WIDTH, F64_WIDTH};

/// The type numpy computes a histogram in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinType {
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
pub(super) mod tests {
    use super::super::tests::{f32s, fields};
    use super::super::{compute, text_len, Scalar};
    use super::*;
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

    /// A deterministic xorshift generator.
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Uniform in [0, 1).
        pub(crate) fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

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
    pub(crate) fn cases() -> Vec<(i32, Vec<u8>)> {
        let mut r = Rng(0xdead_beef_cafe_f00d);
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
        let Some(py) = crate::test_requires::python("numpy", "matches_numpy") else {
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
}
