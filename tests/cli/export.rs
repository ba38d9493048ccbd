//! `tfmount export`, each output read by its own real reader, never by tfmount:
//!
//! - every V2 checkpoint fixture exported and read back by TensorFlow (`tf.train.load_checkpoint`):
//!   the same keys, dtypes, shapes and bytes as TensorFlow reads from the source; numeric ones
//!   exported to `.safetensors` and read by `safetensors`: the same shapes and bytes again;
//! - TF2 surgery against TensorFlow itself (scripts/export_check.py): `--weights-only` restored
//!   with `tf.train.Checkpoint(model=...)` (every object matched, values equal, no optimizer
//!   left in the object graph), a renamed sub-module restored under its new attribute, both;
//! - a SavedModel patched with `--set` and one grafted with `--variables-from` (by key under the
//!   training checkpoint's `model/`, and by `names/`): loaded by `tf.saved_model.load`, its
//!   serving signature computing with the new values; edits its graph cannot follow refused;
//! - a full file system (a 256 KiB tmpfs) and a read-only one (mounted in a namespace of the
//!   test's own): one line in words, nothing left, for a checkpoint, a `.safetensors` file and a
//!   SavedModel's variables;
//! - what is refused leaves nothing at OUT: an existing OUT without `--force`, a damaged source
//!   tensor (named), a read-only directory, an edit the object graph cannot follow; `--dry-run`
//!   writes nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixtures, tfmount, tfmount_ok};
use serde_json::Value;

