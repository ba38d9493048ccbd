//! Watching a local directory for changes (inotify): one watch descriptor per watched
//! directory, closed when the [`DirWatch`] is dropped. Waits are bounded: nothing blocks
//! forever. Where there is no inotify (macOS), every wait is a change: the directory is looked
//! at again once per wait (the live directory's poll, a second).

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Changes that matter in a checkpoint directory: files written and closed, renamed in or out,
/// created, deleted; and the directory itself going away.
#[cfg(target_os = "linux")]
const MASK: u32 = libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

#[cfg(target_os = "linux")]
pub(crate) struct DirWatch {
    fd: OwnedFd,
}

#[cfg(target_os = "linux")]
impl DirWatch {
    pub(crate) fn new(dir: &Path) -> io::Result<DirWatch> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `c` is a valid NUL-terminated path; the result is checked.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(DirWatch { fd })
    }

    /// Waits at most `timeout` for changes; `Ok(true)` if there were any (all pending events
    /// are consumed).
    pub(crate) fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(false);
        }
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: `buf` is writable for its length.
            let r = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if r > 0 {
                any = true;
                continue;
            }
            if r == 0 {
                return Ok(any);
            }
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(any),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
    }
}

/// A directory looked at again after each wait, where there is no inotify.
#[cfg(not(target_os = "linux"))]
pub(crate) struct DirWatch;

#[cfg(not(target_os = "linux"))]
impl DirWatch {
    /// Fails where `dir` is not a directory, as inotify would.
    pub(crate) fn new(dir: &Path) -> io::Result<DirWatch> {
        if std::fs::metadata(dir)?.is_dir() {
            Ok(DirWatch)
        } else {
            Err(io::Error::from_raw_os_error(libc::ENOTDIR))
        }
    }

    /// Sleeps `timeout`; `Ok(true)`: whatever changed is for the caller to find.
    pub(crate) fn wait(&self, timeout: Duration) -> io::Result<bool> {
        std::thread::sleep(timeout);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_file_written_and_times_out_otherwise() {
        let d = tempfile::tempdir().expect("tmp");
        let w = DirWatch::new(d.path()).expect("watch");
        assert!(!w.wait(Duration::from_millis(10)).expect("wait"));
        std::fs::write(d.path().join("checkpoint"), "x").expect("write");
        assert!(w.wait(Duration::from_secs(2)).expect("wait"));
        assert!(!w.wait(Duration::from_millis(10)).expect("drained"));
    }
}
