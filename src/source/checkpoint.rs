//! One V2 checkpoint (tensor bundle): its `.index` table, its data shards, and the tensors they
//! hold, served in tfmount's layout. Opening reads only the index footer, the index block and the
//! header; everything else is read on demand.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use lru::LruCache;

use super::mapped::{MappedFile, ReadBuf};
use crate::cache::BlockCache;
use crate::error::{FsError, FsResult, SourceError};
use crate::format::bundle::{self, Data, Entry, Header};
use crate::format::dtype::{DT_STRING, DT_VARIANT};
use crate::format::slice_key::{self, Extent};
use crate::format::strings::StringLayout;
use crate::format::table::{Pos, Table};
use crate::format::{mask_crc, unmask_crc, FormatError};

/// Metadata of a source file that the mount reflects (times, owner, permission bits).
#[derive(Debug, Clone, Copy)]
pub struct FileMeta {
    pub mtime: std::time::SystemTime,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl FileMeta {
    pub fn of(meta: &std::fs::Metadata) -> FileMeta {
        use std::os::unix::fs::MetadataExt;
        FileMeta {
            mtime: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        }
    }
}

struct Shard {
    path: PathBuf,
    map: OnceLock<Result<Arc<MappedFile>, String>>,
}

/// A tensor's index entry and where it is.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub pos: Pos,
    pub key: Vec<u8>,
    pub entry: Entry,
}

const STRING_CACHE_ENTRIES: usize = 256;

pub struct Checkpoint {
    pub prefix: PathBuf,
    pub meta: FileMeta,
    table: Table,
    header: Header,
    shards: Vec<Shard>,
    verify: bool,
    /// Outcome of the CRC check of each tensor (or slice) read so far, by position.
    checked: Mutex<HashMap<Pos, Result<(), String>>>,
    strings: Mutex<LruCache<Pos, Arc<StringLayout>>>,
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

impl Checkpoint {
    pub fn open(
        prefix: &Path,
        cache: Arc<BlockCache>,
        verify: bool,
    ) -> Result<Checkpoint, SourceError> {
        let index_path = index_file_name(prefix);
        let (map, meta) = MappedFile::open(&index_path).map_err(|err| SourceError::Io {
            path: index_path.clone(),
            err,
        })?;
        let fmt = |err| SourceError::Format {
            path: index_path.clone(),
            err,
        };
        let table = Table::open(map, cache).map_err(fmt)?;
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
        let shards = (0..header.num_shards)
            .map(|i| {
                let path = data_file_name(prefix, i, header.num_shards);
                if !path.exists() {
                    log::warn!(
                        "{}: data shard missing; tensors stored in it will fail with EIO",
                        path.display()
                    );
                }
                Shard {
                    path,
                    map: OnceLock::new(),
                }
            })
            .collect();
        Ok(Checkpoint {
            prefix: prefix.to_path_buf(),
            meta: FileMeta::of(&meta),
            table,
            header,
            shards,
            verify,
            checked: Mutex::new(HashMap::new()),
            strings: Mutex::new(LruCache::new(
                NonZeroUsize::new(STRING_CACHE_ENTRIES).unwrap_or(NonZeroUsize::MIN),
            )),
        })
    }

