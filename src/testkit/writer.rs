//! A test-support writer of V2 checkpoints ("tensor bundles"), byte-compatible with TensorFlow's
//! `BundleWriter` (tf-format.md §1, §2, §3, §4, §5). Part of the test kit (built for tests and
//! with the `testkit` feature, never in the daemon): tests, the fuzz harness and
//! `examples/mkckpt.rs` use it.
//!
//! Three layers:
//! * [`TableBuilder`] writes one SSTable the way TensorFlow's `table::TableBuilder` does: data
//!   blocks of a target size (262144 bytes), restart interval 16 with prefix-compressed keys, the
//!   TF rule that an entry of `key.len + value.len >= 2 * block_size` starts a new block, an empty
//!   metaindex block, an index block with restart interval 1 keyed by
//!   `FindShortestSeparator` / `FindShortSuccessor`, masked CRC-32C trailers, optional Snappy
//!   (kept only when it saves at least 12.5%, as LevelDB does), and the 48-byte footer. It takes
//!   entries in the order given and checks nothing, so tests can also build broken tables.
//! * [`CheckpointWriter`] writes `PREFIX.index` and `PREFIX.data-%05d-of-%05d`: tensor bytes are
//!   appended to their shard in call order (so offsets follow the order of the `add*` calls, as in
//!   TensorFlow), index entries are buffered compactly (one arena, 16 bytes of bookkeeping per
//!   entry), sorted bytewise in [`CheckpointWriter::finish`] and streamed out block by block.
//!   Writing a million small tensors needs tens of MiB, not one allocation per entry.
//! * The raw pieces, for crafted and hostile inputs that no well-behaved writer produces:
//!   [`encode_block`] (entries exactly as given: unsorted, duplicated), [`append_block`] /
//!   [`append_block_with_trailer`] (any block kind, any trailer), [`finish_table`] (an index of
//!   handles pointing anywhere), [`encode_footer`], [`fix_block_crc`] / [`fix_table_crcs`]
//!   (recompute checksums after damaging a block), the readers [`block_handles`] and
//!   [`table_entries`], and unchecked protobuf builders ([`raw_entry`], [`raw_shape_proto`],
//!   [`raw_slice_proto`], [`tensor_entry`]).
//!
//! Protobuf values are encoded with prost, which, like TensorFlow's C++ protobuf, emits fields in
//! field-number order and omits proto3 defaults; the shape field is always present (a scalar is
//! `12 00`), as `TensorShape::AsProto` makes it.
//!
//! ```no_run
//! use tfmount::parse::dtype::DType;
//! use tfmount::testkit::writer::CheckpointWriter;
//! let mut w = CheckpointWriter::new("/tmp/ckpt/model", 1)?;
//! let bytes: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|f| f.to_le_bytes()).collect();
//! w.add(b"dense/kernel", DType(1), &[3], &bytes, 0)?;
//! w.add_strings(b"names", &[2], &[b"a", b"bc"], 0)?;
//! w.finish()?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::parse::bundle::slice_shape;
use crate::parse::dtype::{DType, DT_STRING};
use crate::parse::slice_key::Extent;
use crate::parse::table::{parse_footer, read_block, Block, BlockHandle};
use crate::parse::{mask_crc, slice_key, varint, FormatError};
use crate::proto::tensor_slice_proto::extent::HasLength;
use crate::proto::tensor_slice_proto::Extent as ExtentProto;
use crate::proto::{
    BundleEntryProto, BundleHeaderProto, TensorShapeProto, TensorSliceProto, VersionDef,
};

pub(crate) use crate::parse::table_build::{
    block_trailer, encode_handle, BLOCK_TRAILER_LEN, DEFAULT_BLOCK_SIZE, DEFAULT_RESTART_INTERVAL,
    MAX_HANDLE_LEN,
};
pub use crate::parse::table_build::{encode_footer, TableBuilder};

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

// ---------------------------------------------------------------------------------------------
// Raw tables: the pieces, for crafted and hostile inputs
// ---------------------------------------------------------------------------------------------

