//! tfmount: TensorFlow-family model files (checkpoints, SavedModels, Keras, TFLite, TF.js,
//! Orbax; on local disk or object storage) as read-only directories, without TensorFlow.
//!
//! The crate is layered one way, as `docs/architecture.md` maps it (and `tests/cli/architecture.rs`
//! checks): the adapters ([`fuse`] over the kernel, [`cmd`] for the command line, `python` for
//! `import tfmount`, [`mount`] for daemon life) sit over one core, [`fs`] (the tree a mount
//! shows, inode numbers from [`namespace`]) and [`source`] (local files, object storage and its disk
//! cache); under the core, [`formats`] (one folder per file family: V1, V2, Keras, TFLite,
//! TF.js, Orbax) and `graph` (SavedModel and GraphDef graphs); at the bottom, [`parse`]:
//! parsers pure over bytes, that return errors and never panic on hostile input. [`render`]
//! turns values into the text files shown, `options` and [`cli`] hold the one definition of
//! the command line (`--help`, the man page and `docs/cli.md` come from it).
//!
//! Where to start: `README.md`, then `docs/architecture.md`; the formats' byte layouts are in
//! `docs/` beside them.
#![warn(unreachable_pub)]
#![warn(missing_docs)]
// Where FUSE is not (macOS, Windows), the parts of the core and of `mount` that only a mounting
// adapter uses have no user until the NFS adapter serves the tree there: unused, not dead.
// Linux builds keep the lint whole.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

pub(crate) mod cache;
pub mod cli;
pub mod cmd;
pub mod descriptors;
pub mod error;
pub mod formats;
pub mod fs;
/// FUSE is Linux's (elsewhere a tree is mounted over NFS: `docs/macos.md`).
#[cfg(target_os = "linux")]
pub mod fuse;
pub(crate) mod graph;
pub mod model;
pub mod mount;
pub mod namespace;
pub(crate) mod nfs;
pub(crate) mod options;
pub mod parse;
pub mod probe;
pub mod proto;
/// The Python module `tfmount._tfmount` (feature `python`, built by maturin).
#[cfg(feature = "python")]
pub(crate) mod python;
pub mod render;
pub mod source;
pub(crate) mod sync;
/// What tests, fuzzing and benchmarks share (the checkpoint writer, the random generator, the
/// tree walker, the fuzz targets, the benchmarks' kernels): built for unit tests and with the
/// `testkit` feature (on for `cargo test`), never in the daemon.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

/// The program: the command line `argv` (its first item the program's name) run, the mount form
/// or a subcommand; returns the process exit status. The binary (`src/main.rs`) and the Python
/// module's `tfmount` command are both this: the crate root composes the adapters, so that the
/// Python module and the subcommands stay peers that do not name each other.
pub fn run_command_line(argv: Vec<std::ffi::OsString>) -> i32 {
    cmd::main(argv)
}
