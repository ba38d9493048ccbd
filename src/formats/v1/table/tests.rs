//! Tests of the V1 reader on a TensorFlow-written file (`tests/fixtures/v1/dtypes/model.ckpt`)
//! and on tables built here: every truncation, bit flips with the block CRCs recomputed, Snappy
//! re-encoding, a value far over the small-block limit, hostile lengths.

use super::*;
use crate::formats::v1::table::block::tests::{build_block, with_trailer};
use crate::formats::v1::table::block::{Value, RAW, SMALL_BLOCK, SNAPPY};
use crate::formats::v1::table::encoding::Kind;
use crate::formats::v1::table::values::tests::{entry, len_field};
use crate::formats::v1::table::values::{scan, Expect, SliceValues};
use crate::parse::dtype::DType;
use crate::parse::slice_key::{Extent, FULL};
use crate::parse::table::{parse_footer, MAGIC};
use crate::parse::varint::encode_u64;
use crate::parse::{mask_crc, slice_key};

pub(crate) const DTYPES: &[u8] = include_bytes!("../../../../tests/fixtures/v1/dtypes/model.ckpt");
pub(crate) const PARTITIONED: &[u8] =
    include_bytes!("../../../../tests/fixtures/v1/partitioned/model.ckpt");

/// A table as TensorFlow's builder lays it out: data blocks flushed at `block_size`, an empty
/// metaindex block, an index block (restart interval 1) keyed by each block's last key, the
/// footer; an entry of two blocks' size or more gets a block of its own. With `snappy`, every data block is stored Snappy-compressed.
pub(crate) fn build_table(
    entries: &[(Vec<u8>, Vec<u8>)],
    block_size: usize,
    snappy: bool,
) -> Vec<u8> {
    let mut file = Vec::new();
    let mut index: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut pending: Vec<(&[u8], &[u8])> = Vec::new();
    let mut size = 0usize;
    let flush = |pending: &mut Vec<(&[u8], &[u8])>,
                 file: &mut Vec<u8>,
                 index: &mut Vec<(Vec<u8>, Vec<u8>)>| {
        if pending.is_empty() {
            return;
        }
        let block = build_block(pending, 16);
        let (stored, kind) = if snappy {
            (
                snap::raw::Encoder::new().compress_vec(&block).unwrap(),
                SNAPPY,
            )
        } else {
            (block, RAW)
        };
        let mut handle = Vec::new();
        encode_u64(file.len() as u64, &mut handle);
        encode_u64(stored.len() as u64, &mut handle);
        index.push((pending.last().unwrap().0.to_vec(), handle));
        file.extend_from_slice(&with_trailer(&stored, kind));
        pending.clear();
    };
    for (k, v) in entries {
        // TensorFlow's rule: an entry of 2 blocks or more starts a block of its own.
        if k.len() + v.len() >= 2 * block_size {
            flush(&mut pending, &mut file, &mut index);
            size = 0;
        }
        pending.push((k, v));
        size += k.len() + v.len() + 8;
        if size >= block_size {
            flush(&mut pending, &mut file, &mut index);
            size = 0;
        }
    }
    flush(&mut pending, &mut file, &mut index);
    let meta_at = file.len();
    let empty = build_block(&[], 1);
    file.extend_from_slice(&with_trailer(&empty, RAW));
    let index_at = file.len();
    let refs: Vec<(&[u8], &[u8])> = index.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let index_block = build_block(&refs, 1);
    file.extend_from_slice(&with_trailer(&index_block, RAW));
    let mut footer = Vec::new();
    for v in [meta_at, empty.len(), index_at, index_block.len()] {
        encode_u64(v as u64, &mut footer);
    }
    footer.resize(40, 0);
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    file.extend_from_slice(&footer);
    file
}

/// Every entry of a table (blocks read whole; test files are small).
pub(crate) fn entries_of(file: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (index, handles) = read_index(file).unwrap();
    assert_eq!(index.len(), handles.len());
    let mut out = Vec::new();
    for h in handles {
        let b = Block::parse(table::read_block_at(file, h).unwrap()).unwrap();
        for i in 0..b.len() {
            out.push((b.key(i).to_vec(), b.value(i).to_vec()));
        }
    }
    out
}

