//! Directories of Keras checkpoint files followed live, through the kernel: a directory without
//! a state file whose checkpoints are single files (`ModelCheckpoint` writes one per epoch) is
//! followed by listing it, `latest` being the newest file shown. Real Keras 3 training writes
//! while mounted (`scripts/keras_live_writer.py`); files caught half-written (a copy in
//! progress, HDF5's provisional superblock) are not shown until complete; a directory mixing a
//! TF V2 checkpoint and Keras files shows both.
//!
//! The training test needs a Python with Keras 3 and h5py (src/testkit/requires.rs finds it;
//! `scripts/test.sh` installs them); without one it is skipped and reported.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{f32_bytes, keras_dir, latest, sha256_hex, Mount};
use tfmount::parse::dtype::DType;
use tfmount::testkit::writer::CheckpointWriter;

/// How soon a change must show (docs/live.md's promise).
const WITHIN: Duration = Duration::from_secs(2);
/// How long a half-written file is watched not to appear.
const NOT_YET: Duration = Duration::from_millis(2500);

/// `{dataset key: sha256}` of a checkpoint as `expected/*.json` records it (datasets with a
/// dtype: the served ones).
fn expected_hashes(rel: &str) -> BTreeMap<String, String> {
    let v = common::load_json(&format!("keras/expected/{rel}.json"));
    v["datasets"]
        .as_array()
        .expect("datasets")
        .iter()
        .filter(|d| d["dtype"].is_string())
        .map(|d| {
            let key = d["path"].as_str().expect("path").trim_start_matches('/');
            (
                key.to_string(),
                d["sha256"].as_str().expect("sha256").to_string(),
            )
        })
        .collect()
}

/// Each dataset's `.bin` under `mnt/<ckpt>/variables/` hashes as `want` says.
fn check_values(mnt: &Path, ckpt: &str, want: &BTreeMap<String, String>) {
    assert!(!want.is_empty(), "{ckpt}: no dataset to check");
    for (key, sha) in want {
        let p = mnt.join(ckpt).join("variables").join(format!("{key}.bin"));
        let got = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(&sha256_hex(&got), sha, "{}", p.display());
    }
}

/// A V2 checkpoint `dir/name` with one float32 tensor `v` of 4 elements, written in `staging`
/// and moved in data first, index last (as TensorFlow's writer finishes).
fn write_v2(staging: &Path, dir: &Path, name: &str, vals: &[f32]) {
    let mut w = CheckpointWriter::new(staging.join(name), 1).expect("writer");
    w.add(b"v", DType(1), &[4], &f32_bytes(vals), 0)
        .expect("add");
    w.finish().expect("finish");
    for suffix in ["data-00000-of-00001", "index"] {
        let f = format!("{name}.{suffix}");
        std::fs::rename(staging.join(&f), dir.join(&f)).expect("move in");
    }
}

