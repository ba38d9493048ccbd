//! The datasets of a Keras file as a [`TensorSet`](crate::formats::tensors::TensorSet): each
//! contiguous dataset read in place by offset (in the file, or inside a stored `.keras` member,
//! checked while served), compact and chunked ones decoded whole.

use super::*;

/// The datasets of a Keras file as a [`TensorSet`]: positions are indexes into `datasets`,
/// sorted by key.
pub(crate) struct KerasSet {
    pub(super) path: PathBuf,
    pub(super) meta: FileMeta,
    pub(super) file: Arc<dyn ByteSource>,
    pub(super) bytes: Hdf5Bytes,
    pub(super) h5: Index,
    pub(super) datasets: Vec<DatasetInfo>,
    /// The stored `.keras` member's check (not with `-o nocrc`).
    pub(super) check: Option<Arc<MemberCheck>>,
    /// Whether the check streams ([`MemberCheck`]): a local file, not `-o crc_first`.
    pub(super) stream: bool,
}

impl KerasSet {
    fn dataset(&self, pos: u64) -> FsResult<&DatasetInfo> {
        usize::try_from(pos)
            .ok()
            .and_then(|i| self.datasets.get(i))
            .ok_or(FsError::NotFound)
    }

    fn corrupt(&self, key: &str, e: FormatError) -> FsError {
        FsError::corrupt(format!("tensor {key}"), self.path.display(), e)
    }

    /// Where a contiguous dataset's bytes lie in the file, when they are in the file.
    pub(super) fn in_file(&self, d: &DatasetInfo) -> Option<(u64, u64)> {
        match (&d.layout, &self.bytes) {
            (Layout::Contiguous { offset, size }, Hdf5Bytes::InFile { base, .. }) => {
                Some((base.saturating_add(*offset), *size))
            }
            _ => None,
        }
    }
}

