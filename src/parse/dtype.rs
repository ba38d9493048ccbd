//! TensorFlow's DataType enum (tf-format.md §8): the one table of what tfmount knows of each
//! dtype — names, element sizes and kinds, numpy and safetensors equivalents, TensorProto fields.

/// A `DataType` value as stored; unknown values are kept, not rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(pub i32);

/// `DT_STRING`: variable-length byte strings.
pub const DT_STRING: DType = DType(7);
pub(crate) const DT_VARIANT: DType = DType(21);

/// What one element is, as tfmount's `.bin` holds it (row-major, little-endian, one element per
/// byte for the sub-byte types, the value in the low bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    /// Two's-complement (`signed`) or unsigned integers of `size` bytes (also the quantized
    /// types, which store their integer).
    Int {
        size: u8,
        signed: bool,
    },
    /// int4/uint4/int2/uint2: one element per byte, `bits` low bits of it.
    SubByte {
        bits: u8,
        signed: bool,
    },
    /// One byte, 0 or 1.
    Bool,
    /// IEEE binary32 / binary64.
    F32,
    F64,
    /// bfloat16: the high half of a float32.
    BF16,
    /// IEEE binary16.
    F16,
    /// The float8 formats and float4_e2m1fn (one byte each).
    Float8(F8),
    Float4E2M1FN,
    /// Pairs of float32 / float64 (real, imaginary).
    Complex64,
    Complex128,
    /// tfmount's string layout: per element an 8-byte length, then the bytes.
    String,
    /// Not numbers: resource handles and variants, served as stored.
    Opaque,
}

/// The float8 formats (ml_dtypes' names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum F8 {
    E5M2,
    E4M3FN,
    E4M3FNUZ,
    E4M3B11FNUZ,
    E5M2FNUZ,
}

/// One dtype and everything tfmount knows of it, one column per use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    /// The `DataType` enum value.
    pub(crate) value: i32,
    /// `tf.as_dtype(x).name`.
    pub(crate) name: &'static str,
    /// Bytes per element of memcpy-able types; 0 for string, resource and variant.
    pub(crate) size: usize,
    /// numpy's `descr`, for dtypes numpy holds natively (the ones that get an `.npy` view).
    pub(crate) npy: Option<&'static str>,
    /// The safetensors dtype, where the format has a bit-identical one.
    pub(crate) safetensors: Option<&'static str>,
    pub(crate) elem: Elem,
    /// The `TensorProto` field holding its values when not in `tensor_content` (graph
    /// constants, V1 checkpoints).
    pub(crate) proto_field: u32,
}

/// `TensorProto` field numbers (tf-format.md).
pub(crate) mod field {
    pub(crate) const HALF: u32 = 13;
    pub(crate) const FLOAT: u32 = 5;
    pub(crate) const DOUBLE: u32 = 6;
    pub(crate) const INT: u32 = 7;
    pub(crate) const STRING: u32 = 8;
    pub(crate) const SCOMPLEX: u32 = 9;
    pub(crate) const INT64: u32 = 10;
    pub(crate) const BOOL: u32 = 11;
    pub(crate) const DCOMPLEX: u32 = 12;
    pub(crate) const RESOURCE: u32 = 14;
    pub(crate) const VARIANT: u32 = 15;
    pub(crate) const UINT32: u32 = 16;
    pub(crate) const UINT64: u32 = 17;
    pub(crate) const FLOAT8: u32 = 18;
}

const fn row(
    value: i32,
    name: &'static str,
    size: usize,
    npy: Option<&'static str>,
    safetensors: Option<&'static str>,
    elem: Elem,
    proto_field: u32,
) -> Row {
    Row {
        value,
        name,
        size,
        npy,
        safetensors,
        elem,
        proto_field,
    }
}

const fn int(size: u8, signed: bool) -> Elem {
    Elem::Int { size, signed }
}

use field as f;

