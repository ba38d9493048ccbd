//! A synthetic multi-shard checkpoint written with the test-only writer, with the exact bytes
//! every served file must hold: contiguous tensors of several dtypes, partitioned tensors (along
//! the first and the last axis), string tensors (contiguous and partitioned), a 4 MiB tensor for
//! large reads. Part of `tests/common` (`common::synthetic`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tfmount::parse::dtype::DType;
use tfmount::parse::slice_key::{Extent, FULL};
use tfmount::testkit::writer::CheckpointWriter;

pub const F16: DType = DType(19);
pub const F32: DType = DType(1);
pub const I16: DType = DType(5);
pub const I64: DType = DType(9);
pub const BOOL: DType = DType(10);
pub const C64: DType = DType(8);

/// What one tensor's files must hold.
#[derive(Debug, Clone)]
pub struct Expect {
    pub key: Vec<u8>,
    /// The `.bin` bytes.
    pub bin: Vec<u8>,
    /// `.shape` and `.dtype` texts.
    pub shape: String,
    pub dtype: String,
    /// Which shards hold its bytes.
    pub shards: Vec<u32>,
}

/// Deterministic bytes (the test kit's generator).
pub use tfmount::testkit::rng::bytes as pseudo_bytes;

fn shape_text(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{}\n", dims.join(" "))
}

fn served_strings(strings: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in strings {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }
    out
}

/// Rows `[r0, r1)` and columns `[c0, c1)` of a row-major `rows x cols` matrix of `es`-byte
/// elements.
fn block(bytes: &[u8], cols: u64, es: usize, r: (u64, u64), c: (u64, u64)) -> Vec<u8> {
    let mut out = Vec::new();
    for row in r.0..r.1 {
        let a = ((row * cols + c.0) as usize) * es;
        let b = ((row * cols + c.1) as usize) * es;
        out.extend_from_slice(&bytes[a..b]);
    }
    out
}

fn ext(start: i64, length: i64) -> Extent {
    Extent { start, length }
}

/// Writes the checkpoint at `dir/model.ckpt` (3 shards; `block_size` for the index, small values
/// make many index blocks) and returns its prefix and what each tensor must read as, by key.
pub fn write_model(dir: &Path, block_size: usize) -> (PathBuf, BTreeMap<Vec<u8>, Expect>) {
    let prefix = dir.join("model.ckpt");
    let out = write_model_at(&prefix, block_size, 1);
    (prefix, out)
}

