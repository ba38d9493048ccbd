//! Read leases on the local files the daemon answers reads from by mapping
//! ([`super::mapped`]), so that no mapped reply ever carries bytes a writer put there.
//!
//! A mapped reply is checked (`fstat`: size and modification time) before it is made, and the
//! kernel copies the bytes after: a writer in between would go unseen. A read lease
//! (`fcntl(F_SETLEASE, F_RDLCK)`) closes that window: before any other process may open the file
//! for writing (or truncate it), the kernel signals the lease holder and holds that `open` until
//! the lease is let go (or `/proc/sys/fs/lease-break-time`, 45 s by default, has passed). The
//! daemon then stops making mapped replies of the file, waits for those under way to be written,
//! and lets go; from then on the file is read with `pread` and checked after each copy, which
//! catches the writer. A file is mapped only while the daemon holds its lease; where none can be
//! taken (the file is not the daemon user's and it lacks `CAP_LEASE`, another process has it open
//! for writing, a file system without leases such as NFS), it is read with `pread` from the start.
//!
//! The lease's signal (a real-time one carrying the descriptor) is caught by a handler that writes
//! the descriptor to a pipe; a thread of its own reads the pipe and lets go of the lease. Should
//! the kernel's queue of real-time signals overflow, it sends SIGIO, without a descriptor: every
//! lease is then let go. Only a process that called [`install`] (the daemon) takes leases and maps
//! files only under one; elsewhere (the subcommands' `diff --values`) files are mapped without.

use crate::sync::lock;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// `fcntl`'s command choosing the signal of a lease break (not in the `libc` crate).
const F_SETSIG: libc::c_int = 10;

/// How long a lease break waits for the mapped replies under way (each is a memory copy in the
/// kernel; nothing keeps a reply's bytes past it) before letting go regardless.
const DRAIN: Duration = Duration::from_secs(10);

/// The write end of the pipe the handler writes descriptors to (-1: not installed).
static PIPE: AtomicI32 = AtomicI32::new(-1);
/// A descriptor could not be written to the pipe, or SIGIO came: let go of every lease.
static ALL: AtomicBool = AtomicBool::new(false);
/// The real-time signal of lease breaks (0: not installed).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether this process maps files only under a lease ([`install`] was called).
static WANTED: AtomicBool = AtomicBool::new(false);

/// Leases held, by the descriptor they were taken on.
fn held() -> &'static Mutex<HashMap<RawFd, Weak<Lease>>> {
    static HELD: OnceLock<Mutex<HashMap<RawFd, Weak<Lease>>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The start of Linux's `siginfo_t` for a SIGPOLL-like signal (`si_band`, `si_fd`).
#[repr(C)]
struct SigPoll {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    band: libc::c_long,
    fd: libc::c_int,
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saved and restored around the write below.
    let saved = unsafe { *libc::__errno_location() };
    let fd = if sig == SIGNAL.load(Ordering::Relaxed) && !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo (SA_SIGINFO); for a lease break it is the
        // SIGPOLL layout, whose `si_fd` is the descriptor the lease was taken on.
        unsafe { (*(info as *const SigPoll)).fd }
    } else {
        -1
    };
    let w = PIPE.load(Ordering::Relaxed);
    let b = fd.to_ne_bytes();
    // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking and 4 bytes are written
    // whole or not at all (less than PIPE_BUF).
    if fd < 0 || unsafe { libc::write(w, b.as_ptr().cast(), b.len()) } != b.len() as isize {
        ALL.store(true, Ordering::SeqCst);
        let any = (-1i32).to_ne_bytes();
        // SAFETY: as above; if the pipe is full, the thread reading it sees `ALL` next.
        unsafe { libc::write(w, any.as_ptr().cast(), any.len()) };
    }
    // SAFETY: see above.
    unsafe { *libc::__errno_location() = saved };
}

/// Installs the handler of lease breaks and the thread that lets go of leases (once per
/// process; the daemon does, at start): from then on files are mapped only under a lease. If it
/// fails (the signals it needs already have handlers), no lease can be taken, and so nothing is
/// mapped.
pub(crate) fn install() -> io::Result<()> {
    WANTED.store(true, Ordering::SeqCst);
    install_handler()
}

