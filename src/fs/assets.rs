//! A SavedModel's `assets/` (and `assets.extra/`) passed through: one subtree instance per
//! directory, over a [`PassTree`] confined to the SavedModel's directory (see
//! [`crate::source::dirtree`] for what is followed and what stays a symlink).
//!
//! Nothing is listed at mount: a directory's entries are read the first time it is listed or
//! looked up in, and kept (the tree is a snapshot of each directory as first listed). Node `n`
//! (from 1) is `nodes[n - 1]`; node 1 is the subtree's root. A symlink to a directory is followed
//! only if that directory is not already on the way from the root (a directory that is above
//! it, or that the path to it passed through), so no path of the mount is a loop, however the
//! links point. Nodes are bounded by [`MAX_NODES`], depth by [`MAX_DEPTH`]; opened files by
//! [`OPEN_FILES`] (an evicted file is opened again when read, and must still be the file listed).

use crate::sync::{lock, read_lock, write_lock};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::cache::Lru;
use crate::error::{FsError, FsResult};
use crate::fs::subtree::{slice_of, Entry, NodeAttr, Size, Subtree};
use crate::fs::Kind;
use crate::namespace::ino::{cookie, Ino};
use crate::parse::{FormatError, ReadError};
use crate::source::bytes::{ByteSource, FileMeta};
use crate::source::dirtree;
use crate::source::dirtree::{Info, Loc, PassTree, What};

/// Most nodes one passed-through directory tree shows; listings past this are cut short (and
/// logged once).
pub(crate) const MAX_NODES: usize = 200_000;
/// Asset files kept open at once.
pub const OPEN_FILES: usize = 64;
/// Deepest directory listed, in levels below the subtree's root (deeper ones list as empty, and
/// that is logged once). No path of that depth fits in `PATH_MAX` anyway (two bytes a level), and
/// the walkers of the tree (`tfmount ls -R`) may then recurse once per level.
pub const MAX_DEPTH: u32 = 2048;

enum NodeKind {
    Dir {
        loc: Loc,
        children: Mutex<Option<Arc<[Child]>>>,
    },
    File {
        loc: Loc,
    },
    Link {
        target: Vec<u8>,
    },
}

struct Node {
    parent: Ino,
    /// Levels below the subtree's root.
    depth: u32,
    kind: NodeKind,
    /// Size and metadata (for files and directories, asked for once when the listing did not
    /// tell them).
    info: OnceLock<Info>,
}

struct Child {
    name: Vec<u8>,
    local: u64,
    kind: Kind,
}

pub(crate) struct Assets {
    id: u16,
    tree: Arc<dyn PassTree>,
    nodes: RwLock<Vec<Arc<Node>>>,
    files: Lru<u64, Arc<dyn ByteSource>>,
    /// The warnings of a listing cut short, and of a directory too deep, were logged.
    warned: AtomicBool,
    too_deep: AtomicBool,
}

fn io_err(what: &str, path: &std::path::Path, e: std::io::Error) -> FsError {
    let source = match e.raw_os_error() {
        Some(n) => FormatError::Read(ReadError::Os(n)),
        None => FormatError::Read(ReadError::Other(e.to_string())),
    };
    FsError::corrupt(what, path.display(), source)
}

impl Assets {
    /// The subtree of directory `root` of `tree`, linked under `parent`.
    pub(crate) fn new(
        id: u16,
        parent: Ino,
        tree: Arc<dyn PassTree>,
        root: dirtree::Node,
    ) -> Assets {
        let info = OnceLock::new();
        if let Some(i) = root.info {
            let _ = info.set(i);
        }
        let node = Node {
            parent,
            depth: 0,
            kind: NodeKind::Dir {
                loc: root.loc,
                children: Mutex::new(None),
            },
            info,
        };
        Assets {
            id,
            tree,
            nodes: RwLock::new(vec![Arc::new(node)]),
            files: Lru::new(OPEN_FILES),
            warned: AtomicBool::new(false),
            too_deep: AtomicBool::new(false),
        }
    }

    /// Its root's inode number.
    pub(crate) fn root(id: u16) -> Option<Ino> {
        Ino::new(id, 1)
    }

    fn node(&self, local: u64) -> FsResult<Arc<Node>> {
        let nodes = read_lock(&self.nodes);
        (local as usize)
            .checked_sub(1)
            .and_then(|i| nodes.get(i))
            .cloned()
            .ok_or(FsError::NotFound)
    }

