//! Read-only memory maps of source files. Zero-length files cannot be mapped and are held as
//! empty slices.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

pub struct MappedFile {
    map: Option<Mmap>,
    file: File,
}

impl MappedFile {
    pub fn open(path: &Path) -> io::Result<(Arc<MappedFile>, std::fs::Metadata)> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only. A source file truncated while mounted can make
            // accesses fault; readers check the file's current length before touching a range.
            let m = unsafe { Mmap::map(&file)? };
            Some(m)
        };
        Ok((Arc::new(MappedFile { map, file }), meta))
    }

    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the file is still at least `len` bytes long. A file truncated after it was mapped
    /// would make accesses past its new end fault, so readers ask before touching a range.
    pub fn still_covers(&self, len: u64) -> bool {
        self.file
            .metadata()
            .map(|m| m.len() >= len)
            .unwrap_or(false)
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// Bytes handed to a read reply: a range of a mapping (no copy) or an owned buffer.
pub enum ReadBuf {
    Mapped(Arc<MappedFile>, usize, usize),
    Owned(Vec<u8>),
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Mapped(m, start, end) => &(**m).as_ref()[*start..*end],
            ReadBuf::Owned(v) => v,
        }
    }
}
