//! `variables/`: a checkpoint's tensors as files (`<key>.bin`, `.shape`, `.dtype`, `.npy`),
//! `/` in keys making directories, over any [`TensorSet`] (V2 bundle, V1 table); and the two
//! views that mirror it name for name, one `<key>.txt` per tensor: `text/` (its values as text:
//! fixed-width cells for numeric dtypes, [`Columns`], whose size and offsets follow from the
//! index entry; strings one per line, [`super::string_text`]) and `stats/` (its statistics,
//! numeric dtypes only: a fixed-size record, [`stats::text_len`], computed in two streaming
//! passes when first read and kept in the mount's text cache). Each view shows only the tensors
//! it has a file for, and the directories leading to them.
//!
//! Local node numbers use the key-space layout (`view | file | depth | pos`, see
//! [`crate::namespace::ino::keyspace`]): `view` picks the tree ([`View`]), a directory is the first
//! key under it, a file its tensor's position; the only per-file state is the bounded caches
//! of rendered text.
//!
//! Every tensor file carries extended attributes: `user.tfmount.key` (the raw key), `.dtype`,
//! `.shape`, `.crc32c` (the stored CRC-32C, unmasked, 8 hex digits), `.shard` and `.offset`
//! (where the bytes are stored; a partitioned tensor has one value per saved slice, one per
//! line; `-` where there is none).
//!
//! The read path keeps, per serving thread, the last tensor it resolved (its index entry and
//! its opened bytes), so a sequential read of a large tensor does no index lookup, no protobuf
//! decode and takes no lock once its checksum has been verified.

use crate::sync::lock;
use bytes::Bytes;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Kind, KEY_XATTR};
use crate::cache::Lru;
use crate::error::{FsError, FsResult};
use crate::formats::tensors::{Stored, TensorData, TensorInfo, TensorSet, POS_BITS};
use crate::fs::keyspace::{self, Item, Names};
use crate::fs::string_text::StringText;
use crate::fs::subtree::{slice_of, Content, Entry, NodeAttr, Size, Subtree};
use crate::fs::tensor_files::{self, dtype_text, npy_header, shape_text, with_header};
use crate::fs::text::{text_id, Texts};
use crate::namespace::ino::{keyspace as layout, Ino};
use crate::namespace::names::TXT;
use crate::namespace::FileKind;
use crate::parse::dtype::DT_STRING;
use crate::parse::FormatError;
use crate::render::stats::{self, FirstPass};
use crate::render::values::Columns;
use crate::source::bytes::FileMeta;

const _: () = assert!(layout::POS.bits == POS_BITS);

pub(crate) const DTYPE_XATTR: &str = "user.tfmount.dtype";
pub(crate) const SHAPE_XATTR: &str = "user.tfmount.shape";
pub(crate) const CRC_XATTR: &str = "user.tfmount.crc32c";
pub(crate) const SHARD_XATTR: &str = "user.tfmount.shard";
pub(crate) const OFFSET_XATTR: &str = "user.tfmount.offset";

/// Bytes of string `text/` file state (marks, the text of a cursor) kept per checkpoint.
const STRING_TEXT_BYTES: usize = 32 << 20;
/// `.bin` bytes read at a time when computing statistics.
const STATS_CHUNK: u64 = 256 << 10;
/// Statistics of a tensor of at most this many bytes keep its bytes from the first pass for the
/// second (read once).
const STATS_KEEP: u64 = 16 << 20;
/// Text bytes rendered at a time for a read of a numeric `text/` file.
const TEXT_PIECE: u64 = 256 << 10;

/// The `file` field of a local node: a directory, one of the tensor's files in `variables/`
/// (its [`FileKind`] value), or the `.txt` of `text/` and `stats/`.
const FILE_DIR: u64 = 0;
const FILE_TXT: u64 = 6;

/// A file of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum File {
    Tensor(FileKind),
    /// `text/<key>.txt`, `stats/<key>.txt`.
    Txt,
}

