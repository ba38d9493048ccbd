//! `export --cast`: float tensors converted between float32, float64, float16 and bfloat16 as
//! `tf.cast` converts them (Eigen's conversions, bit for bit): round to nearest, ties to even;
//! a NaN becomes the quiet NaN of the target (`0x7e00` / `0x7fc0` with the sign; float32 and
//! float64 keep NaNs as the hardware converts them); overflow becomes infinity; float64 goes to
//! float16 and bfloat16 through float32, as Eigen does. Little-endian bytes in and out.

use crate::parse::dtype::DType;

pub(crate) const F16: DType = DType(19);
pub(crate) const F32: DType = DType(1);
pub(crate) const F64: DType = DType(2);
pub(crate) const BF16: DType = DType(14);

/// Whether `--cast` converts from or to `d`.
pub(crate) fn castable(d: DType) -> bool {
    [F16, F32, F64, BF16].contains(&d)
}

/// Eigen's `float_to_half_rtne`.
fn f32_to_f16(ff: f32) -> u16 {
    const F32_INFTY: u32 = 255 << 23;
    const F16_MAX: u32 = (127 + 16) << 23;
    const DENORM_MAGIC: u32 = ((127 - 15) + (23 - 10) + 1) << 23;
    let mut u = ff.to_bits();
    let sign = u & 0x8000_0000;
    u ^= sign;
    let o: u16 = if u >= F16_MAX {
        if u > F32_INFTY {
            0x7e00
        } else {
            0x7c00
        }
    } else if u < (113 << 23) {
        let f = f32::from_bits(u) + f32::from_bits(DENORM_MAGIC);
        (f.to_bits().wrapping_sub(DENORM_MAGIC)) as u16
    } else {
        let mant_odd = (u >> 13) & 1;
        u = u.wrapping_add(0xc800_0fff).wrapping_add(mant_odd);
        (u >> 13) as u16
    };
    o | (sign >> 16) as u16
}

/// Eigen's `half_to_float`.
fn f16_to_f32(h: u16) -> f32 {
    const MAGIC: u32 = 113 << 23;
    const SHIFTED_EXP: u32 = 0x7c00 << 13;
    let mut o = u32::from(h & 0x7fff) << 13;
    let exp = SHIFTED_EXP & o;
    o = o.wrapping_add((127 - 15) << 23);
    if exp == SHIFTED_EXP {
        o = o.wrapping_add((128 - 16) << 23);
    } else if exp == 0 {
        o = o.wrapping_add(1 << 23);
        o = (f32::from_bits(o) - f32::from_bits(MAGIC)).to_bits();
    }
    f32::from_bits(o | (u32::from(h & 0x8000) << 16))
}

/// Eigen's `float_to_bfloat16_rtne`.
fn f32_to_bf16(ff: f32) -> u16 {
    if ff.is_nan() {
        return if ff.is_sign_negative() {
            0xffc0
        } else {
            0x7fc0
        };
    }
    let input = ff.to_bits();
    let lsb = (input >> 16) & 1;
    (input.wrapping_add(0x7fff + lsb) >> 16) as u16
}

fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// One element of `from` (its little-endian bytes) as a float32 or float64 value.
fn read(from: DType, b: &[u8]) -> f64 {
    match from {
        F16 => f64::from(f16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        BF16 => f64::from(bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

/// Converts `src` (whole elements of `from`) to `to`, appending to `out`. Both must be
/// [`castable`]; the caller checks.
pub(crate) fn convert(from: DType, to: DType, src: &[u8], out: &mut Vec<u8>) {
    let (Some(fs), Some(ts)) = (from.elem_size(), to.elem_size()) else {
        return;
    };
    out.reserve(src.len() / fs * ts);
    for e in src.chunks_exact(fs) {
        // float32 sources keep their exact value (and NaN bits) on the way to float16 and
        // bfloat16; float64 ones are rounded to float32 first, as Eigen does.
        let v32 = if from == F32 {
            f32::from_le_bytes([e[0], e[1], e[2], e[3]])
        } else {
            read(from, e) as f32
        };
        match to {
            F16 => out.extend_from_slice(&f32_to_f16(v32).to_le_bytes()),
            BF16 => out.extend_from_slice(&f32_to_bf16(v32).to_le_bytes()),
            F32 => out.extend_from_slice(&v32.to_le_bytes()),
            _ => out.extend_from_slice(&read(from, e).to_le_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(from: DType, to: DType, src: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        convert(from, to, src, &mut v);
        v
    }

    #[test]
    fn bfloat16_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bfloat16 values: even (1.0) wins; a hair more rounds up.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::NAN), 0x7fc0);
        assert_eq!(f32_to_bf16(-f32::NAN), 0xffc0);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "overflow to infinity");
    }

    #[test]
    fn float16_as_eigen_converts() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(
            f32_to_f16(65520.0),
            0x7c00,
            "halfway past the largest: infinity"
        );
        assert_eq!(f32_to_f16(f32::NAN), 0x7e00);
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001, "the smallest subnormal");
        assert_eq!(
            f32_to_f16(2f32.powi(-25)),
            0x0000,
            "half of it: ties to even, zero"
        );
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00, "a tie to even");
        for h in [
            0x0001u16, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0x8001, 0xfbff, 0x7c00,
        ] {
            assert_eq!(f32_to_f16(f16_to_f32(h)), h, "{h:#06x} round trip");
        }
    }

    #[test]
    fn whole_buffers_in_every_direction() {
        let src: Vec<u8> = [1.5f32, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bf = one(F32, BF16, &src);
        assert_eq!(bf, [0xc0, 0x3f, 0x80, 0xbe]);
        let back = one(BF16, F32, &bf);
        assert_eq!(back, src);
        let d = one(F32, F64, &src);
        assert_eq!(one(F64, F32, &d), src);
        assert_eq!(one(F64, F16, &d), one(F32, F16, &src));
        assert_eq!(one(F16, F64, &one(F32, F16, &src)), d);
    }
}
