//! One meta graph's name spaces as a subtree: `graph/` (nodes), `functions/` (and each
//! function's body), `signatures/`, `collections/`, `constants/`. Each is a sorted name space
//! of the meta graph (see [`crate::graph`]) served by the key-prefix engine, `/` in names making
//! directories as checkpoint keys do in `variables/` (function names stay one component).
//! Local node numbers use the graph layout (`space | file | depth | index`, see
//! [`crate::namespace::ino::graph`]).

use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

use super::{Kind, KEY_XATTR};
use crate::error::{FsError, FsResult};
use crate::fs::keyspace::{self, Item, Names};
use crate::fs::subtree::{slice_of, Content, Entry, NodeAttr, Size, Subtree};
use crate::fs::tensor_files::{dtype_text, npy_header, shape_text, with_header};
use crate::fs::text::{cached, render_error, text_id, Texts};
use crate::graph::{GraphFile, GraphKind, Space};
use crate::namespace::ino::{cookie, graph as layout, Ino};
use crate::namespace::{self, FileKind};
use crate::parse::dtype::DType;
use crate::parse::tensor_proto::ConstTensor;
use crate::parse::{wire, FormatError};
use crate::render;

pub(crate) const SP_NODES: u32 = 0;
pub(crate) const SP_FUNCS: u32 = 1;
pub(crate) const SP_SIGS: u32 = 2;
pub(crate) const SP_COLLS: u32 = 3;
pub(crate) const SP_CONSTS: u32 = 4;
/// Space of the body of function `i` (in sorted order): `SP_BODY0 + i`.
const SP_BODY0: u32 = 5;

const PBTXT: &[u8] = b".pbtxt";

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

    /// Whether `/` in names makes directories. Only function names are kept whole: each also
    /// names its body's directory.
    fn split(self) -> bool {
        self != SpaceKind::Functions
    }
}

/// What a graph node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    Dir,
    Pbtxt,
    Tensor(FileKind),
}

impl Sub {
    fn code(self) -> u64 {
        match self {
            Sub::Dir => 0,
            Sub::Pbtxt => 1,
            Sub::Tensor(k) => k as u64,
        }
    }

    fn from_code(c: u64) -> Option<Sub> {
        match c {
            0 => Some(Sub::Dir),
            1 => Some(Sub::Pbtxt),
            c => FileKind::ALL
                .into_iter()
                .find(|k| *k as u64 == c)
                .map(Sub::Tensor),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    space: u32,
    sub: Sub,
    depth: u16,
    index: u32,
}

impl Node {
    fn decode(local: u64) -> FsResult<Node> {
        Ok(Node {
            space: layout::SPACE.get(local) as u32,
            sub: Sub::from_code(layout::FILE.get(local)).ok_or(FsError::NotFound)?,
            depth: layout::DEPTH.get(local) as u16,
            index: layout::INDEX.get(local) as u32,
        })
    }

    fn encode(self) -> Option<u64> {
        Some(
            layout::SPACE.put(self.space as u64)?
                | layout::FILE.put(self.sub.code())?
                | layout::DEPTH.put(self.depth as u64)?
                | layout::INDEX.put(self.index as u64)?,
        )
    }

    fn root(space: u32) -> Node {
        Node {
            space,
            sub: Sub::Dir,
            depth: 0,
            index: 0,
        }
    }
}

/// A name space as a sorted list of names.
struct SpaceNames<'a> {
    buf: &'a [u8],
    sp: &'a Space,
    split: bool,
}

impl Names for SpaceNames<'_> {
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        let i = self.sp.lower_bound(self.buf, key);
        Ok((i < self.sp.len()).then_some(i as u64))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok((pos + 1 < self.sp.len() as u64).then_some(pos + 1))
    }
    fn name(&self, pos: u64) -> FsResult<Vec<u8>> {
        self.sp
            .items
            .get(pos as usize)
            .map(|it| it.name(self.buf).to_vec())
            .ok_or(FsError::NotFound)
    }
    fn split(&self) -> bool {
        self.split
    }
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

