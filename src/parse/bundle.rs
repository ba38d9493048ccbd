//! Tensor-bundle entries of `.index` files (tf-format.md §3, §5): the header and the
//! per-tensor `BundleEntryProto`, validated so that later arithmetic cannot overflow.

use prost::Message;

use super::{FormatError, Result};
use crate::parse::dtype::{DType, DT_STRING};
use crate::parse::slice_key::Extent;
use crate::proto::{BundleEntryProto, BundleHeaderProto, TensorShapeProto};

/// Ranks above this are refused (TensorFlow's own limit is 254).
pub(crate) const MAX_RANK: usize = 254;
/// Partitioned tensors with more slices than this are refused (overlap checks are quadratic).
pub(crate) const MAX_SLICES: usize = 4096;
/// More shards than this in a header is treated as corruption.
pub const MAX_SHARDS: i32 = 1 << 20;

/// What a bundle's header entry (key `""`) says: the number of data shards and their byte
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub(crate) num_shards: u32,
    pub(crate) big_endian: bool,
}

/// The header entry's value (a `BundleHeaderProto`) checked: a version this reader may read, a
/// sane shard count.
pub fn parse_header(value: &[u8]) -> Result<Header> {
    let h = BundleHeaderProto::decode(value)?;
    if let Some(v) = &h.version {
        if v.producer < 0 || v.min_consumer > 1 || v.bad_consumers.contains(&1) {
            return Err(FormatError::Version(format!(
                "producer {}, min_consumer {}, bad_consumers {:?}",
                v.producer, v.min_consumer, v.bad_consumers
            )));
        }
    }
    if h.num_shards < 1 || h.num_shards > MAX_SHARDS {
        return Err(FormatError::BadEntry(format!(
            "header says {} shards",
            h.num_shards
        )));
    }
    let big_endian = match h.endianness {
        0 => false,
        1 => true,
        e => return Err(FormatError::BadEntry(format!("unknown endianness {e}"))),
    };
    Ok(Header {
        num_shards: h.num_shards as u32,
        big_endian,
    })
}

/// Where a tensor's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Bytes `[offset, offset+size)` of shard `shard`, with the masked CRC-32C TF stored.
    Contiguous {
        /// The data shard's number.
        shard: u32,
        /// Where the bytes start in it.
        offset: u64,
        /// How many there are.
        size: u64,
        /// The masked CRC-32C TensorFlow stored.
        crc: u32,
    },
    /// A partitioned tensor: each slice is stored under its own key (see `slice_key`).
    Sliced(Vec<Vec<Extent>>),
}

/// A tensor's index entry (a `BundleEntryProto`) checked: its dtype, its shape (element count
/// within `i64`), where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The dtype as stored (unknown values kept).
    pub dtype: DType,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// Where the bytes are.
    pub data: Data,
}

impl Entry {
    pub(crate) fn num_elements(&self) -> u64 {
        // Checked when parsed.
        self.shape.iter().product()
    }
}

pub(crate) fn parse_shape(shape: Option<&TensorShapeProto>) -> Result<Vec<u64>> {
    let Some(s) = shape else {
        return Ok(Vec::new());
    };
    if s.unknown_rank {
        return Err(FormatError::BadEntry("shape of unknown rank".into()));
    }
    if s.dim.len() > MAX_RANK {
        return Err(FormatError::BadEntry(format!(
            "rank {} too large",
            s.dim.len()
        )));
    }
    let dims = s
        .dim
        .iter()
        .map(|d| {
            u64::try_from(d.size)
                .map_err(|_| FormatError::BadEntry(format!("negative dimension {}", d.size)))
        })
        .collect::<Result<Vec<u64>>>()?;
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| FormatError::BadEntry("element count overflows".into()))?;
    Ok(dims)
}

