//! The `checkpoint` state file of a checkpoint directory (text-format `CheckpointState`), and
//! directories of bare `*.index` files.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage};

use super::bytes::Store;
use super::checkpoint::index_file_name;
use crate::error::SourceError;
use crate::proto::CheckpointState;

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// The built-in descriptors, decoded once (a cheap clone afterwards).
pub fn descriptor_pool() -> Result<DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()))
        .clone()
}

/// Parses the text of a state file.
pub fn parse(text: &str) -> Result<CheckpointState, String> {
    let pool = descriptor_pool()?;
    let desc = pool
        .get_message_by_name("tensorflow.CheckpointState")
        .ok_or("CheckpointState descriptor missing")?;
    let msg = DynamicMessage::parse_text_format(desc, text).map_err(|e| e.to_string())?;
    msg.transcode_to::<CheckpointState>()
        .map_err(|e| e.to_string())
}

fn base_name(p: &str) -> Option<String> {
    let name = Path::new(p).file_name()?.to_str()?.to_string();
    (!name.is_empty()).then_some(name)
}

/// Finds the prefix a state-file path refers to: as written (relative to the directory) if it
/// exists, else by its base name inside the directory (the directory was moved or copied).
fn locate(store: &dyn Store, dir: &Path, p: &str) -> Option<(String, PathBuf)> {
    let name = base_name(p)?;
    let exists = |path: &Path| {
        store.is_file(&index_file_name(path)) || super::v1::v1_files(store, path).is_some()
    };
    // A V1 checkpoint is shown under its name without the shard part.
    let shown = |path: &Path| {
        base_name(&super::v1::checkpoint_stem(path).to_string_lossy()).unwrap_or(name.clone())
    };
    let as_written = dir.join(p);
    if exists(&as_written) {
        return Some((shown(&as_written), as_written));
    }
    let local = dir.join(&name);
    exists(&local).then(|| (shown(&local), local))
}

/// State files larger than this are refused (TensorFlow writes about a hundred bytes a
/// checkpoint).
pub const MAX_STATE_FILE: u64 = 16 << 20;

/// The text of a state file: at most [`MAX_STATE_FILE`] bytes of UTF-8 from a regular file
/// (a FIFO put in its place is refused rather than waited on).
fn read_state_file(store: &dyn Store, path: &Path) -> Result<String, SourceError> {
    let bytes = store.read_whole(path, MAX_STATE_FILE).map_err(|err| {
        if err.kind() == std::io::ErrorKind::InvalidData {
            SourceError::Invalid {
                path: path.to_path_buf(),
                msg: format!("larger than {MAX_STATE_FILE} bytes: not a checkpoint state file"),
            }
        } else {
            SourceError::Io {
                path: path.to_path_buf(),
                err,
            }
        }
    })?;
    String::from_utf8(bytes).map_err(|_| SourceError::Invalid {
        path: path.to_path_buf(),
        msg: "not a valid checkpoint state file: not UTF-8 text".into(),
    })
}

/// Logs `msg` at `warn` the first time it comes up in this process (a live mount re-reads the
/// state file at every change; the same skipped checkpoint is said once).
fn warn_once(msg: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if said.len() < 4096 && !said.contains(&msg) {
        log::warn!("{msg}");
        said.push(msg);
    }
}

