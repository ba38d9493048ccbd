//! A V1 checkpoint (tf-format.md §7): one table file, or one per shard
//! (`P-00000-of-00003`, ...), each with its own meta. The tensors of all files are merged by
//! name (a partitioned variable saved by several devices has its slices in several files) and
//! served in tfmount's layout: `.bin` bytes are the row-major little-endian bytes numpy's
//! `tobytes()` gives, strings as an 8-byte length then the bytes per element.
//!
//! Opening reads each file's footer, index block and meta entry (through the byte-source seam,
//! [`Store`]). A tensor is located on first access: each slice's entry is found, its block's CRC
//! verified, its values scanned and counted ([`crate::formats::v1::table::values`]); the outcome (a small
//! structure of positions, or the error) is kept in a byte-bounded LRU so later reads skip all of
//! that. A damaged slice fails its tensor only. Reads decode only what they cover; partitioned
//! tensors are assembled per request, one read per slice span.

use crate::sync::lock;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use crate::error::{FsError, FsResult, SourceError};
use crate::formats::tensors::{Stored, TensorData, TensorInfo, TensorSet};
use crate::formats::v1::table as fv1;
use crate::formats::v1::table::block::Value;
use crate::formats::v1::table::encoding::{Encoding, Kind};
use crate::formats::v1::table::values::{emit_string, Cursor, Expect, SliceValues};
use crate::formats::v1::table::{values, V1Table};
use crate::parse::bundle::{check_tiling, MAX_SLICES};
use crate::parse::dtype::DType;
use crate::parse::partition::for_each_run;
use crate::parse::slice_key::Extent;
use crate::parse::table::BlockHandle;
use crate::parse::{slice_key, FormatError, ReadAt, Result};
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, Store};

/// Bytes of located-tensor state kept (positions, marks, decompressed Snappy values).
const LOCATED_BYTES: usize = 32 << 20;
/// Large blocks whose CRC was verified, remembered per file.
const GOOD_BLOCKS: usize = 1024;
/// Elements walked per step when assembling a partitioned string tensor.
const STRING_STEP: u64 = 4096;

/// One saved slice of a tensor and the file (index into the checkpoint's files) that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct V1Slice {
    pub(crate) extents: Vec<Extent>,
    pub(crate) file: usize,
}

/// A tensor of the checkpoint, merged from the metas of all its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Tensor {
    /// The tensor's name (its key in the checkpoint).
    pub name: Vec<u8>,
    /// Its dtype.
    pub dtype: DType,
    /// Its full shape (of all its slices together).
    pub shape: Vec<u64>,
    pub(crate) slices: Vec<V1Slice>,
    /// Why the tensor cannot be served (its meta makes no sense), if it cannot.
    pub error: Option<FormatError>,
}

impl V1Tensor {
    pub(crate) fn num_elements(&self) -> u64 {
        // Checked when the meta was parsed (at most i64::MAX).
        self.shape.iter().product()
    }
}

/// One opened file.
struct Shard {
    path: PathBuf,
    src: Arc<dyn ByteSource>,
    table: V1Table,
    /// Offsets of large blocks whose CRC has been verified.
    good: Mutex<LruCache<u64, ()>>,
}

impl Shard {
    fn good(&self) -> MutexGuard<'_, LruCache<u64, ()>> {
        lock(&self.good)
    }
}

/// Where one slice's values are, found on first access.
struct LocatedSlice {
    values: SliceValues,
    /// The value's bytes when they come from a Snappy block (then positions are into these).
    mem: Option<Arc<Vec<u8>>>,
    file: usize,
    /// Where the last read of this slice stopped (sequential reads continue from it).
    hint: Mutex<Option<Cursor>>,
}

struct Located {
    slices: Vec<LocatedSlice>,
    bytes: usize,
}

struct LocatedCache {
    lru: LruCache<usize, std::result::Result<Arc<Located>, FormatError>>,
    bytes: usize,
}

