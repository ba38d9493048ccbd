//! What a SOURCE path is: a SavedModel, a checkpoint directory (with a state file or without;
//! a TF Serving base directory of numbered SavedModels is one, see [`serving`]), a graph file,
//! or one checkpoint in any format of [`crate::formats::FORMATS`]; local or an
//! object-store URL. Probed in order; the first that matches wins.

pub mod serving;
pub(crate) mod state;

use std::path::{Path, PathBuf};

use crate::error::SourceError;
use crate::formats::v2::checkpoint::index_file_name;
use crate::source::bytes::Store;
use crate::source::local::LocalStore;

/// What a SOURCE path turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// One checkpoint, in the format that recognised it (a V2 prefix `P` with `P.index`, a V1
    /// file, shard or `?????` pattern, ...).
    Checkpoint(crate::formats::Detected),
    /// A directory of checkpoints: `(name shown in the mount, path)`, and the current one.
    CheckpointDir {
        /// The directory.
        dir: PathBuf,
        /// Its checkpoints: the name each is shown under, and its path.
        checkpoints: Vec<(String, PathBuf)>,
        /// The name of the current one (the state file's; without one, a format's rule or the
        /// newest file), if any.
        latest: Option<String>,
    },
    /// A SavedModel directory; `variables` is the prefix `variables/variables` if it exists.
    SavedModel {
        /// The SavedModel's directory.
        dir: PathBuf,
        /// The prefix of its variables checkpoint, if it has one.
        variables: Option<PathBuf>,
    },
    /// A graph file on its own: a frozen GraphDef (`.pb`, `.pbtxt`) or a MetaGraphDef (`.meta`)
    /// without its checkpoint.
    Graph {
        /// The file.
        path: PathBuf,
        /// What it holds at its top level.
        kind: crate::graph::GraphKind,
    },
}

impl Probed {
    /// The V2 checkpoint with prefix `prefix`.
    pub fn prefix(prefix: impl Into<PathBuf>) -> Probed {
        Probed::Checkpoint(crate::formats::Detected {
            path: prefix.into(),
            files: Vec::new(),
            format: &crate::formats::v2::V2,
        })
    }
}

/// What a local SOURCE path is.
pub fn probe(path: &Path) -> Result<Probed, SourceError> {
    probe_in(&LocalStore, path)
}

/// A SOURCE as given on the command line, opened: where its files live (the local filesystem,
/// or an object store for `s3://`, `gs://`, `http(s)://` URLs) and what it is.
pub(crate) struct Source {
    pub(crate) store: std::sync::Arc<dyn Store>,
    pub(crate) probed: Probed,
    /// How to name it to the user (the path, or the URL).
    pub(crate) name: String,
    pub(crate) remote: bool,
}

