//! One V2 checkpoint (tensor bundle): its `.index` table, its data shards, and the tensors they
//! hold, as a [`TensorSet`]. Opening reads only the index footer, the index block and the
//! header, and opens every data shard; everything else is read on demand through the
//! byte-source seam ([`super::bytes`]), so the mount serves the files it opened whatever
//! happens to their paths.

use bytes::Bytes;
use std::collections::HashMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{FsError, FsResult, SourceError};
use crate::formats::caches::{Caches, CHECK_WEIGHT};
use crate::formats::crc_stream::{Admit, StreamCheck};
use crate::formats::tensors;
use crate::formats::tensors::{Stored, TensorData, TensorInfo, TensorSet};
use crate::formats::v2::strings;
use crate::formats::v2::strings::StringLayout;
use crate::parse::bundle::{Data, Entry, Header};
use crate::parse::dtype::{DT_STRING, DT_VARIANT};
use crate::parse::partition::{for_each_run, locate};
use crate::parse::slice_key::Extent;
use crate::parse::table::{BlockStore, Pos, Table};
use crate::parse::{
    bundle, for_each_chunk, mask_crc, slice_key, unmask_crc, FormatError, ReadError,
};
use crate::source::bytes::{ByteSource, FileMeta, RangeReader, Store};

/// How long the read of a tensor's last bytes waits for reads still in flight to complete its
/// streaming check before checking it first.
/// (`STREAM_WAIT_IDLE` when no streamed read of it is in flight in the daemon: one the kernel
/// has queued is taken up by a serving thread soon.)
const STREAM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const STREAM_WAIT_IDLE: std::time::Duration = std::time::Duration::from_millis(200);
/// Bytes read at a time when verifying a tensor's CRC.
const CRC_CHUNK: usize = 128 << 10;
/// Missing shards named in the log one by one; beyond this, only their number.
const MISSING_LOGGED: usize = 8;
/// Shard files whose opening failed named in the log one by one.
const FAILED_LOGGED: usize = 8;
/// Data shards opened by name where the store cannot list the directory (each costs a request).
const MAX_UNLISTED_SHARDS: usize = 4096;
/// A V2 index position as a [`TensorSet`] position: `block:23 | entry:17`.
const ENTRY_BITS: u32 = 17;
const BLOCK_BITS: u32 = tensors::POS_BITS - ENTRY_BITS;
const _: () = assert!(BLOCK_BITS == 23);

fn pack(p: Pos) -> Option<u64> {
    (p.block < (1 << BLOCK_BITS) && p.entry < (1 << ENTRY_BITS))
        .then_some(((p.block as u64) << ENTRY_BITS) | p.entry as u64)
}

fn unpack(v: u64) -> Pos {
    Pos {
        block: ((v >> ENTRY_BITS) & ((1 << BLOCK_BITS) - 1)) as u32,
        entry: (v & ((1 << ENTRY_BITS) - 1)) as u32,
    }
}

/// The data shards that could be opened when the checkpoint was opened, by number; the others
/// with why not.
type Shards = HashMap<u32, Result<Arc<dyn ByteSource>, String>>;

/// A tensor's index entry and where it is.
#[derive(Debug, Clone)]
pub(crate) struct Tensor {
    pub(crate) pos: Pos,
    pub(crate) key: Vec<u8>,
    pub(crate) entry: Entry,
}

pub(crate) struct Checkpoint {
    shared: Arc<Shared>,
    table: Table,
    index: Arc<dyn ByteSource>,
    header: Header,
    shards: Shards,
    /// How long each data shard must be: the end of the furthest extent the index places in
    /// it (one pass over the index, the first time a live directory asks: [`TensorSet::complete`]);
    /// `None` where the index cannot be read through (its damage is reported by reads).
    ends: std::sync::OnceLock<Option<HashMap<u32, u64>>>,
}

/// What the opened tensors of a checkpoint keep a reference to.
struct Shared {
    id: u64,
    prefix: PathBuf,
    meta: FileMeta,
    verify: bool,
    /// Check tensors read from their start while streaming them (local files and object
    /// storage alike); with `-o crc_first`, check first.
    stream: bool,
    caches: Arc<Caches>,
}

impl Shared {
    fn corrupt(&self, key: &[u8], e: FormatError) -> FsError {
        FsError::corrupt(
            format!("tensor {}", String::from_utf8_lossy(key)),
            self.prefix.display(),
            e,
        )
    }

    /// Runs `check` unless its outcome for `pos` is known. A failure to read the bytes (the
    /// file changed) is not remembered: the file's own state decides later reads.
    fn check_once(
        &self,
        pos: Pos,
        key: &[u8],
        file: &dyn ByteSource,
        check: impl FnOnce() -> Result<(), FormatError>,
    ) -> FsResult<()> {
        let k = (self.id, pos);
        // Named by the data file the bytes are in.
        let err = |e| {
            FsError::corrupt(
                format!("tensor {}", String::from_utf8_lossy(key)),
                file.name().display(),
                e,
            )
        };
        let outcome = match self.checked.get(&k) {
            Some(o) => o,
            None => match check() {
                Err(e @ FormatError::Read(_)) => return Err(err(e)),
                o => {
                    self.checked.insert(k, o.clone(), CHECK_WEIGHT);
                    o
                }
            },
        };
        outcome.map_err(err)
    }
}

impl std::ops::Deref for Shared {
    type Target = Caches;
    fn deref(&self) -> &Caches {
        &self.caches
    }
}

