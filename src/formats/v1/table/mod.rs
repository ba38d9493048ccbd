//! Legacy V1 checkpoints (`TensorSliceWriter`, `SaverDef.V1`; tf-format.md §7): each file (one,
//! or one per shard) is one SSTable (§2) whose key `""` holds a `SavedTensorSlices` meta listing
//! every tensor it saves (name, shape, dtype, slices), and whose other keys are slice keys (§5.2,
//! also for unpartitioned tensors: their one full slice) holding a `SavedTensorSlices` with the
//! slice's values in a `TensorProto`.
//!
//! Opening a [`V1Table`] reads the footer, the top-level index block and the meta entry only
//! ([`block`] finds an entry without reading its block whole when the block is large). A slice's
//! values are located on first use ([`V1Table::find`], then [`values::scan`]); V1 has no per-tensor
//! CRC, but every block's CRC is verified before its bytes are used.
//!
//! What is a V1 table is decided by content ([`probe`]): the table magic, and a `""` entry whose
//! value has a `meta` message (a V2 `.index` has a `BundleHeaderProto` there, whose field 1 is a
//! varint).

pub(crate) mod block;
pub(crate) mod encoding;
pub(crate) mod meta;
pub(crate) mod values;
mod window;

use block::{find_in_block, find_in_table_block, Value, RAW};
use meta::MetaTensor;
use window::Window;

use crate::parse::table::{Block, BlockHandle, MAX_BLOCK_LEN};
use crate::parse::wire::LEN;
use crate::parse::{table, FormatError, ReadAt, Result};

/// Not a V1 checkpoint table (no `SavedTensorSlices` meta under the key `""`).
pub(crate) fn not_v1(why: impl std::fmt::Display) -> FormatError {
    FormatError::Format(format!("not a V1 checkpoint: {why}"))
}

/// A slice's entry is absent from the table its meta names.
pub(crate) fn missing_slice(slice: impl std::fmt::Display) -> FormatError {
    FormatError::Format(format!("the entry of saved slice {slice} is missing"))
}

/// A slice's entry does not hold the slice its key names.
pub(crate) fn slice_mismatch(why: impl std::fmt::Display) -> FormatError {
    FormatError::Format(format!("saved slice does not match its key: {why}"))
}

/// A slice holds a different number of values than its extent needs.
pub(crate) fn value_count(expected: u64, found: u64) -> FormatError {
    FormatError::Format(format!(
        "saved slice holds {found} values, its extent needs {expected}"
    ))
}

/// A meta entry larger than this is refused.
pub(crate) const MAX_META_LEN: u64 = MAX_BLOCK_LEN as u64;

/// An opened V1 table file.
#[derive(Debug)]
pub(crate) struct V1Table {
    index: Block,
    handles: Vec<BlockHandle>,
    tensors: Vec<MetaTensor>,
}

/// The top-level index block and the data block handles it lists.
fn read_index<R: ReadAt + ?Sized>(file: &R) -> Result<(Block, Vec<BlockHandle>)> {
    let footer = table::read_footer(file)?;
    let index = Block::parse(table::read_block_at(file, footer.index)?)?;
    let handles = (0..index.len())
        .map(|i| BlockHandle::decode(index.value(i)).map(|(h, _)| h))
        .collect::<Result<Vec<_>>>()?;
    Ok((index, handles))
}

impl V1Table {
    /// Opens a V1 table: reads the footer, the index block and the meta entry (its block's CRC
    /// verified). Fails if the file is not a V1 table.
    pub(crate) fn open<R: ReadAt + ?Sized>(file: &R) -> Result<V1Table> {
        let (index, handles) = read_index(file)?;
        let first = *handles.first().ok_or_else(|| not_v1("no data blocks"))?;
        let value = find_in_table_block(file, first, b"", false)?
            .ok_or_else(|| not_v1("no entry under the empty key"))?;
        if value.len() > MAX_META_LEN {
            return Err(FormatError::BadEntry(format!(
                "meta entry of {} bytes",
                value.len()
            )));
        }
        let tensors = match value {
            Value::File { offset, len } => {
                let mut buf = vec![0u8; len as usize];
                file.read_exact_at(&mut buf, offset)?;
                meta::parse_meta(&buf)?
            }
            Value::Memory { block, start, len } => {
                let bytes = block
                    .get(start as usize..(start + len) as usize)
                    .ok_or(FormatError::BadBlock("value outside its block"))?;
                meta::parse_meta(bytes)?
            }
        };
        Ok(V1Table {
            index,
            handles,
            tensors,
        })
    }

