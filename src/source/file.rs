//! Source files (the `.index` and the data shards), opened when the mount starts and read with
//! `pread`, or, for the tensor bytes of a FUSE reply, from a mapping of the file
//! ([`super::mapped`]: the reply is written from the file's pages, one copy of each byte).
//!
//! Every `pread` copy is followed by an `fstat` on the open descriptor checking that the file
//! still has the size and modification time it had when it was opened. If not, the read fails
//! (EIO), one line is logged naming the file, and every later read of that file fails the same
//! way. A write updates the modification time before it changes any byte, so a copy that raced
//! with a writer is caught by the check after it. A mapped reply is checked before it is made (a
//! file changed earlier fails it), and in the daemon it is made only while the file's read lease
//! is held ([`super::lease`]): no writer can open the file until the reply is written, and once
//! one asks to, the file is read with `pread` from then on. A mapped page lost to a truncation is
//! EIO, never a crash (the guard of [`super::mapped`]).
//!
//! A file deleted, or replaced by a rename (as TensorFlow and `CheckpointManager` do), changes
//! nothing: the open descriptor still reads the original inode, which is exactly what was
//! mounted.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::parse::{FormatError, ReadAt, ReadError};
use crate::source::bytes::{ByteSource, FileMeta};
use crate::source::lease::{Lease, UnderWay};
use crate::source::mapped::{self, Mapping};

/// What must not change while the file is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        }
    }
}

/// A file's mapping, and the read lease it was made under (`None` outside the daemon).
type Leased = (Arc<Mapping>, Option<Arc<Lease>>);

pub(crate) struct SourceFile {
    file: File,
    path: PathBuf,
    stamp: Stamp,
    meta: FileMeta,
    changed: AtomicBool,
    /// The whole file mapped, made by the first mapped read (`None`: not mappable here), and,
    /// in the daemon, the read lease it is mapped under ([`super::lease`]).
    map: OnceLock<Option<Leased>>,
}

impl SourceFile {
    /// Opens a regular file and records its size and modification time. Never blocks: a FIFO
    /// in a file's place is refused, not waited on.
    pub(crate) fn open(path: &Path) -> io::Result<(Arc<SourceFile>, Metadata)> {
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let f = SourceFile {
            file,
            path: path.to_path_buf(),
            stamp: Stamp::of(&meta),
            meta: FileMeta::of(&meta),
            changed: AtomicBool::new(false),
            map: OnceLock::new(),
        };
        Ok((Arc::new(f), meta))
    }

