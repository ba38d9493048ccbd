//! The checkpoint-format seam: every format a checkpoint can be stored in implements
//! [`Format`] (recognise a path by content, find its checkpoints in a directory, open it), and
//! an opened checkpoint implements [`Opened`] (its tensors, and the extras a format may have:
//! a graph beside it, readable names, files of its own, a fast path for `verify` and `diff`).
//! The formats are listed once, in [`FORMATS`]; the filesystem and the subcommands see only
//! these two interfaces. A new format is one folder here and one row in the table
//! (docs/architecture.md, "Adding a format"); the modules beside the folders are what formats
//! share.

pub(crate) mod caches;
pub(crate) mod crc_stream;
pub(crate) mod edited;
pub(crate) mod edits;
pub(crate) mod integrity;
pub(crate) mod keras;
pub(crate) mod names;
pub(crate) mod orbax;
pub(crate) mod output;
pub(crate) mod safetensors;
pub(crate) mod safetensors_write;
pub(crate) mod saved_model_write;
pub(crate) mod tensors;
pub(crate) mod tfjs;
pub(crate) mod tflite;
pub mod v1;
pub mod v2;
pub(crate) mod weights;

use crate::sync::lock;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::SourceError;
use crate::formats::caches::Caches;
use crate::formats::integrity::{Generic, Integrity};
use crate::formats::tensors::TensorSet;
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, Store};

/// Every checkpoint format, in the order they are tried on a path.
pub static FORMATS: &[&dyn Format] = &[
    &v2::V2,
    &v1::V1,
    &keras::Keras,
    &tfjs::Tfjs,
    &tflite::Tflite,
    &orbax::Orbax,
    &safetensors::Safetensors,
];

/// What SOURCE can be, in words, for `--help`, the man page and error messages: the kinds of
/// source that are not one checkpoint (`before`), then every format's [`Format::source`] in
/// [`FORMATS`] order, joined as a list ending in `last`.
pub(crate) fn sources(before: &[&str], last: &str) -> String {
    let all: Vec<&str> = before
        .iter()
        .copied()
        .chain(FORMATS.iter().map(|f| f.source()))
        .collect();
    format!("{}, {last}", all.join(", "))
}

/// A checkpoint format.
pub trait Format: Send + Sync {
    /// A short name for messages (`V2 checkpoint`, `V1 checkpoint`).
    fn name(&self) -> &'static str;
    /// What a SOURCE of this format is, in words, as `--help`, the man page, docs/cli.md and
    /// the "not recognised" message list it (`a Keras file (.weights.h5, .keras, .h5)`).
    fn source(&self) -> &'static str;
    /// Whether `path` of `store` is a checkpoint of this format (decided by its bytes, or by
    /// the names of files only this format writes): what to open it by.
    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected>;
    /// The checkpoints of this format among the entries of directory `dir` (one without a
    /// state file): `(name shown, path)`, each a path [`Format::detect`] recognises.
    fn in_dir(
        &self,
        _store: &dyn Store,
        _dir: &Path,
        _entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        Vec::new()
    }
    /// The current checkpoint among `checkpoints`, those [`Format::in_dir`] of every format
    /// found in a directory without a state file, where this format has a rule for it (Orbax:
    /// the highest step by number). `None` leaves it to the newest file.
    fn latest(&self, _checkpoints: &[(String, PathBuf)]) -> Option<String> {
        None
    }
    /// Opens what [`Format::detect`] found.
    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError>;
}

/// What a format recognised: the path the checkpoint is named by (a V2 prefix, a V1 file or
/// `?????` pattern, a Keras file), the files detection found it made of (V1 shards; empty where
/// the format finds them when opened), and the format.
#[derive(Clone)]
pub struct Detected {
    pub(crate) path: PathBuf,
    pub(crate) files: Vec<PathBuf>,
    /// The format that recognised it (and opens it).
    pub format: &'static dyn Format,
}

impl std::fmt::Debug for Detected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detected")
            .field("path", &self.path)
            .field("files", &self.files)
            .field("format", &self.format.name())
            .finish()
    }
}

impl PartialEq for Detected {
    fn eq(&self, o: &Detected) -> bool {
        self.path == o.path && self.files == o.files && self.format.name() == o.format.name()
    }
}

impl Eq for Detected {}

/// What opening a checkpoint needs besides its path.
pub struct OpenCtx<'a> {
    pub(crate) store: &'a dyn Store,
    /// The same store, shared, for a format that opens files after it is opened (Orbax: the
    /// data files its index names, as reads need them).
    pub(crate) shared: Option<Arc<dyn Store>>,
    /// The caches of decoded index blocks and check outcomes the mount shares.
    pub(crate) caches: Arc<Caches>,
    /// Check stored checksums as tensors are read.
    pub(crate) verify: bool,
    /// `-o crc_first`: no streaming check (see [`crate::formats::crc_stream`]).
    pub(crate) crc_first: bool,
}

