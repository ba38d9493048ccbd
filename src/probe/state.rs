//! The `checkpoint` state file of a checkpoint directory (text-format `CheckpointState`):
//! parsed, its paths resolved to checkpoint prefixes inside the directory, what is wrong with
//! it said in words; and what a directory without one holds.

use crate::sync::lock;
use std::path::{Path, PathBuf};

use prost_reflect::DynamicMessage;

use crate::error::SourceError;
use crate::formats::v2::checkpoint::{index_file_name, prefix_of, split_prefix};
use crate::proto::CheckpointState;
use crate::source::bytes::Store;

/// Parses the text of a state file.
pub(crate) fn parse(text: &str) -> Result<CheckpointState, String> {
    let pool = crate::descriptors::descriptor_pool()?;
    let desc = pool
        .get_message_by_name("tensorflow.CheckpointState")
        .ok_or("CheckpointState descriptor missing")?;
    let msg = DynamicMessage::parse_text_format(desc, text).map_err(|e| e.to_string())?;
    msg.transcode_to::<CheckpointState>()
        .map_err(|e| e.to_string())
}

/// The name a checkpoint whose prefix has an empty base name (`dir/`: its files are
/// `dir/.index` and `dir/.data-*`) is shown under in a checkpoint directory's mount; see
/// [`show_names`].
pub(crate) const EMPTY_BASE_NAME: &str = "ckpt";

/// The base name of a prefix (empty for `dir/`), as UTF-8.
fn base_name(prefix: &Path) -> Option<String> {
    split_prefix(prefix).1.to_str().map(str::to_string)
}

/// Finds the prefix a state-file path refers to: as written (relative to the directory) if it
/// exists, else by its base name inside the directory (the directory was moved or copied).
/// Returns it with its name in the mount before [`show_names`] (empty for an empty base name).
fn locate(store: &dyn Store, dir: &Path, p: &str) -> Option<(String, PathBuf)> {
    let exists = |path: &Path| crate::formats::detect(store, path).is_some();
    // A V1 checkpoint is shown under its name without the shard part.
    let shown = |path: &Path| base_name(&crate::formats::v1::set::checkpoint_stem(path));
    let as_written = prefix_of(dir, p);
    let name = base_name(&as_written)?;
    let local = prefix_of(dir, &name);
    // The directory's own checkpoint of that name first: a copied training directory's state
    // file names the original by its absolute path, and a user who names a directory means it.
    if local != as_written && exists(&local) {
        return Some((shown(&local)?, local));
    }
    if exists(&as_written) {
        if !inside(dir, &as_written) {
            warn_once(format!(
                "{}: the state file names checkpoint {p}, outside {}; following it",
                dir.join("checkpoint").display(),
                dir.display()
            ));
        }
        return Some((shown(&as_written)?, as_written));
    }
    exists(&local)
        .then(|| Some((shown(&local)?, local)))
        .flatten()
}

/// Whether checkpoint prefix `prefix` lies in directory `dir` or below it (resolved where both
/// exist on the local filesystem, else as written).
fn inside(dir: &Path, prefix: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    // `d/` is the prefix of empty base name in `d` itself.
    let parent = if prefix.as_os_str().as_bytes().ends_with(b"/") {
        prefix
    } else {
        prefix.parent().unwrap_or(Path::new(""))
    };
    match (std::fs::canonicalize(dir), std::fs::canonicalize(parent)) {
        (Ok(d), Ok(p)) => p.starts_with(d),
        _ => prefix.starts_with(dir),
    }
}

/// Logs `msg` at `level` the first time it comes up in this process (a live mount re-reads
/// the state file at every change: the same thing is said once).
fn log_once(level: log::Level, msg: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = lock(&SAID);
    if said.len() < 4096 && !said.contains(&msg) {
        log::log!(level, "{msg}");
        said.push(msg);
    }
}

