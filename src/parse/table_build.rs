//! Writing an SSTable (tf-format.md §2), the index of a V2 checkpoint, exactly as TensorFlow's
//! `table::TableBuilder` does: data blocks of a target size (262144 bytes), restart interval 16
//! with prefix-compressed keys, the TF rule that an entry of `key.len + value.len >=
//! 2 * block_size` starts a new block, an empty metaindex block, an index block with restart
//! interval 1 keyed by `FindShortestSeparator` / `FindShortSuccessor`, masked CRC-32C trailers,
//! and the 48-byte footer; Snappy (kept only when it saves at least 12.5%, as LevelDB does) for
//! the test kit only, as TensorFlow writes none. The inverse of [`super::table`], pure over
//! bytes: `export`'s writer and the test kit's both use it. It takes entries in the order given
//! and checks nothing (its callers sort; the test kit builds broken tables on purpose).

use std::io::{self, Write};

use super::table::{BlockHandle, FOOTER_LEN, MAGIC};
use super::{mask_crc, varint};

/// TensorFlow's default `table::Options::block_size`.
pub(crate) const DEFAULT_BLOCK_SIZE: usize = 262_144;
/// TensorFlow's default `table::Options::block_restart_interval` (data blocks).
pub(crate) const DEFAULT_RESTART_INTERVAL: usize = 16;
pub(crate) const BLOCK_TRAILER_LEN: usize = 5;
pub(crate) const MAX_HANDLE_LEN: usize = 20;

/// LevelDB's `BlockBuilder`: prefix-compressed entries, a restart point every `interval` entries.
struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    last_key: Vec<u8>,
    interval: usize,
}

impl BlockBuilder {
    fn new(interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            last_key: Vec::new(),
            interval: interval.max(1),
        }
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// `CurrentSizeEstimate()`: entries + restart array + restart count.
    fn size_estimate(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        let mut shared = 0;
        if self.counter < self.interval {
            shared = self
                .last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count();
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        varint::encode_u64(shared as u64, &mut self.buf);
        varint::encode_u64((key.len() - shared) as u64, &mut self.buf);
        varint::encode_u64(value.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
    }

    /// The finished block contents; the builder is reset for the next block.
    fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.last_key.clear();
        out
    }
}

/// `BytewiseComparator::FindShortestSeparator(start, limit)`, in place on `start`.
pub(crate) fn find_shortest_separator(start: &mut Vec<u8>, limit: &[u8]) {
    let min_len = start.len().min(limit.len());
    let diff = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
    if diff >= min_len {
        return; // one is a prefix of the other: do not shorten
    }
    let b = start[diff];
    if b < 0xff && b + 1 < limit[diff] {
        start[diff] = b + 1;
        start.truncate(diff + 1);
    }
}

/// `BytewiseComparator::FindShortSuccessor(key)`, in place.
pub(crate) fn find_short_successor(key: &mut Vec<u8>) {
    if let Some(i) = key.iter().position(|&b| b != 0xff) {
        key[i] += 1;
        key.truncate(i + 1);
    }
}

pub(crate) fn encode_handle(offset: u64, size: u64, out: &mut Vec<u8>) {
    varint::encode_u64(offset, out);
    varint::encode_u64(size, out);
}

/// Writes one SSTable (tf-format.md §2) exactly as TensorFlow's `table::TableBuilder`.
///
/// Keys must be added in strictly increasing bytewise order for a valid table; this is not
/// checked, so a test can deliberately write an unsorted one.
#[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
pub struct TableBuilder<W: Write> {
    out: W,
    offset: u64,
    block_size: usize,
    snappy: bool,
    data: BlockBuilder,
    index: BlockBuilder,
    last_key: Vec<u8>,
    num_entries: u64,
    /// Handle of the last flushed data block whose index entry waits for the next key.
    pending: Option<(u64, u64)>,
    blocks: u64,
}

impl<W: Write> TableBuilder<W> {
    /// A builder with TensorFlow's defaults: 256 KiB blocks, restart interval 16, no compression.
    #[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
    pub fn new(out: W) -> Self {
        TableBuilder {
            out,
            offset: 0,
            block_size: DEFAULT_BLOCK_SIZE,
            snappy: false,
            data: BlockBuilder::new(DEFAULT_RESTART_INTERVAL),
            index: BlockBuilder::new(1),
            last_key: Vec::new(),
            num_entries: 0,
            pending: None,
            blocks: 0,
        }
    }

    /// Target data block size (default 262144). Small values give many blocks cheaply.
    #[cfg(any(test, feature = "testkit"))]
    #[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
    pub fn block_size(mut self, n: usize) -> Self {
        self.block_size = n.max(1);
        self
    }

    /// Restart interval of data blocks (default 16; the index block always uses 1).
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn restart_interval(mut self, n: usize) -> Self {
        self.data = BlockBuilder::new(n);
        self
    }

    /// Snappy-compress blocks that shrink by at least 12.5% (TensorFlow writes no compression).
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn snappy(mut self, on: bool) -> Self {
        self.snappy = on;
        self
    }

