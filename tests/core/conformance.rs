//! One conformance suite over [`FORMATS`]: every row's fixtures (the table [`FIXTURES`], files
//! written by each format's real writer) go through the same checks, so a new format gets them
//! all by adding its fixtures here (and a row to [`Expect`] if its expected values are recorded
//! in a new way):
//!
//! 1. every tensor's `variables/KEY.bin` is what the writer's own reader reads (the fixtures'
//!    recorded values), and `variables/` serves no other tensor;
//! 2. the views: `tensors.tsv` lists every tensor (by path), `summary.txt` counts them,
//!    `text/` and `stats/` of a float32 tensor agree with its values, `model.safetensors`
//!    holds the tensors it holds with their recorded bytes;
//! 3. `tfmount verify` passes the pristine fixture; a copy with one byte of a tensor's stored
//!    data flipped is found as the fixture's [`Guard`] says (reported by `verify`, failing the
//!    read, or served as stored where the format keeps no checksum of it), no other tensor
//!    served wrong;
//! 4. `tfmount diff` of a fixture with itself finds nothing; `diff --exact` of it with the
//!    damaged copy does not pass;
//! 5. a hostile sweep ([`CUTS`] truncations and [`FLIPS`] single-bit flips per fixture, seeded):
//!    no panic; a tensor read from a truncated copy is its pristine bytes or an error; from a
//!    flipped copy the same where the fixture's [`Guard`] is [`Guard::Crc`] (formats without a
//!    checksum over their metadata and data may serve other bytes: only no panic there).
//! 6. `tfmount export` of every fixture to a TF V2 checkpoint, restored tensor by tensor by
//!    TensorFlow's `RestoreV2` (any key bytes) with the bytes the writer's reader recorded and
//!    listed by `tf.train.load_checkpoint` with the same keys and dtypes; to `.safetensors`, read
//!    by `safetensors` with the same shapes and bytes (what it cannot hold dropped by name); the
//!    exports `diff --exact` with the fixture: nothing changed (but what safetensors cannot hold).
//!
//! The core is driven without a kernel (`probe` + `Fs`); `verify` and `diff` run the built
//! binary. The per-format tests (`tests/{core,v1,keras,tfjs,tflite}.rs`, `tests/*_hostile.rs`)
//! go deeper; this suite is the floor every format stands on.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::hostile::{in_input, quiet_panics_in_inputs, read_to_size, scratch, Damage};
use common::{lookup_path, sha256_hex as sha, show, stem_path, Rng};
use serde_json::Value;
use tfmount::formats::FORMATS;
use tfmount::fs::{Fs, Kind, Options};
use tfmount::probe::Probed;

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/// Where a fixture's expected tensor values come from: what the format's writer's own reader
/// made of the files when they were written (or, for TFLite, asked live).
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `tests/fixtures/<json>` from `scripts/gen_fixtures.py` (TensorFlow's checkpoint reader):
    /// `tensors[]` (key, `npy_path`, sha256 of the served layout) and `unreadable_entries[]`
    /// (variants: served as stored, `stored.sha256`).
    V2(&'static str),
    /// `tests/fixtures/<json>` from `scripts/gen_v1_fixtures.py` (TensorFlow's reader or
    /// Restore op): `tensors[]` (key, dtype, shape, sha256).
    V1(&'static str),
    /// `tests/fixtures/<json>` from `scripts/gen_keras_fixtures.py` (h5py): the datasets at
    /// JSON pointer `.1` (path, dtype, shape, sha256; a dataset without a dtype is not served).
    Keras(&'static str, &'static str),
    /// Several of those (a sharded model's shards, each recorded on its own), their datasets
    /// together.
    KerasShards(&'static [&'static str]),
    /// The model directory's `expected.npz` and `expected_strings.json` from
    /// `scripts/gen_tfjs.py` (`tensorflowjs.read_weights`).
    Tfjs,
    /// The named `.npz` in the fixture's directory, from `scripts/gen_tfjs_manifests.py`
    /// (`tensorflowjs.read_weights` of a bare weights manifest).
    TfjsNpz(&'static str),
    /// `tests/fixtures/tflite/expected/index.json` from `scripts/gen_tflite_index.py`
    /// (TensorFlow's `tf.lite.Interpreter.get_tensor`): subgraph 0's tensors with data (name,
    /// dtype, shape, sha256).
    Tflite,
    /// `tests/fixtures/orbax/expected/<name>.json` from `scripts/gen_orbax.py` (Orbax's own
    /// restore): `leaves[]` (key, numpy dtype, shape, sha256), the keys prefixed with the item's
    /// name (`default/`) where the restore named none. String leaves (numpy `<U`) are served
    /// as tfmount's string layout; they are compared by their text.
    Orbax(&'static str, &'static str),
    /// `tests/fixtures/safetensors/expected/<json>` from `scripts/gen_safetensors.py`
    /// (`safetensors`' own reader): `tensors[]` (key, safetensors dtype, shape, sha256).
    Safetensors(&'static str),
}

/// What guards a tensor's stored bytes in a fixture's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// A checksum over every stored byte (V2: index block CRCs and each tensor's CRC-32C; V1:
    /// each table block's CRC-32C): damage is reported by `verify` and fails the read; no read
    /// of a damaged file serves other bytes than the pristine ones.
    Crc,
    /// One checksum over a whole member (a `.keras` zip member's CRC-32): `verify` reports the
    /// damage, and a read of any tensor in the member checks it and fails.
    Member,
    /// [`Guard::Crc`] over every file but those whose names end as listed (Orbax's plain JSON:
    /// `_strings.json`, where Keras's model config is; zarr v3 chunks and shard indexes and the
    /// OCDBT nodes all carry a CRC-32C).
    CrcBut(&'static [&'static str]),
    /// Nothing to check against (HDF5 contiguous datasets, TF.js shards, TFLite buffers, zarr
    /// v2 chunks compressed without a checksum, stored raw where zstd could not shrink them):
    /// `verify` passes, the read serves the stored bytes, damaged ones included.
    None,
}

impl Guard {
    /// Whether every stored byte of `file` is under a checksum.
    fn checks(self, file: &str) -> bool {
        match self {
            Guard::Crc => true,
            Guard::CrcBut(plain) => !plain.iter().any(|p| file.ends_with(p)),
            Guard::Member | Guard::None => false,
        }
    }

    /// A checksum over the stored bytes of the tensors (all, or all but plain metadata files).
    fn crc(self) -> bool {
        matches!(self, Guard::Crc | Guard::CrcBut(_))
    }
}

/// One fixture: files in `tests/fixtures/<dir>` written by the format's real writer.
struct Fixture {
    /// The format's [`tfmount::formats::Format::name`].
    format: &'static str,
    dir: &'static str,
    /// What is opened, relative to `dir` (`""`: the directory).
    source: &'static str,
    /// The files it is made of, relative to `dir` (`P*`: every file whose name starts with P;
    /// `**`: every file below `dir`).
    files: &'static [&'static str],
    expect: Expect,
    guard: Guard,
}