/// The bytes a located slice reads: its file, or its decompressed value.
enum Src<'a> {
    File(&'a dyn ByteSource),
    Mem(&'a [u8]),
}

impl ReadAt for Src<'_> {
    fn len(&self) -> u64 {
        match self {
            Src::File(f) => f.len(),
            Src::Mem(m) => m.len() as u64,
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self {
            Src::File(f) => f.read_exact_at(buf, offset),
            Src::Mem(m) => m.read_exact_at(buf, offset),
        }
    }
}

/// A V1 checkpoint (one table file, or the shards of one save) opened: its tensors, merged from
/// every shard's metas, read by value into the `.bin` layout.
pub struct V1Checkpoint {
    shards: Vec<Shard>,
    tensors: Vec<V1Tensor>,
    located: Mutex<LocatedCache>,
}

/// `NAME-<5+ digits or ?????>-of-<5+ digits>`: `(NAME, shard number or None for ?????, count)`,
/// spelled exactly as TensorFlow spells it (`%05d`).
fn shard_name(name: &[u8]) -> Option<(&[u8], Option<u32>, u32)> {
    let cut = name.windows(4).rposition(|w| w == b"-of-")?;
    let count = std::str::from_utf8(&name[cut + 4..]).ok()?;
    let n: u32 = count
        .parse()
        .ok()
        .filter(|_| count.bytes().all(|b| b.is_ascii_digit()))?;
    if format!("{n:05}") != count || n == 0 {
        return None;
    }
    let left = &name[..cut];
    let dash = left.iter().rposition(|&b| b == b'-')?;
    let (stem, id) = (&left[..dash], &left[dash + 1..]);
    if stem.is_empty() {
        return None;
    }
    if id == b"?????" {
        return Some((stem, None, n));
    }
    let id_s = std::str::from_utf8(id).ok()?;
    let i: u32 = id_s
        .parse()
        .ok()
        .filter(|_| id_s.bytes().all(|b| b.is_ascii_digit()))?;
    (format!("{i:05}") == id_s && i < n).then_some((stem, Some(i), n))
}

/// The checkpoint a V1 path names, without its shard part: `d/model.ckpt-5-?????-of-00003`
/// and `d/model.ckpt-5-00001-of-00003` give `d/model.ckpt-5` (where TF1's Saver puts the
/// `.meta`, and the name the checkpoint gets in a mount); a single file gives itself.
pub(crate) fn checkpoint_stem(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    match shard_name(name) {
        Some((stem, _, _)) => path.with_file_name(std::ffi::OsStr::from_bytes(stem)),
        None => path.to_path_buf(),
    }
}

/// Shards looked up by name where the store cannot list the directory (each costs a request).
const MAX_UNLISTED_SHARDS: u32 = 4096;

fn is_v1(store: &dyn Store, path: &Path) -> bool {
    store.open(path).is_ok_and(|f| fv1::probe(&*f))
}

/// The files of the V1 checkpoint `path` names, if its bytes are V1 (probed by content): the
/// shards of `x-?????-of-00003` (the pattern TensorFlow's state file writes) or of any one shard
/// `x-00001-of-00003`, in shard order (the shards present; a warning is logged for missing ones);
/// or `path` itself, a single-file checkpoint.
pub fn v1_files(store: &dyn Store, path: &Path) -> Option<Vec<PathBuf>> {
    let name = path.file_name()?.as_bytes();
    let Some((stem, id, n)) = shard_name(name) else {
        return (store.is_file(path) && is_v1(store, path)).then(|| vec![path.to_path_buf()]);
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut found: Vec<(u32, PathBuf)> = match store.list(dir) {
        Ok(entries) => entries
            .into_iter()
            .filter(|(_, k)| *k == EntryKind::File)
            .filter_map(|(f, _)| match shard_name(f.as_bytes()) {
                Some((s, Some(i), m)) if s == stem && m == n => Some((i, dir.join(&f))),
                _ => None,
            })
            .collect(),
        // A store that cannot list (plain HTTP): the shards by the names the pattern implies.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => (0..n.min(MAX_UNLISTED_SHARDS))
            .map(|i| {
                let mut f = stem.to_vec();
                f.extend_from_slice(format!("-{i:05}-of-{n:05}").as_bytes());
                (i, dir.join(std::ffi::OsStr::from_bytes(&f)))
            })
            .filter(|(_, p)| store.is_file(p))
            .collect(),
        Err(_) => return None,
    };
    found.sort();
    found.dedup_by_key(|(i, _)| *i);
    let probe = match id {
        Some(i) => found.iter().find(|(j, _)| *j == i)?.1.clone(),
        None => found.first()?.1.clone(),
    };
    if !is_v1(store, &probe) {
        return None;
    }
    if found.len() < n as usize {
        log::warn!(
            "{}: {} of {n} shards missing; tensors stored in them are not shown",
            path.display(),
            n as usize - found.len()
        );
    }
    Some(found.into_iter().map(|(_, p)| p).collect())
}

impl V1Checkpoint {
    /// Opens the V1 table files `files` (see [`v1_files`]): reads each one's footer, index block
    /// and meta, and merges their tensors by name.
    pub fn open(
        store: &dyn Store,
        files: &[PathBuf],
    ) -> std::result::Result<V1Checkpoint, SourceError> {
        let mut shards = Vec::with_capacity(files.len());
        for path in files {
            let src = store.open(path).map_err(|err| SourceError::Io {
                path: path.clone(),
                err,
            })?;
            let table = V1Table::open(&*src).map_err(|err| SourceError::Format {
                path: path.clone(),
                err,
            })?;
            shards.push(Shard {
                path: path.clone(),
                src,
                table,
                good: Mutex::new(LruCache::unbounded()),
            });
        }
        let mut merged: BTreeMap<Vec<u8>, V1Tensor> = BTreeMap::new();
        for (file, shard) in shards.iter().enumerate() {
            for m in shard.table.tensors() {
                let slices = m.slices.iter().map(|e| V1Slice {
                    extents: e.clone(),
                    file,
                });
                match merged.get_mut(&m.name) {
                    None => {
                        merged.insert(
                            m.name.clone(),
                            V1Tensor {
                                name: m.name.clone(),
                                dtype: m.dtype,
                                shape: m.shape.clone(),
                                slices: slices.collect(),
                                error: m.error.clone(),
                            },
                        );
                    }
                    Some(t) if t.error.is_some() => {}
                    Some(t) => {
                        if let Some(e) = &m.error {
                            t.error = Some(e.clone());
                        } else if (t.dtype, &t.shape) != (m.dtype, &m.shape) {
                            t.error = Some(FormatError::BadEntry(format!(
                                "saved as {} {:?} and as {} {:?}",
                                t.dtype.display_name(),
                                t.shape,
                                m.dtype.display_name(),
                                m.shape
                            )));
                        } else if t.slices.len() + m.slices.len() > MAX_SLICES {
                            t.error = Some(FormatError::BadEntry(format!(
                                "more than {MAX_SLICES} slices"
                            )));
                        } else {
                            t.slices.extend(slices);
                        }
                    }
                }
            }
        }
        Ok(V1Checkpoint {
            shards,
            tensors: merged.into_values().collect(),
            located: Mutex::new(LocatedCache {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        })
    }

    /// Every tensor, sorted by name bytes.
    pub fn tensors(&self) -> &[V1Tensor] {
        &self.tensors
    }

    /// The index of the tensor named `name`.
    #[cfg(test)]
    pub(crate) fn find(&self, name: &[u8]) -> Option<usize> {
        self.tensors
            .binary_search_by(|t| t.name.as_slice().cmp(name))
            .ok()
    }

    /// Bytes of all files, as opened.
    pub(crate) fn source_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.src.len()).sum()
    }

    /// The first file's owner and times, with only the read bits every file grants.
    pub(crate) fn meta(&self) -> Option<FileMeta> {
        let mut m = self.shards.first()?.src.meta();
        for s in &self.shards {
            m.mode &= s.src.meta().mode | !0o777;
        }
        Some(m)
    }

    fn tensor(&self, i: usize) -> Result<(&V1Tensor, Encoding)> {
        let t = self
            .tensors
            .get(i)
            .ok_or_else(|| FormatError::BadEntry(format!("no tensor {i}")))?;
        if let Some(e) = &t.error {
            return Err(e.clone());
        }
        let enc = crate::formats::v1::table::encoding::encoding(t.dtype).ok_or_else(|| {
            FormatError::BadEntry(format!("unsupported dtype {}", t.dtype.display_name()))
        })?;
        Ok((t, enc))
    }

    /// Size of the served `.bin` file of tensor `i`. For strings this locates the tensor.
    pub fn served_size(&self, i: usize) -> Result<u64> {
        let (t, enc) = self.tensor(i)?;
        let n = t.num_elements();
        if enc.kind != Kind::Bytes {
            return n
                .checked_mul(enc.per_elem * enc.width)
                .ok_or_else(|| FormatError::BadEntry("size overflows".into()));
        }
        if n == 0 {
            return Ok(0);
        }
        let loc = self.located(i)?;
        Ok(loc.slices.iter().map(|s| s.values.served_len()).sum())
    }

    /// Bytes `[offset, offset+len)` (clamped to the end) of the served `.bin` file of tensor `i`.
    /// An empty tensor has no bytes, but its entries are located (their blocks' CRCs verified)
    /// by any read of a byte or more, as TensorFlow reads them.
    pub fn read(&self, i: usize, offset: u64, len: usize) -> Result<Vec<u8>> {
        let (t, enc) = self.tensor(i)?;
        if t.num_elements() == 0 && len > 0 {
            self.located(i)?;
        }
        if t.num_elements() == 0 || len == 0 {
            return Ok(Vec::new());
        }
        if enc.kind == Kind::Bytes {
            let loc = self.located(i)?;
            return if let [only] = &loc.slices[..] {
                let src = self.src(only);
                let mut out = Vec::new();
                let hint = *lock(&only.hint);
                let h = only
                    .values
                    .read_strings(&src, offset, len as u64, hint, &mut out)?;
                *lock(&only.hint) = h;
                Ok(out)
            } else {
                self.read_sliced_strings(t, &loc, offset, len as u64)
            };
        }
        let total = self.served_size(i)?;
        let end = total.min(offset.saturating_add(len as u64));
        if offset >= end {
            return Ok(Vec::new());
        }
        let loc = self.located(i)?;
        self.read_fixed(t, enc, &loc, offset, end)
    }

    fn src<'a>(&'a self, s: &'a LocatedSlice) -> Src<'a> {
        match (&s.mem, self.shards.get(s.file)) {
            (Some(m), _) => Src::Mem(&m[..]),
            (None, Some(sh)) => Src::File(&*sh.src),
            (None, None) => Src::Mem(&[]),
        }
    }

    /// Appends the served bytes of values `[lo, hi)` of slice `s` to `out`.
    fn slice_values(&self, s: &LocatedSlice, lo: u64, hi: u64, out: &mut Vec<u8>) -> Result<()> {
        let hint = *lock(&s.hint);
        let h = s.values.read_values(&self.src(s), lo, hi, hint, out)?;
        if h.is_some() {
            *lock(&s.hint) = h;
        }
        Ok(())
    }

    /// Served bytes `[offset, end)` of a fixed-width tensor: the elements they cover, one read
    /// per slice span, assembled in row-major order.
    fn read_fixed(
        &self,
        t: &V1Tensor,
        enc: Encoding,
        loc: &Located,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u8>> {
        let (pe, es) = (enc.per_elem, enc.per_elem * enc.width);
        let first = offset / es;
        let last = end.div_ceil(es);
        let skip = (offset - first * es) as usize;
        let want = (end - offset) as usize;
        if let [only] = &loc.slices[..] {
            let mut out = Vec::new();
            self.slice_values(only, first * pe, last * pe, &mut out)?;
            out.drain(..skip.min(out.len()));
            out.truncate(want);
            return Ok(out);
        }
        let exts: Vec<&[Extent]> = t.slices.iter().map(|s| &s.extents[..]).collect();
        let cover = || FormatError::BadEntry("slices do not cover the tensor".into());
        let mut spans = vec![(u64::MAX, 0u64); exts.len()];
        for_each_run(&t.shape, &exts, first, last, |p, src, take| {
            let sp = &mut spans[p];
            *sp = (sp.0.min(src), sp.1.max(src + take));
        })
        .ok_or_else(cover)?;
        let mut bufs = Vec::with_capacity(spans.len());
        for (s, &(lo, hi)) in loc.slices.iter().zip(&spans) {
            let mut b = Vec::new();
            if lo < hi {
                self.slice_values(s, lo * pe, hi * pe, &mut b)?;
            }
            bufs.push(b);
        }
        let mut out = Vec::with_capacity(((last - first) * es) as usize);
        let mut bad = false;
        for_each_run(&t.shape, &exts, first, last, |p, src, take| {
            let from = ((src - spans[p].0) * es) as usize;
            match bufs[p].get(from..from + (take * es) as usize) {
                Some(b) => out.extend_from_slice(b),
                None => bad = true,
            }
        })
        .ok_or_else(cover)?;
        if bad {
            return Err(cover());
        }
        out.drain(..skip.min(out.len()));
        out.truncate(want);
        Ok(out)
    }

    /// A partitioned string tensor, walked element by element in row-major order up to the end
    /// of the range (each slice's elements are visited in its own order, so one sequential
    /// reader per slice suffices); only the overlapped elements' bytes are read.
    fn read_sliced_strings(
        &self,
        t: &V1Tensor,
        loc: &Located,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len);
        let exts: Vec<&[Extent]> = t.slices.iter().map(|s| &s.extents[..]).collect();
        let srcs: Vec<Src<'_>> = loc.slices.iter().map(|s| self.src(s)).collect();
        let mut els = loc
            .slices
            .iter()
            .zip(&srcs)
            .map(|(s, src)| s.values.elements(src))
            .collect::<Result<Vec<_>>>()?;
        let n = t.num_elements();
        let mut out = Vec::new();
        let (mut pos, mut e) = (0u64, 0u64);
        let cover = || FormatError::BadEntry("slices do not cover the tensor".into());
        'walk: while e < n && pos < end {
            let stop = (e + STRING_STEP).min(n);
            let mut runs = Vec::new();
            for_each_run(&t.shape, &exts, e, stop, |p, local, take| {
                runs.push((p, local, take))
            })
            .ok_or_else(cover)?;
            for (p, local, take) in runs {
                let it = els.get_mut(p).ok_or_else(cover)?;
                if it.index() != local {
                    return Err(cover());
                }
                for _ in 0..take {
                    let (at, l) = it.next_element()?.ok_or_else(cover)?;
                    if pos + 8 + l > offset {
                        emit_string(&srcs[p], pos, at, l, offset, end, &mut out)?;
                    }
                    pos += 8 + l;
                    if pos >= end {
                        break 'walk;
                    }
                }
            }
            e = stop;
        }
        Ok(out)
    }

    fn lock_located(&self) -> MutexGuard<'_, LocatedCache> {
        lock(&self.located)
    }

    /// Tensor `i` located: from the cache, or now (and then cached, with the outcome).
    fn located(&self, i: usize) -> Result<Arc<Located>> {
        if let Some(r) = self.lock_located().lru.get(&i) {
            return r.clone();
        }
        let t = self
            .tensors
            .get(i)
            .ok_or_else(|| FormatError::BadEntry(format!("no tensor {i}")))?;
        let r = self.locate(t).map(Arc::new);
        if let Err(e) = &r {
            if matches!(e, FormatError::Read(_)) {
                // The file's own state decides later reads (it changed, or an I/O error).
                return r;
            }
            let file = t.slices.first().and_then(|s| self.shards.get(s.file));
            log::error!(
                "{}: tensor {}: {e}; reads of it fail with EIO",
                file.map_or(String::new(), |s| s.path.display().to_string()),
                String::from_utf8_lossy(&t.name)
            );
        }
        let size = match &r {
            Ok(l) => l.bytes,
            Err(_) => 256,
        };
        if size <= LOCATED_BYTES {
            let mut c = self.lock_located();
            if let Some(old) = c.lru.put(i, r.clone()) {
                c.bytes -= old.map_or(256, |l| l.bytes);
            }
            c.bytes += size;
            while c.bytes > LOCATED_BYTES {
                match c.lru.pop_lru() {
                    Some((_, old)) => c.bytes -= old.map_or(256, |l| l.bytes),
                    None => break,
                }
            }
        }
        r
    }

    /// Finds every slice of `t`: its entry, its block's CRC, its values.
    fn locate(&self, t: &V1Tensor) -> Result<Located> {
        let exts: Vec<Vec<Extent>> = t.slices.iter().map(|s| s.extents.clone()).collect();
        check_tiling(&t.shape, &exts)?;
        let mut slices = Vec::with_capacity(t.slices.len());
        let mut bytes = std::mem::size_of::<Located>();
        for s in &t.slices {
            let shard = self
                .shards
                .get(s.file)
                .ok_or_else(|| FormatError::BadEntry("slice in no file".into()))?;
            let key = slice_key::encode(&t.name, &s.extents);
            // A large raw block of a local file not verified yet: its CRC is checked on another
            // thread while its value is scanned (both read the page cache), not before.
            let parallel = !shard.src.is_remote();
            let deferred = std::cell::Cell::new(false);
            let known = |h: BlockHandle| {
                let good = shard.good().get(&h.offset).is_some();
                if !good && parallel && h.size > fv1::block::SMALL_BLOCK {
                    deferred.set(true);
                    return true;
                }
                good
            };
            let (h, value) = shard.table.find(&*shard.src, &key, known)?.ok_or_else(|| {
                crate::formats::v1::table::missing_slice(slice_text(t, &s.extents))
            })?;
            let want = Expect {
                name: &t.name,
                shape: &t.shape,
                slice: &s.extents,
                dtype: t.dtype,
            };
            let (values, mem) = match value {
                // `h` is the one block `known` was asked about.
                Value::File { offset, len } if deferred.get() => (
                    scan_while_verifying(&*shard.src, h, offset, len, want)?,
                    None,
                ),
                Value::File { offset, len } => {
                    (values::scan(&*shard.src, offset, len, want)?, None)
                }
                Value::Memory { block, start, len } => {
                    // A small value is copied out so the rest of its block is not kept.
                    let (mem, start) = if len < block.len() as u64 / 2 {
                        let v = block
                            .get(start as usize..(start + len) as usize)
                            .ok_or(FormatError::BadBlock("value outside its block"))?;
                        (Arc::new(v.to_vec()), 0)
                    } else {
                        (block, start)
                    };
                    (values::scan(&mem[..], start, len, want)?, Some(mem))
                }
            };
            {
                let mut good = shard.good();
                good.put(h.offset, ());
                if good.len() > GOOD_BLOCKS {
                    good.pop_lru();
                }
            }
            bytes += values.mem_size()
                + mem.as_ref().map_or(0, |m| m.capacity())
                + std::mem::size_of::<LocatedSlice>();
            slices.push(LocatedSlice {
                values,
                mem,
                file: s.file,
                hint: Mutex::new(None),
            });
        }
        Ok(Located { slices, bytes })
    }
}

