//! The `mount` suite: real mounts through the kernel of local sources: every fixture against
//! TensorFlow's record (V2 and V1), the daemon's lifecycle and privileges, live directories
//! (TensorFlow, Keras, TF Serving), files changing underneath, `-o direct_io`, parallel load.
//!
//! One test binary (`cargo test --test mount`); each module was a test file of its own. Run one
//! module with a filter: `cargo test --test mount lifecycle::`.

#[path = "../common/mod.rs"]
mod common;

mod changes;
mod direct_io;
mod edit;
mod keras_live;
mod lifecycle;
mod live;
mod load;
mod mount;
mod nfs;
mod safetensors;
mod serving;
mod v1_mount;
