//! Tests of [`V1Checkpoint`] and [`v1_files`]: shard names, probing by content, a damaged tensor
//! failing alone, bit flips of a sharded TensorFlow checkpoint, the located-state bound.

use std::path::{Path, PathBuf};

use super::*;
use crate::formats::v1::table::tests::{build_table, entries_of, fix_crcs, meta_value};
use crate::formats::v1::table::values::tests::{entry, len_field};
use crate::parse::slice_key::FULL;
use crate::source::local::LocalStore;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[test]
fn a_checkpoint_is_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<V1Checkpoint>();
    let ck = open(&[fixtures().join("v1/large/model.ckpt")]);
    let i = ck.find(b"big/int64").unwrap();
    let whole = ck.read(i, 0, 4 << 20).unwrap();
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let (ck, whole) = (&ck, &whole);
            s.spawn(move || {
                let mut off = k * 4099;
                while off < whole.len() as u64 {
                    let got = ck.read(i, off, 65536).unwrap();
                    assert_eq!(got[..], whole[off as usize..off as usize + got.len()]);
                    off += 65536 * 3 + k;
                }
            });
        }
    });
}

#[test]
fn shard_names_as_tensorflow_spells_them() {
    assert_eq!(
        shard_name(b"model.ckpt-00001-of-00003"),
        Some((&b"model.ckpt"[..], Some(1), 3))
    );
    assert_eq!(
        shard_name(b"m-7-?????-of-00010"),
        Some((&b"m-7"[..], None, 10))
    );
    assert_eq!(
        shard_name(b"x-123456-of-200000"),
        Some((&b"x"[..], Some(123456), 200000))
    );
    for bad in [
        &b"model.ckpt-3-of-3"[..],
        b"model.ckpt-00003-of-00003",
        b"model.ckpt-00001-of-00000",
        b"-00001-of-00003",
        b"model.ckpt-0001a-of-00003",
        b"model.ckpt-00001-of-0003",
        b"model.ckpt-+0001-of-00003",
        b"model.ckpt",
        b"model.ckpt-????-of-00003",
    ] {
        assert_eq!(shard_name(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn files_of_each_source_form() {
    let store = LocalStore;
    let d = fixtures().join("v1");
    let single = d.join("single/model.ckpt-2");
    assert_eq!(v1_files(&store, &single), Some(vec![single.clone()]));
    let shards: Vec<PathBuf> = (0..3)
        .map(|i| d.join(format!("sharded/model.ckpt-{i:05}-of-00003")))
        .collect();
    assert_eq!(
        v1_files(&store, &d.join("sharded/model.ckpt-?????-of-00003")),
        Some(shards.clone())
    );
    assert_eq!(v1_files(&store, &shards[2]), Some(shards.clone()));
    // Not V1 by content: a graph, a V2 index, a state file, a directory, nothing.
    for p in [
        d.join("single/model.ckpt-2.meta"),
        d.join("single/checkpoint"),
        fixtures().join("all_dtypes/ckpt.index"),
        d.join("single"),
        d.join("single/model.ckpt-3"),
        d.join("sharded/model.ckpt-?????-of-00004"),
    ] {
        assert_eq!(v1_files(&store, &p), None, "{}", p.display());
    }
    // A V2 data shard named like a V1 shard is not V1 either.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("all_dtypes/ckpt.index"),
        tmp.path().join("x-00000-of-00001"),
    )
    .unwrap();
    assert_eq!(v1_files(&store, &tmp.path().join("x-?????-of-00001")), None);
}

fn open(files: &[PathBuf]) -> V1Checkpoint {
    V1Checkpoint::open(&LocalStore, files).unwrap()
}

#[test]
fn sharded_partitioned_tensor_is_merged_across_files() {
    let store = LocalStore;
    let files = v1_files(
        &store,
        &fixtures().join("v1/sharded/model.ckpt-?????-of-00003"),
    )
    .unwrap();
    let ck = open(&files);
    let names: Vec<&[u8]> = ck.tensors().iter().map(|t| &t.name[..]).collect();
    assert_eq!(
        names,
        [
            &b"counter"[..],
            b"emb",
            b"layer0/b",
            b"layer0/w",
            b"layer1/b",
            b"layer1/w",
            b"layer2/b",
            b"layer2/w"
        ]
    );
    let emb = &ck.tensors()[1];
    let mut files_of: Vec<usize> = emb.slices.iter().map(|s| s.file).collect();
    files_of.sort();
    assert_eq!(files_of, [0, 1, 2]);
    assert_eq!(ck.served_size(1).unwrap(), 9 * 2 * 4);
    assert_eq!(ck.read(1, 0, 1 << 20).unwrap().len(), 72);
    assert_eq!(ck.find(b"layer1/w"), Some(5));
    assert_eq!(ck.find(b"nope"), None);
    assert_eq!(
        ck.source_bytes(),
        files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum::<u64>()
    );
}

/// Writes a V1 file with tensors `ok` (float32 [3]), `short` (float32 [3] holding 2 values),
/// `gone` (in the meta, no entry) and `words` (string [2]).
fn damaged_file(dir: &Path) -> PathBuf {
    let meta = meta_value(&[
        (b"gone", &[1], 1, 1),
        (b"ok", &[3], 1, 1),
        (b"short", &[3], 1, 1),
        (b"words", &[2], 7, 1),
    ]);
    let floats = |n: usize| {
        let v: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let mut tp = Vec::new();
        len_field(5, &v, &mut tp);
        tp
    };
    let mut words = Vec::new();
    len_field(8, b"ab", &mut words);
    len_field(8, b"\x00", &mut words);
    let entries = vec![
        (Vec::new(), meta),
        (
            slice_key::encode(b"ok", &[FULL]),
            entry(b"ok", &[(0, -1)], &floats(3)),
        ),
        (
            slice_key::encode(b"short", &[FULL]),
            entry(b"short", &[(0, -1)], &floats(2)),
        ),
        (
            slice_key::encode(b"words", &[FULL]),
            entry(b"words", &[(0, -1)], &words),
        ),
    ];
    let p = dir.join("model.ckpt");
    std::fs::write(&p, build_table(&entries, 1 << 20, false)).unwrap();
    p
}

#[test]
fn a_damaged_tensor_fails_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let p = damaged_file(tmp.path());
    assert_eq!(v1_files(&LocalStore, &p), Some(vec![p.clone()]));
    let ck = open(&[p]);
    let i = |n: &[u8]| ck.find(n).unwrap();
    assert_eq!(
        ck.read(i(b"ok"), 4, 100).unwrap(),
        [1f32.to_le_bytes(), 2f32.to_le_bytes()].concat()
    );
    for _ in 0..2 {
        assert!(matches!(
            ck.read(i(b"short"), 0, 4),
            Err(e) if e == crate::formats::v1::table::value_count(3, 2)
        ));
        assert!(matches!(
            ck.read(i(b"gone"), 0, 4),
            Err(FormatError::Format(m)) if m.starts_with("the entry of saved slice")
        ));
    }
    assert_eq!(ck.served_size(i(b"words")).unwrap(), 8 + 2 + 8 + 1);
    assert_eq!(ck.read(i(b"words"), 7, 5).unwrap(), [0, b'a', b'b', 1, 0]);
    assert!(ck.read(i(b"ok"), 12, 10).unwrap().is_empty());
}

#[test]
fn an_empty_tensor_read_checks_its_entry() {
    // `gone` is empty and has no entry; `none` is empty with its entry.
    let meta = meta_value(&[(b"gone", &[0, 2], 1, 2), (b"none", &[2, 0], 1, 2)]);
    let entries = vec![
        (Vec::new(), meta),
        (
            slice_key::encode(b"none", &[FULL, FULL]),
            entry(b"none", &[(0, -1), (0, -1)], &[]),
        ),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("model.ckpt");
    std::fs::write(&p, build_table(&entries, 1 << 20, false)).unwrap();
    let ck = open(&[p]);
    let i = |n: &[u8]| ck.find(n).unwrap();
    assert_eq!(ck.served_size(i(b"gone")).unwrap(), 0);
    assert!(ck.read(i(b"gone"), 0, 0).unwrap().is_empty());
    assert!(matches!(
        ck.read(i(b"gone"), 0, 1),
        Err(FormatError::Format(m)) if m.starts_with("the entry of saved slice")
    ));
    assert!(ck.read(i(b"none"), 0, 1).unwrap().is_empty());
    // TensorFlow's empty tensors read back empty.
    let ck = open(&[fixtures().join("v1/dtypes/model.ckpt")]);
    let empties = ck
        .tensors()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.num_elements() == 0)
        .map(|(j, _)| ck.read(j, 0, 1).map(|b| b.len()))
        .collect::<Result<Vec<_>>>()
        .unwrap();
    assert_eq!(empties, [0, 0, 0, 0]);
}

#[test]
fn bit_flips_of_a_sharded_checkpoint_fail_per_tensor() {
    let src = fixtures().join("v1/sharded");
    let tmp = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..3)
        .map(|i| format!("model.ckpt-{i:05}-of-00003"))
        .collect();
    let clean: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(src.join(n)).unwrap())
        .collect();
    let files: Vec<PathBuf> = names.iter().map(|n| tmp.path().join(n)).collect();
    let reference = open(&names.iter().map(|n| src.join(n)).collect::<Vec<_>>());
    let want: Vec<Vec<u8>> = (0..reference.tensors().len())
        .map(|i| reference.read(i, 0, 1 << 20).unwrap())
        .collect();
    let mut damaged_reads = 0;
    for i in 0..clean[1].len() {
        for (k, f) in files.iter().enumerate() {
            let mut b = clean[k].clone();
            if k == 1 {
                b[i] ^= 1 << (i % 8);
                fix_crcs(&mut b);
            }
            std::fs::write(f, &b).unwrap();
        }
        let Ok(ck) = V1Checkpoint::open(&LocalStore, &files) else {
            continue;
        };
        for (j, t) in ck.tensors().iter().enumerate() {
            let Ok(size) = ck.served_size(j) else {
                continue;
            };
            match ck.read(j, 0, 1 << 20) {
                Ok(bytes) => {
                    assert_eq!(
                        bytes.len() as u64,
                        size,
                        "{}",
                        String::from_utf8_lossy(&t.name)
                    );
                    // Tensors held only by the intact shards read exactly as before.
                    if t.slices.iter().all(|s| s.file != 1) {
                        let r = reference.find(&t.name).unwrap();
                        assert_eq!(bytes, want[r]);
                    }
                }
                Err(_) => damaged_reads += 1,
            }
        }
    }
    assert!(damaged_reads > 0);
}

