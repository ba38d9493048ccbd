//! The meta entry of a V1 table (key `""`, tf-format.md §7, §10.23): a `SavedTensorSlices` whose
//! `meta` lists every tensor saved in the file with its name, shape, dtype and saved slices.
//!
//! A malformed message fails the whole file; a tensor whose shape, dtype or slices make no sense
//! is kept with its error, so only that tensor fails.

use prost::Message;

use crate::formats::v1::table::encoding::encoding;
use crate::parse::bundle::{parse_shape, MAX_RANK, MAX_SLICES};
use crate::parse::dtype::DType;
use crate::parse::slice_key::{Extent, FULL};
use crate::parse::wire::{LEN, VARINT};
use crate::parse::{wire, FormatError, Result};
use crate::proto::tensor_slice_proto::extent::HasLength;
use crate::proto::{TensorShapeProto, TensorSliceProto, VersionDef};

/// One `SavedSliceMeta`: a tensor and the slices of it this file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetaTensor {
    pub(crate) name: Vec<u8>,
    pub(crate) dtype: DType,
    /// The full tensor's shape (empty if it could not be read; see `error`).
    pub(crate) shape: Vec<u64>,
    /// The saved slices, one extent per dimension (`length == -1`: the whole dimension).
    pub(crate) slices: Vec<Vec<Extent>>,
    /// Why this tensor cannot be served, if it cannot.
    pub(crate) error: Option<FormatError>,
}

fn proto_err(msg: &str) -> FormatError {
    FormatError::Proto(msg.to_string())
}

/// Parses the value of the `""` entry. An error if it is not a `SavedTensorSlices` with a `meta`,
/// or if its versions say it was written for a newer reader.
pub(crate) fn parse_meta(value: &[u8]) -> Result<Vec<MetaTensor>> {
    let mut metas = 0usize;
    let mut out = Vec::new();
    for f in wire::fields(value) {
        let f = f?;
        match (f.number, f.wire) {
            (1, LEN) => {
                metas += 1;
                parse_slice_meta(value, f.payload_range(), &mut out)?;
            }
            (1, _) => return Err(super::not_v1("meta is not a message")),
            _ => {}
        }
    }
    if metas == 0 {
        return Err(super::not_v1("no meta in the entry under the empty key"));
    }
    Ok(out)
}

/// `SavedTensorSliceMeta`: tensors (1) and versions (2).
fn parse_slice_meta(
    buf: &[u8],
    range: std::ops::Range<usize>,
    out: &mut Vec<MetaTensor>,
) -> Result<()> {
    for f in wire::fields_in(buf, range) {
        let f = f?;
        match (f.number, f.wire) {
            (1, LEN) => out.push(parse_tensor(&buf[f.payload_range()])?),
            (2, LEN) => check_versions(&VersionDef::decode(&buf[f.payload_range()])?)?,
            (1 | 2, _) => return Err(proto_err("SavedTensorSliceMeta field of the wrong type")),
            _ => {}
        }
    }
    Ok(())
}

/// TensorFlow's checkpoint versions: producer 1, readable by consumers from 0 on.
fn check_versions(v: &VersionDef) -> Result<()> {
    if v.producer < 0 || v.min_consumer > 1 || v.bad_consumers.contains(&1) {
        return Err(FormatError::Version(format!(
            "producer {}, min_consumer {}, bad_consumers {:?}",
            v.producer, v.min_consumer, v.bad_consumers
        )));
    }
    Ok(())
}

/// `SavedSliceMeta`: name (1), shape (2), type (3), slices (4).
fn parse_tensor(buf: &[u8]) -> Result<MetaTensor> {
    let mut name: &[u8] = b"";
    let mut shape = TensorShapeProto::default();
    let mut dtype = 0i32;
    let mut slices = Vec::new();
    let mut too_many = false;
    for f in wire::fields(buf) {
        let f = f?;
        match (f.number, f.wire) {
            (1, LEN) => name = &buf[f.payload_range()],
            // Occurrences of a message field merge, as protobuf parsers do.
            (2, LEN) => shape.merge(&buf[f.payload_range()])?,
            // An enum is an int32: the low 32 bits of the varint.
            (3, VARINT) => dtype = f.value as i32,
            (4, LEN) => {
                if slices.len() < MAX_SLICES {
                    slices.push(TensorSliceProto::decode(&buf[f.payload_range()])?);
                } else {
                    too_many = true;
                }
            }
            (1..=4, _) => return Err(proto_err("SavedSliceMeta field of the wrong type")),
            _ => {}
        }
    }
    let mut t = MetaTensor {
        name: name.to_vec(),
        dtype: DType(dtype),
        shape: Vec::new(),
        slices: Vec::new(),
        error: None,
    };
    let checked = (|| {
        let dims = parse_shape(Some(&shape))?;
        if too_many {
            return Err(FormatError::BadEntry(format!(
                "more than {MAX_SLICES} slices"
            )));
        }
        if slices.is_empty() {
            return Err(FormatError::BadEntry("no saved slices".into()));
        }
        let exts = slices
            .iter()
            .map(|s| extents(s, &dims))
            .collect::<Result<Vec<_>>>()?;
        if encoding(t.dtype).is_none() {
            return Err(FormatError::BadEntry(format!(
                "dtype {} cannot be read from a V1 checkpoint",
                t.dtype.display_name()
            )));
        }
        Ok((dims, exts))
    })();
    match checked {
        Ok((dims, exts)) => {
            t.shape = dims;
            t.slices = exts;
        }
        Err(e) => t.error = Some(e),
    }
    Ok(t)
}

