//! What the filesystem needs of a checkpoint, whatever its format (every folder of
//! `src/formats/` implements it): a sorted key space addressed by positions, what the index says of each tensor, and the
//! tensor's bytes in tfmount's `.bin` layout, resolved once per open.

use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;

use crate::error::FsResult;
use crate::parse::dtype::DType;
use crate::parse::slice_key::Extent;
use crate::source::bytes::FileMeta;

/// Positions of a [`TensorSet`] fit in this many bits (the inode layout relies on it).
pub(crate) const POS_BITS: u32 = 40;

/// Where a tensor stored in one piece lies in its data shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub(crate) shard: u32,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    /// The stored CRC-32C of those bytes (unmasked), when the format keeps one.
    pub(crate) crc32c: Option<u32>,
}

/// What the index says of one tensor; nothing of its data is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) key: Vec<u8>,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// `Some` for a tensor stored in one piece.
    pub(crate) stored: Option<Stored>,
    /// The saved slices of a partitioned tensor (each slice's extent along every dimension),
    /// empty otherwise.
    pub(crate) slices: Vec<Vec<Extent>>,
}

impl TensorInfo {
    /// Elements of the whole tensor (saturating; shapes are checked when parsed).
    pub(crate) fn num_elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }
}

/// [`TensorSet::seek`] of a set whose positions index `items`, sorted by the key `key_of`
/// gives: the first position whose key is `>= key`.
pub(crate) fn seek_sorted<T>(items: &[T], key: &[u8], key_of: impl Fn(&T) -> &[u8]) -> Option<u64> {
    let i = items.partition_point(|t| key_of(t) < key);
    (i < items.len()).then_some(i as u64)
}

/// [`TensorSet::next`] of a set of `len` positions `0..len`.
pub(crate) fn next_position(pos: u64, len: usize) -> Option<u64> {
    let n = pos.saturating_add(1);
    (n < len as u64).then_some(n)
}

/// A checkpoint's tensors, in key order.
pub trait TensorSet: Send + Sync {
    /// The checkpoint's path (prefix or file), for messages and names.
    fn path(&self) -> &Path;
    /// Owner, times and read bits every file of the checkpoint shows.
    fn meta(&self) -> FileMeta;
    /// Total bytes of its source files.
    fn source_bytes(&self) -> u64;

    /// The first position whose key is `>= key`.
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>>;
    /// The position after `pos`.
    fn next(&self, pos: u64) -> FsResult<Option<u64>>;
    /// The key at `pos`.
    fn key(&self, pos: u64) -> FsResult<Vec<u8>>;
    /// Keys that are not tensors of the model (headers, slice entries): not shown.
    fn hidden(&self, key: &[u8]) -> bool;

