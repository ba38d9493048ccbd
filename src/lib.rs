pub mod proto {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));
}
pub mod cache;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod format;
pub mod fs;
pub mod fuse;
pub mod mount;
pub mod render;
pub mod source;
pub mod tree;
/// A small checkpoint writer for tests, fuzzing and benchmarks (checked byte for byte against
/// TensorFlow's files). Not part of the daemon.
#[doc(hidden)]
pub mod writer;
