//! The test-only checkpoint writer ([`super`]) checked three ways: against our own reader (round
//! trips, many blocks, Snappy), against checkpoints written by real TensorFlow (rewritten tensor
//! by tensor, the files must come out byte-identical), and, when a Python with TensorFlow is
//! available (src/testkit/requires.rs finds it), against TensorFlow's own reader. (Was the
//! `core` suite's `writer` module: it reaches the writer's raw pieces and the parsers' internals,
//! which the crate keeps to itself.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{data_path, index_path, CheckpointWriter};
use crate::formats::caches::Caches;
use crate::formats::v2::strings::StringLayout;
use crate::parse::bundle::{parse_entry, parse_header, Data, Entry};
use crate::parse::dtype::{DType, DT_STRING, DT_VARIANT};
use crate::parse::slice_key::{Extent, FULL};
use crate::parse::table::{parse_footer, read_block, Block, BlockHandle, Table};
use crate::parse::{mask_crc, slice_key, varint};
use crate::testkit::requires;
/// Deterministic bytes.
use crate::testkit::rng::bytes as pseudo_bytes;
use sha2::{Digest, Sha256};

/// The fixtures TensorFlow wrote (`tests/fixtures`).
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Little-endian `f32` bytes, as tensors store them.
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// ---------------------------------------------------------------------------------------------
// Helpers: reading a checkpoint back with tfmount's reader.
// ---------------------------------------------------------------------------------------------

fn open_table(path: &Path) -> Table {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes);
    Table::open(file, Caches::new(64 << 20)).expect("open table")
}

/// Every (key, value) of a table, in table order.
fn table_entries(t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut p = t.seek(b"").unwrap();
    while let Some(pos) = p {
        let (blk, i) = t.entry(pos).unwrap();
        out.push((blk.key(i).to_vec(), blk.value(i).to_vec()));
        p = t.next(pos).unwrap();
    }
    out
}

/// The raw blocks of a table file: (handle, compression type byte, decoded block).
fn raw_blocks(file: &[u8]) -> (Vec<(BlockHandle, u8, Block)>, Block) {
    let footer = parse_footer(file).unwrap();
    let index = Block::parse(read_block(file, footer.index).unwrap()).unwrap();
    let meta = read_block(file, footer.metaindex).unwrap();
    assert_eq!(
        meta,
        [0, 0, 0, 0, 1, 0, 0, 0],
        "metaindex must be the empty block"
    );
    let blocks = (0..index.len())
        .map(|i| {
            let (h, _) = BlockHandle::decode(index.value(i)).unwrap();
            let kind = file[(h.offset + h.size) as usize];
            (h, kind, Block::parse(read_block(file, h).unwrap()).unwrap())
        })
        .collect();
    (blocks, index)
}

/// A checkpoint read back: header shard count and every entry by key.
struct ReadBack {
    prefix: PathBuf,
    num_shards: u32,
    entries: Vec<(Vec<u8>, Entry, Vec<u8>)>,
    by_key: std::collections::HashMap<Vec<u8>, usize>,
}

impl ReadBack {
    fn open(prefix: &Path) -> ReadBack {
        let t = open_table(&index_path(prefix));
        let mut all = table_entries(&t).into_iter();
        let (hk, hv) = all.next().expect("header entry");
        assert_eq!(hk, b"");
        let header = parse_header(&hv).unwrap();
        assert!(!header.big_endian);
        let entries = all
            .map(|(k, v)| {
                let e = parse_entry(&v).unwrap_or_else(|err| panic!("{k:?}: {err}"));
                (k, e, v)
            })
            .collect();
        let entries: Vec<(Vec<u8>, Entry, Vec<u8>)> = entries;
        let by_key = entries
            .iter()
            .enumerate()
            .map(|(i, (k, _, _))| (k.clone(), i))
            .collect();
        ReadBack {
            prefix: prefix.to_path_buf(),
            num_shards: header.num_shards,
            entries,
            by_key,
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.by_key.get(key).map(|&i| &self.entries[i].1)
    }

    /// The stored bytes of a contiguous entry, with its CRC checked like TensorFlow does.
    fn data(&self, e: &Entry) -> Vec<u8> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = e.data
        else {
            panic!("not contiguous")
        };
        let file = std::fs::read(data_path(&self.prefix, shard, self.num_shards)).unwrap();
        let bytes = file[offset as usize..(offset + size) as usize].to_vec();
        if e.dtype == DT_STRING {
            StringLayout::parse(&bytes, e.num_elements(), Some(crc)).expect("string crc");
        } else if e.dtype == DT_VARIANT {
            assert_eq!(variant_crc(&bytes, e.num_elements()), crc, "variant crc");
        } else {
            assert_eq!(mask_crc(crc32c::crc32c(&bytes)), crc, "tensor crc");
        }
        bytes
    }
}

/// The masked CRC of a stored variant tensor (tf-format.md §4.3), checking each element's.
fn variant_crc(stored: &[u8], n: u64) -> u32 {
    let (mut pos, mut crc) = (0, 0u32);
    for _ in 0..n {
        let (len, used) = varint::decode_u64(&stored[pos..]).unwrap();
        pos += used;
        crc = crc32c::crc32c_append(crc, &len.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &stored[pos..pos + len as usize]);
        pos += len as usize;
        let cs = &stored[pos..pos + 4];
        assert_eq!(u32::from_le_bytes(cs.try_into().unwrap()), mask_crc(crc));
        crc = crc32c::crc32c_append(crc, cs);
        pos += 4;
    }
    assert_eq!(pos, stored.len());
    mask_crc(crc)
}

