//! Checkpoints whose prefix has an empty base name: written to `dir/` (files `dir/.index`,
//! `dir/.data-00000-of-00001`), as `tf.train.Checkpoint.write("dir/")` and Keras 2's
//! `save_weights("dir/")` write them, with a state file saying `"."`. The fixtures
//! (`tests/fixtures/empty_base/`, written by `scripts/gen_empty_base_fixtures.py` with real
//! TensorFlow) are also in the manifest, so the core walk, the real-mount check and the views
//! suites read every tensor of them; here: every way of naming such a checkpoint, the state-file
//! forms (`"."`, `""`, absolute, stale absolute), the name it gets in a checkpoint directory,
//! `verify` and `diff`.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use tfmount::fs::{Fs, Kind, ROOT};
use tfmount::probe::{probe, Probed};

fn keras() -> PathBuf {
    fixtures().join("empty_base/keras")
}

/// `(key, sha256, len)` of every tensor TensorFlow recorded for a fixture.
fn expected(name: &str) -> Vec<(String, String, u64)> {
    let exp: Value = load_json(&format!("empty_base/expected.{name}.json"));
    let recs = exp["tensors"].as_array().expect("tensors");
    assert!(recs.len() >= 3, "{name}: {} tensors", recs.len());
    recs.iter()
        .map(|r| {
            (
                r["key"].as_str().expect("key").to_string(),
                r["sha256"].as_str().expect("sha").to_string(),
                r["nbytes"].as_u64().expect("nbytes"),
            )
        })
        .collect()
}

fn lookup(fs: &Fs, path: &str) -> tfmount::fs::Attr {
    let mut a = fs.getattr(ROOT).expect("root");
    for c in path.split('/') {
        a = fs
            .lookup(a.ino, c.as_bytes())
            .unwrap_or_else(|e| panic!("{path}: {c}: {e}"));
    }
    a
}

fn read(fs: &Fs, ino: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = fs
            .read(ino, out.len() as u64, 5)
            .unwrap_or_else(|e| panic!("read: {e}"));
        if b.is_empty() {
            return out;
        }
        out.extend_from_slice(&b);
    }
}

/// Every tensor of fixture `name` read whole through the core under `root` (`""` or `ckpt/`)
/// equals TensorFlow's record.
fn check_all(fs: &Fs, root: &str, name: &str, what: &str) {
    for (key, sha, len) in expected(name) {
        let a = lookup(fs, &format!("{root}variables/{key}.bin"));
        assert_eq!(a.kind, Kind::File);
        assert_eq!(a.size, len, "{what}: {key}");
        let b = read(fs, a.ino);
        assert_eq!(sha256_hex(&b), sha, "{what}: {key}");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

/// The checkpoints a directory's probe finds: `(name, prefix)` and `latest`.
fn dir_checkpoints(dir: &Path) -> (Vec<(String, PathBuf)>, Option<String>) {
    match probe(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        Probed::CheckpointDir {
            checkpoints,
            latest,
            ..
        } => (checkpoints, latest),
        other => panic!("{}: {other:?}", dir.display()),
    }
}

/// The prefix `dir/` (as a path ending in `/`).
fn dir_prefix(dir: &Path) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push("/");
    PathBuf::from(s)
}

/// Every way of naming the checkpoint `keras/` mounts it, and every tensor reads as TensorFlow
/// recorded: the directory (with or without a trailing `/`, and its state file), which holds one
/// checkpoint shown as `ckpt` with `latest -> ckpt`; and the prefix through its `.index` or data
/// file, whose tree is the root.
#[test]
fn every_way_of_naming_it_reads_every_tensor() {
    let k = keras();
    for (src, root) in [
        (k.clone(), "ckpt/"),
        (dir_prefix(&k), "ckpt/"),
        (k.join("checkpoint"), "ckpt/"),
        (k.join(".index"), ""),
        (k.join(".data-00000-of-00001"), ""),
    ] {
        let what = src.display().to_string();
        let fs = open_fs_ok(&src);
        check_all(&fs, root, "keras", &what);
        if !root.is_empty() {
            let l = lookup(&fs, "latest");
            assert_eq!(fs.readlink(l.ino).expect("latest"), b"ckpt", "{what}");
        }
    }
}

/// The state-file forms: `"."` (what TensorFlow writes relative), an absolute `/dir/` as
/// written, a stale absolute one (the directory moved: found by its empty base name), an empty
/// entry of `all_model_checkpoint_paths` (TensorFlow joins it to `dir/`), and `dir/.` spelled
/// out. Each names the prefix `dir/`, shown as `ckpt`, and `latest` follows
/// `model_checkpoint_path` (an empty one names nothing: TensorFlow refuses it).
#[test]
fn state_file_forms_name_the_directory_prefix() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("run");
    copy_dir(&keras(), &d);
    let abs = dir_prefix(&d);
    let abs = abs.to_str().expect("utf-8");
    let cases = [
        (
            "model_checkpoint_path: \".\"\nall_model_checkpoint_paths: \".\"\n".to_string(),
            Some("ckpt"),
        ),
        (
            format!("model_checkpoint_path: \"{abs}\"\nall_model_checkpoint_paths: \"{abs}\"\n"),
            Some("ckpt"),
        ),
        (
            "model_checkpoint_path: \"/nonexistent/moved/run/\"\n".to_string(),
            Some("ckpt"),
        ),
        ("all_model_checkpoint_paths: \"\"\n".to_string(), None),
        (
            "model_checkpoint_path: \"./.\"\nall_model_checkpoint_paths: \"\"\n".to_string(),
            Some("ckpt"),
        ),
    ];
    for (state, latest) in cases {
        std::fs::write(d.join("checkpoint"), &state).expect("state");
        let (cks, got_latest) = dir_checkpoints(&d);
        assert_eq!(cks, vec![("ckpt".to_string(), dir_prefix(&d))], "{state}");
        assert_eq!(got_latest.as_deref(), latest, "{state}");
        check_all(&open_fs_ok(&d), "ckpt/", "keras", &state);
    }
    // Without a state file: the directory of `*.index` files.
    std::fs::remove_file(d.join("checkpoint")).expect("rm");
    let (cks, latest) = dir_checkpoints(&d);
    assert_eq!(cks, vec![("ckpt".to_string(), dir_prefix(&d))]);
    assert_eq!(latest, None);
    check_all(&open_fs_ok(&d), "ckpt/", "keras", "no state file");
}