/// A slice's extents, checked against the tensor's shape (TensorFlow's `TensorSlice` rules: an
/// extent without a length, or with length -1, is the whole dimension).
pub(crate) fn extents(s: &TensorSliceProto, shape: &[u64]) -> Result<Vec<Extent>> {
    if s.extent.len() != shape.len() || s.extent.len() > MAX_RANK {
        return Err(FormatError::BadEntry(
            "slice rank differs from the shape".into(),
        ));
    }
    s.extent
        .iter()
        .zip(shape)
        .map(|(x, &dim)| match x.has_length {
            None | Some(HasLength::Length(-1)) => Ok(FULL),
            Some(HasLength::Length(length)) => {
                let end = x.start.checked_add(length);
                if x.start < 0 || length < 0 || end.is_none_or(|e| e as u64 > dim) {
                    return Err(FormatError::BadEntry("slice outside the shape".into()));
                }
                Ok(Extent {
                    start: x.start,
                    length,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tensor_slice_proto::Extent as ProtoExtent;

    fn field(n: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::parse::varint::encode_u64(((n as u64) << 3) | 2, &mut out);
        crate::parse::varint::encode_u64(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn tensor(
        name: &[u8],
        dims: &[i64],
        dtype: i32,
        slices: &[Vec<(i64, Option<i64>)>],
    ) -> Vec<u8> {
        let mut t = field(1, name);
        let shape = TensorShapeProto::of_dims(dims);
        t.extend(field(2, &shape.encode_to_vec()));
        t.extend([0x18]);
        crate::parse::varint::encode_u64(dtype as i64 as u64, &mut t);
        for s in slices {
            let p = TensorSliceProto {
                extent: s
                    .iter()
                    .map(|&(start, l)| ProtoExtent {
                        start,
                        has_length: l.map(HasLength::Length),
                    })
                    .collect(),
            };
            t.extend(field(4, &p.encode_to_vec()));
        }
        t
    }

    fn meta(tensors: &[Vec<u8>]) -> Vec<u8> {
        let inner: Vec<u8> = tensors.iter().flat_map(|t| field(1, t)).collect();
        field(1, &inner)
    }

    #[test]
    fn parses_tensors_and_keeps_per_tensor_errors() {
        let m = meta(&[
            tensor(
                b"w",
                &[4, 3],
                1,
                &[
                    vec![(0, Some(2)), (0, None)],
                    vec![(2, Some(2)), (0, Some(-1))],
                ],
            ),
            tensor(b"s", &[], 7, &[vec![]]),
            tensor(b"neg", &[-1], 1, &[vec![(0, None)]]),
            tensor(b"out", &[4], 1, &[vec![(3, Some(2))]]),
            tensor(b"none", &[4], 1, &[]),
            tensor(b"bf", &[4], 99, &[vec![(0, None)]]),
            tensor(b"rank", &[4], 1, &[vec![(0, None), (0, None)]]),
        ]);
        let t = parse_meta(&m).unwrap();
        assert_eq!(t.len(), 7);
        assert_eq!(t[0].name, b"w");
        assert_eq!(t[0].shape, vec![4, 3]);
        assert_eq!(
            t[0].slices,
            vec![
                vec![
                    Extent {
                        start: 0,
                        length: 2
                    },
                    FULL
                ],
                vec![
                    Extent {
                        start: 2,
                        length: 2
                    },
                    FULL
                ]
            ]
        );
        assert_eq!(t[0].error, None);
        assert_eq!(
            (t[1].shape.len(), t[1].slices.len(), &t[1].error),
            (0, 1, &None)
        );
        for bad in &t[2..] {
            assert!(bad.error.is_some(), "{:?}", bad.name);
        }
    }

    #[test]
    fn rejects_what_is_not_a_v1_meta() {
        // A V2 bundle header: field 1 is a varint (num_shards).
        assert!(matches!(
            parse_meta(&[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]),
            Err(FormatError::Format(m)) if m.starts_with("not a V1 checkpoint")
        ));
        assert!(
            matches!(parse_meta(&[]), Err(FormatError::Format(m)) if m.starts_with("not a V1 checkpoint"))
        );
        // Newer consumers only.
        let v = VersionDef {
            producer: 1,
            min_consumer: 5,
            bad_consumers: vec![],
        };
        let m = field(1, &field(2, &v.encode_to_vec()));
        assert!(matches!(parse_meta(&m), Err(FormatError::Version(_))));
        let ok = VersionDef {
            producer: 1,
            min_consumer: 0,
            bad_consumers: vec![],
        };
        assert_eq!(
            parse_meta(&field(1, &field(2, &ok.encode_to_vec()))).unwrap(),
            vec![]
        );
        // Truncations are errors, not panics.
        let m = meta(&[tensor(b"w", &[4, 3], 1, &[vec![(0, None), (0, None)]])]);
        for cut in 0..m.len() {
            let _ = parse_meta(&m[..cut]);
        }
        // Absurd lengths.
        assert!(parse_meta(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
