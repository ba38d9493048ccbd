//! TensorFlow Lite models (`tests/fixtures/tflite/`, written by `scripts/gen_tflite.py` with TF's
//! own converter) served like checkpoints, checked against what TensorFlow reads from the same
//! files, asked live through the test virtualenv's Python (`TFMOUNT_PYTHON`):
//! `tf.lite.Interpreter` (`get_tensor`, `get_tensor_details`: bytes, dtype, shape, quantization)
//! for subgraph 0, TensorFlow's flatbuffer reader (`tensorflow.lite.tools.flatbuffer_utils`)
//! for which tensors hold data, the other subgraphs, the operators and signatures, and Python's
//! `zipfile` for the associated files. Also `verify`, `diff`, and one FUSE mount.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::requires;
use serde_json::Value;
use tfmount::model::open::{NodeKind, Tree};

const FIXTURES: [&str; 8] = [
    "float.tflite",
    "float_offsets.tflite",
    "dynamic_int8.tflite",
    "full_int8.tflite",
    "float16.tflite",
    "multi.tflite",
    "sparse.tflite",
    "with_metadata.tflite",
];

/// TensorFlow's reading of a model, as JSON.
const READER: &str = r#"
import json, sys, zipfile
import numpy as np
import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils as fu
from tensorflow.lite.python import schema_py_generated as s

names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}
def enum(cls):
    return {v: k for k, v in vars(cls).items() if not k.startswith("_")}
option_types = enum(s.BuiltinOptions)
# Option fields whose values are enums: the operator files name the value.
enums = {"padding": enum(s.Padding), "fused_activation_function": enum(s.ActivationFunctionType),
         "weights_format": enum(s.FullyConnectedOptionsWeightsFormat),
         "quantized_bias_type": enum(s.TensorType)}
def snake(name):
    return "".join("_" + c.lower() if c.isupper() else c for c in name)
def options(op):
    """The operator's builtin options as TensorFlow's reader holds them: the table's type name
    and its scalar fields (enums by name, bools, integers) as `field: value` texts."""
    if not op.builtinOptionsType:
        return None
    fields = []
    for k, v in sorted(vars(op.builtinOptions).items()):
        k = snake(k)
        if isinstance(v, bool):
            fields.append(f"{k}: {str(v).lower()}")
        elif isinstance(v, int):
            fields.append(f"{k}: {enums[k].get(v, v) if k in enums else v}")
    return {"type": option_types[op.builtinOptionsType], "fields": fields}
out = {}
for path in sys.argv[1:]:
    m = fu.read_model(path)
    it = tf.lite.Interpreter(model_path=path)
    it.allocate_tensors()
    details = {d["index"]: d for d in it.get_tensor_details()}
    subgraphs = []
    for si, sg in enumerate(m.subgraphs):
        tensors = []
        for i, t in enumerate(sg.tensors):
            b = m.buffers[t.buffer]
            if b.data is None or len(b.data) == 0:
                continue
            rec = {"index": i, "name": t.name.decode(), "buffer": int(t.buffer),
                   "sparse": t.sparsity is not None}
            if si == 0:
                v = it.get_tensor(i)
                d = details[i]
                q = d["quantization_parameters"]
                rec.update(dtype=v.dtype.name, shape=[int(x) for x in v.shape], bin=v.tobytes().hex(),
                           scales=[float(x) for x in q["scales"]],
                           zero_points=[int(x) for x in q["zero_points"]],
                           qdim=int(q["quantized_dimension"]))
                sc = np.asarray(q["scales"], dtype=np.float32)
                if sc.size:
                    zp = np.asarray(q["zero_points"], dtype=np.int64)
                    shape = [1] * v.ndim
                    if sc.size > 1:
                        shape[rec["qdim"]] = sc.size
                    else:
                        shape = [1] * v.ndim
                    sc = sc.reshape(shape) if v.ndim else sc.reshape(())
                    zp = (zp if zp.size > 1 else zp.reshape(-1)[:1]).reshape(shape) if v.ndim else zp.reshape(())
                    deq = ((v.astype(np.int64) - zp).astype(np.float64) * sc.astype(np.float64)).astype(np.float32)
                    rec["dequantized"] = deq.tobytes().hex()
            else:
                rec.update(bin=bytes(b.data).hex(), shape=[int(x) for x in t.shape])
            tensors.append(rec)
        ops = []
        for op in sg.operators:
            c = m.operatorCodes[op.opcodeIndex]
            code = max(c.builtinCode, c.deprecatedBuiltinCode)
            ops.append({"code": int(code), "name": names.get(code, str(code)),
                        "inputs": [int(x) for x in op.inputs], "outputs": [int(x) for x in op.outputs],
                        "options": options(op)})
        subgraphs.append({"tensors": tensors, "operators": ops,
                          "names": [t.name.decode() for t in sg.tensors]})
    sigs = [{"key": sd.signatureKey.decode(), "subgraph": int(sd.subgraphIndex),
             "inputs": [x.name.decode() for x in sd.inputs], "outputs": [x.name.decode() for x in sd.outputs]}
            for sd in (m.signatureDefs or [])]
    files = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            files = {n: z.read(n).hex() for n in z.namelist()}
    out[path.rsplit("/", 1)[-1]] = {"subgraphs": subgraphs, "signatures": sigs, "files": files,
                                    "version": int(m.version),
                                    "description": m.description.decode() if m.description else None}
