//! The protobuf messages of TensorFlow's files, generated from `proto/` by `build.rs` (prost).
#![allow(clippy::all)]
// The generated messages carry the comments of `proto/` where it has them, not a doc for every
// message, field and variant: the crate's `missing_docs` is not asked of generated code.
#![allow(missing_docs)]
include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));

impl TensorShapeProto {
    /// A shape of `dims` exactly as given (negative or huge dims are kept, for tests that
    /// write hostile shapes).
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn of_dims(dims: &[i64]) -> TensorShapeProto {
        TensorShapeProto {
            dim: dims
                .iter()
                .map(|&size| tensor_shape_proto::Dim {
                    size,
                    name: String::new(),
                })
                .collect(),
            unknown_rank: false,
        }
    }
}
