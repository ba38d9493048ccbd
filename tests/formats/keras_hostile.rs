//! Keras files damaged thousands of ways, opened through the filesystem core (`probe` + `Fs`,
//! no kernel): every truncation of the first few KB and then at a stride, and seeded single-bit
//! flips in the metadata and in the datasets' bytes, of `model.weights.h5`, `legacy_model.h5`,
//! `other_writer.weights.h5`, `model.keras` and `model_deflated.keras`.
//!
//! For every input:
//! - nothing panics (each input runs under `catch_unwind`, so the failure names every input
//!   that panicked, not just the first);
//! - no single allocation exceeds [`MAX_ALLOCATION`] (the files are at most 90 KB: a larger
//!   one is sized by a length the file claims);
//! - every `.bin` that reads without error is what h5py reads from the same damaged file for
//!   that dataset (`scripts/h5_digest.py`: the stored elements with the file's own type,
//!   little-endian), with the shape h5py gives; where h5py cannot read that dataset (the file
//!   does not open, the dataset fails, or h5py does not list it: libhdf5 refuses a file shorter
//!   than its superblock's end-of-file address, which tfmount does not), it is exactly the
//!   undamaged file's bytes of that dataset (the damage is elsewhere), or it fails. The same
//!   for the files at the root: a `.keras` file's `config.json`/`metadata.json` and a legacy
//!   file's `model_config.json`/`training_config.json`.
//!
//! h5py's readings come from one Python process fed the damage specifications on its stdin
//! (it damages its own copy in memory), running alongside the Rust side in lock step. The test
//! is skipped without a Python with h5py and numpy (src/testkit/requires.rs), except for the
//! panic and allocation checks, which need no Python.
//!
//! Also: a dataset whose dataspace claims a huge shape in a small file fails at once, without
//! an allocation of the claimed size (contiguous and chunked datasets).

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use crate::common::tracking_alloc::largest_allocation;
use common::hostile::{damages, each_file, key_of, open, read_to_size, scratch, Damage, Sweep};
use common::{keras_dir, requires};
use serde_json::Value;
use tfmount::fs::ROOT;
use tfmount::testkit::fuzz as targets;

/// The largest single allocation one input may cause.
const MAX_ALLOCATION: usize = 16 << 20;
/// Every truncation up to this length, then one every [`CUT_STRIDE`] bytes.
const CUT_ALL: usize = 2048;
const CUT_STRIDE: usize = 229;
/// Single-bit flips per file: in the metadata (bytes outside every dataset's data), and in
/// the datasets' bytes. Files without known data ranges get all of them anywhere.
const FLIPS_META: usize = 1500;
const FLIPS_DATA: usize = 500;
/// The deflated `.keras`: every flip ends in an inflate or CRC-32 error, so fewer.
const FLIPS_DEFLATED: usize = 500;
const SEED: u64 = 0x6b65_7261_735f_6831;

/// The files damaged here, each with where its HDF5 bytes start in it (a stored `.keras`
/// member's data offset) when its datasets' offsets are known.
const FILES: [&str; 5] = [
    "model.weights.h5",
    "legacy_model.h5",
    "other_writer.weights.h5",
    "model.keras",
    "model_deflated.keras",
];

/// Byte ranges of `file` holding datasets' data (contiguous datasets, from h5py's record of
/// the undamaged file); empty when unknown (chunked datasets, a deflated zip).
fn data_ranges(file: &str) -> Vec<(usize, usize)> {
    let dir = keras_dir();
    let text = std::fs::read_to_string(dir.join(format!("expected/{file}.json"))).expect("json");
    let v: Value = serde_json::from_str(&text).expect("json");
    let (base, datasets) = match v.get("members") {
        Some(members) => {
            let w = members
                .as_array()
                .expect("members")
                .iter()
                .find(|m| m["name"] == "model.weights.h5")
                .expect("weights member");
            if w["compress_type"].as_u64() != Some(0) {
                return Vec::new();
            }
            (
                w["data_offset"].as_u64().expect("data_offset"),
                v["model.weights.h5"]["datasets"].clone(),
            )
        }
        None => (0, v["datasets"].clone()),
    };
    datasets
        .as_array()
        .expect("datasets")
        .iter()
        .filter_map(|d| {
            let off = d["offset"].as_u64()?;
            let size = d["storage_size"].as_u64()?;
            (size > 0).then_some(((base + off) as usize, (base + off + size) as usize))
        })
        .collect()
}

