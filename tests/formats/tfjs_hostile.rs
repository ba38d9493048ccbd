//! TF.js models damaged thousands of ways, opened through the filesystem core (`probe` + `Fs`,
//! no kernel): truncations and seeded single-bit flips of `model.json` and of every shard of
//! `layers_sharded` (six shards), `graph_uint8` (uint8 weights across two shards, a string
//! weight, int32 weights), `layers_float16` and `layers_uint16`.
//!
//! For every input:
//! - nothing panics (each input runs under `catch_unwind`; the failure names every input that
//!   panicked);
//! - no single allocation exceeds [`MAX_ALLOCATION`] (the models are a few KB: a larger one is
//!   sized by a length the input claims);
//! - every `.bin` that reads without error is what tfjs-core's decoding gives for that weight of
//!   the damaged model (`scripts/tfjs_reference.py`: numpy, one process for all inputs), or,
//!   where that cannot decode it or places it differently (the shards do not add up), exactly
//!   the undamaged model's bytes of that weight (the damage is elsewhere); else it fails;
//! - `model.json` at the root, when served, is the damaged file's bytes.
//!
//! Without a Python with numpy (src/testkit/requires.rs) only the panic and allocation checks
//! run.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::hostile::{damages, each_file, key_of, open, read_to_size, scratch, Damage, Sweep};
use common::{requires, tfjs_dir};
use serde_json::Value;
use tfmount::fs::ROOT;

/// The largest single allocation one input may cause.
const MAX_ALLOCATION: usize = 16 << 20;
/// Every truncation of `model.json` up to this length, then one every [`CUT_STRIDE`] bytes;
/// every truncation of a shard.
const CUT_ALL: usize = 600;
const CUT_STRIDE: usize = 7;
/// Single-bit flips of `model.json`, and of each shard.
const FLIPS_JSON: usize = 500;
const FLIPS_SHARD: usize = 80;
const SEED: u64 = 0x7466_6a73_5f68_6f73;

const MODELS: [&str; 4] = [
    "layers_sharded",
    "graph_uint8",
    "layers_float16",
    "layers_uint16",
];

/// One input: a model, which of its files is damaged, how.
struct Input {
    model: &'static str,
    file: String,
    damage: Damage,
    dir: PathBuf,
}

/// What tfmount served of one input.
struct Served {
    opened: Result<(), String>,
    /// `(key, sha256 of the .bin or the error)`.
    bins: Vec<(String, Result<String, String>)>,
    model_json: Option<Result<String, String>>,
}

/// Opens the model directory as a mount would and reads every weight's `.bin` and `model.json`.
fn serve(dir: &Path) -> Served {
    let mut s = Served {
        opened: Ok(()),
        bins: Vec::new(),
        model_json: None,
    };
    let fs = match open(dir) {
        Ok(fs) => fs,
        Err(e) => {
            s.opened = Err(e);
            return s;
        }
    };
    if let Ok(a) = fs.lookup(ROOT, b"model.json") {
        s.model_json = Some(read_to_size(&fs, a.ino).map(|b| common::sha256_hex(&b)));
    }
    let Ok(vars) = fs.lookup(ROOT, b"variables") else {
        return s;
    };
    each_file(&fs, vars.ino, "", |_, e, _| {
        let Some(stem) = e.name.strip_suffix(b".bin") else {
            return;
        };
        let key = key_of(&fs, e.ino, || String::from_utf8_lossy(stem).into_owned());
        s.bins.push((
            key,
            read_to_size(&fs, e.ino).map(|b| common::sha256_hex(&b)),
        ));
    });
    s
}

/// The reference's records, one per directory, from one Python process.
fn reference(py: &Path, dirs: &[PathBuf]) -> HashMap<PathBuf, Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tfjs_reference.py");
    let mut child = Command::new(py)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut stdin = child.stdin.take().expect("stdin");
    let list: String = dirs.iter().map(|d| format!("{}\n", d.display())).collect();
    let writer = std::thread::spawn(move || {
        stdin.write_all(list.as_bytes()).expect("write dirs");
    });
    let out = child.wait_with_output().expect("reference");
    writer.join().expect("writer");
    assert!(out.status.success(), "{}", script.display());
    let mut map = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("a record");
        let d = PathBuf::from(v["dir"].as_str().expect("dir"));
        map.insert(d, v);
    }
    assert_eq!(map.len(), dirs.len(), "a record per input");
    map
}

/// What one model's damaged inputs gave: the harness's counts, and how the `.bin`s read
/// compare with the reference.
#[derive(Default)]
struct Tally {
    sweep: Sweep,
    bins: usize,
    as_reference: usize,
    changed_as_reference: usize,
    as_undamaged: usize,
    refused: usize,
}

