//! Real mounts of every TensorFlow-written fixture, compared with TensorFlow's own record of
//! each tensor (tests/fixtures/expected/*.json, written by scripts/gen_fixtures.py).

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// Checks one tensor's four files against TF's record; returns a description of each mismatch.
fn check_tensor(view: &Path, rec: &Value, want_sha: &str, want_len: u64) -> Vec<String> {
    let mut errs = Vec::new();
    let key = rec["key"].as_str().unwrap_or("?");
    let stem = stem_path(rec);
    let bin = with_suffix(view, &stem, ".bin");
    match std::fs::read(&bin) {
        Ok(bytes) => {
            if sha256_hex(&bytes) != want_sha {
                errs.push(format!("{key}: .bin content differs"));
            }
            let st = std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(u64::MAX);
            if st != want_len || bytes.len() as u64 != want_len {
                errs.push(format!(
                    "{key}: .bin size stat {st} read {} want {want_len}",
                    bytes.len()
                ));
            }
            let dtype = rec["dtype"].as_str().unwrap_or("");
            let npy = with_suffix(view, &stem, ".npy");
            if NUMPY_NATIVE.contains(&dtype) {
                match std::fs::read(&npy) {
                    Ok(n) => {
                        if !n.starts_with(b"\x93NUMPY\x01\x00")
                            || !n.ends_with(&bytes)
                            || (n.len() - bytes.len()) % 64 != 0
                        {
                            errs.push(format!("{key}: .npy is not header + .bin"));
                        }
                    }
                    Err(e) => errs.push(format!("{key}: .npy: {e}")),
                }
            } else if npy.exists() {
                errs.push(format!("{key}: .npy exists for {dtype}"));
            }
        }
        Err(e) => errs.push(format!("{key}: {}: {e}", bin.display())),
    }
    let shape: Vec<String> = rec["shape"]
        .as_array()
        .map(|a| a.iter().map(|d| d.to_string()).collect())
        .unwrap_or_default();
    let want_shape = format!("{}\n", shape.join(" "));
    match std::fs::read_to_string(with_suffix(view, &stem, ".shape")) {
        Ok(s) if s == want_shape => {}
        other => errs.push(format!("{key}: .shape {other:?} want {want_shape:?}")),
    }
    let want_dtype = format!("{}\n", rec["dtype"].as_str().unwrap_or(""));
    match std::fs::read_to_string(with_suffix(view, &stem, ".dtype")) {
        Ok(s) if s == want_dtype => {}
        other => errs.push(format!("{key}: .dtype {other:?} want {want_dtype:?}")),
    }
    errs
}

fn check_view(view: &Path, expected: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let mut want_bins = BTreeSet::new();
    for rec in expected["tensors"].as_array().expect("tensors") {
        let sha = rec["sha256"].as_str().expect("sha256");
        errs.extend(check_tensor(
            view,
            rec,
            sha,
            rec["nbytes"].as_u64().expect("nbytes"),
        ));
        want_bins.insert(with_suffix(Path::new(""), &stem_path(rec), ".bin"));
    }
    // Tensors TF cannot return (variant) are served as stored.
    for rec in expected["unreadable_entries"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let stored = &rec["stored"];
        errs.extend(check_tensor(
            view,
            rec,
            stored["sha256"].as_str().expect("stored sha"),
            stored["size"].as_u64().expect("stored size"),
        ));
        want_bins.insert(with_suffix(Path::new(""), &stem_path(rec), ".bin"));
    }
    // The listing shows exactly these tensors: no slice entries, no header.
    let got_bins: BTreeSet<_> = walk_files(view)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    if got_bins != want_bins {
        errs.push(format!(
            "listing differs: extra {:?} missing {:?}",
            got_bins.difference(&want_bins).collect::<Vec<_>>(),
            want_bins.difference(&got_bins).collect::<Vec<_>>()
        ));
    }
    errs
}