/// Copies `src` to `dir/name` through a temporary name and a rename (appears whole).
fn copy_in(src: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.part"));
    std::fs::copy(src, &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}

/// A Keras file written in two halves (a copy in progress: its superblock already says where it
/// ends), then one written whole but with the provisional end-of-file address HDF5 gives its
/// superblock until the file is closed: neither is listed, nor `latest`, until complete; then
/// each appears within 2 s with the bytes h5py read.
#[test]
fn half_written_keras_files_appear_only_once_complete() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let fixtures = keras_dir().join("checkpoints");
    std::fs::copy(
        fixtures.join("ckpt-01.weights.h5"),
        dir.join("ckpt-01.weights.h5"),
    )
    .expect("copy");
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    assert_eq!(common::dir_names(&mnt), ["ckpt-01.weights.h5", "latest"]);
    assert_eq!(latest(&mnt), "ckpt-01.weights.h5");

    // A copy in progress: the first half, the file closed (inotify's close-write fires).
    let bytes = std::fs::read(fixtures.join("ckpt-02.weights.h5")).expect("fixture");
    let half = bytes.len() / 2;
    let target = dir.join("ckpt-02.weights.h5");
    std::fs::write(&target, &bytes[..half]).expect("first half");
    common::stays(NOT_YET, "half of ckpt-02 is not shown", || {
        common::dir_names(&mnt) == ["ckpt-01.weights.h5", "latest"]
            && latest(&mnt) == "ckpt-01.weights.h5"
    });
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&target)
        .expect("reopen");
    (&f).write_all(&bytes[half..]).expect("second half");
    drop(f);
    let took = common::within(
        WITHIN,
        "ckpt-02 appears once complete, latest moves to it",
        || {
            common::dir_names(&mnt).contains(&"ckpt-02.weights.h5".to_string())
                && latest(&mnt) == "ckpt-02.weights.h5"
        },
    );
    eprintln!("ckpt-02 shown {took:?} after its last byte");
    check_values(
        &mnt,
        "ckpt-02.weights.h5",
        &expected_hashes("checkpoints/ckpt-02.weights.h5"),
    );

    // Every byte there but the superblock's end-of-file address still HDF5's provisional one
    // (0x800): how h5py leaves a file until its last write, the superblock's, when it closes.
    let bytes = std::fs::read(fixtures.join("ckpt-03.weights.h5")).expect("fixture");
    assert_eq!(
        bytes[8], 0,
        "superblock version 0 (end-of-file address at byte 40)"
    );
    let mut provisional = bytes.clone();
    provisional[40..48].copy_from_slice(&0x800u64.to_le_bytes());
    let target = dir.join("ckpt-03.weights.h5");
    std::fs::write(&target, &provisional).expect("write");
    common::stays(NOT_YET, "ckpt-03 with a provisional superblock", || {
        !common::dir_names(&mnt).contains(&"ckpt-03.weights.h5".to_string())
            && latest(&mnt) == "ckpt-02.weights.h5"
    });
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .expect("reopen");
    f.write_all_at(&bytes[..96], 0).expect("superblock");
    drop(f);
    common::within(
        WITHIN,
        "ckpt-03 appears once its superblock is final",
        || {
            common::dir_names(&mnt).contains(&"ckpt-03.weights.h5".to_string())
                && latest(&mnt) == "ckpt-03.weights.h5"
        },
    );
    check_values(
        &mnt,
        "ckpt-03.weights.h5",
        &expected_hashes("checkpoints/ckpt-03.weights.h5"),
    );
}

/// A directory holding a TF V2 checkpoint (no state file) and Keras files shows both, and
/// follows both as they are added; `latest` is the newest Keras file (a V2 prefix is several
/// files: TensorFlow gives none without a state file).
#[test]
fn a_directory_mixing_v2_and_keras_checkpoints_shows_both() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("run");
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::create_dir_all(&staging).expect("mkdir");
    let fixtures = keras_dir().join("checkpoints");
    write_v2(&staging, &dir, "ckpt-1", &[1.0, 2.0, 3.0, 4.0]);
    copy_in(
        &fixtures.join("ckpt-01.weights.h5"),
        &dir,
        "ckpt-01.weights.h5",
    );
    let m = Mount::start(&dir, &[]);
    let mnt = m.path();
    assert_eq!(
        common::dir_names(&mnt),
        ["ckpt-01.weights.h5", "ckpt-1", "latest"]
    );
    assert_eq!(latest(&mnt), "ckpt-01.weights.h5");
    assert_eq!(
        std::fs::read(mnt.join("ckpt-1/variables/v.bin")).expect("v2 tensor"),
        f32_bytes(&[1.0, 2.0, 3.0, 4.0])
    );
    check_values(
        &mnt,
        "ckpt-01.weights.h5",
        &expected_hashes("checkpoints/ckpt-01.weights.h5"),
    );
    // A new V2 checkpoint appears; latest stays on the Keras file.
    write_v2(&staging, &dir, "ckpt-2", &[5.0, 6.0, 7.0, 8.0]);
    common::within(WITHIN, "ckpt-2 appears", || {
        common::dir_names(&mnt) == ["ckpt-01.weights.h5", "ckpt-1", "ckpt-2", "latest"]
    });
    assert_eq!(latest(&mnt), "ckpt-01.weights.h5");
    assert_eq!(
        std::fs::read(mnt.join("ckpt-2/variables/v.bin")).expect("v2 tensor"),
        f32_bytes(&[5.0, 6.0, 7.0, 8.0])
    );
    // A new Keras file appears and becomes latest.
    copy_in(
        &fixtures.join("ckpt-02.weights.h5"),
        &dir,
        "ckpt-02.weights.h5",
    );
    common::within(WITHIN, "ckpt-02.weights.h5 appears and is latest", || {
        common::dir_names(&mnt).contains(&"ckpt-02.weights.h5".to_string())
            && latest(&mnt) == "ckpt-02.weights.h5"
    });
    check_values(
        &mnt,
        "latest",
        &expected_hashes("checkpoints/ckpt-02.weights.h5"),
    );
}

