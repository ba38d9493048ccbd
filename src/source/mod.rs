//! Sources: what a SOURCE path is (checkpoint prefix, checkpoint directory, SavedModel) and
//! what it holds. Probed in order; the first that matches wins.

pub mod bytes;
pub mod checkpoint;
pub mod file;
pub mod graph;
pub mod names;
pub mod remote;
pub mod state;

use std::path::{Path, PathBuf};

use crate::error::SourceError;
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

pub fn probe(path: &Path) -> Result<Probed, SourceError> {
    if path.is_dir() {
        if path.join("saved_model.pb").is_file() || path.join("saved_model.pbtxt").is_file() {
            let prefix = path.join("variables").join("variables");
            let variables = index_file_name(&prefix).is_file().then_some(prefix);
            return Ok(Probed::SavedModel {
                dir: path.to_path_buf(),
                variables,
            });
        }
        let state_file = path.join("checkpoint");
        if state_file.is_file() {
            let (checkpoints, latest) = state::resolve(path, &state_file)?;
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
        let checkpoints = state::index_files(path)?;
        if !checkpoints.is_empty() {
            return Ok(Probed::CheckpointDir {
                dir: path.to_path_buf(),
                checkpoints,
                latest: None,
            });
        }
        return Err(SourceError::NotRecognised {
            path: path.to_path_buf(),
        });
    }
    if index_file_name(path).is_file() {
        return Ok(Probed::Prefix(path.to_path_buf()));
    }
    if path.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "saved_model.pb" || name == "saved_model.pbtxt" {
            if let Some(dir) = path.parent() {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                return probe(dir);
            }
        }
        if let Some(prefix) = name.strip_suffix(".meta") {
            // A Saver's .meta: with its checkpoint when that is beside it.
            let p = path.with_file_name(prefix);
            if !prefix.is_empty() && index_file_name(&p).is_file() {
                return Ok(Probed::Prefix(p));
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
    if let Some(p) = as_prefix(path) {
        if index_file_name(&p).is_file() {
            return Ok(Probed::Prefix(p));
        }
    }
    if !path.exists() && !index_file_name(path).exists() {
        return Err(SourceError::Io {
            path: path.to_path_buf(),
            err: std::io::Error::from(std::io::ErrorKind::NotFound),
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
