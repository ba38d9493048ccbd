//! Tensor elements as numbers: what each dtype's element is in tfmount's `.bin` layout (row-major,
//! little-endian; int4/uint4/int2/uint2 and float4 one element per byte, value in the low bits),
//! exact conversions of the narrow float formats (float16, bfloat16, the float8 kinds,
//! float4_e2m1fn) to the `f32` they stand for, and the text of a number.
//!
//! Number text (shared by `text/` and `stats/`): integers in decimal; floats in their shortest
//! round-trip form — Rust's `Display` (no exponent, no trailing `.0`: `1`, `0.5`, `-0`) when
//! `x == 0` or `1e-4 <= |x| <` [`F64_POSITIONAL_BELOW`] (`1e16`, float64) or
//! [`F32_POSITIONAL_BELOW`] (`1e7`, float32 and the kinds that stand for float32 values: below
//! 2^24 every integer is an `f32`, so the positional form never shows digits the value does not
//! have), else Rust's `LowerExp` (`1e-7`, `1.5e30`, `1.2345679e8`), which is also shortest
//! round-trip. Non-finite values print `nan` (every NaN, whatever its sign or payload), `inf`,
//! `-inf`. Python's `float()` parses all of these back to the same `f64`; for the `f32`-valued
//! kinds, `numpy.float32(float(s))` gives back the same `f32` (checked over sampled `f32`
//! patterns in the tests: the shortest digits of an `f32` survive the detour through `f64`).
//!
//! Widths ([`Kind::text_width`]): the most characters any element of a kind can take, so that
//! `text/` can pad every element to its kind's width (a fixed-width layout whose size and offsets
//! follow from the shape). Integers: their minimum (or maximum, unsigned); bool `false`; float64
//! 24 (`-2.2250738585072014e-308`: a sign, 17 digits, the point, `e-308`); float32 15 (a sign,
//! 9 digits, the point, `e-36`: `-1.09320975e-36`; positional `-0.000` and 9 digits is as wide);
//! the narrow kinds their widest value found by trying every encoding (float16 and bfloat16 15,
//! float8 12 to 14, float4 4); complex `re+imj` twice the part's width plus one (the imaginary
//! part is written without its sign, after `+` or `-`).

use crate::parse::dtype::DType;

/// A float format narrower than `f32`, decoded exactly: 1 sign bit, `exp` exponent bits, `man`
/// mantissa bits, exponent `bias`, and which encodings mean NaN / infinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mini {
    pub(crate) exp: u32,
    pub(crate) man: u32,
    pub(crate) bias: i32,
    pub(crate) special: Special,
}

/// How a narrow float format spells its non-finite values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// IEEE 754: all-ones exponent is ±inf (zero mantissa) or NaN.
    Ieee,
    /// `fn` ("finite"): no infinities; only all-ones exponent *and* mantissa is NaN (e4m3fn).
    FiniteNanOnes,
    /// `fnuz`: no infinities, no negative zero; the "negative zero" pattern is the only NaN.
    Fnuz,
    /// No NaN and no infinity at all (float4_e2m1fn).
    None,
}

pub(crate) const F16: Mini = Mini {
    exp: 5,
    man: 10,
    bias: 15,
    special: Special::Ieee,
};
pub(crate) const F8_E5M2: Mini = Mini {
    exp: 5,
    man: 2,
    bias: 15,
    special: Special::Ieee,
};
pub(crate) const F8_E4M3FN: Mini = Mini {
    exp: 4,
    man: 3,
    bias: 7,
    special: Special::FiniteNanOnes,
};
pub(crate) const F8_E4M3FNUZ: Mini = Mini {
    exp: 4,
    man: 3,
    bias: 8,
    special: Special::Fnuz,
};
pub(crate) const F8_E4M3B11FNUZ: Mini = Mini {
    exp: 4,
    man: 3,
    bias: 11,
    special: Special::Fnuz,
};
pub(crate) const F8_E5M2FNUZ: Mini = Mini {
    exp: 5,
    man: 2,
    bias: 16,
    special: Special::Fnuz,
};
pub(crate) const F4_E2M1FN: Mini = Mini {
    exp: 2,
    man: 1,
    bias: 1,
    special: Special::None,
};

