//! A `.safetensors` file's header, read and checked as safetensors' own reader checks it
//! (`SafeTensors::read_metadata` and `Metadata::validate` in huggingface/safetensors'
//! `safetensors/src/tensor.rs`), pure over bytes.
//!
//! The file: an 8-byte little-endian length `N`; `N` bytes of UTF-8 JSON, an object whose keys
//! are tensor names (`{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}`, the
//! offsets relative to the data, which starts at `8 + N`) and optionally `__metadata__` (a map of
//! strings to strings, or `null`); then the data. Refused, as safetensors refuses them: a file
//! under 8 bytes, `N` over 100,000,000 or past the end of the file, JSON that is not UTF-8, not
//! JSON or not an object, an entry without its three fields or with fields of the wrong type, a
//! dtype safetensors does not name, offsets that do not tile the data from 0 (a hole, an overlap,
//! an end before its begin), a shape whose bit count overflows or is not whole bytes, and a
//! tensor whose bytes are not its shape's element count times the element size. Beyond
//! safetensors: a key given twice is refused (serde, under safetensors, keeps the later one).
//! Where the data ends is checked against the file by the caller (see the module above): a file
//! shorter or longer than its header says is opened, and `verify` says so.
//!
//! Nothing is allocated by a length the file claims before it is checked against the file's
//! size and the 100,000,000-byte limit.

use serde_json::Value;

use crate::parse::dtype::{DType, TABLE};
use crate::parse::ReadAt;

/// safetensors' limit on the JSON header (`MAX_HEADER_SIZE` in its reader).
pub(crate) const MAX_HEADER: u64 = crate::parse::safetensors::MAX_HEADER;

/// Every dtype safetensors names (its `Dtype` enum), with the bits of one element.
const DTYPES: &[(&str, u64)] = &[
    ("BOOL", 8),
    ("F4", 4),
    ("F6_E2M3", 6),
    ("F6_E3M2", 6),
    ("U8", 8),
    ("I8", 8),
    ("F8_E5M2", 8),
    ("F8_E4M3", 8),
    ("F8_E8M0", 8),
    ("F8_E4M3FNUZ", 8),
    ("F8_E5M2FNUZ", 8),
    ("I16", 16),
    ("U16", 16),
    ("F16", 16),
    ("BF16", 16),
    ("I32", 32),
    ("U32", 32),
    ("F32", 32),
    ("C64", 64),
    ("F64", 64),
    ("I64", 64),
    ("U64", 64),
];

/// One tensor of the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tensor {
    pub(crate) name: String,
    /// safetensors' name of its dtype (`F32`).
    pub(crate) st_dtype: &'static str,
    /// tfmount's dtype with the same bytes; `DType(0)` where there is none (F4, F6_E2M3,
    /// F6_E3M2, F8_E8M0: see [`Tensor::unserved`]).
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// Its bytes, relative to the start of the data.
    pub(crate) begin: u64,
    pub(crate) end: u64,
}

impl Tensor {
    /// Why its bytes are not served, if they are not: a dtype tfmount has no equivalent of.
    pub(crate) fn unserved(&self) -> Option<String> {
        if self.dtype.elem_size().is_some() {
            return None;
        }
        Some(match self.st_dtype {
            "F4" => "its dtype F4 packs two 4-bit elements a byte, which tfmount does not unpack: not served".to_string(),
            "F6_E2M3" | "F6_E3M2" => format!(
                "its dtype {} packs 6-bit elements across bytes, which tfmount does not unpack: not served",
                self.st_dtype
            ),
            d => format!("its dtype {d} has no tfmount dtype: not served"),
        })
    }
}

/// A parsed and checked header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// `N`: the JSON's length; the data starts at `8 + N`.
    pub(crate) json_len: u64,
    /// `__metadata__`, sorted by key; `None` when absent or `null`.
    pub(crate) metadata: Option<Vec<(String, String)>>,
    /// The tensors, sorted by name.
    pub(crate) tensors: Vec<Tensor>,
    /// Where the last tensor's data ends, relative to the data's start.
    pub(crate) data_len: u64,
}

