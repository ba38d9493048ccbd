//! The views beside `variables/` in every checkpoint's tree — `model.safetensors`, `tensors.tsv`,
//! `summary.txt`, `text/`, `stats/` and the tensor xattrs — checked against TensorFlow's record
//! of every fixture (tests/fixtures/expected/*.json), with the `safetensors` package and numpy
//! as the judges, through the core `Fs` and through real mounts.
//!
//! The checks by Python need numpy and safetensors (src/testkit/requires.rs finds the Python;
//! without one those tests are skipped and reported); ml_dtypes, when that Python has it, also
//! judges the float8/float4 text.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{requires, *};
use serde_json::{json, Value};
use tfmount::error::FsError;
use tfmount::fs::{Fs, Kind, Options};
use tfmount::parse::dtype::DType;
use tfmount::parse::{FormatError, ReadAt};
use tfmount::probe::probe;
use tfmount::render::stats;
use tfmount::render::values::{render_all, Columns};
use tfmount::source::bytes::{ByteSource, EntryKind, FileMeta, Store};
use tfmount::source::local::LocalStore;
use tfmount::testkit::writer::CheckpointWriter;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A Python with numpy and safetensors, one that also has ml_dtypes if there is one (required
/// under `TFMOUNT_REQUIRE_ALL`); `None`, recording the skip, if there is none.
fn python() -> Option<PathBuf> {
    if let Some(py) = requires::find_python("numpy, safetensors, ml_dtypes") {
        return Some(py);
    }
    if requires::require_all() {
        return requires::python("numpy, safetensors, ml_dtypes", "");
    }
    requires::python("numpy, safetensors", "")
}

/// Runs `script` with `args`; returns stdout, panicking with stderr on failure.
fn run_python(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(python().expect("the test checked python() first"))
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// TensorFlow's CRC mask undone (the checksum as computed).
fn unmask(m: u32) -> u32 {
    let r = m.wrapping_sub(0xa282_ead8);
    r.rotate_right(17)
}

/// One checkpoint of a fixture: where its tree is in the mount, and TensorFlow's record.
struct Ckpt {
    fixture: String,
    source: PathBuf,
    /// The checkpoint tree's path relative to the mount root (empty: the root itself).
    root: Vec<u8>,
    expected_path: PathBuf,
    expected: Value,
}

impl Ckpt {
    fn name(&self) -> String {
        format!("{}/{}", self.fixture, String::from_utf8_lossy(&self.root))
    }

    /// Every tensor the record has: the readable ones and those served as stored (variant).
    fn records(&self) -> Vec<&Value> {
        let t = self.expected["tensors"].as_array().expect("tensors");
        let u = self.expected["unreadable_entries"].as_array();
        t.iter().chain(u.into_iter().flatten()).collect()
    }

    fn path(&self, rel: &[u8]) -> Vec<u8> {
        if self.root.is_empty() {
            return rel.to_vec();
        }
        [&self.root[..], b"/", rel].concat()
    }
}

fn checkpoints() -> Vec<Ckpt> {
    let mut out = Vec::new();
    for entry in manifest() {
        for (view, json) in entry["views"].as_object().expect("views") {
            let root = view
                .strip_suffix("variables")
                .expect("a variables view")
                .trim_end_matches('/');
            let rel = json.as_str().expect("json");
            out.push(Ckpt {
                fixture: entry["name"].as_str().expect("name").to_string(),
                source: fixtures().join(entry["source"].as_str().expect("source")),
                root: root.as_bytes().to_vec(),
                expected_path: fixtures().join(rel),
                expected: load_json(rel),
            });
        }
    }
    assert!(out.len() >= 9, "manifest lists {} checkpoints", out.len());
    out
}

/// The path of a record's tensor file in view `view` with `suffix`.
fn view_path(c: &Ckpt, rec: &Value, view: &str, suffix: &str) -> Vec<u8> {
    let mut p = format!("{view}/").into_bytes();
    p.extend_from_slice(&stem_path(rec));
    p.extend_from_slice(suffix.as_bytes());
    c.path(&p)
}

/// The dtype TensorFlow names `name`.
fn dtype_of(name: &str) -> DType {
    (0..64)
        .map(DType)
        .find(|d| d.display_name() == name)
        .unwrap_or_else(|| panic!("no dtype {name}"))
}

// ---------------------------------------------------------------------------------------------
// model.safetensors
// ---------------------------------------------------------------------------------------------

/// Checks `model.safetensors` files against TensorFlow's records: `argv[1]` is a JSON list of
/// `[file, record json]`. The header is validated by `safe_open` (which maps the file), every
/// included tensor's bytes (by the header's offsets, read with `read()`) have TensorFlow's
/// sha256, tensors numpy holds are loaded through the map by `get_tensor` and, when every dtype
/// of the file is numpy's, by `safetensors.numpy.load_file`; everything else is absent and named
/// in `__metadata__`. Prints the number of tensors checked.
const SAFETENSORS_CHECK: &str = r#"
import sys, json, hashlib, struct
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
ST = {"float32": "F32", "float64": "F64", "int32": "I32", "uint8": "U8", "int16": "I16",
      "int8": "I8", "complex64": "C64", "int64": "I64", "bool": "BOOL", "bfloat16": "BF16",
      "uint16": "U16", "float16": "F16", "uint32": "U32", "uint64": "U64",
      "float8_e5m2": "F8_E5M2", "float8_e4m3fn": "F8_E4M3", "float8_e4m3fnuz": "F8_E4M3FNUZ",
      "float8_e5m2fnuz": "F8_E5M2FNUZ"}
NUMPY = {"F32", "F64", "I32", "U8", "I16", "I8", "C64", "I64", "BOOL", "U16", "F16", "U32", "U64"}
sha = lambda b: hashlib.sha256(b).hexdigest()
checked = 0
for path, exp_path in json.load(open(sys.argv[1])):
    exp = json.load(open(exp_path))
    recs = exp["tensors"] + (exp.get("unreadable_entries") or [])
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and raw[8:9] == b"{", path
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    end = 0
    for a, b in spans:
        assert a == end, (path, "hole or overlap", a, end)
        end = b
    assert base + end == len(raw), (path, "data does not end the file")
    with safe_open(path, "np") as f:
        keys = set(f.keys())
        meta = f.metadata()
        assert meta["format"] == "tf"
        excluded = json.loads(meta.get("tfmount.excluded", "[]"))
        named = {e.get("key", e.get("key_hex")): e for e in excluded}
        want = set()
        for r in recs:
            k, dt = r["key"], r["dtype"]
            if dt in ST and not r.get("key_is_hex"):
                want.add(k)
                h = header[k]
                assert h["dtype"] == ST[dt] and h["shape"] == r["shape"], (path, k, h)
                a, b = h["data_offsets"]
                assert sha(raw[base + a:base + b]) == r["sha256"], (path, k, "bytes")
                if h["dtype"] in NUMPY:
                    t = f.get_tensor(k)
                    assert list(t.shape) == r["shape"], (path, k)
                    assert sha(np.ascontiguousarray(t).tobytes()) == r["sha256"], (path, k)
                checked += 1
            else:
                assert k not in keys, (path, k, "should be left out")
                assert k in named and named[k]["dtype"] == dt, (path, k, "not named")
        assert keys == want, (path, keys ^ want)
    if all(header[k]["dtype"] in NUMPY for k in keys):
        d = load_file(path)
        assert set(d) == keys
        for r in recs:
            if r["key"] in d:
                assert sha(np.ascontiguousarray(d[r["key"]]).tobytes()) == r["sha256"]
print(checked)
"#;

fn check_safetensors(jobs: &[(PathBuf, PathBuf)]) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("jobs.json");
    std::fs::write(&list, serde_json::to_vec(&json!(jobs)).expect("json")).expect("write");
    let out = run_python(SAFETENSORS_CHECK, &[list.as_os_str()]);
    out.trim().parse().expect("a count")
}

/// `model.safetensors` of every fixture's checkpoints, read through the core, opens with the
/// `safetensors` package and equals TensorFlow's record tensor by tensor (bfloat16 and float8
/// by bytes, float16, bool, complex64, partitioned variables whole); strings and the other
/// dtypes safetensors lacks are absent and named in `__metadata__`.
#[test]
fn safetensors_of_every_fixture_equals_tensorflow_record() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    let mut st_dtypes = std::collections::BTreeSet::new();
    for (i, c) in checkpoints().into_iter().enumerate() {
        let fs = open_fs_ok(&c.source);
        let a = lookup_path(&fs, &c.path(b"model.safetensors")).expect("model.safetensors");
        assert_eq!(a.kind, Kind::File);
        // Odd chunk sizes: reads cross the header and tensor boundaries everywhere.
        let bytes = read_all(&fs, a.ino, 1000, usize::MAX).expect("read");
        assert_eq!(bytes.len() as u64, a.size, "{}: size", c.name());
        assert_eq!(
            read_all(&fs, a.ino, 7, usize::MAX).expect("read"),
            bytes,
            "{}: 7-byte reads",
            c.name()
        );
        let p = dir.path().join(format!("{i}.safetensors"));
        std::fs::write(&p, &bytes).expect("write");
        jobs.push((p, c.expected_path.clone()));
        for r in c.records() {
            st_dtypes.insert(r["dtype"].as_str().expect("dtype").to_string());
        }
    }
    for dt in [
        "bfloat16",
        "float16",
        "bool",
        "string",
        "float8_e4m3fn",
        "complex64",
    ] {
        assert!(st_dtypes.contains(dt), "no fixture has {dt}");
    }
    let checked = check_safetensors(&jobs);
    assert!(checked > 100, "only {checked} tensors checked");
}

