//! TF Serving base directories: `export/` holding numbered SavedModel versions mounts as one
//! directory per version and `latest` -> the highest number, followed live. The fixture
//! (`tests/fixtures/serving/`, written by `scripts/gen_serving_fixtures.py` with real
//! TensorFlow) holds versions 1, 2 and 10, a version 11 still being written (no
//! saved_model.pb), a complete SavedModel under a name that is not a number, and a file;
//! `expected.json` is TensorFlow's reading of each version. Here: the probe, the mount through
//! the kernel (bytes equal TensorFlow's, each version the tree of that SavedModel mounted
//! alone, numeric order), versions appearing and going while mounted, `ls`, `verify`, `diff`,
//! and the errors that name a base directory's versions.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::Value;
use tfmount::model::open::Tree;
use tfmount::probe::{probe, Probed};

/// How long a change may take to show on a loaded machine (docs/serving.md promises 2 s).
const WITHIN: Duration = Duration::from_secs(20);

fn export() -> PathBuf {
    fixtures().join("serving/export")
}

fn expected() -> Value {
    load_json("serving/expected.json")
}

/// `(key, sha256, nbytes)` of every tensor TensorFlow read from version `v`.
fn tensors(v: &str) -> Vec<(String, String, u64)> {
    let exp = expected();
    let recs = exp["by_version"][v]["tensors"]
        .as_array()
        .unwrap_or_else(|| panic!("expected.json: no version {v}"))
        .clone();
    assert_eq!(recs.len(), 3, "version {v}");
    recs.iter()
        .map(|r| {
            (
                r["key"].as_str().expect("key").to_string(),
                r["sha256"].as_str().expect("sha256").to_string(),
                r["nbytes"].as_u64().expect("nbytes"),
            )
        })
        .collect()
}

/// Every tensor of version `v` read through the mount at `dir` (`MNT/1`, `MNT/latest`) is
/// TensorFlow's bytes.
fn check_version(dir: &Path, v: &str) {
    for (key, sha, n) in tensors(v) {
        let p = dir.join("variables").join(format!("{key}.bin"));
        let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(b.len() as u64, n, "{}", p.display());
        assert_eq!(sha256_hex(&b), sha, "{}", p.display());
    }
    // The version tensor holds the version's own number, as tf.saved_model.load read it.
    let want = expected()["by_version"][v]["values"]["version"]
        .as_i64()
        .expect("version");
    let p = dir.join("variables/version/.ATTRIBUTES/VARIABLE_VALUE.bin");
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let got = i64::from_le_bytes(b.as_slice().try_into().expect("8 bytes"));
    assert_eq!(got, want, "{}", p.display());
}

/// Copies directory `from` to `to` (files and directories, by name).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .expect("readdir")
        .map(|e| e.expect("dirent").path())
        .collect();
    entries.sort();
    for p in entries {
        let dest = to.join(p.file_name().expect("name"));
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).expect("copy");
        }
    }
}

/// Writes version `v` into base directory `base` from the fixture's version `from` as
/// TensorFlow's `tf.saved_model.save` does: `variables/` (and the fingerprint) first,
/// `saved_model.pb` last.
fn write_version(base: &Path, v: &str, from: &str) {
    let src = export().join(from);
    let dest = base.join(v);
    copy_tree(&src.join("variables"), &dest.join("variables"));
    std::fs::copy(src.join("fingerprint.pb"), dest.join("fingerprint.pb")).expect("copy");
    write_graph(base, v, from);
}

/// The last file of a version: its `saved_model.pb`, written under a temporary name and
/// renamed, as TensorFlow's file writer does.
fn write_graph(base: &Path, v: &str, from: &str) {
    let tmp = base.join(v).join(".saved_model.pb.tmp");
    std::fs::copy(export().join(from).join("saved_model.pb"), &tmp).expect("copy");
    std::fs::rename(&tmp, base.join(v).join("saved_model.pb")).expect("rename");
}

