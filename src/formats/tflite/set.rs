//! The constant tensors of a TFLite model as a [`TensorSet`](crate::formats::tensors::TensorSet):
//! read in place from the file (inside the flatbuffer or after it), and the quantized ones'
//! float32 mirror (`dequantized/`, [`DeqSet`]).

use super::*;

/// The constant tensors of one subgraph (or of all, for `verify`) as a [`TensorSet`]: positions
/// index `entries`, sorted by key.
pub(crate) struct TflSet {
    pub(super) shared: Arc<Shared>,
    pub(super) path: PathBuf,
    pub(super) entries: Vec<Entry>,
}

/// The attributes of a TFLite tensor (see [`TensorSet::attr_names`]).
const ATTRS: &[&str] = &[
    "user.tfmount.tensor_index",
    "user.tfmount.buffer",
    "user.tfmount.scale",
    "user.tfmount.zero_point",
    "user.tfmount.quantized_dimension",
    "user.tfmount.sparsity",
];

fn join<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

impl TflSet {
    fn entry(&self, pos: u64) -> FsResult<&Entry> {
        usize::try_from(pos)
            .ok()
            .and_then(|i| self.entries.get(i))
            .ok_or(FsError::NotFound)
    }

    fn corrupt(&self, key: &str, msg: String) -> FsError {
        FsError::corrupt(
            format!("tensor {key}"),
            self.path.display(),
            model::bad(msg),
        )
    }

    fn buffer(&self, t: &tfl::Tensor) -> Option<(u64, u64)> {
        usize::try_from(t.buffer)
            .ok()
            .and_then(|b| self.shared.model.buffers.get(b))
            .and_then(Buffer::extent)
    }

    /// The dtype, shape and served size of a tensor, or why it cannot be served.
    fn layout(&self, e: &Entry) -> Result<(DType, Vec<u64>, Served), String> {
        let t = tensor(&self.shared, e).map_err(|e| e.to_string())?;
        let (offset, len) = self.buffer(t).ok_or("it has no data")?;
        let name = tfl::dtype_name(t.dtype).ok_or(format!("TFLite type {} is unknown", t.dtype))?;
        let dtype = DType::from_name(name).ok_or(format!("dtype {name} is unknown"))?;
        let flen = self.shared.file.len();
        if offset.checked_add(len).is_none_or(|end| end > flen) {
            return Err(format!(
                "its buffer {} (bytes {offset}..{}) runs past the end of the file ({flen} bytes)",
                t.buffer,
                offset.saturating_add(len)
            ));
        }
        let shape: Vec<u64> = t
            .shape
            .iter()
            .map(|&d| u64::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("its shape {:?} has a negative dimension", t.shape))?;
        let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if name == "string" {
            let n = elements.ok_or("its shape overflows")?;
            if len > MAX_STRINGS {
                return Err(format!(
                    "a string tensor of {len} bytes (converted in memory up to {MAX_STRINGS})"
                ));
            }
            return Ok((dtype, shape, Served::Strings { offset, len, n }));
        }
        if tfl::packed(t.dtype) {
            return Err(format!(
                "{name} tensors are stored packed (several elements a byte) and are not served"
            ));
        }
        let es = dtype
            .elem_size()
            .ok_or(format!("{name} tensors cannot be served"))? as u64;
        if t.sparsity.is_some() {
            if len % es != 0 {
                return Err(format!(
                    "its sparse buffer of {len} bytes is not a whole number of {es}-byte elements"
                ));
            }
            return Ok((dtype, vec![len / es], Served::Raw { offset, len }));
        }
        let need = elements.and_then(|n| n.checked_mul(es));
        if need != Some(len) {
            return Err(format!(
                "its buffer holds {len} bytes, its shape {:?} of {name} needs {}",
                t.shape,
                need.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
            ));
        }
        Ok((dtype, shape, Served::Raw { offset, len }))
    }

    fn open_entry(&self, e: &Entry) -> FsResult<Arc<Raw>> {
        let (_, _, served) = self.layout(e).map_err(|m| self.corrupt(&e.key, m))?;
        let at = match served {
            Served::Raw { offset, len } => At::File {
                start: offset,
                len,
                reader: OnceLock::new(),
            },
            Served::Strings { offset, len, n } => {
                let bytes = self
                    .shared
                    .file
                    .read_vec(offset, len as usize)
                    .map_err(|err| {
                        FsError::corrupt(format!("tensor {}", e.key), self.path.display(), err)
                    })?;
                let bin = tfl::strings_to_bin(&bytes, n).map_err(|err| {
                    FsError::corrupt(format!("tensor {}", e.key), self.path.display(), err)
                })?;
                At::Memory(bin.into())
            }
        };
        Ok(Arc::new(Raw {
            key: e.key.clone(),
            path: self.path.clone(),
            file: self.shared.file.clone(),
            at,
        }))
    }
}