/// Decodes a stored string tensor (tf-format.md §4.2) into its elements.
fn decode_strings(stored: &[u8], n: u64) -> Vec<Vec<u8>> {
    let mut pos = 0;
    let mut lens = Vec::new();
    for _ in 0..n {
        let (l, used) = varint::decode_u64(&stored[pos..]).unwrap();
        lens.push(l as usize);
        pos += used;
    }
    pos += 4;
    lens.iter()
        .map(|&l| {
            let s = stored[pos..pos + l].to_vec();
            pos += l;
            s
        })
        .collect()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tfmount-writer")
        .tempdir()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Round trips through tfmount's reader.
// ---------------------------------------------------------------------------------------------

/// What a test wrote, to compare with what is read back. Values are "decoded": one element
/// holding the raw bytes for memcpy-able dtypes, the elements for strings.
enum Want {
    Plain(DType, Vec<u64>, Vec<Vec<u8>>),
    Sliced(DType, Vec<u64>, Vec<(Vec<Extent>, Vec<Vec<u8>>)>),
}

fn pod(dtype: DType, shape: &[u64], bytes: Vec<u8>) -> Want {
    Want::Plain(dtype, shape.to_vec(), vec![bytes])
}

fn strings_want(shape: &[u64], s: &[&[u8]]) -> Want {
    Want::Plain(
        DT_STRING,
        shape.to_vec(),
        s.iter().map(|x| x.to_vec()).collect(),
    )
}

impl ReadBack {
    fn decoded(&self, e: &Entry) -> Vec<Vec<u8>> {
        let stored = self.data(e);
        if e.dtype == DT_STRING {
            decode_strings(&stored, e.num_elements())
        } else {
            vec![stored]
        }
    }
}

fn check_read_back(prefix: &Path, want: &BTreeMap<Vec<u8>, Want>) {
    let rb = ReadBack::open(prefix);
    // Every wanted tensor is there, with its data; slice parts are the only other entries.
    let mut expected_keys: Vec<Vec<u8>> = Vec::new();
    for (key, w) in want {
        let e = rb
            .get(key)
            .unwrap_or_else(|| panic!("{} missing", String::from_utf8_lossy(key)));
        expected_keys.push(key.clone());
        match w {
            Want::Plain(dtype, shape, data) => {
                assert_eq!((e.dtype, &e.shape), (*dtype, shape), "{key:?}");
                assert_eq!(&rb.decoded(e), data, "{key:?}");
            }
            Want::Sliced(dtype, shape, slices) => {
                assert_eq!((e.dtype, &e.shape), (*dtype, shape));
                let Data::Sliced(got) = &e.data else {
                    panic!("{key:?} should be sliced")
                };
                let exts: Vec<_> = slices.iter().map(|s| s.0.clone()).collect();
                assert_eq!(got, &exts, "slices in call order");
                crate::parse::bundle::check_tiling(shape, got).unwrap();
                for (ext, data) in slices {
                    let pk = slice_key::encode(key, ext);
                    let pe = rb.get(&pk).expect("slice part entry");
                    assert_eq!(pe.dtype, *dtype);
                    assert_eq!(pe.shape, crate::parse::bundle::slice_shape(shape, ext));
                    assert_eq!(&rb.decoded(pe), data);
                    expected_keys.push(pk);
                }
            }
        }
    }
    expected_keys.sort();
    let got_keys: Vec<_> = rb.entries.iter().map(|(k, _, _)| k.clone()).collect();
    assert_eq!(
        got_keys, expected_keys,
        "keys in the table, sorted bytewise"
    );
}

#[test]
fn round_trip_dtypes_strings_slices_three_shards() {
    let dir = tempdir();
    let prefix = dir.path().join("sub/model.ckpt");
    let mut w = CheckpointWriter::new(&prefix, 3).unwrap();
    let mut want = BTreeMap::new();
    let mut seed = 1;
    // One tensor per memcpy-able dtype, on rotating shards, in non-sorted order.
    for v in (1..=32).rev() {
        let dtype = DType(v);
        let Some(es) = dtype.elem_size() else {
            continue;
        };
        let shape = vec![2, 3, (v % 4) as u64 + 1];
        let n: u64 = shape.iter().product();
        let bytes = pseudo_bytes(seed, n as usize * es);
        seed += 1;
        let key = format!("dtypes/{}", dtype.tf_name().unwrap()).into_bytes();
        w.add(&key, dtype, &shape, &bytes, v as u32 % 3).unwrap();
        want.insert(key, pod(dtype, &shape, bytes));
    }
    // Scalars, empty tensors, odd names.
    let odd: &[(&[u8], Vec<u64>)] = &[
        (b"scalar", vec![]),
        (b"empty", vec![0]),
        (b"empty2d", vec![3, 0]),
        (b"rank4", vec![2, 1, 3, 2]),
        (b"\xff\xfe high bytes", vec![1]),
        (b"a/b/c/d/e/f/deep", vec![5]),
        (b"z", vec![7]),
    ];
    for (key, shape) in odd {
        let n: u64 = shape.iter().product();
        let bytes = pseudo_bytes(seed, n as usize * 4);
        seed += 1;
        w.add(key, DType(1), shape, &bytes, 2).unwrap();
        want.insert(key.to_vec(), pod(DType(1), shape, bytes));
    }
    // Strings: empty, binary, long (2-byte varint), a 0-element tensor, a scalar.
    let long = vec![b'x'; 300];
    let strs: Vec<&[u8]> = vec![b"", b"abc", b"\x00\xff\x01", &long, b"tail"];
    w.add_strings(b"strings/vec", &[5], &strs, 1).unwrap();
    want.insert(b"strings/vec".to_vec(), strings_want(&[5], &strs));
    w.add_strings(b"strings/none", &[0, 4], &[], 0).unwrap();
    want.insert(b"strings/none".to_vec(), strings_want(&[0, 4], &[]));
    w.add_strings(b"strings/scalar", &[], &[b"hello"], 2)
        .unwrap();
    want.insert(b"strings/scalar".to_vec(), strings_want(&[], &[b"hello"]));
    // A partitioned tensor across all three shards: rows 0..2, 2..5 (+ a full dim), and one
    // with an explicit full-length column extent, which TF keeps as start/length.
    let shape = vec![6u64, 4];
    let ex = |s, l| Extent {
        start: s,
        length: l,
    };
    let slices = vec![
        (vec![ex(2, 3), FULL], f32_bytes(&[1.0; 12]), 1u32),
        (vec![ex(0, 2), FULL], f32_bytes(&[2.0; 8]), 0),
        (vec![ex(5, 1), ex(0, 4)], f32_bytes(&[3.0; 4]), 2),
    ];
    w.add_sliced(b"part/kernel", DType(1), &shape, &slices)
        .unwrap();
    want.insert(
        b"part/kernel".to_vec(),
        Want::Sliced(
            DType(1),
            shape,
            slices.into_iter().map(|(e, b, _)| (e, vec![b])).collect(),
        ),
    );
    // A partitioned string tensor; and a "slice" that is the whole tensor (a plain entry).
    let sshape = vec![3u64];
    w.add_string_slice(b"part/vocab", &sshape, &[ex(0, 1)], &[b"a"], 0)
        .unwrap();
    w.add_string_slice(b"part/vocab", &sshape, &[ex(1, 2)], &[b"bb", b"ccc"], 1)
        .unwrap();
    want.insert(
        b"part/vocab".to_vec(),
        Want::Sliced(
            DT_STRING,
            sshape,
            vec![
                (vec![ex(0, 1)], vec![b"a".to_vec()]),
                (vec![ex(1, 2)], vec![b"bb".to_vec(), b"ccc".to_vec()]),
            ],
        ),
    );
    let full_bytes = f32_bytes(&[9.0, 8.0]);
    w.add_slice(b"part/whole", DType(1), &[2], &[FULL], &full_bytes, 0)
        .unwrap();
    want.insert(b"part/whole".to_vec(), pod(DType(1), &[2], full_bytes));
    let summary = w.finish().unwrap();
    assert_eq!(summary.blocks, 1);
    check_read_back(&prefix, &want);

    let rb = ReadBack::open(&prefix);
    assert_eq!(rb.num_shards, 3);
    for s in 0..3 {
        assert!(data_path(&prefix, s, 3).exists());
    }
    // Data lands in each shard in call order (dtypes were added from 32 down to 1).
    let off = |k: &[u8]| match rb.get(k).unwrap().data {
        Data::Contiguous { shard, offset, .. } => (shard, offset),
        _ => panic!(),
    };
    assert_eq!(off(b"dtypes/uint2"), (32 % 3, 0));
    assert_eq!(off(b"dtypes/uint4").1, 0); // 30 % 3 == 0: first in shard 0
}

/// The same key set must be present whether or not the index blocks are Snappy-compressed, with
/// many data blocks, TensorFlow's restart interval and index separators.
fn many_keys(snappy: bool) {
    const N: usize = 50_000;
    let dir = tempdir();
    let prefix = dir.path().join("many");
    let mut w = CheckpointWriter::new(&prefix, 2).unwrap().snappy(snappy);
    let mut want = BTreeMap::new();
    // Added in a scrambled order; the writer sorts.
    for j in 0..N {
        let i = (j * 7919) % N;
        let key = format!("layer_{:05}/sub_{}/kernel", i / 8, i % 8).into_bytes();
        let bytes = f32_bytes(&[i as f32, -(i as f32)]);
        w.add(&key, DType(1), &[2], &bytes, (i % 2) as u32).unwrap();
        want.insert(key, pod(DType(1), &[2], bytes));
    }
    let summary = w.finish().unwrap();
    assert_eq!(summary.entries, N as u64 + 1);
    assert!(summary.blocks > 4, "{summary:?}");
    check_read_back(&prefix, &want);

    let file = std::fs::read(index_path(&prefix)).unwrap();
    let (blocks, index) = raw_blocks(&file);
    assert_eq!(blocks.len() as u64, summary.blocks);
    let mut prev_last: Option<Vec<u8>> = None;
    for (b, (h, kind, blk)) in blocks.iter().enumerate() {
        assert_eq!(*kind, u8::from(snappy), "block {b} compression");
        // Uncompressed data blocks stop right after reaching the 256 KiB target.
        if !snappy && b + 1 < blocks.len() {
            assert!(h.size >= 262_144 && h.size < 262_144 + 200, "{}", h.size);
        }
        // Restart interval 16: ceil(entries / 16) restart points.
        let raw = read_block(&file, *h).unwrap();
        let n = raw.len();
        let restarts = u32::from_le_bytes(raw[n - 4..].try_into().unwrap()) as usize;
        assert_eq!(restarts, blk.len().div_ceil(16), "block {b}");
        // Index key: >= last key of this block, < first key of the next one (a separator).
        let sep = index.key(b);
        let last = blk.key(blk.len() - 1);
        assert!(sep >= last);
        if let Some((_, _, next)) = blocks.get(b + 1) {
            assert!(sep < next.key(0));
            let mut expect = last.to_vec();
            crate::parse::table_build::find_shortest_separator(&mut expect, next.key(0));
            assert_eq!(sep, expect.as_slice());
        } else {
            let mut expect = last.to_vec();
            crate::parse::table_build::find_short_successor(&mut expect);
            assert_eq!(sep, expect.as_slice());
        }
        if let Some(p) = prev_last {
            assert!(p.as_slice() < blk.key(0));
        }
        prev_last = Some(last.to_vec());
    }
    // The index block has restart interval 1: one restart per entry.
    let footer = parse_footer(&file).unwrap();
    let raw_index = read_block(&file, footer.index).unwrap();
    let n = raw_index.len();
    let restarts = u32::from_le_bytes(raw_index[n - 4..].try_into().unwrap()) as usize;
    assert_eq!(restarts, index.len());
}

#[test]
fn many_keys_uncompressed() {
    many_keys(false);
}

#[test]
fn many_keys_snappy() {
    many_keys(true);
}

/// Snappy is used only where it saves 12.5%: incompressible blocks stay raw.
#[test]
fn snappy_only_when_it_pays() {
    let dir = tempdir();
    let prefix = dir.path().join("mixed");
    let mut w = CheckpointWriter::new(&prefix, 1)
        .unwrap()
        .snappy(true)
        .block_size(4096);
    // Keys of random bytes with random raw values: incompressible.
    for i in 0..200u64 {
        let mut key = b"r".to_vec();
        key.extend_from_slice(&pseudo_bytes(i, 24));
        w.add_raw_entry(&key, pseudo_bytes(i + 1000, 100));
    }
    // Repetitive keys and values: compressible.
    for i in 0..2000u64 {
        let key = format!("s/{i:08}").into_bytes();
        w.add_raw_entry(&key, vec![7u8; 60]);
    }
    w.finish().unwrap();
    let file = std::fs::read(index_path(&prefix)).unwrap();
    let (blocks, _) = raw_blocks(&file);
    let kinds: Vec<u8> = blocks.iter().map(|b| b.1).collect();
    assert!(kinds.contains(&0) && kinds.contains(&1), "{kinds:?}");
    let t = open_table(&index_path(&prefix));
    assert_eq!(table_entries(&t).len(), 2201);
}

/// TensorFlow's rule: an entry with key+value >= 2 * block_size starts a new block.
#[test]
fn huge_entries_start_a_block() {
    let dir = tempdir();
    let prefix = dir.path().join("huge");
    let mut w = CheckpointWriter::new(&prefix, 1).unwrap().block_size(1024);
    w.add_raw_entry(b"a", vec![1; 10]);
    w.add_raw_entry(b"b", vec![2; 2047]); // 1 + 2047 = 2048 >= 2 * 1024
    w.add_raw_entry(b"c", vec![3; 10]);
    w.add_raw_entry(b"d", vec![4; 2000]); // 2001 < 2048: no early flush
    w.finish().unwrap();
    let t = open_table(&index_path(&prefix));
    let firsts: Vec<Vec<u8>> = (0..t.num_blocks() as u32)
        .map(|b| t.block(b).unwrap().key(0).to_vec())
        .collect();
    // Block 0 = header + "a"; "b" starts block 1 and fills it; "c" + "d" share block 2.
    assert_eq!(firsts, vec![b"".to_vec(), b"b".to_vec(), b"c".to_vec()]);
}

/// Offsets follow call order per shard; sizes, CRCs and the duplicate-key rule.
#[test]
fn offsets_follow_call_order_and_duplicates_fail() {
    let dir = tempdir();
    let prefix = dir.path().join("order");
    let mut w = CheckpointWriter::new(&prefix, 2).unwrap();
    w.add(b"zz", DType(3), &[2], &[1, 0, 0, 0, 2, 0, 0, 0], 0)
        .unwrap();
    w.add(b"aa", DType(4), &[3], &[1, 2, 3], 0).unwrap();
    w.add(b"mm", DType(4), &[1], &[9], 1).unwrap();
    w.add_streamed(b"streamed", DType(1), &[1000], 4000, 0, |out| {
        for i in 0..1000u32 {
            out.write_all(&(i as f32).to_le_bytes())?;
        }
        Ok(())
    })
    .unwrap();
    w.finish().unwrap();
    let rb = ReadBack::open(&prefix);
    let at = |k: &[u8]| match rb.get(k).unwrap().data {
        Data::Contiguous { shard, offset, .. } => (shard, offset),
        _ => panic!(),
    };
    assert_eq!(at(b"zz"), (0, 0));
    assert_eq!(at(b"aa"), (0, 8));
    assert_eq!(at(b"mm"), (1, 0));
    assert_eq!(at(b"streamed"), (0, 11));
    let s = rb.data(rb.get(b"streamed").unwrap());
    assert_eq!(&s[4..8], &1f32.to_le_bytes());

    // Wrong sizes are refused up front; duplicates at finish.
    let mut w = CheckpointWriter::new(dir.path().join("dup"), 1).unwrap();
    assert!(w.add(b"x", DType(1), &[2], &[0; 7], 0).is_err());
    assert!(w.add(b"x", DType(1), &[2], &[0; 8], 1).is_err());
    assert!(w.add(b"", DType(1), &[2], &[0; 8], 0).is_err());
    assert!(w.add_strings(b"s", &[2], &[b"a"], 0).is_err());
    assert!(w
        .add_streamed(b"t", DType(1), &[2], 8, 0, |o| o.write_all(&[0; 4]))
        .is_err());
    w.add(b"x", DType(1), &[2], &[0; 8], 0).unwrap();
    w.add(b"x", DType(1), &[2], &[0; 8], 0).unwrap();
    assert!(w.finish().is_err());

    // Raw entries may repeat and replace the header; our reader must then refuse the table.
    let mut w = CheckpointWriter::new(dir.path().join("raw"), 1).unwrap();
    w.add_raw_entry(b"", vec![0x08, 0x02]);
    w.add_raw_entry(b"k", vec![1]);
    w.add_raw_entry(b"k", vec![2]);
    w.finish().unwrap();
    let t = open_table(&index_path(&dir.path().join("raw")));
    assert!(t.block(0).is_err() || t.seek(b"").is_err());
}

// ---------------------------------------------------------------------------------------------
// Against checkpoints written by real TensorFlow: rewrite them, compare bytes.
// ---------------------------------------------------------------------------------------------

/// Every V2 checkpoint prefix under `tests/fixtures` (each `X.index` with its data files).
fn fixture_prefixes() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut items: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        items.sort();
        for p in items {
            if p.is_dir() {
                walk(&p, out);
            } else if let Some(name) = p.to_str().and_then(|s| s.strip_suffix(".index")) {
                out.push(PathBuf::from(name));
            }
        }
    }
    let mut out = Vec::new();
    walk(&fixtures(), &mut out);
    out
}