#[test]
fn the_probe_tells_a_base_directory_from_a_saved_model() {
    match probe(&export()).expect("probe") {
        Probed::CheckpointDir {
            checkpoints,
            latest,
            ..
        } => {
            let names: Vec<&str> = checkpoints.iter().map(|(n, _)| n.as_str()).collect();
            // Numeric order, not lexical; 11 (no saved_model.pb), tmp-... and README.txt are
            // not versions.
            assert_eq!(names, ["1", "2", "10"]);
            assert_eq!(latest.as_deref(), Some("10"));
            assert_eq!(
                expected()["latest"].as_str(),
                Some("10"),
                "TensorFlow's record"
            );
            assert!(tfmount::probe::serving::is_base_dir(&checkpoints));
        }
        other => panic!("{other:?}"),
    }
    // A version is a SavedModel; so is the non-numeric directory, given itself.
    for d in ["1", "tmp-1700000000"] {
        assert!(
            matches!(
                probe(&export().join(d)),
                Ok(Probed::SavedModel {
                    variables: Some(_),
                    ..
                })
            ),
            "{d}"
        );
    }
    // Only versions not complete yet: a base directory with none (mounted empty, live).
    let tmp = tempfile::tempdir().expect("tmp");
    copy_tree(&export().join("11"), &tmp.path().join("11"));
    match probe(tmp.path()).expect("probe") {
        Probed::CheckpointDir {
            checkpoints,
            latest,
            ..
        } => assert!(checkpoints.is_empty() && latest.is_none()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_mount_shows_each_version_as_its_saved_model_and_latest_the_highest() {
    let mut m = Mount::start(&export(), &[]);
    let mnt = m.path();
    assert_eq!(dir_names(&mnt), ["1", "10", "2", "latest"]);
    assert_eq!(latest(&mnt), "10");
    for v in ["1", "2", "10"] {
        check_version(&mnt.join(v), v);
        // Exactly what a mount of that SavedModel alone shows, at its root.
        let alone = Tree::open(&export().join(v)).expect("tree");
        let mut want: Vec<String> = alone
            .list(alone.root())
            .expect("list")
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        want.sort();
        assert_eq!(dir_names(&mnt.join(v)), want, "version {v}");
        for f in ["saved_model.pbtxt", "meta_graphs/serve/signatures.txt"] {
            let got = std::fs::read(mnt.join(v).join(f)).expect(f);
            assert_eq!(got, tree_cat(&alone, f), "{v}/{f}");
        }
    }
    check_version(&mnt.join("latest"), "10");
    let sig = std::fs::read_to_string(mnt.join("latest/signatures.txt")).expect("signatures");
    assert!(sig.contains("serving_default"), "{sig}");
    assert_eq!(m.unmount(), Some(0), "{}", m.log_text());
}

#[test]
fn versions_appear_and_go_while_mounted_and_latest_follows_the_highest() {
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path().join("export");
    std::fs::create_dir(&base).expect("mkdir");
    write_version(&base, "1", "1");
    // An exporter's temporary directory: never shown.
    copy_tree(&export().join("tmp-1700000000"), &base.join("temp-1"));
    let mut m = Mount::start(&base, &[]);
    let mnt = m.path();
    assert_eq!(dir_names(&mnt), ["1", "latest"]);
    assert_eq!(latest(&mnt), "1");

    // Version 9 half written (variables, no saved_model.pb): not shown, latest stays.
    let v9 = export().join("2");
    copy_tree(&v9.join("variables"), &base.join("9/variables"));
    stays(
        Duration::from_millis(2500),
        "9 without saved_model.pb",
        || dir_names(&mnt) == ["1", "latest"] && latest(&mnt) == "1",
    );
    write_graph(&base, "9", "2");
    within(WITHIN, "version 9 appears, latest -> 9", || {
        dir_names(&mnt) == ["1", "9", "latest"] && latest(&mnt) == "9"
    });
    check_version(&mnt.join("9"), "2");

    // 10 after 9 (numeric): latest moves to 10.
    write_version(&base, "10", "10");
    within(WITHIN, "version 10 appears, latest -> 10", || {
        dir_names(&mnt) == ["1", "10", "9", "latest"] && latest(&mnt) == "10"
    });
    check_version(&mnt.join("latest"), "10");

    // A lower version written later does not take latest.
    write_version(&base, "2", "2");
    within(WITHIN, "version 2 appears", || {
        dir_names(&mnt) == ["1", "10", "2", "9", "latest"]
    });
    assert_eq!(latest(&mnt), "10");

    // Removing the highest moves latest back; a removed version leaves the listing.
    std::fs::remove_dir_all(base.join("10")).expect("rm 10");
    within(WITHIN, "version 10 goes, latest -> 9", || {
        dir_names(&mnt) == ["1", "2", "9", "latest"] && latest(&mnt) == "9"
    });
    assert!(!mnt.join("10").exists());
    std::fs::remove_dir_all(base.join("1")).expect("rm 1");
    within(WITHIN, "version 1 goes", || {
        dir_names(&mnt) == ["2", "9", "latest"]
    });
    check_version(&mnt.join("9"), "2");
    assert_eq!(m.unmount(), Some(0), "{}", m.log_text());
}

/// A copy that writes `saved_model.pb` before `variables/` (`cp -r`, `gsutil cp` write in any
/// order): the version is waited for while its variables are missing (as a checkpoint's data
/// shards are), and shown with them once its index is there.
#[test]
fn a_version_whose_variables_come_after_its_saved_model_pb_is_shown_with_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path().join("export");
    write_version(&base, "1", "1");
    let mut m = Mount::start(&base, &[]);
    let mnt = m.path();
    assert_eq!(dir_names(&mnt), ["1", "latest"]);
    std::fs::create_dir_all(base.join("5/variables")).expect("mkdir");
    write_graph(&base, "5", "10");
    let data = "variables/variables.data-00000-of-00001";
    std::fs::copy(export().join("10").join(data), base.join("5").join(data)).expect("copy");
    stays(
        Duration::from_millis(2500),
        "5 without variables.index",
        || dir_names(&mnt) == ["1", "latest"] && latest(&mnt) == "1",
    );
    let index = "variables/variables.index";
    std::fs::copy(export().join("10").join(index), base.join("5").join(index)).expect("copy");
    within(WITHIN, "version 5 appears with its variables", || {
        dir_names(&mnt) == ["1", "5", "latest"] && latest(&mnt) == "5"
    });
    check_version(&mnt.join("5"), "10");
    assert_eq!(m.unmount(), Some(0), "{}", m.log_text());
}

#[test]
fn a_base_directory_with_no_complete_version_mounts_empty_and_is_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path().join("export");
    copy_tree(&export().join("11"), &base.join("11"));
    let mut m = Mount::start(&base, &[]);
    let mnt = m.path();
    assert!(dir_names(&mnt).is_empty(), "{:?}", dir_names(&mnt));
    write_graph(&base, "11", "10");
    within(
        WITHIN,
        "version 11 appears once saved_model.pb is written",
        || dir_names(&mnt) == ["11", "latest"] && latest(&mnt) == "11",
    );
    // Its variables are the ones written before saved_model.pb (the fixture's 11).
    let p = mnt.join("11/variables/version/.ATTRIBUTES/VARIABLE_VALUE.bin");
    let b = std::fs::read(&p).expect("version");
    assert_eq!(b, 11i64.to_le_bytes());
    assert_eq!(m.unmount(), Some(0), "{}", m.log_text());
}

#[test]
fn ls_verify_and_diff_take_a_base_directory() {
    let e = export();
    // `tfmount ls SOURCE`: the root as a mount shows it (versions in numeric order).
    let out = String::from_utf8(tfmount_ok(&["ls".as_ref(), e.as_os_str()])).expect("utf-8");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["1", "2", "10", "latest"]);
    let out = String::from_utf8(tfmount_ok(&[
        "ls".as_ref(),
        e.as_os_str(),
        "latest/variables/version/.ATTRIBUTES".as_ref(),
    ]))
    .expect("utf-8");
    assert!(out.contains("VARIABLE_VALUE.bin"), "{out}");
    let b = tfmount_ok(&[
        "cat".as_ref(),
        e.as_os_str(),
        "2/variables/version/.ATTRIBUTES/VARIABLE_VALUE.bin".as_ref(),
    ]);
    assert_eq!(b, 2i64.to_le_bytes());

    // verify: every version's variables (3 tensors and the object graph each).
    let o = tfmount(&["verify".as_ref(), e.as_os_str()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("12 tensors"), "{text}");
    assert!(text.contains(" 0 problems"), "{text}");

    // A damaged version fails verify, named by its version.
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path().join("export");
    write_version(&base, "1", "1");
    write_version(&base, "2", "2");
    let data = base.join("2/variables/variables.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).expect("data");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, bytes).expect("damage");
    let o = tfmount(&["verify".as_ref(), base.as_os_str()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("2/"), "{text}");
    assert!(!text.contains("1/"), "{text}");

    // diff: a base directory stands for its latest version.
    let o = tfmount(&["diff".as_ref(), e.as_os_str(), e.join("10").as_os_str()]);
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
    let o = tfmount(&["diff".as_ref(), e.as_os_str(), e.join("1").as_os_str()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("w/.ATTRIBUTES/VARIABLE_VALUE"), "{out}");
}

#[test]
fn where_a_saved_model_is_expected_a_base_directory_says_which_versions_it_holds() {
    let e = export();
    // `export/saved_model.pb`: there is none; the versions are named.
    for sub in ["ls", "verify"] {
        let o = tfmount(&[sub.as_ref(), e.join("saved_model.pb").as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{sub}: {err}");
        assert!(
            err.contains("a TF Serving base directory with versions 1, 2, 10")
                && err.contains("name one, e.g.")
                && err.contains("10/saved_model.pb"),
            "{sub}: {err}"
        );
    }
    // Only versions still being written: each subcommand says so, naming one.
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path().join("export");
    copy_tree(&e.join("11"), &base.join("11"));
    for sub in ["ls", "verify", "diff"] {
        let mut args = vec![sub.as_ref(), base.as_os_str()];
        if sub == "diff" {
            args.push(e.as_os_str());
        }
        let o = tfmount(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{sub}: {err}");
        assert!(
            err.contains(&base.display().to_string())
                && err.contains("a TF Serving base directory with no complete version yet")
                && err.contains("11/ has no saved_model.pb yet"),
            "{sub}: {err}"
        );
    }
    // A base directory whose latest version has no variables: diff names the versions.
    let tmp2 = tempfile::tempdir().expect("tmp");
    let base2 = tmp2.path().join("export");
    write_version(&base2, "1", "1");
    std::fs::create_dir_all(base2.join("3")).expect("mkdir");
    std::fs::copy(e.join("1/saved_model.pb"), base2.join("3/saved_model.pb")).expect("copy");
    let o = tfmount(&["diff".as_ref(), base2.as_os_str(), e.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    // diff's "trouble" (as diff(1)).
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a TF Serving base directory with versions 1, 3")
            && err.contains("its latest, 3, is a SavedModel without variables"),
        "{err}"
    );
}

/// On object storage (S3 on moto) a base directory is probed by listing it, as locally: `ls`
/// shows the versions and `latest`, `cat` reads a version's tensor, `diff` takes latest.
#[test]
fn a_base_directory_on_s3_is_its_versions() {
    use crate::common::servers::{http, s3_env, Server};
    let Some(moto) = Server::moto(&[]) else {
        return;
    };
    let home = tempfile::tempdir().expect("home");
    let (st, _) = http(moto.port, "PUT", "/tfm", &[], b"");
    assert_eq!(st, 200, "create bucket: {}", moto.log());
    let root = fixtures().join("serving");
    let mut todo = vec![root.join("export")];
    let mut files = Vec::new();
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("readdir") {
            let p = e.expect("dirent").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    for f in files {
        let rel = f.strip_prefix(&root).expect("under").to_string_lossy();
        let body = std::fs::read(&f).expect("read");
        let (st, _) = http(moto.port, "PUT", &format!("/tfm/{rel}"), &[], &body);
        assert_eq!(st, 200, "upload {rel}: {}", moto.log());
    }
    let env = s3_env(moto.port, home.path());
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(args)
            .envs(env.iter().cloned())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tfmount")
    };
    let o = run(&["ls", "s3://tfm/export"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["1", "2", "10", "latest"]);
    let o = run(&[
        "cat",
        "s3://tfm/export",
        "latest/variables/version/.ATTRIBUTES/VARIABLE_VALUE.bin",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.stdout, 10i64.to_le_bytes());
    let local = export().join("10");
    let o = run(&["diff", "s3://tfm/export", local.to_str().expect("utf-8")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
