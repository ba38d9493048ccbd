//! The filesystem core: lookup, getattr, readdir, read, readlink and xattrs as plain Rust
//! results, with no FUSE types, so it is tested without the kernel. `fuse.rs` only translates.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::cache::BlockCache;
use crate::error::{FsError, FsResult, SourceError};
use crate::format::npy;
use crate::format::table::Pos;
use crate::source::checkpoint::{Checkpoint, FileMeta, Tensor};
use crate::source::file::ReadBuf;
use crate::source::graph::{GraphFile, GraphKind};
use crate::source::{names, Probed};
use crate::tree::{self, FileKind, Node, Unescaped};

mod graph;
use graph::{GraphMount, TextId};

pub const ROOT: u64 = 1;
pub const KEY_XATTR: &str = "user.tfmount.key";
/// Most entries a passed-through directory tree may hold (assets are small; this is a guard).
const MAX_PASSTHROUGH: usize = 100_000;

#[derive(Debug, Clone)]
pub struct Options {
    /// Verify each tensor's CRC-32C the first time it is read.
    pub verify_crc: bool,
    /// Bytes of decoded index blocks to keep.
    pub cache_bytes: usize,
    /// Bytes of rendered text (`.pbtxt` files) to keep.
    pub text_cache_bytes: usize,
    /// The meta graph the top-level `graph`, `functions`, ... links point into, as a
    /// comma-separated tag set (else the only one, else the one tagged exactly `serve`).
    pub tags: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            verify_crc: true,
            cache_bytes: 32 << 20,
            text_cache_bytes: 16 << 20,
            tags: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub kind: Kind,
    pub perm: u16,
    pub mtime: SystemTime,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub name: Vec<u8>,
    pub kind: Kind,
    /// Pass this back to `readdir` to continue after this entry.
    pub cookie: u64,
}

enum Fixed {
    Dir {
        parent: u64,
        children: Vec<(Vec<u8>, u64)>,
        meta: FileMeta,
    },
    ViewRoot {
        parent: u64,
        view: u16,
    },
    Symlink {
        parent: u64,
        target: Vec<u8>,
        meta: FileMeta,
    },
    PassFile {
        parent: u64,
        path: PathBuf,
        size: u64,
        meta: FileMeta,
    },
    /// A text file rendered on demand (protobuf text of a meta graph's parts, signatures.txt,
    /// the whole SavedModel). `whole` holds the piece table of a piecewise-rendered file.
    Text {
        parent: u64,
        text: TextId,
        meta: FileMeta,
        whole: std::sync::OnceLock<Result<Pieces, String>>,
    },
}

/// A file rendered piece by piece: the pieces and the end offset of each.
pub(crate) struct Pieces {
    list: Vec<crate::render::Piece>,
    ends: Vec<u64>,
}

impl Fixed {
    fn parent(&self) -> u64 {
        match self {
            Fixed::Dir { parent, .. }
            | Fixed::ViewRoot { parent, .. }
            | Fixed::Symlink { parent, .. }
            | Fixed::PassFile { parent, .. }
            | Fixed::Text { parent, .. } => *parent,
        }
    }
}

pub struct Fs {
    fixed: Vec<Fixed>,
    views: Vec<Arc<Checkpoint>>,
    cache: Arc<BlockCache>,
    graphs: Vec<GraphMount>,
    /// Graph files rendered whole (`saved_model.pbtxt`), by `TextId::Whole` index.
    graph_files: Vec<Arc<crate::source::graph::GraphFile>>,
    texts: crate::render::TextCache,
}

fn file_perm(meta: &FileMeta) -> u16 {
    (meta.mode & 0o444) as u16
}

fn dir_perm(meta: &FileMeta) -> u16 {
    let r = meta.mode & 0o444;
    (r | (r >> 2)) as u16
}

fn meta_of(path: &Path) -> Result<FileMeta, SourceError> {
    std::fs::metadata(path)
        .map(|m| FileMeta::of(&m))
        .map_err(|err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        })
}

/// Separates path components of keys.
const SEP: u8 = b'/';

/// The raw key prefix of the directory made of the first `depth` components of `key`
/// (with its trailing `/`); empty for depth 0.
fn dir_prefix_of(key: &[u8], depth: u16) -> Option<Vec<u8>> {
    if depth == 0 {
        return Some(Vec::new());
    }
    let mut seen = 0u16;
    for (i, &b) in key.iter().enumerate() {
        if b == SEP {
            seen += 1;
            if seen == depth {
                return Some(key[..=i].to_vec());
            }
        }
    }
    None
}

/// Keys that are not tensors of the model: the bundle header and slice entries.
fn hidden(key: &[u8]) -> bool {
    key.is_empty() || key[0] == 0
}