    /// What the index says of the tensor at `pos`.
    fn info(&self, pos: u64) -> FsResult<TensorInfo>;
    /// The tensor's bytes, resolved: everything its reads need.
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>>;
    /// Where each saved slice of a partitioned tensor is stored (in `info().slices` order).
    fn slice_locations(&self, pos: u64) -> FsResult<Vec<Stored>>;
    /// A position that names the directory of keys under `prefix` (ending `/`) for as long as
    /// the set lives, whatever is added under it or taken away: for sets whose keys change
    /// while mounted ([`super::edited::Edited`]), whose directories are numbered by it rather
    /// than by their first key. Its [`TensorSet::key`] is `prefix`. `None`: directories are
    /// numbered by their first key.
    fn anchor(&self, _prefix: &[u8]) -> Option<u64> {
        None
    }
    /// For a set whose keys change while mounted: how many changes so far (what was built from
    /// it is made anew when this changes). `None`: its keys never change.
    fn version(&self) -> Option<u64> {
        None
    }
    /// For an edited set: what became of the source's key `key` (`None`: nothing, `Some(None)`:
    /// dropped, `Some(Some(new))`: renamed). Names made from the source's keys follow it.
    fn renamed(&self, _key: &[u8]) -> Option<Option<Vec<u8>>> {
        None
    }
    /// Whether every source file the checkpoint needs was there and opened.
    fn complete(&self) -> bool {
        true
    }
    /// Files besides [`TensorSet::path`] its tensors are read from, as its manifest names them
    /// (there or not): a sharded Keras model's shards, a TF.js model's. A followed directory
    /// watches them for change once the checkpoint was shown incomplete ([`crate::fs::live`]).
    /// Formats whose files are named by their path (`P.index`, `P.data-*`) or lie in its
    /// directory (an Orbax step) name none.
    fn part_files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }
    /// Attributes a format keeps beyond the index's (TFLite quantization, the stored form of a
    /// TF.js weight): their extended-attribute names, each `user.tfmount.<column>`. Every
    /// tensor file shows the ones a tensor has, and `tensors.tsv` gets one column per name
    /// (named `<column>`, after `offset`; `-` where a tensor has none).
    fn attr_names(&self) -> &'static [&'static str] {
        &[]
    }
    /// The values of [`TensorSet::attr_names`] for the tensor at `pos`, in that order (`None`
    /// where it has none; a shorter list leaves the rest `None`). Single-line text.
    fn attrs(&self, _pos: u64) -> FsResult<Vec<Option<String>>> {
        Ok(Vec::new())
    }
}

/// The `tensors.tsv` column of an attribute name (`user.tfmount.scale` -> `scale`).
pub(crate) fn attr_column(name: &str) -> &str {
    name.strip_prefix("user.tfmount.").unwrap_or(name)
}

/// Where a tensor's `.bin` lies verbatim in one source file: every byte of it stored there as
/// served (contiguous, uncompressed, little-endian, not decoded). See [`TensorData::in_place`].
pub struct InPlace {
    // Read by the Python module (arrays mapped in place).
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) file: Arc<dyn crate::source::bytes::ByteSource>,
    /// Where the `.bin`'s first byte is in `file`; it is [`TensorData::size`] bytes long.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) offset: u64,
}

/// One tensor's bytes in tfmount's `.bin` layout (row-major, little-endian; strings as an
/// 8-byte length and the bytes of each element).
pub trait TensorData: Send + Sync {
    /// Size of the `.bin`.
    fn size(&self) -> u64;
    /// Bytes `[offset, offset + len)` of the `.bin`, clamped to its end. Verifies the stored
    /// checksum before the first bytes are served, when the format has one.
    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes>;

    /// Bytes `[offset, offset + buf.len())` of the `.bin` into `buf` (its start), clamped to
    /// the end and checked as [`read`](Self::read) reads and checks them; returns how many. For
    /// a caller that reads through a buffer of its own, again and again (`diff --values`). A
    /// format that reads stored bytes as they are may read them into `buf` without a copy.
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        let b = self.read(offset, buf.len())?;
        let n = b.len().min(buf.len());
        buf[..n].copy_from_slice(&b[..n]);
        Ok(n)
    }

    /// Starts fetching the `.bin` from its start without waiting, where its bytes come from a
    /// network (a composed file's read-ahead in tensor order); nothing elsewhere.
    fn prefetch(&self) {}

    /// Hands the `.bin` to `f` from its start, in order, in pieces of at most `buf.len()` bytes
    /// (a format may read them into `buf`), checked as [`read`](Self::read) checks them;
    /// returns how many bytes `f` got (fewer than [`size`](Self::size) if the stored bytes end
    /// early). For whole-tensor passes (statistics). A format whose check covers exactly these
    /// bytes may fold it into the pass instead of reading them twice (V2: the CRC-32C of a
    /// contiguous tensor): then `f` has seen the bytes by the time a mismatch is reported, and
    /// the caller must discard what it made of them when this returns an error.
    fn scan(&self, buf: &mut [u8], f: &mut dyn FnMut(&[u8])) -> FsResult<u64> {
        scan_by_reads(self, buf.len(), f)
    }

    /// Where the `.bin` is stored verbatim, if it is (for mapping it in place instead of
    /// reading it); `None` when only [`read`](Self::read) gives it (decoded, reassembled,
    /// byte-swapped, in memory, split across files).
    fn in_place(&self) -> Option<InPlace> {
        None
    }

    /// Checks `bytes`, the `.bin` as found [`in_place`](Self::in_place), against what the
    /// format stored of it (V2: its CRC-32C), as a first [`read`](Self::read) would; the
    /// outcome is kept as a read's is. Formats that store no checksum accept any bytes.
    fn check_in_place(&self, _bytes: &[u8]) -> FsResult<()> {
        Ok(())
    }
}