// ---------------------------------------------------------------------------------------------
// weights.safetensors
// ---------------------------------------------------------------------------------------------

/// Checks `weights.safetensors` files against what TensorFlow and h5py read from the same
/// checkpoints: `argv[1]` is a JSON list of `{"path", "kind", "exp", "src"}`.
/// - `kind` `"tf"`: `exp` is `graphs/expected/variable_names.json` (by
///   `scripts/gen_names_fixtures.py`), `src` one of its sources. The weights are every tensor
///   safetensors can hold except optimizer slots (TensorFlow's `slot_variables`), optimizer
///   state, the save counter and the object graph; each is named by its variable's `full_name`
///   (`_N` added for a name several variables have); for tf2_keras the name → key map is exactly
///   the Keras model's `variable.path` → the key TensorFlow restores the variable from.
/// - `kind` `"keras"`: `exp` is a `keras/expected/*.json` (h5py's view, by
///   `scripts/gen_keras_fixtures.py`), `src` `"weights"` for a Keras 3 `.weights.h5` (the
///   datasets under `layers/`, named by their keys: the file has no readable names), `"keras"`
///   for a `.keras` (the same datasets, from its `model.weights.h5` member, named by Keras' own
///   `variable.path` from `keras/expected/names.json`, by `scripts/gen_keras_names.py`, except
///   the custom layer's, which nothing in the file names) or `"legacy"` (the datasets under
///   `model_weights/`, named by the layers' `weight_names` without `:0`).
///
/// Checked for each file: `__metadata__` (`format`, and `tfmount.keys` mapping every name to
/// its key, unique keys), the header's spans (contiguous, ending the file), every tensor's bytes
/// (by the header's offsets) equal to the value under the mapped key (sha256 of numpy's
/// `tobytes()` for TensorFlow, of the dataset's bytes for h5py), dtype and shape, `get_tensor`
/// of every tensor (bfloat16 through ml_dtypes, when there is one), and `load_file` when numpy
/// holds every dtype; a weight safetensors cannot hold is absent and named in
/// `tfmount.excluded`. Prints the number of tensors checked.
const WEIGHTS_CHECK: &str = r#"
import sys, json, hashlib, struct
from collections import Counter
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
ST = {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64", "int8": "I8",
      "uint8": "U8", "bool": "BOOL", "float16": "F16", "bfloat16": "BF16", "complex64": "C64",
      "int16": "I16", "uint16": "U16", "uint32": "U32", "uint64": "U64"}
NUMPY = {"F32", "F64", "I32", "U8", "I16", "I8", "C64", "I64", "BOOL", "U16", "F16", "U32", "U64"}
sha = lambda b: hashlib.sha256(b).hexdigest()

def tf_expect(exp):
    """{key: (shown name or None, sha256, dtype, shape)} of the weights, and the name rule."""
    full = {k: n for _, n, k in exp["attributes"]}
    count = Counter(n for _, n, _ in exp["attributes"])
    def is_weight(k):
        p = k.split("/.ATTRIBUTES/")[0]
        return not (k in exp["slot_keys"] or "/.OPTIMIZER_SLOT/" in k
                    or k == "_CHECKPOINTABLE_OBJECT_GRAPH" or p in ("save_counter", "global_step")
                    or (k.startswith("optimizer/") and not k.startswith("optimizer/_trainable_variables/"))
                    or p.split("/")[-1] in ("beta1_power", "beta2_power"))
    want = {k: (exp["sha256"].get(k), dt, exp["shape"][k]) for k, dt in exp["dtype"].items() if is_weight(k)}
    def name_ok(name, key):
        n = full.get(key)
        if n is None:
            return name == key
        if count[n] == 1:
            return name == n
        return name == n or (name.startswith(n + "_") and name[len(n) + 1:].isdigit())
    return want, name_ok

def keras_expect(exp, kind, job):
    if kind == "keras":
        datasets = exp["model.weights.h5"]["datasets"]
    else:
        datasets = exp["datasets"]
    top = "model_weights/" if kind == "legacy" else "layers/"
    # Datasets h5py gives no dtype (opaque, no dtype attribute) are not served at all.
    want = {d["path"][1:]: (d["sha256"], d["dtype"], d["shape"]) for d in datasets
            if d.get("dtype") and d["path"][1:].startswith(top)}
    assert len(want) >= 8, (kind, want)
    shown = {}
    if kind == "keras":
        for name, key in json.load(open(job["names"]))["names"].items():
            if key in want and not name.startswith("dtype_zoo/"):
                shown[key] = name
        assert len(shown) >= 20 and all(k in want for k in shown), shown
    if kind == "legacy":
        for group, names in exp["legacy"]["weight_names"].items():
            for w in names:
                shown[group[1:] + "/" + w] = w[:-2] if w.endswith(":0") else w
        assert set(want) <= set(shown), set(want) - set(shown)
    return want, lambda name, key: name == shown.get(key, key)

checked = 0
for job in json.load(open(sys.argv[1])):
    path, kind = job["path"], job["kind"]
    exp = json.load(open(job["exp"]))
    if kind == "tf":
        exp = exp["sources"][job["src"]]
        want, name_ok = tf_expect(exp)
    else:
        want, name_ok = keras_expect(exp, job["src"], job)
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    end = 0
    for a, b in spans:
        assert a == end, (path, "hole or overlap", a, end)
        end = b
    assert base + end == len(raw), (path, "data does not end the file")
    with safe_open(path, "np") as f:
        meta = f.metadata()
        assert meta["format"] == "tf", meta
        keys = json.loads(meta["tfmount.keys"])
        excluded = {e["key"]: e for e in json.loads(meta.get("tfmount.excluded", "[]"))}
        names = set(f.keys())
        assert names == set(keys) - set(excluded), (path, names ^ (set(keys) - set(excluded)))
        assert len(set(keys.values())) == len(keys), (path, "a key twice")
        assert set(keys.values()) == set(want), (path, set(keys.values()) ^ set(want))
        for name, key in keys.items():
            assert name_ok(name, key), (path, name, key)
            digest, dt, shape = want[key]
            if name in excluded:
                assert dt not in ST and excluded[name]["reason"] == "dtype", (path, name)
                continue
            h = header[name]
            assert h["dtype"] == ST[dt] and h["shape"] == shape, (path, name, h, dt, shape)
            a, b = h["data_offsets"]
            assert sha(raw[base + a:base + b]) == digest, (path, name, key, "bytes")
            if h["dtype"] in NUMPY or ml_dtypes is not None:
                t = f.get_tensor(name)
                assert list(t.shape) == shape, (path, name)
                assert sha(np.ascontiguousarray(t).tobytes()) == digest, (path, name, key)
            checked += 1
        if "model_weights" in exp:
            assert keys == exp["model_weights"], (path, keys, exp["model_weights"])
    if all(header[k]["dtype"] in NUMPY for k in names):
        d = load_file(path)
        assert set(d) == names
        for name in names:
            assert sha(np.ascontiguousarray(d[name]).tobytes()) == want[keys[name]][0], (path, name)
print(checked)
"#;

/// One `weights.safetensors` to check: its path, and what [`WEIGHTS_CHECK`] checks it against.
fn weights_job(path: &Path, kind: &str, exp: &str, src: &str) -> Value {
    json!({
        "path": path,
        "kind": kind,
        "exp": fixtures().join(exp),
        "src": src,
        "names": fixtures().join("keras/expected/names.json"),
    })
}

fn check_weights(jobs: &[Value]) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("jobs.json");
    std::fs::write(&list, serde_json::to_vec(&jobs).expect("json")).expect("write");
    let out = run_python(WEIGHTS_CHECK, &[list.as_os_str()]);
    out.trim().parse().expect("a count")
}

const NAMES_JSON: &str = "graphs/expected/variable_names.json";

