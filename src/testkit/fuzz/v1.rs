//! Fuzz body for V1 checkpoints (`tfmount::formats::v1::table`, `tfmount::formats::v1::set`): one input split
//! into up to 4 table files, written as a single file or as shards `ck-0000N-of-0000M`, resolved
//! with `v1_files`, mounted through `Fs` and walked (every file read), then opened with
//! `V1Checkpoint` and every tensor read whole, in pieces and at a few other ranges. Invariants: tensors sorted by unique names; probing agrees with opening;
//! reads never exceed the served size; a fixed-width tensor that reads has exactly elements ×
//! element-size bytes; pieces and ranges equal the same bytes of the whole.
//!
//! Input: flags (1 byte), then chunks `[u32 LE length][bytes]` (see `split_chunks`), one per
//! file. Flags: bit 0 keeps block checksums as they are (otherwise every block the footer and
//! index name gets its CRC recomputed); bit 1 names the checkpoint by the `?????` pattern instead
//! of its first shard; bits 2..4 pick the piece size.

use crate::formats::v1::set::{v1_files, V1Checkpoint};
use crate::formats::v1::table::encoding::encoding;
use crate::formats::v1::table::{probe, V1Table};
use crate::source::local::LocalStore;

use super::{fix_table_crcs, join_chunks, scratch_dir, split_chunks, MAX_FILE_BYTES};

/// Most files one input is split into.
const MAX_FILES: usize = 4;
/// Most tensors read per input.
const MAX_TENSORS: usize = 200;

pub(crate) fn v1(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut files: Vec<Vec<u8>> = split_chunks(rest, MAX_FILES)
        .into_iter()
        .map(|c| c.to_vec())
        .collect();
    if files.is_empty() {
        return;
    }
    if flags & 1 == 0 {
        for f in &mut files {
            fix_table_crcs(f);
        }
    }
    for f in &files {
        if V1Table::open(&f[..]).is_ok() {
            assert!(probe(&f[..]), "a table that opens as V1 probes as V1");
        }
    }
    let dir = scratch_dir();
    let n = files.len();
    let names: Vec<String> = if n == 1 {
        vec!["ck".to_string()]
    } else {
        (0..n).map(|i| format!("ck-{i:05}-of-{n:05}")).collect()
    };
    for (name, f) in names.iter().zip(&files) {
        if std::fs::write(dir.path().join(name), f).is_err() {
            return;
        }
    }
    let source = if n > 1 && flags & 2 != 0 {
        dir.path().join(format!("ck-?????-of-{n:05}"))
    } else {
        dir.path().join(&names[0])
    };
    let Some(paths) = v1_files(&LocalStore, &source) else {
        return;
    };
    assert_eq!(paths.len(), n, "every shard is found");
    // Through the whole filesystem: probed by content, mounted in the core, every directory
    // listed and resumed, every name looked up, every file read (the shared walker's checks).
    if let Ok(probed) = crate::probe::probe(&source) {
        let opts = crate::fs::Options {
            live: false,
            ..Default::default()
        };
        if let Ok(fs) = crate::fs::Fs::new(&probed, &opts) {
            super::walk_fs(&fs, piece_size(flags), true);
        }
    }
    let Ok(ck) = V1Checkpoint::open(&LocalStore, &paths) else {
        return;
    };
    let piece = piece_size(flags);
    let tensors = ck.tensors();
    for w in tensors.windows(2) {
        assert!(w[0].name < w[1].name, "tensors sorted by unique names");
    }
    for (i, t) in tensors.iter().enumerate().take(MAX_TENSORS) {
        let Ok(size) = ck.served_size(i) else {
            assert!(ck.read(i, 0, 16).is_err() || t.num_elements() == 0);
            continue;
        };
        if let Some(e) = encoding(t.dtype).filter(|e| e.width > 0) {
            assert_eq!(size, t.num_elements() * e.per_elem * e.width);
        }
        let want = size.min(MAX_FILE_BYTES);
        let Ok(whole) = ck.read(i, 0, want as usize) else {
            continue;
        };
        assert_eq!(whole.len() as u64, want, "a read that succeeds is complete");
        let mut cat = Vec::new();
        let mut off = 0u64;
        let mut reads = 0;
        while off < want && reads < 256 {
            let Ok(p) = ck.read(i, off, piece) else {
                break;
            };
            assert!(!p.is_empty() && p.len() <= piece);
            off += p.len() as u64;
            cat.extend_from_slice(&p);
            reads += 1;
        }
        let k = cat.len().min(whole.len());
        assert!(cat[..k] == whole[..k], "pieces equal the whole");
        for (a, len) in [(want / 2, 13usize), (want.saturating_sub(3), 10), (size, 5)] {
            if let Ok(p) = ck.read(i, a, len) {
                let lo = (a as usize).min(whole.len());
                let hi = (a as usize + len).min(whole.len());
                if a + (len as u64) <= want {
                    assert!(p[..] == whole[lo..hi], "range {a}+{len}");
                }
                assert!(a < size || p.is_empty(), "nothing past the end");
            }
        }
    }
}

/// The read size bits 2..4 of the flags pick.
fn piece_size(flags: u8) -> usize {
    [4096usize, 1, 7, 64, 100, 512, 8191, 1 << 16][((flags >> 2) & 7) as usize]
}

/// Seeds from `tests/fixtures/v1` (the checkpoints of at most 64 KiB): each file set as it is.
pub(crate) fn seeds(
    fixtures: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let d = fixtures.join("v1");
    let sets: &[(&str, &[&str])] = &[
        ("single", &["single/model.ckpt-1"]),
        ("dtypes", &["dtypes/model.ckpt"]),
        ("partitioned", &["partitioned/model.ckpt"]),
        (
            "sharded",
            &[
                "sharded/model.ckpt-00000-of-00003",
                "sharded/model.ckpt-00001-of-00003",
                "sharded/model.ckpt-00002-of-00003",
            ],
        ),
    ];
    let mut out = Vec::new();
    for (name, files) in sets {
        let bytes = files
            .iter()
            .map(|f| std::fs::read(d.join(f)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let chunks: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        let flags = if files.len() > 1 { 2u8 } else { 0 };
        out.push((
            "v1",
            name.to_string(),
            [&[flags][..], &join_chunks(&chunks)].concat(),
        ));
    }
    Ok(out)
}
