//! Tensor values held in a `TensorProto` (tf-format.md §10.11), served in the tensor layout:
//! `tensor_content` as stored, or the typed `*_val` list expanded element by element (fewer values
//! than elements repeat the last one: the shorthand TensorFlow uses for splat constants; none
//! means zeros). Nothing is expanded in memory: bytes are generated for the range a read asks for.

use prost::Message;

use super::{FormatError, Result};
use crate::parse::dtype::{DType, DT_STRING};
use crate::parse::varint::decode_u32;
use crate::parse::wire;
use crate::parse::wire::LEN;
use crate::proto::{TensorProto, TensorShapeProto};

/// Most bytes of typed values kept per constant (they are bounded by the proto's own size; this
/// only guards the conversion of packed values to element bytes).
const MAX_TYPED_BYTES: usize = 1 << 30;

/// The elements of a constant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Elems {
    /// Fixed-size elements: `vals` holds `m` encoded elements; element `i` is `min(i, m-1)`.
    Fixed { vals: Vec<u8>, size: usize },
    /// Raw `tensor_content` bytes: a range of the buffer the proto came from.
    Content { start: usize, len: usize },
    /// Strings; element `i` is `elems[min(i, m-1)]`. `ends[k]` = served end of element `k`.
    Strings { elems: Vec<Vec<u8>>, ends: Vec<u64> },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConstTensor {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// Number of elements.
    pub(crate) n: u64,
    pub(crate) elems: Elems,
}

fn bad(msg: impl Into<String>) -> FormatError {
    FormatError::BadEntry(msg.into())
}

fn shape_of(s: &TensorShapeProto) -> Result<(Vec<u64>, u64)> {
    if s.unknown_rank {
        return Err(bad("shape of unknown rank"));
    }
    let mut n: u64 = 1;
    let mut dims = Vec::with_capacity(s.dim.len().min(64));
    for d in &s.dim {
        let d = u64::try_from(d.size).map_err(|_| bad(format!("dimension {}", d.size)))?;
        n = n
            .checked_mul(d)
            .ok_or_else(|| bad("element count overflows"))?;
        dims.push(d);
    }
    Ok((dims, n))
}

/// Typed values as encoded elements (little-endian, `size` bytes each).
fn typed(p: &TensorProto, dtype: DType) -> Result<(Vec<u8>, usize)> {
    fn pack<T: Copy>(vals: &[T], size: usize, enc: impl Fn(T, &mut Vec<u8>)) -> Result<Vec<u8>> {
        if vals.len().saturating_mul(size) > MAX_TYPED_BYTES {
            return Err(bad("too many typed values"));
        }
        let mut out = Vec::with_capacity(vals.len() * size);
        for &v in vals {
            enc(v, &mut out);
        }
        Ok(out)
    }
    let size = dtype
        .elem_size()
        .ok_or_else(|| bad(format!("no values of dtype {}", dtype.display_name())))?;
    let ints = |size: usize| {
        pack(&p.int_val, size, move |v, o| {
            o.extend_from_slice(&v.to_le_bytes()[..size])
        })
    };
    use crate::parse::dtype::{field as f, Elem};
    let vals = match (dtype.proto_field(), dtype.elem()) {
        (Some(f::FLOAT), _) => pack(&p.float_val, 4, |v, o| {
            o.extend_from_slice(&v.to_le_bytes())
        })?,
        (Some(f::DOUBLE), _) => pack(&p.double_val, 8, |v, o| {
            o.extend_from_slice(&v.to_le_bytes())
        })?,
        // int4/uint4 and int2/uint2: one element per byte, the value in the low bits (as
        // checkpoints store them)
        (Some(f::INT), Some(Elem::SubByte { bits, .. })) => {
            let mask = (1u8 << bits) - 1;
            pack(&p.int_val, 1, move |v, o| o.push(v as u8 & mask))?
        }
        // int32, uint8, int16, int8, qint8, quint8, qint32, qint16, quint16, uint16
        (Some(f::INT), _) => ints(size)?,
        (Some(f::INT64), _) => pack(&p.int64_val, 8, |v, o| {
            o.extend_from_slice(&v.to_le_bytes())
        })?,
        (Some(f::BOOL), _) => pack(&p.bool_val, 1, |v, o| o.push(v as u8))?,
        (Some(f::HALF), _) => pack(&p.half_val, 2, |v, o| {
            o.extend_from_slice(&(v as u16).to_le_bytes())
        })?,
        (Some(f::UINT32), _) => pack(&p.uint32_val, 4, |v, o| {
            o.extend_from_slice(&v.to_le_bytes())
        })?,
        (Some(f::UINT64), _) => pack(&p.uint64_val, 8, |v, o| {
            o.extend_from_slice(&v.to_le_bytes())
        })?,
        (Some(f::SCOMPLEX), _) => {
            let v = pack(&p.scomplex_val, 4, |v, o| {
                o.extend_from_slice(&v.to_le_bytes())
            })?;
            let whole = v.len() / 8 * 8;
            v[..whole].to_vec()
        }
        (Some(f::DCOMPLEX), _) => {
            let v = pack(&p.dcomplex_val, 8, |v, o| {
                o.extend_from_slice(&v.to_le_bytes())
            })?;
            let whole = v.len() / 16 * 16;
            v[..whole].to_vec()
        }
        (Some(f::FLOAT8), _) => p.float8_val.clone(),
        _ => {
            return Err(bad(format!(
                "constants of dtype {} are not served",
                dtype.display_name()
            )))
        }
    };
    Ok((vals, size))
}