pub(crate) fn data_file_name(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!(".data-{shard:05}-of-{num_shards:05}"));
    PathBuf::from(s)
}

pub(crate) fn index_file_name(prefix: &Path) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".index");
    PathBuf::from(s)
}

/// The prefix a state-file path `p` names, relative to `dir` (or absolute). `"."`, `""`, and
/// paths ending in `/` or `/.` name a directory, and so the prefix with an empty base name in
/// it (`dir/`): TensorFlow's `update_checkpoint_state` writes `"."` for a checkpoint written to
/// `dir/` (relative to `dir`), and `"/abs/dir/"` for an absolute one.
pub(crate) fn prefix_of(dir: &Path, p: &str) -> PathBuf {
    let joined = dir.join(p);
    let names_dir = p.is_empty() || p == "." || p.ends_with('/') || p.ends_with("/.");
    if !names_dir {
        return joined;
    }
    let mut s = joined.into_os_string().into_vec();
    while s.len() > 1 && s.ends_with(b"/.") {
        s.truncate(s.len() - 1);
    }
    if !s.ends_with(b"/") {
        s.push(b'/');
    }
    PathBuf::from(std::ffi::OsString::from_vec(s))
}

/// A prefix's directory and base name, split at its last `/` as TensorFlow names the files: the
/// base name of `dir/` is empty (its files are `dir/.index` and `dir/.data-00000-of-00001`, as
/// `tf.train.Checkpoint.write("dir/")` and Keras' `save_weights("dir/")` write them). A prefix
/// without a `/` is in `.`.
pub(crate) fn split_prefix(prefix: &Path) -> (&Path, &std::ffi::OsStr) {
    use std::ffi::OsStr;
    let b = prefix.as_os_str().as_bytes();
    match b.iter().rposition(|&c| c == b'/') {
        Some(0) => (Path::new("/"), OsStr::from_bytes(&b[1..])),
        Some(i) => (
            Path::new(OsStr::from_bytes(&b[..i])),
            OsStr::from_bytes(&b[i + 1..]),
        ),
        None => (Path::new("."), prefix.as_os_str()),
    }
}

