//! The SSTable format of TensorFlow's `.index` files (tf-format.md §2): footer, block trailer with
//! masked CRC-32C, optional raw Snappy compression, prefix-compressed entries.
//!
//! Opening a [`Table`] reads only the footer and the index block. Data blocks are decoded on
//! demand and kept in a [`BlockStore`] the caller provides (the table keeps none itself).

use std::sync::Arc;

use super::{unmask_crc, varint, FormatError, ReadAt, Result};

pub(crate) const FOOTER_LEN: usize = 48;
/// The number the last 8 bytes of a table file hold (little-endian).
pub const MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const TRAILER_LEN: usize = 5;
/// Decompressed blocks larger than this are refused (decompression bombs). TF writes 256 KiB
/// blocks; a single huge entry can make one larger, but never anywhere near this.
pub(crate) const MAX_BLOCK_LEN: usize = 256 << 20;
/// Largest ratio of decompressed to compressed size Snappy can produce (64 bytes from 3).
const MAX_SNAPPY_RATIO: u64 = 22;
/// A block's keys, rebuilt from their shared prefixes, may take at most this many times the
/// block's bytes (plus [`KEY_ALLOWANCE`]). Prefix compression lets each few-byte entry repeat the
/// whole previous key, so without a bound a block of n bytes could expand to ~n²/50 bytes of
/// keys. Real keys (tensor names) stay far below: even 500-byte names sharing all but a few
/// bytes with their neighbours expand about 20 times.
const MAX_KEY_EXPANSION: usize = 64;
const KEY_ALLOWANCE: usize = 1 << 20;

/// Where a block is stored in a table file (its trailer not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHandle {
    /// Where the block starts.
    pub offset: u64,
    /// Its stored length, without the 5-byte trailer.
    pub size: u64,
}

impl BlockHandle {
    /// Decodes a handle from the start of `buf` (trailing bytes are allowed).
    pub fn decode(buf: &[u8]) -> Result<(BlockHandle, usize)> {
        let (offset, n1) = varint::decode_u64(buf).ok_or(FormatError::BadVarint)?;
        let (size, n2) = varint::decode_u64(&buf[n1..]).ok_or(FormatError::BadVarint)?;
        Ok((BlockHandle { offset, size }, n1 + n2))
    }
}

/// A table's footer: where its metaindex and index blocks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// The metaindex block (empty in TensorFlow's tables).
    pub metaindex: BlockHandle,
    /// The index block: one entry per data block.
    pub index: BlockHandle,
}

/// The footer of table file `file` (its last 48 bytes), with the magic number checked.
pub fn parse_footer(file: &[u8]) -> Result<Footer> {
    if file.len() < FOOTER_LEN {
        return Err(FormatError::TooShort(file.len()));
    }
    let f = &file[file.len() - FOOTER_LEN..];
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&f[40..48]);
    if u64::from_le_bytes(magic) != MAGIC {
        return Err(FormatError::BadMagic);
    }
    let (metaindex, n) = BlockHandle::decode(&f[..40])?;
    let (index, _) = BlockHandle::decode(&f[n..40])?;
    Ok(Footer { metaindex, index })
}

/// Reads the stored block at `h` of the bytes `file`, checks its trailer CRC and decompresses it.
pub fn read_block(file: &[u8], h: BlockHandle) -> Result<Vec<u8>> {
    read_block_at(file, h)
}

/// [`read_block`] for bytes read on demand: checks `h` against the file's length first, so
/// nothing is allocated for a handle that points outside the file.
pub(crate) fn read_block_at<R: ReadAt + ?Sized>(file: &R, h: BlockHandle) -> Result<Vec<u8>> {
    let file_len = file.len();
    let bad = || FormatError::BadHandle {
        offset: h.offset,
        size: h.size,
        file_len,
    };
    let end = h
        .offset
        .checked_add(h.size)
        .and_then(|e| e.checked_add(TRAILER_LEN as u64))
        .filter(|&e| e <= file_len)
        .ok_or_else(bad)?;
    let len = usize::try_from(end - h.offset).map_err(|_| bad())?;
    let mut raw = vec![0u8; len];
    file.read_exact_at(&mut raw, h.offset)?;
    decode_block(raw)
}