fn string_ends(elems: &[Vec<u8>]) -> Vec<u64> {
    let mut end = 0u64;
    elems
        .iter()
        .map(|e| {
            end += 8 + e.len() as u64;
            end
        })
        .collect()
}

/// Decodes `tensor_content` of a string tensor: `n` varint32 lengths, then the bytes.
fn content_strings(c: &[u8], n: u64) -> Result<Vec<Vec<u8>>> {
    let mut pos = 0usize;
    let mut lens = Vec::new();
    for _ in 0..n {
        let (l, used) = decode_u32(&c[pos..]).ok_or_else(|| bad("string lengths truncated"))?;
        pos += used;
        lens.push(l as usize);
    }
    let mut out = Vec::with_capacity(lens.len());
    for l in lens {
        let e = c
            .get(pos..pos.saturating_add(l))
            .ok_or_else(|| bad("string bytes truncated"))?;
        out.push(e.to_vec());
        pos += l;
    }
    if pos != c.len() {
        return Err(bad("string tensor_content has trailing bytes"));
    }
    Ok(out)
}

impl ConstTensor {
    /// Parses the TensorProto `buf[range]`; `Elems::Content` ranges point into `buf`.
    pub(crate) fn parse(buf: &[u8], range: std::ops::Range<usize>) -> Result<ConstTensor> {
        // tensor_content (field 4) stays where it is; everything else is small enough to decode.
        let mut content = None;
        let mut rest = Vec::new();
        for f in wire::fields_in(buf, range) {
            let f = f?;
            if f.number == 4 && f.wire == LEN {
                content = Some(f.payload_range());
            } else {
                rest.extend_from_slice(&buf[f.start..f.end]);
            }
        }
        let p = TensorProto::decode(rest.as_slice())?;
        let dtype = DType(p.dtype);
        let (shape, n) = shape_of(&p.tensor_shape.clone().unwrap_or_default())?;
        let content = content.filter(|c| !c.is_empty());
        let elems = if dtype == DT_STRING {
            let elems = match content {
                Some(c) => content_strings(&buf[c], n)?,
                None if p.string_val.is_empty() => vec![Vec::new()],
                None => p.string_val,
            };
            let ends = string_ends(&elems);
            Elems::Strings { elems, ends }
        } else if let Some(c) = content {
            let size = dtype
                .elem_size()
                .ok_or_else(|| bad(format!("no values of dtype {}", dtype.display_name())))?;
            if Some(c.len() as u64) != n.checked_mul(size as u64) {
                return Err(bad(format!(
                    "tensor_content holds {} bytes, the shape needs {n} elements of {size}",
                    c.len()
                )));
            }
            Elems::Content {
                start: c.start,
                len: c.len(),
            }
        } else {
            let (mut vals, size) = typed(&p, dtype)?;
            if vals.is_empty() {
                vals = vec![0; size];
            }
            Elems::Fixed { vals, size }
        };
        Ok(ConstTensor {
            dtype,
            shape,
            n,
            elems,
        })
    }