/// Opens the data shards of the checkpoint at `prefix` that exist. They are found by listing the
/// directory once, so a header claiming a million shards costs nothing for the ones absent.
fn open_shards(store: &dyn Store, prefix: &Path, num_shards: u32) -> Shards {
    let (dir, base) = split_prefix(prefix);
    let mut shards = Shards::new();
    let mut failed = 0usize;
    let mut open = |id: u32, shards: &mut Shards| {
        let path = data_file_name(prefix, id, num_shards);
        let r = match store.open(&path) {
            Ok(f) => Ok(f),
            // Only where the name was not listed (a store that cannot list): not there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                failed += 1;
                if failed <= FAILED_LOGGED {
                    log::warn!(
                        "{}: cannot open data shard ({e}); tensors stored in it will fail with EIO",
                        path.display()
                    );
                }
                Err(e.to_string())
            }
        };
        shards.insert(id, r);
    };
    match store.list(dir) {
        Ok(entries) => {
            let mut stem = base.to_owned();
            stem.push(".data-");
            let stem = stem.as_bytes();
            for (name, _) in entries {
                let Some(rest) = name.as_bytes().strip_prefix(stem) else {
                    continue;
                };
                if let Some(id) = shard_number(rest, num_shards) {
                    open(id, &mut shards);
                }
            }
        }
        // A store that cannot list (plain HTTP): the shards are opened by the names the
        // header implies, at most MAX_UNLISTED_SHARDS of them.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            if num_shards as usize > MAX_UNLISTED_SHARDS {
                log::warn!(
                    "{}: the header claims {num_shards} data shards and the store cannot list them: only the first {MAX_UNLISTED_SHARDS} are opened",
                    prefix.display()
                );
            }
            // Asked about at once where each question costs a round trip, with the graph
            // file that may be beside them (asked for next).
            let ids = 0..num_shards.min(MAX_UNLISTED_SHARDS as u32);
            let mut expected: Vec<PathBuf> = ids
                .clone()
                .map(|id| data_file_name(prefix, id, num_shards))
                .collect();
            let mut meta = prefix.as_os_str().to_owned();
            meta.push(".meta");
            expected.push(PathBuf::from(meta));
            store.expect(&expected);
            for id in ids {
                open(id, &mut shards);
            }
        }
        _ => {}
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
    pub(crate) fn open(
        store: &dyn Store,
        prefix: &Path,
        caches: Arc<Caches>,
        verify: bool,
        crc_first: bool,
    ) -> Result<Checkpoint, SourceError> {
        let index_path = index_file_name(prefix);
        let index = store.open(&index_path).map_err(|err| SourceError::Io {
            path: index_path.clone(),
            err,
        })?;
        let fmt = |err| SourceError::Format {
            path: index_path.clone(),
            err,
        };
        let table = Table::open_at(index.clone(), caches.clone()).map_err(fmt)?;
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
        let mut file_meta = index.meta();
        let shards = open_shards(store, prefix, header.num_shards);
        for f in shards.values().flatten() {
            // The mount grants no more than every file it serves from does.
            file_meta.mode &= f.meta().mode | !0o777;
        }
        Ok(Checkpoint {
            shared: Arc::new(Shared {
                id: caches.register(),
                prefix: prefix.to_path_buf(),
                meta: file_meta,
                verify,
                stream: verify && !crc_first,
                caches,
            }),
            table,
            index,
            header,
            shards,
            ends: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn prefix(&self) -> &Path {
        &self.shared.prefix
    }

    pub(crate) fn table(&self) -> &Table {
        &self.table
    }

    fn corrupt(&self, key: &[u8], e: FormatError) -> FsError {
        self.shared.corrupt(key, e)
    }

    fn index_error(&self, e: FormatError) -> FsError {
        FsError::corrupt("index", index_file_name(&self.shared.prefix).display(), e)
    }

    /// The tensor at `pos` (any entry, including hidden ones).
    pub(crate) fn tensor_at(&self, pos: Pos) -> FsResult<Tensor> {
        let (blk, i) = self.table.entry(pos).map_err(|e| self.index_error(e))?;
        let key = blk.key(i).to_vec();
        let entry = bundle::parse_entry(blk.value(i)).map_err(|e| self.corrupt(&key, e))?;
        Ok(Tensor { pos, key, entry })
    }

    /// The tensor stored under exactly `key`.
    pub(crate) fn lookup(&self, key: &[u8]) -> FsResult<Option<Tensor>> {
        match self.table.get(key) {
            Ok(Some((pos, _, _))) => self.tensor_at(pos).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(self.index_error(e)),
        }
    }

    fn shard(&self, key: &[u8], id: u32) -> FsResult<&Arc<dyn ByteSource>> {
        let n = self.header.num_shards;
        let bad = |msg: String| self.corrupt(key, FormatError::BadEntry(msg));
        if id >= n {
            return Err(bad(format!("shard {id} out of range")));
        }
        match self.shards.get(&id) {
            Some(Ok(f)) => Ok(f),
            Some(Err(e)) => Err(bad(format!(
                "{}: could not be opened when mounted: {e}",
                data_file_name(&self.shared.prefix, id, n).display()
            ))),
            None => Err(bad(format!(
                "{}: missing when mounted",
                data_file_name(&self.shared.prefix, id, n).display()
            ))),
        }
    }

    /// A contiguous tensor's stored bytes, resolved (not yet verified).
    fn stored(&self, t: &Tensor) -> FsResult<StoredBytes> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = t.entry.data
        else {
            return Err(self.corrupt(&t.key, FormatError::BadEntry("partitioned".into())));
        };
        let file = self.shard(&t.key, shard)?.clone();
        Ok(StoredBytes {
            shared: self.shared.clone(),
            pos: t.pos,
            key: t.key.clone(),
            file,
            start: offset,
            end: offset + size, // checked by parse_entry
            crc,
            dtype_string: t.entry.dtype == DT_STRING,
            dtype_variant: t.entry.dtype == DT_VARIANT,
            n: t.entry.num_elements(),
            verified: AtomicBool::new(false),
            reader: std::sync::OnceLock::new(),
            stream: std::sync::OnceLock::new(),
        })
    }

    /// A string tensor's layout (CRC-checked first when verification is on).
    fn string_layout(&self, s: &StoredBytes) -> FsResult<Arc<StringLayout>> {
        s.verify()?;
        self.shared
            .strings
            .get_or_insert_with((self.shared.id, s.pos), || {
                let l = StringLayout::parse_at(&*s.file, s.start, s.end - s.start, s.n, None)
                    .map_err(|e| self.corrupt(&s.key, e))?;
                let w = l.mem_size();
                Ok((Arc::new(l), w))
            })
    }

    /// The entries of a partitioned tensor's slices, after checking they tile the tensor.
    fn resolve_slices<'s>(
        &self,
        t: &Tensor,
        slices: &'s [Vec<Extent>],
    ) -> FsResult<Vec<(&'s [Extent], Tensor)>> {
        let shape = &t.entry.shape;
        bundle::check_tiling(shape, slices).map_err(|e| self.corrupt(&t.key, e))?;
        let bad = |m: &str| self.corrupt(&t.key, FormatError::BadEntry(m.into()));
        slices
            .iter()
            .map(|s| {
                let st = self
                    .lookup(&slice_key::encode(&t.key, s))?
                    .ok_or_else(|| bad("a slice's entry is missing"))?;
                if st.entry.dtype != t.entry.dtype
                    || st.entry.shape != bundle::slice_shape(shape, s)
                {
                    return Err(bad("a slice's entry does not match its dtype or extent"));
                }
                Ok((s.as_slice(), st))
            })
            .collect()
    }

    /// Everything reads of the tensor `t` need.
    pub(crate) fn open_tensor(&self, t: &Tensor) -> FsResult<Arc<dyn TensorData>> {
        let d = t.entry.dtype;
        let unsupported = || {
            self.corrupt(
                &t.key,
                FormatError::BadEntry(format!("unsupported dtype {}", d.display_name())),
            )
        };
        match (&t.entry.data, d.elem_size()) {
            (Data::Contiguous { .. }, Some(es)) => {
                if self.header.big_endian && es > 1 {
                    return Err(self.corrupt(
                        &t.key,
                        FormatError::BadEntry("big-endian checkpoints are not supported".into()),
                    ));
                }
                let s = self.stored(t)?;
                let want = t.entry.num_elements().saturating_mul(es as u64);
                Ok(Arc::new(Pod { size: want, s }))
            }
            (Data::Contiguous { .. }, None) if d == DT_STRING => {
                let s = self.stored(t)?;
                let layout = self.string_layout(&s)?;
                Ok(Arc::new(Strings { layout, s }))
            }
            (Data::Contiguous { size, .. }, None) if d == DT_VARIANT => {
                let s = self.stored(t)?;
                Ok(Arc::new(Pod { size: *size, s }))
            }
            (Data::Sliced(slices), Some(es)) => {
                if self.header.big_endian && es > 1 {
                    return Err(unsupported());
                }
                let mut parts = Vec::with_capacity(slices.len());
                for (ext, st) in self.resolve_slices(t, slices)? {
                    parts.push((ext.to_vec(), self.stored(&st)?));
                }
                Ok(Arc::new(SlicedPod {
                    key: t.key.clone(),
                    shared: self.shared.clone(),
                    shape: t.entry.shape.clone(),
                    es: es as u64,
                    parts,
                }))
            }
            (Data::Sliced(slices), None) if d == DT_STRING => {
                let mut parts = Vec::with_capacity(slices.len());
                let mut size = 0u64;
                for (ext, st) in self.resolve_slices(t, slices)? {
                    let s = self.stored(&st)?;
                    let layout = self.string_layout(&s)?;
                    // Each element is served as 8 + len bytes whatever its order, so the total
                    // is the sum over the slices.
                    size += layout.served_len();
                    parts.push((ext.to_vec(), layout, s));
                }
                Ok(Arc::new(SlicedStrings {
                    key: t.key.clone(),
                    shared: self.shared.clone(),
                    shape: t.entry.shape.clone(),
                    n: t.entry.num_elements(),
                    size,
                    parts,
                }))
            }
            // Nothing can be served (an unknown dtype, a partitioned variant).
            _ => Err(unsupported()),
        }
    }

    /// Size of the tensor's `.bin`.
    pub(crate) fn served_size(&self, t: &Tensor) -> FsResult<u64> {
        Ok(self.open_tensor(t)?.size())
    }

    /// Bytes `[offset, offset + len)` of the tensor's `.bin` (checked as its reads are).
    pub(crate) fn read(&self, t: &Tensor, offset: u64, len: usize) -> FsResult<Bytes> {
        self.open_tensor(t)?.read(offset, len)
    }

    /// [`Self::read`] into `buf`; returns how many bytes (fewer at the end of the `.bin`).
    pub(crate) fn read_into(&self, t: &Tensor, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        self.open_tensor(t)?.read_into(offset, buf)
    }

    /// Stored location and CRC of a contiguous tensor.
    fn stored_info(&self, e: &Entry) -> Option<Stored> {
        match e.data {
            Data::Contiguous {
                shard,
                offset,
                size,
                crc,
            } => Some(Stored {
                shard,
                offset,
                size,
                crc32c: Some(unmask_crc(crc)),
            }),
            Data::Sliced(_) => None,
        }
    }
}

