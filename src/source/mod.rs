//! Sources: what a SOURCE path is (checkpoint prefix, checkpoint directory, SavedModel) and
//! what it holds. Probed in order; the first that matches wins.

pub mod bytes;
pub mod checkpoint;
pub mod dirtree;
pub mod file;
pub mod graph;
pub mod names;
pub mod remote;
pub mod state;
pub mod tensors;
pub mod v1;
pub mod watch;

use std::path::{Path, PathBuf};

use crate::error::SourceError;
use bytes::{LocalStore, Store};
use checkpoint::index_file_name;

/// What a SOURCE path turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// A checkpoint prefix `P` (with `P.index`).
    Prefix(PathBuf),
    /// A directory of checkpoints: `(name shown in the mount, prefix)`, and the current one.
    CheckpointDir {
        dir: PathBuf,
        checkpoints: Vec<(String, PathBuf)>,
        latest: Option<String>,
    },
    /// A SavedModel directory; `variables` is the prefix `variables/variables` if it exists.
    SavedModel {
        dir: PathBuf,
        variables: Option<PathBuf>,
    },
    /// A graph file on its own: a frozen GraphDef (`.pb`, `.pbtxt`) or a MetaGraphDef (`.meta`)
    /// without its checkpoint.
    Graph {
        path: PathBuf,
        kind: graph::GraphKind,
    },
    /// A V1 checkpoint (one table file, or every shard): `path` as given (a file, a shard, a
    /// `?????` pattern), `files` its table files.
    V1 { path: PathBuf, files: Vec<PathBuf> },
}

/// A checkpoint SOURCE path's kind: V2 (`P.index` exists) or V1 (probed by content).
pub fn checkpoint_at(store: &dyn Store, path: &Path) -> Option<Probed> {
    if store.is_file(&index_file_name(path)) {
        return Some(Probed::Prefix(path.to_path_buf()));
    }
    v1::v1_files(store, path).map(|files| Probed::V1 {
        path: path.to_path_buf(),
        files,
    })
}

/// A TF Serving legacy session bundle directory: `export.meta` beside `export-NNNNN-of-NNNNN`
/// V1 shards.
fn session_bundle(store: &dyn Store, dir: &Path) -> Option<Probed> {
    if !store.is_file(&dir.join("export.meta")) {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    let shard = store
        .list(dir)
        .ok()?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.as_bytes().starts_with(b"export-"))
        .min()?;
    match checkpoint_at(store, &dir.join(shard))? {
        Probed::V1 { files, .. } => Some(Probed::V1 {
            path: dir.join("export"),
            files,
        }),
        _ => None,
    }
}

/// Strips a trailing `.index` or `.data-NNNNN-of-NNNNN` so a tab-completed file works as a prefix.
fn as_prefix(path: &Path) -> Option<PathBuf> {
    let s = path.to_str()?;
    if let Some(p) = s.strip_suffix(".index") {
        return Some(PathBuf::from(p));
    }
    let i = s.rfind(".data-")?;
    let tail = &s[i + 6..];
    let ok = tail.len() == 14
        && tail.as_bytes()[5..9] == *b"-of-"
        && tail[..5].bytes().all(|b| b.is_ascii_digit())
        && tail[9..].bytes().all(|b| b.is_ascii_digit());
    ok.then(|| PathBuf::from(&s[..i]))
}

/// What a local SOURCE path is.
pub fn probe(path: &Path) -> Result<Probed, SourceError> {
    probe_in(&LocalStore, path)
}

/// A SOURCE as given on the command line, opened: where its files live (the local filesystem,
/// or an object store for `s3://`, `gs://`, `http(s)://` URLs) and what it is.
pub struct Source {
    pub store: std::sync::Arc<dyn Store>,
    pub probed: Probed,
    /// How to name it to the user (the path, or the URL).
    pub name: String,
    pub remote: bool,
}

/// Opens SOURCE: a local path, or a URL of an object store (configured from the standard
/// environment and `cfg`). A URL whose bucket or credentials are unusable fails here, with one
/// line naming what was looked for.
pub fn open(source: &Path, cfg: &remote::RemoteConfig) -> Result<Source, SourceError> {
    let text = source.to_string_lossy();
    if !remote::url::is_remote(&text) {
        return Ok(Source {
            store: std::sync::Arc::new(LocalStore),
            probed: probe(source)?,
            name: source.display().to_string(),
            remote: false,
        });
    }
    // Every message names the URL (the paths of a remote store are its URLs) and says what is
    // wrong in words.
    let (store, root) = remote::RemoteStore::open_url(&text, cfg)?;
    // The one request that tells a missing bucket, refused credentials or a store that does
    // not answer from a SOURCE that is merely not an object itself (a checkpoint prefix).
    store.try_kind(&root)?;
    let probed = probe_in(&store, &root)?;
    Ok(Source {
        store: std::sync::Arc::new(store),
        probed,
        name: remote::url::redact(&text),
        remote: true,
    })
}