/// `weights.safetensors` of the TF2 fixtures (checkpoints and SavedModels) and of the Keras
/// files (`.weights.h5`, `.keras`, legacy `.h5`), read through the core in odd chunks, holds the
/// model's weights under the names `names/` gives them, with TensorFlow's and h5py's values (the
/// TF2 Keras model's exactly the variables TensorFlow restores it from); a TF1 checkpoint's
/// holds its variables without the Adam slots, `beta1_power`/`beta2_power` and `global_step`.
#[test]
fn weights_safetensors_holds_the_model_weights_under_their_names() {
    if python().is_none() {
        return;
    }
    let exp = load_json(NAMES_JSON);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    // (fixture, kind, expected JSON, source or kind of Keras file) as WEIGHTS_CHECK takes them.
    let mut sources: Vec<(String, &str, String, String)> = exp["sources"]
        .as_object()
        .expect("sources")
        .keys()
        .map(|s| (s.clone(), "tf", NAMES_JSON.to_string(), s.clone()))
        .collect();
    // model_deflated.keras holds model.keras's weights member deflated (its record says so).
    for (file, record, src) in [
        ("model.weights.h5", "model.weights.h5", "weights"),
        ("model.keras", "model.keras", "keras"),
        ("model_deflated.keras", "model.keras", "keras"),
        ("legacy_model.h5", "legacy_model.h5", "legacy"),
    ] {
        let exp = format!("keras/expected/{record}.json");
        sources.push((format!("keras/{file}"), "keras", exp, src.to_string()));
    }
    for (i, (src, kind, exp, name)) in sources.iter().enumerate() {
        let fs = open_fs_ok(&fixtures().join(src));
        let a = lookup_path(&fs, b"weights.safetensors").expect("weights.safetensors");
        let bytes = read_all(&fs, a.ino, 1000, usize::MAX).expect("read");
        assert_eq!(bytes.len() as u64, a.size, "{src}: size");
        assert_eq!(
            read_all(&fs, a.ino, 4093, usize::MAX).expect("read"),
            bytes,
            "{src}: other reads"
        );
        let p = dir.path().join(format!("{i}.safetensors"));
        std::fs::write(&p, &bytes).expect("write");
        jobs.push(weights_job(&p, kind, exp, name));
    }
    let checked = check_weights(&jobs);
    assert!(checked >= 100, "only {checked} tensors checked");

    // TF1: the variables, named by their keys, without optimizer slots and bookkeeping.
    let c = checkpoints()
        .into_iter()
        .find(|c| c.fixture == "tf1_adam")
        .expect("tf1_adam");
    let fs = open_fs_ok(&c.source);
    let bytes = read_path(&fs, &c.path(b"weights.safetensors")).expect("weights.safetensors");
    let p = dir.path().join("tf1.safetensors");
    std::fs::write(&p, &bytes).expect("write");
    let recs = serde_json::to_string(&c.records()).expect("json");
    let out = run_python(
        r#"
import sys, json, hashlib
import numpy as np
from safetensors import safe_open
recs = {r["key"]: r for r in json.loads(sys.argv[2])}
with safe_open(sys.argv[1], "np") as f:
    keys = json.loads(f.metadata()["tfmount.keys"])
    assert all(n == k for n, k in keys.items()), keys
    assert set(keys) == set(f.keys()), keys
    for k in f.keys():
        assert hashlib.sha256(np.ascontiguousarray(f.get_tensor(k)).tobytes()).hexdigest() == recs[k]["sha256"], k
    print(" ".join(sorted(f.keys())))
"#,
        &[p.as_os_str(), std::ffi::OsStr::new(&recs)],
    );
    let all: Vec<String> = c
        .records()
        .iter()
        .map(|r| r["key"].as_str().expect("key").to_string())
        .collect();
    let mut want: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|k| {
            !(k.ends_with("/Adam") || k.ends_with("/Adam_1") || k.starts_with("beta"))
                && *k != "global_step"
        })
        .collect();
    assert!(want.len() >= 2 && want.len() < all.len(), "{all:?}");
    want.sort_unstable();
    assert_eq!(out.trim(), want.join(" "), "tf1_adam");
}