/// [`log_once`] at `warn`.
fn warn_once(msg: String) {
    log_once(log::Level::Warn, msg);
}

/// The names checkpoints are shown under: their prefixes' base names, except the empty one,
/// shown as [`EMPTY_BASE_NAME`] (or, if a checkpoint of that name is shown too, as the first
/// free one of `ckpt~2`, `ckpt~3`, ...).
fn show_name(name: &str, taken: &[&str]) -> String {
    if !name.is_empty() {
        return name.to_string();
    }
    let mut n = EMPTY_BASE_NAME.to_string();
    let mut k = 2;
    while taken.contains(&n.as_str()) {
        n = format!("{EMPTY_BASE_NAME}~{k}");
        k += 1;
    }
    n
}

/// [`show_name`] for each of `names`.
pub(crate) fn show_names(names: &mut [(String, PathBuf)]) {
    let taken: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    let taken: Vec<&str> = taken.iter().map(String::as_str).collect();
    for (n, _) in names.iter_mut() {
        *n = show_name(n, &taken);
    }
}

/// State files larger than this are refused (TensorFlow writes about a hundred bytes a
/// checkpoint).
pub(crate) const MAX_STATE_FILE: u64 = 16 << 20;

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

/// [`log_once`] at `info`, for a listed checkpoint that is gone. Not `warn`: a
/// `CheckpointManager` deletes the checkpoint it prunes before it rewrites the state file, so
/// every save of an ordinary training run lists one checkpoint that is already gone; `verify`
/// reports a listed checkpoint that is missing as a problem.
fn info_once(msg: String) {
    log_once(log::Level::Info, msg);
}

