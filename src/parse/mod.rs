//! Pure parsers that more than one format (or view) uses: SSTable, bundle entries, slices,
//! dtypes, varints, wire scanning, npy, zip, safetensors. A parser one format alone uses lives
//! in that format's folder (`src/formats/<name>/`). Nothing here knows about FUSE or logging:
//! every function takes bytes (a slice, or a [`ReadAt`] for data read on demand) and returns a
//! value or a [`FormatError`].

pub mod bundle;
pub mod dtype;
pub(crate) mod npy;
pub(crate) mod partition;
pub(crate) mod roles;
pub(crate) mod safetensors;
pub mod slice_key;
pub mod table;
pub(crate) mod table_build;
pub(crate) mod tensor_proto;
pub mod varint;
pub(crate) mod wire;
pub mod zip;

/// What is wrong with a file. Every malformed input maps to one of these; none panics.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The file is shorter than a table's footer (its length).
    #[error("file is too short to be an sstable ({0} bytes)")]
    TooShort(usize),
    /// The file does not end with the table magic number.
    #[error("not a TensorFlow table (index) file: it does not end with the table magic number (truncated, or another kind of file)")]
    BadMagic,
    #[error(
        "block handle points outside the file (offset {offset}, size {size}, file {file_len})"
    )]
    /// A block handle (footer or index) names bytes outside the file.
    BadHandle {
        /// The handle's offset.
        offset: u64,
        /// The handle's size.
        size: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A table block's CRC-32C does not match its bytes.
    #[error("block checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BlockCrc {
        /// The checksum stored in the block trailer (unmasked).
        stored: u32,
        /// The checksum of the block's bytes.
        computed: u32,
    },
    /// A block's trailer names a compression other than none or Snappy.
    #[error("bad block compression type {0}")]
    BadBlockType(u8),
    /// A Snappy-compressed block does not decompress (or claims too much).
    #[error("snappy: {0}")]
    Snappy(String),
    /// A block's entries or restart points are malformed (what, in words).
    #[error("corrupt block: {0}")]
    BadBlock(&'static str),
    /// A block's keys are not in increasing order.
    #[error("keys out of order in block")]
    UnsortedKeys,
    /// A varint is truncated or longer than ten bytes.
    #[error("bad varint")]
    BadVarint,
    /// A protobuf message does not decode (prost's words).
    #[error("protobuf: {0}")]
    Proto(String),
    /// A bundle header's version excludes this reader.
    #[error("unsupported bundle version: {0}")]
    Version(String),
    /// A tensor's index entry is absurd (shape, size, slices, dtype), in words.
    #[error("bad tensor entry: {0}")]
    BadEntry(String),
    /// A tensor's stored bytes run past the end of its data file.
    #[error("data file is truncated: {len} bytes, the tensor is stored at bytes {start}..{end}")]
    DataTruncated {
        /// The data file's length.
        len: u64,
        /// Where the tensor's bytes start.
        start: u64,
        /// Where they end.
        end: u64,
    },
    /// A partitioned tensor's slice key does not decode.
    #[error("bad slice key")]
    BadSliceKey,
    /// A string tensor's lengths, checksum or bytes do not add up (what, in words).
    #[error("corrupt string tensor: {0}")]
    BadString(&'static str),
    /// A tensor's bytes do not match the CRC-32C its index entry stores.
    #[error("tensor checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    TensorCrc {
        /// The checksum the index stores (unmasked).
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A protobuf text file (`.pbtxt`) does not parse.
    #[error("text format: {0}")]
    Text(String),
    /// A zip archive (`.keras`, `.npz`) is malformed or uses what is not supported.
    #[error("zip: {0}")]
    Zip(String),
    /// What one format's own parser found wrong, in that format's words (`HDF5: ...`, `TFLite:
    /// ...`, `not a V1 checkpoint: ...`). The formats in `src/formats/` make their own errors
    /// with this one variant, so a new format adds none here and none in `error.rs`.
    #[error("{0}")]
    Format(String),
    /// The bytes could not be read (the file changed, shrank, or an I/O error).
    #[error("{0}")]
    Read(#[from] ReadError),
}

/// Why bytes of a source could not be read.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The file's size or modification time is not what it was when opened.
    #[error("changed since it was mounted")]
    Changed,
    /// A read ended before the bytes the file had when opened.
    #[error("shorter than when it was mounted")]
    Short,
    /// A read asked for bytes past the end of the file.
    #[error("{len} bytes at offset {offset} lie past its end ({file_len} bytes)")]
    PastEnd {
        /// Where the read started.
        offset: u64,
        /// How many bytes it asked for.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// An operating-system error, by errno.
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Os(i32),
    /// Another failure of the byte source (e.g. a remote store), described.
    #[error("{0}")]
    Other(String),
}

impl From<prost::DecodeError> for FormatError {
    fn from(e: prost::DecodeError) -> Self {
        FormatError::Proto(e.to_string())
    }
}

/// The result of a parser: the value, or what is wrong with the bytes.
pub type Result<T> = std::result::Result<T, FormatError>;

/// Bytes read on demand by offset: a file read with `pread` (see `source::file`), or a slice.
pub trait ReadAt {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` from `offset`; an error if any of it lies past the end or cannot be read.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
}

impl ReadAt for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let src = usize::try_from(offset)
            .ok()
            .and_then(|a| Some(a..a.checked_add(buf.len())?))
            .and_then(|r| self.get(r))
            .ok_or(ReadError::PastEnd {
                offset,
                len: buf.len() as u64,
                file_len: <[u8]>::len(self) as u64,
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Reads `len` bytes of `src` from `offset` in pieces of at most `chunk` bytes, handing each to
/// `f` in order; one buffer of `min(len, chunk)` bytes is allocated.
pub(crate) fn for_each_chunk<R: ReadAt + ?Sized>(
    src: &R,
    offset: u64,
    len: u64,
    chunk: usize,
    mut f: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > src.len()) {
        return Err(FormatError::Read(ReadError::PastEnd {
            offset,
            len,
            file_len: src.len(),
        }));
    }
    let mut buf = vec![0u8; len.min(chunk as u64) as usize];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], offset + done)?;
        f(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// CRC-32C masking used by TensorFlow's tables and bundles (tf-format.md §2.3).
pub fn mask_crc(c: u32) -> u32 {
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

pub(crate) fn unmask_crc(m: u32) -> u32 {
    m.wrapping_sub(0xa282_ead8).rotate_left(15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_of_zero_is_the_documented_constant() {
        assert_eq!(mask_crc(0), 0xa282_ead8);
        for c in [0u32, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(unmask_crc(mask_crc(c)), c);
        }
    }
}
