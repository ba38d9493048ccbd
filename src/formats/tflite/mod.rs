//! TensorFlow Lite models (`.tflite`) behind the format seam, recognised by the FlatBuffer file
//! identifier `TFL3` at bytes 4..8.
//!
//! Subgraph 0's tensors that hold constant data (a non-empty buffer) are the tensors, keyed by
//! their names; every other subgraph is a child tree `subgraphs/<index>`. A tensor's bytes are
//! read in place from the file: inside the flatbuffer (`Buffer.data`) or after it
//! (`Buffer.offset`/`size`). Quantization parameters are attributes (xattrs, `tensors.tsv`
//! columns); quantized tensors get a float32 mirror, `dequantized/`. Operators, signatures, the
//! model's description and its TFLite metadata (with the associated files zipped onto the model)
//! are text files. See docs/tflite.md.

pub mod model;

use bytes::Bytes;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::integrity::{Generic, Integrity};
use crate::formats::tensors::{
    next_position, seek_sorted, Stored, TensorData, TensorInfo, TensorSet,
};
use crate::formats::tflite::model as tfl;
use crate::formats::tflite::model::{render, Buffer};
use crate::parse::dtype::DType;
use crate::parse::zip as fzip;
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, RangeReader, Store};

/// A string tensor's buffer is converted in memory, up to this size.
pub(crate) const MAX_STRINGS: u64 = 64 << 20;
/// An associated file (a member of the zip appended to the model) is shown up to this size.
pub(crate) const MAX_ASSOCIATED: u64 = 16 << 20;
/// The name of the metadata entry holding the `TFLITE_METADATA` flatbuffer.
const METADATA_NAME: &str = "TFLITE_METADATA";

/// The TFLite format.
pub struct Tflite;

fn sniff(store: &dyn Store, path: &Path) -> bool {
    if !store.is_file(path) {
        return false;
    }
    let Ok(f) = crate::formats::opened(store, path, false) else {
        return false;
    };
    let mut head = [0u8; 8];
    f.read_exact_at(&mut head, 0).is_ok() && tfl::is_tflite(&head)
}

impl Format for Tflite {
    fn name(&self) -> &'static str {
        "TFLite model"
    }

    fn source(&self) -> &'static str {
        "a TensorFlow Lite model (.tflite)"
    }

    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        sniff(store, path).then(|| Detected {
            path: path.to_path_buf(),
            files: Vec::new(),
            format: &Tflite,
        })
    }

    /// Each `.tflite` file whose bytes are a TFLite model, named by its file name.
    fn in_dir(
        &self,
        store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        entries
            .iter()
            .filter(|(_, kind)| *kind == EntryKind::File)
            .filter_map(|(name, _)| {
                let name = name.to_str()?;
                let path = dir.join(name);
                (name.ends_with(".tflite") && sniff(store, &path)).then(|| (name.to_string(), path))
            })
            .collect()
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        open(ctx.store, &found.path).map(|m| Arc::new(m) as Arc<dyn Opened>)
    }
}

/// What every tree of one model shares: the file and the model read from it.
struct Shared {
    path: PathBuf,
    file: Arc<dyn ByteSource>,
    meta: FileMeta,
    model: tfl::Model,
    /// The members of the zip appended to the model (associated files).
    zip: Vec<fzip::Member>,
    /// The `TFLITE_METADATA` text, or why it cannot be shown.
    metadata: Option<Result<String, String>>,
}

/// One tensor of a set: its key and where it is in the model.
#[derive(Clone)]
struct Entry {
    key: String,
    sub: usize,
    index: usize,
}

/// An opened model (subgraph 0), or one of its other subgraphs (a child).
pub struct OpenedTflite {
    set: Arc<TflSet>,
    dequantized: Option<Arc<DeqSet>>,
    /// Every tensor, the quantized ones dequantized (`dequantized.safetensors`).
    dequantized_all: Option<Arc<DeqSet>>,
    files: Vec<(String, Arc<[u8]>)>,
    children: Vec<(String, Arc<dyn Opened>)>,
    shared: Arc<Shared>,
}