/// `2^k` for `k` in the normal `f32` range.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// The widest float32 text: a sign, 9 significant digits, the point, `e-38`.
pub(crate) const F32_WIDTH: usize = 15;
/// The widest float64 text: a sign, 17 significant digits, the point, `e-308`.
pub(crate) const F64_WIDTH: usize = 24;

impl Mini {
    /// The most characters one value of this format is written with (as the `f32` it stands
    /// for), found by trying every encoding (tested in this module).
    pub(crate) fn text_width(&self) -> usize {
        match (self.exp, self.man, self.bias) {
            (5, 10, _) => 15, // float16: -0.000100016594
            (5, 2, _) => 14,  // float8_e5m2(fnuz): -0.00010681152
            (4, 3, 7) => 12,  // float8_e4m3fn: -0.001953125
            (4, 3, 8) => 13,  // float8_e4m3fnuz: -0.0009765625
            (4, 3, _) => 14,  // float8_e4m3b11fnuz: -0.00012207031
            (2, 1, _) => 4,   // float4_e2m1fn: -0.5
            _ => F32_WIDTH,
        }
    }

    /// The exact `f32` value of the encoding `v` (a byte, or a 16-bit word for float16). The
    /// low `exp + man` bits are the magnitude; the element is negative when any bit above them
    /// is set — for 8- and 16-bit formats that is the sign bit, for float4 it is how ml_dtypes
    /// reads a byte whose high bits are not zero.
    pub(crate) fn to_f32(self, v: u32) -> f32 {
        let mag_bits = self.exp + self.man;
        let mag = v & ((1u32 << mag_bits) - 1);
        let negative = v >> mag_bits != 0;
        let e = mag >> self.man;
        let m = mag & ((1 << self.man) - 1);
        let e_max = (1 << self.exp) - 1;
        let m_max = (1 << self.man) - 1;
        let magnitude = match self.special {
            Special::Fnuz if negative && mag == 0 => return f32::NAN,
            Special::Ieee if e == e_max && m == 0 => f32::INFINITY,
            Special::Ieee if e == e_max => return f32::NAN,
            Special::FiniteNanOnes if e == e_max && m == m_max => return f32::NAN,
            // Subnormal: m * 2^(1 - bias - man). All formats here have at most 10 mantissa bits
            // and small biases, so every value is an exact f32.
            _ if e == 0 => m as f32 * pow2(1 - self.bias - self.man as i32),
            _ => ((1 << self.man) | m) as f32 * pow2(e as i32 - self.bias - self.man as i32),
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }
}

/// The exact `f32` value of IEEE half-precision bits.
#[cfg(test)]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    F16.to_f32(bits as u32)
}

/// The exact `f32` value of bfloat16 bits (the upper half of an `f32`).
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// `x` rounded to the nearest float16 (ties to even; overflow to ±inf), as an `f32`: what
/// numpy's float16 arithmetic gives for an operation whose `f32` result is `x`.
pub(crate) fn round_to_f16(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let a = x.abs();
    let r = if a < pow2(-14) {
        // Subnormal float16: multiples of 2^-24 (scaling by powers of two is exact).
        (a * pow2(24)).round_ties_even() * pow2(-24)
    } else {
        // Keep 10 of the 23 mantissa bits, rounding to nearest even; a carry moves into the
        // exponent, which is the right result.
        let b = a.to_bits();
        let r = (b + 0xfff + ((b >> 13) & 1)) & !0x1fff;
        let r = f32::from_bits(r);
        if r > 65504.0 {
            f32::INFINITY
        } else {
            r
        }
    };
    r.copysign(x)
}