impl Header {
    /// Where the data starts in the file.
    pub(crate) fn data_start(&self) -> u64 {
        8 + self.json_len
    }

    /// How long the file must be: the header and every tensor's data, nothing after.
    pub(crate) fn file_len(&self) -> u64 {
        self.data_start().saturating_add(self.data_len)
    }
}

/// tfmount's dtype with the bytes of safetensors dtype `name` (the inverse of
/// [`DType::safetensors_name`]).
pub(crate) fn dtype_of(name: &str) -> Option<DType> {
    TABLE
        .iter()
        .find(|r| r.safetensors == Some(name))
        .map(|r| DType(r.value))
}

/// The header length `N` a file of `len` bytes starting with `head` claims, checked: at most
/// [`MAX_HEADER`] and within the file.
pub(crate) fn json_len(head: [u8; 8], len: u64) -> Result<u64, String> {
    let n = u64::from_le_bytes(head);
    if n > MAX_HEADER {
        return Err(format!(
            "its header length is {n} bytes, over safetensors' limit of {MAX_HEADER}: not a safetensors file, or a damaged one"
        ));
    }
    if n > len.saturating_sub(8) {
        return Err(format!(
            "its header length is {n} bytes, which runs past the end of the file ({len} bytes): truncated, or not a safetensors file"
        ));
    }
    Ok(n)
}

/// Reads and checks the header of the file `r`.
pub(crate) fn read<R: ReadAt + ?Sized>(r: &R) -> Result<Header, String> {
    let len = r.len();
    if len < 8 {
        return Err(format!(
            "{len} bytes: too short for a safetensors file (it starts with an 8-byte header length)"
        ));
    }
    let mut head = [0u8; 8];
    r.read_exact_at(&mut head, 0)
        .map_err(|e| format!("reading its header length: {e}"))?;
    let n = json_len(head, len)?;
    // Checked above: n <= MAX_HEADER and 8 + n <= len.
    let mut json = vec![0u8; n as usize];
    r.read_exact_at(&mut json, 8)
        .map_err(|e| format!("reading its {n}-byte header: {e}"))?;
    parse(n, &json)
}