print(json.dumps(out))
"#;

/// TensorFlow's reading of every fixture (once per test process), or `None` (skipped).
fn expected(test: &str) -> Option<&'static Value> {
    static READ: std::sync::OnceLock<Option<Value>> = std::sync::OnceLock::new();
    READ.get_or_init(|| {
        let py = requires::python("tensorflow, numpy", test)?;
        let paths: Vec<PathBuf> = FIXTURES.iter().map(|f| dir().join(f)).collect();
        Some(read_models(&py, &paths))
    })
    .as_ref()
}

/// TensorFlow's reading ([`READER`]) of the models at `paths`, by file name.
fn read_models(py: &Path, paths: &[PathBuf]) -> Value {
    let o = Command::new(py)
        .arg("-c")
        .arg(READER)
        .args(paths)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .stdin(Stdio::null())
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("json")
}

use common::{hex, tflite_dir as dir, tfmount, tree_cat as cat, tree_text as text, verified_bytes};

/// The path of a tensor's file under `dir` (`variables`, `dequantized`), its name escaped.
fn tensor_path(dir: &str, key: &str, suffix: &str) -> String {
    let p = String::from_utf8(common::name_path(key.as_bytes())).expect("utf-8");
    format!("{dir}/{p}{suffix}")
}

/// Every `.bin` under `dir` of `tree`, as paths relative to it.
fn bins(tree: &Tree, dir: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_string()];
    while let Some(d) = todo.pop() {
        let n = tree.resolve(d.as_bytes(), true).expect("dir");
        for e in tree.list(n).expect("list") {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let p = format!("{d}/{name}");
            if e.node.kind == NodeKind::Dir {
                todo.push(p);
            } else if let Some(stem) = p.strip_suffix(".bin") {
                out.insert(stem[dir.len() + 1..].to_string());
            }
        }
    }
    out
}

