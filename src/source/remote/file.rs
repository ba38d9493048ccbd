//! One opened remote object ([`RemoteFile`], a [`ByteSource`]), and the one function that GETs
//! bytes of it ([`fetch`]).
//!
//! Opening records the size, ETag and modification time (from one HEAD, or from the GET that
//! read the file whole). Every GET after that carries `If-Match` with that ETag (or, if the
//! store gave none, `If-Unmodified-Since`), and the answer's ETag and size are checked too: an
//! object rewritten, replaced or deleted after it was opened gives [`RemoteError::Changed`], one
//! log line, and every later read of it fails the same way; bytes of two versions are never
//! mixed.
//!
//! `read_exact_at` (index blocks, any random access) goes through the store's cache of MiB
//! blocks ([`super::parts`]); sequential reads of tensor data should use a
//! [`Reader`](super::prefetch::Reader) from [`RemoteFile::reader`].

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};

use super::cause::{map_err, status_words};
use super::prefetch::Reader;
use super::stats::Counters;
use super::store::Ctx;
use super::RemoteError;
use crate::format::{self, ReadAt};
use crate::source::bytes::{ByteSource, FileMeta};

/// What requests need: the client and the counters. Held by spawned tasks (not the runtime).
#[derive(Debug)]
pub(crate) struct Io {
    pub store: Arc<dyn ObjectStore>,
    pub counters: Arc<Counters>,
    /// `remote_timeout` (for messages).
    pub timeout: std::time::Duration,
}

/// An object as opened.
#[derive(Debug)]
pub(crate) struct Object {
    pub key: Key,
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: DateTime<Utc>,
    pub changed: AtomicBool,
    /// Why, as first found (said again by every later read).
    why: std::sync::OnceLock<String>,
    /// Unique within the store (cache keys).
    pub id: u64,
}

impl Object {
    pub fn new(meta: &ObjectMeta, url: String, id: u64) -> Object {
        Object {
            key: meta.location.clone(),
            url,
            size: meta.size,
            etag: meta.e_tag.as_deref().map(quoted_etag),
            last_modified: meta.last_modified,
            changed: AtomicBool::new(false),
            why: std::sync::OnceLock::new(),
            id,
        }
    }

    /// Marks the object changed (logged the first time) and returns the error to give.
    pub fn mark_changed(&self, why: &str) -> RemoteError {
        let _ = self.why.set(why.to_string());
        if !self.changed.swap(true, Ordering::Relaxed) {
            log::error!(
                "{}: changed since it was opened ({why}); reads from it fail until it is mounted again",
                self.url
            );
        }
        RemoteError::Changed {
            url: self.url.clone(),
            why: why.to_string(),
        }
    }

    /// Fails if the object is already known to have changed, saying why (a read-ahead may
    /// have found it, which no reader saw fail).
    pub fn check(&self) -> Result<(), RemoteError> {
        if self.changed.load(Ordering::Relaxed) {
            let why = self
                .why
                .get()
                .map_or("seen by an earlier read", String::as_str);
            return Err(RemoteError::Changed {
                url: self.url.clone(),
                why: why.to_string(),
            });
        }
        Ok(())
    }

    /// Fails unless `len` bytes at `offset` lie within the object.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), RemoteError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(RemoteError::Range {
                url: self.url.clone(),
                offset,
                len,
                size: self.size,
            }),
        }
    }

    /// Fails (marking the object changed) if an answer describes another version.
    fn check_meta(&self, meta: &ObjectMeta) -> Result<(), RemoteError> {
        if let (Some(a), Some(b)) = (&self.etag, &meta.e_tag) {
            if bare_etag(a) != bare_etag(b) {
                return Err(self.mark_changed(&format!("ETag {a} -> {b}")));
            }
        }
        if meta.size != self.size {
            return Err(self.mark_changed(&format!("size {} -> {}", self.size, meta.size)));
        }
        Ok(())
    }
}

/// An ETag as `If-Match` wants it: quoted (listings of some stores give it bare).
fn quoted_etag(e: &str) -> String {
    if e.starts_with('"') || e.starts_with("W/") {
        e.to_string()
    } else {
        format!("\"{e}\"")
    }
}

