//! The safetensors layout of a list of tensors (`model.safetensors`): the header bytes, where
//! each tensor's data lies in the file, and which file bytes a read covers — so the file can be
//! served piece by piece from the tensors' own bytes, never assembled.
//!
//! Format (huggingface/safetensors README): 8-byte little-endian header length `N`; `N` bytes of
//! UTF-8 JSON starting with `{`, padded with spaces; then the data: every tensor's bytes
//! (row-major, little-endian), contiguous, no holes, in the order of the header. Here the JSON
//! is padded so that the data starts at a multiple of [`DATA_ALIGN`] (4 KiB, a page): the header
//! never shares a page with tensor bytes, so a damaged tensor (whose bytes fail with EIO) cannot
//! make the header unreadable, and `safe_open(...).keys()` works on a checkpoint with damage. Tensors are named by their checkpoint keys and
//! placed in checkpoint key order (the order of the input). The JSON object lists
//! `__metadata__` first, then the tensors in data order.
//!
//! Included dtypes ([`safetensors_dtype`]): float64 F64, float32 F32, float16 F16, bfloat16
//! BF16, int64..int8 I64..I8, uint64..uint8 U64..U8, bool BOOL, complex64 C64, float8_e5m2
//! F8_E5M2, float8_e4m3fn F8_E4M3, float8_e4m3fnuz F8_E4M3FNUZ, float8_e5m2fnuz F8_E5M2FNUZ
//! (bit-identical formats; the two FNUZ names need safetensors >= 0.8.0 to open). Everything
//! else is left out: string, complex128, the quantized types, int4/uint4/int2/uint2 and
//! float4_e2m1fn (safetensors' sub-byte types are packed; tfmount stores one element per byte),
//! float8_e4m3b11fnuz (no safetensors name), variant, resource and unknown dtypes. Also left out:
//! keys that are not UTF-8 (JSON keys are text), a key named `__metadata__` (reserved), and
//! entries whose byte size is not their shape's element count times the element size.
//!
//! `__metadata__` (string values only, as the format requires):
//! - `"format": "tf"` — the tensors are TensorFlow's (names, and layouts such as a dense kernel's
//!   `[in, out]`), the tag `transformers` writes for TensorFlow weights;
//! - `"tfmount.excluded"`, present when something was left out: a JSON array, as a string, of
//!   `{"key": K, "dtype": D, "reason": R}` in key order — `K` the key, or for a key that is not
//!   UTF-8 `"key_hex": H` (lowercase hex of its bytes) instead of `"key"`; `D` TensorFlow's dtype
//!   name (`.dtype`'s text); `R` one of `"dtype"`, `"key not UTF-8"`, `"reserved key"`,
//!   `"size does not match shape"`. Read it with `json.loads(f.metadata()["tfmount.excluded"])`.
//!
//! Memory: the header bytes plus 16 bytes per included tensor; [`Layout::build`] takes the
//! records as an iterator, one at a time. A header over safetensors' 100,000,000-byte limit is an
//! error (about a million tensors with long names).

use std::io::Write;

use crate::parse::dtype::DType;

/// Where the data starts: a multiple of this (one page).
pub(crate) const DATA_ALIGN: u64 = 4096;

/// safetensors' limit on the JSON header (`MAX_HEADER_SIZE` in its reader).
pub(crate) const MAX_HEADER: u64 = 100_000_000;

/// The safetensors dtype name of a TensorFlow dtype whose bytes it holds unchanged.
pub(crate) fn safetensors_dtype(dtype: DType) -> Option<&'static str> {
    dtype.safetensors_name()
}

/// One tensor as the layout needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TensorRecord<'a> {
    /// The checkpoint key, raw.
    pub(crate) name: &'a [u8],
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [u64],
    /// Bytes of the tensor in tfmount's layout (its `.bin` size).
    pub(crate) nbytes: u64,
}

/// Why a tensor is not in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exclusion {
    /// safetensors has no dtype with these bytes.
    Dtype,
    /// The key is not UTF-8.
    NotUtf8,
    /// The key is `__metadata__`.
    Reserved,
    /// `nbytes` is not the shape's element count times the element size.
    Size,
}

