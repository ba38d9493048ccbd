//! safetensors checkpoints behind the format seam (the format the Hugging Face world hands you):
//! one `.safetensors` file, a sharded set (`model.safetensors.index.json` and the shards its
//! `weight_map` names, as transformers' `save_pretrained` writes them), or a directory of them.
//!
//! Recognised by content (an 8-byte header length within the file and the 100,000,000-byte
//! limit, then `{`), a `*.safetensors` name too (so that a damaged file says what is wrong with
//! it), an index by its name (`*.safetensors.index.json`) and content (a `weight_map` object). A
//! directory holding one index and its shards, or one `.safetensors` file, is that checkpoint; a
//! directory of several (files, or indexes) is a directory of checkpoints, each found by
//! [`Format::in_dir`] under its file name.
//!
//! Opening reads only the header(s) ([`header`]: checked as safetensors' own reader checks them;
//! a header it refuses is refused, naming the tensor and what is wrong); every tensor is then read
//! in place by offset (zero-copy from a local file's pages, ranged reads from object storage),
//! under its name as given. A file shorter than its header says opens: the tensors past its end
//! fail; `verify` reports the file's length (a longer one too, which safetensors refuses).
//! safetensors stores no checksum: what `verify` can check is the header, the offsets and the
//! lengths, and that every byte can be read.

pub(crate) mod header;
pub(crate) mod index;
mod set;
pub(crate) use set::SafetensorsSet;

use bytes::Bytes;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::integrity::{Generic, Integrity, Item};
use crate::formats::safetensors::header::Header;
use crate::formats::safetensors::index::Index;
use crate::formats::tensors::{self, next_position, Stored, TensorData, TensorInfo, TensorSet};
use crate::parse::FormatError;
use crate::source::bytes::{ByteSource, EntryKind, FileMeta, RangeReader, Store};

/// What a single file's name ends with, by convention.
pub(crate) const EXT: &str = ".safetensors";
/// The names tried inside a directory that cannot be listed (plain HTTP), in order.
const DIR_FILES: [&str; 2] = ["model.safetensors.index.json", "model.safetensors"];
/// Problems of an index named in full by `verify`; the rest are counted.
const MAX_LISTED: usize = 5;

/// The safetensors format.
pub(crate) struct Safetensors;

/// Whether `name` is a `.safetensors` file's name.
fn is_file_name(name: &str) -> bool {
    name.len() > EXT.len() && name.ends_with(EXT)
}

/// Whether file `path` looks like a safetensors file by its first bytes: a header length
/// within the file and the limit, the JSON starting with `{` and then a key or `}`.
fn sniff(store: &dyn Store, path: &Path) -> bool {
    let Ok(f) = crate::formats::opened(store, path, false) else {
        return false;
    };
    let len = f.len();
    let mut head = [0u8; 32];
    let n = (head.len() as u64).min(len) as usize;
    if n < 10 || f.read_exact_at(&mut head[..n], 0).is_err() {
        return false;
    }
    let mut h8 = [0u8; 8];
    h8.copy_from_slice(&head[..8]);
    let Ok(json_len) = header::json_len(h8, len) else {
        return false;
    };
    let json_end = (8 + json_len as usize).min(n);
    if json_len < 2 || head[8] != b'{' {
        return false;
    }
    head[9..json_end]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|&b| b == b'"' || b == b'}')
}

/// The parsed index at `path`, if it is one (by name and content).
fn read_index(store: &dyn Store, path: &Path) -> Option<(Vec<u8>, Index)> {
    let name = path.file_name()?.to_str()?;
    if !index::is_index_name(name) || !store.is_file(path) {
        return None;
    }
    let bytes = store.read_whole(path, index::MAX_INDEX).ok()?;
    let i = index::parse(&bytes).ok()?;
    Some((bytes, i))
}

