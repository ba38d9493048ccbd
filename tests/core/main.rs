//! The `core` suite: the filesystem core (`tfmount::fs::Fs`, no kernel) over TensorFlow's own
//! formats (V2 checkpoints and SavedModels): walks against TensorFlow's record, the conformance
//! table, the views, the layout contract and its reference model, assets, empty-base prefixes,
//! graphs, what a listing shows. (The test kit's checkpoint writer is checked by unit tests,
//! `src/testkit/writer/read_back.rs`.)
//!
//! One test binary (`cargo test --test core`); each module was a test file of its own. Run one
//! module with a filter: `cargo test --test core views::`.

#[path = "../common/mod.rs"]
mod common;

mod assets;
mod conformance;
mod empty_base;
mod fs_core;
mod graphs;
mod layout;
mod listing;
mod reference;
mod views;