/// Opens the model at `path`.
pub fn open(store: &dyn Store, path: &Path) -> Result<OpenedTflite, SourceError> {
    let file = crate::formats::opened(store, path, true).map_err(|err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    // Associated files: a zip appended after the flatbuffer (only where one ends the file).
    let zip = fzip::members(&*file).unwrap_or_default();
    let avoid: Vec<(u64, u64)> = zip
        .iter()
        .map(|m| m.data_offset.saturating_sub(30 + m.name.len() as u64))
        .min()
        .map(|start| vec![(start, file.len())])
        .unwrap_or_default();
    let model = tfl::parse(&*file, &avoid).map_err(|err| SourceError::Format {
        path: path.to_path_buf(),
        err,
    })?;
    let metadata = metadata_text(&*file, &model);
    if let Some(Err(e)) = &metadata {
        log::warn!("{}: {e}", path.display());
    }
    let shared = Arc::new(Shared {
        path: path.to_path_buf(),
        meta: file.meta(),
        file,
        model,
        zip,
        metadata,
    });
    let mut root = subgraph_tree(&shared, 0);
    for k in 1..shared.model.subgraphs.len() {
        let child = subgraph_tree(&shared, k);
        root.children
            .push((format!("subgraphs/{k}"), Arc::new(child) as Arc<dyn Opened>));
    }
    root.files.extend(model_files(&shared));
    Ok(root)
}

/// The bytes of buffer `b`, read whole (metadata buffers), up to `max` bytes.
fn buffer_bytes(
    file: &dyn ByteSource,
    m: &tfl::Model,
    b: u32,
    max: u64,
) -> Result<Vec<u8>, String> {
    let buf = usize::try_from(b)
        .ok()
        .and_then(|i| m.buffers.get(i))
        .ok_or_else(|| format!("buffer {b} does not exist"))?;
    let Some((offset, len)) = buf.extent() else {
        return Ok(Vec::new());
    };
    if len > max {
        return Err(format!(
            "buffer {b}: {len} bytes, more than the {max}-byte limit"
        ));
    }
    file.read_vec(offset, len as usize)
        .map_err(|e| format!("buffer {b}: {e}"))
}

fn metadata_text(file: &dyn ByteSource, m: &tfl::Model) -> Option<Result<String, String>> {
    let (_, b) = m.metadata.iter().find(|(n, _)| n == METADATA_NAME)?;
    Some(
        buffer_bytes(file, m, *b, tfl::MAX_METADATA)
            .and_then(|bytes| tfl::render_metadata(&bytes).map_err(|e| e.to_string()))
            .map_err(|e| format!("{METADATA_NAME}: {e}")),
    )
}

/// The files only the model's root shows: `model.txt`, `signatures.txt`, `metadata.txt`, and the
/// associated files under `metadata/`.
fn model_files(sh: &Shared) -> Vec<(String, Arc<[u8]>)> {
    let m = &sh.model;
    let mut out: Vec<(String, Arc<[u8]>)> = Vec::new();
    let entries: Vec<(String, String)> = m
        .metadata
        .iter()
        .map(|(name, b)| {
            // Short printable text (`min_runtime_version` is NUL-padded): shown.
            let text = match buffer_bytes(&*sh.file, m, *b, 256) {
                Ok(v)
                    if v.first().is_some_and(|&c| c != 0)
                        && v.iter()
                            .rev()
                            .skip_while(|&&c| c == 0)
                            .all(|c| (0x20..0x7f).contains(c)) =>
                {
                    let end = v.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
                    format!("{:?} (buffer {b})", String::from_utf8_lossy(&v[..end]))
                }
                _ => {
                    let len = usize::try_from(*b)
                        .ok()
                        .and_then(|i| m.buffers.get(i))
                        .and_then(Buffer::extent)
                        .map_or(0, |(_, l)| l);
                    format!("{len} bytes (buffer {b})")
                }
            };
            (name.clone(), text)
        })
        .collect();
    out.push((
        "model.txt".into(),
        render::model_txt(m, sh.file.len(), &entries)
            .into_bytes()
            .into(),
    ));
    if !m.signatures.is_empty() {
        out.push((
            "signatures.txt".into(),
            render::signatures_txt(m).into_bytes().into(),
        ));
    }
    if let Some(Ok(text)) = &sh.metadata {
        out.push(("metadata.txt".into(), text.clone().into_bytes().into()));
    }
    let mut names: Vec<String> = Vec::new();
    for member in &sh.zip {
        let name = member_file_name(&member.name);
        if names.contains(&name) {
            log::warn!(
                "{}: associated file {:?} is not shown: another has the same name",
                sh.path.display(),
                member.name
            );
            continue;
        }
        match fzip::read_member(&*sh.file, member, MAX_ASSOCIATED) {
            Ok(b) => {
                out.push((format!("metadata/{name}"), b.into()));
                names.push(name);
            }
            Err(e) => log::warn!(
                "{}: associated file {:?} is not shown: {e}",
                sh.path.display(),
                member.name
            ),
        }
    }
    out
}

/// A zip member's name as one file name: `/` and NUL become `_`, `.`, `..` and the empty name
/// get a leading `_`, at most 200 bytes.
fn member_file_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    if s.is_empty() || s == "." || s == ".." {
        s.insert(0, '_');
    }
    let mut n = s.len().min(200);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s.truncate(n);
    s
}