impl Fixture {
    fn name(&self) -> String {
        format!(
            "{} {}",
            self.format,
            Path::new(self.dir).join(self.source).display()
        )
    }
}

static FIXTURES: &[Fixture] = &[
    Fixture {
        format: "V2 checkpoint",
        dir: "tf2_keras",
        source: "ckpt-1",
        files: &["ckpt-1.index", "ckpt-1.data-*"],
        expect: Expect::V2("expected/tf2_keras.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V2 checkpoint",
        dir: "all_dtypes",
        source: "ckpt",
        files: &["ckpt.index", "ckpt.data-*"],
        expect: Expect::V2("expected/all_dtypes.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V2 checkpoint",
        dir: "partitioned",
        source: "model.ckpt",
        files: &["model.ckpt.index", "model.ckpt.data-*"],
        expect: Expect::V2("expected/partitioned.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V2 checkpoint",
        dir: "sharded",
        source: "model.ckpt",
        files: &["model.ckpt.index", "model.ckpt.data-*"],
        expect: Expect::V2("expected/sharded.json"),
        guard: Guard::Crc,
    },
    Fixture {
        // The variables of a TF Hub TF1 module (its graphs: tests/core/graphs.rs).
        format: "V2 checkpoint",
        dir: "graphs/tfhub_tf1_module/variables",
        source: "variables",
        files: &["variables.index", "variables.data-*"],
        expect: Expect::V2("graphs/expected/tfhub_tf1_module.variables.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V1 checkpoint",
        dir: "v1/single",
        source: "model.ckpt-2",
        files: &["model.ckpt-2"],
        expect: Expect::V1("v1/expected/single.model.ckpt-2.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V1 checkpoint",
        dir: "v1/dtypes",
        source: "model.ckpt",
        files: &["model.ckpt"],
        expect: Expect::V1("v1/expected/dtypes.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "V1 checkpoint",
        dir: "v1/sharded",
        source: "model.ckpt-?????-of-00003",
        files: &["model.ckpt-0000*"],
        expect: Expect::V1("v1/expected/sharded.json"),
        guard: Guard::Crc,
    },
    Fixture {
        format: "Keras file",
        dir: "keras",
        source: "model.weights.h5",
        files: &["model.weights.h5"],
        expect: Expect::Keras("keras/expected/model.weights.h5.json", "/datasets"),
        guard: Guard::None,
    },
    Fixture {
        format: "Keras file",
        dir: "keras",
        source: "legacy_model.h5",
        files: &["legacy_model.h5"],
        expect: Expect::Keras("keras/expected/legacy_model.h5.json", "/datasets"),
        guard: Guard::None,
    },
    Fixture {
        format: "Keras file",
        dir: "keras",
        source: "model.keras",
        files: &["model.keras"],
        expect: Expect::Keras(
            "keras/expected/model.keras.json",
            "/model.weights.h5/datasets",
        ),
        guard: Guard::Member,
    },
    Fixture {
        format: "Keras file",
        dir: "keras/sharded",
        source: "",
        files: &["model.weights.json", "model_*"],
        expect: Expect::KerasShards(&[
            "keras/expected/sharded/model_00000.weights.h5.json",
            "keras/expected/sharded/model_00001.weights.h5.json",
            "keras/expected/sharded/model_00002.weights.h5.json",
        ]),
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/manifest",
        source: "",
        files: &["weights_manifest.json", "group*"],
        expect: Expect::TfjsNpz("expected.npz"),
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/manifests",
        source: "tiny-weights_manifest.json",
        files: &["tiny-*"],
        expect: Expect::TfjsNpz("expected_tiny.npz"),
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/manifests",
        source: "landmarks-weights_manifest.json",
        files: &["landmarks-*"],
        expect: Expect::TfjsNpz("expected_landmarks.npz"),
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/layers",
        source: "",
        files: &["model.json", "group1-shard*"],
        expect: Expect::Tfjs,
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/layers_sharded",
        source: "",
        files: &["model.json", "group1-shard*"],
        expect: Expect::Tfjs,
        guard: Guard::None,
    },
    Fixture {
        format: "TensorFlow.js model",
        dir: "tfjs/graph_uint8",
        source: "",
        files: &["model.json", "group1-shard*"],
        expect: Expect::Tfjs,
        guard: Guard::None,
    },
    Fixture {
        format: "TFLite model",
        dir: "tflite",
        source: "float.tflite",
        files: &["float.tflite"],
        expect: Expect::Tflite,
        guard: Guard::None,
    },
    Fixture {
        format: "TFLite model",
        dir: "tflite",
        source: "dynamic_int8.tflite",
        files: &["dynamic_int8.tflite"],
        expect: Expect::Tflite,
        guard: Guard::None,
    },
    Fixture {
        format: "TFLite model",
        dir: "tflite",
        source: "with_metadata.tflite",
        files: &["with_metadata.tflite"],
        expect: Expect::Tflite,
        guard: Guard::None,
    },
    Fixture {
        format: "Orbax checkpoint",
        dir: "orbax/ocdbt/ckpt",
        source: "",
        files: &["**"],
        expect: Expect::Orbax("ocdbt", ""),
        guard: Guard::None,
    },
    Fixture {
        format: "Orbax checkpoint",
        dir: "orbax/zarr/ckpt",
        source: "",
        files: &["**"],
        expect: Expect::Orbax("zarr", ""),
        guard: Guard::None,
    },
    Fixture {
        format: "Orbax checkpoint",
        dir: "orbax/manager/10",
        source: "",
        files: &["**"],
        expect: Expect::Orbax("manager_10", "default/"),
        guard: Guard::None,
    },
    Fixture {
        format: "Orbax checkpoint",
        dir: "orbax/keras/orbax/1",
        source: "",
        files: &["**"],
        expect: Expect::Orbax("keras_1", ""),
        guard: Guard::CrcBut(&[
            "_strings.json",
            "_METADATA",
            "_CHECKPOINT_METADATA",
            "_sharding",
            "array_metadatas/process_0",
            "commit_success.txt",
        ]),
    },
    Fixture {
        format: "safetensors checkpoint",
        dir: "safetensors",
        source: "all_dtypes.safetensors",
        files: &["all_dtypes.safetensors"],
        expect: Expect::Safetensors("all_dtypes.json"),
        guard: Guard::None,
    },
    Fixture {
        format: "safetensors checkpoint",
        dir: "safetensors/sharded",
        source: "",
        files: &["**"],
        expect: Expect::Safetensors("sharded.json"),
        guard: Guard::None,
    },
];

/// Truncations and single-bit flips per fixture in the hostile sweep.
const CUTS: usize = 80;
const FLIPS: usize = 120;

// ---------------------------------------------------------------------------------------------
// Expected values
// ---------------------------------------------------------------------------------------------

/// One tensor as the writer's reader recorded it.
#[derive(Debug, Clone)]
struct Want {
    key: Vec<u8>,
    /// Its path below `variables/` (escaped), without `.bin`.
    stem: Vec<u8>,
    /// sha256 of its served bytes.
    sha: String,
    dtype: String,
    shape: Vec<u64>,
}

impl Want {
    fn bin(&self) -> Vec<u8> {
        [&b"variables/"[..], &self.stem, b".bin"].concat()
    }

    fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    fn show(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

/// The path below `variables/` of a key (its `/`-separated components escaped).
fn stem_of(key: &[u8]) -> Vec<u8> {
    common::name_path(key)
}

fn v2_wants(rel: &str) -> Vec<Want> {
    let exp = common::load_json(rel);
    let mut out = Vec::new();
    for rec in exp["tensors"].as_array().expect("tensors") {
        out.push(Want {
            key: common::rec_key(rec),
            stem: stem_path(rec),
            sha: rec["sha256"].as_str().expect("sha256").to_string(),
            dtype: rec["dtype"].as_str().expect("dtype").to_string(),
            shape: common::dims(&rec["shape"]),
        });
    }
    for rec in exp["unreadable_entries"].as_array().into_iter().flatten() {
        out.push(Want {
            key: common::rec_key(rec),
            stem: stem_path(rec),
            sha: rec["stored"]["sha256"].as_str().expect("sha").to_string(),
            dtype: rec["dtype"].as_str().expect("dtype").to_string(),
            shape: common::dims(&rec["shape"]),
        });
    }
    out
}

fn v1_wants(rel: &str) -> Vec<Want> {
    let exp = common::load_json(rel);
    exp["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|rec| {
            let key = rec["key"].as_str().expect("key").as_bytes().to_vec();
            Want {
                stem: stem_of(&key),
                key,
                sha: rec["sha256"].as_str().expect("sha256").to_string(),
                dtype: rec["dtype"].as_str().expect("dtype").to_string(),
                shape: common::dims(&rec["shape"]),
            }
        })
        .collect()
}

fn keras_wants(rel: &str, pointer: &str) -> Vec<Want> {
    let exp = common::load_json(rel);
    let datasets = exp
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{rel}: no {pointer}"));
    datasets
        .as_array()
        .expect("datasets")
        .iter()
        // A dataset h5py gives no dtype (opaque bfloat16 without a dtype attribute) is not
        // served.
        .filter(|d| d["dtype"].is_string())
        .map(|d| {
            let path = d["path"].as_str().expect("path");
            let key = path
                .strip_prefix('/')
                .expect("absolute")
                .as_bytes()
                .to_vec();
            Want {
                stem: stem_of(&key),
                key,
                sha: d["sha256"].as_str().expect("sha256").to_string(),
                dtype: d["dtype"].as_str().expect("dtype").to_string(),
                shape: common::dims(&d["shape"]),
            }
        })
        .collect()
}

/// The arrays of an `.npz` (a zip of stored `.npy` members): (name, descr, shape, data).
fn npz(path: &Path) -> Vec<(String, String, Vec<u64>, Vec<u8>)> {
    use tfmount::parse::zip;
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for m in zip::members(&bytes[..]).expect("zip") {
        let npy = zip::read_member(&bytes[..], &m, 1 << 24).expect("member");
        let h = common::npy::parse(&npy).expect("npy header");
        let name = m.name.strip_suffix(".npy").expect(".npy").to_string();
        out.push((name, h.descr, h.shape, npy[h.data_offset..].to_vec()));
    }
    out
}

fn tfjs_wants(dir: &Path) -> Vec<Want> {
    tfjs_wants_from(dir, "expected.npz")
}

fn tfjs_wants_from(dir: &Path, npz_name: &str) -> Vec<Want> {
    let mut out = Vec::new();
    for (name, descr, shape, data) in npz(&dir.join(npz_name)) {
        let dtype = match descr.as_str() {
            "<f4" => "float32",
            "<i4" => "int32",
            "|b1" => "bool",
            "<c8" => "complex64",
            d => panic!("{}: unexpected descr {d}", dir.display()),
        };
        out.push(Want {
            stem: stem_of(name.as_bytes()),
            key: name.into_bytes(),
            sha: sha(&data),
            dtype: dtype.into(),
            shape,
        });
    }
    let strings = dir.join("expected_strings.json");
    if strings.exists() {
        let text = std::fs::read_to_string(&strings).expect("strings");
        let v: Value = serde_json::from_str(&text).expect("json");
        for (name, items) in v.as_object().expect("object") {
            // tfmount's string layout: an 8-byte length and the bytes, each.
            let items = items.as_array().expect("list");
            let mut data = Vec::new();
            for s in items {
                let b = s.as_str().expect("string").as_bytes();
                data.extend_from_slice(&(b.len() as u64).to_le_bytes());
                data.extend_from_slice(b);
            }
            out.push(Want {
                stem: stem_of(name.as_bytes()),
                key: name.as_bytes().to_vec(),
                sha: sha(&data),
                dtype: "string".into(),
                shape: vec![items.len() as u64],
            });
        }
    }
    out
}

fn tflite_wants(file: &str) -> Vec<Want> {
    let exp = common::load_json("tflite/expected/index.json");
    exp["models"][file]
        .as_array()
        .unwrap_or_else(|| panic!("tflite/expected/index.json: no {file}"))
        .iter()
        .map(|t| {
            let key = t["name"].as_str().expect("name").as_bytes().to_vec();
            Want {
                stem: stem_of(&key),
                key,
                sha: t["sha256"].as_str().expect("sha256").to_string(),
                dtype: t["dtype"].as_str().expect("dtype").to_string(),
                shape: common::dims(&t["shape"]),
            }
        })
        .collect()
}

fn orbax_wants(name: &str, item: &str) -> Vec<Want> {
    let exp = common::load_json(&format!("orbax/expected/{name}.json"));
    exp["leaves"]
        .as_array()
        .expect("leaves")
        .iter()
        .map(|l| {
            let key = format!("{item}{}", l["key"].as_str().expect("key")).into_bytes();
            let dtype = l["dtype"].as_str().expect("dtype");
            let sha = match dtype.strip_prefix("<U") {
                // A string leaf: its text is in _strings.json (the sha256 Orbax's restore gave
                // is of numpy's UTF-32); tfmount's layout is an 8-byte length and the bytes.
                Some(_) => {
                    let strings = common::load_json(&format!(
                        "orbax/{}/_strings.json",
                        orbax_item_dir(name, &key)
                    ));
                    let leaf = l["key"].as_str().expect("key");
                    let field = leaf.rsplit('/').next().expect("name");
                    let text = strings[field].as_str().expect("string");
                    let utf32: Vec<u8> = text
                        .chars()
                        .flat_map(|c| (c as u32).to_le_bytes())
                        .collect();
                    assert_eq!(sha(&utf32), l["sha256"].as_str().expect("sha"), "{leaf}");
                    let mut b = (text.len() as u64).to_le_bytes().to_vec();
                    b.extend_from_slice(text.as_bytes());
                    sha(&b)
                }
                None => l["sha256"].as_str().expect("sha256").to_string(),
            };
            Want {
                stem: stem_of(&key),
                key,
                sha,
                dtype: if dtype.starts_with("<U") {
                    "string"
                } else {
                    dtype
                }
                .into(),
                shape: common::dims(&l["shape"]),
            }
        })
        .collect()
}

/// The item directory of a string leaf `key` of expected file `name` (the Keras fixtures').
fn orbax_item_dir(name: &str, key: &[u8]) -> String {
    let step = name.rsplit('_').next().expect("step");
    let item = String::from_utf8_lossy(key);
    let item = item.split('/').next().expect("item");
    format!("keras/orbax/{step}/{item}")
}

fn safetensors_wants(rel: &str) -> Vec<Want> {
    let exp = common::load_json(&format!("safetensors/expected/{rel}"));
    exp["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| {
            let key = t["key"].as_str().expect("key").as_bytes().to_vec();
            // TensorFlow's name for the safetensors dtype (the same bytes).
            let dtype = common::safetensors_tf_name(t["dtype"].as_str().expect("dtype"));
            Want {
                stem: stem_of(&key),
                key,
                sha: t["sha256"].as_str().expect("sha256").to_string(),
                dtype: dtype.to_string(),
                shape: common::dims(&t["shape"]),
            }
        })
        .collect()
}

/// The fixture's expected tensors.
fn wants(fx: &Fixture) -> Vec<Want> {
    let w = match fx.expect {
        Expect::V2(rel) => v2_wants(rel),
        Expect::V1(rel) => v1_wants(rel),
        Expect::Keras(rel, pointer) => keras_wants(rel, pointer),
        Expect::KerasShards(rels) => rels
            .iter()
            .flat_map(|rel| keras_wants(rel, "/datasets"))
            .collect(),
        Expect::Tfjs => tfjs_wants(&common::fixtures().join(fx.dir)),
        Expect::TfjsNpz(npz) => tfjs_wants_from(&common::fixtures().join(fx.dir), npz),
        Expect::Tflite => tflite_wants(fx.source),
        Expect::Orbax(name, item) => orbax_wants(name, item),
        Expect::Safetensors(rel) => safetensors_wants(rel),
    };
    assert!(!w.is_empty(), "no expected tensors recorded");
    w
}

// ---------------------------------------------------------------------------------------------
// Driving the core
// ---------------------------------------------------------------------------------------------

/// The files a fixture is made of, relative to its directory, sorted.
fn files_of(fx: &Fixture) -> Vec<String> {
    let dir = common::fixtures().join(fx.dir);
    let names: Vec<String> = common::dir_names(&dir);
    let mut out = BTreeSet::new();
    if fx.files == ["**"] {
        fn walk(root: &Path, rel: &Path, out: &mut BTreeSet<String>) {
            for n in common::dir_names(&root.join(rel)) {
                let r = rel.join(&n);
                if root.join(&r).is_dir() {
                    walk(root, &r, out);
                } else {
                    out.insert(r.to_string_lossy().into_owned());
                }
            }
        }
        walk(&dir, Path::new(""), &mut out);
        return out.into_iter().collect();
    }
    for pat in fx.files {
        let hits: Vec<&String> = match pat.strip_suffix('*') {
            Some(p) => names.iter().filter(|n| n.starts_with(p)).collect(),
            None => names.iter().filter(|n| n == pat).collect(),
        };
        assert!(!hits.is_empty(), "{}: no file {pat}", dir.display());
        out.extend(hits.into_iter().cloned());
    }
    out.into_iter().collect()
}

/// A scratch copy of a fixture's files: (directory, the source in it, the files' bytes).
struct Copy {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    source: PathBuf,
    files: Vec<(String, Vec<u8>)>,
}

fn copy(fx: &Fixture) -> Copy {
    let tmp = scratch();
    let dir = tmp.path().join("fx");
    std::fs::create_dir(&dir).expect("mkdir");
    let from = common::fixtures().join(fx.dir);
    let mut files = Vec::new();
    for f in files_of(fx) {
        let b = std::fs::read(from.join(&f)).expect("read fixture");
        if let Some(parent) = dir.join(&f).parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(dir.join(&f), &b).expect("write copy");
        files.push((f, b));
    }
    Copy {
        source: dir.join(fx.source),
        dir,
        _tmp: tmp,
        files,
    }
}

fn options() -> Options {
    Options {
        live: false,
        ..Options::default()
    }
}

fn open(source: &Path) -> Result<Fs, String> {
    let probed = tfmount::probe::probe(source).map_err(|e| format!("probe: {e}"))?;
    Fs::new(&probed, &options()).map_err(|e| format!("open: {e}"))
}

/// The whole file at `path`, or what went wrong.
fn cat(fs: &Fs, path: &[u8]) -> Result<Vec<u8>, String> {
    let a = lookup_path(fs, path).map_err(|e| format!("lookup: {e}"))?;
    read_to_size(fs, a.ino)
}

fn cat_ok(fs: &Fs, path: &[u8]) -> Vec<u8> {
    cat(fs, path).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(path)))
}

/// Every `.bin` below `variables/`, as paths from the root.
fn served_bins(fs: &Fs) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let vars = lookup_path(fs, b"variables").expect("variables/");
    let mut todo = vec![(vars.ino, b"variables".to_vec())];
    while let Some((d, at)) = todo.pop() {
        let mut entries = Vec::new();
        fs.readdir(d, 0, |e| {
            entries.push(e);
            false
        })
        .expect("readdir");
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = [&at[..], b"/", &e.name].concat();
            match e.kind {
                Kind::Dir => todo.push((e.ino, p)),
                Kind::File if p.ends_with(b".bin") => {
                    out.insert(p);
                }
                _ => {}
            }
        }
    }
    out
}

/// Runs `check` on every fixture (panics caught), prints one line each, and fails naming every
/// fixture that failed (its format and files) with what failed.
fn each_fixture(what: &str, check: impl Fn(&Fixture, &[Want]) -> String) {
    let t0 = Instant::now();
    let mut failures = Vec::new();
    let mut ran = 0;
    for fx in FIXTURES {
        let r = catch_unwind(AssertUnwindSafe(|| check(fx, &wants(fx))));
        match r {
            Ok(summary) => {
                ran += 1;
                eprintln!("{what}: {}: ok, {summary}", fx.name());
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                failures.push(format!("{}: {msg}", fx.name()));
            }
        }
    }
    eprintln!(
        "{what}: {ran} of {} fixtures checked in {:.1} s",
        FIXTURES.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{what}: {} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 0. Every format has fixtures
// ---------------------------------------------------------------------------------------------

/// The other suites' list of these fixtures is this table's.
#[test]
fn the_shared_list_of_sources_is_this_table() {
    let here: Vec<(&str, &str)> = FIXTURES.iter().map(|f| (f.dir, f.source)).collect();
    assert_eq!(here, common::CONFORMANCE_SOURCES);
}

#[test]
fn every_format_has_fixtures_and_detects_them() {
    for f in FORMATS {
        assert!(
            FIXTURES.iter().any(|x| x.format == f.name()),
            "the format {:?} has no fixture in tests/core/conformance.rs FIXTURES: add the files its \
             writer wrote and where their expected values are",
            f.name()
        );
    }
    for fx in FIXTURES {
        assert!(
            FORMATS.iter().any(|f| f.name() == fx.format),
            "{}: no format named {:?} in FORMATS",
            fx.name(),
            fx.format
        );
        let path = common::fixtures().join(fx.dir).join(fx.source);
        match tfmount::probe::probe(&path) {
            Ok(Probed::Checkpoint(d)) => assert_eq!(
                d.format.name(),
                fx.format,
                "{}: detected as another format",
                fx.name()
            ),
            other => panic!("{}: not one checkpoint: {other:?}", fx.name()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Every tensor
// ---------------------------------------------------------------------------------------------

#[test]
fn every_tensor_is_what_its_writer_reads() {
    each_fixture("tensors", |fx, wants| {
        let fs = open(&common::fixtures().join(fx.dir).join(fx.source)).expect("opens");
        let mut bad = Vec::new();
        for w in wants {
            match cat(&fs, &w.bin()) {
                Ok(b) if sha(&b) == w.sha => {}
                Ok(b) => bad.push(format!("{}: {} bytes, not as recorded", w.show(), b.len())),
                Err(e) => bad.push(format!("{}: {e}", w.show())),
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("; "));
        let want_bins: BTreeSet<Vec<u8>> = wants.iter().map(Want::bin).collect();
        let served = served_bins(&fs);
        let extra: Vec<String> = served.difference(&want_bins).map(|p| show(p)).collect();
        let missing: Vec<String> = want_bins.difference(&served).map(|p| show(p)).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "variables/ lists {extra:?} not recorded, not {missing:?}"
        );
        format!("{} tensors", wants.len())
    });
}

// ---------------------------------------------------------------------------------------------
// 2. The views
// ---------------------------------------------------------------------------------------------

/// A path as `tensors.tsv` writes it: tab, newline, CR and backslash escaped, bytes that are
/// not UTF-8 as `\xHH` (docs/layout.md).
fn tsv_escape(b: &[u8]) -> String {
    let mut out = String::new();
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out
}

/// The value of `name:` in a `stats/` file.
fn stat_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn views_list_and_show_every_tensor() {
    each_fixture("views", |fx, wants| {
        let fs = open(&common::fixtures().join(fx.dir).join(fx.source)).expect("opens");
        // tensors.tsv: one row per tensor, its path the tensor's .bin.
        let tsv = String::from_utf8(cat_ok(&fs, b"tensors.tsv")).expect("utf-8");
        let mut lines = tsv.lines();
        let head: Vec<&str> = lines.next().expect("header").split('\t').collect();
        let col = head
            .iter()
            .position(|h| *h == "path")
            .expect("a path column");
        let rows: Vec<String> = lines
            .map(|l| l.split('\t').nth(col).expect("path").to_string())
            .collect();
        let listed: BTreeSet<&str> = rows.iter().map(String::as_str).collect();
        let want_paths: Vec<String> = wants.iter().map(|w| tsv_escape(&w.bin())).collect();
        let want_set: BTreeSet<&str> = want_paths.iter().map(String::as_str).collect();
        assert_eq!(rows.len(), listed.len(), "tensors.tsv: a path listed twice");
        assert_eq!(listed, want_set, "tensors.tsv: the paths");
        // summary.txt counts them.
        let summary = String::from_utf8(cat_ok(&fs, b"summary.txt")).expect("utf-8");
        let first = summary.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!("tensors: {}", wants.len()),
            "summary.txt: first line"
        );
        // text/ and stats/ of a float32 tensor (the largest) agree with its recorded bytes.
        let w = wants
            .iter()
            .filter(|w| w.dtype == "float32" && w.elements() > 0)
            .max_by_key(|w| w.elements())
            .expect("a float32 tensor to show");
        let bin = cat_ok(&fs, &w.bin());
        assert_eq!(sha(&bin), w.sha, "{}: bytes", w.show());
        let values = f32s(&bin);
        assert_eq!(values.len() as u64, w.elements(), "{}: elements", w.show());
        let text_path = [&b"text/"[..], &w.stem, b".txt"].concat();
        let text = String::from_utf8(cat_ok(&fs, &text_path)).expect("utf-8");
        let shown: Vec<f32> = text
            .split_whitespace()
            .map(|t| {
                t.parse::<f32>()
                    .unwrap_or_else(|e| panic!("{}: {t:?}: {e}", show(&text_path)))
            })
            .collect();
        assert_eq!(shown.len(), values.len(), "{}: values", show(&text_path));
        for (i, (a, b)) in shown.iter().zip(&values).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{}: element {i}: {a} shown, {b} stored",
                show(&text_path)
            );
        }
        let stats_path = [&b"stats/"[..], &w.stem, b".txt"].concat();
        let stats = String::from_utf8(cat_ok(&fs, &stats_path)).expect("utf-8");
        let field = |n: &str| {
            stat_field(&stats, n).unwrap_or_else(|| panic!("{}: no {n}:", show(&stats_path)))
        };
        assert_eq!(field("count"), values.len().to_string(), "stats count");
        let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if !finite.is_empty() {
            let min = finite.iter().copied().fold(f32::INFINITY, f32::min);
            let max = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(field("min").parse::<f32>().ok(), Some(min), "stats min");
            assert_eq!(field("max").parse::<f32>().ok(), Some(max), "stats max");
        }
        // model.safetensors: the tensors it holds, with their recorded bytes.
        let st = cat_ok(&fs, b"model.safetensors");
        let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
        let header: Value = serde_json::from_slice(&st[8..8 + n]).expect("safetensors header");
        let by_key: BTreeMap<&[u8], &Want> = wants.iter().map(|w| (&w.key[..], w)).collect();
        let mut held = 0;
        for (name, t) in header.as_object().expect("header object") {
            if name == "__metadata__" {
                continue;
            }
            let w = by_key
                .get(name.as_bytes())
                .unwrap_or_else(|| panic!("model.safetensors: {name} is no tensor"));
            let off = &t["data_offsets"];
            let (a, b) = (
                off[0].as_u64().expect("begin") as usize,
                off[1].as_u64().expect("end") as usize,
            );
            let data = &st[8 + n + a..8 + n + b];
            assert_eq!(sha(data), w.sha, "model.safetensors: {name}");
            held += 1;
        }
        assert!(held > 0, "model.safetensors holds no tensor");
        format!(
            "tensors.tsv {} rows, text/stats of {} ({} values), model.safetensors {held} tensors",
            rows.len(),
            w.show(),
            values.len()
        )
    });
}

// ---------------------------------------------------------------------------------------------
// 3. verify, and 4. diff
// ---------------------------------------------------------------------------------------------

/// The tensor to damage: the largest whose served bytes (at least 8) occur exactly once in
/// exactly one of the fixture's files (stored as served): (its index, file index, offset).
fn damage_target(
    files: &[(String, Vec<u8>)],
    wants: &[Want],
    bins: &[Vec<u8>],
) -> Option<(usize, usize, usize)> {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bins[i].len()));
    for i in order {
        let b = &bins[i];
        if b.len() < 8 || bins.iter().filter(|o| *o == b).count() > 1 {
            continue;
        }
        let mut hits = Vec::new();
        for (fi, (_, data)) in files.iter().enumerate() {
            let mut at = 0;
            while let Some(p) = data[at..].windows(b.len()).position(|w| w == &b[..]) {
                hits.push((fi, at + p));
                at += p + 1;
            }
        }
        if let [(fi, off)] = hits[..] {
            return Some((i, fi, off));
        }
    }
    None
}

/// [`verify_passes_the_fixture_and_finds_a_flipped_byte`] where no tensor is stored as served
/// (compressed chunks): the middle byte of each file flipped in turn (of those under a checksum,
/// for a fixture that has one; some may be files no read reaches, as the per-process databases
/// Orbax merged into the checkpoint's). With a checksum: `verify` reports at least one of them,
/// every one it reports fails `diff --exact`, and no read ever serves other bytes. Without:
/// `verify` and the reads end without a crash.
fn verify_a_flip_in_stored_data(fx: &Fixture, c: &Copy, wants: &[Want]) -> String {
    let src = c.source.as_os_str();
    let pristine = common::fixtures().join(fx.dir).join(fx.source);
    let (mut reported, mut tried, mut other) = (0, 0, 0);
    for (file, orig) in c
        .files
        .iter()
        .filter(|(f, _)| !fx.guard.crc() || fx.guard.checks(f))
    {
        tried += 1;
        let at = orig.len() / 2;
        std::fs::write(c.dir.join(file), Damage::Flip(at, 0x10).apply(orig)).expect("damage");
        let (code, out, err) = run(&["verify".as_ref(), src]);
        assert!(
            matches!(code, Some(0) | Some(1) | Some(3)),
            "verify of {file} flipped at {at}: {code:?} {out}{err}"
        );
        if code != Some(0) {
            reported += 1;
            let (dcode, dout, derr) = run(&[
                "diff".as_ref(),
                "--exact".as_ref(),
                pristine.as_os_str(),
                src,
            ]);
            assert_ne!(
                dcode,
                Some(0),
                "{file} flipped at {at}: diff --exact with the damaged copy: {dout}{derr}"
            );
        }
        if let Ok(fs) = open(&c.source) {
            for w in wants {
                if let Ok(b) = cat(&fs, &w.bin()) {
                    if sha(&b) != w.sha {
                        assert!(
                            !fx.guard.crc(),
                            "{file} flipped at {at}: {} served other bytes",
                            w.show()
                        );
                        other += 1;
                    }
                }
            }
        }
        std::fs::write(c.dir.join(file), orig).expect("restore");
    }
    if fx.guard.crc() {
        assert!(
            reported > 0,
            "verify reported none of {tried} files flipped"
        );
    }
    format!(
        "no tensor stored as served: {tried} files flipped in turn, verify reported {reported}, {other} tensor reads other bytes"
    )
}

fn run(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let o = common::tfmount(args);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn verify_passes_the_fixture_and_finds_a_flipped_byte() {
    each_fixture("verify", |fx, wants| {
        let c = copy(fx);
        let src = c.source.as_os_str();
        let (code, out, err) = run(&["verify".as_ref(), src]);
        assert_eq!(code, Some(0), "verify of the pristine copy: {out}{err}");
        assert!(out.is_empty(), "verify of the pristine copy: {out}");
        let fs = open(&c.source).expect("opens");
        let bins: Vec<Vec<u8>> = wants.iter().map(|w| cat_ok(&fs, &w.bin())).collect();
        drop(fs);
        let Some((t, fi, off)) = damage_target(&c.files, wants, &bins) else {
            return verify_a_flip_in_stored_data(fx, &c, wants);
        };
        let at = off + bins[t].len() / 2;
        let (file, orig) = &c.files[fi];
        std::fs::write(c.dir.join(file), Damage::Flip(at, 0x10).apply(orig)).expect("damage");
        let target = &wants[t];
        let (code, out, err) = run(&["verify".as_ref(), src]);
        match fx.guard {
            // 1: damage found in tensors (listed on stdout); 3: the damage is in what opening
            // reads (a V1 table block holding the meta and the values), named on stderr.
            Guard::Crc | Guard::CrcBut(_) | Guard::Member => match code {
                Some(1) => assert!(!out.is_empty(), "verify names no problem: {err}"),
                Some(3) => assert!(
                    err.contains("checksum mismatch") && err.contains(&*c.dir.to_string_lossy()),
                    "verify of {} damaged, exit 3: {err}",
                    target.show()
                ),
                _ => panic!("verify of {} damaged: {code:?} {out}{err}", target.show()),
            },
            Guard::None => assert_eq!(code, Some(0), "verify with no checksum: {out}{err}"),
        }
        if fx.guard.crc() && code == Some(1) {
            let key = String::from_utf8(tfmount::model::lines::escape(&target.key)).expect("utf-8");
            assert!(
                out.lines().any(|l| l.starts_with(&format!("{key}\t"))),
                "verify does not name {key}: {out}"
            );
        }
        // Reads: the damaged tensor fails or serves its stored bytes; no other tensor is served
        // wrong.
        let fs = match open(&c.source) {
            Ok(fs) => fs,
            // A damaged block opening reads: nothing is served.
            Err(e) if fx.guard.crc() && code == Some(3) => {
                return format!(
                    "{} flipped in {file} at {at}: verify exit 3, open refused: {e}",
                    target.show()
                );
            }
            Err(e) => panic!("the damaged copy does not open: {e}"),
        };
        let got = cat(&fs, &target.bin());
        match fx.guard {
            Guard::Crc | Guard::CrcBut(_) | Guard::Member => {
                assert!(got.is_err(), "{}: damaged bytes served", target.show())
            }
            Guard::None => {
                let mut want = bins[t].clone();
                want[bins[t].len() / 2] ^= 0x10;
                assert!(
                    got.as_ref() == Ok(&want),
                    "{}: not the stored bytes: {:?}",
                    target.show(),
                    got.map(|b| b.len())
                );
            }
        }
        let mut others = 0;
        for (i, w) in wants.iter().enumerate() {
            if i == t {
                continue;
            }
            if let Ok(b) = cat(&fs, &w.bin()) {
                assert_eq!(
                    sha(&b),
                    w.sha,
                    "{}: served wrong beside the damage",
                    w.show()
                );
                others += 1;
            }
        }
        // diff --exact of the pristine fixture with the damaged copy does not pass.
        let pristine = common::fixtures().join(fx.dir).join(fx.source);
        let (code, out, err) = run(&[
            "diff".as_ref(),
            "--exact".as_ref(),
            pristine.as_os_str(),
            src,
        ]);
        assert_ne!(
            code,
            Some(0),
            "diff --exact with the damaged copy: {out}{err}"
        );
        if !fx.guard.crc() {
            let key = String::from_utf8(tfmount::model::lines::escape(&target.key)).expect("utf-8");
            assert!(
                out.lines().any(|l| l == format!("M\t{key}")),
                "diff --exact does not name {key} modified: {out}{err}"
            );
        }
        format!(
            "{} flipped in {file} at {at}: verify exit {code:?}, {others} other tensors exact",
            target.show()
        )
    });
}

#[test]
fn diff_of_a_fixture_with_itself_finds_nothing() {
    each_fixture("diff", |fx, wants| {
        let p = common::fixtures().join(fx.dir).join(fx.source);
        let c = copy(fx);
        for (a, b) in [(&p, &p), (&p, &c.source)] {
            for exact in [false, true] {
                let mut args = vec!["diff".as_ref()];
                if exact {
                    args.push("--exact".as_ref());
                }
                args.extend([a.as_os_str(), b.as_os_str()]);
                let (code, out, err) = run(&args);
                assert_eq!(code, Some(0), "diff {args:?}: {out}{err}");
                assert!(out.is_empty(), "diff {args:?}: {out}");
            }
        }
        format!("{} tensors the same", wants.len())
    });
}

// ---------------------------------------------------------------------------------------------
// 5. The hostile sweep
// ---------------------------------------------------------------------------------------------

/// The damages of a fixture's files: [`CUTS`] truncations and [`FLIPS`] single-bit flips,
/// shared out over its files, seeded by the fixture's name.
fn damages(fx: &Fixture, files: &[(String, Vec<u8>)]) -> Vec<(usize, Damage)> {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ common::fnv1a_64(fx.name().as_bytes()));
    let mut out = Vec::new();
    let k = files.len();
    for (fi, (_, b)) in files.iter().enumerate() {
        let len = b.len();
        let cuts = CUTS / k + usize::from(fi < CUTS % k);
        // The first bytes (magic numbers, headers), the last ones (footers), then spread.
        let mut at: BTreeSet<usize> = [0, 1, 7, len / 2, len.saturating_sub(1)]
            .into_iter()
            .filter(|&n| n < len)
            .collect();
        while at.len() < cuts.min(len) {
            at.insert(rng.index(len));
        }
        out.extend(at.into_iter().map(|n| (fi, Damage::Cut(n))));
        let flips = FLIPS / k + usize::from(fi < FLIPS % k);
        for _ in 0..flips.min(len * 8) {
            out.push((fi, Damage::Flip(rng.index(len), 1 << rng.below(8))));
        }
    }
    out
}

/// Opens a damaged copy and reads every expected tensor and the root views; the `.bin` reads.
fn serve_damaged(source: &Path, wants: &[Want]) -> Option<Vec<Result<Vec<u8>, String>>> {
    let fs = open(source).ok()?;
    let bins = wants.iter().map(|w| cat(&fs, &w.bin())).collect();
    for p in [&b"tensors.tsv"[..], b"summary.txt", b"model.safetensors"] {
        let _ = cat(&fs, p);
    }
    if let Some(w) = wants.first() {
        for view in [&b"text/"[..], b"stats/"] {
            let _ = cat(&fs, &[view, &w.stem, b".txt"].concat());
        }
    }
    Some(bins)
}

#[test]
fn hostile_truncations_and_bit_flips_never_panic_nor_serve_wrong_bytes() {
    quiet_panics_in_inputs();
    let total = std::sync::atomic::AtomicUsize::new(0);
    each_fixture("hostile", |fx, wants| {
        let c = copy(fx);
        let pristine: Vec<Vec<u8>> = {
            let fs = open(&c.source).expect("opens");
            wants.iter().map(|w| cat_ok(&fs, &w.bin())).collect()
        };
        let damages = damages(fx, &c.files);
        let (mut opened, mut ok, mut failed, mut changed) = (0, 0, 0, 0);
        let mut problems = Vec::new();
        for &(fi, d) in &damages {
            let (file, orig) = &c.files[fi];
            let path = c.dir.join(file);
            std::fs::write(&path, d.apply(orig)).expect("write variant");
            match in_input(|| serve_damaged(&c.source, wants)) {
                Err(panic) => problems.push(format!("{file} {}: panic: {panic}", d.spec())),
                Ok(None) => {}
                Ok(Some(reads)) => {
                    opened += 1;
                    for (i, r) in reads.iter().enumerate() {
                        match r {
                            Err(_) => failed += 1,
                            Ok(b) if *b == pristine[i] => ok += 1,
                            Ok(b) => {
                                changed += 1;
                                // A cut never changes the bytes left; a flip only where
                                // nothing checks them.
                                if matches!(d, Damage::Cut(_)) || fx.guard.checks(file) {
                                    problems.push(format!(
                                        "{file} {}: {} served {} wrong bytes",
                                        d.spec(),
                                        wants[i].show(),
                                        b.len()
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            std::fs::write(&path, orig).expect("restore");
        }
        assert!(
            problems.is_empty(),
            "{} of {} variants:\n{}",
            problems.len(),
            damages.len(),
            problems.join("\n")
        );
        total.fetch_add(damages.len(), std::sync::atomic::Ordering::Relaxed);
        format!(
            "{} variants, {opened} opened; tensor reads: {ok} exact, {failed} failed, {changed} other bytes (guard {:?})",
            damages.len(),
            fx.guard
        )
    });
    eprintln!("hostile: {} variants in all", total.into_inner());
}

// ---------------------------------------------------------------------------------------------
// 6. export
// ---------------------------------------------------------------------------------------------

/// The dtypes a `.safetensors` file holds with the bytes tfmount serves (`parse/safetensors.rs`).
const SAFETENSORS_DTYPES: &[&str] = &[
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
    "complex64",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
];

/// scripts/export_check.py with `args`, in a Python with TensorFlow and safetensors.
fn export_check(args: &[&std::ffi::OsStr]) -> Option<Value> {
    common::export_check("tensorflow, numpy, safetensors", args)
}

/// What exporting a fixture made: the TF checkpoint's prefix, the `.safetensors` file (and the
/// tensors left out of it: dtypes or keys it cannot hold), or why an export failed.
struct Exported {
    tf: Result<PathBuf, String>,
    st: Result<PathBuf, String>,
    st_left_out: BTreeSet<Vec<u8>>,
}

/// `tfmount export` of the fixture to a TF checkpoint and to `.safetensors` in `dir`.
fn export_fixture(fx: &Fixture, wants: &[Want], dir: &Path) -> Exported {
    let src = common::fixtures().join(fx.dir).join(fx.source);
    let go = |extra: &[&str], out: &Path| -> Result<PathBuf, String> {
        let mut args: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.extend([src.as_os_str(), out.as_os_str()]);
        let (code, _, err) = run(&args);
        if code == Some(0) {
            Ok(out.to_path_buf())
        } else {
            Err(format!("export {args:?}: exit {code:?}: {err}"))
        }
    };
    let tf = go(&[], &dir.join("ckpt"));
    // safetensors: the tensors it cannot hold dropped by name; a key a glob cannot name (not
    // UTF-8, or with a glob character) is left out by keeping what `**` matches (UTF-8 keys).
    let mut drops = Vec::new();
    let mut left_out = BTreeSet::new();
    let mut keep_utf8 = false;
    for w in wants {
        let key = std::str::from_utf8(&w.key).ok();
        let holdable = SAFETENSORS_DTYPES.contains(&w.dtype.as_str()) && key.is_some();
        if holdable {
            continue;
        }
        left_out.insert(w.key.clone());
        match key.filter(|k| !k.contains(['*', '?'])) {
            Some(k) => drops.push(k.to_string()),
            None => keep_utf8 = true,
        }
    }
    let mut extra: Vec<&str> = Vec::new();
    if keep_utf8 {
        extra.extend(["--keep", "**"]);
    }
    for d in &drops {
        extra.extend(["--drop", d.as_str()]);
    }
    let st = go(&extra, &dir.join("model.safetensors"));
    Exported {
        tf,
        st,
        st_left_out: left_out,
    }
}

#[test]
fn every_fixture_exported_is_read_by_tensorflow_and_safetensors_as_its_writer_reads_it() {
    let tmp = scratch();
    let mut made = BTreeMap::new();
    for (i, fx) in FIXTURES.iter().enumerate() {
        let dir = tmp.path().join(i.to_string());
        std::fs::create_dir(&dir).expect("mkdir");
        made.insert(fx.name(), export_fixture(fx, &wants(fx), &dir));
    }
    // One run of each reader over every output.
    let mut restore = serde_json::Map::new();
    let mut st_files: Vec<std::ffi::OsString> = vec!["safetensors".into()];
    for fx in FIXTURES {
        let e = &made[&fx.name()];
        if let Ok(p) = &e.tf {
            let list: Vec<Value> = wants(fx)
                .iter()
                .map(|w| serde_json::json!([common::hex(&w.key), w.dtype]))
                .collect();
            restore.insert(p.display().to_string(), Value::Array(list));
        }
        if let Ok(p) = &e.st {
            st_files.push(p.clone().into());
        }
    }
    let wants_file = tmp.path().join("restore.json");
    std::fs::write(&wants_file, Value::Object(restore).to_string()).expect("write");
    let Some(tf) = export_check(&["restore".as_ref(), wants_file.as_os_str()]) else {
        return;
    };
    let refs: Vec<&std::ffi::OsStr> = st_files.iter().map(|a| a.as_os_str()).collect();
    let Some(st) = export_check(&refs) else {
        return;
    };
    each_fixture("export", |fx, wants| {
        let e = &made[&fx.name()];
        let ckpt = e.tf.as_ref().unwrap_or_else(|err| panic!("{err}"));
        let got = &tf[ckpt.display().to_string()];
        // TensorFlow restores every tensor with the bytes the writer's own reader read (a
        // variant has no bytes numpy can give: restored, its checksums checked, and its stored
        // bytes compared by diff below).
        let mut restored = 0;
        for w in wants {
            let r = got["restored"][common::hex(&w.key)]
                .as_str()
                .expect("restored");
            if w.dtype == "variant" {
                let want = format!("restored variant of shape {:?}", w.shape);
                assert_eq!(r, want, "{}: TensorFlow does not restore it", w.show());
            } else {
                assert_eq!(r, w.sha, "{}: TensorFlow restores other bytes", w.show());
            }
            restored += 1;
        }
        // The keys and dtypes TensorFlow lists are the fixture's (where it can list them).
        let listed = match got["listed"].as_object() {
            Some(l) => {
                let want: BTreeMap<String, String> =
                    wants.iter().map(|w| (w.show(), w.dtype.clone())).collect();
                let have: BTreeMap<String, String> = l
                    .iter()
                    .filter(|(k, _)| *k != "_CHECKPOINTABLE_OBJECT_GRAPH" || want.contains_key(*k))
                    .map(|(k, d)| (k.clone(), d.as_str().unwrap_or("").to_string()))
                    .collect();
                assert_eq!(have, want, "the keys and dtypes TensorFlow lists");
                "listed"
            }
            None => "not listed (keys that are not UTF-8)",
        };
        // safetensors reads every tensor it can hold with the same shape and bytes.
        let file = e.st.as_ref().unwrap_or_else(|err| panic!("{err}"));
        let tensors = &st[file.display().to_string()]["tensors"];
        let mut held = 0;
        for w in wants.iter().filter(|w| !e.st_left_out.contains(&w.key)) {
            let t = &tensors[w.show()];
            assert_eq!(
                t[0],
                serde_json::json!(w.shape),
                "{}: safetensors' shape",
                w.show()
            );
            assert_eq!(t[1], w.sha, "{}: safetensors' bytes", w.show());
            held += 1;
        }
        assert_eq!(
            tensors.as_object().map_or(0, |m| m.len()),
            held,
            "safetensors holds other tensors"
        );
        // Mounted back and compared with the source: the same tensors, byte for byte.
        let src = common::fixtures().join(fx.dir).join(fx.source);
        let (code, out, err) = run(&[
            "diff".as_ref(),
            "--exact".as_ref(),
            src.as_os_str(),
            ckpt.as_os_str(),
        ]);
        assert_eq!(code, Some(0), "diff --exact of the export: {out}{err}");
        // The `.safetensors` export, mounted back (a safetensors SOURCE): only what it could
        // not hold differs, as removed.
        let (code, out, err) = run(&[
            "diff".as_ref(),
            "--exact".as_ref(),
            src.as_os_str(),
            file.as_os_str(),
        ]);
        let gone: BTreeSet<String> = e.st_left_out.iter().map(|k| common::show(k)).collect();
        let said: BTreeSet<String> = out
            .lines()
            .map(|l| {
                l.strip_prefix("D\t")
                    .unwrap_or_else(|| panic!("diff --exact of the .safetensors export: {l}"))
                    .to_string()
            })
            .collect();
        assert_eq!(
            said, gone,
            "diff --exact of the .safetensors export: {out}{err}"
        );
        assert_eq!(
            code,
            Some(if gone.is_empty() { 0 } else { 1 }),
            "{out}{err}"
        );
        format!(
            "{restored} restored by TensorFlow ({listed}), {held} read by safetensors ({} left out), diff --exact clean for both",
            e.st_left_out.len()
        )
    });
}