/// Appends `contents` as stored (nothing is compressed here, whatever `kind` says) and a valid
/// trailer for them; returns the block's handle.
pub fn append_block(file: &mut Vec<u8>, contents: &[u8], kind: u8) -> BlockHandle {
    append_block_with_trailer(file, contents, block_trailer(contents, kind))
}

/// Appends `contents` followed by `trailer` exactly as given (any kind byte, any checksum);
/// returns the block's handle.
pub(crate) fn append_block_with_trailer(
    file: &mut Vec<u8>,
    contents: &[u8],
    trailer: [u8; BLOCK_TRAILER_LEN],
) -> BlockHandle {
    let h = BlockHandle {
        offset: file.len() as u64,
        size: contents.len() as u64,
    };
    file.extend_from_slice(contents);
    file.extend_from_slice(&trailer);
    h
}

/// One block's contents holding `entries` exactly in the order given (unsorted and duplicate keys
/// are written as such): every key stored whole (no shared prefix), a restart point at the first
/// entry and then every `restart_interval` entries (0: at the first entry only). An empty block
/// has the one restart point 0, as LevelDB writes it.
pub fn encode_block<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    entries: &[(K, V)],
    restart_interval: usize,
) -> Vec<u8> {
    let mut b = Vec::new();
    let mut restarts = vec![0u32];
    for (i, (k, v)) in entries.iter().enumerate() {
        let (k, v) = (k.as_ref(), v.as_ref());
        if i > 0 && restart_interval > 0 && i % restart_interval == 0 {
            restarts.push(b.len() as u32);
        }
        varint::encode_u64(0, &mut b);
        varint::encode_u64(k.len() as u64, &mut b);
        varint::encode_u64(v.len() as u64, &mut b);
        b.extend_from_slice(k);
        b.extend_from_slice(v);
    }
    for r in &restarts {
        b.extend_from_slice(&r.to_le_bytes());
    }
    b.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
    b
}

/// A block handle as stored: two varints.
pub(crate) fn handle_bytes(h: BlockHandle) -> Vec<u8> {
    let mut v = Vec::with_capacity(MAX_HANDLE_LEN);
    encode_handle(h.offset, h.size, &mut v);
    v
}

/// Ends a table whose data blocks are already in `file`: appends an empty metaindex block, an
/// index block holding `index` (key, handle) in the order given (restart interval 1, as
/// TensorFlow writes index blocks; handles may point anywhere), and the footer.
pub fn finish_table(mut file: Vec<u8>, index: &[(Vec<u8>, BlockHandle)]) -> Vec<u8> {
    let empty: &[(&[u8], &[u8])] = &[];
    let meta = append_block(&mut file, &encode_block(empty, 1), 0);
    let entries: Vec<(&[u8], Vec<u8>)> = index
        .iter()
        .map(|(k, h)| (k.as_slice(), handle_bytes(*h)))
        .collect();
    let idx = append_block(&mut file, &encode_block(&entries, 1), 0);
    file.extend_from_slice(&encode_footer(meta, idx));
    file
}

/// A whole table with one data block per element of `blocks`, each holding its entries exactly
/// as given ([`encode_block`], restart interval 1), indexed by the block's last key (an empty
/// block by the empty key).
pub fn table_of_blocks<K: AsRef<[u8]>, V: AsRef<[u8]>>(blocks: &[&[(K, V)]]) -> Vec<u8> {
    let mut file = Vec::new();
    let mut index = Vec::with_capacity(blocks.len());
    for entries in blocks {
        let h = append_block(&mut file, &encode_block(entries, 1), 0);
        let last = entries.last().map_or(&[][..], |(k, _)| k.as_ref());
        index.push((last.to_vec(), h));
    }
    finish_table(file, &index)
}

/// Every stored block of a table: the metaindex block, the index block, then the data blocks in
/// index order.
pub fn block_handles(file: &[u8]) -> Result<Vec<BlockHandle>, FormatError> {
    let footer = parse_footer(file)?;
    let index = Block::parse(read_block(file, footer.index)?)?;
    let mut out = vec![footer.metaindex, footer.index];
    for i in 0..index.len() {
        out.push(BlockHandle::decode(index.value(i))?.0);
    }
    Ok(out)
}