/// Recomputes the trailer CRC of every block the footer and the index name (best effort).
pub(crate) fn fix_crcs(file: &mut [u8]) {
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
    let Ok(raw) = table::read_block(file, footer.index) else {
        return;
    };
    let Ok(index) = Block::parse(raw) else {
        return;
    };
    for i in 0..index.len() {
        if let Ok((h, _)) = BlockHandle::decode(index.value(i)) {
            fix(file, h);
        }
    }
}

/// Locates and reads every slice of every tensor of a table, as the source does; returns the
/// served bytes of each slice (errors as `None`). Must never panic.
pub(crate) fn read_everything(file: &[u8]) -> Result<Vec<Option<Vec<u8>>>> {
    let t = V1Table::open(file)?;
    let mut out = Vec::new();
    for m in t.tensors() {
        if m.error.is_some() {
            out.push(None);
            continue;
        }
        for s in &m.slices {
            out.push(read_slice(file, &t, m, s).ok());
        }
    }
    Ok(out)
}

fn read_slice(file: &[u8], t: &V1Table, m: &MetaTensor, s: &[Extent]) -> Result<Vec<u8>> {
    let key = slice_key::encode(&m.name, s);
    let (_, value) = t
        .find(file, &key, |_| false)?
        .ok_or_else(|| super::missing_slice("?"))?;
    let want = Expect {
        name: &m.name,
        shape: &m.shape,
        slice: s,
        dtype: m.dtype,
    };
    let read = |src: &[u8], off, len| -> Result<Vec<u8>> {
        let v: SliceValues = scan(src, off, len, want)?;
        let mut out = Vec::new();
        if v.encoding().kind == Kind::Bytes {
            v.read_strings(src, 0, u64::MAX, None, &mut out)?;
        } else {
            v.read_values(src, 0, v.values(), None, &mut out)?;
        }
        Ok(out)
    };
    match value {
        Value::File { offset, len } => read(file, offset, len),
        Value::Memory { block, start, len } => read(&block[..], start, len),
    }
}

fn tensor_bytes(file: &[u8], name: &[u8]) -> Vec<u8> {
    let t = V1Table::open(file).unwrap();
    let m = t.tensors().iter().find(|m| m.name == name).unwrap();
    read_slice(file, &t, m, &m.slices[0]).unwrap()
}

#[test]
fn opens_the_tensorflow_fixture_and_reads_known_values() {
    assert!(probe(DTYPES));
    let t = V1Table::open(DTYPES).unwrap();
    assert_eq!(t.tensors().len(), 26);
    assert!(t.tensors().iter().all(|m| m.error.is_none()));
    let int8 = t.tensors().iter().find(|m| m.name == b"int8").unwrap();
    assert_eq!((int8.dtype, &int8.shape[..]), (DType(6), &[5u64][..]));
    assert_eq!(tensor_bytes(DTYPES, b"int8"), [0x80, 0xff, 0, 1, 0x7f]);
    let u16: Vec<u8> = [0u16, 1, 32767, 32768, 65534, 65535]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(tensor_bytes(DTYPES, b"uint16"), u16);
    assert_eq!(tensor_bytes(DTYPES, b"scalar/bool"), [1]);
    assert_eq!(tensor_bytes(DTYPES, b"empty/int64_3x0"), Vec::<u8>::new());
    let mut s = 8u64.to_le_bytes().to_vec();
    s.extend_from_slice(b"\x00scalar\xff");
    assert_eq!(tensor_bytes(DTYPES, b"scalar/string"), s);
    assert!(read_everything(DTYPES).unwrap().iter().all(|r| r.is_some()));
    // A V2 index is not V1, nor is anything that is not a table.
    let v2 = include_bytes!("../../../../tests/fixtures/all_dtypes/ckpt.index");
    assert!(!probe(&v2[..]));
    assert!(
        matches!(V1Table::open(&v2[..]), Err(FormatError::Format(m)) if m.starts_with("not a V1 checkpoint"))
    );
    assert!(!probe(&b"hello"[..]));
}

#[test]
fn partitioned_slices_are_all_found() {
    let t = V1Table::open(PARTITIONED).unwrap();
    let all = read_everything(PARTITIONED).unwrap();
    assert_eq!(
        all.len(),
        t.tensors().iter().map(|m| m.slices.len()).sum::<usize>()
    );
    assert!(all.iter().all(|r| r.is_some()));
}

#[test]
fn every_truncation_fails_cleanly() {
    for file in [DTYPES, PARTITIONED] {
        for cut in 0..file.len() {
            let f = &file[..cut];
            let _ = probe(f);
            assert!(V1Table::open(f).is_err(), "cut {cut}: the footer is gone");
        }
    }
}