#[test]
fn every_fixture_matches_tensorflow() {
    // Without numpy the numpy.load checks are left out (and the skip is reported).
    let py = common::requires::python("numpy", "every_fixture_matches_tensorflow: numpy.load");
    let mut errs = Vec::new();
    let mut checked = 0;
    for entry in manifest() {
        let name = entry["name"].as_str().expect("name");
        let mut m = Mount::start(
            &fixtures().join(entry["source"].as_str().expect("source")),
            &[],
        );
        let root = m.path();
        for (dir, json) in entry["views"].as_object().expect("views") {
            let expected = load_json(json.as_str().expect("json path"));
            let view = root.join(dir);
            for e in check_view(&view, &expected) {
                errs.push(format!("{name}/{dir}: {e}"));
            }
            checked += expected["tensors"].as_array().map_or(0, |a| a.len());
            if let Some(py) = &py {
                let out = Command::new(py)
                    .arg(fixtures().join("../../scripts/check_npy.py"))
                    .arg(&view)
                    .arg(fixtures().join(json.as_str().unwrap_or("")))
                    .output()
                    .expect("run check_npy.py");
                if !out.status.success() {
                    errs.push(format!(
                        "{name}/{dir}: numpy check failed: {}",
                        String::from_utf8_lossy(&out.stdout)
                    ));
                }
            }
        }
        for (link, target) in entry["symlinks"].as_object().into_iter().flatten() {
            let got = std::fs::read_link(root.join(link)).ok();
            if got.as_deref() != Some(Path::new(target.as_str().unwrap_or(""))) {
                errs.push(format!("{name}: symlink {link} -> {got:?}, want {target}"));
            }
            if !root.join(link).join("variables").is_dir() {
                errs.push(format!("{name}: {link}/variables does not resolve"));
            }
        }
        for absent in entry["absent"].as_array().into_iter().flatten() {
            if root.join(absent.as_str().unwrap_or("")).exists() {
                errs.push(format!("{name}: {absent} should not be shown"));
            }
        }
        for (file, sha) in entry["passthrough"].as_object().into_iter().flatten() {
            match std::fs::read(root.join(file)) {
                Ok(b) if sha256_hex(&b) == sha.as_str().unwrap_or("") => {}
                other => errs.push(format!(
                    "{name}: passthrough {file}: {:?}",
                    other.map(|b| b.len())
                )),
            }
        }
        assert_eq!(
            m.unmount(),
            Some(0),
            "{name}: daemon exit status; log:\n{}",
            m.log_text()
        );
    }
    assert!(checked > 100, "only {checked} tensors checked");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

#[test]
fn files_are_read_only_with_source_times() {
    let src = fixtures().join("tf2_keras/ckpt-1");
    let m = Mount::start(&src, &[]);
    let index_meta = std::fs::metadata(fixtures().join("tf2_keras/ckpt-1.index")).expect("index");
    let files = walk_files(&m.path().join("variables"));
    assert!(!files.is_empty());
    let f = m.path().join("variables").join(&files[0]);
    let meta = std::fs::metadata(&f).expect("stat");
    assert_eq!(meta.mtime(), index_meta.mtime());
    assert_eq!(meta.mode() & 0o222, 0, "no write bits");
    let err = std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .expect_err("write must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let err = std::fs::write(m.path().join("variables/new"), b"x").expect_err("create must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    // statfs answers.
    let out = Command::new("stat")
        .args(["-f", "-c", "%l %b"])
        .arg(m.path())
        .output()
        .expect("stat -f");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("255 "));
}

#[test]
fn key_xattr_names_the_raw_key() {
    let m = Mount::start(&fixtures().join("all_dtypes/ckpt"), &[]);
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", "user.tfmount.key"])
        .arg(m.path().join("variables/odd/%2E/y.bin"))
        .output();
    match out {
        Ok(o) if o.status.success() => assert_eq!(o.stdout, b"odd/./y"),
        _ => {
            // getfattr (attr package) is optional; fall back to the syscall.
            let p = std::ffi::CString::new(
                m.path()
                    .join("variables/odd/%2E/y.bin")
                    .into_os_string()
                    .into_encoded_bytes(),
            )
            .expect("path");
            let name = std::ffi::CString::new("user.tfmount.key").expect("name");
            let mut buf = [0u8; 64];
            let n = unsafe {
                libc::getxattr(
                    p.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            assert_eq!(&buf[..n as usize], b"odd/./y");
        }
    }
}

#[test]
fn daemon_mode_returns_when_ready_and_reports_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).expect("mkdir");
    let bin = env!("CARGO_BIN_EXE_tfmount");
    let src = fixtures().join("demo_savedmodel");
    let st = Command::new(bin).arg(&src).arg(&mp).status().expect("run");
    assert!(st.success());
    // Ready on return: no polling.
    let shape = std::fs::read_to_string(
        mp.join("variables").join(
            walk_files(&mp.join("variables"))
                .into_iter()
                .find(|p| p.extension().is_some_and(|e| e == "shape"))
                .expect("a tensor"),
        ),
    );
    assert!(shape.is_ok());
    // Mounting twice on the same point is refused.
    let out = Command::new(bin).arg(&src).arg(&mp).output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already a mount point"));
    assert!(Command::new("fusermount3")
        .arg("-u")
        .arg(&mp)
        .status()
        .expect("umount")
        .success());
    // Errors come with their exit codes and name the path.
    let out = Command::new(bin)
        .arg(dir.path().join("nope"))
        .arg(&mp)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    let out = Command::new(bin)
        .arg(dir.path())
        .arg(&mp)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "a directory with nothing in it");
    let out = Command::new(bin)
        .arg(&src)
        .arg(dir.path().join("missing"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    let out = Command::new(bin)
        .arg(&src)
        .arg(src.join("saved_model.pb"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4), "mount point is a file");
    let out = Command::new(bin)
        .args(["-o", "bogus"])
        .arg(&src)
        .arg(&mp)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn killed_daemon_leaves_no_mount_behind() {
    let mut m = Mount::start(&fixtures().join("tf2_keras/ckpt-1"), &[]);
    let mp = m.path();
    unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) };
    let child = m.child.take().expect("child");
    wait_with_timeout(child, std::time::Duration::from_secs(10));
    let t0 = std::time::Instant::now();
    while is_mounted(&mp) && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!is_mounted(&mp), "stale mount left after SIGKILL");
}

