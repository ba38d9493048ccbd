//! `tfmount list`: the active tfmount mounts (from /proc/self/mountinfo) with the daemon serving
//! each (from /proc/*/cmdline); `tfmount umount [-z] MOUNTPOINT...`: unmount them and wait for
//! their daemons to exit.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cli::{ListArgs, UmountArgs};
use crate::model::lines::{closed, Lines, Val};
use crate::mount::mountinfo::{mounts, MountLine};

/// How long `umount` waits for a daemon to exit once its mount is gone.
const DAEMON_EXIT_WAIT: Duration = Duration::from_secs(10);

/// A running tfmount process that serves a mount: the mount form or `tfmount mount` on a
/// directory, or on `/dev/fd/N` as the child of a `tfmount mount-helper` (`mountpoint` is then
/// the helper's).
struct Daemon {
    pid: u32,
    ppid: u32,
    mountpoint: PathBuf,
    options: Vec<String>,
}

impl Daemon {
    /// The disk cache its object-storage reads go through (its `-o cache_dir`, else its
    /// environment's default), as `tfmount list` shows it: `none` when off, `-` when its
    /// environment cannot be read (another user's process).
    fn cache(&self) -> String {
        let Ok(environ) = std::fs::read(format!("/proc/{}/environ", self.pid)) else {
            return "-".into();
        };
        let env = crate::source::remote::config::Env::from_pairs(
            environ.split(|&b| b == 0).filter_map(|kv| {
                let (k, v) = std::str::from_utf8(kv).ok()?.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            }),
        );
        match crate::options::cache_dir_with(&self.options, &env) {
            Some(d) => d.to_string_lossy().into_owned(),
            None => "none".into(),
        }
    }
}

/// `path` made absolute against `cwd` and cleaned of `.` and `..`, its directory resolved
/// (symbolic links); the last component itself is not looked at (a mount point's root may hang).
fn resolve(cwd: &Path, path: &Path) -> PathBuf {
    let mut p = PathBuf::new();
    for c in cwd.join(path).components() {
        match c {
            Component::ParentDir => {
                p.pop();
            }
            Component::CurDir => {}
            c => p.push(c),
        }
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(p),
        _ => p,
    }
}

/// The parent pid and whether the process is a zombie, from /proc/PID/stat.
fn stat(pid: u32) -> Option<(u32, bool)> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; it ends at the last ')'.
    let end = s.iter().rposition(|&b| b == b')')?;
    let rest = String::from_utf8_lossy(s.get(end + 1..)?).into_owned();
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

/// The tfmount processes of this machine whose command line this user may read and that
/// mount a directory, their MOUNTPOINT resolved against their working directory.
fn daemons() -> Vec<Daemon> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Served through /dev/fd/N: (pid, ppid, options), matched with their helpers below.
    let mut by_fd = Vec::new();
    let mut helpers = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<OsString> = cmdline
            .split(|&b| b == 0)
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect();
        let argv = match argv.split_last() {
            Some((last, init)) if last.is_empty() => init.to_vec(),
            _ => argv,
        };
        let named_tfmount = argv
            .first()
            .and_then(|a| Path::new(a).file_name())
            .is_some_and(|n| n.as_bytes() == b"tfmount");
        if !named_tfmount {
            continue;
        }
        let args = match crate::cli::mount_line(&argv) {
            Some(args) => args,
            None => {
                if let Some(mp) = crate::cli::helper_line(&argv) {
                    helpers.push((pid, mp, e.path()));
                }
                continue;
            }
        };
        // `--nfs-serve`: a server with no mount of its own.
        let Some(mp) = args.mountpoint.clone() else {
            continue;
        };
        if mp.starts_with("/dev/fd") {
            if let Some((ppid, false)) = stat(pid) {
                by_fd.push((pid, ppid, args.options));
            }
            continue;
        }
        let mountpoint = if mp.is_absolute() {
            resolve(Path::new("/"), &mp)
        } else {
            // Another user's process: its working directory cannot be read.
            let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
                continue;
            };
            resolve(&cwd, &mp)
        };
        let Some((ppid, zombie)) = stat(pid) else {
            continue;
        };
        if zombie {
            continue;
        }
        out.push(Daemon {
            pid,
            ppid,
            mountpoint,
            options: args.options,
        });
    }
    // A helper's child serving /dev/fd/N serves the helper's mount point.
    for (hpid, mp, proc_dir) in helpers {
        let mountpoint = if mp.is_absolute() {
            resolve(Path::new("/"), &mp)
        } else {
            let Ok(cwd) = std::fs::read_link(proc_dir.join("cwd")) else {
                continue;
            };
            resolve(&cwd, &mp)
        };
        if let Some((pid, _, options)) = by_fd.iter().find(|(_, ppid, _)| *ppid == hpid) {
            out.push(Daemon {
                pid: *pid,
                ppid: hpid,
                mountpoint,
                options: options.clone(),
            });
        }
    }
    out
}

/// The daemon serving the mount at `mp`: a tfmount process naming it, not the watchdog it
/// forked (a child of a process naming the same mount point).
fn daemon_of<'d>(daemons: &'d [Daemon], mp: &Path) -> Option<&'d Daemon> {
    let named: Vec<&Daemon> = daemons.iter().filter(|d| d.mountpoint == mp).collect();
    named
        .iter()
        .find(|d| !named.iter().any(|p| p.pid == d.ppid))
        .copied()
}

/// Whether a mount of type `fstype` at `mp` is tfmount's.
fn is_tfmount(fstype: &str, mp: &Path, daemons: &[Daemon]) -> bool {
    fstype == "fuse.tfmount"
        || (matches!(fstype, "fuse" | "fuseblk" | "nfs") && daemon_of(daemons, mp).is_some())
}