/// What a checkpoint directory lacks, as `(name, reason)`: with a state file, each checkpoint
/// it lists that cannot be found or is not a checkpoint (`missing: ...`, `unreadable: ...`);
/// without one, each `P.data-*` whose `P.index` is gone. `tfmount verify` reports these; the
/// mount shows what exists.
pub(crate) fn problems(store: &dyn Store, dir: &Path) -> Vec<(String, String)> {
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
            let as_written = prefix_of(dir, p);
            let base = base_name(&as_written).unwrap_or_else(|| p.clone());
            let local = prefix_of(dir, &base);
            let name = if base.is_empty() {
                EMPTY_BASE_NAME.to_string()
            } else {
                base
            };
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
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
pub(crate) type NamedPrefixes = Vec<(String, PathBuf)>;

/// The checkpoints a state file lists that exist, oldest first, and the current one's name.
pub(crate) fn resolve(
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
    // An empty entry of all_model_checkpoint_paths is the directory's own prefix `dir/` (as
    // TensorFlow joins it); an empty model_checkpoint_path is no checkpoint (proto3 cannot tell
    // it from an absent one, and TensorFlow refuses such a state file).
    let current = (!state.model_checkpoint_path.is_empty()).then_some(&state.model_checkpoint_path);
    let listed = state.all_model_checkpoint_paths.iter().chain(current);
    for p in listed {
        match locate(store, dir, p) {
            Some((name, prefix)) => {
                if !out.iter().any(|(n, _)| *n == name) {
                    out.push((name, prefix));
                }
            }
            None => info_once(format!(
                "{}: listed checkpoint {p} does not exist; skipped",
                state_file.display()
            )),
        }
    }
    let latest = current
        .and_then(|p| locate(store, dir, p))
        .and_then(|(n, _)| out.iter().position(|(m, _)| *m == n));
    show_names(&mut out);
    let latest = latest.and_then(|i| out.get(i)).map(|(n, _)| n.clone());
    Ok((out, latest))
}

/// The checkpoints of any format directly inside `dir` (`P.index` files, Keras files, ...), as
/// `(name shown, path)`, sorted by name (see [`show_names`] for `dir/.index`).
pub(crate) fn checkpoint_files(
    store: &dyn Store,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>, SourceError> {
    let entries = store.list(dir).map_err(|err| SourceError::Io {
        path: dir.to_path_buf(),
        err,
    })?;
    let mut out = crate::formats::in_dir(store, dir, &entries);
    out.extend(super::serving::versions(store, dir, &entries));
    show_names(&mut out);
    out.sort();
    // TF Serving's versions by number (`10` after `9`), after the rest.
    out.sort_by_key(|(n, p)| {
        super::serving::version_dir(p).and_then(|_| super::serving::version_number(n))
    });
    Ok(out)
}

/// Whether directory `dir` holds nothing yet but what a training job's first save leaves
/// while it runs: it is empty, or holds only temporary files (TensorFlow's `*_temp*`
/// directories of a sharded save, `*.tempstate*` files and a state file's `checkpoint.tmp*`;
/// hidden files, as `rsync` and many copy tools write before a rename).
/// Such a directory is a checkpoint directory with no checkpoint in it yet.
pub(crate) fn nothing_yet(store: &dyn Store, dir: &Path) -> bool {
    let Ok(entries) = store.list(dir) else {
        return false;
    };
    // Checkpoint files are never temporary, hidden ones included (an empty base name's
    // `.index`).
    if !crate::formats::in_dir(store, dir, &entries).is_empty() {
        return false;
    }
    entries.iter().all(|(name, kind)| {
        let n = name.to_string_lossy();
        // A TF Serving version still being written (no saved_model.pb yet; a complete one is
        // a checkpoint of the directory, found above).
        (*kind == crate::source::bytes::EntryKind::Dir
            && super::serving::version_number(&n).is_some())
            || n.starts_with('.')
            || n.contains("_temp")
            || n.contains(".tempstate")
            || n.starts_with("checkpoint.tmp")
            || n.contains(crate::formats::orbax::TMP_MARKER)
    })
}

/// The `latest` of a directory without a state file: the newest checkpoint that is one file
/// (a Keras file; ModelCheckpoint writes one per epoch) by modification time, the last by name
/// among equals. TensorFlow's own checkpoints (prefixes of several files) get no `latest`
/// without a state file, as TensorFlow's `latest_checkpoint` gives none. A format's own rule
/// comes first ([`crate::formats::Format::latest`]: Orbax's highest step).
pub(crate) fn newest_file(store: &dyn Store, checkpoints: &[(String, PathBuf)]) -> Option<String> {
    if let Some(l) = crate::formats::FORMATS
        .iter()
        .find_map(|f| f.latest(checkpoints))
        .or_else(|| super::serving::latest(checkpoints))
    {
        return Some(l);
    }
    checkpoints
        .iter()
        .filter(|(_, p)| store.is_file(p))
        .filter_map(|(n, p)| Some((store.meta(p).ok()?.mtime, n)))
        .max()
        .map(|(_, n)| n.clone())
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

    #[test]
    fn directory_prefixes_and_their_names() {
        let d = Path::new("run");
        for (p, want) in [
            (".", "run/"),
            ("", "run/"),
            ("./.", "run/./"),
            ("sub/", "run/sub/"),
            ("sub/.", "run/sub/"),
            ("/abs/dir/", "/abs/dir/"),
            ("ckpt-1", "run/ckpt-1"),
        ] {
            assert_eq!(prefix_of(d, p).as_os_str(), want, "{p:?}");
        }
        assert_eq!(base_name(Path::new("run/")).as_deref(), Some(""));
        let mut names = vec![
            (String::new(), PathBuf::from("run/")),
            ("ckpt".to_string(), PathBuf::from("run/ckpt")),
            ("ckpt~2".to_string(), PathBuf::from("run/ckpt~2")),
        ];
        show_names(&mut names);
        assert_eq!(names[0].0, "ckpt~3");
        let mut alone = vec![(String::new(), PathBuf::from("run/"))];
        show_names(&mut alone);
        assert_eq!(alone[0].0, EMPTY_BASE_NAME);
    }
}
