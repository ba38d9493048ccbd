pub mod proto {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));
}
pub mod cache;
pub mod format;
#[cfg(feature = "writer")]
pub mod writer;
pub mod cli;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod mount;
pub mod source;
pub mod tree;