/// What an element of a dtype is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// bool: one byte, 0 or 1.
    Bool,
    /// int8..int64, uint8..uint64 and the quantized qint/quint types (plain integers).
    Int {
        /// Bytes per element.
        size: u8,
        /// Whether the values are two's complement.
        signed: bool,
    },
    /// int4, uint4, int2, uint2: one byte per element, value in the low `bits`.
    SubByte {
        /// Bits of the value.
        bits: u8,
        /// Whether the value is two's complement.
        signed: bool,
    },
    /// float32.
    F32,
    /// float64.
    F64,
    /// bfloat16.
    BF16,
    /// float16, the float8 kinds and float4_e2m1fn; `size` bytes per element.
    Mini {
        /// The encoding (exponent and mantissa bits, bias, special values).
        fmt: Mini,
        /// Bytes per element.
        size: u8,
    },
    /// complex64: two float32, real then imaginary.
    Complex64,
    /// complex128: two float64, real then imaginary.
    Complex128,
    /// tfmount's string layout: per element an 8-byte LE length, then the bytes.
    String,
}

impl Kind {
    /// The element kind of `dtype`; `None` for variant, resource, invalid and unknown values.
    pub fn of(dtype: DType) -> Option<Kind> {
        use crate::parse::dtype::{Elem, F8};
        let mini = |fmt, size| Some(Kind::Mini { fmt, size });
        match dtype.elem()? {
            Elem::Int { size, signed } => Some(Kind::Int { size, signed }),
            Elem::SubByte { bits, signed } => Some(Kind::SubByte { bits, signed }),
            Elem::Bool => Some(Kind::Bool),
            Elem::F32 => Some(Kind::F32),
            Elem::F64 => Some(Kind::F64),
            Elem::BF16 => Some(Kind::BF16),
            Elem::F16 => mini(F16, 2),
            Elem::Float8(F8::E5M2) => mini(F8_E5M2, 1),
            Elem::Float8(F8::E4M3FN) => mini(F8_E4M3FN, 1),
            Elem::Float8(F8::E4M3FNUZ) => mini(F8_E4M3FNUZ, 1),
            Elem::Float8(F8::E4M3B11FNUZ) => mini(F8_E4M3B11FNUZ, 1),
            Elem::Float8(F8::E5M2FNUZ) => mini(F8_E5M2FNUZ, 1),
            Elem::Float4E2M1FN => mini(F4_E2M1FN, 1),
            Elem::Complex64 => Some(Kind::Complex64),
            Elem::Complex128 => Some(Kind::Complex128),
            Elem::String => Some(Kind::String),
            Elem::Opaque => None,
        }
    }

    /// Bytes per element; 0 for strings (variable length).
    pub(crate) fn size(&self) -> usize {
        match *self {
            Kind::Bool | Kind::SubByte { .. } => 1,
            Kind::Int { size, .. } | Kind::Mini { size, .. } => size as usize,
            Kind::F32 => 4,
            Kind::F64 => 8,
            Kind::BF16 => 2,
            Kind::Complex64 => 8,
            Kind::Complex128 => 16,
            Kind::String => 0,
        }
    }

    /// The most characters an element of this kind is written with (module doc); `None` for
    /// strings, whose elements have no bound.
    pub(crate) fn text_width(&self) -> Option<usize> {
        Some(match *self {
            Kind::Bool => 5,
            Kind::Int { size, signed } => match (size, signed) {
                (1, true) => 4,
                (1, false) => 3,
                (2, true) => 6,
                (2, false) => 5,
                (4, true) => 11,
                (4, false) => 10,
                _ => 20,
            },
            Kind::SubByte { bits, signed } => match (bits, signed) {
                (2, false) => 1,
                _ => 2,
            },
            Kind::F32 | Kind::BF16 => F32_WIDTH,
            Kind::F64 => F64_WIDTH,
            Kind::Mini { fmt, .. } => fmt.text_width(),
            Kind::Complex64 => 2 * F32_WIDTH + 1,
            Kind::Complex128 => 2 * F64_WIDTH + 1,
            Kind::String => return None,
        })
    }