/// An opened checkpoint.
pub trait Opened: Send + Sync {
    /// Its tensors.
    fn tensors(&self) -> Arc<dyn TensorSet>;
    /// Owner, times and read bits its files show.
    fn meta(&self) -> FileMeta {
        self.tensors().meta()
    }
    /// A MetaGraphDef file that goes with it (TF1's Saver writes `PREFIX.meta`).
    fn meta_graph(&self) -> Option<PathBuf> {
        None
    }
    /// The TF2 object graph it stores, for names that need a SavedModel's graph too.
    fn object_graph(&self) -> Option<crate::proto::TrackableObjectGraph> {
        None
    }
    /// Whether it has `names/` (decided without making them: [`Opened::names`] may cost a pass
    /// over data that grows with the number of tensors, and is called only when `names/` or
    /// `weights.safetensors` is first used).
    fn has_names(&self) -> bool {
        false
    }
    /// `names/`: `(name users know, key)` pairs, from what the file itself says.
    fn names(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Files of its own shown beside the views: `(path, bytes)`, the path relative to the
    /// checkpoint's root, `/`-separated (`config.json`, `graph/0003_CONV_2D.txt`; directories
    /// are made as needed; each component a valid file name, already escaped). Small: a model's
    /// configuration, rendered text.
    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        Vec::new()
    }
    /// More directories of tensor files, as `variables/` shows them (`.bin`, `.dtype`,
    /// `.shape`, `.npy`, xattrs) but without the views: `(path, set)`, e.g. `dequantized`.
    fn tensor_dirs(&self) -> Vec<(String, Arc<dyn TensorSet>)> {
        Vec::new()
    }
    /// More `*.safetensors` files of derived tensors, at the checkpoint's root beside
    /// `model.safetensors` (TFLite's `dequantized.safetensors`: every tensor, the quantized
    /// ones as float32): `(file name, tensors)`. Derived views: reachable, not listed.
    fn safetensors_views(&self) -> Vec<(String, Arc<dyn TensorSet>)> {
        Vec::new()
    }
    /// Whole checkpoint trees inside this one (`variables/`, the views, their own extras):
    /// `(path, opened)`, e.g. `subgraphs/1`.
    fn children(&self) -> Vec<(String, Arc<dyn Opened>)> {
        Vec::new()
    }
    /// A GraphDef it holds (binary, e.g. converted from JSON), shown as a graph is
    /// (`meta_graphs/`, `graph/` one `.pbtxt` per node): `(path for messages, bytes)`.
    fn graph_def(&self) -> Option<(PathBuf, Vec<u8>)> {
        None
    }
    /// Where the format stores no checksum of tensor bytes, what `verify` says of it (`"the
    /// safetensors format stores no checksum"`): its layout is checked, its bytes cannot be.
    fn no_checksum(&self) -> Option<&'static str> {
        None
    }
    /// The checks `verify` and `diff` run: the format's own fast path, or the generic one
    /// (every tensor read through its [`TensorSet`]).
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        Box::new(Generic::new(self.tensors(), Vec::new()))
    }
}

/// The format `path` of `store` is in, tried in [`FORMATS`] order.
pub(crate) fn detect(store: &dyn Store, path: &Path) -> Option<Detected> {
    FORMATS.iter().find_map(|f| f.detect(store, path))
}

/// Opens the checkpoint at `path`, whatever its format. A path no format recognises gets the
/// first format's error (V2's: no `PATH.index`), which says what was looked for.
pub(crate) fn open_path(ctx: &OpenCtx, path: &Path) -> Result<Arc<dyn Opened>, SourceError> {
    match detect(ctx.store, path) {
        Some(d) => d.format.open(ctx, &d),
        None => {
            let d = Detected {
                path: path.to_path_buf(),
                files: Vec::new(),
                format: FORMATS[0],
            };
            d.format.open(ctx, &d)
        }
    }
}

/// The checkpoints of every format among a directory's entries (a directory without a state
/// file), sorted by name.
pub(crate) fn in_dir(
    store: &dyn Store,
    dir: &Path,
    entries: &[(OsString, EntryKind)],
) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = FORMATS
        .iter()
        .flat_map(|f| f.in_dir(store, dir, entries))
        .collect();
    out.sort();
    out
}

/// The remote file a format's detection opened last, `(URL, file)`, for the next detection
/// or open of the same URL to reuse, whichever format it is: a probe tries each format on a
/// file, opening it detects it again, then opens it, and on object storage each would otherwise
/// cost a HEAD and GETs of its first blocks (an opened object's cached blocks go with it).
/// Opening takes it out. Remote sources are snapshots whose every GET is checked against the
/// ETag first seen; local files (opening them costs no request; a directory followed live
/// changes under them) are always opened anew.
static LAST: Mutex<Option<(PathBuf, Arc<dyn ByteSource>)>> = Mutex::new(None);

/// `path` of `store` opened, for a format's detection (`take` false: the file is kept in
/// [`LAST`] for the next detection or open) or for opening it (`take`: the kept file is
/// taken out): the file detection opened last if it is the same path and unchanged, else a
/// new one.
pub(crate) fn opened(
    store: &dyn Store,
    path: &Path,
    take: bool,
) -> std::io::Result<Arc<dyn ByteSource>> {
    if store.stats_line().is_none() {
        return store.open(path);
    }
    let mut last = lock(&LAST);
    if matches!(&*last, Some((p, _)) if p == path) {
        let kept = if take { last.take() } else { last.clone() };
        if let Some((_, f)) = kept {
            let mut head = [0u8; 8];
            if f.read_exact_at(&mut head, 0).is_ok() && !f.changed() {
                return Ok(f);
            }
        }
    }
    drop(last);
    let f = store.open(path)?;
    if !take {
        *lock(&LAST) = Some((path.to_path_buf(), f.clone()));
    }
    Ok(f)
}