/// (key, value) pairs of a table, in order.
pub(crate) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Every (key, value) of a table's data blocks, in index order (the table must be valid: sorted
/// keys, good checksums).
pub fn table_entries(file: &[u8]) -> Result<Entries, FormatError> {
    let mut out = Vec::new();
    for h in block_handles(file)?.into_iter().skip(2) {
        let blk = Block::parse(read_block(file, h)?)?;
        out.extend((0..blk.len()).map(|i| (blk.key(i).to_vec(), blk.value(i).to_vec())));
    }
    Ok(out)
}

/// Recomputes the trailer checksum of the stored block at `h` from its contents and kind byte as
/// they are now (after a test damaged them). Returns false, changing nothing, if the block and
/// its trailer do not fit in `file`.
pub fn fix_block_crc(file: &mut [u8], h: BlockHandle) -> bool {
    let (Ok(start), Ok(size)) = (usize::try_from(h.offset), usize::try_from(h.size)) else {
        return false;
    };
    let Some(end) = start
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
    else {
        return false;
    };
    if end > file.len() {
        return false;
    }
    let crc = mask_crc(crc32c::crc32c(&file[start..=start + size]));
    file[start + size + 1..end].copy_from_slice(&crc.to_le_bytes());
    true
}

/// Most data blocks whose checksums [`fix_table_crcs`] recomputes (bounds its time on hostile
/// index blocks naming huge overlapping blocks).
pub(crate) const FIX_CRC_MAX_BLOCKS: usize = 20_000;

/// Recomputes the trailer checksums of every block the footer and the index block name (the
/// index block's first, so its entries are read), best effort: handles that do not fit the file,
/// and everything when the footer or the index block does not parse, are left alone.
pub fn fix_table_crcs(file: &mut [u8]) {
    let Ok(footer) = parse_footer(file) else {
        return;
    };
    fix_block_crc(file, footer.metaindex);
    fix_block_crc(file, footer.index);
    let Ok(index) = read_block(file, footer.index).and_then(Block::parse) else {
        return;
    };
    for i in 0..index.len().min(FIX_CRC_MAX_BLOCKS) {
        if let Ok((h, _)) = BlockHandle::decode(index.value(i)) {
            fix_block_crc(file, h);
        }
    }
}

/// A shape message with `dims` as given (negative or huge dims are written as such).
pub fn raw_shape_proto(dims: &[i64]) -> TensorShapeProto {
    TensorShapeProto::of_dims(dims)
}

/// A slice message with extents as given: `(start, Some(length))` carries both (any values),
/// `(start, None)` has no length (a full extent when `start` is 0).
pub fn raw_slice_proto(extents: &[(i64, Option<i64>)]) -> TensorSliceProto {
    TensorSliceProto {
        extent: extents
            .iter()
            .map(|&(start, length)| ExtentProto {
                start,
                has_length: length.map(HasLength::Length),
            })
            .collect(),
    }
}

/// A contiguous tensor's entry with every field as given (shard 0, no slices; nothing checked).
pub fn raw_entry(
    dtype: i32,
    dims: &[i64],
    offset: i64,
    size: i64,
    masked_crc: u32,
) -> BundleEntryProto {
    BundleEntryProto {
        dtype,
        shape: Some(raw_shape_proto(dims)),
        shard_id: 0,
        offset,
        size,
        crc32c: masked_crc,
        slices: Vec::new(),
    }
}

/// The entry of a contiguous tensor whose stored bytes `stored` lie at `offset` of data shard
/// `shard`: size and masked CRC-32C from `stored`, as `BundleWriter` writes them (the shape is
/// not checked against the size).
pub fn tensor_entry(
    dtype: DType,
    shape: &[u64],
    shard: u32,
    offset: u64,
    stored: &[u8],
) -> BundleEntryProto {
    let at = Placed {
        shard,
        offset,
        size: stored.len() as u64,
    };
    contiguous_entry(dtype, shape, at, mask_crc(crc32c::crc32c(stored)))
}

fn contiguous_entry(dtype: DType, shape: &[u64], at: Placed, masked_crc: u32) -> BundleEntryProto {
    BundleEntryProto {
        dtype: dtype.0,
        shape: Some(shape_proto(shape)),
        shard_id: at.shard as i32,
        offset: at.offset as i64,
        size: at.size as i64,
        crc32c: masked_crc,
        slices: Vec::new(),
    }
}