/// [`values::scan`] of the value `[offset, offset+len)` of raw block `h`, with the block's CRC
/// verified on another thread meanwhile, the scan reading the pieces the check reads (one read
/// of the file for both, [`feed`]); a CRC mismatch is the error whatever the scan found.
fn scan_while_verifying(
    src: &dyn ByteSource,
    h: BlockHandle,
    offset: u64,
    len: u64,
    want: Expect<'_>,
) -> Result<SliceValues> {
    std::thread::scope(|sc| {
        let (check, fed) = feed::check_and_feed(src, h);
        let spawned = std::thread::Builder::new()
            .name("tfmount-crc".into())
            .spawn_scoped(sc, check);
        let (scanned, checked) = match spawned {
            Ok(c) => {
                let scanned = values::scan(&fed, offset, len, want);
                // The check sends no more once the scan's side is gone.
                drop(fed);
                let checked = c
                    .join()
                    .unwrap_or(Err(FormatError::BadBlock("the CRC check failed")));
                (scanned, checked)
            }
            // No thread: one after the other, here.
            Err(_) => (
                values::scan(src, offset, len, want),
                fv1::block::verify_block(src, h),
            ),
        };
        checked?;
        scanned
    })
}

/// `name[0,2:-]` for messages.
fn slice_text(t: &V1Tensor, exts: &[Extent]) -> String {
    let dims: Vec<String> = exts
        .iter()
        .map(|e| {
            if e.length < 0 {
                "-".to_string()
            } else {
                format!("{},{}", e.start, e.length)
            }
        })
        .collect();
    format!("{}[{}]", String::from_utf8_lossy(&t.name), dims.join(":"))
}

