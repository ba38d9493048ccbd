//! Orbax checkpoints (JAX, Flax, Keras 3's `OrbaxCheckpoint`) behind the format seam.
//!
//! What a SOURCE can be:
//! - a checkpoint directory, recognised by its `_CHECKPOINT_METADATA`: one step of a
//!   `CheckpointManager` (`10/`, its items in subdirectories: Orbax's `default`, Keras's
//!   `pytree` and `model_config`), or what `StandardCheckpointer.save` wrote (the item's files
//!   in the directory itself);
//! - an item directory, recognised by its `_METADATA` (a pytree's metadata);
//! - a `CheckpointManager` directory: its steps are the checkpoints of a checkpoint directory
//!   ([`Format::in_dir`]: subdirectories named by a number, `10`, or `<prefix>_<number>`), and
//!   `latest` is the highest step by number ([`Format::latest`]); followed live as any
//!   checkpoint directory is (Orbax's `*.orbax-checkpoint-tmp-*` directories are a save in
//!   progress).
//!
//! Every leaf of every item's pytree is a tensor at its path, the item's name first
//! (`default/params/dense/kernel`): arrays (numpy and jax arrays, and the Python scalars Orbax
//! stores as 0-d arrays) with their zarr dtype and shape; strings (`_strings.json`) as 0-d
//! string tensors. The arrays are zarr arrays ([`zarr`]) in an OCDBT database ([`ocdbt`]) or,
//! in the older layout, one directory each; nothing of them is read when the checkpoint is
//! opened (see [`set`]). The metadata files are shown under `orbax/` (`sharding.json` with the
//! array names decoded), and a Keras checkpoint's model config as `config.json`.

pub(crate) mod ocdbt;
pub(crate) mod set;
pub(crate) mod tree;
pub(crate) mod zarr;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::SourceError;
use crate::formats::integrity::{Generic, Integrity};
use crate::formats::tensors::TensorSet;
use crate::source::bytes::{EntryKind, Store};
use set::{Item, Kv, OrbaxSet, StoreFiles};

/// The file a checkpoint (a step) directory is recognised by.
pub(crate) const CHECKPOINT_METADATA: &str = "_CHECKPOINT_METADATA";
/// The file an item directory is recognised by.
pub(crate) const METADATA: &str = "_METADATA";
/// `_CHECKPOINT_METADATA` and `_sharding` are shown up to this size.
const MAX_SMALL: u64 = 16 << 20;
/// The marker of a save in progress in a step directory's name.
pub(crate) const TMP_MARKER: &str = ".orbax-checkpoint-tmp";

/// The Orbax format.
pub(crate) struct Orbax;

fn invalid(path: &Path, msg: impl Into<String>) -> SourceError {
    SourceError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// The step number of a directory named `10` or `<prefix>_10` (Orbax's step name formats).
pub(crate) fn step_number(name: &str) -> Option<u64> {
    if name.contains(TMP_MARKER) {
        return None;
    }
    let digits = name.rsplit('_').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The file `path` is recognised by: itself (a `_CHECKPOINT_METADATA` or `_METADATA` file), or
/// the one in directory `path`.
fn marker(store: &dyn Store, path: &Path) -> Option<PathBuf> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let is_item_meta = |p: &Path| {
        crate::formats::opened(store, p, false)
            .ok()
            .and_then(|f| {
                let n = f.len().min(64) as usize;
                f.read_vec(0, n).ok()
            })
            .is_some_and(|head| tree::looks_like(&head))
    };
    match name {
        CHECKPOINT_METADATA if store.is_file(path) => return Some(path.to_path_buf()),
        METADATA if store.is_file(path) && is_item_meta(path) => return Some(path.to_path_buf()),
        _ => {}
    }
    if store.kind(path) == Some(EntryKind::File) {
        return None;
    }
    let step = path.join(CHECKPOINT_METADATA);
    if store.is_file(&step) {
        return Some(step);
    }
    let item = path.join(METADATA);
    (store.is_file(&item) && is_item_meta(&item)).then_some(item)
}

impl Format for Orbax {
    fn name(&self) -> &'static str {
        "Orbax checkpoint"
    }

    fn source(&self) -> &'static str {
        "an Orbax checkpoint directory (_CHECKPOINT_METADATA, _METADATA) or CheckpointManager directory"
    }

    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        marker(store, path).map(|m| Detected {
            path: m,
            files: Vec::new(),
            format: &Orbax,
        })
    }

    /// The steps of a `CheckpointManager` directory: subdirectories named by a step number that
    /// hold a `_CHECKPOINT_METADATA` (one check of a file per such name; other names are not
    /// looked into).
    fn in_dir(
        &self,
        store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        entries
            .iter()
            .filter(|(_, k)| *k == EntryKind::Dir)
            .filter_map(|(n, _)| {
                let n = n.to_str()?;
                step_number(n)?;
                let m = dir.join(n).join(CHECKPOINT_METADATA);
                store.is_file(&m).then(|| (n.to_string(), m))
            })
            .collect()
    }

    /// The highest step by number (`10` after `9`), as Orbax's `latest_step`.
    fn latest(&self, checkpoints: &[(String, PathBuf)]) -> Option<String> {
        checkpoints
            .iter()
            .filter(|(_, p)| p.file_name().is_some_and(|f| f == CHECKPOINT_METADATA))
            .filter_map(|(n, _)| Some((step_number(n)?, n)))
            .max()
            .map(|(_, n)| n.clone())
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        let store = ctx.shared.clone().ok_or_else(|| {
            invalid(
                &found.path,
                "an Orbax checkpoint needs a shared store to read from",
            )
        })?;
        open(store, &found.path).map(|o| Arc::new(o) as Arc<dyn Opened>)
    }
}