/// `variables/`'s files in [`FileKind::ALL`] order.
const TENSOR_FILES: [File; 4] = [
    File::Tensor(FileKind::Bin),
    File::Tensor(FileKind::Shape),
    File::Tensor(FileKind::Dtype),
    File::Tensor(FileKind::Npy),
];

impl File {
    fn code(self) -> u64 {
        match self {
            File::Tensor(k) => k as u64,
            File::Txt => FILE_TXT,
        }
    }

    fn from_code(c: u64) -> Option<File> {
        if c == FILE_TXT {
            return Some(File::Txt);
        }
        FileKind::ALL
            .into_iter()
            .find(|k| *k as u64 == c)
            .map(File::Tensor)
    }

    fn suffix(self) -> &'static str {
        match self {
            File::Tensor(k) => k.suffix(),
            File::Txt => TXT,
        }
    }

    /// Splits a file name into its stem and the file its suffix names.
    fn split(name: &[u8]) -> Option<(&[u8], File)> {
        if let Some(stem) = name.strip_suffix(TXT.as_bytes()) {
            return Some((stem, File::Txt));
        }
        FileKind::split(name).map(|(stem, k)| (stem, File::Tensor(k)))
    }
}

/// Which tree of the key space a node is in (the `view` field of its local number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// `variables/`: `.bin`, `.shape`, `.dtype`, `.npy`.
    Variables = 0,
    /// `text/`: `.txt`, the values as text.
    Text = 1,
    /// `stats/`: `.txt`, statistics.
    Stats = 2,
}

impl View {
    const ALL: [View; 3] = [View::Variables, View::Text, View::Stats];

    /// The name the view's root is linked under, beside `variables`.
    pub(crate) fn name(self) -> &'static [u8] {
        match self {
            View::Variables => b"variables",
            View::Text => b"text",
            View::Stats => b"stats",
        }
    }
}

/// A node of the subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir { view: View, depth: u16, pos: u64 },
    File { view: View, kind: File, pos: u64 },
}

impl Node {
    fn decode(local: u64) -> FsResult<Node> {
        let pos = layout::POS.get(local);
        let view = View::ALL
            .into_iter()
            .find(|v| *v as u64 == layout::VIEW.get(local))
            .ok_or(FsError::NotFound)?;
        Ok(match layout::FILE.get(local) {
            FILE_DIR => Node::Dir {
                view,
                depth: layout::DEPTH.get(local) as u16,
                pos,
            },
            c => {
                let kind = File::from_code(c).ok_or(FsError::NotFound)?;
                // Each view has its own kinds of files.
                if (view == View::Variables) == (kind == File::Txt) {
                    return Err(FsError::NotFound);
                }
                Node::File { view, kind, pos }
            }
        })
    }

    fn encode(self) -> Option<u64> {
        let (view, file, depth, pos) = match self {
            Node::Dir { view, depth, pos } => (view, FILE_DIR, depth as u64, pos),
            Node::File { view, kind, pos } => (view, kind.code(), 0, pos),
        };
        Some(
            layout::VIEW.put(view as u64)?
                | layout::FILE.put(file)?
                | layout::DEPTH.put(depth)?
                | layout::POS.put(pos)?,
        )
    }
}

/// A tensor set as a sorted list of names, as one view shows it: `text/` and `stats/` leave out
/// the tensors they have no file for (and so the directories that would lead only to those).
struct ViewNames<'a> {
    v: &'a Variables,
    view: View,
}