mod feed;
#[cfg(test)]
mod tests;

/// A V1 checkpoint as a [`TensorSet`]: positions are indexes into [`V1Checkpoint::tensors`].
/// V1 keeps no per-tensor CRC: reads are checked by the CRC-32C of the table blocks they come
/// from.
pub(crate) struct V1Set {
    ck: Arc<V1Checkpoint>,
    path: PathBuf,
    meta: FileMeta,
}

impl V1Set {
    /// Opens the checkpoint `path` names (a file, a shard or a `?????` pattern) from `files`.
    pub(crate) fn open(
        store: &dyn Store,
        path: &Path,
        files: &[PathBuf],
    ) -> std::result::Result<V1Set, SourceError> {
        let ck = V1Checkpoint::open(store, files)?;
        let meta = ck.meta().ok_or_else(|| SourceError::Invalid {
            path: path.to_path_buf(),
            msg: "no table files".into(),
        })?;
        Ok(V1Set {
            ck: Arc::new(ck),
            path: path.to_path_buf(),
            meta,
        })
    }

    fn tensor(&self, pos: u64) -> FsResult<&V1Tensor> {
        usize::try_from(pos)
            .ok()
            .and_then(|i| self.ck.tensors.get(i))
            .ok_or(FsError::NotFound)
    }
}

