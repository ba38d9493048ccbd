//! TensorFlow's DataType enum (tf-format.md §8): names, element sizes, numpy equivalents.

/// A `DataType` value as stored; unknown values are kept, not rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(pub i32);

pub const DT_STRING: DType = DType(7);
pub const DT_VARIANT: DType = DType(21);

/// (value, TensorFlow name, bytes per element for memcpy-able types, numpy `descr`)
const TABLE: &[(i32, &str, usize, Option<&str>)] = &[
    (1, "float32", 4, Some("<f4")),
    (2, "float64", 8, Some("<f8")),
    (3, "int32", 4, Some("<i4")),
    (4, "uint8", 1, Some("|u1")),
    (5, "int16", 2, Some("<i2")),
    (6, "int8", 1, Some("|i1")),
    (7, "string", 0, None),
    (8, "complex64", 8, Some("<c8")),
    (9, "int64", 8, Some("<i8")),
    (10, "bool", 1, Some("|b1")),
    (11, "qint8", 1, None),
    (12, "quint8", 1, None),
    (13, "qint32", 4, None),
    (14, "bfloat16", 2, None),
    (15, "qint16", 2, None),
    (16, "quint16", 2, None),
    (17, "uint16", 2, Some("<u2")),
    (18, "complex128", 16, Some("<c16")),
    (19, "float16", 2, Some("<f2")),
    (20, "resource", 0, None),
    (21, "variant", 0, None),
    (22, "uint32", 4, Some("<u4")),
    (23, "uint64", 8, Some("<u8")),
    (24, "float8_e5m2", 1, None),
    (25, "float8_e4m3fn", 1, None),
    (26, "float8_e4m3fnuz", 1, None),
    (27, "float8_e4m3b11fnuz", 1, None),
    (28, "float8_e5m2fnuz", 1, None),
    (29, "int4", 1, None),
    (30, "uint4", 1, None),
    (31, "int2", 1, None),
    (32, "uint2", 1, None),
    (33, "float4_e2m1fn", 1, None),
];

impl DType {
    fn row(self) -> Option<&'static (i32, &'static str, usize, Option<&'static str>)> {
        TABLE.iter().find(|r| r.0 == self.0)
    }

    /// TensorFlow's name (`tf.as_dtype(x).name`); `None` for values this build does not know.
    pub fn tf_name(self) -> Option<&'static str> {
        self.row().map(|r| r.1)
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
        self.row().map(|r| r.2).filter(|&s| s > 0)
    }

    /// numpy's `descr` for dtypes numpy holds natively (the ones that get an `.npy` view).
    pub fn npy_descr(self) -> Option<&'static str> {
        self.row().and_then(|r| r.3)
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
}