#[test]
fn snappy_tables_read_like_raw_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = fixtures().join("v1/partitioned/model.ckpt");
    let entries = entries_of(&std::fs::read(&raw).unwrap());
    let p = tmp.path().join("snappy.ckpt");
    std::fs::write(&p, build_table(&entries, 512, true)).unwrap();
    let (a, b) = (open(&[raw]), open(&[p]));
    assert_eq!(a.tensors(), b.tensors());
    for i in 0..a.tensors().len() {
        let size = a.served_size(i).unwrap();
        assert_eq!(b.served_size(i).unwrap(), size);
        for (off, len) in [
            (0, 1 << 20),
            (3, 5),
            (size / 2, 7),
            (size.saturating_sub(1), 9),
        ] {
            assert_eq!(a.read(i, off, len).unwrap(), b.read(i, off, len).unwrap());
        }
    }
}

#[test]
fn located_state_stays_within_its_budget() {
    let files = vec![fixtures().join("v1/dtypes/model.ckpt")];
    let ck = open(&files);
    for i in 0..ck.tensors().len() {
        let _ = ck.read(i, 0, 64);
    }
    let c = ck.lock_located();
    // Every tensor, the 4 empty ones too (a read of one byte or more checks their entries).
    assert_eq!(c.lru.len(), ck.tensors().len());
    assert!(c.bytes > 0 && c.bytes <= LOCATED_BYTES);
    let sum: usize = c
        .lru
        .iter()
        .map(|(_, r)| r.as_ref().map_or(256, |l| l.bytes))
        .sum();
    assert_eq!(sum, c.bytes);
}

