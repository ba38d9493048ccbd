//! TensorFlow's V1 checkpoint (one table file, or `STEM-NNNNN-of-MMMMM` shards; TF1's Saver)
//! behind the format seam. Recognised by content, never by name alone. V1 keeps no per-tensor
//! CRC: `verify` and `diff` use the generic path (every byte read, each table block's CRC-32C
//! checked by the core), with the shards the file names say exist and are missing reported
//! first.

pub mod set;
pub(crate) mod table;

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Detected, Format, OpenCtx, Opened};
use crate::error::SourceError;
use crate::formats::integrity::{Generic, Integrity, Item};
use crate::formats::tensors::TensorSet;
use crate::source::bytes::Store;

use crate::formats::v1::set::V1Set;

/// Shard counts above this are not believed from a file name (TensorFlow writes `%05d`).
const MAX_SHARDS: u32 = 100_000;

/// The V1 format.
pub(crate) struct V1;

impl Format for V1 {
    fn name(&self) -> &'static str {
        "V1 checkpoint"
    }

    fn source(&self) -> &'static str {
        "a V1 checkpoint (its table file, a shard, or a shard pattern dir/model.ckpt-?????-of-00003)"
    }

    fn detect(&self, store: &dyn Store, path: &Path) -> Option<Detected> {
        set::v1_files(store, path).map(|files| Detected {
            path: path.to_path_buf(),
            files,
            format: &V1,
        })
    }

    fn open(&self, ctx: &OpenCtx, found: &Detected) -> Result<Arc<dyn Opened>, SourceError> {
        let files = if found.files.is_empty() {
            set::v1_files(ctx.store, &found.path).unwrap_or_default()
        } else {
            found.files.clone()
        };
        Ok(Arc::new(OpenedV1 {
            set: Arc::new(V1Set::open(ctx.store, &found.path, &files)?),
            missing: missing_shards(&files),
        }))
    }
}

/// A TF Serving legacy session bundle directory: `export.meta` beside `export-NNNNN-of-NNNNN`
/// V1 shards; the checkpoint is named `DIR/export`.
pub(crate) fn session_bundle(store: &dyn Store, dir: &Path) -> Option<Detected> {
    if !store.is_file(&dir.join("export.meta")) {
        return None;
    }
    let shard = store
        .list(dir)
        .ok()?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.as_bytes().starts_with(b"export-"))
        .min()?;
    let found = V1.detect(store, &dir.join(shard))?;
    Some(Detected {
        path: dir.join("export"),
        ..found
    })
}

/// An opened V1 checkpoint.
struct OpenedV1 {
    set: Arc<V1Set>,
    /// Shards the file names say the checkpoint has that are not among its files:
    /// `(number, count, path)`.
    missing: Vec<(u32, u32, PathBuf)>,
}

impl Opened for OpenedV1 {
    fn tensors(&self) -> Arc<dyn TensorSet> {
        self.set.clone()
    }

    /// TF1's Saver writes the `.meta` beside the checkpoint's name without its shards.
    fn meta_graph(&self) -> Option<PathBuf> {
        let mut p = set::checkpoint_stem(self.set.path()).into_os_string();
        p.push(".meta");
        Some(PathBuf::from(p))
    }

    /// The generic path, with the missing shards first (each V1 shard lists only its own
    /// tensors: those stored only in a missing one are not known).
    fn integrity(&self, _store: Arc<dyn Store>) -> Box<dyn Integrity> {
        let first = self
            .missing
            .iter()
            .map(|(shard, shards, file)| Item::MissingShard {
                shard: *shard,
                shards: *shards,
                file: file.clone(),
            })
            .collect();
        Box::new(Generic::new(self.set.clone(), first))
    }
}

/// `STEM-NNNNN-of-MMMMM` (at least 5 digits each, as TensorFlow writes them): `(STEM, N, M
/// as written)`.
fn shard_parts(name: &[u8]) -> Option<(&[u8], u32, &[u8])> {
    let digits = |s: &[u8]| s.len() >= 5 && s.iter().all(u8::is_ascii_digit);
    let cut = name.windows(4).rposition(|w| w == b"-of-")?;
    let (left, count) = (&name[..cut], &name[cut + 4..]);
    let dash = left.iter().rposition(|&b| b == b'-')?;
    let (stem, id) = (&left[..dash], &left[dash + 1..]);
    if !digits(id) || !digits(count) {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?.parse().ok()?;
    Some((stem, id, count))
}

/// The shards of a sharded V1 checkpoint that its file names say exist and are not among
/// `files`: `(number, count, path)`. Nothing for a single file.
fn missing_shards(files: &[PathBuf]) -> Vec<(u32, u32, PathBuf)> {
    let name = |p: &PathBuf| p.file_name().map(|n| n.as_bytes().to_vec());
    let Some((dir, first)) = files
        .first()
        .and_then(|p| Some((p.parent().unwrap_or(Path::new("")), name(p)?)))
    else {
        return Vec::new();
    };
    let Some((stem, _, count)) = shard_parts(&first) else {
        return Vec::new();
    };
    let Some(n) = std::str::from_utf8(count)
        .ok()
        .and_then(|c| c.parse::<u32>().ok())
        .filter(|&n| n <= MAX_SHARDS)
    else {
        return Vec::new();
    };
    let present: HashSet<u32> = files
        .iter()
        .filter_map(name)
        .filter_map(|f| {
            shard_parts(&f)
                .filter(|(s, _, c)| *s == stem && *c == count)
                .map(|(_, i, _)| i)
        })
        .collect();
    let (stem, count) = (
        String::from_utf8_lossy(stem),
        String::from_utf8_lossy(count),
    );
    (0..n)
        .filter(|i| !present.contains(i))
        .map(|i| (i, n, dir.join(format!("{stem}-{i:05}-of-{count}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_shards_from_names() {
        let f = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert!(missing_shards(&f(&["d/model.ckpt"])).is_empty());
        assert!(missing_shards(&f(&["d/m-00000-of-00002", "d/m-00001-of-00002"])).is_empty());
        assert_eq!(
            missing_shards(&f(&["d/m-1-00000-of-00003", "d/m-1-00002-of-00003"])),
            vec![(1, 3, PathBuf::from("d/m-1-00001-of-00003"))]
        );
        assert_eq!(
            missing_shards(&f(&["m-00001-of-00002"])),
            vec![(0, 2, PathBuf::from("m-00000-of-00002"))]
        );
        // A count no writer would use is not believed.
        assert!(missing_shards(&f(&["m-00000-of-9999999999"])).is_empty());
    }
}