/// Opens SOURCE: a local path, or a URL of an object store (configured from the standard
/// environment and `cfg`). A URL whose bucket or credentials are unusable fails here, with one
/// line naming what was looked for.
pub(crate) fn open(
    source: &Path,
    cfg: &crate::source::remote::RemoteConfig,
) -> Result<Source, SourceError> {
    let text = source.to_string_lossy();
    if !crate::source::remote::url::is_remote(&text) {
        return Ok(Source {
            store: std::sync::Arc::new(LocalStore),
            probed: probe(source)?,
            name: source.display().to_string(),
            remote: false,
        });
    }
    // Every message names the URL (the paths of a remote store are its URLs) and says what is
    // wrong in words.
    let (store, root) = crate::source::remote::RemoteStore::open_url(&text, cfg)?;
    // The first probes at once (kept: none is sent again below).
    store.probe_ahead(&root);
    // The one request that tells a missing bucket, refused credentials or a store that does
    // not answer from a SOURCE that is merely not an object itself (a checkpoint prefix).
    store.try_kind(&root)?;
    let probed = probe_in(&store, &root)?;
    Ok(Source {
        store: std::sync::Arc::new(store),
        probed,
        name: crate::source::remote::url::redact(&text),
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
    if kind == Some(crate::source::bytes::EntryKind::Dir) {
        return probe_dir(store, path);
    }
    if kind == Some(crate::source::bytes::EntryKind::File) {
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
                if let Some(c) = crate::formats::detect(store, &p) {
                    return Ok(Probed::Checkpoint(c));
                }
            }
            return Ok(Probed::Graph {
                path: path.to_path_buf(),
                kind: crate::graph::GraphKind::MetaGraph,
            });
        }
        if name.ends_with(".pb") || name.ends_with(".pbtxt") {
            return Ok(Probed::Graph {
                path: path.to_path_buf(),
                kind: crate::graph::GraphKind::GraphDef,
            });
        }
    }
    // A checkpoint in any format: recognised by its bytes or its own files' names (never by
    // the SOURCE's name alone).
    if let Some(c) = crate::formats::detect(store, path) {
        return Ok(Probed::Checkpoint(c));
    }
    if kind.is_none() {
        // `export/saved_model.pb` of a TF Serving base directory: a SavedModel was expected
        // where there are versions of one.
        if let Some(err) = base_dir_not_saved_model(store, path) {
            return Err(err);
        }
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
    unreadable(store, path)?;
    Err(not_recognised(path))
}

/// The error for `DIR/saved_model.pb` (or `.pbtxt`) missing where `DIR` is a TF Serving base
/// directory: which versions it holds, and one to name instead.
fn base_dir_not_saved_model(store: &dyn Store, path: &Path) -> Option<SourceError> {
    let name = path.file_name()?.to_str()?;
    if !serving::GRAPH_FILES.contains(&name) {
        return None;
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty())?;
    let words = serving::describe_dir(store, dir)?;
    let entries = store.list(dir).ok()?;
    let hint = match serving::versions(store, dir, &entries).last() {
        Some((v, _)) => format!(
            "; name one, e.g. {}, or mount {} itself",
            dir.join(v).join(name).display(),
            dir.display()
        ),
        None => String::new(),
    };
    Some(SourceError::Invalid {
        path: path.to_path_buf(),
        msg: format!(
            "not found: {} is {words}, not a SavedModel{hint}",
            dir.display()
        ),
    })
}

/// Before "not recognised" is said of a remote file: whether its bytes can be read at all.
/// Recognising a format reads a few bytes at some offset, and a server that cannot answer a
/// range request (or any other read failure) must be named as what is wrong, not the file.
/// One request of one byte, made only on the way to that error; local files are not tried.
fn unreadable(store: &dyn Store, path: &Path) -> Result<(), SourceError> {
    if store.kind(path) != Some(crate::source::bytes::EntryKind::File) {
        return Ok(());
    }
    let Ok(f) = store.open(path) else {
        return Ok(());
    };
    if !f.is_remote() {
        return Ok(());
    }
    let mut b = [0u8; 1];
    match f.read_exact_at(&mut b, 0) {
        Ok(()) => Ok(()),
        Err(err) => Err(SourceError::Format {
            path: path.to_path_buf(),
            err,
        }),
    }
}

/// What directory `path` of `store` is: a SavedModel, a checkpoint directory (with a state
/// file, a session bundle, or the checkpoint files of any format directly in it).
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
    if let Some(b) = crate::formats::v1::session_bundle(store, path) {
        return Ok(Probed::Checkpoint(b));
    }
    let listed = match state::checkpoint_files(store, path) {
        Ok(checkpoints) if !checkpoints.is_empty() => {
            let latest = state::newest_file(store, &checkpoints);
            return Ok(Probed::CheckpointDir {
                dir: path.to_path_buf(),
                checkpoints,
                latest,
            });
        }
        other => other.map(|_| ()),
    };
    // A directory that is one checkpoint by a file inside it (a TF.js model's `model.json`),
    // also where the store cannot list it (plain HTTP).
    if let Some(c) =
        crate::formats::detect(store, path).filter(|d| d.path.starts_with(path) && d.path != path)
    {
        return Ok(Probed::Checkpoint(c));
    }
    listed?;
    // A directory with nothing in it yet (a training job's, before its first save): listed
    // again only here, on the way to "not recognised".
    if state::nothing_yet(store, path) {
        return Ok(Probed::CheckpointDir {
            dir: path.to_path_buf(),
            checkpoints: Vec::new(),
            latest: None,
        });
    }
    unreadable(store, path)?;
    Err(not_recognised(path))
}

/// The error for a path nothing recognised, listing what a SOURCE can be.
fn not_recognised(path: &Path) -> SourceError {
    SourceError::NotRecognised {
        path: path.to_path_buf(),
        expected: crate::formats::sources(
            &[
                "a SavedModel directory with saved_model.pb",
                "a TF Serving base directory of numbered SavedModel versions",
                "a checkpoint directory with a `checkpoint` file or *.index files",
                "a graph file (.pb, .pbtxt, .meta)",
            ],
            "or any of these as an s3://, gs://, http(s):// URL",
        ),
    }
}