/// What a checkpoint directory lacks, as `(name, reason)`: with a state file, each checkpoint
/// it lists that cannot be found or is not a checkpoint (`missing: ...`, `unreadable: ...`);
/// without one, each `P.data-*` whose `P.index` is gone. `tfmount verify` reports these; the
/// mount shows what exists.
pub fn problems(store: &dyn Store, dir: &Path) -> Vec<(String, String)> {
    let state_file = dir.join("checkpoint");
    let mut out: Vec<(String, String)> = Vec::new();
    if store.is_file(&state_file) {
        let Ok(text) = read_state_file(store, &state_file) else {
            return out;
        };
        let Ok(state) = parse(&text) else {
            return out;
        };
        let listed = state
            .all_model_checkpoint_paths
            .iter()
            .chain(std::iter::once(&state.model_checkpoint_path))
            .filter(|p| !p.is_empty());
        for p in listed {
            if locate(store, dir, p).is_some() {
                continue;
            }
            let name = base_name(p).unwrap_or_else(|| p.clone());
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let local = dir.join(&name);
            let reason = if store.is_file(&local) {
                format!(
                    "unreadable: {} is neither a V1 checkpoint nor a V2 prefix (truncated or damaged?); listed in {}",
                    local.display(),
                    state_file.display()
                )
            } else {
                format!(
                    "missing: {} not found; listed in {}",
                    index_file_name(&local).display(),
                    state_file.display()
                )
            };
            out.push((name, reason));
        }
        return out;
    }
    let Ok(entries) = store.list(dir) else {
        return out;
    };
    for (name, _) in entries {
        let Some(name) = name.to_str() else { continue };
        let Some((stem, _)) = name.split_once(".data-") else {
            continue;
        };
        let prefix = dir.join(stem);
        if stem.is_empty()
            || store.is_file(&index_file_name(&prefix))
            || out.iter().any(|(n, _)| n == stem)
        {
            continue;
        }
        out.push((
            stem.to_string(),
            format!(
                "missing: {} not found (its data file {name} is there)",
                index_file_name(&prefix).display()
            ),
        ));
    }
    out.sort();
    out
}

/// Checkpoints as `(name shown in the mount, prefix)`.
pub type NamedPrefixes = Vec<(String, PathBuf)>;

/// The checkpoints a state file lists that exist, oldest first, and the current one's name.
pub fn resolve(
    store: &dyn Store,
    dir: &Path,
    state_file: &Path,
) -> Result<(NamedPrefixes, Option<String>), SourceError> {
    let text = read_state_file(store, state_file)?;
    let state = parse(&text).map_err(|msg| SourceError::Invalid {
        path: state_file.to_path_buf(),
        msg: format!("not a valid checkpoint state file: {msg}"),
    })?;
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    let listed = state
        .all_model_checkpoint_paths
        .iter()
        .chain(std::iter::once(&state.model_checkpoint_path))
        .filter(|p| !p.is_empty());
    for p in listed {
        match locate(store, dir, p) {
            Some((name, prefix)) => {
                if !out.iter().any(|(n, _)| *n == name) {
                    out.push((name, prefix));
                }
            }
            None => warn_once(format!(
                "{}: listed checkpoint {p} does not exist; skipped",
                state_file.display()
            )),
        }
    }
    let latest = locate(store, dir, &state.model_checkpoint_path)
        .map(|(n, _)| n)
        .filter(|n| out.iter().any(|(m, _)| m == n));
    Ok((out, latest))
}

/// Every `P.index` directly inside `dir`, as `(base name of P, P)`, sorted by name.
pub fn index_files(store: &dyn Store, dir: &Path) -> Result<Vec<(String, PathBuf)>, SourceError> {
    let rd = store.list(dir).map_err(|err| SourceError::Io {
        path: dir.to_path_buf(),
        err,
    })?;
    let mut out: Vec<(String, PathBuf)> = rd
        .into_iter()
        .filter_map(|(name, kind)| {
            let name = name.into_string().ok()?;
            let stem = name.strip_suffix(".index")?.to_string();
            (!stem.is_empty() && kind == super::bytes::EntryKind::File)
                .then(|| (stem.clone(), dir.join(stem)))
        })
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_reference_example() {
        let s = parse(
            "model_checkpoint_path: \"model.ckpt-46900\"\n\
             all_model_checkpoint_paths: \"model.ckpt-0\"\n\
             all_model_checkpoint_paths: \"model.ckpt-46900\"\n\
             all_model_checkpoint_timestamps: 1.5e9\nlast_preserved_timestamp: 2\n",
        )
        .unwrap();
        assert_eq!(s.model_checkpoint_path, "model.ckpt-46900");
        assert_eq!(
            s.all_model_checkpoint_paths,
            vec!["model.ckpt-0", "model.ckpt-46900"]
        );
        assert!(parse("model_checkpoint_path: 12 garbage {").is_err());
        assert!(parse("no_such_field: 1").is_err());
    }
}