/// The handler and the thread alone (leases can be taken), without making them the condition
/// of every mapping in the process ([`wanted`]): what unit tests of other modules see.
fn install_handler() -> io::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| install_once().map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn install_once() -> io::Result<()> {
    let sig = libc::SIGRTMIN() + 7;
    if sig > libc::SIGRTMAX() {
        return Err(io::Error::other("no real-time signal free"));
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: a new pipe into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned here; the read end is made
    // blocking for the thread below.
    let read_end = unsafe {
        let flags = libc::fcntl(fds[0], libc::F_GETFL);
        libc::fcntl(fds[0], libc::F_SETFL, flags & !libc::O_NONBLOCK);
        File::from_raw_fd(fds[0])
    };
    PIPE.store(fds[1], Ordering::SeqCst);
    SIGNAL.store(sig, Ordering::SeqCst);
    for s in [sig, libc::SIGIO] {
        // SAFETY: a zeroed sigaction is a valid start; the handler is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(s, &act, &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                // Someone else's: put it back, and take no leases (a break would reach them).
                libc::sigaction(s, &old, std::ptr::null_mut());
                SIGNAL.store(0, Ordering::SeqCst);
                return Err(io::Error::other(format!(
                    "signal {s} already has a handler"
                )));
            }
        }
    }
    // The thread takes no signal (it inherits the mask it is spawned with): the daemon's own
    // are waited for by its signal thread, and a lease break's reaches the handler elsewhere.
    // SAFETY: signal-mask calls on local sets, the caller's mask restored after the spawn.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let spawned = std::thread::Builder::new()
        .name("leases".into())
        .spawn(move || let_go_on_breaks(read_end));
    // SAFETY: as above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned?;
    Ok(())
}

/// The thread reading the pipe: lets go of each lease whose break was signalled.
fn let_go_on_breaks(mut pipe: File) {
    let mut b = [0u8; 4];
    while pipe.read_exact(&mut b).is_ok() {
        let fd = i32::from_ne_bytes(b);
        let all = ALL.swap(false, Ordering::SeqCst) || fd < 0;
        let leases: Vec<Arc<Lease>> = {
            let held = lock(held());
            if all {
                held.values().filter_map(Weak::upgrade).collect()
            } else {
                held.get(&fd).and_then(Weak::upgrade).into_iter().collect()
            }
        };
        for l in leases {
            l.let_go();
        }
    }
}

/// Whether files are mapped only under a lease in this process ([`install`] was called).
pub(crate) fn wanted() -> bool {
    WANTED.load(Ordering::SeqCst)
}

/// A read lease on a file, on a descriptor of its own (a duplicate of the file's).
pub(crate) struct Lease {
    file: File,
    path: PathBuf,
    /// Set when the lease is broken: no more mapped replies of the file.
    broken: AtomicBool,
    /// Mapped replies of the file being made.
    under_way: AtomicUsize,
}