/// Checks the trailer (type byte, masked CRC-32C) of a stored block given with its 5-byte
/// trailer, and returns its contents, decompressed if needed.
fn decode_block(mut raw: Vec<u8>) -> Result<Vec<u8>> {
    let size = raw
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or(FormatError::BadBlock("shorter than its trailer"))?;
    let kind = raw[size];
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&raw[size + 1..]);
    let expected = unmask_crc(u32::from_le_bytes(crc_bytes));
    let stored = &raw[..size];
    let computed = crc32c::crc32c_append(crc32c::crc32c(stored), &[kind]);
    if expected != computed {
        return Err(FormatError::BlockCrc {
            stored: expected,
            computed,
        });
    }
    match kind {
        0 => {
            raw.truncate(size);
            Ok(raw)
        }
        1 => {
            let len = snap::raw::decompress_len(stored)
                .map_err(|e| FormatError::Snappy(e.to_string()))?;
            if len > MAX_BLOCK_LEN {
                return Err(FormatError::Snappy(format!(
                    "decompressed length {len} exceeds the {MAX_BLOCK_LEN}-byte limit"
                )));
            }
            // Snappy's densest element (a 3-byte copy of 64 bytes) expands 64/3 times: a header
            // claiming more is a lie, refused before anything is allocated for it.
            if len as u64 > (size as u64).saturating_mul(MAX_SNAPPY_RATIO) {
                return Err(FormatError::Snappy(format!(
                    "decompressed length {len} is impossible for {size} compressed bytes"
                )));
            }
            snap::raw::Decoder::new()
                .decompress_vec(stored)
                .map_err(|e| FormatError::Snappy(e.to_string()))
        }
        t => Err(FormatError::BadBlockType(t)),
    }
}

/// Reads and parses the footer at the end of `file`.
pub(crate) fn read_footer<R: ReadAt + ?Sized>(file: &R) -> Result<Footer> {
    let len = file.len();
    if len < FOOTER_LEN as u64 {
        return Err(FormatError::TooShort(len as usize));
    }
    let mut f = [0u8; FOOTER_LEN];
    file.read_exact_at(&mut f, len - FOOTER_LEN as u64)?;
    parse_footer(&f)
}

/// A decoded block: keys reconstructed, values located. Entries are strictly increasing.
#[derive(Debug)]
pub struct Block {
    data: Vec<u8>,
    keys: Vec<u8>,
    key_ends: Vec<u32>,
    values: Vec<(u32, u32)>,
}

