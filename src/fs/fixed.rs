//! The fixed nodes of a mount (subtree 0): the root and the directories made at mount time
//! (`variables`'s parents, `meta_graphs/<tags>/`, `names/`, one directory per checkpoint),
//! symlinks (`latest`, graph links, `names/`, a SavedModel's `assets` when it is a symlink out of
//! the model) and files generated on demand (rendered text, `model.safetensors`). A fixed
//! directory's children may live in any subtree (a SavedModel's assets are their own subtrees:
//! [`super::assets`]).

use bytes::Bytes;
use std::sync::Arc;

use crate::error::{FsError, FsResult};
use crate::fs::subtree::{slice_of, Content, Entry, NodeAttr, Size, Subtree};
use crate::fs::Kind;
use crate::namespace::ino::{cookie, Ino};
use crate::source::bytes::FileMeta;

/// A file whose content is generated when read (text rendered from a graph file, a checkpoint's
/// `model.safetensors`, `tensors.tsv`, `summary.txt`).
pub(crate) trait Generated: Send + Sync {
    /// Its size (generating it, or a piece table of it, the first time).
    fn size(&self) -> FsResult<u64>;
    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes>;
    /// What it holds ([`Content::Other`] by default).
    fn content(&self) -> Content {
        Content::Other
    }
    /// The raw name behind it, for `user.tfmount.key` (none by default).
    fn key(&self) -> Option<Vec<u8>> {
        None
    }
}

pub(crate) enum Fixed {
    Dir {
        parent: Ino,
        /// Name, inode and kind of each child (children may live in other subtrees).
        children: Vec<(Vec<u8>, Ino, Kind)>,
        meta: FileMeta,
    },
    Symlink {
        parent: Ino,
        target: Vec<u8>,
        meta: FileMeta,
    },
    /// A generated file.
    Text {
        parent: Ino,
        text: Arc<dyn Generated>,
        meta: FileMeta,
    },
}

impl Fixed {
    fn parent(&self) -> Ino {
        match self {
            Fixed::Dir { parent, .. }
            | Fixed::Symlink { parent, .. }
            | Fixed::Text { parent, .. } => *parent,
        }
    }

    fn meta(&self) -> FileMeta {
        match self {
            Fixed::Dir { meta, .. } | Fixed::Symlink { meta, .. } | Fixed::Text { meta, .. } => {
                *meta
            }
        }
    }
}

/// A table of fixed nodes, one subtree instance (the mount's root table, or one checkpoint's
/// tree in a live checkpoint directory); node `i` (from 1) is `nodes[i - 1]`. Built at mount
/// time (or when a checkpoint appears), then never changed.
pub(crate) struct FixedNodes {
    id: u16,
    nodes: Vec<Fixed>,
    /// Links to derived views, `(directory, index among its children)`: answered by lookup,
    /// left out of listings unless `show_views` (see [`FixedNodes::link_view`]).
    views: Vec<(u64, usize)>,
    /// List the views too (`-o views=visible`).
    pub(crate) show_views: bool,
}

impl FixedNodes {
    pub(crate) fn new(id: u16) -> FixedNodes {
        FixedNodes {
            id,
            nodes: Vec::new(),
            views: Vec::new(),
            show_views: false,
        }
    }

    /// Adds `child` to `dir` as [`FixedNodes::link`] does, as a derived view: a file or
    /// directory whose bytes all come from tensors listed elsewhere in the tree (`text/`,
    /// `names/`, `model.safetensors`, ...). It answers lookups as any child does, but the
    /// listing of `dir` leaves it out (unless `show_views`), so that tools that walk the whole
    /// tree (`du`, `cp -r`, `tar`, `diff -r`) see each tensor's bytes at most twice (its `.bin`
    /// and `.npy`), as `.zfs` is reachable but not listed under ZFS's `snapdir=hidden`.
    pub(crate) fn link_view(&mut self, dir: Ino, name: &[u8], child: Ino, kind: Kind) {
        if dir.subtree() != self.id {
            return;
        }
        if let Some(Fixed::Dir { children, .. }) = self.get_mut(dir.local()) {
            let n = children.len();
            children.push((name.to_vec(), child, kind));
            self.views.push((dir.local(), n));
        }
    }

    /// Whether child `n` of directory `dir` (local) is a view.
    fn is_view(&self, dir: u64, n: usize) -> bool {
        self.views.contains(&(dir, n))
    }

    /// Adds a node; returns its inode number (`None` when the table is full).
    pub(crate) fn add(&mut self, f: Fixed) -> Option<Ino> {
        self.nodes.push(f);
        Ino::new(self.id, self.nodes.len() as u64)
    }