/// The name of data shard `shard` of `num_shards` (`naming.cc`).
pub fn data_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!(".data-{shard:05}-of-{num_shards:05}"));
    PathBuf::from(s)
}

/// `PREFIX.index`.
pub fn index_path(prefix: &Path) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".index");
    PathBuf::from(s)
}

/// `TensorShape::AsProto`: the shape message, always present, dims in order.
pub(crate) fn shape_proto(shape: &[u64]) -> TensorShapeProto {
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    TensorShapeProto::of_dims(&dims)
}

/// `TensorSlice::AsProto`: full dims are empty extents, others carry start and length.
pub(crate) fn slice_proto(extents: &[Extent]) -> TensorSliceProto {
    TensorSliceProto {
        extent: extents
            .iter()
            .map(|e| {
                if e.length < 0 {
                    ExtentProto::default()
                } else {
                    ExtentProto {
                        start: e.start,
                        has_length: Some(HasLength::Length(e.length)),
                    }
                }
            })
            .collect(),
    }
}

/// The bytes and masked CRC of a string tensor as `WriteStringTensor` lays it out (§4.2).
pub(crate) fn encode_strings(strings: &[&[u8]]) -> (Vec<u8>, u32) {
    let total: usize = strings.iter().map(|s| s.len() + 10).sum::<usize>() + 4;
    let mut out = Vec::with_capacity(total);
    let mut crc = 0u32;
    for s in strings {
        let len = s.len() as u64;
        varint::encode_u64(len, &mut out);
        crc = match u32::try_from(len) {
            Ok(l) => crc32c::crc32c_append(crc, &l.to_le_bytes()),
            Err(_) => crc32c::crc32c_append(crc, &len.to_le_bytes()),
        };
    }
    let cs = mask_crc(crc).to_le_bytes();
    out.extend_from_slice(&cs);
    crc = crc32c::crc32c_append(crc, &cs);
    for s in strings {
        out.extend_from_slice(s);
        crc = crc32c::crc32c_append(crc, s);
    }
    (out, mask_crc(crc))
}

fn num_elements(shape: &[u64]) -> io::Result<u64> {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| invalid(format!("shape {shape:?} has too many elements")))
}

fn pod_size(dtype: DType, shape: &[u64]) -> io::Result<u64> {
    let es = dtype.elem_size().ok_or_else(|| {
        invalid(format!(
            "{} is not a memcpy-able dtype (use add_strings or add_raw_*)",
            dtype.display_name()
        ))
    })?;
    num_elements(shape)?
        .checked_mul(es as u64)
        .ok_or_else(|| invalid("tensor size overflows"))
}

/// Counts and checksums what a streaming producer writes into a shard.
struct CrcSink<'a> {
    inner: &'a mut BufWriter<File>,
    crc: u32,
    written: u64,
}

impl Write for CrcSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Shard {
    file: BufWriter<File>,
    offset: u64,
}

/// Where a tensor's bytes went.
#[derive(Clone, Copy)]
struct Placed {
    shard: u32,
    offset: u64,
    size: u64,
}

/// Bookkeeping of one buffered index entry: its key and value lie at `start` in the arena.
#[derive(Clone, Copy)]
struct Slot {
    start: u64,
    /// Key length; the top bit marks entries from `add_raw_entry` (duplicates allowed).
    klen: u32,
    vlen: u32,
}

const RAW_FLAG: u32 = 1 << 31;

/// The data of one slice.
enum Payload<'a> {
    Pod(&'a [u8]),
    Strings(&'a [&'a [u8]]),
}

/// Writes a V2 checkpoint (`PREFIX.index` + `PREFIX.data-SSSSS-of-NNNNN`). See the module docs.
///
/// Entries may be added in any order; they are sorted at [`finish`](Self::finish). Data is
/// appended to each shard in call order, so to reproduce a TensorFlow file byte for byte, add the
/// tensors in the order of their offsets. Adding the same key twice through the typed methods is
/// an error (reported by `finish`), as in `BundleWriter::Add`.
pub struct CheckpointWriter {
    prefix: PathBuf,
    num_shards: u32,
    snappy: bool,
    block_size: usize,
    restart_interval: usize,
    shards: Vec<Option<Shard>>,
    arena: Vec<u8>,
    slots: Vec<Slot>,
    /// Full-tensor entries of partitioned tensors, completed at `finish`.
    sliced: HashMap<Vec<u8>, BundleEntryProto>,
    header: Option<Vec<u8>>,
}