impl TensorSet for Checkpoint {
    fn path(&self) -> &Path {
        &self.shared.prefix
    }

    fn meta(&self) -> FileMeta {
        self.shared.meta
    }

    fn source_bytes(&self) -> u64 {
        self.index.len() + self.shards.values().flatten().map(|f| f.len()).sum::<u64>()
    }

    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        let p = self.table.seek(key).map_err(|e| self.index_error(e))?;
        self.packed(p)
    }

    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        let p = self
            .table
            .next(unpack(pos))
            .map_err(|e| self.index_error(e))?;
        self.packed(p)
    }

    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        let (blk, i) = self
            .table
            .entry(unpack(pos))
            .map_err(|e| self.index_error(e))?;
        Ok(blk.key(i).to_vec())
    }

    fn hidden(&self, key: &[u8]) -> bool {
        // The bundle header (empty key) and the slice entries (keys starting with NUL).
        key.first().is_none_or(|&b| b == 0)
    }

    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let t = self.tensor_at(unpack(pos))?;
        let slices = match &t.entry.data {
            Data::Contiguous { .. } => Vec::new(),
            Data::Sliced(s) => s.clone(),
        };
        Ok(TensorInfo {
            stored: self.stored_info(&t.entry),
            key: t.key,
            dtype: t.entry.dtype,
            shape: t.entry.shape,
            slices,
        })
    }

    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let t = self.tensor_at(unpack(pos))?;
        self.open_tensor(&t)
    }

    /// Every data shard there and at least as long as the furthest extent its index places in
    /// it: a shard still being written or copied (`cp -r`, `gsutil cp`, `rsync` write files in
    /// any order and over time) is not complete, however it is named.
    fn complete(&self) -> bool {
        if self.shards.len() != self.header.num_shards as usize
            || !self.shards.values().all(|s| s.is_ok())
        {
            return false;
        }
        let Some(ends) = self.ends.get_or_init(|| self.shard_ends()) else {
            return true;
        };
        ends.iter()
            .all(|(shard, end)| match self.shards.get(shard) {
                Some(Ok(f)) => f.len() >= *end,
                _ => false,
            })
    }

    fn slice_locations(&self, pos: u64) -> FsResult<Vec<Stored>> {
        let t = self.tensor_at(unpack(pos))?;
        let Data::Sliced(slices) = &t.entry.data else {
            return Ok(Vec::new());
        };
        let bad = || self.corrupt(&t.key, FormatError::BadEntry("a slice's entry".into()));
        self.resolve_slices(&t, slices)?
            .into_iter()
            .map(|(_, st)| self.stored_info(&st.entry).ok_or_else(bad))
            .collect()
    }
}

