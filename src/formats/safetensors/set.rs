//! The tensors of one `.safetensors` file, or of every shard of a sharded set, as a
//! [`TensorSet`](crate::formats::tensors::TensorSet): each read in place by offset from its file
//! (a local file's pages mapped into a FUSE reply, a remote one's ranges fetched as read).

use super::*;

/// One file of the set and its header, or why it cannot be read.
pub(crate) struct Shard {
    pub(crate) path: PathBuf,
    /// Its file name (for messages and `user.tfmount.shard_file`).
    pub(crate) name: String,
    pub(crate) opened: Result<(Arc<dyn ByteSource>, Header), String>,
    /// Whether its file is not there at all (as opposed to there and unreadable).
    pub(crate) missing: bool,
}

impl Shard {
    /// What is wrong with the file's length against its header: cut short (tensors past the
    /// end fail), or bytes after the last tensor's data (which safetensors' reader refuses).
    pub(crate) fn length_problem(&self) -> Option<String> {
        let (f, h) = self.opened.as_ref().ok()?;
        let (len, want) = (f.len(), h.file_len());
        match len.cmp(&want) {
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Less => Some(format!(
                "{}: {len} bytes, its header's tensors end at byte {want}: truncated (the tensors past the end cannot be read)",
                self.path.display()
            )),
            std::cmp::Ordering::Greater => Some(format!(
                "{}: {len} bytes, {} more than its header's tensors end at ({want}); safetensors' reader refuses such a file",
                self.path.display(),
                len - want
            )),
        }
    }
}

/// One tensor: its shard and its place in that shard's header.
pub(crate) struct Entry {
    pub(crate) shard: u32,
    pub(crate) index: u32,
}

/// The tensors of a safetensors checkpoint, by name: positions index `entries`.
pub(crate) struct SafetensorsSet {
    pub(crate) path: PathBuf,
    pub(crate) meta: FileMeta,
    pub(crate) source_bytes: u64,
    pub(crate) shards: Vec<Shard>,
    pub(crate) entries: Vec<Entry>,
    /// Whether it is a sharded set (its tensors get `user.tfmount.shard_file`).
    pub(crate) sharded: bool,
}

/// Attributes of a tensor (`tensors.tsv` columns): safetensors' own dtype name, and the shard
/// file it is in (sharded sets only).
const ATTRS: &[&str] = &["user.tfmount.safetensors_dtype", "user.tfmount.shard_file"];

impl SafetensorsSet {
    fn at(&self, pos: u64) -> FsResult<(&Shard, &Arc<dyn ByteSource>, &Header, &header::Tensor)> {
        let e = usize::try_from(pos)
            .ok()
            .and_then(|i| self.entries.get(i))
            .ok_or(FsError::NotFound)?;
        let s = self.shards.get(e.shard as usize).ok_or(FsError::NotFound)?;
        let (f, h) = s.opened.as_ref().map_err(|_| FsError::NotFound)?;
        let t = h.tensors.get(e.index as usize).ok_or(FsError::NotFound)?;
        Ok((s, f, h, t))
    }

    /// The tensor's name at `pos`.
    pub(crate) fn name(&self, pos: u64) -> FsResult<&str> {
        self.at(pos).map(|(_, _, _, t)| t.name.as_str())
    }

    fn corrupt(&self, file: &Path, key: &str, msg: String) -> FsError {
        FsError::corrupt(
            format!("tensor {key}"),
            file.display(),
            FormatError::BadEntry(msg),
        )
    }
}

impl TensorSet for SafetensorsSet {
    fn path(&self) -> &Path {
        &self.path
    }
    fn meta(&self) -> FileMeta {
        self.meta
    }
    fn source_bytes(&self) -> u64 {
        self.source_bytes
    }
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        let i = self.entries.partition_point(|e| {
            self.shards
                .get(e.shard as usize)
                .and_then(|s| s.opened.as_ref().ok())
                .and_then(|(_, h)| h.tensors.get(e.index as usize))
                .is_some_and(|t| t.name.as_bytes() < key)
        });
        Ok((i < self.entries.len()).then_some(i as u64))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.entries.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.name(pos)?.as_bytes().to_vec())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let (_, _, h, t) = self.at(pos)?;
        let shard = self.entries.get(pos as usize).map_or(0, |e| e.shard);
        Ok(TensorInfo {
            key: t.name.as_bytes().to_vec(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            stored: Some(Stored {
                shard,
                offset: h.data_start().saturating_add(t.begin),
                size: t.end - t.begin,
                crc32c: None,
            }),
            slices: Vec::new(),
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let (s, f, h, t) = self.at(pos)?;
        if let Some(why) = t.unserved() {
            return Err(self.corrupt(&s.path, &t.name, why));
        }
        let start = h.data_start().saturating_add(t.begin);
        let size = t.end - t.begin;
        let end = start.saturating_add(size);
        if end > f.len() {
            return Err(self.corrupt(
                &s.path,
                &t.name,
                format!(
                    "its data runs past the end of the file (bytes {start}..{end}, the file has {})",
                    f.len()
                ),
            ));
        }
        Ok(Arc::new(InFile {
            key: t.name.clone(),
            path: s.path.clone(),
            file: f.clone(),
            start,
            size,
            reader: OnceLock::new(),
        }))
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
    /// Every shard there, and every file as long as its header says (a file being copied in is
    /// not complete).
    fn complete(&self) -> bool {
        self.shards.iter().all(|s| {
            s.opened
                .as_ref()
                .is_ok_and(|(f, h)| f.len() >= h.file_len())
        })
    }
    /// A sharded set's shards (the files its index names).
    fn part_files(&self) -> Vec<PathBuf> {
        if self.sharded {
            self.shards.iter().map(|s| s.path.clone()).collect()
        } else {
            Vec::new()
        }
    }
    fn attr_names(&self) -> &'static [&'static str] {
        ATTRS
    }
    fn attrs(&self, pos: u64) -> FsResult<Vec<Option<String>>> {
        let (s, _, _, t) = self.at(pos)?;
        Ok(vec![
            Some(t.st_dtype.to_string()),
            self.sharded.then(|| s.name.replace(['\t', '\n'], " ")),
        ])
    }
}

/// A tensor's bytes in its file: served as stored (safetensors holds them row-major,
/// little-endian, as tfmount's `.bin`).
struct InFile {
    key: String,
    path: PathBuf,
    file: Arc<dyn ByteSource>,
    start: u64,
    size: u64,
    reader: OnceLock<Option<Arc<dyn RangeReader>>>,
}

impl TensorData for InFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn in_place(&self) -> Option<tensors::InPlace> {
        Some(tensors::InPlace {
            file: self.file.clone(),
            offset: self.start,
        })
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let a = offset.min(self.size);
        let b = offset.saturating_add(len as u64).min(self.size);
        let reader = self
            .reader
            .get_or_init(|| {
                self.file
                    .clone()
                    .range_reader(self.start..self.start + self.size)
            })
            .as_ref();
        let n = (b - a) as usize;
        match reader {
            Some(r) => r.read_bytes(self.start + a, n),
            None => self.file.read_bytes(self.start + a, n),
        }
        .map_err(|e| FsError::corrupt(format!("tensor {}", self.key), self.path.display(), e))
    }

    fn prefetch(&self) {
        let reader = self.reader.get_or_init(|| {
            self.file
                .clone()
                .range_reader(self.start..self.start + self.size)
        });
        if let Some(r) = reader {
            r.prefetch();
        }
    }
}
