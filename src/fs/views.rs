//! The generated files at the root of every checkpoint's tree, beside `variables/`:
//! `model.safetensors` (every tensor safetensors can hold, as one file served piece by piece from
//! the tensors' own bytes), `weights.safetensors` (the same for the model's weights only, under
//! the names users know), `tensors.tsv` (one line per tensor, streamed) and `summary.txt`
//! (totals and tables), over any [`TensorSet`].
//!
//! Nothing is computed until a file's size is first asked for; then one pass over the index
//! (`info` of each tensor, no tensor data read — except the served size of string and variant
//! tensors, which `tensors.tsv` and `summary.txt` show and which only their data gives). What the
//! pass yields is kept: the safetensors layout (header bytes and 16 bytes per tensor), sparse
//! marks into `tensors.tsv` (one per [`TSV_MARK_EVERY`] lines), the text of `summary.txt`.
//! A tensor whose index entry is damaged is left out of all three (and logged).

use crate::sync::lock;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{FsError, FsResult};
use crate::formats::names::{LazyNames, Names};
use crate::formats::tensors::{attr_column, walk, TensorData, TensorInfo, TensorSet};
use crate::fs::fixed::Generated;
use crate::fs::subtree::{slice_of, Content};
use crate::namespace;
use crate::parse::safetensors::{Layout, Part, TensorRecord as StRecord};
use crate::parse::FormatError;
use crate::render::summary::{tsv_extra, tsv_line, Summary, TensorRecord, TSV_HEADER};

/// `tensors.tsv` keeps where every this many lines start.
pub(crate) const TSV_MARK_EVERY: u64 = 512;
/// Opened tensors `model.safetensors` keeps (the ones being streamed, and those fetched ahead).
const OPEN_TENSORS: usize = 12;
/// How far `model.safetensors` fetches the next tensors ahead of a read that enters one (where
/// their bytes come from a network: [`TensorData::prefetch`]): tensors up to this many bytes,
/// and at most this many tensors.
const AHEAD_BYTES: u64 = 64 << 20;
const AHEAD_TENSORS: usize = 8;

/// A `*.safetensors` file of `set`'s tensors, as `model.safetensors` is of a checkpoint's.
pub(crate) fn safetensors_of(set: Arc<dyn TensorSet>) -> Arc<dyn Generated> {
    Arc::new(Safetensors::new(set))
}

/// The root files of a checkpoint's tree, by name, in listing order, each with whether it is a
/// derived view (the tensors' bytes again: listed only with `-o views=visible`). `names`: the
/// `(name, key)` pairs of the checkpoint's `names/`, which `weights.safetensors` names the
/// weights by.
/// `cache`: where the store keeps what is read ([`crate::source::bytes::Store::cache_words`]), said at the end of
/// `summary.txt`.
pub(crate) fn root_files(
    set: &Arc<dyn TensorSet>,
    names: Arc<LazyNames>,
    views: Vec<String>,
    cache: Option<String>,
) -> Vec<(&'static [u8], Arc<dyn Generated>, bool)> {
    vec![
        (
            &b"model.safetensors"[..],
            Arc::new(Safetensors::new(set.clone())) as Arc<dyn Generated>,
            true,
        ),
        (
            b"weights.safetensors",
            Arc::new(Safetensors::weights(set.clone(), names)),
            true,
        ),
        (b"tensors.tsv", Arc::new(Tsv::new(set.clone())), false),
        (
            b"summary.txt",
            Arc::new(SummaryFile::new(set.clone(), views, cache)),
            false,
        ),
    ]
}

/// A failure of generating `file` of the checkpoint at `set`'s path.
fn failed(set: &dyn TensorSet, file: &str, msg: String) -> FsError {
    FsError::corrupt(file, set.path().display(), FormatError::Text(msg))
}

/// The path of a tensor's `.bin` relative to its checkpoint's root (see [`file_path`]).
pub(crate) fn bin_path(key: &[u8]) -> Vec<u8> {
    file_path(key, namespace::FileKind::Bin)
}