/// Every dtype a bundle can hold. The one table: names, sizes, numpy, safetensors, element
/// kinds and TensorProto fields are read from here and nowhere else.
pub(crate) const TABLE: &[Row] = &[
    row(
        1,
        "float32",
        4,
        Some("<f4"),
        Some("F32"),
        Elem::F32,
        f::FLOAT,
    ),
    row(
        2,
        "float64",
        8,
        Some("<f8"),
        Some("F64"),
        Elem::F64,
        f::DOUBLE,
    ),
    row(
        3,
        "int32",
        4,
        Some("<i4"),
        Some("I32"),
        int(4, true),
        f::INT,
    ),
    row(
        4,
        "uint8",
        1,
        Some("|u1"),
        Some("U8"),
        int(1, false),
        f::INT,
    ),
    row(
        5,
        "int16",
        2,
        Some("<i2"),
        Some("I16"),
        int(2, true),
        f::INT,
    ),
    row(6, "int8", 1, Some("|i1"), Some("I8"), int(1, true), f::INT),
    row(7, "string", 0, None, None, Elem::String, f::STRING),
    row(
        8,
        "complex64",
        8,
        Some("<c8"),
        Some("C64"),
        Elem::Complex64,
        f::SCOMPLEX,
    ),
    row(
        9,
        "int64",
        8,
        Some("<i8"),
        Some("I64"),
        int(8, true),
        f::INT64,
    ),
    row(
        10,
        "bool",
        1,
        Some("|b1"),
        Some("BOOL"),
        Elem::Bool,
        f::BOOL,
    ),
    row(11, "qint8", 1, None, None, int(1, true), f::INT),
    row(12, "quint8", 1, None, None, int(1, false), f::INT),
    row(13, "qint32", 4, None, None, int(4, true), f::INT),
    row(14, "bfloat16", 2, None, Some("BF16"), Elem::BF16, f::HALF),
    row(15, "qint16", 2, None, None, int(2, true), f::INT),
    row(16, "quint16", 2, None, None, int(2, false), f::INT),
    row(
        17,
        "uint16",
        2,
        Some("<u2"),
        Some("U16"),
        int(2, false),
        f::INT,
    ),
    row(
        18,
        "complex128",
        16,
        Some("<c16"),
        None,
        Elem::Complex128,
        f::DCOMPLEX,
    ),
    row(
        19,
        "float16",
        2,
        Some("<f2"),
        Some("F16"),
        Elem::F16,
        f::HALF,
    ),
    row(20, "resource", 0, None, None, Elem::Opaque, f::RESOURCE),
    row(21, "variant", 0, None, None, Elem::Opaque, f::VARIANT),
    row(
        22,
        "uint32",
        4,
        Some("<u4"),
        Some("U32"),
        int(4, false),
        f::UINT32,
    ),
    row(
        23,
        "uint64",
        8,
        Some("<u8"),
        Some("U64"),
        int(8, false),
        f::UINT64,
    ),
    row(
        24,
        "float8_e5m2",
        1,
        None,
        Some("F8_E5M2"),
        Elem::Float8(F8::E5M2),
        f::FLOAT8,
    ),
    row(
        25,
        "float8_e4m3fn",
        1,
        None,
        Some("F8_E4M3"),
        Elem::Float8(F8::E4M3FN),
        f::FLOAT8,
    ),
    row(
        26,
        "float8_e4m3fnuz",
        1,
        None,
        Some("F8_E4M3FNUZ"),
        Elem::Float8(F8::E4M3FNUZ),
        f::FLOAT8,
    ),
    row(
        27,
        "float8_e4m3b11fnuz",
        1,
        None,
        None,
        Elem::Float8(F8::E4M3B11FNUZ),
        f::FLOAT8,
    ),
    row(
        28,
        "float8_e5m2fnuz",
        1,
        None,
        Some("F8_E5M2FNUZ"),
        Elem::Float8(F8::E5M2FNUZ),
        f::FLOAT8,
    ),
    row(
        29,
        "int4",
        1,
        None,
        None,
        Elem::SubByte {
            bits: 4,
            signed: true,
        },
        f::INT,
    ),
    row(
        30,
        "uint4",
        1,
        None,
        None,
        Elem::SubByte {
            bits: 4,
            signed: false,
        },
        f::INT,
    ),
    row(
        31,
        "int2",
        1,
        None,
        None,
        Elem::SubByte {
            bits: 2,
            signed: true,
        },
        f::INT,
    ),
    row(
        32,
        "uint2",
        1,
        None,
        None,
        Elem::SubByte {
            bits: 2,
            signed: false,
        },
        f::INT,
    ),
    row(
        33,
        "float4_e2m1fn",
        1,
        None,
        None,
        Elem::Float4E2M1FN,
        f::FLOAT8,
    ),
];