fn corrupt(path: &Path, name: &[u8], e: FormatError) -> FsError {
    FsError::corrupt(
        format!("tensor {}", String::from_utf8_lossy(name)),
        path.display(),
        e,
    )
}

impl TensorSet for V1Set {
    fn path(&self) -> &Path {
        &self.path
    }

    fn meta(&self) -> FileMeta {
        self.meta
    }

    fn source_bytes(&self) -> u64 {
        self.ck.source_bytes()
    }

    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        let i = self.ck.tensors.partition_point(|t| t.name.as_slice() < key);
        Ok((i < self.ck.tensors.len()).then_some(i as u64))
    }

    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        let n = pos.saturating_add(1);
        Ok((n < self.ck.tensors.len() as u64).then_some(n))
    }

    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.tensor(pos)?.name.clone())
    }

    fn hidden(&self, _key: &[u8]) -> bool {
        // The meta entry and the slice entries are not in the list of tensors.
        false
    }

    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let t = self.tensor(pos)?;
        if let Some(e) = &t.error {
            return Err(corrupt(&self.path, &t.name, e.clone()));
        }
        // One slice covering the whole tensor is how V1 saves an unpartitioned one.
        let whole = |s: &V1Slice| s.extents.iter().all(|x| x.length < 0);
        let slices = match t.slices.as_slice() {
            [s] if whole(s) => Vec::new(),
            s => s.iter().map(|s| s.extents.clone()).collect(),
        };
        Ok(TensorInfo {
            key: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            stored: None,
            slices,
        })
    }

    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let i = usize::try_from(pos).map_err(|_| FsError::NotFound)?;
        let t = self.tensor(pos)?;
        let size = self
            .ck
            .served_size(i)
            .map_err(|e| corrupt(&self.path, &t.name, e))?;
        Ok(Arc::new(V1Data {
            ck: self.ck.clone(),
            i,
            size,
            path: self.path.clone(),
        }))
    }

    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
}

struct V1Data {
    ck: Arc<V1Checkpoint>,
    i: usize,
    size: u64,
    path: PathBuf,
}

impl TensorData for V1Data {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        self.ck
            .read(self.i, offset, len)
            .map(Bytes::from)
            .map_err(|e| {
                let name = self.ck.tensors.get(self.i).map_or(&[][..], |t| &t.name);
                corrupt(&self.path, name, e)
            })
    }
}
