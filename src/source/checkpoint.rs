//! One V2 checkpoint (tensor bundle): its `.index` table, its data shards, and the tensors they
//! hold, served in tfmount's layout. Opening reads only the index footer, the index block and the
//! header, and opens every data shard; everything else is read on demand, with `pread` (see
//! [`super::file`]), so the mount serves the files it opened whatever happens to their paths.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::file::{ReadBuf, SourceFile};
use crate::cache::BlockCache;
use crate::error::{FsError, FsResult, SourceError};
use crate::format::bundle::{self, Data, Entry, Header};
use crate::format::dtype::{DT_STRING, DT_VARIANT};
use crate::format::partition::{for_each_run, locate};
use crate::format::slice_key::{self, Extent};
use crate::format::strings::{self, StringLayout};
use crate::format::table::{Pos, Table};
use crate::format::{for_each_chunk, mask_crc, unmask_crc, FormatError};

pub use super::bytes::FileMeta;

/// The data shards that could be opened when the checkpoint was opened, by number; the others
/// with why not.
type Shards = HashMap<u32, Result<Arc<SourceFile>, String>>;

/// Bytes read at a time when verifying a tensor's CRC.
const CRC_CHUNK: usize = 128 << 10;
/// Missing shards named in the log one by one; beyond this, only their number.
const MISSING_LOGGED: usize = 8;
/// Shard files whose opening failed named in the log one by one.
const FAILED_LOGGED: usize = 8;

/// A tensor's index entry and where it is.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub pos: Pos,
    pub key: Vec<u8>,
    pub entry: Entry,
}

/// Bytes of string-tensor layouts kept (8 bytes an element); larger layouts are rebuilt per read.
const STRING_CACHE_BYTES: usize = 16 << 20;

/// Parsed layouts of string tensors, bounded by the bytes they hold.
struct StringCache {
    lru: LruCache<Pos, Arc<StringLayout>>,
    bytes: usize,
}

pub struct Checkpoint {
    pub prefix: PathBuf,
    pub meta: FileMeta,
    table: Table,
    index: Arc<SourceFile>,
    header: Header,
    shards: Shards,
    verify: bool,
    /// Outcome of the CRC check of each tensor (or slice) read so far, by position.
    checked: Mutex<HashMap<Pos, Result<(), String>>>,
    strings: Mutex<StringCache>,
}

pub fn data_file_name(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!(".data-{shard:05}-of-{num_shards:05}"));
    PathBuf::from(s)
}

pub fn index_file_name(prefix: &Path) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".index");
    PathBuf::from(s)
}

/// Opens the data shards of the checkpoint at `prefix` that exist. They are found by listing the
/// directory once, so a header claiming a million shards costs nothing for the ones absent.
fn open_shards(prefix: &Path, num_shards: u32) -> Shards {
    let dir = match prefix.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut shards = Shards::new();
    let mut failed = 0usize;
    if let (Some(base), Ok(entries)) = (prefix.file_name(), std::fs::read_dir(dir)) {
        let mut stem = base.to_owned();
        stem.push(".data-");
        let stem = stem.as_bytes();
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(rest) = name.as_bytes().strip_prefix(stem) else {
                continue;
            };
            let Some(id) = shard_number(rest, num_shards) else {
                continue;
            };
            let path = data_file_name(prefix, id, num_shards);
            let r = SourceFile::open(&path).map(|(f, _)| f).map_err(|e| {
                failed += 1;
                if failed <= FAILED_LOGGED {
                    log::warn!(
                        "{}: cannot open data shard ({e}); tensors stored in it will fail with EIO",
                        path.display()
                    );
                }
                e.to_string()
            });
            shards.insert(id, r);
        }
    }
    let missing = num_shards as usize - shards.len();
    if missing > 0 {
        let named: Vec<String> = (0..num_shards)
            .filter(|i| !shards.contains_key(i))
            .take(MISSING_LOGGED)
            .map(|i| data_file_name(prefix, i, num_shards).display().to_string())
            .collect();
        log::warn!(
            "{missing} of {num_shards} data shards missing ({}{}); tensors stored in them will fail with EIO",
            named.join(", "),
            if missing > named.len() { ", ..." } else { "" }
        );
    }
    if failed > FAILED_LOGGED {
        log::warn!(
            "{}: {failed} data shards could not be opened ({} not named above)",
            prefix.display(),
            failed - FAILED_LOGGED
        );
    }
    shards
}