impl CheckpointWriter {
    /// Starts a checkpoint at `prefix` (parent directories are created) with `num_shards` data
    /// files. Existing files are overwritten when first written.
    pub fn new(prefix: impl AsRef<Path>, num_shards: u32) -> io::Result<Self> {
        if num_shards == 0 || num_shards > i32::MAX as u32 {
            return Err(invalid(format!("bad shard count {num_shards}")));
        }
        let prefix = prefix.as_ref().to_path_buf();
        if let Some(dir) = prefix.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        Ok(CheckpointWriter {
            prefix,
            num_shards,
            snappy: false,
            block_size: DEFAULT_BLOCK_SIZE,
            restart_interval: DEFAULT_RESTART_INTERVAL,
            shards: (0..num_shards).map(|_| None).collect(),
            arena: Vec::new(),
            slots: Vec::new(),
            sliced: HashMap::new(),
            header: None,
        })
    }

    /// Snappy-compress `.index` blocks when that saves at least 12.5% (TensorFlow does not; this
    /// exercises a reader's Snappy path).
    pub fn snappy(mut self, on: bool) -> Self {
        self.snappy = on;
        self
    }

    /// Target `.index` data block size (default 262144, TensorFlow's).
    pub fn block_size(mut self, n: usize) -> Self {
        self.block_size = n;
        self
    }

    fn shard(&mut self, shard: u32) -> io::Result<&mut Shard> {
        let n = self.num_shards;
        let slot = self
            .shards
            .get_mut(shard as usize)
            .ok_or_else(|| invalid(format!("shard {shard} out of range (num_shards {n})")))?;
        if slot.is_none() {
            let f = File::create(data_path(&self.prefix, shard, n))?;
            *slot = Some(Shard {
                file: BufWriter::with_capacity(1 << 20, f),
                offset: 0,
            });
        }
        Ok(slot.as_mut().expect("opened above"))
    }

    fn push_entry(&mut self, key: &[u8], value: &[u8], raw: bool) -> io::Result<()> {
        let klen = u32::try_from(key.len())
            .ok()
            .filter(|&k| k < RAW_FLAG)
            .ok_or_else(|| invalid("key too long"))?;
        let vlen = u32::try_from(value.len()).map_err(|_| invalid("value too long"))?;
        let start = self.arena.len() as u64;
        self.arena.extend_from_slice(key);
        self.arena.extend_from_slice(value);
        self.slots.push(Slot {
            start,
            klen: if raw { klen | RAW_FLAG } else { klen },
            vlen,
        });
        Ok(())
    }

    fn check_key(key: &[u8]) -> io::Result<()> {
        if key.is_empty() {
            return Err(invalid("the empty key is the header's (use add_raw_entry)"));
        }
        Ok(())
    }

    /// Records the entry of a tensor whose bytes were just written at `at`; `masked_crc` as stored.
    fn push_contiguous(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        at: Placed,
        masked_crc: u32,
    ) -> io::Result<()> {
        let e = contiguous_entry(dtype, shape, at, masked_crc);
        self.push_entry(key, &e.encode_to_vec(), false)
    }

    /// Adds a tensor of a memcpy-able dtype; `bytes` = its row-major little-endian element bytes.
    pub fn add(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        bytes: &[u8],
        shard: u32,
    ) -> io::Result<()> {
        Self::check_key(key)?;
        let size = pod_size(dtype, shape)?;
        if size != bytes.len() as u64 {
            return Err(invalid(format!(
                "{}: {} bytes given, shape {shape:?} of {} needs {size}",
                String::from_utf8_lossy(key),
                bytes.len(),
                dtype.display_name()
            )));
        }
        let s = self.shard(shard)?;
        let offset = s.offset;
        s.file.write_all(bytes)?;
        s.offset += size;
        let at = Placed {
            shard,
            offset,
            size,
        };
        self.push_contiguous(key, dtype, shape, at, mask_crc(crc32c::crc32c(bytes)))
    }

