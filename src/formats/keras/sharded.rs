//! Keras 3 sharded weights: `model.save_weights("model.weights.h5", max_shard_size=...)` writes
//! `model.weights.json` (a `weight_map` from each HDF5 group, `/layers/dense/vars`, to the
//! shard file holding its datasets, or the list of them: Keras writes the name alone while it
//! has written one dataset of the group, a list once it writes another; and a `metadata`
//! block, `total_size`, which nothing here needs) and `model_00000.weights.h5`, `model_00001.weights.h5`,
//! ... One model: every dataset of every shard a tensor under its HDF5 path, as in one
//! `.weights.h5` (a group split across shards, as the optimizer's variables are, is read across
//! them: each dataset is whole in one shard).
//!
//! Recognised by the index file (`*.weights.json` holding a `weight_map`), or a directory
//! holding exactly one. A shard the index names that is missing, or that holds nothing of a
//! group the index says it holds, is what `verify` reports; the other shards' tensors are
//! served.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{FsError, FsResult, SourceError};
use crate::formats::integrity::{Generic, Integrity, Item};
use crate::formats::tensors::{next_position, walk, Stored, TensorData, TensorInfo, TensorSet};
use crate::formats::Opened;
use crate::source::bytes::{EntryKind, FileMeta, Store};

/// The suffix of an index file's name.
pub(crate) const SUFFIX: &str = ".weights.json";
/// Largest index file read.
const MAX_INDEX: u64 = 16 << 20;

/// A parsed index: the shard files in order, and each group's shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    pub(crate) shards: Vec<String>,
    pub(crate) groups: Vec<(String, Vec<String>)>,
}

/// Parses `model.weights.json`.
pub(crate) fn parse(bytes: &[u8]) -> Result<ShardIndex, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or("no weight_map object")?;
    let mut shards: Vec<String> = Vec::new();
    let mut groups = Vec::new();
    for (group, files) in map {
        // Keras writes a group's entry as the one shard's name when it wrote one dataset of
        // the group, and turns it into a list when it writes another (`ShardedH5IOStore`);
        // its reader takes both.
        let files: Vec<&serde_json::Value> = match files {
            serde_json::Value::String(_) => vec![files],
            serde_json::Value::Array(a) => a.iter().collect(),
            _ => {
                return Err(format!(
                    "weight_map[{group:?}] is neither a file name nor a list of them"
                ))
            }
        };
        let mut list = Vec::new();
        for f in files {
            let f = f
                .as_str()
                .ok_or_else(|| format!("weight_map[{group:?}] holds a file that is not a name"))?;
            if f.is_empty() || f.contains('/') || f == ".." || f == "." {
                return Err(format!(
                    "weight_map[{group:?}] names {f:?}, not a file beside the index"
                ));
            }
            if !shards.iter().any(|s| s == f) {
                shards.push(f.to_string());
            }
            list.push(f.to_string());
        }
        groups.push((group.clone(), list));
    }
    shards.sort();
    Ok(ShardIndex { shards, groups })
}

/// Whether `path` is a sharded-weights index (by name and content).
pub(crate) fn is_index(store: &dyn Store, path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(SUFFIX))
        && store.is_file(path)
        && store
            .read_whole(path, MAX_INDEX)
            .ok()
            .is_some_and(|b| parse(&b).is_ok())
}

