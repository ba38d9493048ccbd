//! V1 checkpoints (`tests/fixtures/v1/`, written by TensorFlow's V1 `Saver`) opened with
//! `tfmount::formats::v1::set::V1Checkpoint` and compared with TensorFlow's own view recorded in
//! `tests/fixtures/v1/expected/*.json`: tensor names, dtypes, shapes, sizes, the sha256 of every
//! tensor's bytes and, for small tensors, the bytes and values. Reads at random offsets and
//! lengths, and sequential reads in odd chunk sizes, must equal slices of the whole. Hostile
//! variants of the fixtures (truncations, bit flips and runs of 0xff with the block CRCs
//! recomputed) must fail cleanly without any large allocation. No FUSE.

use crate::common;

use common::{hex, sha256_hex as sha};
use std::path::{Path, PathBuf};

use crate::common::tracking_alloc::largest_allocation;
use serde_json::Value;
use tfmount::formats::v1::set::{v1_files, V1Checkpoint};
use tfmount::parse::mask_crc;
use tfmount::parse::table::{parse_footer, read_block, Block, BlockHandle};
use tfmount::source::local::LocalStore;
use tfmount::testkit::rng::Rng;

fn v1_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
}

fn expected(name: &str) -> Value {
    let p = v1_dir().join("expected").join(name);
    serde_json::from_slice(&std::fs::read(&p).expect("expected json")).expect("json")
}

/// Integer and bool values decoded from served bytes, for comparison with the JSON `values`.
fn int_values(dtype: &str, b: &[u8]) -> Option<Vec<Value>> {
    let w = match dtype {
        "int8" | "uint8" | "bool" => 1,
        "int16" | "uint16" => 2,
        "int32" => 4,
        "int64" => 8,
        _ => return None,
    };
    Some(
        b.chunks(w)
            .map(|c| {
                let mut x = [0u8; 8];
                x[..w].copy_from_slice(c);
                let u = u64::from_le_bytes(x);
                match dtype {
                    "bool" => Value::from(u != 0),
                    "uint8" | "uint16" => Value::from(u),
                    _ => {
                        let shift = 64 - 8 * w as u32;
                        Value::from(((u << shift) as i64) >> shift)
                    }
                }
            })
            .collect(),
    )
}

