//! Hostile inputs the other suites do not cover (see README "Reliability" for the whole table),
//! each run with its thread capped at 64 MiB for any single allocation: a parser that sizes a
//! buffer by what the input claims makes the test binary abort, naming the size.
//!
//! Snappy bombs, huge varints, deeply nested protobuf, duplicate and unsorted keys, block handles
//! outside the file, an absurd shard count, FIFOs in place of files, truncated, bit-flipped,
//! nested and oversized `checkpoint` state files, and a bit-flip sweep of a Snappy-compressed,
//! many-block index (TensorFlow's own files, which the core suite sweeps, are uncompressed).

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::common::tracking_alloc;
use common::{lookup_path, mkfifo, open_fs, read_all, Mount};
use prost::Message;
use tfmount::error::FsError;
use tfmount::formats::v2::strings::StringLayout;
use tfmount::fs::{Fs, Kind, ROOT};
use tfmount::parse::bundle::{parse_entry, parse_header, MAX_SHARDS};
use tfmount::parse::dtype::{DType, DT_STRING};
use tfmount::parse::table::{parse_footer, read_block, Block, BlockHandle, MAGIC};
use tfmount::parse::varint::{decode_u64, encode_u64};
use tfmount::probe::{probe, Probed};
use tfmount::proto::BundleEntryProto;
use tfmount::testkit::writer::{
    append_block, block_handles, data_path, encode_block, encode_footer, finish_table,
    fix_block_crc, index_path, tensor_entry, CheckpointWriter, TableBuilder,
};

// ---------------------------------------------------------------------------------------------
// Allocations sized by what an input claims are refused
// ---------------------------------------------------------------------------------------------

/// The largest single allocation a test of this file may make: each caps its own thread with
/// [`tracking_alloc::cap`] (the suite's allocator, `tests/formats/main.rs`), so that a parser
/// sizing a buffer by what the input claims aborts the test binary, naming the size.
const CAP: usize = 64 << 20;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const F32: DType = DType(1);

/// The bundle header TensorFlow writes for `num_shards` shards.
fn header(num_shards: u32) -> Vec<u8> {
    CheckpointWriter::header_bytes(num_shards)
}

/// The entry of a float32 vector stored as `data` at `offset` of shard 0.
fn f32_entry(offset: u64, data: &[u8]) -> Vec<u8> {
    tensor_entry(F32, &[data.len() as u64 / 4], 0, offset, data).encode_to_vec()
}

/// Every node reachable from ROOT: listed, looked up, read; returns the bytes of each `.bin`
/// that read. Never asserts structure: a damaged checkpoint may show anything but wrong bytes.
fn exercise(fs: &Fs) -> Vec<Vec<u8>> {
    let mut bins = Vec::new();
    let mut stack = vec![(ROOT, 0)];
    let mut seen = HashSet::new();
    while let Some((ino, depth)) = stack.pop() {
        if depth > 40 || !seen.insert(ino) {
            continue;
        }
        let mut entries = Vec::new();
        let _ = fs.readdir(ino, 0, |e| {
            entries.push(e);
            entries.len() > 10_000
        });
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let Ok(a) = fs.lookup(ino, &e.name) else {
                continue;
            };
            match a.kind {
                Kind::Dir => stack.push((a.ino, depth + 1)),
                Kind::File => {
                    let _ = fs.getxattr(a.ino, b"user.tfmount.key");
                    if let Ok(b) = read_all(fs, a.ino, 4096, (1 << 20) + 1) {
                        if e.name.ends_with(b".bin") {
                            bins.push(b);
                        }
                    }
                }
                Kind::Symlink => {
                    let _ = fs.readlink(a.ino);
                }
            }
        }
    }
    bins
}