/// scripts/export_check.py with `args` ([`common::export_check`]).
fn tf_script(args: &[&std::ffi::OsStr]) -> Option<Value> {
    common::export_check("tensorflow, numpy", args)
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The files in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The V2 checkpoints among the fixtures whose keys TensorFlow's Python reader can list
/// (all_dtypes holds keys that are not UTF-8, which it cannot).
fn v2_fixtures() -> Vec<PathBuf> {
    let f = fixtures();
    [
        "tf2_keras/ckpt-1",
        "tf2_slots/ckpt-1",
        "tf1_adam/model.ckpt-3",
        "partitioned/model.ckpt",
        "sharded/model.ckpt",
        "demo_savedmodel/variables/variables",
        "graphs/tf1_meta/model.ckpt",
        "cli/pair/a",
    ]
    .iter()
    .map(|p| f.join(p))
    .collect()
}

#[test]
fn exported_checkpoints_read_by_tensorflow_as_their_sources() {
    let dir = tempdir();
    let mut args: Vec<std::ffi::OsString> = vec!["read".into()];
    let mut pairs = Vec::new();
    for (i, src) in v2_fixtures().iter().enumerate() {
        let out = dir.path().join(format!("x{i}/ckpt"));
        // Small data files: the tensors spread over several.
        tfmount_ok(&[
            "export".as_ref(),
            "--shard-size".as_ref(),
            "1K".as_ref(),
            src.as_os_str(),
            out.as_os_str(),
        ]);
        args.push(src.clone().into());
        args.push(out.clone().into());
        pairs.push((src.clone(), out));
    }
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let Some(read) = tf_script(&refs) else {
        return;
    };
    let mut readable = 0;
    for (src, out) in &pairs {
        let a = &read[src.to_str().unwrap()];
        let b = &read[out.to_str().unwrap()];
        assert!(a.as_object().is_some_and(|m| !m.is_empty()), "{src:?}: {a}");
        let (am, bm) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(
            am.keys().collect::<Vec<_>>(),
            bm.keys().collect::<Vec<_>>(),
            "{src:?}: other keys"
        );
        for (k, av) in am {
            let bv = &bm[k];
            // TensorFlow's Python reader cannot return some tensors of a source (a partitioned
            // float16 or string tensor: ValueError); the export writes them whole, which it
            // reads: their dtypes and shapes are compared, their bytes cannot be (TensorFlow does
            // not read the source's; `diff --exact` would be tfmount judging itself).
            if av[2].as_str().unwrap_or("").starts_with("unreadable") {
                assert_eq!((&av[0], &av[1]), (&bv[0], &bv[1]), "{src:?} {k}");
                assert!(
                    !bv[2].as_str().unwrap_or("").starts_with("unreadable"),
                    "{src:?} {k}: {bv}"
                );
            } else {
                assert_eq!(av, bv, "{src:?} {k}: TensorFlow reads the export otherwise");
            }
        }
        readable += a
            .as_object()
            .unwrap()
            .values()
            .filter(|v| !v[2].as_str().unwrap_or("").starts_with("unreadable"))
            .count();
    }
    assert!(readable > 50, "only {readable} tensors compared by bytes");
}

#[test]
fn tf2_surgery_is_restored_by_tensorflow() {
    let dir = tempdir();
    let train = dir.path().join("train/ckpt");
    let values = dir.path().join("values.json");
    std::fs::create_dir_all(train.parent().unwrap()).unwrap();
    if tf_script(&["write".as_ref(), train.as_os_str(), values.as_os_str()]).is_none() {
        return;
    }
    let out = |n: &str| dir.path().join(n).join("ckpt");
    let run = |extra: &[&str], to: &Path| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        a.extend(extra.iter().map(std::ffi::OsStr::new));
        a.push(train.as_os_str());
        a.push(to.as_os_str());
        String::from_utf8(tfmount_ok(&a)).unwrap()
    };
    let plan = run(&["--weights-only"], &out("w"));
    assert!(plan.contains("D optimizer/"), "{plan}");
    let plan = run(&["--rename", "^model/enc/=model/encoder/"], &out("r"));
    assert!(
        plan.contains("R model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE -> model/encoder/kernel/.ATTRIBUTES/VARIABLE_VALUE"),
        "{plan}"
    );
    run(
        &["--weights-only", "--rename", "^model/enc/=model/encoder/"],
        &out("wr"),
    );
    // Moves to another depth: the encoder into a new module `blocks`, with the optimizer kept
    // (its slots follow the variables they belong to); and out of it again, from there.
    let plan = run(&["--rename", "^model/enc/=model/blocks/enc/"], &out("d"));
    assert!(
        plan.contains("R model/enc/bias/.ATTRIBUTES/VARIABLE_VALUE -> model/blocks/enc/bias/.ATTRIBUTES/VARIABLE_VALUE"),
        "{plan}"
    );
    let mut back: Vec<&std::ffi::OsStr> = vec!["export".as_ref(), "--rename".as_ref()];
    back.push("^model/blocks/enc/=model/enc/".as_ref());
    let (d, u) = (out("d"), out("u"));
    back.extend([d.as_os_str(), u.as_os_str()]);
    tfmount_ok(&back);
    let (w, r, wr) = (out("w"), out("r"), out("wr"));
    let got = tf_script(&[
        "check".as_ref(),
        values.as_os_str(),
        w.as_os_str(),
        "enc".as_ref(),
        r.as_os_str(),
        "encoder".as_ref(),
        wr.as_os_str(),
        "encoder".as_ref(),
        d.as_os_str(),
        "blocks.enc".as_ref(),
        u.as_os_str(),
        "enc".as_ref(),
    ])
    .expect("TensorFlow wrote, so it reads");
    for (p, model_keys) in [
        (&w, "enc"),
        (&r, "encoder"),
        (&wr, "encoder"),
        (&d, "blocks/enc"),
        (&u, "enc"),
    ] {
        let g = &got[p.to_str().unwrap()];
        assert_eq!(g["equal"], true, "{p:?}: {g}");
        let keys = common::checked_keys(g);
        assert!(
            keys.contains(
                &format!("model/{model_keys}/kernel/.ATTRIBUTES/VARIABLE_VALUE").as_str()
            ),
            "{p:?}: {keys:?}"
        );
    }
    // Weights only: no optimizer, no counter, in the keys or the object graph.
    for p in [&w, &wr] {
        let g = &got[p.to_str().unwrap()];
        assert_eq!(g["root"], serde_json::json!(["model"]), "{p:?}: {g}");
        assert_eq!(g["keys"].as_array().unwrap().len(), 5, "{p:?}: {g}");
    }
    // New values from an .npy file, restored by TensorFlow; a tensor of another checkpoint
    // added under a new key; the plan's S lines.
    let npy = dir.path().join("kernel.npy");
    let values2 = dir.path().join("values2.json");
    tf_script(&[
        "setnpy".as_ref(),
        values.as_os_str(),
        npy.as_os_str(),
        values2.as_os_str(),
    ])
    .expect("TensorFlow wrote, so it runs");
    let set = format!(
        "model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE={}",
        npy.display()
    );
    let extra = format!(
        "extra/kernel={}:model/dec/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        train.display()
    );
    let plan = run(
        &["--weights-only", "--set", &set, "--set", &extra],
        &out("s"),
    );
    assert!(
        plan.contains("S model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE (shape [4, 3] float32)")
            && plan.contains("S extra/kernel (shape [3, 2] float32)"),
        "{plan}"
    );
    let s = out("s");
    let got2 = tf_script(&[
        "check".as_ref(),
        values2.as_os_str(),
        s.as_os_str(),
        "enc".as_ref(),
    ])
    .expect("TensorFlow wrote, so it reads");
    let g = &got2[s.to_str().unwrap()];
    assert_eq!(g["equal"], true, "{g}");
    assert!(common::checked_keys(g).contains(&"extra/kernel"), "{g}");
    // The rename alone keeps the optimizer.
    let g = &got[r.to_str().unwrap()];
    assert!(
        g["root"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "optimizer"),
        "{g}"
    );
}

