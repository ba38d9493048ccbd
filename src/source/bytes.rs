//! The byte-source seam. Everything that reads bytes of a source file (an `.index`, a data
//! shard, a V1 table, a graph file, a state file) goes through these two traits, so the parsers,
//! the tree and the views never know where bytes come from:
//!
//! - [`Store`]: a place files live (the local filesystem, or an object store): probe a path,
//!   list a directory, open a file, read a small file whole.
//! - [`ByteSource`]: one opened file: its length and metadata as opened, reads at an offset
//!   ([`ReadAt`], the parsers' view), and whether it has changed since it was opened.
//!
//! The local implementations are [`LocalStore`] and [`super::file::SourceFile`] (`pread` +
//! `fstat`).

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::parse::FormatError;
use crate::parse::ReadAt;

/// Metadata of a source file that the mount reflects (times, owner, permission bits).
#[derive(Debug, Clone, Copy)]
pub struct FileMeta {
    pub mtime: std::time::SystemTime,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl FileMeta {
    pub fn of(meta: &std::fs::Metadata) -> FileMeta {
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
}

/// Sequential reads of one range of a [`ByteSource`] (see [`ByteSource::range_reader`]).
pub trait RangeReader: Send + Sync {
    /// Fills `buf` from absolute offset `offset`.
    fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError>;
}

/// What a path names in a [`Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
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

    fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(EntryKind::File)
    }

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

    fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(EntryKind::Dir)
    }

    /// The directory tree under `root` read lazily and confined to it, where the store has its
    /// own (the local filesystem, with symlinks: see [`super::dirtree`]); `None` where the
    /// store's `list` and `open` serve ([`super::dirtree::StoreTree`]).
    fn confined_tree(
        &self,
        _root: &Path,
    ) -> Option<io::Result<Arc<dyn crate::source::dirtree::PassTree>>> {
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

/// The local filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalStore;

fn kind_of(ft: std::fs::FileType) -> EntryKind {
    if ft.is_file() {
        EntryKind::File
    } else if ft.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    }
}

impl Store for LocalStore {
    fn kind(&self, path: &Path) -> Option<EntryKind> {
        std::fs::metadata(path).ok().map(|m| kind_of(m.file_type()))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, EntryKind)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            // Follow symlinks, as `kind` does.
            let k = match e.file_type() {
                Ok(ft) if ft.is_symlink() => self.kind(&e.path()).unwrap_or(EntryKind::Other),
                Ok(ft) => kind_of(ft),
                Err(_) => continue,
            };
            out.push((e.file_name(), k));
        }
        Ok(out)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn ByteSource>> {
        let (f, _) = crate::source::file::SourceFile::open(path)?;
        Ok(f)
    }

    fn meta(&self, path: &Path) -> io::Result<FileMeta> {
        std::fs::metadata(path).map(|m| FileMeta::of(&m))
    }

    fn stamp(&self, path: &Path) -> io::Result<(u64, std::time::SystemTime)> {
        let m = std::fs::metadata(path)?;
        Ok((m.len(), m.modified()?))
    }

    fn confined_tree(
        &self,
        root: &Path,
    ) -> Option<io::Result<Arc<dyn crate::source::dirtree::PassTree>>> {
        Some(
            crate::source::dirtree::LocalTree::open(root)
                .map(|t| Arc::new(t) as Arc<dyn crate::source::dirtree::PassTree>),
        )
    }
}