#[test]
fn sigterm_unmounts_cleanly() {
    let mut m = Mount::start(&fixtures().join("tf2_keras/ckpt-1"), &[]);
    unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) };
    let child = m.child.take().expect("child");
    assert_eq!(
        wait_with_timeout(child, std::time::Duration::from_secs(10)),
        Some(0)
    );
    assert!(!is_mounted(&m.path()));
}

/// `find -printf` over a mount: one line per entry with path, type, size, mode, mtime, owner.
fn find_listing(root: &Path) -> Vec<Vec<u8>> {
    let out = Command::new("find")
        .arg(root)
        .args(["-mindepth", "1", "-printf", "%P\t%y\t%s\t%m\t%T@\t%U\t%G\n"])
        .output()
        .expect("run find");
    assert!(out.status.success(), "find failed: {out:?}");
    let mut lines: Vec<Vec<u8>> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    lines.sort();
    lines
}

/// The fields after the path, from a `stat` by name (no directory listed on the way).
fn stat_fields(path: &Path) -> Vec<String> {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = if m.is_dir() {
        "d"
    } else if m.file_type().is_symlink() {
        "l"
    } else {
        "f"
    };
    vec![
        t.to_string(),
        m.len().to_string(),
        format!("{:o}", m.mode() & 0o7777),
        format!("{}.{:09}", m.mtime(), m.mtime_nsec()),
        m.uid().to_string(),
        m.gid().to_string(),
    ]
}

/// Listings hand the kernel every entry's attributes (READDIRPLUS) so `find`/`ls -l` need no
/// lookup per name: what a listing says must be what a lookup by name says, in a fresh mount
/// that never listed anything, and every size must be the number of bytes the file reads.
#[test]
fn listings_agree_with_lookups() {
    use std::os::unix::ffi::OsStrExt;
    for src in [
        "tf1_adam",
        "all_dtypes/ckpt",
        "partitioned/model.ckpt",
        "demo_savedmodel",
    ] {
        let listed = Mount::start(&fixtures().join(src), &[]);
        let lines = find_listing(&listed.path());
        assert!(lines.len() > 10, "{src}: only {} entries", lines.len());
        let looked_up = Mount::start(&fixtures().join(src), &[]);
        let mut errs = Vec::new();
        for line in &lines {
            let mut f = line.split(|&b| b == b'\t');
            let rel = Path::new(std::ffi::OsStr::from_bytes(f.next().unwrap_or_default()));
            let mut got: Vec<String> = f.map(|x| String::from_utf8_lossy(x).into()).collect();
            // find prints mtimes with 10 decimals, stat has nanoseconds.
            let t = got[3].len().saturating_sub(1);
            got[3].truncate(t);
            let want = stat_fields(&looked_up.path().join(rel));
            if got != want {
                errs.push(format!(
                    "{}: listing {got:?}, lookup {want:?}",
                    rel.display()
                ));
            }
            if got[0] == "f" {
                let n = std::fs::read(listed.path().join(rel)).map(|b| b.len().to_string());
                if n.as_deref().ok() != Some(got[1].as_str()) {
                    errs.push(format!("{}: size {}, read {n:?}", rel.display(), got[1]));
                }
            }
        }
        assert!(errs.is_empty(), "{src}:\n{}", errs.join("\n"));
        // `ls -l` (a stat of every entry) works over the whole tree.
        let out = Command::new("ls")
            .arg("-lR")
            .arg(listed.path())
            .output()
            .expect("ls");
        assert!(out.status.success(), "{src}: ls -lR: {out:?}");
    }
}