/// The index inside directory `dir`, when it holds exactly one.
pub(crate) fn index_in(store: &dyn Store, dir: &Path) -> Option<PathBuf> {
    let entries = store.list(dir).ok()?;
    let mut found = entries
        .iter()
        .filter(|(n, k)| *k == EntryKind::File && n.to_str().is_some_and(|n| n.ends_with(SUFFIX)))
        .map(|(n, _)| dir.join(n))
        .filter(|p| is_index(store, p));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The shard files the indexes among `entries` of `dir` name (not checkpoints of their own).
pub(crate) fn shards_named(
    store: &dyn Store,
    dir: &Path,
    entries: &[(std::ffi::OsString, EntryKind)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (n, k) in entries {
        let Some(n) = n.to_str() else { continue };
        if *k != EntryKind::File || !n.ends_with(SUFFIX) {
            continue;
        }
        if let Ok(b) = store.read_whole(&dir.join(n), MAX_INDEX) {
            if let Ok(i) = parse(&b) {
                out.extend(i.shards);
            }
        }
    }
    out
}

/// An opened sharded model.
pub(crate) struct OpenedSharded {
    set: Arc<ShardedSet>,
    index: ShardIndex,
    files: Vec<(String, Arc<[u8]>)>,
}

/// The tensors of every shard, by key: `(key, shard, position in the shard's set)`.
pub(crate) struct ShardedSet {
    path: PathBuf,
    meta: FileMeta,
    source_bytes: u64,
    entries: Vec<(Vec<u8>, usize, u64)>,
    shards: Vec<(PathBuf, Shard)>,
}

/// A shard's tensors, or why it could not be opened.
type Shard = Result<Arc<dyn TensorSet>, String>;

/// Opens the sharded model whose index is `path`.
pub(crate) fn open(
    store: &dyn Store,
    path: &Path,
    verify: bool,
) -> Result<OpenedSharded, SourceError> {
    let bytes = store
        .read_whole(path, MAX_INDEX)
        .map_err(|err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        })?;
    let index = parse(&bytes).map_err(|msg| SourceError::Invalid {
        path: path.to_path_buf(),
        msg,
    })?;
    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut shards = Vec::new();
    let mut entries = Vec::new();
    let mut source_bytes = bytes.len() as u64;
    for (i, name) in index.shards.iter().enumerate() {
        let p = dir.join(name);
        let opened = if store.is_file(&p) {
            super::open(store, &p, verify, false)
                .map(|o| o.tensors())
                .map_err(|e| e.to_string())
        } else {
            Err(format!(
                "{}: missing (named by {})",
                p.display(),
                path.file_name().unwrap_or_default().to_string_lossy()
            ))
        };
        if let Ok(set) = &opened {
            source_bytes += set.source_bytes();
            walk(&**set, |pos, key| {
                entries.push((key.to_vec(), i, pos));
                Ok(true)
            })
            .map_err(|e| SourceError::Invalid {
                path: p.clone(),
                msg: e.to_string(),
            })?;
        }
        shards.push((p, opened));
    }
    entries.sort();
    // A dataset in two shards: the first shard's (Keras writes each once).
    entries.dedup_by(|a, b| a.0 == b.0);
    let meta = store.meta(path).map_err(|err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let set = Arc::new(ShardedSet {
        path: path.to_path_buf(),
        meta,
        source_bytes,
        entries,
        shards,
    });
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    Ok(OpenedSharded {
        set,
        index,
        files: vec![(name, bytes.into())],
    })
}

impl ShardedSet {
    fn entry(&self, pos: u64) -> FsResult<&(Vec<u8>, usize, u64)> {
        usize::try_from(pos)
            .ok()
            .and_then(|p| self.entries.get(p))
            .ok_or(FsError::NotFound)
    }
    fn shard(&self, pos: u64) -> FsResult<(&Arc<dyn TensorSet>, u64)> {
        let (_, s, p) = self.entry(pos)?;
        match self.shards.get(*s) {
            Some((_, Ok(set))) => Ok((set, *p)),
            _ => Err(FsError::NotFound),
        }
    }
}

impl TensorSet for ShardedSet {
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
        let i = self.entries.partition_point(|e| e.0.as_slice() < key);
        Ok((i < self.entries.len()).then_some(i as u64))
    }
    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        Ok(next_position(pos, self.entries.len()))
    }
    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        Ok(self.entry(pos)?.0.clone())
    }
    fn hidden(&self, _key: &[u8]) -> bool {
        false
    }
    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        let (set, p) = self.shard(pos)?;
        let mut info = set.info(p)?;
        // Where it is stored: its shard's number among the model's.
        if let Some(s) = info.stored.as_mut() {
            s.shard = self.entry(pos)?.1 as u32;
        }
        Ok(info)
    }
    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        let (set, p) = self.shard(pos)?;
        set.open(p)
    }
    fn slice_locations(&self, pos: u64) -> FsResult<Vec<Stored>> {
        let (set, p) = self.shard(pos)?;
        set.slice_locations(p)
    }
    fn complete(&self) -> bool {
        self.shards
            .iter()
            .all(|(_, s)| s.as_ref().is_ok_and(|s| s.complete()))
    }
    fn part_files(&self) -> Vec<PathBuf> {
        self.shards.iter().map(|(p, _)| p.clone()).collect()
    }
}