/// The safetensors checkpoints among the entries of directory `dir`: each index (named by its
/// file name less `.index.json`), then each `.safetensors` file no index names as a shard
/// (named by its file name).
fn members(
    store: &dyn Store,
    dir: &Path,
    entries: &[(OsString, EntryKind)],
) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut shards = std::collections::HashSet::new();
    for (n, k) in entries {
        let Some(n) = n.to_str() else { continue };
        if *k != EntryKind::File || !index::is_index_name(n) {
            continue;
        }
        let p = dir.join(n);
        if let Some((_, i)) = read_index(store, &p) {
            shards.extend(i.shards);
            out.push((n.trim_end_matches(".index.json").to_string(), p));
        }
    }
    for (n, k) in entries {
        let Some(n) = n.to_str() else { continue };
        if *k == EntryKind::File && is_file_name(n) && !shards.contains(n) {
            out.push((n.to_string(), dir.join(n)));
        }
    }
    out.sort();
    out
}

impl Format for Safetensors {
    fn name(&self) -> &'static str {
        "safetensors checkpoint"
    }

    fn source(&self) -> &'static str {
        "a .safetensors file, a Hugging Face model.safetensors.index.json, or their directory"
    }

    /// `path` itself (a `.safetensors` file by content or name, an index), or a directory
    /// holding exactly one of them (an index with its shards, or one file): that checkpoint.
    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        let found = |p: &Path| Detected {
            path: p.to_path_buf(),
            files: Vec::new(),
            format: &Safetensors,
        };
        match store.kind(path) {
            Some(EntryKind::File) => {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if index::is_index_name(name) {
                    return read_index(store, path).map(|_| found(path));
                }
                (is_file_name(name) || sniff(store, path)).then(|| found(path))
            }
            Some(EntryKind::Dir) => {
                let entries = store.list(path).ok()?;
                match &members(store, path, &entries)[..] {
                    [(_, one)] => Some(found(one)),
                    _ => None,
                }
            }
            // A directory the store cannot list (plain HTTP): by the names transformers writes.
            _ => DIR_FILES.iter().map(|n| path.join(n)).find_map(|p| {
                let is = match read_index(store, &p) {
                    Some(_) => true,
                    None => !index::is_index_name(&p.to_string_lossy()) && store.is_file(&p),
                };
                is.then(|| found(&p))
            }),
        }
    }

    /// A directory of several safetensors checkpoints (files, or sharded sets by their index):
    /// each one. Otherwise none: a directory holding one is that checkpoint
    /// ([`Format::detect`]).
    fn in_dir(
        &self,
        store: &dyn Store,
        dir: &Path,
        entries: &[(OsString, EntryKind)],
    ) -> Vec<(String, PathBuf)> {
        let found = members(store, dir, entries);
        if found.len() < 2 {
            return Vec::new();
        }
        found
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        let name = found
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        let opened = if index::is_index_name(name) {
            open_sharded(ctx.store, &found.path)?
        } else {
            open_file(ctx.store, &found.path)?
        };
        Ok(Arc::new(opened))
    }
}

