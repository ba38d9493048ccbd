//! One entry of a V1 table's data block, found without holding the block (tf-format.md §2.4, §7).
//!
//! A V1 value can be huge: TensorFlow's table writer gives an entry of over 512 KiB a block of its
//! own, so a 1 GiB tensor is one 1 GiB block. Blocks up to [`SMALL_BLOCK`] bytes, and every
//! Snappy-compressed block (raw Snappy cannot be read from the middle; bounded by
//! [`table::MAX_BLOCK_LEN`] and Snappy's expansion ratio), are read whole, CRC-checked and
//! searched in memory. A larger uncompressed block is CRC-checked by streaming it in
//! [`CRC_CHUNK`] pieces ([`verify_block`]), then searched through [`ReadAt`]: a binary search of
//! its restart array, then a walk of at most one restart interval reading entry headers and key
//! bytes only. The value is then located by offset, never read. The caller remembers which
//! blocks it has seen verified; an uncompressed block it vouches for is searched through
//! [`ReadAt`] directly, whatever its size.

use std::sync::Arc;

use crate::formats::v1::table::window::Window;
use crate::parse::table::BlockHandle;
use crate::parse::{table, unmask_crc, varint, FormatError, ReadAt, Result};

/// Blocks of at most this many stored bytes are read whole.
pub(crate) const SMALL_BLOCK: u64 = 1 << 20;
/// Bytes read at a time when verifying a large block's CRC.
pub(crate) const CRC_CHUNK: usize = 256 << 10;
const TRAILER_LEN: u64 = 5;
/// Compression types of the block trailer.
pub(crate) const RAW: u8 = 0;
#[cfg(test)]
pub(crate) const SNAPPY: u8 = 1;

/// Where an entry's value is.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// `len` bytes at `offset` of the table file (the block is stored uncompressed).
    File { offset: u64, len: u64 },
    /// `len` bytes at `start` of a decompressed block held in memory.
    Memory {
        block: Arc<Vec<u8>>,
        start: u64,
        len: u64,
    },
}

impl Value {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Value::File { len, .. } | Value::Memory { len, .. } => *len,
        }
    }
}

/// Checks `h` lies inside the file, trailer included; returns the trailer's offset.
fn check_handle<R: ReadAt + ?Sized>(file: &R, h: BlockHandle) -> Result<u64> {
    let file_len = file.len();
    h.offset
        .checked_add(h.size)
        .filter(|t| t.checked_add(TRAILER_LEN).is_some_and(|e| e <= file_len))
        .ok_or(FormatError::BadHandle {
            offset: h.offset,
            size: h.size,
            file_len,
        })
}

/// The compression type byte of block `h`.
pub(crate) fn block_type<R: ReadAt + ?Sized>(file: &R, h: BlockHandle) -> Result<u8> {
    let t = check_handle(file, h)?;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, t)?;
    Ok(b[0])
}

/// Verifies the masked CRC-32C of the stored block `h` (its bytes and its type byte), reading it
/// in [`CRC_CHUNK`] pieces; returns the compression type.
pub(crate) fn verify_block<R: ReadAt + ?Sized>(file: &R, h: BlockHandle) -> Result<u8> {
    verify_block_pieces(file, h, |_, piece| Some(piece))
}

/// [`verify_block`], handing each piece it reads (at most [`CRC_CHUNK`] bytes, in order) to
/// `each` once it is in the CRC: the piece's offset in `file` and its bytes. `each` gives back a
/// buffer to read the next piece into (the same one, or one it is done with), or `None` for a
/// new one. The pieces are read whatever the verdict; the verdict is the result.
pub(crate) fn verify_block_pieces<R: ReadAt + ?Sized>(
    file: &R,
    h: BlockHandle,
    mut each: impl FnMut(u64, Vec<u8>) -> Option<Vec<u8>>,
) -> Result<u8> {
    let t = check_handle(file, h)?;
    let mut trailer = [0u8; TRAILER_LEN as usize];
    file.read_exact_at(&mut trailer, t)?;
    let mut computed = 0u32;
    let (mut done, mut buf) = (0u64, Vec::new());
    while done < h.size {
        let n = (h.size - done).min(CRC_CHUNK as u64) as usize;
        buf.resize(n, 0);
        file.read_exact_at(&mut buf, h.offset + done)?;
        computed = crc32c::crc32c_append(computed, &buf);
        let at = h.offset + done;
        done += n as u64;
        buf = each(at, buf).unwrap_or_default();
    }
    computed = crc32c::crc32c_append(computed, &trailer[..1]);
    let stored = unmask_crc(u32::from_le_bytes([
        trailer[1], trailer[2], trailer[3], trailer[4],
    ]));
    if stored != computed {
        return Err(FormatError::BlockCrc { stored, computed });
    }
    Ok(trailer[0])
}