/// `tensors.tsv` as one map per row, by column name.
fn tsv(tree: &Tree, path: &str) -> Vec<BTreeMap<String, String>> {
    let t = text(tree, path);
    let mut lines = t.lines();
    let head: Vec<&str> = lines.next().expect("header").split('\t').collect();
    lines
        .map(|l| {
            head.iter()
                .zip(l.split('\t'))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn floats(s: &str) -> Vec<f32> {
    s.split_whitespace()
        .map(|x| x.parse().expect("float"))
        .collect()
}

#[test]
fn every_constant_tensor_is_what_the_interpreter_holds() {
    let Some(exp) = expected("every_constant_tensor_is_what_the_interpreter_holds") else {
        return;
    };
    let mut checked = 0;
    let mut sparse_seen = false;
    for f in FIXTURES {
        let tree = Tree::open(&dir().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let tensors = exp[f]["subgraphs"][0]["tensors"]
            .as_array()
            .expect("tensors");
        let keys: BTreeSet<String> = tensors
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        let shown: BTreeSet<String> = bins(&tree, "variables")
            .into_iter()
            .map(|p| {
                // Back from the escaped path to the key.
                let b = p.into_bytes();
                let comps: Vec<Vec<u8>> = b
                    .split(|&c| c == b'/')
                    .map(|c| {
                        let s = String::from_utf8_lossy(c)
                            .replace("%2F", "/")
                            .replace("%25", "%");
                        s.into_bytes()
                    })
                    .collect();
                String::from_utf8(comps.join(&b'/')).expect("utf-8")
            })
            .collect();
        assert_eq!(shown, keys, "{f}: the tensors with data");
        let rows = tsv(&tree, "tensors.tsv");
        for t in tensors {
            let key = t["name"].as_str().expect("name");
            let bin = cat(&tree, &tensor_path("variables", key, ".bin"));
            assert_eq!(hex(&bin), t["bin"].as_str().expect("bin"), "{f}: {key}.bin");
            assert_eq!(
                text(&tree, &tensor_path("variables", key, ".dtype")).trim(),
                t["dtype"].as_str().expect("dtype"),
                "{f}: {key}.dtype"
            );
            let shape: Vec<u64> = text(&tree, &tensor_path("variables", key, ".shape"))
                .split_whitespace()
                .map(|x| x.parse().expect("dim"))
                .collect();
            let want: Vec<u64> = t["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|x| x.as_u64().expect("dim"))
                .collect();
            assert_eq!(shape, want, "{f}: {key}.shape");
            // The .npy is numpy's header and the same bytes.
            let npy = cat(&tree, &tensor_path("variables", key, ".npy"));
            assert!(
                npy.starts_with(b"\x93NUMPY") && npy.ends_with(&bin),
                "{f}: {key}.npy"
            );
            // Quantization columns of tensors.tsv: the interpreter's.
            let row = rows
                .iter()
                .find(|r| r.get("key").map(String::as_str) == Some(key))
                .unwrap_or_else(|| panic!("{f}: {key} not in tensors.tsv"));
            assert_eq!(
                row["tensor_index"],
                t["index"].as_u64().expect("index").to_string(),
                "{f}: {key}"
            );
            let scales: Vec<f32> = t["scales"]
                .as_array()
                .expect("scales")
                .iter()
                .map(|x| x.as_f64().expect("scale") as f32)
                .collect();
            if scales.is_empty() {
                assert_eq!(row["scale"], "-", "{f}: {key}");
            } else {
                assert_eq!(floats(&row["scale"]), scales, "{f}: {key} scale");
                let zps: Vec<String> = t["zero_points"]
                    .as_array()
                    .expect("zps")
                    .iter()
                    .map(|x| x.as_i64().expect("zp").to_string())
                    .collect();
                assert_eq!(row["zero_point"], zps.join(" "), "{f}: {key} zero_point");
                assert_eq!(
                    row["quantized_dimension"],
                    t["qdim"].as_i64().expect("qdim").to_string(),
                    "{f}: {key}"
                );
            }
            // A sparse constant is listed with its format (the interpreter gives its values 1-D).
            let sparse = t["sparse"].as_bool().expect("sparse");
            assert_eq!(
                row["sparsity"].starts_with("traversal_order ["),
                sparse,
                "{f}: {key}: {}",
                row["sparsity"]
            );
            sparse_seen |= sparse;
            checked += 1;
        }
    }
    assert!(checked > 40 && sparse_seen, "{checked} tensors checked");
}

#[test]
fn dequantized_values_are_numpys_of_the_interpreters() {
    let Some(exp) = expected("dequantized_values_are_numpys_of_the_interpreters") else {
        return;
    };
    let mut per_channel = 0;
    let mut checked = 0;
    for f in FIXTURES {
        let tree = Tree::open(&dir().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let tensors = exp[f]["subgraphs"][0]["tensors"]
            .as_array()
            .expect("tensors");
        let want: BTreeSet<String> = tensors
            .iter()
            .filter(|t| t.get("dequantized").is_some())
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        let has_dir = tree.resolve(b"dequantized", true).is_ok();
        assert_eq!(has_dir, !want.is_empty(), "{f}: dequantized/");
        for t in tensors {
            let Some(d) = t.get("dequantized") else {
                continue;
            };
            let key = t["name"].as_str().expect("name");
            let got = cat(&tree, &tensor_path("dequantized", key, ".bin"));
            assert_eq!(
                hex(&got),
                d.as_str().expect("hex"),
                "{f}: dequantized {key}"
            );
            assert_eq!(
                text(&tree, &tensor_path("dequantized", key, ".dtype")).trim(),
                "float32"
            );
            // A read at an odd offset is the same bytes.
            let n = tree
                .resolve(tensor_path("dequantized", key, ".bin").as_bytes(), true)
                .expect("bin");
            tree.open_file(n).expect("open");
            if got.len() > 7 {
                assert_eq!(tree.read(n, 3, 5).expect("read"), &got[3..8]);
            }
            if t["scales"].as_array().expect("scales").len() > 1 {
                per_channel += 1;
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 7 && per_channel >= 3,
        "{checked} tensors, {per_channel} per channel"
    );
}

#[test]
fn operators_signatures_and_subgraphs_are_the_models() {
    let Some(exp) = expected("operators_signatures_and_subgraphs_are_the_models") else {
        return;
    };
    let mut checked_options = 0;
    for f in FIXTURES {
        let tree = Tree::open(&dir().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let subgraphs = exp[f]["subgraphs"].as_array().expect("subgraphs");
        for (k, sg) in subgraphs.iter().enumerate() {
            let at = if k == 0 {
                String::new()
            } else {
                format!("subgraphs/{k}/")
            };
            let ops = sg["operators"].as_array().expect("ops");
            let names = sg["names"].as_array().expect("names");
            let graph = format!("{at}graph");
            let listed: Vec<String> = match tree.resolve(graph.as_bytes(), true) {
                Ok(n) => {
                    let mut v: Vec<String> = tree
                        .list(n)
                        .expect("list")
                        .iter()
                        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                        .filter(|n| n != "." && n != "..")
                        .collect();
                    v.sort();
                    v
                }
                Err(_) => Vec::new(),
            };
            assert_eq!(listed.len(), ops.len(), "{f}: {graph}");
            for (i, (file, op)) in listed.iter().zip(ops).enumerate() {
                let name = op["name"].as_str().expect("name");
                assert_eq!(file, &format!("{i:04}_{name}.txt"), "{f}");
                let t = text(&tree, &format!("{graph}/{file}"));
                assert!(
                    t.contains(&format!("opcode: {} {name} ", op["code"])),
                    "{f}: {file}: {t}"
                );
                // Builtin options: the table TensorFlow's reader finds, each scalar field's value.
                if let Some(o) = op["options"].as_object() {
                    let ty = o["type"].as_str().expect("type");
                    let line = t
                        .lines()
                        .find(|l| l.starts_with("options: "))
                        .unwrap_or_else(|| panic!("{f}: {file}: no options line: {t}"));
                    assert!(
                        line.starts_with(&format!("options: {ty} {{")),
                        "{f}: {file}: {line}"
                    );
                    for field in o["fields"].as_array().expect("fields") {
                        let field = field.as_str().expect("field");
                        assert!(
                            line.contains(&format!(" {field},"))
                                || line.contains(&format!(" {field} }}")),
                            "{f}: {file}: {field} not in {line}"
                        );
                    }
                    checked_options += 1;
                }
                for x in op["inputs"].as_array().expect("inputs") {
                    let x = x.as_i64().expect("input");
                    if x >= 0 {
                        let n = names[x as usize].as_str().expect("name");
                        assert!(t.contains(&format!("  {x} {n}\n")), "{f}: {file}: {t}");
                    }
                }
            }
            // The other subgraphs' constants: TensorFlow's reader's bytes.
            if k > 0 {
                for t in sg["tensors"].as_array().expect("tensors") {
                    let key = t["name"].as_str().expect("name");
                    let bin = cat(&tree, &tensor_path(&format!("{at}variables"), key, ".bin"));
                    assert_eq!(
                        hex(&bin),
                        t["bin"].as_str().expect("bin"),
                        "{f}: {k}: {key}"
                    );
                }
            }
        }
        let sigs = exp[f]["signatures"].as_array().expect("signatures");
        if sigs.is_empty() {
            assert!(tree.resolve(b"signatures.txt", true).is_err(), "{f}");
            continue;
        }
        let t = text(&tree, "signatures.txt");
        for s in sigs {
            assert!(
                t.contains(&format!(
                    "signature {:?} (subgraph {})",
                    s["key"].as_str().expect("key"),
                    s["subgraph"]
                )),
                "{f}: {t}"
            );
            for x in s["inputs"]
                .as_array()
                .expect("in")
                .iter()
                .chain(s["outputs"].as_array().expect("out"))
            {
                assert!(
                    t.contains(&format!("    {}: ", x.as_str().expect("alias"))),
                    "{f}: {t}"
                );
            }
        }
        let model = text(&tree, "model.txt");
        assert!(
            model.contains(&format!("schema version: {}\n", exp[f]["version"])),
            "{f}: {model}"
        );
        assert!(
            model.contains(&format!("subgraphs: {}\n", subgraphs.len())),
            "{model}"
        );
        // A model without one: `(none)`.
        let description = exp[f]["description"].as_str().unwrap_or("(none)");
        assert!(
            model.contains(&format!("description: {description}\n")),
            "{f}: {model}"
        );
    }
    assert!(
        checked_options > 10,
        "{checked_options} operators with options"
    );
    // multi.tflite has more than one subgraph, each with constants.
    assert!(
        exp["multi.tflite"]["subgraphs"]
            .as_array()
            .expect("sg")
            .len()
            > 2
    );
}

#[test]
fn metadata_and_associated_files_are_shown() {
    let Some(exp) = expected("metadata_and_associated_files_are_shown") else {
        return;
    };
    let f = "with_metadata.tflite";
    let tree = Tree::open(&dir().join(f)).expect("open");
    let files = exp[f]["files"].as_object().expect("files");
    assert!(!files.is_empty(), "the fixture has associated files");
    for (name, bytes) in files {
        assert_eq!(
            hex(&cat(&tree, &format!("metadata/{name}"))),
            bytes.as_str().expect("hex"),
            "metadata/{name}"
        );
    }
    let md = text(&tree, "metadata.txt");
    assert!(md.starts_with("ModelMetadata {"), "{md}");
    for name in files.keys() {
        assert!(md.contains(&format!("{name:?}")), "{md}");
    }
    assert!(text(&tree, "model.txt").contains("TFLITE_METADATA"));
}

#[test]
fn verify_and_diff_line_up_conversions() {
    let d = dir();
    for f in FIXTURES {
        let o = tfmount(&[Path::new("verify"), &d.join(f)]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{f}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // One model converted twice: buffers inside and after the flatbuffer, the same tensors.
    let o = tfmount(&[
        Path::new("diff"),
        &d.join("float.tflite"),
        &d.join("float_offsets.tflite"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Float and float16 conversions: the same keys; the weights changed type (`T`).
    let o = tfmount(&[
        Path::new("diff"),
        &d.join("float.tflite"),
        &d.join("float16.tflite"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let weights = out.lines().filter(|l| l.starts_with("T\t")).count();
    assert!(weights >= 6, "{out}");
    assert!(out.lines().all(|l| l.starts_with("T\t")), "{out}");
}

#[test]
fn verify_finds_buffers_past_the_end() {
    // float_offsets.tflite keeps every buffer after the flatbuffer: cut the file short and the
    // last buffers are past its end.
    let b = std::fs::read(dir().join("float_offsets.tflite")).expect("read");
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join("cut.tflite");
    std::fs::write(&p, &b[..b.len() - 100]).expect("write");
    let o = tfmount(&[Path::new("verify"), &p]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[buffers]") && out.contains("past the end"),
        "{out}"
    );
    // The tensors whose bytes lie before the cut still read; the others fail.
    let tree = Tree::open(&p).expect("open");
    let cut = (b.len() - 100) as u64;
    let (mut before, mut after) = (0, 0);
    for row in tsv(&tree, "tensors.tsv") {
        let end: u64 = row["offset"].parse::<u64>().expect("offset")
            + row["nbytes"].parse::<u64>().expect("nbytes");
        let n = tree.resolve(row["path"].as_bytes(), true).expect("listed");
        let read = tree
            .open_file(n)
            .and_then(|size| tree.read(n, 0, size as usize));
        if end <= cut {
            assert!(read.is_ok(), "{}: {read:?}", row["key"]);
            before += 1;
        } else {
            let e = read.expect_err("past the end").to_string();
            assert!(e.contains("past the end of the file"), "{e}");
            after += 1;
        }
    }
    assert!(
        before > 0 && after > 0,
        "{before} before the cut, {after} after"
    );
}

#[test]
fn a_mount_shows_tensors_quantization_and_graph() {
    if !requires::fuse("a_mount_shows_tensors_quantization_and_graph") {
        return;
    }
    let src = dir().join("full_int8.tflite");
    let mut m = common::Mount::start(&src, &[]);
    let mp = m.path();
    let kernel = mp.join("variables/MatMul.bin");
    let bin = std::fs::read(&kernel).expect("read");
    let tree = Tree::open(&src).expect("open");
    assert_eq!(bin, cat(&tree, "variables/MatMul.bin"));
    let scale = xattr(&kernel, "user.tfmount.scale");
    assert_eq!(floats(&scale).len(), 16, "{scale}");
    assert_eq!(xattr(&kernel, "user.tfmount.quantized_dimension"), "0");
    let deq = std::fs::read(mp.join("dequantized/MatMul.bin")).expect("read");
    assert_eq!(deq.len(), bin.len() * 4);
    // Counted, not kept: a kept `DirEntry` holds the directory open and the unmount busy.
    let ops = std::fs::read_dir(mp.join("graph")).expect("graph").count();
    assert!(ops > 0);
    assert!(std::fs::read_to_string(mp.join("signatures.txt"))
        .expect("signatures")
        .contains("serving_default"));
    m.unmount();
}

fn xattr(p: &Path, name: &str) -> String {
    let path = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    let name = std::ffi::CString::new(name).expect("name");
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: both strings are NUL-terminated and `buf` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n >= 0,
        "getxattr {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    buf.truncate(n as usize);
    String::from_utf8(buf).expect("utf-8")
}

#[test]
fn the_views_hold_the_same_tensors() {
    for f in ["full_int8.tflite", "float16.tflite", "multi.tflite"] {
        let tree = Tree::open(&dir().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        // model.safetensors: an 8-byte header length, the JSON header, then each tensor's bytes.
        let st = cat(&tree, "model.safetensors");
        let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
        let header: Value = serde_json::from_slice(&st[8..8 + n]).expect("header");
        let rows = tsv(&tree, "tensors.tsv");
        assert!(!rows.is_empty(), "{f}");
        for row in &rows {
            let key = &row["key"];
            let bin = cat(&tree, &row["path"]);
            let e = &header[key.as_str()];
            let (a, b) = (
                e["data_offsets"][0].as_u64().expect("start") as usize,
                e["data_offsets"][1].as_u64().expect("end") as usize,
            );
            assert_eq!(&st[8 + n + a..8 + n + b], &bin[..], "{f}: {key}");
            // text/ and stats/ of the tensor read.
            let stem = tensor_path("", key, "");
            assert!(
                !cat(&tree, &format!("text{stem}.txt")).is_empty(),
                "{f}: {key}"
            );
            let stats = text(&tree, &format!("stats{stem}.txt"));
            assert!(stats.contains("count"), "{f}: {key}: {stats}");
        }
        let summary = text(&tree, "summary.txt");
        assert!(
            summary.starts_with(&format!("tensors: {}\n", rows.len())),
            "{f}: {summary}"
        );
    }
}

#[test]
fn a_directory_of_models_shows_one_directory_each() {
    let tree = Tree::open(&dir()).expect("open");
    let root = tree.resolve(b"", true).expect("root");
    let names: BTreeSet<String> = tree
        .list(root)
        .expect("list")
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    for f in FIXTURES {
        assert!(names.contains(f), "{f} in {names:?}");
        assert!(
            tree.resolve(format!("{f}/model.txt").as_bytes(), true)
                .is_ok(),
            "{f}/model.txt"
        );
    }
}

/// The subcommands without FUSE on a `.tflite`: `tfmount ls -R` lists the constants' files,
/// `tfmount cat` writes the bytes the interpreter holds (the in-process tree's, checked against
/// the interpreter above) and an operator's text.
#[test]
fn ls_and_cat_serve_the_model() {
    let d = dir();
    for f in FIXTURES {
        let path = d.join(f);
        let tree = Tree::open(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
        let ls = [
            Path::new("ls"),
            Path::new("-R"),
            &path,
            Path::new("variables"),
        ];
        let listing = String::from_utf8_lossy(&common::tfmount_ok(&ls)).into_owned();
        let listed: BTreeSet<String> = listing
            .lines()
            .filter_map(|l| l.strip_suffix(".bin"))
            .map(str::to_owned)
            .collect();
        assert_eq!(listed, bins(&tree, "variables"), "{f}");
        assert!(!listed.is_empty(), "{f}");
        for stem in &listed {
            let bin = format!("variables/{stem}.bin");
            let out = common::tfmount_ok(&[Path::new("cat"), &path, Path::new(&bin)]);
            assert_eq!(out, cat(&tree, &bin), "{f}: tfmount cat {bin}");
        }
        let ops = common::tfmount_ok(&[Path::new("ls"), &path, Path::new("graph")]);
        let ops = String::from_utf8_lossy(&ops).into_owned();
        let first = ops
            .lines()
            .next()
            .unwrap_or_else(|| panic!("{f}: no operator"));
        let op = format!("graph/{first}");
        let text = common::tfmount_ok(&[Path::new("cat"), &path, Path::new(&op)]);
        assert!(
            String::from_utf8_lossy(&text).starts_with("index: 0\nopcode: "),
            "{f}: {op}"
        );
    }
}

#[test]
fn verify_counts_each_byte_checked_once() {
    // float.tflite has one subgraph, no metadata and no associated files: what verify reads is
    // its constant tensors' bytes, once (the buffer extent check reads none).
    let p = dir().join("float.tflite");
    let tree = Tree::open(&p).expect("open");
    let tensors: u64 = tsv(&tree, "tensors.tsv")
        .iter()
        .map(|r| r["nbytes"].parse::<u64>().expect("nbytes"))
        .sum();
    assert!(tensors > 0);
    let o = tfmount(&[Path::new("verify"), &p]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(verified_bytes(&o.stderr), tensors);
}

/// A safetensors file's tensors: name -> (dtype, bytes).
fn safetensors(bytes: &[u8]) -> BTreeMap<String, (String, Vec<u8>)> {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let h: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    h.as_object()
        .expect("object")
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .map(|(k, v)| {
            let o = v["data_offsets"].as_array().expect("offsets");
            let (a, b) = (
                o[0].as_u64().expect("a") as usize,
                o[1].as_u64().expect("b") as usize,
            );
            let dtype = v["dtype"].as_str().expect("dtype").to_string();
            (k.clone(), (dtype, data[a..b].to_vec()))
        })
        .collect()
}

/// `dequantized.safetensors` (issue 31): every tensor of `model.safetensors`, keyed the same,
/// the quantized ones as float32 with numpy's values of the interpreter's (as `dequantized/`),
/// the others byte for byte as stored; only where the model has quantized tensors.
#[test]
fn dequantized_safetensors_is_every_tensor_with_the_quantized_ones_as_float32() {
    let Some(exp) = expected("dequantized_values_are_numpys_of_the_interpreters") else {
        return;
    };
    let mut files = 0;
    for f in FIXTURES {
        let tree = Tree::open(&dir().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let tensors = exp[f]["subgraphs"][0]["tensors"]
            .as_array()
            .expect("tensors");
        let deq: BTreeMap<String, String> = tensors
            .iter()
            .filter_map(|t| {
                let d = t.get("dequantized")?;
                Some((
                    t["name"].as_str().expect("name").to_string(),
                    d.as_str().expect("hex").to_string(),
                ))
            })
            .collect();
        let Ok(_) = tree.resolve(b"dequantized.safetensors", true) else {
            assert!(deq.is_empty(), "{f}: no dequantized.safetensors");
            continue;
        };
        assert!(
            !deq.is_empty(),
            "{f}: dequantized.safetensors without quantized tensors"
        );
        let got = safetensors(&cat(&tree, "dequantized.safetensors"));
        let model = safetensors(&cat(&tree, "model.safetensors"));
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            model.keys().collect::<Vec<_>>(),
            "{f}: the keys of model.safetensors"
        );
        for (k, (dtype, bytes)) in &got {
            match deq.get(k) {
                Some(h) => {
                    assert_eq!(dtype, "F32", "{f}: {k}");
                    assert_eq!(&hex(bytes), h, "{f}: {k}");
                }
                None => assert_eq!((dtype, bytes), (&model[k].0, &model[k].1), "{f}: {k}"),
            }
        }
        files += 1;
    }
    assert!(files >= 2, "{files} models with quantized tensors");
}

/// numpy's figures of `tfmount diff --values` (as `scripts/gen_diff_values.py` computes them,
/// atol = rtol = 0) for pairs of float32 arrays given on stdin as JSON `{name: [a_hex, b_hex]}`.
const FIGURES: &str = r#"
import json, sys
import numpy as np
out = {}
for name, (ah, bh) in json.load(sys.stdin).items():
    a = np.frombuffer(bytes.fromhex(ah), dtype="<f4").astype(np.float64)
    b = np.frombuffer(bytes.fromhex(bh), dtype="<f4").astype(np.float64)
    d = np.abs(a - b)
    d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
    num = ~np.isnan(d)
    bad = np.flatnonzero(~np.isclose(a, b, rtol=0.0, atol=0.0, equal_nan=True))
    mb = np.abs(b)
    rel = num & (mb != 0) & (d != 0)
    out[name] = {
        "max_abs": float(d[num].max()) if num.any() else 0.0,
        "max_rel": float((d[rel] / mb[rel]).max()) if rel.any() else 0.0,
        "rms": float(np.sqrt(np.mean(d[num] ** 2))) if num.any() else 0.0,
        "differing": int(bad.size),
        "elements": int(a.size),
        "first": int(bad[0]) if bad.size else None,
    }
print(json.dumps(out))
"#;

/// `diff --values` of a float model against its quantized conversions (issue 31): each quantized
/// constant is compared by its dequantized float32 values (the interpreter's integers and
/// quantization, dequantized as `dequantized/` is checked to be) against the float model's, and
/// the figures are numpy's on those arrays. The line is `T` (the dtype did change) with the
/// figures, or `=` when every value is equal; without `--values` it stays a plain `T`.
#[test]
fn diff_values_compares_quantized_tensors_by_their_dequantized_values() {
    let test = "diff_values_compares_quantized_tensors_by_their_dequantized_values";
    let Some(exp) = expected(test) else {
        return;
    };
    let Some(py) = requires::python("numpy", test) else {
        return;
    };
    let tensors = |f: &str| -> BTreeMap<String, Value> {
        exp[f]["subgraphs"][0]["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| (t["name"].as_str().expect("name").to_string(), t.clone()))
            .collect()
    };
    let mut compared = 0;
    for q in ["dynamic_int8.tflite", "full_int8.tflite"] {
        let (ta, tb) = (tensors("float.tflite"), tensors(q));
        // name -> (float values of A, B's values as compared, whether B's are dequantized)
        let mut pairs = BTreeMap::new();
        for (name, a) in &ta {
            let Some(b) = tb.get(name) else { continue };
            if a["shape"] != b["shape"] || a["dtype"] != "float32" {
                continue;
            }
            let (bv, deq) = match b.get("dequantized") {
                Some(d) => (d.clone(), true),
                None if b["dtype"] == "float32" => (b["bin"].clone(), false),
                None => continue,
            };
            pairs.insert(name.clone(), (a["bin"].clone(), bv, deq));
        }
        assert!(
            pairs.values().any(|p| p.2),
            "{q}: quantized constants {:?}",
            pairs.keys()
        );
        let input: BTreeMap<&String, [&Value; 2]> =
            pairs.iter().map(|(n, p)| (n, [&p.0, &p.1])).collect();
        let want = numpy_figures(&py, &serde_json::to_value(&input).expect("json"));
        let (fa, fb) = (dir().join("float.tflite"), dir().join(q));
        let args = [
            Path::new("diff"),
            Path::new("-s"),
            Path::new("--json"),
            Path::new("--values"),
            &fa,
            &fb,
        ];
        let o = tfmount(&args);
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let recs = common::json_lines(&o.stdout);
        for (name, (_, _, deq)) in &pairs {
            let r = recs
                .iter()
                .find(|r| r["type"] == "change" && r["key"] == name.as_str())
                .unwrap_or_else(|| panic!("{q}: {name} not listed"));
            let w = &want[name];
            if w["differing"] == 0 {
                assert_eq!(r["change"], "=", "{q}: {name}: {r}");
                continue;
            }
            assert_eq!(r["change"], if *deq { "T" } else { "M" }, "{q}: {name}");
            for f in ["max_abs", "max_rel", "rms"] {
                let (g, x) = (r[f].as_f64().expect(f), w[f].as_f64().expect(f));
                assert!(
                    (g - x).abs() <= 1e-12 * x.abs().max(1e-300),
                    "{q}: {name} {f}: {g} against numpy's {x}"
                );
            }
            assert_eq!(
                (&r["differing"], &r["elements"]),
                (&w["differing"], &w["elements"])
            );
            let first = w["first"].as_u64().expect("first");
            let shape: Vec<u64> = tb[name]["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim"))
                .collect();
            let mut idx = vec![0u64; shape.len()];
            let mut i = first;
            for (k, &d) in shape.iter().enumerate().rev() {
                idx[k] = i % d.max(1);
                i /= d.max(1);
            }
            let idx: Vec<String> = idx.iter().map(u64::to_string).collect();
            assert_eq!(r["first_index"], idx.join(","), "{q}: {name}");
            if *deq {
                compared += 1;
            }
        }
        // Without --values, a quantized constant is a plain change of type.
        let o = tfmount(&[Path::new("diff"), &fa, &fb]);
        let out = String::from_utf8_lossy(&o.stdout);
        for (name, (_, _, deq)) in &pairs {
            if *deq {
                assert!(out.lines().any(|l| l == format!("T\t{name}")), "{q}: {out}");
            }
        }
    }
    assert!(compared >= 5, "{compared} dequantized tensors compared");

    // Two tensors quantized alike (int8 both, the same scales) whose integers differ: compared
    // by their dequantized values too. A copy of the dynamic-range model with one integer of
    // `MatMul` changed, read by the interpreter as the original is.
    let orig = dir().join("dynamic_int8.tflite");
    let w = &tensors("dynamic_int8.tflite")["MatMul"];
    let q = common::hex_bytes(w["bin"].as_str().expect("bin"));
    let mut bytes = std::fs::read(&orig).expect("read");
    let at = bytes
        .windows(q.len())
        .position(|x| x == q.as_slice())
        .expect("MatMul's integers in the file");
    bytes[at + 5] = bytes[at + 5].wrapping_add(3);
    let tmp = tempfile::tempdir().expect("tempdir");
    let copy = tmp.path().join("changed.tflite");
    std::fs::write(&copy, &bytes).expect("write");
    let read = read_models(&py, &[orig.clone(), copy.clone()]);
    let deq = |f: &str| {
        read[f]["subgraphs"][0]["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .find(|t| t["name"] == "MatMul")
            .expect("MatMul")["dequantized"]
            .clone()
    };
    let input = BTreeMap::from([(
        "MatMul".to_string(),
        [deq("dynamic_int8.tflite"), deq("changed.tflite")],
    )]);
    let want = &numpy_figures(&py, &serde_json::to_value(&input).expect("json"))["MatMul"];
    assert_eq!(want["differing"], 1, "{want}");
    let o = tfmount(&[
        Path::new("diff"),
        Path::new("--json"),
        Path::new("--values"),
        &orig,
        &copy,
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let recs = common::json_lines(&o.stdout);
    let r = recs
        .iter()
        .find(|r| r["type"] == "change" && r["key"] == "MatMul")
        .expect("MatMul listed");
    assert_eq!(r["change"], "M", "{r}");
    for f in ["max_abs", "max_rel", "rms"] {
        let (g, x) = (r[f].as_f64().expect(f), want[f].as_f64().expect(f));
        assert!(
            (g - x).abs() <= 1e-12 * x.abs().max(1e-300),
            "MatMul {f}: {g} against numpy's {x}"
        );
    }
    assert_eq!(
        (&r["differing"], &r["elements"]),
        (&want["differing"], &want["elements"])
    );
}

/// numpy's figures ([`FIGURES`]) for `{name: [a_hex, b_hex]}` float32 pairs.
fn numpy_figures(py: &Path, input: &Value) -> Value {
    let mut child = Command::new(py)
        .arg("-c")
        .arg(FIGURES)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python");
    serde_json::to_writer(child.stdin.take().expect("stdin"), input).expect("write");
    let o = child.wait_with_output().expect("python");
    assert!(o.status.success(), "numpy's figures");
    serde_json::from_slice(&o.stdout).expect("json")
}
