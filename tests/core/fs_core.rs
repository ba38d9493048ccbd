//! The filesystem core (`tfmount::fs::Fs`) without FUSE: walks of every TensorFlow-written
//! fixture compared with TensorFlow's own record, readdir cookie resumption, canonical names,
//! and hostile inputs (damaged index and data files, crafted index entries, state files).
//! Nothing here mounts; the whole file runs in a few seconds in debug builds. Absurd protobuf
//! values and random parser inputs are unit tests of the V2 format
//! (`src/formats/v2/hostile_values.rs`), inode numbers the kernel never got of the core
//! (`src/fs/hostile_inodes.rs`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use common::*;
use prost::Message;
use serde_json::Value;
use tfmount::error::FsError;
use tfmount::formats::v2::strings::StringLayout;
use tfmount::fs::{DirEntry, Fs, Kind, Options, KEY_XATTR, ROOT};
use tfmount::namespace;
use tfmount::parse::slice_key::Extent;
use tfmount::parse::{mask_crc, slice_key};
use tfmount::probe::{probe, Probed};
use tfmount::proto::{BundleEntryProto, TensorSliceProto};
use tfmount::testkit::writer::{
    block_handles, data_path, fix_block_crc, index_path, raw_entry, raw_shape_proto,
    raw_slice_proto, table_entries, table_of_blocks, CheckpointWriter,
};
use walk::{join, show, Core, Node, Walk};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// What TF recorded for one tensor file: served sha256 and length.
#[derive(Debug, Clone)]
struct Want {
    sha: String,
    len: u64,
    dtype: String,
    shape: Vec<u64>,
    stem: Vec<u8>,
}

/// Every tensor a view must show (readable ones and variants served as stored), by raw key.
fn wants(expected: &Value) -> BTreeMap<Vec<u8>, Want> {
    let mut out = BTreeMap::new();
    for rec in expected["tensors"].as_array().expect("tensors") {
        out.insert(
            common::rec_key(rec),
            Want {
                sha: rec["sha256"].as_str().expect("sha256").to_string(),
                len: rec["nbytes"].as_u64().expect("nbytes"),
                dtype: rec["dtype"].as_str().expect("dtype").to_string(),
                shape: rec["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim"))
                    .collect(),
                stem: stem_path(rec),
            },
        );
    }
    for rec in expected["unreadable_entries"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let stored = &rec["stored"];
        out.insert(
            common::rec_key(rec),
            Want {
                sha: stored["sha256"].as_str().expect("stored sha").to_string(),
                len: stored["size"].as_u64().expect("stored size"),
                dtype: rec["dtype"].as_str().expect("dtype").to_string(),
                shape: rec["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim"))
                    .collect(),
                stem: stem_path(rec),
            },
        );
    }
    out
}

/// One-shot listing.
fn list(fs: &Fs, ino: u64) -> Result<Vec<DirEntry>, FsError> {
    let mut v = Vec::new();
    fs.readdir(ino, 0, |e| {
        v.push(e);
        false
    })?;
    Ok(v)
}

/// Walks the whole tree from ROOT through `readdir` + `lookup` (the shared walker, strict):
/// every listed name resolves to the listed inode and kind, `.`/`..` are right, and getattr
/// agrees with lookup. Handles are inode numbers.
fn walk_strict(fs: &Fs) -> BTreeMap<Vec<u8>, Node<u64>> {
    walk::walk(&Core::strict(fs), &Walk::default())
}

fn kind_of(name: &[u8]) -> Option<&'static str> {
    namespace::SUFFIXES
        .into_iter()
        .find(|s| name.ends_with(s.as_bytes()))
}

// ---------------------------------------------------------------------------------------------
// 1. The core walk equals TensorFlow's record
// ---------------------------------------------------------------------------------------------