/// Opens the checkpoint an expected record describes and checks everything it records.
fn check(json: &str) {
    let exp = expected(json);
    let source = v1_dir().join(exp["source"].as_str().unwrap());
    let dir = source.parent().unwrap();
    // The fixture files are the ones the record was made from.
    for f in exp["files"].as_array().unwrap() {
        let bytes = std::fs::read(dir.join(f["name"].as_str().unwrap())).unwrap();
        assert_eq!(bytes.len() as u64, f["size"].as_u64().unwrap());
        assert_eq!(sha(&bytes), f["sha256"].as_str().unwrap(), "{f}");
    }
    let files = v1_files(&LocalStore, &source).expect("V1 by content");
    let want_files: Vec<PathBuf> = exp["v1_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| dir.join(f.as_str().unwrap()))
        .collect();
    assert_eq!(files, want_files);
    let ck = V1Checkpoint::open(&LocalStore, &files).expect("open");
    let tensors = exp["tensors"].as_array().unwrap();
    let names: Vec<&[u8]> = ck.tensors().iter().map(|t| &t.name[..]).collect();
    let want_names: Vec<&[u8]> = tensors
        .iter()
        .map(|t| t["key"].as_str().unwrap().as_bytes())
        .collect();
    assert_eq!(names, want_names, "{json}: tensor names");
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for (i, (t, e)) in ck.tensors().iter().zip(tensors).enumerate() {
        let key = e["key"].as_str().unwrap();
        let dtype = e["dtype"].as_str().unwrap();
        assert_eq!(t.dtype.display_name(), dtype, "{key}");
        let shape: Vec<u64> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{key}");
        assert_eq!(t.error, None, "{key}");
        let size = ck.served_size(i).unwrap();
        assert_eq!(size, e["nbytes"].as_u64().unwrap(), "{key}: size");
        let whole = ck.read(i, 0, size as usize + 100).unwrap();
        assert_eq!(sha(&whole), e["sha256"].as_str().unwrap(), "{key}: sha256");
        if let Some(h) = e.get("hex") {
            assert_eq!(hex(&whole), h.as_str().unwrap(), "{key}: bytes");
            if let Some(vals) = int_values(dtype, &whole) {
                assert_eq!(&Value::from(vals), &e["values"], "{key}: values");
            }
        }
        // Random ranges, including past the end.
        for _ in 0..40 {
            let off = rng.below(size + 16);
            let span = if rng.below(4) == 0 { size + 8 } else { 64 };
            let len = 1 + rng.below(span);
            let got = ck.read(i, off, len as usize).unwrap();
            let a = (off as usize).min(whole.len());
            let b = ((off + len) as usize).min(whole.len());
            assert_eq!(got, whole[a..b], "{key}: {len} bytes at {off}");
        }
        // Sequential reads in odd chunk sizes.
        for chunk in [1usize, 7, 4097, 131_072] {
            if chunk < 64 && size > 4096 {
                continue;
            }
            let mut cat = Vec::with_capacity(whole.len());
            let mut off = 0u64;
            loop {
                let part = ck.read(i, off, chunk).unwrap();
                if part.is_empty() {
                    break;
                }
                off += part.len() as u64;
                cat.extend_from_slice(&part);
            }
            assert!(cat == whole, "{key}: sequential reads of {chunk}");
        }
    }
}

#[test]
fn single_file_checkpoints_over_two_steps() {
    check("single.model.ckpt-1.json");
    check("single.model.ckpt-2.json");
    let exp = expected("single.model.ckpt-2.json");
    let state = exp["state_file"].as_str().unwrap();
    assert!(state.contains("model_checkpoint_path: \"model.ckpt-2\""));
}

#[test]
fn sharded_over_three_devices() {
    check("sharded.json");
    // Any one shard names the whole checkpoint.
    let d = v1_dir().join("sharded");
    let all = v1_files(&LocalStore, &d.join("model.ckpt-?????-of-00003")).unwrap();
    for f in &all {
        assert_eq!(v1_files(&LocalStore, f).as_ref(), Some(&all));
    }
    let state = std::fs::read_to_string(d.join("checkpoint")).unwrap();
    assert!(state.contains("model.ckpt-?????-of-00003"));
}

#[test]
fn partitioned_along_both_axes() {
    check("partitioned.json");
}

#[test]
fn every_dtype_the_v1_writer_stores() {
    check("dtypes.json");
    let exp = expected("dtypes.json");
    // TensorFlow's reader refuses these; tfmount serves them (values from the Restore op).
    let refused: Vec<&str> = exp["tf_refused"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    for k in ["float16", "complex64", "complex128", "uint16"] {
        assert!(refused.contains(&k), "{k}");
    }
}

#[test]
fn entries_far_over_the_block_size() {
    let exp = expected("large.json");
    let table = &exp["tables"][0];
    assert!(table["largest_block"].as_u64().unwrap() > 8 * 262_144);
    assert!(table["data_blocks"].as_u64().unwrap() >= 3);
    check("large.json");
}

/// Recomputes the trailer CRC of every block the footer and the index name (best effort).
fn fix_crcs(file: &mut [u8]) {
    let fix = |file: &mut [u8], h: BlockHandle| {
        let (Ok(s), Ok(n)) = (usize::try_from(h.offset), usize::try_from(h.size)) else {
            return;
        };
        if s.checked_add(n)
            .and_then(|e| e.checked_add(5))
            .is_none_or(|e| e > file.len())
        {
            return;
        }
        let crc = mask_crc(crc32c::crc32c(&file[s..=s + n]));
        file[s + n + 1..s + n + 5].copy_from_slice(&crc.to_le_bytes());
    };
    let Ok(footer) = parse_footer(file) else {
        return;
    };
    fix(file, footer.metaindex);
    fix(file, footer.index);
    let Ok(index) = read_block(file, footer.index).and_then(Block::parse) else {
        return;
    };
    for i in 0..index.len() {
        if let Ok((h, _)) = BlockHandle::decode(index.value(i)) {
            fix(file, h);
        }
    }
}

/// Opens `bytes` as a single-file V1 checkpoint and reads every tensor (sizes, whole, a range);
/// returns the largest single allocation made. Reads that succeed have the served size.
fn open_and_read_all(dir: &Path, bytes: &[u8]) -> usize {
    let p = dir.join("model.ckpt");
    std::fs::write(&p, bytes).unwrap();
    largest_allocation(|| {
        if let Some(files) = v1_files(&LocalStore, &p) {
            if let Ok(ck) = V1Checkpoint::open(&LocalStore, &files) {
                for i in 0..ck.tensors().len() {
                    let Ok(size) = ck.served_size(i) else {
                        continue;
                    };
                    if let Ok(b) = ck.read(i, 0, 1 << 20) {
                        assert_eq!(b.len() as u64, size.min(1 << 20));
                    }
                    let _ = ck.read(i, size / 2, 100);
                }
            }
        }
    })
}

/// Every truncation, a bit flip at every byte, and a run of 0xff bytes (huge varints and
/// lengths) at every 3rd byte of two fixtures, block CRCs recomputed: never a panic, never a
/// single allocation of 256 KiB or more (the files are 2-3 KB; anything bigger would be sized by a
/// claim in the input).
#[test]
fn hostile_variants_fail_cleanly_without_large_allocations() {
    // In tmpfs where there is one: thousands of small files are written.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let mut worst = 0usize;
    for rel in ["dtypes/model.ckpt", "partitioned/model.ckpt"] {
        let clean = std::fs::read(v1_dir().join(rel)).unwrap();
        for cut in 0..clean.len() {
            worst = worst.max(open_and_read_all(tmp.path(), &clean[..cut]));
        }
        for i in 0..clean.len() {
            let mut b = clean.clone();
            b[i] ^= 1 << (i % 8);
            fix_crcs(&mut b);
            worst = worst.max(open_and_read_all(tmp.path(), &b));
            if i % 3 == 0 {
                let mut b = clean.clone();
                let end = (i + 1 + i % 11).min(b.len());
                b[i..end].fill(0xff);
                fix_crcs(&mut b);
                worst = worst.max(open_and_read_all(tmp.path(), &b));
            }
        }
    }
    eprintln!("largest single allocation: {worst} bytes");
    assert!(worst < 256 << 10, "largest allocation {worst} bytes");
}
