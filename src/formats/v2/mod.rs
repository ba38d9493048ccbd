//! TensorFlow's V2 checkpoint (tensor bundle: `PREFIX.index` + `PREFIX.data-NNNNN-of-NNNNN`)
//! behind the format seam. Its extras: the TF2 object graph (readable names), TF1's `.meta`
//! beside it, and the fast path of `verify` and `diff`: the stored CRC-32C of every tensor and
//! slice, slices under their own keys, unreadable index blocks reported with the keys they hold.

pub(crate) mod checkpoint;
#[cfg(test)]
mod hostile_values;
pub(crate) mod object_graph;
pub mod strings;
pub(crate) mod write;

use crate::sync::lock;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::SourceError;
use crate::formats::caches::Caches;
use crate::formats::integrity::{bare, Entry, Handle, Integrity, Item, Piece, Walk};
use crate::formats::names;
use crate::formats::tensors::TensorSet;
use crate::formats::v2::checkpoint::{data_file_name, index_file_name, Checkpoint, Tensor};
use crate::parse::bundle::Data;
use crate::parse::dtype::{DT_STRING, DT_VARIANT};
use crate::parse::slice_key::Extent;
use crate::parse::table::{Block, Pos};
use crate::parse::{bundle, slice_key, table as sstable};
use crate::source::bytes::{EntryKind, Store};

/// The V2 format.
pub(crate) struct V2;

/// Strips a trailing `.index` or `.data-NNNNN-of-NNNNN` so a tab-completed file works as a prefix.
fn as_prefix(path: &Path) -> Option<PathBuf> {
    let s = path.to_str()?;
    if let Some(p) = s.strip_suffix(".index") {
        return Some(PathBuf::from(p));
    }
    let i = s.rfind(".data-")?;
    let tail = &s[i + 6..];
    let ok = tail.len() == 14
        && tail.as_bytes()[5..9] == *b"-of-"
        && tail[..5].bytes().all(|b| b.is_ascii_digit())
        && tail[9..].bytes().all(|b| b.is_ascii_digit());
    ok.then(|| PathBuf::from(&s[..i]))
}

impl Format for V2 {
    fn name(&self) -> &'static str {
        "V2 checkpoint"
    }

    fn source(&self) -> &'static str {
        "a checkpoint prefix P with a P.index file, such as dir/model.ckpt-1000 (or the path of its .index or .data-* file)"
    }

    /// `PATH.index` exists; or PATH is one of a prefix's files (`P.index`, `P.data-*`).
    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        let found = |p: PathBuf| Detected {
            path: p,
            files: Vec::new(),
            format: &V2,
        };
        if store.is_file(&index_file_name(path)) {
            return Some(found(path.to_path_buf()));
        }
        let p = as_prefix(path)?;
        store.is_file(&index_file_name(&p)).then(|| found(p))
    }

    /// Every `P.index` file: `(base name of P, P)`.
    fn in_dir(
        &self,
        _store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        entries
            .iter()
            .filter(|(_, kind)| *kind == EntryKind::File)
            .filter_map(|(name, _)| {
                let stem = name.to_str()?.strip_suffix(".index")?.to_string();
                let prefix = crate::formats::v2::checkpoint::prefix_of(dir, &stem);
                Some((stem, prefix))
            })
            .collect()
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        Ok(Arc::new(OpenedV2 {
            ck: Arc::new(open(ctx, &found.path)?),
            caches: ctx.caches.clone(),
        }))
    }
}

/// Opens the V2 checkpoint with prefix `prefix`.
pub(crate) fn open(ctx: &OpenCtx, prefix: &Path) -> Result<Checkpoint, SourceError> {
    Checkpoint::open(
        ctx.store,
        prefix,
        ctx.caches.clone(),
        ctx.verify,
        ctx.crc_first,
    )
}

/// An opened V2 checkpoint.
pub(crate) struct OpenedV2 {
    pub(crate) ck: Arc<Checkpoint>,
    caches: Arc<Caches>,
}