impl Names for ViewNames<'_> {
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        self.v.set.seek(key)
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        self.v.set.next(pos)
    }
    fn name(&self, pos: u64) -> FsResult<Vec<u8>> {
        self.v.set.key(pos)
    }
    fn hidden(&self, name: &[u8]) -> bool {
        self.v.set.hidden(name)
    }
    fn hidden_at(&self, pos: u64, name: &[u8]) -> bool {
        self.hidden(name)
            || (self.view != View::Variables && self.v.files(self.view, pos).is_empty())
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

/// Opened tensors the serving threads share (a count, each weighing 1).
const OPENED_SHARED: usize = 16;

pub(crate) struct Variables {
    id: u16,
    /// The directory `variables/` (and `text/`, `stats/`) is linked in.
    parent: Ino,
    uid: u64,
    set: Arc<dyn TensorSet>,
    meta: FileMeta,
    /// The mount's text cache (`stats/` texts, under `stats_id`).
    texts: Arc<Texts>,
    stats_id: u64,
    /// `text/` files of string tensors (their size and marks), by position.
    string_texts: Lru<u64, Arc<StringText>>,
    /// Tensors opened lately, shared by the serving threads: a thread's first read of a tensor
    /// another thread is streaming reuses its opened bytes (one read-ahead stream per tensor
    /// for remote sources). Consulted only when the thread's own slot misses.
    opened: Lru<u64, Arc<dyn TensorData>>,
    /// Whether a resolved tensor is kept between requests (the per-thread slot and `opened`):
    /// not with `-o cache_size=0`, where nothing of the index outlives a request.
    reuse: bool,
    /// Held while a string `text/` file's state is made (one pass per file).
    making: Mutex<()>,
    /// Whether directories are numbered by the set's anchors ([`TensorSet::anchor`]: an edited
    /// set), not by their first tensor.
    anchored: bool,
}

impl Variables {
    pub(crate) fn new(
        id: u16,
        parent: Ino,
        set: Arc<dyn TensorSet>,
        texts: Arc<Texts>,
        reuse: bool,
    ) -> Variables {
        Variables {
            id,
            parent,
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            meta: set.meta(),
            texts,
            stats_id: text_id(),
            string_texts: Lru::new(STRING_TEXT_BYTES),
            opened: Lru::new(OPENED_SHARED),
            reuse,
            making: Mutex::new(()),
            anchored: set.anchor(b"").is_some(),
            set,
        }
    }

    /// The local number of the `.npy` file being written through handle `fh` of an editable
    /// tree (see [`crate::fs::edit`]), and back.
    fn pending_file(fh: u64) -> Option<u64> {
        Node::File {
            view: View::Variables,
            kind: File::Tensor(FileKind::Npy),
            pos: crate::formats::edited::PENDING.checked_add(fh)?,
        }
        .encode()
    }

    fn pending_handle(local: u64) -> Option<u64> {
        match Node::decode(local).ok()? {
            Node::File {
                view: View::Variables,
                pos,
                ..
            } => pos.checked_sub(crate::formats::edited::PENDING),
            _ => None,
        }
    }

    /// The inode of the directory at `depth` whose first shown tensor is at `pos`: numbered by
    /// the set's anchor of its prefix where the set has them.
    fn dir_ino(&self, view: View, depth: u16, pos: u64) -> FsResult<Ino> {
        let pos = match self.anchored && depth > 0 {
            true => {
                let prefix =
                    keyspace::prefix_of(&self.set.key(pos)?, depth).ok_or(FsError::NotFound)?;
                self.set.anchor(&prefix).unwrap_or(pos)
            }
            false => pos,
        };
        self.ino(Node::Dir { view, depth, pos })
    }

    /// The local number of a view's root directory.
    pub(crate) fn view_root(view: View) -> u64 {
        layout::VIEW.put(view as u64).unwrap_or(0)
    }

    fn ino(&self, n: Node) -> FsResult<Ino> {
        n.encode()
            .and_then(|l| Ino::new(self.id, l))
            .ok_or(FsError::NotFound)
    }

    fn names(&self, view: View) -> ViewNames<'_> {
        ViewNames { v: self, view }
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
        if !self.reuse {
            return self.set.info(pos).map(Arc::new);
        }
        if let Some(i) = self.with_last(pos, |l| l.info.clone()) {
            return Ok(i);
        }
        let i = Arc::new(self.set.info(pos)?);
        self.with_last(pos, |l| l.info = Some(i.clone()));
        Ok(i)
    }

    fn data(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        if !self.reuse {
            return self.set.open(pos);
        }
        if let Some(d) = self.with_last(pos, |l| l.data.clone()) {
            return Ok(d);
        }
        let d = self
            .opened
            .get_or_insert_with(pos, || self.set.open(pos).map(|d| (d, 1)))?;
        self.with_last(pos, |l| l.data = Some(d.clone()));
        Ok(d)
    }

    /// The size of a file. Of the views' files, from the index entry alone — except a string
    /// tensor's text, whose size one rendering pass gives (see [`super::string_text`]).
    fn file_size(&self, view: View, kind: File, pos: u64) -> FsResult<Size> {
        match view {
            View::Text => {
                return Ok(Size::Known(match self.columns(pos)? {
                    Some(c) => c.len(),
                    None => self.string_text(pos)?.len(),
                }))
            }
            View::Stats => {
                let info = self.info(pos)?;
                let len = stats::text_len(info.dtype, info.num_elements())
                    .map_err(|e| self.corrupt(pos, e.to_string()))?;
                return Ok(Size::Known(len));
            }
            View::Variables => {}
        }
        let File::Tensor(kind) = kind else {
            return Err(FsError::NotFound);
        };
        let info = self.info(pos)?;
        Ok(Size::Known(match kind {
            FileKind::Shape => shape_text(&info.shape).len() as u64,
            FileKind::Dtype => dtype_text(info.dtype).len() as u64,
            FileKind::Bin => self.data(pos)?.size(),
            FileKind::Npy => {
                let h = npy_header(info.dtype, &info.shape).ok_or(FsError::NotFound)?;
                h.len() as u64 + self.data(pos)?.size()
            }
        }))
    }

    /// The files the tensor at `pos` shows in `view`. A tensor whose entry is damaged shows
    /// what it can (reading fails).
    fn files(&self, view: View, pos: u64) -> &'static [File] {
        let dtype = self.info(pos).ok().map(|i| i.dtype);
        let txt = match view {
            View::Variables => return &TENSOR_FILES[..tensor_files::files(dtype).len()],
            View::Text => dtype.is_none_or(|d| Columns::new(d, &[]).is_ok()),
            View::Stats => dtype.is_none_or(|d| FirstPass::new(d).is_ok()),
        };
        if txt {
            &[File::Txt]
        } else {
            &[]
        }
    }

    /// A damaged item of the tensor at `pos`.
    fn corrupt(&self, pos: u64, msg: String) -> FsError {
        let key = self.set.key(pos).unwrap_or_default();
        FsError::corrupt(
            format!("tensor {}", String::from_utf8_lossy(&key)),
            self.set.path().display(),
            FormatError::Text(msg),
        )
    }

    /// The fixed-width layout of the `text/` file of the tensor at `pos`; `None` for strings.
    fn columns(&self, pos: u64) -> FsResult<Option<Columns>> {
        let info = self.info(pos)?;
        Columns::new(info.dtype, &info.shape).map_err(|e| self.corrupt(pos, e.to_string()))
    }

    /// Text bytes `[offset, offset + size)` of a numeric tensor's `text/` file: only the
    /// elements the range covers are read and rendered, [`TEXT_PIECE`] of text at a time.
    fn read_columns(&self, pos: u64, c: &Columns, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        let range = c.covering(offset, size as u64);
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(size as u64).min(c.len());
        let data = self.data(pos)?;
        let (cell, es) = (c.cell(), c.elem_size());
        let batch = (TEXT_PIECE / cell).max(1);
        let mut out = Vec::with_capacity(((end - offset) as usize).min(TEXT_PIECE as usize));
        let mut buf = Vec::new();
        let mut k = range.start;
        while k < range.end {
            let n = batch.min(range.end - k);
            let want = (n * es) as usize;
            let bytes = data.read(k * es, want)?;
            if bytes.len() != want {
                return Err(self.corrupt(
                    pos,
                    format!(
                        "{} bytes at offset {} where {want} were expected",
                        bytes.len(),
                        k * es
                    ),
                ));
            }
            buf.clear();
            c.render(k, &bytes, &mut buf)
                .map_err(|e| self.corrupt(pos, e.to_string()))?;
            let t0 = k * cell;
            let from = (offset.saturating_sub(t0) as usize).min(buf.len());
            let to = ((end - t0) as usize).min(buf.len());
            out.extend_from_slice(&buf[from..to]);
            k += n;
        }
        Ok(out)
    }

    /// The `text/` file of the string tensor at `pos` (its state kept in a bounded LRU).
    fn string_text(&self, pos: u64) -> FsResult<Arc<StringText>> {
        if let Some(t) = self.string_texts.get(&pos) {
            return Ok(t);
        }
        let _one = lock(&self.making);
        if let Some(t) = self.string_texts.get(&pos) {
            return Ok(t);
        }
        let info = self.info(pos)?;
        let data = self.set.open(pos)?;
        let what = format!("tensor {}", String::from_utf8_lossy(&info.key));
        let file = self.set.path().display().to_string();
        let t = Arc::new(StringText::new(info.dtype, &info.shape, data, what, file)?);
        self.string_texts.insert(pos, t.clone(), t.weight());
        Ok(t)
    }

    /// The `stats/` text of the tensor at `pos`, the first time it is read: two passes over its
    /// bytes ([`TensorData::scan`], the first also checking them), both [`STATS_CHUNK`] at a
    /// time into one buffer; the bytes of a tensor of at most [`STATS_KEEP`] bytes are kept
    /// from the first pass for the second, which then reads nothing. Exactly the size `stat`
    /// reported, or an error.
    fn stats_text(&self, pos: u64) -> FsResult<Arc<Vec<u8>>> {
        self.texts.get_or_insert_with((self.stats_id, pos), || {
            let info = self.info(pos)?;
            let data = self.data(pos)?;
            let bad = |e: stats::StatsError| self.corrupt(pos, e.to_string());
            let mut first = FirstPass::new(info.dtype).map_err(bad)?;
            let size = data.size();
            // A small tensor's bytes, kept from the first pass for the second.
            let mut kept = Vec::with_capacity(if size <= STATS_KEEP { size as usize } else { 0 });
            let mut buf = vec![0u8; STATS_CHUNK as usize];
            let whole = |n: u64| {
                if n == size {
                    Ok(())
                } else {
                    Err(self.corrupt(pos, format!("{n} bytes where {size} were expected")))
                }
            };
            whole(data.scan(&mut buf, &mut |b| {
                first.push(b);
                if size <= STATS_KEEP {
                    kept.extend_from_slice(b);
                }
            })?)?;
            let mut second = first.finish().map_err(bad)?;
            if size <= STATS_KEEP {
                second.push(&kept);
            } else {
                whole(data.scan(&mut buf, &mut |b| second.push(b))?)?;
            }
            let text = second.finish().map_err(bad)?.to_text();
            let want = stats::text_len(info.dtype, info.num_elements()).map_err(bad)?;
            if text.len() as u64 != want {
                return Err(self.corrupt(
                    pos,
                    format!(
                        "{} bytes of statistics where {want} were expected",
                        text.len()
                    ),
                ));
            }
            let w = text.len();
            Ok((Arc::new(text), w))
        })
    }

    /// The extended attributes of the tensor at `pos` (see [`tensor_xattrs`]).
    fn tensor_xattrs(&self, pos: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        let info = self.info(pos).ok();
        tensor_xattrs(&*self.set, pos, info.as_deref())
    }
}

