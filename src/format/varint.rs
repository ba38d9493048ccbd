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
