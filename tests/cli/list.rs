//! `tfmount list` and `tfmount umount` against real mounts made by the binary, and the line
//! `tfmount -f` prints once the mount serves.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use tfmount::testkit::requires;

fn fixture() -> PathBuf {
    fixtures().join("demo_savedmodel")
}

/// The line of `tfmount list` for `mp`, split at tabs; panics when there is none.
fn list_line(mp: &Path) -> Vec<String> {
    let out = String::from_utf8(tfmount_ok(&["list"])).expect("utf-8");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("MOUNTPOINT\tSOURCE\tPID\tOPTIONS\tCACHE"),
        "header: {out}"
    );
    let want = mp.to_string_lossy();
    lines
        .map(|l| l.split('\t').map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.first().map(String::as_str) == Some(want.as_ref()))
        .unwrap_or_else(|| panic!("{want} not listed: {out}"))
}

#[test]
fn list_shows_a_mount_and_umount_stops_its_daemon() {
    if !requires::fuse("list::list_shows_a_mount_and_umount_stops_its_daemon") {
        return;
    }
    let mut m = Mount::start(&fixture(), &["-o", "nocrc"]);
    let mp = std::fs::canonicalize(m.path()).expect("canonical mount point");
    let f = list_line(&mp);
    assert_eq!(f.len(), 5, "{f:?}");
    let src = std::fs::canonicalize(fixture()).expect("canonical source");
    assert_eq!(f[1], src.to_string_lossy(), "{f:?}");
    assert_eq!(f[2], m.pid().to_string(), "the daemon's pid: {f:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", f[2])).expect("cmdline");
    assert!(
        String::from_utf8_lossy(&cmdline).contains("tfmount"),
        "{f:?}"
    );
    assert_eq!(f[3], "nocrc", "{f:?}");
    // A local source: no disk cache.
    assert_eq!(f[4], "-", "{f:?}");
    // --json: the same mount, one object per line, no header; the pid a number.
    let out = tfmount_ok(&["list", "--json"]);
    let recs = common::json_lines(&out);
    assert!(recs.iter().all(|r| r["type"] == "mount"), "{recs:?}");
    let r = recs
        .iter()
        .find(|r| r["mountpoint"] == *mp.to_string_lossy())
        .unwrap_or_else(|| panic!("{} not in {recs:?}", mp.display()));
    assert_eq!(r["source"], *src.to_string_lossy(), "{r}");
    assert_eq!(r["pid"], m.pid(), "{r}");
    assert_eq!(r["options"], "nocrc", "{r}");

    let o = tfmount(&[std::ffi::OsStr::new("umount"), mp.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!is_mounted(&mp), "still mounted after tfmount umount");
    let child = m.child.take().expect("daemon");
    assert_eq!(
        wait_with_timeout(child, Duration::from_secs(10)),
        Some(0),
        "the daemon exits 0 after tfmount umount"
    );
    let listed = String::from_utf8(tfmount_ok(&["list"])).expect("utf-8");
    assert!(!listed.contains(&*mp.to_string_lossy()), "{listed}");
}

#[test]
fn umount_refuses_what_is_not_a_tfmount_mount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = tfmount(&[std::ffi::OsStr::new("umount"), dir.path().as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("not a tfmount mount"), "{err}");
    assert!(err.contains(&*dir.path().to_string_lossy()), "{err}");
    assert!(err.contains("not a mount point"), "{err}");
    let o = tfmount(&["umount", "/proc"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("/proc is a proc mount"), "{err}");
}

#[test]
fn foreground_prints_one_ready_line_once_mounted() {
    if !requires::fuse("list::foreground_prints_one_ready_line_once_mounted") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).expect("mkdir");
    let mp = std::fs::canonicalize(&mp).expect("canonical mount point");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("-f")
        .arg(fixture())
        .arg(&mp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tfmount");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // When the mount serves as the line arrives, a read of it succeeds.
            let ls = std::fs::read_dir(Path::new(&line.rsplit(" at ").next().unwrap_or("")))
                .map(|d| d.count())
                .unwrap_or(0);
            if tx.send((line, ls)).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30));
    let src = std::fs::canonicalize(fixture()).expect("canonical source");
    let want = format!("mounted {} at {}", src.display(), mp.display());
    let second = rx.recv_timeout(Duration::from_millis(500));
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg(&mp)
        .stderr(Stdio::null())
        .status();
    let code = wait_with_timeout(child, Duration::from_secs(10));
    let (line, entries) = first.expect("the ready line within 30 s");
    assert_eq!(line, want);
    assert!(entries > 0, "the mount serves when the line is printed");
    assert!(second.is_err(), "a second line: {second:?}");
    assert_eq!(code, Some(0));
}

#[test]
fn umount_of_a_busy_mount_names_z_which_detaches_it() {
    if !requires::fuse("list::umount_of_a_busy_mount_names_z_which_detaches_it") {
        return;
    }
    let mut m = Mount::start(&fixture(), &[]);
    let mp = std::fs::canonicalize(m.path()).expect("canonical mount point");
    let open = std::fs::File::open(mp.join("variables")).expect("open a directory of the mount");
    let o = tfmount(&[std::ffi::OsStr::new("umount"), mp.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("busy") && err.contains("-z"), "{err}");
    assert!(err.contains(&*mp.to_string_lossy()), "{err}");
    assert!(is_mounted(&mp), "a busy mount stays");
    let o = tfmount(&[
        std::ffi::OsStr::new("umount"),
        std::ffi::OsStr::new("-z"),
        mp.as_os_str(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!is_mounted(&mp), "detached by umount -z");
    drop(open);
    let child = m.child.take().expect("daemon");
    assert_eq!(
        wait_with_timeout(child, Duration::from_secs(10)),
        Some(0),
        "the daemon exits once the last open file is closed"
    );
}

#[test]
fn list_names_the_daemon_a_mount_helper_started() {
    if !requires::fuse("list::list_names_the_daemon_a_mount_helper_started") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).expect("mkdir");
    let mp = std::fs::canonicalize(&mp).expect("canonical mount point");
    let bin = env!("CARGO_BIN_EXE_tfmount");
    let helper = Command::new(bin)
        .arg("mount-helper")
        .arg(&mp)
        .arg("--")
        .arg(bin)
        .args(["-f", "-o", "nocrc"])
        .arg(fixture())
        .arg("/dev/fd/3")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tfmount mount-helper");
    let hpid = helper.id();
    within(Duration::from_secs(30), "the helper's mount", || {
        is_mounted(&mp)
    });
    let f = within_line(&mp);
    let code = {
        let o = tfmount(&[std::ffi::OsStr::new("umount"), mp.as_os_str()]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let helper_code = wait_with_timeout(helper, Duration::from_secs(10));
    assert_eq!(
        f[1], "tfmount",
        "mountinfo's source of a helper's mount: {f:?}"
    );
    let pid: u32 = f[2].parse().unwrap_or_else(|_| panic!("a pid: {f:?}"));
    assert_ne!(pid, hpid, "the daemon, not the helper: {f:?}");
    assert_eq!(f[3], "nocrc", "{f:?}");
    assert_eq!(code.0, Some(0), "{}", code.1);
    assert!(!is_mounted(&mp));
    assert_eq!(helper_code, Some(0), "the helper exits with its daemon's 0");
}

/// [`list_line`], retried for a second while the helper's child starts.
fn within_line(mp: &Path) -> Vec<String> {
    let mut f = list_line(mp);
    let t0 = std::time::Instant::now();
    while f.get(2).map(String::as_str) == Some("-") && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        f = list_line(mp);
    }
    f
}