    /// Bytes of the index and the data shards that exist.
    pub fn source_bytes(&self) -> u64 {
        let index = std::fs::metadata(index_file_name(&self.prefix)).map_or(0, |m| m.len());
        index
            + self
                .shards
                .iter()
                .map(|s| std::fs::metadata(&s.path).map_or(0, |m| m.len()))
                .sum::<u64>()
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

    fn shard(&self, id: u32) -> FsResult<(Arc<MappedFile>, &Path)> {
        let shard = self
            .shards
            .get(id as usize)
            .ok_or_else(|| FsError::Corrupt(format!("shard {id} out of range")))?;
        let m = shard.map.get_or_init(|| {
            MappedFile::open(&shard.path)
                .map(|(m, _)| m)
                .map_err(|e| format!("{}: {e}", shard.path.display()))
        });
        match m {
            Ok(m) => Ok((m.clone(), &shard.path)),
            Err(e) => Err(FsError::Corrupt(e.clone())),
        }
    }

    /// The stored bytes of a contiguous tensor, CRC-checked the first time when verification is on.
    fn stored(&self, t: &Tensor) -> FsResult<(Arc<MappedFile>, usize, usize)> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = t.entry.data
        else {
            return Err(self.corrupt(&t.key, "not a contiguous tensor"));
        };
        let (map, path) = self.shard(shard).map_err(|e| self.corrupt(&t.key, e))?;
        let end = offset + size; // checked by parse_entry
        if end > map.len() as u64 || !map.still_covers(end) {
            let e = self.corrupt(
                &t.key,
                format!(
                    "{} is shorter than the index says ({end} bytes needed)",
                    path.display()
                ),
            );
            log::error!("{e}");
            return Err(e);
        }
        let (start, end) = (offset as usize, end as usize);
        if self.verify {
            self.check_once(t.pos, &t.key, path, || {
                let bytes = &(*map).as_ref()[start..end];
                if t.entry.dtype == DT_STRING {
                    StringLayout::parse(bytes, t.entry.num_elements(), Some(crc))
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                } else if t.entry.dtype == DT_VARIANT {
                    crate::format::strings::verify_variant(bytes, t.entry.num_elements(), crc)
                        .map_err(|e| e.to_string())
                } else {
                    let computed = crc32c::crc32c(bytes);
                    if mask_crc(computed) == crc {
                        Ok(())
                    } else {
                        Err(FormatError::TensorCrc {
                            stored: unmask_crc(crc),
                            computed,
                        }
                        .to_string())
                    }
                }
            })?;
        }
        Ok((map, start, end))
    }

    fn check_once(
        &self,
        pos: Pos,
        key: &[u8],
        path: &Path,
        check: impl FnOnce() -> Result<(), String>,
    ) -> FsResult<()> {
        let known = self.lock_checked().get(&pos).cloned();
        let outcome = match known {
            Some(o) => o,
            None => {
                let o = check();
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
        };
        outcome.map_err(|e| self.corrupt(key, e))
    }

    fn lock_checked(&self) -> std::sync::MutexGuard<'_, HashMap<Pos, Result<(), String>>> {
        self.checked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn string_layout(
        &self,
        t: &Tensor,
    ) -> FsResult<(Arc<StringLayout>, Arc<MappedFile>, usize, usize)> {
        let (map, start, end) = self.stored(t)?;
        let cached = self
            .strings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&t.pos)
            .cloned();
        let layout = match cached {
            Some(l) => l,
            None => {
                let l =
                    StringLayout::parse(&(*map).as_ref()[start..end], t.entry.num_elements(), None)
                        .map_err(|e| self.corrupt(&t.key, e))?;
                let l = Arc::new(l);
                self.strings
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .put(t.pos, l.clone());
                l
            }
        };
        Ok((layout, map, start, end))
    }