    /// Adds `child` (of kind `kind`) to fixed directory `dir` of this table under `name`.
    pub(crate) fn link(&mut self, dir: Ino, name: &[u8], child: Ino, kind: Kind) {
        if dir.subtree() != self.id {
            return;
        }
        if let Some(Fixed::Dir { children, .. }) = self.get_mut(dir.local()) {
            children.push((name.to_vec(), child, kind));
        }
    }

    pub(crate) fn get(&self, local: u64) -> FsResult<&Fixed> {
        (local as usize)
            .checked_sub(1)
            .and_then(|i| self.nodes.get(i))
            .ok_or(FsError::NotFound)
    }

    fn get_mut(&mut self, local: u64) -> Option<&mut Fixed> {
        (local as usize)
            .checked_sub(1)
            .and_then(|i| self.nodes.get_mut(i))
    }

    /// The children of a fixed directory of this table.
    pub(crate) fn children(&self, dir: Ino) -> Vec<(Vec<u8>, Ino, Kind)> {
        if dir.subtree() != self.id {
            return Vec::new();
        }
        match self.get(dir.local()) {
            Ok(Fixed::Dir { children, .. }) => children.clone(),
            _ => Vec::new(),
        }
    }
}

impl Subtree for FixedNodes {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let f = self.get(local)?;
        let (kind, size) = match f {
            Fixed::Dir { .. } => (Kind::Dir, Size::Known(0)),
            Fixed::Symlink { target, .. } => (Kind::Symlink, Size::Known(target.len() as u64)),
            Fixed::Text { text, .. } => (Kind::File, text.size().map_or(Size::Broken, Size::Known)),
        };
        Ok(NodeAttr {
            kind,
            size,
            meta: f.meta(),
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        Ok(match self.get(local)? {
            Fixed::Dir { .. } => Kind::Dir,
            Fixed::Symlink { .. } => Kind::Symlink,
            Fixed::Text { .. } => Kind::File,
        })
    }

    fn rendered(&self, local: u64) -> bool {
        matches!(self.get(local), Ok(Fixed::Text { .. }))
    }

    fn content(&self, local: u64) -> Content {
        match self.get(local) {
            Ok(Fixed::Text { text, .. }) => text.content(),
            _ => Content::Other,
        }
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        match self.get(dir)? {
            Fixed::Dir { children, .. } => children
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, c, _)| *c)
                .ok_or(FsError::NotFound),
            _ => Err(FsError::NotDir),
        }
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        Ok(Some(self.get(dir)?.parent()))
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let Fixed::Dir { children, .. } = self.get(dir)? else {
            return Err(FsError::NotDir);
        };
        let start = c.saturating_sub(cookie::BASE - 1) as usize;
        for (n, (name, child, kind)) in children.iter().enumerate().skip(start) {
            if !self.show_views && self.is_view(dir, n) {
                continue;
            }
            let e = Entry {
                ino: *child,
                name,
                kind: *kind,
                cookie: cookie::BASE + n as u64,
            };
            if add(e) {
                break;
            }
        }
        Ok(())
    }

    fn open(&self, local: u64) -> FsResult<()> {
        match self.get(local)? {
            Fixed::Text { text, .. } => text.size().map(|_| ()),
            _ => Ok(()),
        }
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        match self.get(local)? {
            Fixed::Text { text, .. } => text.read(offset, size),
            Fixed::Symlink { target, .. } => Ok(slice_of(target, offset, size)),
            Fixed::Dir { .. } => Err(FsError::IsDir),
        }
    }

    fn readlink(&self, local: u64) -> FsResult<Vec<u8>> {
        match self.get(local)? {
            Fixed::Symlink { target, .. } => Ok(target.clone()),
            _ => Err(FsError::NotSymlink),
        }
    }

    fn xattrs(&self, local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        Ok(match self.get(local)? {
            Fixed::Text { text, .. } => text
                .key()
                .map(|k| vec![(crate::fs::KEY_XATTR, k)])
                .unwrap_or_default(),
            _ => Vec::new(),
        })
    }
}

/// A file whose bytes are known when the tree is built (a format's own small files: a Keras
/// model's `config.json`).
pub(crate) struct Known(pub Arc<[u8]>);

impl Generated for Known {
    fn size(&self) -> FsResult<u64> {
        Ok(self.0.len() as u64)
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let end = start.saturating_add(size).min(self.0.len());
        Ok(Bytes::copy_from_slice(&self.0[start..end]))
    }
}
