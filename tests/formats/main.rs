//! The `formats` suite: the other formats (V1, Keras, TF.js, TFLite, Orbax, safetensors) against their
//! writers' own readers, the hostile-input sweeps of every format, and the inputs the fuzzers
//! found, replayed.
//!
//! One test binary (`cargo test --test formats`); each module was a test file of its own. Run one
//! module with a filter: `cargo test --test formats keras_hostile::`.

#[path = "../common/mod.rs"]
mod common;

mod fuzz_regressions;
mod hostile;
mod keras;
mod keras_hostile;
mod orbax;
mod safetensors;
mod safetensors_hostile;
mod tfjs;
mod tfjs_hostile;
mod tflite;
mod tflite_hostile;
mod v1;

/// The one allocator of the suite: it records the largest single allocation of each thread
/// (`largest_allocation`: the sweeps show no input makes tfmount allocate what it merely claims)
/// and refuses allocations over a thread's cap (`hostile`). Per thread, so that the tests, run as
/// threads of this one process, each see only their own allocations.
#[global_allocator]
static GLOBAL: common::tracking_alloc::Tracking = common::tracking_alloc::Tracking;