/// The tree of subgraph `k`: its constant tensors, their dequantized mirror, `subgraph.txt`
/// and `graph/`.
fn subgraph_tree(sh: &Arc<Shared>, k: usize) -> OpenedTflite {
    let path = if k == 0 {
        sh.path.clone()
    } else {
        PathBuf::from(format!("{}[subgraph {k}]", sh.path.display()))
    };
    let entries = entries(sh, k, "");
    let deq: Vec<Entry> = entries
        .iter()
        .filter(|e| tensor(sh, e).is_ok_and(|t| dequantizable(t).is_some()))
        .cloned()
        .collect();
    let set = Arc::new(TflSet {
        shared: sh.clone(),
        path: path.clone(),
        entries,
    });
    let dequantized = (!deq.is_empty()).then(|| {
        Arc::new(DeqSet {
            raw: Arc::new(TflSet {
                shared: sh.clone(),
                path: path.clone(),
                entries: deq,
            }),
            all: false,
        })
    });
    let dequantized_all = dequantized.as_ref().map(|_| {
        Arc::new(DeqSet {
            raw: set.clone(),
            all: true,
        })
    });
    let mut files: Vec<(String, Arc<[u8]>)> = vec![(
        "subgraph.txt".into(),
        render::subgraph_txt(&sh.model, k).into_bytes().into(),
    )];
    for (name, text) in render::operators(&sh.model, k) {
        files.push((format!("graph/{name}"), text.into_bytes().into()));
    }
    OpenedTflite {
        set,
        dequantized,
        dequantized_all,
        files,
        children: Vec::new(),
        shared: sh.clone(),
    }
}

/// The tensor an entry names (entries are made from the model's own tensors: it exists).
fn tensor<'a>(sh: &'a Shared, e: &Entry) -> FsResult<&'a tfl::Tensor> {
    sh.model
        .subgraphs
        .get(e.sub)
        .and_then(|s| s.tensors.get(e.index))
        .ok_or(FsError::NotFound)
}