/// Every damage applied to `file` (of `len` bytes).
fn file_damages(file: &str, len: usize, rng: &mut common::Rng) -> Vec<Damage> {
    let ranges = data_ranges(file);
    if file.ends_with("deflated.keras") {
        return damages(len, CUT_ALL, CUT_STRIDE, FLIPS_DEFLATED, rng);
    }
    if ranges.is_empty() {
        return damages(len, CUT_ALL, CUT_STRIDE, FLIPS_META + FLIPS_DATA, rng);
    }
    let mut out = damages(len, CUT_ALL, CUT_STRIDE, 0, rng);
    let bit = |rng: &mut common::Rng, at: usize| Damage::Flip(at, 1 << rng.index(8));
    let in_data = |at: usize| ranges.iter().any(|&(a, b)| a <= at && at < b);
    let meta: Vec<usize> = (0..len).filter(|&i| !in_data(i)).collect();
    let data: Vec<usize> = (0..len).filter(|&i| in_data(i)).collect();
    assert!(
        meta.len() > 1000 && data.len() > 1000,
        "{file}: {} metadata bytes, {} data bytes",
        meta.len(),
        data.len()
    );
    for _ in 0..FLIPS_META {
        let at = meta[rng.index(meta.len())];
        out.push(bit(rng, at));
    }
    for _ in 0..FLIPS_DATA {
        let at = data[rng.index(data.len())];
        out.push(bit(rng, at));
    }
    out
}

/// What tfmount serves of one file: each tensor's `.bin` (by its key) and the files at the
/// root, as sha256 and shape, or the error.
/// A `.bin` read: its sha256 and the shape its `.shape` gives, or the error.
type BinRead = Result<(String, Vec<u64>), String>;

#[derive(Debug)]
struct Served {
    /// `Err` when the source does not open at all.
    opened: Result<(), String>,
    bins: Vec<(String, BinRead)>,
    files: Vec<(String, Result<String, String>)>,
}

const ROOT_FILES: [&str; 4] = [
    "config.json",
    "metadata.json",
    "model_config.json",
    "training_config.json",
];

/// Opens `path` as a mount would and reads every tensor's `.bin` and `.shape` and the root
/// files.
fn serve(path: &Path) -> Served {
    let mut s = Served {
        opened: Ok(()),
        bins: Vec::new(),
        files: Vec::new(),
    };
    let fs = match open(path) {
        Ok(fs) => fs,
        Err(e) => {
            s.opened = Err(e);
            return s;
        }
    };
    for name in ROOT_FILES {
        if let Ok(a) = fs.lookup(ROOT, name.as_bytes()) {
            s.files.push((
                name.to_string(),
                read_to_size(&fs, a.ino).map(|b| common::sha256_hex(&b)),
            ));
        }
    }
    let Ok(vars) = fs.lookup(ROOT, b"variables") else {
        return s;
    };
    each_file(&fs, vars.ino, "", |dir, e, _| {
        let Some(stem) = e.name.strip_suffix(b".bin") else {
            return;
        };
        let key = key_of(&fs, e.ino, || String::from_utf8_lossy(stem).into_owned());
        let got = read_to_size(&fs, e.ino).and_then(|b| {
            let shape_name = [stem, b".shape"].concat();
            let a = fs.lookup(dir, &shape_name).map_err(|e| e.to_string())?;
            let text = read_to_size(&fs, a.ino)?;
            let shape = String::from_utf8_lossy(&text)
                .split_whitespace()
                .map(|x| x.parse::<u64>().map_err(|e| format!(".shape {x:?}: {e}")))
                .collect::<Result<Vec<u64>, String>>()?;
            Ok((common::sha256_hex(&b), shape))
        });
        s.bins.push((key, got));
    });
    s
}

/// How long h5py may take over one input: libhdf5 loops forever on some damaged files; such an
/// input counts as one h5py cannot read, and the rest go to a new process.
const H5PY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// h5py's reading of damaged copies, from one Python process (another one after an input that
/// hangs it): specifications go in on a writer thread, records come back in order.
struct Reference {
    py: PathBuf,
    specs: Vec<String>,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Index into `specs` of the next record expected.
    next: usize,
    /// Inputs h5py did not finish.
    pub hung: Vec<String>,
}

impl Reference {
    fn start(py: &Path, specs: Vec<String>) -> Reference {
        let (child, lines) = Self::spawn(py, specs.clone());
        Reference {
            py: py.to_path_buf(),
            specs,
            child,
            lines,
            next: 0,
            hung: Vec::new(),
        }
    }

