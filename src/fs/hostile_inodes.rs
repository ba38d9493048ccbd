//! Inode numbers the kernel never got from us, and readdir cookies it never got: the core
//! answers with errors, never a panic. (Was a test of the `core` suite's `fs_core` module: it
//! makes inode numbers from the key space's bit layout, which the crate keeps to itself.)

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use super::{Fs, Options, KEY_XATTR, ROOT};
use crate::namespace::ino::{keyspace, Ino};
use crate::namespace::FileKind;
use crate::probe::probe;
use crate::testkit::rng::Rng;

/// Inode numbers the kernel never got from us: no panic, only errors.
#[test]
fn hostile_inode_numbers() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/partitioned/model.ckpt");
    let views_listed = Options {
        views_visible: true,
        ..Options::default()
    };
    let fs = Fs::new(&probe(&fixture).expect("probe"), &views_listed).expect("fs");
    let mut rng = Rng::new(42);
    let mut inos: Vec<u64> = vec![
        0,
        1,
        2,
        3,
        4,
        5,
        1000,
        u64::MAX,
        1 << 61,
        (1 << 61) - 1,
        6 << 61,
        7 << 61,
    ];
    for kind in 0..8u64 {
        for _ in 0..200 {
            inos.push(kind << 61 | (rng.next() >> 3));
        }
    }
    // Key-space nodes of the checkpoint's variables (subtree 1): `file` 0 is a directory, 2..5
    // a tensor file; `pos` is a V2 index position, block << 17 | entry.
    let ks = |sub: u16, file: u64, depth: u64, pos: u64| {
        Ino::new(
            sub,
            keyspace::FILE.put(file).expect("file")
                | keyspace::DEPTH.put(depth).expect("depth")
                | keyspace::POS.put(pos).expect("pos"),
        )
        .expect("ino")
        .0
    };
    let big = keyspace::POS.max();
    for (sub, file, depth, pos) in [
        (1, 0, 1, big),
        (1, 0, keyspace::DEPTH.max(), 1),
        (1, 0, 0, 0),
        (4095, 0, 1, 0),
        (1, FileKind::Bin as u64, 0, big),
        (1, FileKind::Npy as u64, 0, 0),
        (5, FileKind::Shape as u64, 0, 1),
        (1, 1, 0, 0),
        (1, 7, 3, 5),
    ] {
        inos.push(ks(sub, file, depth, pos));
    }
    // Hidden entries (the header and slice keys) have positions too.
    for entry in 0..40u64 {
        for kind in FileKind::ALL {
            inos.push(ks(1, kind as u64, 0, entry));
            inos.push(ks(1, 0, 1 + entry % 3, entry));
        }
    }
    for ino in inos {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = fs.getattr(ino);
            let _ = fs.lookup(ino, b"..");
            let _ = fs.lookup(ino, b"x.bin");
            let _ = fs.readdir(ino, 0, |_| false);
            let _ = fs.readdir(ino, rng.next(), |_| false);
            let _ = fs.read(ino, 0, 4096);
            let _ = fs.read(ino, u64::MAX, 4096);
            let _ = fs.readlink(ino);
            let _ = fs.getxattr(ino, KEY_XATTR.as_bytes());
            let _ = fs.listxattr(ino);
        }));
        assert!(r.is_ok(), "inode {ino:#x} panicked");
    }
    // Random cookies on real directories.
    let vars = fs.lookup(ROOT, b"variables").expect("variables");
    for _ in 0..2000 {
        let c = rng.next() >> rng.below(64);
        let r = catch_unwind(AssertUnwindSafe(|| fs.readdir(vars.ino, c, |_| false)));
        assert!(r.is_ok(), "cookie {c:#x} panicked");
    }
}
