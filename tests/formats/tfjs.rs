//! TensorFlow.js models (`model.json` + shards) served like checkpoints, checked against what
//! the converter's own reader (`tensorflowjs.read_weights`) gives for the same files
//! (`tests/fixtures/tfjs/*/expected.npz`, `expected_strings.json`, written by
//! `scripts/gen_tfjs.py` with `tensorflowjs` 4.22): every weight's `.bin`, `.dtype`, `.shape`;
//! the quantization attributes; a weight across shards; the graph model's nodes and signature;
//! `verify` on sound and damaged models; a real FUSE mount.

use crate::common;
use common::requires;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tfmount::model::open::Tree;
use tfmount::parse::zip;

const FIXTURES: &[&str] = &[
    "layers",
    "layers_uint8",
    "layers_uint16",
    "layers_float16",
    "layers_sharded",
    "graph",
    "graph_uint8",
];

use common::{json, tfjs_dir, tfmount, tree_cat as cat, tree_text as text, verified_bytes};

/// The arrays of an `.npz` (numpy's `savez`: a zip of stored `.npy` members): name → (numpy
/// dtype descr, shape, little-endian data).
fn npz(path: &Path) -> Vec<(String, String, Vec<u64>, Vec<u8>)> {
    let bytes = std::fs::read(path).expect("npz");
    let mut out = Vec::new();
    for m in zip::members(&bytes[..]).expect("zip") {
        let npy = zip::read_member(&bytes[..], &m, 1 << 24).expect("member");
        let h = common::npy::parse(&npy).expect("npy header");
        let name = m.name.strip_suffix(".npy").expect(".npy").to_string();
        out.push((
            name,
            h.descr.clone(),
            h.shape.clone(),
            npy[h.data_offset..].to_vec(),
        ));
    }
    out
}

/// tfmount's string layout of UTF-8 strings: an 8-byte length and the bytes, each.
fn string_layout(items: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in items {
        let b = s.as_str().expect("string").as_bytes();
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn tf_dtype(descr: &str) -> &'static str {
    match descr {
        "<f4" => "float32",
        "<i4" => "int32",
        "|b1" => "bool",
        "<c8" => "complex64",
        d => panic!("unexpected descr {d}"),
    }
}

#[test]
fn every_weight_is_what_the_converter_reads() {
    let root = tfjs_dir();
    for f in FIXTURES {
        let dir = root.join(f);
        // The directory is the model.
        let tree = Tree::open(&dir).unwrap_or_else(|e| panic!("{f}: {e}"));
        let entries = json(&dir.join("tensors.json"));
        let entries = entries.as_array().expect("entries");
        let mut seen = 0;
        for (name, descr, shape, data) in npz(&dir.join("expected.npz")) {
            let base = format!("variables/{name}");
            assert_eq!(cat(&tree, &format!("{base}.bin")), data, "{f}: {base}.bin");
            assert_eq!(
                text(&tree, &format!("{base}.dtype")).trim(),
                tf_dtype(&descr),
                "{f}: {base}.dtype"
            );
            let want: Vec<String> = shape.iter().map(u64::to_string).collect();
            assert_eq!(
                text(&tree, &format!("{base}.shape")).trim(),
                want.join(" "),
                "{f}: {base}.shape"
            );
            // The .npy is numpy's header and the same bytes.
            let npy = cat(&tree, &format!("{base}.npy"));
            let h = common::npy::parse(&npy).expect("npy");
            assert_eq!(h.shape, shape, "{f}: {base}.npy");
            assert_eq!(&npy[h.data_offset..], &data[..], "{f}: {base}.npy");
            seen += 1;
        }
        let strings = dir.join("expected_strings.json");
        if strings.exists() {
            for (name, items) in json(&strings).as_object().expect("object") {
                let base = format!("variables/{name}");
                assert_eq!(
                    cat(&tree, &format!("{base}.bin")),
                    string_layout(items.as_array().expect("list")),
                    "{f}: {base}.bin"
                );
                assert_eq!(text(&tree, &format!("{base}.dtype")).trim(), "string");
                seen += 1;
            }
        }
        assert_eq!(seen, entries.len(), "{f}: every manifest weight checked");
        assert!(seen >= 4, "{f}");
        // model.json itself at the root.
        assert_eq!(
            cat(&tree, "model.json"),
            std::fs::read(dir.join("model.json")).expect("model.json"),
            "{f}"
        );
    }
}

/// A model's `tensors.tsv` as rows of named columns.
fn tsv(tree: &Tree) -> Vec<std::collections::BTreeMap<String, String>> {
    let t = text(tree, "tensors.tsv");
    let mut lines = t.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .trim_start_matches('#')
        .split('\t')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split('\t').map(str::to_string))
                .collect()
        })
        .collect()
}