/// A slice part's full tensor: (name, extents of the slice, full shape).
type SlicePart = (Vec<u8>, Vec<Extent>, Vec<u64>);

/// Rewrites the checkpoint at `prefix` with `CheckpointWriter`, adding tensors in the order of
/// their (shard, offset), and returns the new prefix's files compared with the originals.
fn rewrite(prefix: &Path, out_prefix: &Path) -> Vec<String> {
    let rb = ReadBack::open(prefix);
    // Slice parts: key -> (full name, extents, full shape).
    let mut parts: BTreeMap<Vec<u8>, SlicePart> = BTreeMap::new();
    for (k, e, _) in &rb.entries {
        if let Data::Sliced(slices) = &e.data {
            for s in slices {
                parts.insert(
                    slice_key::encode(k, s),
                    (k.clone(), s.clone(), e.shape.clone()),
                );
            }
        }
    }
    let mut contiguous: Vec<_> = rb
        .entries
        .iter()
        .filter_map(|(k, e, v)| match e.data {
            Data::Contiguous { shard, offset, .. } => Some(((shard, offset), k, e, v)),
            Data::Sliced(_) => None,
        })
        .collect();
    contiguous.sort_by_key(|c| c.0);
    let mut w = CheckpointWriter::new(out_prefix, rb.num_shards).unwrap();
    let mut notes = Vec::new();
    for ((shard, offset), key, e, value) in contiguous {
        let bytes = rb.data(e);
        let n = e.num_elements();
        let part = parts.get(key.as_slice());
        if e.dtype == DT_STRING {
            let strings = decode_strings(&bytes, n);
            let refs: Vec<&[u8]> = strings.iter().map(|s| s.as_slice()).collect();
            match part {
                Some((name, ext, full)) => w.add_string_slice(name, full, ext, &refs, shard),
                None => w.add_strings(key, &e.shape, &refs, shard),
            }
            .unwrap();
        } else if e.dtype.elem_size().is_some() {
            match part {
                Some((name, ext, full)) => w.add_slice(name, e.dtype, full, ext, &bytes, shard),
                None => w.add(key, e.dtype, &e.shape, &bytes, shard),
            }
            .unwrap();
        } else {
            // Variant (or unknown) tensors: copied raw; the writer has no encoder for them.
            notes.push(format!(
                "{}: {} copied raw",
                String::from_utf8_lossy(key),
                e.dtype.display_name()
            ));
            let off = w.add_raw_data(shard, &bytes).unwrap();
            assert_eq!(off, offset);
            w.add_raw_entry(key, value.clone());
        }
    }
    w.finish().unwrap();
    notes
}