    fn info(&self, node: &Node) -> FsResult<Info> {
        if let Some(i) = node.info.get() {
            return Ok(*i);
        }
        let loc = match &node.kind {
            NodeKind::Dir { loc, .. } | NodeKind::File { loc } => *loc,
            NodeKind::Link { .. } => return Err(FsError::NotFound),
        };
        let i = self
            .tree
            .info(loc)
            .map_err(|e| io_err("asset", &self.tree.path(loc), e))?;
        Ok(*node.info.get_or_init(|| i))
    }

    /// The locations a directory symlink listed in `dir` must not lead to: `dir`'s own and those
    /// above it, and those of the directories the way to it passed through.
    fn on_the_way(&self, dir: u64, loc: Loc) -> Vec<Loc> {
        let mut out = Vec::new();
        let mut l = Some(loc);
        while let Some(x) = l {
            out.push(x);
            l = self.tree.parent(x);
        }
        let mut n = dir;
        while let Ok(node) = self.node(n) {
            if let NodeKind::Dir { loc, .. } = node.kind {
                out.push(loc);
            }
            if node.parent.subtree() != self.id {
                break;
            }
            n = node.parent.local();
        }
        out
    }

    /// The entries of directory `dir`, sorted by name: listed the first time they are needed.
    fn children(&self, dir: u64) -> FsResult<Arc<[Child]>> {
        let node = self.node(dir)?;
        let NodeKind::Dir { loc, children } = &node.kind else {
            return Err(FsError::NotDir);
        };
        let mut kept = lock(children);
        if let Some(c) = &*kept {
            return Ok(c.clone());
        }
        if node.depth >= MAX_DEPTH {
            if !self.too_deep.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "{}: more than {MAX_DEPTH} levels deep; what is deeper is not shown",
                    self.tree.path(*loc).display()
                );
            }
            let empty: Arc<[Child]> = Arc::new([]);
            *kept = Some(empty.clone());
            return Ok(empty);
        }
        let room = MAX_NODES.saturating_sub(read_lock(&self.nodes).len());
        let (mut entries, more) = self
            .tree
            .list(*loc, room)
            .map_err(|e| io_err("directory", &self.tree.path(*loc), e))?;
        if more && !self.warned.swap(true, Ordering::Relaxed) {
            log::warn!(
                "{}: more than {MAX_NODES} files to pass through; the rest are not shown",
                self.tree.path(*loc).display()
            );
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        // Asked only where a listing has a symlink to a directory (walks up: O(depth)).
        let dir_links = entries.iter().any(|e| {
            matches!(
                e.what,
                What::Link {
                    to: Some((true, _)),
                    ..
                }
            )
        });
        let avoid = if dir_links {
            self.on_the_way(dir, *loc)
        } else {
            Vec::new()
        };
        let me = Ino::new(self.id, dir).unwrap_or(Ino(0));
        let mut new_nodes = Vec::with_capacity(entries.len());
        for e in entries {
            let (kind, info, k) = match e.what {
                What::File(n) => (NodeKind::File { loc: n.loc }, n.info, Kind::File),
                What::Dir(n) => (Self::dir_kind(n.loc), n.info, Kind::Dir),
                What::Link {
                    to: Some((false, n)),
                    ..
                } => (NodeKind::File { loc: n.loc }, n.info, Kind::File),
                What::Link {
                    to: Some((true, n)),
                    ..
                } if !avoid.contains(&n.loc) => (Self::dir_kind(n.loc), n.info, Kind::Dir),
                What::Link { target, meta, .. } => (
                    NodeKind::Link { target },
                    Some(Info { meta, len: 0 }),
                    Kind::Symlink,
                ),
                What::Other => {
                    log::info!(
                        "{}: not a regular file or directory; not passed through",
                        self.tree.path(*loc).join(&e.name).display()
                    );
                    continue;
                }
            };
            let cell = OnceLock::new();
            if let Some(i) = info {
                let _ = cell.set(i);
            }
            use std::os::unix::ffi::OsStrExt;
            new_nodes.push((
                e.name.as_bytes().to_vec(),
                k,
                Node {
                    parent: me,
                    depth: node.depth + 1,
                    kind,
                    info: cell,
                },
            ));
        }
        let list: Arc<[Child]> = {
            let mut nodes = write_lock(&self.nodes);
            new_nodes
                .into_iter()
                .map(|(name, kind, n)| {
                    nodes.push(Arc::new(n));
                    Child {
                        name,
                        local: nodes.len() as u64,
                        kind,
                    }
                })
                .collect()
        };
        *kept = Some(list.clone());
        Ok(list)
    }

    fn dir_kind(loc: Loc) -> NodeKind {
        NodeKind::Dir {
            loc,
            children: Mutex::new(None),
        }
    }

    /// The opened file of node `local` (opened again if it was closed).
    fn file(&self, local: u64) -> FsResult<Arc<dyn ByteSource>> {
        if let Some(f) = self.files.get(&local) {
            return Ok(f);
        }
        let node = self.node(local)?;
        let NodeKind::File { loc } = node.kind else {
            return Err(FsError::IsDir);
        };
        let path = || self.tree.path(loc);
        let f = self
            .tree
            .open(loc)
            .map_err(|e| io_err("asset", &path(), e))?;
        // Served as listed: the size shown must be the size served.
        if let Some(i) = node.info.get() {
            if i.len != f.len() {
                return Err(FsError::corrupt(
                    "asset",
                    path().display(),
                    FormatError::Read(ReadError::Changed),
                ));
            }
        }
        self.files.insert(local, f.clone(), 1);
        Ok(f)
    }

    fn meta_of(&self, node: &Node) -> FileMeta {
        match self.info(node) {
            Ok(i) => i.meta,
            Err(_) => FileMeta {
                mtime: std::time::UNIX_EPOCH,
                uid: 0,
                gid: 0,
                mode: 0,
            },
        }
    }
}