impl DType {
    /// The dtype's row of [`TABLE`]; `None` for values this build does not know.
    pub(crate) fn row(self) -> Option<&'static Row> {
        TABLE.iter().find(|r| r.value == self.0)
    }

    /// The dtype named `name` (`tf.as_dtype(name)`), e.g. from another format's metadata.
    pub(crate) fn from_name(name: &str) -> Option<DType> {
        TABLE
            .iter()
            .find(|r| r.name == name)
            .map(|r| DType(r.value))
    }

    /// The dtype whose numpy `descr` is `code` after its byte-order character (`f4` for
    /// `<f4`, `u1` for `|u1`): the reverse of [`DType::npy_descr`], for formats that name
    /// dtypes as numpy does (zarr).
    pub(crate) fn from_npy_code(code: &str) -> Option<DType> {
        TABLE
            .iter()
            .find(|r| r.npy.and_then(|d| d.get(1..)) == Some(code))
            .map(|r| DType(r.value))
    }

    /// TensorFlow's name (`tf.as_dtype(x).name`); `None` for values this build does not know.
    pub(crate) fn tf_name(self) -> Option<&'static str> {
        self.row().map(|r| r.name)
    }

    /// The name shown in `.dtype` files: TF's name, or `invalid` / `unknown_<n>`.
    pub fn display_name(self) -> String {
        match (self.0, self.tf_name()) {
            (0, _) => "invalid".to_string(),
            (101..=132, _) => match DType(self.0 - 100).tf_name() {
                Some(n) => format!("{n}_ref"),
                None => format!("unknown_{}", self.0),
            },
            (_, Some(n)) => n.to_string(),
            (v, None) => format!("unknown_{v}"),
        }
    }

    /// Bytes per element for memcpy-able ("POD") dtypes; `None` for string, variant, resource
    /// and unknown values.
    pub fn elem_size(self) -> Option<usize> {
        self.row().map(|r| r.size).filter(|&s| s > 0)
    }

    /// numpy's `descr` for dtypes numpy holds natively (the ones that get an `.npy` view).
    pub(crate) fn npy_descr(self) -> Option<&'static str> {
        self.row().and_then(|r| r.npy)
    }

    /// The safetensors dtype name, for dtypes safetensors holds bit for bit.
    pub(crate) fn safetensors_name(self) -> Option<&'static str> {
        self.row().and_then(|r| r.safetensors)
    }

    /// What one element is; `None` for unknown values.
    pub(crate) fn elem(self) -> Option<Elem> {
        self.row().map(|r| r.elem)
    }

    /// The `TensorProto` field that holds its values outside `tensor_content`.
    pub(crate) fn proto_field(self) -> Option<u32> {
        self.row().map(|r| r.proto_field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert_eq!(DType(1).tf_name(), Some("float32"));
        assert_eq!(DType(19).display_name(), "float16");
        assert_eq!(DType(14).elem_size(), Some(2));
        assert_eq!(DType(14).npy_descr(), None);
        assert_eq!(DT_STRING.elem_size(), None);
        assert_eq!(DType(99).display_name(), "unknown_99");
        assert_eq!(DType(101).display_name(), "float32_ref");
        assert_eq!(DType(0).elem_size(), None);
        // Every value 1..=33 is known, and names are unique.
        let mut names: Vec<_> = (1..=33).map(|v| DType(v).tf_name().unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 33);
    }

    /// The columns of a row agree: the element kind's size is the row's size, numpy and
    /// safetensors names only for dtypes whose bytes they hold as they are, names round-trip.
    #[test]
    fn columns_agree() {
        for r in TABLE {
            let d = DType(r.value);
            assert_eq!(DType::from_name(r.name), Some(d));
            let elem_size = match r.elem {
                Elem::Int { size, .. } => size as usize,
                Elem::SubByte { .. } | Elem::Bool | Elem::Float8(_) | Elem::Float4E2M1FN => 1,
                Elem::F32 => 4,
                Elem::F64 | Elem::Complex64 => 8,
                Elem::BF16 | Elem::F16 => 2,
                Elem::Complex128 => 16,
                Elem::String | Elem::Opaque => 0,
            };
            assert_eq!(elem_size, r.size, "{}", r.name);
            if r.npy.is_some() || r.safetensors.is_some() {
                assert!(r.size > 0, "{}", r.name);
            }
            if let Some(n) = r.npy {
                let bytes: usize = n[2..].parse().expect("descr size");
                assert_eq!(bytes, r.size, "{}", r.name);
            }
        }
        assert_eq!(DType::from_name("bfloat16"), Some(DType(14)));
        // Every numpy descr of the table names its row back (zarr's dtypes).
        for r in TABLE {
            if let Some(d) = r.npy {
                assert_eq!(DType::from_npy_code(&d[1..]), Some(DType(r.value)), "{d}");
            }
        }
        assert_eq!(DType::from_npy_code("f4"), Some(DType(1)));
        assert_eq!(DType::from_npy_code("U4"), None);
        assert_eq!(DType::from_name("float33"), None);
    }
}
