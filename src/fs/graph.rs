//! Meta graphs in the filesystem core: `meta_graphs/<tags>/` with graph nodes, functions,
//! signatures, collections and constants, each a sorted name space of a meta graph (see
//! `source::graph`). Names with `/` make directories in the node spaces, exactly as checkpoint
//! keys do in `variables/`; inode numbers are positions in the sorted spaces.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::{Attr, DirEntry, Fixed, Fs, Kind, COOKIE_BASE, SEP, SUB_DIR};
use crate::error::{FsError, FsResult};
use crate::format::dtype::DType;
use crate::format::npy;
use crate::format::tensor_proto::ConstTensor;
use crate::format::wire;
use crate::render;
use crate::source::checkpoint::FileMeta;
use crate::source::file::ReadBuf;
use crate::source::graph::{GraphFile, GraphKind, Space};
use crate::tree::{self, FileKind, GraphSub, Node, Unescaped};

pub(super) const SP_NODES: u32 = 0;
pub(super) const SP_FUNCS: u32 = 1;
pub(super) const SP_SIGS: u32 = 2;
pub(super) const SP_COLLS: u32 = 3;
pub(super) const SP_CONSTS: u32 = 4;
/// Space of the body of function `i` (in sorted order): `SP_BODY0 + i`.
pub(super) const SP_BODY0: u32 = 5;

/// One meta graph as mounted.
pub(super) struct GraphMount {
    pub file: Arc<GraphFile>,
    /// Index in `file.metas`.
    pub mg: usize,
    /// The fixed directory `meta_graphs/<name>`.
    pub dir: u64,
}