/// An opened Orbax checkpoint.
pub(crate) struct OpenedOrbax {
    set: Arc<OrbaxSet>,
    files: Vec<(String, Arc<[u8]>)>,
}

/// A small file read whole, as a format file.
fn small(store: &dyn Store, path: &Path) -> Result<Vec<u8>, SourceError> {
    store
        .read_whole(path, MAX_SMALL)
        .map_err(|err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        })
}

/// Opens the checkpoint `marker` (its `_CHECKPOINT_METADATA` or `_METADATA`) recognises.
pub(crate) fn open(store: Arc<dyn Store>, marker: &Path) -> Result<OpenedOrbax, SourceError> {
    let dir = marker.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut files: Vec<(String, Arc<[u8]>)> = Vec::new();
    let mut source_bytes = 0u64;
    if marker.file_name().is_some_and(|n| n == CHECKPOINT_METADATA) {
        let b = small(&*store, marker)?;
        source_bytes += b.len() as u64;
        files.push((format!("orbax/{CHECKPOINT_METADATA}"), b.into()));
    }
    // The items: the directory itself, or its subdirectories with a _METADATA. Each
    // `_METADATA` is read by trying (one request on object storage, none to ask first).
    let mut entries = store.list(&dir).map_err(|err| SourceError::Io {
        path: dir.clone(),
        err,
    })?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let read_meta = |p: &Path| -> Result<Option<Vec<u8>>, SourceError> {
        match store.read_whole(p, set::MAX_META) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(SourceError::Io {
                path: p.to_path_buf(),
                err,
            }),
        }
    };
    let mut item_dirs: Vec<(Option<String>, PathBuf, Vec<u8>)> = Vec::new();
    if entries
        .iter()
        .any(|(n, k)| n == METADATA && *k == EntryKind::File)
    {
        let m = dir.join(METADATA);
        if let Some(b) = read_meta(&m)? {
            item_dirs.push((None, dir.clone(), b));
        }
    } else {
        for (n, k) in &entries {
            let Some(n) = n.to_str() else {
                continue;
            };
            if *k != EntryKind::Dir {
                continue;
            }
            if let Some(b) = read_meta(&dir.join(n).join(METADATA))? {
                item_dirs.push((Some(n.to_string()), dir.join(n), b));
            }
        }
    }
    let mut items = Vec::new();
    let mut tensors = Vec::new();
    let mut config = None;
    for (i, (name, idir, bytes)) in item_dirs.into_iter().enumerate() {
        let mpath = idir.join(METADATA);
        source_bytes += bytes.len() as u64;
        let tree = tree::parse(&bytes).map_err(|e| invalid(&mpath, e.to_string()))?;
        let shown = |f: &str| match &name {
            Some(n) => format!("orbax/{n}/{f}"),
            None => format!("orbax/{f}"),
        };
        files.push((shown(METADATA), bytes.into()));
        if let Some(raw) = read_meta(&idir.join("_sharding"))? {
            source_bytes += raw.len() as u64;
            files.push((shown("sharding.json"), sharding_json(&raw).into()));
        }
        let ocdbt = tree
            .use_ocdbt
            .unwrap_or_else(|| store.is_file(&idir.join("manifest.ocdbt")));
        let files_of = || StoreFiles::new(store.clone(), idir.clone());
        // An item without arrays (Keras's `model_config`: a string) has no database to open.
        let has_arrays = tree.leaves.iter().any(|l| l.kind == tree::Kind::Array);
        let kv = if ocdbt && has_arrays {
            match ocdbt::Db::open(files_of()) {
                Ok(db) => Kv::Ocdbt(db),
                Err(e) => Kv::Broken(format!("{}/manifest.ocdbt: {e}", idir.display())),
            }
        } else {
            Kv::Dirs(files_of())
        };
        let item = Item {
            name: name.clone(),
            dir: idir.clone(),
            store: store.clone(),
            kv,
            all_chunks_stored: tree.all_chunks_stored,
            zarr3_first: tree.use_zarr3,
            strings: OnceLock::new(),
        };
        // Keras's OrbaxCheckpoint: the model's config is the string leaf `config` of the item
        // `model_config`, shown as a `.keras` file's config.json is.
        if name.as_deref() == Some("model_config")
            && tree
                .leaves
                .iter()
                .any(|l| l.path == ["config"] && l.kind == tree::Kind::String)
        {
            config = Some(items.len());
        }
        tensors.extend(set::tensors_of(i, name.as_deref(), tree.leaves));
        items.push(item);
    }
    let meta = store.meta(&dir).map_err(|err| SourceError::Io {
        path: dir.clone(),
        err,
    })?;
    let set = Arc::new(OrbaxSet::new(
        dir.clone(),
        meta,
        source_bytes,
        items,
        tensors,
    ));
    if let Some(i) = config {
        if let Some(c) = set.0.items.get(i).and_then(|it| it.config_json()) {
            files.push(("config.json".into(), c.into()));
        }
    }
    Ok(OpenedOrbax { set, files })
}