impl Opened for OpenedV2 {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.ck.clone()
    }

    /// TF1's Saver writes `PREFIX.meta`.
    fn meta_graph(&self) -> Option<PathBuf> {
        let mut p = self.ck.prefix().as_os_str().to_owned();
        p.push(".meta");
        Some(PathBuf::from(p))
    }

    fn object_graph(&self) -> Option<crate::proto::TrackableObjectGraph> {
        object_graph(&self.ck)
    }

    /// A TF2 checkpoint: it stores an object graph (one index lookup; the graph itself is read
    /// when the names are).
    fn has_names(&self) -> bool {
        matches!(self.ck.lookup(names::OBJECT_GRAPH_KEY), Ok(Some(_)))
    }

    fn names(&self) -> Vec<(String, String)> {
        self.object_graph()
            .map(|tog| names::checkpoint_names(&tog))
            .unwrap_or_default()
    }

    fn integrity(&self, store: Arc<dyn Store>) -> Box<dyn Integrity> {
        // The header (the entry under the empty key) was parsed by `open`; its shard count is
        // needed to name data files.
        let num_shards = (|| {
            let p = self.ck.table().seek(b"").ok()??;
            let (blk, i) = self.ck.table().entry(p).ok()?;
            bundle::parse_header(blk.value(i)).ok()
        })()
        .map(|h| h.num_shards);
        match num_shards {
            Some(num_shards) => Box::new(Bundle {
                store,
                prefix: self.ck.prefix().to_path_buf(),
                cache: self.caches.clone(),
                raw: self.ck.clone(),
                checked: OnceLock::new(),
                num_shards,
                separators: OnceLock::new(),
                shard_len: Mutex::new(HashMap::new()),
            }),
            // Not reached: `open` parsed the same header.
            None => Box::new(crate::formats::integrity::Generic::new(
                self.ck.clone(),
                vec![Item::BadEntry {
                    key: b"[header]".to_vec(),
                    reason: format!(
                        "{}: cannot read the bundle header",
                        index_file_name(self.ck.prefix()).display()
                    ),
                }],
            )),
        }
    }
}

/// The object graph a TF2 checkpoint stores as a string tensor.
fn object_graph(ck: &Checkpoint) -> Option<crate::proto::TrackableObjectGraph> {
    use prost::Message;
    let t = ck.lookup(names::OBJECT_GRAPH_KEY).ok()??;
    let data = ck.open_tensor(&t).ok()?;
    let bytes = data.read(0, usize::try_from(data.size()).ok()?).ok()?;
    // One string element: an 8-byte length, then the serialized proto.
    let proto = bytes.get(8..)?;
    crate::proto::TrackableObjectGraph::decode(proto)
        .inspect_err(|e| log::warn!("{}: object graph: {e}", ck.prefix().display()))
        .ok()
}

// ---------------------------------------------------------------------------------------------
// The fast path of verify and diff
// ---------------------------------------------------------------------------------------------

/// A V2 bundle read through its index (stored CRC-32Cs, data shards), unchecked; the CRCs are
/// checked by the caller, or by a second, checking opening of it (strings, variants).
struct Bundle {
    store: Arc<dyn Store>,
    prefix: PathBuf,
    cache: Arc<Caches>,
    /// The checkpoint as opened, without CRC checks.
    raw: Arc<Checkpoint>,
    /// The same, opened with CRC checks, when a piece needs the core to check it.
    checked: OnceLock<Result<Checkpoint, String>>,
    num_shards: u32,
    /// The index block's separator keys (block `b` holds the keys in `(sep[b-1], sep[b]]`).
    separators: OnceLock<Option<Vec<Vec<u8>>>>,
    /// Length of each data file looked at so far (or why it has none), by shard number.
    shard_len: Mutex<HashMap<u32, Result<u64, String>>>,
}

/// Where a piece's bytes are.
struct At {
    shard: u32,
    offset: u64,
    tensor: Tensor,
}

impl Bundle {
    fn checked(&self) -> Result<&Checkpoint, String> {
        self.checked
            .get_or_init(|| {
                Checkpoint::open(&*self.store, &self.prefix, self.cache.clone(), true, true)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| e.clone())
    }

    fn separators(&self) -> Option<&Vec<Vec<u8>>> {
        self.separators
            .get_or_init(|| {
                let f = self.store.open(&index_file_name(&self.prefix)).ok()?;
                let footer = sstable::read_footer(&*f).ok()?;
                let blk = Block::parse(sstable::read_block_at(&*f, footer.index).ok()?).ok()?;
                Some((0..blk.len()).map(|i| blk.key(i).to_vec()).collect())
            })
            .as_ref()
    }

    fn entry(&self, t: Tensor) -> Entry {
        let (partitioned, nbytes, crc) = match t.entry.data {
            Data::Contiguous { size, crc, .. } => {
                (false, size, Some(crate::parse::unmask_crc(crc)))
            }
            Data::Sliced(_) => (true, 0, None),
        };
        Entry {
            key: t.key.clone(),
            dtype: t.entry.dtype.display_name(),
            shape: t.entry.shape.clone(),
            partitioned,
            nbytes,
            crc,
            handle: Handle(Arc::new(t)),
        }
    }

    fn piece(&self, t: Tensor, extent: Vec<(u64, u64)>) -> Result<Piece, String> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = t.entry.data
        else {
            return Err("a slice entry is itself partitioned".into());
        };
        let d = t.entry.dtype;
        Ok(Piece {
            extent,
            nbytes: size,
            crc: Some(crate::parse::unmask_crc(crc)),
            file: data_file_name(&self.prefix, shard, self.num_shards),
            checked_by_core: d == DT_STRING || d == DT_VARIANT || d.elem_size().is_none(),
            handle: Handle(Arc::new(At {
                shard,
                offset,
                tensor: t,
            })),
        })
    }
}