    fn spawn(py: &Path, specs: Vec<String>) -> (Child, mpsc::Receiver<String>) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/h5_digest.py");
        let mut child = Command::new(py)
            .arg(&script)
            .arg("--spec")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start scripts/h5_digest.py");
        let mut stdin = child.stdin.take().expect("stdin");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        std::thread::spawn(move || {
            let mut w = std::io::BufWriter::new(&mut stdin);
            for s in specs {
                if writeln!(w, "{s}").is_err() {
                    return;
                }
            }
            let _ = w.flush();
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        (child, rx)
    }

    /// The record of input `id` (the next one).
    fn next(&mut self, id: &str) -> Value {
        let spec = self.specs[self.next].clone();
        assert!(spec.starts_with(&format!("{id}\t")), "records out of order");
        self.next += 1;
        match self.lines.recv_timeout(H5PY_TIMEOUT) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line).expect("h5_digest.py output");
                assert_eq!(v["id"], id, "h5_digest.py records out of order");
                v["record"].clone()
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Hung: this input is one h5py cannot read; the rest go to a new process.
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.hung.push(spec);
                let (child, lines) = Self::spawn(&self.py, self.specs[self.next..].to_vec());
                self.child = child;
                self.lines = lines;
                serde_json::json!({"error": "h5py did not finish"})
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("h5_digest.py ended before input {id}")
            }
        }
    }

    fn finish(mut self) -> Vec<String> {
        let status = self.child.wait().expect("h5_digest.py");
        assert!(status.success(), "h5_digest.py: {status}");
        self.hung
    }
}

/// h5py's digest of one dataset or file in `record`, when it read it.
fn h5py_dataset(record: &Value, key: &str) -> Option<(String, Vec<u64>)> {
    let d = record.get("datasets")?.get(key)?;
    let sha = d.get("sha256")?.as_str()?.to_string();
    let shape = d
        .get("shape")?
        .as_array()?
        .iter()
        .map(|x| x.as_u64())
        .collect::<Option<Vec<u64>>>()?;
    Some((sha, shape))
}

fn h5py_file(record: &Value, name: &str) -> Option<String> {
    let (group, key) = match name {
        "config.json" | "metadata.json" => ("members", name),
        "model_config.json" => ("attrs", "model_config"),
        "training_config.json" => ("attrs", "training_config"),
        _ => return None,
    };
    record.get(group)?.get(key)?.as_str().map(str::to_string)
}

/// What one file's damaged inputs gave: the harness's counts, and how the files read compare
/// with h5py's reading.
#[derive(Default)]
struct Tally {
    sweep: Sweep,
    bins_read: usize,
    /// Reads equal to h5py's reading of the damaged file.
    same_as_h5py: usize,
    /// Reads where h5py could not read the dataset, equal to the undamaged bytes.
    same_as_undamaged: usize,
    /// Reads tfmount refused (EIO).
    refused: usize,
    /// tfmount refused a dataset h5py read.
    refused_h5py_read: usize,
}

/// Checks what tfmount served of damaged input `what` against h5py's `record` of it and of the
/// undamaged file (`original`).
fn compare(what: &str, served: &Served, record: &Value, original: &Value, t: &mut Tally) {
    for (key, got) in &served.bins {
        let want = h5py_dataset(record, key);
        let got = match got {
            Ok(g) => g,
            Err(_) => {
                t.refused += 1;
                if want.is_some() {
                    t.refused_h5py_read += 1;
                }
                continue;
            }
        };
        t.bins_read += 1;
        match want {
            Some(w) if &w == got => t.same_as_h5py += 1,
            Some(w) => t.sweep.wrong.push(format!(
                "{what}: {key}: tfmount {got:?}, h5py {w:?} from the same bytes"
            )),
            None => match h5py_dataset(original, key) {
                Some(o) if &o == got => t.same_as_undamaged += 1,
                o => t.sweep.wrong.push(format!(
                    "{what}: {key}: tfmount {got:?}; h5py cannot read it ({}), undamaged {o:?}",
                    record
                        .get("datasets")
                        .and_then(|d| d.get(key))
                        .or_else(|| record.get("error"))
                        .map_or("not listed".to_string(), |e| e.to_string())
                )),
            },
        }
    }
    for (name, got) in &served.files {
        let Ok(got) = got else {
            t.refused += 1;
            continue;
        };
        t.bins_read += 1;
        match (h5py_file(record, name), h5py_file(original, name)) {
            (Some(w), _) if &w == got => t.same_as_h5py += 1,
            (None, Some(o)) if &o == got => t.same_as_undamaged += 1,
            (w, o) => t.sweep.wrong.push(format!(
                "{what}: {name}: tfmount {got}, h5py {w:?}, undamaged {o:?}"
            )),
        }
    }
}

