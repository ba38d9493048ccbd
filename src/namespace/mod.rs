//! The mount's name space: how keys become path components ([`names`]), and the bit layouts of
//! inode numbers and readdir cookies ([`ino`]).

pub mod ino;
pub mod names;

pub use names::{escape, fnv1a64, unescape, FileKind, Unescaped, SUFFIXES};