/// Finds `key` in data block `h` of `file`. Unless `crc_known_good` (the caller verified this
/// block before), the block's CRC is verified first: a block of at most [`SMALL_BLOCK`] bytes is
/// read whole and searched in memory, a larger one is verified by streaming and searched through
/// `file`. A Snappy block is always read whole, checked and decompressed (bounded).
pub(crate) fn find_in_table_block<R: ReadAt + ?Sized>(
    file: &R,
    h: BlockHandle,
    key: &[u8],
    crc_known_good: bool,
) -> Result<Option<Value>> {
    let kind = block_type(file, h)?;
    let in_file = |(start, len)| Value::File { offset: start, len };
    if kind == RAW && crc_known_good {
        return Ok(find_in_block(file, h.offset, h.size, key)?.map(in_file));
    }
    if h.size <= SMALL_BLOCK || kind != RAW {
        let data = table::read_block_at(file, h)?;
        let found = find_in_block(&data[..], 0, data.len() as u64, key)?;
        return Ok(found.map(|(start, len)| {
            if kind == RAW {
                Value::File {
                    offset: h.offset + start,
                    len,
                }
            } else {
                Value::Memory {
                    block: Arc::new(data),
                    start,
                    len,
                }
            }
        }));
    }
    verify_block(file, h)?;
    Ok(find_in_block(file, h.offset, h.size, key)?.map(in_file))
}

/// One entry's header: `(shared, non_shared, value_len)` and where its key delta starts.
fn entry_header<R: ReadAt + ?Sized>(
    win: &mut Window<'_, R>,
    pos: u64,
    limit: u64,
) -> Result<(u64, u64, u64, u64)> {
    let avail = limit.saturating_sub(pos).min(15) as usize;
    let b = win.get(pos, avail)?;
    let b = &b[..avail.min(b.len())];
    let (shared, x) = varint::decode_u32(b).ok_or(FormatError::BadVarint)?;
    let (non_shared, y) = varint::decode_u32(&b[x..]).ok_or(FormatError::BadVarint)?;
    let (value_len, z) = varint::decode_u32(&b[x + y..]).ok_or(FormatError::BadVarint)?;
    let delta = pos + (x + y + z) as u64;
    let end = delta + non_shared as u64 + value_len as u64;
    if end > limit {
        return Err(FormatError::BadBlock("entry runs past the block"));
    }
    Ok((shared as u64, non_shared as u64, value_len as u64, delta))
}

