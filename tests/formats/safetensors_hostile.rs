//! safetensors sources damaged and made up, opened through the filesystem core (`probe` + `Fs`,
//! no kernel).
//!
//! Made-up files, one per rule of the format (each refused in words naming the file, or, for a
//! file shorter or longer than its header says, opened with the tensors past the end failing):
//! a truncated header length, a header length past the end of the file, a huge header length
//! (`u64::MAX`, 99,999,999 and 100,000,001 with a file of a few bytes: nothing allocated by the
//! claim), offsets past the end, overlapping tensors, a hole, begin > end, a size that is not
//! shape × dtype, JSON that is not JSON or not an object, a key given twice; an index naming a
//! missing shard, or a tensor its shard does not hold.
//!
//! A sweep: every truncation of the first 600 bytes (then at a stride) and seeded single-bit
//! flips of `all_dtypes.safetensors` and of a shard of `sharded/`: nothing panics, no single
//! allocation exceeds [`MAX_ALLOCATION`] (the files are 2 KB), and every `.bin` that reads is
//! the damaged file's own bytes at the tensor's `user.tfmount.offset`, of its header's size.

use crate::common;

use std::path::Path;

use crate::common::tracking_alloc::largest_allocation;
use common::hostile::{damages, each_file, key_of, open, read_to_size_in, scratch, Damage, Sweep};
use tfmount::fs::Kind;

/// The largest single allocation one input may cause.
const MAX_ALLOCATION: usize = 16 << 20;
const CUT_ALL: usize = 600;
const CUT_STRIDE: usize = 13;
const FLIPS: usize = 1500;

fn fixtures() -> std::path::PathBuf {
    common::fixtures().join("safetensors")
}

/// A file of header `json` (its length written first) and `data` zero bytes after it.
fn file(json: &str, data: usize) -> Vec<u8> {
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    f.resize(f.len() + data, 0);
    f
}

fn entry(name: &str, dtype: &str, shape: &str, offsets: &str) -> String {
    format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}}}"#)
}

/// A `.bin` read: its bytes, its `user.tfmount.offset` and `user.tfmount.shard_file`, or the error.
type BinRead = Result<(Vec<u8>, Option<u64>, Option<String>), String>;

/// What one input served.
#[derive(Default)]
struct Served {
    opened: Option<Result<(), String>>,
    bins: Vec<(String, BinRead)>,
}

/// Opens `path` as a mount would and reads every file of the tree.
fn serve(path: &Path) -> Served {
    let mut s = Served::default();
    let fs = match open(path) {
        Ok(fs) => fs,
        Err(e) => {
            s.opened = Some(Err(e));
            return s;
        }
    };
    s.opened = Some(Ok(()));
    each_file(&fs, tfmount::fs::ROOT, "", |_, e, p| {
        if e.kind != Kind::File {
            return;
        }
        if p.starts_with("/variables/") && e.name.ends_with(b".bin") {
            let key = key_of(&fs, e.ino, || p.to_string());
            let offset = fs
                .getxattr(e.ino, b"user.tfmount.offset")
                .ok()
                .and_then(|o| String::from_utf8_lossy(&o).trim().parse().ok());
            let shard = fs
                .getxattr(e.ino, b"user.tfmount.shard_file")
                .ok()
                .map(|o| String::from_utf8_lossy(&o).trim().to_string());
            s.bins.push((
                key,
                read_to_size_in(&fs, e.ino, 1 << 12).map(|b| (b, offset, shard)),
            ));
        } else {
            let _ = read_to_size_in(&fs, e.ino, 1 << 12);
            let _ = fs.listxattr(e.ino);
        }
    });
    s
}

/// Writes `bytes` as `name` in a new directory and serves it, measuring the largest allocation.
fn serve_bytes(name: &str, bytes: &[u8]) -> (Served, usize) {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join(name);
    std::fs::write(&p, bytes).expect("write");
    let mut served = None;
    let big = largest_allocation(|| served = Some(serve(&p)));
    (served.expect("served"), big)
}

