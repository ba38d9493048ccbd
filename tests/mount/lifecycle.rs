//! Real mounts: the daemon's lifecycle (signals, unmounting with files open, SIGKILL with files
//! open) and least privilege (no other users unless asked, read-only at every layer, modes no
//! wider than the source files', names that stay inside the mount).

use crate::common;

use std::collections::BTreeSet;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::synthetic::*;
use common::*;
use tfmount::testkit::writer::CheckpointWriter;

const WAIT: Duration = Duration::from_secs(20);

/// The super options of the mount at `mp` in /proc/self/mountinfo, and its per-mount options.
fn mount_options(mp: &Path) -> Option<(String, String)> {
    let canon = std::fs::canonicalize(mp).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        if f.get(4) != Some(&canon.to_str()?) {
            return None;
        }
        let sep = f.iter().position(|x| *x == "-")?;
        Some((f.get(sep + 3)?.to_string(), f.get(5)?.to_string()))
    })
}

/// Checks as another user need root (to become `nobody`, and to mount with `allow_other`
/// without `user_allow_other`).
fn root() -> bool {
    let r = unsafe { libc::geteuid() } == 0;
    if !r {
        eprintln!("not root: skipping the checks made as another user");
    }
    r
}

/// Runs `cat path` as the user `nobody`; returns whether it succeeded, and its stderr.
fn cat_as_nobody(path: &Path) -> (bool, String) {
    let out = Command::new("cat")
        .arg(path)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run cat as nobody");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A small checkpoint: one float32 tensor `w` [64] in one shard.
fn small_checkpoint(dir: &Path) -> (PathBuf, Vec<u8>) {
    let prefix = dir.join("small.ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let bytes = pseudo_bytes(3, 256);
    w.add(b"w", F32, &[64], &bytes, 0).expect("add");
    w.finish().expect("finish");
    (prefix, bytes)
}

fn wait_exit(m: &mut Mount) -> Option<i32> {
    let child = m.child.take().expect("child");
    wait_with_timeout(child, WAIT)
}

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

#[test]
fn sigint_unmounts_cleanly() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let mut m = Mount::start(&prefix, &[]);
    unsafe { libc::kill(m.pid() as i32, libc::SIGINT) };
    assert_eq!(wait_exit(&mut m), Some(0));
    assert!(!is_mounted(&m.path()));
}

/// SIGTERM while files are open: the mount cannot be unmounted normally (busy), so the daemon
/// detaches it lazily and exits (as libfuse daemons do); the open files then fail with
/// ENOTCONN, and nothing hangs.
#[test]
fn signal_with_files_open_detaches_and_exits() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, bytes) = small_checkpoint(tmp.path());
    let mut m = Mount::start(&prefix, &[]);
    // O_DIRECT: every read goes to the daemon, none is answered from the page cache.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.path().join("variables/w.bin"))
        .expect("open");
    let mut buf = [0u8; 256];
    assert_eq!(f.read_at(&mut buf, 0).expect("read"), 256);
    assert_eq!(buf[..], bytes[..]);
    let dir = std::fs::File::open(m.path().join("variables")).expect("open dir");
    unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) };
    assert_eq!(wait_exit(&mut m), Some(0), "{}", m.log_text());
    assert!(!is_mounted(&m.path()));
    let err = f
        .read_at(&mut buf, 0)
        .expect_err("read after the daemon exited");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    drop((f, dir));
    assert!(
        m.log_text().contains("detaching it lazily"),
        "{}",
        m.log_text()
    );
}

/// `fusermount3 -u` refuses a busy mount (like any filesystem's umount); `fusermount3 -u -z`
/// detaches it at once, files already open keep reading, and the daemon exits (status 0) when
/// the last one is closed.
#[test]
fn unmount_with_files_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, bytes) = small_checkpoint(tmp.path());
    let mut m = Mount::start(&prefix, &[]);
    let mp = m.path();
    let f = std::fs::File::open(mp.join("variables/w.bin")).expect("open");
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(&mp)
        .output()
        .expect("fusermount3");
    assert!(!out.status.success(), "unmounted while busy");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mp));
    let st = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&mp)
        .status()
        .expect("fusermount3 -z");
    assert!(st.success());
    assert!(!is_mounted(&mp));
    // Detached, not dead: the open file still reads, past what the page cache holds too.
    let mut buf = [0u8; 256];
    assert_eq!(f.read_at(&mut buf, 0).expect("read after -z"), 256);
    assert_eq!(buf[..], bytes[..]);
    assert!(
        m.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none()),
        "the daemon exited while a file was open"
    );
    drop(f);
    assert_eq!(wait_exit(&mut m), Some(0), "{}", m.log_text());
}