/// Served bytes held in memory (a string tensor in tfmount's layout).
pub(crate) struct Memory(pub Vec<u8>);

impl TensorData for Memory {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let a = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let b = a.saturating_add(len).min(self.0.len());
        Ok(Bytes::copy_from_slice(self.0.get(a..b).unwrap_or(&[])))
    }
}

/// [`TensorData::scan`] by [`TensorData::read`]s of `piece` bytes.
pub(crate) fn scan_by_reads<D: TensorData + ?Sized>(
    data: &D,
    piece: usize,
    f: &mut dyn FnMut(&[u8]),
) -> FsResult<u64> {
    let (size, piece) = (data.size(), piece.max(1));
    let mut at = 0u64;
    while at < size {
        let b = data.read(at, (size - at).min(piece as u64) as usize)?;
        if b.is_empty() {
            break;
        }
        f(&b);
        at += b.len() as u64;
    }
    Ok(at)
}

/// Every tensor of a set, in key order: `(pos, key)` of each shown tensor. For tools that walk
/// a whole checkpoint (verify, diff, tensors.tsv).
pub(crate) fn walk(
    set: &dyn TensorSet,
    mut f: impl FnMut(u64, &[u8]) -> FsResult<bool>,
) -> FsResult<()> {
    let mut pos = set.seek(b"")?;
    while let Some(p) = pos {
        let key = set.key(p)?;
        if !set.hidden(&key) && !f(p, &key)? {
            break;
        }
        pos = set.next(p)?;
    }
    Ok(())
}

/// A set with no tensors: a SavedModel saved without variables still gets `variables/` and
/// the views (`tensors.tsv` with its header only, `summary.txt` with totals of 0).
pub(crate) struct EmptySet {
    pub(crate) path: std::path::PathBuf,
    pub(crate) meta: FileMeta,
    /// Whether it is known to have no tensors; `false`: its index may still be on its way (a
    /// TF Serving version whose `variables/` is still being written), see
    /// [`TensorSet::complete`].
    pub(crate) complete: bool,
    /// Bytes of the files there so far (what a live directory watches grow while it waits).
    pub(crate) bytes: u64,
}

impl TensorSet for EmptySet {
    fn path(&self) -> &Path {
        &self.path
    }
    fn meta(&self) -> FileMeta {
        self.meta
    }
    fn source_bytes(&self) -> u64 {
        self.bytes
    }
    fn complete(&self) -> bool {
        self.complete
    }
    fn seek(&self, _key: &[u8]) -> FsResult<Option<u64>> {
        Ok(None)
    }
    fn next(&self, _pos: u64) -> FsResult<Option<u64>> {
        Ok(None)
    }
    fn key(&self, _pos: u64) -> FsResult<Vec<u8>> {
        Err(crate::error::FsError::NotFound)
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, _pos: u64) -> FsResult<TensorInfo> {
        Err(crate::error::FsError::NotFound)
    }
    fn open(&self, _pos: u64) -> FsResult<Arc<dyn TensorData>> {
        Err(crate::error::FsError::NotFound)
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Err(crate::error::FsError::NotFound)
    }
}