#[test]
fn quantization_is_shown_as_the_manifest_stores_it() {
    let root = tfjs_dir();
    for f in [
        "layers_uint8",
        "layers_uint16",
        "layers_float16",
        "graph_uint8",
    ] {
        let dir = root.join(f);
        let tree = Tree::open(&dir).expect("open");
        let rows = tsv(&tree);
        let mut quantized = 0;
        for e in json(&dir.join("tensors.json")).as_array().expect("list") {
            let name = e["name"].as_str().expect("name");
            let row = rows
                .iter()
                .find(|r| r.get("key").map(String::as_str) == Some(name))
                .unwrap_or_else(|| panic!("{f}: {name} in tensors.tsv: {rows:?}"));
            let q = &e["quantization"];
            if q.is_null() {
                assert_eq!(row["quantization"], "-", "{f}: {name}");
                continue;
            }
            quantized += 1;
            assert_eq!(row["quantization"], q["dtype"].as_str().expect("dtype"));
            assert_eq!(
                row["original_dtype"],
                q["original_dtype"].as_str().expect("original")
            );
            for k in ["scale", "min"] {
                match q[k].as_f64() {
                    Some(v) => assert_eq!(
                        row[k].parse::<f64>().expect("a number"),
                        v,
                        "{f}: {name}: {k}"
                    ),
                    None => assert_eq!(row[k], "-"),
                }
            }
            // The served dtype is the weight's, not the stored one.
            assert_eq!(
                row["dtype"],
                e["dtype"].as_str().expect("dtype"),
                "{f}: {name}"
            );
        }
        assert!(quantized >= 2, "{f}: quantized weights seen");
    }
}

#[test]
fn weights_across_shards_are_read_across_them() {
    let root = tfjs_dir();
    let whole = Tree::open(&root.join("layers")).expect("open");
    let cut = Tree::open(&root.join("layers_sharded")).expect("open");
    let rows = tsv(&cut);
    let kernel = rows
        .iter()
        .find(|r| r["key"] == "dense/kernel")
        .expect("dense/kernel");
    // 128 bytes from offset 0 in 48-byte shards: three of them.
    assert_eq!(
        kernel["shards"],
        "group1-shard1of6.bin,group1-shard2of6.bin,group1-shard3of6.bin"
    );
    for r in &rows {
        let k = &r["key"];
        let p = format!("variables/{k}.bin");
        assert_eq!(cat(&cut, &p), cat(&whole, &p), "{k}");
    }
    // Read in small pieces at every offset: the same bytes.
    let n = cut
        .resolve(b"variables/dense/kernel.bin", true)
        .expect("kernel");
    let size = cut.open_file(n).expect("open");
    let all = cat(&whole, "variables/dense/kernel.bin");
    for off in 0..size {
        let b = cut.read(n, off, 7).expect("read");
        let end = (off as usize + 7).min(all.len());
        assert_eq!(b, &all[off as usize..end], "at {off}");
    }
    // The graph model's quantized bias crosses its 64-byte shards: read in pieces too.
    let g = Tree::open(&root.join("graph_uint8")).expect("open");
    let key = "variables/StatefulPartitionedCall/add/ReadVariableOp.bin";
    let all = cat(&g, key);
    let n = g.resolve(key.as_bytes(), true).expect("bias");
    for off in 0..all.len() {
        let b = g.read(n, off as u64, 3).expect("read");
        assert_eq!(b, &all[off..(off + 3).min(all.len())], "at {off}");
    }
    let rows = tsv(&g);
    let bias = rows
        .iter()
        .find(|r| r["key"] == "StatefulPartitionedCall/add/ReadVariableOp")
        .expect("bias");
    assert_eq!(bias["shards"], "group1-shard1of2.bin,group1-shard2of2.bin");
}

