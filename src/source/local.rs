//! The local filesystem as a [`Store`]: paths probed and listed with `std::fs` (symlinks
//! followed), files opened as [`SourceFile`]s, SavedModel assets as a confined [`LocalTree`].

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::bytes::{ByteSource, EntryKind, FileMeta, Store};
use super::dirtree::LocalTree;
use super::file::SourceFile;

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
        let (f, _) = SourceFile::open(path)?;
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
            LocalTree::open(root).map(|t| Arc::new(t) as Arc<dyn crate::source::dirtree::PassTree>),
        )
    }
}
