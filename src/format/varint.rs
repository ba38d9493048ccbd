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

/// [`decode_u64`], a word at a time: a varint with 8 bytes readable is found and decoded without
/// a loop over its bytes (packed runs of int64 values in V1 checkpoints; 9- and 10-byte ones,
/// large and negative values, from the next two bytes).
#[inline]
pub fn decode_u64_fast(buf: &[u8]) -> Option<(u64, usize)> {
    let Some(w) = buf.get(..8) else {
        return decode_u64(buf);
    };
    let mut b = [0u8; 8];
    b.copy_from_slice(w);
    let word = u64::from_le_bytes(b);
    let ends = !word & 0x8080_8080_8080_8080;
    if ends == 0 {
        // 9 or 10 bytes (large and negative int64 values): the first 8 give 56 bits.
        let low = groups(word);
        return match (buf.get(8), buf.get(9)) {
            (Some(&b8), _) if b8 & 0x80 == 0 => Some((low | (b8 as u64) << 56, 9)),
            (Some(&b8), Some(&b9)) if b9 <= 1 => {
                Some((low | ((b8 & 0x7f) as u64) << 56 | (b9 as u64) << 63, 10))
            }
            _ => decode_u64(buf),
        };
    }
    let len = (ends.trailing_zeros() / 8 + 1) as usize;
    let x = if len == 8 {
        word
    } else {
        word & ((1u64 << (8 * len)) - 1)
    };
    Some((groups(x), len))
}

/// The 7-bit groups of up to 8 varint bytes, without their continuation bits: group i (bits
/// 8i..8i+6) moves to bits 7i..7i+6.
#[inline]
fn groups(x: u64) -> u64 {
    (x & 0x7f)
        | ((x >> 1) & (0x7f << 7))
        | ((x >> 2) & (0x7f << 14))
        | ((x >> 3) & (0x7f << 21))
        | ((x >> 4) & (0x7f << 28))
        | ((x >> 5) & (0x7f << 35))
        | ((x >> 6) & (0x7f << 42))
        | ((x >> 7) & (0x7f << 49))
}

/// Decodes a varint32 (at most 5 bytes, value must fit u32).
pub fn decode_u32(buf: &[u8]) -> Option<(u32, usize)> {
    let (v, n) = decode_u64(&buf[..buf.len().min(5)])?;
    u32::try_from(v).ok().map(|v| (v, n))
}

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
        // The word-at-a-time decoder agrees with the byte loop at every length, followed by
        // anything, and on truncations and malformed varints.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = if x % 3 == 0 { x } else { x >> (x % 64) };
            let mut b = Vec::new();
            encode_u64(v, &mut b);
            b.extend_from_slice(&x.to_le_bytes());
            for cut in [b.len(), 1, 3, 7, 8, 9, 10, 11] {
                let s = &b[..cut.min(b.len())];
                assert_eq!(decode_u64_fast(s), decode_u64(s), "{v:#x} cut {cut}");
            }
        }
        for bad in [
            &[0xffu8; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
        ] {
            assert_eq!(decode_u64_fast(bad), None);
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
