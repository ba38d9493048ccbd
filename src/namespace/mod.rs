//! The mount's name space: how keys become path components ([`names`]), and the bit layouts of
//! inode numbers and readdir cookies ([`ino`]).

pub(crate) mod ino;
pub(crate) mod names;

pub use names::{escape, SUFFIXES};
pub(crate) use names::{fnv1a64, unescape, FileKind, Unescaped};
