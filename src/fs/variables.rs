//! `variables/`: a checkpoint's tensors as files (`<key>.bin`, `.shape`, `.dtype`, `.npy`),
//! `/` in keys making directories, over any [`TensorSet`] (V2 bundle, V1 table).
//!
//! Local node numbers use the key-space layout (`view | file | depth | pos`, see
//! [`crate::tree::ino::keyspace`]): a directory is the first key under it, a file its tensor's
//! position, so the subtree holds no per-file state.
//!
//! The read path keeps, per serving thread, the last tensor it resolved (its index entry and
//! its opened bytes), so a sequential read of a large tensor does no index lookup, no protobuf
//! decode and takes no lock once its checksum has been verified.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::keyspace::{self, Item, Names};
use super::subtree::{slice_of, Entry, NodeAttr, Size, Subtree};
use super::tensor_files::{self, dtype_text, npy_header, shape_text, with_header};
use super::{Kind, KEY_XATTR};
use crate::error::{FsError, FsResult};
use crate::source::bytes::FileMeta;
use crate::source::tensors::{TensorData, TensorInfo, TensorSet, POS_BITS};
use crate::tree::ino::{keyspace as layout, Ino};
use crate::tree::FileKind;

const _: () = assert!(layout::POS.bits == POS_BITS);

/// The `file` field of a local node: a directory, or one of the tensor's files.
const FILE_DIR: u64 = 0;

/// A node of the subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir { depth: u16, pos: u64 },
    File { kind: FileKind, pos: u64 },
}

impl Node {
    fn decode(local: u64) -> FsResult<Node> {
        let pos = layout::POS.get(local);
        Ok(match layout::FILE.get(local) {
            FILE_DIR => Node::Dir {
                depth: layout::DEPTH.get(local) as u16,
                pos,
            },
            c => Node::File {
                kind: FileKind::ALL
                    .into_iter()
                    .find(|k| *k as u64 == c)
                    .ok_or(FsError::NotFound)?,
                pos,
            },
        })
    }

    fn encode(self) -> Option<u64> {
        let (file, depth, pos) = match self {
            Node::Dir { depth, pos } => (FILE_DIR, depth as u64, pos),
            Node::File { kind, pos } => (kind as u64, 0, pos),
        };
        Some(layout::FILE.put(file)? | layout::DEPTH.put(depth)? | layout::POS.put(pos)?)
    }
}

/// A tensor set as a sorted list of names.
struct SetNames<'a>(&'a dyn TensorSet);

impl Names for SetNames<'_> {
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        self.0.seek(key)
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        self.0.next(pos)
    }
    fn name(&self, pos: u64) -> FsResult<Vec<u8>> {
        self.0.key(pos)
    }
    fn hidden(&self, name: &[u8]) -> bool {
        self.0.hidden(name)
    }
}

/// Distinguishes subtree instances (across mounts in one process) in the per-thread slot.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// The last tensor a thread resolved.
struct Last {
    uid: u64,
    pos: u64,
    info: Option<Arc<TensorInfo>>,
    data: Option<Arc<dyn TensorData>>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

pub struct Variables {
    id: u16,
    /// The directory `variables/` is linked in.
    parent: Ino,
    uid: u64,
    set: Arc<dyn TensorSet>,
    meta: FileMeta,
}

impl Variables {
    pub fn new(id: u16, parent: Ino, set: Arc<dyn TensorSet>) -> Variables {
        Variables {
            id,
            parent,
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            meta: set.meta(),
            set,
        }
    }

    /// The root directory's local number.
    pub fn root() -> u64 {
        0
    }

    fn ino(&self, n: Node) -> FsResult<Ino> {
        n.encode()
            .and_then(|l| Ino::new(self.id, l))
            .ok_or(FsError::NotFound)
    }

    fn names(&self) -> SetNames<'_> {
        SetNames(&*self.set)
    }

    /// Runs `f` on this thread's slot for the tensor at `pos` (emptied if it held another).
    fn with_last<T>(&self, pos: u64, f: impl FnOnce(&mut Last) -> T) -> T {
        LAST.with(|slot| {
            let mut slot = slot.borrow_mut();
            if !matches!(&*slot, Some(l) if l.uid == self.uid && l.pos == pos) {
                *slot = None;
            }
            f(slot.get_or_insert_with(|| Last {
                uid: self.uid,
                pos,
                info: None,
                data: None,
            }))
        })
    }

    fn info(&self, pos: u64) -> FsResult<Arc<TensorInfo>> {
        if let Some(i) = self.with_last(pos, |l| l.info.clone()) {
            return Ok(i);
        }
        let i = Arc::new(self.set.info(pos)?);
        self.with_last(pos, |l| l.info = Some(i.clone()));
        Ok(i)
    }