/// The path of a tensor's file of `kind` relative to its checkpoint's root: `variables/` and
/// the escaped key (each `/`-separated component escaped as a directory, the last as a file),
/// then the kind's suffix.
pub(crate) fn file_path(key: &[u8], kind: namespace::FileKind) -> Vec<u8> {
    let mut p = b"variables/".to_vec();
    let comps: Vec<&[u8]> = key.split(|&b| b == b'/').collect();
    let last = comps.len() - 1;
    for (i, c) in comps.iter().enumerate() {
        p.extend_from_slice(&namespace::escape(c, i < last));
        if i < last {
            p.push(b'/');
        }
    }
    p.extend_from_slice(kind.suffix().as_bytes());
    p
}

/// One tensor as `tensors.tsv` and `summary.txt` show it.
struct Rec {
    info: TensorInfo,
    nbytes: u64,
    path: Vec<u8>,
    /// The format's attributes ([`TensorSet::attrs`]).
    extra: Vec<Option<String>>,
}

impl Rec {
    fn record(&self) -> TensorRecord<'_> {
        let stored = self.info.stored;
        TensorRecord {
            key: &self.info.key,
            dtype: self.info.dtype,
            shape: &self.info.shape,
            nbytes: self.nbytes,
            path: &self.path,
            crc32c: stored.and_then(|s| s.crc32c),
            shard: stored.map(|s| s.shard),
            offset: stored.map(|s| s.offset),
        }
    }
}

/// The size of a tensor's `.bin` from its index entry: elements × element size. `None` for
/// dtypes without a fixed element size (string, variant: only their data gives the size).
fn fixed_nbytes(info: &TensorInfo) -> Option<u64> {
    let es = info.dtype.elem_size()? as u64;
    Some(
        info.shape
            .iter()
            .try_fold(es, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX),
    )
}

/// The record of the tensor at `pos`; `None` when its entry (or, for a string or variant
/// tensor, its data) cannot be read.
fn record(set: &dyn TensorSet, pos: u64) -> Option<Rec> {
    let info = set
        .info(pos)
        .inspect_err(|e| log::debug!("{}: left out of the root files: {e}", set.path().display()))
        .ok()?;
    let nbytes = match fixed_nbytes(&info) {
        Some(n) => n,
        None => set
            .open(pos)
            .inspect_err(|e| {
                log::debug!("{}: left out of the root files: {e}", set.path().display())
            })
            .ok()?
            .size(),
    };
    let extra = if set.attr_names().is_empty() {
        Vec::new()
    } else {
        set.attrs(pos).unwrap_or_default()
    };
    Some(Rec {
        path: bin_path(&info.key),
        info,
        nbytes,
        extra,
    })
}