/// SIGKILL while a file is open: the watchdog removes the mount, the open file fails with
/// ENOTCONN, nothing hangs.
#[test]
fn sigkill_with_files_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let mut m = Mount::start(&prefix, &[]);
    let mp = m.path();
    let f = std::fs::File::open(mp.join("variables/w.shape")).expect("open");
    unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) };
    wait_exit(&mut m);
    let t0 = std::time::Instant::now();
    while is_mounted(&mp) && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!is_mounted(&mp), "stale mount after SIGKILL");
    let mut buf = [0u8; 16];
    let err = f.read_at(&mut buf, 0).expect_err("read from a dead daemon");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
}

/// The errors before mounting, in the foreground too: each with its documented exit code and a
/// message naming the path.
#[test]
fn mount_point_errors_have_their_exit_codes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let bin = env!("CARGO_BIN_EXE_tfmount");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").expect("file");
    let m = Mount::start(&prefix, &[]);
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("mine.txt"), b"x").expect("file");
    for (mp, code, what) in [
        (
            tmp.path().join("missing"),
            4,
            "mount point: no such file or directory (create it first: mkdir -p",
        ),
        (file.clone(), 4, "not a directory"),
        (m.path(), 4, "already a mount point"),
        (full.clone(), 4, "mount point is not empty"),
    ] {
        let out = Command::new(bin)
            .arg("-f")
            .arg(&prefix)
            .arg(&mp)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{}: {err}", mp.display());
        assert!(
            err.contains(what) && err.contains(&*mp.to_string_lossy()),
            "{err}"
        );
        assert!(!err.contains("os error"), "{err}");
    }
    // -o nonempty mounts over the files, which are back after the unmount.
    let mut child = Command::new(bin)
        .args(["-f", "-o", "nonempty"])
        .arg(&prefix)
        .arg(&full)
        .spawn()
        .expect("spawn");
    let t0 = std::time::Instant::now();
    while !common::is_mounted(&full) {
        assert!(t0.elapsed().as_secs() < 20, "-o nonempty did not mount");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(full.join("variables").is_dir() && !full.join("mine.txt").exists());
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&full)
        .status()
        .expect("fusermount3");
    assert!(st.success());
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    assert_eq!(std::fs::read(full.join("mine.txt")).expect("back"), b"x");
}

/// SOURCE and MOUNTPOINT given in the wrong order (an empty directory first, then a model or a
/// URL) are said to be so, with the command in the right order, not "mkdir -p MODEL".
#[test]
fn swapped_source_and_mount_point_are_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).expect("mkdir");
    let sm = fixtures().join("demo_savedmodel");
    for model in [prefix.clone(), sm, PathBuf::from("s3://bucket/run/ckpt-1")] {
        let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .arg("-f")
            .arg(&mp)
            .arg(&model)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        let want = format!(
            "tfmount: {m}: a model, not a mount point: SOURCE comes first, then MOUNTPOINT (tfmount {m} {})\n",
            mp.display(),
            m = model.display()
        );
        assert_eq!(err, want);
        assert!(!is_mounted(&mp));
    }
}

