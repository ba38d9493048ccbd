//! The `cli` suite: the command line as a binary (`ls`, `cat`, `verify`, `diff`, `export`, `list`,
//! `umount`, `mount-helper` in containers), and the repository's own checks: the documentation
//! holds together, and the room map of `docs/architecture.md` is the code's.
//!
//! One test binary (`cargo test --test cli`); each module was a test file of its own. Run one
//! module with a filter: `cargo test --test cli docs::`.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod cli;
mod containers;
mod docs;
mod export;
mod list;
mod safetensors;