/// Bytes `[offset, offset+size)` of `header ‖ body` (an `.npy` file), where `body(off, len)`
/// reads the body.
fn with_header(
    header: &[u8],
    offset: u64,
    size: usize,
    body: impl Fn(u64, usize) -> FsResult<ReadBuf>,
) -> FsResult<ReadBuf> {
    let hl = header.len() as u64;
    if offset >= hl {
        return body(offset - hl, size);
    }
    let mut out = header[offset as usize..].to_vec();
    out.truncate(size);
    let rest = size - out.len();
    if rest > 0 {
        out.extend_from_slice(&body(0, rest)?);
    }
    Ok(ReadBuf::Owned(out))
}

const COOKIE_BASE: u64 = 3;
const SUB_DIR: u64 = 7;

impl Fs {
    pub fn new(probed: &Probed, opts: &Options) -> Result<Fs, SourceError> {
        let cache = Arc::new(BlockCache::new(opts.cache_bytes));
        let mut fs = Fs {
            fixed: Vec::new(),
            views: Vec::new(),
            cache,
            graphs: Vec::new(),
            graph_files: Vec::new(),
            texts: crate::render::TextCache::new(opts.text_cache_bytes),
        };
        let tags = opts.tags.as_deref();
        let open = |prefix: &Path, cache: &Arc<BlockCache>| {
            Checkpoint::open(prefix, cache.clone(), opts.verify_crc).map(Arc::new)
        };
        match probed {
            Probed::Prefix(prefix) => {
                let ck = open(prefix, &fs.cache)?;
                let root = fs.add(Fixed::Dir {
                    parent: ROOT,
                    children: Vec::new(),
                    meta: ck.meta,
                });
                fs.add_view(root, ck.clone());
                fs.add_checkpoint_names(root, &ck);
                fs.add_meta_file(root, prefix, tags)?;
            }
            Probed::Graph { path, kind } => {
                let g = GraphFile::open(path, *kind)?;
                let root = fs.add(Fixed::Dir {
                    parent: ROOT,
                    children: Vec::new(),
                    meta: g.meta,
                });
                fs.add_graph(root, g, tags)?;
            }
            Probed::CheckpointDir {
                dir,
                checkpoints,
                latest,
            } => {
                let meta = meta_of(dir)?;
                let root = fs.add(Fixed::Dir {
                    parent: ROOT,
                    children: Vec::new(),
                    meta,
                });
                if checkpoints.len() > tree::MAX_VIEWS {
                    return Err(SourceError::Invalid {
                        path: dir.clone(),
                        msg: format!("more than {} checkpoints", tree::MAX_VIEWS),
                    });
                }
                for (name, prefix) in checkpoints {
                    let ck = open(prefix, &fs.cache)?;
                    let d = fs.add_dir(root, name.as_bytes(), ck.meta);
                    fs.add_view(d, ck.clone());
                    fs.add_checkpoint_names(d, &ck);
                    fs.add_meta_file(d, prefix, tags)?;
                }
                if let Some(latest) = latest {
                    let l = fs.add(Fixed::Symlink {
                        parent: root,
                        target: latest.as_bytes().to_vec(),
                        meta,
                    });
                    fs.link(root, b"latest", l);
                }
            }
            Probed::SavedModel { dir, variables } => {
                let meta = meta_of(dir)?;
                let root = fs.add(Fixed::Dir {
                    parent: ROOT,
                    children: Vec::new(),
                    meta,
                });
                let pb = dir.join("saved_model.pb");
                let graph = if pb.is_file() {
                    pb
                } else {
                    dir.join("saved_model.pbtxt")
                };
                let g = GraphFile::open(&graph, GraphKind::SavedModel)?;
                match variables {
                    Some(prefix) => {
                        let ck = open(prefix, &fs.cache)?;
                        fs.add_view(root, ck.clone());
                        fs.add_saved_model_names(root, &ck, &g);
                    }
                    None => {
                        fs.add_dir(root, b"variables", meta);
                    }
                }
                fs.add_graph(root, g, tags)?;
                let mut budget = MAX_PASSTHROUGH;
                for name in ["assets", "assets.extra"] {
                    let p = dir.join(name);
                    if p.is_dir() {
                        let d = fs.add_passthrough_dir(root, &p, &mut budget)?;
                        fs.link(root, name.as_bytes(), d);
                    }
                }
            }
        }
        Ok(fs)
    }

    /// The object graph a TF2 checkpoint stores as a string tensor.
    fn object_graph(ck: &Checkpoint) -> Option<crate::proto::TrackableObjectGraph> {
        use prost::Message;
        let t = ck.lookup(names::OBJECT_GRAPH_KEY).ok()??;
        let size = ck.served_size(&t).ok()?;
        let bytes = ck.read(&t, 0, usize::try_from(size).ok()?).ok()?;
        // One string element: an 8-byte length, then the serialized proto.
        let proto = bytes.get(8..)?;
        crate::proto::TrackableObjectGraph::decode(proto)
            .inspect_err(|e| log::warn!("{}: object graph: {e}", ck.prefix.display()))
            .ok()
    }

    fn add_checkpoint_names(&mut self, parent: u64, ck: &Arc<Checkpoint>) {
        if let Some(tog) = Self::object_graph(ck) {
            self.add_names(parent, ck, names::checkpoint_names(&tog));
        }
    }

