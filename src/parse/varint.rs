//! LEB128 varints (tf-format.md §0).

/// Decodes a varint64 at the start of `buf`; returns the value and the bytes used.
/// `None` on truncation or on more than 10 bytes / overflow.
pub fn decode_u64(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        let part = (b & 0x7f) as u64;
        if i == 9 && b > 1 {
            return None;
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// [`decode_u64`] of a varint starting `b`, which holds 16 readable bytes (any varint fits):
/// the inner loop of packed runs, with no bounds check per byte.
#[inline(always)]
pub(crate) fn decode_u64_16(b: &[u8; 16]) -> Option<(u64, usize)> {
    let word = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let ends = !word & 0x8080_8080_8080_8080;
    if ends != 0 {
        let len = ends.trailing_zeros() / 8 + 1;
        return Some((groups(word & (u64::MAX >> (64 - 8 * len))), len as usize));
    }
    let low = groups(word);
    let (b8, b9) = (b[8], b[9]);
    if b8 & 0x80 == 0 {
        Some((low | (b8 as u64) << 56, 9))
    } else if b9 <= 1 {
        Some((low | ((b8 & 0x7f) as u64) << 56 | (b9 as u64) << 63, 10))
    } else {
        None
    }
}

/// The 7-bit groups of up to 8 varint bytes, without their continuation bits: group i (bits
/// 8i..8i+6) moves to bits 7i..7i+6 (pairs of groups joined, then pairs of pairs, ...).
#[inline(always)]
pub(crate) fn groups(x: u64) -> u64 {
    let x = x & 0x7f7f_7f7f_7f7f_7f7f;
    let x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
    let x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
    ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff)
}

/// Decodes a varint32 (at most 5 bytes, value must fit u32).
pub(crate) fn decode_u32(buf: &[u8]) -> Option<(u32, usize)> {
    let (v, n) = decode_u64(&buf[..buf.len().min(5)])?;
    u32::try_from(v).ok().map(|v| (v, n))
}

/// Appends `v` as a varint (7 bits a byte, least significant first).
pub fn encode_u64(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_limits() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            encode_u64(v, &mut b);
            assert_eq!(decode_u64(&b), Some((v, b.len())));
        }
        assert_eq!(decode_u64(&[0x80, 0x80]), None);
        // The 16-byte decoder agrees with the byte loop at every length, followed by anything,
        // and on malformed varints.
        let mut next = crate::testkit::rng::xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let x = next();
            let v = if x % 3 == 0 { x } else { x >> (x % 64) };
            let mut b = Vec::new();
            encode_u64(v, &mut b);
            b.extend_from_slice(&x.to_le_bytes());
            for cut in [b.len(), 1, 3, 7, 8, 9, 10, 11] {
                let s = &b[..cut.min(b.len())];
                let mut w = [0u8; 16];
                w[..s.len().min(16)].copy_from_slice(&s[..s.len().min(16)]);
                if s.len() >= 10 || decode_u64(s).is_some() {
                    assert_eq!(decode_u64_16(&w), decode_u64(s), "{v:#x} cut {cut}, 16");
                }
            }
        }
        for bad in [
            &[0xffu8; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
        ] {
            let mut w = [0u8; 16];
            w[..bad.len()].copy_from_slice(bad);
            assert_eq!(decode_u64_16(&w), None);
        }
        assert_eq!(decode_u64(&[0xff; 11]), None);
        assert_eq!(
            decode_u64(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            None
        );
        assert_eq!(decode_u32(&[0xff, 0xff, 0xff, 0xff, 0x1f]), None);
        assert_eq!(
            decode_u32(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
            Some((u32::MAX, 5))
        );
    }
}