#[test]
fn what_is_refused_leaves_nothing_at_out() {
    let dir = tempdir();
    let src = fixtures().join("tf2_keras/ckpt-1");
    let out = dir.path().join("o/ckpt");
    let export = |extra: &[&str], src: &Path| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        a.extend(extra.iter().map(std::ffi::OsStr::new));
        a.push(src.as_os_str());
        a.push(out.as_os_str());
        tfmount(&a)
    };
    // --dry-run: the plan, nothing written.
    let o = export(&["--dry-run", "--drop", "optimizer/**"], &src);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("D optimizer/_iterations"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("would be written"));
    assert!(names(&dir.path().join("o")).is_empty());
    // Written, then refused over it without --force, replaced with it.
    assert_eq!(export(&[], &src).status.code(), Some(0));
    let first = names(&dir.path().join("o"));
    assert_eq!(first, ["ckpt.data-00000-of-00001", "ckpt.index"]);
    let o = export(&[], &src);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    let o = export(&["--force", "--shard-size", "1K"], &src);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        names(&dir.path().join("o")),
        [
            "ckpt.data-00000-of-00002",
            "ckpt.data-00001-of-00002",
            "ckpt.index"
        ],
        "the old data file goes with the old index"
    );
    // A damaged source tensor: refused, named, nothing at a new OUT, no temporaries.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    for f in ["ckpt-1.index", "ckpt-1.data-00000-of-00001"] {
        std::fs::copy(fixtures().join("tf2_keras").join(f), bad.join(f)).unwrap();
    }
    let data = bad.join("ckpt-1.data-00000-of-00001");
    let mut b = std::fs::read(&data).unwrap();
    b[10] ^= 0x01;
    std::fs::write(&data, b).unwrap();
    let out2 = dir.path().join("o2/ckpt");
    let o = tfmount(&[
        "export".as_ref(),
        bad.join("ckpt-1").as_os_str(),
        out2.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("CRC-32C mismatch")
            && err.contains("never copied")
            && err.lines().count() == 1,
        "{err}"
    );
    assert!(
        names(&dir.path().join("o2")).is_empty(),
        "{:?}",
        names(&dir.path().join("o2"))
    );
    // A read-only directory (not for root, which writes anyway).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let ro = dir.path().join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        let mut p = std::fs::metadata(&ro).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o555);
        std::fs::set_permissions(&ro, p).unwrap();
        let o = tfmount(&[
            "export".as_ref(),
            src.as_os_str(),
            ro.join("ckpt").as_os_str(),
        ]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("permission denied"));
        assert!(names(&ro).is_empty());
    }
    // An edit the object graph cannot follow: a tail changed.
    let out3 = dir.path().join("o3/ckpt");
    let o = tfmount(&[
        "export".as_ref(),
        "--rename".as_ref(),
        "VARIABLE_VALUE$=VALUE".as_ref(),
        src.as_os_str(),
        out3.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not an object move") && err.contains("--no-object-graph"),
        "{err}"
    );
    assert!(names(&dir.path().join("o3")).is_empty());
    // With --no-object-graph it is written, name-keyed.
    let o = tfmount(&[
        "export".as_ref(),
        "--no-object-graph".as_ref(),
        "--rename".as_ref(),
        "VARIABLE_VALUE$=VALUE".as_ref(),
        src.as_os_str(),
        out3.as_os_str(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // An .npy cut short: refused, saying why, before anything is written.
    let npy = dir.path().join("cut.npy");
    let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }";
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&((dict.len() + 1) as u16).to_le_bytes());
    b.extend_from_slice(dict);
    b.push(b'\n');
    b.extend_from_slice(&[0u8; 20]);
    std::fs::write(&npy, &b).unwrap();
    let o = tfmount(&[
        "export".as_ref(),
        "--set".as_ref(),
        format!("x={}", npy.display()).as_ref(),
        src.as_os_str(),
        dir.path().join("o5/ckpt").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cut.npy") && err.contains("its header says"),
        "{err}"
    );
    assert!(names(&dir.path().join("o5")).is_empty());
    // Two keys onto one: refused, naming both.
    let o = tfmount(&[
        "export".as_ref(),
        "--no-object-graph".as_ref(),
        "--rename".as_ref(),
        "/.*=".as_ref(),
        src.as_os_str(),
        dir.path().join("o4/ckpt").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("would both be written as"));
}

/// A killed export leaves OUT whole or absent, never half; its temporaries are removed by the
/// next export into that directory (their process gone), and a live one's are not touched.
#[test]
fn a_killed_export_leaves_out_whole_or_absent() {
    use tfmount::parse::dtype::DType;
    use tfmount::testkit::rng;
    use tfmount::testkit::writer::CheckpointWriter;
    let dir = tempdir();
    let src = dir.path().join("src/ckpt");
    std::fs::create_dir_all(src.parent().unwrap()).unwrap();
    let mut w = CheckpointWriter::new(&src, 1).unwrap();
    let tensor = 4usize << 20;
    for i in 0..16u64 {
        let key = format!("t{i:02}");
        w.add(
            key.as_bytes(),
            DType(1),
            &[1 << 20],
            &rng::bytes(i, tensor),
            0,
        )
        .unwrap();
    }
    w.finish().unwrap();
    let out = dir.path().join("o/ckpt");
    let o_dir = dir.path().join("o");
    let mut killed_before_the_index = 0;
    for delay_ms in [2u64, 10, 30, 80, 200] {
        let _ = std::fs::remove_dir_all(&o_dir);
        let mut child = common::tfmount_command()
            .args(["export".as_ref(), src.as_os_str(), out.as_os_str()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        // SAFETY: kill(2) of the child we started.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        let files = names(&o_dir);
        let index = dir.path().join("o/ckpt.index");
        if index.exists() {
            // Whole: its one data file has every tensor's bytes.
            let data = std::fs::metadata(dir.path().join("o/ckpt.data-00000-of-00001"))
                .expect("the index is there, so is the data file");
            assert_eq!(data.len(), 16 * tensor as u64, "{files:?}");
        } else {
            killed_before_the_index += 1;
            assert!(
                files.iter().all(|f| f.starts_with(".ckpt.tfmount-tmp-")),
                "after {delay_ms} ms: {files:?}"
            );
        }
    }
    assert!(killed_before_the_index > 0, "no kill landed before the end");
    // The next export removes what a dead process left, not what a live one writes.
    std::fs::create_dir_all(&o_dir).unwrap();
    let dead = o_dir.join(".ckpt.tfmount-tmp-999999999.data-0");
    let live = o_dir.join(format!(".ckpt.tfmount-tmp-{}.data-0", std::process::id()));
    std::fs::write(&dead, b"left").unwrap();
    std::fs::write(&live, b"being written").unwrap();
    tfmount_ok(&[
        "export".as_ref(),
        "--force".as_ref(),
        src.as_os_str(),
        out.as_os_str(),
    ]);
    let files = names(&o_dir);
    assert!(!dead.exists(), "{files:?}");
    assert!(live.exists(), "{files:?}");
    assert_eq!(
        files
            .iter()
            .filter(|f| !f.starts_with('.'))
            .collect::<Vec<_>>(),
        ["ckpt.data-00000-of-00001", "ckpt.index"]
    );
}

/// `--to safetensors` (or OUT ending `.safetensors`): read by `safetensors` with the shapes and
/// bytes TensorFlow reads from the source; the object graph left out without complaint; a
/// string tensor refused, naming the `--drop` that leaves it out.
#[test]
fn exported_safetensors_read_by_safetensors_as_tensorflow_reads_the_source() {
    let dir = tempdir();
    let sources = [
        "tf2_keras/ckpt-1",
        "tf2_slots/ckpt-1",
        "tf1_adam/model.ckpt-3",
        "sharded/model.ckpt",
    ];
    let mut read: Vec<std::ffi::OsString> = vec!["read".into()];
    let mut st: Vec<std::ffi::OsString> = vec!["safetensors".into()];
    let mut pairs = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let src = fixtures().join(s);
        let out = dir.path().join(format!("x{i}.safetensors"));
        tfmount_ok(&["export".as_ref(), src.as_os_str(), out.as_os_str()]);
        read.push(src.clone().into());
        st.push(out.clone().into());
        pairs.push((src, out));
    }
    let r: Vec<&std::ffi::OsStr> = read.iter().map(|a| a.as_os_str()).collect();
    let Some(tf) = tf_script(&r) else {
        return;
    };
    let s: Vec<&std::ffi::OsStr> = st.iter().map(|a| a.as_os_str()).collect();
    let Some(safe) = tf_script(&s) else {
        return;
    };
    for (src, out) in &pairs {
        let want = tf[src.to_str().unwrap()].as_object().unwrap();
        let got = &safe[out.to_str().unwrap()];
        let tensors = got["tensors"].as_object().unwrap();
        let keys: Vec<&String> = want
            .keys()
            .filter(|k| *k != "_CHECKPOINTABLE_OBJECT_GRAPH")
            .collect();
        assert_eq!(keys, tensors.keys().collect::<Vec<_>>(), "{src:?}");
        for k in keys {
            assert_eq!(
                (&want[k][1], &want[k][2]),
                (&tensors[k][0], &tensors[k][1]),
                "{src:?} {k}"
            );
        }
        assert_eq!(
            got["metadata"]["tfmount.source"],
            src.to_str().unwrap(),
            "{got}"
        );
    }
    let o = tfmount(&[
        "export".as_ref(),
        "--to".as_ref(),
        "safetensors".as_ref(),
        "--drop".as_ref(),
        "nibbles".as_ref(),
        fixtures().join("partitioned/model.ckpt").as_os_str(),
        dir.path().join("p.st").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("strs: its dtype, string,") && err.contains("--drop 'strs'"),
        "{err}"
    );
    assert!(!dir.path().join("p.st").exists());
}

/// `--cast` against `tf.cast`, bit for bit: float32 and float64 tensors (ties, the largest
/// float16 and past it, subnormals, infinities, NaN, random values) to bfloat16, float16 and
/// float64; an int32 tensor untouched; the plan's `C` lines.
#[test]
fn cast_is_tf_cast_bit_for_bit() {
    let dir = tempdir();
    let src = dir.path().join("src/ckpt");
    std::fs::create_dir_all(src.parent().unwrap()).unwrap();
    if tf_script(&["castsrc".as_ref(), src.as_os_str()]).is_none() {
        return;
    }
    for to in ["bfloat16", "float16", "float64", "float32"] {
        let out = dir.path().join(format!("{to}/ckpt"));
        let plan = String::from_utf8(tfmount_ok(&[
            "export".as_ref(),
            "--cast".as_ref(),
            to.as_ref(),
            src.as_os_str(),
            out.as_os_str(),
        ]))
        .unwrap();
        if to != "float32" {
            assert!(
                plan.contains(&format!("C a/.ATTRIBUTES/VARIABLE_VALUE float32 -> {to}")),
                "{plan}"
            );
        }
        assert!(!plan.contains("i/.ATTRIBUTES"), "{plan}");
        let got = tf_script(&[
            "castcheck".as_ref(),
            src.as_os_str(),
            out.as_os_str(),
            to.as_ref(),
        ])
        .expect("TensorFlow wrote, so it reads");
        let m = got.as_object().unwrap();
        assert_eq!(m.len(), 3, "{got}");
        for (k, v) in m {
            assert_eq!(v["equal"], true, "{to}: {k}: {got}");
        }
    }
    // Only where the glob says.
    let out = dir.path().join("some/ckpt");
    let plan = String::from_utf8(tfmount_ok(&[
        "export".as_ref(),
        "--cast".as_ref(),
        "bfloat16:b/**".as_ref(),
        src.as_os_str(),
        out.as_os_str(),
    ]))
    .unwrap();
    assert_eq!(
        plan.lines().collect::<Vec<_>>(),
        ["C b/.ATTRIBUTES/VARIABLE_VALUE float64 -> bfloat16"]
    );
}

/// Every file of `dir` (recursively) but its variables checkpoint, with its bytes.
fn files_but_variables(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if p.is_dir() {
                todo.push(p);
            } else if !rel.starts_with("variables") {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_patched_and_a_grafted_savedmodel_are_served_by_tensorflow() {
    let dir = tempdir();
    let model = dir.path().join("model");
    let train = dir.path().join("train/ckpt");
    let (mv, tv) = (dir.path().join("model.json"), dir.path().join("train.json"));
    std::fs::create_dir_all(train.parent().unwrap()).unwrap();
    if tf_script(&[
        "smwrite".as_ref(),
        model.as_os_str(),
        train.as_os_str(),
        mv.as_os_str(),
        tv.as_os_str(),
    ])
    .is_none()
    {
        return;
    }
    let run = |extra: &[&std::ffi::OsStr], to: &Path| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        a.extend_from_slice(extra);
        a.push(model.as_os_str());
        a.push(to.as_os_str());
        tfmount(&a)
    };
    let ok = |extra: &[&std::ffi::OsStr], to: &Path| {
        let o = run(extra, to);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    // --set: new values for enc/kernel from an .npy file (a SavedModel is the default output).
    let npy = dir.path().join("kernel.npy");
    let mv2 = dir.path().join("model2.json");
    tf_script(&[
        "setnpy".as_ref(),
        mv.as_os_str(),
        npy.as_os_str(),
        mv2.as_os_str(),
    ])
    .expect("TensorFlow wrote, so it runs");
    let set = format!("enc/kernel/.ATTRIBUTES/VARIABLE_VALUE={}", npy.display());
    let patched = dir.path().join("patched");
    let plan = ok(&["--set".as_ref(), set.as_ref()], &patched);
    assert!(
        plan.contains("S enc/kernel/.ATTRIBUTES/VARIABLE_VALUE (shape [4, 3] float32)"),
        "{plan}"
    );
    // A training checkpoint grafted in: by key under its model/ path, and by names/ names.
    let grafted = dir.path().join("grafted");
    ok(&["--variables-from".as_ref(), train.as_os_str()], &grafted);
    let by_names = dir.path().join("by_names");
    ok(
        &[
            "--variables-from".as_ref(),
            train.as_os_str(),
            "--names".as_ref(),
            "--to".as_ref(),
            "savedmodel".as_ref(),
        ],
        &by_names,
    );
    // Each served with its new values; the graft changed something (the training checkpoint's
    // values are not the model's).
    let checks = [
        (&patched, &mv2, true),
        (&grafted, &tv, true),
        (&by_names, &tv, true),
        (&model, &mv, true),
        (&grafted, &mv, false),
        (&model, &tv, false),
    ];
    let mut args: Vec<&std::ffi::OsStr> = vec!["smcheck".as_ref()];
    for (out, values, _) in &checks {
        args.push(out.as_os_str());
        args.push(values.as_os_str());
    }
    let got = tf_script(&args).expect("TensorFlow wrote, so it reads");
    for (out, values, same) in checks {
        let g = &got[format!("{} {}", out.display(), values.display())];
        assert_eq!(g["stored"], same, "{out:?} {values:?}: {g}");
        if same {
            assert_eq!(g["served"], true, "{out:?}: {g}");
            // The graph, the fingerprint and the assets as they were.
            assert_eq!(
                files_but_variables(out),
                files_but_variables(&model),
                "{out:?}"
            );
        }
    }

    // Refused, naming the variable, nothing at OUT: edits the graph cannot follow.
    let no = dir.path().join("no");
    let setnew = format!("new/tensor={}", npy.display());
    for (extra, words) in [
        (["--drop", "enc/**"], "enc/bias/.ATTRIBUTES/VARIABLE_VALUE: a variable the SavedModel's graph restores"),
        (["--rename", "^enc/=encoder/"], "renamed to encoder/bias/.ATTRIBUTES/VARIABLE_VALUE"),
        (["--cast", "bfloat16:enc/**"], "enc/bias/.ATTRIBUTES/VARIABLE_VALUE: float32 [3] in the SavedModel's graph, made bfloat16 [3]"),
        (["--set", &setnew], "new/tensor: the SavedModel has no variable of this key"),
    ] {
        let extra: Vec<&std::ffi::OsStr> = extra.iter().map(std::ffi::OsStr::new).collect();
        let o = run(&extra, &no);
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(words) && err.contains("--to tf"), "{extra:?}: {err}");
        assert!(!no.exists(), "{extra:?}");
    }
    // A checkpoint without the model's variables: every unmatched one listed.
    let o = run(
        &[
            "--variables-from".as_ref(),
            fixtures().join("tf2_keras/ckpt-1").as_os_str(),
        ],
        &no,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("4 of 4 variables have no match")
            && err.contains("dec/bias/.ATTRIBUTES/VARIABLE_VALUE"),
        "{err}"
    );
    // --to savedmodel from a checkpoint: refused.
    let o = tfmount(&[
        "export".as_ref(),
        "--to".as_ref(),
        "savedmodel".as_ref(),
        train.as_os_str(),
        no.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a SavedModel"));
    assert!(!no.exists());
    // OUT exists: refused without --force; --force replaces a SavedModel, never another
    // directory; no temporaries are left beside it.
    let o = run(&[], &patched);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    ok(&["--force".as_ref()], &patched);
    let got = tf_script(&["smcheck".as_ref(), patched.as_os_str(), mv.as_os_str()]).unwrap();
    let g = &got[format!("{} {}", patched.display(), mv.display())];
    assert_eq!(g["stored"], true, "the model's own values again: {g}");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let o = run(&["--force".as_ref()], &other);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a SavedModel directory"));
    assert_eq!(names(&other), ["notes.txt"]);
    let left: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.contains("tfmount-tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Runs `script` (sh) with `$T` the built binary, in a mount namespace of its own (a user
/// namespace mapping this user to root, so that it may mount a tmpfs, whoever runs the test);
/// `None` (said) where namespaces are not allowed.
fn in_own_mounts(script: &str, env: &[(&str, &std::ffi::OsStr)]) -> Option<String> {
    let unshare = requires_unshare()?;
    let mut c = Command::new(unshare);
    c.args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .env("T", env!("CARGO_BIN_EXE_tfmount"));
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run unshare");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `unshare`, if it can make a user and mount namespace here.
fn requires_unshare() -> Option<&'static str> {
    let ok = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::requires::missing(
            "unshare --user --map-root-user --mount (user namespaces), to mount a small tmpfs",
            "",
        );
        return None;
    }
    Some("unshare")
}

/// An `.npy` file of `n` float32 zeros.
fn zeros_npy(path: &Path, n: usize) {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n},), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + 4 * n, 0);
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_full_or_read_only_file_system_leaves_nothing() {
    let dir = tempdir();
    let npy = dir.path().join("big.npy");
    zeros_npy(&npy, 1 << 18);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let src = fixtures().join("tf2_keras/ckpt-1");
    let sm = fixtures().join("demo_savedmodel");
    // Each export on a 256 KiB tmpfs with 1 MiB to write, then on a read-only one; what each
    // said, and what is left there.
    let script = r#"
        set -u
        mount -t tmpfs -o size=256k none "$MNT"
        "$T" export --set "big=$NPY" "$SRC" "$MNT/ckpt" 2>"$MNT/../err1"; echo "exit1=$?"
        "$T" export --set "big=$NPY" "$SRC" "$MNT/x.safetensors" 2>"$MNT/../err2"; echo "exit2=$?"
        "$T" export --to tf --set "big=$NPY" "$SM" "$MNT/sm/ckpt" 2>"$MNT/../err3"; echo "exit3=$?"
        echo "left=$(find "$MNT" -mindepth 1 -not -type d | tr '\n' ' ')"
        umount "$MNT"
        mount -t tmpfs -o ro none "$MNT"
        "$T" export "$SM" "$MNT/sm2" 2>"$MNT/../err4"; echo "exit4=$?"
        echo "left_ro=$(ls -A "$MNT" | tr '\n' ' ')"
    "#;
    let Some(out) = in_own_mounts(
        script,
        &[
            ("MNT", mnt.as_os_str()),
            ("NPY", npy.as_os_str()),
            ("SRC", src.as_os_str()),
            ("SM", sm.as_os_str()),
        ],
    ) else {
        return;
    };
    for k in ["exit1=1", "exit2=1", "exit3=1", "exit4=1"] {
        assert!(out.contains(k), "{k}: {out}");
    }
    // Nothing left: no OUT, no temporaries (only the directory sm/, made as TensorFlow's
    // saver makes it).
    let left = out.lines().find_map(|l| l.strip_prefix("left=")).unwrap();
    assert!(left.trim().is_empty(), "{out}");
    let left_ro = out
        .lines()
        .find_map(|l| l.strip_prefix("left_ro="))
        .unwrap();
    assert!(left_ro.trim().is_empty(), "{out}");
    for (f, words) in [
        ("err1", "no space left on the device"),
        ("err2", "no space left on the device"),
        ("err3", "no space left on the device"),
        ("err4", "read-only file system"),
    ] {
        let err = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(
            err.contains(words) && err.contains("nothing written at") && err.lines().count() == 1,
            "{f}: {err}"
        );
    }
}
