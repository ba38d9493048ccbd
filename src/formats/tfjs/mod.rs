//! TensorFlow.js models behind the format seam: a `model.json` (layers model or graph model)
//! and the shard files its `weightsManifest` lists (see [`crate::formats::tfjs::manifest`]). Recognised by
//! content (a JSON object with `weightsManifest` and `modelTopology` or `format`); a file named
//! `model.json` that begins with `{` by its name too, so that a damaged one says what is wrong
//! with it; a directory holding `model.json` is the model (see `probe_dir` in `source/mod.rs`).
//!
//! Every weight is a tensor keyed by its manifest name, served as tfjs-core holds it after
//! loading: quantized weights decoded ([`crate::formats::tfjs::manifest::decode_quantized`]), the others
//! read in place from the shards (a weight crossing a shard boundary read across them), string
//! weights (4-byte lengths in the stream) in tfmount's string layout. A group's shards are one
//! byte stream; where their sizes do not add up to what its weights need, the sizes the
//! converter cuts (every shard but the last of the same size) tell which shard is damaged, and
//! only the weights touching it fail.

pub(crate) mod manifest;
mod set;
pub(crate) use set::TfjsSet;

use crate::sync::lock;
use bytes::Bytes;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::Value;

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::integrity::{Generic, Integrity, Item};
use crate::formats::tensors::{
    self, next_position, seek_sorted, Memory, Stored, TensorData, TensorInfo, TensorSet,
};
use crate::formats::tfjs::manifest as ft;
use crate::formats::tfjs::manifest::{Quant, WDtype, Weight};
use crate::parse::FormatError;
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, Store};

/// The file a directory is a TF.js model by.
pub(crate) const MODEL_JSON: &str = "model.json";
/// A string weight is read into memory whole, up to this many bytes.
pub(crate) const MAX_STRING_BYTES: u64 = 256 << 20;
/// Most elements of a string weight (each costs a read of its length when the model is opened).
pub(crate) const MAX_STRING_ELEMENTS: u64 = 1 << 20;

/// The TF.js format.
pub(crate) struct Tfjs;

/// The `model.json` detection read last on a remote store, `(URL, file, bytes)`: opening the
/// same opened file right after (the formats' shared detection file, `super::opened`) takes
/// the bytes instead of reading them again (a remote file's reads are checked against the
/// ETag first seen).
type Sniffed = (PathBuf, Arc<dyn ByteSource>, Arc<[u8]>);
static LAST: Mutex<Option<Sniffed>> = Mutex::new(None);

/// Whether file `path` is a bare weights manifest (`*weights_manifest.json` holding a list of
/// groups).
fn is_manifest(store: &dyn Store, path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(ft::is_manifest_name)
        && store.is_file(path)
        && store
            .read_whole(path, ft::MAX_MODEL_JSON)
            .ok()
            .is_some_and(|b| ft::parse_manifest(&b).is_ok())
}

/// The bare weights manifests among a directory's entries, by name.
fn manifests_in(store: &dyn Store, dir: &Path, entries: &[(OsString, EntryKind)]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = entries
        .iter()
        .filter(|(n, k)| *k == EntryKind::File && n.to_str().is_some_and(ft::is_manifest_name))
        .map(|(n, _)| dir.join(n))
        .filter(|p| is_manifest(store, p))
        .collect();
    out.sort();
    out
}

/// The bytes of file `path` if it is a TF.js `model.json` (by content, or by name and a
/// leading `{`).
fn sniff(store: &dyn Store, path: &Path) -> Option<Arc<[u8]>> {
    let named = path.file_name().is_some_and(|n| n == MODEL_JSON);
    let f = crate::formats::opened(store, path, false).ok()?;
    let mut head = [0u8; 64];
    let n = (head.len() as u64).min(f.len()) as usize;
    f.read_exact_at(&mut head[..n], 0).ok()?;
    if !ft::looks_like_object(&head[..n]) {
        return None;
    }
    if f.len() > ft::MAX_MODEL_JSON {
        // Too large to tell by content; a model.json says why it is refused when opened.
        return named.then(|| Arc::from(&[][..]));
    }
    let bytes = f.read_vec(0, f.len() as usize).ok()?;
    let is = named || serde_json::from_slice::<Value>(&bytes).is_ok_and(|v| ft::is_model(&v));
    if !is {
        return None;
    }
    let bytes: Arc<[u8]> = bytes.into();
    if store.stats_line().is_some() {
        *lock(&LAST) = Some((path.to_path_buf(), f, bytes.clone()));
    }
    Some(bytes)
}