/// How a tensor's `.bin` is made.
enum Served {
    /// The buffer's bytes as they are.
    Raw { offset: u64, len: u64 },
    /// A string buffer of `n` strings, converted.
    Strings { offset: u64, len: u64, n: u64 },
}

impl TensorSet for TflSet {
    fn path(&self) -> &Path {
        &self.path
    }
    fn meta(&self) -> FileMeta {
        self.shared.meta
    }
    fn source_bytes(&self) -> u64 {
        self.shared.file.len()
    }
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        Ok(seek_sorted(&self.entries, key, |e| e.key.as_bytes()))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.entries.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.entry(pos)?.key.as_bytes().to_vec())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let e = self.entry(pos)?;
        let t = tensor(&self.shared, e)?;
        let key = e.key.as_bytes().to_vec();
        Ok(match self.layout(e) {
            Ok((dtype, shape, served)) => TensorInfo {
                key,
                dtype,
                shape,
                stored: match served {
                    Served::Raw { offset, len } => Some(Stored {
                        shard: 0,
                        offset,
                        size: len,
                        crc32c: None,
                    }),
                    Served::Strings { .. } => None,
                },
                slices: Vec::new(),
            },
            // What the model says, for listings; reading it fails with the reason.
            Err(_) => TensorInfo {
                key,
                dtype: tfl::dtype_name(t.dtype)
                    .and_then(DType::from_name)
                    .unwrap_or(DType(0)),
                shape: t
                    .shape
                    .iter()
                    .map(|&d| u64::try_from(d).unwrap_or(0))
                    .collect(),
                stored: self.buffer(t).map(|(offset, size)| Stored {
                    shard: 0,
                    offset,
                    size,
                    crc32c: None,
                }),
                slices: Vec::new(),
            },
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let e = self.entry(pos)?;
        Ok(self.open_entry(e)?)
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
    fn attr_names(&self) -> &'static [&'static str] {
        ATTRS
    }
    fn attrs(&self, pos: u64) -> FsResult<Vec<Option<String>>> {
        let e = self.entry(pos)?;
        let t = tensor(&self.shared, e)?;
        let q = t.quant.as_ref();
        Ok(vec![
            Some(e.index.to_string()),
            Some(t.buffer.to_string()),
            q.filter(|q| !q.scale.is_empty()).map(|q| join(&q.scale)),
            q.filter(|q| !q.zero_point.is_empty())
                .map(|q| join(&q.zero_point)),
            q.filter(|q| !q.scale.is_empty())
                .map(|q| q.quantized_dimension.to_string()),
            t.sparsity.clone(),
        ])
    }
}

/// Where a tensor's `.bin` bytes are read from.
enum At {
    /// In the file, from `start`, `len` bytes (a remote file's reads go through one read-ahead
    /// reader per opened tensor).
    File {
        start: u64,
        len: u64,
        reader: OnceLock<Option<Arc<dyn RangeReader>>>,
    },
    /// Converted in memory (string tensors).
    Memory(Arc<[u8]>),
}

/// One tensor's bytes.
struct Raw {
    key: String,
    path: PathBuf,
    file: Arc<dyn ByteSource>,
    at: At,
}

impl Raw {
    fn read_raw(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let size = self.size();
        let a = offset.min(size);
        let n = (offset.saturating_add(len as u64).min(size) - a) as usize;
        match &self.at {
            At::Memory(b) => Ok(b
                .get(a as usize..a as usize + n)
                .map(Bytes::copy_from_slice)
                .unwrap_or_default()),
            At::File { start, len, reader } => {
                let reader = reader
                    .get_or_init(|| self.file.clone().range_reader(*start..*start + *len))
                    .as_ref();
                let r = match reader {
                    Some(r) => r.read_bytes(start + a, n),
                    None => self.file.read_bytes(start + a, n),
                };
                r.map_err(|e| {
                    FsError::corrupt(format!("tensor {}", self.key), self.path.display(), e)
                })
            }
        }
    }
}