impl Exclusion {
    /// The `reason` written in `__metadata__`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Exclusion::Dtype => "dtype",
            Exclusion::NotUtf8 => "key not UTF-8",
            Exclusion::Reserved => "reserved key",
            Exclusion::Size => "size does not match shape",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SafetensorsError {
    #[error("safetensors header would be {0} bytes, over the format's {MAX_HEADER}-byte limit")]
    HeaderTooLarge(u64),
    #[error("tensor data would end past 2^64 bytes")]
    TooLarge,
}

/// The byte layout of one safetensors file; see the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// The 8-byte length, the JSON, its padding: file bytes `[0, header.len())`.
    header: Vec<u8>,
    /// Input index of each included tensor, in data order.
    index: Vec<usize>,
    /// File offset where each included tensor starts, then the file size.
    starts: Vec<u64>,
    /// What was left out (read by the tests).
    #[cfg(test)]
    excluded: Vec<(usize, Exclusion)>,
}

/// A piece of a read: header bytes, or bytes of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part<'a> {
    Header(&'a [u8]),
    /// `len` bytes from `offset` of the tensor that was `index`-th in the input.
    Tensor {
        index: usize,
        offset: u64,
        len: u64,
    },
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's string writer cannot fail on a Vec.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Layout {
    /// Lays out `records` (checkpoint key order) in one pass.
    pub(crate) fn build<'a, I>(records: I) -> Result<Layout, SafetensorsError>
    where
        I: IntoIterator<Item = TensorRecord<'a>>,
    {
        Self::build_with_metadata(records, &[])
    }

    /// [`Layout::build`] with more `__metadata__` entries, written after `"format"` and before
    /// `"tfmount.excluded"` (neither of which `metadata` may name).
    pub(crate) fn build_with_metadata<'a, I>(
        records: I,
        metadata: &[(&str, &str)],
    ) -> Result<Layout, SafetensorsError>
    where
        I: IntoIterator<Item = TensorRecord<'a>>,
    {
        let mut entries = Vec::new();
        let mut excluded_json = Vec::new();
        let mut index = Vec::new();
        let mut starts = Vec::new();
        let mut excluded = Vec::new();
        let mut data_end = 0u64;
        for (i, r) in records.into_iter().enumerate() {
            let verdict = Self::check(&r);
            let name = match verdict {
                Ok(name) => name,
                Err(why) => {
                    excluded.push((i, why));
                    excluded_json.push(if excluded_json.is_empty() { b'[' } else { b',' });
                    match std::str::from_utf8(r.name) {
                        Ok(k) => {
                            excluded_json.extend_from_slice(b"{\"key\":");
                            json_str(&mut excluded_json, k);
                        }
                        Err(_) => {
                            excluded_json.extend_from_slice(b"{\"key_hex\":");
                            json_str(&mut excluded_json, &hex(r.name));
                        }
                    }
                    excluded_json.extend_from_slice(b",\"dtype\":");
                    json_str(&mut excluded_json, &r.dtype.display_name());
                    excluded_json.extend_from_slice(b",\"reason\":");
                    json_str(&mut excluded_json, why.reason());
                    excluded_json.push(b'}');
                    continue;
                }
            };
            let begin = data_end;
            data_end = begin
                .checked_add(r.nbytes)
                .ok_or(SafetensorsError::TooLarge)?;
            entries.push(b',');
            json_str(&mut entries, name);
            entries.extend_from_slice(b":{\"dtype\":\"");
            entries.extend_from_slice(safetensors_dtype(r.dtype).unwrap_or("").as_bytes());
            entries.extend_from_slice(b"\",\"shape\":[");
            for (k, d) in r.shape.iter().enumerate() {
                if k > 0 {
                    entries.push(b',');
                }
                let _ = write!(entries, "{d}");
            }
            let _ = write!(entries, "],\"data_offsets\":[{begin},{data_end}]}}");
            index.push(i);
            starts.push(begin);
            if entries.len() as u64 > MAX_HEADER {
                return Err(SafetensorsError::HeaderTooLarge(entries.len() as u64));
            }
        }
        if !excluded_json.is_empty() {
            excluded_json.push(b']');
        }
        let extra: usize = metadata
            .iter()
            .map(|(k, v)| k.len() + v.len() * 5 / 4 + 8)
            .sum();
        let mut json = Vec::with_capacity(entries.len() + excluded_json.len() * 5 / 4 + extra + 64);
        json.extend_from_slice(b"{\"__metadata__\":{\"format\":\"tf\"");
        for (k, v) in metadata {
            json.push(b',');
            json_str(&mut json, k);
            json.push(b':');
            json_str(&mut json, v);
        }
        if !excluded_json.is_empty() {
            json.extend_from_slice(b",\"tfmount.excluded\":");
            // The array is valid UTF-8 (built from &str and ASCII).
            json_str(
                &mut json,
                std::str::from_utf8(&excluded_json).unwrap_or("[]"),
            );
        }
        json.push(b'}');
        json.extend_from_slice(&entries);
        json.push(b'}');
        // 8 + N is a multiple of DATA_ALIGN (so N is a multiple of 8, as the format wants).
        let padded = (8 + json.len() as u64).next_multiple_of(DATA_ALIGN) - 8;
        if padded > MAX_HEADER {
            return Err(SafetensorsError::HeaderTooLarge(padded));
        }
        json.resize(padded as usize, b' ');
        let mut header = Vec::with_capacity(8 + json.len());
        header.extend_from_slice(&padded.to_le_bytes());
        header.extend_from_slice(&json);
        let base = header.len() as u64;
        data_end
            .checked_add(base)
            .ok_or(SafetensorsError::TooLarge)?;
        for s in &mut starts {
            *s += base;
        }
        starts.push(data_end + base);
        Ok(Layout {
            header,
            index,
            starts,
            #[cfg(test)]
            excluded,
        })
    }

    /// The key as a JSON key, or why the tensor is left out.
    fn check<'a>(r: &TensorRecord<'a>) -> Result<&'a str, Exclusion> {
        let st = safetensors_dtype(r.dtype).ok_or(Exclusion::Dtype)?;
        let name = std::str::from_utf8(r.name).map_err(|_| Exclusion::NotUtf8)?;
        if name == "__metadata__" {
            return Err(Exclusion::Reserved);
        }
        let size = match st {
            "F64" | "I64" | "U64" | "C64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            _ => 1,
        };
        // safetensors checks the element count against usize.
        let expect = r
            .shape
            .iter()
            .try_fold(size, |a: u64, &d| a.checked_mul(d))
            .filter(|&n| usize::try_from(n).is_ok());
        if expect != Some(r.nbytes) || r.shape.iter().any(|&d| usize::try_from(d).is_err()) {
            return Err(Exclusion::Size);
        }
        Ok(name)
    }

    /// The header: file bytes `[0, header().len())`.
    pub(crate) fn header(&self) -> &[u8] {
        &self.header
    }

    /// The file's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.starts
            .last()
            .copied()
            .unwrap_or(self.header.len() as u64)
    }

    /// Included tensors in file order: `(input index, file offset range)`.
    pub(crate) fn tensors(&self) -> impl Iterator<Item = (usize, std::ops::Range<u64>)> + '_ {
        self.index
            .iter()
            .zip(self.starts.windows(2))
            .map(|(&i, w)| (i, w[0]..w[1]))
    }

    /// Tensors left out, in input order: `(input index, why)`.
    #[cfg(test)]
    pub(crate) fn excluded(&self) -> &[(usize, Exclusion)] {
        &self.excluded
    }

    /// The pieces that make up file bytes `[offset, offset + len)`, clipped to the file's end,
    /// in order: header bytes, then parts of tensors (empty tensors never appear).
    pub(crate) fn locate(&self, offset: u64, len: u64) -> Parts<'_> {
        let end = offset.saturating_add(len).min(self.size());
        // First tensor ending after `offset`.
        let next = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        Parts {
            layout: self,
            pos: offset.min(end),
            end,
            next,
        }
    }
}