/// [`write_model`] at any prefix; `salt` varies the contents.
pub fn write_model_at(prefix: &Path, block_size: usize, salt: u64) -> BTreeMap<Vec<u8>, Expect> {
    let mut w = CheckpointWriter::new(prefix, 3)
        .expect("writer")
        .block_size(block_size);
    let mut out = BTreeMap::new();
    let mut seed = salt << 32;
    let mut pod = |w: &mut CheckpointWriter,
                   out: &mut BTreeMap<Vec<u8>, Expect>,
                   key: &str,
                   dtype: DType,
                   name: &str,
                   es: usize,
                   shape: &[u64],
                   shard: u32| {
        seed += 1;
        let n: u64 = shape.iter().product();
        let mut bytes = pseudo_bytes(seed, n as usize * es);
        if dtype == BOOL {
            bytes.iter_mut().for_each(|b| *b &= 1);
        }
        w.add(key.as_bytes(), dtype, shape, &bytes, shard)
            .expect("add");
        out.insert(
            key.as_bytes().to_vec(),
            Expect {
                key: key.as_bytes().to_vec(),
                bin: bytes,
                shape: shape_text(shape),
                dtype: format!("{name}\n"),
                shards: vec![shard],
            },
        );
    };
    pod(
        &mut w,
        &mut out,
        "dense/kernel",
        F32,
        "float32",
        4,
        &[256, 300],
        0,
    );
    pod(&mut w, &mut out, "dense/bias", F32, "float32", 4, &[300], 1);
    pod(
        &mut w,
        &mut out,
        "dense/kernel/Adam",
        F32,
        "float32",
        4,
        &[256, 300],
        2,
    );
    pod(&mut w, &mut out, "big/x", F32, "float32", 4, &[1 << 20], 1);
    pod(
        &mut w,
        &mut out,
        "layer_norm/gamma",
        F16,
        "float16",
        2,
        &[777],
        2,
    );
    pod(&mut w, &mut out, "flags", BOOL, "bool", 1, &[13], 0);
    pod(&mut w, &mut out, "global_step", I64, "int64", 8, &[], 0);
    pod(&mut w, &mut out, "fft/w", C64, "complex64", 8, &[10, 10], 2);
    pod(
        &mut w,
        &mut out,
        "odd name/with space",
        I16,
        "int16",
        2,
        &[3, 5, 7],
        1,
    );
    for i in 0..40 {
        let key = format!("tower/layer_{i:02}/w");
        pod(
            &mut w,
            &mut out,
            &key,
            F32,
            "float32",
            4,
            &[17, 3 + i],
            (i % 3) as u32,
        );
    }

    // Partitioned along the first axis, one slice per shard.
    let (rows, cols) = (3000u64, 64u64);
    let full = pseudo_bytes(salt + 100, (rows * cols * 4) as usize);
    let cuts = [0u64, 1000, 2100, 3000];
    let slices: Vec<(Vec<Extent>, Vec<u8>, u32)> = (0..3)
        .map(|s| {
            let (a, b) = (cuts[s], cuts[s + 1]);
            (
                vec![ext(a as i64, (b - a) as i64), FULL],
                block(&full, cols, 4, (a, b), (0, cols)),
                s as u32,
            )
        })
        .collect();
    w.add_sliced(b"emb/table", F32, &[rows, cols], &slices)
        .expect("sliced");
    out.insert(
        b"emb/table".to_vec(),
        Expect {
            key: b"emb/table".to_vec(),
            bin: full,
            shape: shape_text(&[rows, cols]),
            dtype: "float32\n".into(),
            shards: vec![0, 1, 2],
        },
    );

    // Partitioned along the last axis (short runs), int16.
    let (rows, cols) = (200u64, 50u64);
    let full = pseudo_bytes(salt + 200, (rows * cols * 2) as usize);
    let slices = vec![
        (
            vec![FULL, ext(0, 20)],
            block(&full, cols, 2, (0, rows), (0, 20)),
            1,
        ),
        (
            vec![FULL, ext(20, 30)],
            block(&full, cols, 2, (0, rows), (20, 50)),
            2,
        ),
    ];
    w.add_sliced(b"cols/split", I16, &[rows, cols], &slices)
        .expect("sliced");
    out.insert(
        b"cols/split".to_vec(),
        Expect {
            key: b"cols/split".to_vec(),
            bin: full,
            shape: shape_text(&[rows, cols]),
            dtype: "int16\n".into(),
            shards: vec![1, 2],
        },
    );

    // Strings: a vocabulary (lengths 0..40) and a partitioned [2, 300] tensor.
    let lens = pseudo_bytes(salt + 300, 5000);
    let vocab: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, l)| pseudo_bytes(1000 + i as u64, (*l % 41) as usize))
        .collect();
    let refs: Vec<&[u8]> = vocab.iter().map(|v| v.as_slice()).collect();
    w.add_strings(b"vocab/tokens", &[5000], &refs, 0)
        .expect("strings");
    out.insert(
        b"vocab/tokens".to_vec(),
        Expect {
            key: b"vocab/tokens".to_vec(),
            bin: served_strings(&vocab),
            shape: shape_text(&[5000]),
            dtype: "string\n".into(),
            shards: vec![0],
        },
    );
    let ids: Vec<Vec<u8>> = (0..600u64)
        .map(|i| format!("id-{}", i * 7919 % 1009).into_bytes())
        .collect();
    for (s, (c0, c1)) in [(0u64, 120u64), (120, 300)].into_iter().enumerate() {
        let mut part = Vec::new();
        for r in 0..2u64 {
            for c in c0..c1 {
                part.push(ids[(r * 300 + c) as usize].as_slice());
            }
        }
        w.add_string_slice(
            b"ids/partitioned",
            &[2, 300],
            &[FULL, ext(c0 as i64, (c1 - c0) as i64)],
            &part,
            s as u32 * 2,
        )
        .expect("string slice");
    }
    out.insert(
        b"ids/partitioned".to_vec(),
        Expect {
            key: b"ids/partitioned".to_vec(),
            bin: served_strings(&ids),
            shape: shape_text(&[2, 300]),
            dtype: "string\n".into(),
            shards: vec![0, 2],
        },
    );
    w.finish().expect("finish");
    out
}

/// The `.bin` path of a key under `variables/` (the keys above need no escaping).
pub fn bin_path(mnt: &Path, key: &[u8], suffix: &str) -> PathBuf {
    let k = String::from_utf8_lossy(key);
    mnt.join("variables").join(format!("{k}{suffix}"))
}

/// Sets the modification time of every file of the checkpoint to 2001-09-09, so that any later
/// write changes it whatever the clock's granularity.
pub fn age_files(prefix: &Path) {
    let dir = prefix.parent().expect("dir");
    let base = prefix
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    for e in std::fs::read_dir(dir).expect("readdir") {
        let e = e.expect("dirent");
        if e.file_name().to_string_lossy().starts_with(&base) {
            let f = std::fs::File::options()
                .write(true)
                .open(e.path())
                .expect("open");
            f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
                .expect("set mtime");
        }
    }
}

/// RssAnon of a process in KiB.
pub fn rss_anon_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