impl Opened for OpenedSharded {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    /// The generic checks (every dataset of every shard read), each missing shard first, then
    /// the index against the shards: every shard it names for a group holds datasets of that
    /// group.
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let n = self.set.shards.len() as u32;
        let first: Vec<Item> = self
            .set
            .shards
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| s.is_err())
            .map(|(i, (p, _))| Item::MissingShard {
                shard: i as u32,
                shards: n,
                file: p.clone(),
            })
            .collect();
        let mut generic = Generic::new(self.set.clone(), first);
        let set = self.set.clone();
        let index = self.index.clone();
        generic = generic.with_file_check(Box::new(move || {
            let label = format!(
                "[{}]",
                set.path.file_name().unwrap_or_default().to_string_lossy()
            )
            .into_bytes();
            for (group, files) in &index.groups {
                let prefix = format!("{}/", group.trim_start_matches('/'));
                for f in files {
                    let Some(i) = index.shards.iter().position(|s| s == f) else {
                        continue;
                    };
                    if set.shards.get(i).is_none_or(|(_, s)| s.is_err()) {
                        continue; // reported as missing
                    }
                    let holds = set
                        .entries
                        .iter()
                        .any(|(k, s, _)| *s == i && k.starts_with(prefix.as_bytes()));
                    if !holds {
                        return (
                            label,
                            Err(format!(
                                "{}: {f} holds no dataset of {group}, which the index says it holds",
                                set.path.display()
                            )),
                        );
                    }
                }
            }
            (label, Ok(0))
        }));
        Box::new(generic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape of `weight_map` Keras writes or reads: a group's one shard as a string, a
    /// list of one or several, the `metadata` block beside it.
    #[test]
    fn weight_map_entries_are_names_or_lists_of_them() {
        let i = parse(
            br#"{"metadata": {"total_size": 11292.0}, "weight_map": {
                "/layers/embedding/vars": "model_00000.weights.h5",
                "/layers/dense/vars": ["model_00001.weights.h5"],
                "/optimizer/vars": ["model_00001.weights.h5", "model_00002.weights.h5"]}}"#,
        )
        .expect("parse");
        assert_eq!(
            i.shards,
            [
                "model_00000.weights.h5",
                "model_00001.weights.h5",
                "model_00002.weights.h5"
            ]
        );
        let group = |g: &str| {
            i.groups
                .iter()
                .find(|(n, _)| n == g)
                .map(|(_, f)| f.clone())
                .unwrap_or_else(|| panic!("{g} missing: {i:?}"))
        };
        assert_eq!(group("/layers/embedding/vars"), ["model_00000.weights.h5"]);
        assert_eq!(group("/optimizer/vars").len(), 2);
        // An empty map is a model without weights.
        assert!(parse(br#"{"weight_map": {}}"#).is_ok());
    }

    #[test]
    fn anything_else_is_refused_in_words() {
        for (json, words) in [
            (
                &br#"{"weight_map": {"/a/vars": 3}}"#[..],
                "neither a file name",
            ),
            (br#"{"weight_map": {"/a/vars": [3]}}"#, "not a name"),
            (
                br#"{"weight_map": {"/a/vars": "../x.h5"}}"#,
                "not a file beside",
            ),
            (
                br#"{"weight_map": {"/a/vars": ["d/x.h5"]}}"#,
                "not a file beside",
            ),
            (br#"{"weight_map": ["x.h5"]}"#, "no weight_map object"),
            (br#"{"weight_map""#, "not JSON"),
        ] {
            let e = parse(json).expect_err("refused");
            assert!(e.contains(words), "{e}");
        }
    }
}