/// Iterator returned by [`Layout::locate`].
#[derive(Debug, Clone)]
pub(crate) struct Parts<'a> {
    layout: &'a Layout,
    pos: u64,
    end: u64,
    /// Candidate index into `layout.index` for the next tensor part.
    next: usize,
}

impl<'a> Iterator for Parts<'a> {
    type Item = Part<'a>;

    fn next(&mut self) -> Option<Part<'a>> {
        if self.pos >= self.end {
            return None;
        }
        let h = self.layout.header.len() as u64;
        if self.pos < h {
            let stop = self.end.min(h);
            let part = self.layout.header.get(self.pos as usize..stop as usize)?;
            self.pos = stop;
            return Some(Part::Header(part));
        }
        loop {
            let &index = self.layout.index.get(self.next)?;
            let start = *self.layout.starts.get(self.next)?;
            let stop = *self.layout.starts.get(self.next + 1)?;
            self.next += 1;
            if stop <= self.pos {
                continue; // empty tensor, or one before `pos`
            }
            let to = stop.min(self.end);
            let part = Part::Tensor {
                index,
                offset: self.pos - start,
                len: to - self.pos,
            };
            self.pos = to;
            return Some(part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A tensor with its bytes, for building test files.
    struct T {
        name: Vec<u8>,
        dtype: i32,
        shape: Vec<u64>,
        data: Vec<u8>,
    }

    fn t(name: &[u8], dtype: i32, shape: &[u64], data: Vec<u8>) -> T {
        T {
            name: name.to_vec(),
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    fn records(ts: &[T]) -> impl Iterator<Item = TensorRecord<'_>> {
        ts.iter().map(|t| TensorRecord {
            name: &t.name,
            dtype: DType(t.dtype),
            shape: &t.shape,
            nbytes: t.data.len() as u64,
        })
    }

    /// The whole file, assembled through `locate` in pieces of `step` bytes.
    fn assemble(l: &Layout, ts: &[T], step: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < l.size() {
            for p in l.locate(at, step) {
                match p {
                    Part::Header(h) => out.extend_from_slice(h),
                    Part::Tensor { index, offset, len } => out.extend_from_slice(
                        &ts[index].data[offset as usize..(offset + len) as usize],
                    ),
                }
            }
            at += step;
        }
        out
    }

    use crate::testkit::rng::Rng;

    /// One tensor of every dtype tfmount serves, plus odd names, empty and scalar tensors.
    fn sample() -> Vec<T> {
        let mut r = Rng::new(0x5eed_1234_abcd_0001);
        let mut v = Vec::new();
        // (dtype, element size) for every dtype value 1..=33 except string/resource/variant.
        for (dt, size) in [
            (1, 4),
            (2, 8),
            (3, 4),
            (4, 1),
            (5, 2),
            (6, 1),
            (8, 8),
            (9, 8),
            (11, 1),
            (12, 1),
            (13, 4),
            (14, 2),
            (15, 2),
            (16, 2),
            (17, 2),
            (18, 16),
            (19, 2),
            (22, 4),
            (23, 8),
            (24, 1),
            (25, 1),
            (26, 1),
            (27, 1),
            (28, 1),
            (29, 1),
            (30, 1),
            (31, 1),
            (32, 1),
            (33, 1),
        ] {
            let name = format!("dtypes/{}", DType(dt).display_name());
            v.push(t(name.as_bytes(), dt, &[2, 3], r.bytes(6 * size)));
        }
        v.push(t(b"dtypes/bool", 10, &[2, 3], vec![1, 0, 0, 1, 1, 1]));
        v.push(t(b"dtypes/string", 7, &[2], {
            let mut s = 1u64.to_le_bytes().to_vec();
            s.push(b'a');
            s.extend_from_slice(&0u64.to_le_bytes());
            s
        }));
        v.push(t(b"dtypes/variant", 21, &[], vec![1, 2, 3]));
        v.push(t(b"empty/bf16_0x4", 14, &[0, 4], vec![]));
        v.push(t(b"empty/f32_0", 1, &[0], vec![]));
        v.push(t(b"empty/i32_2x0x3", 3, &[2, 0, 3], vec![]));
        v.push(t(b"odd/\"quote\\ and \ttab\n", 1, &[1], r.bytes(4)));
        v.push(t(b"odd/nul\x00byte", 1, &[1], r.bytes(4)));
        v.push(t(b"odd/bad\xff\xfeutf8", 1, &[1], r.bytes(4)));
        v.push(t("odd/ünï ✓/τ".as_bytes(), 1, &[1], r.bytes(4)));
        v.push(t(b"odd/size_mismatch", 1, &[2], r.bytes(4)));
        v.push(t(b"__metadata__", 1, &[1], r.bytes(4)));
        v.push(t(b"scalar/bf16", 14, &[], vec![0x80, 0x3f]));
        v.push(t(b"scalar/f16", 19, &[], vec![0x00, 0x3c]));
        v.push(t(b"scalar/bool", 10, &[], vec![1]));
        v.push(t(b"scalar/f64", 2, &[], r.bytes(8)));
        v.push(t(b"z/rank4", 5, &[1, 2, 3, 4], r.bytes(48)));
        v.push(t(b"z/tail_u8", 4, &[5], r.bytes(5)));
        v
    }

    #[test]
    fn header_shape_and_offsets() {
        let ts = sample();
        let l = Layout::build(records(&ts)).unwrap();
        let h = l.header();
        let n = u64::from_le_bytes(h[..8].try_into().unwrap());
        assert_eq!(n as usize, h.len() - 8);
        assert_eq!(n % 8, 0);
        assert_eq!(h[8], b'{');
        let json: serde_json::Value = serde_json::from_slice(&h[8..]).unwrap();
        let obj = json.as_object().unwrap();
        // Included: every tensor except the excluded ones; offsets contiguous in input order.
        let excluded: Vec<usize> = l.excluded().iter().map(|e| e.0).collect();
        let mut at = 0u64;
        let mut seen = 0;
        for (i, tt) in ts.iter().enumerate() {
            if excluded.contains(&i) {
                continue;
            }
            let e = &obj[std::str::from_utf8(&tt.name).unwrap()];
            assert_eq!(e["dtype"], safetensors_dtype(DType(tt.dtype)).unwrap());
            assert_eq!(e["shape"], serde_json::json!(tt.shape));
            assert_eq!(
                e["data_offsets"],
                serde_json::json!([at, at + tt.data.len() as u64])
            );
            at += tt.data.len() as u64;
            seen += 1;
        }
        assert_eq!(obj.len(), seen + 1);
        assert_eq!(l.size(), h.len() as u64 + at);
        let why = |name: &[u8]| {
            let i = ts.iter().position(|t| t.name == name).unwrap();
            l.excluded().iter().find(|e| e.0 == i).map(|e| e.1)
        };
        assert_eq!(why(b"dtypes/string"), Some(Exclusion::Dtype));
        assert_eq!(why(b"dtypes/complex128"), Some(Exclusion::Dtype));
        assert_eq!(why(b"dtypes/float8_e4m3b11fnuz"), Some(Exclusion::Dtype));
        assert_eq!(why(b"dtypes/int4"), Some(Exclusion::Dtype));
        assert_eq!(why(b"dtypes/qint8"), Some(Exclusion::Dtype));
        assert_eq!(why(b"odd/bad\xff\xfeutf8"), Some(Exclusion::NotUtf8));
        assert_eq!(why(b"__metadata__"), Some(Exclusion::Reserved));
        assert_eq!(why(b"odd/size_mismatch"), Some(Exclusion::Size));
        assert_eq!(why(b"dtypes/bfloat16"), None);
        assert_eq!(why(b"dtypes/float8_e5m2fnuz"), None);
        let meta = obj["__metadata__"].as_object().unwrap();
        assert_eq!(meta["format"], "tf");
        let list: serde_json::Value =
            serde_json::from_str(meta["tfmount.excluded"].as_str().unwrap()).unwrap();
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), l.excluded().len());
        assert!(list.contains(&serde_json::json!(
            {"key_hex": "6f64642f626164fffe75746638", "dtype": "float32", "reason": "key not UTF-8"}
        )));
        assert!(list.contains(&serde_json::json!(
            {"key": "dtypes/string", "dtype": "string", "reason": "dtype"}
        )));
    }

    #[test]
    fn locate_covers_every_range_exactly() {
        let ts = sample();
        let l = Layout::build(records(&ts)).unwrap();
        let whole = assemble(&l, &ts, u64::MAX);
        assert_eq!(whole.len() as u64, l.size());
        for step in [1, 3, 8, 64, 1000] {
            assert_eq!(assemble(&l, &ts, step), whole);
        }
        let mut r = Rng::new(7);
        for _ in 0..2000 {
            let off = r.next() % (l.size() + 10);
            let len = r.next() % 300;
            let mut got = Vec::new();
            let mut parts = 0;
            for p in l.locate(off, len) {
                parts += 1;
                match p {
                    Part::Header(h) => got.extend_from_slice(h),
                    Part::Tensor { index, offset, len } => {
                        assert!(len > 0);
                        got.extend_from_slice(
                            &ts[index].data[offset as usize..(offset + len) as usize],
                        )
                    }
                }
            }
            let lo = (off as usize).min(whole.len());
            let hi = (off.saturating_add(len) as usize).min(whole.len());
            assert_eq!(got, &whole[lo..hi]);
            assert!(parts <= 1 + ts.len());
        }
        assert_eq!(l.locate(u64::MAX, u64::MAX).count(), 0);
        assert_eq!(l.locate(0, 0).count(), 0);
    }

    #[test]
    fn empty_list() {
        let l = Layout::build(std::iter::empty()).unwrap();
        assert_eq!(l.size(), l.header().len() as u64);
        assert_eq!(
            l.header()[8..].trim_ascii_end(),
            br#"{"__metadata__":{"format":"tf"}}"#
        );
        assert_eq!(l.tensors().count(), 0);
    }

    #[test]
    fn overflowing_sizes_are_errors_not_panics() {
        let shape = [u64::MAX];
        let big = [
            TensorRecord {
                name: b"a",
                dtype: DType(4),
                shape: &shape,
                nbytes: u64::MAX,
            },
            TensorRecord {
                name: b"b",
                dtype: DType(4),
                shape: &shape,
                nbytes: u64::MAX,
            },
        ];
        // u64::MAX elements do not fit safetensors' usize check on 64-bit? They do: the
        // second tensor then overflows the data end.
        match Layout::build(big) {
            Err(SafetensorsError::TooLarge) => {}
            Ok(l) => assert_eq!(l.excluded().len(), 2),
            Err(e) => panic!("{e}"),
        }
        let shape2 = [u64::MAX, 2];
        let one = [TensorRecord {
            name: b"c",
            dtype: DType(1),
            shape: &shape2,
            nbytes: 8,
        }];
        assert_eq!(Layout::build(one).unwrap().excluded()[0].1, Exclusion::Size);
    }

    /// Writes the file (through `locate`) and a list of what it must hold, then checks both with
    /// the `safetensors` Python package (`python3`; CI installs it with numpy).
    fn check_with_python(ts: &[T], numpy_load: bool, test: &str) {
        let Some(py) = crate::testkit::requires::python("numpy, safetensors", test) else {
            return;
        };
        let l = Layout::build(records(ts)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.safetensors");
        std::fs::write(&file, assemble(&l, ts, 1 << 20)).unwrap();
        let excluded: Vec<usize> = l.excluded().iter().map(|e| e.0).collect();
        let mut want = Vec::new();
        for (i, tt) in ts.iter().enumerate() {
            if !excluded.contains(&i) {
                want.push(serde_json::json!({
                    "name": std::str::from_utf8(&tt.name).unwrap(),
                    "dtype": safetensors_dtype(DType(tt.dtype)).unwrap(),
                    "shape": tt.shape,
                    "hex": hex(&tt.data),
                }));
            }
        }
        let excl: Vec<serde_json::Value> = l
            .excluded()
            .iter()
            .map(|&(i, why)| match std::str::from_utf8(&ts[i].name) {
                Ok(k) => serde_json::json!({"key": k, "dtype": DType(ts[i].dtype).display_name(), "reason": why.reason()}),
                Err(_) => serde_json::json!({"key_hex": hex(&ts[i].name), "dtype": DType(ts[i].dtype).display_name(), "reason": why.reason()}),
            })
            .collect();
        let expect = dir.path().join("expect.json");
        std::fs::write(
            &expect,
            serde_json::to_vec(&serde_json::json!({"tensors": want, "excluded": excl})).unwrap(),
        )
        .unwrap();
        let script = r#"
import sys, json
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file
path, expect, numpy_load = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3] == "1"
want = {t["name"]: t for t in expect["tensors"]}
with safe_open(path, framework="numpy") as f:
    assert sorted(f.keys()) == sorted(want), (len(f.keys()), len(want))
    meta = f.metadata()
    assert meta["format"] == "tf", meta
    if expect["excluded"]:
        assert json.loads(meta["tfmount.excluded"]) == expect["excluded"], meta
    else:
        assert "tfmount.excluded" not in meta
    for k, t in want.items():
        s = f.get_slice(k)
        assert s.get_dtype() == t["dtype"], (k, s.get_dtype())
        assert list(s.get_shape()) == t["shape"], (k, s.get_shape())
# Every tensor's raw bytes (BF16 and float8 included), through the validating deserializer.
data = open(path, "rb").read()
got = {k: v for k, v in safetensors.deserialize(data)}
assert sorted(got) == sorted(want)
for k, t in want.items():
    assert got[k]["dtype"] == t["dtype"] and list(got[k]["shape"]) == t["shape"], k
    assert bytes(got[k]["data"]).hex() == t["hex"], k
if numpy_load:
    arrays = load_file(path)
    assert sorted(arrays) == sorted(want)
    for k, t in want.items():
        a = arrays[k]
        assert list(a.shape) == t["shape"], k
        assert a.tobytes().hex() == t["hex"], k
print("ok", len(want))
"#;
        let out = Command::new(&py)
            .arg("-c")
            .arg(script)
            .arg(&file)
            .arg(&expect)
            .arg(if numpy_load { "1" } else { "0" })
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "the safetensors check failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("ok {}", want.len())
        );
    }

