//! The interface between the dispatcher ([`super::Fs`]) and the types that serve one kind of
//! subtree (checkpoint variables, a meta graph's names, the fixed nodes). A subtree sees only
//! its own local node numbers; the dispatcher turns them into inode numbers.

use crate::error::{FsError, FsResult};
use crate::fs::Kind;
use crate::namespace::ino::Ino;
use crate::namespace::FileKind;
use crate::source::bytes::FileMeta;
use bytes::Bytes;

/// A file's size, or that its content cannot be produced (a damaged tensor, an unrenderable
/// message): such a file is listed, and reading it fails with EIO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Size {
    Known(u64),
    Broken,
}

/// What a file holds, as far as how the kernel should cache it matters (`-o direct_io`, see
/// [`DirectIo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    /// One tensor's bytes: a `.bin`, or an `.npy` (header + the bytes).
    Tensor,
    /// Many tensors' bytes in one file (`model.safetensors`, `weights.safetensors`).
    Tensors,
    /// Anything else: text, sidecars, renderings, assets.
    Other,
}

/// Which files the kernel reads around its page cache (`-o direct_io`; the FUSE adapter,
/// `src/fuse.rs`, applies it): opened with `FOPEN_DIRECT_IO`, each `read(2)` becomes READ
/// requests of the caller's size (up to the kernel's `max_pages`, 1 MiB by default), answered
/// straight into the caller's buffer, and nothing of the file stays in the page cache but what `mmap` maps
/// (`FUSE_DIRECT_IO_ALLOW_MMAP`). Every other file keeps the page cache (`FOPEN_KEEP_CACHE`).
///
/// Direct I/O needs an OPEN reply, and the kernel's no-open mode (no OPEN, FLUSH or RELEASE
/// request per file) is all or nothing per mount: with `Auto` or `Always` every open of every
/// file costs a round trip, which is why `Never` is the default (docs/benchmarks.md has the
/// figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DirectIo {
    /// The page cache for every file; files are opened without a request (no-open mode).
    #[default]
    Never,
    /// Direct I/O for a tensor's `.bin` and `.npy` of at least [`DIRECT_IO_MIN`] bytes.
    Auto,
    /// Direct I/O for every file of tensor bytes: `.bin`, `.npy`, `model.safetensors`,
    /// `weights.safetensors`, whatever their size.
    Always,
}

/// The smallest tensor file `-o direct_io=auto` reads around the page cache.
pub const DIRECT_IO_MIN: u64 = 64 << 20;

impl DirectIo {
    /// The values of `-o direct_io`, as `--help` shows them.
    pub(crate) const VALUES: &'static str = "auto|always|never";

    pub(crate) fn parse(s: &str) -> Option<DirectIo> {
        match s {
            "never" => Some(DirectIo::Never),
            "auto" => Some(DirectIo::Auto),
            "always" => Some(DirectIo::Always),
            _ => None,
        }
    }

    /// Whether a file holding `content`, of `size` bytes, is opened with `FOPEN_DIRECT_IO`.
    pub(crate) fn applies(self, content: Content, size: u64) -> bool {
        match self {
            DirectIo::Never => false,
            DirectIo::Auto => size >= DIRECT_IO_MIN && content == Content::Tensor,
            DirectIo::Always => content != Content::Other,
        }
    }
}

/// What a node is, as the dispatcher needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeAttr {
    pub(crate) kind: Kind,
    pub(crate) size: Size,
    /// Times, owner and permission bits (read bits; directories add `x` where `r` is set).
    pub(crate) meta: FileMeta,
}

/// One entry a subtree lists.
pub(crate) struct Entry<'a> {
    pub(crate) ino: Ino,
    pub(crate) name: &'a [u8],
    pub(crate) kind: Kind,
    /// Where to continue after this entry (at least [`crate::namespace::ino::cookie::BASE`]).
    pub(crate) cookie: u64,
}