impl Format for Tfjs {
    fn name(&self) -> &'static str {
        "TensorFlow.js model"
    }

    fn source(&self) -> &'static str {
        "a TensorFlow.js model.json, a *weights_manifest.json, or their directory"
    }

    /// `path` itself (a `model.json`, or a JSON file that is a model by content), or, when
    /// `path` is not a file, `path/model.json`: a directory is the model its `model.json` is.
    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        let found = |p: &Path| Detected {
            path: p.to_path_buf(),
            files: Vec::new(),
            format: &Tfjs,
        };
        if store.is_file(path) {
            if is_manifest(store, path) {
                return Some(found(path));
            }
            return sniff(store, path).map(|_| found(path));
        }
        let inner = path.join(MODEL_JSON);
        if !store.is_file(&inner) {
            // A directory holding one bare weights manifest is that model.
            if store.kind(path) == Some(EntryKind::Dir) {
                let entries = store.list(path).ok()?;
                if let [one] = &manifests_in(store, path, &entries)[..] {
                    return Some(found(one));
                }
            }
            return None;
        }
        sniff(store, &inner).map(|_| found(&inner))
    }

    /// A directory of several bare weights manifests (face-api.js's `weights/`): each one, named
    /// by its file name less `-weights_manifest.json`. Otherwise none: a directory holding a
    /// `model.json`, or one manifest, is one model ([`Format::detect`]).
    fn in_dir(
        &self,
        store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        if entries.iter().any(|(n, _)| n == MODEL_JSON) {
            return Vec::new();
        }
        let found = manifests_in(store, dir, entries);
        if found.len() < 2 {
            return Vec::new();
        }
        found
            .into_iter()
            .map(|p| {
                let n = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let short = n
                    .strip_suffix(ft::MANIFEST_SUFFIX)
                    .map(|s| s.trim_end_matches(['-', '_', '.']))
                    .filter(|s| !s.is_empty())
                    .map_or(n.clone(), str::to_string);
                (short, p)
            })
            .collect()
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        open(ctx.store, &found.path).map(|m| Arc::new(m) as Arc<dyn Opened>)
    }
}