/// Logs once how many tensors a root file leaves out.
fn log_left_out(set: &dyn TensorSet, file: &str, n: u64) {
    if n > 0 {
        log::warn!(
            "{}: {file}: {n} tensor(s) with damaged entries left out",
            set.path().display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// model.safetensors
// ---------------------------------------------------------------------------------------------

/// `model.safetensors`: the layout of [`crate::parse::safetensors`] over the checkpoint's
/// tensors, bytes read through each tensor's [`TensorData`] (CRC-checked, partitioned tensors
/// assembled per request).
pub(crate) struct Safetensors {
    set: Arc<dyn TensorSet>,
    /// `None`: every tensor under its key (`model.safetensors`); else `weights.safetensors`,
    /// with the `names/` pairs that name the weights.
    weights: Option<Arc<LazyNames>>,
    built: OnceLock<Result<Built, String>>,
    /// The tensors read last, by input index: a sequential read of a large tensor resolves it
    /// once.
    open: Mutex<VecDeque<(usize, Arc<dyn TensorData>)>>,
    /// The first input index not yet fetched ahead.
    ahead: std::sync::atomic::AtomicUsize,
}

struct Built {
    layout: Layout,
    /// The set position of each input record.
    pos: Vec<u64>,
}

impl Safetensors {
    pub(crate) fn new(set: Arc<dyn TensorSet>) -> Safetensors {
        Safetensors {
            set,
            weights: None,
            built: OnceLock::new(),
            open: Mutex::new(VecDeque::new()),
            ahead: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// `weights.safetensors`: the model's weights only ([`crate::formats::weights`] says which),
    /// each under the name `names` (the checkpoint's `names/` pairs) gives its key last, else
    /// under its key; laid out and served like `model.safetensors` (built at its first `stat`,
    /// bytes read through each tensor's [`TensorData`]). `__metadata__` adds `"tfmount.keys"`:
    /// a JSON object, as a string, from each name in the file to its checkpoint key (every
    /// weight whose key is UTF-8; a key that is not is left out, named in `"tfmount.excluded"`
    /// by its bytes).
    pub(crate) fn weights(set: Arc<dyn TensorSet>, names: Arc<LazyNames>) -> Safetensors {
        Safetensors {
            weights: Some(names),
            ..Safetensors::new(set)
        }
    }

    fn file_name(&self) -> &'static str {
        match self.weights {
            None => "model.safetensors",
            Some(_) => "weights.safetensors",
        }
    }

    fn built(&self) -> FsResult<&Built> {
        self.built
            .get_or_init(|| match &self.weights {
                None => self.build(),
                Some(names) => self.build_weights(names.names()),
            })
            .as_ref()
            .map_err(|e| failed(&*self.set, self.file_name(), e.clone()))
    }

    /// `weights.safetensors`: one pass over the index for the weights and their names.
    fn build_weights(&self, names: &Names) -> Result<Built, String> {
        let set = &*self.set;
        let file = self.file_name();
        let weights = crate::formats::weights::of_set(set, &names.pairs, &names.aliases)
            .map_err(|e| e.to_string())?;
        let mut infos = Vec::with_capacity(weights.len());
        let mut pos = Vec::with_capacity(weights.len());
        let mut left_out = 0;
        // Names come unique (weights::model_weights); positions from the same pass.
        for (name, _, p) in weights {
            match set.info(p) {
                Ok(info) => {
                    infos.push((name, info));
                    pos.push(p);
                }
                Err(e) => {
                    log::debug!("{}: {file}: {e}", set.path().display());
                    left_out += 1;
                }
            }
        }
        log_left_out(set, file, left_out);
        // The shown name → key map, in file order (keys that are not UTF-8 are left out of the
        // file by the layout, named by their bytes: the record is named by the raw key).
        let mut keys = b"{".to_vec();
        for (name, info) in &infos {
            if let Ok(k) = std::str::from_utf8(&info.key) {
                if keys.len() > 1 {
                    keys.push(b',');
                }
                // serde_json's string writer cannot fail on a Vec.
                let _ = serde_json::to_writer(&mut keys, name);
                keys.push(b':');
                let _ = serde_json::to_writer(&mut keys, k);
            }
        }
        keys.push(b'}');
        let keys = String::from_utf8(keys).map_err(|e| e.to_string())?;
        let records = infos.iter().map(|(name, info)| StRecord {
            name: match std::str::from_utf8(&info.key) {
                Ok(_) => name.as_bytes(),
                Err(_) => &info.key,
            },
            dtype: info.dtype,
            shape: &info.shape,
            nbytes: fixed_nbytes(info).unwrap_or(0),
        });
        let layout = Layout::build_with_metadata(records, &[("tfmount.keys", &keys)])
            .map_err(|e| e.to_string())?;
        Ok(Built { layout, pos })
    }

    /// One pass over the index: names, dtypes and shapes into two arenas, then the layout.
    fn build(&self) -> Result<Built, String> {
        let set = &*self.set;
        let mut keys: Vec<u8> = Vec::new();
        let mut dims: Vec<u64> = Vec::new();
        // Per record: key end, dims end, dtype, nbytes.
        let mut recs: Vec<(usize, usize, crate::parse::dtype::DType, u64)> = Vec::new();
        let mut pos = Vec::new();
        let mut left_out = 0;
        walk(set, |p, _| {
            match set.info(p) {
                Ok(info) => {
                    keys.extend_from_slice(&info.key);
                    dims.extend_from_slice(&info.shape);
                    // Dtypes without a fixed size are left out by the layout whatever the size.
                    let nbytes = fixed_nbytes(&info).unwrap_or(0);
                    recs.push((keys.len(), dims.len(), info.dtype, nbytes));
                    pos.push(p);
                }
                Err(e) => {
                    log::debug!("{}: model.safetensors: {e}", set.path().display());
                    left_out += 1;
                }
            }
            Ok(true)
        })
        .map_err(|e| e.to_string())?;
        log_left_out(set, "model.safetensors", left_out);
        let mut k0 = 0;
        let mut d0 = 0;
        let records = recs.iter().map(|&(k1, d1, dtype, nbytes)| {
            let r = StRecord {
                name: &keys[k0..k1],
                dtype,
                shape: &dims[d0..d1],
                nbytes,
            };
            (k0, d0) = (k1, d1);
            r
        });
        let layout = Layout::build(records).map_err(|e| e.to_string())?;
        Ok(Built { layout, pos })
    }

    /// The opened tensor of input record `index`.
    fn data(&self, b: &Built, index: usize) -> FsResult<Arc<dyn TensorData>> {
        let mut open = lock(&self.open);
        if let Some((_, d)) = open.iter().find(|(i, _)| *i == index) {
            return Ok(d.clone());
        }
        let &p = b.pos.get(index).ok_or(FsError::NotFound)?;
        let d = self.set.open(p)?;
        if open.len() >= OPEN_TENSORS {
            open.pop_front();
        }
        open.push_back((index, d.clone()));
        Ok(d)
    }

    /// Starts fetching the tensors after input record `index` (read-ahead in file order, for
    /// remote sources), once per tensor entered: up to [`AHEAD_BYTES`] and [`AHEAD_TENSORS`].
    fn fetch_ahead(&self, b: &Built, index: usize) {
        use std::sync::atomic::Ordering;
        let from = index + 1;
        if self.ahead.fetch_max(from, Ordering::Relaxed) >= from {
            return;
        }
        let mut bytes = 0;
        for j in from..(from + AHEAD_TENSORS).min(b.pos.len()) {
            if bytes >= AHEAD_BYTES {
                break;
            }
            let Ok(d) = self.data(b, j) else { break };
            d.prefetch();
            bytes += d.size();
        }
    }

    /// Exactly `len` bytes from `offset` of input record `index`'s tensor.
    fn tensor_bytes(&self, b: &Built, index: usize, offset: u64, len: u64) -> FsResult<Bytes> {
        let len = usize::try_from(len).map_err(|_| FsError::NotFound)?;
        let data = self.data(b, index)?;
        if offset == 0 {
            self.fetch_ahead(b, index);
        }
        let bytes = data.read(offset, len)?;
        if bytes.len() != len {
            let key = b.pos.get(index).and_then(|&p| self.set.key(p).ok());
            return Err(failed(
                &*self.set,
                self.file_name(),
                format!(
                    "tensor {}: {} bytes where its shape needs {len}",
                    String::from_utf8_lossy(&key.unwrap_or_default()),
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }
}

impl Generated for Safetensors {
    fn size(&self) -> FsResult<u64> {
        Ok(self.built()?.layout.size())
    }

    fn content(&self) -> Content {
        Content::Tensors
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        let b = self.built()?;
        let mut parts = b.layout.locate(offset, size as u64);
        let first = parts.next();
        let second = parts.next();
        match (first, second) {
            (None, _) => Ok(Bytes::new()),
            // The whole read inside one tensor (most reads of large tensors): no copy.
            (Some(Part::Tensor { index, offset, len }), None) => {
                self.tensor_bytes(b, index, offset, len)
            }
            (Some(first), second) => {
                let mut out = Vec::with_capacity(size.min(1 << 20));
                for part in [first].into_iter().chain(second).chain(parts) {
                    match part {
                        Part::Header(h) => out.extend_from_slice(h),
                        Part::Tensor { index, offset, len } => {
                            out.extend_from_slice(&self.tensor_bytes(b, index, offset, len)?)
                        }
                    }
                }
                Ok(out.into())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tensors.tsv
// ---------------------------------------------------------------------------------------------

/// `tensors.tsv`: its size from one pass generating every line (and counting bytes), then reads
/// generate lines from the nearest mark before them.
pub(crate) struct Tsv {
    set: Arc<dyn TensorSet>,
    /// [`TSV_HEADER`] and the format's attribute columns.
    header: Vec<u8>,
    index: OnceLock<Result<TsvIndex, String>>,
}

struct TsvIndex {
    size: u64,
    /// `(file offset, set position)` of every [`TSV_MARK_EVERY`]-th tensor line.
    marks: Vec<(u64, u64)>,
}

impl Tsv {
    pub(crate) fn new(set: Arc<dyn TensorSet>) -> Tsv {
        let mut header = TSV_HEADER.trim_end_matches('\n').as_bytes().to_vec();
        for name in set.attr_names() {
            header.push(b'\t');
            header.extend_from_slice(attr_column(name).as_bytes());
        }
        header.push(b'\n');
        Tsv {
            set,
            header,
            index: OnceLock::new(),
        }
    }

    /// A tensor's line.
    fn line(&self, r: &Rec, out: &mut Vec<u8>) {
        out.clear();
        tsv_line(&r.record(), out);
        let columns = self.set.attr_names().len();
        if columns > 0 {
            tsv_extra(&r.extra, columns, out);
        }
    }

    fn index(&self) -> FsResult<&TsvIndex> {
        self.index
            .get_or_init(|| self.build())
            .as_ref()
            .map_err(|e| failed(&*self.set, "tensors.tsv", e.clone()))
    }

    fn build(&self) -> Result<TsvIndex, String> {
        let set = &*self.set;
        let mut off = self.header.len() as u64;
        let mut marks = Vec::new();
        let mut n = 0u64;
        let mut left_out = 0;
        let mut line = Vec::new();
        walk(set, |p, _| {
            match record(set, p) {
                Some(r) => {
                    if n % TSV_MARK_EVERY == 0 {
                        marks.push((off, p));
                    }
                    self.line(&r, &mut line);
                    off += line.len() as u64;
                    n += 1;
                }
                None => left_out += 1,
            }
            Ok(true)
        })
        .map_err(|e| e.to_string())?;
        log_left_out(set, "tensors.tsv", left_out);
        Ok(TsvIndex { size: off, marks })
    }
}

impl Generated for Tsv {
    fn size(&self) -> FsResult<u64> {
        Ok(self.index()?.size)
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        let idx = self.index()?;
        let end = offset.saturating_add(size as u64).min(idx.size);
        let mut out = slice_of(&self.header, offset, size).to_vec();
        let mut at = offset + out.len() as u64;
        if at >= end {
            return Ok(out.into());
        }
        // The last mark at or before `at`.
        let i = idx.marks.partition_point(|&(o, _)| o <= at);
        let Some(&(mut off, first)) = i.checked_sub(1).and_then(|i| idx.marks.get(i)) else {
            return Ok(out.into());
        };
        let set = &*self.set;
        let mut pos = Some(first);
        let mut line = Vec::new();
        while let Some(p) = pos {
            if at >= end {
                break;
            }
            if !set.hidden(&set.key(p)?) {
                if let Some(r) = record(set, p) {
                    self.line(&r, &mut line);
                    let line_end = off + line.len() as u64;
                    if line_end > at {
                        let from = (at - off) as usize;
                        let to = (end.min(line_end) - off) as usize;
                        out.extend_from_slice(&line[from..to]);
                        at = off + to as u64;
                    }
                    off = line_end;
                }
            }
            pos = set.next(p)?;
        }
        Ok(out.into())
    }
}

// ---------------------------------------------------------------------------------------------
// summary.txt
// ---------------------------------------------------------------------------------------------

/// `summary.txt`, rendered by one pass and kept (its size is bounded by
/// [`crate::render::summary::MAX_SCOPES`] rows).
pub(crate) struct SummaryFile {
    set: Arc<dyn TensorSet>,
    /// The derived views beside it, as `(path, what it holds)`, listed at its end.
    views: Vec<(String, &'static str)>,
    /// Where the source's bytes are kept (object storage: the disk cache), said last.
    cache: Option<String>,
    text: OnceLock<Result<Vec<u8>, String>>,
}

/// What each derived view holds, in one line of `summary.txt`.
fn view_words(name: &str) -> &'static str {
    match name {
        "text/" => "each tensor's values as text: text/KEY.txt",
        "stats/" => "each tensor's min, max, mean, NaN and zero counts: stats/KEY.txt",
        "names/" => "links from the names you know (variable names, object paths) to variables/",
        "model.safetensors" => "every tensor, keyed as in variables/ (safetensors.safe_open)",
        "weights.safetensors" => "every weight, keyed by its name in names/",
        "dequantized/" => "each quantized tensor as float32 (scale and zero point applied)",
        "dequantized.safetensors" => {
            "every tensor of variables/, the quantized ones as float32 (as dequantized/)"
        }
        _ => "tensors derived from the ones in variables/",
    }
}

impl SummaryFile {
    pub(crate) fn new(
        set: Arc<dyn TensorSet>,
        views: Vec<String>,
        cache: Option<String>,
    ) -> SummaryFile {
        SummaryFile {
            set,
            cache,
            views: views
                .into_iter()
                .map(|v| {
                    let w = view_words(&v);
                    (v, w)
                })
                .collect(),
            text: OnceLock::new(),
        }
    }

    /// The closing part: the views of this checkpoint, reachable by path but not listed.
    fn views_text(&self) -> String {
        if self.views.is_empty() {
            return String::new();
        }
        let width = self.views.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        let mut out = String::from(
            "\nviews (reachable by path, not listed unless mounted with -o views=visible):\n",
        );
        for (p, w) in &self.views {
            out.push_str(&format!("  {p:<width$}  {w}\n"));
        }
        out
    }

    fn text(&self) -> FsResult<&[u8]> {
        self.text
            .get_or_init(|| {
                let set = &*self.set;
                let mut s = Summary::new();
                let mut left_out = 0;
                walk(set, |p, _| {
                    match record(set, p) {
                        Some(r) => s.add(&r.record()),
                        None => left_out += 1,
                    }
                    Ok(true)
                })
                .map_err(|e| e.to_string())?;
                log_left_out(set, "summary.txt", left_out);
                let mut text = s.to_text();
                text.extend_from_slice(self.views_text().as_bytes());
                if let Some(c) = &self.cache {
                    text.extend_from_slice(format!("\nsource: {c}\n").as_bytes());
                }
                Ok(text)
            })
            .as_ref()
            .map(|t| t.as_slice())
            .map_err(|e| failed(&*self.set, "summary.txt", e.clone()))
    }
}

impl Generated for SummaryFile {
    fn size(&self) -> FsResult<u64> {
        Ok(self.text()?.len() as u64)
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        Ok(slice_of(self.text()?, offset, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_paths_escape_each_component() {
        assert_eq!(bin_path(b"dense/kernel"), b"variables/dense/kernel.bin");
        assert_eq!(bin_path(b"x"), b"variables/x.bin");
        assert_eq!(bin_path(b"a.bin/b.txt"), b"variables/a%2Ebin/b.txt.bin");
        assert_eq!(bin_path(b"/lead//x"), b"variables/%/lead/%/x.bin");
        assert_eq!(bin_path(b"odd/../z"), b"variables/odd/%2E%2E/z.bin");
    }
}