    /// The tensors of the meta, in its order (one per `SavedSliceMeta`; a name may repeat).
    pub(crate) fn tensors(&self) -> &[MetaTensor] {
        &self.tensors
    }

    #[cfg(test)]
    pub(crate) fn num_blocks(&self) -> usize {
        self.handles.len()
    }

    /// The data block that holds `key` if any does (the first whose index separator is >= it).
    pub(crate) fn block_for(&self, key: &[u8]) -> Option<BlockHandle> {
        self.handles.get(self.index.seek(key)).copied()
    }

    /// Finds the entry `key` (a slice key): the block it is in, and where its value is. The
    /// block's CRC is verified unless `crc_known_good(block)` says it was before (Snappy blocks
    /// are always checked: they are decompressed whole; see [`block`]).
    pub(crate) fn find<R: ReadAt + ?Sized>(
        &self,
        file: &R,
        key: &[u8],
        crc_known_good: impl Fn(BlockHandle) -> bool,
    ) -> Result<Option<(BlockHandle, Value)>> {
        let Some(h) = self.block_for(key) else {
            return Ok(None);
        };
        Ok(find_in_table_block(file, h, key, crc_known_good(h))?.map(|v| (h, v)))
    }
}

/// True if `file` looks like a V1 table: an SSTable whose first entry has the empty key and a
/// value with a `meta` message (field 1, length-delimited). Reads the footer, the index block,
/// the first entry's header and the value's top-level field keys; no CRC is checked (opening does
/// that).
pub(crate) fn probe<R: ReadAt + ?Sized>(file: &R) -> bool {
    probe_inner(file).unwrap_or(false)
}

fn probe_inner<R: ReadAt + ?Sized>(file: &R) -> Result<bool> {
    let (_, handles) = read_index(file)?;
    let Some(&h) = handles.first() else {
        return Ok(false);
    };
    let value = if block::block_type(file, h)? == RAW {
        match find_in_block(file, h.offset, h.size, b"")? {
            Some((offset, len)) => (None, offset, len),
            None => return Ok(false),
        }
    } else {
        let data = table::read_block_at(file, h)?;
        match find_in_block(&data[..], 0, data.len() as u64, b"")? {
            Some((offset, len)) => (Some(data), offset, len),
            None => return Ok(false),
        }
    };
    match value {
        (Some(data), offset, len) => has_meta(&data[..], offset, len),
        (None, offset, len) => has_meta(file, offset, len),
    }
}

/// Whether the message `[offset, offset+len)` has field 1 as a message, and only as one.
fn has_meta<R: ReadAt + ?Sized>(src: &R, offset: u64, len: u64) -> Result<bool> {
    let end = offset.saturating_add(len);
    let mut win = Window::new(src, end);
    let mut pos = offset;
    let mut meta = false;
    // A handful of fields is enough: the meta is field 1, written first.
    for _ in 0..16 {
        if pos >= end {
            break;
        }
        let (key, at) = win.varint(pos, end)?;
        let wire = (key & 7) as u8;
        if key >> 3 == 1 {
            if wire != LEN {
                return Ok(false);
            }
            meta = true;
        }
        pos = match wire {
            0 => win.varint(at, end)?.1,
            1 => at + 8,
            5 => at + 4,
            LEN => {
                let (n, p) = win.varint(at, end)?;
                p.saturating_add(n)
            }
            _ => return Ok(false),
        };
    }
    Ok(meta && pos <= end)
}

#[cfg(test)]
pub(crate) mod tests;