/// A user other than root refused by FUSE is told what to check (/dev/fuse's mode, fusermount3,
/// a container's device and capability), not "Permission denied (os error 13)".
#[test]
fn permission_denied_at_mount_says_what_to_check() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).expect("mkdir");
    for p in [tmp.path(), mp.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let mut readable = vec![tmp.path().to_path_buf()];
    readable.extend(
        std::fs::read_dir(tmp.path())
            .expect("ls")
            .map(|e| e.expect("entry").path()),
    );
    for p in readable {
        let mode = if p.is_dir() { 0o777 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    // A copy of the binary in the world-readable temporary directory: the checkout (and so
    // target/) may sit below a directory `nobody` cannot enter (a clone in a `mktemp -d`).
    let exe = tmp.path().join("tfmount");
    std::fs::copy(env!("CARGO_BIN_EXE_tfmount"), &exe).expect("copy the binary");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(&exe)
        .arg("-f")
        .arg(&prefix)
        .arg(&mp)
        .uid(65534)
        .gid(65534)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run as nobody");
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || is_mounted(&mp) {
        // This machine lets any user mount through FUSE: nothing to say.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&mp)
            .status();
        eprintln!("mounting as nobody worked here: no refusal to check");
        return;
    }
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "tfmount: {}: mount failed: permission denied: ",
            mp.display()
        )),
        "{err}"
    );
    assert!(
        ["/dev/fuse", "fusermount3", "SYS_ADMIN"]
            .iter()
            .any(|w| err.contains(w)),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
}

