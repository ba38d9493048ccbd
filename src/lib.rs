pub mod proto {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));

    impl TensorShapeProto {
        /// A shape of `dims` exactly as given (negative or huge dims are kept, for tests that
        /// write hostile shapes).
        pub fn of_dims(dims: &[i64]) -> TensorShapeProto {
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
}
pub mod cache;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod formats;
pub mod fs;
pub mod fuse;
pub mod graph;
pub mod mount;
pub mod options;
pub mod parse;
pub mod probe;
pub mod render;
pub mod source;
/// What unit tests need from outside the crate (Python modules), shared with `tests/`.
#[cfg(test)]
#[path = "../tests/support/requires.rs"]
pub(crate) mod test_requires;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod tree;
/// A small checkpoint writer for tests, fuzzing and benchmarks (checked byte for byte against
/// TensorFlow's files). Not part of the daemon.
#[doc(hidden)]
pub mod writer;
