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
/// The Python module `tfmount._tfmount` (feature `python`, built by maturin).
#[cfg(feature = "python")]
pub mod python;
pub mod render;
pub mod source;
/// What tests, fuzzing and benchmarks share (the checkpoint writer, the random generator, the
/// tree walker, the fuzz targets, test servers): built for unit tests and with the `testkit`
/// feature (on for `cargo test`), never in the daemon.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tree;
