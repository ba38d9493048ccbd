//! `tfmount verify`, `diff` and `ls` of safetensors sources (`tests/fixtures/safetensors/`,
//! `scripts/gen_safetensors.py`): verify passes sound files and sets and names what is wrong with
//! damaged ones (a file cut short or grown, a missing shard, an index naming a tensor its shard
//! does not hold, a header safetensors refuses); `diff` between two of them, and `diff --names` /
//! `--values` against a TF checkpoint whose `names/` are the safetensors file's keys.

use crate::common;

use std::path::{Path, PathBuf};

use common::tfmount;

fn dir() -> PathBuf {
    common::fixtures().join("safetensors")
}

fn run(args: &[&Path]) -> (Option<i32>, String, String) {
    let o = tfmount(args);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A copy of fixture directory `rel` in a temporary directory.
fn copy(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let to = tmp.path().join("m");
    std::fs::create_dir(&to).expect("mkdir");
    for e in std::fs::read_dir(dir().join(rel)).expect("dir") {
        let e = e.expect("entry");
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
    (tmp, to)
}

#[test]
fn verify_passes_sound_sources_and_reads_every_byte() {
    for rel in [
        "all_dtypes.safetensors",
        "sharded",
        "sharded/model.safetensors.index.json",
        "several",
        "tf_pair/model.safetensors",
    ] {
        let (code, out, err) = run(&[Path::new("verify"), &dir().join(rel)]);
        assert_eq!(code, Some(0), "{rel}: {out}{err}");
        assert!(out.is_empty(), "{rel}: {out}");
        // 0 problems is not read as checked bytes: said.
        assert!(
            err.contains("with bytes that cannot be checked: safetensors stores no checksum (their layout is checked)"),
            "{rel}: {err}"
        );
        // Every tensor byte read (there is no checksum to check them by).
        let want = common::load_json("safetensors/expected/all_dtypes.json");
        if rel == "all_dtypes.safetensors" {
            let total = want["file_size"].as_u64().expect("size");
            let bytes = common::verified_bytes(err.as_bytes());
            assert!(bytes > 0 && bytes < total, "{err}");
        }
    }
}

#[test]
fn verify_names_what_is_wrong_with_a_damaged_source() {
    // Cut short: the file named with its length, the tensors past the end named.
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join("all_dtypes.safetensors");
    let orig = std::fs::read(dir().join("all_dtypes.safetensors")).expect("read");
    std::fs::write(&p, &orig[..orig.len() - 10]).expect("write");
    let (code, out, err) = run(&[Path::new("verify"), &p]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("[all_dtypes.safetensors]\t") && out.contains("truncated"),
        "{out}"
    );
    assert!(out.contains("past the end of the file"), "{out}");
    // Grown: safetensors refuses it; verify says so.
    let mut grown = orig.clone();
    grown.extend_from_slice(b"extra");
    std::fs::write(&p, &grown).expect("write");
    let (code, out, _) = run(&[Path::new("verify"), &p]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("5 more than"), "{out}");
    // A header safetensors refuses: the file cannot be used (exit 3), in words.
    let mut bad = orig.clone();
    bad[8] = b'[';
    std::fs::write(&p, &bad).expect("write");
    let (code, _, err) = run(&[Path::new("verify"), &p]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("all_dtypes.safetensors") && err.contains("not JSON"),
        "{err}"
    );

    // A sharded set: a missing shard, and an index naming a tensor its shard does not hold.
    let (_t, d) = copy("sharded");
    let index = d.join("model.safetensors.index.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index).expect("index")).expect("json");
    v["weight_map"]["lost.weight"] = "model-00001-of-00002.safetensors".into();
    std::fs::write(&index, serde_json::to_vec(&v).expect("json")).expect("write");
    let (code, out, _) = run(&[Path::new("verify"), &d]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("[model.safetensors.index.json]\t")
            && out.contains(
                "\"lost.weight\" in model-00001-of-00002.safetensors, which does not hold it"
            ),
        "{out}"
    );
    std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).expect("rm");
    let (code, out, _) = run(&[Path::new("verify"), &d]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("[shard 2/2]\t")
            && out.contains("model-00002-of-00002.safetensors is missing"),
        "{out}"
    );
}

#[test]
fn diff_between_safetensors_sources() {
    let (code, out, err) = run(&[
        Path::new("diff"),
        &dir().join("sharded"),
        &dir().join("sharded/model.safetensors.index.json"),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, _) = run(&[
        Path::new("diff"),
        &dir().join("several/a.safetensors"),
        &dir().join("several/b.safetensors"),
    ]);
    assert_eq!(code, Some(1), "{out}");
    // Same keys, dtypes and shapes; `w`'s values differ (seeded differently), `step` is 7 in both.
    assert_eq!(out, "M\tw\n");
}

#[test]
fn diff_names_and_values_against_a_tf_checkpoint() {
    let want = common::load_json("safetensors/expected/tf_pair.json");
    let tf = dir().join("tf_pair/tf/ckpt-1");
    let st = dir().join("tf_pair/model.safetensors");
    // By key: nothing lines up (the TF keys are object paths).
    let (code, out, _) = run(&[Path::new("diff"), &tf, &st]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("A\tdense/bias\n")
            && out.contains("D\tdense/bias/.ATTRIBUTES/VARIABLE_VALUE\n"),
        "{out}"
    );
    // By name: the TF checkpoint's names/ are the safetensors keys; only the changed bias differs.
    let (code, out, err) = run(&[Path::new("diff"), Path::new("--names"), &tf, &st]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(out, "M\tdense/bias\n", "{err}");
    let (code, out, err) = run(&[
        Path::new("diff"),
        Path::new("--names"),
        Path::new("--values"),
        &tf,
        &st,
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    let fields: Vec<&str> = out.trim_end().split('\t').collect();
    assert_eq!(&fields[..2], ["M", "dense/bias"], "{out}");
    let changed = &want["changed"]["dense/bias"];
    let max_abs: f64 = fields[2].parse().expect("max |a-b|");
    assert_eq!(
        max_abs,
        changed["max_abs"].as_f64().expect("max_abs"),
        "{out}"
    );
    assert_eq!(
        fields[5].parse::<u64>().expect("differing"),
        changed["differing"].as_u64().expect("differing"),
        "{out}"
    );
}

#[test]
fn ls_shows_the_checkpoint_tree() {
    let (code, out, err) = run(&[Path::new("ls"), &dir().join("sharded")]);
    assert_eq!(code, Some(0), "{err}");
    for name in ["variables", "model.safetensors.index.json", "metadata"] {
        assert!(out.lines().any(|l| l == name), "{name}: {out}");
    }
    // names/, a view (not listed, reachable): every tensor under its own name.
    let (code, out, err) = run(&[Path::new("ls"), &dir().join("sharded"), Path::new("names")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l == "lm_head.weight.bin"), "{out}");
    let (code, out, err) = run(&[Path::new("ls"), &dir().join("several")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l == "a.safetensors"), "{out}");
    assert!(out.lines().any(|l| l == "b.safetensors"), "{out}");
}