/// Every fixture of the manifest, walked from ROOT by readdir + lookup; every `.bin` read whole in
/// 7-byte and 4096-byte chunks and compared with TF's sha256; `.shape`, `.dtype`, `.npy`, symlinks,
/// absent checkpoints and passed-through files checked too. No tensor is skipped: partitioned
/// string tensors (`strs` in partitioned), once refused with EIO, are now served and must match.
#[test]
fn core_walk_equals_tensorflow_record() {
    let mut errs = Vec::new();
    let mut bins_checked = 0;
    for entry in manifest() {
        let name = entry["name"].as_str().expect("name");
        let src = fixtures().join(entry["source"].as_str().expect("source"));
        let probed = probe(&src).unwrap_or_else(|e| panic!("{name}: probe: {e}"));
        let fs = Fs::new(&probed, &common::views_listed())
            .unwrap_or_else(|e| panic!("{name}: Fs::new: {e}"));
        let tree = walk_strict(&fs);
        for (view, json) in entry["views"].as_object().expect("views") {
            let expected = load_json(json.as_str().expect("json path"));
            let want = wants(&expected);
            let vpath = view.as_bytes();
            let mut want_bins = BTreeSet::new();
            for (key, w) in &want {
                let file = |suffix: &str| {
                    let mut s = w.stem.clone();
                    s.extend_from_slice(suffix.as_bytes());
                    join(vpath, &s)
                };
                let bin = file(".bin");
                want_bins.insert(bin.clone());
                let Some(found) = tree.get(&bin) else {
                    errs.push(format!("{name}: {} not listed", show(&bin)));
                    continue;
                };
                let ino = found.handle;
                assert_eq!(
                    fs.getxattr(ino, KEY_XATTR.as_bytes()).ok().as_deref(),
                    Some(&key[..])
                );
                for chunk in [7usize, 4096] {
                    match read_all(&fs, ino, chunk, usize::MAX) {
                        Ok(bytes) => {
                            if sha256_hex(&bytes) != w.sha || bytes.len() as u64 != w.len {
                                errs.push(format!(
                                    "{name}: {} ({chunk}-byte reads): content differs",
                                    show(&bin)
                                ));
                            } else if chunk == 7 {
                                bins_checked += 1;
                            }
                        }
                        Err(e) => errs.push(format!("{name}: {}: {e}", show(&bin))),
                    }
                }
                if found.size != w.len {
                    errs.push(format!(
                        "{name}: {} size {} want {}",
                        show(&bin),
                        found.size,
                        w.len
                    ));
                }
                let shape: Vec<String> = w.shape.iter().map(|d| d.to_string()).collect();
                for (suffix, text) in [
                    (".shape", format!("{}\n", shape.join(" "))),
                    (".dtype", format!("{}\n", w.dtype)),
                ] {
                    let p = file(suffix);
                    match tree.get(&p).map(|f| read_all(&fs, f.handle, 3, usize::MAX)) {
                        Some(Ok(b)) if b == text.as_bytes() => {}
                        other => {
                            errs.push(format!("{name}: {}: {other:?} want {text:?}", show(&p)))
                        }
                    }
                }
                let npy = file(".npy");
                if NUMPY_NATIVE.contains(&w.dtype.as_str()) {
                    let f = tree
                        .get(&npy)
                        .unwrap_or_else(|| panic!("{name}: {} missing", show(&npy)));
                    let n = read_all(&fs, f.handle, 7, usize::MAX).expect("npy");
                    let bin = read_all(&fs, ino, 4096, usize::MAX).expect("bin");
                    assert!(
                        n.starts_with(b"\x93NUMPY\x01\x00") && n.ends_with(&bin),
                        "{name}: {}",
                        show(&npy)
                    );
                    assert_eq!((n.len() - bin.len()) % 64, 0);
                    assert_eq!(f.size, n.len() as u64);
                } else if tree.contains_key(&npy) {
                    errs.push(format!("{name}: {} shown for {}", show(&npy), w.dtype));
                }
            }
            // Exactly these tensors: no header, no slice entries.
            let mut prefix = vpath.to_vec();
            prefix.push(b'/');
            let got_bins: BTreeSet<Vec<u8>> = tree
                .keys()
                .filter(|p| p.starts_with(&prefix) && kind_of(p) == Some(".bin"))
                .filter(|p| tree[*p].kind == Kind::File)
                .cloned()
                .collect();
            if got_bins != want_bins {
                errs.push(format!(
                    "{name}/{view}: listing differs: extra {:?} missing {:?}",
                    got_bins
                        .difference(&want_bins)
                        .map(|p| show(p))
                        .collect::<Vec<_>>(),
                    want_bins
                        .difference(&got_bins)
                        .map(|p| show(p))
                        .collect::<Vec<_>>()
                ));
            }
        }
        for (link, target) in entry["symlinks"].as_object().into_iter().flatten() {
            let got = tree.get(link.as_bytes()).and_then(|f| f.link.clone());
            assert_eq!(
                got.as_deref(),
                Some(target.as_str().expect("target").as_bytes()),
                "{name}: {link}"
            );
        }
        for absent in entry["absent"].as_array().into_iter().flatten() {
            assert!(
                !tree.contains_key(absent.as_str().expect("absent").as_bytes()),
                "{name}: {absent} shown"
            );
        }
        for (file, sha) in entry["passthrough"].as_object().into_iter().flatten() {
            let f = tree
                .get(file.as_bytes())
                .unwrap_or_else(|| panic!("{name}: {file} not shown"));
            let b = read_all(&fs, f.handle, 7, usize::MAX).expect("passthrough read");
            assert_eq!(sha256_hex(&b), sha.as_str().expect("sha"), "{name}: {file}");
            assert_eq!(f.size, b.len() as u64);
        }
    }
    assert!(bins_checked > 150, "only {bins_checked} tensors checked");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 2. readdir cookies resume correctly
// ---------------------------------------------------------------------------------------------

/// Lists `ino` like the kernel does through FUSE: each call's buffer takes `k` entries and
/// *rejects* the next one (`add` returns true and the entry is not kept); the next call resumes
/// from the cookie of the last entry kept.
fn list_in_chunks(fs: &Fs, ino: u64, k: usize) -> Vec<DirEntry> {
    let mut out: Vec<DirEntry> = Vec::new();
    let mut cookie = 0;
    for _ in 0..100_000 {
        let mut batch = Vec::new();
        fs.readdir(ino, cookie, |e| {
            if batch.len() == k {
                return true;
            }
            batch.push(e);
            false
        })
        .expect("readdir");
        let Some(last) = batch.last() else { return out };
        cookie = last.cookie;
        out.extend(batch);
    }
    panic!("readdir never ended");
}

fn entry_tuple(e: &DirEntry) -> (Vec<u8>, u64, Kind, u64) {
    (e.name.clone(), e.ino, e.kind, e.cookie)
}

#[test]
fn readdir_cookies_resume_correctly() {
    let all_dtypes = Fs::new(
        &probe(&fixtures().join("all_dtypes/ckpt")).expect("probe"),
        &common::views_listed(),
    )
    .expect("fs");
    let tf1 = Fs::new(
        &probe(&fixtures().join("tf1_adam")).expect("probe"),
        &common::views_listed(),
    )
    .expect("fs");
    let saved = Fs::new(
        &probe(&fixtures().join("demo_savedmodel")).expect("probe"),
        &common::views_listed(),
    )
    .expect("fs");
    let cases: Vec<(&str, &Fs, Vec<u8>)> = vec![
        ("all_dtypes", &all_dtypes, b"variables/dtypes".to_vec()),
        ("all_dtypes", &all_dtypes, b"variables/odd".to_vec()),
        ("all_dtypes", &all_dtypes, b"variables".to_vec()),
        ("all_dtypes", &all_dtypes, b"variables/pct".to_vec()),
        ("tf1_adam", &tf1, Vec::new()),
        ("tf1_adam", &tf1, b"model.ckpt-3/variables/dense".to_vec()),
        ("demo_savedmodel", &saved, Vec::new()),
    ];
    for (name, fs, path) in cases {
        let ino = if path.is_empty() {
            ROOT
        } else {
            lookup_path(fs, &path).expect("dir").ino
        };
        let whole = list(fs, ino).expect("readdir");
        let what = format!("{name}:{}", show(&path));
        assert!(
            whole.len() >= 4,
            "{what}: too few entries to be interesting"
        );
        for dot in [&b"."[..], b".."] {
            assert_eq!(
                whole.iter().filter(|e| e.name == dot).count(),
                1,
                "{what}: {}",
                show(dot)
            );
        }
        let names: HashSet<_> = whole.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names.len(), whole.len(), "{what}: duplicate names");
        let cookies: HashSet<_> = whole.iter().map(|e| e.cookie).collect();
        assert_eq!(cookies.len(), whole.len(), "{what}: duplicate cookies");
        assert!(!cookies.contains(&0), "{what}: cookie 0 means 'start'");
        let want: Vec<_> = whole.iter().map(entry_tuple).collect();
        for k in [1, 2, 3, 5] {
            let got: Vec<_> = list_in_chunks(fs, ino, k).iter().map(entry_tuple).collect();
            assert_eq!(got, want, "{what}: {k} entries per call");
        }
        // Resuming from any cookie gives exactly the rest.
        for (i, e) in whole.iter().enumerate() {
            let mut rest = Vec::new();
            fs.readdir(ino, e.cookie, |e| {
                rest.push(entry_tuple(&e));
                false
            })
            .expect("readdir from cookie");
            assert_eq!(
                rest,
                want[i + 1..],
                "{what}: resume after {}",
                show(&e.name)
            );
        }
        // Accepting the entry and then saying "full" (another buffer convention) also resumes.
        let mut got = Vec::new();
        let mut cookie = 0;
        loop {
            let mut one = None;
            fs.readdir(ino, cookie, |e| {
                one = Some(e);
                true
            })
            .expect("readdir");
            let Some(e) = one else { break };
            cookie = e.cookie;
            got.push(entry_tuple(&e));
        }
        assert_eq!(got, want, "{what}: one entry per call");
    }
    // Directory operations on files are refused.
    let bin = lookup_path(&all_dtypes, b"variables/dtypes/float32.bin").expect("bin");
    assert_eq!(
        all_dtypes
            .readdir(bin.ino, 0, |_| false)
            .expect_err("file")
            .errno(),
        libc::ENOTDIR
    );
    assert_eq!(
        all_dtypes.lookup(bin.ino, b"x").expect_err("file").errno(),
        libc::ENOTDIR
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Lookup of non-canonical names fails
// ---------------------------------------------------------------------------------------------

#[test]
fn lookup_of_non_canonical_names_fails() {
    let fs = Fs::new(
        &probe(&fixtures().join("all_dtypes/ckpt")).expect("probe"),
        &common::views_listed(),
    )
    .expect("fs");
    let must_exist: &[&[u8]] = &[
        b"variables/dtypes/float32.bin",
        b"variables/dtypes/string.bin",
        b"variables/odd/%2E/y.bin",
        b"variables/odd/%2E%2E/z.bin",
        b"variables/odd/%/x.bin",
        b"variables/%/leading.bin",
        b"variables/odd/name.bin",
        b"variables/odd/name.bin.bin",
        b"variables/odd/name%2Ebin/leaf.bin",
        b"variables/odd/dir%2Enpy/leaf.npy",
        b"variables/odd/x%2Eshape/y%2Edtype/z.dtype",
        b"variables/odd/nul%00byte.shape",
        b"variables/odd/trailing/%.bin",
        b"variables/pct/%25.bin",
        b"variables/pct/%2525.bin",
        b"variables/pct/a%2500b.bin",
    ];
    for p in must_exist {
        let a = lookup_path(&fs, p).unwrap_or_else(|e| panic!("{}: {e}", show(p)));
        assert_eq!(a.kind, Kind::File, "{}", show(p));
    }
    // `odd/name.bin` is the .bin of tensor `odd/name`, never the directory `odd/name.bin/`.
    assert_eq!(
        fs.getxattr(
            lookup_path(&fs, b"variables/odd/name.bin")
                .expect("file")
                .ino,
            KEY_XATTR.as_bytes()
        )
        .expect("key"),
        b"odd/name"
    );
    let must_fail: &[&[u8]] = &[
        b"variables/dtypes/float%33%32.bin", // %33%32 for "32"
        b"variables/%64types",               // %64 for "d"
        b"variables/dtypes/%66loat32.bin",
        b"variables/odd/%2e/y.bin",    // lowercase hex
        b"variables/odd/%2e%2e/z.bin", // lowercase hex
        b"variables/odd/%2E%2e/z.bin",
        b"variables/odd/./y.bin", // a raw "." component cannot be reached by name
        b"variables/odd/dir.npy", // a directory named with a tensor suffix
        b"variables/odd/dir.npy/leaf.npy",
        b"variables/odd/x.shape/y%2Edtype/z.bin",
        b"variables/odd/x%2Eshape/y.dtype/z.bin",
        b"variables/nope.bin", // suffixes of a key that does not exist
        b"variables/nope.shape",
        b"variables/nope.dtype",
        b"variables/nope.npy",
        b"variables/nope",
        b"variables/dtypes/float33.bin",
        b"variables/dtypes/float3.bin",
        b"variables/dtypes/float322.bin",
        b"variables/dtypes/float32.bin.bin",
        b"variables/dtypes/float32.BIN",
        b"variables/dtypes/float32",     // a tensor is not a directory
        b"variables/dtypes/float32.txt", // no such suffix
        b"variables/dtypes/.bin",
        b"variables/dtypes/string.npy", // no .npy for strings
        b"variables/dtypes/bfloat16.npy",
        b"variables/dtypes/variant.npy",
        b"variables/dtypes/qint8.npy",
        b"variables/dtypes/", // empty component
        b"variables/odd/%%.bin",
        b"variables/odd/%.bin.bin",
        b"variables/odd/nul%00Byte.shape",
        b"variables/odd/nul%00byte%.shape",
        b"variables/odd/name%2Ebin.bin", // a file stem never escapes its last dot
        b"variables/pct/%.bin", // `%` alone is the empty component; key `pct/` is not a tensor
        b"variables/pct/%25%.bin",
        b"variables/pct/%2.bin",
        b"variables/pct/%zz.bin",
        b"variables/pct/a%00b.bin", // key "pct/a\0b" does not exist, "pct/a%00b" does
        b"variables/odd/long/%23",
        b"variables/.bin",
        b"latest",
        b"variables/variables",
    ];
    for p in must_fail {
        match lookup_path(&fs, p) {
            Err(e) => assert_eq!(e.errno(), libc::ENOENT, "{}: {e}", show(p)),
            Ok(a) => panic!("{}: non-canonical name resolved to {a:?}", show(p)),
        }
    }
    // Below a file: not a directory.
    let e = lookup_path(&fs, b"variables/odd/name/child.bin/x").expect_err("below a file");
    assert_eq!(e.errno(), libc::ENOTDIR);
    // Hashed long names: the canonical spelling resolves; a wrong or upper-case hash does not.
    let long_dir = lookup_path(&fs, b"variables/odd/long").expect("long dir");
    let long = list(&fs, long_dir.ino)
        .expect("readdir")
        .into_iter()
        .find(|e| e.name.ends_with(b".bin") && e.name.windows(2).any(|w| w == b"%#"))
        .expect("a hashed long name");
    assert!(fs.lookup(long_dir.ino, &long.name).is_ok());
    let stem = &long.name[..long.name.len() - 4];
    let hash_at = stem.len() - 16;
    let mut variants = Vec::new();
    let mut upper = stem.to_vec();
    upper[hash_at..].make_ascii_uppercase();
    if upper != stem {
        variants.push(upper);
    }
    let mut wrong = stem.to_vec();
    wrong[hash_at] = if wrong[hash_at] == b'0' { b'1' } else { b'0' };
    variants.push(wrong);
    variants.push(stem[..hash_at - 1].to_vec()); // hash cut short
    let mut shorter = stem.to_vec();
    shorter.remove(0); // prefix no longer the canonical 200 bytes
    variants.push(shorter);
    let mut pct = b"a%#".to_vec();
    pct.extend_from_slice(&stem[hash_at..]); // right hash, wrong prefix
    variants.push(pct);
    for mut v in variants {
        v.extend_from_slice(b".bin");
        let e = fs.lookup(long_dir.ino, &v).expect_err(&show(&v));
        assert_eq!(e.errno(), libc::ENOENT, "{}", show(&v));
    }
}

// ---------------------------------------------------------------------------------------------
// Shared machinery for hostile inputs
// ---------------------------------------------------------------------------------------------

/// Tallies of one sweep over damaged inputs.
#[derive(Debug, Default)]
struct Tally {
    variants: usize,
    open_ok: usize,
    open_err: usize,
    bin_ok: usize,
    bin_err: usize,
    problems: Vec<String>,
}

/// How successful `.bin` reads of a damaged checkpoint are judged.
enum Judge<'a> {
    /// The tensor behind the file (by its key xattr) must be one TF wrote, with TF's bytes.
    ByKey(&'a BTreeMap<Vec<u8>, Want>),
    /// The bytes must be those of *some* tensor TF wrote (keys and dtypes may have been
    /// rewritten in an index whose block checksums were fixed up; data is guarded by the
    /// tensors' own CRCs). Variants, which tfmount serves without a CRC check, are reported in
    /// `unchecked_variant` instead of failing.
    AnyTensor(&'a HashSet<String>),
}

/// Exercises every operation on every node reachable from ROOT, never asserting structure;
/// returns problems (wrong bytes). Panics propagate to the caller.
fn exercise(
    fs: &Fs,
    judge: &Judge,
    tally: &mut Tally,
    what: &str,
    unchecked_variant: &mut Vec<String>,
) {
    let mut stack = vec![(ROOT, 0usize, Vec::<u8>::new())];
    let mut seen = HashSet::new();
    let mut nodes = 0usize;
    while let Some((ino, depth, path)) = stack.pop() {
        if !seen.insert(ino) || nodes > 20_000 {
            continue;
        }
        let _ = fs.getattr(ino);
        let _ = fs.getxattr(ino, KEY_XATTR.as_bytes());
        let _ = fs.listxattr(ino);
        let _ = fs.lookup(ino, b"..");
        let _ = fs.lookup(ino, b"no such name.bin");
        let mut entries = Vec::new();
        let _ = fs.readdir(ino, 0, |e| {
            entries.push(e);
            entries.len() > 5_000
        });
        // Resume from a cookie in the middle, as a kernel with a small buffer would.
        if let Some(mid) = entries.get(entries.len() / 2) {
            let _ = fs.readdir(ino, mid.cookie, |_| false);
        }
        for e in entries {
            nodes += 1;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = join(&path, &e.name);
            let Ok(attr) = fs.lookup(ino, &e.name) else {
                continue;
            };
            let _ = fs.getxattr(attr.ino, KEY_XATTR.as_bytes());
            match attr.kind {
                Kind::Dir if depth < 200 => stack.push((attr.ino, depth + 1, p)),
                Kind::Dir => {}
                Kind::Symlink => {
                    let _ = fs.readlink(attr.ino);
                }
                Kind::File => {
                    let _ = fs.read(attr.ino, 3, 7);
                    let _ = fs.read(attr.ino, u64::MAX - 1, 4096);
                    let r = read_all(fs, attr.ino, 4096, 64 << 20);
                    // Checkpoint tensors only (graph constants have their own checks).
                    if kind_of(&e.name) != Some(".bin") || !p.starts_with(b"variables/") {
                        continue;
                    }
                    let bytes = match r {
                        Ok(b) => b,
                        Err(err) => {
                            tally.bin_err += 1;
                            if err.errno() != libc::EIO {
                                tally.problems.push(format!(
                                    "{what}: {}: errno {} ({err})",
                                    show(&p),
                                    err.errno()
                                ));
                            }
                            continue;
                        }
                    };
                    tally.bin_ok += 1;
                    let sha = sha256_hex(&bytes);
                    let key = fs
                        .getxattr(attr.ino, KEY_XATTR.as_bytes())
                        .unwrap_or_default();
                    match judge {
                        Judge::ByKey(want) => match want.get(&key) {
                            Some(w) if w.sha == sha => {}
                            Some(_) => tally
                                .problems
                                .push(format!("{what}: {}: WRONG BYTES", show(&p))),
                            None => tally.problems.push(format!(
                                "{what}: {}: data for a key TF never wrote: {}",
                                show(&p),
                                show(&key)
                            )),
                        },
                        Judge::AnyTensor(shas) => {
                            if !shas.contains(&sha) {
                                let dtype_file = {
                                    let mut n = p.clone();
                                    n.truncate(n.len() - 4);
                                    n.extend_from_slice(b".dtype");
                                    n
                                };
                                let dtype = lookup_path(fs, &join(b"", &dtype_file))
                                    .ok()
                                    .and_then(|a| read_all(fs, a.ino, 64, 64).ok())
                                    .unwrap_or_default();
                                let msg = format!(
                                    "{what}: {} ({}): WRONG BYTES",
                                    show(&p),
                                    show(dtype.trim_ascii())
                                );
                                if dtype == b"variant\n" {
                                    unchecked_variant.push(msg);
                                } else {
                                    tally.problems.push(msg);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A scratch directory for sweeps that rewrite a file thousands of times: in tmpfs when there
/// is one (a disk-backed /tmp makes each rewrite cost a millisecond or more).
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tmp")
}

/// Copies `prefix`'s index and data shards into `dir` under the same base name; returns the new
/// prefix and the index bytes.
fn copy_checkpoint(prefix: &Path, dir: &Path) -> (PathBuf, Vec<u8>) {
    let base = prefix.file_name().expect("base name");
    let src_dir = prefix.parent().expect("dir");
    for e in std::fs::read_dir(src_dir).expect("read_dir") {
        let e = e.expect("dirent");
        let n = e.file_name();
        let nb = n.as_bytes();
        if nb.starts_with(base.as_bytes())
            && (nb.ends_with(b".index") || nb[base.len()..].starts_with(b".data-"))
        {
            std::fs::copy(e.path(), dir.join(&n)).expect("copy");
        }
    }
    let np = dir.join(base);
    let index = std::fs::read(index_path(&np)).expect("index");
    (np, index)
}

/// Replaces the index file atomically (a reader of the old file never sees the new bytes).
fn put_index(prefix: &Path, bytes: &[u8]) {
    let tmp = prefix.with_extension("tmp-index");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, index_path(prefix)).expect("rename");
}

/// Opens the checkpoint at `prefix` with its current index and exercises it. A panic is caught
/// and recorded as a problem naming `what`.
fn try_variant(
    prefix: &Path,
    judge: &Judge,
    tally: &mut Tally,
    what: &str,
    unchecked_variant: &mut Vec<String>,
) {
    tally.variants += 1;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let probed = Probed::prefix(prefix.to_path_buf());
        match Fs::new(&probed, &common::views_listed()) {
            Ok(fs) => {
                let mut t = Tally::default();
                let mut u = Vec::new();
                exercise(&fs, judge, &mut t, what, &mut u);
                (true, t, u)
            }
            Err(_) => (false, Tally::default(), Vec::new()),
        }
    }));
    match r {
        Ok((ok, t, u)) => {
            if ok {
                tally.open_ok += 1;
            } else {
                tally.open_err += 1;
            }
            tally.bin_ok += t.bin_ok;
            tally.bin_err += t.bin_err;
            tally.problems.extend(t.problems);
            unchecked_variant.extend(u);
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            tally.problems.push(format!("{what}: PANIC: {msg}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Hostile index files
// ---------------------------------------------------------------------------------------------

const HOSTILE_INDEX_FIXTURES: &[(&str, &str)] = &[
    ("tf2_keras/ckpt-1", "expected/tf2_keras.json"),
    ("all_dtypes/ckpt", "expected/all_dtypes.json"),
    ("sharded/model.ckpt", "expected/sharded.json"),
    ("partitioned/model.ckpt", "expected/partitioned.json"),
];

/// Every byte of each index gets one bit flipped (bit `pos % 8`), and separately the index is
/// truncated to every length 0..len. The files are small (≤ 2.7 KiB), so the sweep is complete:
/// no sampling.
#[test]
fn hostile_index_bit_flips_and_truncations() {
    let mut report = Vec::new();
    let mut problems = Vec::new();
    let mut unchecked_variant = Vec::new();
    {
        for (src, json) in HOSTILE_INDEX_FIXTURES {
            let want = wants(&load_json(json));
            let tmp = scratch_dir();
            let (prefix, orig) = copy_checkpoint(&fixtures().join(src), tmp.path());
            let judge = Judge::ByKey(&want);
            // Sanity: the untouched copy reads every tensor correctly.
            let mut base = Tally::default();
            try_variant(
                &prefix,
                &judge,
                &mut base,
                &format!("{src} unmodified"),
                &mut unchecked_variant,
            );
            assert_eq!(base.open_ok, 1, "{src}: the unmodified copy must open");
            assert!(base.problems.is_empty(), "{:?}", base.problems);
            let mut flips = Tally::default();
            for pos in 0..orig.len() {
                let mut b = orig.clone();
                b[pos] ^= 1 << (pos % 8);
                put_index(&prefix, &b);
                try_variant(
                    &prefix,
                    &judge,
                    &mut flips,
                    &format!("{src}: flip byte {pos} bit {}", pos % 8),
                    &mut unchecked_variant,
                );
            }
            let mut cuts = Tally::default();
            for len in 0..orig.len() {
                put_index(&prefix, &orig[..len]);
                try_variant(
                    &prefix,
                    &judge,
                    &mut cuts,
                    &format!("{src}: truncated to {len}"),
                    &mut unchecked_variant,
                );
            }
            report.push(format!(
                "{src} ({} bytes): bit flips {} variants, Fs::new Ok {} / Err {}, .bin reads Ok {} / Err {}; \
                 truncations {} variants, Ok {} / Err {}",
                orig.len(),
                flips.variants,
                flips.open_ok,
                flips.open_err,
                flips.bin_ok,
                flips.bin_err,
                cuts.variants,
                cuts.open_ok,
                cuts.open_err
            ));
            // Only the full length is a valid table (the footer is at the end).
            assert_eq!(cuts.open_ok, 0, "{src}: a truncated index opened");
            problems.extend(flips.problems);
            problems.extend(cuts.problems);
        }
    }
    for r in &report {
        eprintln!("{r}");
    }
    assert!(unchecked_variant.is_empty(), "{unchecked_variant:?}");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The served bytes' sha256 of each slice entry TF wrote, as tfmount would serve the slice if a
/// damaged index exposed it as a tensor of its own (a rewritten key prefix does that). The stored
/// bytes are checked against TF's record first.
fn slice_entry_shas(prefix: &Path, expected: &Value) -> Vec<String> {
    let n_shards = expected["header"]["num_shards"]
        .as_u64()
        .expect("num_shards") as u32;
    let mut out = Vec::new();
    for s in expected["slice_entries"].as_array().into_iter().flatten() {
        let st = &s["stored"];
        let shard = std::fs::read(data_path(
            prefix,
            st["shard_id"].as_u64().expect("shard") as u32,
            n_shards,
        ))
        .expect("shard");
        let off = st["offset"].as_u64().expect("offset") as usize;
        let stored = &shard[off..off + st["size"].as_u64().expect("size") as usize];
        assert_eq!(sha256_hex(stored), st["sha256"].as_str().expect("sha"));
        if s["dtype"] == "string" {
            let n: u64 = s["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim"))
                .product();
            let l = StringLayout::parse(stored, n, None).expect("string slice");
            out.push(sha256_hex(&l.read(stored, 0, usize::MAX)));
        } else {
            out.push(sha256_hex(stored));
        }
    }
    out
}

/// Flips whose block checksum is then recomputed, so the damage reaches the block parser and the
/// bundle-entry parser instead of being stopped by the block CRC (keys, shared-prefix counts,
/// entry protos: offsets, sizes, dtypes, shapes, shard ids, CRCs; index-block separators and
/// handles). Data stays guarded by the tensors' own CRCs: a `.bin` that reads must hold the bytes
/// of a tensor (or slice) TF wrote.
///
/// Sampled to stay fast in debug builds: every byte of the metaindex and index blocks, and every
/// `STRIDE`-th byte of the data blocks (the bit flipped rotates with the position, so all eight
/// bits are exercised). Each walk of a damaged checkpoint costs 5–20 ms in debug; the full sweep
/// (every bit of every byte of every block: 37,504 variants, ~7 minutes in debug) runs with
/// `TFMOUNT_FULL_SWEEP=1`. It once found 20 flips of the `dtypes/variant` entry's offset/size
/// varints (all_dtypes index bytes 955–959) serving wrong bytes, since fixed by checking variant
/// CRCs (see `variant_tensor_crc_is_checked`); now any such case fails this test.
#[test]
fn hostile_index_flips_past_the_block_crc() {
    const STRIDE: [(&str, usize); 4] = [
        ("tf2_keras/ckpt-1", 4),
        ("all_dtypes/ckpt", 24),
        ("sharded/model.ckpt", 2),
        ("partitioned/model.ckpt", 4),
    ];
    let full = std::env::var_os("TFMOUNT_FULL_SWEEP").is_some();
    let mut report = Vec::new();
    let mut problems = Vec::new();
    let mut unchecked_variant = Vec::new();
    {
        for &(src, json) in HOSTILE_INDEX_FIXTURES {
            let expected = load_json(json);
            let mut shas: HashSet<String> = wants(&expected).into_values().map(|w| w.sha).collect();
            shas.extend(slice_entry_shas(&fixtures().join(src), &expected));
            let judge = Judge::AnyTensor(&shas);
            let tmp = scratch_dir();
            let (prefix, orig) = copy_checkpoint(&fixtures().join(src), tmp.path());
            let stride = STRIDE.iter().find(|s| s.0 == src).map_or(1, |s| s.1);
            let mut t = Tally::default();
            for (n, h) in block_handles(&orig)
                .expect("blocks")
                .into_iter()
                .enumerate()
            {
                // Blocks 0 and 1 are the metaindex and index blocks; the rest hold the entries.
                let step = if full || n < 2 { 1 } else { stride };
                for pos in (h.offset as usize..=(h.offset + h.size) as usize).step_by(step) {
                    let bits: Vec<u8> = if full {
                        (0..8).collect()
                    } else {
                        vec![((pos + pos / 8) % 8) as u8]
                    };
                    for bit in bits {
                        let mut b = orig.clone();
                        b[pos] ^= 1 << bit;
                        fix_block_crc(&mut b, h);
                        put_index(&prefix, &b);
                        let what = format!("{src}: flip byte {pos} bit {bit} (block CRC fixed)");
                        try_variant(&prefix, &judge, &mut t, &what, &mut unchecked_variant);
                    }
                }
            }
            report.push(format!(
                "{src}: {} variants with fixed block CRCs, Fs::new Ok {} / Err {}, .bin reads Ok {} / Err {}",
                t.variants, t.open_ok, t.open_err, t.bin_ok, t.bin_err
            ));
            problems.extend(t.problems);
        }
    }
    for r in &report {
        eprintln!("{r}");
    }
    // Variant tensors are CRC-checked like every other dtype: no wrong bytes may get through.
    assert!(
        unchecked_variant.is_empty(),
        "variant tensors served wrong bytes: {unchecked_variant:?}"
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Regression (found by the full sweep): an index whose entry for a variant tensor points at the
/// wrong bytes (a single flipped bit in the offset varint, e.g. all_dtypes/ckpt.index byte 955
/// bit 3 with the block CRC recomputed) must give EIO with `verify_crc` on, not wrong bytes.
/// TensorFlow's stored CRC is checkable from the stored bytes: per element, CRC-32C over the length as a little-endian u64,
/// the element's bytes, and the 4-byte length checksum that follows them (TF's
/// `WriteVariantTensor`), which this test first confirms on the fixture.
#[test]
fn variant_tensor_crc_is_checked() {
    let expected = load_json("expected/all_dtypes.json");
    let rec = &expected["unreadable_entries"][0];
    assert_eq!(rec["key"], "dtypes/variant");
    let st = &rec["stored"];
    let (off, size) = (
        st["offset"].as_u64().expect("offset") as usize,
        st["size"].as_u64().expect("size") as usize,
    );
    let data = std::fs::read(fixtures().join("all_dtypes/ckpt.data-00000-of-00001")).expect("data");
    let stored = &data[off..off + size];
    // TF's CRC of a variant tensor, recomputed from the stored bytes (one element: shape []).
    let (len, used) = tfmount::parse::varint::decode_u64(stored).expect("length");
    let elem = &stored[used..used + len as usize];
    let len_crc = &stored[used + len as usize..used + len as usize + 4];
    assert_eq!(
        used + len as usize + 4,
        size,
        "one element fills the tensor"
    );
    let mut crc = crc32c::crc32c(&len.to_le_bytes());
    crc = crc32c::crc32c_append(crc, elem);
    crc = crc32c::crc32c_append(crc, len_crc);
    assert_eq!(
        u64::from(mask_crc(crc)),
        st["crc32c_masked"].as_u64().expect("crc"),
        "TF's variant CRC is checkable"
    );

    // An index whose variant entry points 8 bytes further into the shard.
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, orig) = copy_checkpoint(&fixtures().join("all_dtypes/ckpt"), tmp.path());
    let mut entries = table_entries(&orig).expect("entries");
    for (k, v) in entries.iter_mut() {
        if k == b"dtypes/variant" {
            let mut e = BundleEntryProto::decode(&v[..]).expect("entry");
            e.offset += 8;
            *v = e.encode_to_vec();
        }
    }
    put_index(&prefix, &table_of_blocks(&[&entries]));
    let fs = open_prefix(&prefix, true);
    let a = lookup_path(&fs, b"variables/dtypes/variant.bin").expect("variant.bin");
    match read_all(&fs, a.ino, 4096, usize::MAX) {
        Err(e) => assert_eq!(e.errno(), libc::EIO),
        Ok(b) => {
            assert_eq!(
                b,
                data[off + 8..off + 8 + size],
                "served from the damaged offset"
            );
            panic!(
                "variant.bin served {} wrong bytes with verify_crc on (sha {} != TF's {})",
                b.len(),
                sha256_hex(&b),
                st["sha256"]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Hostile data files
// ---------------------------------------------------------------------------------------------

fn open_prefix(prefix: &Path, verify_crc: bool) -> Fs {
    let opts = Options {
        verify_crc,
        ..common::views_listed()
    };
    Fs::new(&Probed::prefix(prefix.to_path_buf()), &opts).expect("Fs::new")
}

fn bin_path(w: &Want) -> Vec<u8> {
    let mut p = b"variables/".to_vec();
    p.extend_from_slice(&w.stem);
    p.extend_from_slice(b".bin");
    p
}

fn read_bin(fs: &Fs, w: &Want) -> Result<Vec<u8>, FsError> {
    let a = lookup_path(fs, &bin_path(w))?;
    read_all(fs, a.ino, 4096, usize::MAX)
}

/// (shard, offset, size) by key.
type Locations = BTreeMap<Vec<u8>, (u32, u64, u64)>;
/// The shards holding a sliced tensor's slices, by key.
type SliceShards = BTreeMap<Vec<u8>, BTreeSet<u32>>;

/// Stored location (shard, offset, size) of each contiguous tensor, and the shards of each
/// sliced tensor's slices.
fn stored_locations(expected: &Value) -> (Locations, SliceShards) {
    let mut contiguous = BTreeMap::new();
    let recs = expected["tensors"].as_array().expect("tensors").iter();
    for rec in recs.chain(
        expected["unreadable_entries"]
            .as_array()
            .into_iter()
            .flatten(),
    ) {
        let s = &rec["stored"];
        if let (Some(shard), Some(off), Some(size)) = (
            s["shard_id"].as_u64(),
            s["offset"].as_u64(),
            s["size"].as_u64(),
        ) {
            contiguous.insert(common::rec_key(rec), (shard as u32, off, size));
        }
    }
    let mut sliced: BTreeMap<Vec<u8>, BTreeSet<u32>> = BTreeMap::new();
    for s in expected["slice_entries"].as_array().into_iter().flatten() {
        let of = s["of"].as_str().expect("of").as_bytes().to_vec();
        sliced
            .entry(of)
            .or_default()
            .insert(s["stored"]["shard_id"].as_u64().expect("shard") as u32);
    }
    (contiguous, sliced)
}

#[test]
fn hostile_data_flipped_byte_truncated_shard_missing_shard() {
    let expected = load_json("expected/all_dtypes.json");
    let want = wants(&expected);
    let (loc, _) = stored_locations(&expected);
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = copy_checkpoint(&fixtures().join("all_dtypes/ckpt"), tmp.path());
    let data = data_path(&prefix, 0, 1);
    let orig = std::fs::read(&data).expect("data");

    // A flipped byte inside one tensor: that tensor fails with EIO, every other one reads.
    for victim in [&b"dtypes/float32"[..], b"strings/binary", b"rank4/int16"] {
        let (_, off, size) = loc[victim];
        let at = (off + size / 2) as usize;
        let mut bad = orig.clone();
        bad[at] ^= 0x10;
        std::fs::write(&data, &bad).expect("write");
        let fs = open_prefix(&prefix, true);
        for (key, w) in &want {
            let r = read_bin(&fs, w);
            if key == victim {
                let e = r.expect_err("flipped tensor must fail");
                assert_eq!(e.errno(), libc::EIO, "{}: {e}", show(key));
                assert!(matches!(e, FsError::Corrupt { .. }), "{e:?}");
                // And keeps failing (the outcome is remembered, not re-checked into success).
                assert_eq!(read_bin(&fs, w).expect_err("again").errno(), libc::EIO);
                let mut shape = bin_path(w);
                shape.truncate(shape.len() - 4);
                shape.extend_from_slice(b".shape");
                assert!(
                    lookup_path(&fs, &shape).is_ok(),
                    ".shape of a damaged tensor is still there"
                );
            } else {
                let b = r.unwrap_or_else(|e| {
                    panic!("{} after damaging {}: {e}", show(key), show(victim))
                });
                assert_eq!(sha256_hex(&b), w.sha, "{}", show(key));
            }
        }
        drop(fs);
        // Without CRC checks the damaged tensor reads, damage included.
        let fs = open_prefix(&prefix, false);
        let w = &want[victim];
        let got = read_bin(&fs, w).expect("read without CRC");
        if w.dtype != "string" {
            assert_eq!(
                got,
                bad[off as usize..(off + size) as usize],
                "{}",
                show(victim)
            );
            assert_ne!(sha256_hex(&got), w.sha);
        } else {
            // The flip lands in the strings' bytes (past the varint lengths): same length.
            assert_eq!(got.len() as u64, w.len);
            assert_ne!(sha256_hex(&got), w.sha);
        }
        drop(fs);
    }
    std::fs::write(&data, &orig).expect("restore");

    // A truncated shard: tensors past the end fail with EIO, the rest read.
    for cut in [0usize, 1, 700, 1500, orig.len() - 1] {
        std::fs::write(&data, &orig[..cut]).expect("truncate");
        let fs = open_prefix(&prefix, true);
        let mut failed = 0;
        for (key, w) in &want {
            let (_, off, size) = loc[key];
            let r = read_bin(&fs, w);
            if off + size > cut as u64 {
                let e = r.expect_err(&format!("{} ends at {} past {cut}", show(key), off + size));
                assert_eq!(e.errno(), libc::EIO);
                failed += 1;
            } else if w.dtype != "variant" || cut > 0 {
                let b = r.unwrap_or_else(|e| {
                    panic!(
                        "{} (ends at {}) with the shard cut to {cut}: {e}",
                        show(key),
                        off + size
                    )
                });
                assert_eq!(sha256_hex(&b), w.sha, "{}", show(key));
            }
        }
        assert!(failed > 0 || cut == orig.len());
    }
    std::fs::write(&data, &orig).expect("restore");

    // A missing data shard of a 3-shard checkpoint: the mount opens, tensors in the other shards
    // read, those in the missing one (or with a slice in it) fail with EIO.
    let expected = load_json("expected/sharded.json");
    let want = wants(&expected);
    let (loc, sliced) = stored_locations(&expected);
    for missing in 0..3u32 {
        let tmp = tempfile::tempdir().expect("tmp");
        let (prefix, _) = copy_checkpoint(&fixtures().join("sharded/model.ckpt"), tmp.path());
        std::fs::remove_file(data_path(&prefix, missing, 3)).expect("rm shard");
        let fs = open_prefix(&prefix, true);
        let (mut ok, mut eio) = (0, 0);
        for (key, w) in &want {
            let in_missing = match loc.get(key) {
                Some(&(shard, ..)) => shard == missing,
                None => sliced[key].contains(&missing),
            };
            match read_bin(&fs, w) {
                Ok(b) => {
                    assert!(
                        !in_missing,
                        "{} read from missing shard {missing}",
                        show(key)
                    );
                    assert_eq!(sha256_hex(&b), w.sha, "{}", show(key));
                    ok += 1;
                }
                Err(e) => {
                    assert!(in_missing, "{} (not in shard {missing}): {e}", show(key));
                    assert_eq!(e.errno(), libc::EIO);
                    eio += 1;
                }
            }
        }
        assert!(ok > 0 && eio > 0, "shard {missing}: {ok} ok, {eio} eio");
        // Its metadata is still shown.
        let _ = walk_strict(&fs);
    }
}

// ---------------------------------------------------------------------------------------------
// Crafted indexes: absurd entries in front of the whole core (tables from `tfmount::testkit::writer`)
// ---------------------------------------------------------------------------------------------

fn entry(dtype: i32, dims: &[i64], offset: i64, size: i64, crc: u32) -> Vec<u8> {
    raw_entry(dtype, dims, offset, size, crc).encode_to_vec()
}

/// Absurd entries in an otherwise valid index: the mount opens, lists them, and reading them
/// fails with EIO (or they are not shown); the good tensor next to them reads.
#[test]
fn crafted_index_entries_fail_reads_not_the_mount() {
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("crafted");
    let data: Vec<u8> = (0..64u8).collect();
    std::fs::write(data_path(&prefix, 0, 1), &data).expect("data");
    let crc = |a: usize, b: usize| mask_crc(crc32c::crc32c(&data[a..b]));
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (Vec::new(), CheckpointWriter::header_bytes(1)),
        (b"good".to_vec(), entry(1, &[2], 8, 8, crc(8, 16))),
        (b"bad/crc".to_vec(), entry(1, &[2], 8, 8, crc(8, 16) ^ 1)),
        (
            b"bad/unknown_dtype".to_vec(),
            entry(99, &[3], 0, 12, crc(0, 12)),
        ),
        (
            b"bad/dtype_1000".to_vec(),
            entry(1000, &[3], 0, 12, crc(0, 12)),
        ),
        (b"bad/resource".to_vec(), entry(20, &[], 0, 4, crc(0, 4))),
        (
            b"bad/invalid_dtype".to_vec(),
            entry(0, &[], 0, 0, crc(0, 0)),
        ),
        (
            b"bad/huge_offset".to_vec(),
            entry(1, &[1], i64::MAX - 4, 4, 0),
        ),
        (b"bad/past_end".to_vec(), entry(1, &[2], 60, 8, 0)),
        (b"bad/negative_dim".to_vec(), entry(1, &[-3], 0, 12, 0)),
        (
            b"bad/max_dims".to_vec(),
            entry(1, &[i64::MAX, i64::MAX], 0, 4, 0),
        ),
        (b"bad/rank300".to_vec(), entry(1, &[1; 300], 0, 4, 0)),
        (
            b"bad/shard7".to_vec(),
            BundleEntryProto {
                shard_id: 7,
                ..raw_entry(1, &[2], 0, 8, crc(0, 8))
            }
            .encode_to_vec(),
        ),
        (
            b"bad/string_garbage".to_vec(),
            entry(7, &[3], 0, 20, crc(0, 20)),
        ),
        (b"bad/variant_past_end".to_vec(), entry(21, &[], 40, 100, 0)),
        (b"bad/not_a_proto".to_vec(), b"\xff\xff\xff".to_vec()),
    ];
    // A partitioned tensor whose slices are outside its shape, one whose slice entry is missing,
    // and one whose slice entry has the wrong shape.
    let sliced = |dims: &[i64], ext: Vec<TensorSliceProto>| {
        BundleEntryProto {
            dtype: 1,
            shape: Some(raw_shape_proto(dims)),
            slices: ext,
            ..Default::default()
        }
        .encode_to_vec()
    };
    entries.push((
        b"bad/slice_outside".to_vec(),
        sliced(&[4], vec![raw_slice_proto(&[(2, Some(5))])]),
    ));
    entries.push((
        b"bad/slice_missing".to_vec(),
        sliced(
            &[4],
            vec![
                raw_slice_proto(&[(0, Some(2))]),
                raw_slice_proto(&[(2, Some(2))]),
            ],
        ),
    ));
    entries.push((
        slice_key::encode(
            b"bad/slice_missing",
            &[Extent {
                start: 0,
                length: 2,
            }],
        ),
        entry(1, &[2], 0, 8, crc(0, 8)),
    ));
    entries.push((
        b"bad/slice_shape".to_vec(),
        sliced(&[4], vec![raw_slice_proto(&[(0, Some(4))])]),
    ));
    entries.push((
        slice_key::encode(
            b"bad/slice_shape",
            &[Extent {
                start: 0,
                length: 4,
            }],
        ),
        entry(1, &[2, 2], 0, 16, crc(0, 16)),
    ));
    entries.push((
        b"bad/slice_overlap".to_vec(),
        sliced(
            &[4],
            vec![
                raw_slice_proto(&[(0, Some(3))]),
                raw_slice_proto(&[(1, Some(3))]),
            ],
        ),
    ));
    // A key nested deeper than inode numbers can encode, and a very long component.
    let deep: Vec<u8> = std::iter::repeat_n(&b"d/"[..], 140)
        .flatten()
        .copied()
        .chain(*b"leaf")
        .collect();
    entries.push((deep.clone(), entry(1, &[2], 8, 8, crc(8, 16))));
    let long: Vec<u8> = std::iter::repeat_n(b'%', 600).collect();
    entries.push((long.clone(), entry(1, &[2], 8, 8, crc(8, 16))));
    entries.sort();
    put_index(&prefix, &table_of_blocks(&[&entries]));

    let fs = open_prefix(&prefix, true);
    let vars = fs.lookup(ROOT, b"variables").expect("variables");
    let good = fs.lookup(vars.ino, b"good.bin").expect("good");
    assert_eq!(good.size, 8);
    assert_eq!(
        read_all(&fs, good.ino, 3, usize::MAX).expect("good"),
        data[8..16]
    );
    let bad = fs.lookup(vars.ino, b"bad").expect("bad dir");
    let names: Vec<Vec<u8>> = list(&fs, bad.ino)
        .expect("readdir bad")
        .into_iter()
        .map(|e| e.name)
        .collect();
    let mut stems = BTreeSet::new();
    for n in &names {
        let Some(s) = kind_of(n) else { continue };
        let stem = &n[..n.len() - s.len()];
        stems.insert(stem.to_vec());
        let a = fs
            .lookup(bad.ino, n)
            .unwrap_or_else(|e| panic!("{}: {e}", show(n)));
        let r = read_all(&fs, a.ino, 4096, 1 << 20);
        if s == ".bin" {
            let e = r.expect_err(&format!("{} must not read", show(n)));
            assert_eq!(e.errno(), libc::EIO, "{}: {e}", show(n));
        }
    }
    for want in [
        "crc",
        "unknown_dtype",
        "dtype_1000",
        "resource",
        "invalid_dtype",
        "huge_offset",
        "past_end",
        "negative_dim",
        "max_dims",
        "rank300",
        "shard7",
        "string_garbage",
        "variant_past_end",
        "not_a_proto",
        "slice_outside",
        "slice_missing",
        "slice_shape",
        "slice_overlap",
    ] {
        assert!(
            stems.contains(want.as_bytes()),
            "bad/{want} not listed: {:?}",
            names.iter().map(|n| show(n)).collect::<Vec<_>>()
        );
    }
    // Metadata files of a tensor whose entry parses still answer.
    let dt = fs
        .lookup(bad.ino, b"unknown_dtype.dtype")
        .expect("dtype file");
    assert_eq!(
        read_all(&fs, dt.ino, 64, 64).expect("dtype"),
        b"unknown_99\n"
    );
    let dt = fs.lookup(bad.ino, b"dtype_1000.dtype").expect("dtype file");
    assert_eq!(
        read_all(&fs, dt.ino, 64, 64).expect("dtype"),
        b"unknown_1000\n"
    );
    assert!(fs.lookup(bad.ino, b"unknown_dtype.npy").is_err());
    // An entry that does not parse: its .shape read fails with EIO, not a panic.
    let sh = fs
        .lookup(bad.ino, b"negative_dim.shape")
        .expect("shape file");
    assert_eq!(
        fs.read(sh.ino, 0, 64).err().map(|e| e.errno()),
        Some(libc::EIO)
    );
    // The deep key: reachable down to the deepest encodable directory, never a panic.
    let mut ino = vars.ino;
    let mut depth = 0;
    while let Ok(a) = fs.lookup(ino, b"d") {
        ino = a.ino;
        depth += 1;
        let _ = list(&fs, ino);
    }
    assert!(depth >= 100, "only {depth} levels reachable");
    // The long component: one hashed name, which resolves back to the key.
    let hashed: Vec<_> = list(&fs, vars.ino)
        .expect("readdir")
        .into_iter()
        .filter(|e| e.name.windows(2).any(|w| w == b"%#"))
        .collect();
    assert_eq!(hashed.len(), 4, "four files of the long key");
    for e in hashed {
        assert!(e.name.len() <= 255);
        let a = fs.lookup(vars.ino, &e.name).expect("hashed lookup");
        assert_eq!(fs.getxattr(a.ino, KEY_XATTR.as_bytes()).expect("key"), long);
    }
    // And the whole tree survives the generic exercise: the only tensors that read are `good` and
    // the long key, both holding bytes 8..16 (the deep key's leaf, 141 levels down, is past the
    // deepest directory an inode number can encode and is not shown).
    let mut t = Tally::default();
    let shas = HashSet::from([sha256_hex(&data[8..16])]);
    let mut unchecked = Vec::new();
    exercise(
        &fs,
        &Judge::AnyTensor(&shas),
        &mut t,
        "crafted",
        &mut unchecked,
    );
    assert!(
        t.problems.is_empty() && unchecked.is_empty(),
        "{:?} {unchecked:?}",
        t.problems
    );
    assert_eq!(t.bin_ok, 2, "{t:?}");
}

// ---------------------------------------------------------------------------------------------
// 6. The checkpoint state file
// ---------------------------------------------------------------------------------------------

#[test]
fn checkpoint_state_file_resolution_and_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    for name in ["model.ckpt-2", "model.ckpt-3"] {
        copy_checkpoint(&fixtures().join("tf1_adam").join(name), dir);
    }
    // Absolute paths from the machine that wrote them, plus one that no longer exists anywhere.
    std::fs::write(
        dir.join("checkpoint"),
        "model_checkpoint_path: \"/old/machine/run7/model.ckpt-3\"\n\
         all_model_checkpoint_paths: \"/old/machine/run7/model.ckpt-1\"\n\
         all_model_checkpoint_paths: \"/old/machine/run7/model.ckpt-2\"\n\
         all_model_checkpoint_paths: \"/old/machine/run7/model.ckpt-3\"\n",
    )
    .expect("write state");
    let probed = probe(dir).expect("probe");
    assert_eq!(
        probed,
        Probed::CheckpointDir {
            dir: dir.to_path_buf(),
            checkpoints: vec![
                ("model.ckpt-2".to_string(), dir.join("model.ckpt-2")),
                ("model.ckpt-3".to_string(), dir.join("model.ckpt-3")),
            ],
            latest: Some("model.ckpt-3".to_string()),
        }
    );
    let fs = Fs::new(&probed, &common::views_listed()).expect("fs");
    let latest = fs.lookup(ROOT, b"latest").expect("latest");
    assert_eq!(latest.kind, Kind::Symlink);
    assert_eq!(fs.readlink(latest.ino).expect("readlink"), b"model.ckpt-3");
    assert!(fs.lookup(ROOT, b"model.ckpt-1").is_err());
    let want = wants(&load_json("expected/tf1_adam.model.ckpt-2.json"));
    for w in want.values() {
        let mut p = b"model.ckpt-2/".to_vec();
        p.extend_from_slice(&bin_path(w));
        let a = lookup_path(&fs, &p).expect("tensor");
        assert_eq!(
            sha256_hex(&read_all(&fs, a.ino, 4096, usize::MAX).expect("read")),
            w.sha
        );
    }
    drop(fs);

    // The latest checkpoint listed but missing: no `latest`, the others still shown.
    std::fs::write(
        dir.join("checkpoint"),
        "model_checkpoint_path: \"/old/model.ckpt-9\"\nall_model_checkpoint_paths: \"model.ckpt-2\"\n",
    )
    .expect("write state");
    match probe(dir).expect("probe") {
        Probed::CheckpointDir {
            checkpoints,
            latest,
            ..
        } => {
            assert_eq!(
                checkpoints,
                vec![("model.ckpt-2".to_string(), dir.join("model.ckpt-2"))]
            );
            assert_eq!(latest, None);
        }
        other => panic!("{other:?}"),
    }

    // Garbage and empty-handed state files: an error that names the file.
    let state = dir.join("checkpoint");
    let state_name = state.display().to_string();
    for garbage in [
        &b"model_checkpoint_path: 12 garbage {"[..],
        b"no_such_field: \"x\"\n",
        b"\xff\xfe\x00binary",
        b"model_checkpoint_path: \"/nowhere/model.ckpt-1\"\n",
        b"",
    ] {
        std::fs::write(&state, garbage).expect("write state");
        let e = probe(dir).expect_err(&format!("{garbage:?} accepted"));
        let msg = e.to_string();
        assert!(
            msg.contains(&state_name),
            "{garbage:?}: message does not name the file: {msg}"
        );
    }
    // A directory whose state file is a directory falls back to the *.index files.
    std::fs::remove_file(&state).expect("rm");
    std::fs::create_dir(&state).expect("mkdir");
    match probe(dir).expect("probe") {
        Probed::CheckpointDir {
            checkpoints,
            latest,
            ..
        } => {
            assert_eq!(checkpoints.len(), 2);
            assert_eq!(latest, None);
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Source files changed in place while open (run in a child process: a fault would kill it)
// ---------------------------------------------------------------------------------------------

/// Runs this test binary again with only `child_process_scenarios` selected and
/// `TFMOUNT_CORE_CHILD=scenario`; returns (exit status, stdout + stderr).
fn run_child(scenario: &str) -> (std::process::ExitStatus, String) {
    // The test's name in this binary: its module path without the crate's name.
    let test = format!(
        "{}::child_process_scenarios",
        module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, m)| m)
    );
    let out = std::process::Command::new(std::env::current_exe().expect("current exe"))
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env("TFMOUNT_CORE_CHILD", scenario)
        .output()
        .expect("run child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

fn truncate_in_place(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(len)
        .expect("truncate");
}

/// Entry point of the child processes; does nothing in a normal run.
#[test]
fn child_process_scenarios() {
    let Some(scenario) = std::env::var_os("TFMOUNT_CORE_CHILD") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    match scenario.to_str() {
        Some("data") => {
            // A data shard truncated in place after every tensor was read (and CRC-checked) once:
            // the file changed under the mount, so every read from it fails with EIO, also of
            // tensors wholly before the cut (nothing says their bytes are still the ones checked).
            let expected = load_json("expected/all_dtypes.json");
            let want = wants(&expected);
            let (prefix, _) = copy_checkpoint(&fixtures().join("all_dtypes/ckpt"), tmp.path());
            let fs = open_prefix(&prefix, true);
            for w in want.values() {
                assert_eq!(sha256_hex(&read_bin(&fs, w).expect("read")), w.sha);
            }
            truncate_in_place(&data_path(&prefix, 0, 1), 700);
            for (key, w) in &want {
                if w.len == 0 {
                    continue; // nothing to read
                }
                let e = read_bin(&fs, w).expect_err(&format!("{} read after the cut", show(key)));
                assert_eq!(e.errno(), libc::EIO, "{}: {e}", show(key));
            }
        }
        Some("index") => {
            // The index truncated in place while open. Each entry is in its own data block, so
            // blocks are read on demand after the truncation (as for any large index whose
            // blocks are not all in the block cache).
            let (prefix, orig) = copy_checkpoint(&fixtures().join("all_dtypes/ckpt"), tmp.path());
            let entries = table_entries(&orig).expect("entries");
            put_index(
                &prefix,
                &table_of_blocks(&entries.chunks(1).collect::<Vec<_>>()),
            );
            let fs = open_prefix(&prefix, true);
            truncate_in_place(&index_path(&prefix), 0);
            println!("truncated");
            let r = lookup_path(&fs, b"variables/dtypes/int32.bin").map(|a| a.ino);
            println!("lookup after truncation: {r:?}");
            assert_eq!(r.err().map(|e| e.errno()), Some(libc::EIO));
        }
        other => panic!("unknown scenario {other:?}"),
    }
    println!("survived");
}

#[test]
fn data_shard_truncated_in_place_while_open() {
    let (status, out) = run_child("data");
    assert!(
        status.success() && out.contains("survived"),
        "{status}: {out}"
    );
}

/// An index truncated in place while open: the next read of a block that is not in the block
/// cache fails with EIO. (It once killed the process with SIGBUS: blocks were read from a memory
/// map of the index. Source files are now read with `pread` and never mapped.)
#[test]
fn index_truncated_in_place_while_open() {
    let (status, out) = run_child("index");
    assert!(
        status.success() && out.contains("survived"),
        "child died: {status}: {out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Mount work independent of the number of tensors
// ---------------------------------------------------------------------------------------------

/// The local store, counting the bytes read from each file through it.
#[derive(Default)]
struct CountingStore {
    read: std::sync::Arc<std::sync::Mutex<BTreeMap<PathBuf, u64>>>,
}

struct CountedFile {
    inner: std::sync::Arc<dyn tfmount::source::bytes::ByteSource>,
    read: std::sync::Arc<std::sync::Mutex<BTreeMap<PathBuf, u64>>>,
}

impl tfmount::parse::ReadAt for CountedFile {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> tfmount::parse::Result<()> {
        *self
            .read
            .lock()
            .unwrap()
            .entry(self.inner.name().to_path_buf())
            .or_default() += buf.len() as u64;
        self.inner.read_exact_at(buf, offset)
    }
}

impl tfmount::source::bytes::ByteSource for CountedFile {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn meta(&self) -> tfmount::source::bytes::FileMeta {
        self.inner.meta()
    }
    fn changed(&self) -> bool {
        self.inner.changed()
    }
}

impl tfmount::source::bytes::Store for CountingStore {
    fn kind(&self, path: &Path) -> Option<tfmount::source::bytes::EntryKind> {
        tfmount::source::local::LocalStore.kind(path)
    }
    fn list(
        &self,
        dir: &Path,
    ) -> std::io::Result<Vec<(std::ffi::OsString, tfmount::source::bytes::EntryKind)>> {
        tfmount::source::local::LocalStore.list(dir)
    }
    fn open(
        &self,
        path: &Path,
    ) -> std::io::Result<std::sync::Arc<dyn tfmount::source::bytes::ByteSource>> {
        Ok(std::sync::Arc::new(CountedFile {
            inner: tfmount::source::local::LocalStore.open(path)?,
            read: self.read.clone(),
        }))
    }
    fn meta(&self, path: &Path) -> std::io::Result<tfmount::source::bytes::FileMeta> {
        tfmount::source::local::LocalStore.meta(path)
    }
}

/// A TF2 checkpoint of `n` variables (object paths `layer_<i>/kernel`), all named `Variable`
/// (unnamed `tf.Variable`s) or each its own name, with its object graph.
fn tf2_checkpoint(dir: &Path, n: usize, identical: bool) -> PathBuf {
    let prefix = dir.join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let mut vars = Vec::new();
    for i in 0..n {
        let path = format!("layer_{i:06}/kernel");
        let full = if identical {
            "Variable".to_string()
        } else {
            path.clone()
        };
        let key = format!("{path}{}", tfmount::testkit::writer::VARIABLE_VALUE_SUFFIX);
        w.add(
            key.as_bytes(),
            tfmount::parse::dtype::DType(1),
            &[2],
            &(i as f32).to_le_bytes().repeat(2),
            0,
        )
        .expect("add");
        vars.push((path, full));
    }
    w.add_object_graph(&tfmount::testkit::writer::object_graph(&vars))
        .expect("object graph");
    w.finish().expect("finish");
    prefix
}

/// Mounting a TF2 checkpoint of 20,000 variables and `stat`-ing one file's sidecar reads none
/// of its data file (where the object graph is) and a few of its index blocks: the names
/// `names/` and `weights.safetensors` show are made when first used, not at mount. Then
/// `names/` works: both names of a variable lead to its file. (Issue 25: uniquify of 20k
/// identical names at mount took 20-40 s.)
#[test]
fn mount_reads_neither_the_object_graph_nor_the_whole_index() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let prefix = tf2_checkpoint(tmp.path(), 20_000, true);
    let (index, data) = (index_path(&prefix), data_path(&prefix, 0, 1));
    let index_len = std::fs::metadata(&index).expect("index").len();
    let store = std::sync::Arc::new(CountingStore::default());
    let read = store.read.clone();
    let probed = tfmount::probe::probe_in(&*store, &prefix).expect("probe");
    let fs = Fs::with_store(store, &probed, &common::views_listed()).expect("mount");
    let a = lookup_path(
        &fs,
        b"variables/layer_012345/kernel/.ATTRIBUTES/VARIABLE_VALUE.shape",
    )
    .expect("stat");
    assert_eq!(a.size, 2, "the .shape of a [2] tensor is \"2\\n\"");
    let names = lookup_path(&fs, b"names").expect("names/ is there, not made yet");
    assert_eq!(names.kind, Kind::Dir);
    let counts = read.lock().unwrap().clone();
    let of = |p: &Path| counts.get(p).copied().unwrap_or(0);
    assert_eq!(of(&data), 0, "data file bytes read at mount: {counts:?}");
    // The footer, the index block and at most two data blocks (TF writes 256 KiB blocks): the
    // index of 20,000 entries is several times that.
    assert!(
        index_len > 4 * 262_144,
        "the index ({index_len} bytes) must be several blocks for this to mean anything"
    );
    assert!(
        of(&index) < 3 * 262_144,
        "index bytes read at mount + one stat: {} of {index_len}",
        of(&index)
    );
    // names/ made on first use: the object path and the uniquified variable name.
    let link = lookup_path(&fs, b"names/layer_012345/kernel.bin").expect("object path");
    assert_eq!(
        fs.readlink(link.ino).expect("readlink"),
        b"../../variables/layer_012345/kernel/.ATTRIBUTES/VARIABLE_VALUE.bin"
    );
    let link = lookup_path(&fs, b"names/Variable_12345.npy").expect("variable name");
    assert_eq!(
        fs.readlink(link.ino).expect("readlink"),
        b"../variables/layer_012345/kernel/.ATTRIBUTES/VARIABLE_VALUE.npy"
    );
    assert!(
        read.lock().unwrap().get(&data).copied().unwrap_or(0) > 0,
        "names/ read the object graph when first used"
    );
}
