//! One opened remote object as a [`ByteSource`]: [`RemoteFile`]. `read_exact_at` (index
//! blocks, any random access) reads whole MiB blocks through the store's block cache
//! ([`super::read`]); sequential reads of tensor data should use a
//! [`Reader`](super::prefetch::Reader) from [`RemoteFile::reader`].

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::parse;
use crate::parse::ReadAt;
use crate::source::bytes::{ByteSource, FileMeta};
use crate::source::remote::prefetch::Reader;
use crate::source::remote::read::{Handle, Object, Reads};
use crate::source::remote::RemoteError;

/// An opened remote object.
pub struct RemoteFile {
    /// The object as opened, and what its reads share.
    pub h: Arc<Handle>,
    name: PathBuf,
    meta: FileMeta,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("url", &self.h.obj.url)
            .field("size", &self.h.obj.size)
            .field("etag", &self.h.obj.etag)
            .finish()
    }
}

impl RemoteFile {
    pub(crate) fn new(reads: Arc<Reads>, obj: Object, meta: FileMeta) -> RemoteFile {
        RemoteFile {
            name: PathBuf::from(&obj.url),
            h: Arc::new(Handle {
                reads,
                obj: Arc::new(obj),
            }),
            meta,
        }
    }

    /// The size when it was opened.
    pub fn size(&self) -> u64 {
        self.h.obj.size
    }

    /// The ETag when it was opened (every GET must match it).
    pub fn etag(&self) -> Option<&str> {
        self.h.obj.etag.as_deref()
    }

    /// A reader for one open file of the mount: the bytes `range` of this object (a tensor's
    /// bytes in a data shard, or `0..size()`), with read-ahead while it is read sequentially.
    pub fn reader(self: &Arc<Self>, range: Range<u64>) -> Reader {
        Reader::new(Arc::clone(&self.h), range)
    }

    /// Fills `buf` from `offset`: whole MiB blocks around it through the store's block cache,
    /// no read-ahead. Fails within `remote_timeout`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        let deadline = Instant::now() + self.h.reads.timeout;
        self.h.read_blocks(buf, offset, deadline)
    }
}

impl ReadAt for RemoteFile {
    fn len(&self) -> u64 {
        self.h.obj.size
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> parse::Result<()> {
        Ok(self.read_at(buf, offset)?)
    }
}

impl ByteSource for RemoteFile {
    fn name(&self) -> &Path {
        &self.name
    }

    fn meta(&self) -> FileMeta {
        self.meta
    }

    fn changed(&self) -> bool {
        self.h.obj.changed.load(Ordering::Relaxed)
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn range_reader(
        self: Arc<Self>,
        range: std::ops::Range<u64>,
    ) -> Option<Arc<dyn crate::source::bytes::RangeReader>> {
        Some(Arc::new(self.reader(range)))
    }
}

impl crate::source::bytes::RangeReader for crate::source::remote::Reader {
    fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), crate::parse::FormatError> {
        crate::source::remote::Reader::read_into(self, buf, offset).map_err(Into::into)
    }

    fn read_bytes(
        &self,
        offset: u64,
        len: usize,
    ) -> Result<bytes::Bytes, crate::parse::FormatError> {
        crate::source::remote::Reader::read_bytes(self, offset, len).map_err(Into::into)
    }

    fn prefetch(&self) {
        crate::source::remote::Reader::prefetch(self)
    }

    fn holds_all(&self) -> bool {
        crate::source::remote::Reader::holds_all(self)
    }

    fn forget_cached(&self) {
        crate::source::remote::Reader::forget_cached(self)
    }

    fn check_cached(&self, want: u32) -> bool {
        crate::source::remote::Reader::check_cached(self, want)
    }
}