    /// Adds a memcpy-able tensor of `size` bytes produced by `fill`, which is handed a writer into
    /// the shard (buffered, 1 MiB); for multi-GiB tensors. `fill` must write exactly `size` bytes.
    pub fn add_streamed(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        size: u64,
        shard: u32,
        mut fill: impl FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        Self::check_key(key)?;
        let want = pod_size(dtype, shape)?;
        if want != size {
            return Err(invalid(format!(
                "size {size} does not match shape {shape:?} of {} ({want} bytes)",
                dtype.display_name()
            )));
        }
        let s = self.shard(shard)?;
        let offset = s.offset;
        let mut sink = CrcSink {
            inner: &mut s.file,
            crc: 0,
            written: 0,
        };
        fill(&mut sink)?;
        let (crc, written) = (sink.crc, sink.written);
        s.offset += written;
        if written != size {
            return Err(invalid(format!(
                "fill wrote {written} bytes, expected {size}"
            )));
        }
        let at = Placed {
            shard,
            offset,
            size,
        };
        self.push_contiguous(key, dtype, shape, at, mask_crc(crc))
    }

    /// Adds a `DT_STRING` tensor (§4.2 layout); `strings.len()` must equal the element count.
    pub fn add_strings(
        &mut self,
        key: &[u8],
        shape: &[u64],
        strings: &[&[u8]],
        shard: u32,
    ) -> io::Result<()> {
        Self::check_key(key)?;
        if num_elements(shape)? != strings.len() as u64 {
            return Err(invalid(format!(
                "{} strings for shape {shape:?}",
                strings.len()
            )));
        }
        let (bytes, masked) = encode_strings(strings);
        let s = self.shard(shard)?;
        let offset = s.offset;
        s.file.write_all(&bytes)?;
        s.offset += bytes.len() as u64;
        let at = Placed {
            shard,
            offset,
            size: bytes.len() as u64,
        };
        self.push_contiguous(key, DT_STRING, shape, at, masked)
    }

    /// Adds a TF2 object graph as `tf.train.Checkpoint.write` stores it: a scalar string tensor
    /// under `_CHECKPOINTABLE_OBJECT_GRAPH` holding the serialized proto (see [`object_graph`]).
    pub fn add_object_graph(&mut self, tog: &crate::proto::TrackableObjectGraph) -> io::Result<()> {
        let bytes = tog.encode_to_vec();
        self.add_strings(
            crate::formats::names::OBJECT_GRAPH_KEY,
            &[],
            &[bytes.as_slice()],
            0,
        )
    }

    /// Adds one slice of the partitioned tensor `key` (`BundleWriter::AddSlice`): the slice's data
    /// goes under `slice_key::encode(key, extents)` with the slice's own shape, and the slice is
    /// appended to the full entry's `slices` (call order). A slice covering the whole tensor is
    /// an ordinary [`add`](Self::add) under `key`, as in TensorFlow.
    ///
    /// The full entry's `shard_id` is the shard of its first slice: that is what `MergeBundles`
    /// leaves in multi-shard checkpoints (it renumbers the shard of every fresh entry, full
    /// entries included), and 0 for single-shard ones. To match TensorFlow's slice order in a
    /// merged checkpoint, add slices by shard, then by offset.
    pub(crate) fn add_slice(
        &mut self,
        key: &[u8],
        dtype: DType,
        full_shape: &[u64],
        extents: &[Extent],
        bytes: &[u8],
        shard: u32,
    ) -> io::Result<()> {
        self.add_slice_of(key, dtype, full_shape, extents, Payload::Pod(bytes), shard)
    }

    /// [`add_slice`](Self::add_slice) for a `DT_STRING` tensor; `strings` are the slice's
    /// elements in row-major order.
    pub fn add_string_slice(
        &mut self,
        key: &[u8],
        full_shape: &[u64],
        extents: &[Extent],
        strings: &[&[u8]],
        shard: u32,
    ) -> io::Result<()> {
        let p = Payload::Strings(strings);
        self.add_slice_of(key, DT_STRING, full_shape, extents, p, shard)
    }