/// Tensors whose values are raw blocks over [`fv1::block::SMALL_BLOCK`] (a float32 run and an
/// int64 varint run): their CRC is checked on another thread while the value is scanned. Intact,
/// every byte reads back; with one byte of a block changed, every read of that tensor fails with
/// the block's CRC error, again on the second read (a failed check is never remembered as good),
/// and the other tensor still reads.
#[test]
fn large_blocks_are_checked_while_scanned() {
    use crate::parse::varint::encode_u64;
    let n = 400_000usize;
    let floats: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let ints: Vec<i64> = (0..n as i64)
        .map(|i| (i * 2_654_435_761) % (1 << 40) - (1 << 39))
        .collect();
    let meta = meta_value(&[(b"f", &[n as i64], 1, 1), (b"i", &[n as i64], 9, 1)]);
    let want_f: Vec<u8> = floats.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut fp = Vec::new();
    len_field(5, &want_f, &mut fp);
    let mut varints = Vec::new();
    for v in &ints {
        encode_u64(*v as u64, &mut varints);
    }
    let mut ip = Vec::new();
    len_field(10, &varints, &mut ip);
    let entries = vec![
        (Vec::new(), meta),
        (
            slice_key::encode(b"f", &[FULL]),
            entry(b"f", &[(0, -1)], &fp),
        ),
        (
            slice_key::encode(b"i", &[FULL]),
            entry(b"i", &[(0, -1)], &ip),
        ),
    ];
    let file = build_table(&entries, 256 << 10, false);
    let big: Vec<_> = crate::testkit::writer::block_handles(&file)
        .unwrap()
        .into_iter()
        .filter(|h| h.size > fv1::block::SMALL_BLOCK)
        .collect();
    assert_eq!(
        big.len(),
        2,
        "each value a block of its own over SMALL_BLOCK"
    );
    let want_i: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("model.ckpt");
    std::fs::write(&p, &file).unwrap();
    let ck = open(std::slice::from_ref(&p));
    let (f, i) = (ck.find(b"f").unwrap(), ck.find(b"i").unwrap());
    assert_eq!(ck.read(f, 0, want_f.len()).unwrap(), want_f);
    assert_eq!(ck.read(i, 0, want_i.len()).unwrap(), want_i);
    for (k, h) in big.iter().enumerate() {
        let mut bad = file.clone();
        bad[(h.offset + h.size / 2) as usize] ^= 0x01;
        let p = tmp.path().join(format!("bad{k}.ckpt"));
        std::fs::write(&p, &bad).unwrap();
        let ck = open(std::slice::from_ref(&p));
        let (f, i) = (ck.find(b"f").unwrap(), ck.find(b"i").unwrap());
        let (damaged, other, want_other) = if k == 0 {
            (f, i, &want_i)
        } else {
            (i, f, &want_f)
        };
        for _ in 0..2 {
            assert!(
                matches!(
                    ck.read(damaged, 0, 1 << 20),
                    Err(FormatError::BlockCrc { .. })
                ),
                "block {k}"
            );
        }
        assert_eq!(&ck.read(other, 0, want_other.len()).unwrap(), want_other);
    }
}