/// The tensors of subgraph `k` that hold data, keyed `prefix` + name (a tensor without a name:
/// `#<index>`; names that repeat: `<name>#<index>`), sorted.
fn entries(sh: &Shared, k: usize, prefix: &str) -> Vec<Entry> {
    let Some(sg) = sh.model.subgraphs.get(k) else {
        return Vec::new();
    };
    let with_data: Vec<(usize, &tfl::Tensor)> = sg
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            usize::try_from(t.buffer)
                .ok()
                .and_then(|b| sh.model.buffers.get(b))
                .is_some_and(|b| b.extent().is_some())
        })
        .collect();
    let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (_, t) in &with_data {
        *count.entry(t.name.as_str()).or_default() += 1;
    }
    let mut out: Vec<Entry> = with_data
        .iter()
        .map(|&(index, t)| {
            let name = if t.name.is_empty() || count.get(t.name.as_str()) > Some(&1) {
                format!("{}#{index}", t.name)
            } else {
                t.name.clone()
            };
            Entry {
                key: format!("{prefix}{name}"),
                sub: k,
                index,
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    let before = out.len();
    out.dedup_by(|a, b| a.key == b.key);
    if out.len() < before {
        log::warn!(
            "{}: subgraph {k}: {} tensors not shown: their names repeat others' after numbering",
            sh.path.display(),
            before - out.len()
        );
    }
    out
}

/// The quantization a dequantized mirror applies to `t`: its `(scales, zero points)`, when
/// it is an integer tensor (int8, uint8, int16, uint16, int32, int64) with scales, dense, and
/// not of a custom quantization.
fn dequantizable(t: &tfl::Tensor) -> Option<&tfl::Quant> {
    let q = t.quant.as_ref()?;
    let int = matches!(
        tfl::dtype_name(t.dtype),
        Some("int8" | "uint8" | "int16" | "uint16" | "int32" | "int64")
    );
    (int && !q.scale.is_empty() && q.details.is_none() && t.sparsity.is_none()).then_some(q)
}

impl Opened for OpenedTflite {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    fn tensor_dirs(&self) -> Vec<(String, Arc<dyn TensorSet>)> {
        self.dequantized
            .iter()
            .map(|d| ("dequantized".to_string(), d.clone() as Arc<dyn TensorSet>))
            .collect()
    }

    fn safetensors_views(&self) -> Vec<(String, Arc<dyn TensorSet>)> {
        self.dequantized_all
            .iter()
            .map(|d| {
                (
                    "dequantized.safetensors".to_string(),
                    d.clone() as Arc<dyn TensorSet>,
                )
            })
            .collect()
    }

    fn children(&self) -> Vec<(String, Arc<dyn Opened>)> {
        self.children.clone()
    }

    /// Every subgraph's tensors read through the generic checks (other subgraphs' keys under
    /// `subgraphs/<index>/`), then: every buffer's extent lies in the file, `TFLITE_METADATA`
    /// verifies, and each associated file matches its zip CRC-32.
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let sh = self.shared.clone();
        let mut all = Vec::new();
        for k in 0..sh.model.subgraphs.len() {
            let prefix = if k == 0 {
                String::new()
            } else {
                format!("subgraphs/{k}/")
            };
            all.extend(entries(&sh, k, &prefix));
        }
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.dedup_by(|a, b| a.key == b.key);
        let set = Arc::new(TflSet {
            shared: sh.clone(),
            path: sh.path.clone(),
            entries: all,
        });
        let mut g = Generic::new(set, Vec::new());
        let s = sh.clone();
        // Offsets only: reads no byte, so adds none to the count (the tensors' reads count theirs).
        g = g.with_file_check(Box::new(move || {
            let len = s.file.len();
            for (i, b) in s.model.buffers.iter().enumerate() {
                if let Some((offset, n)) = b.extent() {
                    if offset.checked_add(n).is_none_or(|e| e > len) {
                        return (
                            b"[buffers]".to_vec(),
                            Err(format!(
                                "{}: buffer {i} (bytes {offset}..{}) runs past the end of the file ({len} bytes)",
                                s.path.display(),
                                offset.saturating_add(n)
                            )),
                        );
                    }
                }
            }
            (b"[buffers]".to_vec(), Ok(0))
        }));
        if let Some(md) = sh.metadata.clone() {
            let p = sh.path.clone();
            // The metadata buffer's bytes, read and verified when the model was opened.
            let read = sh
                .model
                .metadata
                .iter()
                .find(|(n, _)| n == METADATA_NAME)
                .and_then(|(_, b)| sh.model.buffers.get(usize::try_from(*b).ok()?))
                .and_then(|b| b.extent())
                .map_or(0, |(_, n)| n);
            g = g.with_file_check(Box::new(move || {
                let r = match &md {
                    Ok(_) => Ok(read),
                    Err(e) => Err(format!("{}: {e}", p.display())),
                };
                (format!("[{METADATA_NAME}]").into_bytes(), r)
            }));
        }
        for m in sh.zip.clone() {
            let s = sh.clone();
            g = g.with_file_check(Box::new(move || {
                let label = format!("[metadata/{}]", m.name).into_bytes();
                let r = if m.stored() {
                    fzip::check_crc(&*s.file, &m).map(|()| m.size)
                } else {
                    fzip::read_member(&*s.file, &m, MAX_ASSOCIATED).map(|b| b.len() as u64)
                };
                (
                    label,
                    r.map_err(|e| format!("{}: associated file {}: {e}", s.path.display(), m.name)),
                )
            }));
        }
        Box::new(g)
    }
}

/// The constant tensors of one subgraph (or of all, for `verify`) as a [`TensorSet`]: positions
/// index `entries`, sorted by key.
pub(crate) struct TflSet {
    shared: Arc<Shared>,
    path: PathBuf,
    entries: Vec<Entry>,
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
    raw: Arc<TflSet>,
    /// Every tensor of the subgraph, the quantized ones dequantized and the others as stored
    /// (`dequantized.safetensors`); else only the quantized ones (`dequantized/`).
    all: bool,
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
