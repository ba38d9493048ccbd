//! The SSTable format of TensorFlow's `.index` files (tf-format.md §2): footer, block trailer with
//! masked CRC-32C, optional raw Snappy compression, prefix-compressed entries.
//!
//! Opening a [`Table`] reads only the footer and the index block. Data blocks are decoded on
//! demand and kept in the shared [`BlockCache`].

use std::sync::Arc;

use super::{unmask_crc, varint, FormatError, Result};
use crate::cache::BlockCache;

pub const FOOTER_LEN: usize = 48;
pub const MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const TRAILER_LEN: usize = 5;
/// Decompressed blocks larger than this are refused (decompression bombs). TF writes 256 KiB
/// blocks; a single huge entry can make one larger, but never anywhere near this.
pub const MAX_BLOCK_LEN: usize = 256 << 20;
/// Snappy never expands its input more than this many times (its densest element, a 3-byte copy,
/// yields 64 bytes), so a block whose header claims more is refused before anything is allocated.
const MAX_SNAPPY_EXPANSION: usize = 22;
/// A block's keys, rebuilt from their shared prefixes, may take at most this many times the
/// block's bytes (plus [`KEY_ALLOWANCE`]). Prefix compression lets each few-byte entry repeat the
/// whole previous key, so without a bound a block of n bytes could expand to ~n²/50 bytes of
/// keys. Real keys (tensor names) stay far below: even 500-byte names sharing all but a few
/// bytes with their neighbours expand about 20 times.
const MAX_KEY_EXPANSION: usize = 64;
const KEY_ALLOWANCE: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHandle {
    pub offset: u64,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub metaindex: BlockHandle,
    pub index: BlockHandle,
}

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

/// Reads the stored block at `h`, checks its trailer CRC and decompresses it.
pub fn read_block(file: &[u8], h: BlockHandle) -> Result<Vec<u8>> {
    let bad = || FormatError::BadHandle {
        offset: h.offset,
        size: h.size,
        file_len: file.len() as u64,
    };
    let start = usize::try_from(h.offset).map_err(|_| bad())?;
    let size = usize::try_from(h.size).map_err(|_| bad())?;
    let end = start
        .checked_add(size)
        .and_then(|e| e.checked_add(TRAILER_LEN))
        .ok_or_else(bad)?;
    if end > file.len() {
        return Err(bad());
    }
    let stored = &file[start..start + size];
    let kind = file[start + size];
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&file[start + size + 1..end]);
    let expected = unmask_crc(u32::from_le_bytes(crc_bytes));
    let computed = crc32c::crc32c_append(crc32c::crc32c(stored), &[kind]);
    if expected != computed {
        return Err(FormatError::BlockCrc {
            stored: expected,
            computed,
        });
    }
    match kind {
        0 => Ok(stored.to_vec()),
        1 => {
            let len = snap::raw::decompress_len(stored)
                .map_err(|e| FormatError::Snappy(e.to_string()))?;
            if len > MAX_BLOCK_LEN {
                return Err(FormatError::Snappy(format!(
                    "decompressed length {len} exceeds the {MAX_BLOCK_LEN}-byte limit"
                )));
            }
            if len > stored.len().saturating_mul(MAX_SNAPPY_EXPANSION) {
                return Err(FormatError::Snappy(format!(
                    "decompressed length {len} is more than {} compressed bytes can hold",
                    stored.len()
                )));
            }
            snap::raw::Decoder::new()
                .decompress_vec(stored)
                .map_err(|e| FormatError::Snappy(e.to_string()))
        }
        t => Err(FormatError::BadBlockType(t)),
    }
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

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.key_ends[i - 1] as usize
        };
        &self.keys[start..self.key_ends[i] as usize]
    }

    pub fn value(&self, i: usize) -> &[u8] {
        let (s, l) = self.values[i];
        &self.data[s as usize..(s + l) as usize]
    }

    /// Index of the first entry whose key is >= `target` (== len() if none).
    pub fn seek(&self, target: &[u8]) -> usize {
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
    pub fn mem_size(&self) -> usize {
        self.data.capacity()
            + self.keys.capacity()
            + self.key_ends.capacity() * 4
            + self.values.capacity() * 8
            + std::mem::size_of::<Self>()
    }
}

/// A position in a table: data block number and entry number within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub block: u32,
    pub entry: u32,
}

/// An opened `.index` table over bytes that stay valid (usually an mmap).
pub struct Table {
    file: Arc<dyn AsRef<[u8]> + Send + Sync>,
    index: Block,
    handles: Vec<BlockHandle>,
    cache: Arc<BlockCache>,
    cache_id: u64,
}

impl Table {
    /// Reads the footer and the index block; nothing else.
    pub fn open(file: Arc<dyn AsRef<[u8]> + Send + Sync>, cache: Arc<BlockCache>) -> Result<Table> {
        let bytes = (*file).as_ref();
        let footer = parse_footer(bytes)?;
        let index = Block::parse(read_block(bytes, footer.index)?)?;
        let handles = (0..index.len())
            .map(|i| BlockHandle::decode(index.value(i)).map(|(h, _)| h))
            .collect::<Result<Vec<_>>>()?;
        if handles.len() > u32::MAX as usize {
            return Err(FormatError::BadBlock("too many blocks"));
        }
        let cache_id = cache.register_table();
        Ok(Table {
            file,
            index,
            handles,
            cache,
            cache_id,
        })
    }

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
        let blk = Block::parse(read_block((*self.file).as_ref(), h)?)?;
        if !blk.is_empty() {
            if blk.key(blk.len() - 1) > self.index.key(i) {
                return Err(FormatError::UnsortedKeys);
            }
            if i > 0 && blk.key(0) <= self.index.key(i - 1) {
                return Err(FormatError::UnsortedKeys);
            }
        }
        let blk = Arc::new(blk);
        self.cache.insert(self.cache_id, b, blk.clone());
        Ok(blk)
    }

    /// The first position whose key is >= `target`.
    pub fn seek(&self, target: &[u8]) -> Result<Option<Pos>> {
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
    pub fn next(&self, p: Pos) -> Result<Option<Pos>> {
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
    pub fn entry(&self, p: Pos) -> Result<(Arc<Block>, usize)> {
        let blk = self.block(p.block)?;
        if (p.entry as usize) < blk.len() {
            Ok((blk, p.entry as usize))
        } else {
            Err(FormatError::BadBlock("entry number out of range"))
        }
    }

    /// The value stored under exactly `key`, with its position.
    pub fn get(&self, key: &[u8]) -> Result<Option<(Pos, Arc<Block>, usize)>> {
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
