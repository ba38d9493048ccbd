//! safetensors checkpoints as a SOURCE (one file, a Hugging Face sharded set, a directory of
//! files), checked against what safetensors' own reader gives for the same files
//! (`tests/fixtures/safetensors/expected/*.json`, written by `scripts/gen_safetensors.py` with
//! `safetensors` 0.8.0): every tensor's `.bin` (sha256), `.dtype`, `.shape`; `__metadata__` as
//! `metadata.json`; the sharded set by its directory and by its index; the `model.safetensors`
//! view of a safetensors source, byte for byte in tensor data and read by the real library.

use crate::common;
use common::requires;

use std::path::PathBuf;

use serde_json::Value;
use tfmount::model::open::Tree;

use common::{sha256_hex, tree_cat as cat, tree_text as text};

fn dir() -> PathBuf {
    common::fixtures().join("safetensors")
}

fn expected(name: &str) -> Value {
    common::load_json(&format!("safetensors/expected/{name}.json"))
}

/// Every tensor of `want` (an expected record) read from `tree` under `at` (`""` or
/// `name/`): bytes, dtype and shape as safetensors' reader gives them.
fn check_tensors(tree: &Tree, at: &str, want: &Value) -> usize {
    let mut n = 0;
    for t in want["tensors"].as_array().expect("tensors") {
        let key = t["key"].as_str().expect("key");
        let base = format!("{at}variables/{key}");
        assert_eq!(
            sha256_hex(&cat(tree, &format!("{base}.bin"))),
            t["sha256"].as_str().expect("sha"),
            "{base}.bin"
        );
        let st = t["dtype"].as_str().expect("dtype");
        assert_eq!(
            text(tree, &format!("{base}.dtype")).trim(),
            common::safetensors_tf_name(st),
            "{base}"
        );
        let shape: Vec<String> = common::dims(&t["shape"])
            .iter()
            .map(u64::to_string)
            .collect();
        let got = text(tree, &format!("{base}.shape"));
        let got: Vec<&str> = got
            .trim()
            .trim_matches(|c| c == '[' || c == ']')
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(got, shape, "{base}.shape");
        n += 1;
    }
    n
}

