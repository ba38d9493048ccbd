//! Keras checkpoints behind the format seam: Keras 3 `.weights.h5`, `.keras` (a zip holding
//! `model.weights.h5`, `config.json`, `metadata.json`), and legacy HDF5 files (`model.save("x.h5")`,
//! `save_weights("x.h5")` of Keras 2 and of Keras 3's legacy saver). Recognised by content:
//! the HDF5 signature, or a zip whose members include `model.weights.h5`.
//!
//! Every dataset is a tensor under its HDF5 path without the leading `/`
//! (`layers/dense/vars/0`, `model_weights/dense/dense/kernel:0`). Contiguous datasets (all that
//! Keras writes) are read in place by offset: in the file, or inside the zip for a stored
//! `.keras` member; the HDF5 parser reads only metadata. A deflated `.keras` member is inflated
//! into memory once, up to [`MAX_INFLATED`] bytes, and refused above that. Compact and chunked
//! datasets (other writers) are decoded whole when opened, up to [`MAX_DECODED`] bytes.

pub(crate) mod config_names;
pub(crate) mod hdf5;
mod set;
pub(crate) mod sharded;
pub(crate) use set::KerasSet;

use crate::sync::lock;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::integrity::{Generic, Integrity};
use crate::formats::keras::hdf5::{DatasetInfo, Index, Layout};
use crate::formats::names;
use crate::formats::tensors::{
    next_position, seek_sorted, Stored, TensorData, TensorInfo, TensorSet,
};
use crate::parse::{zip as fzip, FormatError, ReadAt};
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, RangeReader, Store};

/// A deflated `.keras` member larger than this is refused (it is held in memory).
pub(crate) const MAX_INFLATED: u64 = 256 << 20;
/// A compact or chunked dataset larger than this is refused (it is decoded in memory).
pub(crate) const MAX_DECODED: u64 = 256 << 20;
/// `config.json`, `metadata.json` and the JSON attributes of legacy files are shown up to
/// this size.
const MAX_JSON: u64 = 16 << 20;
/// The member of a `.keras` zip that holds the weights.
const WEIGHTS_MEMBER: &str = "model.weights.h5";
/// The members shown as files at the root of a `.keras` file's tree.
const SHOWN_MEMBERS: [&str; 2] = ["config.json", "metadata.json"];

const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";
const ZIP_SIGNATURE: &[u8; 4] = b"PK\x03\x04";

/// The Keras format.
pub(crate) struct Keras;

/// What a file's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hdf5,
    Zip,
}

fn sniff(store: &dyn Store, path: &Path) -> Option<(Arc<dyn ByteSource>, Kind)> {
    if !store.is_file(path) {
        return None;
    }
    sniff_file(store, path)
}

/// [`sniff`] of a path known to be a file.
fn sniff_file(store: &dyn Store, path: &Path) -> Option<(Arc<dyn ByteSource>, Kind)> {
    let f = crate::formats::opened(store, path, false).ok()?;
    let mut head = [0u8; 8];
    f.read_exact_at(&mut head, 0).ok()?;
    if &head == HDF5_SIGNATURE {
        return Some((f, Kind::Hdf5));
    }
    if head.starts_with(ZIP_SIGNATURE) {
        // A `.keras` file is one by its name too, so that a damaged one says what is wrong
        // with it when opened; another zip only if it holds the weights member.
        let named = path.extension().is_some_and(|e| e == "keras");
        if named || fzip::members(&*f).is_ok_and(|m| m.iter().any(|m| m.name == WEIGHTS_MEMBER)) {
            return Some((f, Kind::Zip));
        }
    }
    None
}

/// File names a Keras checkpoint may have in a directory (the bytes decide).
fn keras_name(name: &str) -> bool {
    name.ends_with(".h5") || name.ends_with(".hdf5") || name.ends_with(".keras")
}

