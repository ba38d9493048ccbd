//! NPY headers (numpy's `.npy` format): magic, version, header length, a Python dict literal
//! padded with spaces to a multiple of 64 bytes and ended by `\n`. The data follows unchanged.
//! [`header`] writes NPY 1.0 headers (the `.npy` files of a mount); [`parse`] reads versions 1
//! to 3 (`export --set KEY=FILE.npy`): the dict's `descr` (a plain little-endian or
//! byte-order-free type), `fortran_order` and `shape`, nothing else, from at most
//! [`MAX_HEADER`] bytes.

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

/// The largest header [`parse`] reads (numpy writes a few hundred bytes; it allows 10,000 in
/// its readers since 1.24, more only when told).
pub(crate) const MAX_HEADER: usize = 1 << 16;

/// What an NPY header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Npy {
    /// The type code without its byte order (`f4`, `i8`, `b1`, ...).
    pub(crate) code: String,
    pub(crate) shape: Vec<u64>,
    /// Where the data starts in the file.
    pub(crate) data_offset: u64,
}

/// Where the dict of the NPY file starting with `prefix` (its first 12 bytes or more) lies:
/// `(start, length)`; an error in words for what is not an NPY file numpy reads.
pub(crate) fn dict_span(prefix: &[u8]) -> Result<(usize, usize), String> {
    if prefix.len() < 10 || &prefix[..6] != b"\x93NUMPY" {
        return Err("not an .npy file (no \\x93NUMPY magic)".into());
    }
    let (start, len) = match prefix[6] {
        1 => (10, usize::from(u16::from_le_bytes([prefix[8], prefix[9]]))),
        2 | 3 if prefix.len() >= 12 => (
            12,
            u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as usize,
        ),
        2 | 3 => return Err("cut short in its header".into()),
        v => return Err(format!("NPY version {v}, not 1, 2 or 3")),
    };
    if len > MAX_HEADER {
        return Err(format!("a header of {len} bytes (more than {MAX_HEADER})"));
    }
    Ok((start, len))
}

/// Parses the NPY header in `head` (the file's first bytes, the whole dict included).
pub(crate) fn parse(head: &[u8]) -> Result<Npy, String> {
    let (start, len) = dict_span(head)?;
    let dict = head
        .get(start..start + len)
        .ok_or("cut short in its header")?;
    let text = std::str::from_utf8(dict).map_err(|_| "a header that is not text".to_string())?;
    let mut p = Lit {
        s: text.as_bytes(),
        at: 0,
    };
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    p.expect(b'{')?;
    loop {
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            k => return Err(format!("an unexpected header key {k:?}")),
        }
        if !p.eat(b',') {
            p.expect(b'}')?;
            break;
        }
    }
    let descr = descr.ok_or("no 'descr' in its header")?;
    let shape = shape.ok_or("no 'shape' in its header")?;
    if fortran.ok_or("no 'fortran_order' in its header")? {
        return Err(
            "a Fortran-ordered array (numpy.ascontiguousarray makes a C-ordered one)".into(),
        );
    }
    let code = match descr.as_bytes().first() {
        Some(b'<' | b'|') => descr[1..].to_string(),
        Some(b'>') => return Err(format!("a big-endian array ({descr})")),
        _ => return Err(format!("a dtype numpy writes otherwise ({descr})")),
    };
    Ok(Npy {
        code,
        shape,
        data_offset: (start + len) as u64,
    })
}

/// An NPY file's array as a tensor: its dtype (one TensorFlow has, fixed-size, not strings), its
/// shape, and where its data lies (`(offset, len)`), from the file's first bytes `head` (the
/// whole header) and its `size`: a file whose data is not exactly what the header says (cut
/// short, or with bytes after it) is refused, in words.
pub(crate) fn array(
    head: &[u8],
    size: u64,
) -> Result<(super::dtype::DType, Vec<u64>, u64, u64), String> {
    let npy = parse(head)?;
    let dtype = super::dtype::DType::from_npy_code(&npy.code)
        .filter(|d| d.elem_size().is_some() && *d != super::dtype::DT_STRING)
        .ok_or_else(|| format!("an array of {}, which a checkpoint cannot hold", npy.code))?;
    let len = npy
        .shape
        .iter()
        .try_fold(dtype.elem_size().unwrap_or(1) as u64, |a, &d| {
            a.checked_mul(d)
        })
        .ok_or("a shape too large")?;
    if npy.data_offset.checked_add(len) != Some(size) {
        return Err(format!(
            "{size} bytes, its header says {} (data of {len} after {})",
            npy.data_offset.saturating_add(len),
            npy.data_offset
        ));
    }
    Ok((dtype, npy.shape, npy.data_offset, len))
}

/// The Python literals of an NPY header: strings, `True`/`False`, tuples of integers.
struct Lit<'a> {
    s: &'a [u8],
    at: usize,
}

impl Lit<'_> {
    fn skip(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "a header whose dict has no {:?} at {}",
                c as char, self.at
            ))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.skip();
        let q = match self.s.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("a header with no string at {}", self.at)),
        };
        let from = self.at + 1;
        let len = self.s[from..]
            .iter()
            .position(|&c| c == q)
            .ok_or("a header with an unended string")?;
        self.at = from + len + 1;
        Ok(String::from_utf8_lossy(&self.s[from..from + len]).into_owned())
    }

    fn boolean(&mut self) -> Result<bool, String> {
        self.skip();
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(v);
            }
        }
        Err(format!("a header with no True or False at {}", self.at))
    }

    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            self.skip();
            let from = self.at;
            while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            let d = std::str::from_utf8(&self.s[from..self.at])
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| format!("a shape with no number at {from}"))?;
            if dims.len() >= 64 {
                return Err("a shape of more than 64 dimensions".into());
            }
            dims.push(d);
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_as_written_and_numpy_forms() {
        for (descr, shape) in [("<f4", vec![3u64, 4]), ("|b1", vec![]), ("<i8", vec![5])] {
            let h = header(descr, &shape).unwrap();
            let n = parse(&h).unwrap();
            assert_eq!(
                (n.code.as_str(), &n.shape, n.data_offset),
                (&descr[1..], &shape, h.len() as u64)
            );
        }
        // Version 2, double quotes, other spacing and order, as other writers make them.
        let dict = b"{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f8\"}  \n";
        let mut v = b"\x93NUMPY\x02\x00".to_vec();
        v.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        v.extend_from_slice(dict);
        assert_eq!(parse(&v).unwrap().shape, [2, 3]);
    }

    #[test]
    fn what_is_refused_is_said() {
        let h = header("<f4", &[3]).unwrap();
        let text = |b: &[u8]| parse(b).unwrap_err();
        assert!(text(&h[..20]).contains("cut short"));
        assert!(text(b"PK\x03\x04").contains("magic"));
        let swap = |from: &[u8], to: &[u8]| {
            let at = h.windows(from.len()).position(|w| w == from).unwrap();
            let mut b = h.clone();
            b[at..at + to.len()].copy_from_slice(to);
            b
        };
        assert!(text(&swap(b"False", b"True ")).contains("Fortran"));
        assert!(text(&swap(b"<f4", b">f4")).contains("big-endian"));
        let mut huge = b"\x93NUMPY\x03\x00".to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(text(&huge).contains("more than"));
        // Every cut and every flipped byte: a header or an error, never a panic.
        for cut in 0..h.len() {
            let _ = parse(&h[..cut]);
        }
        for i in 0..h.len() {
            let mut b = h.clone();
            b[i] ^= 0xff;
            let _ = parse(&b);
        }
    }

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