#[test]
fn every_tensor_is_what_safetensors_reads() {
    for (file, name) in [
        ("all_dtypes.safetensors", "all_dtypes"),
        ("several/a.safetensors", "several_a"),
        ("tf_pair/model.safetensors", "tf_pair"),
    ] {
        let want = expected(name);
        let tree = Tree::open(&dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let n = check_tensors(&tree, "", &want);
        assert!(n >= 2, "{file}");
        // __metadata__ as its own file, as safetensors' reader gives it.
        match want["metadata"].as_object() {
            Some(m) => {
                let got: Value =
                    serde_json::from_slice(&cat(&tree, "metadata.json")).expect("metadata.json");
                assert_eq!(got.as_object(), Some(m), "{file}");
            }
            None => assert!(tree.resolve(b"metadata.json", true).is_err(), "{file}"),
        }
    }
    // Every dtype, and the shapes: scalar, zero-size, names with `/` and `.`.
    let want = expected("all_dtypes");
    let keys: Vec<&str> = want["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["key"].as_str().expect("key"))
        .collect();
    for k in [
        "i64/scalar",
        "empty/zero_rows",
        "model.layers.0.weight",
        "a/b.c/d",
    ] {
        assert!(keys.contains(&k), "{k}");
    }
    let tree = Tree::open(&dir().join("all_dtypes.safetensors")).expect("open");
    assert!(cat(&tree, "variables/empty/zero_rows.bin").is_empty());
    // Its safetensors dtype, a tensors.tsv column.
    let tsv = text(&tree, "tensors.tsv");
    let header: Vec<&str> = tsv.lines().next().expect("header").split('\t').collect();
    let col = header
        .iter()
        .position(|c| *c == "safetensors_dtype")
        .expect("a safetensors_dtype column");
    let bf16 = tsv
        .lines()
        .find(|l| l.starts_with("bf16/weights\t"))
        .expect("bf16 row");
    assert_eq!(bf16.split('\t').nth(col), Some("BF16"));
}

#[test]
fn a_dtype_tfmount_has_not_is_listed_and_not_served() {
    let tree = Tree::open(&dir().join("unserved.safetensors")).expect("open");
    let want = expected("unserved");
    let f32_only = serde_json::json!({
        "tensors": want["tensors"].as_array().expect("tensors").iter()
            .filter(|t| t["dtype"] == "F32").cloned().collect::<Vec<_>>()
    });
    assert_eq!(check_tensors(&tree, "", &f32_only), 1);
    let n = tree
        .resolve(b"variables/e8m0/scales.bin", true)
        .expect("listed");
    let e = tree
        .open_file(n)
        .and_then(|_| tree.read(n, 0, 1 << 20))
        .expect_err("not served");
    assert!(e.to_string().contains("F8_E8M0"), "{e}");
    assert!(tree.resolve(b"variables/e8m0/scales.shape", true).is_ok());
}

#[test]
fn a_sharded_set_is_one_checkpoint_by_its_directory_or_its_index() {
    let want = expected("sharded");
    let index = dir().join("sharded/model.safetensors.index.json");
    for source in [dir().join("sharded"), index.clone()] {
        let tree = Tree::open(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert_eq!(check_tensors(&tree, "", &want), 6, "{}", source.display());
        assert_eq!(
            cat(&tree, "model.safetensors.index.json"),
            std::fs::read(&index).expect("index"),
        );
        assert!(text(&tree, "metadata/model-00001-of-00002.safetensors.json").contains("\"pt\""));
    }
}

#[test]
fn a_directory_of_files_is_a_directory_of_checkpoints() {
    let tree = Tree::open(&dir().join("several")).expect("open");
    for name in ["a", "b"] {
        let at = format!("{name}.safetensors/");
        assert_eq!(
            check_tensors(&tree, &at, &expected(&format!("several_{name}"))),
            2
        );
    }
}

/// The `model.safetensors` view of a safetensors source: every tensor's bytes as the source
/// holds them, and a file the real `safetensors` library reads.
#[test]
fn the_model_safetensors_view_holds_the_same_bytes() {
    let want = expected("all_dtypes");
    let tree = Tree::open(&dir().join("all_dtypes.safetensors")).expect("open");
    let view = cat(&tree, "model.safetensors");
    let n = u64::from_le_bytes(view[..8].try_into().expect("len")) as usize;
    let header: Value = serde_json::from_slice(&view[8..8 + n]).expect("header");
    let data = &view[8 + n..];
    for t in want["tensors"].as_array().expect("tensors") {
        let key = t["key"].as_str().expect("key");
        let e = &header[key];
        assert_eq!(e["dtype"], t["dtype"], "{key}");
        assert_eq!(e["shape"], t["shape"], "{key}");
        let off = common::dims(&e["data_offsets"]);
        assert_eq!(
            sha256_hex(&data[off[0] as usize..off[1] as usize]),
            t["sha256"].as_str().expect("sha"),
            "{key}"
        );
    }
    let Some(py) = requires::python(
        "safetensors",
        "the_model_safetensors_view_holds_the_same_bytes",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("view.safetensors");
    std::fs::write(&file, &view).expect("write");
    let script = "import sys, json, hashlib, safetensors\n\
        d = safetensors.deserialize(open(sys.argv[1], 'rb').read())\n\
        print(json.dumps({k: [v['dtype'], list(v['shape']), hashlib.sha256(bytes(v['data'])).hexdigest()] for k, v in d}))";
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&file)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("json");
    for t in want["tensors"].as_array().expect("tensors") {
        let key = t["key"].as_str().expect("key");
        assert_eq!(
            got[key],
            serde_json::json!([t["dtype"], t["shape"], t["sha256"]]),
            "{key}"
        );
    }
}

#[test]
fn recognised_by_content_under_any_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join("weights.bin");
    std::fs::copy(dir().join("several/a.safetensors"), &p).expect("copy");
    let tree = Tree::open(&p).expect("by content");
    assert_eq!(check_tensors(&tree, "", &expected("several_a")), 2);
    // Not a safetensors file, not so named: not claimed.
    let other = tmp.path().join("notes.txt");
    std::fs::write(&other, b"{\"hello\": 1}\n").expect("write");
    assert!(Tree::open(&other).is_err());
}