    fn add_slice_of(
        &mut self,
        key: &[u8],
        dtype: DType,
        full_shape: &[u64],
        extents: &[Extent],
        payload: Payload<'_>,
        shard: u32,
    ) -> io::Result<()> {
        Self::check_key(key)?;
        if extents.len() != full_shape.len() {
            return Err(invalid("slice rank differs from the tensor's"));
        }
        for (e, &d) in extents.iter().zip(full_shape) {
            let ok = if e.length < 0 {
                e.length == -1
            } else {
                e.start >= 0
                    && e.start
                        .checked_add(e.length)
                        .is_some_and(|end| end as u64 <= d)
            };
            if !ok {
                return Err(invalid(format!("bad extent {e:?} for dim {d}")));
            }
        }
        let own_shape = slice_shape(full_shape, extents);
        let part_key = if own_shape == full_shape {
            // IsFullSlice: TensorFlow does a plain Add under the tensor's own name.
            key.to_vec()
        } else {
            let full = self.sliced.entry(key.to_vec()).or_default();
            if full.shape.is_some()
                && (full.dtype != dtype.0 || full.shape != Some(shape_proto(full_shape)))
            {
                return Err(invalid("slices of one tensor disagree on dtype or shape"));
            }
            if full.slices.is_empty() {
                // MergeBundles (which writes every multi-shard checkpoint) gives the full entry
                // the shard of the first bundle it came from; a single BundleWriter leaves 0.
                full.shard_id = shard as i32;
            }
            full.dtype = dtype.0;
            full.shape = Some(shape_proto(full_shape));
            full.slices.push(slice_proto(extents));
            slice_key::encode(key, extents)
        };
        match payload {
            Payload::Pod(bytes) => self.add(&part_key, dtype, &own_shape, bytes, shard),
            Payload::Strings(s) => self.add_strings(&part_key, &own_shape, s, shard),
        }
    }

    /// A partitioned tensor: [`add_slice`](Self::add_slice) for each `(extents, bytes, shard)`.
    pub fn add_sliced(
        &mut self,
        key: &[u8],
        dtype: DType,
        full_shape: &[u64],
        slices: &[(Vec<Extent>, Vec<u8>, u32)],
    ) -> io::Result<()> {
        for (ext, bytes, shard) in slices {
            self.add_slice(key, dtype, full_shape, ext, bytes, *shard)?;
        }
        Ok(())
    }

    /// Appends raw bytes to a shard and returns their offset (to pair with `add_raw_entry`).
    #[cfg(test)]
    pub(crate) fn add_raw_data(&mut self, shard: u32, bytes: &[u8]) -> io::Result<u64> {
        let s = self.shard(shard)?;
        let offset = s.offset;
        s.file.write_all(bytes)?;
        s.offset += bytes.len() as u64;
        Ok(offset)
    }

    /// Escape hatch for hostile-input tests: any key with any value. Key `""` replaces the header
    /// value; other keys may repeat (both copies are written, in call order).
    #[cfg(test)]
    pub(crate) fn add_raw_entry(&mut self, key: &[u8], value: Vec<u8>) {
        if key.is_empty() {
            self.header = Some(value);
        } else {
            self.push_entry(key, &value, true)
                .expect("raw entry key or value longer than 2 GiB");
        }
    }

    /// The header TensorFlow writes: `num_shards`, LITTLE, `version { producer: 1 }`.
    pub fn header_bytes(num_shards: u32) -> Vec<u8> {
        BundleHeaderProto {
            num_shards: num_shards as i32,
            endianness: 0,
            version: Some(VersionDef {
                producer: 1,
                min_consumer: 0,
                bad_consumers: Vec::new(),
            }),
        }
        .encode_to_vec()
    }