impl Block {
    /// A decompressed block's entries and restart points decoded and checked (keys increasing,
    /// key expansion bounded).
    pub fn parse(data: Vec<u8>) -> Result<Block> {
        let len = data.len();
        if len < 4 || len > u32::MAX as usize {
            return Err(FormatError::BadBlock("block too short or too long"));
        }
        let num_restarts =
            u32::from_le_bytes([data[len - 4], data[len - 3], data[len - 2], data[len - 1]])
                as usize;
        let trailer = num_restarts
            .checked_add(1)
            .and_then(|n| n.checked_mul(4))
            .filter(|&t| t <= len)
            .ok_or(FormatError::BadBlock("restart array larger than the block"))?;
        let entries_end = len - trailer;
        let key_budget = len
            .saturating_mul(MAX_KEY_EXPANSION)
            .saturating_add(KEY_ALLOWANCE);
        let mut keys: Vec<u8> = Vec::new();
        let mut key_ends: Vec<u32> = Vec::new();
        let mut values = Vec::new();
        let mut prev_start = 0usize;
        let mut pos = 0usize;
        while pos < entries_end {
            let region = &data[pos..entries_end];
            let (shared, a) = varint::decode_u32(region).ok_or(FormatError::BadVarint)?;
            let (non_shared, b) = varint::decode_u32(&region[a..]).ok_or(FormatError::BadVarint)?;
            let (value_len, c) =
                varint::decode_u32(&region[a + b..]).ok_or(FormatError::BadVarint)?;
            let (shared, non_shared, value_len) =
                (shared as usize, non_shared as usize, value_len as usize);
            let header = a + b + c;
            let delta_start = pos + header;
            let value_start = delta_start
                .checked_add(non_shared)
                .ok_or(FormatError::BadBlock("entry overflows"))?;
            let value_end = value_start
                .checked_add(value_len)
                .ok_or(FormatError::BadBlock("entry overflows"))?;
            if value_end > entries_end {
                return Err(FormatError::BadBlock("entry runs past the block"));
            }
            let prev_len = keys.len() - prev_start;
            if shared > prev_len {
                return Err(FormatError::BadBlock(
                    "shared prefix longer than the previous key",
                ));
            }
            if keys.len() + shared + non_shared > key_budget {
                return Err(FormatError::BadBlock(
                    "keys expand to more than 64 times the block",
                ));
            }
            let start = keys.len();
            keys.extend_from_within(prev_start..prev_start + shared);
            keys.extend_from_slice(&data[delta_start..value_start]);
            if !key_ends.is_empty() && keys[prev_start..start] >= keys[start..] {
                return Err(FormatError::UnsortedKeys);
            }
            key_ends
                .push(u32::try_from(keys.len()).map_err(|_| FormatError::BadBlock("too large"))?);
            values.push((value_start as u32, value_len as u32));
            prev_start = start;
            pos = value_end;
        }
        Ok(Block {
            data,
            keys,
            key_ends,
            values,
        })
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the block has no entries.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Entry `i`'s key (panics past [`Block::len`]).
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.key_ends[i - 1] as usize
        };
        &self.keys[start..self.key_ends[i] as usize]
    }

    /// Entry `i`'s key, or `None` if there is no entry `i`.
    pub(crate) fn key_checked(&self, i: usize) -> Option<&[u8]> {
        (i < self.len()).then(|| self.key(i))
    }

    /// Entry `i`'s value (panics past [`Block::len`]).
    pub fn value(&self, i: usize) -> &[u8] {
        let (s, l) = self.values[i];
        &self.data[s as usize..(s + l) as usize]
    }

    /// Index of the first entry whose key is >= `target` (== len() if none).
    pub(crate) fn seek(&self, target: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Bytes held, for the cache's accounting.
    pub(crate) fn mem_size(&self) -> usize {
        self.data.capacity()
            + self.keys.capacity()
            + self.key_ends.capacity() * 4
            + self.values.capacity() * 8
            + std::mem::size_of::<Self>()
    }
}

/// A position in a table: data block number and entry number within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Pos {
    pub(crate) block: u32,
    pub(crate) entry: u32,
}

/// Where decoded data blocks are kept between lookups, keyed by `(table id, block number)`.
/// The caller decides the policy (the daemon's one byte-bounded LRU); [`NoBlockStore`] keeps
/// nothing.
pub trait BlockStore: Send + Sync {
    /// Block `block` of table `table`, if kept.
    fn get(&self, table: u64, block: u32) -> Option<Arc<Block>>;
    /// Keeps block `block` of table `table` (or not: the policy's choice).
    fn put(&self, table: u64, block: u32, value: Arc<Block>);
    /// A fresh id for one table's blocks.
    fn register(&self) -> u64;
}

/// A [`BlockStore`] that keeps nothing: every lookup decodes its block again.
pub struct NoBlockStore;

impl BlockStore for NoBlockStore {
    fn get(&self, _: u64, _: u32) -> Option<Arc<Block>> {
        None
    }
    fn put(&self, _: u64, _: u32, _: Arc<Block>) {}
    fn register(&self) -> u64 {
        0
    }
}

/// An opened `.index` table over bytes read on demand (a file read with `pread`, or a slice).
pub struct Table {
    file: Arc<dyn ReadAt + Send + Sync>,
    index: Block,
    handles: Vec<BlockHandle>,
    cache: Arc<dyn BlockStore>,
    cache_id: u64,
}

/// Bytes in memory as a [`ReadAt`].
struct InMemory(Arc<dyn AsRef<[u8]> + Send + Sync>);

impl ReadAt for InMemory {
    fn len(&self) -> u64 {
        (*self.0).as_ref().len() as u64
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        (*self.0).as_ref().read_exact_at(buf, offset)
    }
}

