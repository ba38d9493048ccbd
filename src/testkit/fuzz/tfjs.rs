//! Fuzz body for TF.js models (`tfmount::formats::tfjs`, `tfmount::formats::tfjs::manifest`): one
//! input is one model directory, `model.json` and the bytes of its shards, probed as a
//! directory, mounted through `Fs` and walked with the shared walker (every directory listed and
//! resumed, every name looked up, every file read in pieces and whole: `.bin`, `.npy`, `text/`,
//! `stats/`, `graph/` of a graph model, `signatures.txt`, the views).
//!
//! Invariants, beyond the walker's: a weight that opens serves exactly shape × element size
//! bytes (quantized ones too: 4 per element); a weight the set says is stored in place serves
//! exactly the shard's bytes at the offset it gives.
//!
//! Input: flags (1 byte: bits 0..2 pick the read size), the length of `model.json` (u32 LE),
//! the shard size (u16 LE; 0 means 4 MiB), `model.json`, then the weights' bytes: cut into the
//! files the manifest lists (in order, across groups), each the shard size, the last the rest.
//! A listed path that tfmount would not follow, or one given twice, is not written.

use crate::formats::tfjs::manifest as tfjs;
use crate::fs::{Fs, Options};

use super::{each_served_tensor, scratch_dir, walk_fs};

/// Most shard files written per input.
const MAX_SHARDS: usize = 64;

pub(crate) fn tfjs(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((len, rest)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let Some((shard, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (json, stream) = rest.split_at(len);
    let cut = match u16::from_le_bytes(*shard) {
        0 => 4 << 20,
        n => usize::from(n),
    };
    let dir = scratch_dir();
    if std::fs::write(dir.path().join("model.json"), json).is_err() {
        return;
    }
    let mut paths: Vec<String> = Vec::new();
    if let Ok(model) = tfjs::parse(json) {
        for g in &model.groups {
            for p in &g.paths {
                if tfjs::safe_shard_path(p) && !paths.contains(p) && paths.len() < MAX_SHARDS {
                    paths.push(p.clone());
                }
            }
        }
    }
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut at = 0usize;
    for (i, p) in paths.iter().enumerate() {
        let end = if i + 1 == paths.len() {
            stream.len()
        } else {
            at.saturating_add(cut).min(stream.len())
        };
        let bytes = stream.get(at..end).unwrap_or(&[]).to_vec();
        at = end;
        let path = dir.path().join(p);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if std::fs::write(&path, &bytes).is_err() {
            return;
        }
        files.push(bytes);
    }
    let read_size = [4096, 1, 7, 100, 512, 8191, 1 << 16, 3][(flags & 7) as usize];
    let Ok(probed) = crate::probe::probe(dir.path()) else {
        return;
    };
    let opts = Options {
        live: false,
        ..Options::default()
    };
    let Ok(fs) = Fs::new(&probed, &opts) else {
        return;
    };
    // Keys name files under variables/; a graph model's `constants/` carry the graph's own
    // (checked as the `graph` target checks them: not by name).
    let graph = fs.lookup(crate::fs::ROOT, b"meta_graphs").is_ok();
    walk_fs(&fs, read_size, !graph);
    served_bytes_are_the_shards(&fs, &paths, &files);
}

/// Each weight that opens: shape × element size bytes; one stored in place: its shard's bytes.
fn served_bytes_are_the_shards(fs: &Fs, paths: &[String], files: &[Vec<u8>]) {
    each_served_tensor(fs, |info, bytes| {
        let Some(stored) = info.stored else { return };
        // The shard's number is its place among the manifest's files; only files written
        // here (safe, first of their name) can be compared.
        let Some(file) = files.get(stored.shard as usize) else {
            return;
        };
        if paths.len() != files.len() {
            return;
        }
        let at = usize::try_from(stored.offset).unwrap_or(usize::MAX);
        let raw = file.get(at..at.saturating_add(bytes.len()));
        assert!(
            raw == Some(bytes),
            "{}: served bytes are not {} at offset {at}",
            String::from_utf8_lossy(&info.key),
            paths[stored.shard as usize]
        );
    });
}

/// Seeds: every TF.js fixture, its shards concatenated in manifest order, with the shard size
/// the converter cut them at.
pub(crate) fn seeds(
    fixtures: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let root = fixtures.join("tfjs");
    let mut out = Vec::new();
    for name in [
        "layers",
        "layers_uint8",
        "layers_uint16",
        "layers_float16",
        "layers_sharded",
        "graph",
        "graph_uint8",
    ] {
        let dir = root.join(name);
        let Ok(json) = std::fs::read(dir.join("model.json")) else {
            continue;
        };
        let Ok(model) = tfjs::parse(&json) else {
            continue;
        };
        let mut stream = Vec::new();
        let mut cut = 0usize;
        for p in model.groups.iter().flat_map(|g| &g.paths) {
            let b = std::fs::read(dir.join(p))?;
            cut = cut.max(b.len());
            stream.extend_from_slice(&b);
        }
        let cut = u16::try_from(cut).unwrap_or(0);
        let mut input = vec![0u8];
        input.extend_from_slice(&(json.len() as u32).to_le_bytes());
        input.extend_from_slice(&cut.to_le_bytes());
        input.extend_from_slice(&json);
        input.extend_from_slice(&stream);
        out.push(("tfjs", name.to_string(), input));
    }
    Ok(out)
}