/// Runs `tfmount -f SOURCE MP` (and `extra`) that must refuse before mounting: its exit code
/// and stderr. Should it mount anyway (the refusal missing), the mount is removed without
/// anything being read from it, so a failing test leaves no mount behind.
fn refused(source: &Path, mp: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let err_path = mp.with_extension("stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("-f")
        .args(extra)
        .arg(source)
        .arg(mp)
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let mut exited = None;
    let t0 = std::time::Instant::now();
    let mut child = Some(child);
    while t0.elapsed() < WAIT {
        if let Some(s) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            exited = Some(s.code());
            break;
        }
        if is_mounted(mp) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if exited.is_none() {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(mp)
            .status();
        let code = child.take().and_then(|c| wait_with_timeout(c, WAIT));
        panic!(
            "tfmount {} {} (pid {pid}) mounted instead of refusing (exit {code:?}): {}",
            source.display(),
            mp.display(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
    }
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    (exited.flatten(), err)
}

/// A mount point inside the tree a mount serves is refused before mounting, naming both paths
/// (else `ls -R` of it lists itself without end and the daemon's reads of its own mount wait for
/// each other forever): inside a SavedModel's `assets/`, reached through a symlink from outside,
/// inside a checkpoint directory, inside a Keras directory; and a SOURCE inside the mount point
/// (`-o nonempty`) is refused too. A mount point beside a SOURCE file still mounts.
#[test]
fn mount_point_inside_its_source_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let sm = tmp.path().join("smcopy");
    let st = Command::new("cp")
        .arg("-r")
        .arg(fixtures().join("demo_savedmodel"))
        .arg(&sm)
        .status()
        .expect("cp");
    assert!(st.success());
    let inner = sm.join("assets").join("mnt");
    std::fs::create_dir_all(&inner).expect("mkdir");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&inner, &link).expect("symlink");
    let ckdir = tmp.path().join("train");
    std::fs::create_dir(&ckdir).expect("mkdir");
    let (prefix, _) = small_checkpoint(&ckdir);
    let ck_mp = ckdir.join("mnt");
    std::fs::create_dir(&ck_mp).expect("mkdir");
    let kdir = tmp.path().join("kerasdir");
    std::fs::create_dir(&kdir).expect("mkdir");
    std::fs::copy(
        fixtures().join("keras/model.weights.h5"),
        kdir.join("a.weights.h5"),
    )
    .expect("copy");
    let k_mp = kdir.join("sub").join("mnt");
    std::fs::create_dir_all(&k_mp).expect("mkdir");
    for (source, mp) in [
        (&sm, &inner),
        (&sm, &link),
        (&sm.join("saved_model.pb"), &inner),
        (&ckdir, &ck_mp),
        (&kdir, &k_mp),
    ] {
        let (code, err) = refused(source, mp, &[]);
        assert_eq!(
            code,
            Some(4),
            "{} {}: {err}",
            source.display(),
            mp.display()
        );
        assert!(
            err.contains("mount point is inside the source")
                && err.contains(&*mp.to_string_lossy())
                && err.contains(&*source.to_string_lossy()),
            "{err}"
        );
        assert!(!is_mounted(mp));
    }
    // SOURCE inside the mount point (which -o nonempty would allow over files).
    let (code, err) = refused(&prefix, &ckdir, &["-o", "nonempty"]);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("is inside this mount point") && err.contains(&*prefix.to_string_lossy()),
        "{err}"
    );
    // A mount point beside a SOURCE file is not inside it.
    let mut m = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("-f")
        .arg(&prefix)
        .arg(&ck_mp)
        .spawn()
        .expect("spawn");
    within(WAIT, "the mount beside its source", || is_mounted(&ck_mp));
    assert!(ck_mp.join("variables").is_dir());
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&ck_mp)
        .status()
        .expect("fusermount3");
    assert!(st.success());
    assert_eq!(m.wait().expect("wait").code(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// Least privilege
// ---------------------------------------------------------------------------------------------

/// Without `-o allow_other` only the mounting user (root here) gets in; with it, others may read
/// what the modes allow. The mount is read-only in the kernel's eyes (`ro`), nosuid, nodev.
#[test]
fn other_users_only_when_asked() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    for f in std::fs::read_dir(tmp.path()).expect("readdir") {
        let p = f.expect("dirent").path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    for allow in [false, true] {
        let args: &[&str] = if allow { &["-o", "allow_other"] } else { &[] };
        let m = Mount::start(&prefix, args);
        std::fs::set_permissions(m.dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let (sup, per_mount) = mount_options(&m.path()).expect("in mountinfo");
        for o in ["ro", "nosuid", "nodev"] {
            assert!(
                per_mount.split(',').any(|x| x == o),
                "{o} missing: {per_mount}"
            );
        }
        assert!(sup.split(',').any(|x| x == "default_permissions"), "{sup}");
        assert_eq!(sup.split(',').any(|x| x == "allow_other"), allow, "{sup}");
        let (ok, err) = cat_as_nobody(&m.path().join("variables/w.shape"));
        assert_eq!(ok, allow, "allow_other={allow}: {err}");
    }
}

/// Files get at most the read bits every source file grants (the index and each shard), and
/// the kernel enforces them for other users.
#[test]
fn modes_are_no_wider_than_the_source_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    let index = PathBuf::from(format!("{}.index", prefix.display()));
    let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
    for (index_mode, data_mode, file_mode, dir_mode) in [
        (0o644, 0o644, 0o444, 0o555),
        (0o644, 0o600, 0o400, 0o500),
        (0o640, 0o604, 0o400, 0o500),
        (0o440, 0o444, 0o440, 0o550),
    ] {
        std::fs::set_permissions(&index, std::fs::Permissions::from_mode(index_mode))
            .expect("chmod");
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(data_mode)).expect("chmod");
        let as_root = root();
        let m = Mount::start(&prefix, if as_root { &["-o", "allow_other"] } else { &[] });
        std::fs::set_permissions(m.dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let vars = m.path().join("variables");
        for name in ["w.bin", "w.shape", "w.dtype", "w.npy"] {
            let mode = std::fs::metadata(vars.join(name)).expect("stat").mode() & 0o7777;
            assert_eq!(
                mode, file_mode,
                "{name} with sources {index_mode:o}/{data_mode:o}"
            );
        }
        for d in [m.path(), vars.clone()] {
            let mode = std::fs::metadata(&d).expect("stat").mode() & 0o7777;
            assert_eq!(
                mode,
                dir_mode,
                "{} with sources {index_mode:o}/{data_mode:o}",
                d.display()
            );
        }
        if as_root {
            let (ok, _) = cat_as_nobody(&vars.join("w.bin"));
            assert_eq!(ok, file_mode & 0o004 != 0, "nobody reading {file_mode:o}");
        }
    }
}

/// Nothing is writable, by any route.
#[test]
fn read_only_at_every_layer() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    let m = Mount::start(&prefix, &[]);
    let mnt = m.path();
    let vars = mnt.join("variables");
    let bin = vars.join("dense/kernel.bin");
    let erofs = |what: &str, r: std::io::Result<()>| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs("create", std::fs::write(vars.join("new"), b"x"));
    erofs("mkdir", std::fs::create_dir(vars.join("d")));
    erofs("unlink", std::fs::remove_file(&bin));
    erofs("rmdir", std::fs::remove_dir(vars.join("dense/kernel")));
    erofs("rename", std::fs::rename(&bin, vars.join("k.bin")));
    erofs("symlink", std::os::unix::fs::symlink("x", vars.join("l")));
    erofs("link", std::fs::hard_link(&bin, vars.join("h")));
    erofs(
        "chmod",
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o666)),
    );
    erofs(
        "truncate",
        std::fs::OpenOptions::new()
            .write(true)
            .open(&bin)
            .and_then(|f| f.set_len(0)),
    );
    erofs(
        "set mtime",
        std::fs::File::open(&bin).and_then(|f| f.set_modified(std::time::UNIX_EPOCH)),
    );
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("path");
    let (p, name) = (c(&bin), CString::new("user.x").expect("name"));
    let r = unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EROFS)),
        "setxattr"
    );
    let r = unsafe { libc::chown(p.as_ptr(), 1, 1) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EROFS)),
        "chown"
    );
    let r = unsafe { libc::access(p.as_ptr(), libc::W_OK) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EROFS)),
        "access W_OK"
    );
    // No write bit anywhere; the sources are untouched.
    for p in walk_files(&mnt) {
        let mode = std::fs::metadata(mnt.join(&p)).expect("stat").mode();
        assert_eq!(mode & 0o222, 0, "{}", p.display());
    }
    let e = &model[&b"dense/kernel".to_vec()];
    assert_eq!(std::fs::read(&bin).expect("read"), e.bin);
}

