//! The test kit: what tests, the fuzz harness, the examples and benchmarks share, and the daemon
//! never uses. Built for the crate's own unit tests (`cfg(test)`) and with the `testkit` feature,
//! which `cargo test` turns on for the integration tests and examples (the package's
//! dev-dependency on itself), `fuzz/Cargo.toml` asks for, and a release build leaves out.
//!
//! - [`writer`]: a V2 checkpoint writer (byte for byte TensorFlow's) and raw table pieces;
//! - [`rng`]: the one pseudo-random generator of tests, fuzzing and examples;
//! - [`walk`]: the tree walker over the core or a real directory, with its checks;
//! - [`fuzz`]: the fuzz targets, for `cargo fuzz`, `examples/fuzz.rs` and the regression tests;
//! - [`requires`]: what a test needs from outside the crate, and skipping when it is missing;
//!
//! What only the integration tests use (the object-storage servers, the fault-injecting proxy,
//! the tracking allocator) is in their own kit, `tests/common/`.

pub mod fuzz;
pub mod kernels;
pub mod requires;
pub mod rng;
pub mod walk;
pub mod writer;