    fn add_saved_model_names(&mut self, parent: u64, ck: &Arc<Checkpoint>, g: &GraphFile) {
        use prost::Message;
        let Some(tog) = Self::object_graph(ck) else {
            return;
        };
        let buf = g.bytes();
        for m in &g.metas {
            if m.object_graph_def.is_empty() {
                continue;
            }
            let mut bytes = Vec::new();
            for f in &m.object_graph_def {
                bytes.extend_from_slice(buf.get(f.payload_range()).unwrap_or(&[]));
            }
            match crate::proto::SavedObjectGraph::decode(bytes.as_slice()) {
                Ok(sog) => {
                    self.add_names(parent, ck, names::saved_model_names(&sog, &tog));
                    return;
                }
                Err(e) => log::warn!("{}: object graph: {e}", g.path.display()),
            }
        }
    }

    /// `names/`: symlinks from the names users know to the tensor files in `variables/`.
    fn add_names(&mut self, parent: u64, ck: &Checkpoint, pairs: Vec<(String, String)>) {
        if pairs.is_empty() {
            return;
        }
        let meta = ck.meta;
        let root = self.add_dir(parent, b"names", meta);
        let mut dirs: std::collections::HashMap<(u64, Vec<u8>), u64> = Default::default();
        let escaped_path = |s: &[u8]| -> Vec<Vec<u8>> {
            let comps: Vec<&[u8]> = s.split(|&b| b == SEP).collect();
            let last = comps.len() - 1;
            comps
                .iter()
                .enumerate()
                .map(|(i, c)| tree::escape(c, i < last))
                .collect()
        };
        for (name, key) in pairs {
            let Ok(Some(t)) = ck.lookup(key.as_bytes()) else {
                continue;
            };
            let comps = escaped_path(name.as_bytes());
            let mut dir = root;
            for c in &comps[..comps.len() - 1] {
                dir = match dirs.get(&(dir, c.clone())) {
                    Some(&d) => d,
                    None => {
                        let d = self.add_dir(dir, c, meta);
                        dirs.insert((dir, c.clone()), d);
                        d
                    }
                };
            }
            let mut target = b"../".repeat(comps.len());
            target.extend_from_slice(b"variables/");
            target.extend_from_slice(&escaped_path(key.as_bytes()).join(&b'/'));
            let leaf = &comps[comps.len() - 1];
            for kind in Self::tensor_files(Some(&t)) {
                let mut n = leaf.clone();
                n.extend_from_slice(kind.suffix().as_bytes());
                let mut tg = target.clone();
                tg.extend_from_slice(kind.suffix().as_bytes());
                let l = self.add(Fixed::Symlink {
                    parent: dir,
                    target: tg,
                    meta,
                });
                self.link(dir, &n, l);
            }
        }
    }

    /// The TF1 `Saver`'s MetaGraphDef beside a checkpoint (`PREFIX.meta`), if there is one.
    fn add_meta_file(
        &mut self,
        dir: u64,
        prefix: &Path,
        tags: Option<&str>,
    ) -> Result<(), SourceError> {
        let mut p = prefix.as_os_str().to_owned();
        p.push(".meta");
        let p = PathBuf::from(p);
        if p.is_file() {
            let g = GraphFile::open(&p, GraphKind::MetaGraph)?;
            self.add_graph(dir, g, tags)?;
        }
        Ok(())
    }

    fn add(&mut self, f: Fixed) -> u64 {
        self.fixed.push(f);
        self.fixed.len() as u64
    }

    /// A new fixed directory `name` in `parent`.
    fn add_dir(&mut self, parent: u64, name: &[u8], meta: FileMeta) -> u64 {
        let d = self.add(Fixed::Dir {
            parent,
            children: Vec::new(),
            meta,
        });
        self.link(parent, name, d);
        d
    }

    fn link(&mut self, dir: u64, name: &[u8], child: u64) {
        if let Some(Fixed::Dir { children, .. }) = self.fixed.get_mut(dir as usize - 1) {
            children.push((name.to_vec(), child));
        }
    }

    fn add_view(&mut self, parent: u64, ck: Arc<Checkpoint>) {
        let view = self.views.len() as u16;
        self.views.push(ck);
        let v = self.add(Fixed::ViewRoot { parent, view });
        self.link(parent, b"variables", v);
    }