impl Checkpoint {
    /// The end of the furthest extent the index places in each shard; `None` when the index
    /// cannot be read through.
    fn shard_ends(&self) -> Option<HashMap<u32, u64>> {
        let mut ends: HashMap<u32, u64> = HashMap::new();
        let mut pos = self.table.seek(b"").ok()?;
        while let Some(p) = pos {
            let (blk, i) = self.table.entry(p).ok()?;
            if !blk.key(i).is_empty() {
                if let Ok(e) = bundle::parse_entry(blk.value(i)) {
                    if let Data::Contiguous {
                        shard,
                        offset,
                        size,
                        ..
                    } = e.data
                    {
                        let end = offset.saturating_add(size);
                        let v = ends.entry(shard).or_insert(0);
                        *v = (*v).max(end);
                    }
                }
            }
            pos = self.table.next(p).ok()?;
        }
        Some(ends)
    }

    /// A table position as a set position; a position too large for the inode layout is an
    /// error on that part of the index.
    fn packed(&self, p: Option<Pos>) -> FsResult<Option<u64>> {
        match p {
            None => Ok(None),
            Some(p) => pack(p).map(Some).ok_or_else(|| {
                self.index_error(FormatError::BadBlock("index too large to address"))
            }),
        }
    }
}

/// The stored bytes of one contiguous tensor (or slice), and whether their CRC was checked.
struct StoredBytes {
    shared: Arc<Shared>,
    pos: Pos,
    key: Vec<u8>,
    file: Arc<dyn ByteSource>,
    start: u64,
    end: u64,
    /// Masked CRC-32C as stored.
    crc: u32,
    dtype_string: bool,
    dtype_variant: bool,
    n: u64,
    /// Set once this handle saw a successful check: later reads skip the shared cache.
    verified: AtomicBool,
    /// A read-ahead reader of the stored range, where the source has one (remote objects).
    reader: std::sync::OnceLock<Option<Arc<dyn RangeReader>>>,
    /// The streaming check (see [`super::crc_stream`]), made by the first read of a tensor
    /// that is checked that way.
    stream: std::sync::OnceLock<StreamCheck>,
}

/// The stored range of a tensor as a [`crate::parse::ReadAt`] through its reader.
struct ThroughReader<'a>(&'a StoredBytes);

impl crate::parse::ReadAt for ThroughReader<'_> {
    fn len(&self) -> u64 {
        self.0.file.len()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError> {
        match self.0.reader() {
            Some(r) => r.read_into(buf, offset),
            None => self.0.file.read_exact_at(buf, offset),
        }
    }
}

impl StoredBytes {
    /// Fails if the stored range runs past the end of its file (logged once, like a failed CRC
    /// check: the file's length is fixed at mount).
    fn check_extent(&self) -> FsResult<()> {
        let (start, end, file) = (self.start, self.end, &*self.file);
        if end > file.len() {
            let len = file.len();
            self.shared.check_once(self.pos, &self.key, file, || {
                Err(FormatError::DataTruncated { len, start, end })
            })?;
        }
        Ok(())
    }

    /// The failure of a CRC check of the stored bytes.
    fn mismatch(&self, computed: u32) -> FormatError {
        FormatError::TensorCrc {
            stored: unmask_crc(self.crc),
            computed,
        }
    }