    #[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
    /// Adds an entry (keys in increasing bytewise order for a valid table; not checked).
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if self.num_entries > 0 && key.len() + value.len() >= 2 * self.block_size {
            self.flush()?;
        }
        if let Some((off, size)) = self.pending.take() {
            find_shortest_separator(&mut self.last_key, key);
            let mut h = Vec::with_capacity(MAX_HANDLE_LEN);
            encode_handle(off, size, &mut h);
            self.index.add(&self.last_key, &h);
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.num_entries += 1;
        self.data.add(key, value);
        if self.data.size_estimate() >= self.block_size {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let raw = self.data.finish();
        self.pending = Some(self.write_block(raw)?);
        self.blocks += 1;
        Ok(())
    }

    /// `WriteBlock`: compress if allowed and worth it, then the block and its 5-byte trailer.
    fn write_block(&mut self, raw: Vec<u8>) -> io::Result<(u64, u64)> {
        let mut contents = raw;
        let mut kind = 0u8;
        if self.snappy {
            let compressed = snap::raw::Encoder::new()
                .compress_vec(&contents)
                .map_err(io::Error::other)?;
            if compressed.len() < contents.len() - contents.len() / 8 {
                contents = compressed;
                kind = 1;
            }
        }
        self.out.write_all(&contents)?;
        self.out.write_all(&block_trailer(&contents, kind))?;
        let handle = (self.offset, contents.len() as u64);
        self.offset += (contents.len() + BLOCK_TRAILER_LEN) as u64;
        Ok(handle)
    }

    /// Entries added so far.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn num_entries(&self) -> u64 {
        self.num_entries
    }

    /// Writes the last data block, the metaindex and index blocks and the footer; returns the
    /// output and the number of data blocks.
    #[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.flush()?;
        let meta = BlockBuilder::new(1).finish();
        let meta_handle = self.write_block(meta)?;
        if let Some((off, size)) = self.pending.take() {
            find_short_successor(&mut self.last_key);
            let mut h = Vec::with_capacity(MAX_HANDLE_LEN);
            encode_handle(off, size, &mut h);
            self.index.add(&self.last_key, &h);
        }
        let index = self.index.finish();
        let index_handle = self.write_block(index)?;
        let handle = |(offset, size)| BlockHandle { offset, size };
        self.out
            .write_all(&encode_footer(handle(meta_handle), handle(index_handle)))?;
        self.out.flush()?;
        Ok((self.out, self.blocks))
    }
}

/// The 5-byte trailer of a stored block: `kind` (0 raw, 1 Snappy) and the masked CRC-32C of the
/// stored contents followed by the kind byte.
pub(crate) fn block_trailer(contents: &[u8], kind: u8) -> [u8; BLOCK_TRAILER_LEN] {
    let crc = crc32c::crc32c_append(crc32c::crc32c(contents), &[kind]);
    let mut trailer = [0u8; BLOCK_TRAILER_LEN];
    trailer[0] = kind;
    trailer[1..].copy_from_slice(&mask_crc(crc).to_le_bytes());
    trailer
}

/// The 48-byte footer naming the metaindex and index blocks (handles as given: they may point
/// anywhere).
#[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
pub fn encode_footer(metaindex: BlockHandle, index: BlockHandle) -> Vec<u8> {
    let mut footer = Vec::with_capacity(FOOTER_LEN);
    encode_handle(metaindex.offset, metaindex.size, &mut footer);
    encode_handle(index.offset, index.size, &mut footer);
    footer.resize(2 * MAX_HANDLE_LEN, 0);
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    footer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators() {
        let mut s = b"abcd".to_vec();
        find_shortest_separator(&mut s, b"abzz");
        assert_eq!(s, b"abd");
        let mut s = b"abc".to_vec();
        find_shortest_separator(&mut s, b"abcd");
        assert_eq!(s, b"abc");
        let mut s = b"abc".to_vec();
        find_shortest_separator(&mut s, b"abd");
        assert_eq!(s, b"abc");
        let mut s = vec![0xff, 0xff, 1];
        find_short_successor(&mut s);
        assert_eq!(s, [0xff, 0xff, 2]);
        let mut s = b"strs".to_vec();
        find_short_successor(&mut s);
        assert_eq!(s, b"t");
        let mut s = vec![0xff, 0xff];
        find_short_successor(&mut s);
        assert_eq!(s, [0xff, 0xff]);
    }

    #[test]
    fn empty_block_bytes() {
        assert_eq!(BlockBuilder::new(1).finish(), [0, 0, 0, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn prefix_compression_and_restarts() {
        let mut b = BlockBuilder::new(2);
        b.add(b"string_tensor", b"v");
        b.add(b"strs", b"w");
        b.add(b"strz", b"x");
        let blk = b.finish();
        // entry 2: shared 3, "s"; entry 3 is a restart: shared 0.
        assert_eq!(&blk[..3], &[0, 13, 1]);
        assert_eq!(&blk[17..22], &[3, 1, 1, b's', b'w']);
        assert_eq!(&blk[22..25], &[0, 4, 1]);
        let n = blk.len();
        assert_eq!(&blk[n - 12..], &[0, 0, 0, 0, 22, 0, 0, 0, 2, 0, 0, 0]);
    }
}