/// Whether a leaf's path is a Keras model variable's: under `trainable_variables/` or
/// `non_trainable_variables/`.
fn is_keras_variable(path: &[String]) -> bool {
    path.len() > 1 && (path[0] == "trainable_variables" || path[0] == "non_trainable_variables")
}

/// `names/` of a Keras `OrbaxCheckpoint`: each model variable (under `trainable_variables/` and
/// `non_trainable_variables/`) by its `variable.path` (`sequential/hidden/kernel`), the name a
/// `.keras` file's `names/` gives it. Made when `names/` is first used (a walk of every tensor).
fn keras_names(set: &OrbaxSet) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in &set.0.tensors {
        let p = &t.leaf.path;
        if is_keras_variable(p) {
            out.push((p[1..].join("/"), t.key.clone()));
        }
    }
    crate::formats::names::uniquify(out)
}

/// `_sharding` with its keys (base64 of array names) decoded and its values (JSON in strings)
/// parsed, pretty-printed; the bytes as stored where they are not that.
fn sharding_json(raw: &[u8]) -> Vec<u8> {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(raw) else {
        return raw.to_vec();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in m {
        let name = base64_decode(&k)
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or(k);
        let v = match &v {
            serde_json::Value::String(s) => serde_json::from_str(s).unwrap_or(v),
            _ => v,
        };
        out.insert(name, v);
    }
    let mut text = serde_json::to_vec_pretty(&serde_json::Value::Object(out)).unwrap_or_default();
    text.push(b'\n');
    text
}

/// Standard base64 (with padding), as Orbax writes `_sharding`'s keys.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for group in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in group.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match group.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

impl Item {
    /// Keras's model config (the string `config` of `_strings.json`, read once for this and
    /// the string tensor), pretty-printed JSON.
    fn config_json(&self) -> Option<Vec<u8>> {
        let config = self.strings().ok()?.get("config")?.as_str()?;
        let parsed: serde_json::Value = serde_json::from_str(config).ok()?;
        let mut out = serde_json::to_vec_pretty(&parsed).ok()?;
        out.push(b'\n');
        Some(out)
    }
}

impl Opened for OpenedOrbax {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    /// Decided without a walk: for each item, a binary search of the sorted keys for the first
    /// one under its `trainable_variables/` or `non_trainable_variables/`.
    fn has_names(&self) -> bool {
        let set = &self.set.0;
        let items: Vec<Option<&str>> = set.items.iter().map(|i| i.name.as_deref()).collect();
        items.iter().any(|item| {
            ["trainable_variables/", "non_trainable_variables/"]
                .iter()
                .any(|dir| {
                    let prefix = match item {
                        Some(n) => format!("{n}/{dir}"),
                        None => dir.to_string(),
                    };
                    let i = set.tensors.partition_point(|t| t.key < prefix);
                    set.tensors.get(i).is_some_and(|t| {
                        t.key.starts_with(&prefix) && is_keras_variable(&t.leaf.path)
                    })
                })
        })
    }

    fn names(&self) -> Vec<(String, String)> {
        keras_names(&self.set)
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    /// The generic checks (every array read: every chunk it covers found and decoded, zarr v3's
    /// CRC-32Cs checked), then each OCDBT database's whole B+tree (every node read and checked
    /// against its CRC-32C, also those no array's read reaches).
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let mut generic = Generic::new(self.set.clone(), Vec::new());
        for (i, item) in self.set.0.items.iter().enumerate() {
            if !matches!(item.kv, Kv::Ocdbt(_)) {
                continue;
            }
            let set = self.set.clone();
            generic = generic.with_file_check(Box::new(move || {
                let label = match &set.0.items[i].name {
                    Some(n) => format!("[{n}/manifest.ocdbt]"),
                    None => "[manifest.ocdbt]".to_string(),
                };
                let result = match &set.0.items[i].kv {
                    Kv::Ocdbt(db) => db
                        .list(b"")
                        // Index bytes, not tensor data: none counted.
                        .map(|_| 0)
                        .map_err(|e| {
                            format!("{}/manifest.ocdbt: {e}", set.0.items[i].dir.display())
                        }),
                    _ => Ok(0),
                };
                (label.into_bytes(), result)
            }));
        }
        Box::new(generic)
    }
}

#[cfg(test)]
mod tests;