    /// The value of one element; `bytes` is exactly [`size`](Self::size) long (shorter input
    /// reads as zero-extended, never panics). Not for strings.
    pub fn decode(&self, bytes: &[u8]) -> Value {
        let mut b = [0u8; 16];
        let n = bytes.len().min(16);
        b[..n].copy_from_slice(&bytes[..n]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let lo = u64_at(0);
        match *self {
            Kind::Bool => Value::Bool(b[0] != 0),
            Kind::Int { size, signed } => {
                let bits = size as u32 * 8;
                if signed {
                    let shift = 64 - bits;
                    Value::Int(((lo << shift) as i64 >> shift) as i128)
                } else if bits == 64 {
                    Value::Int(lo as i128)
                } else {
                    Value::Int((lo & ((1u64 << bits) - 1)) as i128)
                }
            }
            Kind::SubByte { bits, signed } => {
                let v = b[0] & ((1u8 << bits) - 1);
                if signed {
                    let shift = 8 - bits;
                    Value::Int(((v << shift) as i8 >> shift) as i128)
                } else {
                    Value::Int(v as i128)
                }
            }
            Kind::F32 => Value::F32(f32::from_bits(lo as u32)),
            Kind::F64 => Value::F64(f64::from_bits(lo)),
            Kind::BF16 => Value::F32(bf16_to_f32(lo as u16)),
            Kind::Mini { fmt, size } => {
                let v = if size == 2 {
                    lo as u16 as u32
                } else {
                    b[0] as u32
                };
                Value::F32(fmt.to_f32(v))
            }
            Kind::Complex64 => {
                Value::C64(f32::from_bits(lo as u32), f32::from_bits((lo >> 32) as u32))
            }
            Kind::Complex128 => Value::C128(f64::from_bits(lo), f64::from_bits(u64_at(8))),
            Kind::String => Value::Int(0),
        }
    }
}

/// One decoded element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A bool.
    Bool(bool),
    /// Every integer kind (i128 holds int64 and uint64 alike).
    Int(i128),
    /// float32, and the narrow kinds as the f32 they stand for.
    F32(f32),
    /// A float64.
    F64(f64),
    /// A complex64: real and imaginary parts.
    C64(f32, f32),
    /// A complex128: real and imaginary parts.
    C128(f64, f64),
}

/// `f32`-valued floats with `1e-4 <= |x| <` this are written positionally (module doc).
pub(crate) const F32_POSITIONAL_BELOW: f32 = 1e7;
/// `f64` floats with `1e-4 <= |x| <` this are written positionally (as Python's `repr`).
pub(crate) const F64_POSITIONAL_BELOW: f64 = 1e16;

/// Writes a float: `nan`, `inf`, `-inf`, else `Display` or `LowerExp` by magnitude (module doc).
/// Formats straight into `out`, allocating nothing else.
macro_rules! write_float {
    ($out:expr, $x:expr, $below:expr) => {{
        let x = $x;
        if x.is_nan() {
            $out.extend_from_slice(b"nan");
        } else if x.is_infinite() {
            $out.extend_from_slice(if x > 0.0 { b"inf" } else { b"-inf" });
        } else {
            let a = x.abs();
            // Writing to a Vec cannot fail.
            let _ = if a == 0.0 || (1e-4..$below).contains(&a) {
                write!($out, "{x}")
            } else {
                write!($out, "{x:e}")
            };
        }
    }};
}

/// Writes `x` (see the module doc for the form).
pub(crate) fn write_f32(out: &mut Vec<u8>, x: f32) {
    use std::io::Write;
    write_float!(out, x, F32_POSITIONAL_BELOW)
}

/// Writes `x` (see the module doc for the form).
pub(crate) fn write_f64(out: &mut Vec<u8>, x: f64) {
    use std::io::Write;
    write_float!(out, x, F64_POSITIONAL_BELOW)
}

/// Writes an integer in decimal.
pub(crate) fn write_int(out: &mut Vec<u8>, v: i128) {
    use std::io::Write;
    let _ = write!(out, "{v}");
}

/// Writes a complex number as Python's `complex()` parses it: `re+imj`, `re-imj` (the sign of a
/// negative or negative-zero imaginary part, then its magnitude), `1+nanj`.
fn write_complex<T: Copy>(
    out: &mut Vec<u8>,
    re: T,
    im: T,
    neg: impl Fn(T) -> bool,
    abs: impl Fn(T) -> T,
    w: impl Fn(&mut Vec<u8>, T),
) {
    w(out, re);
    if neg(im) {
        out.push(b'-');
        w(out, abs(im));
    } else {
        out.push(b'+');
        w(out, im);
    }
    out.push(b'j');
}