impl Format for Keras {
    fn name(&self) -> &'static str {
        "Keras file"
    }

    fn source(&self) -> &'static str {
        "a Keras file (.weights.h5, .keras, .h5, or a sharded model's .weights.json)"
    }

    /// A Keras file by its bytes; a sharded model's index (`model.weights.json`), or the
    /// directory holding exactly one.
    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        let found = |p: PathBuf| Detected {
            path: p,
            files: Vec::new(),
            format: &Keras,
        };
        // One look at what `path` is (on object storage, a request).
        match store.kind(path) {
            Some(EntryKind::File) => (sniff_file(store, path).is_some()
                || sharded::is_index(store, path))
            .then(|| found(path.to_path_buf())),
            Some(EntryKind::Dir) => sharded::index_in(store, path).map(found),
            _ => None,
        }
    }

    /// Each `.h5`, `.hdf5` or `.keras` file whose bytes are a Keras checkpoint, named by its
    /// file name (`ckpt-01.weights.h5`).
    fn in_dir(
        &self,
        store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        // The shards of a sharded model are not checkpoints of their own (a directory holding
        // one model's index and shards is that model: [`Format::detect`]).
        let shards = sharded::shards_named(store, dir, entries);
        entries
            .iter()
            .filter(|(_, kind)| *kind == EntryKind::File)
            .filter_map(|(name, _)| {
                let name = name.to_str()?;
                let path = dir.join(name);
                (keras_name(name)
                    && !shards.iter().any(|s| s == name)
                    && sniff(store, &path).is_some())
                .then(|| (name.to_string(), path))
            })
            .collect()
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        if found
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(sharded::SUFFIX))
        {
            return sharded::open(ctx.store, &found.path, ctx.verify)
                .map(|k| Arc::new(k) as Arc<dyn Opened>);
        }
        open(ctx.store, &found.path, ctx.verify, ctx.crc_first)
            .map(|k| Arc::new(k) as Arc<dyn Opened>)
    }
}

