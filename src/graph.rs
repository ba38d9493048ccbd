//! Graphs: a SavedModel's `saved_model.pb`/`.pbtxt`, a `.meta` MetaGraphDef, or a GraphDef file,
//! read into memory when the mount starts (text is held as its binary encoding) and indexed by
//! walking the wire format.
//! Opening reads only the top level of each meta graph (tags, signature and collection keys); the
//! nodes and functions of a meta graph are indexed the first time they are listed. The index
//! keeps offsets, never decoded messages, so a graph near protobuf's 2 GB limit costs a few
//! dozen bytes per node.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use prost_reflect::DynamicMessage;

use crate::descriptors::descriptor;

use crate::error::SourceError;
use crate::parse::wire::{Field, LEN};
use crate::parse::{wire, FormatError, Result};
use crate::source::bytes::{FileMeta, Store};

/// Graph files larger than protobuf's 2 GiB message limit are refused unread.
const MAX_GRAPH_FILE: usize = i32::MAX as usize;

/// What the file holds at its top level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphKind {
    /// A `SavedModel` (`saved_model.pb`): its meta graphs.
    SavedModel,
    /// A `MetaGraphDef` (TF1's `.meta`).
    MetaGraph,
    /// A bare `GraphDef` (a frozen graph).
    GraphDef,
}

impl GraphKind {
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            GraphKind::SavedModel => "tensorflow.SavedModel",
            GraphKind::MetaGraph => "tensorflow.MetaGraphDef",
            GraphKind::GraphDef => "tensorflow.GraphDef",
        }
    }
}

/// A named message in a sorted list: its name and its bytes, as ranges of the graph buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    name_at: usize,
    name_len: u32,
    body_at: usize,
    body_len: u32,
}

impl Item {
    fn new(name: Range<usize>, body: Range<usize>) -> Option<Item> {
        Some(Item {
            name_at: name.start,
            name_len: u32::try_from(name.len()).ok()?,
            body_at: body.start,
            body_len: u32::try_from(body.len()).ok()?,
        })
    }

    pub(crate) fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.name_at..self.name_at + self.name_len as usize)
            .unwrap_or(&[])
    }

    pub(crate) fn body(&self) -> Range<usize> {
        self.body_at..self.body_at + self.body_len as usize
    }
}

/// Items sorted by name (first occurrence of a name wins).
#[derive(Debug, Default)]
pub(crate) struct Space {
    pub(crate) items: Vec<Item>,
}

impl Space {
    fn build(buf: &[u8], mut items: Vec<Item>, what: &str) -> Space {
        items.sort_by(|a, b| a.name(buf).cmp(b.name(buf)));
        let before = items.len();
        items.dedup_by(|b, a| a.name(buf) == b.name(buf));
        if items.len() != before {
            log::warn!(
                "{} {what} share a name with another; only the first of each name is shown",
                before - items.len()
            );
        }
        Space { items }
    }

    /// The first item whose name is `>= key`.
    pub(crate) fn lower_bound(&self, buf: &[u8], key: &[u8]) -> usize {
        self.items.partition_point(|it| it.name(buf) < key)
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The lazily built index of one meta graph's nodes and functions.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) nodes: Space,
    pub(crate) functions: Space,
    /// The body of each function, in the order of `functions`.
    pub(crate) bodies: Vec<Space>,
    /// Const nodes with a tensor value: the name, and the TensorProto's bytes.
    pub(crate) constants: Space,
}

/// One meta graph (for a GraphDef file: the graph, as a meta graph with no other parts).
pub(crate) struct MetaGraph {
    pub(crate) tags: Vec<String>,
    pub(crate) meta_info_def: Vec<Field>,
    pub(crate) graph_def: Vec<Field>,
    pub(crate) saver_def: Vec<Field>,
    pub(crate) object_graph_def: Vec<Field>,
    pub(crate) signatures: Space,
    pub(crate) collections: Space,
    index: OnceLock<std::result::Result<Index, String>>,
}

pub(crate) struct GraphFile {
    pub(crate) path: PathBuf,
    pub(crate) meta: FileMeta,
    pub(crate) kind: GraphKind,
    /// The file's bytes (binary protobuf; a text file is held as its binary encoding).
    pub(crate) data: Vec<u8>,
    pub(crate) metas: Vec<MetaGraph>,
}

/// Map entries (`key = 1`, `value = 2`) as items.
fn map_items(buf: &[u8], entries: &[Field]) -> Result<Vec<Item>> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let key = wire::last_len(buf, e.payload_range(), 1)?;
        let value = wire::last_len(buf, e.payload_range(), 2)?;
        let name = key.map_or(e.payload..e.payload, |k| k.payload_range());
        let body = value.map_or(e.end..e.end, |v| v.payload_range());
        out.extend(Item::new(name, body));
    }
    Ok(out)
}

