//! Keys of partitioned-tensor slices (`EncodeTensorNameSlice`, OrderedCode; tf-format.md §5.2).

/// One dimension of a slice: `length == -1` means the full extent (start 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The first index of the slice in this dimension.
    pub start: i64,
    /// How many indices it spans (`-1`: all of them).
    pub length: i64,
}

/// The full extent of a dimension.
pub const FULL: Extent = Extent {
    start: 0,
    length: -1,
};

fn write_num_increasing(v: u64, out: &mut Vec<u8>) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    out.push((8 - skip) as u8);
    out.extend_from_slice(&bytes[skip..]);
}

fn write_string(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            0x00 => out.extend_from_slice(&[0x00, 0xff]),
            0xff => out.extend_from_slice(&[0xff, 0x00]),
            b => out.push(b),
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

fn write_signed_num_increasing(v: i64, out: &mut Vec<u8>) {
    const HEADERS: [(u8, u8); 11] = [
        (0, 0),
        (0, 0),
        (0xc0, 0),
        (0xe0, 0),
        (0xf0, 0),
        (0xf8, 0),
        (0xfc, 0),
        (0xfe, 0),
        (0xff, 0),
        (0xff, 0x80),
        (0xff, 0xc0),
    ];
    let x: u64 = if v < 0 { !(v as u64) } else { v as u64 };
    if x < 64 {
        out.push(0x80 ^ (v as u8));
        return;
    }
    let bits = 64 - x.leading_zeros() as usize;
    let len = 1 + bits / 7;
    let mut buf = [0u8; 10];
    let sign = if v < 0 { 0xff } else { 0x00 };
    buf[0] = sign;
    buf[1] = sign;
    buf[2..].copy_from_slice(&v.to_be_bytes());
    let tail = &mut buf[10 - len..];
    tail[0] ^= HEADERS[len].0;
    tail[1] ^= HEADERS[len].1;
    out.extend_from_slice(tail);
}

/// The bundle key of slice `extents` of tensor `name`.
pub fn encode(name: &[u8], extents: &[Extent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 4 + extents.len() * 4);
    write_num_increasing(0, &mut out);
    write_string(name, &mut out);
    write_num_increasing(extents.len() as u64, &mut out);
    for e in extents {
        // Full dims encode start 0 and length -1, whatever the proto said.
        let (s, l) = if e.length < 0 {
            (0, -1)
        } else {
            (e.start, e.length)
        };
        write_signed_num_increasing(s, &mut out);
        write_signed_num_increasing(l, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(v: i64) -> Vec<u8> {
        let mut o = Vec::new();
        write_signed_num_increasing(v, &mut o);
        o
    }

    #[test]
    fn signed_examples_from_the_reference() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x80]),
            (1, &[0x81]),
            (63, &[0xbf]),
            (-1, &[0x7f]),
            (-64, &[0x40]),
            (64, &[0xc0, 0x40]),
            (100, &[0xc0, 0x64]),
            (-65, &[0x3f, 0xbf]),
            (-100, &[0x3f, 0x9c]),
            (8191, &[0xdf, 0xff]),
            (8192, &[0xe0, 0x20, 0x00]),
            (1 << 20, &[0xf0, 0x10, 0x00, 0x00]),
            (-(1 << 20), &[0x10, 0x00, 0x00]),
            (1 << 62, &[0xff, 0xc0, 0x40, 0, 0, 0, 0, 0, 0, 0]),
            (i64::MIN, &[0x00, 0x3f, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            (
                i64::MAX,
                &[0xff, 0xc0, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ];
        for (v, want) in cases {
            assert_eq!(signed(*v), *want, "value {v}");
        }
    }

    #[test]
    fn worked_keys_from_the_reference() {
        let k = encode(
            b"w",
            &[
                Extent {
                    start: 0,
                    length: 2,
                },
                FULL,
            ],
        );
        assert_eq!(
            k,
            [0x00, 0x77, 0x00, 0x01, 0x01, 0x02, 0x80, 0x82, 0x80, 0x7f]
        );
        let k = encode(
            b"layer/kernel",
            &[
                FULL,
                Extent {
                    start: 300,
                    length: 100,
                },
            ],
        );
        let mut want = vec![0x00];
        want.extend_from_slice(b"layer/kernel");
        want.extend_from_slice(&[0x00, 0x01, 0x01, 0x02, 0x80, 0x7f, 0xc1, 0x2c, 0xc0, 0x64]);
        assert_eq!(k, want);
        let mut num = Vec::new();
        write_num_increasing(300, &mut num);
        assert_eq!(num, [0x02, 0x01, 0x2c]);
    }
}