/// The extended attributes of the tensor at `pos` of `set` whose index entry is `info` (its key
/// only if its entry is damaged: `None`). A partitioned tensor's per-slice values are separated
/// by one space, so no value holds a newline (which `getfattr -d` would print as base64).
pub(crate) fn tensor_xattrs(
    set: &dyn TensorSet,
    pos: u64,
    info: Option<&TensorInfo>,
) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
    let key = set.key(pos)?;
    let Some(info) = info else {
        return Ok(vec![(KEY_XATTR, key)]);
    };
    let dims: Vec<String> = info.shape.iter().map(|d| d.to_string()).collect();
    let stored: Vec<Stored> = match info.stored {
        Some(s) => vec![s],
        None => set.slice_locations(pos).unwrap_or_default(),
    };
    let lines = |f: &dyn Fn(&Stored) -> String| -> Vec<u8> {
        if stored.is_empty() {
            return b"-".to_vec();
        }
        stored
            .iter()
            .map(f)
            .collect::<Vec<_>>()
            .join(" ")
            .into_bytes()
    };
    let mut out = vec![
        (KEY_XATTR, key),
        (DTYPE_XATTR, info.dtype.display_name().into_bytes()),
        (SHAPE_XATTR, dims.join(" ").into_bytes()),
        (
            CRC_XATTR,
            lines(&|s| s.crc32c.map_or("-".into(), |c| format!("{c:08x}"))),
        ),
        (SHARD_XATTR, lines(&|s| s.shard.to_string())),
        (OFFSET_XATTR, lines(&|s| s.offset.to_string())),
    ];
    // The format's own attributes (quantization...), those the tensor has.
    let names = set.attr_names();
    if !names.is_empty() {
        let values = set.attrs(pos).unwrap_or_default();
        for (name, v) in names.iter().zip(values) {
            if let Some(v) = v {
                out.push((*name, v.into_bytes()));
            }
        }
    }
    Ok(out)
}

