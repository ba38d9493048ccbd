//! The byte-source seam. Everything that reads bytes of a source file (an `.index`, a data
//! shard, a V1 table, a graph file, a state file) goes through these two traits, so the parsers,
//! the tree and the views never know where bytes come from:
//!
//! - [`Store`]: a place files live (the local filesystem, or an object store): probe a path,
//!   list a directory, open a file, read a small file whole.
//! - [`ByteSource`]: one opened file: its length and metadata as opened, reads at an offset
//!   ([`ReadAt`], the parsers' view), and whether it has changed since it was opened.
//!
//! The local implementations are [`super::local::LocalStore`] and [`super::file::SourceFile`] (`pread` +
//! `fstat`).

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::parse::{FormatError, ReadAt};

/// The file-type bits of [`FileMeta::mode`], as `u32` on every OS (`st_mode` is 32 bits on
/// Linux, 16 on macOS).
#[allow(clippy::unnecessary_cast)] // the same type on Linux only
pub(crate) mod file_type {
    pub(crate) const MASK: u32 = libc::S_IFMT as u32;
    pub(crate) const REG: u32 = libc::S_IFREG as u32;
    pub(crate) const DIR: u32 = libc::S_IFDIR as u32;
    pub(crate) const LNK: u32 = libc::S_IFLNK as u32;
}

/// Metadata of a source file that the mount reflects (times, owner, permission bits).
#[derive(Debug, Clone, Copy)]
pub struct FileMeta {
    pub(crate) mtime: std::time::SystemTime,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) mode: u32,
}

impl FileMeta {
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileMeta {
        use std::os::unix::fs::MetadataExt;
        FileMeta {
            mtime: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        }
    }
}

/// One opened source file. Reads serve the bytes it had when opened, or fail.
pub trait ByteSource: ReadAt + Send + Sync {
    /// Where the bytes come from (a path or a URL), for messages.
    fn name(&self) -> &Path;
    /// Owner, times and mode when it was opened.
    fn meta(&self) -> FileMeta;
    /// True once the file is known to differ from what was opened (every read then fails).
    fn changed(&self) -> bool;

    /// True when reading the same bytes twice costs a second fetch (a remote object), not a
    /// copy from the kernel's page cache: such sources are read in one pass where possible.
    fn is_remote(&self) -> bool {
        false
    }

    /// `len` bytes from `offset` as a reply's bytes: a local file's own pages inside a
    /// [`super::mapped::scope`] (no copy), else [`read_vec`](Self::read_vec)'s buffer. For
    /// tensor bytes only: nothing may keep them past the read that asked.
    fn read_bytes(&self, offset: u64, len: usize) -> Result<bytes::Bytes, FormatError> {
        self.read_vec(offset, len).map(bytes::Bytes::from)
    }

    /// `len` bytes from `offset` in a new buffer.
    fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>, FormatError> {
        let mut v = vec![0u8; len];
        self.read_exact_at(&mut v, offset)?;
        Ok(v)
    }

    /// A reader of the bytes `range` that fetches ahead while it is read in order (one per
    /// opened tensor), where the source benefits from one (a remote object); `None` for local
    /// files, which the kernel reads ahead.
    fn range_reader(self: Arc<Self>, _range: std::ops::Range<u64>) -> Option<Arc<dyn RangeReader>> {
        None
    }

    /// The local file these bytes are, opened, with the length it had when opened: for
    /// mapping a tensor in place (the Python module's zero-copy arrays). `None` for anything
    /// else (remote objects, entries of confined trees).
    fn local_file(&self) -> Option<(&std::fs::File, u64)> {
        None
    }
}

/// Sequential reads of one range of a [`ByteSource`] (see [`ByteSource::range_reader`]).
pub trait RangeReader: Send + Sync {
    /// Fills `buf` from absolute offset `offset`.
    fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError>;

    /// `len` bytes from absolute offset `offset` (possibly shared with the reader's own
    /// buffers: no copy where it can be avoided).
    fn read_bytes(&self, offset: u64, len: usize) -> Result<bytes::Bytes, FormatError> {
        let mut v = vec![0u8; len];
        self.read_into(&mut v, offset)?;
        Ok(v.into())
    }

    /// Whether the range's bytes match CRC-32C `want`, when that can be checked on bytes a
    /// local cache holds, before any is served (they are then served from memory); `false`
    /// when it cannot (read and check the usual way).
    fn check_cached(&self, _want: u32) -> bool {
        false
    }

    /// The range's bytes failed a check: drops what a local cache holds of them.
    fn forget_cached(&self) {}

    /// Starts fetching the range from its start, without waiting, as its first read would: a
    /// composed file's reader about to reach this tensor (read-ahead in tensor order).
    fn prefetch(&self) {}

    /// Whether any part of the range can be read without a new fetch: held in memory (or on
    /// its way there by a fetch under way), or in a local cache.
    fn holds_all(&self) -> bool {
        false
    }
}

