//! The Orbax format against the checkpoints Orbax and Keras wrote (tests/fixtures/orbax, made
//! by scripts/gen_orbax.py), with what Orbax's own restore gave as the expected values; and the
//! helpers the parsers' tests share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::Digest as _;

use super::*;
use crate::formats::tensors::walk;
use crate::source::local::LocalStore;

pub(crate) fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/orbax")
        .join(rel)
}

pub(crate) fn sha(b: &[u8]) -> String {
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// One leaf Orbax restored: numpy's dtype name, shape, sha256 of its bytes.
pub(crate) type Leaf = (String, Vec<u64>, String);

/// The leaves of `expected/{name}.json` by key (`params/dense/kernel`).
pub(crate) fn expected(name: &str) -> BTreeMap<String, Leaf> {
    let text =
        std::fs::read_to_string(fixture(&format!("expected/{name}.json"))).expect("expected");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["leaves"]
        .as_array()
        .expect("leaves")
        .iter()
        .map(|l| {
            (
                l["key"].as_str().expect("key").to_string(),
                (
                    l["dtype"].as_str().expect("dtype").to_string(),
                    l["shape"]
                        .as_array()
                        .expect("shape")
                        .iter()
                        .map(|d| d.as_u64().expect("dim"))
                        .collect(),
                    l["sha256"].as_str().expect("sha").to_string(),
                ),
            )
        })
        .collect()
}

fn opened(path: &Path) -> OpenedOrbax {
    let store: Arc<dyn Store> = Arc::new(LocalStore);
    let d = Orbax.detect(&*store, path).expect("detected");
    open(store, &d.path).expect("open")
}

/// Every tensor of `o`: key -> (dtype, shape, bytes read in pieces of `piece`).
fn tensors(o: &OpenedOrbax, piece: usize) -> BTreeMap<String, (String, Vec<u64>, Vec<u8>)> {
    let set = o.tensors();
    let mut out = BTreeMap::new();
    walk(&*set, |p, k| {
        let info = set.info(p)?;
        let data = set.open(p)?;
        let mut bytes = Vec::new();
        while (bytes.len() as u64) < data.size() {
            let got = data.read(bytes.len() as u64, piece)?;
            assert!(!got.is_empty());
            bytes.extend_from_slice(&got);
        }
        out.insert(
            String::from_utf8(k.to_vec()).expect("utf-8"),
            (info.dtype.display_name(), info.shape, bytes),
        );
        Ok(true)
    })
    .expect("walk");
    out
}

/// numpy's name of what tfmount serves as `dtype` (tfmount names its dtypes as TensorFlow does).
fn numpy_name(tf: &str) -> &str {
    match tf {
        "float" => "float32",
        "double" => "float64",
        "half" => "float16",
        "string" => "str",
        other => other,
    }
}

/// The checkpoint at `dir` against `expected/{name}.json`, whose keys lack the item's name
/// `item` where it restored one item (a CheckpointManager's `default`).
fn check(dir: &str, name: &str, item: &str) {
    let o = opened(&fixture(dir));
    let want: BTreeMap<String, Leaf> = expected(name)
        .into_iter()
        .map(|(k, v)| (format!("{item}{k}"), v))
        .collect();
    for piece in [usize::MAX, 4096, 7] {
        let got = tensors(&o, piece);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{dir}"
        );
        for (k, (dtype, shape, bytes)) in &got {
            let (wd, ws, wsha) = &want[k];
            assert_eq!(shape, ws, "{dir}: {k}");
            if wd.starts_with("<U") {
                // A string leaf: numpy's bytes are UTF-32; tfmount serves a length and UTF-8.
                assert_eq!(dtype, "string", "{dir}: {k}");
                let text = std::str::from_utf8(&bytes[8..]).expect("utf-8");
                let utf32: Vec<u8> = text
                    .chars()
                    .flat_map(|c| (c as u32).to_le_bytes())
                    .collect();
                assert_eq!(&sha(&utf32), wsha, "{dir}: {k}");
                continue;
            }
            assert_eq!(numpy_name(dtype), wd, "{dir}: {k}");
            assert_eq!(&sha(bytes), wsha, "{dir}: {k}, read in pieces of {piece}");
        }
    }
}

