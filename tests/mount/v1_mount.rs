//! V1 checkpoints through the kernel: every V1 fixture written by TensorFlow's V1 Saver
//! (tests/fixtures/v1) mounted from each kind of source path (the table file, one shard, the
//! `?????` pattern, a checkpoint directory whose state file names V1 checkpoints, a `.meta`
//! beside one), every tensor's `.bin`, `.shape` and `.dtype` compared with TensorFlow's record,
//! and every `.npy` loaded with numpy.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{fixtures, is_mounted, sha256_hex, Mount, NUMPY_NATIVE};
use serde_json::Value;

fn v1() -> PathBuf {
    fixtures().join("v1")
}

fn record(name: &str) -> Value {
    let p = v1().join("expected").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("expected json")).expect("json")
}

/// The path of a key's files under `variables/` (the V1 fixtures' keys need no escaping but
/// `/`, which makes directories).
fn stem(vars: &Path, key: &str) -> PathBuf {
    assert!(
        !key.contains('%')
            && key
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."),
        "{key}: a key needing escapes"
    );
    vars.join(key)
}

fn with(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Checks every tensor of `rec` under `vars`; returns the `.npy` checks to run with numpy.
fn check(vars: &Path, rec: &Value, npy: &mut Vec<Value>) {
    let tensors = rec["tensors"].as_array().expect("tensors");
    assert!(!tensors.is_empty());
    for t in tensors {
        let key = t["key"].as_str().expect("key");
        let s = stem(vars, key);
        let dtype = t["dtype"].as_str().expect("dtype");
        let shape: Vec<u64> = t["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim"))
            .collect();
        let bin = std::fs::read(with(&s, ".bin")).unwrap_or_else(|e| panic!("{key}.bin: {e}"));
        assert_eq!(
            bin.len() as u64,
            t["nbytes"].as_u64().expect("nbytes"),
            "{key}"
        );
        assert_eq!(
            sha256_hex(&bin),
            t["sha256"].as_str().expect("sha"),
            "{key}"
        );
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            std::fs::read_to_string(with(&s, ".shape")).expect("shape"),
            format!("{}\n", dims.join(" ")),
            "{key}"
        );
        assert_eq!(
            std::fs::read_to_string(with(&s, ".dtype")).expect("dtype"),
            format!("{dtype}\n"),
            "{key}"
        );
        let npy_path = with(&s, ".npy");
        assert_eq!(
            npy_path.exists(),
            NUMPY_NATIVE.contains(&dtype),
            "{key}: .npy only for numpy's dtypes"
        );
        if npy_path.exists() {
            npy.push(serde_json::json!({
                "path": npy_path.to_string_lossy(),
                "dtype": dtype,
                "shape": shape,
                "sha256": t["sha256"],
            }));
        }
    }
}

