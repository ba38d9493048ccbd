//! Fuzz body for safetensors checkpoints (`tfmount::formats::safetensors`): one input is one
//! `.safetensors` file, or a sharded set (an index and two shards), probed, mounted through `Fs`
//! and walked with the shared walker (every directory listed, every name looked up, every file
//! read in pieces and whole: `.bin`, `.npy`, `text/`, `stats/`, `names/`, the views).
//!
//! Invariants, beyond the walker's: the header parser accepts only what tiles the data from 0
//! (sorted by offset, each tensor's bytes its shape × element bits / 8, no hole, no overlap,
//! within the 100,000,000-byte limit), and nothing it accepts claims more JSON than the file has;
//! a tensor that opens serves exactly its header's bytes of the file, at the offset it gives.
//!
//! Input: flags (1 byte: bits 0..2 pick the read size, bit 3 makes it a sharded set), then for a
//! single file its bytes; for a sharded set the index's length (u16 LE), the index, the first
//! shard's length (u32 LE), the first shard, the second shard (the rest). The shards are written
//! as `model-00001-of-00002.safetensors` and `model-00002-of-00002.safetensors`.

use crate::formats::safetensors::header;
use crate::fs::{Fs, Options};

use super::{each_served_tensor, scratch_dir, walk_fs};

/// The shard files a sharded input is written as.
const SHARDS: [&str; 2] = [
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
];

pub(crate) fn safetensors(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let dir = scratch_dir();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if flags & 8 != 0 {
        let Some((n, rest)) = rest.split_first_chunk::<2>() else {
            return;
        };
        let n = usize::from(u16::from_le_bytes(*n)).min(rest.len());
        let (index, rest) = rest.split_at(n);
        let Some((m, rest)) = rest.split_first_chunk::<4>() else {
            return;
        };
        let m = (u32::from_le_bytes(*m) as usize).min(rest.len());
        let (a, b) = rest.split_at(m);
        files.push(("model.safetensors.index.json".into(), index.to_vec()));
        files.push((SHARDS[0].into(), a.to_vec()));
        files.push((SHARDS[1].into(), b.to_vec()));
    } else {
        files.push(("model.safetensors".into(), rest.to_vec()));
    }
    for (name, bytes) in &files {
        header_invariants(bytes);
        if std::fs::write(dir.path().join(name), bytes).is_err() {
            return;
        }
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
    walk_fs(&fs, read_size, true);
    let shards = (flags & 8 != 0).then(|| {
        crate::formats::safetensors::index::parse(&files[0].1)
            .map(|i| i.shards)
            .unwrap_or_default()
    });
    each_served_tensor(&fs, |info, bytes| {
        let Some(stored) = info.stored else {
            panic!("a safetensors tensor without its place in the file");
        };
        // A single file is shard 0; a set's shards are numbered in its index's order.
        let name = match &shards {
            None => Some("model.safetensors".to_string()),
            Some(names) => names.get(stored.shard as usize).cloned(),
        };
        let Some((_, file)) = files.iter().find(|(n, _)| Some(n) == name.as_ref()) else {
            return;
        };
        let at = usize::try_from(stored.offset).unwrap_or(usize::MAX);
        assert_eq!(
            stored.size,
            bytes.len() as u64,
            "served size is the header's"
        );
        assert!(
            file.get(at..at.saturating_add(bytes.len())) == Some(bytes),
            "{}: served bytes are not the file's at offset {at}",
            String::from_utf8_lossy(&info.key)
        );
    });
}

/// What the header parser accepts keeps the format's promises.
fn header_invariants(file: &[u8]) {
    let Ok(h) = header::read(file) else {
        return;
    };
    assert!(h.json_len <= header::MAX_HEADER, "a header over the limit");
    assert!(8 + h.json_len <= file.len() as u64, "a header past the end");
    let mut spans: Vec<(u64, u64)> = h.tensors.iter().map(|t| (t.begin, t.end)).collect();
    spans.sort();
    let mut at = 0;
    for (b, e) in spans {
        assert_eq!(b, at, "a hole or an overlap accepted");
        assert!(e >= b);
        at = e;
    }
    assert_eq!(at, h.data_len);
    for w in h.tensors.windows(2) {
        assert!(w[0].name < w[1].name, "tensors not sorted, or a name twice");
    }
}

/// Seeds: every fixture file of `tests/fixtures/safetensors/` as a single file, and the sharded
/// set.
pub(crate) fn seeds(
    fixtures: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let root = fixtures.join("safetensors");
    let mut out = Vec::new();
    for name in [
        "all_dtypes.safetensors",
        "unserved.safetensors",
        "several/a.safetensors",
        "tf_pair/model.safetensors",
    ] {
        if let Ok(b) = std::fs::read(root.join(name)) {
            out.push((
                "safetensors",
                name.replace('/', "-"),
                [&[0u8][..], &b].concat(),
            ));
        }
    }
    let d = root.join("sharded");
    if let (Ok(index), Ok(a), Ok(b)) = (
        std::fs::read(d.join("model.safetensors.index.json")),
        std::fs::read(d.join(SHARDS[0])),
        std::fs::read(d.join(SHARDS[1])),
    ) {
        let mut input = vec![8u8];
        input.extend_from_slice(&(index.len() as u16).to_le_bytes());
        input.extend_from_slice(&index);
        input.extend_from_slice(&(a.len() as u32).to_le_bytes());
        input.extend_from_slice(&a);
        input.extend_from_slice(&b);
        out.push(("safetensors", "sharded".to_string(), input));
    }
    Ok(out)
}