/// An ETag without weakness mark and quotes, for comparing.
fn bare_etag(e: &str) -> &str {
    let e = e.strip_prefix("W/").unwrap_or(e);
    e.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(e)
}

/// GETs `range` of `obj` (with `If-Match`), as pieces of `piece` bytes from `range.start` (the
/// last may be shorter). Exactly `range.len()` bytes are accepted: a body longer or shorter
/// than asked is an error, and no more than that is ever buffered. No timeout here: callers
/// bound it.
pub(crate) async fn fetch(
    io: &Io,
    obj: &Object,
    range: Range<u64>,
    piece: u64,
) -> Result<Vec<Bytes>, RemoteError> {
    obj.check()?;
    let len = range.end.saturating_sub(range.start);
    if len == 0 {
        return Ok(Vec::new());
    }
    obj.check_range(range.start, len)?;
    // A weak ETag never matches strongly: such objects are pinned by time (and the answer's
    // ETag is compared below in both cases).
    let strong = obj.etag.clone().filter(|e| !e.starts_with("W/"));
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        if_unmodified_since: strong.is_none().then_some(obj.last_modified),
        if_match: strong,
        ..Default::default()
    };
    Counters::add(&io.counters.gets, 1);
    let res = match io.store.get_opts(&obj.key, opts).await {
        Ok(r) => r,
        Err(object_store::Error::Precondition { .. }) => {
            return Err(obj.mark_changed("If-Match failed: rewritten"))
        }
        // Said with what the store answered (a read's log line and `verify` show the kind).
        Err(object_store::Error::NotFound { .. }) => {
            return Err(obj.mark_changed(&format!("deleted: {}", status_words(404))))
        }
        Err(e) => return Err(map_err(&obj.url, io.timeout, e)),
    };
    obj.check_meta(&res.meta)?;
    if res.range != range {
        return Err(RemoteError::Request {
            url: obj.url.clone(),
            msg: format!("asked for bytes {range:?}, got {:?}", res.range),
        });
    }
    let piece = piece.clamp(1, len);
    let mut out = Vec::with_capacity(usize::try_from(len.div_ceil(piece)).unwrap_or(0).min(1024));
    let mut cur = BytesMut::with_capacity(piece as usize);
    let mut got = 0u64;
    let mut stream = res.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| map_err(&obj.url, io.timeout, e))?;
        Counters::add(&io.counters.bytes, chunk.len() as u64);
        if got + chunk.len() as u64 > len {
            return Err(RemoteError::Request {
                url: obj.url.clone(),
                msg: format!("the server sent more than the {len} bytes asked for"),
            });
        }
        got += chunk.len() as u64;
        let mut c = &chunk[..];
        while !c.is_empty() {
            let room = piece as usize - cur.len();
            let (now, rest) = c.split_at(room.min(c.len()));
            cur.extend_from_slice(now);
            c = rest;
            if cur.len() == piece as usize {
                out.push(cur.split().freeze());
                let left = len - got + c.len() as u64;
                cur = BytesMut::with_capacity(piece.min(left) as usize);
            }
        }
    }
    if got != len {
        return Err(RemoteError::Request {
            url: obj.url.clone(),
            msg: format!("the answer ended after {got} of {len} bytes"),
        });
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    Ok(out)
}

/// A GET running on the store's runtime; aborted if dropped before it is waited for.
pub(crate) struct Pending {
    handle: tokio::task::JoinHandle<Result<Vec<Bytes>, RemoteError>>,
    url: String,
    after: std::time::Duration,
}

impl Pending {
    /// Starts fetching `range` of `obj` (pieces of `piece` bytes); the request gives up at
    /// `deadline`.
    pub fn spawn(
        ctx: &Ctx,
        obj: &Arc<Object>,
        range: Range<u64>,
        piece: u64,
        deadline: Instant,
    ) -> Pending {
        let io = Arc::clone(&ctx.io);
        let o = Arc::clone(obj);
        let after = ctx.timeout;
        let dl = tokio::time::Instant::from_std(deadline);
        let handle = ctx.rt.handle().spawn(async move {
            match tokio::time::timeout_at(dl, fetch(&io, &o, range, piece)).await {
                Ok(r) => r,
                Err(_) => Err(RemoteError::Timeout {
                    url: o.url.clone(),
                    after,
                }),
            }
        });
        Pending {
            handle,
            url: obj.url.clone(),
            after,
        }
    }