/// Flips bit `i % 8` of byte `i` (every bit with `TFMOUNT_FULL_SWEEP=1`), recomputes the block
/// CRCs so the damage reaches the parsers, opens and reads everything. A slice that reads has
/// exactly the served size its meta implies (strings: at least 8 bytes an element).
#[test]
fn bit_flips_with_crcs_recomputed_never_panic() {
    let full = std::env::var_os("TFMOUNT_FULL_SWEEP").is_some();
    let (mut opened, mut read) = (0, 0);
    for i in 0..DTYPES.len() {
        let bits: Vec<u8> = if full {
            (0..8).collect()
        } else {
            vec![(i % 8) as u8]
        };
        for b in bits {
            let mut f = DTYPES.to_vec();
            f[i] ^= 1 << b;
            fix_crcs(&mut f);
            let Ok(t) = V1Table::open(&f[..]) else {
                continue;
            };
            opened += 1;
            for m in t.tensors().iter().filter(|m| m.error.is_none()) {
                for s in &m.slices {
                    let Ok(bytes) = read_slice(&f, &t, m, s) else {
                        continue;
                    };
                    read += 1;
                    let n = crate::parse::bundle::slice_elements(&m.shape, s);
                    let enc = crate::formats::v1::table::encoding::encoding(m.dtype).unwrap();
                    if enc.kind == Kind::Bytes {
                        assert!(bytes.len() as u64 >= 8 * n);
                    } else {
                        assert_eq!(bytes.len() as u64, n * enc.per_elem * enc.width);
                    }
                }
            }
        }
    }
    assert!(opened > 0 && read > 0);
}

#[test]
fn bit_flips_without_crc_fixes_are_caught_by_the_block_crc() {
    let (index, handles) = read_index(DTYPES).unwrap();
    drop(index);
    let h = handles[0];
    // Every byte of the (only) data block: the CRC check refuses the file.
    for i in (h.offset..h.offset + h.size).step_by(7) {
        let mut f = DTYPES.to_vec();
        f[i as usize] ^= 0x10;
        assert!(matches!(
            V1Table::open(&f[..]),
            Err(FormatError::BlockCrc { .. })
        ));
    }
}

#[test]
fn snappy_compressed_tables_read_the_same() {
    for file in [DTYPES, PARTITIONED] {
        let entries = entries_of(file);
        for block_size in [64, 4096, 1 << 20] {
            let snappy = build_table(&entries, block_size, true);
            let raw = build_table(&entries, block_size, false);
            assert!(probe(&snappy[..]));
            assert_eq!(
                read_everything(&snappy).unwrap(),
                read_everything(file).unwrap()
            );
            assert_eq!(
                read_everything(&raw).unwrap(),
                read_everything(file).unwrap()
            );
        }
    }
    // A Snappy block claiming far more than its bytes can expand to is refused unread.
    let entries = entries_of(DTYPES);
    let mut f = build_table(&entries, 1 << 20, true);
    // The first block starts with Snappy's varint length: make it claim 2^40 bytes.
    let mut claim = Vec::new();
    encode_u64(1 << 40, &mut claim);
    let old = crate::parse::varint::decode_u64(&f).unwrap().1;
    assert!(old <= claim.len());
    f.splice(0..old, claim.iter().copied().take(old));
    fix_crcs(&mut f);
    assert!(V1Table::open(&f[..]).is_err());
}

/// A meta and one tensor `big` of `n` float32 values in one entry, plus a small tensor after it.
fn big_table(n: usize, snappy: bool) -> (Vec<u8>, Vec<u8>) {
    let vals: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let mut tp = Vec::new();
    len_field(5, &vals, &mut tp);
    let big = entry(b"big", &[(0, -1)], &tp);
    let mut tp2 = Vec::new();
    len_field(7, &[5], &mut tp2);
    let small = entry(b"z", &[], &tp2);
    let meta = meta_value(&[(b"big", &[n as i64], 1, 1), (b"z", &[], 3, 0)]);
    let entries = vec![
        (Vec::new(), meta),
        (slice_key::encode(b"big", &[FULL]), big),
        (slice_key::encode(b"z", &[]), small),
    ];
    (build_table(&entries, 256 << 10, snappy), vals)
}