/// Parses and checks the JSON header (`json`, `n` bytes).
pub(crate) fn parse(n: u64, json: &[u8]) -> Result<Header, String> {
    let text = std::str::from_utf8(json).map_err(|e| {
        format!(
            "its header is not UTF-8 text (byte {} of the JSON)",
            e.valid_up_to()
        )
    })?;
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("its header is not JSON: {e}"))?;
    let Value::Object(map) = v else {
        return Err(format!(
            "its header is JSON but not an object (a {})",
            kind_of(&v)
        ));
    };
    if let Some(k) = duplicate_key(text) {
        return Err(format!(
            "its header names {k:?} twice (which entry counts cannot be told)"
        ));
    }
    let mut metadata = None;
    let mut tensors = Vec::with_capacity(map.len());
    for (k, val) in map {
        if k == "__metadata__" {
            metadata = parse_metadata(&val)?;
            continue;
        }
        tensors.push(parse_tensor(k, &val)?);
    }
    let data_len = validate(&mut tensors)?;
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Header {
        json_len: n,
        metadata,
        tensors,
        data_len,
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// `__metadata__`: a map of strings to strings, or `null`.
fn parse_metadata(v: &Value) -> Result<Option<Vec<(String, String)>>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(format!(
                    "its __metadata__ entry {k:?} is a {}, not a string (safetensors' metadata maps strings to strings)",
                    kind_of(other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(format!(
            "its __metadata__ is a {}, not an object of strings",
            kind_of(other)
        )),
    }
}

/// One tensor's entry.
fn parse_tensor(name: String, v: &Value) -> Result<Tensor, String> {
    let Value::Object(o) = v else {
        return Err(format!(
            "tensor {name:?}: its entry is a {}, not an object with dtype, shape and data_offsets",
            kind_of(v)
        ));
    };
    let field = |f: &str| {
        o.get(f)
            .ok_or_else(|| format!("tensor {name:?}: its entry has no {f}"))
    };
    let d = field("dtype")?;
    let Some(d) = d.as_str() else {
        return Err(format!(
            "tensor {name:?}: its dtype is a {}, not a name",
            kind_of(d)
        ));
    };
    let Some(&(st_dtype, _)) = DTYPES.iter().find(|(n, _)| *n == d) else {
        return Err(format!(
            "tensor {name:?}: dtype {d:?} is not one safetensors knows"
        ));
    };
    let shape = match field("shape")? {
        Value::Array(dims) => dims
            .iter()
            .map(|x| {
                x.as_u64().ok_or_else(|| {
                    format!(
                        "tensor {name:?}: its shape holds {x}, not a size (a whole number from 0)"
                    )
                })
            })
            .collect::<Result<Vec<u64>, String>>()?,
        other => {
            return Err(format!(
                "tensor {name:?}: its shape is a {}, not a list",
                kind_of(other)
            ))
        }
    };
    let offsets = match field("data_offsets")? {
        Value::Array(a) if a.len() == 2 => a
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()
            .filter(|o| o.len() == 2),
        _ => None,
    }
    .ok_or_else(|| {
        format!("tensor {name:?}: its data_offsets are not [begin, end], two whole numbers from 0")
    })?;
    Ok(Tensor {
        st_dtype,
        dtype: dtype_of(st_dtype).unwrap_or(DType(0)),
        shape,
        begin: offsets[0],
        end: offsets[1],
        name,
    })
}

/// safetensors' `Metadata::validate`: the tensors, sorted by their offsets, tile the data from
/// 0 with no hole and no overlap, and each holds exactly its shape's bytes. Returns where the
/// data ends.
fn validate(tensors: &mut [Tensor]) -> Result<u64, String> {
    tensors.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    let mut at = 0u64;
    let mut prev: Option<&str> = None;
    for t in tensors.iter() {
        let (b, e) = (t.begin, t.end);
        if e < b {
            return Err(format!(
                "tensor {:?}: data_offsets [{b}, {e}] end before they begin",
                t.name
            ));
        }
        if b < at {
            return Err(format!(
                "tensor {:?}: data_offsets [{b}, {e}] overlap those of tensor {:?}, which end at {at}",
                t.name,
                prev.unwrap_or("")
            ));
        }
        if b > at {
            return Err(format!(
                "tensor {:?}: data_offsets [{b}, {e}] leave bytes {at}..{b} of the data to no tensor (safetensors refuses holes)",
                t.name
            ));
        }
        let bits = DTYPES
            .iter()
            .find(|(n, _)| *n == t.st_dtype)
            .map_or(8, |(_, b)| *b);
        let nbits = t
            .shape
            .iter()
            .try_fold(bits, |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                format!(
                    "tensor {:?}: shape {:?} of {} overflows",
                    t.name, t.shape, t.st_dtype
                )
            })?;
        if nbits % 8 != 0 {
            return Err(format!(
                "tensor {:?}: shape {:?} of {}-bit {} is not a whole number of bytes",
                t.name, t.shape, bits, t.st_dtype
            ));
        }
        if e - b != nbits / 8 {
            return Err(format!(
                "tensor {:?}: data_offsets [{b}, {e}] hold {} bytes, shape {:?} of {} needs {}",
                t.name,
                e - b,
                t.shape,
                t.st_dtype,
                nbits / 8
            ));
        }
        at = e;
        prev = Some(&t.name);
    }
    Ok(at)
}

/// A key the top-level object of `text` (valid JSON) gives twice, if any: the object's keys
/// scanned at depth 1 (a key is the first string after `{` or `,`).
fn duplicate_key(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut seen = std::collections::HashSet::new();
    let (mut depth, mut i, mut want_key) = (0usize, 0usize, false);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && want_key {
                    let raw = text.get(start..=i.min(b.len() - 1))?;
                    let key: String = serde_json::from_str(raw).ok()?;
                    if !seen.insert(key.clone()) {
                        return Some(key);
                    }
                    want_key = false;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                want_key = depth == 1 && b[i] == b'{';
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => want_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str, data: usize) -> Vec<u8> {
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json.as_bytes());
        f.resize(f.len() + data, 0);
        f
    }

    #[test]
    fn a_sound_header_parses() {
        let f = file(
            r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},"z":{"dtype":"U8","shape":[0,3],"data_offsets":[10,10]}}  "#,
            10,
        );
        let h = read(&f[..]).expect("parses");
        assert_eq!(h.metadata, Some(vec![("format".into(), "pt".into())]));
        let names: Vec<&str> = h.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "z"]);
        assert_eq!(h.tensors[0].dtype, DType(14));
        assert_eq!(h.tensors[1].dtype, DType(1));
        assert_eq!(h.data_len, 10);
        assert_eq!(h.file_len(), f.len() as u64);
    }

    #[test]
    fn every_tfmount_dtype_safetensors_names_maps_back() {
        for r in TABLE {
            if let Some(n) = r.safetensors {
                let (_, bits) = DTYPES.iter().find(|(d, _)| *d == n).expect("named");
                assert_eq!(*bits, 8 * r.size as u64, "{n}");
                assert_eq!(dtype_of(n), Some(DType(r.value)));
            }
        }
        for n in ["F4", "F6_E2M3", "F6_E3M2", "F8_E8M0"] {
            assert_eq!(dtype_of(n), None, "{n}");
        }
    }

    #[test]
    fn hostile_headers_are_refused_in_words() {
        let t =
            |d: &str, s: &str, o: &str| format!(r#""dtype":"{d}","shape":{s},"data_offsets":{o}"#);
        let cases: Vec<(String, &str)> = vec![
            ("[1,2]".into(), "not an object"),
            ("{".into(), "not JSON"),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F99", "[1]", "[0,4]")),
                "not one safetensors knows",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[1]", "[0,8]")),
                "hold 8 bytes",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[1]", "[4,0]")),
                "end before",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[1]", "[4,8]")),
                "holes",
            ),
            (
                format!(
                    r#"{{"a":{{{}}},"b":{{{}}}}}"#,
                    t("F32", "[2]", "[0,8]"),
                    t("F32", "[1]", "[4,8]")
                ),
                "overlap",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[-1]", "[0,4]")),
                "not a size",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[1.5]", "[0,4]")),
                "not a size",
            ),
            (
                format!(
                    r#"{{"a":{{{}}}}}"#,
                    t("F64", "[4294967296,4294967296]", "[0,8]")
                ),
                "overflows",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F4", "[3]", "[0,2]")),
                "whole number of bytes",
            ),
            (
                format!(r#"{{"a":{{{}}}}}"#, t("F32", "[1]", "[0]")),
                "data_offsets",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1]}}"#.into(),
                "no data_offsets",
            ),
            (r#"{"a":3}"#.into(), "not an object"),
            (r#"{"__metadata__":{"x":1}}"#.into(), "not a string"),
            (r#"{"__metadata__":[]}"#.into(), "not an object of strings"),
            (
                format!(
                    r#"{{"a":{{{}}},"a":{{{}}}}}"#,
                    t("F32", "[1]", "[0,4]"),
                    t("F32", "[1]", "[0,4]")
                ),
                "twice",
            ),
        ];
        for (json, words) in cases {
            let f = file(&json, 16);
            let e = read(&f[..]).expect_err(&json);
            assert!(e.contains(words), "{json}: {e}");
        }
        // Lengths: too short, past the end, over the limit; not UTF-8.
        assert!(read(&[1u8, 0, 0][..]).unwrap_err().contains("too short"));
        let mut past = 100u64.to_le_bytes().to_vec();
        past.extend_from_slice(b"{}");
        assert!(read(&past[..]).unwrap_err().contains("past the end"));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(read(&huge[..])
            .unwrap_err()
            .contains("over safetensors' limit"));
        let mut bad = 3u64.to_le_bytes().to_vec();
        bad.extend_from_slice(b"{\xff}");
        assert!(read(&bad[..]).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn nested_and_escaped_keys_are_not_duplicates() {
        assert_eq!(
            duplicate_key(r#"{"a":{"a":1,"b":[{"a":2}]},"b\"":1,"c":"a"}"#),
            None
        );
        assert_eq!(
            duplicate_key(r#"{"a\u0062":1, "ab" :2}"#),
            Some("ab".to_string())
        );
    }
}