impl Integrity for Bundle {
    fn path(&self) -> &Path {
        &self.prefix
    }

    fn walk(&self) -> Walk<'_> {
        Box::new(BundleWalk {
            b: self,
            block: 0,
            entry: 0,
            current: None,
        })
    }

    /// The stored pieces of a tensor: itself, or its slices (checked to tile the tensor, each
    /// present in the index with the tensor's dtype and the slice's shape).
    fn pieces(&self, t: &Entry) -> Result<Vec<Piece>, String> {
        let tensor = t.handle.get::<Tensor>()?;
        let slices = match &tensor.entry.data {
            Data::Contiguous { .. } => return Ok(vec![self.piece(tensor.clone(), Vec::new())?]),
            Data::Sliced(s) => s,
        };
        let shape = &t.shape;
        bundle::check_tiling(shape, slices).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(slices.len());
        for s in slices {
            let extent = extent_of(shape, s);
            let what = || format!("slice {}", show_extent(&extent));
            let st = self
                .raw
                .lookup(&slice_key::encode(&t.key, s))
                .map_err(|e| format!("{}: {}", what(), bare(e, &self.prefix, &t.key)))?
                .ok_or_else(|| format!("{}: its entry is missing from the index", what()))?;
            if st.entry.dtype != tensor.entry.dtype
                || st.entry.shape != bundle::slice_shape(shape, s)
            {
                return Err(format!(
                    "{}: its entry does not match the tensor's dtype or the slice's shape",
                    what()
                ));
            }
            out.push(self.piece(st, extent)?);
        }
        Ok(out)
    }

    /// A whole tensor of a fixed-size dtype in a local data file (served as stored).
    fn stored_in_local_file(&self, t: &Entry) -> Option<(PathBuf, u64)> {
        if self.store.is_remote() || self.store.stats_line().is_some() {
            return None;
        }
        let tensor = t.handle.get::<Tensor>().ok()?;
        let d = tensor.entry.dtype;
        if d == DT_STRING || d == DT_VARIANT || d.elem_size().is_none() {
            return None;
        }
        match tensor.entry.data {
            Data::Contiguous { shard, offset, .. } => {
                Some((data_file_name(&self.prefix, shard, self.num_shards), offset))
            }
            Data::Sliced(_) => None,
        }
    }

    /// Each data file is looked at once (`stat`); reading the piece finds any other trouble.
    fn piece_present(&self, p: &Piece) -> Result<(), String> {
        let at = p.handle.get::<At>()?;
        let end = at.offset.saturating_add(p.nbytes);
        let len = {
            let mut known = lock(&self.shard_len);
            known
                .entry(at.shard)
                .or_insert_with(|| match self.store.open(&p.file) {
                    Ok(f) => Ok(f.len()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err(format!("data file {} is missing", p.file.display()))
                    }
                    Err(e) => Err(format!("data file {}: {e}", p.file.display())),
                })
                .clone()?
        };
        if len < end {
            return Err(format!(
                "data file {} is truncated: {len} bytes, the tensor is stored at bytes {}..{end}",
                p.file.display(),
                at.offset
            ));
        }
        Ok(())
    }

    fn read_piece(
        &self,
        p: &Piece,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String> {
        let at = p.handle.get::<At>()?;
        let b = self
            .raw
            .read(&at.tensor, offset, len)
            .map_err(|e| bare(e, &self.prefix, &at.tensor.key))?;
        f(&b);
        Ok(b.len())
    }

    fn check_piece(&self, p: &Piece) -> Result<u64, String> {
        let tensor = &p.handle.get::<At>()?.tensor;
        let d = tensor.entry.dtype;
        if d != DT_STRING && d != DT_VARIANT {
            return Err(format!("dtype {} cannot be read", d.display_name()));
        }
        let ck = self.checked()?;
        let r = if d == DT_STRING {
            ck.served_size(tensor).map(|_| ())
        } else {
            ck.read(tensor, 0, 0).map(|_| ())
        };
        r.map_err(|e| bare(e, &self.prefix, &tensor.key))?;
        Ok(p.nbytes)
    }

    fn served_size(&self, t: &Entry) -> Result<u64, String> {
        self.raw
            .served_size(t.handle.get::<Tensor>()?)
            .map_err(|e| bare(e, &self.prefix, &t.key))
    }

    fn read_served(&self, t: &Entry, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.raw
            .read(t.handle.get::<Tensor>()?, offset, len)
            .map(Vec::from)
            .map_err(|e| bare(e, &self.prefix, &t.key))
    }

    fn read_served_with(
        &self,
        t: &Entry,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String> {
        let b = self
            .raw
            .read(t.handle.get::<Tensor>()?, offset, len)
            .map_err(|e| bare(e, &self.prefix, &t.key))?;
        f(&b);
        Ok(b.len())
    }

    fn read_served_into(&self, t: &Entry, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
        self.raw
            .read_into(t.handle.get::<Tensor>()?, offset, buf)
            .map_err(|e| bare(e, &self.prefix, &t.key))
    }
}

fn extent_of(shape: &[u64], s: &[Extent]) -> Vec<(u64, u64)> {
    shape
        .iter()
        .zip(s)
        .map(|(&d, e)| {
            if e.length < 0 {
                (0, d)
            } else {
                (e.start as u64, e.length as u64)
            }
        })
        .collect()
}

/// A slice as TensorFlow writes it in `shape_and_slices`: `start,length` per dimension, `:`
/// between dimensions.
pub(crate) fn show_extent(e: &[(u64, u64)]) -> String {
    let v: Vec<String> = e.iter().map(|(s, l)| format!("{s},{l}")).collect();
    v.join(":")
}

fn hidden(key: &[u8]) -> bool {
    key.first().is_none_or(|&b| b == 0)
}

/// A V2 walk: one index block at a time.
struct BundleWalk<'a> {
    b: &'a Bundle,
    block: u32,
    entry: u32,
    current: Option<Arc<Block>>,
}