/// Lazily rendered text files of a meta graph or graph file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TextId {
    MetaInfo(u16),
    Saver(u16),
    ObjectGraph(u16),
    SignaturesTxt(u16),
    /// The whole file as text, rendered piece by piece (index into `Fs::graph_files`).
    Whole(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpaceKind {
    Nodes,
    Functions,
    Signatures,
    Collections,
    Constants,
    Body,
}

impl SpaceKind {
    fn of(space: u32) -> SpaceKind {
        match space {
            SP_NODES => SpaceKind::Nodes,
            SP_FUNCS => SpaceKind::Functions,
            SP_SIGS => SpaceKind::Signatures,
            SP_COLLS => SpaceKind::Collections,
            SP_CONSTS => SpaceKind::Constants,
            _ => SpaceKind::Body,
        }
    }

    /// Whether `/` in names makes directories (as in checkpoint keys).
    fn split(self) -> bool {
        // Only function names are kept whole: each also names its body's directory.
        self != SpaceKind::Functions
    }
}

const PBTXT: &[u8] = b".pbtxt";

/// The name a meta graph's directory gets from its tags.
pub(super) fn meta_graph_dir_name(kind: GraphKind, tags: &[String]) -> Vec<u8> {
    if kind == GraphKind::GraphDef {
        return b"graphdef".to_vec();
    }
    if tags.is_empty() {
        return b"untagged".to_vec();
    }
    tree::escape(tags.join(",").as_bytes(), true)
}

fn dir_prefix_of(name: &[u8], depth: u16) -> Option<Vec<u8>> {
    super::dir_prefix_of(name, depth)
}

fn const_dtype(buf: &[u8], range: Range<usize>) -> DType {
    let mut dt = DType(0);
    for f in wire::fields_in(buf, range) {
        match f {
            Ok(f) if f.number == 1 && f.wire == wire::VARINT => dt = DType(f.value as i32),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    dt
}

fn corrupt(gm: &GraphMount, what: &str, e: impl std::fmt::Display) -> FsError {
    let e = FsError::Corrupt(format!("{}: {what}: {e}", gm.file.path.display()));
    log::error!("{e}");
    e
}

impl Fs {
    pub(super) fn graph(&self, mg: u16) -> FsResult<&GraphMount> {
        self.graphs.get(mg as usize).ok_or(FsError::NotFound)
    }

    fn space(&self, mg: u16, space: u32) -> FsResult<(&GraphMount, &Space, SpaceKind)> {
        let gm = self.graph(mg)?;
        let m = gm.file.metas.get(gm.mg).ok_or(FsError::NotFound)?;
        let kind = SpaceKind::of(space);
        let sp = match kind {
            SpaceKind::Signatures => &m.signatures,
            SpaceKind::Collections => &m.collections,
            _ => {
                let ix = m
                    .index(gm.file.bytes())
                    .map_err(|e| corrupt(gm, "graph index", e))?;
                match kind {
                    SpaceKind::Nodes => &ix.nodes,
                    SpaceKind::Functions => &ix.functions,
                    SpaceKind::Constants => &ix.constants,
                    _ => ix
                        .bodies
                        .get((space - SP_BODY0) as usize)
                        .ok_or(FsError::NotFound)?,
                }
            }
        };
        Ok((gm, sp, kind))
    }

    /// The inode of the root of a space.
    pub(super) fn space_root(mg: u16, space: u32) -> FsResult<u64> {
        Self::ino(Node::Graph {
            mg,
            space,
            sub: GraphSub::Dir,
            depth: 0,
            index: 0,
        })
    }

    fn g_prefix(buf: &[u8], sp: &Space, depth: u16, index: u32) -> FsResult<Vec<u8>> {
        if depth == 0 {
            return Ok(Vec::new());
        }
        let it = sp.items.get(index as usize).ok_or(FsError::NotFound)?;
        dir_prefix_of(it.name(buf), depth).ok_or(FsError::NotFound)
    }

    /// The files an item of a space shows, in listing order.
    fn leaf_files(buf: &[u8], sp: &Space, kind: SpaceKind, i: usize) -> &'static [GraphSub] {
        const PB: [GraphSub; 1] = [GraphSub::Pbtxt];
        const T4: [GraphSub; 4] = [
            GraphSub::Tensor(FileKind::Bin),
            GraphSub::Tensor(FileKind::Shape),
            GraphSub::Tensor(FileKind::Dtype),
            GraphSub::Tensor(FileKind::Npy),
        ];
        if kind != SpaceKind::Constants {
            return &PB;
        }
        let numpy = sp
            .items
            .get(i)
            .is_some_and(|it| const_dtype(buf, it.body()).npy_descr().is_some());
        if numpy {
            &T4
        } else {
            &T4[..3]
        }
    }

    /// Finds the item a path component names under `prefix`: for files, the item named
    /// `prefix ‖ component`; for directories, the first item under `prefix ‖ component /`.
    fn g_resolve(
        buf: &[u8],
        sp: &Space,
        split: bool,
        prefix: &[u8],
        name: &[u8],
        is_dir: bool,
    ) -> Option<usize> {
        let under = |i: usize, comp_end: usize| -> bool {
            let n = sp.items[i].name(buf);
            if is_dir && split {
                n.get(comp_end) == Some(&SEP)
            } else {
                n.len() == comp_end
            }
        };
        match tree::unescape(name, is_dir)? {
            Unescaped::Exact(comp) => {
                if split && comp.contains(&SEP) {
                    return None;
                }
                let mut target = prefix.to_vec();
                target.extend_from_slice(&comp);
                let end = target.len();
                if is_dir && split {
                    target.push(SEP);
                }
                let i = sp.lower_bound(buf, &target);
                let hit = sp.items.get(i)?.name(buf).starts_with(&target) && under(i, end);
                hit.then_some(i)
            }
            Unescaped::Hashed {
                prefix: start,
                hash,
            } => {
                let mut target = prefix.to_vec();
                target.extend_from_slice(&start);
                let mut i = sp.lower_bound(buf, &target);
                while let Some(it) = sp.items.get(i) {
                    let n = it.name(buf);
                    if !n.starts_with(&target) {
                        break;
                    }
                    let rest = &n[prefix.len()..];
                    let end = if split {
                        rest.iter().position(|&b| b == SEP).unwrap_or(rest.len())
                    } else {
                        rest.len()
                    };
                    let comp = &rest[..end];
                    if under(i, prefix.len() + end)
                        && tree::fnv1a64(comp) == hash
                        && tree::escape(comp, is_dir) == name
                    {
                        return Some(i);
                    }
                    i += 1;
                }
                None
            }
        }
    }

    pub(super) fn graph_lookup(
        &self,
        mg: u16,
        space: u32,
        depth: u16,
        index: u32,
        name: &[u8],
    ) -> FsResult<Attr> {
        let (gm, sp, kind) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        let prefix = Self::g_prefix(buf, sp, depth, index)?;
        // A file?
        let leaf = if kind == SpaceKind::Constants {
            FileKind::split(name).map(|(stem, k)| (stem, GraphSub::Tensor(k)))
        } else {
            name.strip_suffix(PBTXT).map(|stem| (stem, GraphSub::Pbtxt))
        };
        if let Some((stem, sub)) = leaf {
            if let Some(i) = Self::g_resolve(buf, sp, kind.split(), &prefix, stem, false) {
                if Self::leaf_files(buf, sp, kind, i).contains(&sub) {
                    let ino = Self::ino(Node::Graph {
                        mg,
                        space,
                        sub,
                        depth: 0,
                        index: i as u32,
                    })?;
                    return self.graph_attr(ino);
                }
            }
        }
        // A directory.
        let child = match kind {
            SpaceKind::Functions => {
                let i = Self::g_resolve(buf, sp, false, &prefix, name, true)
                    .ok_or(FsError::NotFound)?;
                let body = SP_BODY0 as u64 + i as u64;
                let (_, b, _) = self.space(mg, body.min(u32::MAX as u64) as u32)?;
                if b.is_empty() {
                    return Err(FsError::NotFound);
                }
                Self::space_root(mg, body.min(u32::MAX as u64) as u32)?
            }
            k if k.split() => {
                let i =
                    Self::g_resolve(buf, sp, true, &prefix, name, true).ok_or(FsError::NotFound)?;
                Self::ino(Node::Graph {
                    mg,
                    space,
                    sub: GraphSub::Dir,
                    depth: depth + 1,
                    index: i as u32,
                })?
            }
            _ => return Err(FsError::NotFound),
        };
        self.graph_attr(child)
    }

    pub(super) fn graph_parent(
        &self,
        mg: u16,
        space: u32,
        depth: u16,
        index: u32,
    ) -> FsResult<u64> {
        if depth == 0 {
            return if space >= SP_BODY0 {
                Self::space_root(mg, SP_FUNCS)
            } else {
                Ok(self.graph(mg)?.dir)
            };
        }
        if depth == 1 {
            return Self::space_root(mg, space);
        }
        let (gm, sp, _) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        let up = Self::g_prefix(buf, sp, depth - 1, index)?;
        let i = sp.lower_bound(buf, &up);
        Self::ino(Node::Graph {
            mg,
            space,
            sub: GraphSub::Dir,
            depth: depth - 1,
            index: i as u32,
        })
    }

    pub(super) fn graph_attr(&self, ino: u64) -> FsResult<Attr> {
        let Some(Node::Graph { mg, sub, .. }) = Node::from_ino(ino) else {
            return Err(FsError::NotFound);
        };
        let gm = self.graph(mg)?;
        let meta = gm.file.meta;
        let size = match sub {
            GraphSub::Dir => return Ok(self.dir_attr(ino, &meta)),
            // A message that cannot be rendered is still listed (size 0); reading it fails.
            GraphSub::Pbtxt => self.graph_text(ino).map_or(0, |t| t.len() as u64),
            GraphSub::Tensor(k) => match self.constant(ino) {
                Ok((_, t)) => Self::const_files_size(&t, k),
                Err(_) => 0,
            },
        };
        Ok(Self::file_attr_of(ino, size, &meta))
    }

    /// Fails (EIO) when a graph file's content cannot be produced.
    pub(super) fn graph_check(&self, ino: u64) -> FsResult<()> {
        match Node::from_ino(ino) {
            Some(Node::Graph {
                sub: GraphSub::Pbtxt,
                ..
            }) => self.graph_text(ino).map(|_| ()),
            Some(Node::Graph {
                sub: GraphSub::Tensor(_),
                ..
            }) => self.constant(ino).map(|_| ()),
            _ => Ok(()),
        }
    }

    pub(super) fn file_attr_of(ino: u64, size: u64, meta: &FileMeta) -> Attr {
        Attr {
            ino,
            size,
            kind: Kind::File,
            perm: super::file_perm(meta),
            mtime: meta.mtime,
            uid: meta.uid,
            gid: meta.gid,
        }
    }

    fn const_files_size(t: &ConstTensor, k: FileKind) -> u64 {
        match k {
            FileKind::Bin => t.served_size(),
            FileKind::Shape => Self::shape_line(&t.shape).len() as u64,
            FileKind::Dtype => Self::dtype_line(t.dtype).len() as u64,
            FileKind::Npy => t
                .dtype
                .npy_descr()
                .and_then(|d| npy::header(d, &t.shape))
                .map_or(0, |h| h.len() as u64 + t.served_size()),
        }
    }

    pub(super) fn shape_line(shape: &[u64]) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        format!("{}\n", dims.join(" ")).into_bytes()
    }

    pub(super) fn dtype_line(dtype: DType) -> Vec<u8> {
        format!("{}\n", dtype.display_name()).into_bytes()
    }

    /// The constant behind a tensor-file inode.
    fn constant(&self, ino: u64) -> FsResult<(&GraphMount, ConstTensor)> {
        let Some(Node::Graph {
            mg, space, index, ..
        }) = Node::from_ino(ino)
        else {
            return Err(FsError::NotFound);
        };
        let (gm, sp, _) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        let it = sp.items.get(index as usize).ok_or(FsError::NotFound)?;
        let t = ConstTensor::parse(buf, it.body()).map_err(|e| {
            corrupt(
                gm,
                &format!("constant {}", String::from_utf8_lossy(it.name(buf))),
                e,
            )
        })?;
        Ok((gm, t))
    }

    /// The rendered text of a `.pbtxt` inode.
    fn graph_text(&self, ino: u64) -> FsResult<Arc<Vec<u8>>> {
        let Some(Node::Graph {
            mg, space, index, ..
        }) = Node::from_ino(ino)
        else {
            return Err(FsError::NotFound);
        };
        let (gm, sp, kind) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        let it = *sp.items.get(index as usize).ok_or(FsError::NotFound)?;
        self.texts
            .get_or_render((ino, 0), || match kind {
                SpaceKind::Functions => {
                    // The FunctionDef without its node_def list (those are the files below).
                    let bytes = render::without_field(buf, it.body(), 3)?;
                    render::message_text(
                        "tensorflow.FunctionDef",
                        &bytes,
                        std::slice::from_ref(&(0..bytes.len())),
                    )
                }
                SpaceKind::Signatures => {
                    render::message_text("tensorflow.SignatureDef", buf, &[it.body()])
                }
                SpaceKind::Collections => {
                    render::message_text("tensorflow.CollectionDef", buf, &[it.body()])
                }
                _ => render::message_text("tensorflow.NodeDef", buf, &[it.body()]),
            })
            .map_err(|e| corrupt(gm, &format!("{}", String::from_utf8_lossy(it.name(buf))), e))
    }

    pub(super) fn graph_read(&self, ino: u64, offset: u64, size: usize) -> FsResult<ReadBuf> {
        let Some(Node::Graph { sub, .. }) = Node::from_ino(ino) else {
            return Err(FsError::NotFound);
        };
        let small = |text: &[u8]| {
            let a = (offset as usize).min(text.len());
            let b = a.saturating_add(size).min(text.len());
            ReadBuf::Owned(text[a..b].to_vec())
        };
        match sub {
            GraphSub::Dir => Err(FsError::IsDir),
            GraphSub::Pbtxt => Ok(small(&self.graph_text(ino)?)),
            GraphSub::Tensor(k) => {
                let (gm, t) = self.constant(ino)?;
                let buf = gm.file.bytes();
                Ok(match k {
                    FileKind::Shape => small(&Self::shape_line(&t.shape)),
                    FileKind::Dtype => small(&Self::dtype_line(t.dtype)),
                    FileKind::Bin => ReadBuf::Owned(t.read(buf, offset, size)),
                    FileKind::Npy => {
                        let h = t
                            .dtype
                            .npy_descr()
                            .and_then(|d| npy::header(d, &t.shape))
                            .ok_or(FsError::NotFound)?;
                        super::with_header(&h, offset, size, |o, n| {
                            Ok(ReadBuf::Owned(t.read(buf, o, n)))
                        })?
                    }
                })
            }
        }
    }

    pub(super) fn graph_readdir(
        &self,
        mg: u16,
        space: u32,
        depth: u16,
        index: u32,
        cookie: u64,
        add: &mut dyn FnMut(DirEntry) -> bool,
    ) -> FsResult<()> {
        let (gm, sp, kind) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        let prefix = Self::g_prefix(buf, sp, depth, index)?;
        let (mut i, mut first_sub) = if cookie < COOKIE_BASE {
            (sp.lower_bound(buf, &prefix), 0u64)
        } else {
            let c = cookie - COOKIE_BASE;
            let (i, sub) = ((c >> 3) as usize, c & 7);
            if sub == SUB_DIR && kind.split() {
                let n = sp.items.get(i).ok_or(FsError::NotFound)?.name(buf);
                let (comp, _) = Fs::next_component(n, &prefix);
                (sp.lower_bound(buf, &Fs::skip_dir_target(&prefix, comp)), 0)
            } else {
                (i, sub + 1)
            }
        };
        while let Some(it) = sp.items.get(i) {
            let n = it.name(buf);
            if !n.starts_with(&prefix) {
                break;
            }
            let cookie_of = |sub: u64| COOKIE_BASE + ((i as u64) << 3 | sub);
            let (comp, is_dir) = if kind.split() {
                Fs::next_component(n, &prefix)
            } else {
                (n, false)
            };
            if i as u32 > tree::MAX_GRAPH_INDEX {
                log::warn!("{}: too many names to list", gm.file.path.display());
                break;
            }
            if is_dir {
                match Self::ino(Node::Graph {
                    mg,
                    space,
                    sub: GraphSub::Dir,
                    depth: depth + 1,
                    index: i as u32,
                }) {
                    Ok(ino) => {
                        let e = DirEntry {
                            ino,
                            name: tree::escape(comp, true),
                            kind: Kind::Dir,
                            cookie: cookie_of(SUB_DIR),
                        };
                        if add(e) {
                            return Ok(());
                        }
                    }
                    Err(_) => log::warn!(
                        "{}: name nested too deep to show: {}",
                        gm.file.path.display(),
                        String::from_utf8_lossy(n)
                    ),
                }
                i = sp.lower_bound(buf, &Fs::skip_dir_target(&prefix, comp));
                first_sub = 0;
                continue;
            }
            let stem = tree::escape(comp, false);
            let files = Self::leaf_files(buf, sp, kind, i);
            for (s, sub) in files.iter().enumerate().skip(first_sub as usize) {
                let mut name = stem.clone();
                match sub {
                    GraphSub::Tensor(k) => name.extend_from_slice(k.suffix().as_bytes()),
                    _ => name.extend_from_slice(PBTXT),
                }
                let e = DirEntry {
                    ino: Self::ino(Node::Graph {
                        mg,
                        space,
                        sub: *sub,
                        depth: 0,
                        index: i as u32,
                    })?,
                    name,
                    kind: Kind::File,
                    cookie: cookie_of(s as u64),
                };
                if add(e) {
                    return Ok(());
                }
            }
            // A function's body directory follows its file.
            if kind == SpaceKind::Functions && first_sub <= files.len() as u64 {
                let body = SP_BODY0 as u64 + i as u64;
                if body < tree::MAX_GRAPH_SPACES as u64 {
                    let body = body as u32;
                    let (_, b, _) = self.space(mg, body)?;
                    if !b.is_empty() {
                        let e = DirEntry {
                            ino: Self::space_root(mg, body)?,
                            name: tree::escape(comp, true),
                            kind: Kind::Dir,
                            cookie: cookie_of(files.len() as u64),
                        };
                        if add(e) {
                            return Ok(());
                        }
                    }
                }
            }
            first_sub = 0;
            i += 1;
        }
        Ok(())
    }

    /// The raw name behind a graph inode (the item's name, or a directory's prefix).
    pub(super) fn graph_name(&self, ino: u64) -> FsResult<Vec<u8>> {
        let Some(Node::Graph {
            mg,
            space,
            sub,
            depth,
            index,
        }) = Node::from_ino(ino)
        else {
            return Err(FsError::NotFound);
        };
        let (gm, sp, _) = self.space(mg, space)?;
        let buf = gm.file.bytes();
        if sub == GraphSub::Dir {
            return Self::g_prefix(buf, sp, depth, index);
        }
        Ok(sp
            .items
            .get(index as usize)
            .ok_or(FsError::NotFound)?
            .name(buf)
            .to_vec())
    }

    // ---------- fixed text files ----------

    fn text_entry(
        &self,
        ino: u64,
    ) -> FsResult<(TextId, &std::sync::OnceLock<Result<super::Pieces, String>>)> {
        match self.fixed(ino)? {
            Fixed::Text { text, whole, .. } => Ok((*text, whole)),
            _ => Err(FsError::NotFound),
        }
    }

    /// The piece table of a file rendered piece by piece; built (rendering every piece once,
    /// keeping only lengths) the first time its size is asked for.
    fn pieces(&self, ino: u64, file: u16) -> FsResult<&super::Pieces> {
        let (_, whole) = self.text_entry(ino)?;
        let gf = self
            .graph_files
            .get(file as usize)
            .ok_or(FsError::NotFound)?;
        let r = whole.get_or_init(|| {
            let buf = gf.bytes();
            let list = render::saved_model_pieces(buf)?;
            let mut ends = Vec::with_capacity(list.len());
            let mut end = 0u64;
            for p in &list {
                end += render::render_piece(buf, p)?.len() as u64;
                ends.push(end);
            }
            Ok(super::Pieces { list, ends })
        });
        r.as_ref().map_err(|e| {
            let e = FsError::Corrupt(format!("{}: rendering: {e}", gf.path.display()));
            log::error!("{e}");
            e
        })
    }

    pub(super) fn text_size(&self, ino: u64) -> FsResult<u64> {
        match self.text_entry(ino)?.0 {
            TextId::Whole(f) => Ok(self.pieces(ino, f)?.ends.last().copied().unwrap_or(0)),
            id => Ok(self.text_of(ino, id)?.len() as u64),
        }
    }

    pub(super) fn text_read(&self, ino: u64, offset: u64, size: usize) -> FsResult<ReadBuf> {
        let id = self.text_entry(ino)?.0;
        let TextId::Whole(f) = id else {
            let t = self.text_of(ino, id)?;
            let a = (offset as usize).min(t.len());
            let b = a.saturating_add(size).min(t.len());
            return Ok(ReadBuf::Owned(t[a..b].to_vec()));
        };
        let pieces = self.pieces(ino, f)?;
        let gf = self.graph_files.get(f as usize).ok_or(FsError::NotFound)?;
        let mut out = Vec::with_capacity(size.min(1 << 20));
        let mut i = pieces.ends.partition_point(|&e| e <= offset);
        while out.len() < size && i < pieces.list.len() {
            let start = if i == 0 { 0 } else { pieces.ends[i - 1] };
            let text = self
                .texts
                .get_or_render((ino, i as u64 + 1), || {
                    render::render_piece(gf.bytes(), &pieces.list[i])
                })
                .map_err(|e| FsError::Corrupt(format!("{}: rendering: {e}", gf.path.display())))?;
            let from = (offset + out.len() as u64).saturating_sub(start) as usize;
            let from = from.min(text.len());
            let take = (size - out.len()).min(text.len() - from);
            out.extend_from_slice(&text[from..from + take]);
            i += 1;
        }
        Ok(ReadBuf::Owned(out))
    }

    pub(super) fn text_of(&self, ino: u64, id: TextId) -> FsResult<Arc<Vec<u8>>> {
        let parts =
            |gm: &GraphMount, f: fn(&crate::source::graph::MetaGraph) -> &Vec<wire::Field>| {
                gm.file
                    .metas
                    .get(gm.mg)
                    .map(|m| f(m).iter().map(|x| x.payload_range()).collect::<Vec<_>>())
                    .unwrap_or_default()
            };
        let (gm, r) = match id {
            TextId::MetaInfo(mg) => {
                let gm = self.graph(mg)?;
                let p = parts(gm, |m| &m.meta_info_def);
                let r = self.texts.get_or_render((ino, 0), || {
                    render::message_text("tensorflow.MetaGraphDef.MetaInfoDef", gm.file.bytes(), &p)
                });
                (gm, r)
            }
            TextId::Saver(mg) => {
                let gm = self.graph(mg)?;
                let p = parts(gm, |m| &m.saver_def);
                let r = self.texts.get_or_render((ino, 0), || {
                    render::message_text("tensorflow.SaverDef", gm.file.bytes(), &p)
                });
                (gm, r)
            }
            TextId::ObjectGraph(mg) => {
                let gm = self.graph(mg)?;
                let p = parts(gm, |m| &m.object_graph_def);
                let r = self.texts.get_or_render((ino, 0), || {
                    render::message_text("tensorflow.SavedObjectGraph", gm.file.bytes(), &p)
                });
                (gm, r)
            }
            TextId::SignaturesTxt(mg) => {
                let gm = self.graph(mg)?;
                let r = self
                    .texts
                    .get_or_render((ino, 0), || crate::render::signatures_txt(&gm.file, gm.mg));
                (gm, r)
            }
            TextId::Whole(_) => return Err(FsError::NotFound),
        };
        r.map_err(|e| corrupt(gm, "rendering", e))
    }

    /// Adds `meta_graphs/` for `file` under the fixed directory `parent`, and symlinks in
    /// `parent` to the default meta graph's entries.
    pub(super) fn add_graph(
        &mut self,
        parent: u64,
        file: GraphFile,
        want_tags: Option<&str>,
    ) -> Result<(), crate::error::SourceError> {
        let file = Arc::new(file);
        let meta = file.meta;
        let mgs = self.add_dir(parent, b"meta_graphs", meta);
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut dirs = Vec::new();
        for (i, m) in file.metas.iter().enumerate() {
            if self.graphs.len() >= tree::MAX_META_GRAPHS {
                log::warn!(
                    "{}: more than {} meta graphs in this mount; the rest are not shown",
                    file.path.display(),
                    tree::MAX_META_GRAPHS
                );
                break;
            }
            let id = self.graphs.len() as u16;
            let mut name = meta_graph_dir_name(file.kind, &m.tags);
            if names.contains(&name) {
                let mut k = 2;
                while names.contains(&[name.as_slice(), format!("~{k}").as_bytes()].concat()) {
                    k += 1;
                }
                name.extend_from_slice(format!("~{k}").as_bytes());
            }
            names.push(name.clone());
            let dir = self.add_dir(mgs, &name, meta);
            self.graphs.push(GraphMount {
                file: file.clone(),
                mg: i,
                dir,
            });
            if !m.graph_def.is_empty() {
                self.link(dir, b"graph", Self::space_root(id, SP_NODES).unwrap_or(0));
                self.link(
                    dir,
                    b"functions",
                    Self::space_root(id, SP_FUNCS).unwrap_or(0),
                );
                self.link(
                    dir,
                    b"constants",
                    Self::space_root(id, SP_CONSTS).unwrap_or(0),
                );
            }
            if !m.signatures.is_empty() {
                self.link(
                    dir,
                    b"signatures",
                    Self::space_root(id, SP_SIGS).unwrap_or(0),
                );
            }
            if !m.collections.is_empty() {
                self.link(
                    dir,
                    b"collections",
                    Self::space_root(id, SP_COLLS).unwrap_or(0),
                );
            }
            let texts: [(&[u8], bool, TextId); 4] = [
                (
                    b"meta_info_def.pbtxt",
                    !m.meta_info_def.is_empty(),
                    TextId::MetaInfo(id),
                ),
                (
                    b"saver_def.pbtxt",
                    !m.saver_def.is_empty(),
                    TextId::Saver(id),
                ),
                (
                    b"object_graph.pbtxt",
                    !m.object_graph_def.is_empty(),
                    TextId::ObjectGraph(id),
                ),
                (
                    b"signatures.txt",
                    file.kind != GraphKind::GraphDef,
                    TextId::SignaturesTxt(id),
                ),
            ];
            for (n, present, text) in texts {
                if present {
                    let t = self.add(Fixed::Text {
                        parent: dir,
                        text,
                        meta,
                        whole: OnceLock::new(),
                    });
                    self.link(dir, n, t);
                }
            }
            dirs.push((dir, name, m.tags.clone()));
        }
        // The default meta graph: the only one, else the one --tags names, else "serve".
        let chosen = if dirs.len() == 1 {
            dirs.first()
        } else if let Some(want) = want_tags {
            let mut want: Vec<&str> = want.split(',').filter(|t| !t.is_empty()).collect();
            want.sort_unstable();
            dirs.iter().find(|(_, _, tags)| {
                let mut t: Vec<&str> = tags.iter().map(|s| s.as_str()).collect();
                t.sort_unstable();
                t == want
            })
        } else {
            dirs.iter().find(|(_, _, tags)| tags == &["serve"])
        };
        if let Some((dir, name, _)) = chosen {
            let entries = match self.fixed(*dir) {
                Ok(Fixed::Dir { children, .. }) => children.clone(),
                _ => Vec::new(),
            };
            for (n, _) in entries {
                let mut target = b"meta_graphs/".to_vec();
                target.extend_from_slice(name);
                target.push(b'/');
                target.extend_from_slice(&n);
                let l = self.add(Fixed::Symlink {
                    parent,
                    target,
                    meta,
                });
                self.link(parent, &n, l);
            }
        } else if want_tags.is_some() {
            return Err(crate::error::SourceError::Invalid {
                path: file.path.clone(),
                msg: format!(
                    "no meta graph has the tag set {:?} (it has: {})",
                    want_tags.unwrap_or_default(),
                    dirs.iter()
                        .map(|(_, n, _)| String::from_utf8_lossy(n).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            });
        }
        if file.kind == GraphKind::SavedModel {
            let id = self.graph_files.len() as u16;
            self.graph_files.push(file.clone());
            let t = self.add(Fixed::Text {
                parent,
                text: TextId::Whole(id),
                meta,
                whole: OnceLock::new(),
            });
            self.link(parent, b"saved_model.pbtxt", t);
        }
        Ok(())
    }
}