// One test per file, so that the harness runs two sweeps at once (each with its own h5py).
#[test]
fn damaged_model_weights_h5_never_panics_nor_serves_wrong_bytes() {
    sweep("model.weights.h5");
}

#[test]
fn damaged_legacy_model_h5_never_panics_nor_serves_wrong_bytes() {
    sweep("legacy_model.h5");
}

#[test]
fn damaged_other_writer_h5_never_panics_nor_serves_wrong_bytes() {
    sweep("other_writer.weights.h5");
}

#[test]
fn damaged_model_keras_never_panics_nor_serves_wrong_bytes() {
    sweep("model.keras");
}

#[test]
fn damaged_model_deflated_keras_never_panics_nor_serves_wrong_bytes() {
    sweep("model_deflated.keras");
}

/// The sweep of one file: its damages served by tfmount and read by h5py, compared.
fn sweep(file: &'static str) {
    assert!(FILES.contains(&file), "{file} is not in FILES");
    let started = Instant::now();
    let dir = keras_dir();
    let py = requires::python("h5py, numpy", "damaged_keras_files: h5py's reading");
    // Each file's own stream of damages.
    let mut rng = common::Rng::new(SEED ^ common::fnv1a_64(file.as_bytes()));
    // Every input: (file, damage), in the order h5py gets them.
    let mut inputs: Vec<(&str, Damage)> = Vec::new();
    let mut originals: HashMap<&str, Vec<u8>> = HashMap::new();
    {
        let b = std::fs::read(dir.join(file)).expect("fixture");
        // The undamaged file first: h5py's record of it is the reference for the rest.
        inputs.push((file, Damage::Cut(b.len())));
        inputs.extend(
            file_damages(file, b.len(), &mut rng)
                .into_iter()
                .map(|d| (file, d)),
        );
        originals.insert(file, b);
    }
    let mut reference = py.as_deref().map(|py| {
        let specs = inputs
            .iter()
            .enumerate()
            .map(|(i, (file, d))| format!("{i}\t{}\t{}", dir.join(file).display(), d.spec()))
            .collect();
        Reference::start(py, specs)
    });
    let tmp = scratch();
    let mut per_file: HashMap<&str, Tally> = HashMap::new();
    let mut undamaged: HashMap<&str, Value> = HashMap::new();
    let (mut serving, mut waiting) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for (i, (file, damage)) in inputs.iter().enumerate() {
        let t = per_file.entry(file).or_insert_with(|| Tally {
            sweep: Sweep::new(MAX_ALLOCATION),
            ..Tally::default()
        });
        let what = format!("{file} {}", damage.spec());
        let path = tmp.path().join(file);
        std::fs::write(&path, damage.apply(&originals[file])).expect("write input");
        let clock = Instant::now();
        let served = t.sweep.input(&what, || serve(&path));
        serving += clock.elapsed();
        let clock = Instant::now();
        let record = reference.as_mut().map(|r| r.next(&i.to_string()));
        waiting += clock.elapsed();
        let Some(served) = served else {
            continue;
        };
        if served.opened.is_ok() {
            t.sweep.opened += 1;
        }
        let Some(record) = record else {
            continue;
        };
        if let (Damage::Cut(n), true) = (damage, !undamaged.contains_key(file)) {
            // The undamaged file: every dataset h5py reads is served, with h5py's bytes.
            assert_eq!(*n, originals[file].len());
            let before = t.same_as_h5py;
            compare(&what, &served, &record, &record, t);
            assert!(
                served.opened.is_ok() && t.sweep.wrong.is_empty() && t.refused == 0,
                "{file} undamaged: {:?} {:?}",
                served.opened,
                t.sweep.wrong
            );
            assert!(t.same_as_h5py - before > 20, "{file}: few datasets checked");
            undamaged.insert(file, record);
            continue;
        }
        compare(&what, &served, &record, &undamaged[file], t);
    }
    if let Some(r) = reference {
        for spec in r.finish() {
            eprintln!("h5py did not finish in {H5PY_TIMEOUT:?} (counted as failing): {spec}");
        }
    }
    let mut failures = Vec::new();
    {
        let t = &per_file[file];
        eprintln!(
            "{file}: {}; {} .bin and root files read: {} as h5py reads them, \
             {} undamaged where h5py cannot read them; {} refused ({} that h5py reads)",
            t.sweep.summary(),
            t.bins_read,
            t.same_as_h5py,
            t.same_as_undamaged,
            t.refused,
            t.refused_h5py_read,
        );
        failures.extend(t.sweep.failures(10));
    }
    eprintln!(
        "{:.1} s: {:.1} s serving, {:.1} s waiting for h5py",
        started.elapsed().as_secs_f64(),
        serving.as_secs_f64(),
        waiting.as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures, first ones:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Where the dims `shape` (each a little-endian u64, as dataspace messages hold them) are in
/// `b`.
fn find_dims(b: &[u8], shape: &[u64]) -> Vec<usize> {
    let pat: Vec<u8> = shape.iter().flat_map(|d| d.to_le_bytes()).collect();
    b.windows(pat.len())
        .enumerate()
        .filter(|(_, w)| *w == &pat[..])
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn a_huge_claimed_shape_fails_without_allocating_it() {
    let dir = keras_dir();
    let mut checked = 0;
    for file in [
        // Contiguous (Keras writes it), in a plain file and in a stored `.keras` member.
        "model.weights.h5",
        "model.keras",
        // Chunked, deflated, Fletcher-32 (decoded whole when opened).
        "other_writer.weights.h5",
    ] {
        let b = std::fs::read(dir.join(file)).expect("fixture");
        let text = std::fs::read_to_string(dir.join(format!("expected/{file}.json"))).expect("j");
        let v: Value = serde_json::from_str(&text).expect("json");
        let datasets = v
            .get("model.weights.h5")
            .map_or(&v["datasets"], |w| &w["datasets"]);
        // The 2-D shape of the most datasets: its dims are patched wherever they appear (the
        // dataspace messages of those datasets, with their max dims where written).
        let shape_of = |d: &Value| -> Option<Vec<u64>> {
            d["shape"].as_array()?.iter().map(|x| x.as_u64()).collect()
        };
        let mut by_shape: Vec<(Vec<u64>, Vec<String>)> = Vec::new();
        for d in datasets.as_array().expect("datasets") {
            let Some(shape) = shape_of(d).filter(|s| s.len() == 2 && s.iter().all(|&x| x >= 2))
            else {
                continue;
            };
            let key = d["path"].as_str().expect("path").trim_start_matches('/');
            match by_shape.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, keys)) => keys.push(key.to_string()),
                None => by_shape.push((shape, vec![key.to_string()])),
            }
        }
        // Shapes whose dims appear only in those datasets' dataspaces (dims, maybe max dims):
        // the fewest places per dataset.
        let (shape, keys, at) = by_shape
            .into_iter()
            .map(|(shape, keys)| {
                let at = find_dims(&b, &shape);
                (shape, keys, at)
            })
            .filter(|(_, keys, at)| at.len() >= keys.len() && at.len() <= 2 * keys.len())
            .min_by_key(|(_, keys, at)| at.len() * 100 / keys.len())
            .unwrap_or_else(|| panic!("{file}: no 2-D shape found only in its dataspaces"));
        eprintln!("{file}: dims {shape:?} of {keys:?} patched at {at:?}");
        for huge in [1u64 << 40, u64::MAX / 2, u64::MAX] {
            let mut d = b.clone();
            for &i in &at {
                d[i..i + 8].copy_from_slice(&huge.to_le_bytes());
            }
            // The patched dataspaces must reach the parser, not stop at their headers' checksums
            // (nor, in a `.keras`, at the stored member's CRC-32, checked before it is served).
            targets::keras::fix_hdf5_checksums(&mut d);
            fix_stored_zip_crcs(&mut d);
            let tmp = scratch();
            let p = tmp.path().join(file);
            std::fs::write(&p, &d).expect("write");
            let mut result = None;
            let largest = largest_allocation(|| {
                let started = Instant::now();
                result = Some(serve(&p));
                assert!(started.elapsed().as_secs() < 10, "{file} dim {huge}: slow");
            });
            let served = result.expect("ran");
            assert!(
                largest <= MAX_ALLOCATION,
                "{file} dim {huge}: one allocation of {largest} bytes"
            );
            // Those datasets are refused, not served with a made-up size (or not listed).
            for key in &keys {
                if let Some((_, got)) = served.bins.iter().find(|(k, _)| k == key) {
                    assert!(got.is_err(), "{file} {key} dim {huge}: served {got:?}");
                }
            }
            // And the rest of the file still serves.
            let ok = served.bins.iter().filter(|(_, g)| g.is_ok()).count();
            assert!(
                ok > 20,
                "{file} dim {huge}: {ok} served, {:?}",
                served.opened
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 9);
}

/// Sets the CRC-32 of every STORED member of a zip (`.keras`) in its local header and its
/// central directory entry to that of the member's bytes as they are; no-op on other files.
fn fix_stored_zip_crcs(b: &mut [u8]) {
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as usize;
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
    let mut i = 0;
    while i + 46 <= b.len() {
        if &b[i..i + 4] != b"PK\x01\x02" || u16_at(b, i + 10) != 0 {
            i += 1;
            continue;
        }
        let local = u32_at(b, i + 42);
        if local + 30 > b.len() || &b[local..local + 4] != b"PK\x03\x04" {
            i += 1;
            continue;
        }
        let start = local + 30 + u16_at(b, local + 26) + u16_at(b, local + 28);
        let end = (start + u32_at(b, i + 20)).min(b.len());
        let mut crc = flate2::Crc::new();
        crc.update(&b[start..end]);
        let c = crc.sum().to_le_bytes();
        b[local + 14..local + 18].copy_from_slice(&c);
        b[i + 16..i + 20].copy_from_slice(&c);
        i += 46;
    }
}

/// One damaged copy of a fixture, served.
fn serve_flipped(file: &str, at: usize, mask: u8) -> Served {
    let b = std::fs::read(keras_dir().join(file)).expect("fixture");
    let tmp = scratch();
    let p = tmp.path().join(file);
    std::fs::write(&p, Damage::Flip(at, mask).apply(&b)).expect("write");
    serve(&p)
}

/// The undamaged fixture's bins by key.
fn undamaged_bins(file: &str) -> HashMap<String, BinRead> {
    serve(&keras_dir().join(file)).bins.into_iter().collect()
}

/// Damage the sweep above found serving wrong bytes (h5py reads these files otherwise or not
/// at all), kept as fixed cases that need no Python.
#[test]
fn damage_the_sweep_found_is_refused() {
    // A local heap's data address moved by 8 bytes (model.keras, `layers/dtype_zoo/vars`):
    // every member took its neighbour's name, so `vars/2.bin` served `vars/1`'s bytes. The
    // heap's free list no longer parses (as libhdf5 says); the group is left out.
    let s = serve_flipped("model.keras", 57815, 8);
    assert!(s.opened.is_ok(), "{:?}", s.opened);
    let good = undamaged_bins("model.keras");
    for (k, got) in &s.bins {
        if got.is_ok() {
            assert_eq!(Some(got), good.get(k), "{k}");
        }
    }
    assert!(!s
        .bins
        .iter()
        .any(|(k, _)| k.starts_with("layers/dtype_zoo/vars/")));
    assert!(s.bins.len() > 60, "the rest is served");
    // A name became empty (model.weights.h5, under `layers/lstm`): libhdf5 cannot list the
    // group; it was served as `layers/lstm//vars/0`.
    let s = serve_flipped("model.weights.h5", 22664, 16);
    assert!(!s.bins.iter().any(|(k, _)| k.contains("//")));
    // A renamed member breaks its symbol table's order (legacy_model.h5,
    // `optimizer_weights/adam/mha_query_biqs_momentum`): libhdf5 lists it but cannot open it.
    let s = serve_flipped("legacy_model.h5", 84428, 16);
    assert!(!s.bins.iter().any(|(k, _)| k.ends_with("biqs_momentum")));
    // A damaged global heap object header (legacy_model.h5): the string attributes came from
    // other heap objects (`training_config.json` held "&\n", `model_config.json` a dataset
    // name). Now each is the object its reference names, of its length, or not shown.
    let want = serve(&keras_dir().join("legacy_model.h5")).files;
    for (at, mask) in [(12131, 16), (1052, 32), (14110, 32)] {
        let s = serve_flipped("legacy_model.h5", at, mask);
        for (name, got) in &s.files {
            if let Ok(got) = got {
                let w = want.iter().find(|(n, _)| n == name).map(|(_, w)| w);
                assert_eq!(w, Some(&Ok(got.clone())), "flip {at}: {name}");
            }
        }
    }
}
