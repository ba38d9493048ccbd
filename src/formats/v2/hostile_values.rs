//! Hostile protobuf values and parser inputs of V2 checkpoints: absurd bundle entries and
//! headers (dimensions that overflow, sizes that disagree, slices that do not tile), then random
//! bytes through the entry and header parsers, the table block parser and the string-tensor
//! layout: errors, never a panic, and what is accepted keeps the promises its users rely on.
//! (Was a test of the `core` suite's `fs_core` module: it reaches the parsers' internals, which
//! the crate keeps to itself.)

use std::panic::catch_unwind;

use prost::Message;

use crate::formats::v2::strings::StringLayout;
use crate::parse::bundle::{
    check_tiling, parse_entry, parse_header, slice_elements, slice_shape, Data,
};
use crate::parse::table::Block;
use crate::proto::{BundleEntryProto, BundleHeaderProto, TensorShapeProto, VersionDef};
use crate::testkit::rng::Rng;
use crate::testkit::writer::{raw_shape_proto, raw_slice_proto};

fn shape(dims: &[i64]) -> Option<TensorShapeProto> {
    Some(raw_shape_proto(dims))
}

/// Checks the invariants an accepted entry promises its users (no overflow later).
fn check_accepted(e: &crate::parse::bundle::Entry) {
    let n = e
        .shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .expect("element count fits");
    assert!(n <= i64::MAX as u64);
    assert!(e.shape.len() <= 254);
    match &e.data {
        Data::Contiguous { offset, size, .. } => {
            assert!(offset
                .checked_add(*size)
                .is_some_and(|end| end <= i64::MAX as u64));
            if let Some(es) = e.dtype.elem_size() {
                assert_eq!(n.checked_mul(es as u64), Some(*size));
            }
        }
        Data::Sliced(slices) => {
            for s in slices {
                assert_eq!(s.len(), e.shape.len());
                let _ = slice_elements(&e.shape, s);
                let _ = slice_shape(&e.shape, s);
            }
            let _ = check_tiling(&e.shape, slices);
        }
    }
}