#[test]
fn graph_models_show_their_nodes_and_signature() {
    let root = tfjs_dir();
    for f in ["graph", "graph_uint8"] {
        let dir = root.join(f);
        let tree = Tree::open(&dir).expect("open");
        let model = json(&dir.join("model.json"));
        let nodes = model["modelTopology"]["node"].as_array().expect("nodes");
        let listed: Vec<String> = tree
            .list(tree.resolve(b"graph", true).expect("graph/"))
            .expect("list")
            .into_iter()
            .map(|l| String::from_utf8_lossy(&l.name).into_owned())
            .collect();
        for n in nodes {
            let name = n["name"].as_str().expect("name");
            let op = n["op"].as_str().expect("op");
            // Node names with `/` are directories under graph/ (the escaping of graph files).
            let file = format!("graph/{name}.pbtxt");
            let t = text(&tree, &file);
            assert!(t.contains(&format!("op: \"{op}\"")), "{f}: {file}: {t}");
            assert!(t.contains(&format!("name: \"{name}\"")), "{f}: {file}: {t}");
            let top = name.split('/').next().expect("first");
            assert!(
                listed
                    .iter()
                    .any(|l| l == top || l == &format!("{top}.pbtxt")),
                "{f}: {top} in {listed:?}"
            );
        }
        // Attribute maps (the fused matmul's) come through the JSON form.
        let fused = nodes
            .iter()
            .find(|n| n["op"] == "_FusedMatMul")
            .expect("a fused matmul");
        let t = text(
            &tree,
            &format!("graph/{}.pbtxt", fused["name"].as_str().expect("name")),
        );
        assert!(t.contains("key: \"fused_ops\""), "{t}");
        let sig = text(&tree, "signatures.txt");
        for (k, v) in model["signature"]["inputs"]
            .as_object()
            .expect("inputs")
            .iter()
            .chain(model["signature"]["outputs"].as_object().expect("outputs"))
        {
            assert!(sig.contains(&format!("key: \"{k}\"")), "{sig}");
            let name = v["name"].as_str().expect("name");
            assert!(sig.contains(&format!("name: \"{name}\"")), "{sig}");
            let dtype = v["dtype"].as_str().expect("dtype");
            assert!(sig.contains(&format!("dtype: {dtype}")), "{sig}");
        }
    }
    // A layers model: its Keras configuration, no graph.
    let tree = Tree::open(&root.join("layers")).expect("open");
    let config: Value = serde_json::from_slice(&cat(&tree, "model_config.json")).expect("json");
    let model = json(&root.join("layers/model.json"));
    assert_eq!(config, model["modelTopology"]["model_config"]);
    assert!(tree.resolve(b"graph", true).is_err());
}

#[test]
fn every_view_reads() {
    let root = tfjs_dir();
    for f in FIXTURES {
        let tree = Tree::open(&root.join(f)).expect("open");
        let summary = text(&tree, "summary.txt");
        assert!(!summary.is_empty(), "{f}");
        // model.safetensors: its header names every numeric weight, and its bytes are the .bin's.
        let st = cat(&tree, "model.safetensors");
        let hl = u64::from_le_bytes(st[..8].try_into().expect("8")) as usize;
        let header: Value = serde_json::from_slice(&st[8..8 + hl]).expect("header");
        let npz = npz(&root.join(f).join("expected.npz"));
        for (name, _, _, data) in &npz {
            let e = &header[name.as_str()];
            let offs = e["data_offsets"].as_array().expect("offsets");
            let (a, b) = (
                offs[0].as_u64().expect("a") as usize,
                offs[1].as_u64().expect("b") as usize,
            );
            assert_eq!(&st[8 + hl + a..8 + hl + b], &data[..], "{f}: {name}");
        }
        // text/ and stats/ of one weight.
        let (name, _, _, _) = &npz[0];
        assert!(!cat(&tree, &format!("text/{name}.txt")).is_empty(), "{f}");
        assert!(!cat(&tree, &format!("stats/{name}.txt")).is_empty(), "{f}");
    }
}

