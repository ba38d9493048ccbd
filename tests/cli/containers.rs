//! Mounts where the daemon may not mount (docs/containers.md): a privileged step opens
//! /dev/fuse and mounts it (`tfmount mount-helper`), and tfmount, without CAP_SYS_ADMIN, serves
//! the descriptor as the mount point `/dev/fd/N`. Run in a user and mount namespace
//! (`unshare -Urm`), whose root may mount FUSE: the mount is seen only inside it, so each test
//! runs one shell script there and reports what it saw through files in a temporary directory.
//! Every wait is bounded.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

const TFMOUNT: &str = env!("CARGO_BIN_EXE_tfmount");

/// The longest a namespace script may run.
const LIMIT: Duration = Duration::from_secs(60);

/// Whether a user and mount namespace can be made here (`unshare -Urm`), and /dev/fuse opened
/// in it; records a skip for `test` when not.
fn user_namespaces(test: &str) -> bool {
    if requires::program("unshare", &[], test).is_none()
        || requires::program("setpriv", &[], test).is_none()
    {
        return false;
    }
    let ok = Command::new("unshare")
        .args(["-Urm", "sh", "-c", "exec 3<>/dev/fuse"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
        .and_then(|c| wait_with_timeout(c, Duration::from_secs(10)))
        == Some(0);
    ok || requires::missing(
        "user namespaces (unshare -Urm) in which /dev/fuse can be opened",
        test,
    )
}

/// Runs `script` with `sh` in a new user and mount namespace, with `env`; returns its exit
/// status (`None`: it ran past [`LIMIT`] and was killed) and what it wrote to stderr.
fn in_namespace(dir: &Path, script: &str, env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let err = dir.join("script.err");
    let child = Command::new("unshare")
        .args(["-Urm", "sh", "-c", script])
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("TFMOUNT", TFMOUNT)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("spawn unshare");
    let code = wait_with_timeout(child, LIMIT);
    (code, std::fs::read_to_string(&err).unwrap_or_default())
}

/// The expected bytes of `w` in `demo_savedmodel` (TensorFlow's record: length and SHA-256),
/// and its `.bin` below the mount.
fn demo_w() -> (PathBuf, String, u64) {
    let exp = load_json("expected/demo_savedmodel.json");
    let rec = exp["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .find(|t| t["key"] == "w/.ATTRIBUTES/VARIABLE_VALUE")
        .expect("w in the record")
        .clone();
    let bin = with_suffix(Path::new("variables"), &stem_path(&rec), ".bin");
    (
        bin,
        rec["sha256"].as_str().expect("sha256").to_string(),
        rec["nbytes"].as_u64().expect("nbytes"),
    )
}

/// CapEff of a `/proc/PID/status` text, as a number.
fn cap_eff(status: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap_or_else(|| panic!("no CapEff in {status:?}"));
    u64::from_str_radix(line.trim(), 16).expect("CapEff is hex")
}

const CAP_SYS_ADMIN: u32 = 21;

/// Waits (bounded) for MNT in mountinfo and the daemon's pid in $D/pid, reads the tensor,
/// the daemon's status, then unmounts; shared by the scripts below. Exit codes 90+ say which
/// step failed.
const READ_AND_UNMOUNT: &str = r#"
i=0
until [ -s "$D/pid" ] && grep -q " $MNT " /proc/self/mountinfo; do
  i=$((i+1)); [ $i -lt 300 ] || { echo "no mount after 30s" >&2; exit 90; }; sleep 0.1
done
P=$(cat "$D/pid")
timeout 20 cat "$MNT/$BIN" > "$D/read.bin" || { echo "read failed" >&2; exit 91; }
cat /proc/$P/status > "$D/daemon.status"
grep -q "nosuid,nodev" /proc/self/mountinfo || { echo "mount flags" >&2; exit 92; }
umount "$MNT" || { echo "umount failed" >&2; exit 93; }
i=0
while [ -e /proc/$P ] && ! grep -q '^State:.*Z' /proc/$P/status 2>/dev/null; do
  i=$((i+1)); [ $i -lt 200 ] || { echo "daemon $P still running 20s after umount" >&2; exit 94; }; sleep 0.1
done
"#;

fn check_read(dir: &Path, bin: &Path, sha: &str, len: u64) {
    let got = std::fs::read(dir.join("read.bin")).expect("read.bin");
    assert_eq!(got.len() as u64, len, "{}: length", bin.display());
    assert_eq!(
        sha256_hex(&got),
        sha,
        "{}: bytes differ from TensorFlow's",
        bin.display()
    );
    let status = std::fs::read_to_string(dir.join("daemon.status")).expect("daemon.status");
    let eff = cap_eff(&status);
    assert_eq!(
        eff & (1 << CAP_SYS_ADMIN),
        0,
        "the daemon had CAP_SYS_ADMIN (CapEff {eff:016x})"
    );
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf, String, u64) {
    let d = tempfile::tempdir().expect("tempdir");
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let (bin, sha, len) = demo_w();
    (d, mnt, bin, sha, len)
}

/// `tfmount mount-helper` mounts in the namespace; `tfmount -f SOURCE /dev/fd/3` serves it
/// with every capability dropped; a tensor reads as TensorFlow wrote it; `umount` ends the
/// daemon, which exits 0 (the helper's status is its status).
#[test]
fn helper_mounts_and_a_daemon_without_cap_sys_admin_serves_dev_fd() {
    if !user_namespaces("") {
        return;
    }
    let (d, mnt, bin, sha, len) = setup();
    let src = fixtures().join("demo_savedmodel");
    let script = format!(
        r#"
"$TFMOUNT" mount-helper "$MNT" -- sh -c 'echo $$ > "$D/pid.tmp" && mv "$D/pid.tmp" "$D/pid" && exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all "$TFMOUNT" -f -o allow_other "$SRC" /dev/fd/3' 2> "$D/helper.log" &
H=$!
{READ_AND_UNMOUNT}
i=0
while kill -0 $H 2>/dev/null; do
  i=$((i+1)); [ $i -lt 200 ] || {{ echo "helper still running" >&2; exit 95; }}; sleep 0.1
done
wait $H; echo $? > "$D/helper.status"
"#
    );
    let (code, err) = in_namespace(
        d.path(),
        &script,
        &[("D", d.path()), ("MNT", &mnt), ("SRC", &src), ("BIN", &bin)],
    );
    let log = std::fs::read_to_string(d.path().join("helper.log")).unwrap_or_default();
    assert_eq!(code, Some(0), "script: {err}\nhelper and daemon: {log}");
    check_read(d.path(), &bin, &sha, len);
    let helper = std::fs::read_to_string(d.path().join("helper.status")).expect("status");
    assert_eq!(
        helper.trim(),
        "0",
        "daemon's exit status, through the helper: {log}"
    );
    assert!(
        log.contains("-o allow_other ignored") && log.contains("the mounter's to set"),
        "one warning line for the mount-time option: {log}"
    );
    assert!(!is_mounted(&mnt), "nothing mounted outside the namespace");
}

/// The daemonizing form: `tfmount SOURCE /dev/fd/3` returns once it serves the descriptor
/// (the helper returns with it, status 0, leaving the mount), and the daemon ends when the
/// mount is unmounted.
#[test]
fn daemonizing_form_serves_dev_fd_until_unmounted() {
    if !user_namespaces("") {
        return;
    }
    let (d, mnt, bin, sha, len) = setup();
    let src = fixtures().join("demo_savedmodel");
    let daemon_log = d.path().join("daemon.log");
    let script = format!(
        r#"
timeout 30 "$TFMOUNT" mount-helper "$MNT" -- setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all "$TFMOUNT" --log-file "$LOG" "$SRC" /dev/fd/3 2> "$D/helper.log" || {{ echo "helper: $?" >&2; exit 80; }}
for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -qF -- "--log-file $LOG "; then echo ${{p#/proc/}} >> "$D/pids"; fi
done
[ $(wc -l < "$D/pids") = 1 ] || {{ echo "daemons: $(cat $D/pids)" >&2; exit 81; }}
mv "$D/pids" "$D/pid"
{READ_AND_UNMOUNT}
"#
    );
    let (code, err) = in_namespace(
        d.path(),
        &script,
        &[
            ("D", d.path()),
            ("MNT", &mnt),
            ("SRC", &src),
            ("BIN", &bin),
            ("LOG", &daemon_log),
        ],
    );
    let log = std::fs::read_to_string(&daemon_log).unwrap_or_default();
    let helper = std::fs::read_to_string(d.path().join("helper.log")).unwrap_or_default();
    assert_eq!(
        code,
        Some(0),
        "script: {err}\nhelper: {helper}\ndaemon: {log}"
    );
    check_read(d.path(), &bin, &sha, len);
}

/// The helper removes its mount when COMMAND fails, and exits with COMMAND's status.
#[test]
fn helper_unmounts_when_the_command_fails() {
    if !user_namespaces("") {
        return;
    }
    let (d, mnt, _, _, _) = setup();
    let script = r#"
"$TFMOUNT" mount-helper "$MNT" -- sh -c 'grep -q " $MNT " /proc/self/mountinfo && exit 7'
echo $? > "$D/status"
grep -q " $MNT " /proc/self/mountinfo && echo mounted > "$D/left"
exit 0
"#;
    let (code, err) = in_namespace(d.path(), script, &[("D", d.path()), ("MNT", &mnt)]);
    assert_eq!(code, Some(0), "{err}");
    let status = std::fs::read_to_string(d.path().join("status")).expect("status");
    assert_eq!(status.trim(), "7", "COMMAND's status: {err}");
    assert!(!d.path().join("left").exists(), "the mount was left: {err}");
    assert!(err.contains("exited with status 7;"), "{err}");
    assert!(err.contains("unmounted"), "{err}");
}

fn tfmount_sh(script: &str, env: &[(&str, &Path)]) -> Output {
    let child = Command::new("sh")
        .args(["-c", script])
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("TFMOUNT", TFMOUNT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(LIMIT);
        // SAFETY: a plain kill(2) of our own child, if it is still there.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("wait");
    drop(watchdog);
    out
}

/// `/dev/fd/N` that is not a mounted /dev/fuse descriptor is refused with a usage error
/// (status 2) naming it and what it is.
#[test]
fn dev_fd_of_something_else_is_refused_in_words() {
    let src = fixtures().join("demo_savedmodel");
    let file = fixtures().join("demo_savedmodel/saved_model.pb");
    let env: [(&str, &Path); 2] = [("SRC", &src), ("FILE", &file)];
    for (script, words) in [
        (
            r#"exec "$TFMOUNT" -f "$SRC" /dev/fd/7 7< "$FILE""#,
            "tfmount: /dev/fd/7: descriptor 7 is a regular file, not /dev/fuse (character device 10:229)",
        ),
        (
            r#"exec "$TFMOUNT" "$SRC" /dev/fd/7 7< /dev/null"#,
            "tfmount: /dev/fd/7: descriptor 7 is the character device 1:3, not /dev/fuse",
        ),
        (
            r#"exec "$TFMOUNT" -f "$SRC" /dev/fd/9"#,
            "tfmount: /dev/fd/9: descriptor 9 is not open in this process",
        ),
    ] {
        let out = tfmount_sh(script, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{script}: {err}");
        assert!(err.contains(words), "{script}: {err}");
        assert_eq!(err.lines().count(), 1, "{script}: one line: {err}");
    }
}

/// A /dev/fuse descriptor nobody mounted is refused (not waited on), in both forms; mount-time
/// options given with it are named in one warning line.
#[test]
fn unmounted_dev_fuse_descriptor_is_refused() {
    if !requires::fuse("") {
        return;
    }
    let src = fixtures().join("demo_savedmodel");
    for form in ["-f", "--threads=2"] {
        let script = format!(
            r#"exec "$TFMOUNT" {form} -o allow_other,nonempty,nocrc "$SRC" /dev/fd/5 5<> /dev/fuse"#
        );
        let out = tfmount_sh(&script, &[("SRC", &src)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{form}: {err}");
        assert!(
            err.contains("/dev/fd/5: this /dev/fuse descriptor is not mounted"),
            "{form}: {err}"
        );
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), 1, "{form}: {err}");
        assert!(
            warnings[0].contains("-o allow_other,nonempty ignored"),
            "{form}: {err}"
        );
    }
}

/// Finds the one process serving `$SRC` through a descriptor (`tfmount ... $SRC /dev/fd/N`)
/// and writes its pid to `$D/pid`.
const FIND_DAEMON: &str = r#"
for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -qF -- "$SRC /dev/fd/"; then echo ${p#/proc/} >> "$D/pids"; fi
done
[ -s "$D/pids" ] && [ $(wc -l < "$D/pids") = 1 ] || { echo "daemons: $(cat $D/pids 2>/dev/null)" >&2; exit 81; }
mv "$D/pids" "$D/pid"
"#;

/// The other two ways docs/containers.md shows: a shell opens /dev/fuse and mounts it with
/// mount(8), tfmount serves it without capabilities; and mount.fuse3's `-o drop_privileges`
/// (what `mount -t fuse.tfmount` and /etc/fstab run), which passes `-o ...,dev,suid` along.
#[test]
fn plain_mount_and_mount_fuse3_hand_over_the_descriptor() {
    if !user_namespaces("") {
        return;
    }
    let Some(mount_fuse3) = requires::program(
        "mount.fuse3",
        &["/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"],
        "",
    ) else {
        return;
    };
    let (bin, sha, len) = demo_w();
    let bin_dir = Path::new(TFMOUNT).parent().expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = r#"
exec 3<>/dev/fuse
mount -i -t fuse.tfmount -o ro,nosuid,nodev,fd=3,rootmode=40000,user_id=0,group_id=0,default_permissions tfmount "$MNT" || exit 70
setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all tfmount "$SRC" /dev/fd/3 2> "$D/daemon.err" || exit 71
exec 3<&-
"#;
    let fuse3 = r#"
timeout 30 "$MOUNT_FUSE3" "tfmount#$SRC" "$MNT" -o drop_privileges 2> "$D/daemon.err" || exit 72
"#;
    for (way, start) in [("mount -i", shell), ("mount.fuse3", fuse3)] {
        let d = tempfile::tempdir().expect("tempdir");
        let mnt = d.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir");
        // A path of its own, so that the daemon is found by it.
        let src = d.path().join("model");
        std::os::unix::fs::symlink(fixtures().join("demo_savedmodel"), &src).expect("symlink");
        let script =
            format!("export PATH=\"$TESTPATH\"\n{start}\n{FIND_DAEMON}\n{READ_AND_UNMOUNT}");
        let (code, err) = in_namespace(
            d.path(),
            &script,
            &[
                ("D", d.path()),
                ("MNT", &mnt),
                ("SRC", &src),
                ("BIN", &bin),
                ("MOUNT_FUSE3", &mount_fuse3),
                ("TESTPATH", Path::new(&path)),
            ],
        );
        let daemon = std::fs::read_to_string(d.path().join("daemon.err")).unwrap_or_default();
        assert_eq!(code, Some(0), "{way}: {err}\ndaemon: {daemon}");
        check_read(d.path(), &bin, &sha, len);
        assert!(
            !daemon.contains("warning"),
            "{way}: options that change nothing are not warned about: {daemon}"
        );
    }
}

/// `-o dev` and `-o suid` (which mount.fuse3 passes with /dev/fd/N) are refused for a mount
/// tfmount makes itself: its mounts are always nodev and nosuid.
#[test]
fn dev_and_suid_are_refused_for_a_mount_of_its_own() {
    let d = tempfile::tempdir().expect("tempdir");
    let src = fixtures().join("demo_savedmodel");
    for o in ["dev", "suid"] {
        let out = Command::new(TFMOUNT)
            .args(["-f", "-o", o])
            .arg(&src)
            .arg(d.path())
            .stdin(Stdio::null())
            .output()
            .expect("run tfmount");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{o}: {err}");
        assert!(
            err.contains(&format!(
                "-o {o}: tfmount mounts are always nodev and nosuid"
            )),
            "{o}: {err}"
        );
    }
}

/// SIGTERM to the helper unmounts: `tfmount -f` ends with status 0 (the helper's too); a job
/// that started the daemon in the background and still runs gets the signal 2 s later, the
/// helper exiting with its status (143), and the daemon ends with the mount.
#[test]
fn sigterm_to_the_helper_unmounts_and_reaches_a_job() {
    if !user_namespaces("") {
        return;
    }
    let (d, mnt, bin, _, _) = setup();
    let src = d.path().join("model");
    std::os::unix::fs::symlink(fixtures().join("demo_savedmodel"), &src).expect("symlink");
    let script = format!(
        r#"
wait_gone() {{ i=0; while [ -e /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; do
  i=$((i+1)); [ $i -lt 200 ] || {{ echo "$2: $1 still running" >&2; exit 96; }}; sleep 0.1; done; }}
wait_mounted() {{ i=0; until grep -q " $MNT " /proc/self/mountinfo && [ -s "$D/pid" ] && timeout 10 cat "$MNT/$BIN" > /dev/null; do
  i=$((i+1)); [ $i -lt 300 ] || {{ echo "$1: not served" >&2; exit 97; }}; sleep 0.1; done; }}

"$TFMOUNT" mount-helper "$MNT" -- sh -c 'echo $$ > "$D/pid.tmp" && mv "$D/pid.tmp" "$D/pid" && exec "$TFMOUNT" -f "$SRC" /dev/fd/3' 2>> "$D/helper.log" &
H=$!
wait_mounted foreground
kill -TERM $H
wait_gone $H foreground; wait $H; echo "foreground $?" >> "$D/statuses"
grep -q " $MNT " /proc/self/mountinfo && {{ echo "foreground: still mounted" >&2; exit 98; }}
rm "$D/pid"

"$TFMOUNT" mount-helper "$MNT" -- sh -c '"$TFMOUNT" "$SRC" /dev/fd/3 && echo $$ > "$D/pid" && exec sleep 60' 2>> "$D/helper.log" &
H=$!
wait_mounted job
{FIND_DAEMON}
P=$(cat "$D/pid")
kill -TERM $H
wait_gone $H job; wait $H; echo "job $?" >> "$D/statuses"
wait_gone $P daemon
grep -q " $MNT " /proc/self/mountinfo && {{ echo "job: still mounted" >&2; exit 99; }}
exit 0
"#
    );
    let (code, err) = in_namespace(
        d.path(),
        &script,
        &[("D", d.path()), ("MNT", &mnt), ("SRC", &src), ("BIN", &bin)],
    );
    let log = std::fs::read_to_string(d.path().join("helper.log")).unwrap_or_default();
    assert_eq!(code, Some(0), "{err}\nhelper: {log}");
    let statuses = std::fs::read_to_string(d.path().join("statuses")).expect("statuses");
    assert_eq!(statuses, "foreground 0\njob 143\n", "helper: {log}");
}

/// A mount of its own without CAP_SYS_ADMIN (root with it dropped, as in a container) is
/// refused as permission denied (status 5), naming the way around it.
#[test]
fn mounting_without_cap_sys_admin_points_to_dev_fd() {
    if !requires::fuse("") {
        return;
    }
    let Some(capsh) = requires::program("capsh", &["/usr/sbin/capsh", "/sbin/capsh"], "") else {
        return;
    };
    let d = tempfile::tempdir().expect("tempdir");
    let src = fixtures().join("demo_savedmodel");
    let child = Command::new(capsh)
        .args([
            "--drop=cap_sys_admin",
            "--",
            "-c",
            r#"exec "$TFMOUNT" -f "$SRC" "$MNT""#,
        ])
        .env("TFMOUNT", TFMOUNT)
        .env("SRC", &src)
        .env("MNT", d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.path().with_extension("err")).expect("stderr"))
        .spawn()
        .expect("spawn capsh");
    let code = wait_with_timeout(child, LIMIT);
    let err = std::fs::read_to_string(d.path().with_extension("err")).unwrap_or_default();
    let _ = std::fs::remove_file(d.path().with_extension("err"));
    if is_mounted(d.path()) {
        let _ = Command::new("umount").arg("-l").arg(d.path()).status();
        panic!("mounted without CAP_SYS_ADMIN: {err}");
    }
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("mount failed: permission denied")
            && err.contains("/dev/fd/N (tfmount mount-helper"),
        "{err}"
    );
}