#[test]
fn damaged_tfjs_models_never_panic_nor_serve_wrong_bytes() {
    let py = requires::python("numpy", "damaged_tfjs_models: numpy's reading");
    let root = tfjs_dir();
    let tmp = scratch();
    let mut rng = common::Rng::new(SEED);
    let mut inputs: Vec<Input> = Vec::new();
    let mut files: HashMap<&str, Vec<(String, Vec<u8>)>> = HashMap::new();
    for model in MODELS {
        let model_json = std::fs::read(root.join(model).join("model.json")).expect("model.json");
        let manifest: Value = serde_json::from_slice(&model_json).expect("json");
        let mut fs: Vec<(String, Vec<u8>)> = vec![("model.json".into(), model_json)];
        for g in manifest["weightsManifest"].as_array().expect("groups") {
            for p in g["paths"].as_array().expect("paths") {
                let p = p.as_str().expect("path").to_string();
                let b = std::fs::read(root.join(model).join(&p)).expect("shard");
                fs.push((p, b));
            }
        }
        for (name, bytes) in &fs {
            let len = bytes.len();
            let damages = if name == "model.json" {
                damages(len, CUT_ALL, CUT_STRIDE, FLIPS_JSON, &mut rng)
            } else {
                damages(len, len, 1, FLIPS_SHARD, &mut rng)
            };
            for damage in damages {
                inputs.push(Input {
                    model,
                    file: name.clone(),
                    damage,
                    dir: tmp.path().join(format!("{}", inputs.len())),
                });
            }
        }
        files.insert(model, fs);
    }
    // The undamaged models first (their own directories): the reference for "elsewhere".
    let mut dirs: Vec<PathBuf> = Vec::new();
    for model in MODELS {
        let d = tmp.path().join(format!("undamaged-{model}"));
        std::fs::create_dir(&d).expect("mkdir");
        for (name, bytes) in &files[model] {
            std::fs::write(d.join(name), bytes).expect("write");
        }
        dirs.push(d);
    }
    for i in &inputs {
        std::fs::create_dir(&i.dir).expect("mkdir");
        for (name, bytes) in &files[i.model] {
            let b = if *name == i.file {
                i.damage.apply(bytes)
            } else {
                bytes.clone()
            };
            std::fs::write(i.dir.join(name), b).expect("write");
        }
        dirs.push(i.dir.clone());
    }
    let records = py.as_deref().map(|py| reference(py, &dirs));

    // The undamaged models: every weight served, as the reference decodes it.
    let mut undamaged: HashMap<&str, HashMap<String, String>> = HashMap::new();
    for model in MODELS {
        let d = tmp.path().join(format!("undamaged-{model}"));
        let s = serve(&d);
        assert!(s.opened.is_ok(), "{model}: {:?}", s.opened);
        let bins: HashMap<String, String> = s
            .bins
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    r.clone().unwrap_or_else(|e| panic!("{model}: {k}: {e}")),
                )
            })
            .collect();
        if let Some(rec) = records.as_ref().map(|r| &r[&d]) {
            let w = rec["weights"].as_object().expect("weights");
            assert_eq!(w.len(), bins.len(), "{model}: the reference's weights");
            for (k, v) in w {
                assert_eq!(v.as_str(), bins.get(k).map(String::as_str), "{model}: {k}");
            }
        }
        undamaged.insert(model, bins);
    }

    let mut tally: HashMap<&str, Tally> = HashMap::new();
    for i in &inputs {
        let t = tally.entry(i.model).or_insert_with(|| Tally {
            sweep: Sweep::new(MAX_ALLOCATION),
            ..Tally::default()
        });
        let what = format!("{} {} {:?}", i.model, i.file, i.damage);
        let Some(served) = t.sweep.input(&what, || serve(&i.dir)) else {
            continue;
        };
        if served.opened.is_ok() {
            t.sweep.opened += 1;
        }
        if let Some(Ok(h)) = &served.model_json {
            let want = common::sha256_hex(&std::fs::read(i.dir.join("model.json")).expect("read"));
            if *h != want {
                t.sweep
                    .wrong
                    .push(format!("{what}: model.json is not the file's bytes"));
            }
        }
        let rec = records.as_ref().map(|r| &r[&i.dir]);
        let before = &undamaged[i.model];
        for (key, got) in &served.bins {
            let Ok(got) = got else {
                t.refused += 1;
                continue;
            };
            t.bins += 1;
            let want = rec
                .and_then(|r| r["weights"].get(key))
                .and_then(Value::as_str);
            if want == Some(got.as_str()) {
                t.as_reference += 1;
                if before.get(key) != Some(got) {
                    t.changed_as_reference += 1;
                }
            } else if before.get(key) == Some(got) {
                t.as_undamaged += 1;
            } else if rec.is_some() {
                t.sweep.wrong.push(format!(
                    "{what}: {key}: served bytes are neither the decoding of the damaged model nor the undamaged ones"
                ));
            }
        }
    }
    let mut failures = Vec::new();
    for model in MODELS {
        let t = &tally[model];
        eprintln!(
            "{model}: {}; {} .bin read: {} as tfjs-core decodes them ({} of them changed by the damage), {} undamaged; {} refused",
            t.sweep.summary(),
            t.bins,
            t.as_reference,
            t.changed_as_reference,
            t.as_undamaged,
            t.refused,
        );
        failures.extend(t.sweep.failures(10));
        if records.is_some() {
            // Not vacuous: damage reached served values, and was refused somewhere.
            assert!(
                t.changed_as_reference > 20,
                "{model}: few changed values checked"
            );
            assert!(t.refused > 20, "{model}: few refusals");
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first ones:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
