//! Serving over NFS (the adapter in `src/nfs/`): `--nfs` (a server on 127.0.0.1 at a free port,
//! mounted with the system's NFS client, until that mount goes or a signal comes) and
//! `--nfs-serve [ADDR:]PORT` (a server only, in the foreground, until a signal). The daemon's
//! life around it (forking, the readiness handshake, the watchdog) is `mod.rs`'s, as for FUSE.

use crate::sync::lock;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{fail, Failure, EXIT_FUSE, EXIT_OK, EXIT_RUNTIME};
use crate::fs::Fs;
use crate::nfs::{self, MountEvent, Server};

/// How long the system's mount command may take.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the daemon looks whether its mount is still there (a client's unmount does not
/// always reach the server: UMNT is a courtesy).
const MOUNT_CHECK: Duration = Duration::from_secs(1);

enum Wake {
    Signal(i32),
    /// A client sent UMNT or UMNTALL: look whether the mount is gone.
    Unmounted,
}

/// Serves `fs` over NFS at `listen`, and mounts it on `mountpoint` if there is one.
pub(super) fn serve(
    fs: Arc<Fs>,
    mountpoint: Option<PathBuf>,
    listen: SocketAddr,
    fsname: &str,
    signals: libc::sigset_t,
    ready: Option<File>,
) -> Result<(), Failure> {
    let (tx, rx) = mpsc::channel::<Wake>();
    let events_tx = std::sync::Mutex::new(tx.clone());
    let events = Box::new(move |e: MountEvent| {
        log::info!("nfs: {e:?}");
        if let MountEvent::Unmounted(_) = e {
            let _ = lock(&events_tx).send(Wake::Unmounted);
        }
    });
    // A read waiting for the network holds a worker: as many as FUSE's read pool for remote
    // sources. A local source's reads are answered where its other calls are.
    let workers = if fs.is_remote() { 16 } else { 0 };
    let started = Server::start(fs.clone(), listen, workers, events).map_err(|e| {
        fail(
            EXIT_RUNTIME,
            format!(
                "cannot serve NFS on {listen}: {}",
                crate::error::io_words(&e)
            ),
        )
    });
    let server = match started {
        Ok(server) => server,
        Err(f) => return Err(said(f, ready)),
    };
    let addr = server.addr();
    log::info!("serving {fsname} over NFSv3 on {addr}");
    // A live directory's new checkpoints: NFS clients see them when their cached attributes
    // expire (actimeo); there is no kernel cache to tell.
    if let Err(e) = fs.follow(Box::new(|_| {})) {
        log::warn!("cannot follow the checkpoint directory ({e}); it is served as a snapshot");
    }
    let mounted = match &mountpoint {
        Some(mp) => match mount(addr, mp) {
            Ok(()) => Some(mp.clone()),
            Err(f) => return Err(said(f, ready)),
        },
        None => None,
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: `signals` is the set this thread's mask blocks.
            unsafe { libc::sigwait(&signals, &mut sig) };
            let _ = tx.send(Wake::Signal(sig));
        })
        .map_err(|e| fail(EXIT_RUNTIME, format!("thread: {e}")))?;
    if !super::say_ready(ready, mounted.as_deref(), fsname) {
        let mut out = std::io::stdout().lock();
        let example = Path::new(if cfg!(windows) { "Z:" } else { "/mnt/m" });
        let _ = writeln!(
            out,
            "serving {fsname} over NFSv3 on {addr} (read-only; Ctrl-C stops it)\nmount it with:\n  {}",
            nfs::shell_line(&nfs::mount_command(addr, example))
        );
        let _ = out.flush();
    }
    loop {
        match rx.recv_timeout(MOUNT_CHECK) {
            Ok(Wake::Signal(sig)) => {
                log::info!("signal {sig}: stopping");
                if let Some(mp) = &mounted {
                    if let Err(e) = super::unmount(mp, false) {
                        log::warn!(
                            "{}: {e}; detaching it lazily, files still open on it will fail",
                            mp.display()
                        );
                        let _ = super::unmount(mp, true);
                    }
                }
                break;
            }
            Ok(Wake::Unmounted) | Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(mp) = &mounted {
                    if !super::is_mount_point(mp) {
                        log::info!("{}: unmounted; stopping", mp.display());
                        break;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    server.stop();
    crate::source::remote::disk::flush_all(Duration::from_secs(30));
    if let Some(line) = fs.store_stats() {
        log::info!("{fsname}: {line}");
    }
    std::process::exit(EXIT_OK);
}

/// `f` told to the waiting parent too.
fn said(f: Failure, ready: Option<File>) -> Failure {
    if let Some(mut w) = ready {
        let _ = writeln!(w, "{}:{}", f.code, f.msg);
    }
    f
}

/// Runs the system's mount command for the server at `addr` on `mp`.
fn mount(addr: SocketAddr, mp: &Path) -> Result<(), Failure> {
    let argv = nfs::mount_command(addr, mp);
    let line = nfs::shell_line(&argv);
    log::info!("running: {line}");
    let spawned = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(
                EXIT_FUSE,
                format!(
                    "{}: cannot mount over NFS: {} not found (this system has no NFS client tools; on Debian: apt-get install nfs-common); tfmount --nfs-serve PORT SOURCE serves without mounting, for a client elsewhere",
                    mp.display(),
                    argv[0]
                ),
            ))
        }
        Err(e) => {
            return Err(fail(
                EXIT_FUSE,
                format!("{}: cannot run {line}: {e}", mp.display()),
            ))
        }
    };
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if t0.elapsed() < MOUNT_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(
                    EXIT_FUSE,
                    format!(
                        "{}: {line} did not finish in {} s",
                        mp.display(),
                        MOUNT_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
    };
    if status.success() {
        log::info!("mounted with: {line}");
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let why = err.trim();
    Err(fail(
        EXIT_FUSE,
        format!(
            "{}: mount over NFS failed: {line}: {}",
            mp.display(),
            if why.is_empty() {
                format!("{status}")
            } else {
                why.to_string()
            }
        ),
    ))
}
