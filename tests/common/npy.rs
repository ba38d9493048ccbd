//! An NPY 1.0 reader for the tests, written from numpy's format description
//! (`numpy.lib.format`), independent of tfmount's own header writer: the magic string, version
//! 1.0, a little-endian u16 header length, and a Python dict literal with `descr`,
//! `fortran_order` and `shape`, padded with spaces and ended by `\n`.

/// What an `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
    /// Where the array data starts (the header's whole length).
    pub data_offset: usize,
}

/// numpy's `dtype.str` of each dtype numpy holds natively, by TensorFlow's name for it.
pub const DESCR: &[(&str, &str)] = &[
    ("float16", "<f2"),
    ("float32", "<f4"),
    ("float64", "<f8"),
    ("int8", "|i1"),
    ("int16", "<i2"),
    ("int32", "<i4"),
    ("int64", "<i8"),
    ("uint8", "|u1"),
    ("uint16", "<u2"),
    ("uint32", "<u4"),
    ("uint64", "<u8"),
    ("bool", "|b1"),
    ("complex64", "<c8"),
    ("complex128", "<c16"),
];

pub fn descr_of(dtype: &str) -> Option<&'static str> {
    DESCR.iter().find(|(n, _)| *n == dtype).map(|(_, d)| *d)
}

/// The value of `'key': ` in a dict literal, up to the next `,` at bracket depth 0 or the end.
fn value_of<'a>(dict: &'a str, key: &str) -> Result<&'a str, String> {
    let tag = format!("'{key}':");
    let at = dict
        .find(&tag)
        .ok_or_else(|| format!("no {tag} in {dict:?}"))?;
    let rest = dict[at + tag.len()..].trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '}' if depth == 0 => return Ok(rest[..i].trim()),
            _ => {}
        }
    }
    Err(format!("{key} has no end in {dict:?}"))
}

/// Parses the header at the start of `file`.
pub fn parse(file: &[u8]) -> Result<Header, String> {
    let magic = b"\x93NUMPY";
    if !file.starts_with(magic) {
        return Err("no NPY magic".into());
    }
    match file.get(6..8) {
        Some([1, 0]) => {}
        v => return Err(format!("version {v:?}, not 1.0")),
    }
    let len = file.get(8..10).ok_or("no header length")?;
    let hlen = u16::from_le_bytes([len[0], len[1]]) as usize;
    let text = file.get(10..10 + hlen).ok_or("header past the end")?;
    let text = std::str::from_utf8(text).map_err(|e| format!("header not text: {e}"))?;
    if !text.is_ascii() || !text.ends_with('\n') {
        return Err(format!("header not ASCII ending in a newline: {text:?}"));
    }
    let dict = text.trim_end_matches('\n').trim_end_matches(' ');
    if !(dict.starts_with('{') && dict.ends_with('}')) {
        return Err(format!("header is not a dict: {dict:?}"));
    }
    let descr = value_of(dict, "descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.strip_suffix('\''))
        .ok_or_else(|| format!("descr {descr:?} is not a string"))?
        .to_string();
    let fortran_order = match value_of(dict, "fortran_order")? {
        "False" => false,
        "True" => true,
        v => return Err(format!("fortran_order {v:?}")),
    };
    let shape = value_of(dict, "shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("shape {shape:?} is not a tuple"))?;
    let dims: Vec<&str> = inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if dims.len() == 1 && !inner.trim_end().ends_with(',') {
        return Err(format!("a 1-tuple is written with a comma: {shape:?}"));
    }
    let shape = dims
        .iter()
        .map(|d| d.parse::<u64>().map_err(|e| format!("dim {d:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Header {
        descr,
        fortran_order,
        shape,
        data_offset: 10 + hlen,
    })
}
