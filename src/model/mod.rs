//! The engines below the adapters: a SOURCE opened without a mount, and what is done to it.
//! The subcommands (`cmd/`) and the Python module (`python/`) are peers over this room; neither
//! names the other.
//!
//! - [`open`]: a SOURCE as the tree a mount shows ([`open::Tree`], over the core with no
//!   kernel), and as its checkpoints ([`open::CheckpointSet`], [`open::Ckpt`]: walked key by
//!   key, each tensor's stored pieces and the reads the checks need);
//! - [`verify`]: every tensor read and checked against its stored checksum, on every core;
//! - [`diff`]: two checkpoints compared key by key, decided from their indexes where they can;
//! - [`values`]: two tensors compared value by value (`diff --values`);
//! - [`save`]: tensors the caller hands over (the Python module's numpy arrays) written as a TF
//!   checkpoint or a `.safetensors` file through `export`'s writers;
//! - [`lines`]: the records the engines write, to stdout as text or JSON Lines, or kept for the
//!   Python module.

pub(crate) mod cast;
pub(crate) mod diff;
pub(crate) mod edits;
pub(crate) mod export;
pub mod lines;
pub mod open;
// Its one adapter so far is the Python module's `tfmount.save`; built (and unit-tested) without it.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod save;
pub(crate) mod values;
pub(crate) mod verify;