fn strings_of(buf: &[u8], fields: &[Field], number: u32) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for f in fields {
        for g in wire::fields_in(buf, f.payload_range()) {
            let g = g?;
            if g.number == number && g.wire == LEN {
                out.push(String::from_utf8_lossy(&buf[g.payload_range()]).into_owned());
            }
        }
    }
    Ok(out)
}

impl MetaGraph {
    fn scan(buf: &[u8], range: Range<usize>) -> Result<MetaGraph> {
        let mut m = MetaGraph {
            tags: Vec::new(),
            meta_info_def: Vec::new(),
            graph_def: Vec::new(),
            saver_def: Vec::new(),
            object_graph_def: Vec::new(),
            signatures: Space::default(),
            collections: Space::default(),
            index: OnceLock::new(),
        };
        let (mut sigs, mut colls) = (Vec::new(), Vec::new());
        for f in wire::fields_in(buf, range) {
            let f = f?;
            if f.wire != LEN {
                continue;
            }
            match f.number {
                1 => m.meta_info_def.push(f),
                2 => m.graph_def.push(f),
                3 => m.saver_def.push(f),
                4 => colls.push(f),
                5 => sigs.push(f),
                7 => m.object_graph_def.push(f),
                _ => {}
            }
        }
        m.tags = strings_of(buf, &m.meta_info_def, 4)?;
        m.signatures = Space::build(buf, map_items(buf, &sigs)?, "signatures");
        m.collections = Space::build(buf, map_items(buf, &colls)?, "collections");
        Ok(m)
    }

    fn graph_only(buf: &[u8]) -> MetaGraph {
        MetaGraph {
            tags: Vec::new(),
            meta_info_def: Vec::new(),
            // The whole file is the GraphDef: one pseudo-field covering it.
            graph_def: vec![Field::whole(2, buf.len())],
            saver_def: Vec::new(),
            object_graph_def: Vec::new(),
            signatures: Space::default(),
            collections: Space::default(),
            index: OnceLock::new(),
        }
    }

    /// The index of nodes and functions, built on first use. `Err` if the graph is damaged.
    pub(crate) fn index(&self, buf: &[u8]) -> std::result::Result<&Index, String> {
        self.index
            .get_or_init(|| Self::build_index(buf, &self.graph_def).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| e.clone())
    }

