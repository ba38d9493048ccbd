//! Orbax checkpoints through the kernel: a `CheckpointManager` directory followed live as Orbax
//! saves into it (a step written under its `*.orbax-checkpoint-tmp-*` name, then renamed:
//! Orbax's atomic save), `latest` the highest step by number; and a Keras `OrbaxCheckpoint`
//! step, whose `weights.safetensors` holds the model's variables only, named and valued as
//! Keras's own `.weights.h5` of the same model holds them (`scripts/gen_orbax.py`).
//!
//! The values of every layout are checked against Orbax's restore in the format's unit tests
//! (`src/formats/orbax/tests.rs`) and by the conformance suite (`tests/core/conformance.rs`).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{latest, sha256_hex, Mount};

/// How soon a change must show (docs/live.md's promise).
const WITHIN: Duration = Duration::from_secs(2);

fn orbax(rel: &str) -> std::path::PathBuf {
    common::fixtures().join("orbax").join(rel)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let p = e.path();
        if p.is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

/// sha256 of each leaf Orbax restored from a step, by its key below the item `default/`.
fn expected(name: &str) -> BTreeMap<String, String> {
    let v = common::load_json(&format!("orbax/expected/{name}.json"));
    v["leaves"]
        .as_array()
        .expect("leaves")
        .iter()
        .map(|l| {
            (
                format!("default/{}", l["key"].as_str().expect("key")),
                l["sha256"].as_str().expect("sha").to_string(),
            )
        })
        .collect()
}

fn check_step(mnt: &Path, step: &str, name: &str) {
    for (key, sha) in expected(name) {
        let b = std::fs::read(mnt.join(step).join("variables").join(format!("{key}.bin")))
            .unwrap_or_else(|e| panic!("{step}/{key}: {e}"));
        assert_eq!(sha256_hex(&b), sha, "{step}/{key}");
    }
}

#[test]
fn a_checkpoint_manager_directory_is_followed_as_orbax_saves() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("checkpoints");
    copy_tree(&orbax("manager/1"), &dir.join("1"));
    copy_tree(&orbax("manager/9"), &dir.join("9"));
    let m = Mount::start(&dir, &[]);
    let mnt = m.path();
    assert_eq!(common::dir_names(&mnt), ["1", "9", "latest"]);
    assert_eq!(latest(&mnt), "9");
    check_step(&mnt, "latest", "manager_9");

    // Step 10 being written: under Orbax's temporary name, not shown.
    let partial = dir.join("10.orbax-checkpoint-tmp-1795938040");
    copy_tree(&orbax("manager/10"), &partial);
    std::thread::sleep(WITHIN);
    assert_eq!(common::dir_names(&mnt), ["1", "9", "latest"]);
    assert_eq!(latest(&mnt), "9");
    // Finalised (renamed): shown, and `latest` by number, 10 after 9.
    std::fs::rename(&partial, dir.join("10")).expect("rename");
    common::within(WITHIN, "step 10 appears and is latest", || {
        common::dir_names(&mnt) == ["1", "10", "9", "latest"] && latest(&mnt) == "10"
    });
    check_step(&mnt, "latest", "manager_10");
    check_step(&mnt, "1", "manager_1");
    // The oldest step deleted (max_to_keep): gone.
    std::fs::remove_dir_all(dir.join("1")).expect("rm");
    common::within(WITHIN, "step 1 goes", || {
        common::dir_names(&mnt) == ["10", "9", "latest"]
    });
    assert!(
        std::fs::read_to_string(mnt.join("10/orbax/_CHECKPOINT_METADATA"))
            .expect("metadata")
            .contains("item_handlers")
    );
}

/// A safetensors file's tensors: name -> (dtype, shape, bytes).
fn safetensors(b: &[u8]) -> BTreeMap<String, (String, Vec<u64>, Vec<u8>)> {
    let n = u64::from_le_bytes(b[..8].try_into().expect("len")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).expect("header");
    let data = &b[8 + n..];
    header
        .as_object()
        .expect("object")
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let off = common::dims(&v["data_offsets"]);
            (
                k.clone(),
                (
                    v["dtype"].as_str().expect("dtype").to_string(),
                    common::dims(&v["shape"]),
                    data[off[0] as usize..off[1] as usize].to_vec(),
                ),
            )
        })
        .collect()
}

#[test]
fn a_keras_orbax_checkpoint_has_the_weights_of_its_weights_h5() {
    let m = Mount::start(&orbax("keras/orbax"), &[]);
    let mnt = m.path();
    assert_eq!(common::dir_names(&mnt), ["0", "1", "latest"]);
    assert_eq!(latest(&mnt), "1");
    // Step 1 is what model.weights.h5 was saved from (scripts/gen_orbax.py).
    let want = common::load_json("orbax/expected/keras_model_weights.json");
    let got = safetensors(&std::fs::read(mnt.join("latest/weights.safetensors")).expect("read"));
    let weights = want["weights"].as_array().expect("weights");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        {
            let mut w: Vec<&str> = weights
                .iter()
                .map(|w| w["path"].as_str().expect("path"))
                .collect();
            w.sort();
            w
        },
        "weights.safetensors holds the model's variables, by variable.path"
    );
    for w in weights {
        let (dtype, shape, bytes) = &got[w["path"].as_str().expect("path")];
        assert_eq!(dtype, "F32");
        assert_eq!(shape, &common::dims(&w["shape"]));
        assert_eq!(sha256_hex(bytes), w["sha256"].as_str().expect("sha"));
    }
    // The names link to the tensors, and the model's config is there.
    let link = std::fs::read_link(mnt.join("latest/names/sequential/hidden/kernel.bin"))
        .expect("names/ link");
    assert!(
        link.to_string_lossy()
            .ends_with("variables/pytree/trainable_variables/sequential/hidden/kernel.bin"),
        "{}",
        link.display()
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(mnt.join("latest/config.json")).expect("config"))
            .expect("json");
    assert_eq!(config["class_name"], "Sequential");
    // Optimizer and metrics state are not weights, and summary.txt says what they are.
    let summary = std::fs::read_to_string(mnt.join("latest/summary.txt")).expect("summary");
    // The tensors of a role: the column after its name's words.
    let role = |name: &str| {
        let words = name.split_whitespace().count();
        summary
            .lines()
            .find(|l| l.split_whitespace().take(words).eq(name.split_whitespace()))
            .and_then(|l| l.split_whitespace().nth(words))
            .unwrap_or("")
            .to_string()
    };
    // The four variables, and the config string.
    assert_eq!(role("model"), "5", "{summary}");
    assert_eq!(role("optimizer slots"), "8", "{summary}");
    assert_eq!(role("optimizer other"), "2", "{summary}");
    assert_eq!(role("bookkeeping"), "2", "{summary}");
}