/// An index entry's value decoded and checked (sizes that match the shape and dtype, slices
/// inside the shape, no absurd rank or count).
pub fn parse_entry(value: &[u8]) -> Result<Entry> {
    let e = BundleEntryProto::decode(value)?;
    let dtype = DType(e.dtype);
    let shape = parse_shape(e.shape.as_ref())?;
    let n: u64 = shape.iter().product();
    if !e.slices.is_empty() {
        if e.slices.len() > MAX_SLICES {
            return Err(FormatError::BadEntry(format!("{} slices", e.slices.len())));
        }
        let slices = e
            .slices
            .iter()
            .map(|s| {
                if s.extent.len() != shape.len() {
                    return Err(FormatError::BadEntry(
                        "slice rank differs from the shape".into(),
                    ));
                }
                s.extent
                    .iter()
                    .zip(&shape)
                    .map(|(x, &dim)| {
                        let ext = match x.has_length {
                            Some(crate::proto::tensor_slice_proto::extent::HasLength::Length(
                                l,
                            )) => Extent {
                                start: x.start,
                                length: l,
                            },
                            None => Extent {
                                start: 0,
                                length: -1,
                            },
                        };
                        if ext.length >= 0 {
                            let end = ext.start.checked_add(ext.length);
                            if ext.start < 0 || end.is_none_or(|end| end as u64 > dim) {
                                return Err(FormatError::BadEntry(
                                    "slice outside the shape".into(),
                                ));
                            }
                        } else if ext.length != -1 {
                            return Err(FormatError::BadEntry("bad slice length".into()));
                        }
                        Ok(ext)
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok(Entry {
            dtype,
            shape,
            data: Data::Sliced(slices),
        });
    }
    let shard = u32::try_from(e.shard_id)
        .map_err(|_| FormatError::BadEntry(format!("negative shard id {}", e.shard_id)))?;
    let offset = u64::try_from(e.offset)
        .map_err(|_| FormatError::BadEntry(format!("negative offset {}", e.offset)))?;
    let size = u64::try_from(e.size)
        .map_err(|_| FormatError::BadEntry(format!("negative size {}", e.size)))?;
    offset
        .checked_add(size)
        .filter(|&end| end <= i64::MAX as u64)
        .ok_or_else(|| FormatError::BadEntry("offset + size overflows".into()))?;
    if let Some(es) = dtype.elem_size() {
        if n.checked_mul(es as u64) != Some(size) {
            return Err(FormatError::BadEntry(format!(
                "size {size} does not match shape {shape:?} of {}",
                dtype.display_name()
            )));
        }
    } else if dtype == DT_STRING && n.checked_add(4).is_none_or(|min| size < min) {
        return Err(FormatError::BadEntry(format!(
            "string tensor of {n} elements cannot fit in {size} bytes"
        )));
    }
    Ok(Entry {
        dtype,
        shape,
        data: Data::Contiguous {
            shard,
            offset,
            size,
            crc: e.crc32c,
        },
    })
}

/// The number of elements of a slice of `shape`.
pub(crate) fn slice_elements(shape: &[u64], slice: &[Extent]) -> u64 {
    shape
        .iter()
        .zip(slice)
        .map(|(&d, e)| if e.length < 0 { d } else { e.length as u64 })
        .product()
}

/// The shape of a slice (full dims take the tensor's dim).
pub(crate) fn slice_shape(shape: &[u64], slice: &[Extent]) -> Vec<u64> {
    shape
        .iter()
        .zip(slice)
        .map(|(&d, e)| if e.length < 0 { d } else { e.length as u64 })
        .collect()
}

/// Checks that `slices` tile `shape` exactly: no overlaps, and together every element.
pub(crate) fn check_tiling(shape: &[u64], slices: &[Vec<Extent>]) -> Result<()> {
    let range = |e: &Extent, d: u64| -> (u64, u64) {
        if e.length < 0 {
            (0, d)
        } else {
            (e.start as u64, e.start as u64 + e.length as u64)
        }
    };
    for (i, a) in slices.iter().enumerate() {
        for b in &slices[i + 1..] {
            let overlap = a.iter().zip(b).zip(shape).all(|((x, y), &d)| {
                let (xs, xe) = range(x, d);
                let (ys, ye) = range(y, d);
                xs.max(ys) < xe.min(ye)
            });
            if overlap && slice_elements(shape, a) > 0 {
                return Err(FormatError::BadEntry("overlapping slices".into()));
            }
        }
    }
    let total: u128 = slices
        .iter()
        .map(|s| slice_elements(shape, s) as u128)
        .sum();
    let want: u128 = shape.iter().map(|&d| d as u128).product();
    if total != want {
        return Err(FormatError::BadEntry(format!(
            "slices cover {total} of {want} elements"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{TensorShapeProto, VersionDef};

    fn shape(d: &[i64]) -> Option<TensorShapeProto> {
        Some(TensorShapeProto::of_dims(d))
    }

    #[test]
    fn header_example_bytes() {
        let h = parse_header(&[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]).unwrap();
        assert_eq!(
            h,
            Header {
                num_shards: 1,
                big_endian: false
            }
        );
        let bad = BundleHeaderProto {
            num_shards: 1,
            endianness: 0,
            version: Some(VersionDef {
                producer: 1,
                min_consumer: 2,
                bad_consumers: vec![],
            }),
        };
        assert!(parse_header(&bad.encode_to_vec()).is_err());
        let zero = BundleHeaderProto {
            num_shards: 0,
            ..Default::default()
        };
        assert!(parse_header(&zero.encode_to_vec()).is_err());
    }

    #[test]
    fn entry_validation() {
        let ok = BundleEntryProto {
            dtype: 1,
            shape: shape(&[3, 4]),
            size: 48,
            ..Default::default()
        };
        let e = parse_entry(&ok.encode_to_vec()).unwrap();
        assert_eq!(e.shape, vec![3, 4]);
        let wrong_size = BundleEntryProto {
            size: 47,
            ..ok.clone()
        };
        assert!(parse_entry(&wrong_size.encode_to_vec()).is_err());
        let neg = BundleEntryProto {
            shape: shape(&[-1, 4]),
            ..ok.clone()
        };
        assert!(parse_entry(&neg.encode_to_vec()).is_err());
        let overflow = BundleEntryProto {
            shape: shape(&[i64::MAX, i64::MAX]),
            ..ok.clone()
        };
        assert!(parse_entry(&overflow.encode_to_vec()).is_err());
        let neg_off = BundleEntryProto {
            offset: -5,
            ..ok.clone()
        };
        assert!(parse_entry(&neg_off.encode_to_vec()).is_err());
        let past = BundleEntryProto {
            offset: i64::MAX,
            size: 48,
            ..ok
        };
        assert!(parse_entry(&past.encode_to_vec()).is_err());
        let string_too_small = BundleEntryProto {
            dtype: 7,
            shape: shape(&[10]),
            size: 13,
            ..Default::default()
        };
        assert!(parse_entry(&string_too_small.encode_to_vec()).is_err());
        assert!(parse_entry(&[0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn tiling() {
        let full = Extent {
            start: 0,
            length: -1,
        };
        let ex = |s, l| Extent {
            start: s,
            length: l,
        };
        assert!(check_tiling(&[6, 4], &[vec![ex(0, 2), full], vec![ex(2, 4), full]]).is_ok());
        assert!(check_tiling(&[6, 4], &[vec![ex(0, 3), full], vec![ex(2, 4), full]]).is_err());
        assert!(check_tiling(&[6, 4], &[vec![ex(0, 2), full], vec![ex(3, 3), full]]).is_err());
    }
}