/// Keys made to escape: `..`, `.`, empty components, absolute paths, NUL and newline bytes,
/// non-UTF-8 bytes, escapes that look like others, names ending in a file suffix, components
/// longer than a file name may be. Every one is reachable, once, inside the mount, and reads
/// its own bytes; nothing else appears.
#[test]
fn hostile_key_names_stay_inside_the_mount() {
    let keys: Vec<Vec<u8>> = vec![
        b"..".to_vec(),
        b".".to_vec(),
        b"../../../../etc/passwd".to_vec(),
        b"/abs/path".to_vec(),
        b"a//b".to_vec(),
        b"a/./b".to_vec(),
        b"a/../b".to_vec(),
        b"a/..".to_vec(),
        b"trailing/".to_vec(),
        b"nul\0in/the\0middle".to_vec(),
        b"new\nline".to_vec(),
        b"\xff\xfe/not utf8".to_vec(),
        b"%2E%2E".to_vec(),
        b"%".to_vec(),
        b"name.bin/leaf".to_vec(),
        b"name".to_vec(),
        [&b"long/"[..], &[b'x'; 300][..]].concat(),
        [&[b'y'; 400][..], &b"/leaf"[..]].concat(),
        [&"é".repeat(150).into_bytes()[..], &b"/z"[..]].concat(),
    ];
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("names.ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    for (i, k) in keys.iter().enumerate() {
        w.add(k, F32, &[1], &(i as f32).to_le_bytes(), 0)
            .expect("add");
    }
    w.finish().expect("finish");
    let m = Mount::start(&prefix, &[]);
    let mnt = std::fs::canonicalize(m.path()).expect("canon");
    let mut found = BTreeSet::new();
    let mut stack = vec![(mnt.join("variables"), 0)];
    while let Some((d, depth)) = stack.pop() {
        assert!(depth < 10, "{} nested too deep", d.display());
        for e in std::fs::read_dir(&d).expect("readdir") {
            let e = e.expect("dirent");
            let name = e.file_name();
            let n = name.as_bytes();
            assert!(n.len() <= 255 && !n.contains(&b'/') && n != b"." && n != b"..");
            let p = e.path();
            let real = std::fs::canonicalize(&p).expect("canonicalize");
            assert!(
                real.starts_with(&mnt),
                "{} escapes to {}",
                p.display(),
                real.display()
            );
            let ft = e.file_type().expect("type");
            if ft.is_dir() {
                stack.push((p, depth + 1));
            } else if n.ends_with(b".bin") {
                let c = CString::new(p.as_os_str().as_bytes()).expect("path");
                let attr = CString::new("user.tfmount.key").expect("name");
                let mut buf = vec![0u8; 1024];
                let len = unsafe {
                    libc::getxattr(
                        c.as_ptr(),
                        attr.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                assert!(len >= 0, "{}: getxattr", p.display());
                let key = buf[..len as usize].to_vec();
                let i = keys
                    .iter()
                    .position(|k| *k == key)
                    .unwrap_or_else(|| panic!("{}: unknown key {key:?}", p.display()));
                assert_eq!(
                    std::fs::read(&p).expect("read"),
                    (i as f32).to_le_bytes(),
                    "{}",
                    p.display()
                );
                assert!(found.insert(key), "{} shown twice", p.display());
                // The name resolves again by lookup (no readdir in between).
                assert!(std::fs::metadata(d.join(OsStr::from_bytes(n))).is_ok());
            }
        }
    }
    let want: BTreeSet<Vec<u8>> = keys.into_iter().collect();
    assert_eq!(found, want);
    // `..` from the top of the mount leads out of it only through the kernel (the mount
    // point's parent), never to a source file.
    assert_eq!(
        std::fs::canonicalize(mnt.join("variables/..")).expect("canon"),
        mnt
    );
}

/// A clean stop logs no warning (fuser used to log `Failed to umount filesystem` at every one),
/// and the ioctls Python's `open()` makes (TCGETS) are answered ENOTTY without a log line.
#[test]
fn python_open_and_a_clean_stop_log_no_warning() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, _) = small_checkpoint(tmp.path());
    for stop in ["fusermount3", "SIGTERM"] {
        let mut m = Mount::start(&prefix, &[]);
        let vars = m.path().join("variables");
        let first = std::fs::read_dir(&vars)
            .expect("readdir")
            .map(|e| e.expect("dirent").path())
            .find(|p| p.extension().is_some_and(|x| x == "bin"))
            .expect("a .bin");
        let out = Command::new("python3")
            .arg("-c")
            .arg("import sys; print(len(open(sys.argv[1], 'rb').read()))")
            .arg(&first)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if stop == "SIGTERM" {
            let pid = m.child.as_ref().expect("child").id() as i32;
            // SAFETY: a plain signal to our own child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            // The daemon unmounts by itself; nothing else races it.
            assert_eq!(wait_exit(&mut m), Some(0), "{stop}");
        } else {
            assert_eq!(m.unmount(), Some(0), "{stop}");
        }
        let log = std::fs::read_to_string(&m.log).expect("log");
        assert!(
            log.contains("mounted "),
            "{stop}: RUST_LOG=info logs: {log}"
        );
        assert!(
            !log.contains("WARN") && !log.contains("ERROR") && !log.contains("ioctl"),
            "{stop}: {log}"
        );
    }
}

/// Logging is set up before the source is opened: `RUST_LOG=info` shows the checkpoints a
/// state file lists that are gone (they used to be logged before the logger existed).
#[test]
fn skipped_checkpoints_are_logged() {
    let tmp = tempfile::tempdir().expect("tmp");
    small_checkpoint(tmp.path());
    std::fs::write(
        tmp.path().join("checkpoint"),
        "model_checkpoint_path: \"small.ckpt\"\nall_model_checkpoint_paths: \"gone.ckpt\"\n\
         all_model_checkpoint_paths: \"small.ckpt\"\n",
    )
    .expect("state file");
    let mut m = Mount::start(tmp.path(), &[]);
    assert!(m.path().join("small.ckpt/variables").is_dir());
    assert_eq!(m.unmount(), Some(0));
    let log = std::fs::read_to_string(&m.log).expect("log");
    assert!(
        log.contains("listed checkpoint gone.ckpt does not exist; skipped"),
        "{log}"
    );
    // At info, not warn: a CheckpointManager lists a pruned checkpoint at every save.
    assert!(
        log.lines()
            .filter(|l| l.contains("gone.ckpt"))
            .all(|l| l.contains("INFO") && !l.contains("WARN")),
        "{log}"
    );
}