/// The shard number in `NNNNN-of-MMMMM` (the part of a data file's name after `.data-`), if
/// `MMMMM` is `num_shards` and the name is spelled exactly as TensorFlow spells it.
fn shard_number(rest: &[u8], num_shards: u32) -> Option<u32> {
    let s = std::str::from_utf8(rest).ok()?;
    let (id, n) = s.split_once("-of-")?;
    let (id, n): (u32, u32) = (id.parse().ok()?, n.parse().ok()?);
    (n == num_shards && id < n && s == format!("{id:05}-of-{n:05}")).then_some(id)
}

impl Checkpoint {
    pub fn open(
        prefix: &Path,
        cache: Arc<BlockCache>,
        verify: bool,
    ) -> Result<Checkpoint, SourceError> {
        let index_path = index_file_name(prefix);
        let (index, meta) = SourceFile::open(&index_path).map_err(|err| SourceError::Io {
            path: index_path.clone(),
            err,
        })?;
        let fmt = |err| SourceError::Format {
            path: index_path.clone(),
            err,
        };
        let table = Table::open_at(index.clone(), cache).map_err(fmt)?;
        let header = match table.seek(b"").map_err(fmt)? {
            Some(p) => {
                let (blk, i) = table.entry(p).map_err(fmt)?;
                if !blk.key(i).is_empty() {
                    return Err(fmt(FormatError::BadEntry("missing bundle header".into())));
                }
                bundle::parse_header(blk.value(i)).map_err(fmt)?
            }
            None => return Err(fmt(FormatError::BadEntry("empty index".into()))),
        };
        if header.big_endian {
            log::warn!(
                "{}: written on a big-endian machine; tensors wider than one byte will fail with EIO",
                index_path.display()
            );
        }
        let mut file_meta = FileMeta::of(&meta);
        let shards = open_shards(prefix, header.num_shards);
        for f in shards.values().flatten() {
            // The mount grants no more than every file it serves from does.
            file_meta.mode &= f.mode() | !0o777;
        }
        Ok(Checkpoint {
            prefix: prefix.to_path_buf(),
            meta: file_meta,
            table,
            index,
            header,
            shards,
            verify,
            checked: Mutex::new(HashMap::new()),
            strings: Mutex::new(StringCache {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        })
    }

    /// Bytes of the index and the data shards, as opened.
    pub fn source_bytes(&self) -> u64 {
        self.index.len() + self.shards.values().flatten().map(|f| f.len()).sum::<u64>()
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    fn corrupt(&self, what: &[u8], err: impl std::fmt::Display) -> FsError {
        FsError::Corrupt(format!(
            "{}: tensor {}: {err}",
            self.prefix.display(),
            String::from_utf8_lossy(what)
        ))
    }

    /// The tensor at `pos` (any entry, including hidden ones).
    pub fn tensor_at(&self, pos: Pos) -> FsResult<Tensor> {
        let (blk, i) = self
            .table
            .entry(pos)
            .map_err(|e| self.corrupt(b"?", format!("index: {e}")))?;
        let key = blk.key(i).to_vec();
        let entry = bundle::parse_entry(blk.value(i)).map_err(|e| self.corrupt(&key, e))?;
        Ok(Tensor { pos, key, entry })
    }

    /// The tensor stored under exactly `key`.
    pub fn lookup(&self, key: &[u8]) -> FsResult<Option<Tensor>> {
        match self.table.get(key) {
            Ok(Some((pos, _, _))) => self.tensor_at(pos).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(self.corrupt(key, format!("index: {e}"))),
        }
    }

    fn shard(&self, id: u32) -> FsResult<&Arc<SourceFile>> {
        if id >= self.header.num_shards {
            return Err(FsError::Corrupt(format!("shard {id} out of range")));
        }
        match self.shards.get(&id) {
            Some(Ok(f)) => Ok(f),
            Some(Err(e)) => Err(FsError::Corrupt(format!(
                "{}: could not be opened when mounted: {e}",
                data_file_name(&self.prefix, id, self.header.num_shards).display()
            ))),
            None => Err(FsError::Corrupt(format!(
                "{}: missing when mounted",
                data_file_name(&self.prefix, id, self.header.num_shards).display()
            ))),
        }
    }

    /// Where a contiguous tensor's stored bytes are, CRC-checked the first time when verification
    /// is on: the shard and `[start, end)` within it.
    fn stored(&self, t: &Tensor) -> FsResult<(Arc<SourceFile>, u64, u64)> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = t.entry.data
        else {
            return Err(self.corrupt(&t.key, "not a contiguous tensor"));
        };
        let file = self.shard(shard).map_err(|e| self.corrupt(&t.key, e))?;
        let end = offset + size; // checked by parse_entry
        if end > file.len() {
            // Logged once, like a failed CRC check (the file's length is fixed at mount).
            let len = file.len();
            return self
                .check_once(t.pos, &t.key, file.path(), || {
                    Err(FormatError::BadEntry(format!(
                        "it runs past the end of its data file ({end} bytes needed, {len} present)"
                    )))
                })
                .map(|()| (file.clone(), offset, end));
        }
        if self.verify {
            self.check_once(t.pos, &t.key, file.path(), || {
                let n = t.entry.num_elements();
                if t.entry.dtype == DT_STRING {
                    StringLayout::parse_at(&**file, offset, size, n, Some(crc)).map(|_| ())
                } else if t.entry.dtype == DT_VARIANT {
                    strings::verify_variant_at(&**file, offset, size, n, crc)
                } else {
                    let mut computed = 0u32;
                    for_each_chunk(&**file, offset, size, CRC_CHUNK, |c| {
                        computed = crc32c::crc32c_append(computed, c);
                        Ok(())
                    })
                    .and_then(|()| {
                        if mask_crc(computed) == crc {
                            Ok(())
                        } else {
                            Err(FormatError::TensorCrc {
                                stored: unmask_crc(crc),
                                computed,
                            })
                        }
                    })
                }
            })?;
        }
        Ok((file.clone(), offset, end))
    }

    /// Runs `check` unless its outcome for `pos` is known. A failure to read the bytes (the file
    /// changed) is not remembered: the file's own state decides later reads.
    fn check_once(
        &self,
        pos: Pos,
        key: &[u8],
        path: &Path,
        check: impl FnOnce() -> Result<(), FormatError>,
    ) -> FsResult<()> {
        let known = self.lock_checked().get(&pos).cloned();
        let outcome = match known {
            Some(o) => o,
            None => match check() {
                Err(FormatError::Read(e)) => return Err(self.corrupt(key, e)),
                o => {
                    let o = o.map_err(|e| e.to_string());
                    if let Err(e) = &o {
                        log::error!(
                            "tensor {} in {}: {e}; reads of it fail with EIO",
                            String::from_utf8_lossy(key),
                            path.display()
                        );
                    }
                    self.lock_checked().insert(pos, o.clone());
                    o
                }
            },
        };
        outcome.map_err(|e| self.corrupt(key, e))
    }

    fn lock_checked(&self) -> std::sync::MutexGuard<'_, HashMap<Pos, Result<(), String>>> {
        self.checked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_strings(&self) -> std::sync::MutexGuard<'_, StringCache> {
        self.strings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A string tensor's layout (CRC-checked first when verification is on), its shard, and
    /// where its stored bytes start.
    fn string_layout(&self, t: &Tensor) -> FsResult<(Arc<StringLayout>, Arc<SourceFile>, u64)> {
        let (file, start, end) = self.stored(t)?;
        if let Some(l) = self.lock_strings().lru.get(&t.pos).cloned() {
            return Ok((l, file, start));
        }
        let l = StringLayout::parse_at(&*file, start, end - start, t.entry.num_elements(), None)
            .map_err(|e| self.corrupt(&t.key, e))?;
        let l = Arc::new(l);
        let size = l.mem_size();
        if size <= STRING_CACHE_BYTES {
            let mut c = self.lock_strings();
            if let Some(old) = c.lru.put(t.pos, l.clone()) {
                c.bytes -= old.mem_size();
            }
            c.bytes += size;
            while c.bytes > STRING_CACHE_BYTES {
                match c.lru.pop_lru() {
                    Some((_, old)) => c.bytes -= old.mem_size(),
                    None => break,
                }
            }
        }
        Ok((l, file, start))
    }

    /// Size of the served `.bin` file.
    pub fn served_size(&self, t: &Tensor) -> FsResult<u64> {
        let d = t.entry.dtype;
        if let Some(es) = d.elem_size() {
            return Ok(t.entry.num_elements() * es as u64);
        }
        match &t.entry.data {
            Data::Contiguous { .. } if d == DT_STRING => Ok(self.string_layout(t)?.0.served_len()),
            Data::Contiguous { size, .. } if d == DT_VARIANT => Ok(*size),
            Data::Sliced(slices) if d == DT_STRING => {
                // Each element is served as 8 + len bytes whatever its order, so the total is
                // the sum over the slices.
                let mut total = 0u64;
                for (_, st) in self.resolve_slices(t, slices)? {
                    total += self.string_layout(&st)?.0.served_len();
                }
                Ok(total)
            }
            // Nothing can be served (an unknown dtype, a partitioned variant): saying size 0
            // would let the kernel answer reads with end-of-file instead of EIO.
            _ => Err(self.corrupt(&t.key, format!("unsupported dtype {}", d.display_name()))),
        }
    }

    /// Bytes `[offset, offset+len)` of the served `.bin` file.
    pub fn read(&self, t: &Tensor, offset: u64, len: usize) -> FsResult<ReadBuf> {
        let d = t.entry.dtype;
        let Some(es) = d.elem_size() else {
            if d == DT_STRING {
                if let Data::Sliced(slices) = &t.entry.data {
                    return self.read_sliced_strings(t, slices, offset, len);
                }
                let (layout, file, start) = self.string_layout(t)?;
                return layout
                    .read_at(&*file, start, offset, len)
                    .map(ReadBuf::Owned)
                    .map_err(|e| self.corrupt(&t.key, e));
            }
            if d == DT_VARIANT {
                let (file, start, end) = self.stored(t)?;
                return self.read_range(t, &file, start, end, offset, len);
            }
            return Err(self.corrupt(&t.key, format!("unsupported dtype {}", d.display_name())));
        };
        if self.header.big_endian && es > 1 {
            return Err(self.corrupt(&t.key, "big-endian checkpoints are not supported"));
        }
        match &t.entry.data {
            Data::Contiguous { .. } => {
                let (file, start, end) = self.stored(t)?;
                self.read_range(t, &file, start, end, offset, len)
            }
            Data::Sliced(slices) => self.read_sliced(t, slices, es, offset, len),
        }
    }

    /// Bytes `[offset, offset+len)` (clamped) of the stored range `[start, end)` of `file`.
    fn read_range(
        &self,
        t: &Tensor,
        file: &SourceFile,
        start: u64,
        end: u64,
        offset: u64,
        len: usize,
    ) -> FsResult<ReadBuf> {
        let size = end - start;
        let a = offset.min(size);
        let b = offset.saturating_add(len as u64).min(size);
        file.read_vec(start + a, (b - a) as usize)
            .map(ReadBuf::Owned)
            .map_err(|e| self.corrupt(&t.key, e))
    }

    /// The entries of a partitioned tensor's slices, after checking they tile the tensor.
    fn resolve_slices<'s>(
        &self,
        t: &Tensor,
        slices: &'s [Vec<Extent>],
    ) -> FsResult<Vec<(&'s [Extent], Tensor)>> {
        let shape = &t.entry.shape;
        bundle::check_tiling(shape, slices).map_err(|e| self.corrupt(&t.key, e))?;
        slices
            .iter()
            .map(|s| {
                let st = self
                    .lookup(&slice_key::encode(&t.key, s))?
                    .ok_or_else(|| self.corrupt(&t.key, "a slice's entry is missing"))?;
                if st.entry.dtype != t.entry.dtype
                    || st.entry.shape != bundle::slice_shape(shape, s)
                {
                    return Err(
                        self.corrupt(&t.key, "a slice's entry does not match its dtype or extent")
                    );
                }
                Ok((s.as_slice(), st))
            })
            .collect()
    }

    /// A partitioned string tensor, assembled element by element (TensorFlow's own reader
    /// refuses these; they are rare and small). Only the elements the range overlaps are read,
    /// one `pread` per slice.
    fn read_sliced_strings(
        &self,
        t: &Tensor,
        slices: &[Vec<Extent>],
        offset: u64,
        len: usize,
    ) -> FsResult<ReadBuf> {
        let shape = &t.entry.shape;
        let mut parts = Vec::new();
        for (s, st) in self.resolve_slices(t, slices)? {
            let (layout, file, start) = self.string_layout(&st)?;
            parts.push((s, layout, file, start));
        }
        let exts: Vec<&[Extent]> = parts.iter().map(|p| p.0).collect();
        let end = offset.saturating_add(len as u64);
        // Pass 1: the elements overlapping [offset, end), and the stored span each slice needs.
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let mut spans = vec![(u64::MAX, 0u64); parts.len()];
        let mut first_pos = None;
        let mut pos = 0u64;
        let n = t.entry.num_elements();
        let mut e = 0u64;
        while e < n && pos < end {
            let (p, local) = locate(shape, &exts, e)
                .ok_or_else(|| self.corrupt(&t.key, "slices do not cover the tensor"))?;
            let local = usize::try_from(local)
                .ok()
                .filter(|&l| l < parts[p].1.len())
                .ok_or_else(|| self.corrupt(&t.key, "slice smaller than its extent"))?;
            let (src, l) = parts[p].1.element_range(local);
            let next = pos + 8 + l;
            if next > offset {
                first_pos.get_or_insert(pos);
                picked.push((p, local));
                let sp = &mut spans[p];
                *sp = (sp.0.min(src), sp.1.max(src + l));
            }
            pos = next;
            e += 1;
        }
        let Some(first_pos) = first_pos else {
            return Ok(ReadBuf::Owned(Vec::new()));
        };
        let mut bufs = Vec::with_capacity(parts.len());
        for ((_, _, file, start), &(lo, hi)) in parts.iter().zip(&spans) {
            bufs.push(if lo < hi {
                file.read_vec(start + lo, (hi - lo) as usize)
                    .map_err(|e| self.corrupt(&t.key, e))?
            } else {
                Vec::new()
            });
        }
        // Pass 2: the served bytes of the picked elements, clipped to [offset, end).
        let mut out = Vec::with_capacity((pos.min(end) - offset.max(first_pos)) as usize);
        let mut at = first_pos;
        for &(p, local) in &picked {
            let (src, l) = parts[p].1.element_range(local);
            let from = (src - spans[p].0) as usize;
            let elem = &bufs[p][from..from + l as usize];
            let header = l.to_le_bytes();
            let served = header.iter().chain(elem.iter());
            let skip = offset.saturating_sub(at) as usize;
            let take = (end - at).min(8 + l) as usize;
            out.extend(served.take(take).skip(skip));
            at += 8 + l;
        }
        Ok(ReadBuf::Owned(out))
    }

    fn read_sliced(
        &self,
        t: &Tensor,
        slices: &[Vec<Extent>],
        es: usize,
        offset: u64,
        len: usize,
    ) -> FsResult<ReadBuf> {
        let shape = &t.entry.shape;
        let mut parts = Vec::with_capacity(slices.len());
        for (s, st) in self.resolve_slices(t, slices)? {
            let (file, start, _) = self.stored(&st)?;
            parts.push((s, file, start));
        }
        let exts: Vec<&[Extent]> = parts.iter().map(|p| p.0).collect();
        let total = t.entry.num_elements() * es as u64;
        let end_b = total.min(offset.saturating_add(len as u64));
        if offset >= end_b {
            return Ok(ReadBuf::Owned(Vec::new()));
        }
        let es64 = es as u64;
        let first = offset / es64;
        let last = end_b.div_ceil(es64);
        let cover = || self.corrupt(&t.key, "slices do not cover the tensor");
        // Pass 1: the span of stored elements each slice contributes.
        let mut spans = vec![(u64::MAX, 0u64); parts.len()];
        for_each_run(shape, &exts, first, last, |p, src, take| {
            let sp = &mut spans[p];
            *sp = (sp.0.min(src), sp.1.max(src + take));
        })
        .ok_or_else(cover)?;
        let mut bufs = Vec::with_capacity(parts.len());
        for ((_, file, start), &(lo, hi)) in parts.iter().zip(&spans) {
            bufs.push(if lo < hi {
                file.read_vec(start + lo * es64, ((hi - lo) * es64) as usize)
                    .map_err(|e| self.corrupt(&t.key, e))?
            } else {
                Vec::new()
            });
        }
        // Pass 2: the runs, in order.
        let mut out = Vec::with_capacity(((last - first) * es64) as usize);
        for_each_run(shape, &exts, first, last, |p, src, take| {
            let from = ((src - spans[p].0) * es64) as usize;
            out.extend_from_slice(&bufs[p][from..from + (take * es64) as usize]);
        })
        .ok_or_else(cover)?;
        let skip = (offset - first * es64) as usize;
        out.drain(..skip);
        out.truncate((end_b - offset) as usize);
        Ok(ReadBuf::Owned(out))
    }
}