/// Each made-up file is refused with the words given, naming the file, without a large
/// allocation.
#[test]
fn made_up_headers_are_refused_in_words() {
    let f32x2 = entry("a", "F32", "[2]", "[0,8]");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated header length", vec![16, 0, 0], "too short"),
        (
            "header length past the end",
            {
                let mut b = 1000u64.to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                b
            },
            "past the end of the file",
        ),
        (
            "u64::MAX header length",
            {
                let mut b = u64::MAX.to_le_bytes().to_vec();
                b.extend_from_slice(b"{\"a\":1}");
                b
            },
            "over safetensors' limit",
        ),
        (
            "100,000,001-byte header length",
            {
                let mut b = 100_000_001u64.to_le_bytes().to_vec();
                b.extend_from_slice(b"{\"a\":1}");
                b
            },
            "over safetensors' limit",
        ),
        (
            "99,999,999-byte header length, a small file",
            {
                let mut b = 99_999_999u64.to_le_bytes().to_vec();
                b.extend_from_slice(b"{\"a\":1}");
                b
            },
            "past the end of the file",
        ),
        (
            "overlapping tensors",
            file(
                &format!("{{{f32x2},{}}}", entry("b", "F32", "[2]", "[4,12]")),
                12,
            ),
            "overlap",
        ),
        (
            "a hole",
            file(
                &format!("{{{f32x2},{}}}", entry("b", "F32", "[1]", "[12,16]")),
                16,
            ),
            "holes",
        ),
        (
            "begin > end",
            file(&format!("{{{}}}", entry("a", "F32", "[0]", "[8,0]")), 8),
            "end before they begin",
        ),
        (
            "size is not shape x dtype",
            file(&format!("{{{}}}", entry("a", "F32", "[3]", "[0,8]")), 8),
            "needs 12",
        ),
        (
            "shape overflowing",
            file(
                &format!(
                    "{{{}}}",
                    entry("a", "F64", "[4294967296,4294967296,16]", "[0,8]")
                ),
                8,
            ),
            "overflows",
        ),
        ("bad JSON", file("{\"a\": {\"dtype\": ", 0), "not JSON"),
        ("a JSON list", file("[1, 2, 3]", 0), "not an object"),
        ("a JSON string", file("\"{}\"", 0), "not an object"),
        (
            "a key given twice",
            file(&format!("{{{f32x2},{f32x2}}}"), 8),
            "twice",
        ),
        (
            "an unknown dtype",
            file(&format!("{{{}}}", entry("a", "F33", "[2]", "[0,8]")), 8),
            "F33",
        ),
    ];
    for (what, bytes, words) in cases {
        let (s, big) = serve_bytes("model.safetensors", &bytes);
        let e = match s.opened {
            Some(Err(e)) => e,
            _ => panic!("{what}: opened"),
        };
        assert!(e.contains(words), "{what}: {e}");
        assert!(
            e.contains("model.safetensors"),
            "{what}: the file is named: {e}"
        );
        assert!(big < 1 << 20, "{what}: an allocation of {big} bytes");
    }
}