/// A copy of fixture `f` in a temporary directory.
fn copy(f: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let to = tmp.path().join(f);
    std::fs::create_dir(&to).expect("mkdir");
    for e in std::fs::read_dir(tfjs_dir().join(f)).expect("dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
    (tmp, to)
}

#[test]
fn verify_checks_shards_against_the_manifest() {
    let root = tfjs_dir();
    for f in FIXTURES {
        let o = tfmount(&[Path::new("verify"), &root.join(f)]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{f}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A truncated middle shard: named, exit 1; the weights in other shards still served.
    let (_t, dir) = copy("layers_sharded");
    let shard = dir.join("group1-shard4of6.bin");
    std::fs::write(&shard, &std::fs::read(&shard).expect("read")[..20]).expect("cut");
    let o = tfmount(&[Path::new("verify"), &dir]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("[group1-shard4of6.bin]\t") && out.contains("20 bytes"),
        "{out}"
    );
    let tree = Tree::open(&dir).expect("open");
    let whole = Tree::open(&root.join("layers_sharded")).expect("open");
    assert_eq!(
        cat(&tree, "variables/dense/kernel.bin"),
        cat(&whole, "variables/dense/kernel.bin")
    );
    let n = tree
        .resolve(b"variables/dense_1/kernel.bin", true)
        .expect("kernel");
    tree.open_file(n)
        .and_then(|_| tree.read(n, 0, 1 << 20))
        .expect_err("a weight in the cut shard fails");
    // A missing shard: named, exit 1.
    let (_t, dir) = copy("graph_uint8");
    std::fs::remove_file(dir.join("group1-shard2of2.bin")).expect("rm");
    let o = tfmount(&[Path::new("verify"), &dir]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("group1-shard2of2.bin"), "{out}");
    // The string weight and the kernel lie in the first shard: still served, as before.
    let tree = Tree::open(&dir).expect("open");
    let whole = Tree::open(&root.join("graph_uint8")).expect("open");
    for k in [
        "variables/unknown_2.bin",
        "variables/StatefulPartitionedCall/MatMul/ReadVariableOp.bin",
    ] {
        assert_eq!(cat(&tree, k), cat(&whole, k), "{k}");
    }
    let n = tree
        .resolve(b"variables/StatefulPartitionedCall/GatherV2/axis.bin", true)
        .expect("axis");
    tree.open_file(n)
        .and_then(|_| tree.read(n, 0, 1 << 20))
        .expect_err("a weight in the missing shard fails");
    // Two conversions of one model: the same keys; the quantized one's values differ.
    let o = tfmount(&[
        Path::new("diff"),
        &root.join("layers"),
        &root.join("layers_sharded"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = tfmount(&[
        Path::new("diff"),
        &root.join("layers"),
        &root.join("layers_uint8"),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.lines().all(|l| l.starts_with("M\t")), "{out}");
}

#[test]
fn recognised_by_content_and_refused_when_too_large() {
    // Any name, by content: the shards beside it.
    let (_t, dir) = copy("graph");
    std::fs::rename(dir.join("model.json"), dir.join("web.json")).expect("rename");
    let tree = Tree::open(&dir.join("web.json")).expect("by content");
    assert!(!cat(&tree, "variables/StatefulPartitionedCall/GatherV2/axis.bin").is_empty());
    // Other JSON is not a model.
    let other = dir.join("other.json");
    std::fs::write(&other, br#"{"format": 1}"#).expect("write");
    assert!(Tree::open(&other).is_err());
    // A model.json over the limit: refused, saying why.
    let big = dir.join("model.json");
    let mut b = vec![b' '; (32 << 20) + 1];
    b[0] = b'{';
    std::fs::write(&big, &b).expect("write");
    let o = tfmount(&[Path::new("ls"), &big]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        err.contains("model.json") && err.contains("refused"),
        "{err}"
    );
    // A damaged model.json says what is wrong, by place.
    std::fs::write(&big, br#"{"format":"graph-model","weightsManifest":[{"paths":["a.bin"],"weights":[{"name":"w","dtype":"float64","shape":[1]}]}]}"#).expect("write");
    let o = tfmount(&[Path::new("ls"), &big]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("weightsManifest[0].weights[0]") && err.contains("float64"),
        "{err}"
    );
}

#[test]
fn a_fuse_mount_serves_weights_and_attributes() {
    if !requires::fuse("tfjs::a_fuse_mount_serves_weights_and_attributes") {
        return;
    }
    let root = tfjs_dir();
    let mut m = common::Mount::start(&root.join("layers_uint8"), &[]);
    let mp = m.path();
    let tree = Tree::open(&root.join("layers_uint8")).expect("open");
    for k in [
        "dense/kernel",
        "dense/bias",
        "dense_1/kernel",
        "dense_1/bias",
    ] {
        let p = format!("variables/{k}.bin");
        assert_eq!(
            std::fs::read(mp.join(&p)).expect("read"),
            cat(&tree, &p),
            "{k}"
        );
    }
    let model = json(&root.join("layers_uint8/model.json"));
    let q = &model["weightsManifest"][0]["weights"][0]["quantization"];
    let get = |name: &str| -> String {
        let path = std::ffi::CString::new(
            mp.join("variables/dense/kernel.bin")
                .as_os_str()
                .as_encoded_bytes(),
        )
        .expect("path");
        let n = std::ffi::CString::new(name).expect("name");
        let mut buf = vec![0u8; 256];
        // SAFETY: valid C strings and a buffer of the given length.
        let r = unsafe {
            libc::getxattr(
                path.as_ptr(),
                n.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        assert!(
            r >= 0,
            "getxattr {name}: {}",
            std::io::Error::last_os_error()
        );
        buf.truncate(r as usize);
        String::from_utf8(buf).expect("utf-8")
    };
    assert_eq!(get("user.tfmount.quantization"), "uint8");
    assert_eq!(
        get("user.tfmount.scale").parse::<f64>().expect("number"),
        q["scale"].as_f64().expect("scale")
    );
    assert_eq!(
        get("user.tfmount.min").parse::<f64>().expect("number"),
        q["min"].as_f64().expect("min")
    );
    assert!(mp.join("model.json").is_file());
    assert!(mp.join("model_config.json").is_file());
    assert_eq!(m.unmount(), Some(0));
}

/// A shard rewritten in place (same size, other bytes) under a mount: the weights in it fail
/// with EIO from then on, never serving the new bytes. Before, they were served from the shard's
/// mapping under the daemon's read lease on it, which the writer's `open` broke.
#[test]
fn a_shard_rewritten_under_a_mount_fails_its_weights_never_new_bytes() {
    if !requires::fuse("tfjs::a_shard_rewritten_under_a_mount_fails_its_weights_never_new_bytes") {
        return;
    }
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (_tmp, dir) = copy("layers");
    let shard = dir.join("group1-shard1of1.bin");
    // A modification time of its own (the rewrite below may come within the clock tick of the
    // copy, and the change is told by size and time).
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&shard)
        .and_then(|f| f.set_modified(old))
        .expect("set mtime");
    let tree = Tree::open(&tfjs_dir().join("layers")).expect("open");
    let keys = [
        "dense/kernel",
        "dense/bias",
        "dense_1/kernel",
        "dense_1/bias",
    ];
    let mut m = common::Mount::start(&dir, &[]);
    let mp = m.path();
    for k in keys {
        let p = format!("variables/{k}.bin");
        assert_eq!(
            common::read_direct(&mp.join(&p)).expect("read"),
            cat(&tree, &p),
            "{k}"
        );
    }
    let ino = std::fs::metadata(&shard).expect("stat").ino();
    assert!(
        common::leases_of(m.pid()).contains(&ino),
        "no lease on the shard"
    );
    let bytes = std::fs::read(&shard).expect("shard");
    let inverted: Vec<u8> = bytes.iter().map(|b| !b).collect();
    let f = std::fs::File::options()
        .write(true)
        .open(&shard)
        .expect("open");
    f.write_all_at(&inverted, 0).expect("rewrite");
    for k in keys {
        let r = common::read_direct(&mp.join(format!("variables/{k}.bin")));
        let e = r.expect_err(&format!("{k}: read after its shard was rewritten"));
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{k}: {e}");
    }
    let log = m.log_text();
    assert!(
        log.contains("group1-shard1of1.bin: changed while mounted"),
        "{log}"
    );
    assert_eq!(m.unmount(), Some(0));
}

/// The subcommands without FUSE: `tfmount ls -R` lists every weight's files and `tfmount cat`
/// writes the converter's bytes, for a model given by its directory and by its `model.json`.
#[test]
fn ls_and_cat_serve_the_weights() {
    let root = tfjs_dir();
    for f in FIXTURES {
        let dir = root.join(f);
        let ls = [
            Path::new("ls"),
            Path::new("-R"),
            &dir,
            Path::new("variables"),
        ];
        let listing = String::from_utf8_lossy(&common::tfmount_ok(&ls)).into_owned();
        for (i, (name, _, _, data)) in npz(&dir.join("expected.npz")).into_iter().enumerate() {
            assert!(
                listing.lines().any(|l| l == format!("{name}.bin")),
                "{f}: {name}.bin not in {listing}"
            );
            let source = if i % 2 == 0 {
                dir.clone()
            } else {
                dir.join("model.json")
            };
            let path = format!("variables/{name}.bin");
            let out = common::tfmount_ok(&[Path::new("cat"), &source, Path::new(&path)]);
            assert_eq!(out, data, "{f}: tfmount cat {path}");
        }
    }
}

#[test]
fn verify_counts_each_byte_checked_once() {
    let root = tfjs_dir();
    for f in ["layers", "layers_sharded", "layers_uint8"] {
        let dir = root.join(f);
        let tree = Tree::open(&dir).expect("open");
        let weights: u64 = tsv(&tree)
            .iter()
            .map(|r| r["nbytes"].parse::<u64>().expect("nbytes"))
            .sum();
        let shards: u64 = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "bin"))
            .map(|p| std::fs::metadata(p).expect("stat").len())
            .sum();
        let o = tfmount(&[Path::new("verify"), &dir]);
        assert_eq!(o.status.code(), Some(0), "{f}");
        // The weights' bytes as served (decoded), each once; the shard size checks read none.
        assert_eq!(verified_bytes(&o.stderr), weights, "{f}");
        if f == "layers_uint8" {
            assert!(weights > shards, "{f}: decoded from fewer bytes");
        } else {
            assert_eq!(weights, shards, "{f}: float32 weights fill the shards");
        }
    }
}

/// Bare weights manifests: a `weights_manifest.json` (the converter's `write_weights`) and the
/// directory holding it are one model; a directory of several (face-api.js's `weights/`
/// layout: `<model>-weights_manifest.json` and `<model>-shard1`, ...) shows one directory per
/// manifest, named without `-weights_manifest.json`, each with its weights (the values are the
/// conformance suite's, against `tensorflowjs.read_weights`).
#[test]
fn weights_manifests_mount_as_models() {
    let ls = |src: &std::path::Path, path: &str| {
        let o = common::tfmount(&["ls".as_ref(), src.as_os_str(), path.as_ref()]);
        assert!(o.status.success(), "ls {} {path}: {o:?}", src.display());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let one = common::fixtures().join("tfjs/manifest");
    let root = ls(&one, "");
    assert!(root.lines().any(|l| l == "weights_manifest.json"), "{root}");
    assert!(ls(&one, "variables/embedding")
        .lines()
        .any(|l| l == "ids.bin"));
    let same = ls(&one.join("weights_manifest.json"), "variables/dense");
    assert_eq!(same, ls(&one, "variables/dense"));
    let many = common::fixtures().join("tfjs/manifests");
    let names: Vec<String> = ls(&many, "").lines().map(str::to_string).collect();
    assert!(
        names.contains(&"tiny".to_string()) && names.contains(&"landmarks".to_string()),
        "{names:?}"
    );
    assert!(ls(&many, "tiny/variables/conv0")
        .lines()
        .any(|l| l == "filters.bin"));
    assert!(ls(&many, "landmarks")
        .lines()
        .any(|l| l == "landmarks-weights_manifest.json"));
    // The quantization attributes, as for a model.json's weights.
    let o = common::tfmount(&[
        "cat".as_ref(),
        many.as_os_str(),
        "tiny/tensors.tsv".as_ref(),
    ]);
    let tsv = String::from_utf8_lossy(&o.stdout);
    let filters = tsv
        .lines()
        .find(|l| l.starts_with("conv0/filters\t"))
        .unwrap_or_else(|| panic!("{tsv}"));
    assert!(filters.contains("uint8"), "{filters}");
}