impl Lease {
    /// Takes a read lease on `file`; fails if the kernel refuses one (see the module docs) or
    /// the handler of lease breaks is not installed.
    pub(crate) fn take(file: &File, path: &Path) -> io::Result<Arc<Lease>> {
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig == 0 {
            return Err(io::Error::other("no handler of lease breaks"));
        }
        let file = file.try_clone()?;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor owned by `file`.
        unsafe {
            if libc::fcntl(fd, F_SETSIG, sig) != 0
                || libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let lease = Arc::new(Lease {
            file,
            path: path.to_path_buf(),
            broken: AtomicBool::new(false),
            under_way: AtomicUsize::new(0),
        });
        lock(held()).insert(fd, Arc::downgrade(&lease));
        Ok(lease)
    }

    /// Marks a mapped reply under way; `None` once the lease is broken (read with `pread`).
    pub(crate) fn enter(self: &Arc<Self>) -> Option<UnderWay> {
        self.under_way.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            self.under_way.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(UnderWay(self.clone()))
    }

    /// Stops mapped replies, waits for those under way, and lets go of the lease (the writer's
    /// `open` then proceeds).
    fn let_go(&self) {
        if self.broken.swap(true, Ordering::SeqCst) {
            return;
        }
        let start = Instant::now();
        while self.under_way.load(Ordering::SeqCst) > 0 {
            if start.elapsed() > DRAIN {
                log::warn!(
                    "{}: {} mapped replies still under way after {:?}; letting go of its lease regardless",
                    self.path.display(),
                    self.under_way.load(Ordering::SeqCst),
                    DRAIN
                );
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        // Logged before the writer is let in (a test reads it once its `open` returns).
        log::debug!(
            "{}: opened for writing by another process: read with pread and checked after each copy from now on",
            self.path.display()
        );
        // SAFETY: fcntl on the descriptor this lease owns.
        unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let fd = self.file.as_raw_fd();
        let mut held = lock(held());
        if held.get(&fd).is_some_and(|w| w.strong_count() == 0) {
            held.remove(&fd);
        }
    }
}

/// A mapped reply under way (see [`Lease::enter`]); ends when dropped.
pub(crate) struct UnderWay(Arc<Lease>);

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.under_way.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::sync::mpsc;

    /// Whether this process holds a lease on inode `ino` (`/proc/locks`).
    fn leased(ino: u64) -> bool {
        let me = std::process::id().to_string();
        std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"LEASE")
                    && f.get(4) == Some(&me.as_str())
                    && f.get(5).and_then(|d| d.rsplit(':').next()) == Some(&ino.to_string())
            })
    }

    /// Opens `path` for writing on another thread; the receiver hears when the `open` returned.
    fn open_for_writing(path: &Path) -> mpsc::Receiver<io::Result<File>> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(File::options().write(true).open(&path));
        });
        rx
    }

    /// The lease machinery end to end, in this process (a lease conflicts with any `open` for
    /// writing, the holder's own included): a writer's `open` waits while a mapped reply is
    /// under way and returns once it ends; no reply starts after the break; a SIGIO (the
    /// kernel's signal when its queue of real-time signals overflowed) lets go of every lease.
    #[test]
    fn a_writer_waits_for_the_replies_under_way_and_sigio_lets_go_of_all() {
        install_handler().expect("install");
        let d = tempfile::tempdir().expect("tempdir");
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, [1u8; 4096]).expect("a");
        std::fs::write(&b, [2u8; 4096]).expect("b");
        let (fa, fb) = (File::open(&a).expect("a"), File::open(&b).expect("b"));
        let Ok(la) = Lease::take(&fa, &a) else {
            // A file system without leases here (the daemon then reads with pread).
            eprintln!("no lease on {}: skipped", a.display());
            return;
        };
        let lb = Lease::take(&fb, &b).expect("lease on b");
        let (ia, ib) = (
            fa.metadata().expect("a").ino(),
            fb.metadata().expect("b").ino(),
        );
        assert!(leased(ia) && leased(ib));

        let reply = la.enter().expect("not broken yet");
        let opened = open_for_writing(&a);
        // The break is signalled at once; the `open` is held while the reply is under way.
        while !la.broken.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(la.enter().is_none(), "a reply started after the break");
        assert!(
            opened.recv_timeout(Duration::from_millis(200)).is_err(),
            "the writer got in while a mapped reply was under way"
        );
        drop(reply);
        opened
            .recv_timeout(Duration::from_secs(30))
            .expect("the writer's open returned")
            .expect("opened for writing");
        assert!(!leased(ia) && leased(ib));

        // SIGIO: every lease let go.
        // SAFETY: raising a signal whose handler `install` set.
        unsafe { libc::raise(libc::SIGIO) };
        let t0 = Instant::now();
        while !lb.broken.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(lb.enter().is_none(), "SIGIO let go of b");
        assert!(!leased(ib));
        open_for_writing(&b)
            .recv_timeout(Duration::from_secs(30))
            .expect("open b returned")
            .expect("opened b for writing");
    }
}