    /// Bytes of the `.bin` file.
    pub(crate) fn served_size(&self) -> u64 {
        match &self.elems {
            Elems::Fixed { size, .. } => self.n.saturating_mul(*size as u64),
            Elems::Content { len, .. } => *len as u64,
            Elems::Strings { elems, ends } => {
                let m = elems.len() as u64;
                if self.n == 0 || m == 0 {
                    return 0;
                }
                if self.n <= m {
                    return ends[self.n as usize - 1];
                }
                let last = 8 + elems[elems.len() - 1].len() as u64;
                ends[elems.len() - 1].saturating_add((self.n - m).saturating_mul(last))
            }
        }
    }

    /// The `.bin` bytes `[offset, offset+len)`; `buf` is the buffer `parse` saw.
    pub(crate) fn read(&self, buf: &[u8], offset: u64, len: usize) -> Vec<u8> {
        let total = self.served_size();
        if offset >= total {
            return Vec::new();
        }
        let want = (total - offset).min(len as u64) as usize;
        let mut out = Vec::with_capacity(want);
        match &self.elems {
            Elems::Content { start, len: clen } => {
                let a = start + offset as usize;
                let b = (a + want).min(start + clen);
                out.extend_from_slice(buf.get(a..b).unwrap_or(&[]));
            }
            Elems::Fixed { vals, size } => {
                let m = (vals.len() / size) as u64;
                let mut i = offset / *size as u64;
                let mut skip = (offset % *size as u64) as usize;
                while out.len() < want {
                    let k = i.min(m - 1) as usize;
                    let e = &vals[k * size..(k + 1) * size];
                    let take = (want - out.len()).min(size - skip);
                    out.extend_from_slice(&e[skip..skip + take]);
                    skip = 0;
                    i += 1;
                }
            }
            Elems::Strings { elems, ends } => {
                let m = elems.len();
                let last_start = if m > 1 { ends[m - 2] } else { 0 };
                let last_len = 8 + elems[m - 1].len() as u64;
                // The element holding `offset`, and where it starts.
                let (mut i, mut start) = if offset < last_start {
                    let k = ends.partition_point(|&e| e <= offset);
                    (k as u64, if k == 0 { 0 } else { ends[k - 1] })
                } else {
                    let j = (offset - last_start) / last_len;
                    (m as u64 - 1 + j, last_start + j * last_len)
                };
                while out.len() < want {
                    let e = &elems[i.min(m as u64 - 1) as usize];
                    let mut enc = (e.len() as u64).to_le_bytes().to_vec();
                    enc.extend_from_slice(e);
                    let from = (offset + out.len() as u64 - start) as usize;
                    let take = (want - out.len()).min(enc.len() - from);
                    out.extend_from_slice(&enc[from..from + take]);
                    start += enc.len() as u64;
                    i += 1;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(dtype: i32, dims: &[i64], f: impl FnOnce(&mut TensorProto)) -> Vec<u8> {
        let mut p = TensorProto {
            dtype,
            tensor_shape: Some(TensorShapeProto::of_dims(dims)),
            ..Default::default()
        };
        f(&mut p);
        p.encode_to_vec()
    }

    fn all(b: &[u8]) -> Vec<u8> {
        let t = ConstTensor::parse(b, 0..b.len()).unwrap();
        let whole = t.read(b, 0, usize::MAX);
        assert_eq!(whole.len() as u64, t.served_size());
        // Any split of the range gives the same bytes.
        for cut in 0..whole.len() {
            let mut two = t.read(b, 0, cut);
            two.extend(t.read(b, cut as u64, usize::MAX));
            assert_eq!(two, whole, "cut {cut}");
        }
        whole
    }

    #[test]
    fn splat_and_typed_lists() {
        let b = proto(1, &[2, 3], |p| p.float_val = vec![1.5]);
        assert_eq!(all(&b), 1.5f32.to_le_bytes().repeat(6));
        let b = proto(3, &[4], |p| p.int_val = vec![1, 2]);
        let want: Vec<u8> = [1i32, 2, 2, 2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(all(&b), want);
        let b = proto(6, &[3], |p| p.int_val = vec![-1, 5, 7, 9]);
        assert_eq!(all(&b), vec![0xff, 5, 7]);
        let b = proto(29, &[3], |p| p.int_val = vec![-8, 7, -1]);
        assert_eq!(all(&b), vec![0x08, 0x07, 0x0f]);
        let b = proto(19, &[2], |_| {});
        assert_eq!(all(&b), vec![0; 4]);
        let b = proto(8, &[2], |p| p.scomplex_val = vec![1.0, 2.0]);
        let one: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(all(&b), one.repeat(2));
        let b = proto(1, &[], |p| p.float_val = vec![3.0]);
        assert_eq!(all(&b), 3f32.to_le_bytes());
        let b = proto(1, &[0, 5], |p| p.float_val = vec![3.0]);
        assert_eq!(all(&b), Vec::<u8>::new());
    }

    #[test]
    fn content_and_strings() {
        let b = proto(9, &[2], |p| {
            p.tensor_content = [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect()
        });
        assert_eq!(all(&b)[..8], 7i64.to_le_bytes());
        let b = proto(9, &[3], |p| p.tensor_content = vec![0; 16]);
        assert!(ConstTensor::parse(&b, 0..b.len()).is_err());
        let b = proto(7, &[3], |p| {
            p.string_val = vec![b"a\0".to_vec(), b"xyz".to_vec()]
        });
        let mut want = Vec::new();
        for e in [&b"a\0"[..], b"xyz", b"xyz"] {
            want.extend_from_slice(&(e.len() as u64).to_le_bytes());
            want.extend_from_slice(e);
        }
        assert_eq!(all(&b), want);
        let b = proto(7, &[2], |p| p.tensor_content = b"\x01\x02ab\xff".to_vec());
        let mut want = 1u64.to_le_bytes().to_vec();
        want.push(b'a');
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"b\xff");
        assert_eq!(all(&b), want);
        let b = proto(7, &[2], |_| {});
        assert_eq!(all(&b), vec![0; 16]);
    }

    #[test]
    fn hostile_shapes() {
        for dims in [&[-2i64][..], &[i64::MAX, i64::MAX], &[1 << 40, 1 << 40]] {
            let b = proto(1, dims, |p| p.float_val = vec![1.0]);
            assert!(ConstTensor::parse(&b, 0..b.len()).is_err(), "{dims:?}");
        }
        // A huge splat is served lazily: its size is known, nothing is allocated.
        let b = proto(1, &[1 << 40], |p| p.float_val = vec![2.0]);
        let t = ConstTensor::parse(&b, 0..b.len()).unwrap();
        assert_eq!(t.served_size(), 4 << 40);
        assert_eq!(
            t.read(&b, (4 << 40) - 2, 10),
            2f32.to_le_bytes()[2..].to_vec()
        );
        let b = proto(7, &[1 << 40], |p| p.string_val = vec![b"s".to_vec()]);
        let t = ConstTensor::parse(&b, 0..b.len()).unwrap();
        assert_eq!(t.served_size(), 9 << 40);
        assert_eq!(t.read(&b, 9 << 39, 9)[8], b's');
        let b = proto(20, &[1], |_| {});
        assert!(ConstTensor::parse(&b, 0..b.len()).is_err());
    }
}
