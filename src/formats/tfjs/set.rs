//! The weights of a TF.js model as a [`TensorSet`](crate::formats::tensors::TensorSet): read in
//! place from the shards' byte stream (across a shard boundary where a weight crosses one),
//! quantized weights decoded, string weights in tfmount's string layout.

use super::*;

/// The weights of a TF.js model as a [`TensorSet`]: positions index `weights`, sorted by name.
pub(crate) struct TfjsSet {
    pub(super) path: PathBuf,
    pub(super) meta: FileMeta,
    pub(super) streams: Vec<Arc<Stream>>,
    pub(super) weights: Vec<Placed>,
    pub(super) source_bytes: u64,
}

/// Attributes of a weight (`tensors.tsv` columns): its stored form and where it lies.
const ATTRS: &[&str] = &[
    "user.tfmount.quantization",
    "user.tfmount.scale",
    "user.tfmount.min",
    "user.tfmount.original_dtype",
    "user.tfmount.shards",
];

impl TfjsSet {
    fn placed(&self, pos: u64) -> FsResult<&Placed> {
        usize::try_from(pos)
            .ok()
            .and_then(|i| self.weights.get(i))
            .ok_or(FsError::NotFound)
    }

    fn corrupt(&self, key: &str, e: FormatError) -> FsError {
        FsError::corrupt(format!("tensor {key}"), self.path.display(), e)
    }

    fn stream(&self, p: &Placed) -> FsResult<&Arc<Stream>> {
        self.streams.get(p.group).ok_or(FsError::NotFound)
    }
}