impl Table {
    /// Opens a table held in memory; reads the footer and the index block; nothing else.
    pub fn open(
        file: Arc<dyn AsRef<[u8]> + Send + Sync>,
        cache: Arc<dyn BlockStore>,
    ) -> Result<Table> {
        Table::open_at(Arc::new(InMemory(file)), cache)
    }

    /// Opens a table whose bytes are read on demand; reads the footer and the index block.
    pub(crate) fn open_at(
        file: Arc<dyn ReadAt + Send + Sync>,
        cache: Arc<dyn BlockStore>,
    ) -> Result<Table> {
        let footer = read_footer(&*file)?;
        let index = Block::parse(read_block_at(&*file, footer.index)?)?;
        let handles = (0..index.len())
            .map(|i| BlockHandle::decode(index.value(i)).map(|(h, _)| h))
            .collect::<Result<Vec<_>>>()?;
        if handles.len() > u32::MAX as usize {
            return Err(FormatError::BadBlock("too many blocks"));
        }
        let cache_id = cache.register();
        Ok(Table {
            file,
            index,
            handles,
            cache,
            cache_id,
        })
    }

    /// The number of data blocks the index names.
    pub fn num_blocks(&self) -> usize {
        self.handles.len()
    }

    /// The decoded data block `b`, from the cache or decoded now. Checks that its keys lie
    /// between the index separators around it, so a table whose blocks are out of order is
    /// reported rather than searched wrongly.
    pub fn block(&self, b: u32) -> Result<Arc<Block>> {
        if let Some(blk) = self.cache.get(self.cache_id, b) {
            return Ok(blk);
        }
        let i = b as usize;
        let h = *self
            .handles
            .get(i)
            .ok_or(FormatError::BadBlock("block number out of range"))?;
        let blk = Block::parse(read_block_at(&*self.file, h)?)?;
        if !blk.is_empty() {
            if blk.key(blk.len() - 1) > self.index.key(i) {
                return Err(FormatError::UnsortedKeys);
            }
            if i > 0 && blk.key(0) <= self.index.key(i - 1) {
                return Err(FormatError::UnsortedKeys);
            }
        }
        let blk = Arc::new(blk);
        self.cache.put(self.cache_id, b, blk.clone());
        Ok(blk)
    }

    /// The first position whose key is >= `target`.
    pub(crate) fn seek(&self, target: &[u8]) -> Result<Option<Pos>> {
        let b = self.index.seek(target);
        if b >= self.handles.len() {
            return Ok(None);
        }
        let blk = self.block(b as u32)?;
        let e = blk.seek(target);
        if e < blk.len() {
            return Ok(Some(Pos {
                block: b as u32,
                entry: e as u32,
            }));
        }
        self.first_from_block(b + 1)
    }

    /// The position after `p`.
    pub(crate) fn next(&self, p: Pos) -> Result<Option<Pos>> {
        let blk = self.block(p.block)?;
        if (p.entry as usize) + 1 < blk.len() {
            return Ok(Some(Pos {
                block: p.block,
                entry: p.entry + 1,
            }));
        }
        self.first_from_block(p.block as usize + 1)
    }

    fn first_from_block(&self, mut b: usize) -> Result<Option<Pos>> {
        while b < self.handles.len() {
            if !self.block(b as u32)?.is_empty() {
                return Ok(Some(Pos {
                    block: b as u32,
                    entry: 0,
                }));
            }
            b += 1;
        }
        Ok(None)
    }

    /// The block holding `p` and the entry number within it, after checking `p` is valid.
    pub(crate) fn entry(&self, p: Pos) -> Result<(Arc<Block>, usize)> {
        let blk = self.block(p.block)?;
        if (p.entry as usize) < blk.len() {
            Ok((blk, p.entry as usize))
        } else {
            Err(FormatError::BadBlock("entry number out of range"))
        }
    }

    /// The value stored under exactly `key`, with its position.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<(Pos, Arc<Block>, usize)>> {
        match self.seek(key)? {
            Some(p) => {
                let (blk, i) = self.entry(p)?;
                if blk.key(i) == key {
                    Ok(Some((p, blk, i)))
                } else {
                    Ok(None)
                }
            }
            None => Ok(None),
        }
    }
}