/// The scan's reader of the pieces the CRC check reads: every read, in order, spanning pieces,
/// behind the pieces held, skipping ahead, and past the block once the check has sent its last
/// piece, gives the file's bytes; the check's verdict is the block's. With the reader dropped
/// early (pieces still to send) the check still ends.
#[test]
fn the_fed_reader_gives_the_files_bytes() {
    let mut rng = crate::testkit::rng::xorshift(0x5eed_f00d);
    let body: Vec<u8> = (0..(3 << 20) + 12345).map(|_| rng() as u8).collect();
    let mut file = vec![9u8; 1000];
    let h = crate::testkit::writer::append_block(&mut file, &body, fv1::block::RAW);
    file.extend_from_slice(&[7u8; 100]);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("blob");
    std::fs::write(&p, &file).unwrap();
    let src = LocalStore.open(&p).unwrap();
    let reads: &[(u64, usize)] = &[
        (0, 10),                       // before the block: from the file
        (h.offset, 100),               // the first piece
        (h.offset + 200_000, 150_000), // across the first two pieces
        (h.offset + 100, 64),          // behind the pieces held: from the file
        (h.offset + 1_000_000, 131_072),
        (h.offset + 2_700_000, 400_000), // skipping ahead, across pieces
        (h.offset + h.size - 50, 60),    // the end of the block and its trailer
        (h.offset + h.size + 5, 100),    // past the block: from the file
    ];
    std::thread::scope(|sc| {
        let (check, fed) = crate::formats::v1::set::feed::check_and_feed(&*src, h);
        let c = sc.spawn(check);
        for &(at, n) in reads {
            let mut b = vec![0u8; n];
            fed.read_exact_at(&mut b, at).unwrap();
            assert_eq!(b, file[at as usize..at as usize + n], "{at}+{n}");
        }
        drop(fed);
        assert_eq!(c.join().unwrap().unwrap(), fv1::block::RAW);
    });
    // The reader gone after one read: the check goes on alone and ends.
    std::thread::scope(|sc| {
        let (check, fed) = crate::formats::v1::set::feed::check_and_feed(&*src, h);
        let c = sc.spawn(check);
        let mut b = [0u8; 8];
        fed.read_exact_at(&mut b, h.offset).unwrap();
        drop(fed);
        assert_eq!(c.join().unwrap().unwrap(), fv1::block::RAW);
    });
}