/// A `SavedTensorSlices { meta }` value: (name, dims, dtype, rank of its one full slice).
pub(crate) fn meta_value(tensors: &[(&[u8], &[i64], i32, usize)]) -> Vec<u8> {
    use crate::proto::{TensorShapeProto, TensorSliceProto};
    use prost::Message;
    let mut inner = Vec::new();
    for (name, dims, dtype, rank) in tensors {
        let mut t = Vec::new();
        len_field(1, name, &mut t);
        let shape = TensorShapeProto::of_dims(dims);
        len_field(2, &shape.encode_to_vec(), &mut t);
        t.push(0x18);
        encode_u64(*dtype as u64, &mut t);
        let slice = TensorSliceProto {
            extent: vec![Default::default(); *rank],
        };
        len_field(4, &slice.encode_to_vec(), &mut t);
        len_field(1, &t, &mut inner);
    }
    let mut m = Vec::new();
    len_field(1, &inner, &mut m);
    m
}

#[test]
fn a_value_far_over_the_block_size_is_streamed() {
    let n = (SMALL_BLOCK as usize / 4) * 3;
    let (file, vals) = big_table(n, false);
    let t = V1Table::open(&file[..]).unwrap();
    assert_eq!(t.num_blocks(), 3);
    let key = slice_key::encode(b"big", &[FULL]);
    let (h, value) = t.find(&file[..], &key, |_| false).unwrap().unwrap();
    assert!(h.size > SMALL_BLOCK);
    let Value::File { offset, len } = value else {
        panic!("an uncompressed block's value is read from the file");
    };
    let shape = [n as u64];
    let want = Expect {
        name: b"big",
        shape: &shape,
        slice: &[FULL],
        dtype: DType(1),
    };
    let v = scan(&file[..], offset, len, want).unwrap();
    assert!(v.is_direct());
    let mut out = Vec::new();
    v.read_values(&file[..], 1000, 1010, None, &mut out)
        .unwrap();
    assert_eq!(out, vals[4000..4040]);
    assert_eq!(read_everything(&file).unwrap().len(), 2);
    // A flip deep inside the big block: its CRC check fails (unless the caller vouches for it),
    // while the small tensor after it still reads.
    let mut bad = file.clone();
    bad[(h.offset + h.size / 2) as usize] ^= 1;
    assert!(matches!(
        t.find(&bad[..], &key, |_| false),
        Err(FormatError::BlockCrc { .. })
    ));
    assert!(t.find(&bad[..], &key, |_| true).is_ok());
    let all = read_everything(&bad).unwrap();
    assert_eq!((all[0].is_none(), all[1].is_some()), (true, true));
    // The same as Snappy blocks (decompressed whole, bounded).
    let (file, _) = big_table(n, true);
    assert_eq!(
        read_everything(&file).unwrap()[0].as_deref(),
        Some(&vals[..])
    );
}

#[test]
fn hostile_lengths_are_refused_before_allocating() {
    // A slice entry claiming a value of 2^32-1 bytes; a meta entry whose value length lies.
    let meta = meta_value(&[(b"t", &[2], 1, 1)]);
    let mut entries = vec![(Vec::new(), meta)];
    let key = slice_key::encode(b"t", &[FULL]);
    entries.push((
        key.clone(),
        entry(b"t", &[(0, -1)], &[0x2a, 8, 0, 0, 0, 0, 0, 0, 0, 0]),
    ));
    let file = build_table(&entries, 1 << 20, false);
    assert!(read_everything(&file).unwrap()[0].is_some());
    // Make the slice entry's value_len varint huge (0xffffffff): the block walk refuses it.
    let pos = file.windows(key.len()).position(|w| w == key).unwrap();
    let mut bad = file.clone();
    // The header before the key: shared, non_shared, value_len (value_len is 1 byte here).
    bad[pos - 1] = 0xff;
    fix_crcs(&mut bad);
    let all = read_everything(&bad);
    assert!(all.is_err() || all.unwrap()[0].is_none());
    // A TensorProto claiming 2^62 bytes of floats.
    let mut tp = Vec::new();
    tp.push(0x2a);
    encode_u64(1 << 62, &mut tp);
    let entries = vec![
        (Vec::new(), meta_value(&[(b"t", &[1 << 40], 1, 1)])),
        (key.clone(), entry(b"t", &[(0, -1)], &tp)),
    ];
    let file = build_table(&entries, 1 << 20, false);
    assert_eq!(read_everything(&file).unwrap(), vec![None]);
}