/// Where two byte strings first differ, with context, for a readable failure.
fn first_difference(a: &[u8], b: &[u8]) -> Option<String> {
    let i = a.iter().zip(b).position(|(x, y)| x != y)?;
    let lo = i.saturating_sub(16);
    Some(format!(
        "first difference at byte {i} (lengths {} vs {}):\n  tf:   {:02x?}\n  ours: {:02x?}",
        a.len(),
        b.len(),
        &a[lo..(i + 16).min(a.len())],
        &b[lo..(i + 16).min(b.len())]
    ))
    .or(None)
}

fn compare_files(tf: &Path, ours: &Path) -> Result<(), String> {
    let a = std::fs::read(tf).unwrap();
    let b = std::fs::read(ours).unwrap();
    if a == b {
        return Ok(());
    }
    let why = first_difference(&a, &b)
        .unwrap_or_else(|| format!("one is a prefix of the other ({} vs {})", a.len(), b.len()));
    Err(format!("{} differs: {why}", tf.display()))
}

/// Per-entry comparison of two index tables, to explain a byte mismatch.
fn explain_index_difference(tf: &Path, ours: &Path) -> String {
    let a = table_entries(&open_table(&index_path(tf)));
    let b = table_entries(&open_table(&index_path(ours)));
    let mut out = String::new();
    if a.len() != b.len() {
        out += &format!("entry counts {} vs {}\n", a.len(), b.len());
    }
    for ((ka, va), (kb, vb)) in a.iter().zip(&b) {
        if ka != kb || va != vb {
            out += &format!(
                "key {:?} / {:?}\n  tf value:   {:02x?}\n  our value:  {:02x?}\n",
                String::from_utf8_lossy(ka),
                String::from_utf8_lossy(kb),
                va,
                vb
            );
        }
    }
    out
}