fn invalid(path: &Path, msg: impl Into<String>) -> SourceError {
    SourceError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

fn format_err(path: &Path, err: FormatError) -> SourceError {
    SourceError::Format {
        path: path.to_path_buf(),
        err,
    }
}

/// Where the HDF5 bytes are: in the file at an offset (a plain file: 0; a stored `.keras`
/// member: its data offset), or inflated in memory.
#[derive(Clone)]
enum Hdf5Bytes {
    InFile {
        file: Arc<dyn ByteSource>,
        base: u64,
        len: u64,
    },
    Memory(Arc<[u8]>),
}

impl Hdf5Bytes {
    fn len(&self) -> u64 {
        match self {
            Hdf5Bytes::InFile { len, .. } => *len,
            Hdf5Bytes::Memory(b) => b.len() as u64,
        }
    }
}

/// The HDF5 bytes as the parser reads them: through a small cache of aligned blocks, so that
/// metadata spread over a remote object costs a few requests, not one per structure.
struct Metadata {
    bytes: Hdf5Bytes,
    blocks: Mutex<lru::LruCache<u64, Arc<Vec<u8>>>>,
}

/// Bytes of one metadata block, and how many are kept.
const BLOCK: u64 = 64 << 10;
const BLOCKS: usize = 64;

impl Metadata {
    fn new(bytes: Hdf5Bytes) -> Metadata {
        Metadata {
            bytes,
            blocks: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(BLOCKS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        }
    }

    fn block(
        &self,
        file: &dyn ByteSource,
        base: u64,
        len: u64,
        n: u64,
    ) -> crate::parse::Result<Arc<Vec<u8>>> {
        if let Some(b) = lock(&self.blocks).get(&n) {
            return Ok(b.clone());
        }
        let start = n * BLOCK;
        let size = BLOCK.min(len.saturating_sub(start)) as usize;
        let b = Arc::new(file.read_vec(base + start, size)?);
        lock(&self.blocks).put(n, b.clone());
        Ok(b)
    }
}

impl ReadAt for Metadata {
    fn len(&self) -> u64 {
        self.bytes.len()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> crate::parse::Result<()> {
        match &self.bytes {
            Hdf5Bytes::Memory(b) => (**b).read_exact_at(buf, offset),
            Hdf5Bytes::InFile { file, base, len } => {
                let end = offset
                    .checked_add(buf.len() as u64)
                    .filter(|&e| e <= *len)
                    .ok_or(crate::parse::ReadError::PastEnd {
                        offset,
                        len: buf.len() as u64,
                        file_len: *len,
                    })?;
                // Large reads go straight to the file.
                if buf.len() as u64 > BLOCK {
                    return file.read_exact_at(buf, base + offset);
                }
                let mut done = 0usize;
                let mut at = offset;
                while at < end {
                    let n = at / BLOCK;
                    let blk = self.block(&**file, *base, *len, n)?;
                    let from = (at - n * BLOCK) as usize;
                    let take = ((end - at) as usize).min(blk.len().saturating_sub(from));
                    if take == 0 {
                        return Err(crate::parse::ReadError::PastEnd {
                            offset: at,
                            len: end - at,
                            file_len: *len,
                        }
                        .into());
                    }
                    buf[done..done + take].copy_from_slice(&blk[from..from + take]);
                    done += take;
                    at += take as u64;
                }
                Ok(())
            }
        }
    }
}

/// An opened Keras checkpoint.
pub(crate) struct OpenedKeras {
    set: Arc<KerasSet>,
    names: Vec<(String, String)>,
    files: Vec<(String, Arc<[u8]>)>,
    /// The `.keras` weights member, stored: checked against the zip's CRC-32 by `verify`.
    member: Option<Arc<MemberCheck>>,
}

/// The check of a stored `.keras` weights member against the CRC-32 the zip's directory holds
/// of it (the whole member read; local files: from the page cache after the first time), made
/// once and remembered. A deflated member needs none: it is inflated, and checked, when opened.
///
/// When it is made: before the first byte of a dataset is served (`-o crc_first`, object
/// storage, and whoever asks for [`MemberCheck::outcome`]), or, for a local file, *while* the
/// datasets are served: the first dataset opened starts it on a thread of its own
/// ([`MemberCheck::start`]), reads are served as they come, and the read that reaches the end
/// of a dataset waits for the outcome (so no reader completes a dataset of a damaged member);
/// once the member is known damaged, every read fails.
pub(crate) struct MemberCheck {
    path: PathBuf,
    file: Arc<dyn ByteSource>,
    member: fzip::Member,
    /// Where the check is (a read that failed is not remembered: the next read tries again).
    state: Mutex<Check>,
    /// Signalled when a check ends.
    ended: std::sync::Condvar,
}

enum Check {
    NotStarted,
    Running,
    /// The CRC-32 matched, or did not.
    Done(Result<(), FormatError>),
}

impl MemberCheck {
    fn new(path: &Path, file: Arc<dyn ByteSource>, member: fzip::Member) -> MemberCheck {
        MemberCheck {
            path: path.to_path_buf(),
            file,
            member,
            state: Mutex::new(Check::NotStarted),
            ended: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Check> {
        lock(&self.state)
    }

    /// The remembered outcome, or the check made now (one log line if the member is
    /// damaged); while a check runs, callers wait for it (a bounded read of the member).
    fn outcome(&self) -> Result<(), FormatError> {
        let mut s = self.lock();
        loop {
            match &*s {
                Check::Done(r) => return r.clone(),
                Check::Running => {
                    s = self.ended.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                Check::NotStarted => {
                    *s = Check::Running;
                    drop(s);
                    return self.run();
                }
            }
        }
    }

    /// The outcome when known, without waiting.
    fn known(&self) -> Option<Result<(), FormatError>> {
        match &*self.lock() {
            Check::Done(r) => Some(r.clone()),
            _ => None,
        }
    }

    /// Starts the check on a thread of its own, unless it has started.
    fn start(self: &Arc<Self>) {
        {
            let mut s = self.lock();
            if !matches!(*s, Check::NotStarted) {
                return;
            }
            *s = Check::Running;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("keras-crc".into())
            .spawn(move || {
                let _ = me.run();
            });
        if spawned.is_err() {
            // No thread: the next read that needs the outcome makes the check itself.
            *self.lock() = Check::NotStarted;
            self.ended.notify_all();
        }
    }

    /// Makes the check (the caller has set `Running`), records its outcome and wakes whoever
    /// waits for it.
    fn run(&self) -> Result<(), FormatError> {
        /// Should the check unwind, its state is reset and its waiters woken.
        struct Unwound<'a>(&'a MemberCheck);
        impl Drop for Unwound<'_> {
            fn drop(&mut self) {
                let mut s = self.0.lock();
                if matches!(*s, Check::Running) {
                    *s = Check::NotStarted;
                    self.0.ended.notify_all();
                }
            }
        }
        let _reset = Unwound(self);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let r = fzip::check_crc_with(&self.member, threads, |at, len| self.crc_of(at, len));
        let mut s = self.lock();
        *s = match &r {
            Ok(()) => Check::Done(Ok(())),
            Err(e @ FormatError::Zip(_)) => {
                log::error!(
                    "{}: member {}: {e}; its datasets fail with EIO",
                    self.path.display(),
                    self.member.name
                );
                Check::Done(r.clone())
            }
            Err(_) => Check::NotStarted,
        };
        self.ended.notify_all();
        r
    }

    /// The CRC-32 of bytes `[at, at + len)` of the file: from a read-only mapping of it where
    /// this process allows mapped reads (the daemon: no copy), read again with `pread` if a
    /// page of the mapping was lost (the file cut short: the read then fails, naming it);
    /// otherwise with `pread`.
    fn crc_of(&self, at: u64, len: u64) -> Result<flate2::Crc, FormatError> {
        let (r, lost) = crate::source::mapped::scope(|| {
            if !crate::source::mapped::allowed() {
                return None;
            }
            let mut crc = flate2::Crc::new();
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(4 << 20) as usize;
                match self.file.read_bytes(at + done, n) {
                    Ok(b) if b.len() == n => crc.update(&b),
                    _ => return None,
                }
                done += n as u64;
            }
            Some(crc)
        });
        match r {
            Some(crc) if !lost => Ok(crc),
            _ => fzip::crc_of_range(&*self.file, at, len),
        }
    }

    /// The outcome as the reason a dataset read failed.
    fn check(&self, key: &str) -> FsResult<()> {
        self.failed(key, self.outcome())
    }

    /// A read of a dataset whose check streams: fails when the member is known damaged, waits
    /// for the outcome when it reaches the dataset's end (`last`).
    fn admit(&self, key: &str, last: bool) -> FsResult<()> {
        if last {
            return self.check(key);
        }
        match self.known() {
            Some(r) => self.failed(key, r),
            None => Ok(()),
        }
    }

    fn failed(&self, key: &str, r: Result<(), FormatError>) -> FsResult<()> {
        r.map_err(|e| {
            let e = match e {
                FormatError::Zip(m) => {
                    FormatError::Zip(format!("member {}: {m}", self.member.name))
                }
                e => e,
            };
            FsError::corrupt(format!("tensor {key}"), self.path.display(), e)
        })
    }
}

/// Opens the Keras file at `path`; `verify`: a stored `.keras` member is checked against its
/// CRC-32 (`crc_first`: before its datasets are served; otherwise, for a local file, while they
/// are, see [`MemberCheck`]).
pub(crate) fn open(
    store: &dyn Store,
    path: &Path,
    verify: bool,
    crc_first: bool,
) -> Result<OpenedKeras, SourceError> {
    let io = |err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    };
    let file = crate::formats::opened(store, path, true).map_err(io)?;
    let mut head = [0u8; 8];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| format_err(path, e))?;
    let mut files: Vec<(String, Arc<[u8]>)> = Vec::new();
    let mut member = None;
    let bytes = if head.starts_with(ZIP_SIGNATURE) {
        let members = fzip::members(&*file).map_err(|e| format_err(path, e))?;
        let w = members
            .iter()
            .find(|m| m.name == WEIGHTS_MEMBER)
            .ok_or_else(|| {
                invalid(
                    path,
                    format!("a zip without {WEIGHTS_MEMBER}: not a .keras file"),
                )
            })?
            .clone();
        for name in SHOWN_MEMBERS {
            if let Some(m) = members.iter().find(|m| m.name == name) {
                let b = fzip::read_member(&*file, m, MAX_JSON)
                    .map_err(|e| invalid(path, format!("{name}: {e}")))?;
                files.push((name.to_string(), b.into()));
            }
        }
        if w.stored() {
            member = Some(Arc::new(MemberCheck::new(path, file.clone(), w.clone())));
            Hdf5Bytes::InFile {
                file: file.clone(),
                base: w.data_offset,
                len: w.size,
            }
        } else {
            let b = fzip::read_member(&*file, &w, MAX_INFLATED).map_err(|e| {
                invalid(
                    path,
                    format!("{WEIGHTS_MEMBER}: {e} (compressed members are inflated into memory up to {MAX_INFLATED} bytes; store it uncompressed: `zip -0`)"),
                )
            })?;
            Hdf5Bytes::Memory(b.into())
        }
    } else {
        Hdf5Bytes::InFile {
            file: file.clone(),
            base: 0,
            len: file.len(),
        }
    };
    let md = Arc::new(Metadata::new(bytes.clone()));
    let mut h5 = Index::open(md).map_err(|e| format_err(path, e))?;
    let datasets = std::mem::take(&mut h5.datasets);
    for (p, why) in &h5.skipped {
        log::warn!("{}: {p} is not shown: {why}", path.display());
    }
    // Legacy files: the model's JSON in root attributes.
    for (attr, name) in [
        ("model_config", "model_config.json"),
        ("training_config", "training_config.json"),
    ] {
        if let Some(s) = h5.attr_string("", attr) {
            if s.len() as u64 <= MAX_JSON {
                files.push((name.to_string(), Arc::from(s.into_bytes())));
            }
        }
    }
    let mut names = legacy_names(&h5, &datasets);
    // Keras 3: the layers' and optimizer's own names, from config.json (a .keras file).
    if let Some((_, config)) = files.iter().find(|(n, _)| n == "config.json") {
        match serde_json::from_slice::<serde_json::Value>(config) {
            Ok(config) => {
                let keys: Vec<&str> = datasets.iter().map(|d| d.path.as_str()).collect();
                names.extend(config_names::names(&config, &keys));
                names = names::uniquify(names);
            }
            Err(e) => log::warn!("{}: config.json: {e}", path.display()),
        }
    }
    let set = Arc::new(KerasSet {
        path: path.to_path_buf(),
        meta: file.meta(),
        stream: !crc_first && !file.is_remote(),
        file,
        bytes,
        h5,
        datasets,
        check: member.clone().filter(|_| verify),
    });
    Ok(OpenedKeras {
        set,
        names,
        files,
        member,
    })
}

/// `names/` of a legacy file, from its `weight_names` attributes: each layer group (listed by
/// `layer_names` at the root or in `model_weights/`) names its datasets, relative to itself
/// (`dense/kernel:0`); `optimizer_weights/` names its own. The name shown drops TensorFlow's
/// `:0`.
fn legacy_names(h5: &Index, datasets: &[DatasetInfo]) -> Vec<(String, String)> {
    let exists = |k: &str| {
        datasets
            .binary_search_by(|d| d.path.as_str().cmp(k))
            .is_ok()
    };
    let mut out = Vec::new();
    let mut add = |group: &str, weights: Vec<String>| {
        for w in weights {
            let key = if group.is_empty() {
                w.clone()
            } else {
                format!("{group}/{w}")
            };
            if exists(&key) {
                let shown = w.strip_suffix(":0").unwrap_or(&w).to_string();
                out.push((shown, key));
            }
        }
    };
    for top in ["", "model_weights"] {
        let Some(layers) = h5.attr_strings(top, "layer_names") else {
            continue;
        };
        for layer in layers {
            let group = if top.is_empty() {
                layer.clone()
            } else {
                format!("{top}/{layer}")
            };
            if let Some(w) = h5.attr_strings(&group, "weight_names") {
                add(&group, w);
            }
        }
    }
    if let Some(w) = h5.attr_strings("optimizer_weights", "weight_names") {
        add("optimizer_weights", w);
    }
    names::uniquify(out)
}

impl Opened for OpenedKeras {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    fn has_names(&self) -> bool {
        !self.names.is_empty()
    }

    fn names(&self) -> Vec<(String, String)> {
        self.names.clone()
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    /// The generic checks, and the CRC-32 the zip's directory holds of a stored `.keras`
    /// weights member.
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let mut generic = Generic::new(self.set.clone(), Vec::new());
        // Groups and datasets left out for damaged metadata: the file is not sound.
        if let Some((p, why)) = self.set.h5.damaged.first() {
            let msg = format!(
                "{}: {} HDF5 objects not shown for damaged metadata; the first, {p}: {why}",
                self.set.path.display(),
                self.set.h5.damaged.len()
            );
            generic = generic.with_file_check(Box::new(move || {
                (b"[HDF5 metadata]".to_vec(), Err(msg.clone()))
            }));
        }
        let Some(m) = self.member.clone() else {
            return Box::new(generic);
        };
        // The member's bytes the datasets' reads do not cover (each byte counted once).
        let outside = m.member.size.saturating_sub(
            self.set
                .datasets
                .iter()
                .filter_map(|d| self.set.in_file(d))
                .map(|(_, n)| n)
                .sum(),
        );
        Box::new(generic.with_file_check(Box::new(move || {
            let label = format!("[{}]", m.member.name).into_bytes();
            let r = m
                .outcome()
                .map(|()| outside)
                .map_err(|e| format!("{}: {WEIGHTS_MEMBER}: {e}", m.path.display()));
            (label, r)
        })))
    }
}