    /// Flushes the data files (creating empty ones for unused shards), sorts the entries and
    /// writes `PREFIX.index`. Returns what was written.
    pub fn finish(mut self) -> io::Result<Summary> {
        let mut data_bytes = 0;
        for shard in 0..self.num_shards {
            let s = self.shard(shard)?;
            s.file.flush()?;
            data_bytes += s.offset;
        }
        self.shards.clear();
        let mut sliced: Vec<_> = std::mem::take(&mut self.sliced).into_iter().collect();
        sliced.sort_by(|a, b| a.0.cmp(&b.0));
        for (k, e) in sliced {
            self.push_entry(&k, &e.encode_to_vec(), false)?;
        }
        let arena = std::mem::take(&mut self.arena);
        let key = |s: &Slot| {
            let st = s.start as usize;
            &arena[st..st + (s.klen & !RAW_FLAG) as usize]
        };
        self.slots.sort_by(|a, b| key(a).cmp(key(b)));
        for w in self.slots.windows(2) {
            if key(&w[0]) == key(&w[1]) && (w[0].klen & w[1].klen & RAW_FLAG) == 0 {
                return Err(invalid(format!(
                    "duplicate key {:?}",
                    String::from_utf8_lossy(key(&w[0]))
                )));
            }
        }
        let file = File::create(index_path(&self.prefix))?;
        let mut t = TableBuilder::new(BufWriter::with_capacity(1 << 20, file))
            .block_size(self.block_size)
            .restart_interval(self.restart_interval)
            .snappy(self.snappy);
        let header = self
            .header
            .take()
            .unwrap_or_else(|| Self::header_bytes(self.num_shards));
        t.add(b"", &header)?;
        for s in &self.slots {
            let st = s.start as usize;
            let kl = (s.klen & !RAW_FLAG) as usize;
            t.add(
                &arena[st..st + kl],
                &arena[st + kl..st + kl + s.vlen as usize],
            )?;
        }
        let entries = t.num_entries();
        let (out, blocks) = t.finish()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        let index_bytes = file.metadata()?.len();
        Ok(Summary {
            entries,
            blocks,
            index_bytes,
            data_bytes,
        })
    }
}

/// What [`CheckpointWriter::finish`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Index entries including the header.
    pub entries: u64,
    /// Data blocks of the `.index` table.
    pub blocks: u64,
    /// Bytes of the `.index` file.
    pub index_bytes: u64,
    /// Bytes over all data shards.
    pub data_bytes: u64,
}

/// The suffix TF2 gives a variable's checkpoint key after its object path.
pub const VARIABLE_VALUE_SUFFIX: &str = "/.ATTRIBUTES/VARIABLE_VALUE";

/// A TF2 object graph over `variables`: `(object path, full name)` pairs, each object path's
/// `/`-separated components a chain of objects from the root (node 0), the last one a variable
/// whose `VARIABLE_VALUE` is saved under `<object path>/.ATTRIBUTES/VARIABLE_VALUE` and named
/// `full name` (`v.name` without `:0`). What `tf.train.Checkpoint` writes for nested
/// `tf.Module`s; shared objects and optimizer slots are not made.
pub fn object_graph(variables: &[(String, String)]) -> crate::proto::TrackableObjectGraph {
    use crate::proto::trackable_object_graph::trackable_object::{
        ObjectReference, SerializedTensor,
    };
    use crate::proto::trackable_object_graph::TrackableObject;
    let mut nodes = vec![TrackableObject::default()];
    let mut by_path: HashMap<String, usize> = HashMap::new();
    for (path, full_name) in variables {
        let mut node = 0usize;
        let mut at = String::new();
        for c in path.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(c);
            node = match by_path.get(&at) {
                Some(&n) => n,
                None => {
                    let n = nodes.len();
                    nodes[node].children.push(ObjectReference {
                        node_id: i32::try_from(n).unwrap_or(i32::MAX),
                        local_name: c.to_string(),
                    });
                    nodes.push(TrackableObject::default());
                    by_path.insert(at.clone(), n);
                    n
                }
            };
        }
        nodes[node].attributes.push(SerializedTensor {
            name: "VARIABLE_VALUE".into(),
            full_name: full_name.clone(),
            checkpoint_key: format!("{path}{VARIABLE_VALUE_SUFFIX}"),
        });
    }
    crate::proto::TrackableObjectGraph { nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_empty_block_bytes() {
        assert_eq!(
            CheckpointWriter::header_bytes(1),
            [0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]
        );
    }
}

#[cfg(test)]
mod read_back;