/// The tfmount mounts visible now: the topmost mount at each mount point, when it is tfmount's.
fn tfmount_mounts(daemons: &[Daemon]) -> Vec<MountLine> {
    let all = mounts();
    let mut out: Vec<MountLine> = Vec::new();
    for (i, m) in all.iter().enumerate() {
        let covered = all[i + 1..].iter().any(|o| o.mountpoint == m.mountpoint);
        if !covered && is_tfmount(&m.fstype, &m.mountpoint, daemons) {
            out.push(m.clone());
        }
    }
    out
}

pub(crate) fn run_list(args: &ListArgs) -> i32 {
    let daemons = daemons();
    let found = tfmount_mounts(&daemons);
    if found.is_empty() {
        return 0;
    }
    let mut out = Lines::to_stdout(args.json);
    let mut write = || -> std::io::Result<()> {
        if !out.json() {
            let header = ["MOUNTPOINT", "SOURCE", "PID", "OPTIONS", "CACHE"];
            out.record("header", &header.map(|h| (h, Val::Bytes(h.as_bytes()))))?;
        }
        for m in &found {
            let d = daemon_of(&daemons, &m.mountpoint);
            let opts = d.map(|d| d.options.join(",")).unwrap_or_default();
            // Object storage only: a local source is read in place.
            let remote = crate::source::remote::url::is_remote(&String::from_utf8_lossy(&m.source));
            let cache = match d {
                Some(d) if remote => d.cache(),
                _ => "-".to_string(),
            };
            // In text an unknown pid, and no options, are `-`; in JSON null and "".
            let text_pid = d.map_or("-".to_string(), |d| d.pid.to_string());
            let (pid, options) = if out.json() {
                (
                    Val::Num(d.map(|d| u64::from(d.pid))),
                    Val::Bytes(opts.as_bytes()),
                )
            } else if opts.is_empty() {
                (Val::Bytes(text_pid.as_bytes()), Val::Bytes(b"-"))
            } else {
                (Val::Bytes(text_pid.as_bytes()), Val::Bytes(opts.as_bytes()))
            };
            out.record(
                "mount",
                &[
                    (
                        "mountpoint",
                        Val::Bytes(m.mountpoint.as_os_str().as_bytes()),
                    ),
                    ("source", Val::Bytes(&m.source)),
                    ("pid", pid),
                    ("options", options),
                    ("cache", Val::Bytes(cache.as_bytes())),
                ],
            )?;
        }
        out.flush()
    };
    match write() {
        Ok(()) => 0,
        Err(e) if closed(&e) => 0,
        Err(e) => {
            eprintln!("tfmount list: stdout: {e}");
            1
        }
    }
}

pub(crate) fn run_umount(args: &UmountArgs) -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut code = 0;
    for given in &args.mountpoints {
        let c = umount_one(given, &resolve(&cwd, given), args.lazy);
        if c != 0 {
            code = if code == 0 { c } else { code.max(c) };
        }
    }
    code
}

/// Unmounts one mount point (`mp`: `given` resolved); returns its exit status.
fn umount_one(given: &Path, mp: &Path, lazy: bool) -> i32 {
    let shown = given.display();
    let daemons = daemons();
    let all = mounts();
    let Some(m) = all.iter().rev().find(|m| m.mountpoint == mp) else {
        // Say which file system the path is on: the mount with the longest mount point above it.
        let on = all
            .iter()
            .rev()
            .filter(|m| mp.starts_with(&m.mountpoint))
            .max_by_key(|m| m.mountpoint.as_os_str().len())
            .map(|m| {
                format!(
                    " (it is on {}, mounted at {})",
                    m.fstype,
                    m.mountpoint.display()
                )
            })
            .unwrap_or_default();
        let what = if std::fs::symlink_metadata(mp).is_err() {
            format!("{shown}: no such file or directory")
        } else {
            format!("{shown} is not a mount point{on}")
        };
        eprintln!("tfmount umount: not a tfmount mount: {what}");
        return 4;
    };
    if !is_tfmount(&m.fstype, mp, &daemons) {
        eprintln!(
            "tfmount umount: not a tfmount mount: {shown} is a {} mount of {}",
            m.fstype,
            String::from_utf8_lossy(&m.source)
        );
        return 4;
    }
    let pid = daemon_of(&daemons, mp).map(|d| d.pid);
    if let Err(e) = crate::mount::unmount(mp, lazy) {
        if e.contains("busy") {
            eprintln!(
                "tfmount umount: {shown}: busy: files or directories are open on it (a shell's \
working directory counts); close them, or detach it now with tfmount umount -z {shown}"
            );
        } else {
            eprintln!("tfmount umount: {shown}: unmount failed: {e}");
        }
        return 1;
    }
    // Detached lazily, the mount's daemon serves the files still open on it and exits when the
    // last is closed: nothing to wait for now.
    let Some(pid) = pid.filter(|_| !lazy) else {
        return 0;
    };
    let t0 = Instant::now();
    loop {
        match stat(pid) {
            None | Some((_, true)) => return 0,
            Some(_) if t0.elapsed() >= DAEMON_EXIT_WAIT => {
                eprintln!(
                    "tfmount umount: {shown}: unmounted, but its daemon (pid {pid}) still runs \
after {} s",
                    DAEMON_EXIT_WAIT.as_secs()
                );
                return 1;
            }
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_is_lexical_then_canonical() {
        assert_eq!(
            resolve(Path::new("/"), Path::new("/proc/./self/../x")),
            PathBuf::from("/proc/x")
        );
        assert_eq!(
            resolve(Path::new("/proc"), Path::new("y")),
            PathBuf::from("/proc/y")
        );
    }
}
