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

pub(crate) mod model;
mod set;
pub(crate) use set::{DeqSet, TflSet};

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
pub(crate) struct Tflite;

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
pub(crate) struct OpenedTflite {
    set: Arc<TflSet>,
    dequantized: Option<Arc<DeqSet>>,
    /// Every tensor, the quantized ones dequantized (`dequantized.safetensors`).
    dequantized_all: Option<Arc<DeqSet>>,
    files: Vec<(String, Arc<[u8]>)>,
    children: Vec<(String, Arc<dyn Opened>)>,
    shared: Arc<Shared>,
}

/// Opens the model at `path`.
pub(crate) fn open(store: &dyn Store, path: &Path) -> Result<OpenedTflite, SourceError> {
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
    fn no_checksum(&self) -> Option<&'static str> {
        Some("a TFLite model stores no checksum")
    }

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
