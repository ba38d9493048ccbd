//! NPY 1.0 headers (numpy's `.npy` format): magic, version, header length, a Python dict literal
//! padded with spaces to a multiple of 64 bytes and ended by `\n`. The data follows unchanged.

/// The header for an array of `descr` with `shape`, or `None` if it would not fit NPY 1.0.
pub(crate) fn header(descr: &str, shape: &[u64]) -> Option<Vec<u8>> {
    let dims = match shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // magic(6) + version(2) + len(2) + dict + padding + '\n'
    let unpadded = 10 + dict.len() + 1;
    let total = unpadded.div_ceil(64) * 64;
    let header_len = u16::try_from(total - 10).ok()?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_shape_forms_and_alignment() {
        let h = header("<f4", &[3, 4]).unwrap();
        assert_eq!(h.len() % 64, 0);
        assert!(h.starts_with(b"\x93NUMPY\x01\x00"));
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"));
        assert!(text.ends_with('\n'));
        assert_eq!(u16::from_le_bytes([h[8], h[9]]) as usize, h.len() - 10);
        let s = header("|b1", &[]).unwrap();
        assert!(std::str::from_utf8(&s[10..])
            .unwrap()
            .contains("'shape': ()"));
        let v = header("<i8", &[5]).unwrap();
        assert!(std::str::from_utf8(&v[10..])
            .unwrap()
            .contains("'shape': (5,)"));
        assert!(header("<f4", &vec![u64::MAX; 4000]).is_none());
    }
}