/// A directory with nothing complete in it yet mounts empty and is followed (docs/live.md): an
/// empty one, whose first TensorFlow save (with its state file) then appears, `latest` given by
/// that state file; and one whose only Keras file is still being written (its first 2 KiB: no
/// HDF5 reader can open it yet), which appears once complete.
#[test]
fn a_directory_with_nothing_complete_yet_mounts_empty_and_is_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(&staging).expect("mkdir");

    // Empty, then a TF save: data and index, then the state file naming it.
    let dir = tmp.path().join("tf");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let m = Mount::start(&dir, &[]);
    let mnt = m.path();
    assert!(
        common::dir_names(&mnt).is_empty(),
        "{:?}",
        common::dir_names(&mnt)
    );
    write_v2(&staging, &dir, "ckpt-1", &[1.0, 2.0, 3.0, 4.0]);
    common::write_state(&dir, &["ckpt-1"]);
    common::within(WITHIN, "ckpt-1 appears, latest names it", || {
        common::dir_names(&mnt) == ["ckpt-1", "latest"] && latest(&mnt) == "ckpt-1"
    });
    assert_eq!(
        std::fs::read(mnt.join("latest/variables/v.bin")).expect("v2 tensor"),
        f32_bytes(&[1.0, 2.0, 3.0, 4.0])
    );
    // From then on the state file rules: a checkpoint it does not name is not shown.
    write_v2(&staging, &dir, "ckpt-2", &[5.0, 6.0, 7.0, 8.0]);
    common::write_state(&dir, &["ckpt-2"]);
    common::within(WITHIN, "ckpt-2 replaces ckpt-1", || {
        common::dir_names(&mnt) == ["ckpt-2", "latest"] && latest(&mnt) == "ckpt-2"
    });
    drop(m);

    // The first Keras file of a run, 2 KiB of it written.
    let dir = tmp.path().join("keras");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bytes = std::fs::read(keras_dir().join("checkpoints/ckpt-01.weights.h5")).expect("fixture");
    let target = dir.join("ckpt-01.weights.h5");
    std::fs::write(&target, &bytes[..2048]).expect("first bytes");
    let err = tfmount::model::open::Ckpt::open(&target)
        .err()
        .expect("2 KiB of an HDF5 file do not open");
    eprintln!("the first 2 KiB: {err}");
    let m = Mount::start(&dir, &[]);
    let mnt = m.path();
    assert!(
        common::dir_names(&mnt).is_empty(),
        "{:?}",
        common::dir_names(&mnt)
    );
    std::fs::write(&target, &bytes).expect("whole file");
    common::within(
        WITHIN,
        "ckpt-01 appears once complete, latest names it",
        || {
            common::dir_names(&mnt) == ["ckpt-01.weights.h5", "latest"]
                && latest(&mnt) == "ckpt-01.weights.h5"
        },
    );
    check_values(
        &mnt,
        "latest",
        &expected_hashes("checkpoints/ckpt-01.weights.h5"),
    );
}

/// One `saved NAME SIZE JSON` line of `keras_live_writer.py`.
struct Saved {
    at: Instant,
    name: String,
    hashes: BTreeMap<String, String>,
}

fn parse_saved(at: Instant, line: &str) -> Saved {
    let mut f = line.splitn(4, ' ');
    assert_eq!(f.next(), Some("saved"), "keras_live_writer.py: {line}");
    let name = f.next().expect("name").to_string();
    let _size = f.next().expect("size");
    let hashes: BTreeMap<String, String> =
        serde_json::from_str(f.next().expect("json")).expect("hashes");
    Saved { at, name, hashes }
}

