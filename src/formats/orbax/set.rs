//! An opened Orbax checkpoint's tensors: every array and string leaf of its items' pytrees,
//! keyed by its path (`default/params/dense/kernel`), its zarr metadata read when the tensor is
//! first asked about, its chunks when a read covers them.
//!
//! An item's arrays live in an OCDBT database (`manifest.ocdbt` and the `d/` files it names, read
//! through [`super::ocdbt`]) or, in Orbax's older layout, in one directory per array. Either way a
//! value is found by key (`params.dense.kernel/.zarray`, `params.dense.kernel/0.0`) and read
//! from the store the checkpoint is in, local or remote, only when needed. Decoded chunks are
//! kept in one cache per checkpoint, bounded by [`CHUNK_CACHE_BYTES`] (a chunk larger than that
//! is kept alone).

use crate::sync::lock;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::ocdbt::{Db, Files};
use super::tree::{Kind, Leaf};
use super::zarr::ArrayMeta;
use crate::error::{FsError, FsResult};
use crate::formats::tensors::{
    next_position, seek_sorted, Memory, Stored, TensorData, TensorInfo, TensorSet,
};
use crate::parse::dtype::DT_STRING;
use crate::parse::FormatError;
use crate::source::bytes::{ByteSource, FileMeta, Store};

/// Decoded chunks kept per checkpoint.
pub(crate) const CHUNK_CACHE_BYTES: u64 = 256 << 20;
/// Largest metadata value read (`.zarray`, `zarr.json`, `_strings.json`, an OCDBT manifest).
pub(crate) const MAX_META: u64 = 64 << 20;
/// Files kept open per item.
const OPEN_FILES: usize = 64;

fn bad(m: impl Into<String>) -> FormatError {
    FormatError::Format(m.into())
}

/// An item's files, read by path relative to its directory (the OCDBT reader's view, and the
/// per-array layout's).
pub(crate) struct StoreFiles {
    store: Arc<dyn Store>,
    root: PathBuf,
    open: Mutex<lru::LruCache<Vec<u8>, Arc<dyn ByteSource>>>,
}

impl StoreFiles {
    pub(crate) fn new(store: Arc<dyn Store>, root: PathBuf) -> StoreFiles {
        StoreFiles {
            store,
            root,
            open: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(OPEN_FILES).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        }
    }

    /// The path of `rel` below the item's directory; a path that would leave it (absolute, or
    /// with a `..`) is refused.
    fn path(&self, rel: &[u8]) -> Result<PathBuf, FormatError> {
        let text = std::str::from_utf8(rel).map_err(|_| bad("a file name that is not UTF-8"))?;
        if text.is_empty()
            || text.starts_with('/')
            || text
                .split('/')
                .any(|c| c == ".." || c == "." || c.is_empty())
        {
            return Err(bad(format!(
                "file {text:?} is not a path below the checkpoint"
            )));
        }
        Ok(self.root.join(text))
    }

