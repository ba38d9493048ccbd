//! Keras checkpoints (`.weights.h5`, `.keras`, legacy `.h5`) served like TF checkpoints, checked
//! against what h5py read from the same files when Keras wrote them
//! (`tests/fixtures/keras/expected/*.json`, written by `scripts/gen_keras_fixtures.py`): every
//! dataset's bytes (sha256), dtype and shape; the `.keras` members; the legacy files' JSON
//! attributes and `weight_names`; and `verify`/`diff` through the built binary.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tfmount::model::open::{NodeKind, Tree};

use common::{json, keras_dir, sha256_hex as sha, tfmount, tree_cat as cat, tree_text as text};

/// Checks every dataset h5py listed against the tree's `variables/` (`prefix`: where the
/// checkpoint's tree is in the mount). Returns how many datasets were checked.
fn check_datasets(tree: &Tree, prefix: &str, datasets: &Value) -> usize {
    let mut n = 0;
    for d in datasets.as_array().expect("datasets") {
        let path = d["path"].as_str().expect("path");
        let key = path.strip_prefix('/').expect("absolute path");
        let base = format!("{prefix}variables/{key}");
        let Some(dtype) = d["dtype"].as_str() else {
            // An opaque dataset without a dtype attribute: h5py does not know what it holds.
            continue;
        };
        let bin = cat(tree, &format!("{base}.bin"));
        assert_eq!(
            sha(&bin),
            d["sha256"].as_str().expect("sha256"),
            "{base}.bin"
        );
        assert_eq!(
            text(tree, &format!("{base}.dtype")).trim(),
            dtype,
            "{base}.dtype"
        );
        let shape: Vec<String> = d["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|x| x.as_u64().expect("dim").to_string())
            .collect();
        let got = text(tree, &format!("{base}.shape"));
        let got: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(got, shape, "{base}.shape");
        n += 1;
    }
    n
}

#[test]
fn every_dataset_is_what_h5py_reads() {
    let dir = keras_dir();
    for file in [
        "model.weights.h5",
        "legacy_model.h5",
        "k2_weights.h5",
        "other_writer.weights.h5",
        "checkpoints/ckpt-01.weights.h5",
        "sharded/model_00001.weights.h5",
    ] {
        let expected = json(&dir.join(format!("expected/{file}.json")));
        let tree = Tree::open(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let n = check_datasets(&tree, "", &expected["datasets"]);
        assert!(n > 0, "{file}: no dataset checked");
    }
}

#[test]
fn keras_zips_serve_the_weights_member_in_place_or_inflated() {
    let dir = keras_dir();
    // The deflated zip holds model.keras's members, deflated.
    let weights =
        json(&dir.join("expected/model.keras.json"))["model.weights.h5"]["datasets"].clone();
    for file in ["model.keras", "model_deflated.keras"] {
        let expected = json(&dir.join(format!("expected/{file}.json")));
        let tree = Tree::open(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let n = check_datasets(&tree, "", &weights);
        assert!(n > 50, "{file}: {n} datasets");
        for m in expected["members"].as_array().expect("members") {
            let name = m["name"].as_str().expect("name");
            if name == "model.weights.h5" {
                continue;
            }
            assert_eq!(
                sha(&cat(&tree, name)),
                m["sha256"].as_str().expect("sha"),
                "{file}: {name}"
            );
        }
    }
    // In place: a stored member's datasets are at their offset inside the zip.
    let expected = json(&dir.join("expected/model.keras.json"));
    let member = expected["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["name"] == "model.weights.h5")
        .expect("weights member");
    let base = member["data_offset"].as_u64().expect("data_offset");
    let zip = std::fs::read(dir.join("model.keras")).expect("read");
    let d = &expected["model.weights.h5"]["datasets"][0];
    let (off, size) = (
        base + d["offset"].as_u64().expect("offset"),
        d["storage_size"].as_u64().expect("size"),
    );
    assert_eq!(
        sha(&zip[off as usize..(off + size) as usize]),
        d["sha256"].as_str().expect("sha")
    );
}

#[test]
fn legacy_files_show_their_json_and_weight_names() {
    let dir = keras_dir();
    let expected = json(&dir.join("expected/legacy_model.h5.json"));
    let tree = Tree::open(&dir.join("legacy_model.h5")).expect("open");
    let root = &expected["groups"][0]["attributes"];
    for (attr, file) in [
        ("model_config", "model_config.json"),
        ("training_config", "training_config.json"),
    ] {
        let want = root[attr]["value"]["sha256"].as_str().expect("sha");
        assert_eq!(sha(&cat(&tree, file)), want, "{file}");
    }
    // names/ from weight_names: each link resolves to the dataset the attribute names.
    let k2 = json(&dir.join("expected/k2_weights.h5.json"));
    let tree = Tree::open(&dir.join("k2_weights.h5")).expect("open");
    let names: &Value = &k2["legacy"]["weight_names"];
    // Datasets h5py gives no dtype (opaque bfloat16 without a dtype attribute) are not served.
    let served: Vec<&str> = k2["datasets"]
        .as_array()
        .expect("datasets")
        .iter()
        .filter(|d| d["dtype"].is_string())
        .filter_map(|d| d["path"].as_str())
        .collect();
    let mut checked = 0;
    for (group, list) in names.as_object().expect("weight_names") {
        for w in list.as_array().expect("list") {
            let w = w.as_str().expect("name");
            let key = format!("{}/{w}", group.trim_start_matches('/'));
            if !served.contains(&format!("/{key}").as_str()) {
                assert!(tree
                    .resolve(format!("variables/{key}.bin").as_bytes(), true)
                    .is_err());
                continue;
            }
            let shown = w.strip_suffix(":0").unwrap_or(w);
            let by_name = cat(&tree, &format!("names/{shown}.bin"));
            let by_key = cat(&tree, &format!("variables/{key}.bin"));
            assert_eq!(by_name, by_key, "names/{shown}");
            checked += 1;
        }
    }
    assert!(checked >= 8, "{checked} names checked");
}

#[test]
fn a_directory_of_epoch_files_shows_one_directory_each() {
    let dir = keras_dir().join("checkpoints");
    let tree = Tree::open(&dir).expect("open");
    let names: Vec<String> = tree
        .list(tree.root())
        .expect("list")
        .into_iter()
        .filter(|e| e.node.kind == NodeKind::Dir)
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "ckpt-01.weights.h5",
            "ckpt-02.weights.h5",
            "ckpt-03.weights.h5"
        ]
    );
    for e in 1..=3 {
        let file = format!("checkpoints/ckpt-0{e}.weights.h5");
        let expected = json(&keras_dir().join(format!("expected/{file}.json")));
        let n = check_datasets(
            &tree,
            &format!("ckpt-0{e}.weights.h5/"),
            &expected["datasets"],
        );
        assert!(n > 0);
    }
}

#[test]
fn verify_and_diff_work_by_key_across_keras_files() {
    let dir = keras_dir();
    let (keras, weights, deflated) = (
        dir.join("model.keras"),
        dir.join("model.weights.h5"),
        dir.join("model_deflated.keras"),
    );
    for f in [&keras, &weights, &deflated, &dir.join("legacy_model.h5")] {
        let o = tfmount(&[Path::new("verify"), f]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}{}",
            f.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // One model saved two ways: the same keys, the same bytes.
    for (a, b) in [(&keras, &weights), (&keras, &deflated)] {
        let o = tfmount(&[Path::new("diff"), a, b]);
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
    }
    // Two epochs differ in the trained weights, not in their keys.
    let o = tfmount(&[
        Path::new("diff"),
        &dir.join("checkpoints/ckpt-01.weights.h5"),
        &dir.join("checkpoints/ckpt-02.weights.h5"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().all(|l| l.starts_with("M\t")), "{out}");
}

/// `diff --names` (issue 31): a `.keras` file and the legacy `.h5` of the model (different keys:
/// `layers/conv2d/vars/0` against `model_weights/conv/conv/kernel`) matched by the names Keras
/// gives their variables. Expected from what Keras and h5py recorded: the `.keras` side's names
/// are Keras' own `variable.path`s (`expected/names.json`), the legacy side's its
/// `weight_names` (and the optimizer's dataset paths); a name on both sides is `=` when h5py
/// read the same bytes (sha256), `T` when dtype or shape differ, else `M`; a name on one side is
/// `D` or `A`.
#[test]
fn diff_by_names_matches_a_keras_file_with_its_legacy_h5() {
    let dir = keras_dir();
    // name -> (dtype, shape, sha256)
    type Rec = (String, String, String);
    let rec = |d: &Value| -> Option<Rec> {
        Some((
            d["dtype"].as_str()?.to_string(),
            d["shape"].to_string(),
            d["sha256"].as_str()?.to_string(),
        ))
    };
    let by_path = |datasets: &Value| -> BTreeMap<String, Value> {
        datasets
            .as_array()
            .expect("datasets")
            .iter()
            .map(|d| (d["path"].as_str().expect("path").to_string(), d.clone()))
            .collect()
    };
    let keras = json(&dir.join("expected/model.keras.json"));
    let kd = by_path(&keras["model.weights.h5"]["datasets"]);
    let mut a: BTreeMap<String, Rec> = BTreeMap::new();
    for (name, key) in json(&dir.join("expected/names.json"))["names"]
        .as_object()
        .expect("names")
    {
        // The custom layer's variables have no name the file tells (see
        // keras_names_are_the_ones_keras_gives).
        if name.starts_with("dtype_zoo/") || name.contains("/dtype_zoo_") {
            continue;
        }
        let d = &kd[&format!("/{}", key.as_str().expect("key"))];
        a.insert(name.clone(), rec(d).expect("a dataset h5py knows"));
    }
    let legacy = json(&dir.join("expected/legacy_model.h5.json"));
    let ld = by_path(&legacy["datasets"]);
    let mut b: BTreeMap<String, Rec> = BTreeMap::new();
    for (group, names) in legacy["legacy"]["weight_names"]
        .as_object()
        .expect("weight_names")
    {
        for n in names.as_array().expect("names") {
            let n = n.as_str().expect("name");
            // Opaque bfloat16 without a dtype attribute: not shown (h5py gives no dtype).
            if let Some(r) = rec(&ld[&format!("{group}/{n}")]) {
                b.insert(n.to_string(), r);
            }
        }
    }
    for (path, d) in &ld {
        if let (Some(n), Some(r)) = (path.strip_prefix("/optimizer_weights/"), rec(d)) {
            b.insert(n.to_string(), r);
        }
    }
    let mut want: Vec<(String, String)> = Vec::new();
    for (n, x) in &a {
        let tag = match b.get(n) {
            None => "D",
            Some(y) if (&x.0, &x.1) != (&y.0, &y.1) => "T",
            Some(y) if x.2 != y.2 => "M",
            Some(_) => "=",
        };
        want.push((tag.to_string(), n.clone()));
    }
    for n in b.keys().filter(|n| !a.contains_key(*n)) {
        want.push(("A".to_string(), n.clone()));
    }
    want.sort_by(|x, y| x.1.cmp(&y.1));
    assert!(
        want.iter().filter(|(t, _)| t == "=").count() >= 40,
        "{want:?}"
    );
    let (k, l) = (dir.join("model.keras"), dir.join("legacy_model.h5"));
    let o = tfmount(&[
        Path::new("diff"),
        Path::new("--names"),
        Path::new("-s"),
        Path::new("--json"),
        &k,
        &l,
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let recs = common::json_lines(&o.stdout);
    let got: Vec<(String, String)> = recs
        .iter()
        .filter(|r| r["type"] == "change")
        .map(|r| {
            (
                r["change"].as_str().expect("change").to_string(),
                r["key"].as_str().expect("key").to_string(),
            )
        })
        .collect();
    assert_eq!(got, want);
    // By key, the two files share nothing.
    let o = tfmount(&[Path::new("diff"), Path::new("-s"), &k, &l]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.lines().any(|l| l.starts_with("=")), "{out}");
    // A side without names/ (a .weights.h5 holds no layer names) is an error naming it.
    let w = dir.join("model.weights.h5");
    let o = tfmount(&[Path::new("diff"), Path::new("--names"), &k, &w]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("B (") && err.contains("model.weights.h5") && err.contains("no names/"),
        "{err}"
    );
}

/// A copy of `src` with byte `at` flipped, in a temporary directory.
fn damaged(src: &Path, at: impl Fn(usize) -> usize) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut b = std::fs::read(src).expect("read");
    let i = at(b.len());
    b[i] ^= 0x55;
    let p = tmp.path().join(src.file_name().expect("name"));
    std::fs::write(&p, b).expect("write");
    (tmp, p)
}

#[test]
fn verify_finds_damage() {
    let dir = keras_dir();
    // A flipped byte inside a dataset of a stored .keras member: the zip's CRC-32 says so.
    let expected = json(&dir.join("expected/model.keras.json"));
    let member = expected["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["name"] == "model.weights.h5")
        .expect("member")
        .clone();
    let d = &expected["model.weights.h5"]["datasets"][0];
    let at = (member["data_offset"].as_u64().expect("off") + d["offset"].as_u64().expect("off"))
        as usize;
    let (_t, p) = damaged(&dir.join("model.keras"), |_| at);
    let o = tfmount(&[Path::new("verify"), &p]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[model.weights.h5]\t") && out.contains("CRC-32"),
        "{out}"
    );
    // A truncated .weights.h5: its last datasets run past the end, said per tensor; or its
    // metadata is gone, said for the file. Never a pass.
    let tmp = tempfile::tempdir().expect("tempdir");
    let b = std::fs::read(dir.join("model.weights.h5")).expect("read");
    let p = tmp.path().join("cut.weights.h5");
    let mut by_key: BTreeMap<u64, &str> = BTreeMap::new();
    let exp = json(&dir.join("expected/model.weights.h5.json"));
    for d in exp["datasets"].as_array().expect("datasets") {
        by_key.insert(d["offset"].as_u64().expect("offset"), "");
    }
    let last = *by_key.keys().next_back().expect("a dataset");
    std::fs::write(&p, &b[..last as usize + 1]).expect("write");
    let o = tfmount(&[Path::new("verify"), &p]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Every `.bin` under directory `path` of `tree`, as paths relative to it.
fn bins(tree: &Tree, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![path.to_string()];
    while let Some(dir) = todo.pop() {
        let n = tree.resolve(dir.as_bytes(), true).expect("dir");
        for e in tree.list(n).expect("list") {
            let p = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            match e.node.kind {
                NodeKind::Dir => todo.push(p),
                _ if p.ends_with(".bin") => out.push(p[path.len() + 1..].to_string()),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

#[test]
fn keras_names_are_the_ones_keras_gives() {
    // Keras's own `variable.path` of each variable, mapped to its dataset by Keras itself
    // (scripts/gen_keras_names.py).
    let dir = keras_dir();
    let expected = json(&dir.join("expected/names.json"));
    let tree = Tree::open(&dir.join("model.keras")).expect("open");
    let mut want = Vec::new();
    for (name, key) in expected["names"].as_object().expect("names") {
        let key = key.as_str().expect("key");
        // The custom layer's variables (and their optimizer slots) have no name the file
        // tells: only `vars/<i>`.
        if name.starts_with("dtype_zoo/") || name.contains("/dtype_zoo_") {
            assert!(
                tree.resolve(format!("names/{name}.bin").as_bytes(), true)
                    .is_err(),
                "{name}"
            );
            continue;
        }
        assert_eq!(
            cat(&tree, &format!("names/{name}.bin")),
            cat(&tree, &format!("variables/{key}.bin")),
            "names/{name}"
        );
        let link = tree
            .resolve(format!("names/{name}.bin").as_bytes(), false)
            .expect("link");
        let target = String::from_utf8(tree.readlink(link).expect("readlink")).expect("utf-8");
        assert!(
            target.ends_with(&format!("variables/{key}.bin")),
            "{name} -> {target}"
        );
        want.push(format!("{name}.bin"));
    }
    want.sort();
    assert!(want.len() > 60, "{} names", want.len());
    assert_eq!(bins(&tree, "names"), want);
}

/// Keras 3's `model.export()` saves each weight as two variables (`variables/N` and
/// `_all_variables/N`, one name, the same bytes): `names/` names each weight once by the name
/// Keras gives it (its object paths stay too), and `weights.safetensors` holds each once, with
/// the values Keras holds (scripts/gen_keras_export.py).
#[test]
fn an_exported_model_shows_each_weight_once() {
    let dir = keras_dir();
    let expected = json(&dir.join("expected/export.json"));
    let tree = Tree::open(&dir.join("export")).expect("open");
    let f32s = |v: &Value| -> Vec<u8> {
        v.as_array()
            .expect("values")
            .iter()
            .flat_map(|x| (x.as_f64().expect("number") as f32).to_le_bytes())
            .collect()
    };
    let mut want: Vec<String> = Vec::new();
    let mut want_st = BTreeMap::new();
    for w in expected["weights"].as_array().expect("weights") {
        let path = w["path"].as_str().expect("path");
        assert_eq!(
            cat(&tree, &format!("names/{path}.bin")),
            f32s(&w["values"]),
            "names/{path}.bin"
        );
        want.push(format!("{path}.bin"));
        want_st.insert(path.to_string(), f32s(&w["values"]));
    }
    want.sort();
    let shown: Vec<String> = bins(&tree, "names")
        .into_iter()
        .filter(|p| !p.starts_with("variables/") && !p.starts_with("_all_variables/"))
        .collect();
    assert_eq!(shown, want, "names/ besides the object paths");
    // weights.safetensors: each weight once, under its name, with its values.
    let st = cat(&tree, "weights.safetensors");
    let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&st[8..8 + n]).expect("header");
    let body = &st[8 + n..];
    let mut got = BTreeMap::new();
    for (name, t) in header.as_object().expect("object") {
        if name == "__metadata__" {
            continue;
        }
        let off = t["data_offsets"].as_array().expect("offsets");
        let (a, b) = (
            off[0].as_u64().expect("a") as usize,
            off[1].as_u64().expect("b") as usize,
        );
        got.insert(name.clone(), body[a..b].to_vec());
    }
    assert_eq!(got, want_st);
}

/// A `.keras` whose stored weights member has one byte flipped inside a dataset, mounted: every
/// dataset of the member fails with EIO (the zip's CRC-32 of the member does not match; Keras
/// refuses the file), the check is made once and logged once, naming the file and the member
/// (besides the mount's usual line per failing file), and the other members' files still read;
/// with `-o nocrc` the changed bytes are served.
#[test]
fn a_damaged_keras_member_is_not_served() {
    use std::os::unix::ffi::OsStrExt;
    let dir = keras_dir();
    let expected = json(&dir.join("expected/model.keras.json"));
    let datasets = expected["model.weights.h5"]["datasets"]
        .as_array()
        .expect("datasets");
    let (d0, d1) = (&datasets[0], &datasets[1]);
    let at = d0["zip_offset"].as_u64().expect("zip_offset") as usize;
    let (_t, p) = damaged(&dir.join("model.keras"), |_| at);
    let bin = |d: &Value| {
        let key = d["path"].as_str().expect("path").trim_start_matches('/');
        format!("variables/{key}.bin")
    };
    let intact = Tree::open(&dir.join("model.keras")).expect("open");
    let mut m = common::Mount::start(&p, &[]);
    let mp = m.path();
    for d in [d0, d1] {
        let e = std::fs::read(mp.join(bin(d))).expect_err("a dataset of the damaged member");
        assert_eq!(e.raw_os_error(), Some(5), "{}: {e}", bin(d));
    }
    // Asked again: the remembered outcome, no second log line; now known, even a read of the
    // first bytes fails.
    assert!(std::fs::read(mp.join(bin(d0))).is_err());
    let first = std::fs::File::open(mp.join(bin(d1))).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_at(&mut [0u8; 1], 0)
    });
    assert_eq!(first.map_err(|e| e.raw_os_error()), Err(Some(5)));
    for name in ["config.json", "metadata.json"] {
        assert_eq!(
            std::fs::read(mp.join(name)).expect(name),
            cat(&intact, name),
            "{name}"
        );
    }
    assert_eq!(m.unmount(), Some(0));
    let log = m.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("member model.weights.h5: zip: CRC-32 mismatch"))
        .filter(|l| l.contains("its datasets fail with EIO"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&*String::from_utf8_lossy(p.as_os_str().as_bytes())),
        "{log}"
    );
    // The check streams (docs/keras.md): a fresh mount serves reads while it runs, and the
    // read that reaches a dataset's end waits for it, so a dataset read end first fails.
    let (d2, last) = (&datasets[2], |f: &std::fs::File, size: u64| {
        use std::os::unix::fs::FileExt;
        f.read_at(&mut [0u8; 1], size - 1)
    });
    let mut m = common::Mount::start(&p, &[]);
    let f = std::fs::File::open(m.path().join(bin(d2))).expect("open");
    let size = f.metadata().expect("stat").len();
    assert!(size > 0);
    assert_eq!(last(&f, size).map_err(|e| e.raw_os_error()), Err(Some(5)));
    drop(f);
    assert_eq!(m.unmount(), Some(0));
    // -o crc_first: the member is checked before a dataset's first byte.
    let mut m = common::Mount::start(&p, &["-o", "crc_first"]);
    let first = std::fs::File::open(m.path().join(bin(d2))).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_at(&mut [0u8; 1], 0)
    });
    assert_eq!(first.map_err(|e| e.raw_os_error()), Err(Some(5)));
    assert_eq!(m.unmount(), Some(0));
    // -o nocrc: the bytes as they are, the flipped one included.
    let mut m = common::Mount::start(&p, &["-o", "nocrc"]);
    let got = std::fs::read(m.path().join(bin(d0))).expect("served with nocrc");
    let want = cat(&intact, &bin(d0));
    assert_eq!(got.len(), want.len());
    assert_ne!(got, want, "the flipped byte is served");
    assert_eq!(m.unmount(), Some(0));
}

/// `summary.txt`'s role row `name`: (tensors, parameters).
fn role_row(summary: &str, name: &str) -> (u64, u64) {
    let line = summary
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no row {name:?} in\n{summary}"));
    let n: Vec<u64> = line[name.len()..]
        .split_whitespace()
        .take(2)
        .map(|x| x.replace(',', "").parse().expect("number"))
        .collect();
    (n[0], n[1])
}

/// Adam's momentum and velocity are optimizer slots in every Keras layout, its iteration count
/// and learning rate the optimizer's own: counted from what h5py read when Keras wrote the
/// files (a Keras 3 file's `optimizer/vars/0` and `vars/1` are the iteration count and the
/// learning rate; a legacy `.h5` names them).
#[test]
fn summary_counts_keras_optimizer_slots_as_slots() {
    let dir = keras_dir();
    for (file, expected) in [
        ("model.weights.h5", "model.weights.h5"),
        ("model.keras", "model.keras"),
        ("model_deflated.keras", "model.keras"),
        ("legacy_model.h5", "legacy_model.h5"),
        (
            "checkpoints/ckpt-01.weights.h5",
            "checkpoints/ckpt-01.weights.h5",
        ),
    ] {
        let e = json(&dir.join(format!("expected/{expected}.json")));
        let datasets = if e["datasets"].is_array() {
            &e["datasets"]
        } else {
            &e["model.weights.h5"]["datasets"]
        };
        // Served optimizer datasets (h5py gave a dtype), split into the optimizer's own
        // (named, or Keras 3's first two) and the rest.
        let (mut own, mut slots) = ((0u64, 0u64), (0u64, 0u64));
        for d in datasets.as_array().expect("datasets") {
            let path = d["path"].as_str().expect("path");
            if !path.starts_with("/optimizer") || !d["dtype"].is_string() {
                continue;
            }
            let params: u64 = d["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|x| x.as_u64().expect("dim"))
                .product();
            let is_own = matches!(path.rsplit('/').next(), Some("iteration" | "learning_rate"))
                || path == "/optimizer/vars/0"
                || path == "/optimizer/vars/1";
            let t = if is_own { &mut own } else { &mut slots };
            t.0 += 1;
            t.1 += params;
        }
        assert_eq!(own.0, 2, "{file}: iteration and learning rate");
        assert!(slots.0 >= 4, "{file}: {} slots", slots.0);
        let tree = Tree::open(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let summary = text(&tree, "summary.txt");
        assert_eq!(
            role_row(&summary, "optimizer slots"),
            slots,
            "{file}\n{summary}"
        );
        assert_eq!(
            role_row(&summary, "optimizer other"),
            own,
            "{file}\n{summary}"
        );
    }
}

/// A sharded model (`save_weights(..., max_shard_size=...)`): its directory and its index are
/// one model with every shard's datasets (the optimizer's group split across three shards);
/// `verify` names a shard the index lists that is missing, and one that holds nothing of a
/// group the index says it holds; the shards are not listed as checkpoints of their own.
#[test]
fn sharded_weights_are_one_model_and_verify_names_a_bad_shard() {
    let src = common::fixtures().join("keras/sharded");
    let run = |args: &[&std::ffi::OsStr]| {
        let o = common::tfmount(args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, out) = run(&[
        "ls".as_ref(),
        src.as_os_str(),
        "variables/optimizer/vars".as_ref(),
    ]);
    assert_eq!(code, Some(0), "{out}");
    for i in 0..6 {
        assert!(out.lines().any(|l| l == format!("{i}.bin")), "{out}");
    }
    let index = src.join("model.weights.json");
    let (code, out) = run(&["ls".as_ref(), index.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.lines().any(|l| l == "model.weights.json"), "{out}");
    assert_eq!(run(&["verify".as_ref(), src.as_os_str()]).0, Some(0));

    let tmp = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(&src).expect("ls") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).expect("copy");
    }
    std::fs::remove_file(tmp.path().join("model_00001.weights.h5")).expect("rm");
    let (code, out) = run(&["verify".as_ref(), tmp.path().as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("model_00001.weights.h5") && out.contains("missing"),
        "{out}"
    );
    // Shard 2 replaced by shard 0's bytes: it holds no dataset of /optimizer/vars/3..5.
    std::fs::copy(
        src.join("model_00001.weights.h5"),
        tmp.path().join("model_00001.weights.h5"),
    )
    .expect("copy");
    std::fs::copy(
        src.join("model_00000.weights.h5"),
        tmp.path().join("model_00002.weights.h5"),
    )
    .expect("copy");
    let (code, out) = run(&["verify".as_ref(), tmp.path().as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("model_00002.weights.h5 holds no dataset of /optimizer/vars"),
        "{out}"
    );
}

/// Keras's own sharded manifest of a functional model (`scripts/gen_keras_sharded.py`, real
/// Keras 3.15.1): its `weight_map` names the embedding's one shard as a string and the other
/// groups' as lists, the optimizer's across five shards. The directory and the index are one
/// model with each of the 47 datasets at its key, h5py's bytes; `verify` passes. (It was refused
/// as "not a TensorFlow checkpoint", and the directory mounted as six separate files.)
#[test]
fn keras_sharded_manifest_with_string_entries_is_one_model() {
    let dir = keras_dir();
    let src = dir.join("sharded_functional");
    let manifest = json(&dir.join("expected/sharded_functional/model.weights.json.json"));
    let map = manifest["json"]["weight_map"]
        .as_object()
        .expect("weight_map");
    assert!(
        map.values().any(Value::is_string) && map.values().any(Value::is_array),
        "the fixture holds both forms: {map:?}"
    );
    for source in [src.clone(), src.join("model.weights.json")] {
        let tree = Tree::open(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        let mut n = 0;
        for shard in manifest["shards"].as_array().expect("shards") {
            let shard = shard.as_str().expect("name");
            let expected = json(&dir.join(format!("expected/sharded_functional/{shard}.json")));
            n += check_datasets(&tree, "", &expected["datasets"]);
        }
        // Each of them at its key, the embedding's (a string entry) among them.
        assert_eq!(n, 47, "{}", source.display());
    }
    let o = tfmount(&["verify".as_ref(), src.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