    #[test]
    fn python_safetensors_reads_every_dtype() {
        check_with_python(&sample(), false, "python_safetensors_reads_every_dtype");
    }

    #[test]
    fn python_numpy_load_file() {
        // Only dtypes numpy holds, so safetensors.numpy.load_file can load everything.
        let numpy_dtypes = [1, 2, 3, 4, 5, 6, 8, 9, 10, 17, 19, 22, 23];
        let ts: Vec<T> = sample()
            .into_iter()
            .filter(|t| numpy_dtypes.contains(&t.dtype) && std::str::from_utf8(&t.name).is_ok())
            .filter(|t| t.name != b"__metadata__" && t.name != b"odd/size_mismatch")
            .collect();
        assert!(ts.iter().any(|t| t.dtype == 19) && ts.iter().any(|t| t.dtype == 10));
        check_with_python(&ts, true, "python_numpy_load_file");
    }

    fn many(n: usize) -> Vec<T> {
        (0..n)
            .map(|i| {
                t(
                    format!(
                        "model/layer_{:06}/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                        i
                    )
                    .as_bytes(),
                    1,
                    &[1],
                    (i as f32).to_le_bytes().to_vec(),
                )
            })
            .collect()
    }

    #[test]
    fn python_reads_100k_tensors() {
        check_with_python(&many(100_000), true, "python_reads_100k_tensors");
    }

    /// Header build time for 100,000 tensors (`cargo test --lib format::safetensors -- --ignored
    /// --nocapture`; about 50 ms in a release build).
    #[test]
    #[ignore]
    fn bench_header_100k() {
        let ts = many(100_000);
        let t0 = std::time::Instant::now();
        let l = Layout::build(records(&ts)).unwrap();
        let dt = t0.elapsed();
        println!(
            "safetensors header for 100,000 tensors: {} bytes in {:.1} ms",
            l.header().len(),
            dt.as_secs_f64() * 1e3
        );
    }
}