/// Through real mounts, the safetensors package maps `weights.safetensors` of a TF2 checkpoint,
/// a SavedModel and a `.keras` file (bfloat16 included) and reads every weight with the value
/// TensorFlow or h5py reads under the key `tfmount.keys` maps it to (the checks of
/// [`WEIGHTS_CHECK`], on the mounted file itself).
#[test]
fn weights_safetensors_through_a_real_mount() {
    if python().is_none() {
        return;
    }
    let mounts: Vec<(Mount, &str, &str, &str)> = [
        ("tf2_keras/ckpt-1", "tf", NAMES_JSON, "tf2_keras/ckpt-1"),
        ("demo_savedmodel", "tf", NAMES_JSON, "demo_savedmodel"),
        (
            "keras/model.keras",
            "keras",
            "keras/expected/model.keras.json",
            "keras",
        ),
    ]
    .into_iter()
    .map(|(src, kind, exp, name)| (Mount::start(&fixtures().join(src), &[]), kind, exp, name))
    .collect();
    let jobs: Vec<Value> = mounts
        .iter()
        .map(|(m, kind, exp, name)| {
            weights_job(&m.path().join("weights.safetensors"), kind, exp, name)
        })
        .collect();
    let checked = check_weights(&jobs);
    assert!(checked >= 30, "only {checked} tensors checked");
    // The names/ links of the TF2 checkpoint name the same tensors as the file.
    let mnt = mounts[0].0.path();
    for name in ["seq/hidden/kernel", "seq/logits/bias"] {
        let link = std::fs::read_link(mnt.join(format!("names/{name}.bin"))).expect("readlink");
        assert!(
            link.to_string_lossy()
                .contains("variables/optimizer/_trainable_variables/"),
            "names/{name}: {}",
            link.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// tensors.tsv and summary.txt
// ---------------------------------------------------------------------------------------------

/// Undoes the TSV field escaping (`\t`, `\n`, `\r`, `\\`, `\xHH`).
fn tsv_unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' {
            match s.get(i + 1) {
                Some(b't') => out.push(b'\t'),
                Some(b'n') => out.push(b'\n'),
                Some(b'r') => out.push(b'\r'),
                Some(b'\\') => out.push(b'\\'),
                Some(b'x') => {
                    let h = std::str::from_utf8(&s[i + 2..i + 4]).expect("hex");
                    out.push(u8::from_str_radix(h, 16).expect("hex"));
                    i += 2;
                }
                other => panic!("bad escape {other:?}"),
            }
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// Reads `summary.txt`'s `name: 1,234` line as a number.
fn summary_number(text: &str, name: &str) -> u128 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"));
    let num: String = line[name.len() + 2..]
        .split(' ')
        .next()
        .expect("number")
        .replace(',', "");
    num.parse().expect("number")
}

/// `tensors.tsv` of every fixture's checkpoints, parsed, equals TensorFlow's record (key,
/// dtype, shape, nbytes, path, stored CRC-32C unmasked, shard, offset; `-` for partitioned
/// tensors), one line per tensor in key order; `summary.txt` totals equal the record's sums.
#[test]
fn tsv_and_summary_equal_tensorflow_record() {
    let mut lines_checked = 0;
    for c in checkpoints() {
        let name = c.name();
        let fs = open_fs_ok(&c.source);
        let tsv = read_path(&fs, &c.path(b"tensors.tsv")).expect("tensors.tsv");
        // Chunked reads (from the marks) give the same bytes.
        let a = lookup_path(&fs, &c.path(b"tensors.tsv")).expect("tsv");
        assert_eq!(a.size, tsv.len() as u64);
        assert_eq!(read_all(&fs, a.ino, 13, usize::MAX).expect("read"), tsv);
        let mut lines = tsv.split(|&b| b == b'\n').collect::<Vec<_>>();
        assert_eq!(lines.pop(), Some(&b""[..]), "{name}: ends in a newline");
        assert_eq!(
            lines[0],
            b"key\tdtype\tshape\tnbytes\tpath\tcrc32c\tshard\toffset"
        );
        let mut by_key: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        let mut order = Vec::new();
        for l in &lines[1..] {
            let f: Vec<Vec<u8>> = l.split(|&b| b == b'\t').map(|x| x.to_vec()).collect();
            assert_eq!(f.len(), 8, "{name}: {}", show(l));
            let key = tsv_unescape(&f[0]);
            order.push(key.clone());
            by_key.insert(key, f);
        }
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "{name}: key order");
        let recs = c.records();
        assert_eq!(by_key.len(), recs.len(), "{name}: one line per tensor");
        let (mut bytes, mut params) = (0u128, 0u128);
        for r in &recs {
            let key = common::rec_key(r);
            let f = by_key
                .get(&key)
                .unwrap_or_else(|| panic!("{name}: no line for {}", show(&key)));
            let dtype = r["dtype"].as_str().expect("dtype");
            let shape = common::dims(&r["shape"]);
            let nbytes = r["nbytes"]
                .as_u64()
                .or_else(|| r["stored"]["size"].as_u64())
                .expect("nbytes");
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            assert_eq!(show(&f[1]), dtype, "{name}: {}", show(&key));
            assert_eq!(show(&f[2]), dims.join(" "), "{name}: {}", show(&key));
            assert_eq!(show(&f[3]), nbytes.to_string(), "{name}: {}", show(&key));
            let mut path = b"variables/".to_vec();
            path.extend_from_slice(&stem_path(r));
            path.extend_from_slice(b".bin");
            assert_eq!(tsv_unescape(&f[4]), path, "{name}: path");
            let stored = &r["stored"];
            let (crc, shard, offset) = match stored["crc32c_masked"].as_u64() {
                Some(m) => (
                    format!("{:08x}", unmask(m as u32)),
                    stored["shard_id"].as_u64().expect("shard").to_string(),
                    stored["offset"].as_u64().expect("offset").to_string(),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            assert_eq!(
                (show(&f[5]), show(&f[6]), show(&f[7])),
                (crc, shard, offset),
                "{name}: {}",
                show(&key)
            );
            lines_checked += 1;
            bytes += nbytes as u128;
            if !["string", "variant", "resource"].contains(&dtype) {
                params += shape.iter().map(|&d| d as u128).product::<u128>();
            }
        }
        let summary = read_path(&fs, &c.path(b"summary.txt")).expect("summary.txt");
        let summary = String::from_utf8(summary).expect("utf-8");
        assert_eq!(summary_number(&summary, "tensors"), recs.len() as u128);
        assert_eq!(summary_number(&summary, "parameters"), params, "{name}");
        assert_eq!(summary_number(&summary, "bytes"), bytes, "{name}");
    }
    assert!(lines_checked > 150, "{lines_checked}");
}

// ---------------------------------------------------------------------------------------------
// text/ and stats/
// ---------------------------------------------------------------------------------------------

/// Parses `text/` files back and recomputes `stats/` with numpy: `argv[1]` is a JSON list of
/// `{dtype, shape, bin, text, stats}` (paths; `text`/`stats` null where the view has no file).
/// Values are decoded from the `.bin` bytes (whose sha256 the caller checked against
/// TensorFlow's record) by numpy, and ml_dtypes where it is installed (float8, float4, int4...:
/// without it those text files are skipped). Prints `texts stats skipped`.
const VALUES_CHECK: &str = r#"
import sys, json, codecs, math, struct, warnings
import numpy as np
warnings.simplefilter("ignore")
try:
    import ml_dtypes as m
except ImportError:
    m = None
PLAIN = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "int8": "i1", "int16": "<i2",
         "int32": "<i4", "int64": "<i8", "uint8": "u1", "uint16": "<u2", "uint32": "<u4",
         "uint64": "<u8", "qint8": "i1", "quint8": "u1", "qint16": "<i2", "quint16": "<u2",
         "qint32": "<i4", "complex64": "<c8", "complex128": "<c16"}
ML = ["float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz",
      "float8_e4m3b11fnuz", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"]
def values(dt, raw):
    """The tensor's values as numpy holds them, or None if this Python cannot decode them."""
    if dt in PLAIN:
        return np.frombuffer(raw, PLAIN[dt])
    if dt == "bool":
        return np.frombuffer(raw, np.uint8) != 0
    if dt == "bfloat16":
        if m is not None:
            return np.frombuffer(raw, m.bfloat16).astype(np.float32)
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    if dt in ML and m is not None:
        v = np.frombuffer(raw, getattr(m, dt))
        return v.astype(np.int64 if "int" in dt else np.float32)
    return None
def same_float(got, want, ft):
    # The text is the shortest form that reads back to the value in `ft`.
    got, want = ft(got), ft(want)
    if np.isnan(want):
        return bool(np.isnan(got))
    return got == want and math.copysign(1, got) == math.copysign(1, want)
def strings(raw):
    out, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<Q", raw, i); i += 8
        out.append(raw[i:i + n]); i += n
    return out
texts = stats = skipped = 0
for job in json.load(open(sys.argv[1])):
    dt, shape = job["dtype"], job["shape"]
    raw = open(job["bin"], "rb").read()
    n = math.prod(shape)
    where = job["bin"]
    if job["text"] is not None:
        text = open(job["text"], "rb").read().decode("utf-8")
        if dt == "string":
            lines = text.split("\n")
            assert lines[-1] == "" and len(lines) == n + 1, where
            want = strings(raw)
            assert [codecs.escape_decode(l.encode())[0] for l in lines[:-1]] == want, where
            texts += 1
        else:
            v = values(dt, raw)
            if v is None:
                skipped += 1
            else:
                assert v.size == n, where
                lines = text.split("\n")
                assert lines[-1] == "", where
                lines = lines[:-1]
                row = shape[-1] if shape else 1
                assert len(lines) == (n // row if n else 0), (where, len(lines))
                # Fixed-width cells: every line equally long, every token right-aligned in a
                # cell of the same width (width + 1 bytes with its separator).
                cell = len(text) // n if n else 1
                assert len(text) == n * cell, where
                assert all(len(l) == row * cell - 1 for l in lines), where
                assert all(l[i] == " " for l in lines for i in range(cell - 1, len(l), cell))
                cells = [l[i:i + cell - 1] for l in lines for i in range(0, len(l), cell)]
                toks = [c.strip() for c in cells]
                assert all(t and " " not in t and c.endswith(t) for c, t in zip(cells, toks)), where
                assert len(toks) == n, where
                ft = np.float64 if dt in ("float64", "complex128") else np.float32
                for tok, want in zip(toks, v.tolist()):
                    if dt == "bool":
                        assert tok == ("true" if want else "false"), (where, tok)
                    elif isinstance(want, complex):
                        got = complex(tok)
                        assert same_float(got.real, want.real, ft), (where, tok, want)
                        assert same_float(got.imag, want.imag, ft), (where, tok, want)
                    elif isinstance(want, float):
                        assert same_float(float(tok), want, ft), (where, tok, want)
                    else:
                        assert int(tok) == want, (where, tok, want)
                texts += 1
    if job["stats"] is not None:
        got = {}
        for l in open(job["stats"], encoding="utf-8").read().splitlines():
            k, _, val = l.partition(": ")
            got[k] = val if k == "histogram" else val.strip()
        a = values(dt, raw)
        if a is None:
            skipped += 1
            continue
        if dt == "bool":
            a = a.astype(np.uint8)
        isf = a.dtype.kind == "f"
        f = a[np.isfinite(a)] if isf else a
        assert int(got["count"]) == a.size and int(got["finite"]) == f.size, where
        if isf:
            assert int(got["nan"]) == int(np.isnan(a).sum()), where
            assert int(got["+inf"]) == int((a == np.inf).sum()), where
            assert int(got["-inf"]) == int((a == -np.inf).sum()), where
        assert int(got["zeros"]) == int((a == 0).sum()), where
        if f.size:
            conv = (lambda s: a.dtype.type(float(s))) if isf else int
            assert conv(got["min"]) == f.min() and conv(got["max"]) == f.max(), (where, got)
            g = f.astype(np.float64)
            rms = float(np.sqrt(np.mean(g * g)))
            for k, want in (("mean", float(np.mean(g))), ("std", float(np.std(g)))):
                x = float(got[k])
                assert x == want or abs(x - want) <= 1e-12 * rms, (where, dt, k, x, want)
            try:
                counts, edges = np.histogram(f, bins=16, range=(f.min(), f.max()))
            except ValueError:
                counts = None
        else:
            assert got["min"] == "nan" and got["mean"] == "nan", where
            counts = None
        # 16 bars (or n/a), padded with spaces to 48 bytes.
        assert len(got["histogram"].encode()) == 48, where
        if counts is None:
            assert got["histogram"].startswith("n/a"), (where, got["histogram"])
            assert set(got["edges"].split()) == {"-"} and set(got["counts"].split()) == {"-"}
        else:
            assert [int(c) for c in got["counts"].split()] == [int(c) for c in counts], where
            assert [edges.dtype.type(float(e)) for e in got["edges"].split()] == list(edges), where
            bars = got["histogram"][:16]
            assert set(bars) <= set(" ▁▂▃▄▅▆▇█") and got["histogram"][16:].strip() == "", where
            assert [b != " " for b in bars] == [c > 0 for c in counts], where
        stats += 1
print(texts, stats, skipped)
"#;

/// Every fixture's `text/` parses back (Python) to the values of TensorFlow's bytes (floats
/// exactly, strings through their escapes), and every `stats/` file equals numpy's figures on
/// them; each view has a file exactly for the dtypes it supports.
#[test]
fn text_and_stats_equal_numpy_on_tensorflow_values() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    let mut n = 0;
    for c in checkpoints() {
        let name = c.name();
        let fs = open_fs_ok(&c.source);
        for r in c.records() {
            let dtype = r["dtype"].as_str().expect("dtype").to_string();
            let Some(sha) = r["sha256"].as_str() else {
                continue; // variant: served as stored, no values
            };
            let bin = read_path(&fs, &view_path(&c, r, "variables", ".bin")).expect("bin");
            assert_eq!(sha256_hex(&bin), sha, "{name}: TensorFlow's bytes");
            let text = read_path(&fs, &view_path(&c, r, "text", ".txt"));
            let stats = read_path(&fs, &view_path(&c, r, "stats", ".txt"));
            // The size stat gave (before any read) is what a read to the end returned: the
            // numeric text's from the dtype and shape, the statistics' from dtype and count.
            for (view, b) in [("text", &text), ("stats", &stats)] {
                if let Some(b) = b {
                    let fresh = open_fs_ok(&c.source);
                    let a = lookup_path(&fresh, &view_path(&c, r, view, ".txt")).expect("lookup");
                    assert_eq!(
                        a.size,
                        b.len() as u64,
                        "{name}: {view} of {}",
                        show(&common::rec_key(r))
                    );
                }
            }
            let shape = common::dims(&r["shape"]);
            if let (Some(t), Ok(Some(cols))) = (&text, Columns::new(dtype_of(&dtype), &shape)) {
                assert_eq!(t.len() as u64, cols.len(), "{name}: {dtype}");
            }
            if let Some(st) = &stats {
                let n = shape.iter().product::<u64>();
                let want = stats::text_len(dtype_of(&dtype), n).expect("stats dtype");
                assert_eq!(st.len() as u64, want, "{name}: stats of {dtype}");
            }
            let has_stats = !["string", "complex64", "complex128", "variant"].contains(&&*dtype);
            assert_eq!(
                (text.is_some(), stats.is_some()),
                (dtype != "variant", has_stats),
                "{name}: {} ({dtype})",
                show(&common::rec_key(r))
            );
            let mut paths = Vec::new();
            for (what, b) in [("bin", Some(bin)), ("text", text), ("stats", stats)] {
                paths.push(b.map(|b| {
                    let p = dir.path().join(format!("{n}.{what}"));
                    std::fs::write(&p, b).expect("write");
                    p
                }));
            }
            jobs.push(json!({
                "dtype": dtype,
                "shape": common::dims(&r["shape"]),
                "bin": paths[0],
                "text": paths[1],
                "stats": paths[2],
            }));
            n += 1;
        }
    }
    let list = dir.path().join("jobs.json");
    std::fs::write(&list, serde_json::to_vec(&jobs).expect("json")).expect("write");
    let out = run_python(VALUES_CHECK, &[list.as_os_str()]);
    let counts: Vec<u64> = out
        .split_whitespace()
        .map(|x| x.parse().expect("count"))
        .collect();
    eprintln!(
        "text files checked {}, stats {}, skipped (no ml_dtypes) {}",
        counts[0], counts[1], counts[2]
    );
    // Without ml_dtypes (CI) 14 text and 14 stats files of narrow dtypes are skipped.
    assert!(counts[0] >= 140 && counts[1] >= 125, "{out}");
}

// ---------------------------------------------------------------------------------------------
// xattrs
// ---------------------------------------------------------------------------------------------

/// Every tensor file (`.bin`, `.npy`, `.shape`, `.dtype`, `text/` and `stats/` `.txt`) lists
/// the six attributes, with TensorFlow's key, dtype, shape and stored location (per slice for
/// partitioned tensors, from the record's slice entries).
#[test]
fn xattrs_carry_dtype_shape_and_stored_location() {
    let names = [
        "user.tfmount.key",
        "user.tfmount.dtype",
        "user.tfmount.shape",
        "user.tfmount.crc32c",
        "user.tfmount.shard",
        "user.tfmount.offset",
    ];
    let mut checked = 0;
    for c in checkpoints() {
        let name = c.name();
        let fs = open_fs_ok(&c.source);
        let slices = c.expected["slice_entries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in c.records() {
            let key = common::rec_key(r);
            let dims: Vec<String> = common::dims(&r["shape"])
                .iter()
                .map(|d| d.to_string())
                .collect();
            // (crc, shard, offset) of each stored piece.
            let mut want: Vec<(String, String, String)> =
                match r["stored"]["crc32c_masked"].as_u64() {
                    Some(m) => vec![(
                        format!("{:08x}", unmask(m as u32)),
                        r["stored"]["shard_id"].to_string(),
                        r["stored"]["offset"].to_string(),
                    )],
                    None => slices
                        .iter()
                        .filter(|s| s["of"].as_str().map(str::as_bytes) == Some(&key[..]))
                        .map(|s| {
                            let st = &s["stored"];
                            (
                                format!(
                                    "{:08x}",
                                    unmask(st["crc32c_masked"].as_u64().expect("crc") as u32)
                                ),
                                st["shard_id"].to_string(),
                                st["offset"].to_string(),
                            )
                        })
                        .collect(),
                };
            want.sort();
            assert!(!want.is_empty(), "{name}: {}: no stored pieces", show(&key));
            let files = [
                ("variables", ".bin"),
                ("variables", ".shape"),
                ("variables", ".dtype"),
                ("variables", ".npy"),
                ("text", ".txt"),
                ("stats", ".txt"),
            ];
            for (view, suffix) in files {
                let Ok(a) = lookup_path(&fs, &view_path(&c, r, view, suffix)) else {
                    continue;
                };
                let list = fs.listxattr(a.ino).expect("listxattr");
                let listed: Vec<&[u8]> =
                    list.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
                let want_names: Vec<&[u8]> = names.iter().map(|s| s.as_bytes()).collect();
                assert_eq!(listed, want_names, "{name}: {}{suffix}", show(&key));
                let get = |n: &str| show(&fs.getxattr(a.ino, n.as_bytes()).expect("getxattr"));
                assert_eq!(fs.getxattr(a.ino, names[0].as_bytes()).expect("key"), key);
                assert_eq!(get(names[1]), r["dtype"].as_str().expect("dtype"));
                assert_eq!(get(names[2]), dims.join(" "));
                let (crc, shard, off) = (get(names[3]), get(names[4]), get(names[5]));
                let split = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
                let (crc, shard, off) = (split(&crc), split(&shard), split(&off));
                assert!(crc.len() == shard.len() && crc.len() == off.len());
                let mut got: Vec<_> = (0..crc.len())
                    .map(|i| (crc[i].clone(), shard[i].clone(), off[i].clone()))
                    .collect();
                got.sort();
                assert_eq!(got, want, "{name}: {}{suffix}", show(&key));
                checked += 1;
            }
        }
    }
    assert!(checked > 600, "{checked}");
}

// ---------------------------------------------------------------------------------------------
// Exact sizes
// ---------------------------------------------------------------------------------------------

/// The local filesystem, counting the bytes read from data shards (`*.data-*`): what reading
/// tensor data costs, as opposed to the index.
struct CountingStore(Arc<AtomicU64>);

struct CountedFile {
    inner: Arc<dyn ByteSource>,
    data: bool,
    n: Arc<AtomicU64>,
}

impl ReadAt for CountedFile {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError> {
        if self.data {
            self.n.fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        self.inner.read_exact_at(buf, offset)
    }
}

impl ByteSource for CountedFile {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn meta(&self) -> FileMeta {
        self.inner.meta()
    }
    fn changed(&self) -> bool {
        self.inner.changed()
    }
}

impl Store for CountingStore {
    fn kind(&self, path: &Path) -> Option<EntryKind> {
        LocalStore.kind(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<(std::ffi::OsString, EntryKind)>> {
        LocalStore.list(dir)
    }
    fn open(&self, path: &Path) -> std::io::Result<Arc<dyn ByteSource>> {
        let data = path.to_string_lossy().contains(".data-");
        Ok(Arc::new(CountedFile {
            inner: LocalStore.open(path)?,
            data,
            n: self.0.clone(),
        }))
    }
    fn meta(&self, path: &Path) -> std::io::Result<FileMeta> {
        LocalStore.meta(path)
    }
}

/// `ls -l` of a view's directory as READDIRPLUS answers it: every entry with its size, `None`
/// where the attributes are left out (a string tensor's text: its size means a pass over its
/// bytes, which a listing must not cost). Each size given is what `getattr` says.
fn ls_l(fs: &Fs, dir: &str) -> Vec<(String, Kind, Option<u64>)> {
    let d = lookup_path(fs, dir.as_bytes()).expect("dir");
    let mut out = Vec::new();
    fs.readdir_plus(d.ino, 0, |e, a| {
        if e.name != b"." && e.name != b".." {
            out.push((show(&e.name), e.kind, a.map(|a| a.size), e.ino));
        }
        false
    })
    .expect("readdirplus");
    out.into_iter()
        .map(|(n, k, size, ino)| {
            if let Some(s) = size {
                assert_eq!(s, fs.getattr(ino).expect("getattr").size, "{dir}/{n}");
            }
            (n, k, size)
        })
        .collect()
}

/// Through the core: `ls -l` of `text/` and `stats/` reads no tensor data (counted at the data
/// shards) and gives every numeric file's exact size (the text's from the dtype and shape, the
/// statistics' from the dtype and the element count); READDIRPLUS carries those sizes. A
/// string tensor's text is sized by one pass over its bytes. Reads to the end give exactly the
/// size, reads at random offsets the slices of the whole text. `stats/` shows no directory that
/// leads only to tensors without statistics.
#[test]
fn stat_is_exact_and_reads_no_tensor_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (prefix, tensors) = write_big(dir.path());
    let read = Arc::new(AtomicU64::new(0));
    let probed = probe(&prefix).expect("probe");
    let fs = Fs::with_store(
        Arc::new(CountingStore(read.clone())),
        &probed,
        &common::views_listed(),
    )
    .expect("fs");
    read.store(0, Ordering::Relaxed);
    let big = 1_000_000u64;
    let text_big = Columns::new(DType(1), &[1000, 1000])
        .expect("columns")
        .expect("numeric")
        .len();
    assert_eq!(text_big, big * 16, "float32: 15 characters and a separator");
    let stats_big = stats::text_len(DType(1), big).expect("stats");
    let listed = [
        ("text", ls_l(&fs, "text")),
        ("text/big", ls_l(&fs, "text/big")),
        ("stats", ls_l(&fs, "stats")),
        ("stats/big", ls_l(&fs, "stats/big")),
        ("text/cplx/only", ls_l(&fs, "text/cplx/only")),
    ];
    assert_eq!(read.load(Ordering::Relaxed), 0, "ls -l read tensor data");
    let names = |l: &[(String, Kind, Option<u64>)]| {
        l.iter()
            .map(|e| (e.0.clone(), e.2.is_some()))
            .collect::<Vec<_>>()
    };
    let named = |n: &[(&str, bool)]| {
        n.iter()
            .map(|(s, b)| (s.to_string(), *b))
            .collect::<Vec<_>>()
    };
    // Only the string tensor's text comes without attributes: its size needs a pass.
    assert_eq!(
        names(&listed[0].1),
        named(&[
            ("big", true),
            ("cplx", true),
            ("small.txt", true),
            ("vocab.txt", false)
        ])
    );
    assert_eq!(
        listed[1].1,
        [("weights.txt".into(), Kind::File, Some(text_big))]
    );
    // No stats for strings or complex numbers, and no directories leading only to them.
    assert_eq!(
        names(&listed[2].1),
        named(&[("big", true), ("small.txt", true)])
    );
    assert_eq!(
        listed[3].1,
        [("weights.txt".into(), Kind::File, Some(stats_big))]
    );
    assert_eq!(listed[4].1, [("z.txt".into(), Kind::File, Some(2 * 32))]);
    for p in [
        "stats/cplx",
        "stats/cplx/only",
        "stats/cplx/only/z.txt",
        "stats/vocab.txt",
    ] {
        assert!(lookup_path(&fs, p.as_bytes()).is_err(), "{p}");
    }
    assert_eq!(read.load(Ordering::Relaxed), 0, "lookups read tensor data");
    // The string tensor's text: one pass over its bytes (and the check of their checksum).
    let vocab = &tensors.iter().find(|t| t.0 == "vocab").expect("vocab").3;
    let a = lookup_path(&fs, b"text/vocab.txt").expect("vocab");
    let n = read.swap(0, Ordering::Relaxed);
    assert!(n > 0 && n <= 3 * vocab.len() as u64, "{n}");
    assert_eq!(fs.getattr(a.ino).expect("getattr").size, a.size);
    assert_eq!(read.load(Ordering::Relaxed), 0, "sized once");

    for (key, dtype, shape, bytes) in &tensors {
        let whole = render_all(*dtype, shape, bytes).expect("render");
        let a = lookup_path(&fs, format!("text/{key}.txt").as_bytes()).expect("lookup");
        assert_eq!(a.size, whole.len() as u64, "{key}: the first stat is exact");
        let got = read_all(&fs, a.ino, 128 << 10, usize::MAX).expect("read");
        assert!(got == whole, "{key}: a read to the end");
        assert_eq!(fs.getattr(a.ino).expect("getattr").size, a.size, "{key}");
        let mut rng = common::Rng::new(7);
        for _ in 0..100 {
            let x = rng.next();
            let off = (x >> 16) % (whole.len() as u64 + 5);
            let n = ((x >> 40) % 300_000) as usize;
            let got = fs.read(a.ino, off, n).expect("read");
            let from = (off as usize).min(whole.len());
            let end = (from + n).min(whole.len());
            assert_eq!(got, &whole[from..end], "{key}: read({off}, {n})");
        }
    }
    // The tail of the big text renders only the elements it covers.
    let a = lookup_path(&fs, b"text/big/weights.txt").expect("lookup");
    read.store(0, Ordering::Relaxed);
    let tail = fs.read(a.ino, a.size - 100, 100).expect("read");
    assert_eq!(tail.len(), 100);
    assert!(
        read.load(Ordering::Relaxed) <= 4 * 8,
        "tail read {} bytes",
        read.load(Ordering::Relaxed)
    );
    // Statistics are computed when read, and have the size stat said.
    let s = lookup_path(&fs, b"stats/big/weights.txt").expect("stats");
    let text = read_all(&fs, s.ino, 4096, usize::MAX).expect("read");
    assert_eq!(text.len() as u64, stats_big);
    assert!(show(&text).starts_with(&format!("count:     {:>24}\n", big)));
}

/// A tensor written: key, dtype, shape, `.bin` bytes.
type Written = (&'static str, DType, Vec<u64>, Vec<u8>);

/// A checkpoint with a float32 tensor of 16 MB of text, a string tensor (with escapes and
/// multi-byte characters), a small tensor and a complex one. Returns the prefix and the
/// tensors.
fn write_big(dir: &Path) -> (PathBuf, Vec<Written>) {
    let prefix = dir.join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let mut rng = common::Rng::new(0x2545_f491_4f6c_dd1d);
    let big: Vec<u8> = (0..1_000_000)
        .flat_map(|_| {
            let x = rng.next();
            (f32::from_bits((x >> 32) as u32 & 0x3fff_ffff) - 1.0).to_le_bytes()
        })
        .collect();
    w.add(b"big/weights", DType(1), &[1000, 1000], &big, 0)
        .expect("add");
    let strs: Vec<Vec<u8>> = (0..100_000u32)
        .map(|i| format!("word {i}\n\t{}", "é".repeat((i % 5) as usize)).into_bytes())
        .collect();
    let refs: Vec<&[u8]> = strs.iter().map(|s| s.as_slice()).collect();
    w.add_strings(b"vocab", &[100_000], &refs, 0)
        .expect("strings");
    let small = [1.5f32, -2.0, 0.25]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect::<Vec<_>>();
    w.add(b"small", DType(1), &[3], &small, 0).expect("add");
    let complex: Vec<u8> = [1.5f32, -2.0, 0.0, -0.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    w.add(b"cplx/only/z", DType(8), &[2], &complex, 0)
        .expect("add");
    w.finish().expect("finish");
    let mut served = Vec::new();
    for s in &strs {
        served.extend_from_slice(&(s.len() as u64).to_le_bytes());
        served.extend_from_slice(s);
    }
    let tensors = vec![
        ("big/weights", DType(1), vec![1000, 1000], big),
        ("vocab", DType(7), vec![100_000], served),
        ("small", DType(1), vec![3], small),
        ("cplx/only/z", DType(8), vec![2], complex),
    ];
    (prefix, tensors)
}

// ---------------------------------------------------------------------------------------------
// Through real mounts
// ---------------------------------------------------------------------------------------------

/// Through the kernel, `text/` files have their exact size from the first `stat`: `tail -c`,
/// `wc -c <`, `head -c`, `cat`, `cat > file`, Python's `open().read()`, `tar` and `du` all see
/// the core's rendering.
/// `model.safetensors` of the fixtures is read by `safe_open` through the mount (mmap), and the
/// xattrs list through the kernel.
#[test]
fn views_through_a_real_mount() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (prefix, tensors) = write_big(dir.path());
    let m = Mount::start(&prefix, &[]);
    let mnt = m.path();
    for (key, dtype, shape, bytes) in &tensors {
        let whole = render_all(*dtype, shape, bytes).expect("render");
        let p = mnt.join(format!("text/{key}.txt"));
        let first = std::fs::metadata(&p).expect("stat").len();
        assert_eq!(first, whole.len() as u64, "{key}: the first stat");
        // Tools that trust the size see what a read gives: tail seeks from the end, wc -c on a
        // redirect takes the size.
        let tail = Command::new("tail")
            .args(["-c", "100"])
            .arg(&p)
            .output()
            .expect("tail");
        assert!(tail.status.success());
        let last = &whole[whole.len().saturating_sub(100)..];
        assert_eq!(tail.stdout, last, "{key}: tail -c 100");
        let wc = Command::new("sh")
            .arg("-c")
            .arg("wc -c < \"$1\"")
            .arg("sh")
            .arg(&p)
            .output()
            .expect("wc");
        assert_eq!(
            show(&wc.stdout).trim(),
            whole.len().to_string(),
            "{key}: wc -c"
        );
        let head = Command::new("head")
            .args(["-c", "1000"])
            .arg(&p)
            .output()
            .expect("head");
        assert_eq!(head.stdout, &whole[..1000.min(whole.len())], "{key}: head");
        let cat = Command::new("cat").arg(&p).output().expect("cat");
        assert!(cat.status.success());
        assert_eq!(cat.stdout.len(), whole.len(), "{key}: cat length");
        assert!(cat.stdout == whole, "{key}: cat content");
        let copy = dir.path().join("copy.txt");
        let st = Command::new("sh")
            .arg("-c")
            .arg("cat \"$1\" > \"$2\"")
            .arg("sh")
            .arg(&p)
            .arg(&copy)
            .status()
            .expect("cat > file");
        assert!(st.success());
        assert!(
            std::fs::read(&copy).expect("copy") == whole,
            "{key}: cat > file"
        );
        let py = run_python(
            "import sys, hashlib\nprint(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\nprint(len(open(sys.argv[1], encoding='utf-8').read().encode()))",
            &[p.as_os_str()],
        );
        let mut lines = py.lines();
        assert_eq!(
            lines.next(),
            Some(sha256_hex(&whole).as_str()),
            "{key}: python"
        );
        assert_eq!(
            lines.next(),
            Some(whole.len().to_string().as_str()),
            "{key}: text mode"
        );
        assert_eq!(
            std::fs::metadata(&p).expect("stat").len(),
            whole.len() as u64,
            "{key}: exact"
        );
        // A fresh Rust read of the whole file.
        assert!(
            std::fs::read(&p).expect("read") == whole,
            "{key}: std::fs::read"
        );
    }
    // tar archives what reads give, whole ("file changed as we read it" was the symptom of
    // sizes that grew), du counts it, and the unpacked files equal the core's.
    let archive = dir.path().join("views.tar");
    let tar = Command::new("tar")
        .arg("cf")
        .arg(&archive)
        .arg("-C")
        .arg(&mnt)
        .args(["text", "stats"])
        .output()
        .expect("tar");
    assert!(
        tar.status.success() && tar.stderr.is_empty(),
        "tar: {}",
        show(&tar.stderr)
    );
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).expect("mkdir");
    let st = Command::new("tar")
        .arg("xf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .expect("tar x");
    assert!(st.success());
    let core = open_fs_ok(&prefix);
    let mut text_bytes = 0;
    for (key, ..) in &tensors {
        for view in ["text", "stats"] {
            let rel = format!("{view}/{key}.txt");
            let want = read_path(&core, rel.as_bytes());
            let got = std::fs::read(unpacked.join(&rel)).ok();
            assert!(got == want, "{rel}: tar");
            if view == "text" {
                text_bytes += want.map_or(0, |w| w.len());
            }
        }
    }
    let du = Command::new("du")
        .args(["-s", "-b"])
        .arg(mnt.join("text"))
        .output()
        .expect("du");
    let du = show(&du.stdout);
    assert_eq!(
        du.split_whitespace().next(),
        Some(text_bytes.to_string().as_str())
    );
    // xattrs through the kernel.
    let x = run_python(
        "import os, sys\nfor n in os.listxattr(sys.argv[1]): print(n, os.getxattr(sys.argv[1], n).decode())",
        &[mnt.join("stats/big/weights.txt").as_os_str()],
    );
    let want_prefix = "user.tfmount.key big/weights\nuser.tfmount.dtype float32\nuser.tfmount.shape 1000 1000\nuser.tfmount.crc32c ";
    assert!(x.starts_with(want_prefix), "{x}");
    assert!(
        x.contains("\nuser.tfmount.shard 0\nuser.tfmount.offset 0\n"),
        "{x}"
    );
    drop(m);

    // model.safetensors of fixtures through mounts: safe_open maps the file.
    let mut jobs = Vec::new();
    let mut mounts = Vec::new();
    for c in checkpoints() {
        if !["all_dtypes", "partitioned", "tf1_adam"].contains(&c.fixture.as_str()) {
            continue;
        }
        let m = Mount::start(&c.source, &[]);
        let mut p = m.path();
        if !c.root.is_empty() {
            p = p.join(std::ffi::OsStr::from_bytes(&c.root));
        }
        jobs.push((p.join("model.safetensors"), c.expected_path.clone()));
        mounts.push(m);
    }
    assert_eq!(jobs.len(), 4);
    let checked = check_safetensors(&jobs);
    assert!(checked > 60, "{checked}");
    // A live checkpoint directory: the root files through `latest` too.
    let adam = jobs
        .iter()
        .find(|(p, _)| p.to_string_lossy().contains("model.ckpt-3"))
        .expect("tf1_adam");
    let latest = adam
        .0
        .parent()
        .and_then(Path::parent)
        .expect("mount")
        .join("latest");
    for f in [
        "model.safetensors",
        "tensors.tsv",
        "summary.txt",
        "stats/dense/kernel.txt",
    ] {
        let via = std::fs::read(latest.join(f)).expect("via latest");
        let direct = std::fs::read(adam.0.parent().expect("ckpt").join(f)).expect("direct");
        assert!(!via.is_empty() && via == direct, "latest/{f}");
    }
    // And a plain sequential read of one equals the core's bytes.
    let c = checkpoints()
        .into_iter()
        .find(|c| c.fixture == "all_dtypes")
        .expect("all_dtypes");
    let core = read_path(&open_fs_ok(&c.source), b"model.safetensors").expect("core");
    let all = jobs
        .iter()
        .find(|(_, e)| *e == c.expected_path)
        .expect("job");
    let mut f = std::fs::File::open(&all.0).expect("open");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut got).expect("read");
    assert!(got == core);
}

/// A directory component ending in `.txt` is escaped everywhere (rule 3), so the key `a.txt/b`
/// cannot collide with `text/a.txt`, the text of the tensor `a`.
#[test]
fn txt_directories_do_not_collide_with_text_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let one = 1.0f32.to_le_bytes();
    let two = 2.0f32.to_le_bytes();
    w.add(b"a", DType(1), &[], &one, 0).expect("add");
    w.add(b"a.txt/b", DType(1), &[], &two, 0).expect("add");
    w.finish().expect("finish");
    let fs = open_fs_ok(&prefix);
    for view in ["variables", "text", "stats"] {
        let d = lookup_path(&fs, view.as_bytes()).expect("view");
        let mut names = Vec::new();
        fs.readdir(d.ino, 0, |e| {
            names.push(show(&e.name));
            false
        })
        .expect("readdir");
        names.retain(|n| !n.starts_with('.'));
        names.sort();
        let want: Vec<&str> = match view {
            "variables" => vec!["a%2Etxt", "a.bin", "a.dtype", "a.npy", "a.shape"],
            _ => vec!["a%2Etxt", "a.txt"],
        };
        assert_eq!(names, want, "{view}");
    }
    assert_eq!(
        read_path(&fs, b"text/a.txt").expect("a"),
        format!("{:>15}\n", 1).as_bytes()
    );
    assert_eq!(
        read_path(&fs, b"text/a%2Etxt/b.txt").expect("b"),
        format!("{:>15}\n", 2).as_bytes()
    );
    assert!(lookup_path(&fs, b"text/a.txt/b.txt").is_err());
    assert!(lookup_path(&fs, b"variables/a.txt").is_err());
    assert!(lookup_path(&fs, b"text/a.bin").is_err());
    let tsv = read_path(&fs, b"tensors.tsv").expect("tsv");
    assert!(
        show(&tsv).contains("\tvariables/a%2Etxt/b.bin\t"),
        "{}",
        show(&tsv)
    );
}

// ---------------------------------------------------------------------------------------------
// model.safetensors with a damaged tensor
// ---------------------------------------------------------------------------------------------

/// One tensor whose bytes fail their CRC does not take `model.safetensors` down: the header
/// (page-aligned, alone in its pages) reads, `safe_open(...).keys()` and the metadata work, and
/// every tensor sharing no page and no read-ahead window with the damaged one reads exactly
/// through safetensors' mmap. Reading the damaged tensor fails (an error, or SIGBUS for an
/// mmap reader), never wrong bytes. Each read runs in a process of its own.
#[test]
fn damaged_tensor_leaves_the_rest_of_model_safetensors_readable() {
    let Some(py) = python() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    // 2 MiB tensors: a read-ahead window (1 MiB) around the damaged one never reaches the
    // tensors two keys away. The damaged one is first, right after the header: without the
    // header's own pages, reading the header would fail with it.
    let n = 512 * 1024;
    let mut want = Vec::new();
    for (i, key) in ["a_damaged", "b", "c", "d", "e"].iter().enumerate() {
        let vals: Vec<u8> = (0..n as u32)
            .flat_map(|j| (j as f32 * 0.5 + i as f32).to_le_bytes())
            .collect();
        w.add(key.as_bytes(), DType(1), &[n as u64], &vals, 0)
            .expect("add");
        want.push((key.to_string(), sha256_hex(&vals)));
    }
    w.finish().expect("finish");
    // Flip a byte near the start of a_damaged (the first tensor in shard 0).
    let data = tmp.path().join("ckpt.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).expect("data");
    let at = 16;
    bytes[at] ^= 0x40;
    std::fs::write(&data, &bytes).expect("write");

    let mut m = Mount::start(&prefix, &[]);
    let st = m.path().join("model.safetensors");
    let run = |code: &str| {
        Command::new(&py)
            .arg("-c")
            .arg(code)
            .arg(&st)
            .output()
            .expect("python")
    };
    let header = run("import sys, json\n\
         from safetensors import safe_open\n\
         h = open(sys.argv[1], 'rb').read(8)\n\
         assert len(h) == 8\n\
         with safe_open(sys.argv[1], 'np') as f:\n\
         \x20   print(json.dumps([sorted(f.keys()), f.metadata()]))\n");
    assert!(
        header.status.success(),
        "{}",
        String::from_utf8_lossy(&header.stderr)
    );
    let got: Value = serde_json::from_slice(&header.stdout).expect("json");
    assert_eq!(got[0], json!(["a_damaged", "b", "c", "d", "e"]));
    assert_eq!(got[1]["format"], "tf");
    for (key, sha) in &want {
        let out = run(&format!(
            "import sys, hashlib\n\
             from safetensors import safe_open\n\
             with safe_open(sys.argv[1], 'np') as f:\n\
             \x20   print(hashlib.sha256(f.get_tensor({key:?}).tobytes()).hexdigest())\n"
        ));
        if key == "a_damaged" {
            // An exception, or death by SIGBUS: never a value.
            assert!(!out.status.success(), "{key} read despite its damage");
            assert!(out.stdout.is_empty(), "{key}");
        } else if key == "d" || key == "e" {
            assert!(
                out.status.success(),
                "{key}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha, "{key}");
        }
        // b and c may share the damaged tensor's read-ahead window: exact or an error.
        else if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha, "{key}");
        }
    }
    assert_eq!(m.unmount(), Some(0));
}

/// A checkpoint of two float32 tensors for the `stats/` read-count tests: `small` (1,000,000
/// elements, 4 MB: at most 16 MiB, read once for both passes) and `large` (4,500,000 elements,
/// 18 MB: read twice); returns the prefix and each tensor's bytes.
fn write_stats_pair(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let prefix = dir.join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let values = |n: u32, k: f32| -> Vec<u8> {
        (0..n)
            .flat_map(|i| ((i % 1001) as f32 * k - 3.0).to_le_bytes())
            .collect()
    };
    let small = values(1_000_000, 0.25);
    let large = values(4_500_000, -0.125);
    w.add(b"small", DType(1), &[1_000_000], &small, 0)
        .expect("add");
    w.add(b"large", DType(1), &[4_500_000], &large, 0)
        .expect("add");
    w.finish().expect("finish");
    (prefix, small, large)
}

/// The core over `prefix` with data bytes counted in `read`.
fn counted_fs(prefix: &Path, read: &Arc<AtomicU64>, verify_crc: bool) -> Fs {
    let probed = probe(prefix).expect("probe");
    let opts = Options {
        verify_crc,
        ..common::views_listed()
    };
    Fs::with_store(Arc::new(CountingStore(read.clone())), &probed, &opts).expect("fs")
}

/// `stats/` reads a tensor's bytes as few times as it can: the CRC-32C check is folded into its
/// first pass (no pass of its own), a tensor of at most 16 MiB is read once for both passes and
/// a larger one twice; the check's outcome is then known, so the `.bin` is served with no check
/// pass. The figures are the in-memory computation's.
#[test]
fn stats_read_a_tensor_once_or_twice_with_the_check_folded_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (prefix, small, large) = write_stats_pair(dir.path());
    let read = Arc::new(AtomicU64::new(0));
    let fs = counted_fs(&prefix, &read, true);
    for (name, bytes, passes) in [("small", &small, 1u64), ("large", &large, 2)] {
        let n = bytes.len() as u64;
        read.store(0, Ordering::Relaxed);
        let text = read_path(&fs, format!("stats/{name}.txt").as_bytes()).expect("stats");
        let want = stats::compute(DType(1), bytes).expect("compute").to_text();
        assert_eq!(show(&text), show(&want), "{name}");
        assert_eq!(read.load(Ordering::Relaxed), passes * n, "{name}: stats");
        let bin = read_path(&fs, format!("variables/{name}.bin").as_bytes()).expect("bin");
        assert!(bin == *bytes, "{name}: .bin");
        assert_eq!(
            read.load(Ordering::Relaxed),
            (passes + 1) * n,
            "{name}: the .bin after the statistics"
        );
    }
}

/// A tensor whose bytes do not match their CRC-32C: its `stats/` file fails with EIO (the check
/// folded into the statistics' pass finds it), and so do later reads of it and of its `.bin`;
/// the other tensor's statistics read. Without the check (`nocrc`) the statistics are those of
/// the damaged bytes.
#[test]
fn stats_of_a_damaged_tensor_fail_with_eio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (prefix, small, large) = write_stats_pair(dir.path());
    let data = prefix.with_file_name("ckpt.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).expect("data");
    for (victim, orig, other) in [("small", &small, "large"), ("large", &large, "small")] {
        let at = bytes
            .windows(64)
            .position(|w| w == &orig[..64])
            .expect("the tensor's bytes in the data file");
        // The first, a middle and the last byte, one at a time (the large tensor's middle
        // only: what differs for it is the second pass, which a failed check never reaches).
        let offs = match victim {
            "small" => vec![0, orig.len() / 2, orig.len() - 1],
            _ => vec![orig.len() / 2],
        };
        for off in offs {
            bytes[at + off] ^= 0x40;
            std::fs::write(&data, &bytes).expect("write");
            let read = Arc::new(AtomicU64::new(0));
            let fs = counted_fs(&prefix, &read, true);
            let stats = lookup_path(&fs, format!("stats/{victim}.txt").as_bytes()).expect("stats");
            for what in ["first read", "again"] {
                let e = fs.read(stats.ino, 0, 65536).expect_err(what);
                assert_eq!(e.errno(), libc::EIO, "{victim} byte {off}, {what}: {e}");
                assert!(matches!(e, FsError::Corrupt { .. }), "{e:?}");
                assert!(e.to_string().contains("checksum mismatch"), "{e}");
            }
            let bin = lookup_path(&fs, format!("variables/{victim}.bin").as_bytes()).expect("bin");
            assert_eq!(
                fs.read(bin.ino, 0, 4096).expect_err(".bin").errno(),
                libc::EIO
            );
            assert!(read_path(&fs, format!("stats/{other}.txt").as_bytes()).is_some());
            let fs = counted_fs(&prefix, &read, false);
            let text = read_path(&fs, format!("stats/{victim}.txt").as_bytes()).expect("nocrc");
            let mut damaged = orig.to_vec();
            damaged[off] ^= 0x40;
            let want = stats::compute(DType(1), &damaged)
                .expect("compute")
                .to_text();
            assert_eq!(
                show(&text),
                show(&want),
                "{victim} byte {off} without the check"
            );
            bytes[at + off] ^= 0x40;
        }
    }
}