#[test]
fn byte_identical_to_tensorflow_fixtures() {
    let prefixes = fixture_prefixes();
    if prefixes.is_empty() {
        eprintln!("no TensorFlow fixtures under tests/fixtures yet: skipped");
        return;
    }
    let dir = tempdir();
    let mut failures = Vec::new();
    for (i, prefix) in prefixes.iter().enumerate() {
        let out = dir.path().join(format!("{i}/ckpt"));
        let notes = rewrite(prefix, &out);
        for n in notes {
            eprintln!("{}: {n}", prefix.display());
        }
        let num_shards = ReadBack::open(prefix).num_shards;
        let mut files = vec![(index_path(prefix), index_path(&out))];
        for s in 0..num_shards {
            files.push((
                data_path(prefix, s, num_shards),
                data_path(&out, s, num_shards),
            ));
        }
        let before = failures.len();
        for (tf, ours) in files {
            if let Err(e) = compare_files(&tf, &ours) {
                let detail = if tf.extension().is_some_and(|x| x == "index") {
                    explain_index_difference(prefix, &out)
                } else {
                    String::new()
                };
                failures.push(format!("{e}\n{detail}"));
            }
        }
        if failures.len() == before {
            eprintln!(
                "{}: byte-identical ({num_shards} shard(s))",
                prefix.display()
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Against TensorFlow's reader (only where a Python with TensorFlow is installed).
// ---------------------------------------------------------------------------------------------

/// Runs `script` with a Python that has TensorFlow (src/testkit/requires.rs); `None` (the
/// test is skipped and reported) when there is no such Python, or when `TFMOUNT_NO_TF` is set
/// (these tests take about a minute, mostly importing TensorFlow). Panics if the script fails.
fn run_tf_python(script: &str, args: &[&std::ffi::OsStr]) -> Option<Vec<u8>> {
    if std::env::var_os("TFMOUNT_NO_TF").is_some() {
        requires::missing("TensorFlow (TFMOUNT_NO_TF is set)", "");
        return None;
    }
    let py = requires::python("tensorflow, numpy", "")?;
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    Some(out.stdout)
}

const TF_READ: &str = r#"
import hashlib, json, sys
import tensorflow as tf
r = tf.train.load_checkpoint(sys.argv[1])
out = {}
dtypes = r.get_variable_to_dtype_map()
for name, shape in r.get_variable_to_shape_map().items():
    v = r.get_tensor(name)
    if v.dtype == object:
        data = b"".join(len(s).to_bytes(8, "little") + s for s in v.reshape(-1).tolist())
    else:
        data = v.tobytes()
    out[name] = [dtypes[name].name, list(shape), hashlib.sha256(data).hexdigest()]
json.dump(out, sys.stdout, sort_keys=True)
"#;

#[test]
fn tensorflow_reads_what_we_write() {
    let dir = tempdir();
    let prefix = dir.path().join("for_tf");
    // Many blocks, Snappy, two shards, strings and a partitioned tensor.
    // Small blocks: many of them without many tensors (TensorFlow reads any block size).
    let mut w = CheckpointWriter::new(&prefix, 2)
        .unwrap()
        .snappy(true)
        .block_size(2048);
    let mut expect: BTreeMap<String, (String, Vec<u64>, String)> = BTreeMap::new();
    let sha = |b: &[u8]| format!("{:x}", Sha256::digest(b));
    for i in 0..3000u32 {
        let name = format!("layer_{:04}/sub_{}/kernel", i / 4, i % 4);
        let bytes = pseudo_bytes(i as u64, 12);
        w.add(name.as_bytes(), DType(1), &[3], &bytes, i % 2)
            .unwrap();
        expect.insert(name, ("float32".into(), vec![3], sha(&bytes)));
    }
    let strs: Vec<&[u8]> = vec![b"", b"x", &[0xff, 0x00, 0x10]];
    w.add_strings(b"vocab", &[3], &strs, 1).unwrap();
    let mut layout = Vec::new();
    for s in &strs {
        layout.extend_from_slice(&(s.len() as u64).to_le_bytes());
        layout.extend_from_slice(s);
    }
    expect.insert("vocab".into(), ("string".into(), vec![3], sha(&layout)));
    // A [4, 3] int64 tensor in two row slices on different shards.
    let full: Vec<u8> = (0..12i64).flat_map(|v| v.to_le_bytes()).collect();
    let ex = |s, l| Extent {
        start: s,
        length: l,
    };
    w.add_slice(
        b"part",
        DType(9),
        &[4, 3],
        &[ex(0, 1), FULL],
        &full[..24],
        0,
    )
    .unwrap();
    w.add_slice(
        b"part",
        DType(9),
        &[4, 3],
        &[ex(1, 3), FULL],
        &full[24..],
        1,
    )
    .unwrap();
    expect.insert("part".into(), ("int64".into(), vec![4, 3], sha(&full)));
    let summary = w.finish().unwrap();
    assert!(summary.blocks > 20, "{summary:?}");

    let Some(stdout) = run_tf_python(TF_READ, &[prefix.as_os_str()]) else {
        return;
    };
    let got: BTreeMap<String, (String, Vec<u64>, String)> =
        serde_json::from_slice(&stdout).unwrap();
    assert_eq!(got.len(), expect.len());
    assert_eq!(got, expect);
}

const TF_WRITE: &str = r#"
import random, sys
import numpy as np
import tensorflow as tf
prefix, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
items = []
for i in range(n):
    name = f"model/layer_{i // 8:05d}/sub_{i % 8}/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    items.append((name, "", tf.constant(rng.standard_normal(3).astype(np.float32))))
items.append(("vocab", "", tf.constant([b"a", b"", b"\xff" * 200])))
items.append(("part", "4 3 0,1:-", tf.constant(np.arange(3, dtype=np.int64).reshape(1, 3))))
items.append(("part", "4 3 1,3:-", tf.constant(np.arange(3, 12, dtype=np.int64).reshape(3, 3))))
# A key longer than 2 * block_size: TensorFlow starts a new index block for it.
items.append(("h" * 600000, "", tf.constant(1.5)))
random.Random(3).shuffle(items)
tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[i[0] for i in items],
                  shape_and_slices=[i[1] for i in items], tensors=[i[2] for i in items])
"#;

/// A multi-block checkpoint written by TensorFlow here and now (with a key over 2 * block_size
/// and a partitioned tensor), rewritten by us: the files must be byte-identical.
#[test]
fn byte_identical_to_a_large_tensorflow_checkpoint() {
    let dir = tempdir();
    let prefix = dir.path().join("tf/ckpt");
    if run_tf_python(TF_WRITE, &[prefix.as_os_str(), "30000".as_ref()]).is_none() {
        return;
    }
    let t = open_table(&index_path(&prefix));
    assert!(t.num_blocks() > 4, "only {} blocks", t.num_blocks());
    drop(t);
    let ours = dir.path().join("ours/ckpt");
    rewrite(&prefix, &ours);
    let mut failures = Vec::new();
    for (a, b) in [
        (index_path(&prefix), index_path(&ours)),
        (data_path(&prefix, 0, 1), data_path(&ours, 0, 1)),
    ] {
        if let Err(e) = compare_files(&a, &b) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The raw pieces (crafted and hostile tables)
// ---------------------------------------------------------------------------------------------

/// The raw table API builds what the reader reads, and breaks what the tests mean to break:
/// blocks exactly as given (restart points where asked, unsorted keys refused by the reader),
/// trailers as given (a bad checksum refused, then repaired by `fix_block_crc`), the footer and
/// entries `TableBuilder` and `CheckpointWriter` write.
#[test]
fn raw_pieces_build_what_the_reader_reads() {
    use super::{
        append_block, append_block_with_trailer, block_handles, block_trailer, encode_block,
        encode_footer, finish_table, fix_block_crc, fix_table_crcs, raw_entry, table_entries,
        table_of_blocks, tensor_entry, TableBuilder,
    };
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..10u8)
        .map(|i| (vec![b'k', b'0' + i], vec![i; i as usize]))
        .collect();
    // Restart points: one per `interval` entries (0: only the first), each entry whole.
    for (interval, restarts) in [(0usize, 1u32), (1, 10), (3, 4), (16, 1)] {
        let b = encode_block(&entries, interval);
        let n = b.len();
        assert_eq!(
            u32::from_le_bytes(b[n - 4..].try_into().unwrap()),
            restarts,
            "interval {interval}"
        );
        let blk = Block::parse(b).expect("parse");
        let got: Vec<_> = (0..blk.len())
            .map(|i| (blk.key(i).to_vec(), blk.value(i).to_vec()))
            .collect();
        assert_eq!(got, entries);
    }
    let empty: &[(&[u8], &[u8])] = &[];
    assert_eq!(encode_block(empty, 1), [0, 0, 0, 0, 1, 0, 0, 0]);
    // Entries as given: a block with keys out of order is written, and the reader refuses it.
    let mut swapped = entries.clone();
    swapped.swap(2, 3);
    assert!(Block::parse(encode_block(&swapped, 1)).is_err());

    // A table of blocks reads back entry by entry through `Table`, and through the writer's own
    // `table_entries`; `block_handles` names the metaindex, the index and each data block.
    let chunks: Vec<&[(Vec<u8>, Vec<u8>)]> = entries.chunks(4).collect();
    let file = table_of_blocks(&chunks);
    let handles = block_handles(&file).expect("handles");
    assert_eq!(handles.len(), 2 + 3);
    let t = Table::open(Arc::new(file.clone()), Caches::new(1 << 20)).expect("open");
    assert_eq!(t.num_blocks(), 3);
    let mut walked = Vec::new();
    let mut p = t.seek(b"").unwrap();
    while let Some(pos) = p {
        let (blk, i) = t.entry(pos).unwrap();
        walked.push((blk.key(i).to_vec(), blk.value(i).to_vec()));
        p = t.next(pos).unwrap();
    }
    assert_eq!(walked, entries);
    assert_eq!(table_entries(&file).expect("entries"), entries);

    // Trailers as given: a wrong checksum is refused until recomputed.
    let contents = encode_block(&entries[..2], 1);
    let mut bad = block_trailer(&contents, 0);
    bad[1] ^= 1;
    let mut f = Vec::new();
    let h = append_block_with_trailer(&mut f, &contents, bad);
    assert!(read_block(&f, h).is_err());
    assert!(fix_block_crc(&mut f, h));
    assert_eq!(read_block(&f, h).expect("repaired"), contents);
    assert!(!fix_block_crc(
        &mut f,
        BlockHandle {
            offset: 1,
            size: 1 << 40
        }
    ));
    // A Snappy block stored as given.
    let packed = snap::raw::Encoder::new().compress_vec(&contents).unwrap();
    let h = append_block(&mut f, &packed, 1);
    assert_eq!(read_block(&f, h).expect("snappy"), contents);
    // fix_table_crcs repairs every block of a damaged table: the index block's first.
    let mut damaged = file.clone();
    for h in &handles {
        damaged[h.offset as usize] ^= 0x40;
    }
    for h in &handles {
        assert!(read_block(&damaged, *h).is_err());
    }
    // Undo the damage to the contents but not to the trailers' view of them: flip back, then
    // break only the checksums, which fix_table_crcs must restore.
    for h in &handles {
        damaged[h.offset as usize] ^= 0x40;
        let at = (h.offset + h.size + 1) as usize;
        damaged[at] ^= 0xff;
    }
    fix_table_crcs(&mut damaged);
    assert_eq!(damaged, file);

    // finish_table with handles pointing anywhere; the footer is TableBuilder's.
    let mut f = Vec::new();
    let good = append_block(&mut f, &encode_block(&entries, 16), 0);
    let far = BlockHandle {
        offset: 1 << 40,
        size: 7,
    };
    let file = finish_table(f, &[(b"k9".to_vec(), good), (b"z".to_vec(), far)]);
    let footer = parse_footer(&file).expect("footer");
    assert_eq!(
        file[file.len() - 48..],
        encode_footer(footer.metaindex, footer.index)[..]
    );
    assert_eq!(block_handles(&file).expect("handles")[3], far);
    let mut tb = TableBuilder::new(Vec::new());
    for (k, v) in &entries {
        tb.add(k, v).unwrap();
    }
    let (built, _) = tb.finish().unwrap();
    let footer = parse_footer(&built).expect("footer");
    assert_eq!(
        built[built.len() - 48..],
        encode_footer(footer.metaindex, footer.index)[..]
    );

    // tensor_entry is the entry CheckpointWriter writes; raw_entry writes fields as given.
    let dir = tempdir();
    let prefix = dir.path().join("e");
    let mut w = CheckpointWriter::new(&prefix, 2).unwrap();
    w.add_raw_data(1, &[9; 5]).unwrap();
    let bytes = f32_bytes(&[1.0, 2.0, 3.0]);
    w.add(b"t", DType(1), &[3], &bytes, 1).unwrap();
    w.finish().unwrap();
    let rb = ReadBack::open(&prefix);
    let stored = &rb.entries[rb.by_key[&b"t".to_vec()]].2;
    assert_eq!(
        stored,
        &prost::Message::encode_to_vec(&tensor_entry(DType(1), &[3], 1, 5, &bytes))
    );
    let e = raw_entry(1, &[-3, i64::MAX], -1, 12, 7);
    let shape = e.shape.as_ref().expect("shape");
    assert_eq!(
        shape.dim.iter().map(|d| d.size).collect::<Vec<_>>(),
        [-3, i64::MAX]
    );
    assert_eq!((e.offset, e.size, e.crc32c, e.shard_id), (-1, 12, 7, 0));
}