    /// The file `rel`, opened (kept open for the next read); `None` if it does not exist.
    fn file(&self, rel: &[u8]) -> Result<Option<Arc<dyn ByteSource>>, FormatError> {
        let open = || lock(&self.open);
        if let Some(f) = open().get(rel) {
            return Ok(Some(f.clone()));
        }
        let path = self.path(rel)?;
        match self.store.open(&path) {
            Ok(f) => {
                open().put(rel.to_vec(), f.clone());
                Ok(Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(bad(format!("{}: {e}", path.display()))),
        }
    }

    /// The whole of file `rel` (up to `max` bytes), if it exists.
    pub(crate) fn whole(&self, rel: &[u8], max: u64) -> Result<Option<Vec<u8>>, FormatError> {
        let Some(f) = self.file(rel)? else {
            return Ok(None);
        };
        if f.len() > max {
            return Err(bad(format!(
                "{}: {} bytes, more than the {max} read whole",
                f.name().display(),
                f.len()
            )));
        }
        f.read_vec(0, f.len() as usize).map(Some)
    }
}

impl Files for StoreFiles {
    fn read(&self, rel: &[u8], offset: u64, length: u64) -> Result<Vec<u8>, FormatError> {
        let f = self.file(rel)?.ok_or_else(|| {
            bad(format!(
                "{} is missing",
                self.root
                    .join(String::from_utf8_lossy(rel).as_ref())
                    .display()
            ))
        })?;
        let length = if length == u64::MAX {
            // A whole file (the manifest): bounded.
            let whole = f.len().saturating_sub(offset);
            if whole > MAX_META {
                return Err(bad(format!(
                    "{}: {whole} bytes, more than the {MAX_META} a manifest may hold",
                    f.name().display()
                )));
            }
            whole
        } else {
            length
        };
        let end = offset.checked_add(length).filter(|&e| e <= f.len());
        if end.is_none() {
            return Err(bad(format!(
                "{}: bytes {offset}..+{length} lie past its end ({} bytes)",
                f.name().display(),
                f.len()
            )));
        }
        let len = usize::try_from(length).map_err(|_| bad("a value too large to read"))?;
        f.read_vec(offset, len)
    }
}

/// Where an item's values are.
pub(crate) enum Kv {
    /// An OCDBT database.
    Ocdbt(Db<StoreFiles>),
    /// One directory per array (keys are paths below the item).
    Dirs(StoreFiles),
    /// The database could not be opened: every array of the item says why.
    Broken(String),
}

/// One item of a checkpoint (Orbax's `default`, Keras's `pytree`): its directory and store.
pub(crate) struct Item {
    /// Its name as the first component of its tensors' keys; `None` for a checkpoint that is
    /// one item (a `StandardCheckpointer` directory, or an item directory given as SOURCE).
    pub(crate) name: Option<String>,
    pub(crate) dir: PathBuf,
    /// The store it is in (for files its database does not name: `_strings.json`).
    pub(crate) store: Arc<dyn Store>,
    pub(crate) kv: Kv,
    pub(crate) all_chunks_stored: bool,
    /// zarr v3 metadata first (`zarr.json`), else v2 (`.zarray`).
    pub(crate) zarr3_first: bool,
    /// `_strings.json`, read when a string leaf is first read.
    pub(crate) strings: OnceLock<Result<serde_json::Map<String, serde_json::Value>, String>>,
}

impl Item {
    /// The value at `key` (`name/.zarray`, `name/0.0`), if there is one.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, FormatError> {
        match &self.kv {
            Kv::Ocdbt(db) => match db.get(key.as_bytes())? {
                Some(v) => db.value_bytes(&v).map(Some),
                None => Ok(None),
            },
            Kv::Dirs(files) => files.whole(key.as_bytes(), super::zarr::MAX_CHUNK + (1 << 20)),
            Kv::Broken(why) => Err(bad(why.clone())),
        }
    }

    /// `_strings.json`, read on first use.
    pub(crate) fn strings(&self) -> Result<&serde_json::Map<String, serde_json::Value>, String> {
        self.strings
            .get_or_init(|| {
                let files = StoreFiles::new(self.store.clone(), self.dir.clone());
                let bytes = files
                    .whole(b"_strings.json", MAX_META)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{}/_strings.json is missing", self.dir.display()))?;
                match serde_json::from_slice(&bytes) {
                    Ok(serde_json::Value::Object(m)) => Ok(m),
                    _ => Err(format!(
                        "{}/_strings.json is not a JSON object",
                        self.dir.display()
                    )),
                }
            })
            .as_ref()
            .map_err(|e| e.clone())
    }
}

/// One leaf shown as a tensor.
pub(crate) struct Tensor {
    /// Its key: the item's name, then its pytree path, `/`-separated.
    pub(crate) key: String,
    pub(crate) item: usize,
    pub(crate) leaf: Leaf,
    meta: OnceLock<Result<Arc<ArrayMeta>, String>>,
}

impl Tensor {
    pub(crate) fn new(key: String, item: usize, leaf: Leaf) -> Tensor {
        Tensor {
            key,
            item,
            leaf,
            meta: OnceLock::new(),
        }
    }
}

/// Decoded chunks by (tensor, chunk index), bounded in bytes.
struct ChunkCache {
    lru: lru::LruCache<(u64, Vec<u64>), Arc<Vec<u8>>>,
    bytes: u64,
}

impl ChunkCache {
    fn put(&mut self, k: (u64, Vec<u64>), v: Arc<Vec<u8>>) {
        self.bytes += v.len() as u64;
        if let Some(old) = self.lru.put(k, v) {
            self.bytes -= old.len() as u64;
        }
        while self.bytes > CHUNK_CACHE_BYTES && self.lru.len() > 1 {
            match self.lru.pop_lru() {
                Some((_, old)) => self.bytes -= old.len() as u64,
                None => break,
            }
        }
    }
}

/// What the set's tensors share.
pub(crate) struct Shared {
    pub(crate) path: PathBuf,
    pub(crate) meta: FileMeta,
    pub(crate) source_bytes: u64,
    pub(crate) items: Vec<Item>,
    /// Sorted by key.
    pub(crate) tensors: Vec<Tensor>,
    chunks: Mutex<ChunkCache>,
    /// The chunk a read-ahead thread is decoding (one at a time per checkpoint), and its end.
    ahead: Mutex<Option<ChunkKey>>,
    ahead_done: std::sync::Condvar,
}

/// A decoded chunk's key: the tensor's position and the chunk's index.
type ChunkKey = (u64, Vec<u64>);

/// How long a read waits for the read-ahead thread decoding the chunk it needs before decoding
/// it itself.
const AHEAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An Orbax checkpoint's tensors.
pub(crate) struct OrbaxSet(pub Arc<Shared>);

impl OrbaxSet {
    pub(crate) fn new(
        path: PathBuf,
        meta: FileMeta,
        source_bytes: u64,
        items: Vec<Item>,
        mut tensors: Vec<Tensor>,
    ) -> OrbaxSet {
        tensors.sort_by(|a, b| a.key.cmp(&b.key));
        tensors.dedup_by(|a, b| a.key == b.key);
        OrbaxSet(Arc::new(Shared {
            path,
            meta,
            source_bytes,
            items,
            tensors,
            chunks: Mutex::new(ChunkCache {
                lru: lru::LruCache::unbounded(),
                bytes: 0,
            }),
            ahead: Mutex::new(None),
            ahead_done: std::sync::Condvar::new(),
        }))
    }
}

impl Shared {
    fn tensor(&self, pos: u64) -> FsResult<&Tensor> {
        usize::try_from(pos)
            .ok()
            .and_then(|p| self.tensors.get(p))
            .ok_or(FsError::NotFound)
    }