    /// Size of the served `.bin` file.
    pub fn served_size(&self, t: &Tensor) -> FsResult<u64> {
        let d = t.entry.dtype;
        if let Some(es) = d.elem_size() {
            return Ok(t.entry.num_elements() * es as u64);
        }
        match &t.entry.data {
            Data::Contiguous { size, .. } if d == DT_STRING => {
                let (layout, ..) = self.string_layout(t)?;
                let _ = size;
                Ok(layout.served_len())
            }
            Data::Contiguous { size, .. } if d == DT_VARIANT => Ok(*size),
            Data::Contiguous { .. } => Ok(0),
            Data::Sliced(slices) if d == DT_STRING => {
                // Each element is served as 8 + len bytes whatever its order, so the total is
                // the sum over the slices.
                let mut total = 0u64;
                for (_, st) in self.resolve_slices(t, slices)? {
                    total += self.string_layout(&st)?.0.served_len();
                }
                Ok(total)
            }
            Data::Sliced(_) => Ok(0),
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
                let (layout, map, start, end) = self.string_layout(t)?;
                self.stored(t)?; // CRC
                return Ok(ReadBuf::Owned(layout.read(
                    &(*map).as_ref()[start..end],
                    offset,
                    len,
                )));
            }
            if d == DT_VARIANT {
                let (map, start, end) = self.stored(t)?;
                return Ok(clamp(map, start, end, offset, len));
            }
            return Err(self.corrupt(&t.key, format!("unsupported dtype {}", d.display_name())));
        };
        if self.header.big_endian && es > 1 {
            return Err(self.corrupt(&t.key, "big-endian checkpoints are not supported"));
        }
        match &t.entry.data {
            Data::Contiguous { .. } => {
                let (map, start, end) = self.stored(t)?;
                Ok(clamp(map, start, end, offset, len))
            }
            Data::Sliced(slices) => self.read_sliced(t, slices, es, offset, len),
        }
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
    /// refuses these; they are rare and small).
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
            self.stored(&st)?; // CRC
            let (layout, map, start, end) = self.string_layout(&st)?;
            parts.push((s, layout, map, start, end));
        }
        let n = t.entry.num_elements();
        let rank = shape.len();
        let mut idx = vec![0u64; rank];
        let mut out = Vec::new();
        for e in 0..n {
            let mut rem = e;
            for j in (0..rank).rev() {
                idx[j] = rem % shape[j];
                rem /= shape[j];
            }
            let Some((s, layout, map, start, end)) = parts.iter().find(|(s, ..)| {
                s.iter().zip(shape).zip(&idx).all(|((x, &d), &i)| {
                    let (a, b) = extent_range(x, d);
                    a <= i && i < b
                })
            }) else {
                return Err(self.corrupt(&t.key, "slices do not cover the tensor"));
            };
            let mut local = 0u64;
            for j in 0..rank {
                let (a, b) = extent_range(&s[j], shape[j]);
                local = local * (b - a) + (idx[j] - a);
            }
            let elem = layout.element(&(**map).as_ref()[*start..*end], local as usize);
            out.extend_from_slice(&(elem.len() as u64).to_le_bytes());
            out.extend_from_slice(elem);
        }
        let a = (offset as usize).min(out.len());
        let b = a.saturating_add(len).min(out.len());
        Ok(ReadBuf::Owned(out[a..b].to_vec()))
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
            let (map, start, end) = self.stored(&st)?;
            parts.push((s, map, start, end));
        }
        let total = t.entry.num_elements() * es as u64;
        let end_b = total.min(offset.saturating_add(len as u64));
        if offset >= end_b {
            return Ok(ReadBuf::Owned(Vec::new()));
        }
        let es64 = es as u64;
        let first = offset / es64;
        let last = end_b.div_ceil(es64);
        let mut out = Vec::with_capacity(((last - first) * es64) as usize);
        let rank = shape.len();
        let mut idx = vec![0u64; rank];
        let mut e = first;
        while e < last {
            let mut rem = e;
            for j in (0..rank).rev() {
                idx[j] = rem % shape[j].max(1);
                rem /= shape[j].max(1);
            }
            let range = extent_range;
            let Some((s, map, start, _)) = parts.iter().find(|(s, ..)| {
                s.iter().zip(shape).zip(&idx).all(|((x, &d), &i)| {
                    let (a, b) = range(x, d);
                    a <= i && i < b
                })
            }) else {
                return Err(self.corrupt(&t.key, "slices do not cover the tensor"));
            };
            let mut run = 1u64;
            let mut inner = 1u64;
            for j in (0..rank).rev() {
                let (a, b) = range(&s[j], shape[j]);
                run = (b - idx[j]) * inner;
                if !(a == 0 && b == shape[j] && idx[j] == 0) {
                    break;
                }
                inner *= shape[j];
            }
            let take = run.min(last - e);
            // Position of idx inside the slice, row-major over the slice's own shape.
            let mut src = 0u64;
            for j in 0..rank {
                let (a, b) = range(&s[j], shape[j]);
                src = src * (b - a) + (idx[j] - a);
            }
            let from = *start + (src * es64) as usize;
            let to = from + (take * es64) as usize;
            out.extend_from_slice(&(**map).as_ref()[from..to]);
            e += take;
        }
        let skip = (offset - first * es64) as usize;
        out.drain(..skip);
        out.truncate((end_b - offset) as usize);
        Ok(ReadBuf::Owned(out))
    }
}

/// `[start, end)` of an extent in a dimension of size `d`.
fn extent_range(x: &Extent, d: u64) -> (u64, u64) {
    if x.length < 0 {
        (0, d)
    } else {
        (x.start as u64, (x.start + x.length) as u64)
    }
}

fn clamp(map: Arc<MappedFile>, start: usize, end: usize, offset: u64, len: usize) -> ReadBuf {
    let size = (end - start) as u64;
    let a = start + offset.min(size) as usize;
    let b = start + offset.saturating_add(len as u64).min(size) as usize;
    ReadBuf::Mapped(map, a, b)
}