/// The name a meta graph's directory gets from its tags.
pub(crate) fn meta_graph_dir_name(kind: GraphKind, tags: &[String]) -> Vec<u8> {
    if kind == GraphKind::GraphDef {
        return b"graphdef".to_vec();
    }
    if tags.is_empty() {
        return b"untagged".to_vec();
    }
    namespace::escape(tags.join(",").as_bytes(), true)
}

/// One meta graph as mounted.
pub(crate) struct GraphTree {
    id: u16,
    /// The directory `meta_graphs/<tags>/` the name spaces are linked in.
    dir: Ino,
    file: Arc<GraphFile>,
    /// Index in `file.metas`.
    mg: usize,
    texts: Arc<Texts>,
    text_id: u64,
}

impl GraphTree {
    pub(crate) fn new(
        id: u16,
        dir: Ino,
        file: Arc<GraphFile>,
        mg: usize,
        texts: Arc<Texts>,
    ) -> GraphTree {
        GraphTree {
            id,
            dir,
            file,
            mg,
            texts,
            text_id: text_id(),
        }
    }

    /// The inode of a name space's root (`SP_NODES`, ...) in graph subtree `id`.
    pub(crate) fn space_root(id: u16, space: u32) -> Option<Ino> {
        Ino::new(id, Node::root(space).encode()?)
    }

    fn ino(&self, n: Node) -> FsResult<Ino> {
        n.encode()
            .and_then(|l| Ino::new(self.id, l))
            .ok_or(FsError::NotFound)
    }

    fn corrupt(&self, what: &str, e: impl std::fmt::Display) -> FsError {
        FsError::corrupt(
            what,
            self.file.path.display(),
            FormatError::Proto(e.to_string()),
        )
    }

