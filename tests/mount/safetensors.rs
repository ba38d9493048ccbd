//! safetensors sources through the kernel: a file and a Hugging Face sharded set mounted, their
//! trees listed, every tensor's `.bin` read against what safetensors' own reader gives
//! (`tests/fixtures/safetensors/expected/`), `.npy` files holding the same bytes after their
//! header, `__metadata__` as `metadata.json`.

use crate::common;

use std::path::Path;

use common::{sha256_hex, Mount};

fn check(mnt: &Path, want: &serde_json::Value) {
    for t in want["tensors"].as_array().expect("tensors") {
        let key = t["key"].as_str().expect("key");
        let bin = std::fs::read(mnt.join("variables").join(format!("{key}.bin")))
            .unwrap_or_else(|e| panic!("{key}.bin: {e}"));
        assert_eq!(
            sha256_hex(&bin),
            t["sha256"].as_str().expect("sha"),
            "{key}"
        );
        // numpy's dtypes get an .npy: its header, then the same bytes.
        let npy = mnt.join("variables").join(format!("{key}.npy"));
        if let Ok(b) = std::fs::read(&npy) {
            let h = common::npy::parse(&b).unwrap_or_else(|e| panic!("{key}.npy: {e}"));
            assert_eq!(&b[h.data_offset..], &bin[..], "{key}.npy");
            assert_eq!(h.shape, common::dims(&t["shape"]), "{key}.npy shape");
        }
    }
}

#[test]
fn a_safetensors_file_mounts() {
    let src = common::fixtures().join("safetensors/all_dtypes.safetensors");
    let m = Mount::start(&src, &[]);
    let mnt = m.path();
    let root = common::dir_names(&mnt);
    for name in ["variables", "metadata.json", "tensors.tsv", "summary.txt"] {
        assert!(root.iter().any(|n| n == name), "{name}: {root:?}");
    }
    assert_eq!(
        common::dir_names(&mnt.join("variables/f8")),
        [
            "e4m3.bin",
            "e4m3.dtype",
            "e4m3.shape",
            "e4m3fnuz.bin",
            "e4m3fnuz.dtype",
            "e4m3fnuz.shape",
            "e5m2.bin",
            "e5m2.dtype",
            "e5m2.shape",
            "e5m2fnuz.bin",
            "e5m2fnuz.dtype",
            "e5m2fnuz.shape",
        ]
    );
    let want = common::load_json("safetensors/expected/all_dtypes.json");
    check(&mnt, &want);
    assert!(std::fs::read(mnt.join("variables/f32/matrix.npy")).is_ok());
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(mnt.join("metadata.json")).expect("metadata"))
            .expect("json");
    assert_eq!(meta, want["metadata"]);
}

#[test]
fn a_sharded_set_mounts_as_one_model() {
    let src = common::fixtures().join("safetensors/sharded");
    let m = Mount::start(&src, &[]);
    let mnt = m.path();
    check(
        &mnt,
        &common::load_json("safetensors/expected/sharded.json"),
    );
    assert!(common::dir_names(&mnt)
        .iter()
        .any(|n| n == "model.safetensors.index.json"));
}
