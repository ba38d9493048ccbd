//! The mount point `/dev/fd/N`: a `/dev/fuse` descriptor another process opened and mounted
//! (libfuse's convention, as `fusermount3`, mountpoint-s3 and gcsfuse's CSI driver use it), so
//! that a daemon without the privilege to mount can serve it. Here: recognising the form, and
//! checking that descriptor N is an open, read-write descriptor of `/dev/fuse`.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{fail, Failure, EXIT_USAGE};

/// `/dev/fuse`'s device number (misc major 10, minor 229), for where `/dev/fuse` itself is not
/// visible (a container handed only the descriptor).
const FUSE_DEV: (u32, u32) = (10, 229);

/// The descriptor number N of a mount point written `/dev/fd/N` (N decimal), `None` for any
/// other mount point. `Some(Err)` when the digits do not make a descriptor number.
pub(crate) fn parse(mountpoint: &Path) -> Option<Result<i32, Failure>> {
    let digits = mountpoint
        .as_os_str()
        .as_bytes()
        .strip_prefix(b"/dev/fd/")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<i32>().ok())
            .ok_or_else(|| {
                fail(
                    EXIT_USAGE,
                    format!(
                        "{}: not a descriptor number (too large)",
                        mountpoint.display()
                    ),
                )
            }),
    )
}

/// Descriptor `fd`, checked to be an open, read-write descriptor of `/dev/fuse`, taken over
/// (closed on exec from now on). `shown` is the mount point as given, for messages.
pub(crate) fn take(fd: i32, shown: &Path) -> Result<OwnedFd, Failure> {
    let bad = |what: String| fail(EXIT_USAGE, format!("{}: {what}", shown.display()));
    // SAFETY: fstat only writes the struct; an unopened number fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(bad(if e.raw_os_error() == Some(libc::EBADF) {
            format!(
                "descriptor {fd} is not open in this process (the mounter must pass its /dev/fuse descriptor on, without close-on-exec: tfmount mount-helper does)"
            )
        } else {
            format!("descriptor {fd}: {e}")
        }));
    }
    let fuse = fuse_rdev();
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFCHR || st.st_rdev != fuse {
        let what = match kind {
            libc::S_IFREG => "a regular file".to_string(),
            libc::S_IFDIR => "a directory".to_string(),
            libc::S_IFIFO => "a pipe".to_string(),
            libc::S_IFSOCK => "a socket".to_string(),
            libc::S_IFLNK => "a symbolic link".to_string(),
            libc::S_IFBLK => "a block device".to_string(),
            libc::S_IFCHR => format!(
                "the character device {}:{}",
                libc::major(st.st_rdev),
                libc::minor(st.st_rdev)
            ),
            _ => "not a device".to_string(),
        };
        return Err(bad(format!(
            "descriptor {fd} is {what}, not /dev/fuse (character device {}:{}): the mount point /dev/fd/N names a /dev/fuse descriptor that another process opened and mounted",
            libc::major(fuse),
            libc::minor(fuse)
        )));
    }
    // SAFETY: fcntl on a descriptor just checked to be open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
        return Err(bad(format!(
            "descriptor {fd} of /dev/fuse is not open for reading and writing (open it read-write: exec {fd}<>/dev/fuse)"
        )));
    }
    // Descriptors 0 to 2 become /dev/null in the background: serve a copy above them. Either
    // way it is not passed on to anything this process starts.
    // SAFETY: fcntl on a descriptor just checked to be open.
    let fd = if fd < 3 {
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if copy < 0 {
            let e = std::io::Error::last_os_error();
            return Err(bad(format!("descriptor {fd}: cannot copy it: {e}")));
        }
        copy
    } else {
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        fd
    };
    // SAFETY: the descriptor is open, and from here on only the returned value owns it: the
    // mount point names it once, and it is taken once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/dev/fuse`'s device number: as `/dev/fuse` says, else the kernel's fixed one.
fn fuse_rdev() -> libc::dev_t {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/dev/fuse")
        .ok()
        .map(|m| m.rdev() as libc::dev_t)
        .filter(|&r| r != 0)
        .unwrap_or_else(|| libc::makedev(FUSE_DEV.0, FUSE_DEV.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_fd_form() {
        let n = |s: &str| parse(Path::new(s)).map(|r| r.ok());
        assert_eq!(n("/dev/fd/3"), Some(Some(3)));
        assert_eq!(n("/dev/fd/17"), Some(Some(17)));
        assert_eq!(n("/dev/fd/99999999999"), Some(None));
        assert_eq!(n("/dev/fd/"), None);
        assert_eq!(n("/dev/fd/3a"), None);
        assert_eq!(n("/dev/fd/-3"), None);
        assert_eq!(n("/mnt/m"), None);
        assert_eq!(n("dev/fd/3"), None);
    }

    #[test]
    fn not_fuse_is_refused_in_words() {
        use std::os::fd::IntoRawFd;
        let f = std::fs::File::open("Cargo.toml").expect("Cargo.toml");
        let fd = f.into_raw_fd();
        let e = take(fd, Path::new("/dev/fd/x")).expect_err("a regular file");
        assert_eq!(e.code, EXIT_USAGE);
        assert!(
            e.msg.contains("is a regular file, not /dev/fuse"),
            "{}",
            e.msg
        );
        // SAFETY: still ours: `take` refused it.
        unsafe { libc::close(fd) };
        let e = take(1 << 20, Path::new("/dev/fd/1048576")).expect_err("unopened");
        assert!(e.msg.contains("is not open"), "{}", e.msg);
    }
}
