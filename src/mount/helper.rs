//! `tfmount mount-helper`: the privileged half of a mount whose daemon runs without the
//! privilege to mount (a container without CAP_SYS_ADMIN). It opens `/dev/fuse`, mounts it on
//! MOUNTPOINT (mount(2): `fuse.tfmount`, read-only, nosuid, nodev, `default_permissions`), then
//! runs COMMAND with the descriptor as number `--fd` (default 3), which serves it as
//! `tfmount ... SOURCE /dev/fd/3` after dropping privileges (`setpriv`, `capsh`).
//!
//! While COMMAND runs the helper stays: a signal (SIGTERM, SIGINT, SIGHUP) unmounts MOUNTPOINT,
//! which ends the daemon's session (and is passed on to COMMAND if it still runs 2 s later:
//! a job that started the daemon in the background); when COMMAND fails (a status other than 0, or killed) the
//! helper removes the mount it made, so no dead mount is left; it exits with COMMAND's status.
//! COMMAND exiting 0 leaves the mount: a daemonizing `tfmount` returns once it serves.

#[cfg(target_os = "linux")]
use std::ffi::CString;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
#[cfg(target_os = "linux")]
use std::os::unix::process::{CommandExt, ExitStatusExt};
#[cfg(target_os = "linux")]
use std::path::Path;

#[cfg(target_os = "linux")]
use super::{block_signals, check_mountpoint, is_mount_point, EXIT_MOUNTPOINT, EXIT_RUNTIME};
use super::{fail, Failure, EXIT_FUSE, EXIT_USAGE};
use crate::cli::HelperArgs;
#[cfg(target_os = "linux")]
use crate::error::io_words;

/// The environment variable COMMAND finds the descriptor's number in.
#[cfg(target_os = "linux")]
pub(crate) const FD_ENV: &str = "TFMOUNT_FUSE_FD";

/// How long after a signal has unmounted MOUNTPOINT a COMMAND still running gets the signal.
#[cfg(target_os = "linux")]
const FORWARD_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// The exit status of a command that could not be started (as shells say it).
#[cfg(target_os = "linux")]
const EXIT_NOT_STARTED: i32 = 127;

/// The mount options the helper accepts.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Opts {
    allow_other: bool,
    nonempty: bool,
}

pub(crate) fn parse_opts(lists: &[String]) -> Result<Opts, Failure> {
    let mut o = Opts::default();
    for item in lists.iter().flat_map(|l| l.split(',')).map(str::trim) {
        match item {
            "" => {}
            "allow_other" => o.allow_other = true,
            "nonempty" => o.nonempty = true,
            _ => {
                return Err(fail(
                    EXIT_USAGE,
                    format!(
                        "mount-helper: unknown mount option {item:?} (it takes allow_other and nonempty; the others are tfmount's, given to COMMAND)"
                    ),
                ))
            }
        }
    }
    Ok(o)
}

/// mount(2)'s data for a FUSE mount of descriptor `fd`.
#[cfg(target_os = "linux")]
fn mount_data(fd: i32, uid: u32, gid: u32, allow_other: bool) -> String {
    let mut d = format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid},default_permissions");
    if allow_other {
        d.push_str(",allow_other");
    }
    d
}

/// `tfmount mount-helper` where there is no FUSE: says so, naming the ways on.
#[cfg(not(target_os = "linux"))]
pub(crate) fn run(_a: &HelperArgs) -> i32 {
    eprintln!("tfmount mount-helper: {}", super::NO_FUSE);
    EXIT_FUSE
}

/// Runs `tfmount mount-helper`; returns the exit status.
#[cfg(target_os = "linux")]
pub(crate) fn run(a: &HelperArgs) -> i32 {
    match run_inner(a) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("tfmount mount-helper: {}", f.msg);
            f.code
        }
    }
}

#[cfg(target_os = "linux")]
fn run_inner(a: &HelperArgs) -> Result<i32, Failure> {
    let opts = parse_opts(&a.options)?;
    let shown = a.mountpoint.display().to_string();
    let mp = check_mountpoint(&a.mountpoint, opts.nonempty)?;
    let Some((program, args)) = a.command.split_first() else {
        return Err(fail(
            EXIT_USAGE,
            "no COMMAND after --: the command that serves the mount (tfmount -f SOURCE /dev/fd/3)",
        ));
    };
    let fuse = open_fuse()?;
    // SAFETY: getuid(2) and getgid(2) cannot fail.
    let uid = a.uid.unwrap_or_else(|| unsafe { libc::getuid() });
    let gid = a.gid.unwrap_or_else(|| unsafe { libc::getgid() });
    let data = mount_data(fuse.as_raw_fd(), uid, gid, opts.allow_other);
    mount(&mp, &data).map_err(|(code, why)| fail(code, format!("{shown}: mount failed: {why}")))?;
    super::raise_readahead(&mp);
    // From here on a failure removes the mount.
    let undo = |f: Failure| {
        detach(&mp);
        f
    };
    let signals = block_signals();
    // The descriptor is put at its number for COMMAND here, still closed on exec (so that
    // nothing the spawn opens takes that number); the child only clears close-on-exec.
    let fuse = at_number(fuse, a.fd).map_err(undo)?;
    let target = fuse.as_raw_fd();
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env(FD_ENV, target.to_string());
    // SAFETY: between fork and exec only async-signal-safe calls: fcntl, sigprocmask.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(target, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = undo(fail(EXIT_RUNTIME, ""));
            return Err(fail(
                EXIT_NOT_STARTED,
                format!(
                    "{}: cannot run it: {}; {shown} unmounted",
                    Path::new(program).display(),
                    io_words(&e)
                ),
            ));
        }
    };
    // COMMAND holds the descriptor now: once it is gone, so is the session.
    drop(fuse);
    let on_signal = mp.clone();
    let pid = child.id() as libc::pid_t;
    let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reaped = exited.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: waits on a set the thread's mask blocks.
            unsafe { libc::sigwait(&signals, &mut sig) };
            // Unmounting ends the daemon's session: `tfmount -f` exits 0, and so does the
            // wait below. A COMMAND still running after FORWARD_AFTER (a job that started the
            // daemon in the background) gets the signal itself.
            if is_mount_point(&on_signal) && unmount(&on_signal, 0).is_err() {
                detach(&on_signal);
            }
            let t0 = std::time::Instant::now();
            while t0.elapsed() < FORWARD_AFTER {
                if reaped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if !reaped.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: kill(2) of our child, not yet reaped (the flag is set once it is).
                unsafe { libc::kill(pid, sig) };
            }
        })
        .map_err(|e| undo(fail(EXIT_RUNTIME, format!("thread: {e}"))))?;
    let status = child.wait();
    exited.store(true, std::sync::atomic::Ordering::SeqCst);
    let status =
        status.map_err(|e| undo(fail(EXIT_RUNTIME, format!("waiting for COMMAND: {e}"))))?;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if code != 0 && is_mount_point(&mp) {
        detach(&mp);
        eprintln!(
            "tfmount mount-helper: {}: {}; {shown} unmounted",
            Path::new(program).display(),
            match status.signal() {
                Some(s) => format!("killed by signal {s}"),
                None => format!("exited with status {code}"),
            }
        );
    }
    Ok(code)
}