    fn io_err(e: io::Error) -> FormatError {
        FormatError::Read(ReadError::Os(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn changed_err(&self) -> FormatError {
        FormatError::Read(ReadError::Changed)
    }

    /// Fails if the file no longer has the size and modification time it was opened with; the
    /// first failure is logged, and the file stays failed.
    fn check(&self) -> Result<(), FormatError> {
        if self.changed.load(Ordering::Relaxed) {
            return Err(self.changed_err());
        }
        let now = match self.file.metadata() {
            Ok(m) => Stamp::of(&m),
            Err(e) => return Err(Self::io_err(e)),
        };
        let lost = self
            .map
            .get()
            .and_then(Option::as_ref)
            .is_some_and(|(m, _)| m.damaged());
        if now == self.stamp && !lost {
            return Ok(());
        }
        if !self.changed.swap(true, Ordering::Relaxed) {
            log::error!(
                "{}: changed while mounted (size {} -> {}, mtime {}.{:09} -> {}.{:09}); reads from it fail with EIO until it is mounted again",
                self.path.display(),
                self.stamp.len,
                now.len,
                self.stamp.mtime,
                self.stamp.mtime_nsec,
                now.mtime,
                now.mtime_nsec
            );
        }
        Err(self.changed_err())
    }

    /// Checks that `[offset, offset+len)` lies within the file as opened.
    fn check_range(&self, offset: u64, len: u64) -> Result<(), FormatError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.stamp.len => Ok(()),
            _ => Err(FormatError::Read(ReadError::PastEnd {
                offset,
                len,
                file_len: self.stamp.len,
            })),
        }
    }

    /// `pread` until `len` bytes are in `dst`; `Ok(false)` if the file ended first (see
    /// [`pread_append`]).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    unsafe fn pread_into(&self, dst: *mut u8, len: usize, offset: u64) -> io::Result<bool> {
        let mut done = 0usize;
        while done < len {
            let at = i64::try_from(offset + done as u64)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: the caller guarantees `dst..dst+len` is writable; `done < len`.
            let n =
                unsafe { libc::pread(self.file.as_raw_fd(), dst.add(done).cast(), len - done, at) };
            match n {
                0 => return Ok(false),
                n if n > 0 => done += n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(true)
    }

    /// Fills `buf` from `offset`, then checks the file did not change.
    pub(crate) fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError> {
        self.check_range(offset, buf.len() as u64)?;
        if self.changed.load(Ordering::Relaxed) {
            return Err(self.changed_err());
        }
        // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
        let complete = unsafe { self.pread_into(buf.as_mut_ptr(), buf.len(), offset) }
            .map_err(Self::io_err)?;
        self.check()?;
        if !complete {
            return Err(FormatError::Read(ReadError::Short));
        }
        Ok(())
    }

    /// `len` bytes from `offset` as a slice of the file's mapping, when mapped reads are allowed
    /// on this thread ([`mapped::allowed`]: a FUSE reply's read in the daemon) and, where leases
    /// are taken (the daemon), while the file's read lease is held; else by
    /// [`read_vec`](Self::read_vec). Checked before: the file did not change so far; under the
    /// lease, no writer can open it until the reply's bytes are dropped.
    pub(crate) fn read_bytes(&self, offset: u64, len: usize) -> Result<bytes::Bytes, FormatError> {
        if !mapped::allowed() {
            return self.read_vec(offset, len).map(bytes::Bytes::from);
        }
        self.check_range(offset, len as u64)?;
        let Some((map, lease)) = self.map.get_or_init(|| self.map_leased()) else {
            return self.read_vec(offset, len).map(bytes::Bytes::from);
        };
        // Under a lease: `None` once it is broken (a writer asked to open the file).
        let under_way = match lease.as_ref().map(Lease::enter) {
            Some(None) => return self.read_vec(offset, len).map(bytes::Bytes::from),
            u => u.flatten(),
        };
        self.check()?;
        // In range: checked above against the length mapped.
        let a = offset as usize;
        Ok(bytes::Bytes::from_owner(Slice {
            map: Arc::clone(map),
            a,
            b: a + len,
            _under_way: under_way,
        }))
    }

    /// Maps the file for replies; where leases are taken, only under a read lease (`None`, and
    /// `pread` for every read, when the kernel refuses one).
    fn map_leased(&self) -> Option<Leased> {
        let lease = if crate::source::lease::wanted() {
            match Lease::take(&self.file, &self.path) {
                Ok(l) => Some(l),
                Err(e) => {
                    log::debug!(
                        "{}: no read lease ({e}): tensor bytes are copied with pread and checked after each copy",
                        self.path.display()
                    );
                    return None;
                }
            }
        } else {
            None
        };
        let map = Mapping::new(&self.file, self.stamp.len)?;
        Some((Arc::new(map), lease))
    }

    /// `len` bytes from `offset` in a new buffer (not zeroed first), then checks the file did
    /// not change.
    pub(crate) fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>, FormatError> {
        self.check_range(offset, len as u64)?;
        if self.changed.load(Ordering::Relaxed) {
            return Err(self.changed_err());
        }
        let mut v: Vec<u8> = Vec::with_capacity(len);
        // SAFETY: the capacity is `len` bytes; `pread_into` writes all of them when it returns
        // `Ok(true)`, and only then is the length set.
        let complete =
            unsafe { self.pread_into(v.as_mut_ptr(), len, offset) }.map_err(Self::io_err)?;
        self.check()?;
        if !complete {
            return Err(FormatError::Read(ReadError::Short));
        }
        // SAFETY: see above: all `len` bytes were written.
        unsafe { v.set_len(len) };
        Ok(v)
    }
}

/// Bytes `[a, b)` of a mapping, owned by a reply's `Bytes` (and, under a lease, marking the
/// reply under way until it is dropped).
struct Slice {
    map: Arc<Mapping>,
    a: usize,
    b: usize,
    _under_way: Option<UnderWay>,
}

impl AsRef<[u8]> for Slice {
    fn as_ref(&self) -> &[u8] {
        &self.map.bytes()[self.a..self.b]
    }
}

/// Appends `len` bytes of `file` from `offset` to `v` without zeroing them first (`pread` into
/// its spare capacity); `Ok(false)` if the file ended first (`v` then holds what was read).
pub(crate) fn pread_append(
    file: &File,
    v: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<bool> {
    v.reserve(len);
    let mut done = 0usize;
    while done < len {
        let at = i64::try_from(offset + done as u64)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let spare = v.spare_capacity_mut();
        let want = (len - done).min(spare.len());
        // SAFETY: `spare` is writable for `spare.len() >= want` bytes (reserved above).
        let n = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), want, at) };
        match n {
            0 => return Ok(false),
            n if n > 0 => {
                let n = (n as usize).min(want);
                // SAFETY: `pread` initialised the first `n` bytes of the spare capacity.
                unsafe { v.set_len(v.len() + n) };
                done += n;
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(true)
}

impl ReadAt for SourceFile {
    fn len(&self) -> u64 {
        self.stamp.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError> {
        self.read_into(buf, offset)
    }
}

impl ByteSource for SourceFile {
    fn name(&self) -> &Path {
        &self.path
    }

    fn meta(&self) -> FileMeta {
        self.meta
    }

    fn changed(&self) -> bool {
        self.changed.load(Ordering::Relaxed)
    }

    fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>, FormatError> {
        SourceFile::read_vec(self, offset, len)
    }

    fn read_bytes(&self, offset: u64, len: usize) -> Result<bytes::Bytes, FormatError> {
        SourceFile::read_bytes(self, offset, len)
    }

    fn local_file(&self) -> Option<(&File, u64)> {
        Some((&self.file, self.stamp.len))
    }
}