impl TensorSet for TfjsSet {
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
        Ok(seek_sorted(&self.weights, key, |w| {
            w.weight.name.as_bytes()
        }))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.weights.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.placed(pos)?.weight.name.as_bytes().to_vec())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let p = self.placed(pos)?;
        let w = &p.weight;
        // Stored in place: an unquantized fixed-size weight within one sound shard.
        let stored = match (&p.at, &w.quant, w.dtype) {
            (Ok((a, b)), None, d) if d != WDtype::String => {
                let s = self.stream(p)?;
                let mut t = s.touching(*a, *b);
                match (t.next(), t.next()) {
                    (Some(sh), None) if sh.damage.is_none() && s.unplaced.is_none() => {
                        Some(Stored {
                            shard: sh.global,
                            offset: a - sh.start,
                            size: b - a,
                            crc32c: None,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(TensorInfo {
            key: w.name.as_bytes().to_vec(),
            dtype: w.dtype.dtype(),
            shape: w.shape.clone(),
            stored,
            slices: Vec::new(),
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let p = self.placed(pos)?;
        let w = &p.weight;
        let bad = |m: String| self.corrupt(&w.name, FormatError::BadEntry(m));
        let (a, b) = p.at.clone().map_err(bad)?;
        if let Some(why) = w.undecodable() {
            return Err(bad(why));
        }
        let base = Weighted {
            key: w.name.clone(),
            path: self.path.clone(),
            stream: self.stream(p)?.clone(),
            start: a,
            stored: b - a,
        };
        match (&w.quant, w.dtype) {
            (Some(q), _) => Ok(Arc::new(Dequantized {
                size: w.elements() * 4,
                quant: q.clone(),
                dtype: w.dtype,
                at: base,
            })),
            (None, WDtype::String) => {
                let mut raw = vec![0u8; (b - a) as usize];
                base.raw(&mut raw, 0)?;
                let served = string_layout(&raw, w.elements()).map_err(bad)?;
                Ok(Arc::new(Memory(served)))
            }
            (None, _) => Ok(Arc::new(InPlace(base))),
        }
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
    fn complete(&self) -> bool {
        self.streams.iter().all(|s| {
            s.unplaced.is_none()
                && s.needed.is_some()
                && s.shards
                    .iter()
                    .all(|sh| sh.file.is_ok() && sh.damage.is_none())
        })
    }
    /// Its shards below its manifest's directory (one named out of it is never read).
    fn part_files(&self) -> Vec<PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        self.streams
            .iter()
            .flat_map(|s| &s.shards)
            .filter(|sh| {
                sh.path
                    .strip_prefix(dir)
                    .ok()
                    .and_then(|r| r.to_str())
                    .is_some_and(ft::safe_shard_path)
            })
            .map(|sh| sh.path.clone())
            .collect()
    }
    fn attr_names(&self) -> &'static [&'static str] {
        ATTRS
    }
    fn attrs(&self, pos: u64) -> FsResult<Vec<Option<String>>> {
        let p = self.placed(pos)?;
        let q = p.weight.quant.as_ref();
        let shards = match &p.at {
            Ok((a, b)) => {
                let s = self.stream(p)?;
                let names: Vec<String> = s
                    .touching(*a, *b)
                    .map(|sh| {
                        sh.path
                            .file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .replace(['\t', '\n'], " ")
                    })
                    .collect();
                Some(names.join(",")).filter(|s| !s.is_empty())
            }
            Err(_) => None,
        };
        Ok(vec![
            q.map(|q| q.stored.name().to_string()),
            q.and_then(|q| q.scale).map(|s| s.to_string()),
            q.and_then(|q| q.min).map(|m| m.to_string()),
            q.and_then(|q| q.original_dtype.clone())
                .map(|s| s.replace(['\t', '\n'], " ")),
            shards,
        ])
    }
}

/// tfjs's string encoding (each element a 4-byte length and its bytes) in tfmount's string
/// layout (each element an 8-byte little-endian length and its bytes).
fn string_layout(raw: &[u8], n: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(raw.len().saturating_add(4 * n as usize));
    let mut at = 0usize;
    for i in 0..n {
        let len = raw
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| format!("string element {i}: its length lies past the weight"))?;
        let s = raw
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| format!("string element {i}: {len} bytes run past the weight"))?;
        out.extend_from_slice(&(len as u64).to_le_bytes());
        out.extend_from_slice(s);
        at += 4 + len;
    }
    Ok(out)
}

/// A weight's stored bytes in its group's stream.
struct Weighted {
    key: String,
    path: PathBuf,
    stream: Arc<Stream>,
    start: u64,
    stored: u64,
}

impl Weighted {
    /// Stored bytes `[offset, offset + buf.len())` of the weight.
    fn raw(&self, buf: &mut [u8], offset: u64) -> FsResult<()> {
        self.stream
            .read(buf, self.start.saturating_add(offset))
            .map_err(|e| FsError::corrupt(format!("tensor {}", self.key), self.path.display(), e))
    }
}

/// An unquantized fixed-size weight: its stored bytes are its served bytes.
struct InPlace(Weighted);

impl TensorData for InPlace {
    fn size(&self) -> u64 {
        self.0.stored
    }

    fn in_place(&self) -> Option<tensors::InPlace> {
        let w = &self.0;
        let (file, offset) = w.stream.in_one_file(w.start, w.stored)?;
        Some(tensors::InPlace { file, offset })
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let w = &self.0;
        let a = offset.min(w.stored);
        let b = offset.saturating_add(len as u64).min(w.stored);
        // A read within one undamaged shard (most are: shards are 4 MiB, reads at most 1 MiB):
        // the file's bytes as it gives them, in a FUSE reply a local file's own pages (no copy
        // in the daemon); one across two shards is assembled.
        if let Some((file, at)) = w.stream.in_one_file(w.start.saturating_add(a), b - a) {
            return file.read_bytes(at, (b - a) as usize).map_err(|e| {
                FsError::corrupt(format!("tensor {}", w.key), file.name().display(), e)
            });
        }
        let mut v = vec![0u8; (b - a) as usize];
        w.raw(&mut v, a)?;
        Ok(v.into())
    }
}

/// A quantized weight, decoded as it is read: 4 served bytes per stored element.
struct Dequantized {
    size: u64,
    quant: Quant,
    dtype: WDtype,
    at: Weighted,
}

impl TensorData for Dequantized {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let a = offset.min(self.size);
        let b = offset.saturating_add(len as u64).min(self.size);
        if a == b {
            return Ok(Bytes::new());
        }
        let es = self.quant.stored.size();
        let (ea, eb) = (a / 4, b.div_ceil(4));
        let mut raw = vec![0u8; ((eb - ea) * es) as usize];
        self.at.raw(&mut raw, ea * es)?;
        let mut out = Vec::with_capacity(raw.len() / es as usize * 4);
        ft::decode_quantized(&raw, &self.quant, self.dtype, &mut out).map_err(|e| {
            FsError::corrupt(
                format!("tensor {}", self.at.key),
                self.at.path.display(),
                FormatError::BadEntry(e),
            )
        })?;
        let from = (a - ea * 4) as usize;
        Ok(Bytes::copy_from_slice(
            out.get(from..from + (b - a) as usize).unwrap_or(&[]),
        ))
    }
}