#[test]
fn every_leaf_of_every_layout_is_what_orbax_restored() {
    check("ocdbt/ckpt", "ocdbt", "");
    check("zarr/ckpt", "zarr", "");
    check("manager/1", "manager_1", "default/");
    check("manager/9", "manager_9", "default/");
    check("manager/10", "manager_10", "default/");
    check("manager/10/default", "manager_10", "");
    check("keras/orbax/0", "keras_0", "");
    check("keras/orbax/1", "keras_1", "");
}

#[test]
fn an_item_directory_is_a_checkpoint_of_its_own() {
    let item = opened(&fixture("manager/10/default"));
    assert!(item.files().iter().any(|(p, _)| p == "orbax/_METADATA"));
    let step = opened(&fixture("manager/10"));
    assert!(step
        .files()
        .iter()
        .any(|(p, _)| p == "orbax/_CHECKPOINT_METADATA"));
    assert!(step
        .files()
        .iter()
        .any(|(p, _)| p == "orbax/default/sharding.json"));
}

#[test]
fn steps_of_a_manager_directory_and_the_latest_by_number() {
    let dir = fixture("manager");
    let entries = LocalStore.list(&dir).expect("list");
    let mut steps = Orbax.in_dir(&LocalStore, &dir, &entries);
    steps.sort();
    let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["1", "10", "9"]);
    assert_eq!(Orbax.latest(&steps).as_deref(), Some("10"));
    assert_eq!(step_number("checkpoint_12"), Some(12));
    assert_eq!(step_number("12.orbax-checkpoint-tmp-3"), None);
    assert_eq!(step_number("default"), None);
}

#[test]
fn keras_checkpoints_name_their_variables_and_show_the_config() {
    let o = opened(&fixture("keras/orbax/1"));
    assert!(o.has_names());
    assert!(!opened(&fixture("ocdbt/ckpt")).has_names());
    assert!(!opened(&fixture("manager/10")).has_names());
    let names = o.names();
    assert!(names.contains(&(
        "sequential/hidden/kernel".into(),
        "pytree/trainable_variables/sequential/hidden/kernel".into()
    )));
    assert_eq!(names.len(), 4, "{names:?}");
    let config = o
        .files()
        .into_iter()
        .find(|(p, _)| p == "config.json")
        .expect("config.json");
    let v: serde_json::Value = serde_json::from_slice(&config.1).expect("json");
    assert_eq!(v["class_name"], "Sequential");
    // The weights are the Keras variables Keras's own .weights.h5 of the model holds.
    let want: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture("expected/keras_model_weights.json")).expect("read"),
    )
    .expect("json");
    let got = tensors(&o, usize::MAX);
    for w in want["weights"].as_array().expect("weights") {
        let path = w["path"].as_str().expect("path");
        let key = &names.iter().find(|(n, _)| n == path).expect(path).1;
        assert_eq!(
            sha(&got[key].2),
            w["sha256"].as_str().expect("sha"),
            "{path}"
        );
    }
}

#[test]
fn sharding_keys_are_decoded() {
    assert_eq!(
        base64_decode("cGFyYW1zLmxheWVycy4wLnc=").as_deref(),
        Some(&b"params.layers.0.w"[..])
    );
    assert_eq!(base64_decode("YQ").as_deref(), Some(&b"a"[..]));
    assert_eq!(base64_decode("!!!!"), None);
    assert_eq!(base64_decode("Y"), None);
}

#[test]
fn data_file_paths_never_leave_the_checkpoint() {
    let files = set::StoreFiles::new(Arc::new(LocalStore), fixture("ocdbt/ckpt"));
    for bad in [
        &b"../manager/10/_METADATA"[..],
        b"d/../../zarr/ckpt/_METADATA",
        b"/etc/passwd",
        b"d//x",
        b"./d",
        b"",
        b"\xff",
    ] {
        assert!(
            ocdbt::Files::read(&files, bad, 0, 1).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A value claimed past its file's end is refused before anything is allocated for it.
    assert!(ocdbt::Files::read(&files, b"_METADATA", 0, 1 << 40).is_err());
    assert!(ocdbt::Files::read(&files, b"_METADATA", 0, 8).is_ok());
}