    fn build_index(buf: &[u8], graph_def: &[Field]) -> Result<Index> {
        let mut nodes = Vec::new();
        let mut consts = Vec::new();
        let mut functions = Vec::new();
        for g in graph_def {
            for f in wire::fields_in(buf, g.payload_range()) {
                let f = f?;
                match (f.number, f.wire) {
                    (1, LEN) => {
                        let (item, value) = node_item(buf, &f)?;
                        if let Some(v) = value {
                            consts.extend(Item::new(
                                item.name_at..item.name_at + item.name_len as usize,
                                v,
                            ));
                        }
                        nodes.push(item);
                    }
                    (2, LEN) => {
                        for l in wire::fields_in(buf, f.payload_range()) {
                            let l = l?;
                            if l.number == 1 && l.wire == LEN {
                                functions.push(function_item(buf, &l)?);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let functions = Space::build(buf, functions, "functions");
        let mut bodies = Vec::with_capacity(functions.len());
        for f in &functions.items {
            let mut items = Vec::new();
            for n in wire::fields_in(buf, f.body()) {
                let n = n?;
                if n.number == 3 && n.wire == LEN {
                    items.push(node_item(buf, &n)?.0);
                }
            }
            bodies.push(Space::build(buf, items, "function nodes"));
        }
        Ok(Index {
            nodes: Space::build(buf, nodes, "nodes"),
            functions,
            bodies,
            constants: Space::build(buf, consts, "constants"),
        })
    }
}

/// A NodeDef as an item, and the TensorProto of its `value` attr if it is a `Const`.
fn node_item(buf: &[u8], f: &Field) -> Result<(Item, Option<Range<usize>>)> {
    let mut name = f.payload..f.payload;
    let mut is_const = false;
    let mut value = None;
    for g in wire::fields_in(buf, f.payload_range()) {
        let g = g?;
        if g.wire != LEN {
            continue;
        }
        match g.number {
            1 => name = g.payload_range(),
            2 => is_const = &buf[g.payload_range()] == b"Const",
            5 => {
                let key = wire::last_len(buf, g.payload_range(), 1)?;
                if key.is_some_and(|k| &buf[k.payload_range()] == b"value") {
                    // AttrValue.tensor = 8
                    value = wire::last_len(buf, g.payload_range(), 2)?
                        .map(|v| wire::last_len(buf, v.payload_range(), 8))
                        .transpose()?
                        .flatten()
                        .map(|t| t.payload_range());
                }
            }
            _ => {}
        }
    }
    let item = Item::new(name, f.payload_range())
        .ok_or_else(|| FormatError::Proto("message over 4 GiB".into()))?;
    Ok((item, value.filter(|_| is_const)))
}

/// A FunctionDef as an item named by its signature's name.
fn function_item(buf: &[u8], f: &Field) -> Result<Item> {
    let name = match wire::last_len(buf, f.payload_range(), 1)? {
        Some(sig) => wire::last_len(buf, sig.payload_range(), 1)?
            .map_or(sig.payload..sig.payload, |n| n.payload_range()),
        None => f.payload..f.payload,
    };
    Item::new(name, f.payload_range())
        .ok_or_else(|| FormatError::Proto("message over 4 GiB".into()))
}

impl GraphFile {
    /// Opens `path` holding `kind`, binary or (for `.pbtxt` files) text format.
    pub(crate) fn open(
        store: &dyn Store,
        path: &Path,
        kind: GraphKind,
    ) -> std::result::Result<GraphFile, SourceError> {
        let io = |err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        };
        let fmt = |err| SourceError::Format {
            path: path.to_path_buf(),
            err,
        };
        // Graph files are read whole when the mount starts: the mount then serves exactly what
        // it opened, whatever happens to the file later (no mapping to lose: see file.rs).
        let f = store.open(path).map_err(io)?;
        let len = usize::try_from(f.len())
            .ok()
            .filter(|&l| l <= MAX_GRAPH_FILE)
            .ok_or_else(|| fmt(FormatError::Proto("file larger than 2 GiB".into())))?;
        let raw = f.read_vec(0, len).map_err(fmt)?;
        let meta = f.meta();
        let text = path.extension().is_some_and(|e| e == "pbtxt");
        let data = if text {
            let desc = descriptor(kind.type_name())
                .ok_or_else(|| fmt(FormatError::Proto("descriptor missing".into())))?;
            let s = std::str::from_utf8(&raw)
                .map_err(|_| fmt(FormatError::Text("not UTF-8 text".into())))?;
            let msg = DynamicMessage::parse_text_format(desc, s)
                .map_err(|e| fmt(FormatError::Text(e.to_string())))?;
            prost::Message::encode_to_vec(&msg)
        } else {
            raw
        };
        GraphFile::from_bytes(path, meta, kind, data)
    }

    /// A graph already in memory (binary), e.g. converted from another format's JSON.
    pub(crate) fn from_bytes(
        path: &Path,
        meta: FileMeta,
        kind: GraphKind,
        data: Vec<u8>,
    ) -> std::result::Result<GraphFile, SourceError> {
        let fmt = |err| SourceError::Format {
            path: path.to_path_buf(),
            err,
        };
        let metas = match kind {
            GraphKind::SavedModel => {
                let mut metas = Vec::new();
                for f in wire::fields(&data) {
                    let f = f.map_err(fmt)?;
                    if f.number == 2 && f.wire == LEN {
                        metas.push(MetaGraph::scan(&data, f.payload_range()).map_err(fmt)?);
                    }
                }
                metas
            }
            GraphKind::MetaGraph => vec![MetaGraph::scan(&data, 0..data.len()).map_err(fmt)?],
            GraphKind::GraphDef => {
                // Check the top level now, so a file that is not a GraphDef fails at mount.
                for f in wire::fields(&data) {
                    f.map_err(fmt)?;
                }
                vec![MetaGraph::graph_only(&data)]
            }
        };
        Ok(GraphFile {
            path: path.to_path_buf(),
            meta,
            kind,
            data,
            metas,
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data
    }
}
