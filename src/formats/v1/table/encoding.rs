//! How a V1 checkpoint stores each dtype's values in a TensorProto (TensorFlow's
//! `SaveTypeTraits`): the typed field, its wire kind, values per element and served width.

use crate::parse::dtype::DType;

/// How a value is stored in the typed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Fixed32,
    Fixed64,
    /// Varint, served as its low `width` bytes (two's complement).
    Varint,
    /// Varint, served as one byte: 1 if non-zero.
    Bool,
    /// Length-delimited bytes (`string_val`), one occurrence per element.
    Bytes,
}

/// Where a dtype's values are in a TensorProto, and how they are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Encoding {
    /// Number of the typed repeated field.
    pub(crate) field: u32,
    pub(crate) kind: Kind,
    /// Stored values per element (2 for complex: re, im).
    pub(crate) per_elem: u64,
    /// Served bytes per value (0 for strings).
    pub(crate) width: u64,
}

/// The encoding of `dtype`'s values in a V1 checkpoint (TensorFlow's `SaveTypeTraits`), or `None`
/// for dtypes V1 cannot hold. bfloat16, uint32 and uint64, which TensorFlow's V1 writer refuses,
/// are read from `half_val`, `uint32_val` and `uint64_val` as a TensorProto holds them.
pub(crate) fn encoding(dtype: DType) -> Option<Encoding> {
    use crate::parse::dtype::{field as f, Elem};
    let row = dtype.row()?;
    // TensorFlow's V1 writer saves no sub-byte types (their int_val holds whole ints).
    if matches!(row.elem, Elem::SubByte { .. }) {
        return None;
    }
    let field = row.proto_field;
    let kind = match field {
        f::FLOAT | f::SCOMPLEX => Kind::Fixed32,
        f::DOUBLE | f::DCOMPLEX => Kind::Fixed64,
        f::INT | f::INT64 | f::HALF | f::UINT32 | f::UINT64 => Kind::Varint,
        f::BOOL => Kind::Bool,
        f::STRING => Kind::Bytes,
        // resource handles, variants, float8_val (one bytes field for all values)
        _ => return None,
    };
    // Complex values are stored as (real, imaginary) pairs of their part's type.
    let per_elem = if matches!(field, f::SCOMPLEX | f::DCOMPLEX) {
        2
    } else {
        1
    };
    Some(Encoding {
        field,
        kind,
        per_elem,
        width: row.size as u64 / per_elem,
    })
}