/// `/dev/fuse`, opened read-write (closed on exec: COMMAND gets its own copy by number).
#[cfg(target_os = "linux")]
fn open_fuse() -> Result<OwnedFd, Failure> {
    // SAFETY: a NUL-terminated literal.
    let fd = unsafe {
        libc::open(
            c"/dev/fuse".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) => "/dev/fuse is missing (load the module with `modprobe fuse`, or run the container with --device /dev/fuse)".to_string(),
            Some(libc::EACCES) | Some(libc::EPERM) => "cannot open /dev/fuse: permission denied (run the helper as root, in a container with --device /dev/fuse)".to_string(),
            _ => format!("cannot open /dev/fuse: {}", io_words(&e)),
        };
        return Err(fail(EXIT_FUSE, why));
    }
    // SAFETY: open(2) just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fd` moved to descriptor number `n` (close-on-exec), which must not be in use.
#[cfg(target_os = "linux")]
fn at_number(fd: OwnedFd, n: i32) -> Result<OwnedFd, Failure> {
    if fd.as_raw_fd() == n {
        return Ok(fd);
    }
    // SAFETY: F_GETFD only asks whether `n` is open.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0 {
        return Err(fail(
            EXIT_USAGE,
            format!(
                "--fd {n}: descriptor {n} is already open in the helper; choose another number"
            ),
        ));
    }
    // SAFETY: `fd` is open and `n` is free; dup3 makes `n` a copy owned by the result.
    let r = unsafe { libc::dup3(fd.as_raw_fd(), n, libc::O_CLOEXEC) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(fail(EXIT_RUNTIME, format!("--fd {n}: {}", io_words(&e))));
    }
    // SAFETY: dup3 just made descriptor `r`.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// mount(2) of a FUSE file system on `mp` with `data`; the failure as an exit code and words.
#[cfg(target_os = "linux")]
fn mount(mp: &Path, data: &str) -> Result<(), (i32, String)> {
    let target = CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| (EXIT_MOUNTPOINT, "the path contains a NUL byte".to_string()))?;
    let data = CString::new(data).map_err(|_| (EXIT_USAGE, "NUL in the options".to_string()))?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            c"tfmount".as_ptr(),
            target.as_ptr(),
            c"fuse.tfmount".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::EPERM) => (
            EXIT_FUSE,
            "permission denied: mounting needs CAP_SYS_ADMIN (run the helper privileged: docker run --cap-add SYS_ADMIN --device /dev/fuse, a Kubernetes container with the SYS_ADMIN capability, or root of a user namespace that owns this mount namespace: unshare -Urm); a security module (AppArmor: --security-opt apparmor=unconfined) may also forbid it".to_string(),
        ),
        Some(libc::ENODEV) => (
            EXIT_FUSE,
            "the kernel has no FUSE file system (load the module: modprobe fuse)".to_string(),
        ),
        _ => (EXIT_MOUNTPOINT, io_words(&e)),
    })
}

/// umount2(2) of `mp` with `flags`.
#[cfg(target_os = "linux")]
fn unmount(mp: &Path, flags: i32) -> std::io::Result<()> {
    let c = CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Removes the mount on `mp` lazily (files still open on it fail with ENOTCONN).
#[cfg(target_os = "linux")]
fn detach(mp: &Path) {
    if let Err(e) = unmount(mp, libc::MNT_DETACH) {
        eprintln!(
            "tfmount mount-helper: {}: cannot unmount: {}",
            mp.display(),
            io_words(&e)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_mount_data() {
        assert_eq!(parse_opts(&[]).ok(), Some(Opts::default()));
        let o = parse_opts(&["allow_other,nonempty".into()]).ok();
        assert_eq!(
            o,
            Some(Opts {
                allow_other: true,
                nonempty: true
            })
        );
        let e = parse_opts(&["nocrc".into()]).expect_err("not a helper option");
        assert_eq!(e.code, EXIT_USAGE);
        assert!(e.msg.contains("\"nocrc\""), "{}", e.msg);
        assert_eq!(
            mount_data(5, 1000, 100, true),
            "fd=5,rootmode=40000,user_id=1000,group_id=100,default_permissions,allow_other"
        );
    }
}