    fn space(&self, space: u32) -> FsResult<(&Space, SpaceKind)> {
        let m = self.file.metas.get(self.mg).ok_or(FsError::NotFound)?;
        let kind = SpaceKind::of(space);
        let sp = match kind {
            SpaceKind::Signatures => &m.signatures,
            SpaceKind::Collections => &m.collections,
            _ => {
                let ix = m
                    .index(self.file.bytes())
                    .map_err(|e| self.corrupt("graph index", e))?;
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
        Ok((sp, kind))
    }

    fn names<'a>(&'a self, sp: &'a Space, kind: SpaceKind) -> SpaceNames<'a> {
        SpaceNames {
            buf: self.file.bytes(),
            sp,
            split: kind.split(),
        }
    }

    /// The files an item of a space shows, in listing order.
    fn leaf_files(&self, sp: &Space, kind: SpaceKind, i: usize) -> &'static [Sub] {
        const PB: [Sub; 1] = [Sub::Pbtxt];
        const T4: [Sub; 4] = [
            Sub::Tensor(FileKind::Bin),
            Sub::Tensor(FileKind::Shape),
            Sub::Tensor(FileKind::Dtype),
            Sub::Tensor(FileKind::Npy),
        ];
        if kind != SpaceKind::Constants {
            return &PB;
        }
        let numpy = sp.items.get(i).is_some_and(|it| {
            const_dtype(self.file.bytes(), it.body())
                .npy_descr()
                .is_some()
        });
        if numpy {
            &T4
        } else {
            &T4[..3]
        }
    }

    /// The body space of function `i`, if it has a non-empty body.
    fn body_space(&self, i: u64) -> Option<u32> {
        let body = u32::try_from(SP_BODY0 as u64 + i).ok()?;
        layout::SPACE.put(body as u64)?;
        let (b, _) = self.space(body).ok()?;
        (!b.is_empty()).then_some(body)
    }

    fn item_name(&self, n: Node) -> FsResult<Vec<u8>> {
        let (sp, _) = self.space(n.space)?;
        sp.items
            .get(n.index as usize)
            .map(|it| it.name(self.file.bytes()).to_vec())
            .ok_or(FsError::NotFound)
    }

    /// The constant behind a tensor-file node.
    fn constant(&self, n: Node) -> FsResult<ConstTensor> {
        let (sp, _) = self.space(n.space)?;
        let buf = self.file.bytes();
        let it = sp.items.get(n.index as usize).ok_or(FsError::NotFound)?;
        ConstTensor::parse(buf, it.body()).map_err(|e| {
            FsError::corrupt(
                format!("constant {}", String::from_utf8_lossy(it.name(buf))),
                self.file.path.display(),
                e,
            )
        })
    }

    /// The rendered text of a `.pbtxt` node.
    fn text(&self, n: Node, local: u64) -> FsResult<Arc<Vec<u8>>> {
        let (sp, kind) = self.space(n.space)?;
        let buf = self.file.bytes();
        let it = *sp.items.get(n.index as usize).ok_or(FsError::NotFound)?;
        cached(&self.texts, (self.text_id, local), || match kind {
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
        .map_err(|e| render_error(&self.file, &String::from_utf8_lossy(it.name(buf)), e))
    }

    /// The node of a directory inode, with its space and the names there.
    fn dir_node(&self, dir: u64) -> FsResult<(Node, &Space, SpaceKind)> {
        let n = Node::decode(dir)?;
        if n.sub != Sub::Dir {
            return Err(FsError::NotDir);
        }
        let (sp, kind) = self.space(n.space)?;
        Ok((n, sp, kind))
    }

    fn const_file_size(t: &ConstTensor, k: FileKind) -> u64 {
        match k {
            FileKind::Bin => t.served_size(),
            FileKind::Shape => shape_text(&t.shape).len() as u64,
            FileKind::Dtype => dtype_text(t.dtype).len() as u64,
            FileKind::Npy => {
                npy_header(t.dtype, &t.shape).map_or(0, |h| h.len() as u64 + t.served_size())
            }
        }
    }
}

impl Subtree for GraphTree {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let n = Node::decode(local)?;
        let (kind, size) = match n.sub {
            Sub::Dir => (Kind::Dir, Size::Known(0)),
            // A message that cannot be rendered is still listed; reading it fails.
            Sub::Pbtxt => (
                Kind::File,
                self.text(n, local)
                    .map_or(Size::Broken, |t| Size::Known(t.len() as u64)),
            ),
            Sub::Tensor(k) => (
                Kind::File,
                self.constant(n)
                    .map_or(Size::Broken, |t| Size::Known(Self::const_file_size(&t, k))),
            ),
        };
        Ok(NodeAttr {
            kind,
            size,
            meta: self.file.meta,
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        Ok(match Node::decode(local)?.sub {
            Sub::Dir => Kind::Dir,
            _ => Kind::File,
        })
    }

    fn rendered(&self, local: u64) -> bool {
        Node::decode(local).is_ok_and(|n| n.sub == Sub::Pbtxt)
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        let (n, sp, kind) = self.dir_node(dir)?;
        let names = self.names(sp, kind);
        let prefix = keyspace::dir_prefix(&names, n.depth, n.index as u64)?;
        // A file?
        let leaf = if kind == SpaceKind::Constants {
            FileKind::split(name).map(|(stem, k)| (stem, Sub::Tensor(k)))
        } else {
            name.strip_suffix(PBTXT).map(|stem| (stem, Sub::Pbtxt))
        };
        if let Some((stem, sub)) = leaf {
            if let Some(i) = keyspace::resolve(&names, &prefix, stem, false)? {
                if self.leaf_files(sp, kind, i as usize).contains(&sub) {
                    return self.ino(Node {
                        space: n.space,
                        sub,
                        depth: 0,
                        index: i as u32,
                    });
                }
            }
        }
        // A directory.
        let i = keyspace::resolve(&names, &prefix, name, true)?.ok_or(FsError::NotFound)?;
        match kind {
            SpaceKind::Functions => {
                let body = self.body_space(i).ok_or(FsError::NotFound)?;
                self.ino(Node::root(body))
            }
            _ => self.ino(Node {
                space: n.space,
                sub: Sub::Dir,
                depth: n.depth + 1,
                index: i as u32,
            }),
        }
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        let n = Node::decode(dir)?;
        if n.depth == 0 {
            return if n.space >= SP_BODY0 {
                self.ino(Node::root(SP_FUNCS)).map(Some)
            } else {
                Ok(Some(self.dir))
            };
        }
        let (sp, kind) = self.space(n.space)?;
        match keyspace::parent(&self.names(sp, kind), n.depth, n.index as u64)? {
            Some((depth, p)) => self
                .ino(Node {
                    space: n.space,
                    sub: Sub::Dir,
                    depth,
                    index: p as u32,
                })
                .map(Some),
            None => Ok(Some(self.dir)),
        }
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let n = Node::decode(dir)?;
        if n.sub != Sub::Dir {
            return Err(FsError::NotDir);
        }
        let (sp, kind) = self.space(n.space)?;
        let names = self.names(sp, kind);
        let prefix = keyspace::dir_prefix(&names, n.depth, n.index as u64)?;
        let path = &self.file.path;
        keyspace::list(&names, &prefix, c, |item| match item {
            Item::Dir { pos, comp } => {
                let node = Node {
                    space: n.space,
                    sub: Sub::Dir,
                    depth: n.depth + 1,
                    index: pos as u32,
                };
                let ino = self.ino(node).ok().filter(|_| pos <= layout::INDEX.max());
                Ok(keyspace::add_dir(path, pos, comp, ino, add))
            }
            Item::Leaf {
                pos,
                comp,
                first_sub,
            } => {
                if pos > layout::INDEX.max() {
                    log::warn!("{}: too many names to list", path.display());
                    return Ok(true);
                }
                let subs = self.leaf_files(sp, kind, pos as usize);
                let files = subs.iter().map(|sub| {
                    let suffix: &[u8] = match sub {
                        Sub::Tensor(k) => k.suffix().as_bytes(),
                        _ => PBTXT,
                    };
                    let node = Node {
                        space: n.space,
                        sub: *sub,
                        depth: 0,
                        index: pos as u32,
                    };
                    (suffix, self.ino(node))
                });
                if keyspace::add_files(pos, comp, first_sub, files, add)? {
                    return Ok(true);
                }
                // A function's body directory follows its file.
                if kind == SpaceKind::Functions && first_sub <= subs.len() as u64 {
                    if let Some(body) = self.body_space(pos) {
                        let name = namespace::escape(comp, true);
                        let c = cookie::of(pos, subs.len() as u64).ok_or(FsError::NotFound)?;
                        return Ok(add(Entry {
                            ino: self.ino(Node::root(body))?,
                            name: &name,
                            kind: Kind::Dir,
                            cookie: c,
                        }));
                    }
                }
                Ok(false)
            }
        })
    }

    /// A constant's `.bin` and `.npy`.
    fn content(&self, local: u64) -> Content {
        match Node::decode(local).map(|n| n.sub) {
            Ok(Sub::Tensor(FileKind::Bin | FileKind::Npy)) => Content::Tensor,
            _ => Content::Other,
        }
    }

    fn open(&self, local: u64) -> FsResult<()> {
        let n = Node::decode(local)?;
        match n.sub {
            Sub::Dir => Ok(()),
            Sub::Pbtxt => self.text(n, local).map(|_| ()),
            Sub::Tensor(_) => self.constant(n).map(|_| ()),
        }
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        let n = Node::decode(local)?;
        match n.sub {
            Sub::Dir => Err(FsError::IsDir),
            Sub::Pbtxt => Ok(slice_of(&self.text(n, local)?, offset, size)),
            Sub::Tensor(k) => {
                let t = self.constant(n)?;
                let buf = self.file.bytes();
                Ok(match k {
                    FileKind::Shape => slice_of(&shape_text(&t.shape), offset, size),
                    FileKind::Dtype => slice_of(&dtype_text(t.dtype), offset, size),
                    FileKind::Bin => t.read(buf, offset, size).into(),
                    FileKind::Npy => {
                        let h = npy_header(t.dtype, &t.shape).ok_or(FsError::NotFound)?;
                        with_header(&h, offset, size, |o, n| Ok(t.read(buf, o, n).into()))?
                    }
                })
            }
        }
    }

    fn xattrs(&self, local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        let n = Node::decode(local)?;
        let name = if n.sub == Sub::Dir {
            let (sp, kind) = self.space(n.space)?;
            keyspace::dir_prefix(&self.names(sp, kind), n.depth, n.index as u64)?
        } else {
            self.item_name(n)?
        };
        Ok(vec![(KEY_XATTR, name)])
    }
}