/// A file shorter than its header says opens: the tensors within it are served, those past the
/// end fail; one longer than that too (safetensors refuses it; `verify` reports both).
#[test]
fn offsets_past_the_end_fail_those_tensors_only() {
    let json = format!(
        "{{{},{}}}",
        entry("a", "F32", "[2]", "[0,8]"),
        entry("b", "F32", "[1024]", "[8,4104]")
    );
    let mut bytes = file(&json, 8);
    let n = bytes.len();
    bytes[n - 8..].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let (s, big) = serve_bytes("cut.safetensors", &bytes);
    assert!(matches!(s.opened, Some(Ok(()))));
    assert!(big < 1 << 20);
    let get = |k: &str| {
        s.bins
            .iter()
            .find(|(key, _)| key == k)
            .unwrap_or_else(|| panic!("{k} listed"))
            .1
            .clone()
    };
    assert_eq!(
        get("a").expect("within the file").0,
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    let e = get("b").expect_err("past the end");
    assert!(!e.is_empty());
}

#[test]
fn a_sharded_set_with_a_missing_or_wrong_shard_serves_the_rest() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("m");
    std::fs::create_dir(&d).expect("mkdir");
    for e in std::fs::read_dir(fixtures().join("sharded")).expect("dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), d.join(e.file_name())).expect("copy");
    }
    // The index names a third shard that is not there, and puts a tensor in a shard without it.
    let index = d.join("model.safetensors.index.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index).expect("index")).expect("json");
    v["weight_map"]["ghost.weight"] = "model-00003-of-00003.safetensors".into();
    v["weight_map"]["lost.weight"] = "model-00001-of-00002.safetensors".into();
    std::fs::write(&index, serde_json::to_vec(&v).expect("json")).expect("write");
    let s = serve(&d);
    assert!(matches!(s.opened, Some(Ok(()))));
    assert_eq!(s.bins.len(), 6, "the shards' tensors, and only those");
    assert!(s.bins.iter().all(|(_, r)| r.is_ok()));
    // verify names both: tests/cli/safetensors.rs.
}

#[derive(Default)]
struct Tally {
    sweep: Sweep,
    bins_ok: usize,
    bins_err: usize,
}

/// Serves each damage of `orig` (written at `p`, inside a copy of its set when it is a shard)
/// and checks it: every `.bin` read is the damaged file's bytes at its offset.
fn sweep(what: &str, orig: &[u8], damages: Vec<Damage>, p: &Path, source: &Path) -> Tally {
    let mut t = Tally {
        sweep: Sweep::new(MAX_ALLOCATION),
        ..Tally::default()
    };
    for d in damages {
        let bytes = d.apply(orig);
        std::fs::write(p, &bytes).expect("write");
        let Some(served) = t.sweep.input(&format!("{what} {d:?}"), || serve(source)) else {
            continue;
        };
        t.sweep.opened += usize::from(matches!(served.opened, Some(Ok(()))));
        for (key, r) in served.bins {
            let Ok((b, offset, shard)) = r else {
                t.bins_err += 1;
                continue;
            };
            t.bins_ok += 1;
            // In a sharded set a tensor may be in the other, undamaged shard: its bytes.
            let file = match shard {
                Some(name) if p != source && p.file_name().is_some_and(|n| n != name.as_str()) => {
                    std::fs::read(p.with_file_name(&name))
                        .unwrap_or_else(|e| panic!("the other shard {name:?}: {e}"))
                }
                _ => bytes.clone(),
            };
            let ok = offset.is_some_and(|o| {
                let o = o as usize;
                file.get(o..o + b.len()) == Some(&b[..])
            });
            if !ok {
                t.sweep.wrong.push(format!(
                    "{what} {d:?}: {key}: not the file's bytes at its offset"
                ));
            }
        }
    }
    t
}

#[test]
fn damaged_files_never_panic_nor_serve_wrong_bytes() {
    let tmp = scratch();
    let mut rng = common::Rng::new(0x5afe_7e57);
    // One file.
    let orig = std::fs::read(fixtures().join("all_dtypes.safetensors")).expect("read");
    let p = tmp.path().join("all_dtypes.safetensors");
    let ds = damages(orig.len(), CUT_ALL, CUT_STRIDE, FLIPS, &mut rng);
    let one = sweep("all_dtypes", &orig, ds, &p, &p);
    // A shard of a set.
    let set = tmp.path().join("sharded");
    std::fs::create_dir(&set).expect("mkdir");
    for e in std::fs::read_dir(fixtures().join("sharded")).expect("dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), set.join(e.file_name())).expect("copy");
    }
    let shard = set.join("model-00001-of-00002.safetensors");
    let orig = std::fs::read(&shard).expect("read");
    let ds = damages(orig.len(), CUT_ALL, CUT_STRIDE, FLIPS / 3, &mut rng);
    let two = sweep("sharded", &orig, ds, &shard, &set);
    let mut all = Tally::default();
    for t in [one, two] {
        all.sweep.merge(t.sweep);
        all.bins_ok += t.bins_ok;
        all.bins_err += t.bins_err;
    }
    eprintln!(
        "{}; {} .bin read, {} refused",
        all.sweep.summary(),
        all.bins_ok,
        all.bins_err
    );
    let failures = all.sweep.failures(usize::MAX);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(all.sweep.opened > 0 && all.bins_ok > 0 && all.bins_err > 0);
}