impl TensorData for Raw {
    fn size(&self) -> u64 {
        match &self.at {
            At::File { len, .. } => *len,
            At::Memory(b) => b.len() as u64,
        }
    }
    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        self.read_raw(offset, len)
    }

    fn in_place(&self) -> Option<crate::formats::tensors::InPlace> {
        match &self.at {
            At::File { start, .. } => Some(crate::formats::tensors::InPlace {
                file: self.file.clone(),
                offset: *start,
            }),
            At::Memory(_) => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// dequantized/
// ---------------------------------------------------------------------------------------------

/// The quantized tensors of a subgraph as float32: `(q - zero_point) * scale`, per channel along
/// `quantized_dimension` when there is more than one scale.
pub(crate) struct DeqSet {
    pub(super) raw: Arc<TflSet>,
    /// Every tensor of the subgraph, the quantized ones dequantized and the others as stored
    /// (`dequantized.safetensors`); else only the quantized ones (`dequantized/`).
    pub(super) all: bool,
}

impl DeqSet {
    /// Whether the tensor at `pos` is one `dequantized/` holds.
    fn quantized(&self, pos: u64) -> FsResult<bool> {
        let e = self.raw.entry(pos)?;
        Ok(tensor(&self.raw.shared, e).is_ok_and(|t| dequantizable(t).is_some()))
    }

    fn params(&self, e: &Entry) -> Result<Dequantize, String> {
        let t = tensor(&self.raw.shared, e).map_err(|e| e.to_string())?;
        let q = dequantizable(t).ok_or("it is not quantized")?;
        let (dtype, shape, _) = self.raw.layout(e)?;
        let es = dtype.elem_size().ok_or("its dtype has no size")?;
        let n = q.scale.len();
        let (inner, channels) = if n == 1 {
            (1u64, 1u64)
        } else {
            let dim = usize::try_from(q.quantized_dimension)
                .ok()
                .filter(|&d| d < shape.len())
                .ok_or(format!(
                    "its quantized dimension {} is not one of its {} dimensions",
                    q.quantized_dimension,
                    shape.len()
                ))?;
            if shape[dim] != n as u64 {
                return Err(format!(
                    "{n} scales for dimension {dim} of {} elements",
                    shape[dim]
                ));
            }
            let inner = shape[dim + 1..]
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or("its shape overflows")?;
            (inner.max(1), n as u64)
        };
        let zero_point = match q.zero_point.len() {
            0 => vec![0; n],
            1 => vec![q.zero_point[0]; n],
            z if z == n => q.zero_point.clone(),
            z => return Err(format!("{n} scales but {z} zero points")),
        };
        Ok(Dequantize {
            es,
            signed: !matches!(tfl::dtype_name(t.dtype), Some("uint8" | "uint16")),
            scale: q.scale.clone(),
            zero_point,
            inner,
            channels,
        })
    }
}

/// How one tensor is dequantized.
struct Dequantize {
    /// Bytes of a quantized element (1, 2, 4, 8).
    es: usize,
    signed: bool,
    scale: Vec<f32>,
    zero_point: Vec<i64>,
    /// Elements a channel's run spans, and the number of channels (1: per tensor).
    inner: u64,
    channels: u64,
}

impl Dequantize {
    fn value(&self, i: u64, b: &[u8]) -> f32 {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let q: i64 = match (self.es, self.signed) {
            (1, true) => i64::from(b[0] as i8),
            (2, true) => i64::from(i16::from_le_bytes([b[0], b[1]])),
            (4, _) => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            (8, _) => i64::from_le_bytes(w),
            _ => i64::from_le_bytes(w),
        };
        let c = ((i / self.inner) % self.channels) as usize;
        let (s, z) = (
            self.scale.get(c).copied().unwrap_or(0.0),
            self.zero_point.get(c).copied().unwrap_or(0),
        );
        ((i128::from(q) - i128::from(z)) as f64 * f64::from(s)) as f32
    }
}

struct DeqData {
    raw: Arc<Raw>,
    d: Dequantize,
    elements: u64,
}

impl TensorData for DeqData {
    fn size(&self) -> u64 {
        self.elements * 4
    }
    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let size = self.size();
        let (a, b) = (
            offset.min(size),
            offset.saturating_add(len as u64).min(size),
        );
        let (ea, eb) = (a / 4, b.div_ceil(4));
        let es = self.d.es as u64;
        let q = self.raw.read_raw(ea * es, ((eb - ea) * es) as usize)?;
        let mut out = Vec::with_capacity(((eb - ea) * 4) as usize);
        for (k, c) in q.chunks_exact(self.d.es).enumerate() {
            out.extend_from_slice(&self.d.value(ea + k as u64, c).to_le_bytes());
        }
        let from = (a - ea * 4) as usize;
        Ok(Bytes::copy_from_slice(
            out.get(from..from + (b - a) as usize).unwrap_or(&[]),
        ))
    }
}

impl TensorSet for DeqSet {
    fn path(&self) -> &Path {
        self.raw.path()
    }
    fn meta(&self) -> FileMeta {
        self.raw.meta()
    }
    fn source_bytes(&self) -> u64 {
        self.raw.source_bytes()
    }
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        self.raw.seek(key)
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        self.raw.next(pos)
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        self.raw.key(pos)
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let i = self.raw.info(pos)?;
        if self.all && !self.quantized(pos)? {
            return Ok(i);
        }
        Ok(TensorInfo {
            dtype: DType::from_name("float32").unwrap_or(DType(1)),
            stored: None,
            ..i
        })
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        if self.all && !self.quantized(pos)? {
            return self.raw.open(pos);
        }
        let e = self.raw.entry(pos)?;
        let d = self.params(e).map_err(|m| self.raw.corrupt(&e.key, m))?;
        let raw = self.raw.open_entry(e)?;
        let elements = raw.size() / d.es as u64;
        Ok(Arc::new(DeqData { raw, d, elements }))
    }
    fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
        Ok(Vec::new())
    }
}