fn eio(r: Result<impl std::fmt::Debug, FsError>) {
    match r {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(v) => panic!("expected EIO, got {v:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Decompression bombs
// ---------------------------------------------------------------------------------------------

/// A Snappy block whose header claims far more than its few bytes can expand to: refused before
/// anything is allocated for the claim (the cap above would abort otherwise). A real block at
/// Snappy's densest still decompresses.
#[test]
fn snappy_bombs_are_refused_before_allocating() {
    let _cap = tracking_alloc::cap(CAP);
    for claimed in [
        200u64 << 20,
        (256 << 20) - 1,
        256 << 20,
        u32::MAX as u64,
        1 << 40,
    ] {
        let mut contents = Vec::new();
        encode_u64(claimed, &mut contents);
        contents.extend_from_slice(&[0x00, b'x', 0xfe, 0x01, 0x00]); // a literal, a copy
        let mut file = Vec::new();
        let h = append_block(&mut file, &contents, 1);
        let e = read_block(&file, h).expect_err("bomb accepted");
        assert!(e.to_string().contains("snappy"), "{claimed}: {e}");
    }
    // 4 MiB of zeros at Snappy's densest (64 bytes from a 3-byte copy) reads back.
    let zeros = vec![0u8; 4 << 20];
    let packed = snap::raw::Encoder::new()
        .compress_vec(&zeros)
        .expect("compress");
    assert!(
        packed.len() * 20 < zeros.len(),
        "ratio {}",
        zeros.len() / packed.len()
    );
    let mut file = Vec::new();
    let h = append_block(&mut file, &packed, 1);
    assert_eq!(read_block(&file, h).expect("dense block"), zeros);

    // Through the whole filesystem: the bomb as the header's block fails the mount cleanly; as a
    // later block, lookups needing it fail with EIO.
    let tmp = tempfile::tempdir().expect("tmp");
    let data = [7u8; 16];
    let mut bomb = Vec::new();
    encode_u64(250 << 20, &mut bomb);
    bomb.extend_from_slice(&[0x00, b'x']);
    for bomb_first in [true, false] {
        let prefix = tmp.path().join(format!("bomb{bomb_first}"));
        std::fs::write(data_path(&prefix, 0, 1), data).expect("data");
        let mut file = Vec::new();
        let good = encode_block(
            &[
                (Vec::new(), header(1)),
                (b"a".to_vec(), f32_entry(0, &data)),
            ],
            0,
        );
        let mut index = Vec::new();
        if bomb_first {
            index.push((b"a".to_vec(), append_block(&mut file, &bomb, 1)));
        } else {
            index.push((b"a".to_vec(), append_block(&mut file, &good, 0)));
            index.push((b"z".to_vec(), append_block(&mut file, &bomb, 1)));
        }
        std::fs::write(index_path(&prefix), finish_table(file, &index)).expect("index");
        match open_fs(&prefix) {
            Err(e) => {
                assert!(bomb_first, "{e}");
                assert!(
                    e.contains("snappy") && e.contains(&*prefix.to_string_lossy()),
                    "{e}"
                );
            }
            Ok(fs) => {
                assert!(!bomb_first);
                let a = lookup_path(&fs, b"variables/a.bin").expect("a");
                assert_eq!(
                    read_all(&fs, a.ino, 4096, (1 << 20) + 1).expect("read a"),
                    data
                );
                eio(lookup_path(&fs, b"variables/b.bin"));
                eio(
                    fs.readdir(fs.lookup(ROOT, b"variables").expect("vars").ino, 0, |_| {
                        false
                    }),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Huge varints, deep nesting
// ---------------------------------------------------------------------------------------------

#[test]
fn huge_varints_are_refused() {
    let _cap = tracking_alloc::cap(CAP);
    // Eleven bytes, or a tenth byte that overflows 64 bits.
    let eleven = [0xffu8; 11];
    let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    assert_eq!(decode_u64(&eleven), None);
    assert_eq!(decode_u64(&overflow), None);
    assert!(BlockHandle::decode(&eleven).is_err());
    let mut h = vec![0x05];
    h.extend_from_slice(&overflow);
    assert!(BlockHandle::decode(&h).is_err());
    // A footer whose handles overflow.
    let mut footer = overflow.to_vec();
    footer.extend_from_slice(&overflow);
    footer.resize(40, 0);
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    assert!(parse_footer(&footer).is_err());
    // Block entries whose shared / non-shared / value lengths are huge (u32::MAX, and past it).
    for (shared, non_shared, value) in [
        (0u64, u32::MAX as u64, 1u64),
        (0, 1, u32::MAX as u64),
        (u32::MAX as u64, 0, 0),
        (0, 1 << 33, 1),
        (0, 1, 1 << 40),
    ] {
        let mut b = Vec::new();
        encode_u64(shared, &mut b);
        encode_u64(non_shared, &mut b);
        encode_u64(value, &mut b);
        b.extend_from_slice(b"kv");
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        assert!(Block::parse(b).is_err(), "{shared} {non_shared} {value}");
    }
    // A protobuf field whose length claims 2^62 bytes; a tag of 2^61.
    let mut shape_field = vec![0x12];
    encode_u64(1 << 62, &mut shape_field);
    shape_field.extend_from_slice(&[0; 8]);
    assert!(parse_entry(&shape_field).is_err());
    let mut tag = Vec::new();
    encode_u64(1 << 61, &mut tag);
    tag.push(0);
    assert!(parse_entry(&tag).is_err());
    // A string tensor whose first length is 2^60, and one of 5 elements of which the lengths
    // are eleven-byte varints.
    let mut s = Vec::new();
    encode_u64(1 << 60, &mut s);
    s.extend_from_slice(&[0; 16]);
    assert!(StringLayout::parse(&s, 1, None).is_err());
    assert!(StringLayout::parse(&[0xff; 60], 5, None).is_err());
    assert!(tracking_alloc::largest() < CAP);
}

/// Unknown fields can nest groups without limit in the wire format; the decoder gives up at a
/// fixed depth instead of recursing until the stack overflows (which would abort).
#[test]
fn deeply_nested_protobuf_is_refused() {
    let _cap = tracking_alloc::cap(CAP);
    let depth = 200_000;
    // Field 15 as a group: start tag (15 << 3 | 3), end tag (15 << 3 | 4).
    let mut groups = vec![0x7b; depth];
    groups.extend(std::iter::repeat_n(0x7c, depth));
    assert!(parse_entry(&groups).is_err());
    assert!(parse_header(&groups).is_err());
    // The same inside the shape message (field 2), and inside a dimension (field 2 of it).
    let mut shape = vec![0x12];
    encode_u64(groups.len() as u64, &mut shape);
    shape.extend_from_slice(&groups);
    assert!(parse_entry(&shape).is_err());
    let mut dim = vec![0x12];
    encode_u64(groups.len() as u64, &mut dim);
    dim.extend_from_slice(&groups);
    let mut shape2 = vec![0x12];
    encode_u64(dim.len() as u64, &mut shape2);
    shape2.extend_from_slice(&dim);
    assert!(parse_entry(&shape2).is_err());
    // Nested length-delimited unknown fields are skipped whole, whatever they hold.
    let mut nested = Vec::new();
    for _ in 0..1000 {
        let mut outer = vec![0x7a]; // field 15, length-delimited
        encode_u64(nested.len() as u64, &mut outer);
        outer.extend_from_slice(&nested);
        nested = outer;
    }
    let mut ok = f32_entry(0, &[0u8; 8]);
    ok.extend_from_slice(&nested);
    assert!(parse_entry(&ok).is_ok(), "unknown fields are allowed");

    // Through the whole filesystem: such an entry lists, and reading it fails with EIO.
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("nested");
    std::fs::write(data_path(&prefix, 0, 1), [0u8; 8]).expect("data");
    let mut file = Vec::new();
    let blk = encode_block(
        &[
            (Vec::new(), header(1)),
            (b"deep".to_vec(), groups.clone()),
            (b"fine".to_vec(), f32_entry(0, &[0u8; 8])),
        ],
        0,
    );
    let h = append_block(&mut file, &blk, 0);
    std::fs::write(
        index_path(&prefix),
        finish_table(file, &[(b"g".to_vec(), h)]),
    )
    .expect("index");
    let fs = open_fs(&prefix).expect("mount");
    let a = lookup_path(&fs, b"variables/deep.bin").expect("listed");
    eio(fs.read(a.ino, 0, 4096).map(|b| b.to_vec()));
    let a = lookup_path(&fs, b"variables/fine.bin").expect("fine");
    assert_eq!(
        read_all(&fs, a.ino, 4096, (1 << 20) + 1).expect("read"),
        [0u8; 8]
    );
    // The header itself nested: a clean mount-time error.
    let mut file = Vec::new();
    let blk = encode_block(&[(Vec::new(), groups)], 0);
    let h = append_block(&mut file, &blk, 0);
    std::fs::write(
        index_path(&prefix),
        finish_table(file, &[(b"g".to_vec(), h)]),
    )
    .expect("index");
    let e = open_fs(&prefix).err().expect("nested header accepted");
    assert!(e.contains(&*prefix.to_string_lossy()), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Keys out of order, handles outside the file, absurd shard counts, FIFOs
// ---------------------------------------------------------------------------------------------

/// A checkpoint of `n` float32 [2] tensors `t000`.. in one shard, written with `TableBuilder`
/// from `keys` (any order, repeats allowed) and `block_size`; tensor `i` holds `[i, i]`.
fn table_checkpoint(prefix: &Path, keys: &[&[u8]], block_size: usize) -> Vec<u8> {
    let mut data = Vec::new();
    let mut tb = TableBuilder::new(Vec::new()).block_size(block_size);
    tb.add(b"", &header(1)).expect("header");
    for (i, k) in keys.iter().enumerate() {
        let bytes: Vec<u8> = [i as f32, i as f32]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let off = data.len() as u64;
        data.extend_from_slice(&bytes);
        tb.add(k, &f32_entry(off, &bytes)).expect("add");
    }
    let (index, _) = tb.finish().expect("finish");
    std::fs::write(index_path(prefix), &index).expect("index");
    std::fs::write(data_path(prefix, 0, 1), &data).expect("data");
    data
}

fn value_of(i: usize) -> Vec<u8> {
    [i as f32, i as f32]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect()
}

/// Duplicate keys, keys out of order within a block and across blocks: whatever is shown reads
/// as the tensor its name says; the blocks that are out of order fail with EIO.
#[test]
fn duplicate_and_unsorted_keys() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let names: Vec<Vec<u8>> = (0..60).map(|i| format!("t{i:03}").into_bytes()).collect();
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("duplicate in one block", {
            let mut v = names.clone();
            v.insert(30, names[29].clone());
            v
        }),
        ("swapped in one block", {
            let mut v = names.clone();
            v.swap(10, 11);
            v
        }),
        ("blocks out of order", {
            let mut v = names[30..].to_vec();
            v.extend_from_slice(&names[..30]);
            v
        }),
        ("duplicate across blocks", {
            let mut v = names.clone();
            v.push(names[0].clone());
            v
        }),
        ("reversed", names.iter().rev().cloned().collect()),
    ];
    for (what, keys) in cases {
        for block_size in [64usize, 1 << 20] {
            let prefix = tmp.path().join("keys");
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            table_checkpoint(&prefix, &refs, block_size);
            let fs = match open_fs(&prefix) {
                Ok(fs) => fs,
                Err(e) => {
                    assert!(e.contains("index"), "{what}: {e}");
                    continue;
                }
            };
            // Every .bin that reads holds the value written under that very key.
            let mut reads = 0;
            for (i, k) in keys.iter().enumerate() {
                let mut p = b"variables/".to_vec();
                p.extend_from_slice(k);
                p.extend_from_slice(b".bin");
                match lookup_path(&fs, &p).and_then(|a| read_all(&fs, a.ino, 4096, (1 << 20) + 1)) {
                    Ok(b) => {
                        let ok = keys
                            .iter()
                            .enumerate()
                            .any(|(j, kj)| kj == k && b == value_of(j));
                        assert!(
                            ok,
                            "{what} (blocks of {block_size}): {k:?} read {b:?}, written at {i}"
                        );
                        reads += 1;
                    }
                    Err(e) => assert!(
                        matches!(e.errno(), libc::EIO | libc::ENOENT),
                        "{what}: {k:?}: {e}"
                    ),
                }
            }
            let _ = exercise(&fs);
            eprintln!(
                "{what}, blocks of {block_size} bytes: {reads} of {} keys read",
                keys.len()
            );
        }
    }
}

/// Index block handles outside the file, with sizes up to 2^63: errors, nothing allocated for
/// them; the header's block is intact so the mount opens and the rest reads.
#[test]
fn block_handles_outside_the_file() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("handles");
    let data = [1u8; 8];
    std::fs::write(data_path(&prefix, 0, 1), data).expect("data");
    let mut file = Vec::new();
    let good = append_block(
        &mut file,
        &encode_block(
            &[
                (Vec::new(), header(1)),
                (b"a".to_vec(), f32_entry(0, &data)),
            ],
            0,
        ),
        0,
    );
    let len = file.len() as u64;
    let bad = [
        BlockHandle {
            offset: len + 1000,
            size: 10,
        },
        BlockHandle {
            offset: 0,
            size: 1 << 63,
        },
        BlockHandle {
            offset: u64::MAX - 2,
            size: 5,
        },
        BlockHandle {
            offset: 1 << 62,
            size: 1 << 62,
        },
        BlockHandle {
            offset: 3,
            size: len * 4,
        },
    ];
    for h in bad {
        assert!(read_block(&file, h).is_err(), "{h:?}");
    }
    let mut index = vec![(b"a".to_vec(), good)];
    for (i, h) in bad.iter().enumerate() {
        index.push((vec![b'b' + i as u8], *h));
    }
    std::fs::write(index_path(&prefix), finish_table(file, &index)).expect("index");
    let fs = open_fs(&prefix).expect("mount");
    let a = lookup_path(&fs, b"variables/a.bin").expect("a");
    assert_eq!(
        read_all(&fs, a.ino, 4096, (1 << 20) + 1).expect("read"),
        data
    );
    for name in ["b.bin", "c.bin", "d.bin", "e.bin", "f.bin"] {
        eio(lookup_path(&fs, format!("variables/{name}").as_bytes()));
    }
    let _ = exercise(&fs);
    // The footer's own handles outside the file: a mount-time error naming the file.
    let mut bytes = std::fs::read(index_path(&prefix)).expect("read");
    let n = bytes.len();
    bytes[n - 48..].copy_from_slice(&encode_footer(bad[0], bad[1]));
    std::fs::write(index_path(&prefix), &bytes).expect("index");
    let e = open_fs(&prefix).err().expect("bad footer accepted");
    assert!(e.contains("outside the file"), "{e}");
    assert!(tracking_alloc::largest() < CAP);
}

/// A header claiming a million shards (the most accepted) with one present: the mount opens
/// without trying a million files, and tensors in missing shards fail with EIO.
#[test]
fn absurd_shard_count() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("many");
    let n = MAX_SHARDS as u32;
    let data = [2u8; 8];
    std::fs::write(data_path(&prefix, 7, n), data).expect("data");
    // A file named like a shard of another count, and one spelled differently: not shards.
    std::fs::write(data_path(&prefix, 0, 3), data).expect("decoy");
    std::fs::write(format!("{}.data-0-of-{n}", prefix.display()), data).expect("decoy");
    let in_shard = |shard: i32| {
        BundleEntryProto {
            shard_id: shard,
            ..BundleEntryProto::decode(&f32_entry(0, &data)[..]).expect("decode")
        }
        .encode_to_vec()
    };
    let mut file = Vec::new();
    let h = append_block(
        &mut file,
        &encode_block(
            &[
                (Vec::new(), header(MAX_SHARDS as u32)),
                (b"in0".to_vec(), in_shard(0)),
                (b"in7".to_vec(), in_shard(7)),
                (b"last".to_vec(), in_shard(MAX_SHARDS - 1)),
                (b"past".to_vec(), in_shard(MAX_SHARDS)),
            ],
            0,
        ),
        0,
    );
    std::fs::write(
        index_path(&prefix),
        finish_table(file, &[(b"z".to_vec(), h)]),
    )
    .expect("index");
    let fs = open_fs(&prefix).expect("mount");
    let a = lookup_path(&fs, b"variables/in7.bin").expect("in7");
    assert_eq!(
        read_all(&fs, a.ino, 4096, (1 << 20) + 1).expect("read"),
        data
    );
    for k in ["in0", "last", "past"] {
        let a = lookup_path(&fs, format!("variables/{k}.bin").as_bytes()).expect("listed");
        eio(fs.read(a.ino, 0, 64).map(|b| b.to_vec()));
    }
}

/// FIFOs where files belong (nothing ever writes to them): nothing blocks. A data shard that is
/// a FIFO is unavailable (EIO); a state file that is one is ignored; an index that is one is not
/// a checkpoint.
#[test]
fn fifos_in_place_of_files_never_block() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("fifo");
    table_checkpoint(&prefix, &[b"a", b"b"], 1 << 20);
    std::fs::remove_file(data_path(&prefix, 0, 1)).expect("rm");
    mkfifo(&data_path(&prefix, 0, 1));
    let fs = open_fs(&prefix).expect("mount");
    let a = lookup_path(&fs, b"variables/a.bin").expect("a");
    eio(fs.read(a.ino, 0, 64).map(|b| b.to_vec()));
    drop(fs);
    // The state file.
    mkfifo(&tmp.path().join("checkpoint"));
    match probe(tmp.path()).expect("probe") {
        Probed::CheckpointDir { latest, .. } => assert_eq!(latest, None),
        other => panic!("{other:?}"),
    }
    // The index.
    std::fs::remove_file(index_path(&prefix)).expect("rm");
    mkfifo(&index_path(&prefix));
    let e = open_fs(&prefix).err().expect("a FIFO index accepted");
    assert!(e.contains(&*prefix.to_string_lossy()), "{e}");
}

/// Through the kernel: a tensor whose entry does not parse, whose size cannot be known, or whose
/// dtype is unknown, shows size 0 in listings, so the kernel would answer reads with
/// end-of-file; opening it fails with EIO instead (`cat` must fail, not print nothing).
#[test]
fn damaged_entries_fail_to_open_through_the_kernel() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("damaged");
    let data: Vec<u8> = (0..32u8).collect();
    std::fs::write(data_path(&prefix, 0, 1), &data).expect("data");
    let strings = tensor_entry(DT_STRING, &[3], 0, 0, &data).encode_to_vec();
    let mut file = Vec::new();
    let h = append_block(
        &mut file,
        &encode_block(
            &[
                (Vec::new(), header(1)),
                (b"bad_proto".to_vec(), vec![0xff, 0xff, 0xff]),
                (b"bad_strings".to_vec(), strings),
                (b"good".to_vec(), f32_entry(0, &data[..8])),
                (b"unknown_dtype".to_vec(), {
                    let mut e = BundleEntryProto::decode(&f32_entry(0, &data[..8])[..]).expect("e");
                    e.dtype = 99;
                    e.encode_to_vec()
                }),
            ],
            0,
        ),
        0,
    );
    std::fs::write(
        index_path(&prefix),
        finish_table(file, &[(b"z".to_vec(), h)]),
    )
    .expect("index");
    let m = Mount::start(&prefix, &[]);
    let vars = m.path().join("variables");
    for name in [
        "bad_proto.bin",
        "bad_proto.shape",
        "bad_proto.dtype",
        "bad_strings.bin",
        "unknown_dtype.bin",
    ] {
        let e = std::fs::read(vars.join(name)).expect_err(name);
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{name}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(vars.join("bad_strings.shape")).expect("shape"),
        "3\n"
    );
    assert_eq!(
        std::fs::read(vars.join("good.bin")).expect("good"),
        &data[..8]
    );
}

// ---------------------------------------------------------------------------------------------
// The checkpoint state file
// ---------------------------------------------------------------------------------------------

/// Every truncation and two single-bit flips of each byte of a valid state file: `probe` returns
/// a clean error naming the file, or a subset of the real checkpoints (with `latest` among them).
/// Oversized and deeply nested state files are refused cleanly too.
#[test]
fn checkpoint_state_file_truncated_flipped_nested_oversized() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let real: Vec<String> = (1..=3).map(|i| format!("model.ckpt-{i}")).collect();
    for r in &real {
        table_checkpoint(&dir.join(r), &[b"a"], 1 << 20);
    }
    let text = "model_checkpoint_path: \"model.ckpt-3\"\n\
         all_model_checkpoint_paths: \"model.ckpt-1\"\n\
         all_model_checkpoint_paths: \"/elsewhere/model.ckpt-2\"\n\
         all_model_checkpoint_paths: \"model.ckpt-3\"\n\
         all_model_checkpoint_timestamps: 1700000000.5\n\
         last_preserved_timestamp: 1699999999.25\n"
        .as_bytes()
        .to_vec();
    let state = dir.join("checkpoint");
    let state_name = state.display().to_string();
    let check = |bytes: &[u8], what: &str, tally: &mut BTreeMap<&'static str, usize>| {
        std::fs::write(&state, bytes).expect("write");
        match probe(dir) {
            Ok(Probed::CheckpointDir {
                checkpoints,
                latest,
                ..
            }) => {
                for (name, prefix) in &checkpoints {
                    assert!(real.contains(name), "{what}: {name}");
                    assert_eq!(prefix, &dir.join(name), "{what}");
                }
                if let Some(l) = &latest {
                    assert!(
                        checkpoints.iter().any(|(n, _)| n == l),
                        "{what}: latest {l}"
                    );
                }
                *tally.entry("ok").or_default() += 1;
            }
            Ok(other) => panic!("{what}: {other:?}"),
            Err(e) => {
                assert!(e.to_string().contains(&state_name), "{what}: {e}");
                *tally.entry("error").or_default() += 1;
            }
        }
    };
    let mut cuts = BTreeMap::new();
    for len in 0..=text.len() {
        check(&text[..len], &format!("cut at {len}"), &mut cuts);
    }
    let mut flips = BTreeMap::new();
    for pos in 0..text.len() {
        // A rotating bit, and bit 5 (which changes a letter's case, `"` to `\x02`, `:` to `\x1a`).
        for bit in [pos % 8, 5] {
            let mut b = text.clone();
            b[pos] ^= 1 << bit;
            check(&b, &format!("byte {pos} bit {bit}"), &mut flips);
        }
    }
    eprintln!(
        "state file ({} bytes): truncations {cuts:?}, bit flips {flips:?}",
        text.len()
    );
    assert!(cuts.get("ok").is_some_and(|&n| n > 0) && flips.get("error").is_some_and(|&n| n > 0));
    let mut tally = BTreeMap::new();
    for (what, bytes) in [
        ("nested braces", "a {".repeat(100_000).into_bytes()),
        ("open braces", "{".repeat(100_000).into_bytes()),
        (
            "nested lists",
            format!("all_model_checkpoint_paths: {}", "[".repeat(100_000)).into_bytes(),
        ),
        (
            "nested angle",
            "model_checkpoint_path <".repeat(50_000).into_bytes(),
        ),
        ("NUL bytes", vec![0u8; 4096]),
        (
            "a path of 1 MiB",
            format!("model_checkpoint_path: \"{}\"\n", "x".repeat(1 << 20)).into_bytes(),
        ),
    ] {
        check(&bytes, what, &mut tally);
    }
    // Larger than any state file TensorFlow writes: refused, not parsed.
    let mut big = text.clone();
    big.resize(17 << 20, b'\n');
    std::fs::write(&state, &big).expect("write");
    let e = probe(dir).expect_err("a 17 MiB state file accepted");
    assert!(e.to_string().contains("larger than"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// A Snappy-compressed index, damaged
// ---------------------------------------------------------------------------------------------

/// A checkpoint whose index blocks are Snappy-compressed (TensorFlow never writes these; the
/// reader accepts them), with bits flipped across the index and each damaged block's checksum
/// recomputed, so the damage reaches the decompressor and the parsers behind it. Whatever reads
/// must be the bytes of a tensor that was written.
#[test]
fn snappy_index_bit_flips_past_the_block_crc() {
    let _cap = tracking_alloc::cap(CAP);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("snappy");
    let mut w = CheckpointWriter::new(&prefix, 2)
        .expect("writer")
        .snappy(true)
        .block_size(256);
    let mut written = HashSet::new();
    for i in 0..40u32 {
        let v: Vec<u8> = (0..8)
            .flat_map(|j| ((i * 8 + j) as f32).to_le_bytes())
            .collect();
        let key = format!("layer_{:02}/w{}", i / 4, i % 4);
        w.add(key.as_bytes(), F32, &[8], &v, i % 2).expect("add");
        written.insert(v);
    }
    let strings: Vec<&[u8]> = vec![b"alpha", b"", b"gamma"];
    w.add_strings(b"names", &[3], &strings, 0).expect("strings");
    let mut served = Vec::new();
    for s in &strings {
        served.extend_from_slice(&(s.len() as u64).to_le_bytes());
        served.extend_from_slice(s);
    }
    written.insert(served);
    w.finish().expect("finish");
    let orig = std::fs::read(index_path(&prefix)).expect("index");
    let blocks = block_handles(&orig).expect("blocks");
    let compressed = blocks
        .iter()
        .filter(|h| orig[(h.offset + h.size) as usize] == 1)
        .count();
    assert!(compressed > 3, "only {compressed} compressed blocks");
    let fs = open_fs(&prefix).expect("unmodified");
    assert_eq!(exercise(&fs).len(), 41);
    drop(fs);
    let (mut variants, mut opened, mut bins) = (0, 0, 0);
    for h in &blocks {
        let (a, b) = (h.offset as usize, (h.offset + h.size) as usize);
        for pos in (a..b).step_by(3) {
            let mut bytes = orig.clone();
            bytes[pos] ^= 1 << (pos % 8);
            assert!(fix_block_crc(&mut bytes, *h));
            std::fs::write(index_path(&prefix), &bytes).expect("write");
            variants += 1;
            let Ok(fs) = open_fs(&prefix) else { continue };
            opened += 1;
            for got in exercise(&fs) {
                assert!(
                    written.contains(&got),
                    "byte {pos}: wrong bytes served: {got:?}"
                );
                bins += 1;
            }
        }
    }
    eprintln!(
        "snappy index ({} bytes, {} blocks, {compressed} compressed): {variants} damaged variants, \
         {opened} opened, {bins} .bin files read (each the bytes of a written tensor)",
        orig.len(),
        blocks.len()
    );
    assert!(tracking_alloc::largest() < CAP);
    let _: PathBuf = prefix;
}

// ---------------------------------------------------------------------------------------------
// SavedModel assets: trees of symlinks
// ---------------------------------------------------------------------------------------------

/// The content of every file outside the model in the asset sweep.
const OUTSIDE: &[u8] = b"BYTES-OUTSIDE-THE-MODEL";

/// A random symlink target for an asset at `depth` below `assets/`: relative paths of `..`,
/// `.` and names that exist (or not), absolute paths into the model and out of it, `/`.
fn random_target(rng: &mut common::Rng, names: &[String], model: &Path, outside: &Path) -> Vec<u8> {
    let pick = |rng: &mut common::Rng, v: &[String]| v[rng.below(v.len() as u64) as usize].clone();
    let comps = [
        "..",
        ".",
        "assets",
        "model",
        "outside",
        "s.txt",
        "d",
        "variables",
        "",
    ];
    let t = match rng.below(8) {
        0 => "/".to_string(),
        1 => outside.join("s.txt").display().to_string(),
        2 => outside.join("d").display().to_string(),
        3 => format!("{}/assets/{}", model.display(), pick(rng, names)),
        4 => model.display().to_string(),
        _ => {
            let n = 1 + rng.below(5);
            (0..n)
                .map(|_| {
                    if rng.below(2) == 0 {
                        comps[rng.below(comps.len() as u64) as usize].to_string()
                    } else {
                        pick(rng, names)
                    }
                })
                .collect::<Vec<_>>()
                .join("/")
        }
    };
    if t.is_empty() {
        return b"/".to_vec();
    }
    t.into_bytes()
}

/// Random `assets/` trees of directories, files and symlinks (to themselves, their parents, each
/// other, the model, `/`, files and directories outside the model): each mounts at once, a walk of
/// the whole tree ends, and no file of it holds a byte of a file outside the model.
#[test]
fn asset_symlink_trees_never_serve_outside_bytes() {
    let _cap = tracking_alloc::cap(CAP);
    let mut rng = common::Rng::new(0x5eed_a55e_7000_0001);
    let (mut nodes, mut links) = (0usize, 0usize);
    for round in 0..40 {
        let tmp = tempfile::tempdir().expect("tmp");
        let model = tmp.path().join("model");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("d")).expect("mkdir");
        std::fs::write(outside.join("s.txt"), OUTSIDE).expect("write");
        std::fs::write(outside.join("d/s.txt"), OUTSIDE).expect("write");
        let src = common::fixtures().join("demo_savedmodel");
        std::fs::create_dir_all(model.join("assets")).expect("mkdir");
        std::fs::copy(src.join("saved_model.pb"), model.join("saved_model.pb")).expect("pb");
        let mut dirs = vec![model.join("assets")];
        let mut names: Vec<String> = vec!["x".into()];
        for i in 0..(5 + rng.below(40)) {
            let name = format!("n{i}");
            let p = dirs[rng.below(dirs.len() as u64) as usize].join(&name);
            names.push(name);
            match rng.below(3) {
                0 => {
                    std::fs::create_dir(&p).expect("mkdir");
                    dirs.push(p);
                }
                1 => std::fs::write(&p, format!("inside {round} {i}")).expect("write"),
                _ => {
                    let t = random_target(&mut rng, &names, &model, &outside);
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&t), &p)
                        .expect("symlink");
                    links += 1;
                }
            }
        }
        if rng.below(4) == 0 {
            let t = random_target(&mut rng, &names, &model, &outside);
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&t), model.join("assets.extra"))
                .expect("symlink");
        }
        let t0 = std::time::Instant::now();
        let fs = open_fs(&model).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let tree = common::walk::walk(
            &common::walk::Core::strict(&fs),
            &common::walk::Walk {
                read: true,
                max_nodes: 100_000,
                ..Default::default()
            },
        );
        for (p, n) in &tree {
            if let Some(Ok(b)) = &n.data {
                assert!(
                    !b.windows(OUTSIDE.len()).any(|w| w == OUTSIDE),
                    "round {round}: {}: outside bytes served",
                    String::from_utf8_lossy(p)
                );
            }
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "round {round}"
        );
        nodes += tree.len();
    }
    eprintln!(
        "40 random asset trees ({links} symlinks): {nodes} nodes walked, nothing outside served"
    );
}
