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
//! - [`servers`], [`fault_proxy`]: local object-storage servers and a fault-injecting proxy;
//! - [`tracking_alloc`]: an allocator recording the largest allocation (a test binary installs
//!   it as its `#[global_allocator]`).

pub mod fault_proxy;
pub mod fuzz;
pub mod kernels;
pub mod requires;
pub mod rng;
pub mod servers;
pub mod tracking_alloc;
pub mod walk;
pub mod writer;