fn invalid(path: &Path, msg: impl Into<String>) -> SourceError {
    SourceError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// A file opened and its header read, or why not (in words, without the path).
fn open_shard(
    store: &dyn Store,
    path: &Path,
    take: bool,
) -> Result<(Arc<dyn ByteSource>, Header), String> {
    let f = crate::formats::opened(store, path, take).map_err(|e| e.to_string())?;
    let h = header::read(&*f)?;
    Ok((f, h))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// `__metadata__` as a file: a JSON object, pretty-printed.
fn metadata_file(m: &[(String, String)]) -> Arc<[u8]> {
    let map: serde_json::Map<String, serde_json::Value> = m
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let mut b = serde_json::to_vec_pretty(&map).unwrap_or_default();
    b.push(b'\n');
    b.into()
}

/// An opened safetensors checkpoint.
pub(crate) struct OpenedSafetensors {
    set: Arc<SafetensorsSet>,
    files: Vec<(String, Arc<[u8]>)>,
    /// A sharded set's index: its file name and what it says.
    index: Option<(String, Arc<Index>)>,
}

/// Opens one `.safetensors` file: its header refused is the file refused.
fn open_file(store: &dyn Store, path: &Path) -> Result<OpenedSafetensors, SourceError> {
    if !store.is_file(path) {
        return Err(SourceError::Io {
            path: path.to_path_buf(),
            err: store.missing(path),
        });
    }
    let (f, h) = open_shard(store, path, true).map_err(|m| invalid(path, m))?;
    let files = h
        .metadata
        .as_deref()
        .map(|m| vec![("metadata.json".to_string(), metadata_file(m))])
        .unwrap_or_default();
    let entries = (0..h.tensors.len() as u32)
        .map(|index| set::Entry { shard: 0, index })
        .collect();
    let set = SafetensorsSet {
        path: path.to_path_buf(),
        meta: f.meta(),
        source_bytes: f.len(),
        shards: vec![set::Shard {
            path: path.to_path_buf(),
            name: file_name(path),
            opened: Ok((f, h)),
            missing: false,
        }],
        entries,
        sharded: false,
    };
    Ok(OpenedSafetensors {
        set: Arc::new(set),
        files,
        index: None,
    })
}

/// Opens a sharded set by its index: every shard it names, each header read. A shard that is
/// missing or whose header is refused does not stop the others (its tensors are not known;
/// `verify` names it).
fn open_sharded(store: &dyn Store, path: &Path) -> Result<OpenedSafetensors, SourceError> {
    let bytes = store
        .read_whole(path, index::MAX_INDEX)
        .map_err(|err| SourceError::Io {
            path: path.to_path_buf(),
            err,
        })?;
    let idx = index::parse(&bytes).map_err(|m| invalid(path, m))?;
    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let index_name = file_name(path);
    let mut shards = Vec::with_capacity(idx.shards.len());
    let mut source_bytes = bytes.len() as u64;
    let mut files: Vec<(String, Arc<[u8]>)> = vec![(index_name.clone(), bytes.into())];
    for name in &idx.shards {
        let p = dir.join(name);
        let missing = !store.is_file(&p);
        let opened = if missing {
            Err(format!("missing (named by {index_name})"))
        } else {
            open_shard(store, &p, false)
        };
        if let Ok((f, h)) = &opened {
            source_bytes = source_bytes.saturating_add(f.len());
            if let Some(m) = &h.metadata {
                files.push((format!("metadata/{name}.json"), metadata_file(m)));
            }
        }
        shards.push(set::Shard {
            path: p,
            name: name.clone(),
            opened,
            missing,
        });
    }
    // Every tensor of every shard, by name; one in two shards: the one the index names, else
    // the first (verify reports both).
    let wanted: HashMap<&str, &str> = idx
        .weight_map
        .iter()
        .map(|(t, f)| (t.as_str(), f.as_str()))
        .collect();
    let mut all: Vec<(&str, bool, u32, u32)> = Vec::new();
    for (si, s) in shards.iter().enumerate() {
        if let Ok((_, h)) = &s.opened {
            for (ti, t) in h.tensors.iter().enumerate() {
                let named_here = wanted.get(t.name.as_str()) == Some(&s.name.as_str());
                all.push((&t.name, !named_here, si as u32, ti as u32));
            }
        }
    }
    all.sort();
    all.dedup_by(|a, b| a.0 == b.0);
    let entries = all
        .into_iter()
        .map(|(_, _, shard, index)| set::Entry { shard, index })
        .collect();
    let meta = store.meta(path).map_err(|err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let set = SafetensorsSet {
        path: path.to_path_buf(),
        meta,
        source_bytes,
        shards,
        entries,
        sharded: true,
    };
    Ok(OpenedSafetensors {
        set: Arc::new(set),
        files,
        index: Some((index_name, Arc::new(idx))),
    })
}

/// What a sharded set's index says that its shards do not hold, and what they hold that it does
/// not say: problems in words, naming the files.
fn index_problems(set: &SafetensorsSet, index_name: &str, idx: &Index) -> Vec<String> {
    let mut out = Vec::new();
    let shard = |f: &str| set.shards.iter().find(|s| s.name == f);
    let holds = |s: &set::Shard, t: &str| {
        s.opened.as_ref().is_ok_and(|(_, h)| {
            h.tensors
                .binary_search_by(|x| x.name.as_str().cmp(t))
                .is_ok()
        })
    };
    let wanted: HashMap<&str, &str> = idx
        .weight_map
        .iter()
        .map(|(t, f)| (t.as_str(), f.as_str()))
        .collect();
    for (t, f) in &idx.weight_map {
        match shard(f) {
            Some(s) if s.opened.is_ok() && !holds(s, t) => out.push(format!(
                "{index_name} puts tensor {t:?} in {f}, which does not hold it"
            )),
            // A shard missing or unreadable is reported as itself.
            _ => {}
        }
    }
    for s in &set.shards {
        let Ok((_, h)) = &s.opened else { continue };
        for t in &h.tensors {
            match wanted.get(t.name.as_str()) {
                Some(f) if *f == s.name => {}
                Some(f) => out.push(format!(
                    "{} holds tensor {:?}, which {index_name} puts in {f}",
                    s.name, t.name
                )),
                None => out.push(format!(
                    "{} holds tensor {:?}, which {index_name}'s weight_map does not list",
                    s.name, t.name
                )),
            }
        }
    }
    out
}

impl Opened for OpenedSafetensors {
    fn no_checksum(&self) -> Option<&'static str> {
        Some("safetensors stores no checksum")
    }

    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    fn files(&self) -> Vec<(String, Arc<[u8]>)> {
        self.files.clone()
    }

    /// Its tensors' names are the names users know them by (`model.layers.0.mlp.up_proj.weight`,
    /// `dense/kernel`): `names/` shows each under its own name, so that `diff --names` matches
    /// them against another checkpoint's `names/`.
    fn has_names(&self) -> bool {
        !self.set.entries.is_empty()
    }

    fn names(&self) -> Vec<(String, String)> {
        (0..self.set.entries.len() as u64)
            .filter_map(|p| self.set.name(p).ok())
            .map(|n| (n.to_string(), n.to_string()))
            .collect()
    }

    /// The generic checks (every tensor read from its file; safetensors stores no checksum),
    /// missing and unreadable shards first, then each file's length against its header, and a
    /// sharded set's index against its shards.
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let set = &self.set;
        let n = set.shards.len() as u32;
        let mut first = Vec::new();
        for (i, s) in set.shards.iter().enumerate() {
            match &s.opened {
                Err(_) if s.missing => first.push(Item::MissingShard {
                    shard: i as u32,
                    shards: n,
                    file: s.path.clone(),
                }),
                Err(e) => first.push(Item::BadEntry {
                    key: format!("[{}]", s.name).into_bytes(),
                    reason: format!(
                        "{}: {e} (the tensors stored only in it are not known)",
                        s.path.display()
                    ),
                }),
                Ok(_) => {}
            }
        }
        let mut generic = Generic::new(set.clone(), first);
        for i in 0..set.shards.len() {
            if set.shards[i].opened.is_err() {
                continue;
            }
            let set = set.clone();
            generic = generic.with_file_check(Box::new(move || {
                let s = &set.shards[i];
                let label = format!("[{}]", s.name).into_bytes();
                (label, s.length_problem().map_or(Ok(0), Err))
            }));
        }
        if let Some((name, idx)) = &self.index {
            let (set, name, idx) = (set.clone(), name.clone(), idx.clone());
            generic = generic.with_file_check(Box::new(move || {
                let label = format!("[{name}]").into_bytes();
                let p = index_problems(&set, &name, &idx);
                if p.is_empty() {
                    return (label, Ok(0));
                }
                let mut words = p
                    .iter()
                    .take(MAX_LISTED)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ");
                if p.len() > MAX_LISTED {
                    words.push_str(&format!("; and {} more", p.len() - MAX_LISTED));
                }
                (label, Err(format!("{}: {words}", set.path.display())))
            }));
        }
        Box::new(generic)
    }
}