    fn add_passthrough_dir(
        &mut self,
        parent: u64,
        path: &Path,
        budget: &mut usize,
    ) -> Result<u64, SourceError> {
        let io = |err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        };
        let meta = meta_of(path)?;
        let me = self.add(Fixed::Dir {
            parent,
            children: Vec::new(),
            meta,
        });
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if *budget == 0 {
                log::warn!(
                    "{}: too many files to pass through; the rest are not shown",
                    path.display()
                );
                break;
            }
            *budget -= 1;
            let name = e.file_name();
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            use std::os::unix::ffi::OsStrExt;
            let child = if ft.is_dir() {
                self.add_passthrough_dir(me, &p, budget)?
            } else if ft.is_file() {
                let m = std::fs::metadata(&p).map_err(|err| SourceError::Io {
                    path: p.clone(),
                    err,
                })?;
                self.add(Fixed::PassFile {
                    parent: me,
                    path: p,
                    size: m.len(),
                    meta: FileMeta::of(&m),
                })
            } else {
                log::info!(
                    "{}: not a regular file or directory; not passed through",
                    p.display()
                );
                continue;
            };
            self.link(me, name.as_bytes(), child);
        }
        Ok(me)
    }

    pub fn cache(&self) -> &BlockCache {
        &self.cache
    }

    fn fixed(&self, ino: u64) -> FsResult<&Fixed> {
        (ino as usize)
            .checked_sub(1)
            .and_then(|i| self.fixed.get(i))
            .ok_or(FsError::NotFound)
    }

    fn view(&self, v: u16) -> FsResult<&Arc<Checkpoint>> {
        self.views.get(v as usize).ok_or(FsError::NotFound)
    }

    fn ino(node: Node) -> FsResult<u64> {
        node.ino().ok_or(FsError::NotFound)
    }

    // ---------- attributes ----------

    /// The type of a node, without computing its size.
    fn kind_of(&self, ino: u64) -> FsResult<Kind> {
        Ok(match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Fixed(i) => match self.fixed(i)? {
                Fixed::Dir { .. } | Fixed::ViewRoot { .. } => Kind::Dir,
                Fixed::Symlink { .. } => Kind::Symlink,
                Fixed::PassFile { .. } | Fixed::Text { .. } => Kind::File,
            },
            Node::Dir { .. } => Kind::Dir,
            Node::File { .. } => Kind::File,
            Node::Graph { sub, .. } => match sub {
                tree::GraphSub::Dir => Kind::Dir,
                _ => Kind::File,
            },
        })
    }

    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Graph { .. } => self.graph_attr(ino),
            Node::Fixed(i) => self.fixed_attr(i),
            Node::Dir { view, .. } => {
                let meta = self.view(view)?.meta;
                Ok(self.dir_attr(ino, &meta))
            }
            Node::File { view, kind, pos } => {
                let ck = self.view(view)?;
                let t = ck.tensor_at(pos);
                self.file_attr(ino, ck, kind, t.as_ref().ok())
            }
        }
    }

    fn dir_attr(&self, ino: u64, meta: &FileMeta) -> Attr {
        Attr {
            ino,
            size: 0,
            kind: Kind::Dir,
            perm: dir_perm(meta),
            mtime: meta.mtime,
            uid: meta.uid,
            gid: meta.gid,
        }
    }

    fn fixed_attr(&self, ino: u64) -> FsResult<Attr> {
        Ok(match self.fixed(ino)? {
            Fixed::Dir { meta, .. } => self.dir_attr(ino, meta),
            Fixed::ViewRoot { view, .. } => self.dir_attr(ino, &self.view(*view)?.meta),
            Fixed::Symlink { target, meta, .. } => Attr {
                ino,
                size: target.len() as u64,
                kind: Kind::Symlink,
                perm: 0o777,
                mtime: meta.mtime,
                uid: meta.uid,
                gid: meta.gid,
            },
            // Unrenderable text is listed with size 0 (opening it fails), like graph files.
            Fixed::Text { meta, .. } => {
                Self::file_attr_of(ino, self.text_size(ino).unwrap_or(0), meta)
            }
            Fixed::PassFile { size, meta, .. } => Attr {
                ino,
                size: *size,
                kind: Kind::File,
                perm: file_perm(meta),
                mtime: meta.mtime,
                uid: meta.uid,
                gid: meta.gid,
            },
        })
    }

    /// The text of a `.shape` file.
    fn shape_text(t: &Tensor) -> Vec<u8> {
        let dims: Vec<String> = t.entry.shape.iter().map(|d| d.to_string()).collect();
        format!("{}\n", dims.join(" ")).into_bytes()
    }

    fn dtype_text(t: &Tensor) -> Vec<u8> {
        format!("{}\n", t.entry.dtype.display_name()).into_bytes()
    }

    fn npy_header(t: &Tensor) -> Option<Vec<u8>> {
        npy::header(t.entry.dtype.npy_descr()?, &t.entry.shape)
    }

    /// Attributes of a tensor file. A tensor whose entry or data is damaged still has
    /// attributes (size 0 if unknown); reading it fails instead.
    fn file_attr(
        &self,
        ino: u64,
        ck: &Checkpoint,
        kind: FileKind,
        t: Option<&Tensor>,
    ) -> FsResult<Attr> {
        let size = match (kind, t) {
            (_, None) => 0,
            (FileKind::Shape, Some(t)) => Self::shape_text(t).len() as u64,
            (FileKind::Dtype, Some(t)) => Self::dtype_text(t).len() as u64,
            (FileKind::Bin, Some(t)) => ck.served_size(t).unwrap_or_else(|e| {
                log::debug!("size of {}: {e}", String::from_utf8_lossy(&t.key));
                0
            }),
            (FileKind::Npy, Some(t)) => {
                let h = Self::npy_header(t).ok_or(FsError::NotFound)?;
                h.len() as u64 + ck.served_size(t).unwrap_or(0)
            }
        };
        Ok(Attr {
            ino,
            size,
            kind: Kind::File,
            perm: file_perm(&ck.meta),
            mtime: ck.meta.mtime,
            uid: ck.meta.uid,
            gid: ck.meta.gid,
        })
    }

    /// Checks that a file can be opened, and returns its attributes. A tensor file whose index
    /// entry cannot be read, or whose size cannot be known, fails with EIO here: its attributes
    /// say size 0, and the kernel would answer reads of it with end-of-file, not an error.
    pub fn open(&self, ino: u64) -> FsResult<Attr> {
        match Node::from_ino(ino) {
            Some(Node::File { view, kind, pos }) => {
                let ck = self.view(view)?;
                let t = ck.tensor_at(pos)?;
                if matches!(kind, FileKind::Bin | FileKind::Npy) {
                    ck.served_size(&t)?;
                }
            }
            // Graph files whose message cannot be rendered or whose constant cannot be decoded
            // show size 0; opening them fails so that reads do not look like empty files.
            Some(Node::Graph { .. }) => self.graph_check(ino)?,
            Some(Node::Fixed(i)) if matches!(self.fixed(i)?, Fixed::Text { .. }) => {
                self.text_size(ino)?;
            }
            _ => {}
        }
        self.getattr(ino)
    }

    /// The files a tensor shows (`.npy` only for dtypes numpy holds natively).
    fn tensor_files(t: Option<&Tensor>) -> &'static [FileKind] {
        match t {
            Some(t) if Self::npy_header(t).is_some() => &FileKind::ALL,
            _ => &FileKind::ALL[..3],
        }
    }

    // ---------- lookup ----------

    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Attr> {
        if name == b"." {
            return self.getattr(parent);
        }
        if name == b".." {
            return self.getattr(self.parent_of(parent)?);
        }
        match Node::from_ino(parent).ok_or(FsError::NotFound)? {
            Node::Fixed(i) => match self.fixed(i)? {
                Fixed::Dir { children, .. } => {
                    let (_, child) = children
                        .iter()
                        .find(|(n, _)| n == name)
                        .ok_or(FsError::NotFound)?;
                    self.getattr(*child)
                }
                Fixed::ViewRoot { view, .. } => self.view_lookup(*view, 0, Vec::new(), name),
                _ => Err(FsError::NotDir),
            },
            Node::Dir { view, depth, pos } => {
                let prefix = self.dir_prefix(view, depth, pos)?;
                self.view_lookup(view, depth, prefix, name)
            }
            Node::Graph {
                mg,
                space,
                sub: tree::GraphSub::Dir,
                depth,
                index,
            } => self.graph_lookup(mg, space, depth, index, name),
            Node::File { .. } | Node::Graph { .. } => Err(FsError::NotDir),
        }
    }

    fn dir_prefix(&self, view: u16, depth: u16, pos: Pos) -> FsResult<Vec<u8>> {
        let ck = self.view(view)?;
        let t = ck.table();
        if pos.block as usize >= t.num_blocks() {
            return Err(FsError::NotFound);
        }
        // An index block that cannot be read is EIO, not "no such directory".
        let blk = t.block(pos.block).map_err(|e| Self::index_error(ck, e))?;
        let key = blk
            .key_checked(pos.entry as usize)
            .ok_or(FsError::NotFound)?;
        dir_prefix_of(key, depth).ok_or(FsError::NotFound)
    }

    fn key_at(&self, view: u16, pos: Pos) -> FsResult<Vec<u8>> {
        let t = self.view(view)?.table();
        let (blk, i) = t
            .entry(pos)
            .map_err(|e| FsError::Corrupt(format!("index: {e}")))?;
        Ok(blk.key(i).to_vec())
    }

    fn seek(&self, view: u16, key: &[u8]) -> FsResult<Option<Pos>> {
        let ck = self.view(view)?;
        ck.table().seek(key).map_err(|e| Self::index_error(ck, e))
    }

    fn next(&self, view: u16, pos: Pos) -> FsResult<Option<Pos>> {
        let ck = self.view(view)?;
        ck.table().next(pos).map_err(|e| Self::index_error(ck, e))
    }

    /// A damaged index block met while walking: logged once here, EIO to the caller.
    fn index_error(ck: &Checkpoint, e: crate::format::FormatError) -> FsError {
        let e = FsError::Corrupt(format!("{}: index: {e}", ck.prefix.display()));
        log::error!("{e}");
        e
    }

    /// Finds the raw component `name` stands for in a directory whose keys start with `prefix`.
    /// Returns the position of the first key `prefix ‖ component ‖ rest` where `rest` is empty
    /// (files) or starts with `/` (directories).
    fn resolve_component(
        &self,
        view: u16,
        prefix: &[u8],
        name: &[u8],
        is_dir: bool,
    ) -> FsResult<Option<(Pos, Vec<u8>)>> {
        let want_rest = |rest: &[u8]| {
            if is_dir {
                rest.first() == Some(&SEP)
            } else {
                rest.is_empty()
            }
        };
        match tree::unescape(name, is_dir).ok_or(FsError::NotFound)? {
            Unescaped::Exact(comp) => {
                let mut target = prefix.to_vec();
                target.extend_from_slice(&comp);
                if is_dir {
                    target.push(SEP);
                }
                let Some(p) = self.seek(view, &target)? else {
                    return Ok(None);
                };
                let key = self.key_at(view, p)?;
                let hit = if is_dir {
                    key.starts_with(&target)
                } else {
                    key == target
                };
                Ok(hit.then_some((p, key)))
            }
            Unescaped::Hashed {
                prefix: start,
                hash,
            } => {
                let mut target = prefix.to_vec();
                target.extend_from_slice(&start);
                let mut pos = self.seek(view, &target)?;
                while let Some(p) = pos {
                    let key = self.key_at(view, p)?;
                    if !key.starts_with(&target) {
                        break;
                    }
                    let rest = &key[prefix.len()..];
                    let end = rest.iter().position(|&b| b == SEP).unwrap_or(rest.len());
                    let comp = &rest[..end];
                    if want_rest(&rest[end..])
                        && tree::fnv1a64(comp) == hash
                        && tree::escape(comp, is_dir) == name
                    {
                        return Ok(Some((p, key)));
                    }
                    pos = self.next(view, p)?;
                }
                Ok(None)
            }
        }
    }

    fn view_lookup(&self, view: u16, depth: u16, prefix: Vec<u8>, name: &[u8]) -> FsResult<Attr> {
        if let Some((stem, kind)) = FileKind::split(name) {
            if let Some((pos, key)) = self.resolve_component(view, &prefix, stem, false)? {
                if !hidden(&key) {
                    let ck = self.view(view)?;
                    let t = ck.tensor_at(pos).ok();
                    if Self::tensor_files(t.as_ref()).contains(&kind) {
                        let ino = Self::ino(Node::File { view, kind, pos })?;
                        return self.file_attr(ino, ck, kind, t.as_ref());
                    }
                }
            }
            return Err(FsError::NotFound);
        }
        let Some((pos, _)) = self.resolve_component(view, &prefix, name, true)? else {
            return Err(FsError::NotFound);
        };
        let ino = Self::ino(Node::Dir {
            view,
            depth: depth + 1,
            pos,
        })?;
        Ok(self.dir_attr(ino, &self.view(view)?.meta))
    }

    fn parent_of(&self, ino: u64) -> FsResult<u64> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Fixed(i) => Ok(self.fixed(i)?.parent()),
            Node::Graph {
                mg,
                space,
                sub: tree::GraphSub::Dir,
                depth,
                index,
            } => self.graph_parent(mg, space, depth, index),
            Node::File { .. } | Node::Graph { .. } => Err(FsError::NotDir),
            Node::Dir { view, depth, pos } => {
                if depth <= 1 {
                    return self.view_root(view);
                }
                let key = self.key_at(view, pos)?;
                let up = dir_prefix_of(&key, depth - 1).ok_or(FsError::NotFound)?;
                let p = self.seek(view, &up)?.ok_or(FsError::NotFound)?;
                Self::ino(Node::Dir {
                    view,
                    depth: depth - 1,
                    pos: p,
                })
            }
        }
    }

    fn view_root(&self, view: u16) -> FsResult<u64> {
        self.fixed
            .iter()
            .position(|f| matches!(f, Fixed::ViewRoot { view: v, .. } if *v == view))
            .map(|i| i as u64 + 1)
            .ok_or(FsError::NotFound)
    }

    // ---------- readdir ----------

    /// Lists `ino` from `cookie` (0 = start). `add` returns true when the reply is full.
    pub fn readdir(
        &self,
        ino: u64,
        cookie: u64,
        mut add: impl FnMut(DirEntry) -> bool,
    ) -> FsResult<()> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        if self.kind_of(ino)? != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if let Node::Fixed(i) = node {
            if !matches!(self.fixed(i)?, Fixed::Dir { .. } | Fixed::ViewRoot { .. }) {
                return Err(FsError::NotDir);
            }
        }
        if cookie < 1
            && add(DirEntry {
                ino,
                name: b".".to_vec(),
                kind: Kind::Dir,
                cookie: 1,
            })
        {
            return Ok(());
        }
        if cookie < 2 {
            let p = self.parent_of(ino)?;
            if add(DirEntry {
                ino: p,
                name: b"..".to_vec(),
                kind: Kind::Dir,
                cookie: 2,
            }) {
                return Ok(());
            }
        }
        match node {
            Node::Fixed(i) => match self.fixed(i)? {
                Fixed::Dir { children, .. } => {
                    let start = cookie.saturating_sub(COOKIE_BASE - 1) as usize;
                    for (n, (name, child)) in children.iter().enumerate().skip(start) {
                        let kind = self.kind_of(*child)?;
                        let e = DirEntry {
                            ino: *child,
                            name: name.clone(),
                            kind,
                            cookie: COOKIE_BASE + n as u64,
                        };
                        if add(e) {
                            break;
                        }
                    }
                    Ok(())
                }
                Fixed::ViewRoot { view, .. } => self.view_readdir(*view, 0, &[], cookie, add),
                _ => Err(FsError::NotDir),
            },
            Node::Dir { view, depth, pos } => {
                let prefix = self.dir_prefix(view, depth, pos)?;
                self.view_readdir(view, depth, &prefix, cookie, add)
            }
            Node::Graph {
                mg,
                space,
                depth,
                index,
                ..
            } => self.graph_readdir(mg, space, depth, index, cookie, &mut add),
            Node::File { .. } => Err(FsError::NotDir),
        }
    }

    /// `readdir` with each entry's attributes (for READDIRPLUS, which saves the kernel a lookup
    /// per name). An entry whose attributes cannot be had comes with `None`, and so does a
    /// rendered text file (a graph `.pbtxt`, `saved_model.pbtxt`, ...): its size means rendering
    /// it, and listing a directory must not render everything in it. The kernel looks those up
    /// (and so renders them) only when they are used.
    pub fn readdir_plus(
        &self,
        ino: u64,
        cookie: u64,
        mut add: impl FnMut(DirEntry, Option<Attr>) -> bool,
    ) -> FsResult<()> {
        self.readdir(ino, cookie, |e| {
            let a = if self.is_rendered(e.ino) {
                None
            } else {
                self.getattr(e.ino).ok()
            };
            add(e, a)
        })
    }

    /// Whether a file's content (and size) is rendered text.
    fn is_rendered(&self, ino: u64) -> bool {
        match Node::from_ino(ino) {
            Some(Node::Graph {
                sub: tree::GraphSub::Pbtxt,
                ..
            }) => true,
            Some(Node::Fixed(i)) => matches!(self.fixed(i), Ok(Fixed::Text { .. })),
            _ => false,
        }
    }

    /// The component of `key` right after `prefix`, and whether more components follow.
    fn next_component<'k>(key: &'k [u8], prefix: &[u8]) -> (&'k [u8], bool) {
        let rest = &key[prefix.len()..];
        match rest.iter().position(|&b| b == SEP) {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        }
    }

    fn skip_dir_target(prefix: &[u8], comp: &[u8]) -> Vec<u8> {
        // Keys under `prefix comp /` all sort below `prefix comp 0` ('0' follows '/').
        let mut t = prefix.to_vec();
        t.extend_from_slice(comp);
        t.push(SEP + 1);
        t
    }

    fn view_readdir(
        &self,
        view: u16,
        depth: u16,
        prefix: &[u8],
        cookie: u64,
        mut add: impl FnMut(DirEntry) -> bool,
    ) -> FsResult<()> {
        let ck = self.view(view)?;
        // Where to start: after the entry the cookie names.
        let (mut pos, mut first_sub) = if cookie < COOKIE_BASE {
            let start: &[u8] = if prefix.is_empty() { b"\x01" } else { prefix };
            (self.seek(view, start)?, 0usize)
        } else {
            let c = cookie - COOKIE_BASE;
            let p = tree::unpack_pos(c >> 3);
            let sub = c & 7;
            if sub == SUB_DIR {
                let key = self.key_at(view, p)?;
                if !key.starts_with(prefix) {
                    return Ok(());
                }
                let (comp, _) = Self::next_component(&key, prefix);
                (self.seek(view, &Self::skip_dir_target(prefix, comp))?, 0)
            } else {
                (Some(p), sub as usize + 1)
            }
        };
        while let Some(p) = pos {
            let key = self.key_at(view, p)?;
            if !key.starts_with(prefix) {
                break;
            }
            if hidden(&key) {
                pos = self.next(view, p)?;
                first_sub = 0;
                continue;
            }
            let (comp, is_dir) = Self::next_component(&key, prefix);
            if !tree::pos_fits(p) {
                log::warn!(
                    "{}: index too large to list key {}",
                    ck.prefix.display(),
                    String::from_utf8_lossy(&key)
                );
                pos = self.next(view, p)?;
                first_sub = 0;
                continue;
            }
            let packed = tree::pack_pos(p);
            if is_dir {
                if let Some(ino) = (Node::Dir {
                    view,
                    depth: depth + 1,
                    pos: p,
                })
                .ino()
                {
                    let e = DirEntry {
                        ino,
                        name: tree::escape(comp, true),
                        kind: Kind::Dir,
                        cookie: COOKIE_BASE + (packed << 3 | SUB_DIR),
                    };
                    if add(e) {
                        return Ok(());
                    }
                } else {
                    log::warn!(
                        "{}: key nested too deep to show: {}",
                        ck.prefix.display(),
                        String::from_utf8_lossy(&key)
                    );
                }
                pos = self.seek(view, &Self::skip_dir_target(prefix, comp))?;
                first_sub = 0;
                continue;
            }
            let t = ck.tensor_at(p).ok();
            let stem = tree::escape(comp, false);
            for (sub, kind) in Self::tensor_files(t.as_ref())
                .iter()
                .enumerate()
                .skip(first_sub)
            {
                let mut name = stem.clone();
                name.extend_from_slice(kind.suffix().as_bytes());
                let e = DirEntry {
                    ino: Self::ino(Node::File {
                        view,
                        kind: *kind,
                        pos: p,
                    })?,
                    name,
                    kind: Kind::File,
                    cookie: COOKIE_BASE + (packed << 3 | sub as u64),
                };
                if add(e) {
                    return Ok(());
                }
            }
            first_sub = 0;
            pos = self.next(view, p)?;
        }
        Ok(())
    }

    // ---------- read ----------

    pub fn read(&self, ino: u64, offset: u64, size: usize) -> FsResult<ReadBuf> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Graph { .. } => self.graph_read(ino, offset, size),
            Node::Fixed(i) => match self.fixed(i)? {
                Fixed::PassFile { path, .. } => {
                    use std::os::unix::fs::{FileExt, OpenOptionsExt};
                    // Never blocks on a FIFO swapped in for the file.
                    let f = std::fs::File::options()
                        .read(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(path)?;
                    if !f.metadata()?.is_file() {
                        return Err(FsError::Corrupt(format!(
                            "{}: no longer a regular file",
                            path.display()
                        )));
                    }
                    let mut buf = vec![0u8; size];
                    let mut got = 0;
                    while got < size {
                        let n = f.read_at(&mut buf[got..], offset + got as u64)?;
                        if n == 0 {
                            break;
                        }
                        got += n;
                    }
                    buf.truncate(got);
                    Ok(ReadBuf::Owned(buf))
                }
                Fixed::Symlink { .. } => Err(FsError::Corrupt("read of a symlink".into())),
                Fixed::Text { .. } => self.text_read(ino, offset, size),
                _ => Err(FsError::IsDir),
            },
            Node::Dir { .. } => Err(FsError::IsDir),
            Node::File { view, kind, pos } => {
                let ck = self.view(view)?;
                let t = ck.tensor_at(pos).inspect_err(|e| log::error!("{e}"))?;
                let small = |text: Vec<u8>| {
                    let a = (offset as usize).min(text.len());
                    let b = a.saturating_add(size).min(text.len());
                    ReadBuf::Owned(text[a..b].to_vec())
                };
                let r = match kind {
                    FileKind::Shape => Ok(small(Self::shape_text(&t))),
                    FileKind::Dtype => Ok(small(Self::dtype_text(&t))),
                    FileKind::Bin => ck.read(&t, offset, size),
                    FileKind::Npy => {
                        let h = Self::npy_header(&t).ok_or(FsError::NotFound)?;
                        with_header(&h, offset, size, |o, n| ck.read(&t, o, n))
                    }
                };
                r.inspect_err(|e| log::debug!("read {}: {e}", String::from_utf8_lossy(&t.key)))
            }
        }
    }

    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Fixed(i) => match self.fixed(i)? {
                Fixed::Symlink { target, .. } => Ok(target.clone()),
                _ => Err(FsError::NotSymlink),
            },
            _ => Err(FsError::NotSymlink),
        }
    }

    // ---------- xattrs ----------

    /// The raw checkpoint key (tensor files) or key prefix (directories) behind a node.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        if name != KEY_XATTR.as_bytes() {
            return Err(FsError::NoAttr);
        }
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::File { view, pos, .. } => self.key_at(view, pos),
            Node::Dir { view, depth, pos } => self.dir_prefix(view, depth, pos),
            Node::Graph { .. } => self.graph_name(ino),
            Node::Fixed(_) => Err(FsError::NoAttr),
        }
    }

    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Fixed(_) => Ok(Vec::new()),
            _ => {
                let mut v = KEY_XATTR.as_bytes().to_vec();
                v.push(0);
                Ok(v)
            }
        }
    }

    /// Total bytes of the mounted source files, for `statfs`.
    pub fn total_bytes(&self) -> u64 {
        self.views.iter().map(|v| v.source_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_components() {
        assert_eq!(dir_prefix_of(b"a/b/c", 0), Some(vec![]));
        assert_eq!(dir_prefix_of(b"a/b/c", 1), Some(b"a/".to_vec()));
        assert_eq!(dir_prefix_of(b"a/b/c", 2), Some(b"a/b/".to_vec()));
        assert_eq!(dir_prefix_of(b"a/b/c", 3), None);
        assert!(hidden(b"") && hidden(b"\0x") && !hidden(b"x"));
        assert_eq!(Fs::next_component(b"a/b/c", b"a/"), (&b"b"[..], true));
        assert_eq!(Fs::next_component(b"a/b", b"a/"), (&b"b"[..], false));
        assert_eq!(Fs::skip_dir_target(b"a/", b"b"), b"a/b0".to_vec());
    }
}