#[test]
fn hostile_protobuf_values() {
    let ok = BundleEntryProto {
        dtype: 1,
        shape: shape(&[3, 4]),
        size: 48,
        ..Default::default()
    };
    assert!(parse_entry(&ok.encode_to_vec()).is_ok());
    let many: Vec<i64> = vec![1; 300];
    let bad: Vec<(&str, BundleEntryProto)> = vec![
        (
            "i64::MAX dim",
            BundleEntryProto {
                shape: shape(&[i64::MAX]),
                size: 4,
                ..ok.clone()
            },
        ),
        (
            "i64::MAX dims",
            BundleEntryProto {
                shape: shape(&[i64::MAX, i64::MAX, 2]),
                ..ok.clone()
            },
        ),
        (
            "dims whose product overflows",
            BundleEntryProto {
                shape: shape(&[1 << 32, 1 << 32]),
                size: 0,
                ..ok.clone()
            },
        ),
        (
            "product past i64::MAX",
            BundleEntryProto {
                shape: shape(&[1 << 62, 4]),
                size: 0,
                ..ok.clone()
            },
        ),
        (
            "elements × size overflows",
            BundleEntryProto {
                shape: shape(&[1 << 62]),
                size: 0,
                ..ok.clone()
            },
        ),
        (
            "negative dim",
            BundleEntryProto {
                shape: shape(&[-1, 4]),
                ..ok.clone()
            },
        ),
        (
            "i64::MIN dim",
            BundleEntryProto {
                shape: shape(&[i64::MIN]),
                ..ok.clone()
            },
        ),
        (
            "300 dims",
            BundleEntryProto {
                shape: shape(&many),
                size: 4,
                ..ok.clone()
            },
        ),
        (
            "unknown rank",
            BundleEntryProto {
                shape: Some(TensorShapeProto {
                    dim: vec![],
                    unknown_rank: true,
                }),
                size: 4,
                ..ok.clone()
            },
        ),
        (
            "offset i64::MAX",
            BundleEntryProto {
                offset: i64::MAX,
                ..ok.clone()
            },
        ),
        (
            "offset + size > i64::MAX",
            BundleEntryProto {
                offset: i64::MAX - 47,
                ..ok.clone()
            },
        ),
        (
            "negative offset",
            BundleEntryProto {
                offset: -1,
                ..ok.clone()
            },
        ),
        (
            "negative size",
            BundleEntryProto {
                size: -48,
                ..ok.clone()
            },
        ),
        (
            "size i64::MAX",
            BundleEntryProto {
                size: i64::MAX,
                ..ok.clone()
            },
        ),
        (
            "negative shard",
            BundleEntryProto {
                shard_id: -1,
                ..ok.clone()
            },
        ),
        (
            "size/shape mismatch",
            BundleEntryProto {
                size: 47,
                ..ok.clone()
            },
        ),
        (
            "string smaller than its lengths",
            BundleEntryProto {
                dtype: 7,
                shape: shape(&[100]),
                size: 10,
                ..ok.clone()
            },
        ),
        (
            "string of i64::MAX elements",
            BundleEntryProto {
                dtype: 7,
                shape: shape(&[i64::MAX]),
                size: 10,
                ..ok.clone()
            },
        ),
        (
            "slice outside the shape",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(2, Some(5)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice with negative start",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(-1, Some(2)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice start past the end",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(i64::MAX, Some(1)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice start + length overflows",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(1, Some(i64::MAX)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice length -2",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(0, Some(-2)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice of i64::MIN length",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(0, Some(i64::MIN)), (0, None)])],
                ..ok.clone()
            },
        ),
        (
            "slice rank differs",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(0, Some(1))])],
                ..ok.clone()
            },
        ),
        (
            "5000 slices",
            BundleEntryProto {
                slices: vec![raw_slice_proto(&[(0, None), (0, None)]); 5000],
                ..ok.clone()
            },
        ),
    ];
    for (what, e) in &bad {
        match catch_unwind(|| parse_entry(&e.encode_to_vec())) {
            Ok(Err(_)) => {}
            Ok(Ok(v)) => panic!("{what}: accepted as {v:?}"),
            Err(_) => panic!("{what}: panicked"),
        }
    }
    // Unknown dtypes are kept, not rejected (tfmount shows such tensors and fails their reads
    // with EIO; see `crafted_index_entries_fail_reads_not_the_mount`), and never panic.
    for dtype in [0, -1, 99, 1000, i32::MAX, i32::MIN, 20, 121, 200] {
        let e = BundleEntryProto {
            dtype,
            shape: shape(&[3]),
            size: 12,
            ..Default::default()
        };
        if let Ok(v) = parse_entry(&e.encode_to_vec()) {
            assert_eq!(v.dtype.0, dtype);
            check_accepted(&v);
        }
    }
    // Header values.
    let hdr = |num_shards, endianness, version| BundleHeaderProto {
        num_shards,
        endianness,
        version,
    };
    let v = |producer, min_consumer, bad_consumers| {
        Some(VersionDef {
            producer,
            min_consumer,
            bad_consumers,
        })
    };
    assert!(parse_header(&hdr(1, 0, v(1, 0, vec![])).encode_to_vec()).is_ok());
    for (what, h) in [
        ("0 shards", hdr(0, 0, None)),
        ("negative shards", hdr(-1, 0, None)),
        ("i32::MAX shards", hdr(i32::MAX, 0, None)),
        ("endianness 2", hdr(1, 2, None)),
        ("endianness -1", hdr(1, -1, None)),
        ("min_consumer 2", hdr(1, 0, v(1, 2, vec![]))),
        ("bad consumer 1", hdr(1, 0, v(1, 0, vec![1]))),
        ("negative producer", hdr(1, 0, v(-1, 0, vec![]))),
    ] {
        assert!(parse_header(&h.encode_to_vec()).is_err(), "{what}");
    }

    // Random bytes and mutations of valid encodings: never a panic; what is accepted is sane.
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let seeds: Vec<Vec<u8>> = vec![
        ok.encode_to_vec(),
        BundleEntryProto {
            dtype: 7,
            shape: shape(&[2, 3]),
            shard_id: 1,
            offset: 100,
            size: 40,
            crc32c: 7,
            slices: vec![],
        }
        .encode_to_vec(),
        BundleEntryProto {
            dtype: 3,
            shape: shape(&[6, 4]),
            slices: vec![
                raw_slice_proto(&[(0, Some(3)), (0, None)]),
                raw_slice_proto(&[(3, Some(3)), (0, None)]),
            ],
            ..Default::default()
        }
        .encode_to_vec(),
        hdr(3, 0, v(1, 0, vec![])).encode_to_vec(),
    ];
    let (mut accepted, mut header_ok) = (0, 0);
    for i in 0..100_000u32 {
        let input = if i % 2 == 0 {
            let n = rng.below(48) as usize;
            rng.bytes(n)
        } else {
            let mut b = seeds[rng.below(seeds.len() as u64) as usize].clone();
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 if !b.is_empty() => {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] ^= 1 << rng.below(8);
                    }
                    1 if !b.is_empty() => {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] = rng.next() as u8;
                    }
                    2 => {
                        let at = rng.below(b.len() as u64 + 1) as usize;
                        b.insert(at, rng.next() as u8);
                    }
                    _ => b.truncate(rng.below(b.len() as u64 + 1) as usize),
                }
            }
            b
        };
        let r = catch_unwind(|| (parse_entry(&input), parse_header(&input)));
        match r {
            Ok((e, h)) => {
                if let Ok(e) = e {
                    check_accepted(&e);
                    accepted += 1;
                }
                if h.is_ok() {
                    header_ok += 1;
                }
            }
            Err(_) => panic!("iteration {i}: parse of {input:02x?} panicked"),
        }
    }
    eprintln!("100000 protobuf inputs: {accepted} accepted as entries, {header_ok} as headers");

    // Block::parse on random bytes (and on random bytes ending in a plausible restart count).
    let mut blocks_ok = 0;
    for i in 0..100_000u32 {
        let n = rng.below(64) as usize;
        let mut b = rng.bytes(n);
        if i % 2 == 1 && b.len() >= 8 {
            let l = b.len();
            let restarts = rng.below(3) as u32;
            b[l - 4..].copy_from_slice(&restarts.to_le_bytes());
            // Small varints so entries sometimes parse.
            for x in b.iter_mut().take(l - 4) {
                if rng.below(2) == 0 {
                    *x &= 0x0f;
                }
            }
        }
        match catch_unwind(|| Block::parse(b.clone())) {
            Ok(Ok(blk)) => {
                blocks_ok += 1;
                for j in 0..blk.len() {
                    let _ = (blk.key(j), blk.value(j));
                    assert!(
                        j == 0 || blk.key(j - 1) < blk.key(j),
                        "accepted unsorted keys"
                    );
                }
                let _ = blk.seek(b"m");
            }
            Ok(Err(_)) => {}
            Err(_) => panic!("Block::parse({b:02x?}) panicked"),
        }
    }
    eprintln!("100000 random blocks: {blocks_ok} parsed");

    // StringLayout::parse on random bytes with random n; reads of what parses.
    let mut layouts_ok = 0;
    for _ in 0..100_000u32 {
        let len = rng.below(40) as usize;
        let mut b = rng.bytes(len);
        for x in b.iter_mut() {
            if rng.below(3) == 0 {
                *x &= 0x07; // short lengths, so some inputs parse
            }
        }
        let n = match rng.below(4) {
            0 => rng.next(),
            1 => rng.below(len as u64 + 2),
            2 => rng.below(4),
            _ => u64::MAX - rng.below(3),
        };
        let crc = (rng.below(2) == 0).then(|| rng.next() as u32);
        let r = catch_unwind(|| {
            if let Ok(l) = StringLayout::parse(&b, n, crc) {
                let total = l.served_len();
                for (off, want) in [
                    (0, 1usize),
                    (0, 4096),
                    (3, 9),
                    (total.saturating_sub(1), 100),
                    (total, 5),
                    (u64::MAX, 7),
                ] {
                    let got = l.read(&b, off, want);
                    assert!(got.len() <= want);
                    assert_eq!(got.len() as u64, total.saturating_sub(off).min(want as u64));
                }
                true
            } else {
                false
            }
        });
        match r {
            Ok(true) => layouts_ok += 1,
            Ok(false) => {}
            Err(_) => panic!("StringLayout on {b:02x?} n {n} crc {crc:?} panicked"),
        }
    }
    eprintln!("100000 random string tensors: {layouts_ok} parsed");
}
