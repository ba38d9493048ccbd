//! TF Serving base directories: a directory holding numbered SavedModel versions (`1/`, `2/`,
//! ...), as `tensorflow_model_server --model_base_path` is given. A version is a subdirectory
//! named by a non-negative integer that holds `saved_model.pb` (or `saved_model.pbtxt`); the
//! highest number is `latest` (TF Serving's `latest` policy: `10` after `9`). A base directory
//! is shown as a checkpoint directory whose members are SavedModels: each version's path is its
//! `saved_model.pb`, a file, so the directory is followed live by listing it, as a directory of
//! Keras files is ([`crate::fs`]); everything else in it is ignored (an exporter's `temp-...`
//! directory, a version whose `saved_model.pb` is not written yet).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::source::bytes::{EntryKind, Store};

/// The files that make a directory a SavedModel, in the order they are looked for.
pub(crate) const GRAPH_FILES: [&str; 2] = ["saved_model.pb", "saved_model.pbtxt"];

/// The version number a directory name stands for: all ASCII digits, within `i64` (TF Serving
/// parses it as an `int64` and takes non-negative ones).
pub(crate) fn version_number(name: &str) -> Option<u64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse::<u64>().ok().filter(|&n| n <= i64::MAX as u64)
}

/// The versions among the entries of directory `dir`: `(name, path of its saved_model.pb)`,
/// in numeric order (one check of a file or two per numbered subdirectory; other names are
/// not looked into).
pub(crate) fn versions(
    store: &dyn Store,
    dir: &Path,
    entries: &[(OsString, EntryKind)],
) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(u64, String, PathBuf)> = entries
        .iter()
        .filter(|(_, k)| *k == EntryKind::Dir)
        .filter_map(|(n, _)| {
            let n = n.to_str()?;
            let v = version_number(n)?;
            let graph = GRAPH_FILES
                .iter()
                .map(|g| dir.join(n).join(g))
                .find(|p| store.is_file(p))?;
            Some((v, n.to_string(), graph))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, n, p)| (n, p)).collect()
}

/// The numbered subdirectories among `entries` that are not versions yet (no
/// `saved_model.pb`: still being written), by name.
pub(crate) fn pending(
    store: &dyn Store,
    dir: &Path,
    entries: &[(OsString, EntryKind)],
) -> Vec<String> {
    let done = versions(store, dir, entries);
    let mut out: Vec<String> = entries
        .iter()
        .filter(|(_, k)| *k == EntryKind::Dir)
        .filter_map(|(n, _)| n.to_str())
        .filter(|n| version_number(n).is_some() && !done.iter().any(|(d, _)| d == n))
        .map(str::to_string)
        .collect();
    out.sort_by_key(|n| version_number(n));
    out
}

/// The SavedModel directory a member path of a base directory stands for: the directory of
/// `N/saved_model.pb` (or `.pbtxt`) when `N` is a version number; `None` for any other path.
pub(crate) fn version_dir(path: &Path) -> Option<&Path> {
    let file = path.file_name()?.to_str()?;
    if !GRAPH_FILES.contains(&file) {
        return None;
    }
    let dir = path.parent()?;
    version_number(dir.file_name()?.to_str()?)?;
    Some(dir)
}

/// Whether every member of a checkpoint directory is a SavedModel version (and there is one):
/// the directory is a TF Serving base directory.
pub fn is_base_dir(members: &[(String, PathBuf)]) -> bool {
    !members.is_empty() && members.iter().all(|(_, p)| version_dir(p).is_some())
}

/// The highest version among `members` (those that are versions), by number.
pub(crate) fn latest(members: &[(String, PathBuf)]) -> Option<String> {
    members
        .iter()
        .filter(|(_, p)| version_dir(p).is_some())
        .filter_map(|(n, _)| Some((version_number(n)?, n)))
        .max()
        .map(|(_, n)| n.clone())
}

/// What a base directory holds, in words: `a TF Serving base directory with versions 1, 2, 10`.
pub(crate) fn describe(members: &[(String, PathBuf)]) -> String {
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    match names.as_slice() {
        [] => "a TF Serving base directory with no complete version yet".to_string(),
        [one] => format!("a TF Serving base directory with version {one}"),
        _ => format!(
            "a TF Serving base directory with versions {}",
            names.join(", ")
        ),
    }
}

/// What directory `dir` is as a TF Serving base directory, in words, if it is one: its
/// versions (`... with versions 1, 2, 10; none has variables` when none does), or the numbered
/// subdirectories that are not complete yet (`... with no complete version yet: 11/ has no
/// saved_model.pb yet`). `None` for any other directory.
pub(crate) fn describe_dir(store: &dyn Store, dir: &Path) -> Option<String> {
    let entries = store.list(dir).ok()?;
    let done = versions(store, dir, &entries);
    if !done.is_empty() {
        let none = done.iter().all(|(_, p)| variables_of(store, p).is_none());
        let tail = if none { "; none has variables" } else { "" };
        return Some(format!("{}{tail}", describe(&done)));
    }
    let waiting = pending(store, dir, &entries);
    let first = waiting.first()?;
    let more = match waiting.len() {
        1 => String::new(),
        n => format!(" (and {} more numbered directories like it)", n - 1),
    };
    Some(format!(
        "{}: {first}/ has no saved_model.pb yet{more}",
        describe(&[])
    ))
}

/// The variables prefix (`N/variables/variables`) of a version's member path, if it has
/// variables (an index file).
pub(crate) fn variables_of(store: &dyn Store, member: &Path) -> Option<PathBuf> {
    let prefix = version_dir(member)?.join("variables").join("variables");
    store
        .is_file(&crate::formats::v2::checkpoint::index_file_name(&prefix))
        .then_some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_are_tf_servings() {
        assert_eq!(version_number("0"), Some(0));
        assert_eq!(version_number("10"), Some(10));
        assert_eq!(version_number("007"), Some(7));
        for bad in ["", "-1", "+1", "1a", "tmp-1", " 1", "99999999999999999999"] {
            assert_eq!(version_number(bad), None, "{bad:?}");
        }
        assert_eq!(version_number(&i64::MAX.to_string()), Some(i64::MAX as u64));
        assert_eq!(version_number(&(i64::MAX as u64 + 1).to_string()), None);
    }

    #[test]
    fn latest_is_the_highest_number() {
        let m = |n: &str| {
            (
                n.to_string(),
                PathBuf::from(format!("e/{n}/saved_model.pb")),
            )
        };
        let members = vec![m("1"), m("10"), m("9"), m("2")];
        assert_eq!(latest(&members).as_deref(), Some("10"));
        assert!(is_base_dir(&members));
        assert_eq!(
            describe(&members),
            "a TF Serving base directory with versions 1, 10, 9, 2"
        );
        let ckpt = ("ckpt-1".to_string(), PathBuf::from("e/ckpt-1"));
        assert!(!is_base_dir(std::slice::from_ref(&ckpt)));
        assert_eq!(latest(&[ckpt]), None);
        assert_eq!(
            version_dir(Path::new("e/3/saved_model.pbtxt")),
            Some(Path::new("e/3"))
        );
        assert_eq!(version_dir(Path::new("e/x/saved_model.pb")), None);
        assert_eq!(version_dir(Path::new("e/3/model.pb")), None);
    }
}