impl Subtree for Assets {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let node = self.node(local)?;
        Ok(match &node.kind {
            NodeKind::Dir { .. } => NodeAttr {
                kind: Kind::Dir,
                size: Size::Known(0),
                meta: self.meta_of(&node),
            },
            NodeKind::File { .. } => {
                let i = self.info(&node)?;
                NodeAttr {
                    kind: Kind::File,
                    size: Size::Known(i.len),
                    meta: i.meta,
                }
            }
            NodeKind::Link { target } => NodeAttr {
                kind: Kind::Symlink,
                size: Size::Known(target.len() as u64),
                meta: self.meta_of(&node),
            },
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        Ok(match self.node(local)?.kind {
            NodeKind::Dir { .. } => Kind::Dir,
            NodeKind::File { .. } => Kind::File,
            NodeKind::Link { .. } => Kind::Symlink,
        })
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        let children = self.children(dir)?;
        let i = children
            .binary_search_by(|c| c.name.as_slice().cmp(name))
            .map_err(|_| FsError::NotFound)?;
        children
            .get(i)
            .and_then(|c| Ino::new(self.id, c.local))
            .ok_or(FsError::NotFound)
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        Ok(Some(self.node(dir)?.parent))
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let children = self.children(dir)?;
        let start = c.saturating_sub(cookie::BASE - 1) as usize;
        for (n, child) in children.iter().enumerate().skip(start) {
            let Some(ino) = Ino::new(self.id, child.local) else {
                continue;
            };
            let e = Entry {
                ino,
                name: &child.name,
                kind: child.kind,
                cookie: cookie::BASE + n as u64,
            };
            if add(e) {
                break;
            }
        }
        Ok(())
    }

    fn open(&self, local: u64) -> FsResult<()> {
        match self.node(local)?.kind {
            NodeKind::File { .. } => self.file(local).map(|_| ()),
            _ => Ok(()),
        }
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        let node = self.node(local)?;
        match &node.kind {
            NodeKind::File { .. } => {
                let file = self.file(local)?;
                let a = offset.min(file.len());
                let n = (file.len() - a).min(size as u64) as usize;
                file.read_vec(a, n)
                    .map(Bytes::from)
                    .map_err(|e| FsError::corrupt("asset", file.name().display(), e))
            }
            NodeKind::Link { target } => Ok(slice_of(target, offset, size)),
            NodeKind::Dir { .. } => Err(FsError::IsDir),
        }
    }

    fn readlink(&self, local: u64) -> FsResult<Vec<u8>> {
        match &self.node(local)?.kind {
            NodeKind::Link { target } => Ok(target.clone()),
            _ => Err(FsError::NotSymlink),
        }
    }
}