/// Finds `key` among the entries of the block contents `[start, start+len)` of `src` (entries,
/// restart array, restart count; no trailer). Returns where the value is in `src`: `(offset,
/// length)`. Only the restart array, entry headers and key bytes are read, and of each key only
/// its first `key.len() + 1` bytes are kept.
pub(crate) fn find_in_block<R: ReadAt + ?Sized>(
    src: &R,
    start: u64,
    len: u64,
    key: &[u8],
) -> Result<Option<(u64, u64)>> {
    let end = start
        .checked_add(len)
        .filter(|&e| e <= src.len())
        .ok_or(FormatError::BadBlock("block runs past the file"))?;
    if len < 4 {
        return Err(FormatError::BadBlock("block too short"));
    }
    let mut win = Window::new(src, end);
    let word = |win: &mut Window<'_, R>, at: u64| -> Result<u64> {
        let b = win.exact(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
    };
    let num_restarts = word(&mut win, end - 4)?;
    let restarts_len = (num_restarts + 1) * 4;
    if restarts_len > len {
        return Err(FormatError::BadBlock("restart array larger than the block"));
    }
    let entries_end = end - restarts_len;
    if entries_end == start {
        return Ok(None);
    }
    if num_restarts == 0 {
        return Err(FormatError::BadBlock("entries without restart points"));
    }
    let cap = key.len() + 1;
    let restart = |win: &mut Window<'_, R>, i: u64| -> Result<u64> {
        let off = word(win, entries_end + 4 * i)?;
        if off >= entries_end - start {
            return Err(FormatError::BadBlock("restart point past the entries"));
        }
        Ok(start + off)
    };
    // The last restart point whose key is < `key` (or the first one).
    let (mut lo, mut hi) = (0u64, num_restarts - 1);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        let at = restart(&mut win, mid)?;
        let (shared, non_shared, _, delta) = entry_header(&mut win, at, entries_end)?;
        if shared != 0 {
            return Err(FormatError::BadBlock("restart entry shares a key prefix"));
        }
        let n = non_shared.min(cap as u64) as usize;
        if win.exact(delta, n)? < key {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut pos = restart(&mut win, lo)?;
    // The first `cap` bytes of the current key, and its full length.
    let mut cur: Vec<u8> = Vec::with_capacity(cap);
    let mut cur_len = 0u64;
    while pos < entries_end {
        let (shared, non_shared, value_len, delta) = entry_header(&mut win, pos, entries_end)?;
        // At the restart point `cur_len` is 0, so its entry must not share a prefix.
        if shared > cur_len {
            return Err(FormatError::BadBlock(
                "shared prefix longer than the previous key",
            ));
        }
        cur.truncate(shared.min(cap as u64) as usize);
        let take = (cap - cur.len()).min(non_shared as usize);
        if take > 0 {
            cur.extend_from_slice(win.exact(delta, take)?);
        }
        cur_len = shared + non_shared;
        let value = delta + non_shared;
        match cur[..].cmp(key) {
            std::cmp::Ordering::Equal if cur_len == key.len() as u64 => {
                return Ok(Some((value, value_len)));
            }
            std::cmp::Ordering::Less => {}
            _ => return Ok(None),
        }
        pos = value + value_len;
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::mask_crc;
    use crate::parse::table::Block;

    /// A block as TensorFlow's builder writes it: prefix-compressed keys, a restart point every
    /// `interval` entries.
    pub(crate) fn build_block(entries: &[(&[u8], &[u8])], interval: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut restarts = Vec::new();
        let mut prev: &[u8] = b"";
        for (i, (k, v)) in entries.iter().enumerate() {
            let shared = if i % interval == 0 {
                restarts.push(out.len() as u32);
                0
            } else {
                prev.iter()
                    .zip(k.iter())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            varint::encode_u64(shared as u64, &mut out);
            varint::encode_u64((k.len() - shared) as u64, &mut out);
            varint::encode_u64(v.len() as u64, &mut out);
            out.extend_from_slice(&k[shared..]);
            out.extend_from_slice(v);
            prev = k;
        }
        if restarts.is_empty() {
            restarts.push(0);
        }
        for r in &restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
        out
    }

    /// The block with its trailer (type byte, masked CRC).
    pub(crate) fn with_trailer(block: &[u8], kind: u8) -> Vec<u8> {
        let mut out = block.to_vec();
        out.push(kind);
        let crc = mask_crc(crc32c::crc32c(&out));
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn keys() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..100u32)
            .map(|i| {
                let k = format!("tensor/{:03}/{}", i * 3, "x".repeat((i % 5) as usize));
                (k.into_bytes(), vec![i as u8; (i % 7) as usize])
            })
            .collect()
    }

    #[test]
    fn finds_every_key_and_no_other() {
        let kv = keys();
        let refs: Vec<(&[u8], &[u8])> = kv.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        for interval in [1, 3, 16, 1000] {
            let block = build_block(&refs, interval);
            let parsed = Block::parse(block.clone()).unwrap();
            assert_eq!(parsed.len(), kv.len());
            for (k, v) in &kv {
                let (at, len) = find_in_block(&block[..], 0, block.len() as u64, k)
                    .unwrap()
                    .unwrap();
                assert_eq!(&block[at as usize..(at + len) as usize], &v[..]);
                // Strict prefixes, extensions and neighbours are not found.
                for other in [&k[..k.len() - 1], &[&k[..], b"\0"].concat()[..]] {
                    assert_eq!(
                        find_in_block(&block[..], 0, block.len() as u64, other).unwrap(),
                        None
                    );
                }
            }
            assert_eq!(
                find_in_block(&block[..], 0, block.len() as u64, b"").unwrap(),
                None
            );
            assert_eq!(
                find_in_block(&block[..], 0, block.len() as u64, b"zzz").unwrap(),
                None
            );
        }
    }

    #[test]
    fn damaged_blocks_are_errors_or_misses_never_panics() {
        let kv = keys();
        let refs: Vec<(&[u8], &[u8])> = kv.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let block = build_block(&refs, 16);
        for cut in 0..block.len() {
            let _ = find_in_block(&block[..cut], 0, cut as u64, &kv[50].0);
        }
        for i in 0..block.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = block.clone();
                b[i] ^= bit;
                if let Ok(Some((at, len))) = find_in_block(&b[..], 0, b.len() as u64, &kv[50].0) {
                    assert!(at + len <= b.len() as u64);
                }
            }
        }
        // Absurd restart counts and huge varints.
        let mut b = block.clone();
        let n = b.len();
        b[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(find_in_block(&b[..], 0, n as u64, b"k").is_err());
        let huge = [
            0xffu8, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00, 0, 0, 0, 0, 1, 0, 0, 0,
        ];
        assert!(find_in_block(&huge[..], 0, huge.len() as u64, b"k").is_err());
        let empty = [0u8, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(find_in_block(&empty[..], 0, 8, b"k").unwrap(), None);
        assert!(find_in_block(&empty[..], 0, 9, b"k").is_err());
    }

    #[test]
    fn large_blocks_are_streamed_and_crc_checked() {
        let big = vec![7u8; (SMALL_BLOCK + 1000) as usize];
        let block = build_block(&[(b"a", b"x"), (b"big", &big), (b"c", b"y")], 16);
        let mut file = vec![0xeeu8; 10];
        file.extend_from_slice(&with_trailer(&block, RAW));
        let h = BlockHandle {
            offset: 10,
            size: block.len() as u64,
        };
        assert_eq!(verify_block(&file[..], h).unwrap(), RAW);
        match find_in_table_block(&file[..], h, b"big", false).unwrap() {
            Some(Value::File { offset, len }) => {
                assert_eq!(len, big.len() as u64);
                assert_eq!(file[offset as usize], 7);
                assert_eq!(file[offset as usize - 1], b'g');
            }
            v => panic!("{v:?}"),
        }
        let mut bad = file.clone();
        bad[500_000] ^= 1;
        assert!(matches!(
            find_in_table_block(&bad[..], h, b"big", false),
            Err(FormatError::BlockCrc { .. })
        ));
        // A caller that verified the block before is not made to pay again.
        assert!(find_in_table_block(&bad[..], h, b"big", true).is_ok());
        let past = BlockHandle {
            offset: 10,
            size: u64::MAX - 4,
        };
        assert!(matches!(
            find_in_table_block(&file[..], past, b"big", false),
            Err(FormatError::BadHandle { .. })
        ));
    }

    #[test]
    fn small_blocks_are_checked_unless_vouched_for() {
        let block = build_block(&[(b"a", b"xyz"), (b"b", b"uvw")], 16);
        let mut file = with_trailer(&block, RAW);
        let h = BlockHandle {
            offset: 0,
            size: block.len() as u64,
        };
        let at = match find_in_table_block(&file[..], h, b"b", false).unwrap() {
            Some(Value::File { offset, len: 3 }) => offset as usize,
            v => panic!("{v:?}"),
        };
        assert_eq!(&file[at..at + 3], b"uvw");
        file[at] = b'U';
        assert!(matches!(
            find_in_table_block(&file[..], h, b"b", false),
            Err(FormatError::BlockCrc { .. })
        ));
        // Vouched for: searched through the file without reading the block whole.
        assert!(matches!(
            find_in_table_block(&file[..], h, b"b", true),
            Ok(Some(Value::File { len: 3, .. }))
        ));
    }

    #[test]
    fn snappy_blocks_are_served_from_memory() {
        let block = build_block(&[(b"a", b"hello hello hello hello"), (b"b", b"x")], 16);
        let compressed = snap::raw::Encoder::new().compress_vec(&block).unwrap();
        let file = with_trailer(&compressed, SNAPPY);
        let h = BlockHandle {
            offset: 0,
            size: compressed.len() as u64,
        };
        match find_in_table_block(&file[..], h, b"a", false).unwrap() {
            Some(Value::Memory { block, start, len }) => {
                assert_eq!(
                    &block[start as usize..(start + len) as usize],
                    b"hello hello hello hello"
                );
            }
            v => panic!("{v:?}"),
        }
        let mut bad = file.clone();
        bad[2] ^= 4;
        assert!(find_in_table_block(&bad[..], h, b"a", true).is_err());
    }
}