/// What a name in a directory of an editable tree names, in key terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Named {
    /// One of a tensor's files: its key, which file, and the tensor's position when it is one
    /// of the tree's now.
    File {
        key: Vec<u8>,
        kind: FileKind,
        pos: Option<u64>,
    },
    /// A directory: the prefix of its keys (ending `/`), and whether it holds tensors.
    Dir { prefix: Vec<u8>, exists: bool },
}

/// Serves one kind of subtree. `local` is the node's number within its subtree instance.
pub(crate) trait Subtree: Send + Sync {
    /// What `local` is and its size (the size may cost rendering: see [`Subtree::rendered`]).
    fn attr(&self, local: u64) -> FsResult<NodeAttr>;

    /// Whether `local` is a directory, a file or a symlink, without computing its size.
    fn kind(&self, local: u64) -> FsResult<Kind>;

    /// Whether a file's size means rendering its content (listings leave its attributes out).
    fn rendered(&self, _local: u64) -> bool {
        false
    }

    /// What file `local` holds (see [`Content`]); [`Content::Other`] by default.
    fn content(&self, _local: u64) -> Content {
        Content::Other
    }

    /// The child `name` of directory `dir`.
    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino>;

    /// The directory above `dir` (a subtree's roots know where they are linked); `None` only
    /// where there is no parent (never for a node reachable from the mount root).
    fn parent(&self, dir: u64) -> FsResult<Option<Ino>>;

    /// Lists `dir` after `cookie` (below `cookie::BASE`: from the first entry). `add` returns
    /// true when the reply is full.
    fn readdir(
        &self,
        dir: u64,
        cookie: u64,
        add: &mut dyn FnMut(Entry<'_>) -> bool,
    ) -> FsResult<()>;

    /// Checks that a file's content can be produced (a damaged file fails here with EIO).
    fn open(&self, local: u64) -> FsResult<()>;

    /// Bytes `[offset, offset + size)` of a file, clamped to its end.
    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes>;

    fn readlink(&self, _local: u64) -> FsResult<Vec<u8>> {
        Err(FsError::NotSymlink)
    }

    /// What `name` in directory `dir` names, in key terms, in an editable tree
    /// ([`crate::fs::edit`]); EROFS everywhere else.
    fn named(&self, _dir: u64, _name: &[u8]) -> FsResult<Named> {
        Err(FsError::ReadOnly)
    }

    /// The directories of an editable tree that show the keys under `prefix` (ending `/`, or
    /// empty for the root): each with whether it is `variables/`'s (else a view's, `.txt`).
    fn dir_inos(&self, _prefix: &[u8]) -> Vec<(Ino, bool)> {
        Vec::new()
    }

    /// The local number of the `.npy` being written through handle `fh` of an editable tree,
    /// and back ([`crate::fs::edit`]).
    fn pending_local(&self, _fh: u64) -> Option<u64> {
        None
    }
    fn pending_of(&self, _local: u64) -> Option<u64> {
        None
    }

    /// The inode of file `kind` of the tensor at `pos`, in an editable tree.
    fn tensor_file_ino(&self, _kind: crate::namespace::FileKind, _pos: u64) -> Option<Ino> {
        None
    }

    /// Whether `local` takes edits (an editable tree's directories and `.npy`/`.bin` files):
    /// shown with the owner's write bit.
    fn writable(&self, _local: u64) -> bool {
        false
    }

    /// The tensor file `local` is, in an editable tree: its key, which file, its position.
    fn tensor_file(&self, _local: u64) -> FsResult<(Vec<u8>, crate::namespace::FileKind, u64)> {
        Err(FsError::ReadOnly)
    }

    /// The extended attributes of a node, `(name, value)`, in listing order.
    fn xattrs(&self, _local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        Ok(Vec::new())
    }
}

/// Bytes `[offset, offset + size)` of `data`, clamped.
pub(crate) fn slice_of(data: &[u8], offset: u64, size: usize) -> Bytes {
    let a = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let b = a.saturating_add(size).min(data.len());
    Bytes::copy_from_slice(&data[a..b])
}