impl Iterator for BundleWalk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let table = self.b.raw.table();
        let blocks = u32::try_from(table.num_blocks()).unwrap_or(u32::MAX);
        loop {
            if self.block >= blocks {
                return None;
            }
            let blk = match &self.current {
                Some(b) => b.clone(),
                None => match table.block(self.block) {
                    Ok(b) => {
                        self.current = Some(b.clone());
                        self.entry = 0;
                        b
                    }
                    Err(e) => {
                        let b = self.block;
                        self.block += 1;
                        let seps = self.b.separators();
                        let sep = |i: usize| seps.and_then(|s| s.get(i).cloned());
                        return Some(Item::BadBlock {
                            block: b,
                            blocks,
                            after: b.checked_sub(1).and_then(|p| sep(p as usize)),
                            up_to: sep(b as usize),
                            reason: e.to_string(),
                        });
                    }
                },
            };
            let i = self.entry as usize;
            let Some(key) = blk.key_checked(i) else {
                self.current = None;
                self.block += 1;
                continue;
            };
            self.entry += 1;
            if hidden(key) {
                continue;
            }
            let pos = Pos {
                block: self.block,
                entry: i as u32,
            };
            return Some(match self.b.raw.tensor_at(pos) {
                Ok(t) => Item::Tensor(self.b.entry(t)),
                Err(e) => Item::BadEntry {
                    key: key.to_vec(),
                    reason: format!("index entry unreadable: {}", bare(e, &self.b.prefix, key)),
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_from_file_names() {
        assert_eq!(
            as_prefix(Path::new("d/m.ckpt-5.index")),
            Some(PathBuf::from("d/m.ckpt-5"))
        );
        assert_eq!(
            as_prefix(Path::new("d/m.ckpt-5.data-00001-of-00003")),
            Some(PathBuf::from("d/m.ckpt-5"))
        );
        assert_eq!(as_prefix(Path::new("d/m.ckpt-5.data-1-of-3")), None);
        assert_eq!(as_prefix(Path::new("d/m.ckpt-5")), None);
    }
}