impl Subtree for Variables {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let (kind, size) = match Node::decode(local)? {
            Node::Dir { .. } => (Kind::Dir, Size::Known(0)),
            // A tensor whose entry or data is damaged is still listed; reading it fails.
            Node::File { view, kind, pos } => (
                Kind::File,
                self.file_size(view, kind, pos).unwrap_or(Size::Broken),
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

    /// A string tensor's `text/` file: its size means rendering it.
    fn rendered(&self, local: u64) -> bool {
        match Node::decode(local) {
            Ok(Node::File {
                view: View::Text,
                pos,
                ..
            }) => self.info(pos).is_ok_and(|i| i.dtype == DT_STRING),
            _ => false,
        }
    }

    /// `variables/`'s `.bin` and `.npy` files.
    fn content(&self, local: u64) -> Content {
        match Node::decode(local) {
            Ok(Node::File {
                view: View::Variables,
                kind: File::Tensor(FileKind::Bin | FileKind::Npy),
                ..
            }) => Content::Tensor,
            _ => Content::Other,
        }
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        let Node::Dir { view, depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        let names = self.names(view);
        let prefix = keyspace::dir_prefix(&names, depth, pos)?;
        if let Some((stem, kind)) = File::split(name) {
            if let Some(p) = keyspace::resolve(&names, &prefix, stem, false)? {
                if self.files(view, p).contains(&kind) {
                    return self.ino(Node::File { view, kind, pos: p });
                }
            }
            return Err(FsError::NotFound);
        }
        let p = keyspace::resolve(&names, &prefix, name, true)?.ok_or(FsError::NotFound)?;
        self.dir_ino(view, depth + 1, p)
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        let Node::Dir { view, depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        match keyspace::parent(&self.names(view), depth, pos)? {
            None => Ok(Some(self.parent)),
            Some((depth, pos)) => self.dir_ino(view, depth, pos).map(Some),
        }
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let Node::Dir { view, depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        let names = self.names(view);
        let prefix = keyspace::dir_prefix(&names, depth, pos)?;
        let path = self.set.path();
        keyspace::list(&names, &prefix, c, |item| match item {
            Item::Dir { pos, comp } => {
                let ino = self.dir_ino(view, depth + 1, pos).ok();
                Ok(keyspace::add_dir(path, pos, comp, ino, add))
            }
            Item::Leaf {
                pos,
                comp,
                first_sub,
            } => {
                let files = self.files(view, pos).iter().map(|k| {
                    (
                        k.suffix().as_bytes(),
                        self.ino(Node::File {
                            view,
                            kind: *k,
                            pos,
                        }),
                    )
                });
                keyspace::add_files(pos, comp, first_sub, files, add)
            }
        })
    }

    fn open(&self, local: u64) -> FsResult<()> {
        match Node::decode(local)? {
            Node::Dir { .. } => Ok(()),
            Node::File { view, kind, pos } => {
                self.file_size(view, kind, pos)?;
                // The views' sizes come from the index: a tensor whose data cannot be resolved
                // (a missing shard, slices that do not fit) fails here, as its `.bin` does.
                if view != View::Variables {
                    self.data(pos)?;
                }
                Ok(())
            }
        }
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        let Node::File { view, kind, pos } = Node::decode(local)? else {
            return Err(FsError::IsDir);
        };
        match (view, kind) {
            (View::Text, _) => match self.columns(pos)? {
                Some(c) => self.read_columns(pos, &c, offset, size).map(Bytes::from),
                None => self.string_text(pos)?.read(offset, size),
            },
            (View::Stats, _) => Ok(slice_of(&self.stats_text(pos)?, offset, size)),
            (_, File::Tensor(FileKind::Bin)) => self.data(pos)?.read(offset, size),
            (_, File::Tensor(FileKind::Shape)) => {
                Ok(slice_of(&shape_text(&self.info(pos)?.shape), offset, size))
            }
            (_, File::Tensor(FileKind::Dtype)) => {
                Ok(slice_of(&dtype_text(self.info(pos)?.dtype), offset, size))
            }
            (_, File::Tensor(FileKind::Npy)) => {
                let info = self.info(pos)?;
                let h = npy_header(info.dtype, &info.shape).ok_or(FsError::NotFound)?;
                let data = self.data(pos)?;
                with_header(&h, offset, size, |o, n| data.read(o, n))
            }
            (_, File::Txt) => Err(FsError::NotFound),
        }
    }

    fn named(&self, dir: u64, name: &[u8]) -> FsResult<crate::fs::subtree::Named> {
        use crate::fs::subtree::Named;
        let Node::Dir { view, depth, pos } = Node::decode(dir)? else {
            return Err(FsError::NotDir);
        };
        if view != View::Variables || !self.anchored {
            return Err(FsError::ReadOnly);
        }
        let names = self.names(view);
        let prefix = keyspace::dir_prefix(&names, depth, pos)?;
        let exact = |escaped: &[u8], is_dir: bool| -> FsResult<Vec<u8>> {
            match crate::namespace::unescape(escaped, is_dir) {
                Some(crate::namespace::Unescaped::Exact(c)) if !c.contains(&keyspace::SEP) => {
                    let mut k = prefix.clone();
                    k.extend_from_slice(&c);
                    Ok(k)
                }
                _ => Err(FsError::Invalid),
            }
        };
        if let Some((stem, File::Tensor(kind))) = File::split(name) {
            return Ok(match keyspace::resolve(&names, &prefix, stem, false)? {
                Some(p) => Named::File {
                    key: self.set.key(p)?,
                    kind,
                    pos: Some(p),
                },
                None => Named::File {
                    key: exact(stem, false)?,
                    kind,
                    pos: None,
                },
            });
        }
        let exists = keyspace::resolve(&names, &prefix, name, true)?;
        let mut p = match exists {
            Some(p) => {
                keyspace::prefix_of(&self.set.key(p)?, depth + 1).ok_or(FsError::NotFound)?
            }
            None => exact(name, true)?,
        };
        if p.last() != Some(&keyspace::SEP) {
            p.push(keyspace::SEP);
        }
        Ok(Named::Dir {
            prefix: p,
            exists: exists.is_some(),
        })
    }

    fn dir_inos(&self, prefix: &[u8]) -> Vec<(Ino, bool)> {
        if !self.anchored {
            return Vec::new();
        }
        let depth = prefix.iter().filter(|&&b| b == keyspace::SEP).count() as u16;
        let pos = if depth == 0 {
            Some(0)
        } else {
            self.set.anchor(prefix)
        };
        let Some(pos) = pos else {
            return Vec::new();
        };
        View::ALL
            .into_iter()
            .filter_map(|view| {
                self.ino(Node::Dir { view, depth, pos })
                    .ok()
                    .map(|i| (i, view == View::Variables))
            })
            .collect()
    }

    fn pending_local(&self, fh: u64) -> Option<u64> {
        self.anchored.then_some(())?;
        Self::pending_file(fh)
    }

    fn pending_of(&self, local: u64) -> Option<u64> {
        self.anchored.then_some(())?;
        Self::pending_handle(local)
    }

    fn tensor_file_ino(&self, kind: FileKind, pos: u64) -> Option<Ino> {
        self.anchored.then_some(())?;
        self.ino(Node::File {
            view: View::Variables,
            kind: File::Tensor(kind),
            pos,
        })
        .ok()
    }

    fn writable(&self, local: u64) -> bool {
        self.anchored
            && matches!(
                Node::decode(local),
                Ok(Node::Dir {
                    view: View::Variables,
                    ..
                }) | Ok(Node::File {
                    view: View::Variables,
                    kind: File::Tensor(FileKind::Npy | FileKind::Bin),
                    ..
                })
            )
    }

    fn tensor_file(&self, local: u64) -> FsResult<(Vec<u8>, FileKind, u64)> {
        match Node::decode(local)? {
            Node::File {
                view: View::Variables,
                kind: File::Tensor(kind),
                pos,
            } if self.anchored => Ok((self.set.key(pos)?, kind, pos)),
            Node::Dir { .. } => Err(FsError::IsDir),
            _ => Err(FsError::ReadOnly),
        }
    }

    fn xattrs(&self, local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        Ok(match Node::decode(local)? {
            Node::Dir { depth: 0, .. } => Vec::new(),
            Node::Dir { depth, pos, .. } => {
                vec![(
                    KEY_XATTR,
                    keyspace::dir_prefix(&self.names(View::Variables), depth, pos)?,
                )]
            }
            Node::File { pos, .. } => self.tensor_xattrs(pos)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_codes_and_suffixes() {
        for (f, k) in TENSOR_FILES.iter().zip(FileKind::ALL) {
            assert_eq!(*f, File::Tensor(k));
        }
        for f in TENSOR_FILES.into_iter().chain([File::Txt]) {
            assert_eq!(File::from_code(f.code()), Some(f));
            let name = format!("x{}", f.suffix());
            assert_eq!(File::split(name.as_bytes()), Some((&b"x"[..], f)));
        }
        assert_eq!(File::from_code(FILE_DIR), None);
        assert_eq!(File::from_code(1), None);
        assert_eq!(File::from_code(7), None);
        for view in View::ALL {
            let root = Node::decode(Variables::view_root(view)).unwrap();
            assert_eq!(
                root,
                Node::Dir {
                    view,
                    depth: 0,
                    pos: 0
                }
            );
            for f in TENSOR_FILES.into_iter().chain([File::Txt]) {
                let n = Node::File {
                    view,
                    kind: f,
                    pos: 9,
                };
                let ok = (view == View::Variables) != (f == File::Txt);
                assert_eq!(Node::decode(n.encode().unwrap()).ok(), ok.then_some(n));
            }
        }
        assert!(Node::decode(layout::VIEW.put(3).unwrap()).is_err());
    }
}