/// What a path names in a [`Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

/// A place source files live.
pub trait Store: Send + Sync {
    /// What `path` is, if it exists (follows symlinks).
    fn kind(&self, path: &Path) -> Option<EntryKind>;
    /// The names in directory `dir` and what each is (unsorted).
    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, EntryKind)>>;
    /// Opens a regular file for reading at offsets. Never blocks on a FIFO.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn ByteSource>>;
    /// Metadata of a file or directory.
    fn meta(&self, path: &Path) -> io::Result<FileMeta>;

    /// Whether `path` is a regular file.
    fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(EntryKind::File)
    }

    /// A hint: `paths` are about to be asked about (opened, or checked for), one after
    /// another. A store whose questions cost a round trip (object storage) asks them all at
    /// once now and keeps the answers; by default nothing happens.
    fn expect(&self, _paths: &[PathBuf]) {}

    /// Size and modification time of file `path`, to tell whether it changed since it was
    /// last read (a followed state file). By default the file is opened for them.
    fn stamp(&self, path: &Path) -> io::Result<(u64, std::time::SystemTime)> {
        let f = self.open(path)?;
        Ok((f.len(), f.meta().mtime))
    }

    /// The error for a SOURCE `path` that names nothing (no file, no `path.index`, no
    /// directory), in words.
    fn missing(&self, path: &Path) -> io::Error {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no such file or directory (and no {name}.index beside it)"),
        )
    }

    /// Requests made and bytes fetched so far, where that is worth counting (remote stores).
    fn stats_line(&self) -> Option<String> {
        None
    }

    /// Where what is read from this store is kept, in words for `summary.txt` (remote stores:
    /// the disk cache, or none).
    fn cache_words(&self) -> Option<String> {
        None
    }

    /// Whether reads may wait for a network (object storage).
    fn is_remote(&self) -> bool {
        false
    }

    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(EntryKind::Dir)
    }

    /// The directory tree under `root` read lazily and confined to it, where the store has its
    /// own (the local filesystem, with symlinks: see [`super::dirtree`]); `None` where the
    /// store's `list` and `open` serve ([`super::dirtree::StoreTree`]).
    fn confined_tree(&self, _root: &Path) -> Option<io::Result<Arc<dyn PassTree>>> {
        None
    }

    /// A whole file of at most `max` bytes (state files, graph files). Larger files are refused
    /// unread.
    fn read_whole(&self, path: &Path, max: u64) -> io::Result<Vec<u8>> {
        let f = self.open(path)?;
        let len = f.len();
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{len} bytes, more than the {max}-byte limit"),
            ));
        }
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, 0)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(buf)
    }
}

// A directory tree passed through (SavedModel assets): the seam `Store::confined_tree` returns;
// the implementations are in `super::dirtree`.

/// A location in a [`PassTree`]: a file or directory (never a symlink), numbered by the tree.
pub(crate) type Loc = u64;
/// The root directory of a tree.
pub(crate) const ROOT: Loc = 0;
/// Size and metadata of a file or directory, as listed.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    pub(crate) meta: FileMeta,
    pub(crate) len: u64,
}

/// A file or directory of a tree: where it is, and its size and metadata when the listing told
/// them (else [`PassTree::info`] asks).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub(crate) loc: Loc,
    pub(crate) info: Option<Info>,
}

/// What a directory entry is.
#[derive(Debug, Clone)]
pub(crate) enum What {
    File(Node),
    Dir(Node),
    /// A symlink: its target as stored, its own metadata, and what it leads to when that is a
    /// file or directory inside the root (`true`: a directory).
    Link {
        target: Vec<u8>,
        meta: FileMeta,
        to: Option<(bool, Node)>,
    },
    /// Anything else (a FIFO, a socket, a device): not passed through.
    Other,
}

/// One entry of a directory of a [`PassTree`]: its name and what it is.
#[derive(Debug, Clone)]
pub struct TreeEntry {
    pub(crate) name: OsString,
    pub(crate) what: What,
}

/// A directory tree read lazily, confined to its root (see the module docs).
pub trait PassTree: Send + Sync {
    /// Entry `name` of directory `dir`, if there is one.
    fn entry(&self, dir: Loc, name: &OsStr) -> io::Result<Option<TreeEntry>>;
    /// The entries of directory `dir` (unsorted), at most `max` of them; `true` if there were
    /// more.
    fn list(&self, dir: Loc, max: usize) -> io::Result<(Vec<TreeEntry>, bool)>;
    /// Size and metadata of a file or directory.
    fn info(&self, loc: Loc) -> io::Result<Info>;
    /// Opens a file for reading: the file that was listed, or an error.
    fn open(&self, file: Loc) -> io::Result<Arc<dyn ByteSource>>;
    /// The directory `loc` is in (`None` for the root).
    fn parent(&self, loc: Loc) -> Option<Loc>;
    /// Where `loc` is, for messages.
    fn path(&self, loc: Loc) -> PathBuf;
}