fn invalid(path: &Path, msg: impl Into<String>) -> SourceError {
    SourceError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// One shard file of a group.
struct Shard {
    path: PathBuf,
    /// The file, or why it cannot be opened.
    file: Result<Arc<dyn ByteSource>, String>,
    /// Where it starts in its group's stream and how many bytes it should hold there.
    start: u64,
    expected: u64,
    /// Why its bytes are not the manifest's (missing, or not the size it should be).
    damage: Option<String>,
    /// Its number among all of the model's shards (manifest order), for `Stored`.
    global: u32,
}

/// A group's stream: its shards in order.
struct Stream {
    shards: Vec<Shard>,
    /// What its weights need, when known.
    needed: Option<u64>,
    /// Why the shards' sizes cannot be matched to the manifest at all (none can be trusted).
    unplaced: Option<String>,
}

impl Stream {
    /// Bytes `[at, at + buf.len())` of the stream; an error naming the damaged shard.
    fn read(&self, buf: &mut [u8], at: u64) -> Result<(), FormatError> {
        if let Some(why) = &self.unplaced {
            return Err(FormatError::BadEntry(why.clone()));
        }
        let end = at.saturating_add(buf.len() as u64);
        let mut done = 0usize;
        for s in &self.shards {
            let (a, b) = (s.start, s.start.saturating_add(s.expected));
            if b <= at || a >= end {
                continue;
            }
            if let Some(why) = &s.damage {
                return Err(FormatError::BadEntry(why.clone()));
            }
            let f = s
                .file
                .as_ref()
                .map_err(|e| FormatError::BadEntry(e.clone()))?;
            let from = at.max(a);
            let to = end.min(b);
            let n = (to - from) as usize;
            let into = (from - at) as usize;
            let dst = buf
                .get_mut(into..into + n)
                .ok_or_else(|| FormatError::BadEntry("read outside its buffer".into()))?;
            f.read_exact_at(dst, from - a)?;
            done += n;
        }
        if done != buf.len() {
            return Err(FormatError::BadEntry(format!(
                "bytes {at}..{end} of the group's stream lie past its shards"
            )));
        }
        Ok(())
    }

    /// The file and offset bytes `[at, at + len)` of the stream lie at, when they lie in one
    /// undamaged shard.
    fn in_one_file(&self, at: u64, len: u64) -> Option<(Arc<dyn ByteSource>, u64)> {
        if self.unplaced.is_some() {
            return None;
        }
        let end = at.checked_add(len)?;
        let s = self
            .shards
            .iter()
            .find(|s| s.start <= at && end <= s.start.saturating_add(s.expected))?;
        match (&s.damage, &s.file) {
            (None, Ok(f)) => Some((f.clone(), at - s.start)),
            _ => None,
        }
    }

    /// The shards bytes `[a, b)` of the stream touch.
    fn touching(&self, a: u64, b: u64) -> impl Iterator<Item = &Shard> {
        self.shards
            .iter()
            .filter(move |s| a < b && s.start < b && s.start.saturating_add(s.expected) > a)
    }
}

/// Where a weight lies: its group, and its bytes in the group's stream (`None`: not known, for
/// the reason given: a string weight whose lengths could not be read, and the weights after it).
struct Placed {
    weight: Weight,
    group: usize,
    at: Result<(u64, u64), String>,
}

/// An opened TF.js model.
pub(crate) struct OpenedTfjs {
    set: Arc<TfjsSet>,
    files: Vec<(String, Arc<[u8]>)>,
    graph: Option<Vec<u8>>,
    /// Why the topology could not be converted to a GraphDef (reported by `verify`).
    graph_error: Option<String>,
}

/// Opens the TF.js model whose `model.json` is `path`.
pub(crate) fn open(store: &dyn Store, path: &Path) -> Result<OpenedTfjs, SourceError> {
    let (file, bytes) = read_model_json(store, path)?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(MODEL_JSON)
        .to_string();
    let manifest = ft::is_manifest_name(&file_name);
    let model = if manifest {
        ft::parse_manifest(&bytes)
    } else {
        ft::parse(&bytes)
    }
    .map_err(|e| invalid(path, e))?;
    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();

    let mut streams = Vec::new();
    let mut placed: Vec<Placed> = Vec::new();
    let mut global = 0u32;
    let mut source_bytes = bytes.len() as u64;
    for (gi, g) in model.groups.iter().enumerate() {
        let shards = open_shards(store, path, &dir, &g.paths, &mut global);
        for f in shards.iter().filter_map(|s| s.file.as_ref().ok()) {
            source_bytes = source_bytes.saturating_add(f.len());
        }
        let (stream, group) = place_group(path, gi, &g.weights, shards);
        streams.push(Arc::new(stream));
        placed.extend(group);
    }
    let weights = latest_by_name(path, placed);
    let (mut files, graph, graph_error) = topology_files(path, &model, bytes);
    if manifest {
        // Shown under its own name.
        if let Some(f) = files.first_mut() {
            f.0 = file_name;
        }
    }
    let set = Arc::new(TfjsSet {
        path: path.to_path_buf(),
        meta: file.meta(),
        streams,
        weights,
        source_bytes,
    });
    Ok(OpenedTfjs {
        set,
        files,
        graph,
        graph_error,
    })
}

/// An opened file and its bytes.
type FileBytes = (Arc<dyn ByteSource>, Arc<[u8]>);

/// `model.json` opened and its bytes (those detection read of this very file if it did),
/// refused over [`ft::MAX_MODEL_JSON`] bytes.
fn read_model_json(store: &dyn Store, path: &Path) -> Result<FileBytes, SourceError> {
    let file = crate::formats::opened(store, path, true).map_err(|err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let taken = take_sniffed(path, &file);
    if file.len() > ft::MAX_MODEL_JSON {
        return Err(invalid(
            path,
            format!(
                "{} bytes: model.json files over {} bytes are refused (parsed in memory)",
                file.len(),
                ft::MAX_MODEL_JSON
            ),
        ));
    }
    let bytes: Arc<[u8]> = match taken {
        Some(b) if b.len() as u64 == file.len() => b,
        _ => file
            .read_vec(0, file.len() as usize)
            .map_err(|err| SourceError::Format {
                path: path.to_path_buf(),
                err,
            })?
            .into(),
    };
    Ok((file, bytes))
}

/// The bytes detection read of this very file (the same opened object), if it did: taken out
/// of [`LAST`].
fn take_sniffed(path: &Path, file: &Arc<dyn ByteSource>) -> Option<Arc<[u8]>> {
    let mut last = lock(&LAST);
    match &*last {
        Some((p, f, _)) if p == path && Arc::ptr_eq(f, file) => last.take().map(|(_, _, b)| b),
        _ => None,
    }
}

/// A group's shard files, opened from `dir` (a path that is not below it is not followed: the
/// shard says why), numbered from `*global` on among all of the model's shards.
fn open_shards(
    store: &dyn Store,
    path: &Path,
    dir: &Path,
    paths: &[String],
    global: &mut u32,
) -> Vec<Shard> {
    let mut shards = Vec::new();
    for p in paths {
        let sp = dir.join(p);
        let file = if !ft::safe_shard_path(p) {
            Err(format!(
                "{}: shard path {p:?} is not below model.json's directory (absolute, `..` or a URL): not followed",
                path.display()
            ))
        } else {
            store
                .open(&sp)
                .map_err(|e| format!("{}: {e}", sp.display()))
        };
        shards.push(Shard {
            path: sp,
            file,
            start: 0,
            expected: 0,
            damage: None,
            global: *global,
        });
        *global = global.saturating_add(1);
    }
    shards
}

/// Group `gi`'s stream made of `shards`, its weights placed in it, and its shards' sizes
/// checked against what the weights need.
fn place_group(
    path: &Path,
    gi: usize,
    weights: &[Weight],
    shards: Vec<Shard>,
) -> (Stream, Vec<Placed>) {
    let mut stream = Stream {
        shards,
        needed: None,
        unplaced: None,
    };
    // Fixed-size weights first: where the string weights are is read from the stream,
    // which needs the shards placed. Place them by their actual sizes for the scan.
    place_actual(&mut stream);
    let (placed, needed) = place_weights(path, gi, weights, &stream);
    stream.needed = needed;
    let strings_end = placed
        .iter()
        .filter(|p| p.weight.dtype == WDtype::String)
        .filter_map(|p| p.at.as_ref().ok().map(|(_, e)| *e))
        .max();
    check_sizes(&mut stream, gi, strings_end);
    (stream, placed)
}

/// Group `gi`'s weights placed one after another in `stream` (a string weight's length read
/// from it), and the bytes they need; past a weight that cannot be placed, none can (each says
/// after which).
fn place_weights(
    path: &Path,
    gi: usize,
    weights: &[Weight],
    stream: &Stream,
) -> (Vec<Placed>, Option<u64>) {
    let mut placed = Vec::with_capacity(weights.len());
    let mut at: Result<u64, String> = Ok(0);
    for w in weights {
        let here = match &at {
            Ok(a) => {
                let len = match w.stored_len() {
                    Some(n) => Ok(n),
                    None => string_len(stream, *a, w.elements()),
                };
                len.and_then(|n| {
                    a.checked_add(n)
                        .map(|e| (*a, e))
                        .ok_or_else(|| "offsets overflow".to_string())
                })
            }
            Err(e) => Err(e.clone()),
        };
        at = here.as_ref().map(|(_, e)| *e).map_err(|e| {
            if e.starts_with("after ") {
                e.clone()
            } else {
                format!("after {}: {e}", w.name)
            }
        });
        placed.push(Placed {
            weight: w.clone(),
            group: gi,
            at: here.map_err(|e| format!("{}: {e}", path.display())),
        });
    }
    (placed, at.ok())
}

/// The weights sorted by name; a name given twice: the later one, as tfjs-core's map keeps it.
fn latest_by_name(path: &Path, placed: Vec<Placed>) -> Vec<Placed> {
    let mut by_name: std::collections::BTreeMap<String, Placed> = Default::default();
    for p in placed {
        if let Some(old) = by_name.insert(p.weight.name.clone(), p) {
            log::warn!(
                "{}: weight {} is listed twice; the later entry is shown (as tfjs-core loads it)",
                path.display(),
                old.weight.name
            );
        }
    }
    by_name.into_values().collect()
}

/// The files shown beside the weights (`model.json` itself, then what the topology gives),
/// the GraphDef of a graph model and why its topology is not one.
type TopologyFiles = (Vec<(String, Arc<[u8]>)>, Option<Vec<u8>>, Option<String>);

/// `model.json`'s bytes as a file, and what the model's topology gives: a graph model's
/// GraphDef and `signatures.txt`, a layers model's Keras configuration.
fn topology_files(path: &Path, model: &ft::Model, bytes: Arc<[u8]>) -> TopologyFiles {
    let mut files: Vec<(String, Arc<[u8]>)> = vec![(MODEL_JSON.to_string(), bytes)];
    let (mut graph, mut graph_error) = (None, None);
    if model.is_graph() {
        (graph, graph_error) = graph_def(path, model);
        if let Some(s) = &model.signature {
            match signature_text(s) {
                Ok(t) => files.push(("signatures.txt".into(), t.into_bytes().into())),
                Err(e) => log::warn!("{}: signature is not a SignatureDef: {e}", path.display()),
            }
        }
    } else if let Some(t) = &model.topology {
        files.extend(layers_config_files(t));
    }
    (files, graph, graph_error)
}

/// A graph model's topology as a binary GraphDef, or why it is not one (logged).
fn graph_def(path: &Path, model: &ft::Model) -> (Option<Vec<u8>>, Option<String>) {
    let Some(t) = &model.topology else {
        return (None, None);
    };
    match to_binary("tensorflow.GraphDef", t) {
        Ok(b) => (Some(b), None),
        Err(e) => {
            let e = format!("{}: modelTopology is not a GraphDef: {e}", path.display());
            log::warn!("{e}");
            (None, Some(e))
        }
    }
}

/// A layers model's topology: the Keras configuration, as the Keras module shows a legacy
/// file's (`model_config.json`, and `training_config.json` when there is one).
fn layers_config_files(topology: &Value) -> Vec<(String, Arc<[u8]>)> {
    let (config, training) = match topology.get("model_config") {
        Some(c) => (c, topology.get("training_config")),
        None => (topology, None),
    };
    let mut files = Vec::new();
    for (name, v) in [
        ("model_config.json", Some(config)),
        ("training_config.json", training),
    ] {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            if let Ok(mut b) = serde_json::to_vec_pretty(v) {
                b.push(b'\n');
                files.push((name.to_string(), b.into()));
            }
        }
    }
    files
}

/// Shards placed by their actual sizes (what tfjs-core concatenates); a missing one as empty.
fn place_actual(s: &mut Stream) {
    let mut at = 0u64;
    for sh in &mut s.shards {
        sh.start = at;
        sh.expected = sh.file.as_ref().map(|f| f.len()).unwrap_or(0);
        at = at.saturating_add(sh.expected);
    }
}

/// Bytes a string weight of `n` elements at `at` takes: each element a 4-byte little-endian
/// length and that many bytes.
fn string_len(s: &Stream, at: u64, n: u64) -> Result<u64, String> {
    if n > MAX_STRING_ELEMENTS {
        return Err(format!(
            "a string weight of {n} elements (more than {MAX_STRING_ELEMENTS} are not read)"
        ));
    }
    let mut len = 0u64;
    for _ in 0..n {
        let mut b = [0u8; 4];
        s.read(&mut b, at + len).map_err(|e| e.to_string())?;
        len = len
            .checked_add(4 + u64::from(u32::from_le_bytes(b)))
            .filter(|&l| l <= MAX_STRING_BYTES)
            .ok_or_else(|| format!("a string weight over {MAX_STRING_BYTES} bytes (not read)"))?;
    }
    // The last element's bytes are not read here: they must be in the stream too, before
    // anything is sized by that length.
    let end: u64 = s.shards.iter().map(|sh| sh.expected).sum();
    if at.saturating_add(len) > end {
        return Err(format!(
            "a string weight of {len} bytes at {at} runs past the {end} bytes of its shards"
        ));
    }
    Ok(len)
}

/// Matches the shards' sizes to what the group's weights need. When they add up (and every
/// shard is there), the shards stay placed by their sizes. Otherwise the sizes the converter
/// cuts are assumed (every shard but the last `S` bytes, the last the rest, with `S` the
/// largest of the others): a shard that is missing or not its size is damaged, and the weights
/// touching it fail. The whole group fails where no such cut fits, and where a string weight
/// ends past the first damaged shard's start (its lengths were read with the shards placed by
/// their sizes, which differ from the cut's from there on). `strings_end`: where the group's
/// last string weight ends.
fn check_sizes(s: &mut Stream, group: usize, strings_end: Option<u64>) {
    let Some(needed) = s.needed else {
        return;
    };
    let actual: Vec<Option<u64>> = s
        .shards
        .iter()
        .map(|sh| sh.file.as_ref().ok().map(|f| f.len()))
        .collect();
    let present: u64 = actual.iter().flatten().sum();
    if actual.iter().all(Option::is_some) && present == needed {
        return;
    }
    let missing: Vec<String> = s
        .shards
        .iter()
        .filter(|sh| sh.file.is_err())
        .map(|sh| {
            sh.path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let summary = if missing.is_empty() {
        format!("the shards of weightsManifest[{group}] hold {present} bytes, its weights need {needed}")
    } else {
        format!(
            "weightsManifest[{group}]: {} missing; the others hold {present} bytes, its weights need {needed}",
            missing.join(", ")
        )
    };
    let n = s.shards.len() as u64;
    let cut = match n {
        0 => None,
        1 => Some(needed),
        _ => actual[..actual.len() - 1].iter().flatten().copied().max(),
    };
    let fits = cut.filter(|&c| {
        c > 0
            && c.checked_mul(n - 1)
                .is_some_and(|full| full < needed && needed - full <= c)
    });
    let Some(c) = fits else {
        s.unplaced = Some(format!("{summary}; which shard is damaged cannot be told"));
        return;
    };
    let mut placed = Vec::with_capacity(s.shards.len());
    let mut at = 0u64;
    for (i, sh) in s.shards.iter().enumerate() {
        let want = if i as u64 + 1 == n { needed - at } else { c };
        let damage = match (&sh.file, actual.get(i).copied().flatten()) {
            (Err(e), _) => Some(format!("shard missing: {e}")),
            (Ok(_), Some(len)) if len != want => Some(format!(
                "{}: {len} bytes, the manifest's weights need {want} in this shard",
                sh.path.display()
            )),
            _ => None,
        };
        placed.push((at, want, damage));
        at += want;
    }
    let first_damage = placed
        .iter()
        .find(|(_, _, d)| d.is_some())
        .map_or(needed, |(a, _, _)| *a);
    if strings_end.is_some_and(|e| e > first_damage) {
        s.unplaced = Some(format!(
            "{summary}, and its string weights' lengths lie past the damaged shard: where its weights lie cannot be told"
        ));
        return;
    }
    for (sh, (start, expected, damage)) in s.shards.iter_mut().zip(placed) {
        sh.start = start;
        sh.expected = expected;
        sh.damage = damage;
    }
}

/// A JSON message (protobuf's JSON mapping) as binary protobuf of type `name`, its map fields
/// written in key order (so the bytes, and what is rendered of them, are the same every time).
fn to_binary(name: &str, v: &Value) -> Result<Vec<u8>, String> {
    let msg = to_message(name, v)?;
    Ok(prost::Message::encode_to_vec(&msg))
}

/// A JSON message as a message of the rendering descriptors (maps as repeated entries, in key
/// order).
fn to_message(name: &str, v: &Value) -> Result<DynamicMessage, String> {
    let pool = crate::descriptors::descriptor_pool()?;
    let mapped = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("no descriptor of {name}"))?;
    let plain =
        crate::descriptors::descriptor(name).ok_or_else(|| format!("no descriptor of {name}"))?;
    let v = unmap(&mapped, v, 0)?;
    DynamicMessage::deserialize_with_options(
        plain,
        v,
        &DeserializeOptions::new().deny_unknown_fields(false),
    )
    .map_err(|e| e.to_string())
}

/// Nesting of JSON messages followed (serde_json parses at most 128 levels).
const MAX_DEPTH: usize = 256;

/// `v` (a JSON message of type `desc`) with every map field's object written as a list of
/// `{key, value}` entries in key order: the form of the descriptors without map entries.
fn unmap(desc: &MessageDescriptor, v: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("nested too deeply".into());
    }
    let Value::Object(o) = v else {
        return Ok(v.clone());
    };
    let mut out = serde_json::Map::new();
    for (k, val) in o {
        let field = desc
            .get_field_by_json_name(k)
            .or_else(|| desc.get_field_by_name(k));
        let Some(field) = field else {
            out.insert(k.clone(), val.clone());
            continue;
        };
        let message = |val: &Value| -> Result<Value, String> {
            match field.kind().as_message() {
                Some(m) if field.is_map() => {
                    // The entry's value type, when it is a message.
                    match m.map_entry_value_field().kind().as_message() {
                        Some(vm) => unmap(vm, val, depth + 1),
                        None => Ok(val.clone()),
                    }
                }
                Some(m) => unmap(m, val, depth + 1),
                None => Ok(val.clone()),
            }
        };
        let new = if field.is_map() {
            let Value::Object(entries) = val else {
                return Err(format!("{k}: a map that is not a JSON object"));
            };
            Value::Array(
                entries
                    .iter()
                    .map(|(ek, ev)| Ok(serde_json::json!({"key": ek, "value": message(ev)?})))
                    .collect::<Result<Vec<_>, String>>()?,
            )
        } else if let (true, Value::Array(items)) = (field.is_list(), val) {
            Value::Array(items.iter().map(message).collect::<Result<Vec<_>, _>>()?)
        } else {
            message(val)?
        };
        out.insert(k.clone(), new);
    }
    Ok(Value::Object(out))
}

/// `signatures.txt` of a graph model: its `signature`, a SignatureDef, as protobuf text.
fn signature_text(v: &Value) -> Result<String, String> {
    let msg = to_message("tensorflow.SignatureDef", v)?;
    let body = msg.to_text_format_with_options(
        &prost_reflect::text_format::FormatOptions::new().pretty(true),
    );
    Ok(format!(
        "# The graph model's signature (model.json `signature`), a tensorflow.SignatureDef\n{body}\n"
    ))
}

impl Opened for OpenedTfjs {
    fn no_checksum(&self) -> Option<&'static str> {
        Some("TensorFlow.js weights store no checksum")
    }

    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    fn graph_def(&self) -> Option<(PathBuf, Vec<u8>)> {
        self.graph.clone().map(|g| (self.set.path.clone(), g))
    }

    /// The generic checks (every weight read and decoded), missing shards first, then each
    /// shard's size against what the manifest's weights need in it, and the topology's
    /// conversion.
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let total = self
            .set
            .streams
            .iter()
            .map(|s| s.shards.len())
            .sum::<usize>() as u32;
        let mut first = Vec::new();
        for s in &self.set.streams {
            for sh in &s.shards {
                if sh.file.is_err() {
                    first.push(Item::MissingShard {
                        shard: sh.global,
                        shards: total,
                        file: sh.path.clone(),
                    });
                }
            }
        }
        let mut generic = Generic::new(self.set.clone(), first);
        for (gi, s) in self.set.streams.iter().enumerate() {
            let label = |sh: &Shard| {
                format!(
                    "[{}]",
                    sh.path.file_name().unwrap_or_default().to_string_lossy()
                )
                .into_bytes()
            };
            let model = self.set.path.display().to_string();
            let outcome: Vec<(Vec<u8>, Result<u64, String>)> = match (&s.unplaced, s.needed) {
                (Some(why), _) => vec![(
                    format!("[weightsManifest[{gi}]]").into_bytes(),
                    Err(format!("{model}: {why}")),
                )],
                (None, None) => vec![(
                    format!("[weightsManifest[{gi}]]").into_bytes(),
                    Err(format!(
                        "{model}: the size of weightsManifest[{gi}]'s weights cannot be told (a string weight's lengths cannot be read)"
                    )),
                )],
                (None, Some(_)) => s
                    .shards
                    .iter()
                    .filter(|sh| sh.file.is_ok())
                    .map(|sh| {
                        // A size compared: no byte read, none added to the count (the
                        // weights' reads count theirs).
                        let r = match &sh.damage {
                            Some(d) => Err(d.clone()),
                            None => Ok(0),
                        };
                        (label(sh), r)
                    })
                    .collect(),
            };
            for (l, r) in outcome {
                generic = generic.with_file_check(Box::new(move || (l.clone(), r.clone())));
            }
        }
        if let Some(e) = self.graph_error.clone() {
            generic = generic.with_file_check(Box::new(move || {
                (b"[modelTopology]".to_vec(), Err(e.clone()))
            }));
        }
        Box::new(generic)
    }
}