    /// Checks the stored bytes once (per tensor, remembered in the shared cache): the
    /// check-first pass.
    fn verify(&self) -> FsResult<()> {
        if self.verified.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.check_extent()?;
        let (start, end, file) = (self.start, self.end, &*self.file);
        let sh = &self.shared;
        if sh.verify {
            let r = sh.check_once(self.pos, &self.key, file, || {
                let size = end - start;
                if self.dtype_string {
                    StringLayout::parse_at(file, start, size, self.n, Some(self.crc)).map(|_| ())
                } else if self.dtype_variant {
                    strings::verify_variant_at(file, start, size, self.n, self.crc)
                } else {
                    let mut computed = 0u32;
                    for_each_chunk(&ThroughReader(self), start, size, CRC_CHUNK, |c| {
                        computed = crc32c::crc32c_append(computed, c);
                        Ok(())
                    })?;
                    if mask_crc(computed) == self.crc {
                        Ok(())
                    } else {
                        self.forget_cached();
                        Err(self.mismatch(computed))
                    }
                }
            });
            self.settle_stream();
            r?;
        }
        self.verified.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Reads waiting for a streaming check learn the outcome of another check (if it was
    /// found).
    fn settle_stream(&self) {
        let sh = &self.shared;
        if let Some(s) = self.stream.get() {
            if let Some(o) = sh.checked.get(&(sh.id, self.pos)) {
                s.settle(o.is_ok());
            }
        }
    }

    /// Whether the CRC check of the stored bytes is still to be done: on, and its outcome not
    /// known (a pass over every byte can then compute it, [`Pod::scan`]).
    fn check_pending(&self) -> bool {
        let sh = &self.shared;
        sh.verify
            && !self.dtype_string
            && !self.dtype_variant
            && !self.verified.load(Ordering::Relaxed)
            && sh.checked.get(&(sh.id, self.pos)).is_none()
    }

    /// Records the CRC-32C that a pass over every stored byte computed, as a check-first pass
    /// does (once, in the shared cache; the error of a mismatch).
    fn settle_computed(&self, computed: u32) -> FsResult<()> {
        let r = self
            .shared
            .check_once(self.pos, &self.key, &*self.file, || {
                if mask_crc(computed) == self.crc {
                    Ok(())
                } else {
                    Err(self.mismatch(computed))
                }
            });
        self.settle_stream();
        r?;
        self.verified.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a read is checked as part of a streaming check (see [`Self::read_checked`]):
    /// verification on, in stream mode, and the tensor's outcome not known yet.
    fn streamable(&self) -> bool {
        let sh = &self.shared;
        sh.verify
            && sh.stream
            && !self.dtype_string
            && !self.dtype_variant
            && !self.verified.load(Ordering::Relaxed)
    }

    /// [`Self::read_checked`] into `buf` (already clamped by the caller): straight into it
    /// when no streaming check takes the read (the check, if any, done first, as there).
    fn read_checked_into(&self, a: u64, buf: &mut [u8]) -> FsResult<()> {
        if self.streamable() {
            let b = self.read_checked(a, buf.len())?;
            if b.len() != buf.len() {
                return Err(self.failed(FormatError::Read(ReadError::Short)));
            }
            buf.copy_from_slice(&b);
            return Ok(());
        }
        self.verify()?;
        self.read_raw_into(buf, a).map_err(|e| self.failed(e))
    }

    /// Bytes `[a, a + len)` of the stored range, checked: verified while streamed when the
    /// read continues one from the start (see [`super::crc_stream`]), else after the
    /// check-first pass. A read that reaches the end of the range is served only once the CRC
    /// of the whole range is known.
    fn read_checked(&self, a: u64, len: usize) -> FsResult<Bytes> {
        let sh = &self.shared;
        if !self.streamable() {
            self.verify()?;
            return self.read(a, len);
        }
        self.check_extent()?;
        // An outcome already known (a check-first pass, another opening of the tensor).
        if let Some(o) = sh.checked.get(&(sh.id, self.pos)) {
            sh.check_once(self.pos, &self.key, &*self.file, || o)?;
            self.verified.store(true, Ordering::Relaxed);
            return self.read(a, len);
        }
        // Bytes a disk cache holds: read into memory and checked first, as a whole.
        if self.stream.get().is_none()
            && self
                .reader()
                .is_some_and(|r| r.check_cached(unmask_crc(self.crc)))
        {
            sh.check_once(self.pos, &self.key, &*self.file, || Ok(()))?;
            self.verified.store(true, Ordering::Relaxed);
            return self.read(a, len);
        }
        let size = self.end - self.start;
        let remote = self.file.is_remote();
        let s = self.stream.get_or_init(|| {
            if remote {
                StreamCheck::new(size, unmask_crc(self.crc))
            } else {
                StreamCheck::local(size, unmask_crc(self.crc))
            }
        });
        let b = a.saturating_add(len as u64).min(size);
        match s.admit(a, b) {
            Admit::Known(ok) => self.settled(s, ok)?,
            Admit::Fallback => self.verify()?,
            Admit::Stream => {
                let bytes = match self.read_raw(a, len) {
                    Ok(v) => v,
                    Err(e) => {
                        s.abandon();
                        // Named by the data file, as a failed check pass is.
                        return Err(FsError::corrupt(
                            format!("tensor {}", String::from_utf8_lossy(&self.key)),
                            self.file.name().display(),
                            e,
                        ));
                    }
                };
                let mut v = s.feed(a, &bytes);
                if v.is_none() && b >= size {
                    // The last bytes: held back until the CRC is known (reads in flight on
                    // other threads fill the gaps; from a local file, once none is in flight,
                    // this read reads the gaps left itself), else checked first.
                    if remote && !self.gaps_at_hand() {
                        v = s.wait(STREAM_WAIT_IDLE, STREAM_WAIT);
                    } else {
                        v = s.wait(std::time::Duration::ZERO, STREAM_WAIT);
                        if v.is_none() {
                            v = self.fill_gaps(s)?;
                        }
                    }
                    if v.is_none() {
                        self.verify()?;
                        v = Some(true);
                    }
                }
                if let Some(ok) = v {
                    self.settled(s, ok)?;
                }
                return Ok(bytes);
            }
        }
        self.read(a, len)
    }

    /// Reads the parts of the stored range no read covered into the streaming check (a local
    /// file's: a copy from the page cache); the outcome, once complete.
    fn fill_gaps(&self, s: &StreamCheck) -> FsResult<Option<bool>> {
        let mut v = None;
        for (g0, g1) in s.gaps() {
            let mut at = g0;
            for_each_chunk(
                &ThroughReader(self),
                self.start + g0,
                g1 - g0,
                CRC_CHUNK,
                |c| {
                    v = s.fill(at, c);
                    at += c.len() as u64;
                    Ok(())
                },
            )
            .map_err(|e| self.failed(e))?;
        }
        Ok(v)
    }

    /// Records the outcome of a streaming check (once, in the shared cache; a mismatch logged
    /// by the read that fails).
    fn settled(&self, s: &StreamCheck, ok: bool) -> FsResult<()> {
        self.shared
            .check_once(self.pos, &self.key, &*self.file, || {
                if ok {
                    Ok(())
                } else {
                    self.forget_cached();
                    Err(self.mismatch(s.computed()))
                }
            })?;
        self.verified.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The tensor's bytes failed their CRC: what a local cache holds of them is dropped, so
    /// that a later mount fetches them again (this one remembers the mismatch).
    fn forget_cached(&self) {
        if let Some(r) = self.reader() {
            r.forget_cached();
        }
    }

    /// Whether the stored bytes no read covered yet can be read without fetching them again
    /// (a remote tensor held whole in memory, or in the disk cache): then the read of its last
    /// bytes reads them itself, as from a local file, instead of waiting for readers that may
    /// come only once it returns (a memory-mapping reader's faults).
    fn gaps_at_hand(&self) -> bool {
        self.reader().is_some_and(|r| r.holds_all())
    }

    fn reader(&self) -> Option<&Arc<dyn RangeReader>> {
        self.reader
            .get_or_init(|| self.file.clone().range_reader(self.start..self.end))
            .as_ref()
    }

    /// Bytes `[a, b)` of the stored range (already clamped by the caller).
    fn read(&self, a: u64, len: usize) -> FsResult<Bytes> {
        self.read_raw(a, len).map_err(|e| self.failed(e))
    }

    /// A read of its stored bytes that failed (the file changed, was cut short, an I/O
    /// error), named by the data file they are in.
    fn failed(&self, e: FormatError) -> FsError {
        FsError::corrupt(
            format!("tensor {}", String::from_utf8_lossy(&self.key)),
            self.file.name().display(),
            e,
        )
    }

    /// Fills `buf` from byte `a` of the stored range, unchecked.
    fn read_raw_into(&self, buf: &mut [u8], a: u64) -> Result<(), FormatError> {
        match self.reader() {
            Some(r) => r.read_into(buf, self.start + a),
            None => self.file.read_exact_at(buf, self.start + a),
        }
    }

    fn read_raw(&self, a: u64, len: usize) -> Result<Bytes, FormatError> {
        match self.reader() {
            Some(r) => r.read_bytes(self.start + a, len),
            None => self.file.read_bytes(self.start + a, len),
        }
    }
}

/// A contiguous tensor of fixed-width elements (or a variant tensor, served as stored).
struct Pod {
    size: u64,
    s: StoredBytes,
}

impl TensorData for Pod {
    fn size(&self) -> u64 {
        self.size
    }

    fn prefetch(&self) {
        if let Some(r) = self.s.reader() {
            r.prefetch();
        }
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let size = self.size.min(self.s.end - self.s.start);
        let a = offset.min(size);
        let b = offset.saturating_add(len as u64).min(size);
        self.s.read_checked(a, (b - a) as usize)
    }

    fn read_into(&self, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let size = self.size.min(self.s.end - self.s.start);
        let a = offset.min(size);
        let b = offset.saturating_add(buf.len() as u64).min(size);
        let n = (b - a) as usize;
        self.s.read_checked_into(a, &mut buf[..n])?;
        Ok(n)
    }

    /// One pass from the start into `buf`. When the CRC check has not run yet, it is computed
    /// over the bytes handed to `f` (which are all the stored bytes) instead of in a pass of
    /// its own: a mismatch is the error of the check-first pass, after `f` saw the bytes.
    fn scan(&self, buf: &mut [u8], f: &mut dyn FnMut(&[u8])) -> FsResult<u64> {
        let s = &self.s;
        if buf.is_empty() {
            return tensors::scan_by_reads(self, 1 << 20, f);
        }
        let stored = s.end - s.start;
        let fold = self.size == stored && s.check_pending();
        if fold {
            s.check_extent()?;
        } else {
            s.verify()?;
        }
        let size = self.size.min(stored);
        let (mut crc, mut at) = (0u32, 0u64);
        while at < size {
            let n = (size - at).min(buf.len() as u64) as usize;
            let piece = &mut buf[..n];
            s.read_raw_into(piece, at).map_err(|e| s.failed(e))?;
            if fold {
                crc = crc32c::crc32c_append(crc, piece);
            }
            f(piece);
            at += piece.len() as u64;
        }
        if fold {
            s.settle_computed(crc)?;
        }
        Ok(size)
    }

    fn in_place(&self) -> Option<tensors::InPlace> {
        let s = &self.s;
        (self.size == s.end - s.start && !s.dtype_variant).then(|| tensors::InPlace {
            file: s.file.clone(),
            offset: s.start,
        })
    }

    /// The CRC-32C of the mapped bytes, computed here and kept as a check pass's outcome (or
    /// the outcome already known).
    fn check_in_place(&self, bytes: &[u8]) -> FsResult<()> {
        let s = &self.s;
        if s.check_pending() && bytes.len() as u64 == s.end - s.start {
            s.check_extent()?;
            s.settle_computed(crc32c::crc32c(bytes))
        } else {
            s.verify()
        }
    }
}

/// A contiguous string tensor.
struct Strings {
    layout: Arc<StringLayout>,
    s: StoredBytes,
}

impl TensorData for Strings {
    fn size(&self) -> u64 {
        self.layout.served_len()
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        self.s.verify()?;
        self.layout
            .read_at(&*self.s.file, self.s.start, offset, len)
            .map(Bytes::from)
            .map_err(|e| self.s.failed(e))
    }
}

/// A partitioned tensor of fixed-width elements, assembled per request with one read per
/// slice, never whole.
struct SlicedPod {
    key: Vec<u8>,
    shared: Arc<Shared>,
    shape: Vec<u64>,
    es: u64,
    parts: Vec<(Vec<Extent>, StoredBytes)>,
}

impl SlicedPod {
    fn cover(&self) -> FsError {
        self.shared.corrupt(
            &self.key,
            FormatError::BadEntry("slices do not cover the tensor".into()),
        )
    }
}

impl TensorData for SlicedPod {
    fn size(&self) -> u64 {
        self.shape
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d))
            .saturating_mul(self.es)
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let es = self.es;
        let end_b = self.size().min(offset.saturating_add(len as u64));
        if offset >= end_b {
            return Ok(Bytes::new());
        }
        for (_, s) in &self.parts {
            s.verify()?;
        }
        let exts: Vec<&[Extent]> = self.parts.iter().map(|p| p.0.as_slice()).collect();
        let first = offset / es;
        let last = end_b.div_ceil(es);
        // Pass 1: the span of stored elements each slice contributes.
        let mut spans = vec![(u64::MAX, 0u64); self.parts.len()];
        for_each_run(&self.shape, &exts, first, last, |p, src, take| {
            let sp = &mut spans[p];
            *sp = (sp.0.min(src), sp.1.max(src + take));
        })
        .ok_or_else(|| self.cover())?;
        let mut bufs = Vec::with_capacity(self.parts.len());
        for ((_, s), &(lo, hi)) in self.parts.iter().zip(&spans) {
            bufs.push(if lo < hi {
                s.read(lo * es, ((hi - lo) * es) as usize)?
            } else {
                Bytes::new()
            });
        }
        // Pass 2: the runs, in order.
        let mut out = Vec::with_capacity(((last - first) * es) as usize);
        for_each_run(&self.shape, &exts, first, last, |p, src, take| {
            let from = ((src - spans[p].0) * es) as usize;
            out.extend_from_slice(&bufs[p][from..from + (take * es) as usize]);
        })
        .ok_or_else(|| self.cover())?;
        let skip = (offset - first * es) as usize;
        out.drain(..skip);
        out.truncate((end_b - offset) as usize);
        Ok(out.into())
    }
}

/// A partitioned string tensor, assembled element by element (TensorFlow's own reader refuses
/// these; they are rare and small). Only the elements a range overlaps are read, one read per
/// slice.
struct SlicedStrings {
    key: Vec<u8>,
    shared: Arc<Shared>,
    shape: Vec<u64>,
    n: u64,
    size: u64,
    parts: Vec<(Vec<Extent>, Arc<StringLayout>, StoredBytes)>,
}

impl TensorData for SlicedStrings {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let bad = |m: &str| {
            self.shared
                .corrupt(&self.key, FormatError::BadEntry(m.to_string()))
        };
        let exts: Vec<&[Extent]> = self.parts.iter().map(|p| p.0.as_slice()).collect();
        let end = offset.saturating_add(len as u64);
        // Pass 1: the elements overlapping [offset, end), and the stored span each slice needs.
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let mut spans = vec![(u64::MAX, 0u64); self.parts.len()];
        let mut first_pos = None;
        let mut pos = 0u64;
        let mut e = 0u64;
        while e < self.n && pos < end {
            let (p, local) = locate(&self.shape, &exts, e)
                .ok_or_else(|| bad("slices do not cover the tensor"))?;
            let local = usize::try_from(local)
                .ok()
                .filter(|&l| l < self.parts[p].1.len())
                .ok_or_else(|| bad("slice smaller than its extent"))?;
            let (src, l) = self.parts[p].1.element_range(local);
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
            return Ok(Bytes::new());
        };
        let mut bufs = Vec::with_capacity(self.parts.len());
        for ((_, _, s), &(lo, hi)) in self.parts.iter().zip(&spans) {
            bufs.push(if lo < hi {
                s.verify()?;
                s.read(lo, (hi - lo) as usize)?
            } else {
                Bytes::new()
            });
        }
        // Pass 2: the served bytes of the picked elements, clipped to [offset, end).
        let mut out = Vec::with_capacity((pos.min(end) - offset.max(first_pos)) as usize);
        let mut at = first_pos;
        for &(p, local) in &picked {
            let (src, l) = self.parts[p].1.element_range(local);
            let from = (src - spans[p].0) as usize;
            let elem = &bufs[p][from..from + l as usize];
            let header = l.to_le_bytes();
            let served = header.iter().chain(elem.iter());
            let skip = offset.saturating_sub(at) as usize;
            let take = (end - at).min(8 + l) as usize;
            out.extend(served.take(take).skip(skip));
            at += 8 + l;
        }
        Ok(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_split_as_tensorflow_names_files() {
        for (p, dir, base) in [
            ("run/ckpt-1", "run", "ckpt-1"),
            ("run/", "run", ""),
            ("ckpt", ".", "ckpt"),
            ("/ckpt", "/", "ckpt"),
            ("/", "/", ""),
            ("a/b/", "a/b", ""),
        ] {
            let (d, b) = split_prefix(Path::new(p));
            assert_eq!((d.as_os_str(), b), (dir.as_ref(), base.as_ref()), "{p}");
        }
        assert_eq!(
            data_file_name(Path::new("run/"), 0, 1),
            Path::new("run/.data-00000-of-00001")
        );
        assert_eq!(index_file_name(Path::new("run/")).as_os_str(), "run/.index");
    }

    #[test]
    fn positions_pack_into_the_set_width() {
        for p in [
            Pos { block: 0, entry: 0 },
            Pos {
                block: (1 << 23) - 1,
                entry: (1 << 17) - 1,
            },
            Pos {
                block: 77,
                entry: 3,
            },
        ] {
            let v = pack(p).unwrap();
            assert!(v < 1 << tensors::POS_BITS);
            assert_eq!(unpack(v), p);
        }
        assert_eq!(
            pack(Pos {
                block: 1 << 23,
                entry: 0
            }),
            None
        );
        assert_eq!(
            pack(Pos {
                block: 0,
                entry: 1 << 17
            }),
            None
        );
    }
}