    fn data(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        if let Some(d) = self.with_last(pos, |l| l.data.clone()) {
            return Ok(d);
        }
        let d = self.set.open(pos)?;
        self.with_last(pos, |l| l.data = Some(d.clone()));
        Ok(d)
    }

    fn file_size(&self, kind: FileKind, pos: u64) -> FsResult<u64> {
        let info = self.info(pos)?;
        Ok(match kind {
            FileKind::Shape => shape_text(&info.shape).len() as u64,
            FileKind::Dtype => dtype_text(info.dtype).len() as u64,
            FileKind::Bin => self.data(pos)?.size(),
            FileKind::Npy => {
                let h = npy_header(info.dtype, &info.shape).ok_or(FsError::NotFound)?;
                h.len() as u64 + self.data(pos)?.size()
            }
        })
    }

    /// The files the tensor at `pos` shows.
    fn files(&self, pos: u64) -> &'static [FileKind] {
        tensor_files::files(self.info(pos).ok().map(|i| i.dtype))
    }
}

impl Subtree for Variables {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let (kind, size) = match Node::decode(local)? {
            Node::Dir { .. } => (Kind::Dir, Size::Known(0)),
            // A tensor whose entry or data is damaged is still listed; reading it fails.
            Node::File { kind, pos } => (
                Kind::File,
                self.file_size(kind, pos).map_or(Size::Broken, Size::Known),
            ),
        };
        Ok(NodeAttr {
            kind,
            size,
            meta: self.meta,
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        Ok(match Node::decode(local)? {
            Node::Dir { .. } => Kind::Dir,
            Node::File { .. } => Kind::File,
        })
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        let Node::Dir { depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        let names = self.names();
        let prefix = keyspace::dir_prefix(&names, depth, pos)?;
        if let Some((stem, kind)) = FileKind::split(name) {
            if let Some(p) = keyspace::resolve(&names, &prefix, stem, false)? {
                if self.files(p).contains(&kind) {
                    return self.ino(Node::File { kind, pos: p });
                }
            }
            return Err(FsError::NotFound);
        }
        let p = keyspace::resolve(&names, &prefix, name, true)?.ok_or(FsError::NotFound)?;
        self.ino(Node::Dir {
            depth: depth + 1,
            pos: p,
        })
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        let Node::Dir { depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        match keyspace::parent(&self.names(), depth, pos)? {
            None => Ok(Some(self.parent)),
            Some((depth, pos)) => self.ino(Node::Dir { depth, pos }).map(Some),
        }
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let Node::Dir { depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        let names = self.names();
        let prefix = keyspace::dir_prefix(&names, depth, pos)?;
        let path = self.set.path();
        keyspace::list(&names, &prefix, c, |item| match item {
            Item::Dir { pos, comp } => {
                let ino = self
                    .ino(Node::Dir {
                        depth: depth + 1,
                        pos,
                    })
                    .ok();
                Ok(keyspace::add_dir(path, pos, comp, ino, add))
            }
            Item::Leaf {
                pos,
                comp,
                first_sub,
            } => {
                let files = self.files(pos).iter().map(|k| {
                    (
                        k.suffix().as_bytes(),
                        self.ino(Node::File { kind: *k, pos }),
                    )
                });
                keyspace::add_files(pos, comp, first_sub, files, add)
            }
        })
    }

    fn open(&self, local: u64) -> FsResult<()> {
        match Node::decode(local)? {
            Node::Dir { .. } => Ok(()),
            Node::File { kind, pos } => self.file_size(kind, pos).map(|_| ()),
        }
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        let Node::File { kind, pos } = Node::decode(local)? else {
            return Err(FsError::IsDir);
        };
        match kind {
            FileKind::Bin => self.data(pos)?.read(offset, size),
            FileKind::Shape => Ok(slice_of(&shape_text(&self.info(pos)?.shape), offset, size)),
            FileKind::Dtype => Ok(slice_of(&dtype_text(self.info(pos)?.dtype), offset, size)),
            FileKind::Npy => {
                let info = self.info(pos)?;
                let h = npy_header(info.dtype, &info.shape).ok_or(FsError::NotFound)?;
                let data = self.data(pos)?;
                with_header(&h, offset, size, |o, n| data.read(o, n))
            }
        }
    }

    fn xattrs(&self, local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        Ok(match Node::decode(local)? {
            Node::Dir { depth: 0, .. } => Vec::new(),
            Node::Dir { depth, pos } => {
                vec![(KEY_XATTR, keyspace::dir_prefix(&self.names(), depth, pos)?)]
            }
            Node::File { pos, .. } => vec![(KEY_XATTR, self.set.key(pos)?)],
        })
    }
}