/// Writes `v` right-aligned in `width` characters (spaces before it; nothing is cut when it is
/// wider). Every character a value is written with is ASCII, so characters are bytes.
pub(crate) fn write_padded(out: &mut Vec<u8>, v: Value, width: usize) {
    let start = out.len();
    write_value(out, v);
    pad_from(out, start, width);
}

/// Right-aligns the text `out[start..]` in `width` bytes, moving it right past leading spaces.
pub(crate) fn pad_from(out: &mut Vec<u8>, start: usize, width: usize) {
    let len = out.len() - start;
    if let Some(pad) = width.checked_sub(len).filter(|&p| p > 0) {
        out.resize(start + width, b' ');
        out.copy_within(start..start + len, start + pad);
        out[start..start + pad].fill(b' ');
    }
}

/// Writes one value (bools `true`/`false`, complex `re+imj`).
pub fn write_value(out: &mut Vec<u8>, v: Value) {
    match v {
        Value::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Value::Int(i) => write_int(out, i),
        Value::F32(x) => write_f32(out, x),
        Value::F64(x) => write_f64(out, x),
        Value::C64(re, im) => write_complex(
            out,
            re,
            im,
            |x: f32| !x.is_nan() && x.is_sign_negative(),
            f32::abs,
            write_f32,
        ),
        Value::C128(re, im) => write_complex(
            out,
            re,
            im,
            |x: f64| !x.is_nan() && x.is_sign_negative(),
            f64::abs,
            write_f64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: Value) -> String {
        let mut o = Vec::new();
        write_value(&mut o, v);
        String::from_utf8(o).unwrap()
    }

    #[test]
    fn float_text_forms() {
        assert_eq!(text(Value::F32(1.0)), "1");
        assert_eq!(text(Value::F32(-0.0)), "-0");
        assert_eq!(text(Value::F32(0.1)), "0.1");
        assert_eq!(text(Value::F32(f32::NAN)), "nan");
        assert_eq!(text(Value::F32(-f32::NAN)), "nan");
        assert_eq!(text(Value::F32(f32::INFINITY)), "inf");
        assert_eq!(text(Value::F64(f64::NEG_INFINITY)), "-inf");
        assert_eq!(text(Value::F32(1e-5)), "1e-5");
        assert_eq!(text(Value::F32(0.0001)), "0.0001");
        assert_eq!(text(Value::F64(1e16)), "1e16");
        assert_eq!(text(Value::F64(9999999999999998.0)), "9999999999999998");
        assert_eq!(text(Value::F32(f32::MAX)), "3.4028235e38");
        assert_eq!(text(Value::F64(5e-324)), "5e-324");
        assert_eq!(text(Value::C64(1.5, -2.0)), "1.5-2j");
        assert_eq!(text(Value::C64(1.0, -0.0)), "1-0j");
        assert_eq!(text(Value::C128(-0.0, f64::NAN)), "-0+nanj");
        assert_eq!(text(Value::C128(1e-300, f64::NEG_INFINITY)), "1e-300-infj");
        assert_eq!(text(Value::Bool(true)), "true");
        assert_eq!(text(Value::Int(-(1i128 << 63))), "-9223372036854775808");
        assert_eq!(text(Value::Int(u64::MAX as i128)), "18446744073709551615");
    }

    #[test]
    fn sampled_f32_text_survives_f64_parse() {
        // Python's float() is correctly rounded like Rust's f64 parse, and numpy's
        // astype(float32) rounds like `as f32`: this is the Python round trip, without Python.
        let mut next = crate::testkit::rng::xorshift(0x9e37_79b9);
        let check = |bits: u32| {
            let v = f32::from_bits(bits);
            let mut o = Vec::new();
            write_f32(&mut o, v);
            let back = std::str::from_utf8(&o).unwrap().parse::<f64>().unwrap() as f32;
            if v.is_nan() {
                assert!(back.is_nan());
            } else {
                assert_eq!(
                    back.to_bits(),
                    bits,
                    "{v:e} -> {}",
                    String::from_utf8_lossy(&o)
                );
            }
        };
        for _ in 0..300_000 {
            check(next() as u32);
        }
        for bits in [
            0,
            1,
            0x007f_ffff,
            0x0080_0000,
            0x7f7f_ffff,
            0x3f80_0001,
            0x38d1_b717,
        ] {
            check(bits);
            check(bits | 0x8000_0000);
        }
    }

    /// Every 61st f32 pattern, 70 million (about a minute: run with --ignored).
    #[test]
    #[ignore]
    fn strided_f32_text_survives_f64_parse() {
        let mut o = Vec::new();
        for bits in (0..=u32::MAX).step_by(61) {
            let v = f32::from_bits(bits);
            if v.is_nan() {
                continue;
            }
            o.clear();
            write_f32(&mut o, v);
            let back = std::str::from_utf8(&o).unwrap().parse::<f64>().unwrap() as f32;
            assert_eq!(back.to_bits(), bits);
        }
    }

    #[test]
    fn narrow_floats_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(F8_E4M3FN.to_f32(0x7e), 448.0);
        assert!(F8_E4M3FN.to_f32(0x7f).is_nan());
        assert_eq!(F8_E4M3FN.to_f32(0x01), 2f32.powi(-9));
        assert_eq!(F8_E5M2.to_f32(0x7b), 57344.0);
        assert_eq!(F8_E5M2.to_f32(0x7c), f32::INFINITY);
        assert!(F8_E4M3FNUZ.to_f32(0x80).is_nan());
        assert_eq!(F8_E4M3FNUZ.to_f32(0x7f), 240.0);
        assert_eq!(F8_E5M2FNUZ.to_f32(0x7f), 57344.0);
        assert_eq!(F8_E4M3B11FNUZ.to_f32(0x7f), 30.0);
        assert_eq!(F4_E2M1FN.to_f32(0x7), 6.0);
        assert_eq!(F4_E2M1FN.to_f32(0x11), -0.5); // as ml_dtypes reads non-zero high bits
        assert_eq!(F4_E2M1FN.to_f32(0x0f), -6.0);
    }

    #[test]
    fn rounding_to_f16_matches_the_decoder() {
        // Every float16 value rounds to itself, and midpoints between neighbours round to even.
        for bits in 0..0x7c00u16 {
            let v = f16_to_f32(bits);
            assert_eq!(round_to_f16(v), v);
            assert_eq!(round_to_f16(-v), -v);
            let next = f16_to_f32(bits + 1);
            let mid = (v as f64 + next as f64) / 2.0;
            let even = if bits % 2 == 0 { v } else { next };
            assert_eq!(round_to_f16(mid as f32), even, "{bits:#x}");
        }
        assert_eq!(round_to_f16(65519.0), 65504.0);
        assert_eq!(round_to_f16(65520.0), f32::INFINITY);
        assert_eq!(round_to_f16(1e-9), 0.0);
    }

    fn width_of(v: Value) -> usize {
        let mut o = Vec::new();
        write_value(&mut o, v);
        o.len()
    }

    /// The widest text of every encoding of the narrow kinds is exactly their width.
    #[test]
    fn narrow_widths_by_trying_every_encoding() {
        let k = |d| Kind::of(DType(d)).unwrap();
        let words: Vec<[u8; 2]> = (0..=u16::MAX).map(|w| w.to_le_bytes()).collect();
        for dt in [19, 14] {
            let most = words.iter().map(|w| width_of(k(dt).decode(w))).max();
            assert_eq!(most, k(dt).text_width(), "dtype {dt}");
        }
        for dt in [24, 25, 26, 27, 28, 33, 29, 30, 31, 32, 4, 6, 10, 11, 12] {
            let most = (0..=255u8).map(|b| width_of(k(dt).decode(&[b]))).max();
            assert_eq!(most, k(dt).text_width(), "dtype {dt}");
        }
    }

    /// Integers: their extremes are exactly the width.
    #[test]
    fn integer_widths_are_their_extremes() {
        for dt in [3, 4, 5, 6, 9, 11, 12, 13, 15, 16, 17, 22, 23] {
            let k = Kind::of(DType(dt)).unwrap();
            let Kind::Int { size, signed } = k else {
                panic!("{dt}")
            };
            let bits = size as u32 * 8;
            let (lo, hi) = if signed {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            } else {
                (0, (1i128 << bits) - 1)
            };
            let most = width_of(Value::Int(lo)).max(width_of(Value::Int(hi)));
            assert_eq!(Some(most), k.text_width(), "dtype {dt}");
        }
    }

    /// float32 and float64: the width is reached, and random patterns (every exponent, random
    /// mantissas) and the edges of each binade stay within it. The argument: a shortest
    /// round-trip float32 has at most 9 significant digits, so the exponent form is at most a
    /// sign, `d.dddddddd` and `e-45` (15), and the positional form (from 1e-4, below 1e7) at
    /// most a sign, `0.000` and 9 digits (15); float64: 17 digits, `e-308` (24), positional
    /// below 1e16 at most 23. (Every float32 was tried once outside the tests: widest 15.)
    #[test]
    fn float_widths_hold() {
        // A bfloat16 value (0x83ba): 9 digits in float32's shortest form.
        let widest32 = f32::from_bits(0x83ba_0000);
        assert_eq!(text(Value::F32(widest32)), "-1.09320975e-36");
        assert_eq!(width_of(Value::F32(widest32)), F32_WIDTH);
        assert_eq!(width_of(Value::F32(-0.00012345679)), 14);
        assert_eq!(width_of(Value::F64(-2.2250738585072014e-308)), F64_WIDTH);
        assert_eq!(
            width_of(Value::C64(widest32, widest32)),
            Kind::Complex64.text_width().unwrap()
        );
        assert_eq!(
            width_of(Value::C128(
                -2.2250738585072014e-308,
                -2.2250738585072014e-308
            )),
            Kind::Complex128.text_width().unwrap()
        );
        let mut next = crate::testkit::rng::xorshift(0x2545_f491_4f6c_dd1du64);
        let mut widest = (0, 0);
        for i in 0..400_000u64 {
            let r = next();
            // Every sign and exponent in turn, random mantissas; some binade edges.
            let e32 = (i % 512) as u32;
            let m32 = match i % 5 {
                0 => 0,
                1 => 0x7f_ffff,
                _ => r as u32 & 0x7f_ffff,
            };
            let f = f32::from_bits(e32 << 23 | m32);
            let w = width_of(Value::F32(f));
            assert!(w <= F32_WIDTH, "{f:e}: {w}");
            widest.0 = widest.0.max(w);
            let e64 = i % 4096;
            let m64 = match i % 5 {
                0 => 0,
                1 => (1 << 52) - 1,
                _ => (r >> 12) & ((1 << 52) - 1),
            };
            let d = f64::from_bits(e64 << 52 | m64);
            let w = width_of(Value::F64(d));
            assert!(w <= F64_WIDTH, "{d:e}: {w}");
            widest.1 = widest.1.max(w);
        }
        assert_eq!(widest, (F32_WIDTH, F64_WIDTH));
    }

    #[test]
    fn padding_right_aligns() {
        let mut o = b"x".to_vec();
        write_padded(&mut o, Value::F32(1.5), 6);
        write_padded(&mut o, Value::Bool(false), 5);
        write_padded(&mut o, Value::Int(-12345), 3);
        assert_eq!(o, b"x   1.5false-12345");
    }

    #[test]
    fn decodes_integers() {
        let k = |d| Kind::of(DType(d)).unwrap();
        assert_eq!(k(6).decode(&[0xff]), Value::Int(-1));
        assert_eq!(k(4).decode(&[0xff]), Value::Int(255));
        assert_eq!(k(5).decode(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(k(23).decode(&[0xff; 8]), Value::Int(u64::MAX as i128));
        assert_eq!(k(9).decode(&[0xff; 8]), Value::Int(-1));
        assert_eq!(k(29).decode(&[0x0f]), Value::Int(-1));
        assert_eq!(k(29).decode(&[0xf3]), Value::Int(3));
        assert_eq!(k(30).decode(&[0x0f]), Value::Int(15));
        assert_eq!(k(31).decode(&[0x02]), Value::Int(-2));
        assert_eq!(k(32).decode(&[0x03]), Value::Int(3));
        assert_eq!(k(10).decode(&[2]), Value::Bool(true));
        assert_eq!(Kind::of(DType(21)), None);
        assert_eq!(Kind::of(DType(0)), None);
    }
}
