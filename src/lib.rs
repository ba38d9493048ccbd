pub mod cache;
pub mod cli;
pub mod cmd;
pub mod descriptors;
pub mod error;
pub mod formats;
pub mod fs;
pub mod fuse;
pub mod graph;
pub mod mount;
pub mod options;
pub mod parse;
pub mod probe;
pub mod proto;
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