/// Loads every `.npy` with numpy and compares dtype, shape and the bytes' sha256.
fn numpy_checks(checks: &[Value]) {
    let Some(py) = common::requires::python("numpy", "") else {
        return;
    };
    let script = r#"
import hashlib, json, sys
import numpy
bad = 0
checks = json.load(sys.stdin)
for c in checks:
    a = numpy.load(c["path"])
    got = (a.dtype.name, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest())
    want = (c["dtype"], c["shape"], c["sha256"])
    if got != want:
        bad += 1
        print(c["path"], got, want)
print(f"{len(checks) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
"#;
    let mut child = Command::new(py)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(checks).expect("json").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "numpy.load checks: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Mounts `source` and checks the tensors of `rec` under `sub/variables`.
fn mount_and_check(source: &Path, sub: &str, rec: &Value) {
    let m = Mount::start(source, &[]);
    let vars = m.path().join(sub).join("variables");
    let mut npy = Vec::new();
    check(&vars, rec, &mut npy);
    numpy_checks(&npy);
    assert!(is_mounted(&m.path()));
}

#[test]
fn every_v1_source_kind_mounts_with_tensorflows_values() {
    let single1 = record("single.model.ckpt-1.json");
    let single2 = record("single.model.ckpt-2.json");
    // The table file itself, and its .meta (which brings the graph).
    mount_and_check(&v1().join("single/model.ckpt-1"), "", &single1);
    mount_and_check(&v1().join("single/model.ckpt-2.meta"), "", &single2);
    // A checkpoint directory whose state file names V1 checkpoints: one directory each, latest.
    {
        let m = Mount::start(&v1().join("single"), &[]);
        let mut names: Vec<String> = std::fs::read_dir(m.path())
            .expect("readdir")
            .map(|e| e.expect("e").file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["latest", "model.ckpt-1", "model.ckpt-2"]);
        assert_eq!(
            std::fs::read_link(m.path().join("latest")).expect("latest"),
            PathBuf::from("model.ckpt-2")
        );
        let mut npy = Vec::new();
        check(&m.path().join("model.ckpt-1/variables"), &single1, &mut npy);
        check(&m.path().join("latest/variables"), &single2, &mut npy);
        numpy_checks(&npy);
        assert!(
            m.path().join("model.ckpt-1/meta_graphs").is_dir(),
            "the .meta beside a V1 checkpoint shows its graphs"
        );
    }
    // Sharded over three devices: any one shard, the ????? pattern, the directory.
    let sharded = record("sharded.json");
    mount_and_check(
        &v1().join("sharded/model.ckpt-00001-of-00003"),
        "",
        &sharded,
    );
    mount_and_check(
        &v1().join("sharded/model.ckpt-?????-of-00003"),
        "",
        &sharded,
    );
    mount_and_check(&v1().join("sharded"), "model.ckpt", &sharded);
    // Partitioned along both axes, every dtype, large entries.
    mount_and_check(
        &v1().join("partitioned/model.ckpt"),
        "",
        &record("partitioned.json"),
    );
    mount_and_check(&v1().join("dtypes/model.ckpt"), "", &record("dtypes.json"));
    mount_and_check(&v1().join("large/model.ckpt"), "", &record("large.json"));
}

/// A legacy TF Serving session bundle (`export-00000-of-00001` + `export.meta`) mounts as that
/// checkpoint with its meta graph. Made from the single-file fixture: its table renamed as the
/// one shard of `export`, its .meta as `export.meta`.
#[test]
fn legacy_session_bundle_mounts_as_its_checkpoint_and_graph() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("00000123");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(
        v1().join("single/model.ckpt-2"),
        dir.join("export-00000-of-00001"),
    )
    .expect("copy");
    std::fs::copy(
        v1().join("single/model.ckpt-2.meta"),
        dir.join("export.meta"),
    )
    .expect("copy");
    let m = Mount::start(&dir, &[]);
    let mut npy = Vec::new();
    check(
        &m.path().join("variables"),
        &record("single.model.ckpt-2.json"),
        &mut npy,
    );
    numpy_checks(&npy);
    assert!(m.path().join("meta_graphs").is_dir());
}

/// Probing is by content: a V2 checkpoint's `.index` file named like a V1 file is not taken for
/// V1, and a file of other bytes is not a checkpoint.
#[test]
fn v1_is_told_from_v2_by_content() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fake = tmp.path().join("model.ckpt");
    std::fs::write(&fake, b"not a table at all, just bytes").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("ls")
        .arg(&fake)
        .output()
        .expect("tfmount ls");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // A V2 index copied under a V1-looking name is not V1 (its "" entry is a bundle header).
    let v2_index = fixtures().join("partitioned/model.ckpt.index");
    std::fs::copy(&v2_index, tmp.path().join("other.ckpt")).expect("copy");
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("ls")
        .arg(tmp.path().join("other.ckpt"))
        .output()
        .expect("tfmount ls");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// Hostile V1 files through the whole core: every truncation of a V1 table, and bit flips with
/// the block CRCs recomputed (so they reach the parsers behind the checksums), each probed,
/// mounted in `Fs` and walked with every file read. Nothing panics; what is served is either an
/// error or bytes the walker's checks accept.
#[test]
fn hostile_v1_files_through_the_core() {
    use common::walk::{self, Core, Walk};
    use tfmount::fs::{Fs, Options};
    let orig = std::fs::read(v1().join("single/model.ckpt-1")).expect("fixture");
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("model.ckpt");
    let opts = Options {
        live: false,
        ..common::views_listed()
    };
    let mut rng = common::Rng::new(7);
    let mut variants: Vec<Vec<u8>> = (0..orig.len()).map(|n| orig[..n].to_vec()).collect();
    for _ in 0..600 {
        let mut v = orig.clone();
        let at = rng.below(v.len() as u64) as usize;
        v[at] ^= 1 << rng.below(8);
        tfmount::testkit::writer::fix_table_crcs(&mut v);
        variants.push(v);
    }
    let (mut mounted, mut refused) = (0, 0);
    for v in &variants {
        std::fs::write(&path, v).expect("write");
        let Ok(probed) = tfmount::probe::probe(&path) else {
            refused += 1;
            continue;
        };
        match Fs::new(&probed, &opts) {
            Ok(fs) => {
                mounted += 1;
                let core = Core {
                    max_file_bytes: 1 << 20,
                    ..Core::lenient(&fs)
                };
                walk::walk(
                    &core,
                    &Walk {
                        max_nodes: 2000,
                        read: true,
                        keys: true,
                    },
                );
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "{} variants: {mounted} mounted and walked, {refused} refused",
        variants.len()
    );
    assert!(
        mounted > 0 && refused > 0,
        "the sweep reached both outcomes"
    );
}

/// A checkpoint directory whose state file names a V1 checkpoint and a V2 one: one directory
/// each, `latest` on the V2 one, both serving their tensors.
#[test]
fn state_file_naming_v1_and_v2_checkpoints() {
    use tfmount::parse::dtype::DType;
    use tfmount::testkit::writer::CheckpointWriter;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    std::fs::copy(v1().join("single/model.ckpt-1"), dir.join("model.ckpt-1")).expect("v1");
    let vals: Vec<u8> = [1.5f32, -2.0, 3.25]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut w = CheckpointWriter::new(dir.join("model.ckpt-2"), 1).expect("writer");
    w.add(b"w", DType(1), &[3], &vals, 0).expect("add");
    w.finish().expect("finish");
    std::fs::write(
        dir.join("checkpoint"),
        "model_checkpoint_path: \"model.ckpt-2\"\n\
         all_model_checkpoint_paths: \"model.ckpt-1\"\n\
         all_model_checkpoint_paths: \"model.ckpt-2\"\n",
    )
    .expect("state");
    let m = Mount::start(dir, &[]);
    let mut names: Vec<String> = std::fs::read_dir(m.path())
        .expect("readdir")
        .map(|e| e.expect("e").file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["latest", "model.ckpt-1", "model.ckpt-2"]);
    assert_eq!(
        std::fs::read(m.path().join("latest/variables/w.bin")).expect("v2"),
        vals
    );
    let mut npy = Vec::new();
    check(
        &m.path().join("model.ckpt-1/variables"),
        &record("single.model.ckpt-1.json"),
        &mut npy,
    );
    numpy_checks(&npy);
}