    fn item(&self, t: &Tensor) -> FsResult<&Item> {
        self.items.get(t.item).ok_or(FsError::NotFound)
    }

    fn corrupt(&self, t: &Tensor, e: FormatError) -> FsError {
        let dir = self
            .items
            .get(t.item)
            .map_or(self.path.as_path(), |i| i.dir.as_path());
        FsError::corrupt(format!("tensor {}", t.key), dir.display(), e)
    }

    /// The array metadata of tensor `t` (an array leaf), read once.
    fn array(&self, t: &Tensor) -> FsResult<Arc<ArrayMeta>> {
        let item = self.item(t)?;
        let got = t.meta.get_or_init(|| {
            let name = t.leaf.stored_name();
            let order = if item.zarr3_first {
                ["zarr.json", ".zarray"]
            } else {
                [".zarray", "zarr.json"]
            };
            for m in order {
                match item.get(&format!("{name}/{m}")) {
                    Ok(Some(b)) => {
                        return ArrayMeta::parse(&b)
                            .map(Arc::new)
                            .map_err(|e| e.to_string())
                    }
                    Ok(None) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err(format!(
                "its array {name} has no metadata (.zarray or zarr.json) in the checkpoint"
            ))
        });
        got.clone()
            .map_err(|e| self.corrupt(t, FormatError::Format(e)))
    }

    /// Chunk `index` of the array at `pos`, decoded (cached); `None`: not stored, the fill value.
    fn chunk(
        &self,
        pos: u64,
        t: &Tensor,
        meta: &ArrayMeta,
        index: &[u64],
    ) -> Result<Option<Arc<Vec<u8>>>, FormatError> {
        let k = (pos, index.to_vec());
        let chunks = || lock(&self.chunks);
        if let Some(c) = chunks().lru.get(&k) {
            return Ok(Some(c.clone()));
        }
        // Being decoded by the read-ahead thread: wait for it rather than decode it twice.
        {
            let ahead = lock(&self.ahead);
            if ahead.as_ref() == Some(&k) {
                let _ = self
                    .ahead_done
                    .wait_timeout_while(ahead, AHEAD_WAIT, |a| a.as_ref() == Some(&k));
                if let Some(c) = chunks().lru.get(&k) {
                    return Ok(Some(c.clone()));
                }
            }
        }
        self.decode(t, meta, index, k)
    }

    /// Reads and decodes chunk `index` (the work of [`Shared::chunk`]), and keeps it.
    fn decode(
        &self,
        t: &Tensor,
        meta: &ArrayMeta,
        index: &[u64],
        k: ChunkKey,
    ) -> Result<Option<Arc<Vec<u8>>>, FormatError> {
        let chunks = || lock(&self.chunks);
        let item = self.items.get(t.item).ok_or_else(|| bad("no such item"))?;
        let (key, at) = meta.stored_at(index);
        let stored = item.get(&format!("{}/{key}", t.leaf.stored_name()))?;
        let Some(stored) = stored else {
            if item.all_chunks_stored {
                return Err(bad(format!(
                    "chunk {key} is missing (Orbax stored every chunk of this checkpoint)"
                )));
            }
            return Ok(None);
        };
        let Some(decoded) = meta.decode_at(&stored, at)? else {
            if item.all_chunks_stored {
                return Err(bad(format!(
                    "chunk {key} is missing from its shard (Orbax stored every chunk of this checkpoint)"
                )));
            }
            return Ok(None);
        };
        let c = Arc::new(decoded);
        chunks().put(k, c.clone());
        Ok(Some(c))
    }

    /// The served bytes of string leaf `t`: one element, an 8-byte length and the UTF-8 bytes.
    fn string(&self, t: &Tensor) -> FsResult<Vec<u8>> {
        let item = self.item(t)?;
        let map = item
            .strings()
            .map_err(|e| self.corrupt(t, FormatError::Format(e)))?;
        let name = t.leaf.stored_name();
        let s = map
            .get(&name)
            .and_then(|v| v.as_str())
            .ok_or_else(|| self.corrupt(t, bad(format!("_strings.json holds no string {name}"))))?;
        let mut out = Vec::with_capacity(8 + s.len());
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
        Ok(out)
    }
}

impl TensorSet for OrbaxSet {
    fn path(&self) -> &Path {
        &self.0.path
    }
    fn meta(&self) -> FileMeta {
        self.0.meta
    }
    fn source_bytes(&self) -> u64 {
        self.0.source_bytes
    }
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        Ok(seek_sorted(&self.0.tensors, key, |t| t.key.as_bytes()))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.0.tensors.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.0.tensor(pos)?.key.as_bytes().to_vec())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let t = self.0.tensor(pos)?;
        let (dtype, shape) = match t.leaf.kind {
            Kind::String => (DT_STRING, Vec::new()),
            Kind::Array => {
                let m = self.0.array(t)?;
                (m.dtype, m.shape.clone())
            }
        };
        Ok(TensorInfo {
            key: t.key.as_bytes().to_vec(),
            dtype,
            shape,
            stored: None,
            slices: Vec::new(),
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let t = self.0.tensor(pos)?;
        match t.leaf.kind {
            Kind::String => Ok(Arc::new(Memory(self.0.string(t)?))),
            Kind::Array => Ok(Arc::new(Chunked {
                set: self.0.clone(),
                pos,
                meta: self.0.array(t)?,
            })),
        }
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
    fn complete(&self) -> bool {
        self.0.items.iter().all(|i| !matches!(i.kv, Kv::Broken(_)))
    }
}

/// An array's `.bin`, assembled from the chunks each read covers.
struct Chunked {
    set: Arc<Shared>,
    pos: u64,
    meta: Arc<ArrayMeta>,
}

impl TensorData for Chunked {
    fn size(&self) -> u64 {
        self.meta.size()
    }
    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let t = self.set.tensor(self.pos)?;
        let mut chunk = |i: &[u64]| self.set.chunk(self.pos, t, &self.meta, i);
        let out = self
            .meta
            .read(offset, len, &mut chunk)
            .map_err(|e| self.set.corrupt(t, e))?;
        self.read_ahead(offset.saturating_add(out.len() as u64));
        Ok(out.into())
    }
}

impl Chunked {
    /// Read-ahead for a reader moving forward: the chunk one chunk's bytes past where this read
    /// ended is decoded on a thread of its own while this one is served (one such thread per
    /// checkpoint at a time; a read that needs the chunk waits for it), so that a sequential
    /// read decodes on two cores. Its bytes are kept in the chunk cache, within its bound.
    fn read_ahead(&self, end: u64) {
        let at = end.saturating_add(self.meta.chunk_bytes() as u64);
        let Some(index) = self
            .meta
            .chunk_of(at.min(self.meta.size().saturating_sub(1)))
        else {
            return;
        };
        let k = (self.pos, index);
        let set = &self.set;
        if lock(&set.chunks).lru.contains(&k) {
            return;
        }
        {
            let mut ahead = lock(&set.ahead);
            if ahead.is_some() {
                return;
            }
            *ahead = Some(k.clone());
        }
        let (set, meta, pos) = (self.set.clone(), self.meta.clone(), self.pos);
        let spawned = std::thread::Builder::new()
            .name("tfmount-ahead".into())
            .spawn(move || {
                if let Ok(t) = set.tensor(pos) {
                    // Its failure is the foreground read's to report, when it gets there.
                    let index = k.1.clone();
                    let _ = set.decode(t, &meta, &index, k);
                }
                *lock(&set.ahead) = None;
                set.ahead_done.notify_all();
            });
        if spawned.is_err() {
            *lock(&self.set.ahead) = None;
            self.set.ahead_done.notify_all();
        }
    }
}

/// Leaves of an item as tensors, keyed by the item's name and their paths.
pub(crate) fn tensors_of(item: usize, name: Option<&str>, leaves: Vec<Leaf>) -> Vec<Tensor> {
    leaves
        .into_iter()
        .map(|l| {
            let key = match name {
                Some(n) => format!("{n}/{}", l.shown()),
                None => l.shown(),
            };
            Tensor::new(key, item, l)
        })
        .collect()
}