/// Files whose presence makes a path a source directory even where the store cannot tell it
/// is one (a web server answering 404 for every directory URL).
const DIR_MARKERS: [&str; 3] = ["saved_model.pb", "saved_model.pbtxt", "checkpoint"];

/// What SOURCE `path` of `store` is. Probed in order; the first that matches wins.
pub fn probe_in(store: &dyn Store, path: &Path) -> Result<Probed, SourceError> {
    let is_file = |p: &Path| store.is_file(p);
    let kind = store.kind(path);
    if kind == Some(bytes::EntryKind::Dir) {
        return probe_dir(store, path);
    }
    if is_file(&index_file_name(path)) {
        return Ok(Probed::Prefix(path.to_path_buf()));
    }
    if kind == Some(bytes::EntryKind::File) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let dir = path.parent().map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        });
        if name == "saved_model.pb" || name == "saved_model.pbtxt" {
            if let Some(dir) = dir {
                return probe_in(store, dir);
            }
        }
        // A checkpoint directory's state file stands for its directory.
        if name == "checkpoint" {
            if let Some(dir) = dir {
                if let Ok(c @ Probed::CheckpointDir { .. }) = probe_in(store, dir) {
                    return Ok(c);
                }
            }
        }
        if let Some(prefix) = name.strip_suffix(".meta") {
            // A Saver's .meta: with its checkpoint when that is beside it.
            let p = path.with_file_name(prefix);
            if !prefix.is_empty() {
                if let Some(c) = checkpoint_at(store, &p) {
                    return Ok(c);
                }
            }
            return Ok(Probed::Graph {
                path: path.to_path_buf(),
                kind: graph::GraphKind::MetaGraph,
            });
        }
        if name.ends_with(".pb") || name.ends_with(".pbtxt") {
            return Ok(Probed::Graph {
                path: path.to_path_buf(),
                kind: graph::GraphKind::GraphDef,
            });
        }
    }
    // A V1 checkpoint: a table file, one of its shards, or the `?????` pattern of its shards
    // (never decided by name alone: the bytes are probed).
    if let Some(c @ Probed::V1 { .. }) = checkpoint_at(store, path) {
        return Ok(c);
    }
    if let Some(p) = as_prefix(path) {
        if is_file(&index_file_name(&p)) {
            return Ok(Probed::Prefix(p));
        }
    }
    if kind.is_none() {
        // A directory the store could not tell as one: by what it holds.
        if DIR_MARKERS.iter().any(|m| is_file(&path.join(m))) {
            return probe_dir(store, path);
        }
        if store.kind(&index_file_name(path)).is_none() {
            return Err(SourceError::Io {
                path: path.to_path_buf(),
                err: store.missing(path),
            });
        }
    }
    Err(SourceError::NotRecognised {
        path: path.to_path_buf(),
    })
}

/// What directory `path` of `store` is: a SavedModel, a checkpoint directory (with a state
/// file, a session bundle, or bare `*.index` files).
fn probe_dir(store: &dyn Store, path: &Path) -> Result<Probed, SourceError> {
    let is_file = |p: &Path| store.is_file(p);
    if is_file(&path.join("saved_model.pb")) || is_file(&path.join("saved_model.pbtxt")) {
        let prefix = path.join("variables").join("variables");
        let variables = is_file(&index_file_name(&prefix)).then_some(prefix);
        return Ok(Probed::SavedModel {
            dir: path.to_path_buf(),
            variables,
        });
    }
    let state_file = path.join("checkpoint");
    if is_file(&state_file) {
        let (checkpoints, latest) = state::resolve(store, path, &state_file)?;
        if checkpoints.is_empty() {
            return Err(SourceError::Invalid {
                path: state_file,
                msg: "none of the checkpoints this state file lists exists".into(),
            });
        }
        return Ok(Probed::CheckpointDir {
            dir: path.to_path_buf(),
            checkpoints,
            latest,
        });
    }
    if let Some(b) = session_bundle(store, path) {
        return Ok(b);
    }
    let checkpoints = state::index_files(store, path)?;
    if !checkpoints.is_empty() {
        return Ok(Probed::CheckpointDir {
            dir: path.to_path_buf(),
            checkpoints,
            latest: None,
        });
    }
    Err(SourceError::NotRecognised {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_from_file_names() {
        assert_eq!(
            as_prefix(Path::new("d/m.ckpt-5.index")),
            Some(PathBuf::from("d/m.ckpt-5"))
        );
        assert_eq!(
            as_prefix(Path::new("d/m.ckpt-5.data-00001-of-00003")),
            Some(PathBuf::from("d/m.ckpt-5"))
        );
        assert_eq!(as_prefix(Path::new("d/m.ckpt-5.data-1-of-3")), None);
        assert_eq!(as_prefix(Path::new("d/m.ckpt-5")), None);
    }
}