    /// Waits for the answer until `deadline`.
    pub fn wait(&mut self, ctx: &Ctx, deadline: Instant) -> Result<Vec<Bytes>, RemoteError> {
        let dl = tokio::time::Instant::from_std(deadline);
        let h = &mut self.handle;
        match ctx
            .rt
            .block_on(async move { tokio::time::timeout_at(dl, h).await })
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(RemoteError::Request {
                url: self.url.clone(),
                msg: format!("the request task failed: {e}"),
            }),
            Err(_) => {
                self.handle.abort();
                Err(RemoteError::Timeout {
                    url: self.url.clone(),
                    after: self.after,
                })
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// An opened remote object.
pub struct RemoteFile {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) obj: Arc<Object>,
    name: PathBuf,
    meta: FileMeta,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("url", &self.obj.url)
            .field("size", &self.obj.size)
            .field("etag", &self.obj.etag)
            .finish()
    }
}

impl RemoteFile {
    pub(crate) fn new(ctx: Arc<Ctx>, obj: Object) -> RemoteFile {
        let meta = ctx.file_meta(Some(obj.last_modified));
        RemoteFile {
            name: PathBuf::from(&obj.url),
            obj: Arc::new(obj),
            ctx,
            meta,
        }
    }

    /// The URL of the object.
    pub fn url(&self) -> &str {
        &self.obj.url
    }

    /// The size when it was opened.
    pub fn size(&self) -> u64 {
        self.obj.size
    }

    /// The ETag when it was opened (every GET must match it).
    pub fn etag(&self) -> Option<&str> {
        self.obj.etag.as_deref()
    }

    /// A reader for one open file of the mount: the bytes `range` of this object (a tensor's
    /// bytes in a data shard, or `0..size()`), with read-ahead while it is read sequentially.
    pub fn reader(self: &Arc<Self>, range: Range<u64>) -> Reader {
        Reader::new(Arc::clone(self), range)
    }

    /// Fills `buf` from `offset`: whole MiB blocks around it through the store's block cache,
    /// no read-ahead. Fails within `remote_timeout`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        let deadline = Instant::now() + self.ctx.timeout;
        self.read_blocks(buf, offset, deadline)
    }

    pub(crate) fn read_blocks(
        &self,
        buf: &mut [u8],
        offset: u64,
        deadline: Instant,
    ) -> Result<(), RemoteError> {
        self.obj.check()?;
        self.obj.check_range(offset, buf.len() as u64)?;
        super::parts::read_blocks(&self.ctx, &self.obj, buf, offset, deadline)
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        // Its cached blocks can no longer be asked for.
        self.ctx.cache.forget(self.obj.id);
    }
}

impl ReadAt for RemoteFile {
    fn len(&self) -> u64 {
        self.obj.size
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> format::Result<()> {
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
        self.obj.changed.load(Ordering::Relaxed)
    }

    fn range_reader(
        self: Arc<Self>,
        range: std::ops::Range<u64>,
    ) -> Option<Arc<dyn crate::source::bytes::RangeReader>> {
        Some(Arc::new(self.reader(range)))
    }
}

impl crate::source::bytes::RangeReader for super::Reader {
    fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), crate::format::FormatError> {
        super::Reader::read_into(self, buf, offset).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_compare_without_quotes() {
        assert_eq!(quoted_etag("abc"), "\"abc\"");
        assert_eq!(quoted_etag("\"abc\""), "\"abc\"");
        assert_eq!(quoted_etag("W/\"abc\""), "W/\"abc\"");
        assert_eq!(bare_etag("\"abc\""), "abc");
        assert_eq!(bare_etag("W/\"abc\""), "abc");
        assert_eq!(bare_etag("abc"), "abc");
        assert_eq!(bare_etag("\""), "\"");
    }
}