impl TensorSet for KerasSet {
    fn path(&self) -> &Path {
        &self.path
    }
    fn meta(&self) -> FileMeta {
        self.meta
    }
    fn source_bytes(&self) -> u64 {
        self.file.len()
    }
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        Ok(seek_sorted(&self.datasets, key, |d| d.path.as_bytes()))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.datasets.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.dataset(pos)?.path.as_bytes().to_vec())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let d = self.dataset(pos)?;
        Ok(TensorInfo {
            key: d.path.as_bytes().to_vec(),
            dtype: d.dtype,
            shape: d.shape.clone(),
            stored: self.in_file(d).map(|(offset, size)| Stored {
                shard: 0,
                offset,
                size,
                crc32c: None,
            }),
            slices: Vec::new(),
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let d = self.dataset(pos)?;
        let es = d.dtype.elem_size().ok_or_else(|| {
            self.corrupt(
                &d.path,
                FormatError::BadEntry(format!("dtype {} cannot be served", d.dtype.display_name())),
            )
        })? as u64;
        // A shape whose size overflows is damage, not a file of 2^64 - 1 bytes.
        let size = d
            .shape
            .iter()
            .try_fold(es, |a, &n| a.checked_mul(n))
            .ok_or_else(|| {
                self.corrupt(
                    &d.path,
                    FormatError::BadEntry(format!(
                        "its shape {:?} of {}-byte elements overflows",
                        d.shape, es
                    )),
                )
            })?;
        let swap = if d.big_endian && es > 1 {
            es as usize
        } else {
            0
        };
        match (&d.layout, &self.bytes) {
            (
                Layout::Contiguous {
                    offset,
                    size: stored,
                },
                bytes,
            ) => {
                if *stored < size {
                    return Err(self.corrupt(
                        &d.path,
                        FormatError::BadEntry(format!(
                            "its data holds {stored} bytes, its shape and dtype need {size}"
                        )),
                    ));
                }
                let end = offset.saturating_add(size);
                if end > bytes.len() {
                    return Err(self.corrupt(
                        &d.path,
                        FormatError::BadEntry(format!(
                            "its data runs past the end of the file ({end} bytes needed, {} present)",
                            bytes.len()
                        )),
                    ));
                }
                // A streamed check starts now and is waited for by the read that ends the
                // dataset; otherwise the member is checked before its first byte is served.
                let check = match &self.check {
                    Some(c) if self.stream => {
                        c.start();
                        c.admit(&d.path, false)?;
                        Some(c.clone())
                    }
                    Some(c) => {
                        c.check(&d.path)?;
                        None
                    }
                    None => None,
                };
                let at = match bytes {
                    Hdf5Bytes::InFile { file, base, .. } => At::File {
                        file: file.clone(),
                        start: base + offset,
                        reader: std::sync::OnceLock::new(),
                    },
                    Hdf5Bytes::Memory(b) => At::Memory(b.clone(), *offset),
                };
                Ok(Arc::new(Contiguous {
                    key: d.path.clone(),
                    path: self.path.clone(),
                    size,
                    swap,
                    at,
                    check,
                }))
            }
            (Layout::Unallocated, _) => Ok(Arc::new(Zeros(size))),
            _ => {
                if let Some(c) = &self.check {
                    c.check(&d.path)?;
                }
                let data = self
                    .h5
                    .read_whole(d, MAX_DECODED)
                    .map_err(|e| self.corrupt(&d.path, e))?;
                if (data.len() as u64) < size {
                    return Err(self.corrupt(
                        &d.path,
                        FormatError::BadEntry(format!(
                            "{} bytes decoded, its shape and dtype need {size}",
                            data.len()
                        )),
                    ));
                }
                Ok(Arc::new(Contiguous {
                    key: d.path.clone(),
                    path: self.path.clone(),
                    size,
                    swap,
                    at: At::Memory(data.into(), 0),
                    check: None,
                }))
            }
        }
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
    /// Whether the file was completely written: its superblock's end-of-file address is its
    /// length. HDF5 writes the superblock first with a provisional end (2 KiB) and rewrites it
    /// with the real one as the last write of closing the file, so a file being written (or a
    /// copy still in progress, whose superblock says where it will end) is not complete.
    fn complete(&self) -> bool {
        self.h5.eof() == self.bytes.len()
    }
}

/// Where a dataset's bytes are read from.
enum At {
    File {
        file: Arc<dyn ByteSource>,
        start: u64,
        reader: std::sync::OnceLock<Option<Arc<dyn RangeReader>>>,
    },
    Memory(Arc<[u8]>, u64),
}

/// A dataset's bytes in one piece (in the file, or decoded in memory), byte-swapped to
/// little-endian when stored big-endian.
struct Contiguous {
    key: String,
    path: PathBuf,
    size: u64,
    /// Element size to swap (0: stored little-endian).
    swap: usize,
    at: At,
    /// The member's check, when it streams: each read admitted by it ([`MemberCheck::admit`]).
    check: Option<Arc<MemberCheck>>,
}

impl Contiguous {
    fn raw(&self, a: u64, len: usize) -> FsResult<bytes::Bytes> {
        let r = match &self.at {
            At::Memory(b, base) => {
                let from = usize::try_from(base + a).unwrap_or(usize::MAX);
                b.get(from..from.saturating_add(len))
                    .map(bytes::Bytes::copy_from_slice)
                    .ok_or_else(|| FormatError::BadEntry("past the end of the data".into()))
            }
            At::File {
                file,
                start,
                reader,
            } => {
                let reader = reader
                    .get_or_init(|| file.clone().range_reader(*start..*start + self.size))
                    .as_ref();
                match reader {
                    Some(r) => r.read_bytes(start + a, len),
                    None => file.read_bytes(start + a, len),
                }
            }
        };
        r.map_err(|e| FsError::corrupt(format!("tensor {}", self.key), self.path.display(), e))
    }
}

impl TensorData for Contiguous {
    fn size(&self) -> u64 {
        self.size
    }

    fn in_place(&self) -> Option<crate::formats::tensors::InPlace> {
        match &self.at {
            At::File { file, start, .. } if self.swap == 0 => {
                Some(crate::formats::tensors::InPlace {
                    file: file.clone(),
                    offset: *start,
                })
            }
            _ => None,
        }
    }

    fn check_in_place(&self, _bytes: &[u8]) -> FsResult<()> {
        match &self.check {
            Some(c) => c.check(&self.key),
            None => Ok(()),
        }
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<bytes::Bytes> {
        let a = offset.min(self.size);
        let b = offset.saturating_add(len as u64).min(self.size);
        if let Some(c) = &self.check {
            c.admit(&self.key, b == self.size)?;
        }
        if self.swap == 0 {
            return self.raw(a, (b - a) as usize);
        }
        // Whole elements, swapped, then the bytes asked for.
        let es = self.swap as u64;
        let (ea, eb) = (a / es * es, b.div_ceil(es) * es);
        let mut v = Vec::from(self.raw(ea, (eb - ea) as usize)?);
        for e in v.chunks_exact_mut(self.swap) {
            e.reverse();
        }
        let from = (a - ea) as usize;
        Ok(v.get(from..from + (b - a) as usize)
            .unwrap_or(&[])
            .to_vec()
            .into())
    }
}

/// A dataset with no data written: its fill value, zeros.
struct Zeros(u64);

impl TensorData for Zeros {
    fn size(&self) -> u64 {
        self.0
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<bytes::Bytes> {
        let n = self.0.saturating_sub(offset).min(len as u64);
        Ok(vec![0u8; n as usize].into())
    }
}