/// Kills the writer if the test fails half-way.
struct Writer(Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Real Keras 3 training with `ModelCheckpoint("ckpt-{epoch:02d}.weights.h5",
/// save_weights_only=True)` into a mounted directory: each epoch's file is listed within 2 s of
/// being written, `latest` follows it and never names a file not listed, and what a file
/// serves the moment it is listed is what h5py reads from it once Keras closed it.
#[test]
fn keras_model_checkpoint_epochs_appear_while_training() {
    const EPOCHS: usize = 4;
    let Some(py) = common::requires::python("keras, h5py, numpy", "") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/keras_live_writer.py");
    let mut child = Command::new(py)
        .arg(&script)
        .arg(dir)
        .arg(EPOCHS.to_string())
        .arg("1.0")
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("keras_live_writer.py");
    let mut stdin = child.stdin.take().expect("stdin");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let _writer = Writer(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    // Importing TensorFlow and the first epoch take a while on a busy machine.
    let (at, line) = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("the first epoch is saved");
    let first = parse_saved(at, &line);
    assert_eq!(first.name, "ckpt-01.weights.h5");
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    assert_eq!(common::dir_names(&mnt), ["ckpt-01.weights.h5", "latest"]);
    assert_eq!(latest(&mnt), "ckpt-01.weights.h5");
    check_values(&mnt, &first.name, &first.hashes);
    writeln!(stdin, "go").expect("go");
    stdin.flush().expect("flush");

    // Watch the mount while training goes on: when each file is first listed, and what it
    // serves then.
    let mut saved = vec![first];
    let mut seen: BTreeMap<String, (Instant, BTreeMap<String, String>)> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while saved.len() < EPOCHS || seen.len() < EPOCHS - 1 {
        assert!(
            Instant::now() < deadline,
            "training did not finish: saved {:?}, shown {:?}",
            saved.iter().map(|s| &s.name).collect::<Vec<_>>(),
            seen.keys().collect::<Vec<_>>()
        );
        while let Ok((at, line)) = rx.try_recv() {
            saved.push(parse_saved(at, &line));
        }
        let listing = common::dir_names(&mnt);
        let l = latest(&mnt);
        assert!(
            listing.contains(&l),
            "latest names {l:?}, not listed: {listing:?}"
        );
        for name in listing {
            if name == "latest" || name == "ckpt-01.weights.h5" || seen.contains_key(&name) {
                continue;
            }
            let at = Instant::now();
            let dir = mnt.join(&name).join("variables");
            let mut got = BTreeMap::new();
            for key in common::walk_files(&dir) {
                let key = key.to_string_lossy().to_string();
                if let Some(k) = key.strip_suffix(".bin") {
                    let b = std::fs::read(dir.join(&key)).expect("read");
                    got.insert(k.to_string(), sha256_hex(&b));
                }
            }
            seen.insert(name, (at, got));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for s in &saved[1..] {
        let (at, got) = seen
            .get(&s.name)
            .unwrap_or_else(|| panic!("{} was never listed", s.name));
        // Listed at most WITHIN after the writer reported it closed (it may be listed before
        // the report: the writer hashes the file first).
        let late = at.saturating_duration_since(s.at);
        assert!(
            late <= WITHIN,
            "{} listed {late:?} after it was saved",
            s.name
        );
        eprintln!("{}: listed {late:?} after the writer's report", s.name);
        assert_eq!(
            got, &s.hashes,
            "{}: what it served when listed is what h5py reads",
            s.name
        );
    }
    let last = format!("ckpt-{EPOCHS:02}.weights.h5");
    common::within(WITHIN, "latest is the last epoch", || latest(&mnt) == last);
    let mut want: Vec<String> = (1..=EPOCHS)
        .map(|e| format!("ckpt-{e:02}.weights.h5"))
        .collect();
    want.push("latest".into());
    assert_eq!(common::dir_names(&mnt), want);
    check_values(&mnt, "latest", &saved[EPOCHS - 1].hashes);
}