/// A checkpoint really named `ckpt` beside the empty base name keeps its name; the empty one is
/// `ckpt~2` (with or without a state file), and `latest` points at the right one.
#[test]
fn a_real_ckpt_keeps_its_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("both");
    copy_dir(&keras(), &d);
    let abs = fixtures().join("empty_base/abs");
    std::fs::copy(abs.join(".index"), d.join("ckpt.index")).expect("copy");
    std::fs::copy(
        abs.join(".data-00000-of-00001"),
        d.join("ckpt.data-00000-of-00001"),
    )
    .expect("copy");
    let want = vec![
        ("ckpt".to_string(), d.join("ckpt")),
        ("ckpt~2".to_string(), dir_prefix(&d)),
    ];
    std::fs::write(
        d.join("checkpoint"),
        "model_checkpoint_path: \".\"\nall_model_checkpoint_paths: \"ckpt\"\nall_model_checkpoint_paths: \".\"\n",
    )
    .expect("state");
    let (cks, latest) = dir_checkpoints(&d);
    assert_eq!(cks, want);
    assert_eq!(latest.as_deref(), Some("ckpt~2"));
    let fs = open_fs_ok(&d);
    check_all(&fs, "ckpt~2/", "keras", "ckpt~2");
    check_all(&fs, "ckpt/", "abs", "ckpt");
    std::fs::remove_file(d.join("checkpoint")).expect("rm");
    let (mut cks, _) = dir_checkpoints(&d);
    cks.sort();
    assert_eq!(cks, want);
}

fn run(args: &[&Path]) -> (i32, String, String) {
    let out = common::tfmount(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tfmount verify` reads every tensor of it intact (and finds a flipped byte); `tfmount diff
/// --exact` finds it equal to the same files under an ordinary prefix, and different from
/// another checkpoint.
#[test]
fn verify_and_diff() {
    let k = keras();
    for src in [k.clone(), k.join(".index")] {
        let (code, out, err) = run(&[Path::new("verify"), &src]);
        assert_eq!(code, 0, "verify {}: {out}{err}", src.display());
        assert!(
            err.contains("3 tensors") && err.contains("0 problems"),
            "{err}"
        );
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let plain = tmp.path().join("w");
    for (from, to) in [
        (".index", "w.index"),
        (".data-00000-of-00001", "w.data-00000-of-00001"),
    ] {
        std::fs::copy(k.join(from), tmp.path().join(to)).expect("copy");
    }
    let (code, out, err) = run(&[Path::new("diff"), Path::new("--exact"), &k, &plain]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let abs = fixtures().join("empty_base/abs");
    let (code, out, _) = run(&[Path::new("diff"), &k, &abs]);
    assert_eq!(code, 1);
    assert!(out.contains("A\tnet/w/.ATTRIBUTES/VARIABLE_VALUE"), "{out}");
    // A flipped byte in the data file is found, named under the checkpoint's name.
    let d = tmp.path().join("flip");
    copy_dir(&k, &d);
    let data = d.join(".data-00000-of-00001");
    let mut b = std::fs::read(&data).expect("data");
    let last = b.len() - 1;
    b[last] ^= 0x40;
    std::fs::write(&data, b).expect("write");
    let (code, out, _) = run(&[Path::new("verify"), &d]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("ckpt/") && out.contains("CRC-32C mismatch"),
        "{out}"
    );
}

/// Through the kernel: the directory with a Keras state file and a directory whose state file
/// lists `""`, each mounted; every tensor of the first read (the manifest's mount test reads them
/// all too), `latest` resolves.
#[test]
fn mounted_through_the_kernel() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("empty");
    copy_dir(&keras(), &d);
    std::fs::write(
        d.join("checkpoint"),
        "model_checkpoint_path: \".\"\nall_model_checkpoint_paths: \"\"\n",
    )
    .expect("state");
    for src in [keras(), dir_prefix(&d)] {
        let mut m = Mount::start(&src, &[]);
        let root = m.path();
        assert_eq!(
            std::fs::read_link(root.join("latest")).expect("latest"),
            Path::new("ckpt")
        );
        for (key, sha, _) in expected("keras") {
            let b = std::fs::read(root.join(format!("latest/variables/{key}.bin")))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(sha256_hex(&b), sha, "{key}");
        }
        assert_eq!(m.unmount(), Some(0), "{}", m.log_text());
    }
}
